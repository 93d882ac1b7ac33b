// dspark: the command-line tool. main only dispatches to one file per command.
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: dspark <command> [options]\n"
            "\n"
            "commands:\n"
            "  generate   generate text from a prompt (dspark generate --help)\n"
            "  version    print the version\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "generate") == 0) return cmd_generate(argc - 1, argv + 1);
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
