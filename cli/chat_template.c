// dspark chat-template: render a conversation with a Jinja chat template as transformers'
// apply_chat_template does, and print the text exactly (no newline added).
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void ct_usage(FILE *f) {
    fprintf(f,
            "usage: dspark chat-template --template FILE --messages FILE.json [options]\n"
            "  --template FILE        the Jinja chat template (e.g. a model's chat_template as a .jinja file)\n"
            "  --messages FILE.json   a JSON array of OpenAI-style messages (role, content, tool_calls, ...)\n"
            "  --tools FILE.json      a JSON array of tools ({\"type\": \"function\", \"function\": {...}})\n"
            "  --kwargs JSON          further template variables, e.g. '{\"enable_thinking\": false}'\n"
            "  --bos S, --eos S       the bos_token / eos_token strings (undefined when not given)\n"
            "  --no-generation-prompt do not open the assistant's turn (add_generation_prompt=False)\n"
            "Prints the rendered text exactly as it is.\n");
}

// The whole file, NUL-ended (NULL with a message on stderr).
static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "dspark: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t n = 0, cap = 4096;
    char *b = malloc(cap);
    for (size_t got; b && (got = fread(b + n, 1, cap - n - 1, f)) > 0;) {
        n += got;
        if (n + 1 == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) free(b);
            b = nb;
        }
    }
    const int err = ferror(f);
    fclose(f);
    if (!b || err) {
        free(b);
        fprintf(stderr, "dspark: %s: %s\n", path, b ? "read error" : "out of memory");
        return NULL;
    }
    b[n] = 0;
    if (strlen(b) != n) {
        free(b);
        fprintf(stderr, "dspark: %s: the file holds a NUL byte\n", path);
        return NULL;
    }
    return b;
}

int cmd_chat_template(int argc, char **argv) {
    const char *tpath = NULL, *mpath = NULL, *topath = NULL, *kwargs = NULL, *bos = NULL, *eos = NULL;
    int gen = 1;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        const char **dst = !strcmp(o, "--template") ? &tpath : !strcmp(o, "--messages") ? &mpath : !strcmp(o, "--tools") ? &topath
                         : !strcmp(o, "--kwargs") ? &kwargs : !strcmp(o, "--bos") ? &bos : !strcmp(o, "--eos") ? &eos : NULL;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            ct_usage(stdout);
            return 0;
        } else if (!strcmp(o, "--no-generation-prompt")) {
            gen = 0;
        } else if (dst) {
            if (i + 1 >= argc) return cli_usage_error("option %s needs a value", o);
            *dst = argv[++i];
        } else {
            return cli_usage_error("unknown argument '%s' (see dspark chat-template --help)", o);
        }
    }
    if (!tpath || !mpath) return cli_usage_error("chat-template needs --template FILE and --messages FILE.json");
    char *src = slurp(tpath), *msgs = src ? slurp(mpath) : NULL, *tools = msgs && topath ? slurp(topath) : NULL;
    int rc = 1;
    ds_chat_template *t = NULL;
    char *out = NULL;
    ds_status st;
    if (!src || !msgs || (topath && !tools)) goto done;
    if ((st = ds_chat_template_init(src, bos, eos, tpath, &t))) {
        rc = cli_fail(st);
        goto done;
    }
    if ((st = ds_chat_template_render(t, msgs, tools, kwargs, gen, &out))) {
        // JSON problems name the file they came from; template errors name the template already
        const char *e = ds_last_error();
        const char *which = strstr(e, "messages") == e + 15 ? mpath : strstr(e, "tools") == e + 15 ? topath
                          : strstr(e, "kwargs") == e + 15 ? "--kwargs" : NULL;
        if (which && !strncmp(e, "chat template: ", 15)) fprintf(stderr, "dspark: %s: %s\n", which, e + 15);
        else fprintf(stderr, "dspark: %s\n", e);
        goto done;
    }
    fwrite(out, 1, strlen(out), stdout);
    rc = fflush(stdout) ? 1 : 0;
done:
    free(out);
    ds_chat_template_free(t);
    free(src);
    free(msgs);
    free(tools);
    return rc;
}
