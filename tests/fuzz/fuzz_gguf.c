// GGUF files: the reader (every metadata value and tensor info), then the same bytes as a model
// (ds_model_load: llama / SentencePiece tokenizer), as a tokenizer alone, and as a drafter in
// llama.cpp's form (arch dflash) paired with the committed tiny target (fixtures/target).
#include "fuzz.h"
#include "io/gguf.h"

static ds_model *g_target;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const ds_model_params mp = {.n_threads = 1};
    if (ds_model_load(fuzz_fixture("target"), &mp, &g_target) != DS_OK) {
        fprintf(stderr, "fuzz_gguf: %s\n", ds_last_error());
        abort();
    }
    ds_set_threads(1);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_clear();
    const char *path = fuzz_write("model.gguf", data, size);
    ds_gguf g;
    if (ds_gguf_open(&g, path) == DS_OK) {
        for (uint64_t i = 0; i < g.n_kv; i++) {
            const ds_gguf_kv *kv = &g.kv[i];
            int64_t iv;
            double fv;
            int bv;
            char buf[64];
            ds_gguf_get_int(&g, kv->key, &iv);
            ds_gguf_get_float(&g, kv->key, &fv);
            ds_gguf_get_bool(&g, kv->key, &bv);
            ds_gguf_get_str(&g, kv->key, buf, sizeof buf);
            if (kv->type == DS_GGUF_ARRAY && kv->arr_type != DS_GGUF_STRING && kv->arr_type != DS_GGUF_ARRAY)
                for (uint64_t k = 0; k < kv->arr_n && k < 64; k++) ds_gguf_arr_f64(kv, k), ds_gguf_arr_i64(kv, k);
        }
        for (uint64_t i = 0; i < g.n_tensors; i++) ds_gguf_find_tensor(&g, g.tensors[i].name);
        ds_gguf_close(&g);
    }
    ds_model *m = NULL;
    const ds_model_params mp = {.n_threads = 1};
    if (ds_model_load(path, &mp, &m) == DS_OK) {
        ds_model_get_info(m);
        const ds_tokenizer *t = ds_model_tokenizer(m);
        if (t) fuzz_use_tokenizer(t, NULL, 0);
        ds_model_free(m);
    }
    ds_tokenizer *t = NULL;
    if (ds_tokenizer_load(path, &t) == DS_OK) {
        fuzz_use_tokenizer(t, NULL, 0);
        ds_tokenizer_free(t);
    }
    ds_drafter *d = NULL;
    if (ds_drafter_load(path, g_target, &d) == DS_OK) {
        ds_draft_state *s = NULL;
        if (ds_draft_state_init(d, 64, &s) == DS_OK) ds_draft_state_free(s);
        ds_drafter_free(d);
    }
    return 0;
}
