// A DeepSpec drafter directory (config.json, model.safetensors or shards, calibration.json: a
// multi-file input, see fuzz.h), loaded and paired with the committed tiny target
// (fixtures/target), as `generate -d` loads it and as `train` loads it for training.
#include "fuzz.h"
#include "train/train.h"

static ds_model *g_target;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const ds_model_params mp = {.n_threads = 1};
    if (ds_model_load(fuzz_fixture("target"), &mp, &g_target) != DS_OK) {
        fprintf(stderr, "fuzz_drafter: %s\n", ds_last_error());
        abort();
    }
    ds_set_threads(1);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_unpack(data, size);
    ds_drafter *d = NULL;
    if (ds_drafter_load(fuzz_dir(), g_target, &d) == DS_OK) {
        const ds_drafter_info *info = ds_drafter_get_info(d);
        (void)info;
        const float *v;
        ds_drafter_calibration(d, 1, &v);
        ds_drafter_acceptance_prior(d, 1, &v);
        ds_drafter_warning(d);
        ds_draft_state *s = NULL;
        if (ds_draft_state_init(d, 64, &s) == DS_OK) ds_draft_state_free(s);
        ds_drafter_free(d);
    }
    ds_tmodel tm;
    if (ds_tmodel_load(fuzz_dir(), g_target, &tm) == DS_OK) ds_tmodel_free(&tm);
    return 0;
}
