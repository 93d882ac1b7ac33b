// OpenAI request bodies -> ds_oa_request: every field type- and range-checked; prompts tokenized
// (text with BOS, as `dspark generate` does; chat through ds_chat_render).
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "serve/serve.h"
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
    if (!(r->prompt = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1)))) return ds_fail(DS_ERR_NOMEM, "out of memory");
    if ((st = ds_tokenize(tok, text, len, 1, r->prompt, n, &n))) return st;
    r->n_prompt = n;
    return DS_OK;
}

static ds_status parse_prompt(const cJSON *root, const ds_model *m, ds_oa_request *r, const char **param) {
    const cJSON *p = field(root, "prompt");
    if (!p) return bad(param, "prompt", "'%s' is required", "prompt");
    if (cJSON_IsString(p)) return tokenize(m, p->valuestring, r, "prompt", param);
    if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) < 1)
        return bad(param, "prompt", "'%s' must be a string, an array of one string or an array of token ids", "prompt");
    const cJSON *first = cJSON_GetArrayItem(p, 0);
    if (cJSON_IsString(first)) {
        if (cJSON_GetArraySize(p) != 1) return bad(param, "prompt", "'%s' may hold only one string (batches are not supported)", "prompt");
        return tokenize(m, first->valuestring, r, "prompt", param);
    }
    const int n = cJSON_GetArraySize(p), V = ds_model_get_info(m)->vocab_size;
    if (n > ds_model_get_info(m)->max_ctx) return bad(param, "prompt", "'%s' is longer than the model's context", "prompt");
    if (!(r->prompt = malloc(sizeof(int32_t) * (size_t)n))) return ds_fail(DS_ERR_NOMEM, "out of memory");
    int i = 0;
    for (const cJSON *t = p->child; t; t = t->next, i++) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 || t->valuedouble >= V) {
            *param = "prompt";
            return ds_fail(DS_ERR_INVALID, "'prompt' token ids must be integers in 0..%d", V - 1);
        }
        r->prompt[i] = (int32_t)t->valuedouble;
    }
    r->n_prompt = n;
    return DS_OK;
}

static ds_status parse_messages(const cJSON *root, const ds_model *m, ds_oa_request *r, const char **param) {
    const cJSON *ms = field(root, "messages");
    if (!ms) return bad(param, "messages", "'%s' is required", "messages");
    if (!cJSON_IsArray(ms) || cJSON_GetArraySize(ms) < 1)
        return bad(param, "messages", "'%s' must be a non-empty array", "messages");
    const int n = cJSON_GetArraySize(ms);
    ds_chat_message *msgs = calloc((size_t)n, sizeof *msgs);
    if (!msgs) return ds_fail(DS_ERR_NOMEM, "out of memory");
    ds_status st = DS_OK;
    int i = 0;
    for (const cJSON *e = ms->child; e; e = e->next, i++) {
        const cJSON *role = cJSON_IsObject(e) ? field(e, "role") : NULL;
        const cJSON *content = cJSON_IsObject(e) ? field(e, "content") : NULL;
        if (!cJSON_IsString(role) || !cJSON_IsString(content)) {
            st = bad(param, "messages", "each of '%s' must be an object with string 'role' and 'content'", "messages");
            break;
        }
        if (!utf8_ok(role->valuestring) || !utf8_ok(content->valuestring)) {
            st = bad(param, "messages", "'%s' is not valid UTF-8", "messages");
            break;
        }
        msgs[i].role = role->valuestring;
        msgs[i].content = content->valuestring;
    }
    char *text = NULL;
    if (!st && (st = ds_chat_render(ds_model_tokenizer(m), msgs, n, 1, &text))) {
        *param = "messages";
        ds_fail_prefix(st, "messages");
    }
    free(msgs);
    if (!st) st = tokenize(m, text, r, "messages", param);
    free(text);
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

ds_status ds_oa_parse(const char *body, size_t n, int chat, const ds_model *m, ds_oa_request *r, const char **param) {
    memset(r, 0, sizeof *r);
    *param = NULL;
    r->chat = chat;
    r->sp = ds_sampler_default();
    r->sp.temperature = 1.0f; // OpenAI's default
    cJSON *root = cJSON_ParseWithLength(body, n);
    if (!root) return ds_fail(DS_ERR_INVALID, "the body is not valid JSON");
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
    if ((st = get_int(root, "n", 1, 1e9, &v, param))) goto out;
    if (v != 1) {
        st = bad(param, "n", "'%s' must be 1 (one choice per request)", "n");
        goto out;
    }
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
    if ((f = field(root, "verify"))) { // dspark's own: how sampled drafts are verified
        if (!cJSON_IsString(f) || (strcmp(f->valuestring, "coupled") && strcmp(f->valuestring, "residual"))) {
            st = bad(param, "verify", "'%s' must be \"coupled\" or \"residual\"", "verify");
            goto out;
        }
        r->has_verify = 1;
        r->sp.verify = !strcmp(f->valuestring, "residual") ? DS_VERIFY_RESIDUAL : DS_VERIFY_COUPLED;
    }
    if ((st = get_int(root, "max_tokens", 1, 1e9, &mt, param))) goto out;
    if (chat && mt < 0 && (st = get_int(root, "max_completion_tokens", 1, 1e9, &mt, param))) goto out;
    if ((st = parse_stops(root, r, param))) goto out;
    if ((st = chat ? parse_messages(root, m, r, param) : parse_prompt(root, m, r, param))) goto out;
    const int room = in->max_ctx - r->n_prompt;
    if (room < 1) {
        *param = chat ? "messages" : "prompt";
        st = ds_fail(DS_ERR_INVALID, "the prompt (%d tokens) fills the model's context of %d", r->n_prompt, in->max_ctx);
        goto out;
    }
    // Defaults: OpenAI's 16 for completions, the rest of the context for chat.
    if (mt < 0) mt = chat ? room : (16 < room ? 16 : room);
    if (mt > room) {
        *param = "max_tokens";
        st = ds_fail(DS_ERR_INVALID, "the prompt (%d tokens) + max_tokens (%.0f) exceed the model's context of %d",
                     r->n_prompt, mt, in->max_ctx);
        goto out;
    }
    r->max_tokens = (int)mt;
out:
    cJSON_Delete(root);
    if (st) ds_oa_request_free(r);
    return st;
}

void ds_oa_request_free(ds_oa_request *r) {
    free(r->prompt);
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    r->prompt = NULL;
    r->n_prompt = r->n_stops = 0;
}
