// Shared helpers of the dspark command-line tool. Only cli/ prints and exits.
#ifndef DS_CLI_CLI_H
#define DS_CLI_CLI_H

#include <stdio.h>

#include "dspark.h"
#include "dspark_jobs.h"

// Print "dspark: <message>" for the last library error to stderr and return 1.
int cli_fail(ds_status st);
// The last argument `o` has no value after it: "option O needs a value" when the command's usage
// text (`usage`) lists it, else "unknown option 'O' (see dspark CMD --help)"; returns 2.
int cli_missing_value(const char *o, const char *cmd, void (*usage)(FILE *));
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

// Options shared by several commands. Each returns 1 when `o` is one of its options and `v` was
// taken, 0 when `o` is not one of them, and a negative exit status (after printing) on a bad value.
// The target and run: -m/--model, -d/--drafter, -t/--threads (1..1024), --seed (>= 0). Pass NULL
// for an option the command does not take (it then stays unknown to this function).
int cli_run_option(const char *o, const char *v, const char **model, const char **drafter, long *threads,
                   long *seed);
// Sampling: --temp --top-k --top-p --min-p --presence-penalty --frequency-penalty --logit-bias --verify.
int cli_sampling_option(const char *o, const char *v, ds_sampler_params *sp);
// Speculation: --spec --draft-max --conf-threshold --ngram --schedule --costs. `given` collects
// CLI_SPEC_GIVEN / CLI_SCHEDULE_GIVEN for cli_spec_finish.
enum { CLI_SPEC_GIVEN = 1, CLI_SCHEDULE_GIVEN = 2 };
int cli_spec_option(const char *o, const char *v, ds_spec_params *spec, ds_cost_table *costs, unsigned *given);
// Defaults once parsed (dspark with a drafter, else none; threshold with --conf-threshold) and the
// drafter checks. Returns 0 or the usage-error status.
int cli_spec_finish(ds_spec_params *spec, unsigned given, const char *drafter);
const char *cli_spec_name(ds_spec_kind k);
// The target for a command that takes text (the default model when model_arg is NULL), with
// `threads` set as the process's thread count (ds_set_threads: 0 = all cores); NULL after printing
// why (no model, a load error, no tokenizer).
ds_model *cli_load_text_model(const char *model_arg, long threads);
// A drafter paired with m (printing a target_id warning); NULL after printing the error.
ds_drafter *cli_load_drafter(const char *dir, const ds_model *m);
// --spec dspark without -d: *dir becomes the best drafter registered for m's target (by recorded
// held-out τ; src/train/registry.h), named on stderr. Returns 0, or 1 after printing the error
// (nothing registered for this target). Does nothing for other kinds or when *dir is set.
int cli_pick_drafter(const char **dir, ds_spec_kind kind, const ds_model *m);
// --register: record drafter directory `dir` in the registry (stderr says where). 0 or 1 (printed).
int cli_register_drafter(const char *dir, const char *source, int has_tau, double tau, double temp, int step);
int cmd_drafters(int argc, char **argv);
// Fail early (before minutes of work) when the directory of `file` cannot take a new file, or what
// stands at `file` is not a regular file (a FIFO, a device, a directory: see io/atomic.h).
int cli_check_writable(const char *file);

int cmd_generate(int argc, char **argv);
int cmd_init_drafter(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_datagen(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_draft_vocab(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_inflate(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_chat_template(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_serve(int argc, char **argv);

#endif
