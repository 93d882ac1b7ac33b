// tokenizer.json (+ tokenizer_config.json, and a file "text" to encode: a multi-file input, see
// fuzz.h), loaded from the folder, then used (encode, decode, token bytes, chat).
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_unpack(data, size);
    static char text[4096];
    size_t len = 0;
    char p[1024];
    snprintf(p, sizeof p, "%s/text", fuzz_dir());
    FILE *f = fopen(p, "rb");
    if (f) {
        len = fread(text, 1, sizeof text, f);
        fclose(f);
        unlink(p);
    }
    ds_tokenizer *t = NULL;
    if (ds_tokenizer_load(fuzz_dir(), &t) == DS_OK) {
        fuzz_use_tokenizer(t, f ? text : NULL, len);
        ds_tokenizer_free(t);
    }
    return 0;
}
