// Tool calls in model output, parsed back into {"name", "arguments" (JSON text)} in the syntax
// the chat template teaches (ds_chat_template_tool_syntax):
//   hermes  (Qwen2.5/Qwen3/QwQ, Hermes): "<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>",
//           any number, anywhere; the text outside them is the content.
//   llama3  (Llama 3.1-3.3): the whole reply (after an optional <|python_tag|>) is one or more JSON
//           objects {"name": ..., "parameters": {...}} separated by ';' or whitespace.
//   mistral: "[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]" (or "[TOOL_CALLS]name[ARGS]{...}");
//           the marker is a special token that the text output leaves out, so a reply that is such
//           an array on its own counts too.
//   gemma4  (Gemma 4): "<|tool_call>call:NAME{key:value,...}<tool_call|>", any number, anywhere; the
//           values as its chat template's format_argument writes them (llama.cpp's gemma4 rules):
//           strings between <|"|> quotes, {key:value} objects (keys bare or quoted), [v, ...] arrays,
//           JSON numbers, true, false, null; whitespace after '{', '[', ',' and ':' and before the
//           closing bracket. The arguments come back as the JSON object they spell.
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
    case DS_TOOLS_GEMMA4: return "gemma4";
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

// ---- Gemma 4's values ----------------------------------------------------------------------------

#define G4_QUOTE "<|\"|>" // its string delimiter (one token)
#define G4_DEPTH 64        // nesting beyond this is refused (hostile input cannot exhaust the stack)

typedef struct {
    const char *p, *end;
} g4_in;

static void g4_ws(g4_in *in) {
    while (in->p < in->end && ws(*in->p)) in->p++;
}

static int g4_lit(g4_in *in, const char *s) {
    const size_t k = strlen(s);
    if ((size_t)(in->end - in->p) < k || memcmp(in->p, s, k)) return 0;
    in->p += k;
    return 1;
}

// The text up to the closing quote (after an opening one), as a NUL-terminated copy.
static char *g4_quoted(g4_in *in) {
    const char *e = find(in->p, (size_t)(in->end - in->p), G4_QUOTE);
    if (!e) return NULL;
    char *s = strndup(in->p, (size_t)(e - in->p));
    in->p = e + strlen(G4_QUOTE);
    return s;
}

// A JSON number: -?digits(.digits)?([eE][+-]?digits)?
static cJSON *g4_number(g4_in *in) {
    const char *s = in->p, *q = s;
    if (q < in->end && *q == '-') q++;
    const char *d = q;
    while (q < in->end && *q >= '0' && *q <= '9') q++;
    if (q == d) return NULL;
    if (q < in->end && *q == '.') {
        const char *f = ++q;
        while (q < in->end && *q >= '0' && *q <= '9') q++;
        if (q == f) return NULL;
    }
    if (q < in->end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < in->end && (*q == '+' || *q == '-')) q++;
        const char *x = q;
        while (q < in->end && *q >= '0' && *q <= '9') q++;
        if (q == x) return NULL;
    }
    char *z = strndup(s, (size_t)(q - s));
    cJSON *n = z ? cJSON_CreateNumber(strtod(z, NULL)) : NULL;
    free(z);
    in->p = q;
    return n;
}

static cJSON *g4_value(g4_in *in, int depth);

// {key:value, ...} after its '{' (close: '}') or [value, ...] after its '[' (close: ']').
static cJSON *g4_container(g4_in *in, int depth, int object) {
    cJSON *c = object ? cJSON_CreateObject() : cJSON_CreateArray();
    const char close = object ? '}' : ']';
    g4_ws(in);
    if (!c || depth > G4_DEPTH) goto fail;
    if (in->p < in->end && *in->p == close) {
        in->p++;
        return c;
    }
    for (;;) {
        char *key = NULL;
        if (object) {
            if (g4_lit(in, G4_QUOTE)) key = g4_quoted(in);
            else {
                const char *k = in->p;
                while (in->p < in->end && *in->p != ':' && *in->p != '}') in->p++;
                if (in->p > k) key = strndup(k, (size_t)(in->p - k));
            }
            if (!key || !g4_lit(in, ":")) {
                free(key);
                goto fail;
            }
            g4_ws(in);
        }
        cJSON *v = g4_value(in, depth + 1);
        if (!v) {
            free(key);
            goto fail;
        }
        if (object) cJSON_AddItemToObject(c, key, v);
        else cJSON_AddItemToArray(c, v);
        free(key);
        g4_ws(in);
        if (g4_lit(in, ",")) {
            g4_ws(in);
            continue;
        }
        if (in->p < in->end && *in->p == close) {
            in->p++;
            return c;
        }
        goto fail;
    }
fail:
    cJSON_Delete(c);
    return NULL;
}

static cJSON *g4_value(g4_in *in, int depth) {
    if (g4_lit(in, G4_QUOTE)) {
        char *s = g4_quoted(in);
        cJSON *v = s ? cJSON_CreateString(s) : NULL;
        free(s);
        return v;
    }
    if (g4_lit(in, "{")) return g4_container(in, depth, 1);
    if (g4_lit(in, "[")) return g4_container(in, depth, 0);
    if (g4_lit(in, "true")) return cJSON_CreateTrue();
    if (g4_lit(in, "false")) return cJSON_CreateFalse();
    if (g4_lit(in, "null")) return cJSON_CreateNull();
    return g4_number(in);
}

// One "call:NAME{...}" body (between the markers, s[0..n)): appends the call; 0 when malformed.
static int g4_call(cJSON *calls, const char *s, size_t n) {
    g4_in in = {s, s + n};
    if (!g4_lit(&in, "call:")) return 0;
    const char *name = in.p;
    while (in.p < in.end && *in.p != '{' && !ws(*in.p) && *in.p != '<') in.p++;
    const size_t name_n = (size_t)(in.p - name);
    if (!name_n || !g4_lit(&in, "{")) return 0;
    cJSON *args = g4_container(&in, 1, 1);
    g4_ws(&in);
    if (!args || in.p != in.end) return cJSON_Delete(args), 0;
    cJSON *o = cJSON_CreateObject();
    char *nm = strndup(name, name_n);
    int r = -1;
    if (o && nm) {
        cJSON_AddStringToObject(o, "name", nm);
        cJSON_AddItemToObject(o, "arguments", args);
        args = NULL;
        r = add_call(calls, o);
    }
    cJSON_Delete(args);
    cJSON_Delete(o);
    free(nm);
    return r;
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
    if (!oom && (syn == DS_TOOLS_HERMES || syn == DS_TOOLS_GEMMA4)) {
        const int g4 = syn == DS_TOOLS_GEMMA4;
        const char *open_m = g4 ? "<|tool_call>" : "<tool_call>", *close_m = g4 ? "<tool_call|>" : "</tool_call>";
        const size_t open_n = strlen(open_m), close_n = strlen(close_m);
        const char *p = text, *end = text + n;
        for (;;) {
            const char *open = find(p, (size_t)(end - p), open_m);
            if (!open) {
                put(&b, p, (size_t)(end - p));
                break;
            }
            const char *body = open + open_n, *close = find(body, (size_t)(end - body), close_m);
            const char *body_end = close ? close : end;
            const int before = cJSON_GetArraySize(calls);
            const char *bs = body;
            size_t bn = (size_t)(body_end - body);
            trim(&bs, &bn);
            int r = !bn ? 0 : g4 ? g4_call(calls, bs, bn) : parse_objects(calls, bs, bn);
            if (r < 0) oom = 1;
            if (r != 1) { // not one well-formed call: the text stays content
                while (cJSON_GetArraySize(calls) > before) cJSON_DeleteItemFromArray(calls, before);
                put(&b, p, (size_t)((close ? close + close_n : end) - p));
            } else {
                put(&b, p, (size_t)(open - p));
            }
            if (!close) break;
            p = close + close_n;
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
                       : syn == DS_TOOLS_MISTRAL ? "[TOOL_CALLS]" : syn == DS_TOOLS_GEMMA4 ? "<|tool_call>" : NULL;
    if (!marker) return n;
    if (syn == DS_TOOLS_LLAMA3 || syn == DS_TOOLS_MISTRAL) { // a reply that opens with JSON may be a call as a whole
        size_t i = 0;
        while (i < n && ws(text[i])) i++;
        if (i == n) return 0;
        if (text[i] == (syn == DS_TOOLS_LLAMA3 ? '{' : '[')) return 0;
    }
    const char *m = find(text, n, marker);
    if (m) return (size_t)(m - text);
    return n - partial_tail(text, n, marker);
}
