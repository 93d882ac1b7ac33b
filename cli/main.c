// dspark: the command-line tool. main only dispatches to one file per command.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: dspark <command> [options]\n"
            "\n"
            "commands:\n"
            "  generate       generate text, optionally with speculative decoding (dspark generate --help)\n"
            "  init-drafter   write a freshly initialized DeepSpec drafter for a target\n"
            "  train          train a DSpark/DFlash drafter for a frozen target (dspark train --help)\n"
            "  datagen        write drafter training data with the target (dspark datagen --help)\n"
            "  eval           measure speculative decoding against plain decoding on a prompt set\n"
            "  calibrate      fit the drafter's confidence calibration (STS) on held-out prompts\n"
            "  draft-vocab    let the drafter propose only the target's k most frequent tokens (cheaper drafting)\n"
            "  quantize       write a drafter or target in MLX's affine 4/8-bit format (dspark quantize --help)\n"
            "  drafters       list the registered drafters (dspark drafters --help)\n"
            "  inflate        grow a small target + drafter to a realistic size, computing exactly the same\n"
            "  profile        measure the target's verification cost table SPS(B) for --schedule auto\n"
            "  tokenize       text -> token ids (or --decode ids -> text) with a model's or a standalone tokenizer\n"
            "  chat           interactive chat with a model (reads lines from stdin)\n"
            "  chat-template  render a conversation with a Jinja chat template (as transformers does)\n"
            "  serve          an OpenAI-compatible HTTP server (dspark serve --help)\n"
            "  version        print the version\n");
}

// Give OpenBLAS the kernels this CPU deserves (see ds_openblas_core_hint): once, by re-executing
// with OPENBLAS_CORETYPE set; an explicit OPENBLAS_CORETYPE from the user always wins.
static void fix_openblas_core(char **argv) {
    if (getenv("OPENBLAS_CORETYPE")) return;
    const char *hint = ds_openblas_core_hint();
    if (!hint || setenv("OPENBLAS_CORETYPE", hint, 1) != 0) return;
    execv("/proc/self/exe", argv); // returns only on failure: carry on with what we have
}

int main(int argc, char **argv) {
    fix_openblas_core(argv);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "generate") == 0) return cmd_generate(argc - 1, argv + 1);
    if (strcmp(cmd, "init-drafter") == 0) return cmd_init_drafter(argc - 1, argv + 1);
    if (strcmp(cmd, "train") == 0) return cmd_train(argc - 1, argv + 1);
    if (strcmp(cmd, "datagen") == 0) return cmd_datagen(argc - 1, argv + 1);
    if (strcmp(cmd, "eval") == 0) return cmd_eval(argc - 1, argv + 1);
    if (strcmp(cmd, "calibrate") == 0) return cmd_calibrate(argc - 1, argv + 1);
    if (strcmp(cmd, "profile") == 0) return cmd_profile(argc - 1, argv + 1);
    if (strcmp(cmd, "draft-vocab") == 0) return cmd_draft_vocab(argc - 1, argv + 1);
    if (strcmp(cmd, "quantize") == 0) return cmd_quantize(argc - 1, argv + 1);
    if (strcmp(cmd, "drafters") == 0) return cmd_drafters(argc - 1, argv + 1);
    if (strcmp(cmd, "inflate") == 0) return cmd_inflate(argc - 1, argv + 1);
    if (strcmp(cmd, "tokenize") == 0) return cmd_tokenize(argc - 1, argv + 1);
    if (strcmp(cmd, "chat-template") == 0) return cmd_chat_template(argc - 1, argv + 1);
    if (strcmp(cmd, "chat") == 0) return cmd_chat(argc - 1, argv + 1);
    if (strcmp(cmd, "serve") == 0) return cmd_serve(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("dspark 0.1.0\n");
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "dspark: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
