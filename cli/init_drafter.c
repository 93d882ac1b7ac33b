// dspark init-drafter: a freshly initialized DeepSpec drafter for a target (training starts here).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: dspark init-drafter [-m TARGET] -o DIR [options]\n"
            "  --layers N          draft layers (default 5)\n"
            "  --block B           slots per block = most draft tokens per round (default 7)\n"
            "  --markov-rank R     Markov head rank; 0 = DFlash (default 256, capped at the hidden size)\n"
            "  --markov-head H     vanilla | gated | rnn (default vanilla)\n"
            "  --taps L1,L2,..     target layers to tap (default: up to 5 spread over 1..L-2)\n"
            "  --no-confidence     no confidence head\n"
            "  --dtype f32|bf16    weight type (default f32)\n"
            "  --style S           qwen3 | gemma4 layers (default: gemma4 for Gemma 3/4 targets, else qwen3)\n"
            "  --seed S            random seed (default 0); same seed, same bytes\n");
}

int cmd_init_drafter(int argc, char **argv) {
    const char *model = NULL, *out = NULL;
    ds_drafter_init_params p = ds_drafter_init_default();
    int taps[64];
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(o, "--no-confidence")) {
            p.confidence = 0;
            continue;
        }
        if (!v) return cli_missing_value(o, "init-drafter", usage);
        i++;
        if (!strcmp(o, "-m") || !strcmp(o, "--model")) model = v;
        else if (!strcmp(o, "-o") || !strcmp(o, "--out")) out = v;
        else if (!strcmp(o, "--layers")) {
            if (!cli_parse_int(v, 1, 64, &n)) return cli_usage_error("--layers expects 1..64, got '%s'", v);
            p.n_layers = (int)n;
        } else if (!strcmp(o, "--block")) {
            if (!cli_parse_int(v, 1, 64, &n)) return cli_usage_error("--block expects 1..64, got '%s'", v);
            p.block_size = (int)n;
        } else if (!strcmp(o, "--markov-rank")) {
            if (!cli_parse_int(v, 0, 65536, &n)) return cli_usage_error("--markov-rank expects 0..65536, got '%s'", v);
            p.markov_rank = (int)n;
        } else if (!strcmp(o, "--markov-head")) {
            if (strcmp(v, "vanilla") && strcmp(v, "gated") && strcmp(v, "rnn"))
                return cli_usage_error("--markov-head expects vanilla, gated or rnn, got '%s'", v);
            p.markov_head = v;
        } else if (!strcmp(o, "--taps")) {
            p.n_taps = 0;
            for (const char *s = v; *s;) {
                char *end;
                long id = strtol(s, &end, 10);
                if (end == s || (*end && *end != ',') || p.n_taps == 64 || id < -1 || id > 4096)
                    return cli_usage_error("--taps expects comma-separated layer ids, got '%s'", v);
                taps[p.n_taps++] = (int)id;
                s = *end ? end + 1 : end;
            }
            p.tap_layers = taps;
        } else if (!strcmp(o, "--dtype")) {
            if (!strcmp(v, "f32")) p.dtype = DS_F32;
            else if (!strcmp(v, "bf16")) p.dtype = DS_BF16;
            else return cli_usage_error("--dtype expects f32 or bf16, got '%s'", v);
        } else if (!strcmp(o, "--style")) {
            if (strcmp(v, "qwen3") && strcmp(v, "gemma4"))
                return cli_usage_error("--style expects qwen3 or gemma4, got '%s'", v);
            p.style = v;
        } else if (!strcmp(o, "--seed")) {
            if (!cli_parse_int(v, 0, 0x7fffffffffffffffL, &n)) return cli_usage_error("--seed expects a non-negative integer");
            p.seed = (uint64_t)n;
        } else {
            return cli_usage_error("unknown option '%s' (see dspark init-drafter --help)", o);
        }
    }
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
