// A Hugging Face model directory (config.json, generation_config.json, model.safetensors or
// shards + index, tokenizer.json, tokenizer_config.json: a multi-file input, see fuzz.h), loaded
// as a target; its tokenizer, when there is one, is used.
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_unpack(data, size);
    ds_model *m = NULL;
    const ds_model_params mp = {.n_threads = 1};
    if (ds_model_load(fuzz_dir(), &mp, &m) == DS_OK) {
        const ds_model_info *info = ds_model_get_info(m);
        for (int id = -1; id <= info->vocab_size && id < 1 << 16; id++) ds_model_is_stop(m, id);
        char tid[128];
        ds_model_target_id(m, tid, sizeof tid);
        const ds_tokenizer *t = ds_model_tokenizer(m);
        if (t) fuzz_use_tokenizer(t, NULL, 0);
        ds_model_free(m);
    }
    return 0;
}
