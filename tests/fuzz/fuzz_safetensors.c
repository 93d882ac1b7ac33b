// Safetensors: one .safetensors file, or (an input starting "=== ", see fuzz.h) a directory of
// model.safetensors.index.json and shards. Header validation, then every tensor's bytes are read
// (an offset past the mapping would fault) and every metadata entry.
#include "fuzz.h"
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path;
    if (size >= 4 && !memcmp(data, "=== ", 4)) {
        fuzz_unpack(data, size);
        path = fuzz_dir();
    } else {
        fuzz_clear();
        path = fuzz_write("model.safetensors", data, size);
    }
    ds_safetensors *st = NULL;
    if (ds_st_open(path, &st) != DS_OK) return 0;
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
    ds_st_close(st);
    return 0;
}
