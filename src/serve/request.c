// OpenAI request bodies -> ds_oa_request: every field type- and range-checked; prompts tokenized
// (text with BOS, as `dspark generate` does; chat through the model's chat template,
// ds_chat_render_json, with tools, tool calls and tool results in the history).
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "io/json.h"
#include "serve/server.h"
#include "tokenizer/utf8.h"

// A field that is absent or JSON null counts as not given (OpenAI clients send nulls).
static const cJSON *field(const cJSON *o, const char *name) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
    return f && !cJSON_IsNull(f) ? f : NULL;
}

static ds_status bad(const char **param, const char *name, const char *fmt, const char *what) {
    *param = name;
    return ds_fail(DS_ERR_INVALID, fmt, what);
}

static ds_status get_number(const cJSON *o, const char *name, double lo, double hi, int lo_open, double *v,
                            const char **param) {
    const cJSON *f = field(o, name);
    if (!f) return DS_OK;
    if (!cJSON_IsNumber(f)) return bad(param, name, "'%s' must be a number", name);
    const double x = f->valuedouble;
    if (!isfinite(x) || x < lo || x > hi || (lo_open && x == lo)) {
        *param = name;
        return ds_fail(DS_ERR_INVALID, "'%s' must be in %s%g, %g]", name, lo_open ? "(" : "[", lo, hi);
    }
    *v = x;
    return DS_OK;
}

static ds_status get_bool(const cJSON *o, const char *name, int *v, const char **param) {
    const cJSON *f = field(o, name);
    if (!f) return DS_OK;
    if (!cJSON_IsBool(f)) return bad(param, name, "'%s' must be a boolean", name);
    *v = cJSON_IsTrue(f);
    return DS_OK;
}

static ds_status get_int(const cJSON *o, const char *name, double lo, double hi, double *v, const char **param) {
    const cJSON *f = field(o, name);
    if (!f) return DS_OK;
    if (!cJSON_IsNumber(f) || f->valuedouble != floor(f->valuedouble))
        return bad(param, name, "'%s' must be an integer", name);
    return get_number(o, name, lo, hi, 0, v, param);
}

static int utf8_ok(const char *s) {
    size_t off;
    return ds_utf8_valid((const uint8_t *)s, strlen(s), &off);
}

// Append a prompt (its ids are taken over) to r->prompts.
static ds_status add_prompt(ds_oa_request *r, int32_t *ids, int n) {
    if (r->n_prompts == DS_OA_MAX_CHOICES) {
        free(ids);
        return ds_fail(DS_ERR_INVALID, "a request takes at most %d prompts", DS_OA_MAX_CHOICES);
    }
    int32_t **np = realloc(r->prompts, sizeof *np * (size_t)(r->n_prompts + 1));
    if (np) r->prompts = np;
    int *nn = np ? realloc(r->n_prompt, sizeof *nn * (size_t)(r->n_prompts + 1)) : NULL;
    if (nn) r->n_prompt = nn;
    char **pt = nn ? realloc(r->prompt_text, sizeof *pt * (size_t)(r->n_prompts + 1)) : NULL;
    if (pt) r->prompt_text = pt;
    if (!pt) {
        free(ids);
        return ds_fail(DS_ERR_NOMEM, "out of memory");
    }
    r->prompts[r->n_prompts] = ids;
    r->prompt_text[r->n_prompts] = NULL; // filled for echo
    r->n_prompt[r->n_prompts++] = n;
    r->prompt_tokens += n;
    return DS_OK;
}

static ds_status tokenize(const ds_model *m, const char *text, ds_oa_request *r, const char *name,
                          const char **param) {
    const ds_tokenizer *tok = ds_model_tokenizer(m);
    const size_t len = strlen(text);
    int n = 0;
    if (!utf8_ok(text)) return bad(param, name, "'%s' is not valid UTF-8", name);
    ds_status st = ds_tokenize(tok, text, len, 1, NULL, 0, &n);
    if (st) {
        *param = name;
        return ds_fail_prefix(st, "%s", name);
    }
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    if (!ids) return ds_fail(DS_ERR_NOMEM, "out of memory");
    if ((st = ds_tokenize(tok, text, len, 1, ids, n, &n))) {
        free(ids);
        return st;
    }
    if ((st = add_prompt(r, ids, n))) *param = name;
    if (!st && !r->chat && !(r->prompt_text[r->n_prompts - 1] = strdup(text))) // the text echo gives back
        return ds_fail(DS_ERR_NOMEM, "out of memory");
    return st;
}

// A prompt of token ids (a JSON array of integers).
static ds_status token_prompt(const cJSON *p, const ds_model *m, ds_oa_request *r, const char **param) {
    const int n = cJSON_GetArraySize(p), V = ds_model_get_info(m)->vocab_size;
    if (n < 1) return bad(param, "prompt", "'%s' holds an empty array of token ids", "prompt");
    if (n > ds_model_get_info(m)->max_ctx) return bad(param, "prompt", "'%s' is longer than the model's context", "prompt");
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    if (!ids) return ds_fail(DS_ERR_NOMEM, "out of memory");
    int i = 0;
    for (const cJSON *t = p->child; t; t = t->next, i++) {
        if (!ds_json_is_int(t, 0, V - 1)) {
            free(ids);
            *param = "prompt";
            return ds_fail(DS_ERR_INVALID, "'prompt' token ids must be integers in 0..%d", V - 1);
        }
        ids[i] = (int32_t)t->valuedouble;
    }
    ds_status st = add_prompt(r, ids, n);
    if (st) *param = "prompt";
    if (!st && (st = ds_detokenize(ds_model_tokenizer(m), ids, n, 1, &r->prompt_text[r->n_prompts - 1], NULL)))
        r->prompt_text[r->n_prompts - 1] = NULL; // (echo's text for token ids)
    return st;
}

// `prompt`: a string, an array of token ids, or a batch: an array of strings or of token-id arrays.
static ds_status parse_prompt(const cJSON *root, const ds_model *m, ds_oa_request *r, const char **param) {
    const cJSON *p = field(root, "prompt");
    if (!p) return bad(param, "prompt", "'%s' is required", "prompt");
    if (cJSON_IsString(p)) return tokenize(m, p->valuestring, r, "prompt", param);
    if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) < 1)
        return bad(param, "prompt",
                   "'%s' must be a string, an array of strings, an array of token ids or an array of such arrays",
                   "prompt");
    const cJSON *first = cJSON_GetArrayItem(p, 0);
    if (cJSON_IsNumber(first)) return token_prompt(p, m, r, param);
    ds_status st = DS_OK;
    for (const cJSON *e = p->child; e && !st; e = e->next) {
        if (cJSON_IsString(e) && cJSON_IsString(first)) st = tokenize(m, e->valuestring, r, "prompt", param);
        else if (cJSON_IsArray(e) && cJSON_IsArray(first)) st = token_prompt(e, m, r, param);
        else st = bad(param, "prompt", "'%s' mixes strings and token arrays (or holds something else)", "prompt");
    }
    return st;
}

// A message's content: a string, or an array of parts of which only {"type": "text", "text": ...}
// is supported (the texts are concatenated). Returns a malloc'ed string in *out.
static ds_status message_content(const cJSON *content, int i, char **out, const char **param) {
    *out = NULL;
    char msg[160];
    if (cJSON_IsString(content)) return (*out = strdup(content->valuestring)) ? DS_OK : ds_fail(DS_ERR_NOMEM, "out of memory");
    if (!cJSON_IsArray(content)) {
        snprintf(msg, sizeof msg, "messages[%d].content must be a string or an array of text parts", i);
        return bad(param, "messages", "%s", msg);
    }
    size_t len = 0;
    for (const cJSON *part = content->child; part; part = part->next) {
        const cJSON *type = cJSON_IsObject(part) ? field(part, "type") : NULL;
        const cJSON *text = cJSON_IsObject(part) ? field(part, "text") : NULL;
        if (!cJSON_IsString(type)) {
            snprintf(msg, sizeof msg, "messages[%d].content parts must be objects with a string 'type'", i);
            free(*out);
            return bad(param, "messages", "%s", msg);
        }
        if (strcmp(type->valuestring, "text")) {
            snprintf(msg, sizeof msg, "messages[%d].content: part type '%.40s' is not supported (only 'text')", i,
                     type->valuestring);
            free(*out);
            return bad(param, "messages", "%s", msg);
        }
        if (!cJSON_IsString(text)) {
            snprintf(msg, sizeof msg, "messages[%d].content: a text part needs a string 'text'", i);
            free(*out);
            return bad(param, "messages", "%s", msg);
        }
        const size_t n = strlen(text->valuestring);
        char *t = realloc(*out, len + n + 1);
        if (!t) {
            free(*out);
            return ds_fail(DS_ERR_NOMEM, "out of memory");
        }
        memcpy(t + len, text->valuestring, n + 1);
        *out = t;
        len += n;
    }
    if (!*out && !(*out = strdup(""))) return ds_fail(DS_ERR_NOMEM, "out of memory");
    return DS_OK;
}

static ds_status badf(const char **param, const char *name, const char *fmt, int i, const char *what) {
    char msg[200];
    snprintf(msg, sizeof msg, fmt, i, what);
    *param = name;
    return ds_fail(DS_ERR_INVALID, "%s", msg);
}

// A copy of an optional string field (absent or null: left out).
static ds_status copy_str(const cJSON *e, cJSON *o, const char *key, int i, const char **param) {
    const cJSON *f = field(e, key);
    if (!f) return DS_OK;
    if (!cJSON_IsString(f)) return badf(param, "messages", "messages[%d].%s must be a string", i, key);
    if (!utf8_ok(f->valuestring)) return badf(param, "messages", "messages[%d].%s is not valid UTF-8", i, key);
    cJSON_AddStringToObject(o, key, f->valuestring);
    return DS_OK;
}

// An assistant message's tool_calls: [{id, type: "function", function: {name, arguments}}].
// arguments (a JSON string on the wire) is handed to the template as the object it encodes, as
// vLLM and llama-server do: templates (Llama 3.1, Hermes, Mistral) apply tojson to a mapping.
static ds_status copy_tool_calls(const cJSON *tc, cJSON *o, int i, const char **param) {
    if (!cJSON_IsArray(tc)) return badf(param, "messages", "messages[%d].tool_calls must be an array%s", i, "");
    cJSON *arr = cJSON_AddArrayToObject(o, "tool_calls");
    for (const cJSON *c = tc->child; c; c = c->next) {
        const cJSON *fn = cJSON_IsObject(c) ? field(c, "function") : NULL, *name = fn ? field(fn, "name") : NULL;
        const cJSON *args = fn ? field(fn, "arguments") : NULL, *id = cJSON_IsObject(c) ? field(c, "id") : NULL;
        if (!cJSON_IsObject(fn) || !cJSON_IsString(name) || (args && !cJSON_IsString(args) && !cJSON_IsObject(args)) ||
            (id && !cJSON_IsString(id)))
            return badf(param, "messages", "messages[%d].tool_calls: each needs function.name (string) and function.arguments (a JSON string)%s", i, "");
        cJSON *x = cJSON_CreateObject(), *f = cJSON_CreateObject();
        cJSON_AddItemToArray(arr, x);
        if (id) cJSON_AddStringToObject(x, "id", id->valuestring);
        cJSON_AddStringToObject(x, "type", "function");
        cJSON_AddItemToObject(x, "function", f);
        cJSON_AddStringToObject(f, "name", name->valuestring);
        cJSON *parsed = cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : args ? cJSON_Duplicate(args, 1) : cJSON_CreateObject();
        if (cJSON_IsString(args) && !cJSON_IsObject(parsed)) {
            cJSON_Delete(parsed);
            return badf(param, "messages", "messages[%d].tool_calls: function.arguments is not a JSON object%s", i, "");
        }
        cJSON_AddItemToObject(f, "arguments", parsed);
    }
    return DS_OK;
}

// `messages` as the JSON array the chat template is rendered with: role ("developer" -> "system"),
// content (a string; text parts concatenated; an assistant's null content with tool calls is ""), name,
// tool_calls, tool_call_id, reasoning_content.
static ds_status build_messages(const cJSON *root, cJSON **out, const char **param) {
    *out = NULL;
    const cJSON *ms = field(root, "messages");
    if (!ms) return bad(param, "messages", "'%s' is required", "messages");
    if (!cJSON_IsArray(ms) || cJSON_GetArraySize(ms) < 1)
        return bad(param, "messages", "'%s' must be a non-empty array", "messages");
    cJSON *arr = cJSON_CreateArray();
    if (!arr) return ds_fail(DS_ERR_NOMEM, "out of memory");
    ds_status st = DS_OK;
    int i = 0;
    for (const cJSON *e = ms->child; e && !st; e = e->next, i++) {
        const cJSON *role = cJSON_IsObject(e) ? field(e, "role") : NULL;
        const cJSON *content = cJSON_IsObject(e) ? field(e, "content") : NULL;
        if (!cJSON_IsString(role)) {
            st = bad(param, "messages", "each of '%s' must be an object with a string 'role'", "messages");
            break;
        }
        const char *r = role->valuestring;
        if (!strcmp(r, "developer")) r = "system"; // OpenAI's system instructions of newer models
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool")) {
            st = badf(param, "messages", "messages[%d].role '%.40s' is not one of system, developer, user, assistant, tool", i, r);
            break;
        }
        if (field(e, "function_call")) {
            st = badf(param, "messages", "messages[%d].function_call (the deprecated form) is not supported: use tool_calls%s", i, "");
            break;
        }
        const cJSON *tc = field(e, "tool_calls");
        if (!content && !(tc && !strcmp(r, "assistant"))) {
            st = badf(param, "messages", "messages[%d] needs a 'content'%s", i, "");
            break;
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(arr, o);
        cJSON_AddStringToObject(o, "role", r);
        if (content) {
            char *text = NULL;
            if ((st = message_content(content, i, &text, param))) break;
            if (!utf8_ok(text)) {
                free(text);
                st = bad(param, "messages", "'%s' is not valid UTF-8", "messages");
                break;
            }
            cJSON_AddStringToObject(o, "content", text);
            free(text);
        } else { // null (an assistant's tool calls): "" (Qwen's templates test `'</think>' in content`)
            cJSON_AddStringToObject(o, "content", "");
        }
        if ((st = copy_str(e, o, "name", i, param)) || (st = copy_str(e, o, "tool_call_id", i, param)) ||
            (st = copy_str(e, o, "reasoning_content", i, param)))
            break;
        if (tc && (st = copy_tool_calls(tc, o, i, param))) break;
    }
    if (st) {
        cJSON_Delete(arr);
        return st;
    }
    *out = arr;
    return DS_OK;
}

// tools: [{"type": "function", "function": {"name", "description"?, "parameters"?}}].
static ds_status check_tools(const cJSON *tools, const char **param) {
    if (!cJSON_IsArray(tools)) return bad(param, "tools", "'%s' must be an array", "tools");
    int i = 0;
    for (const cJSON *t = tools->child; t; t = t->next, i++) {
        const cJSON *ty = cJSON_IsObject(t) ? field(t, "type") : NULL, *fn = cJSON_IsObject(t) ? field(t, "function") : NULL;
        const cJSON *name = cJSON_IsObject(fn) ? field(fn, "name") : NULL, *params = cJSON_IsObject(fn) ? field(fn, "parameters") : NULL;
        const cJSON *desc = cJSON_IsObject(fn) ? field(fn, "description") : NULL;
        if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "function"))
            return badf(param, "tools", "tools[%d].type must be \"function\"%s", i, "");
        if (!cJSON_IsString(name) || !name->valuestring[0] || (params && !cJSON_IsObject(params)) || (desc && !cJSON_IsString(desc)))
            return badf(param, "tools", "tools[%d].function needs a string 'name' (and an object 'parameters', a string 'description')%s", i, "");
    }
    return DS_OK;
}

// s as a GBNF string literal (quotes, backslashes and control bytes escaped).
static void gbnf_literal(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20) fprintf(f, "\\x%02X", (unsigned char)*s);
        else fputc(*s, f);
    }
    fputc('"', f);
}

// The GBNF of one property's value in Gemma 4's syntax: a string enum as its quoted strings, number,
// integer, boolean and string by type, anything else any value.
static void gemma4_value_rule(FILE *f, const cJSON *schema) {
    const cJSON *en = field(schema, "enum"), *ty = field(schema, "type");
    int strings = cJSON_IsArray(en) && en->child;
    for (const cJSON *e = strings ? en->child : NULL; e; e = e->next) strings &= cJSON_IsString(e) && !strchr(e->valuestring, '<');
    if (strings) {
        fprintf(f, "(");
        for (const cJSON *e = en->child; e; e = e->next) {
            fprintf(f, "%s\"<|\\\"|>\" ", e == en->child ? " " : " | ");
            gbnf_literal(f, e->valuestring);
            fprintf(f, " \"<|\\\"|>\"");
        }
        fprintf(f, " )");
        return;
    }
    const char *t = cJSON_IsString(ty) ? ty->valuestring : "";
    fprintf(f, "%s", !strcmp(t, "number") ? "number" : !strcmp(t, "integer") ? "integer"
                     : !strcmp(t, "boolean") ? "( \"true\" | \"false\" )" : !strcmp(t, "string") ? "string" : "value");
}

// Gemma 4's forced calls: "<|tool_call>call:NAME{key:value,...}<tool_call|>" (one, or with
// parallel_tool_calls one or more), NAME one of the offered functions, each call's keys its
// `parameters` property names (any bare key when it lists none), each value in Gemma 4's own syntax
// (tool_calls.c) of its property's type (gemma4_value_rule; the JSON Schema converter writes JSON, so
// required keys, nested schemas and string lengths are not enforced here); a string holds no '<'
// (so it cannot end early).
static ds_status gemma4_tool_grammar(const cJSON *tools, const char *only, int parallel, char **gbnf) {
    size_t len = 0;
    FILE *f = open_memstream(gbnf, &len);
    if (!f) return ds_fail(DS_ERR_NOMEM, "out of memory");
    fprintf(f, "root ::= call%s\ncall ::= \"<|tool_call>call:\" (", parallel ? "+" : "");
    int k = 0;
    for (const cJSON *t = tools->child; t; t = t->next) {
        const cJSON *fn = field(t, "function"), *name = field(fn, "name");
        if (only && strcmp(only, name->valuestring)) continue;
        fprintf(f, "%s", k ? " | " : " ");
        gbnf_literal(f, name->valuestring);
        fprintf(f, " args-%d", k++);
    }
    fprintf(f, " ) \"<tool_call|>\"\n");
    k = 0;
    for (const cJSON *t = tools->child; t; t = t->next) {
        const cJSON *fn = field(t, "function"), *name = field(fn, "name");
        const cJSON *props = field(field(fn, "parameters"), "properties");
        if (only && strcmp(only, name->valuestring)) continue;
        fprintf(f, "args-%d ::= \"{\" ( kv-%d ( \",\" kv-%d )* )? \"}\"\nkv-%d ::= ", k, k, k, k);
        if (cJSON_IsObject(props) && props->child) {
            for (const cJSON *p = props->child; p; p = p->next) {
                fprintf(f, "%s", p == props->child ? "" : " | ");
                gbnf_literal(f, p->string);
                fprintf(f, " \":\" ");
                gemma4_value_rule(f, p);
            }
            fprintf(f, "\n");
        } else {
            fprintf(f, "key \":\" value\n");
        }
        k++;
    }
    fprintf(f, "key ::= [^:{}<,\\[\\]\"\\x00-\\x20]+\n"
               "value ::= string | object | array | number | \"true\" | \"false\" | \"null\"\n"
               "object ::= \"{\" ( key \":\" value ( \",\" key \":\" value )* )? \"}\"\n"
               "array ::= \"[\" ( value ( \",\" value )* )? \"]\"\n"
               "string ::= \"<|\\\"|>\" [^<]* \"<|\\\"|>\"\n"
               "number ::= integer ( \".\" [0-9]+ )? ( [eE] [+-]? [0-9]+ )?\n"
               "integer ::= \"-\"? [0-9]+\n");
    const int err = ferror(f);
    if (fclose(f) || err) {
        free(*gbnf);
        *gbnf = NULL;
        return ds_fail(DS_ERR_NOMEM, "out of memory");
    }
    return DS_OK;
}

// tool_choice "required" / a named function: the grammar that forces a call (or, with
// parallel_tool_calls, one or more) in the template's syntax, each call's arguments constrained by
// its tool's `parameters` schema (the JSON Schema subset of ds_json_schema_to_gbnf; a tool without
// parameters takes any object). The calls' JSON is one schema, {"anyOf": [{name: const, arguments:
// schema}, ...]}, converted once; its root rule becomes `call-json` and the syntax wraps it. Gemma 4
// writes no JSON: gemma4_tool_grammar.
static ds_status tool_grammar(const cJSON *tools, const char *only, ds_tool_syntax syn, int parallel, char **gbnf,
                              const char **param) {
    *gbnf = NULL;
    if (syn == DS_TOOLS_NONE)
        return bad(param, "tool_choice", "'%s' needs a chat template with a known tool-call syntax (hermes, llama3, mistral, gemma4)",
                   "tool_choice");
    if (syn == DS_TOOLS_GEMMA4) {
        int offered = 0;
        for (const cJSON *t = tools->child; t; t = t->next)
            offered |= !only || !strcmp(only, field(field(t, "function"), "name")->valuestring);
        if (!offered) return bad(param, "tool_choice", "'%s' names a function that is not among the tools", "tool_choice");
        return gemma4_tool_grammar(tools, only, parallel, gbnf);
    }
    cJSON *schema = cJSON_CreateObject(), *any = cJSON_AddArrayToObject(schema, "anyOf");
    const char *args_key = syn == DS_TOOLS_LLAMA3 ? "parameters" : "arguments";
    for (const cJSON *t = tools->child; t; t = t->next) {
        const cJSON *fn = field(t, "function"), *name = field(fn, "name"), *params = field(fn, "parameters");
        if (only && strcmp(only, name->valuestring)) continue;
        cJSON *o = cJSON_CreateObject(), *props = cJSON_AddObjectToObject(o, "properties");
        cJSON_AddStringToObject(o, "type", "object");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(props, "name"), "const", name->valuestring);
        cJSON *ps = params ? cJSON_Duplicate(params, 1) : cJSON_CreateObject();
        if (!params) cJSON_AddStringToObject(ps, "type", "object");
        cJSON_AddItemToObject(props, args_key, ps);
        cJSON *req = cJSON_AddArrayToObject(o, "required");
        cJSON_AddItemToArray(req, cJSON_CreateString("name"));
        cJSON_AddItemToArray(req, cJSON_CreateString(args_key));
        cJSON_AddItemToArray(any, o);
    }
    if (!cJSON_GetArraySize(any)) {
        cJSON_Delete(schema);
        return bad(param, "tool_choice", "'%s' names a function that is not among the tools", "tool_choice");
    }
    char *js = cJSON_PrintUnformatted(schema), *calls = NULL;
    cJSON_Delete(schema);
    const char *kw = NULL;
    ds_status st = js ? ds_json_schema_to_gbnf(js, strlen(js), &calls, &kw) : ds_fail(DS_ERR_NOMEM, "out of memory");
    free(js);
    if (st) {
        *param = "tools";
        return kw ? ds_fail(DS_ERR_INVALID, "tools: a function's parameters use '%s', which constrained tool calls do not support", kw)
                  : st;
    }
    // "root ::= X\n..." -> "call-json ::= X\n...", and the syntax around it.
    const char *wrap = syn == DS_TOOLS_HERMES
                           ? (parallel ? "root ::= call ( \"\\n\" call )*\ncall ::= \"<tool_call>\\n\" call-json \"\\n</tool_call>\"\n"
                                       : "root ::= \"<tool_call>\\n\" call-json \"\\n</tool_call>\"\n")
                       : syn == DS_TOOLS_LLAMA3 ? (parallel ? "root ::= call-json ( \"; \" call-json )*\n" : "root ::= call-json\n")
                                                : (parallel ? "root ::= \"[TOOL_CALLS][\" call-json ( \", \" call-json )* \"]\"\n"
                                                            : "root ::= \"[TOOL_CALLS][\" call-json \"]\"\n");
    const size_t n = strlen(wrap) + strlen(calls) + 16;
    if (strncmp(calls, "root ::= ", 9) || !(*gbnf = malloc(n))) {
        free(calls);
        return ds_fail(DS_ERR_NOMEM, "out of memory");
    }
    snprintf(*gbnf, n, "%scall-json ::= %s", wrap, calls + 9);
    free(calls);
    return DS_OK;
}

// The conversation of a chat body rendered through the model's chat template: messages, tools
// (unless tool_choice is "none"), chat_template_kwargs. *syntax: the tool-call syntax to parse
// the reply with (DS_TOOLS_NONE when no tools are offered).
static ds_status render_chat(const cJSON *root, const ds_model *m, int gen, char **text, ds_tool_syntax *syntax,
                             int *parallel, char **grammar, const char **param) {
    *text = NULL;
    if (syntax) *syntax = DS_TOOLS_NONE;
    if (parallel) *parallel = 1;
    const ds_tokenizer *tok = ds_model_tokenizer(m);
    const cJSON *tools = field(root, "tools"), *choice = field(root, "tool_choice"), *kw = field(root, "chat_template_kwargs");
    const cJSON *ptc = field(root, "parallel_tool_calls");
    if (tools) {
        ds_status st = check_tools(tools, param);
        if (st) return st;
        if (!cJSON_GetArraySize(tools)) tools = NULL;
    }
    if (ptc && !cJSON_IsBool(ptc)) return bad(param, "parallel_tool_calls", "'%s' must be a boolean", "parallel_tool_calls");
    if (parallel && ptc) *parallel = cJSON_IsTrue(ptc);
    if (kw && !cJSON_IsObject(kw)) return bad(param, "chat_template_kwargs", "'%s' must be an object", "chat_template_kwargs");
    int offer = tools != NULL;
    if (choice) {
        const char *forced = NULL;
        if (cJSON_IsString(choice) && !strcmp(choice->valuestring, "none")) offer = 0; // the model is not offered tools
        else if (cJSON_IsString(choice) && !strcmp(choice->valuestring, "auto")) {
        } else if (cJSON_IsString(choice) && !strcmp(choice->valuestring, "required")) forced = "";
        else if (cJSON_IsObject(choice)) {
            const cJSON *ty = field(choice, "type"), *fn = field(choice, "function"), *nm = cJSON_IsObject(fn) ? field(fn, "name") : NULL;
            if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "function") || !cJSON_IsString(nm))
                return bad(param, "tool_choice", "'%s' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}", "tool_choice");
            forced = nm->valuestring;
        } else {
            return bad(param, "tool_choice", "'%s' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}", "tool_choice");
        }
        if (forced) {
            if (!tools) return bad(param, "tool_choice", "'%s' forces a tool call but no 'tools' are given", "tool_choice");
            if (!ds_chat_template_of(tok, 1))
                return bad(param, "tools", "'%s' need a model with a chat template (this model has none)", "tools");
            if (grammar && *grammar)
                return bad(param, "tool_choice", "'%s' forcing a call cannot be combined with grammar / json_schema / response_format", "tool_choice");
            // The call is constrained by the grammar engine, so its arguments always parse.
            if (grammar) {
                ds_status st = tool_grammar(tools, forced[0] ? forced : NULL, ds_chat_template_tool_syntax(ds_chat_template_of(tok, 1)),
                                            !ptc || cJSON_IsTrue(ptc), grammar, param);
                if (st) return st;
            }
        }
    }
    if (offer && !ds_chat_template_of(tok, 1))
        return bad(param, "tools", "'%s' need a model with a chat template (this model has none)", "tools");
    cJSON *msgs;
    ds_status st = build_messages(root, &msgs, param);
    if (st) return st;
    char *mj = cJSON_PrintUnformatted(msgs), *tj = offer ? cJSON_PrintUnformatted(tools) : NULL, *kj = kw ? cJSON_PrintUnformatted(kw) : NULL;
    cJSON_Delete(msgs);
    if (!mj || (offer && !tj) || (kw && !kj)) st = ds_fail(DS_ERR_NOMEM, "out of memory");
    else if ((st = ds_chat_render_json(tok, mj, tj, kj, gen, text))) {
        *param = "messages";
        ds_fail_prefix(st, "messages");
    }
    if (!st && syntax && offer) *syntax = ds_chat_template_tool_syntax(ds_chat_template_of(tok, 1));
    free(mj);
    free(tj);
    free(kj);
    return st;
}

static ds_status parse_messages(const cJSON *root, const ds_model *m, ds_oa_request *r, const char **param) {
    char *text = NULL;
    ds_status st = render_chat(root, m, 1, &text, &r->tool_syntax, &r->parallel_tool_calls, &r->grammar, param);
    if (!st) st = tokenize(m, text, r, "messages", param);
    free(text);
    return st;
}

ds_status ds_oa_parse_apply_template(const char *body, size_t n, const ds_model *m, char **text, const char **param) {
    *param = NULL;
    *text = NULL;
    if (ds_json_has_nul_escape(body, n)) return ds_fail(DS_ERR_INVALID, "the body holds a NUL character (\\u0000) in a string, which is not supported");
    cJSON *root = cJSON_ParseWithLength(body, n);
    if (!root) return ds_fail(DS_ERR_INVALID, "the body is not valid JSON");
    ds_status st = DS_OK;
    const cJSON *g = cJSON_IsObject(root) ? field(root, "add_generation_prompt") : NULL;
    if (!cJSON_IsObject(root)) st = ds_fail(DS_ERR_INVALID, "the body must be a JSON object");
    else if (g && !cJSON_IsBool(g)) st = bad(param, "add_generation_prompt", "'%s' must be a boolean", "add_generation_prompt");
    else st = render_chat(root, m, !g || cJSON_IsTrue(g), text, NULL, NULL, NULL, param);
    cJSON_Delete(root);
    return st;
}

static ds_status parse_stops(const cJSON *root, ds_oa_request *r, const char **param) {
    const cJSON *s = field(root, "stop");
    if (!s) return DS_OK;
    const cJSON *one[1] = {s};
    int n = 1;
    if (cJSON_IsArray(s)) {
        n = cJSON_GetArraySize(s);
        if (n > DS_OA_MAX_STOPS) return bad(param, "stop", "'%s' takes at most 4 strings", "stop");
    } else if (!cJSON_IsString(s)) {
        return bad(param, "stop", "'%s' must be a string or an array of strings", "stop");
    }
    const cJSON *e = cJSON_IsArray(s) ? s->child : one[0];
    for (int i = 0; i < n; i++, e = e->next) {
        if (!cJSON_IsString(e) || !e->valuestring[0]) return bad(param, "stop", "'%s' strings must be non-empty strings", "stop");
        if (!utf8_ok(e->valuestring)) return bad(param, "stop", "'%s' is not valid UTF-8", "stop");
        if (!(r->stops[r->n_stops] = strdup(e->valuestring))) return ds_fail(DS_ERR_NOMEM, "out of memory");
        r->n_stops++;
    }
    return DS_OK;
}

// Fields OpenAI defines that we do not implement: a 400 naming them, never silently ignored.
static ds_status refuse_unsupported(const cJSON *root, int chat, const char **param) {
    const cJSON *f;
    static const char *tool_fields[] = {"tools", "functions"};
    for (int i = chat; i < 2; i++) // (chat takes tools; completions none)
        if ((f = field(root, tool_fields[i])) && (!cJSON_IsArray(f) || cJSON_GetArraySize(f) > 0))
            return bad(param, tool_fields[i], chat ? "'%s' (the deprecated form) is not supported: use tools" : "'%s' is not supported on completions (use chat)", tool_fields[i]);
    if (!chat && (f = field(root, "tool_choice")) && !(cJSON_IsString(f) && !strcmp(f->valuestring, "none")))
        return bad(param, "tool_choice", "'%s' is not supported on completions", "tool_choice");
    if ((f = field(root, "function_call")) && !(cJSON_IsString(f) && (!strcmp(f->valuestring, "none") || !strcmp(f->valuestring, "auto"))))
        return bad(param, "function_call", "'%s' (the deprecated form) is not supported: use tool_choice", "function_call");
    if ((f = field(root, "response_format"))) {
        const cJSON *t = cJSON_IsObject(f) ? field(f, "type") : NULL;
        if (!cJSON_IsString(t)) return bad(param, "response_format", "'%s' must be an object with a string 'type'", "response_format");
        if (strcmp(t->valuestring, "text") && strcmp(t->valuestring, "json_object") && strcmp(t->valuestring, "json_schema")) {
            *param = "response_format";
            return ds_fail(DS_ERR_INVALID, "'response_format' type '%.40s' is not supported (text, json_object, json_schema are)",
                           t->valuestring);
        }
    }
    if (!chat && (f = field(root, "suffix")) && !(cJSON_IsString(f) && !f->valuestring[0]))
        return bad(param, "suffix", "'%s' is not supported (no insertion)", "suffix");
    if ((f = field(root, "best_of")) && !(cJSON_IsNumber(f) && f->valuedouble == 1))
        return bad(param, "best_of", "'%s' other than 1 is not supported", "best_of");
    if (chat && (f = field(root, "audio"))) return bad(param, "audio", "'%s' is not supported (text only)", "audio");
    if (chat && (f = field(root, "prediction"))) return bad(param, "prediction", "'%s' is not supported", "prediction");
    if (chat && (f = field(root, "modalities"))) {
        const cJSON *only = cJSON_IsArray(f) && cJSON_GetArraySize(f) == 1 ? f->child : NULL;
        if (!only || !cJSON_IsString(only) || strcmp(only->valuestring, "text"))
            return bad(param, "modalities", "'%s' other than [\"text\"] is not supported", "modalities");
    }
    return DS_OK;
}

// A JSON schema (a cJSON value) to GBNF in r->grammar; errors name `name`.
static ds_status schema_grammar(const cJSON *schema, ds_oa_request *r, const char *name, const char **param) {
    char *text = cJSON_PrintUnformatted(schema);
    if (!text) return ds_fail(DS_ERR_NOMEM, "out of memory");
    const char *kw = NULL;
    ds_status st = ds_json_schema_to_gbnf(text, strlen(text), &r->grammar, &kw);
    free(text);
    if (st == DS_ERR_NOMEM) return st;
    if (st) {
        *param = name;
        return ds_fail_prefix(DS_ERR_INVALID, "'%s'", name);
    }
    return DS_OK;
}

// Constrained output: llama-server's "grammar" (GBNF) and "json_schema" (a schema), OpenAI's
// response_format json_object / json_schema {name, schema, strict}; at most one of them. The result
// is GBNF text in r->grammar, checked here (a syntax error is a 400 with its line:column).
static ds_status parse_grammar(const cJSON *root, ds_oa_request *r, const char **param) {
    const cJSON *g = field(root, "grammar"), *js = field(root, "json_schema"), *rf = field(root, "response_format");
    if (cJSON_IsNull(g)) g = NULL;
    if (cJSON_IsNull(js)) js = NULL;
    const cJSON *rt = cJSON_IsObject(rf) ? field(rf, "type") : NULL;
    const int rf_json = cJSON_IsString(rt) && strcmp(rt->valuestring, "text");
    if ((g != NULL) + (js != NULL) + rf_json > 1)
        return bad(param, g ? "grammar" : "json_schema", "give one of grammar, json_schema and a JSON %s", "response_format");
    ds_status st = DS_OK;
    if (g) {
        if (!cJSON_IsString(g)) return bad(param, "grammar", "'%s' must be a string (GBNF)", "grammar");
        if (!(r->grammar = strdup(g->valuestring))) return ds_fail(DS_ERR_NOMEM, "out of memory");
    } else if (js) {
        if ((st = schema_grammar(js, r, "json_schema", param))) return st;
    } else if (rf_json && !strcmp(rt->valuestring, "json_object")) {
        if (!(r->grammar = strdup(ds_json_object_gbnf()))) return ds_fail(DS_ERR_NOMEM, "out of memory");
    } else if (rf_json) {
        const cJSON *w = field(rf, "json_schema"), *sc = cJSON_IsObject(w) ? field(w, "schema") : NULL;
        if (!sc) return bad(param, "response_format", "'%s' json_schema needs {\"json_schema\": {\"schema\": ...}}", "response_format");
        if ((st = schema_grammar(sc, r, "response_format", param))) return st;
    } else {
        return DS_OK;
    }
    ds_grammar *cg = NULL;
    if ((st = ds_grammar_parse(r->grammar, &cg))) {
        *param = g ? "grammar" : js ? "json_schema" : "response_format";
        return st;
    }
    ds_grammar_free(cg);
    return DS_OK;
}

// logit_bias: {"token id": bias in [-100, 100]}.
static ds_status parse_logit_bias(const cJSON *root, const ds_model *m, ds_oa_request *r, const char **param) {
    const cJSON *b = field(root, "logit_bias");
    if (!b) return DS_OK;
    if (!cJSON_IsObject(b)) return bad(param, "logit_bias", "'%s' must be an object of token ids to biases", "logit_bias");
    const int n = cJSON_GetArraySize(b), V = ds_model_get_info(m)->vocab_size;
    if (n > 1024) return bad(param, "logit_bias", "'%s' takes at most 1024 tokens", "logit_bias");
    if (n && !(r->bias = calloc((size_t)n, sizeof *r->bias))) return ds_fail(DS_ERR_NOMEM, "out of memory");
    int i = 0;
    for (const cJSON *e = b->child; e; e = e->next, i++) {
        char *end;
        const long id = strtol(e->string, &end, 10);
        if (!e->string[0] || *end || id < 0 || id >= V) {
            *param = "logit_bias";
            return ds_fail(DS_ERR_INVALID, "'logit_bias' keys must be token ids in 0..%d", V - 1);
        }
        if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || e->valuedouble < -100 || e->valuedouble > 100)
            return bad(param, "logit_bias", "'%s' values must be numbers in [-100, 100]", "logit_bias");
        r->bias[i] = (ds_logit_bias){(int32_t)id, (float)e->valuedouble};
    }
    r->sp.logit_bias = r->bias;
    r->sp.n_logit_bias = n;
    return DS_OK;
}

// logprobs: completions take an integer (alternatives per token, 0..20); chat a boolean with
// top_logprobs (0..20).
static ds_status parse_logprobs(const cJSON *root, int chat, ds_oa_request *r, const char **param) {
    const cJSON *f = field(root, "logprobs");
    double v = 0;
    ds_status st;
    if (chat) {
        if (f && !cJSON_IsBool(f)) return bad(param, "logprobs", "'%s' must be a boolean", "logprobs");
        r->logprobs = f && cJSON_IsTrue(f);
        if ((st = get_int(root, "top_logprobs", 0, 20, &v, param))) return st;
        if (field(root, "top_logprobs") && !r->logprobs)
            return bad(param, "top_logprobs", "'%s' needs 'logprobs': true", "top_logprobs");
        r->top_logprobs = (int)v;
        return DS_OK;
    }
    if ((st = get_int(root, "logprobs", 0, 20, &v, param))) return st;
    r->logprobs = f != NULL;
    r->top_logprobs = (int)v;
    if ((f = field(root, "echo"))) {
        if (!cJSON_IsBool(f)) return bad(param, "echo", "'%s' must be a boolean", "echo");
        r->echo = cJSON_IsTrue(f);
    }
    return DS_OK;
}

ds_status ds_oa_parse(const char *body, size_t n, int chat, const ds_model *m, ds_oa_request *r, const char **param) {
    memset(r, 0, sizeof *r);
    *param = NULL;
    r->chat = chat;
    r->sp = ds_sampler_default();
    r->sp.temperature = 1.0f; // OpenAI's default
    if (ds_json_has_nul_escape(body, n))
        return ds_fail(DS_ERR_INVALID, "the body holds a NUL character (\\u0000) in a string, which is not supported");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, n, &end, 0);
    if (!root) return ds_fail(DS_ERR_INVALID, "the body is not valid JSON");
    while (end && end < body + n && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')) end++;
    if (!end || end != body + n) {
        cJSON_Delete(root);
        return ds_fail(DS_ERR_INVALID, "the body is not valid JSON (trailing data after the object)");
    }
    ds_status st = DS_OK;
    const ds_model_info *in = ds_model_get_info(m);
    double v, mt = -1;
    if (!cJSON_IsObject(root)) {
        st = ds_fail(DS_ERR_INVALID, "the body must be a JSON object");
        goto out;
    }
    const cJSON *f;
    if ((f = field(root, "stream"))) {
        if (!cJSON_IsBool(f)) {
            st = bad(param, "stream", "'%s' must be a boolean", "stream");
            goto out;
        }
        r->stream = cJSON_IsTrue(f);
    }
    if ((f = field(root, "stream_options"))) {
        const cJSON *u = cJSON_IsObject(f) ? field(f, "include_usage") : NULL;
        if (!cJSON_IsObject(f) || (u && !cJSON_IsBool(u))) {
            st = bad(param, "stream_options", "'%s' must be an object with a boolean include_usage", "stream_options");
            goto out;
        }
        r->include_usage = u && cJSON_IsTrue(u);
    }
    v = 1;
    if ((st = get_int(root, "n", 1, DS_OA_MAX_CHOICES, &v, param))) goto out;
    r->n = (int)v;
    v = r->sp.temperature;
    if ((st = get_number(root, "temperature", 0, 2, 0, &v, param))) goto out;
    r->sp.temperature = (float)v;
    v = 1;
    if ((st = get_number(root, "top_p", 0, 1, 1, &v, param))) goto out;
    r->sp.top_p = (float)v;
    v = 0;
    if ((st = get_int(root, "top_k", 0, 1 << 30, &v, param))) goto out;
    r->sp.top_k = (int)v;
    v = 0;
    if ((st = get_number(root, "min_p", 0, 1, 0, &v, param))) goto out;
    r->sp.min_p = (float)v;
    v = -1;
    if ((st = get_int(root, "seed", -9.2e18, 9.2e18, &v, param))) goto out;
    if (field(root, "seed")) {
        r->has_seed = 1;
        r->seed = (uint64_t)(int64_t)v;
    }
    if ((st = refuse_unsupported(root, chat, param))) goto out;
    v = 0;
    if ((st = get_number(root, "presence_penalty", -2, 2, 0, &v, param))) goto out;
    r->sp.presence_penalty = (float)v;
    v = 0;
    if ((st = get_number(root, "frequency_penalty", -2, 2, 0, &v, param))) goto out;
    r->sp.frequency_penalty = (float)v;
    if ((st = parse_logit_bias(root, m, r, param))) goto out;
    if ((st = parse_logprobs(root, chat, r, param))) goto out;
    if ((f = field(root, "verify"))) { // dspark's own: how sampled drafts are verified
        if (!cJSON_IsString(f) || (strcmp(f->valuestring, "coupled") && strcmp(f->valuestring, "residual"))) {
            st = bad(param, "verify", "'%s' must be \"coupled\" or \"residual\"", "verify");
            goto out;
        }
        r->has_verify = 1;
        r->sp.verify = !strcmp(f->valuestring, "residual") ? DS_VERIFY_RESIDUAL : DS_VERIFY_COUPLED;
    }
    int cache_prompt = 1; // llama-server's: reuse the prompt cache (the default)
    if ((st = get_bool(root, "cache_prompt", &cache_prompt, param))) goto out;
    r->no_prompt_cache = !cache_prompt;
    if ((st = get_int(root, "max_tokens", 1, 1e9, &mt, param))) goto out;
    if (chat && mt < 0 && (st = get_int(root, "max_completion_tokens", 1, 1e9, &mt, param))) goto out;
    if ((st = parse_stops(root, r, param))) goto out;
    if ((st = parse_grammar(root, r, param))) goto out;
    if ((st = chat ? parse_messages(root, m, r, param) : parse_prompt(root, m, r, param))) goto out;
    if (r->n_prompts * r->n > DS_OA_MAX_CHOICES) {
        *param = "n";
        st = ds_fail(DS_ERR_INVALID, "%d prompts x n = %d choices: at most %d per request", r->n_prompts, r->n,
                     DS_OA_MAX_CHOICES);
        goto out;
    }
    int longest = 0;
    for (int i = 0; i < r->n_prompts; i++) longest = r->n_prompt[i] > longest ? r->n_prompt[i] : longest;
    const int room = in->max_ctx - longest;
    if (room < 1) {
        *param = chat ? "messages" : "prompt";
        st = ds_fail(DS_ERR_INVALID, "the prompt (%d tokens) fills the model's context of %d", longest, in->max_ctx);
        goto out;
    }
    // Defaults: OpenAI's 16 for completions, the rest of the context for chat.
    if (mt < 0) mt = chat ? room : (16 < room ? 16 : room);
    if (mt > room) {
        *param = "max_tokens";
        st = ds_fail(DS_ERR_INVALID, "the prompt (%d tokens) + max_tokens (%.0f) exceed the model's context of %d",
                     longest, mt, in->max_ctx);
        goto out;
    }
    r->max_tokens = (int)mt;
out:
    cJSON_Delete(root);
    if (st) ds_oa_request_free(r);
    return st;
}

void ds_oa_request_free(ds_oa_request *r) {
    for (int i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i]);
        if (r->prompt_text) free(r->prompt_text[i]);
    }
    free(r->prompts);
    free(r->prompt_text);
    free(r->bias);
    r->prompt_text = NULL;
    r->bias = NULL;
    free(r->n_prompt);
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    free(r->grammar);
    r->grammar = NULL;
    r->prompts = NULL;
    r->n_prompt = NULL;
    r->n_prompts = r->n_stops = r->prompt_tokens = 0;
}

ds_status ds_oa_parse_tokenize(const char *body, size_t n, char **content, int *add_special, int *with_pieces,
                               const char **param) {
    *param = NULL;
    *content = NULL;
    *add_special = *with_pieces = 0;
    cJSON *root = cJSON_ParseWithLength(body, n);
    if (!root) return ds_fail(DS_ERR_INVALID, "the body is not valid JSON");
    ds_status st = DS_OK;
    const cJSON *c = cJSON_IsObject(root) ? field(root, "content") : NULL;
    if (!cJSON_IsObject(root)) st = ds_fail(DS_ERR_INVALID, "the body must be a JSON object");
    else if (!cJSON_IsString(c)) st = bad(param, "content", "'%s' must be a string", "content");
    else if (!utf8_ok(c->valuestring)) st = bad(param, "content", "'%s' is not valid UTF-8", "content");
    if (!st) st = get_bool(root, "add_special", add_special, param);
    if (!st) st = get_bool(root, "with_pieces", with_pieces, param);
    if (!st && !(*content = strdup(c->valuestring))) st = ds_fail(DS_ERR_NOMEM, "out of memory");
    cJSON_Delete(root);
    return st;
}

ds_status ds_oa_parse_detokenize(const char *body, size_t n, const ds_model *m, int32_t **ids, int *n_ids,
                                 const char **param) {
    *param = NULL;
    *ids = NULL;
    *n_ids = 0;
    cJSON *root = cJSON_ParseWithLength(body, n);
    if (!root) return ds_fail(DS_ERR_INVALID, "the body is not valid JSON");
    ds_status st = DS_OK;
    const cJSON *t = cJSON_IsObject(root) ? field(root, "tokens") : NULL;
    const int V = ds_model_get_info(m)->vocab_size;
    if (!cJSON_IsObject(root)) st = ds_fail(DS_ERR_INVALID, "the body must be a JSON object");
    else if (!cJSON_IsArray(t)) st = bad(param, "tokens", "'%s' must be an array of token ids", "tokens");
    else if (cJSON_GetArraySize(t) > ds_model_get_info(m)->max_ctx * 4)
        st = bad(param, "tokens", "'%s' holds too many ids", "tokens");
    else if (!(*ids = malloc(sizeof(int32_t) * (size_t)(cJSON_GetArraySize(t) + 1)))) st = ds_fail(DS_ERR_NOMEM, "out of memory");
    for (const cJSON *e = t && !st ? t->child : NULL; e; e = e->next) {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 || e->valuedouble >= V) {
            *param = "tokens";
            st = ds_fail(DS_ERR_INVALID, "'tokens' must be integers in 0..%d", V - 1);
            break;
        }
        (*ids)[(*n_ids)++] = (int32_t)e->valuedouble;
    }
    if (st) {
        free(*ids);
        *ids = NULL;
        *n_ids = 0;
    }
    cJSON_Delete(root);
    return st;
}
