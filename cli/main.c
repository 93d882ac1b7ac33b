// dspark: the command-line tool. main only dispatches to one file per command.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

// The commands, in the order `dspark --help` lists them (version has no options table).
typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const cli_command *table;
    const char *summary; // (the table's, where it has one)
} command;

static const command commands[] = {
    {"generate", cmd_generate, &cli_generate_cmd, NULL},
    {"init-drafter", cmd_init_drafter, &cli_init_drafter_cmd, NULL},
    {"train", cmd_train, &cli_train_cmd, NULL},
    {"datagen", cmd_datagen, &cli_datagen_cmd, NULL},
    {"eval", cmd_eval, &cli_eval_cmd, NULL},
    {"calibrate", cmd_calibrate, &cli_calibrate_cmd, NULL},
    {"draft-vocab", cmd_draft_vocab, &cli_draft_vocab_cmd, NULL},
    {"quantize", cmd_quantize, &cli_quantize_cmd, NULL},
    {"drafters", cmd_drafters, &cli_drafters_cmd, NULL},
    {"inflate", cmd_inflate, &cli_inflate_cmd, NULL},
    {"profile", cmd_profile, &cli_profile_cmd, NULL},
    {"tokenize", cmd_tokenize, &cli_tokenize_cmd, NULL},
    {"chat", cmd_chat, &cli_chat_cmd, NULL},
    {"chat-template", cmd_chat_template, &cli_chat_template_cmd, NULL},
    {"serve", cmd_serve, &cli_serve_cmd, NULL},
    {"version", NULL, NULL, "print the version"},
};
enum { N_COMMANDS = sizeof commands / sizeof commands[0] };

static void usage(FILE *f) {
    fprintf(f, "usage: dspark <command> [options]\n\ncommands:\n");
    for (int i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-14s %s\n", commands[i].name, commands[i].table ? commands[i].table->summary : commands[i].summary);
}

// dspark help --markdown (not listed): the README's command reference, from the option tables
// (tests/cli/test_cli_reference.sh checks that the README holds exactly this).
static void reference(FILE *f) {
    fputs("```text\n", f);
    usage(f);
    fputs("```\n\n", f);
    for (int i = 0; i < N_COMMANDS; i++)
        if (commands[i].table) cli_markdown(commands[i].table, f);
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
    for (int i = 0; i < N_COMMANDS; i++)
        if (commands[i].run && !strcmp(cmd, commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("dspark 0.1.0\n");
        return 0;
    }
    if (strcmp(cmd, "help") == 0 && argc == 3 && strcmp(argv[2], "--markdown") == 0) {
        reference(stdout);
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
