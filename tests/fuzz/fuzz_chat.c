// The chat renderer: a conversation from the input rendered with each built-in format (the
// committed tokenizers fixtures/chat_*: chatml, gemma, llama3, plain). Byte 0 picks the format and
// add_generation_prompt; the rest is NUL-separated role, content, role, content, ... (at most 16
// messages), and the rendered text is tokenized as the commands do.
#include "fuzz.h"

static ds_tokenizer *g_tok[4];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    static const char *names[4] = {"chat_chatml", "chat_gemma", "chat_llama3", "chat_plain"};
    for (int i = 0; i < 4; i++)
        if (ds_tokenizer_load(fuzz_fixture(names[i]), &g_tok[i]) != DS_OK) {
            fprintf(stderr, "fuzz_chat: %s\n", ds_last_error());
            abort();
        }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const ds_tokenizer *t = g_tok[data[0] & 3];
    const int gen = (data[0] >> 2) & 1;
    char *buf = malloc(size); // data[1..size) plus a final NUL
    if (!buf) return 0;
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = 0;
    const char *fields[32];
    int nf = 0;
    for (size_t i = 0; i < size && nf < 32;) {
        fields[nf++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    ds_chat_message msgs[16];
    const int n = nf / 2;
    for (int i = 0; i < n; i++) msgs[i] = (ds_chat_message){fields[2 * i], fields[2 * i + 1]};
    char *out = NULL;
    if (ds_chat_render(t, msgs, n, gen, &out) == DS_OK) {
        int32_t ids[1024];
        int n_ids = 0;
        ds_tokenize(t, out, strlen(out), 1, ids, 1024, &n_ids);
        free(out);
    }
    free(buf);
    return 0;
}
