// Test tool: dspark's dequantization of GGUF block types, for tests/reference/test_ggml_quants.py.
//   ds_ggml_dequant raw TYPE_ID N IN.bin OUT.f32     N elements of raw blocks of ggml type TYPE_ID
//                                                    (ds_ggml_dequantize_row) -> N little-endian f32
//   ds_ggml_dequant gguf FILE.gguf TENSOR OUT.f32    a 2-D tensor of a GGUF file, row by row through
//                                                    ds_weight_row_f32 (the embedding / sgemm-tile path)
// Exit status 0 on success, 1 with a message on stderr otherwise.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "io/gguf.h"
#include "kernels/ggml_quants.h"
#include "kernels/matmul.h"

static int write_all(const char *path, const float *v, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(v, sizeof(float), n, f) != n) {
        fprintf(stderr, "%s: cannot write\n", path);
        if (f) fclose(f);
        return 1;
    }
    return fclose(f) != 0;
}

static int run_raw(int type, long long n, const char *in, const char *out) {
    const int qk = ds_ggml_block_elems((ds_dtype)type);
    if (!qk || n <= 0 || n % qk) {
        fprintf(stderr, "type %d / %lld elements: not a whole number of blocks of a block type\n", type, n);
        return 1;
    }
    const size_t bytes = (size_t)(n / qk) * ds_ggml_block_bytes((ds_dtype)type);
    unsigned char *buf = malloc(bytes);
    float *y = malloc((size_t)n * sizeof(float));
    FILE *f = fopen(in, "rb");
    int rc = 1;
    if (!buf || !y || !f || fread(buf, 1, bytes, f) != bytes) fprintf(stderr, "%s: cannot read %zu bytes\n", in, bytes);
    else {
        ds_ggml_dequantize_row((ds_dtype)type, buf, n, y);
        rc = write_all(out, y, (size_t)n);
    }
    if (f) fclose(f);
    free(buf);
    free(y);
    return rc;
}

static int run_gguf(const char *path, const char *name, const char *out) {
    ds_gguf g;
    if (ds_gguf_open(&g, path)) {
        fprintf(stderr, "%s\n", ds_last_error());
        return 1;
    }
    const ds_gguf_tensor *t = ds_gguf_find_tensor(&g, name);
    int rc = 1;
    if (!t || t->n_dims > 2) fprintf(stderr, "%s: no 1-D/2-D tensor '%s'\n", path, name);
    else {
        ds_weight w = {t->type, t->n_dims == 2 ? (int)t->ne[1] : 1, (int)t->ne[0], t->data};
        float *y = malloc((size_t)w.rows * (size_t)w.cols * sizeof(float));
        if (y) {
            for (int r = 0; r < w.rows; r++) ds_weight_row_f32(&w, r, y + (size_t)r * w.cols);
            rc = write_all(out, y, (size_t)w.rows * (size_t)w.cols);
        }
        free(y);
    }
    ds_gguf_close(&g);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 6 && !strcmp(argv[1], "raw")) return run_raw(atoi(argv[2]), atoll(argv[3]), argv[4], argv[5]);
    if (argc == 5 && !strcmp(argv[1], "gguf")) return run_gguf(argv[2], argv[3], argv[4]);
    fprintf(stderr, "usage: ds_ggml_dequant raw TYPE_ID N IN OUT | gguf FILE TENSOR OUT\n");
    return 1;
}
