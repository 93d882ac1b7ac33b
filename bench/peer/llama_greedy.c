// llama_greedy: llama.cpp's own logits and greedy ids on a GGUF file, to compare dspark's loaders with
// llama.cpp's on the same file (bench/peer_gguf_check.py builds it against the llama.cpp build of
// scripts/bench_peer.sh; it is never part of dspark's build: bench/peer/ is outside the build's glob).
//
//   llama_greedy MODEL.gguf IDS N
//
// IDS: the prompt's token ids, comma-separated; N: greedy steps after it. Prints one JSON line:
// {"logits": [the prompt's last row], "ids": [the N greedy ids]}. One thread, KV cache in f32.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
    (void)user;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: llama_greedy MODEL.gguf IDS N\n");
        return 2;
    }
    llama_token prompt[512];
    int n_prompt = 0;
    for (char *s = argv[2]; *s && n_prompt < 512;) {
        prompt[n_prompt++] = (llama_token)strtol(s, &s, 10);
        if (*s == ',') s++;
    }
    const int steps = atoi(argv[3]);
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model *model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) {
        fprintf(stderr, "llama_greedy: %s: llama.cpp could not load it\n", argv[1]);
        return 1;
    }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 512;
    cp.n_threads = cp.n_threads_batch = 1;
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED; // (its CPU kernel rounds Q to f16)
    struct llama_context *ctx = llama_init_from_model(model, cp);
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    if (!ctx || llama_decode(ctx, llama_batch_get_one(prompt, n_prompt))) {
        fprintf(stderr, "llama_greedy: %s: the prompt did not decode\n", argv[1]);
        return 1;
    }
    const float *logits = llama_get_logits_ith(ctx, -1);
    printf("{\"logits\": [");
    for (int i = 0; i < n_vocab; i++) printf("%s%.9g", i ? ", " : "", logits[i]);
    printf("], \"ids\": [");
    for (int t = 0; t < steps; t++) {
        logits = llama_get_logits_ith(ctx, -1);
        llama_token best = 0;
        for (int i = 1; i < n_vocab; i++)
            if (logits[i] > logits[best]) best = i;
        printf("%s%d", t ? ", " : "", best);
        if (llama_decode(ctx, llama_batch_get_one(&best, 1))) {
            fprintf(stderr, "llama_greedy: step %d did not decode\n", t);
            return 1;
        }
    }
    printf("]}\n");
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
