// A sharded safetensors directory: model.safetensors.index.json and its shards (a multi-file
// input, see fuzz.h), opened as a directory; every tensor's bytes and metadata are read.
#include "fuzz.h"
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_unpack(data, size);
    ds_safetensors *st = NULL;
    if (ds_st_open(fuzz_dir(), &st) == DS_OK) {
        volatile uint8_t sink = 0;
        for (int i = 0; i < ds_st_count(st); i++) {
            const ds_st_tensor *t = ds_st_at(st, i);
            const uint8_t *p = t->data;
            for (size_t k = 0; k < t->nbytes; k++) sink ^= p[k];
        }
        for (int i = 0; i < ds_st_metadata_count(st); i++) {
            const char *v = NULL, *k = ds_st_metadata_at(st, i, &v);
            if (k) ds_st_metadata(st, k);
        }
        (void)sink;
        ds_st_close(st);
    }
    return 0;
}
