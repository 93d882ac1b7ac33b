// dspark quantize: a drafter or target in MLX's affine 4/8-bit format (src/jobs/quantize.c).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct {
    ds_quantize_params p;
    const char *pos[2]; // SRC_DIR OUT_DIR
    int n_pos, reg;     // reg: --register
    unsigned given;     // GIVEN_BITS | GIVEN_GROUP
} quant_args;

enum { GIVEN_BITS = 1, GIVEN_GROUP = 2 };

static int take_dir(void *args, const char *arg) {
    quant_args *a = args;
    if (a->n_pos == 2) return cli_usage_error("quantize takes SRC_DIR OUT_DIR (extra argument '%s')", arg);
    a->pos[a->n_pos++] = arg;
    return 0;
}

static int add_keep(void *field, const char *v) {
    ds_quantize_params *p = field;
    if (p->n_keep == DS_QUANT_MAX_PATTERNS) return cli_usage_error("too many --keep patterns");
    p->keep[p->n_keep++] = v;
    return 0;
}

static int add_override(void *field, const char *v) {
    ds_quantize_params *p = field;
    static char buf[DS_QUANT_MAX_PATTERNS][256];
    const char *eq = strrchr(v, '=');
    int b, g;
    if (p->n_override == DS_QUANT_MAX_PATTERNS || !eq || eq - v >= 256 || sscanf(eq + 1, "%d:%d", &b, &g) != 2)
        return cli_usage_error("--override: expected PATTERN=BITS:GROUP, got '%s'", v);
    memcpy(buf[p->n_override], v, (size_t)(eq - v));
    buf[p->n_override][eq - v] = 0;
    p->override[p->n_override] = buf[p->n_override];
    p->override_bits[p->n_override] = b;
    p->override_group[p->n_override++] = g;
    return 0;
}

static int set_shard_mb(void *field, const char *v) {
    double mb;
    if (!cli_parse_float(v, 0.001, 1 << 30, &mb)) return cli_usage_error("--max-shard-mb: '%s' is not a size", v);
    *(size_t *)field = (size_t)(mb * 1048576.0);
    return 0;
}

#define A quant_args
static const cli_opt quant_opts[] = {
    CLI_OPT_STR("--gguf", "TYPE", A, p.gguf_type,
                "write the target SRC (an HF directory or a GGUF) as one GGUF file of a\n"
                "llama-quantize type with its per-tensor mix: F32 F16 BF16 Q8_0 Q4_0 Q5_0\n"
                "Q5_1 Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K IQ4_NL IQ4_XS (docs/formats/gguf.md)"),
    {.names = "--drafter", .type = CLI_FLAG, .off = CLI_AT_INT(A, p.target), .set = 0,
     .help = "SRC_DIR is a DeepSpec drafter (default)"},
    CLI_OPT_FLAG("--register", A, reg, "record the quantized drafter in the registry (dspark drafters --help)"),
    CLI_OPT_FLAG("--target", A, p.target, "SRC is a target: an HF safetensors directory of any architecture dspark runs\n"
                                          "(text model only: a vision tower is dropped), or a llama .gguf file\n"
                                          "(written out as an HF directory, its tokenizer as tokenizer.gguf); MoE\n"
                                          "experts in any layout, routers at 8 bits; streamed: memory stays small"),
    {.names = "--bits", .arg = "4|8", .type = CLI_INT, .off = CLI_AT_INT(A, p.bits), .lo = 0, .hi = 64,
     .mark = GIVEN_BITS, .flags = CLI_HELP_ELSEWHERE, .err = "--bits: '%s' is not a number",
     .help = "bits per quantized weight"},
    {.names = "--group-size", .arg = "32|64", .type = CLI_INT, .off = CLI_AT_INT(A, p.group_size), .lo = 0,
     .hi = 1 << 20, .mark = GIVEN_GROUP, .flags = CLI_HELP_ELSEWHERE, .err = "--group-size: '%s' is not a number",
     .help = "weights per scale and bias"},
    {.names = "--keep", .arg = "PATTERN", .type = CLI_CALL, .off = offsetof(A, p), .call = add_keep,
     .flags = CLI_REPEATABLE, .expects = "a module glob",
     .help = "keep modules matching the glob (e.g. 'layers.0.*') in full precision\n"
             "(repeatable; recorded as false in config.json)"},
    {.names = "--override", .arg = "PATTERN=BITS:GROUP", .type = CLI_CALL, .off = offsetof(A, p), .call = add_override,
     .flags = CLI_REPEATABLE, .expects = "PATTERN=BITS:GROUP", .help = " per-module bits and group size (repeatable)"},
    {.names = "--max-shard-mb", .arg = "N", .type = CLI_CALL, .off = CLI_AT_(A, p.max_shard_bytes, size_t),
     .call = set_shard_mb, .expects = "a size in MiB",
     .help = "shard above N MiB of data (default 5 GiB; fractions allowed)"},
    CLI_OPT_FLAG("--skip-load-smoke", A, p.skip_load_smoke, "do not reload the result and run one quantized projection"),
    CLI_OPT_TEXT("Drafters: every 2-D weight whose input width the group size divides is quantized, the\n"
                 "embed_tokens and markov_w1 gather tables included; confidence_head.* and 1-D tensors stay as they are."),
    {0},
};
#undef A

const cli_command cli_quantize_cmd = {.name = "quantize",
    .summary = "write a drafter or target in MLX's affine 4/8-bit format (dspark quantize --help)",
    .usage = "usage: dspark quantize SRC_DIR OUT_DIR --bits 4|8 --group-size 32|64 [options]\n"
             "       dspark quantize SRC OUT.gguf --gguf TYPE [--skip-load-smoke]", .col = 25,
    .opts = quant_opts, .given_off = offsetof(quant_args, given), .positional = take_dir,
    .unknown = "quantize: unknown option '%s' (see dspark quantize --help)"};

static double g_t0;
static int g_open; // a "\r[i/n] name" line is open on stderr

static void progress(void *ctx, const char *stage, int i, int n, const char *name) {
    (void)ctx;
    g_open = !strcmp(stage, "quantize");
    if (g_open) fprintf(stderr, "\r[%3d/%3d] %-60.60s", i + 1, n, name);
    else if (!strcmp(stage, "write")) fprintf(stderr, "\nwriting %s\n", name);
    else if (!strcmp(stage, "smoke")) fprintf(stderr, "load smoke test\n");
    else fprintf(stderr, "done in %.1f s: %s\n", cli_now() - g_t0, name);
}

int cmd_quantize(int argc, char **argv) {
    quant_args a = {.p = ds_quantize_default()};
    const int rc = cli_parse(&cli_quantize_cmd, argc, argv, &a);
    if (rc) return rc == CLI_HELP ? 0 : rc;
    ds_quantize_params p = a.p;
    const char *pos[2] = {a.pos[0], a.pos[1]};
    const int n_pos = a.n_pos, have_bits = a.given & GIVEN_BITS, have_group = a.given & GIVEN_GROUP, reg = a.reg;
    if (n_pos != 2) return cli_usage_error("quantize needs SRC_DIR and OUT_DIR (see dspark quantize --help)");
    if (p.gguf_type && (have_bits || have_group || p.n_keep || p.n_override || reg))
        return cli_usage_error("--gguf does not combine with --bits, --group-size, --keep, --override or --register");
    if (!p.gguf_type && (!have_bits || !have_group)) return cli_usage_error("quantize needs --bits 4|8 and --group-size 32|64");
    char out[4096];
    snprintf(out, sizeof out, "%s", pos[1]);
    for (size_t k = strlen(out); k > 1 && out[k - 1] == '/'; k--) out[k - 1] = 0;
    pos[1] = out; // (ds_quantize_run refuses an OUT that is not a dspark output and creates OUT.tmp.PID before any work)
    cli_catch_interrupt();
    p.interrupted = &cli_interrupted;
    p.progress = progress;
    g_t0 = cli_now();
    ds_quantize_stats s;
    ds_status st = ds_quantize_run(pos[0], pos[1], &p, &s);
    if (st && g_open) fputc('\n', stderr); // the error on a line of its own
    if (st) return cli_fail(st);
    if (p.gguf_type) {
        printf("{\"out\": \"%s\", \"gguf\": \"%s\", \"tensors\": %d, \"quantized\": %d, \"src_bytes\": %zu, "
               "\"out_bytes\": %zu, \"ratio\": %.4f}\n", pos[1], p.gguf_type, s.n_tensors, s.n_quantized, s.src_bytes,
               s.out_bytes, s.src_bytes ? (double)s.out_bytes / (double)s.src_bytes : 0.0);
        return 0;
    }
    printf("{\"out\": \"%s\", \"bits\": %d, \"group_size\": %d, \"tensors\": %d, \"quantized\": %d, "
           "\"src_bytes\": %zu, \"out_bytes\": %zu, \"ratio\": %.4f, \"shards\": %d, \"dropped\": %d}\n",
           pos[1], p.bits, p.group_size, s.n_tensors, s.n_quantized, s.src_bytes, s.out_bytes,
           s.src_bytes ? (double)s.out_bytes / (double)s.src_bytes : 0.0, s.n_shards, s.n_dropped);
    return reg ? cli_register_drafter(pos[1], "quantize", 0, 0, 0, 0) : 0;
}
