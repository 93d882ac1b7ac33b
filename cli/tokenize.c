// dspark tokenize: text -> JSON id array, or (--decode) a JSON id array -> text.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

// A token id in a JSON array: an integer number in int32 range (checked before any conversion).
static int is_id(const cJSON *v) {
    return cJSON_IsNumber(v) && v->valuedouble >= INT32_MIN && v->valuedouble <= INT32_MAX &&
           v->valuedouble == floor(v->valuedouble);
}

typedef struct {
    const char *model, *tokenizer, *text;
    int no_special, decode; // --no-special, --decode
} tok_args;

static int take_text(void *args, const char *arg) {
    tok_args *a = args;
    if (a->text) return cli_usage_error("tokenize takes one TEXT argument");
    a->text = arg;
    return 0;
}

#define A tok_args
static const cli_opt tok_opts[] = {
    CLI_OPT_MODEL(A, model, .help = "a model (.gguf file or Hugging Face directory) whose tokenizer to use"),
    CLI_OPT_STR("--tokenizer", "PATH", A, tokenizer,
                "tokenizer.json, a directory holding it (+ tokenizer_config.json), or a .gguf"),
    CLI_OPT_FLAG("--no-special", A, no_special, "encode: do not add the special tokens the tokenizer's configuration adds\n"
                                                "(e.g. <bos>); decode: leave special tokens out of the text"),
    CLI_OPT_FLAG("--decode", A, decode, "TEXT is a JSON array of ids; print the text they decode to"),
    CLI_OPT_TEXT("Prints the ids as a JSON array (special tokens written in TEXT, like <|im_start|>, are parsed)."),
    {0},
};
#undef A

const cli_command cli_tokenize_cmd = {.name = "tokenize",
    .summary = "text -> token ids (or --decode ids -> text) with a model's or a standalone tokenizer",
    .usage = "usage: dspark tokenize (-m MODEL | --tokenizer PATH) [--no-special] [--decode] TEXT", .col = 23,
    .opts = tok_opts, .positional = take_text};

int cmd_tokenize(int argc, char **argv) {
    tok_args a = {0};
    const int prc = cli_parse(&cli_tokenize_cmd, argc, argv, &a);
    if (prc) return prc == CLI_HELP ? 0 : prc;
    const char *model = a.model, *tokp = a.tokenizer, *text = a.text;
    const int no_special = a.no_special, decode = a.decode;
    if (!text) return cli_usage_error("tokenize needs a TEXT argument");
    if (!!model == !!tokp) return cli_usage_error("tokenize needs exactly one of -m MODEL or --tokenizer PATH");

    ds_model *m = NULL;
    ds_tokenizer *own = NULL;
    const ds_tokenizer *tok;
    ds_status st;
    if (model) {
        if (!(m = cli_load_text_model(model, 1))) return 1;
        tok = ds_model_tokenizer(m);
    } else {
        if ((st = ds_tokenizer_load(tokp, &own))) return cli_fail(st);
        tok = own;
    }
    int rc = 0;
    if (decode) {
        cJSON *arr = cJSON_Parse(text);
        int n = cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : -1;
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
        const cJSON *it;
        int k = 0;
        cJSON_ArrayForEach(it, arr) {
            if (!is_id(it)) n = -1;
            else if (ids) ids[k++] = (int32_t)it->valuedouble;
        }
        cJSON_Delete(arr);
        if (n < 0 || !ids) {
            free(ids);
            rc = cli_usage_error("--decode expects a JSON array of integer ids");
        } else {
            char *s;
            size_t len;
            if ((st = ds_detokenize(tok, ids, n, no_special, &s, &len))) rc = cli_fail(st);
            else {
                fwrite(s, 1, len, stdout);
                putchar('\n');
                free(s);
            }
            free(ids);
        }
    } else {
        unsigned flags = DS_TOK_PARSE_SPECIAL | (no_special ? 0 : DS_TOK_ADD_SPECIAL);
        int n = 0;
        int32_t *ids = NULL;
        if ((st = ds_tokenize_ex(tok, text, strlen(text), flags, NULL, 0, &n)) ||
            !(ids = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1))) ||
            (st = ds_tokenize_ex(tok, text, strlen(text), flags, ids, n, &n))) {
            rc = ids || st ? cli_fail(st) : (fprintf(stderr, "dspark: out of memory\n"), 1);
        } else {
            putchar('[');
            for (int i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
            printf("]\n");
        }
        free(ids);
    }
    ds_tokenizer_free(own);
    ds_model_free(m);
    return rc;
}
