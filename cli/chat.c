#include "cli.h"
int cmd_chat(int argc, char **argv) { (void)argc; (void)argv; return 2; }
