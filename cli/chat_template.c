// dspark chat-template: render a conversation with a Jinja chat template as transformers'
// apply_chat_template does, and print the text exactly (no newline added).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct {
    const char *template, *messages, *tools, *kwargs, *bos, *eos;
    int generation_prompt; // 0 with --no-generation-prompt
} ct_args;

#define A ct_args
static const cli_opt ct_opts[] = {
    CLI_OPT_STR("--template", "FILE", A, template, "the Jinja chat template (e.g. a model's chat_template as a .jinja file)"),
    CLI_OPT_STR("--messages", "FILE.json", A, messages,
                "a JSON array of OpenAI-style messages (role, content, tool_calls, ...)"),
    CLI_OPT_STR("--tools", "FILE.json", A, tools, "a JSON array of tools ({\"type\": \"function\", \"function\": {...}})"),
    CLI_OPT_STR("--kwargs", "JSON", A, kwargs, "further template variables, e.g. '{\"enable_thinking\": false}'"),
    {.names = "--bos", .arg = "S", .type = CLI_STRING, .off = CLI_AT_STR(A, bos), .show = "--bos S, --eos S",
     .help = "the bos_token / eos_token strings (undefined when not given)"},
    CLI_OPT_STR("--eos", "S", A, eos, NULL),
    {.names = "--no-generation-prompt", .type = CLI_FLAG, .off = CLI_AT_INT(A, generation_prompt), .set = 0,
     .help = "do not open the assistant's turn (add_generation_prompt=False)"},
    CLI_OPT_TEXT("Prints the rendered text exactly as it is."),
    {0},
};
#undef A

const cli_command cli_chat_template_cmd = {.name = "chat-template",
    .summary = "render a conversation with a Jinja chat template (as transformers does)",
    .usage = "usage: dspark chat-template --template FILE --messages FILE.json [options]", .col = 25, .opts = ct_opts,
    .unknown = "unknown argument '%s' (see dspark chat-template --help)"};

int cmd_chat_template(int argc, char **argv) {
    ct_args a = {.generation_prompt = 1};
    const int prc = cli_parse(&cli_chat_template_cmd, argc, argv, &a);
    if (prc) return prc == CLI_HELP ? 0 : prc;
    const char *tpath = a.template, *mpath = a.messages, *topath = a.tools, *kwargs = a.kwargs, *bos = a.bos, *eos = a.eos;
    const int gen = a.generation_prompt;
    if (!tpath || !mpath) return cli_usage_error("chat-template needs --template FILE and --messages FILE.json");
    char *src = cli_read_file(tpath), *msgs = src ? cli_read_file(mpath) : NULL, *tools = msgs && topath ? cli_read_file(topath) : NULL;
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
