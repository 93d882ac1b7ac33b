// One .safetensors file: header validation, then every tensor's bytes are read (an offset past
// the mapping would fault) and every metadata entry.
#include "fuzz.h"
#include "io/safetensors.h"

static void use(const ds_safetensors *st) {
    volatile uint8_t sink = 0;
    for (int i = 0; i < ds_st_count(st); i++) {
        const ds_st_tensor *t = ds_st_at(st, i);
        ds_st_find(st, t->name);
        const uint8_t *p = t->data;
        for (size_t k = 0; k < t->nbytes; k++) sink ^= p[k];
    }
    for (int i = 0; i < ds_st_metadata_count(st); i++) {
        const char *v = NULL, *k = ds_st_metadata_at(st, i, &v);
        if (k) ds_st_metadata(st, k);
    }
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_clear();
    const char *path = fuzz_write("model.safetensors", data, size);
    ds_safetensors *st = NULL;
    if (ds_st_open(path, &st) == DS_OK) {
        use(st);
        ds_st_close(st);
    }
    return 0;
}
