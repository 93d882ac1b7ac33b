// dspark inflate: stories260K and its drafter grown to a realistic size, computing exactly what
// they compute (src/inflate/inflate.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: dspark inflate [-m TARGET] -d DRAFTER -o OUT [options]\n"
            "  -m, --model PATH   a llama GGUF target (default: stories260K)\n"
            "  -d, --drafter DIR  a Qwen3-style DeepSpec drafter paired with it\n"
            "  -o, --out DIR      writes DIR/target (Hugging Face Llama) and DIR/drafter (DeepSpec)\n"
            "  --hidden H         hidden size (default 2048)\n"
            "  --ffn F            MLP width (default 5632)\n"
            "  --layers L         target layers (default 24; the drafter keeps its own)\n"
            "  --dtype bf16|f32   matrix type (default bf16; vectors are f32)\n"
            "  --seed S           the random padding (default 1)\n"
            "  --gguf TYPE        also write DIR/target.gguf, the inflated target as GGUF of a llama-quantize\n"
            "                     type (Q4_K_M, Q8_0, BF16, ...: see dspark quantize --help)\n"
            "The inflated pair computes what the small pair computes (zero-padded residual stream, compensated\n"
            "RMSNorms, identity layers), with weights of the given size: a memory-bound target whose drafter's\n"
            "acceptance is the small drafter's.\n");
}

static double g_t0;
static int g_line_open; // a progress line without its newline yet

static void progress(void *ctx, const char *stage, int i, int n, const char *name) {
    (void)ctx;
    if (!strcmp(stage, "target") || !strcmp(stage, "drafter"))
        fprintf(stderr, "\r%-7s [%4d/%4d] %-56.56s", stage, i + 1, n, name), g_line_open = 1;
    else if (!strcmp(stage, "write")) fprintf(stderr, "\nwriting %s\n", name), g_line_open = 0;
    else if (!strcmp(stage, "check")) fprintf(stderr, "reloading %s\n", name);
    else fprintf(stderr, "done in %.1f s: %s\n", cli_now() - g_t0, name);
}

int cmd_inflate(int argc, char **argv) {
    ds_inflate_params p = ds_inflate_default();
    const char *model = NULL, *drafter = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!v) return cli_usage_error("option %s needs a value (see dspark inflate --help)", o);
        i++;
        const int r = cli_run_option(o, v, &model, &drafter, NULL, NULL);
        if (r < 0) return -r;
        if (r) continue;
        if (!strcmp(o, "-o") || !strcmp(o, "--out")) out = v;
        else if (!strcmp(o, "--hidden") || !strcmp(o, "--ffn") || !strcmp(o, "--layers")) {
            if (!cli_parse_int(v, 1, 1 << 20, &n)) return cli_usage_error("%s expects a positive integer, got '%s'", o, v);
            *(!strcmp(o, "--hidden") ? &p.hidden : !strcmp(o, "--ffn") ? &p.ffn : &p.layers) = (int)n;
        } else if (!strcmp(o, "--dtype")) {
            if (!strcmp(v, "bf16")) p.dtype = DS_BF16;
            else if (!strcmp(v, "f32")) p.dtype = DS_F32;
            else return cli_usage_error("--dtype expects bf16 or f32, got '%s'", v);
        } else if (!strcmp(o, "--gguf")) {
            p.gguf_type = v;
        } else if (!strcmp(o, "--seed")) {
            if (!cli_parse_int(v, 0, 0x7fffffffffffffffL, &n))
                return cli_usage_error("--seed expects a non-negative integer, got '%s'", v);
            p.seed = (uint64_t)n;
        } else {
            return cli_usage_error("inflate: unknown option '%s' (see dspark inflate --help)", o);
        }
    }
    if (!drafter || !out) return cli_usage_error("inflate needs -d DRAFTER and -o OUT (see dspark inflate --help)");
    const char *target = cli_model_path(model);
    if (!target) return 1;
    cli_catch_interrupt();
    p.interrupted = &cli_interrupted;
    p.progress = progress;
    g_t0 = cli_now();
    static ds_inflate_stats s;
    ds_status st = ds_inflate(target, drafter, out, &p, &s);
    if (st) {
        if (g_line_open) fputc('\n', stderr);
        return cli_fail(st);
    }
    printf("{\"out\": \"%s\", \"hidden\": %d, \"ffn\": %d, \"layers\": %d, \"dtype\": \"%s\", \"layer_map\": [", out,
           p.hidden, p.ffn, p.layers, p.dtype == DS_BF16 ? "bf16" : "f32");
    for (int l = 0; l < s.n_src_layers; l++) printf("%s%d", l ? ", " : "", s.layer_of[l]);
    printf("], \"target_weight_bytes\": %zu, \"drafter_bytes\": %zu}\n", s.target_bytes, s.drafter_bytes);
    return 0;
}
