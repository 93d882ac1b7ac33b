// Building tokenizers, inside the library: a SentencePiece-style ("llama") one from plain arrays
// (the GGUF loader passes tokenizer.ggml.* metadata; encoding follows llama.cpp's SPM algorithm
// exactly), a tokenizer.json one, or a GGUF file's. The public encode/decode functions are
// declared in dspark.h.
#ifndef DS_TOKENIZER_TOKENIZER_H
#define DS_TOKENIZER_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "dspark/tokenizer.h"
#include "io/gguf.h"

// Token types as GGUF's tokenizer.ggml.token_type stores them.
enum {
    DS_TOKTYPE_NORMAL = 1,
    DS_TOKTYPE_UNKNOWN = 2,
    DS_TOKTYPE_CONTROL = 3,
    DS_TOKTYPE_USER_DEFINED = 4,
    DS_TOKTYPE_UNUSED = 5,
    DS_TOKTYPE_BYTE = 6,
};

// Copies everything it is given. `types` may be NULL (all normal, "<0xXX>" pieces taken as bytes).
// `bos`, `eos`, `unk` may be -1. Fails with a clear message on duplicate or invalid input.
ds_status ds_tokenizer_init_spm(int n_vocab, const char *const *pieces, const size_t *piece_lens,
                                const float *scores, const int32_t *types, int bos, int eos, int unk,
                                int add_space_prefix, ds_tokenizer **out);
void ds_tokenizer_free(ds_tokenizer *t);

// A Hugging Face tokenizer.json (BPE) with its tokenizer_config.json (NULL: none). hf_load.c.
ds_status ds_tokenizer_load_hf(const char *json_path, const char *config_path, ds_tokenizer **out);
// The same from parsed trees (cfg may be NULL); `json_path` names the source in messages.
struct cJSON;
ds_status ds_tokenizer_from_json(const char *json_path, const struct cJSON *root, const struct cJSON *cfg,
                                 ds_tokenizer **out);

// The tokenizer of an open GGUF file (tokenizer.ggml.*): model "llama" as SentencePiece, "gpt2"
// as byte-level BPE, "gemma4" as Gemma 4's BPE. Fails naming the file when there is none, another
// kind, or bad metadata. load.c.
ds_status ds_tokenizer_load_gguf(const ds_gguf *g, ds_tokenizer **out);

// Whether a token's text (n bytes) is one llama.cpp makes an end-of-generation token by its text
// (llama-vocab.cpp: "<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<eos>", "<turn|>", ...).
int ds_tok_is_eog_text(const char *s, size_t n);

// The unknown-token id (-1 when none); ds_tokenizer_bos/eos are in dspark.h.
int ds_tokenizer_unk(const ds_tokenizer *t);

#endif
