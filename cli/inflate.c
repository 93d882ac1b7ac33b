// dspark inflate: stories260K and its drafter grown to a realistic size, computing exactly what
// they compute (src/jobs/inflate.c).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct {
    ds_inflate_params p;
    const char *model, *drafter, *out;
} inflate_args;

static const char *const dtype_names[] = {"bf16", "f32", NULL};
static const int dtype_values[] = {DS_BF16, DS_F32};

#define A inflate_args
#define SIZE(N, ARG, f, H)                                                                                     \
    {.names = N, .arg = ARG, .type = CLI_INT, .off = CLI_AT_INT(A, p.f), .lo = 1, .hi = 1 << 20,               \
     .expects = "a positive integer", .help = H}
static const cli_opt inflate_opts[] = {
    CLI_OPT_MODEL(A, model, .help = "a llama GGUF target (default: stories260K)"),
    CLI_OPT_DRAFTER(A, drafter, .help = "a Qwen3-style DeepSpec drafter paired with it"),
    CLI_OPT_STR("-o|--out", "DIR", A, out, "writes DIR/target (Hugging Face Llama) and DIR/drafter (DeepSpec)"),
    SIZE("--hidden", "H", hidden, "hidden size (default 2048)"),
    SIZE("--ffn", "F", ffn, "MLP width (default 5632)"),
    SIZE("--layers", "L", layers, "target layers (default 24; the drafter keeps its own)"),
    {.names = "--dtype", .arg = "bf16|f32", .type = CLI_ENUM, .off = CLI_AT_ENUM(A, p.dtype), .choices = dtype_names,
     .values = dtype_values, .help = "matrix type (default bf16; vectors are f32)"},
    CLI_OPT_SEED(A, p.seed, U64, .help = "the random padding (default 1)"),
    CLI_OPT_STR("--gguf", "TYPE", A, p.gguf_type,
                "also write DIR/target.gguf, the inflated target as GGUF of a llama-quantize\n"
                "type (Q4_K_M, Q8_0, BF16, ...: see dspark quantize --help)"),
    CLI_OPT_TEXT("The inflated pair computes what the small pair computes (zero-padded residual stream, compensated\n"
                 "RMSNorms, identity layers), with weights of the given size: a memory-bound target whose drafter's\n"
                 "acceptance is the small drafter's."),
    {0},
};
#undef SIZE
#undef A

const cli_command cli_inflate_cmd = {.name = "inflate",
    .summary = "grow a small target + drafter to a realistic size, computing exactly the same",
    .usage = "usage: dspark inflate [-m TARGET] -d DRAFTER -o OUT [options]", .col = 21, .opts = inflate_opts,
    .unknown = "inflate: unknown option '%s' (see dspark inflate --help)"};

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
    inflate_args a = {.p = ds_inflate_default()};
    const int rc = cli_parse(&cli_inflate_cmd, argc, argv, &a);
    if (rc) return rc == CLI_HELP ? 0 : rc;
    ds_inflate_params p = a.p;
    const char *drafter = a.drafter, *out = a.out, *model = a.model;
    if (!drafter || !out) return cli_usage_error("inflate needs -d DRAFTER and -o OUT (see dspark inflate --help)");
    const char *target = cli_model_path(model);
    if (!target) return 1;
    cli_catch_interrupt();
    p.interrupted = &cli_interrupted;
    p.progress = progress;
    g_t0 = cli_now();
    static ds_inflate_stats s;
    ds_status st = ds_inflate_run(target, drafter, out, &p, &s);
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
