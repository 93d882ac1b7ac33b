// Prompt files and their tokenization for generation (see prompts.h).
#include "gen/prompts.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "io/mapfile.h"
#include "tokenizer/utf8.h"

void ds_prompts_free(ds_prompt_set *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) free(p->text[i]);
    free(p->text);
    free(p->line);
    free(p->chat);
    free(p->path);
    free(p);
}

static ds_status prompts_push(ds_prompt_set *p, int *cap, char *text, int line) {
    if (!text) return ds_fail(DS_ERR_NOMEM, "out of memory reading %s", p->path);
    if (p->n == *cap) {
        if (*cap > INT_MAX / 2) {
            free(text);
            return ds_fail(DS_ERR_INVALID, "%s: too many prompts", p->path);
        }
        const int nc = *cap ? 2 * *cap : 64;
        char **nt = realloc(p->text, sizeof *nt * (size_t)nc);
        if (nt) p->text = nt;
        int *nl = nt ? realloc(p->line, sizeof *nl * (size_t)nc) : NULL;
        if (nl) p->line = nl;
        unsigned char *nch = nl ? realloc(p->chat, (size_t)nc) : NULL;
        if (nch) p->chat = nch;
        if (!nt || !nl || !nch) {
            free(text);
            return ds_fail(DS_ERR_NOMEM, "out of memory reading %s", p->path);
        }
        *cap = nc;
    }
    p->text[p->n] = text;
    p->chat[p->n] = 0;
    p->line[p->n++] = line;
    return DS_OK;
}

static char *dup_n(const char *s, size_t n) {
    char *t = malloc(n + 1);
    if (t) {
        memcpy(t, s, n);
        t[n] = 0;
    }
    return t;
}

// A string field that must be valid UTF-8 (NULL when absent or not a string).
static const char *utf8_field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) && v->valuestring ? v->valuestring : NULL;
}

// A conversation line (j has "messages", "conversations" or "instruction") as the normalized turns
// (a JSON array of {"role", "content"}, trailing assistant turns dropped) in *out.
static ds_status chat_turns(const cJSON *j, const char *path, int line, char **out) {
    *out = NULL;
    cJSON *turns = cJSON_CreateArray();
    if (!turns) return ds_fail(DS_ERR_NOMEM, "out of memory");
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages");
    const char *field = "messages", *rk = "role", *ck = "content";
    if (!msgs) {
        msgs = cJSON_GetObjectItemCaseSensitive(j, "conversations");
        field = "conversations", rk = "from", ck = "value";
    }
    ds_status st = DS_OK;
    size_t bad;
    if (msgs) {
        if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
            st = ds_fail(DS_ERR_FORMAT, "%s:%d: \"%s\" must be a non-empty array of turns", path, line, field);
        int k = 0;
        for (const cJSON *m = msgs->child; m && !st; m = m->next, k++) {
            const char *role = cJSON_IsObject(m) ? utf8_field(m, rk) : NULL, *content = cJSON_IsObject(m) ? utf8_field(m, ck) : NULL;
            const char *r = !role ? NULL
                            : !strcmp(role, "system")                                   ? "system"
                            : !strcmp(role, "user") || !strcmp(role, "human")          ? "user"
                            : !strcmp(role, "assistant") || !strcmp(role, "gpt")       ? "assistant"
                                                                                        : NULL;
            if (!cJSON_IsObject(m)) st = ds_fail(DS_ERR_FORMAT, "%s:%d: %s[%d] is not an object", path, line, field, k);
            else if (!role)
                st = ds_fail(DS_ERR_FORMAT, "%s:%d: %s[%d] has no \"%s\" string", path, line, field, k, rk);
            else if (!r)
                st = ds_fail(DS_ERR_FORMAT, "%s:%d: %s[%d]: \"%s\" is '%.40s'; expected system, user or assistant%s", path,
                             line, field, k, rk, role, rk[0] == 'f' ? " (or human, gpt)" : "");
            else if (!content)
                st = ds_fail(DS_ERR_FORMAT, "%s:%d: %s[%d] has no \"%s\" string (content parts arrays are not read)", path,
                             line, field, k, ck);
            else if (!ds_utf8_valid((const uint8_t *)content, strlen(content), &bad))
                st = ds_fail(DS_ERR_FORMAT, "%s:%d: %s[%d]: the \"%s\" string is not valid UTF-8", path, line, field, k, ck);
            else {
                cJSON *t = cJSON_CreateObject();
                cJSON_AddStringToObject(t, "role", r);
                cJSON_AddStringToObject(t, "content", content);
                cJSON_AddItemToArray(turns, t);
            }
        }
    } else {
        const char *ins = utf8_field(j, "instruction"), *in = utf8_field(j, "input");
        if (!ins) st = ds_fail(DS_ERR_FORMAT, "%s:%d: \"instruction\" must be a string", path, line);
        else if (cJSON_GetObjectItemCaseSensitive(j, "input") && !in)
            st = ds_fail(DS_ERR_FORMAT, "%s:%d: \"input\" must be a string", path, line);
        else if (!ds_utf8_valid((const uint8_t *)ins, strlen(ins), &bad) ||
                 (in && !ds_utf8_valid((const uint8_t *)in, strlen(in), &bad)))
            st = ds_fail(DS_ERR_FORMAT, "%s:%d: the instruction is not valid UTF-8", path, line);
        else {
            const size_t len = strlen(ins) + (in ? strlen(in) : 0) + 3;
            char *u = malloc(len);
            if (!u) st = ds_fail(DS_ERR_NOMEM, "out of memory");
            else {
                snprintf(u, len, in && *in ? "%s\n\n%s" : "%s", ins, in ? in : "");
                cJSON *t = cJSON_CreateObject();
                cJSON_AddStringToObject(t, "role", "user");
                cJSON_AddStringToObject(t, "content", u);
                cJSON_AddItemToArray(turns, t);
                free(u);
            }
        }
    }
    // The reference answer(s) at the end go: the target writes its own.
    int n = cJSON_GetArraySize(turns);
    while (!st && n > 0 && !strcmp(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(turns, n - 1), "role")->valuestring, "assistant"))
        cJSON_DeleteItemFromArray(turns, --n);
    if (!st && (n == 0 || strcmp(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(turns, n - 1), "role")->valuestring, "user")))
        st = ds_fail(DS_ERR_FORMAT, "%s:%d: the conversation has no user turn for the target to answer", path, line);
    if (!st && !(*out = cJSON_PrintUnformatted(turns))) st = ds_fail(DS_ERR_NOMEM, "out of memory");
    cJSON_Delete(turns);
    return st;
}

ds_status ds_prompt_text(const ds_prompt_set *p, int i, const ds_tokenizer *t, char **out) {
    *out = NULL;
    if (!p->chat[i]) {
        *out = strdup(p->text[i]);
        return *out ? DS_OK : ds_fail(DS_ERR_NOMEM, "out of memory");
    }
    cJSON *turns = cJSON_Parse(p->text[i]);
    const int n = cJSON_GetArraySize(turns);
    ds_chat_message *m = calloc((size_t)(n > 0 ? n : 1), sizeof *m);
    if (!turns || !m) {
        cJSON_Delete(turns);
        free(m);
        return ds_fail(DS_ERR_NOMEM, "out of memory");
    }
    int k = 0;
    for (const cJSON *e = turns->child; e; e = e->next, k++) {
        m[k].role = cJSON_GetObjectItemCaseSensitive(e, "role")->valuestring;
        m[k].content = cJSON_GetObjectItemCaseSensitive(e, "content")->valuestring;
    }
    ds_status st = ds_chat_render(t, m, n, 1, out);
    free(m);
    cJSON_Delete(turns);
    return st ? ds_fail_prefix(st, "%s:%d", p->path, p->line[i]) : DS_OK;
}

// One line s[0..n) (no newline, no trailing \r): appends a prompt, skips blanks, or fails.
static ds_status prompts_line(ds_prompt_set *p, int *cap, const char *s, size_t n, int line, int allow_chat) {
    const char *path = p->path;
    size_t b = 0;
    while (b < n && (s[b] == ' ' || s[b] == '\t')) b++;
    if (b == n) return DS_OK; // blank
    if (memchr(s, 0, n)) return ds_fail(DS_ERR_FORMAT, "%s:%d: contains a NUL byte", path, line);
    size_t bad;
    if (!ds_utf8_valid((const uint8_t *)s, n, &bad))
        return ds_fail(DS_ERR_FORMAT, "%s:%d: invalid UTF-8 at column %zu", path, line, bad + 1);
    if (s[b] != '{') return prompts_push(p, cap, dup_n(s, n), line);
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(s + b, n - b, &end, 0);
    if (j && end) {
        size_t rest = (size_t)(end - s);
        while (rest < n && (s[rest] == ' ' || s[rest] == '\t')) rest++;
        if (rest != n) {
            cJSON_Delete(j);
            return ds_fail(DS_ERR_FORMAT, "%s:%d: unexpected text after the JSON object", path, line);
        }
    }
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return ds_fail(DS_ERR_FORMAT, "%s:%d: a line starting with '{' must be a JSON object (bad JSON)", path, line);
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "prompt");
    const int conv = !v && (cJSON_GetObjectItemCaseSensitive(j, "messages") ||
                            cJSON_GetObjectItemCaseSensitive(j, "conversations") ||
                            cJSON_GetObjectItemCaseSensitive(j, "instruction"));
    if (conv && !allow_chat) {
        cJSON_Delete(j);
        return ds_fail(DS_ERR_FORMAT,
                       "%s:%d: a chat conversation: only datagen and train --eval-prompts render them; give a "
                       "\"prompt\" string here",
                       path, line);
    }
    if (conv) {
        char *turns;
        ds_status st = chat_turns(j, path, line, &turns);
        cJSON_Delete(j);
        if (!st && !(st = prompts_push(p, cap, turns, line))) p->chat[p->n - 1] = 1;
        return st;
    }
    if (!cJSON_IsString(v) || !v->valuestring) {
        cJSON_Delete(j);
        return ds_fail(DS_ERR_FORMAT,
                       "%s:%d: the JSON object has no \"prompt\" string%s", path, line,
                       allow_chat ? " (nor \"messages\", \"conversations\" or \"instruction\")" : "");
    }
    const size_t len = strlen(v->valuestring);
    if (!ds_utf8_valid((const uint8_t *)v->valuestring, len, &bad)) {
        cJSON_Delete(j);
        return ds_fail(DS_ERR_FORMAT, "%s:%d: the \"prompt\" string is not valid UTF-8 (a lone surrogate escape?)", path,
                       line);
    }
    ds_status st = prompts_push(p, cap, dup_n(v->valuestring, len), line);
    cJSON_Delete(j);
    return st;
}

static ds_status prompts_load(const char *path, int allow_chat, ds_prompt_set **out) {
    *out = NULL;
    ds_prompt_set *p = ds_calloc(1, sizeof *p);
    if (!p) return DS_ERR_NOMEM;
    p->path = strdup(path);
    ds_mapfile mf;
    ds_status st = p->path ? ds_mapfile_open(&mf, path) : ds_fail(DS_ERR_NOMEM, "out of memory");
    if (st) {
        ds_prompts_free(p);
        return st;
    }
    const char *s = (const char *)mf.data;
    int cap = 0, line = 0;
    for (size_t pos = 0; pos < mf.size && !st;) {
        if (line == INT_MAX) {
            st = ds_fail(DS_ERR_INVALID, "%s: too many lines", path);
            break;
        }
        line++;
        const char *nl = memchr(s + pos, '\n', mf.size - pos);
        size_t e = nl ? (size_t)(nl - s) : mf.size, len = e - pos;
        if (len && s[pos + len - 1] == '\r') len--;
        st = prompts_line(p, &cap, s + pos, len, line, allow_chat);
        pos = e + 1;
    }
    ds_mapfile_close(&mf);
    if (!st && p->n == 0) st = ds_fail(DS_ERR_FORMAT, "%s: no prompts (every line is blank)", path);
    if (st) {
        ds_prompts_free(p);
        return st;
    }
    *out = p;
    return DS_OK;
}

ds_status ds_prompts_load(const char *path, ds_prompt_set **out) { return prompts_load(path, 0, out); }

ds_status ds_prompts_load_chat(const char *path, ds_prompt_set **out) { return prompts_load(path, 1, out); }

// ---------------------------------------------------------------------------------------------
// Tokenized for generation

void ds_gen_prompts_free(ds_gen_prompts *p) {
    for (int i = 0; p->ids && i < p->n; i++) free(p->ids[i]);
    free(p->ids);
    free(p->len);
    memset(p, 0, sizeof *p);
}

ds_status ds_gen_prompts_tokenize(const ds_model *m, const ds_prompt_set *ps, int max_new, ds_gen_prompts *out) {
    memset(out, 0, sizeof *out);
    const ds_tokenizer *tok = ds_model_tokenizer(m);
    if (!tok) return ds_fail(DS_ERR_INVALID, "%s: the target has no tokenizer dspark supports, so it cannot take text prompts", ps->path);
    const int max_ctx = ds_model_get_info(m)->max_ctx;
    if (!(out->ids = ds_calloc((size_t)ps->n, sizeof *out->ids)) || !(out->len = ds_calloc((size_t)ps->n, sizeof *out->len))) {
        ds_gen_prompts_free(out);
        return DS_ERR_NOMEM;
    }
    out->n = ps->n;
    for (int i = 0; i < ps->n; i++) {
        char *text;
        ds_status st = ds_prompt_text(ps, i, tok, &text); // (its errors name the file and line)
        ds_gen *g = NULL;                                   // tokenized exactly as a text request is
        if (!st && (st = ds_gen_init(tok, &(ds_gen_request){.text = text}, &g)))
            st = ds_fail_prefix(st, "%s:%d", ps->path, ps->line[i]);
        free(text);
        if (st) {
            ds_gen_prompts_free(out);
            return st;
        }
        int n;
        const int32_t *ids = ds_gen_prompt(g, &n);
        if ((out->ids[i] = ds_malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1))))
            memcpy(out->ids[i], ids, sizeof(int32_t) * (size_t)n);
        ds_gen_free(g);
        if (!out->ids[i]) {
            ds_gen_prompts_free(out);
            return DS_ERR_NOMEM;
        }
        out->len[i] = n;
        if (n < 1 || (long)n + max_new > max_ctx) {
            ds_gen_prompts_free(out);
            return ds_fail(DS_ERR_INVALID, "%s:%d: prompt (%d tokens) + %d new tokens %s the model's context of %d",
                           ps->path, ps->line[i], n, max_new, n < 1 ? "(no BOS?) do not fit" : "exceed", max_ctx);
        }
    }
    return DS_OK;
}
