// Chat templates: the model's Jinja chat_template (jinja*.c) rendered as transformers'
// apply_chat_template does: render(messages=..., tools=tools or None, documents=None,
// add_generation_prompt=..., bos_token, eos_token, **kwargs). The tokenizer keeps the template of
// tokenizer_config.json ("default" of a named list, and "tool_use" for requests with tools), the
// end-of-turn token derived from it, and the tool-call syntax it teaches.
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "dspark/tokenizer.h"
#include "tokenizer/hf_internal.h"
#include "tokenizer/jinja.h"
#include "tokenizer/utf8.h"

struct ds_chat_template {
    ds_jinja *j;
    char *bos, *eos; // NULL: not defined
    ds_tool_syntax syntax;
};

// The tool-call syntax a template teaches, from its text (Qwen3-Coder's XML <function=...> calls
// and other syntaxes are not parsed: DS_TOOLS_NONE).
static ds_tool_syntax detect_syntax(const char *src) {
    if (strstr(src, "<function=")) return DS_TOOLS_NONE;
    if (strstr(src, "<tool_call>")) return DS_TOOLS_HERMES;
    if (strstr(src, "[TOOL_CALLS]")) return DS_TOOLS_MISTRAL;
    if (strstr(src, "<|tool_call>call:")) return DS_TOOLS_GEMMA4;
    if (strstr(src, "<|python_tag|>") || (strstr(src, "<|start_header_id|>") && strstr(src, "\"parameters\"")))
        return DS_TOOLS_LLAMA3;
    return DS_TOOLS_NONE;
}

ds_status ds_chat_template_init(const char *src, const char *bos_token, const char *eos_token, const char *name,
                                ds_chat_template **out) {
    *out = NULL;
    if (!src) return ds_fail(DS_ERR_INVALID, "chat template: NULL source");
    if (!ds_utf8_valid((const uint8_t *)src, strlen(src), NULL))
        return ds_fail(DS_ERR_FORMAT, "%s: the template is not valid UTF-8", name ? name : "chat template");
    ds_chat_template *t = calloc(1, sizeof *t);
    if (!t) return ds_fail(DS_ERR_NOMEM, "chat template: out of memory");
    ds_status st = ds_jinja_parse(src, strlen(src), name ? name : "chat template", &t->j);
    if (!st && ((bos_token && !(t->bos = strdup(bos_token))) || (eos_token && !(t->eos = strdup(eos_token)))))
        st = ds_fail(DS_ERR_NOMEM, "chat template: out of memory");
    if (st) {
        ds_chat_template_free(t);
        return st;
    }
    t->syntax = detect_syntax(src);
    *out = t;
    return DS_OK;
}

void ds_chat_template_free(ds_chat_template *t) {
    if (!t) return;
    ds_jinja_free(t->j);
    free(t->bos);
    free(t->eos);
    free(t);
}

ds_tool_syntax ds_chat_template_tool_syntax(const ds_chat_template *t) { return t ? t->syntax : DS_TOOLS_NONE; }

static ds_status parse_json(const char *what, const char *text, int want_object, cJSON **out) {
    *out = NULL;
    if (!text) return DS_OK;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(text, &end, 0);
    if (!j) return ds_fail(DS_ERR_INVALID, "chat template: %s is not valid JSON (near byte %zu)", what, end ? (size_t)(end - text) : 0);
    while (end && (*end == ' ' || *end == '\n' || *end == '\t' || *end == '\r')) end++;
    if (end && *end) {
        cJSON_Delete(j);
        return ds_fail(DS_ERR_INVALID, "chat template: %s is not valid JSON (trailing data)", what);
    }
    if (want_object ? !cJSON_IsObject(j) : !(cJSON_IsArray(j) || cJSON_IsNull(j))) {
        cJSON_Delete(j);
        return ds_fail(DS_ERR_INVALID, "chat template: %s must be a JSON %s", what, want_object ? "object" : "array");
    }
    *out = j;
    return DS_OK;
}

ds_status ds_chat_template_render(const ds_chat_template *t, const char *messages_json, const char *tools_json,
                                  const char *kwargs_json, int add_generation_prompt, char **out) {
    if (!out) return ds_fail(DS_ERR_INVALID, "chat template: NULL output");
    *out = NULL;
    if (!t || !messages_json) return ds_fail(DS_ERR_INVALID, "chat template: NULL template or messages");
    cJSON *msgs, *tools = NULL, *kw = NULL;
    ds_status st = parse_json("messages", messages_json, 0, &msgs);
    if (!st && cJSON_IsNull(msgs)) st = ds_fail(DS_ERR_INVALID, "chat template: messages must be a JSON array");
    if (!st) st = parse_json("tools", tools_json, 0, &tools);
    if (!st) st = parse_json("kwargs", kwargs_json, 1, &kw);
    cJSON *vars = st ? NULL : cJSON_CreateObject();
    if (!st && !vars) st = ds_fail(DS_ERR_NOMEM, "chat template: out of memory");
    if (!st) {
        cJSON_AddItemToObject(vars, "messages", msgs);
        msgs = NULL;
        if (tools && !cJSON_IsNull(tools)) cJSON_AddItemToObject(vars, "tools", tools), tools = NULL;
        else cJSON_AddNullToObject(vars, "tools");
        cJSON_AddNullToObject(vars, "documents");
        cJSON_AddBoolToObject(vars, "add_generation_prompt", add_generation_prompt != 0);
        if (t->bos) cJSON_AddStringToObject(vars, "bos_token", t->bos);
        if (t->eos) cJSON_AddStringToObject(vars, "eos_token", t->eos);
        for (cJSON *e = kw ? kw->child : NULL; e; e = e->next) { // the caller's kwargs win
            cJSON_DeleteItemFromObjectCaseSensitive(vars, e->string);
            cJSON_AddItemToObject(vars, e->string, cJSON_Duplicate(e, 1));
        }
        st = ds_jinja_render(t->j, vars, out, NULL);
    }
    cJSON_Delete(vars);
    cJSON_Delete(msgs);
    cJSON_Delete(tools);
    cJSON_Delete(kw);
    return st;
}

const ds_chat_template *ds_chat_template_of(const ds_tokenizer *t, int with_tools) {
    if (!t) return NULL;
    return with_tools && t->tmpl_tools ? t->tmpl_tools : t->tmpl;
}

ds_status ds_chat_render_json(const ds_tokenizer *t, const char *messages_json, const char *tools_json,
                              const char *kwargs_json, int add_generation_prompt, char **out) {
    const int with_tools = tools_json && strcmp(tools_json, "null") && strcmp(tools_json, "[]");
    const ds_chat_template *ct = ds_chat_template_of(t, with_tools);
    if (ct) return ds_chat_template_render(ct, messages_json, tools_json, kwargs_json, add_generation_prompt, out);
    if (!out) return ds_fail(DS_ERR_INVALID, "chat: NULL output");
    *out = NULL;
    // No template: role and content of each message in the built-in format.
    cJSON *msgs;
    ds_status st = parse_json("messages", messages_json, 0, &msgs);
    if (st) return st;
    const int n = cJSON_GetArraySize(msgs);
    ds_chat_message *m = calloc((size_t)(n > 0 ? n : 1), sizeof *m);
    if (!m) {
        cJSON_Delete(msgs);
        return ds_fail(DS_ERR_NOMEM, "chat: out of memory");
    }
    int i = 0;
    for (const cJSON *e = msgs ? msgs->child : NULL; e && !st; e = e->next, i++) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(e, "role"), *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsString(r)) st = ds_fail(DS_ERR_INVALID, "chat: message %d has no string 'role'", i);
        else if (c && !cJSON_IsString(c) && !cJSON_IsNull(c))
            st = ds_fail(DS_ERR_UNSUPPORTED, "chat: message %d: content other than a string needs a chat template", i);
        else m[i].role = r->valuestring, m[i].content = cJSON_IsString(c) ? c->valuestring : "";
    }
    if (!st) st = ds_chat_render(t, m, n, add_generation_prompt, out);
    free(m);
    cJSON_Delete(msgs);
    return st;
}

// tokenizer_config.json bos/eos strings; the end-of-turn id a templated model stops at.
int32_t ds_chat_setup(ds_tokenizer *t, const cJSON *ct, const char *bos, const char *eos) {
    const char *def = NULL, *tools = NULL;
    if (cJSON_IsString(ct)) def = ct->valuestring;
    else if (cJSON_IsArray(ct)) {
        const cJSON *it;
        cJSON_ArrayForEach(it, ct) {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name"), *tp = cJSON_GetObjectItemCaseSensitive(it, "template");
            if (!cJSON_IsString(tp)) continue;
            if (cJSON_IsString(nm) && !strcmp(nm->valuestring, "tool_use")) tools = tp->valuestring;
            if (!def || (cJSON_IsString(nm) && !strcmp(nm->valuestring, "default"))) def = tp->valuestring;
        }
    }
    if (!def) return -1;
    // A template that does not parse (or needs what the interpreter leaves out) is not used: the
    // built-in format (recognized from its markers) stays in charge.
    if (ds_chat_template_init(def, bos, eos, "chat_template", &t->tmpl)) t->tmpl = NULL;
    if (tools && t->tmpl && ds_chat_template_init(tools, bos, eos, "chat_template(tool_use)", &t->tmpl_tools)) t->tmpl_tools = NULL;
    if (!t->tmpl) return -1;
    static const char *const k_eot[] = {"<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|end|>", "<|END_OF_TURN_TOKEN|>", "<|eom_id|>", NULL};
    for (int i = 0; k_eot[i]; i++) {
        int32_t id;
        if (strstr(def, k_eot[i]) && (id = ds_tok_lookup(t, k_eot[i], strlen(k_eot[i]))) >= 0) return id;
    }
    if (eos && strstr(def, "eos_token")) return ds_tok_lookup(t, eos, strlen(eos));
    return -1;
}
