// A prompt file's prompts (train/data.h ds_prompt_set) tokenized as generation requests tokenize
// text (BOS first), each checked to leave room for the new tokens in the target's context: what
// eval and calibrate feed to the runner.
#ifndef DS_GEN_PROMPTS_H
#define DS_GEN_PROMPTS_H

#include <stdint.h>

#include "dspark.h"
#include "train/data.h"

typedef struct {
    int n;
    int32_t **ids; // (n) prompt i's tokens
    int *len;      // (n)
} ds_gen_prompts;

// Fails naming the file and line of the first prompt that does not tokenize or does not fit
// (prompt + max_new tokens beyond m's context).
ds_status ds_gen_prompts_tokenize(const ds_model *m, const ds_prompt_set *ps, int max_new, ds_gen_prompts *out);
void ds_gen_prompts_free(ds_gen_prompts *p);

#endif
