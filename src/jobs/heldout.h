// Held-out evaluation of a drafter during training: the prompts of a file decoded with speculation
// (full blocks, one prompt at a time, prompt i with seed seed + i), exactly as `dspark eval` decodes
// them at concurrency 1, and the τ and acceptance by position it reports.
#ifndef DS_JOBS_HELDOUT_H
#define DS_JOBS_HELDOUT_H

#include <stdint.h>

#include "dspark_jobs.h" // ds_heldout_result

typedef struct ds_heldout ds_heldout; // tokenized prompts

// Load and tokenize a prompt file (ds_prompts_load_chat's formats, ds_gen_prompts_tokenize's check:
// conversations are rendered with the target's chat format; BOS added; every prompt plus max_tokens
// must fit the target's context). Errors name "file:line".
ds_status ds_heldout_load(const char *path, const ds_model *target, int max_tokens, ds_heldout **out);
void ds_heldout_free(ds_heldout *h);
int ds_heldout_count(const ds_heldout *h);
// Decode every prompt with `drafter` at temperature `temp` (no other filter; coupled verification),
// up to max_tokens each.
ds_status ds_heldout_eval(const ds_heldout *h, const ds_model *target, const ds_drafter *drafter, float temp,
                          uint64_t seed, int max_tokens, ds_heldout_result *r);

#endif
