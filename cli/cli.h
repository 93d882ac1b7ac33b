// Shared helpers of the dspark command-line tool. Only cli/ prints and exits.
#ifndef DS_CLI_CLI_H
#define DS_CLI_CLI_H

#include "dspark.h"

// Print "dspark: <message>" for the last library error to stderr and return 1.
int cli_fail(ds_status st);
// Print a usage/argument error to stderr and return 2.
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// The model path: `given` if non-NULL, else the default stories260K model if it exists, else NULL
// (after printing how to get one).
const char *cli_model_path(const char *given);
// Strict number parsing for option values; returns 0 on malformed input.
int cli_parse_int(const char *s, long lo, long hi, long *out);
int cli_parse_float(const char *s, double lo, double hi, double *out);
double cli_now(void); // seconds, monotonic
// Set by SIGINT once cli_catch_interrupt() is installed.
extern volatile int cli_interrupted;
void cli_catch_interrupt(void);

int cmd_generate(int argc, char **argv);
int cmd_init_drafter(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_datagen(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);
int cmd_profile(int argc, char **argv);

#endif
