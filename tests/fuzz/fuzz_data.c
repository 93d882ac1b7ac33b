// Training data (the DSPKDATA file of dspark datagen: every sequence read back) and the same bytes
// as a prompt file (plain lines or {"prompt": ...} JSON lines).
#include "fuzz.h"
#include "gen/prompts.h"
#include "train/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_clear();
    const char *path = fuzz_write("data.bin", data, size);
    ds_data *d = NULL;
    if (ds_data_open(path, &d) == DS_OK) {
        volatile int32_t sink = 0;
        for (size_t i = 0; i <= ds_data_count(d); i++) {
            const int32_t *tok;
            int n, np;
            if (ds_data_get(d, i, &tok, &n, &np) == DS_OK)
                for (int k = 0; k < n; k++) sink ^= tok[k];
        }
        ds_data_vocab(d);
        ds_data_total_tokens(d);
        (void)sink;
        ds_data_close(d);
    }
    ds_prompt_set *p = NULL;
    if (ds_prompts_load(path, &p) == DS_OK) ds_prompts_free(p);
    return 0;
}
