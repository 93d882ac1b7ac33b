// Test hooks of the engine (include/dspark/speculate.h): internal, for tests/ only.
#ifndef DS_SPECULATE_ENGINE_HOOKS_H
#define DS_SPECULATE_ENGINE_HOOKS_H

#include "dspark/speculate.h"

// From the next step on, the auto schedule's drafting gate decides `depth` (at most the engine's
// draft length; 0 = draft nothing) instead of judging costs; -1 hands the decision back to it.
void ds_engine_force_gate(ds_engine *e, int depth);

#endif
