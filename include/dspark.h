// dspark: lossless speculative decoding with DSpark drafters, in C.
//
// Public API. All handles are opaque. Every function that can fail returns a ds_status and leaves
// a one-line message (naming the file and the problem) that ds_last_error() returns; library code
// never prints.
//
// Central objects (see docs/architecture.md):
//   ds_model      a loaded target: mapped weights, config, tokenizer. Immutable after load and
//                 shareable across threads and sequences.
//   ds_kv         one sequence's target KV cache (mutable; append rows, truncate to roll back).
//   ds_workspace  scratch buffers for forward passes, sized once and reused (no per-token malloc).
//   ds_tokenizer  owned by the model; encode text, decode tokens as a valid UTF-8 stream.
#ifndef DSPARK_H
#define DSPARK_H

// The declarations live in one header per layer (include/dspark/, each including only the headers
// of the layers below its own, docs/architecture.md "The public API"); this header composes them.
#include "dspark/base.h"
#include "dspark/kernels.h"
#include "dspark/io.h"
#include "dspark/tokenizer.h"
#include "dspark/model.h"
#include "dspark/sample.h"
#include "dspark/draft.h"
#include "dspark/sched.h"
#include "dspark/speculate.h"
#include "dspark/gen.h"

#endif
