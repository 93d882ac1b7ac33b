// Tool calls in model output, parsed back into {"name", "arguments" (JSON text)} in the syntax
// the chat template teaches (ds_chat_template_tool_syntax):
//   hermes  (Qwen2.5/Qwen3/QwQ, Hermes): "<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>",
//           any number, anywhere; the text outside them is the content.
//   llama3  (Llama 3.1-3.3): the whole reply (after an optional <|python_tag|>) is one or more JSON
//           objects {"name": ..., "parameters": {...}} separated by ';' or whitespace.
//   mistral: "[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]" (or "[TOOL_CALLS]name[ARGS]{...}");
//           the marker is a special token that the text output leaves out, so a reply that is such
//           an array on its own counts too.
// Anything malformed stays content. Streaming: ds_tool_calls_safe says how much of the text so far
// cannot be (the start of) a call.
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "dspark/tokenizer.h"

const char *ds_tool_syntax_name(ds_tool_syntax s) {
    switch (s) {
    case DS_TOOLS_HERMES: return "hermes";
    case DS_TOOLS_LLAMA3: return "llama3";
    case DS_TOOLS_MISTRAL: return "mistral";
    default: return "none";
    }
}

static int ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static const char *find(const char *s, size_t n, const char *needle) {
    const size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, needle, k)) return s + i;
    return NULL;
}

// Bytes at the end of s[0..n) that are a proper prefix of `marker` (they may become it).
static size_t partial_tail(const char *s, size_t n, const char *marker) {
    const size_t k = strlen(marker);
    for (size_t l = k - 1; l > 0; l--)
        if (l <= n && !memcmp(s + n - l, marker, l)) return l;
    return 0;
}

// One call from a parsed object: name + arguments (an object, or a string holding JSON) under
// `args_key` (or "arguments" / "parameters"). Appends {"name", "arguments": text} to calls.
static int add_call(cJSON *calls, const cJSON *o) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (!args) args = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    if (!cJSON_IsObject(o) || !cJSON_IsString(name) || !name->valuestring[0]) return 0;
    char *text = NULL;
    if (!args) text = strdup("{}");
    else if (cJSON_IsString(args)) {
        cJSON *p = cJSON_Parse(args->valuestring);
        const int ok = cJSON_IsObject(p);
        cJSON_Delete(p);
        if (!ok) return 0;
        text = strdup(args->valuestring);
    } else if (cJSON_IsObject(args)) text = cJSON_PrintUnformatted(args);
    else return 0;
    if (!text) return -1;
    cJSON *c = cJSON_CreateObject();
    if (!c) return free(text), -1;
    cJSON_AddStringToObject(c, "name", name->valuestring);
    cJSON_AddStringToObject(c, "arguments", text);
    free(text);
    cJSON_AddItemToArray(calls, c);
    return 1;
}

typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} buf;

static void put(buf *b, const char *p, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *ns = realloc(b->s, cap);
        if (!ns) {
            b->oom = 1;
            return;
        }
        b->s = ns, b->cap = cap;
    }
    memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = 0;
}

// JSON objects in s[0..n), separated by whitespace or ';': all must be calls.
static int parse_objects(cJSON *calls, const char *s, size_t n) {
    char *z = strndup(s, n); // (cJSON needs the text NUL-terminated)
    if (!z) return -1;
    const char *p = z;
    int got = 0;
    for (;;) {
        while (*p && (ws(*p) || *p == ';')) p++;
        if (!*p) break;
        const char *end = NULL;
        cJSON *o = *p == '{' ? cJSON_ParseWithOpts(p, &end, 0) : NULL;
        int r = o ? add_call(calls, o) : 0;
        cJSON_Delete(o);
        if (r <= 0) {
            free(z);
            return r < 0 ? -1 : 0;
        }
        got++;
        p = end;
    }
    free(z);
    return got;
}

// A JSON array of call objects at s[0..n) (trailing whitespace allowed).
static int parse_array(cJSON *calls, const char *s, size_t n) {
    char *z = strndup(s, n);
    if (!z) return -1;
    const char *end = NULL;
    cJSON *a = cJSON_ParseWithOpts(z, &end, 0);
    int got = 0;
    if (cJSON_IsArray(a) && cJSON_GetArraySize(a) > 0) {
        while (end && ws(*end)) end++;
        if (end && !*end)
            for (const cJSON *o = a->child; o; o = o->next) {
                int r = add_call(calls, o);
                if (r <= 0) {
                    got = r;
                    break;
                }
                got++;
            }
    }
    cJSON_Delete(a);
    free(z);
    return got;
}

static void trim(const char **s, size_t *n) {
    while (*n && ws(**s)) (*s)++, (*n)--;
    while (*n && ws((*s)[*n - 1])) (*n)--;
}

ds_status ds_tool_calls_parse(ds_tool_syntax syn, const char *text, size_t n, char **content, char **calls_json, int *n_calls) {
    *content = NULL;
    *calls_json = NULL;
    *n_calls = 0;
    cJSON *calls = cJSON_CreateArray();
    buf b = {0};
    put(&b, "", 0);
    int oom = !calls;
    if (!oom && syn == DS_TOOLS_HERMES) {
        const char *p = text, *end = text + n;
        for (;;) {
            const char *open = find(p, (size_t)(end - p), "<tool_call>");
            if (!open) {
                put(&b, p, (size_t)(end - p));
                break;
            }
            const char *body = open + 11, *close = find(body, (size_t)(end - body), "</tool_call>");
            const char *body_end = close ? close : end;
            const int before = cJSON_GetArraySize(calls);
            const char *bs = body;
            size_t bn = (size_t)(body_end - body);
            trim(&bs, &bn);
            int r = bn ? parse_objects(calls, bs, bn) : 0;
            if (r < 0) oom = 1;
            if (r != 1) { // not one well-formed call: the text stays content
                while (cJSON_GetArraySize(calls) > before) cJSON_DeleteItemFromArray(calls, before);
                put(&b, p, (size_t)((close ? close + 12 : end) - p));
            } else {
                put(&b, p, (size_t)(open - p));
            }
            if (!close) break;
            p = close + 12;
        }
    } else if (!oom && (syn == DS_TOOLS_LLAMA3 || syn == DS_TOOLS_MISTRAL)) {
        const char *marker = syn == DS_TOOLS_LLAMA3 ? "<|python_tag|>" : "[TOOL_CALLS]";
        const char *m = find(text, n, marker), *s = m ? m + strlen(marker) : text;
        size_t sn = (size_t)(text + n - s);
        trim(&s, &sn);
        int r = 0;
        if (syn == DS_TOOLS_LLAMA3) r = sn && *s == '{' ? parse_objects(calls, s, sn) : 0;
        else if (sn && *s == '[') r = parse_array(calls, s, sn);
        else if (m && sn) { // [TOOL_CALLS]name[ARGS]{...}
            const char *a = find(s, sn, "[ARGS]");
            if (a) {
                cJSON *o = cJSON_CreateObject(), *args;
                char *nm = strndup(s, (size_t)(a - s)), *js = strndup(a + 6, sn - (size_t)(a + 6 - s));
                if (o && nm && js && (args = cJSON_Parse(js))) {
                    cJSON_AddStringToObject(o, "name", nm);
                    cJSON_AddItemToObject(o, "arguments", args);
                    r = add_call(calls, o);
                }
                cJSON_Delete(o);
                free(nm);
                free(js);
            }
        }
        if (r < 0) oom = 1;
        if (r > 0) put(&b, text, m ? (size_t)(m - text) : 0);
        else {
            while (cJSON_GetArraySize(calls) > 0) cJSON_DeleteItemFromArray(calls, 0);
            put(&b, text, n);
        }
    } else if (!oom) {
        put(&b, text, n);
    }
    const int nc = calls ? cJSON_GetArraySize(calls) : 0;
    if (!oom && nc) { // with calls, the content is what is left around them, trimmed
        const char *s = b.s;
        size_t sn = b.n;
        trim(&s, &sn);
        memmove(b.s, s, sn);
        b.s[sn] = 0;
        b.n = sn;
        if (!(*calls_json = cJSON_PrintUnformatted(calls))) oom = 1;
    }
    cJSON_Delete(calls);
    if (oom || b.oom) {
        free(b.s);
        free(*calls_json);
        *calls_json = NULL;
        return ds_fail(DS_ERR_NOMEM, "tool calls: out of memory");
    }
    *content = b.s;
    *n_calls = nc;
    return DS_OK;
}

size_t ds_tool_calls_safe(ds_tool_syntax syn, const char *text, size_t n) {
    const char *marker = syn == DS_TOOLS_HERMES ? "<tool_call>" : syn == DS_TOOLS_LLAMA3 ? "<|python_tag|>"
                       : syn == DS_TOOLS_MISTRAL ? "[TOOL_CALLS]" : NULL;
    if (!marker) return n;
    if (syn != DS_TOOLS_HERMES) { // a reply that opens with JSON may be a call as a whole
        size_t i = 0;
        while (i < n && ws(text[i])) i++;
        if (i == n) return 0;
        if (text[i] == (syn == DS_TOOLS_LLAMA3 ? '{' : '[')) return 0;
    }
    const char *m = find(text, n, marker);
    if (m) return (size_t)(m - text);
    return n - partial_tail(text, n, marker);
}
