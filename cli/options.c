// The one option parser, validator, --help printer and Markdown reference writer of the command
// line tool: every command describes its options in a table (cli_command, cli.h) and calls
// cli_parse; nothing else in cli/ walks argv.
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static int is_option(const cli_opt *o) { return o->type != CLI_TEXT; }
static int at_end(const cli_opt *o) { return !o->names && o->type != CLI_TEXT; }

// Does `arg` spell one of o's names ("-m|--model")?
static int has_name(const cli_opt *o, const char *arg) {
    const size_t n = strlen(arg);
    for (const char *s = o->names; s && *s;) {
        const size_t len = strcspn(s, "|");
        if (len == n && !strncmp(s, arg, n)) return 1;
        s += len + (s[len] == '|');
    }
    return 0;
}

static const cli_opt *find(const cli_command *c, const char *arg) {
    for (const cli_opt *o = c->opts; !at_end(o); o++)
        if (is_option(o) && has_name(o, arg)) return o;
    return NULL;
}

// The first spelling, the one value errors name.
static void first_name(const cli_opt *o, char *buf, size_t cap) {
    snprintf(buf, cap, "%.*s", (int)strcspn(o->names, "|"), o->names);
}

// "a", "a or b", "a, b or c"
static void choices_text(const char *const *ch, char *buf, size_t cap) {
    size_t n = 0, len = 0;
    while (ch[n]) n++;
    buf[0] = 0;
    for (size_t i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", i == 0 ? "" : i + 1 == n ? " or " : ", ", ch[i]);
}

static long to_long(double x) { return x >= (double)LONG_MAX ? LONG_MAX : x <= (double)LONG_MIN ? LONG_MIN : (long)x; }

// What a value of `o` must be, for errors and the reference ("" when anything goes).
static void expects_text(const cli_opt *o, char *buf, size_t cap) {
    buf[0] = 0;
    if (o->expects) snprintf(buf, cap, "%s", o->expects);
    else if (o->choices) choices_text(o->choices, buf, cap);
    else if (o->type == CLI_INT || o->type == CLI_LONG || o->type == CLI_U64)
        snprintf(buf, cap, "%ld..%ld", to_long(o->lo), to_long(o->hi));
    else if (o->type == CLI_FLOAT || o->type == CLI_DOUBLE) snprintf(buf, cap, "a number in [%g, %g]", o->lo, o->hi);
}

static int bad_value(const cli_opt *o, const char *v) {
    if (o->err) return cli_usage_error(o->err, v);
    char name[64], ex[256];
    first_name(o, name, sizeof name);
    expects_text(o, ex, sizeof ex);
    return cli_usage_error("%s expects %s, got '%s'", name, ex, v);
}

static int choice_index(const char *const *ch, const char *v) {
    for (int i = 0; ch[i]; i++)
        if (!strcmp(ch[i], v)) return i;
    return -1;
}

// Store `v` (NULL for a flag) into o's field of `args`; 0 or the exit status after printing.
static int set_value(const cli_opt *o, void *args, const char *v) {
    void *field = (char *)args + o->off;
    long n;
    double f;
    const int is_int = o->type == CLI_INT || o->type == CLI_LONG || o->type == CLI_U64;
    if (is_int && !cli_parse_int(v, to_long(o->lo), to_long(o->hi), &n)) return bad_value(o, v);
    if ((o->type == CLI_FLOAT || o->type == CLI_DOUBLE) && !cli_parse_float(v, o->lo, o->hi, &f)) return bad_value(o, v);
    const int k = o->choices ? choice_index(o->choices, v) : 0;
    if (k < 0) return bad_value(o, v);
    switch (o->type) {
    case CLI_FLAG: *(int *)field = o->set; break;
    case CLI_INT: *(int *)field = (int)n; break;
    case CLI_LONG: *(long *)field = n; break;
    case CLI_U64: *(uint64_t *)field = (uint64_t)n; break;
    case CLI_FLOAT: *(float *)field = (float)f; break;
    case CLI_DOUBLE: *(double *)field = f; break;
    case CLI_STRING: *(const char **)field = v; break;
    case CLI_ENUM: *(int *)field = o->values[k]; break;
    case CLI_CALL: return o->call(field, v);
    case CLI_TEXT: break;
    }
    return 0;
}

static int unknown(const cli_command *c, const char *arg) {
    if (c->unknown) return cli_usage_error(c->unknown, arg);
    return cli_usage_error("unknown option '%s' (see dspark %s --help)", arg, c->name);
}

int cli_parse(const cli_command *c, int argc, char **argv, void *args) {
    int only_positional = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const cli_opt *o = only_positional ? NULL : find(c, a);
        if (!only_positional && (!strcmp(a, "-h") || !strcmp(a, "--help"))) {
            cli_help(c, stdout);
            return CLI_HELP;
        }
        if (!only_positional && c->positional && !strcmp(a, "--")) {
            only_positional = 1;
            continue;
        }
        if (!o) {
            const int looks_like_option = a[0] == '-' && a[1] && !only_positional;
            if (looks_like_option || !c->positional) return unknown(c, a);
            const int rc = c->positional(args, a);
            if (rc) return rc;
            continue;
        }
        if (o->type != CLI_FLAG && i + 1 >= argc) return cli_usage_error("option %s needs a value", a);
        const int rc = set_value(o, args, o->type == CLI_FLAG ? NULL : argv[++i]);
        if (rc) return rc;
        if (o->mark) *(unsigned *)((char *)args + c->given_off) |= o->mark;
    }
    return 0;
}

// The option's column: .show, or "names arg" with "-m|--model" written "-m, --model".
static void option_column(const cli_opt *o, char *buf, size_t cap) {
    if (o->show) {
        snprintf(buf, cap, "%s", o->show);
        return;
    }
    size_t len = 0;
    for (const char *s = o->names; *s && len + 3 < cap; s++) {
        if (*s == '|') buf[len++] = ',', buf[len++] = ' ';
        else buf[len++] = *s;
    }
    buf[len] = 0;
    if (o->arg) snprintf(buf + len, cap - len, " %s", o->arg);
}

void cli_help(const cli_command *c, FILE *f) {
    fprintf(f, "%s\n", c->usage);
    for (const cli_opt *o = c->opts; !at_end(o); o++) {
        if (o->type == CLI_TEXT) {
            fprintf(f, "%s\n", o->help);
            continue;
        }
        if (!o->help || (o->flags & (CLI_UNDOCUMENTED | CLI_HELP_ELSEWHERE))) continue;
        char col[256];
        option_column(o, col, sizeof col);
        int len = fprintf(f, "  %s", col);
        if (!*o->help) {
            fputc('\n', f);
            continue;
        }
        if (o->help[0] != '\n') fprintf(f, "%*s", len + 1 < c->col ? c->col - len : 1, "");
        for (const char *s = o->help; *s; s++) {
            fputc(*s, f);
            if (*s == '\n') fprintf(f, "%*s", c->col, "");
        }
        fputc('\n', f);
    }
}

// ---- the README's command reference -------------------------------------------------------------

// A table cell: '|' escaped, a line break and the indentation after it as one space.
static void cell(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '\n') {
            while (s[1] == ' ') s++;
            fputc(' ', f);
        } else {
            if (*s == '|') fputc('\\', f);
            fputc(*s, f);
        }
    }
}

static void markdown_row(const cli_opt *o, const cli_opt *described_by, FILE *f) {
    fputs("| ", f);
    for (const char *s = o->names; *s;) {
        const size_t len = strcspn(s, "|");
        fprintf(f, "%s`%.*s`", s == o->names ? "" : ", ", (int)len, s);
        s += len + (s[len] == '|');
    }
    if (o->arg) {
        fputc(' ', f);
        cell(f, o->arg);
    }
    char ex[256];
    expects_text(o, ex, sizeof ex);
    fputs(" | ", f);
    cell(f, o->type == CLI_FLAG ? "flag" : *ex ? ex : "text");
    if (o->flags & CLI_REPEATABLE) fputs(", repeatable", f);
    if (o->flags & CLI_LIST) fputs(", comma-separated", f);
    fputs(" | ", f);
    if (o->help && *o->help) cell(f, o->help + strspn(o->help, " \n"));
    else if (!o->help && described_by) {
        char name[64];
        first_name(described_by, name, sizeof name);
        fprintf(f, "with `%s`", name);
    }
    fputs(" |\n", f);
}

void cli_markdown(const cli_command *c, FILE *f) {
    fprintf(f, "#### dspark %s\n\n```text\n%s\n```\n\n", c->name, c->usage);
    const cli_opt *last = NULL;
    int rows = 0, texts = 0;
    for (const cli_opt *o = c->opts; !at_end(o); o++) {
        if (o->type == CLI_TEXT) {
            texts++;
            continue;
        }
        const int undocumented = (o->flags & CLI_UNDOCUMENTED) || (!o->help && !last);
        if (undocumented) last = NULL; // (and the options described with it)
        if (undocumented) continue;
        if (!rows++) fputs("| option | value | description |\n| --- | --- | --- |\n", f);
        markdown_row(o, last, f);
        if (o->help) last = o;
    }
    if (texts) {
        fputs(rows ? "\n" : "", f);
        for (const cli_opt *o = c->opts; !at_end(o); o++) {
            if (o->type != CLI_TEXT) continue;
            const char *s = o->help;
            while (*s == ' ') s++;
            cell(f, s);
            fputc('\n', f);
        }
    }
    fputc('\n', f);
}
