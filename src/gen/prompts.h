// Prompt files, the one reader: datagen, eval, calibrate and held-out evaluation read the same
// formats, and each prompt is tokenized as a generation request tokenizes text (BOS first) and
// checked to leave room for the new tokens in the target's context, in one place.
#ifndef DS_GEN_PROMPTS_H
#define DS_GEN_PROMPTS_H

#include <stdint.h>

#include "dspark/gen.h"

// Prompt files: one prompt per line, either plain text (the whole line, which must be valid
// UTF-8) or a JSON object with a "prompt" string field (a line whose first non-blank character is
// '{'), detected line by line. Blank lines are skipped; a trailing "\r" is dropped. Errors name
// "file:line".
//
// ds_prompts_load_chat also reads the common chat / instruction JSONL shapes, each a conversation
// that the target's chat format renders (ds_prompt_text):
//   {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}   (OpenAI)
//   {"conversations": [{"from": "system"|"human"|"gpt", "value": "..."}, ...]}     (ShareGPT; "user"
//                                                          and "assistant" are taken for from too)
//   {"instruction": "...", "input": "..."}                 (Alpaca: one user turn, input optional)
// Trailing assistant turns (the reference answer) are dropped: the target writes its own. What is
// left must end with a user turn.

typedef struct {
    int n;
    char **text;  // (n) NUL-terminated UTF-8; a conversation: its turns as a JSON array of
                  // {"role", "content"} objects
    int *line;    // (n) 1-based line numbers, for messages
    unsigned char *chat; // (n) 1: text is a conversation
    char *path;
} ds_prompt_set;

// An empty file (no prompt at all) is an error. ds_prompts_load refuses conversations (naming the
// line): its callers tokenize the text as it is.
ds_status ds_prompts_load(const char *path, ds_prompt_set **out);
ds_status ds_prompts_load_chat(const char *path, ds_prompt_set **out);
void ds_prompts_free(ds_prompt_set *p);
// Prompt i as the text to tokenize (with BOS, as ds_tokenize(add_bos = 1)): a copy of a plain
// prompt, or a conversation rendered by the tokenizer's chat format with the opening of the
// assistant turn (ds_chat_render). *out is malloc'ed.
ds_status ds_prompt_text(const ds_prompt_set *p, int i, const ds_tokenizer *t, char **out);

// ---------------------------------------------------------------------------------------------
// A prompt set tokenized for generation

typedef struct {
    int n;
    int32_t **ids; // (n) prompt i's tokens
    int *len;      // (n)
} ds_gen_prompts;

// Every prompt of ps as the ids a text request gets (a conversation rendered first, ds_prompt_text).
// Fails naming the file (m has no tokenizer) or the file and line of the first prompt that does not
// render, tokenize or fit (prompt + max_new tokens beyond m's context): the one prompt check.
ds_status ds_gen_prompts_tokenize(const ds_model *m, const ds_prompt_set *ps, int max_new, ds_gen_prompts *out);
void ds_gen_prompts_free(ds_gen_prompts *p);

#endif
