// dspark init-drafter: a freshly initialized DeepSpec drafter for a target (training starts here).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct {
    const char *model, *out;
    ds_drafter_init_params p;
} init_args;

static const char *const dtype_names[] = {"f32", "bf16", NULL};
static const int dtype_values[] = {DS_F32, DS_BF16};
static const char *const style_names[] = {"qwen3", "gemma4", NULL};

#define A init_args
static const cli_opt init_opts[] = {
    CLI_OPT_MODEL(A, model, .flags = CLI_HELP_ELSEWHERE, .help = "the target (default: stories260K)"),
    {.names = "-o|--out", .arg = "DIR", .type = CLI_STRING, .off = CLI_AT_STR(A, out), .flags = CLI_HELP_ELSEWHERE,
     .help = "the drafter directory to write"},
    CLI_OPT_LAYERS(A, p, .help = "draft layers (default 5)"),
    CLI_OPT_BLOCK(A, p, .help = "slots per block = most draft tokens per round (default 7)"),
    CLI_OPT_MARKOV_RANK(A, p, .help = "Markov head rank; 0 = DFlash (default 256, capped at the hidden size)"),
    CLI_OPT_MARKOV_HEAD(A, p, .help = "vanilla | gated | rnn (default vanilla)"),
    CLI_OPT_TAPS(A, p, .help = "target layers to tap (default: up to 5 spread over 1..L-2)"),
    CLI_OPT_NO_CONFIDENCE(A, p, .help = "no confidence head"),
    {.names = "--dtype", .arg = "f32|bf16", .type = CLI_ENUM, .off = CLI_AT_ENUM(A, p.dtype), .choices = dtype_names,
     .values = dtype_values, .help = "weight type (default f32)"},
    {.names = "--style", .arg = "S", .type = CLI_STRING, .off = CLI_AT_STR(A, p.style), .choices = style_names,
     .help = "qwen3 | gemma4 layers (default: gemma4 for Gemma 3/4 targets, else qwen3)"},
    CLI_OPT_SEED(A, p.seed, U64, .err = "--seed expects a non-negative integer",
                 .help = "random seed (default 0); same seed, same bytes"),
    {0},
};
#undef A

const cli_command cli_init_drafter_cmd = {.name = "init-drafter",
    .summary = "write a freshly initialized DeepSpec drafter for a target",
    .usage = "usage: dspark init-drafter [-m TARGET] -o DIR [options]", .col = 22, .opts = init_opts};

int cmd_init_drafter(int argc, char **argv) {
    init_args a = {.p = ds_drafter_init_default()};
    const int rc = cli_parse(&cli_init_drafter_cmd, argc, argv, &a);
    if (rc) return rc == CLI_HELP ? 0 : rc;
    const char *model = a.model, *out = a.out;
    const ds_drafter_init_params p = a.p;
    if (!out) return cli_usage_error("init-drafter needs an output directory (-o DIR)");
    const char *path = cli_model_path(model);
    if (!path) return 1;
    ds_model *m;
    ds_status st = ds_model_load(path, NULL, &m);
    if (st) return cli_fail(st);
    st = ds_drafter_init_write(m, &p, out);
    ds_model_free(m);
    if (st) return cli_fail(st);
    fprintf(stderr, "dspark: wrote a fresh drafter for %s to %s\n", path, out);
    return 0;
}
