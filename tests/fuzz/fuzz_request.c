// The HTTP request body parser of dspark serve (src/serve/request.c) with the committed tiny target
// and its tokenizer (fixtures/target). Byte 0 picks /v1/completions or /v1/chat/completions; the
// rest is the body. A parsed request's stop strings are then applied to its prompt's text.
#include "fuzz.h"
#include "serve/server.h"

static ds_model *g_model;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const ds_model_params mp = {.n_threads = 1};
    if (ds_model_load(fuzz_fixture("target"), &mp, &g_model) != DS_OK) {
        fprintf(stderr, "fuzz_request: %s\n", ds_last_error());
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    char *body = malloc(size); // NUL-terminated copy, as the server hands it over
    if (!body) return 0;
    memcpy(body, data + 1, size - 1);
    body[size - 1] = 0;
    ds_oa_request r;
    const char *param = NULL;
    if (ds_oa_parse(body, size - 1, data[0] & 1, g_model, &r, &param) == DS_OK) {
        // The request's stop strings applied to a text output fed with its first prompt's tokens.
        ds_text_out *o;
        if (ds_text_out_init(ds_model_tokenizer(g_model), &o) == DS_OK) {
            for (int i = 0; i < r.n_stops; i++) ds_text_out_add_stop(o, r.stops[i]);
            int used;
            if (r.n_prompts > 0 && ds_text_out_push(o, r.prompts[0], r.n_prompt[0], &used) == DS_OK)
                ds_text_out_finish(o);
            size_t len;
            (void)ds_text_out_text(o, &len);
            (void)ds_text_out_safe(o);
            ds_text_out_free(o);
        }
        ds_oa_request_free(&r);
    }
    free(body);
    return 0;
}
