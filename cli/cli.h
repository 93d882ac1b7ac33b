// Shared helpers of the dspark command-line tool. Only cli/ prints and exits.
#ifndef DS_CLI_CLI_H
#define DS_CLI_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dspark.h"
#include "dspark_jobs.h"

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
// A comma-separated list of 1..max temperatures in [0, 100] (an option's value) into out: their
// count, or -1 after printing the usage error for option `opt`.
int cli_parse_temps(const char *opt, const char *v, float *out, int max);
double cli_now(void); // seconds, monotonic
// A whole file as a NUL-ended string (NULL after printing why on stderr: cannot open, read error,
// out of memory, a NUL byte inside).
char *cli_read_file(const char *path);
// Set by SIGINT once cli_catch_interrupt() is installed.
extern volatile int cli_interrupted;
void cli_catch_interrupt(void);
// Generation through ds_gen_run / ds_gen_run_begun: `interrupted` (cli_interrupted; ctx unused), and
// `on_update` streaming a request's text: what became safe to show since *(size_t *)ctx (0 at the
// start) goes to stdout, flushed; call it once more after ds_gen_end for the rest.
int cli_gen_interrupted(void *ctx);
void cli_gen_show(void *ctx, long i, const ds_gen *g);

// Defaults once parsed (dspark with a drafter, else none; threshold with --conf-threshold; the
// --costs table) and the drafter checks. Returns 0 or the usage-error status.
int cli_spec_finish(ds_spec_params *spec, ds_cost_table *costs, unsigned given, const char *drafter);
const char *cli_spec_name(ds_spec_kind k);
// The model parameters every command loads a target with: `threads`, and the input rounding asked
// for by DSPARK_INT8_INPUTS=1 or 0 / DSPARK_BF16_INPUTS=1 (so `dspark profile` times the kernels that
// generate, eval and serve then run). 0, or 1 after printing which variable holds what else.
int cli_model_params(long threads, ds_model_params *out);
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

// ---- Option tables (cli/options.c): one table per command (as llama.cpp's common/arg.cpp has one
// list of options) and the one parser, validator and help printer every command uses. A table names
// each option, its value's type and range or allowed values, the field it sets in the command's
// arguments struct (by offsetof, type-checked by the CLI_AT_* macros) or a setter for the odd ones,
// and its help text; `dspark CMD --help` and the README's command reference (`dspark help
// --markdown`) are printed from the tables, and the error messages come from them.
typedef enum {
    CLI_FLAG,   // no value: stores .set into an int field
    CLI_INT,    // int field, a decimal integer in [lo, hi]
    CLI_LONG,   // long field, in [lo, hi]
    CLI_U64,    // uint64_t field, in [lo, hi] (seeds)
    CLI_FLOAT,  // float field, a finite number in [lo, hi]
    CLI_DOUBLE, // double field, in [lo, hi]
    CLI_STRING, // const char * field: the argument itself; with .choices, one of them
    CLI_ENUM,   // int-sized (enum) field: .values[i] for .choices[i]
    CLI_CALL,   // .call(field, value): lists, repeatable options, files to load
    CLI_TEXT,   // not an option: .help is a line (or lines) of the help text, printed as it is
} cli_opt_type;

enum {
    CLI_REPEATABLE = 1, // (documentation) may be given more than once, each adds
    CLI_LIST = 2,       // (documentation) a comma-separated list
    CLI_UNDOCUMENTED = 4, // for tests only: neither in --help nor in the reference
    CLI_HELP_ELSEWHERE = 8, // not a line of its own in --help (the usage line or a CLI_TEXT names it)
};

typedef struct {
    const char *names; // "-m|--model": the spellings, the first named in value errors
    const char *arg;   // the value's name in the help ("PATH"); NULL for a flag
    cli_opt_type type;
    size_t off;        // the field it sets: CLI_AT_*(ARGS, field)
    double lo, hi;     // numeric range
    const char *const *choices; // CLI_ENUM (and CLI_STRING when restricted): NULL-ended
    const int *values;          // CLI_ENUM: the value stored for each choice
    int set;                    // CLI_FLAG: the value stored
    // CLI_CALL: parse `value` into `field`; 0, or the exit status after printing why.
    int (*call)(void *field, const char *value);
    unsigned mark;     // bits ORed into the command's `given` field when the option is seen
    unsigned flags;    // CLI_REPEATABLE | CLI_LIST | CLI_UNDOCUMENTED
    const char *expects; // a bad value: "NAME expects EXPECTS, got 'V'" (default: the range)
    const char *err;     // a bad value: this printf format (one %s, the value) instead
    const char *show;  // the option's column in the help instead of "names arg"
    // The help text in the option's column ('\n' continues at the column; "" = the option alone;
    // NULL = described by the line of an option before it, not printed).
    const char *help;
} cli_opt;

typedef struct {
    const char *name;    // "generate"
    const char *summary; // one line for `dspark --help`
    const char *usage;   // the first line(s) of --help, without the final newline
    int col;             // the column the help texts start at
    const cli_opt *opts; // ended by an entry with names == NULL and type != CLI_TEXT ({0})
    size_t given_off;    // where .mark bits go (an unsigned field), when any entry has one
    // Arguments that are not options (NULL: none are taken); 0, or the exit status after printing.
    int (*positional)(void *args, const char *arg);
    const char *unknown; // printf format (one %s) for an unknown option instead of the default
} cli_command;

// Parse argv[1..argc-1] into `args` (already holding the defaults). Returns 0 to go on, CLI_HELP
// after printing --help to stdout (the command then exits 0), or the exit status after printing
// one line on stderr: "unknown option 'O' (see dspark CMD --help)", "option O needs a value",
// "NAME expects ..., got 'V'" (2), or a setter's status.
enum { CLI_HELP = -1 };
int cli_parse(const cli_command *c, int argc, char **argv, void *args);
void cli_help(const cli_command *c, FILE *f);
// The command's options as a Markdown section of the README's command reference.
void cli_markdown(const cli_command *c, FILE *f);

// Field offsets that fail to compile when the field is not of the option's type.
#define CLI_AT_(T, f, type) (offsetof(T, f) + 0 * sizeof((type *){&((T *)0)->f}))
#define CLI_AT_INT(T, f) CLI_AT_(T, f, int)
#define CLI_AT_LONG(T, f) CLI_AT_(T, f, long)
#define CLI_AT_U64(T, f) CLI_AT_(T, f, uint64_t)
#define CLI_AT_FLOAT(T, f) CLI_AT_(T, f, float)
#define CLI_AT_DOUBLE(T, f) CLI_AT_(T, f, double)
#define CLI_AT_STR(T, f) CLI_AT_(T, f, const char *)
#define CLI_AT_ENUM(T, f) (offsetof(T, f) + 0 * sizeof(char[sizeof(((T *)0)->f) == sizeof(int) ? 1 : -1]))

// Entries for the common types (designated initializers; add .expects/.show/... after them).
#define CLI_OPT_FLAG(N, T, f, H) {.names = N, .type = CLI_FLAG, .off = CLI_AT_INT(T, f), .set = 1, .help = H}
#define CLI_OPT_STR(N, A, T, f, H) {.names = N, .arg = A, .type = CLI_STRING, .off = CLI_AT_STR(T, f), .help = H}
#define CLI_OPT_INT(N, A, T, f, L, U, H) \
    {.names = N, .arg = A, .type = CLI_INT, .off = CLI_AT_INT(T, f), .lo = L, .hi = U, .help = H}
#define CLI_OPT_LONG(N, A, T, f, L, U, H) \
    {.names = N, .arg = A, .type = CLI_LONG, .off = CLI_AT_LONG(T, f), .lo = L, .hi = U, .help = H}
#define CLI_OPT_FLOAT(N, A, T, f, L, U, H) \
    {.names = N, .arg = A, .type = CLI_FLOAT, .off = CLI_AT_FLOAT(T, f), .lo = L, .hi = U, .help = H}
#define CLI_OPT_DOUBLE(N, A, T, f, L, U, H) \
    {.names = N, .arg = A, .type = CLI_DOUBLE, .off = CLI_AT_DOUBLE(T, f), .lo = L, .hi = U, .help = H}
#define CLI_OPT_TEXT(H) {.type = CLI_TEXT, .help = H}
#define CLI_SEED_MAX 9223372036854775807.0 // (as a double: the range check is done in long)

// ---- Options shared by several commands: table entries (the help text, or .show, comes after, as
// designated initializers). The target and run: -m/--model, -d/--drafter, -t/--threads, --seed.
#define CLI_OPT_MODEL(T, f, ...) {.names = "-m|--model", .arg = "PATH", .type = CLI_STRING, .off = CLI_AT_STR(T, f), __VA_ARGS__}
#define CLI_OPT_DRAFTER(T, f, ...) \
    {.names = "-d|--drafter", .arg = "DIR", .type = CLI_STRING, .off = CLI_AT_STR(T, f), __VA_ARGS__}
#define CLI_OPT_THREADS(T, f, ...) \
    {.names = "-t|--threads", .arg = "N", .type = CLI_LONG, .off = CLI_AT_LONG(T, f), .lo = 1, .hi = 1024, __VA_ARGS__}
// TYPE: LONG or U64.
#define CLI_OPT_SEED(T, f, TYPE, ...)                                                                          \
    {.names = "--seed", .arg = "S", .type = CLI_##TYPE, .off = CLI_AT_##TYPE(T, f), .lo = 0, .hi = CLI_SEED_MAX, \
     .expects = "a non-negative integer", __VA_ARGS__}
// Sampling, into the ds_sampler_params at SP (give --logit-bias its .flags = CLI_REPEATABLE).
#define CLI_OPT_TEMP(T, SP, ...)                                                                               \
    {.names = "--temp", .arg = "T", .type = CLI_FLOAT, .off = CLI_AT_FLOAT(T, SP.temperature), .lo = 0, .hi = 100, \
     .expects = "0..100", __VA_ARGS__}
#define CLI_OPT_TOP_K(T, SP, ...)                                                                              \
    {.names = "--top-k", .arg = "K", .type = CLI_INT, .off = CLI_AT_INT(T, SP.top_k), .lo = 0, .hi = 1 << 24,   \
     .expects = "a count", __VA_ARGS__}
#define CLI_OPT_TOP_P(T, SP, ...)                                                                              \
    {.names = "--top-p", .arg = "P", .type = CLI_FLOAT, .off = CLI_AT_FLOAT(T, SP.top_p), .lo = 1e-6, .hi = 1,  \
     .expects = "(0, 1]", __VA_ARGS__}
#define CLI_OPT_MIN_P(T, SP, ...)                                                                              \
    {.names = "--min-p", .arg = "M", .type = CLI_FLOAT, .off = CLI_AT_FLOAT(T, SP.min_p), .lo = 0, .hi = 1,     \
     .expects = "[0, 1]", __VA_ARGS__}
#define CLI_OPT_PENALTIES(T, SP, ...)                                                                          \
    {.names = "--presence-penalty", .arg = "P", .type = CLI_FLOAT, .off = CLI_AT_FLOAT(T, SP.presence_penalty),  \
     .lo = -2, .hi = 2, .expects = "-2..2", __VA_ARGS__},                                                      \
    {.names = "--frequency-penalty", .arg = "F", .type = CLI_FLOAT, .off = CLI_AT_FLOAT(T, SP.frequency_penalty), \
     .lo = -2, .hi = 2, .expects = "-2..2"}
#define CLI_OPT_LOGIT_BIAS(T, SP, ...)                                                                         \
    {.names = "--logit-bias", .arg = "ID:B", .type = CLI_CALL, .off = offsetof(T, SP), .call = cli_set_logit_bias, \
     .expects = "TOKEN_ID:BIAS with BIAS in -100..100", __VA_ARGS__}
#define CLI_OPT_VERIFY(T, f, ...)                                                                              \
    {.names = "--verify", .arg = "RULE", .type = CLI_ENUM, .off = CLI_AT_ENUM(T, f), .choices = cli_verify_names,  \
     .values = cli_verify_kinds, __VA_ARGS__}
// Speculation, into the ds_spec_params at SPEC (and the command's `given` bits).
enum { CLI_SPEC_GIVEN = 1, CLI_SCHEDULE_GIVEN = 2, CLI_COSTS_GIVEN = 4 };
#define CLI_OPT_SPEC(T, SPEC, ...)                                                                             \
    {.names = "--spec", .arg = "KIND", .type = CLI_ENUM, .off = CLI_AT_ENUM(T, SPEC.kind), .choices = cli_spec_names, \
     .values = cli_spec_kinds, .mark = CLI_SPEC_GIVEN, __VA_ARGS__}
#define CLI_OPT_DRAFT_MAX(T, SPEC, ...) \
    {.names = "--draft-max", .arg = "K", .type = CLI_INT, .off = CLI_AT_INT(T, SPEC.draft_max), .lo = 1, .hi = 64, __VA_ARGS__}
#define CLI_OPT_CONF_THRESHOLD(T, SPEC, ...)                                                                   \
    {.names = "--conf-threshold", .arg = "C", .type = CLI_FLOAT, .off = CLI_AT_FLOAT(T, SPEC.conf_threshold),   \
     .lo = 0, .hi = 1, .expects = "[0, 1]", __VA_ARGS__}
#define CLI_OPT_NGRAM(T, SPEC, ...) \
    {.names = "--ngram", .arg = "N", .type = CLI_INT, .off = CLI_AT_INT(T, SPEC.ngram_n), .lo = 1, .hi = 64, __VA_ARGS__}
#define CLI_OPT_TREE(T, SPEC, ...) \
    {.names = "--tree", .arg = "N", .type = CLI_INT, .off = CLI_AT_INT(T, SPEC.tree_branches), .lo = 0, .hi = 16, __VA_ARGS__}
#define CLI_OPT_TREE_DEPTH(T, SPEC, ...)                                                                       \
    {.names = "--tree-depth", .arg = "D", .type = CLI_INT, .off = CLI_AT_INT(T, SPEC.tree_depth), .lo = 1, .hi = 63, \
     __VA_ARGS__}
#define CLI_OPT_SCHEDULE(T, SPEC, ...)                                                                         \
    {.names = "--schedule", .arg = "S", .type = CLI_ENUM, .off = CLI_AT_ENUM(T, SPEC.schedule),                 \
     .choices = cli_schedule_names, .values = cli_schedule_kinds, .mark = CLI_SCHEDULE_GIVEN, __VA_ARGS__}
#define CLI_OPT_CACHE_MB(T, SPEC, ...)                                                                         \
    {.names = "--cache-mb", .arg = "N", .type = CLI_CALL, .off = CLI_AT_(T, SPEC.prompt_cache_bytes, size_t),   \
     .call = cli_set_cache_mb, .expects = "0..1048576", __VA_ARGS__}
#define CLI_OPT_COSTS(T, f, ...)                                                                               \
    {.names = "--costs", .arg = "FILE", .type = CLI_CALL, .off = CLI_AT_(T, f, ds_cost_table), .call = cli_set_costs, \
     .mark = CLI_COSTS_GIVEN, __VA_ARGS__}
// A fresh drafter's shape, into the ds_drafter_init_params at P (init-drafter, train).
#define CLI_OPT_LAYERS(T, P, ...) \
    {.names = "--layers", .arg = "N", .type = CLI_INT, .off = CLI_AT_INT(T, P.n_layers), .lo = 1, .hi = 64, __VA_ARGS__}
#define CLI_OPT_BLOCK(T, P, ...) \
    {.names = "--block", .arg = "B", .type = CLI_INT, .off = CLI_AT_INT(T, P.block_size), .lo = 1, .hi = 64, __VA_ARGS__}
#define CLI_OPT_MARKOV_RANK(T, P, ...)                                                                         \
    {.names = "--markov-rank", .arg = "R", .type = CLI_INT, .off = CLI_AT_INT(T, P.markov_rank), .lo = 0, .hi = 65536, \
     __VA_ARGS__}
#define CLI_OPT_MARKOV_HEAD(T, P, ...)                                                                         \
    {.names = "--markov-head", .arg = "H", .type = CLI_STRING, .off = CLI_AT_STR(T, P.markov_head),             \
     .choices = cli_markov_head_names, __VA_ARGS__}
#define CLI_OPT_TAPS(T, P, ...)                                                                                \
    {.names = "--taps", .arg = "L1,L2,..", .type = CLI_CALL, .off = offsetof(T, P), .call = cli_set_taps,      \
     .flags = CLI_LIST, .expects = "layer ids", __VA_ARGS__}
#define CLI_OPT_NO_CONFIDENCE(T, P, ...) \
    {.names = "--no-confidence", .type = CLI_FLAG, .off = CLI_AT_INT(T, P.confidence), .set = 0, __VA_ARGS__}
extern const char *const cli_markov_head_names[];
// --taps L1,L2,..: at most 64 layer ids in -1..4096 (P.tap_layers then points to static storage).
int cli_set_taps(void *drafter_init_params, const char *v);
extern const char *const cli_spec_names[], *const cli_schedule_names[], *const cli_verify_names[];
extern const int cli_spec_kinds[], cli_schedule_kinds[], cli_verify_kinds[];
// The setters behind them (cli_opt.call).
int cli_set_logit_bias(void *sampler_params, const char *v);
int cli_set_cache_mb(void *size_t_bytes, const char *v);
int cli_set_costs(void *cost_table, const char *v);

// The tables of the commands (dspark help --markdown prints them all).
extern const cli_command cli_generate_cmd, cli_init_drafter_cmd, cli_train_cmd, cli_datagen_cmd, cli_eval_cmd,
    cli_calibrate_cmd, cli_profile_cmd, cli_draft_vocab_cmd, cli_quantize_cmd, cli_drafters_cmd, cli_inflate_cmd,
    cli_tokenize_cmd, cli_chat_template_cmd, cli_chat_cmd, cli_serve_cmd;

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
