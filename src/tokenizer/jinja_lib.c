// Jinja values and their library: Python's str()/repr() of values (floats as Python's shortest
// repr), json.dumps as transformers' tojson calls it (ensure_ascii=False, indent, separators,
// sort_keys), the filters, tests, string/dict methods and global functions (range, namespace,
// raise_exception, strftime_now, dict) chat templates use. What is left out is refused by name.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenizer/jinja_internal.h"

// ---------------------------------------------------------------------------------------------
// Buffers and constructors

void ds_jbuf_put(ds_jctx *c, ds_jbuf *b, const char *s, size_t n) {
    if (c->err) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            c->err = ds_fail(DS_ERR_NOMEM, "%s: out of memory while rendering", c->name);
            return;
        }
        b->s = p, b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void puts_(ds_jctx *c, ds_jbuf *b, const char *s) { ds_jbuf_put(c, b, s, strlen(s)); }

ds_jv ds_jbuf_value(ds_jctx *c, ds_jbuf *b) {
    ds_jv v = ds_jv_str(c, b->s ? b->s : "", b->n);
    free(b->s);
    b->s = NULL;
    b->n = b->cap = 0;
    return v;
}

static ds_jv nomem(ds_jctx *c) {
    if (!c->err) c->err = ds_fail(DS_ERR_NOMEM, "%s: out of memory while rendering", c->name);
    return ds_jv_undef(NULL);
}

ds_jv ds_jv_str(ds_jctx *c, const char *s, size_t n) {
    ds_jstr *p = ds_ja_alloc(c->a, sizeof *p + n + 1);
    if (!p) return nomem(c);
    memcpy(p->s, s, n);
    p->s[n] = 0;
    p->n = n;
    ds_jv v = {.t = JV_STR};
    v.s = p;
    return v;
}

static ds_jv cstr(ds_jctx *c, const char *s) { return ds_jv_str(c, s, strlen(s)); }

ds_jv ds_jv_list(ds_jctx *c, int n) {
    ds_jlist *l = ds_ja_alloc(c->a, sizeof *l + sizeof(ds_jv) * (size_t)(n > 0 ? n : 0));
    if (!l) return nomem(c);
    l->n = n;
    ds_jv v = {.t = JV_LIST};
    v.l = l;
    return v;
}

ds_jv ds_jv_dict(ds_jctx *c) {
    ds_jdict *d = ds_ja_alloc(c->a, sizeof *d);
    if (!d) return nomem(c);
    ds_jv v = {.t = JV_DICT};
    v.d = d;
    return v;
}

ds_jv *ds_jv_dict_get(const ds_jdict *d, const char *k, size_t kn) {
    for (int i = 0; i < d->n; i++)
        if (d->k[i]->n == kn && !memcmp(d->k[i]->s, k, kn)) return &d->v[i];
    return NULL;
}

void ds_jv_dict_set(ds_jctx *c, ds_jdict *d, const char *k, size_t kn, ds_jv v) {
    ds_jv *old = ds_jv_dict_get(d, k, kn);
    if (old) {
        *old = v;
        return;
    }
    if (d->n == d->cap) {
        int cap = d->cap ? 2 * d->cap : 8;
        ds_jstr **nk = ds_ja_alloc(c->a, sizeof *nk * (size_t)cap);
        ds_jv *nv = ds_ja_alloc(c->a, sizeof *nv * (size_t)cap);
        if (!nk || !nv) {
            nomem(c);
            return;
        }
        if (d->n) memcpy(nk, d->k, sizeof *nk * (size_t)d->n), memcpy(nv, d->v, sizeof *nv * (size_t)d->n);
        d->k = nk, d->v = nv, d->cap = cap;
    }
    ds_jv ks = ds_jv_str(c, k, kn);
    if (c->err) return;
    d->k[d->n] = ks.s;
    d->v[d->n++] = v;
}

// JSON numbers: cJSON keeps no int/float distinction, so integral values become ints.
ds_jv ds_jv_from_json(ds_jctx *c, const cJSON *j) {
    if (!j || cJSON_IsNull(j)) return ds_jv_none();
    if (cJSON_IsBool(j)) return ds_jv_bool(cJSON_IsTrue(j));
    if (cJSON_IsNumber(j)) {
        double x = j->valuedouble;
        if (x == floor(x) && fabs(x) < 9.2e18) return ds_jv_int((int64_t)x);
        return ds_jv_float(x);
    }
    if (cJSON_IsString(j)) return cstr(c, j->valuestring);
    if (cJSON_IsArray(j)) {
        ds_jv r = ds_jv_list(c, cJSON_GetArraySize(j));
        int i = 0;
        for (const cJSON *e = j->child; e && !c->err; e = e->next) r.l->a[i++] = ds_jv_from_json(c, e);
        return r;
    }
    if (cJSON_IsObject(j)) {
        ds_jv r = ds_jv_dict(c);
        for (const cJSON *e = j->child; e && !c->err; e = e->next) {
            ds_jv v = ds_jv_from_json(c, e);
            ds_jv_dict_set(c, r.d, e->string, strlen(e->string), v);
        }
        return r;
    }
    return ds_jv_none();
}

// ---------------------------------------------------------------------------------------------
// Python semantics of values

int ds_jv_truthy(ds_jv v) {
    switch (v.t) {
    case JV_UNDEF:
    case JV_NONE: return 0;
    case JV_BOOL: return v.b;
    case JV_INT: return v.i != 0;
    case JV_FLOAT: return v.f != 0;
    case JV_STR: return v.s->n > 0;
    case JV_LIST: return v.l->n > 0;
    case JV_DICT: return v.d->n > 0;
    default: return 1;
    }
}

static int numeric(ds_jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static double numval(ds_jv v) { return v.t == JV_FLOAT ? v.f : v.t == JV_INT ? (double)v.i : v.b; }

int ds_jv_equal(ds_jv a, ds_jv b) {
    if (numeric(a) && numeric(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) return (a.t == JV_INT ? a.i : a.b) == (b.t == JV_INT ? b.i : b.b);
        return numval(a) == numval(b);
    }
    if (a.t != b.t) return 0;
    switch (a.t) {
    case JV_UNDEF:
    case JV_NONE: return 1;
    case JV_STR: return a.s->n == b.s->n && !memcmp(a.s->s, b.s->s, a.s->n);
    case JV_LIST:
        if (a.l->n != b.l->n) return 0;
        for (int i = 0; i < a.l->n; i++)
            if (!ds_jv_equal(a.l->a[i], b.l->a[i])) return 0;
        return 1;
    case JV_DICT:
        if (a.d == b.d) return 1;
        if (a.d->n != b.d->n || a.d->ns || b.d->ns) return 0;
        for (int i = 0; i < a.d->n; i++) {
            ds_jv *o = ds_jv_dict_get(b.d, a.d->k[i]->s, a.d->k[i]->n);
            if (!o || !ds_jv_equal(a.d->v[i], *o)) return 0;
        }
        return 1;
    case JV_MACRO: return a.m == b.m;
    case JV_FUNC: return a.fn == b.fn;
    default: return 0;
    }
}

const char *ds_jv_type_name(ds_jv v) {
    switch (v.t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v.l->tuple ? "tuple" : "list";
    case JV_DICT: return v.d->ns ? "Namespace" : "dict";
    case JV_MACRO: return "Macro";
    default: return "builtin_function_or_method";
    }
}

static int64_t utf8_len(const char *s, size_t n) {
    int64_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xc0) != 0x80;
    return k;
}

int64_t ds_jv_len(ds_jv v) {
    switch (v.t) {
    case JV_UNDEF: return 0;
    case JV_STR: return utf8_len(v.s->s, v.s->n);
    case JV_LIST: return v.l->n;
    case JV_DICT: return v.d->n;
    default: return -1;
    }
}

// Python's repr(float): the shortest digits that round-trip, fixed notation for exponents in
// [-4, 16), else d.ddde+XX.
static void float_repr(double f, char *out, size_t cap) {
    if (isnan(f)) {
        snprintf(out, cap, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(out, cap, f < 0 ? "-inf" : "inf");
        return;
    }
    if (f == 0) {
        snprintf(out, cap, signbit(f) ? "-0.0" : "0.0");
        return;
    }
    char tmp[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    // tmp: [-]d[.ddd]e[+-]XX
    char digits[24];
    int nd = 0, neg = tmp[0] == '-';
    const char *p = tmp + neg;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    digits[nd] = 0;
    const int exp = atoi(p + 1);
    char *o = out;
    size_t left = cap;
#define PUT(...) do { int w_ = snprintf(o, left, __VA_ARGS__); if (w_ < 0 || (size_t)w_ >= left) return; o += w_, left -= (size_t)w_; } while (0)
    if (neg) PUT("-");
    if (exp >= 16 || exp < -4) {
        PUT("%c", digits[0]);
        if (nd > 1) PUT(".%s", digits + 1);
        PUT("e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    } else if (exp >= 0) {
        for (int i = 0; i <= exp; i++) PUT("%c", i < nd ? digits[i] : '0');
        PUT(".");
        if (nd > exp + 1) PUT("%s", digits + exp + 1);
        else PUT("0");
    } else {
        PUT("0.");
        for (int i = 0; i < -exp - 1; i++) PUT("0");
        PUT("%s", digits);
    }
#undef PUT
}

// Python's repr(str).
static void str_repr(ds_jctx *c, ds_jbuf *b, const char *s, size_t n) {
    int sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    const char q = sq && !dq ? '"' : '\'';
    ds_jbuf_put(c, b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char e[12];
        if (ch == '\\') puts_(c, b, "\\\\");
        else if (ch == (unsigned char)q) snprintf(e, sizeof e, "\\%c", q), puts_(c, b, e);
        else if (ch == '\n') puts_(c, b, "\\n");
        else if (ch == '\r') puts_(c, b, "\\r");
        else if (ch == '\t') puts_(c, b, "\\t");
        else if (ch < 0x20 || ch == 0x7f) snprintf(e, sizeof e, "\\x%02x", ch), puts_(c, b, e);
        else if (ch == 0xc2 && i + 1 < n && ((unsigned char)s[i + 1] <= 0xa0 || (unsigned char)s[i + 1] == 0xad))
            snprintf(e, sizeof e, "\\x%02x", (unsigned char)s[i + 1]), puts_(c, b, e), i++;
        else if (ch == 0xe2 && i + 2 < n && (unsigned char)s[i + 1] == 0x80 && ((unsigned char)s[i + 2] == 0xa8 || (unsigned char)s[i + 2] == 0xa9))
            snprintf(e, sizeof e, "\\u%04x", 0x2000 + ((unsigned char)s[i + 2] - 0x80)), puts_(c, b, e), i += 2;
        else ds_jbuf_put(c, b, (const char *)&s[i], 1);
    }
    ds_jbuf_put(c, b, &q, 1);
}

void ds_jv_to_str(ds_jctx *c, ds_jbuf *b, ds_jv v, int repr) {
    char tmp[48];
    switch (v.t) {
    case JV_UNDEF:
        if (repr) puts_(c, b, "Undefined");
        return;
    case JV_NONE: puts_(c, b, "None"); return;
    case JV_BOOL: puts_(c, b, v.b ? "True" : "False"); return;
    case JV_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v.i), puts_(c, b, tmp); return;
    case JV_FLOAT: float_repr(v.f, tmp, sizeof tmp), puts_(c, b, tmp); return;
    case JV_STR:
        if (repr) str_repr(c, b, v.s->s, v.s->n);
        else ds_jbuf_put(c, b, v.s->s, v.s->n);
        return;
    case JV_LIST:
        puts_(c, b, v.l->tuple ? "(" : "[");
        for (int i = 0; i < v.l->n; i++) {
            if (i) puts_(c, b, ", ");
            ds_jv_to_str(c, b, v.l->a[i], 1);
        }
        puts_(c, b, v.l->tuple ? (v.l->n == 1 ? ",)" : ")") : "]");
        return;
    case JV_DICT:
        puts_(c, b, v.d->ns ? "<Namespace {" : "{");
        for (int i = 0; i < v.d->n; i++) {
            if (i) puts_(c, b, ", ");
            str_repr(c, b, v.d->k[i]->s, v.d->k[i]->n);
            puts_(c, b, ": ");
            ds_jv_to_str(c, b, v.d->v[i], 1);
        }
        puts_(c, b, v.d->ns ? "}>" : "}");
        return;
    case JV_MACRO: puts_(c, b, "<Macro '"), puts_(c, b, v.m->name), puts_(c, b, "'>"); return;
    default: puts_(c, b, "<built-in function>"); return;
    }
}

ds_jv ds_jv_stringify(ds_jctx *c, ds_jv v) {
    if (v.t == JV_STR) return v;
    ds_jbuf b = {0};
    ds_jv_to_str(c, &b, v, 0);
    return ds_jbuf_value(c, &b);
}

// json.dumps options.
typedef struct {
    int indent;            // < 0: none
    int ensure_ascii, sort_keys;
    const char *item_sep, *key_sep;
    int line;
} json_opts;

static void json_str(ds_jctx *c, ds_jbuf *b, const char *s, size_t n, int ascii) {
    puts_(c, b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char e[16];
        if (ch == '"') puts_(c, b, "\\\"");
        else if (ch == '\\') puts_(c, b, "\\\\");
        else if (ch == '\n') puts_(c, b, "\\n");
        else if (ch == '\r') puts_(c, b, "\\r");
        else if (ch == '\t') puts_(c, b, "\\t");
        else if (ch == '\b') puts_(c, b, "\\b");
        else if (ch == '\f') puts_(c, b, "\\f");
        else if (ch < 0x20 || (ascii && ch == 0x7f)) snprintf(e, sizeof e, "\\u%04x", ch), puts_(c, b, e);
        else if (ascii && ch >= 0x80) { // \uXXXX, surrogate pairs above the BMP
            unsigned cp = 0;
            int len = ch >= 0xf0 ? 4 : ch >= 0xe0 ? 3 : 2;
            cp = ch & (0x3f >> (len - 1));
            for (int k = 1; k < len && i + (size_t)k < n; k++) cp = cp << 6 | ((unsigned char)s[i + k] & 0x3f);
            i += (size_t)len - 1;
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(e, sizeof e, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
            } else {
                snprintf(e, sizeof e, "\\u%04x", cp);
            }
            puts_(c, b, e);
        } else ds_jbuf_put(c, b, (const char *)&s[i], 1);
    }
    puts_(c, b, "\"");
}

static void newline_indent(ds_jctx *c, ds_jbuf *b, int indent, int level) {
    puts_(c, b, "\n");
    for (int i = 0; i < indent * level; i++) puts_(c, b, " ");
}

static int key_cmp(const void *x, const void *y) {
    const ds_jstr *a = **(ds_jstr *const *const *)x, *b = **(ds_jstr *const *const *)y;
    size_t m = a->n < b->n ? a->n : b->n;
    int r = memcmp(a->s, b->s, m);
    return r ? r : (a->n > b->n) - (a->n < b->n);
}

static void to_json(ds_jctx *c, ds_jbuf *b, ds_jv v, const json_opts *o, int level) {
    char tmp[48];
    if (c->err) return;
    if (level > 200) {
        ds_jerr(c, o->line, DS_ERR_INVALID, "tojson: the value is nested too deeply");
        return;
    }
    switch (v.t) {
    case JV_NONE: puts_(c, b, "null"); return;
    case JV_BOOL: puts_(c, b, v.b ? "true" : "false"); return;
    case JV_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v.i), puts_(c, b, tmp); return;
    case JV_FLOAT:
        if (isnan(v.f)) puts_(c, b, "NaN");
        else if (isinf(v.f)) puts_(c, b, v.f < 0 ? "-Infinity" : "Infinity");
        else float_repr(v.f, tmp, sizeof tmp), puts_(c, b, tmp);
        return;
    case JV_STR: json_str(c, b, v.s->s, v.s->n, o->ensure_ascii); return;
    case JV_LIST:
        if (!v.l->n) {
            puts_(c, b, "[]");
            return;
        }
        puts_(c, b, "[");
        for (int i = 0; i < v.l->n; i++) {
            if (i) puts_(c, b, o->item_sep);
            if (o->indent >= 0) newline_indent(c, b, o->indent, level + 1);
            to_json(c, b, v.l->a[i], o, level + 1);
        }
        if (o->indent >= 0) newline_indent(c, b, o->indent, level);
        puts_(c, b, "]");
        return;
    case JV_DICT: {
        if (v.d->ns) {
            ds_jerr(c, o->line, DS_ERR_INVALID, "Object of type Namespace is not JSON serializable");
            return;
        }
        if (!v.d->n) {
            puts_(c, b, "{}");
            return;
        }
        int *ord = ds_ja_alloc(c->a, sizeof *ord * (size_t)v.d->n);
        ds_jstr ***keys = ds_ja_alloc(c->a, sizeof *keys * (size_t)v.d->n);
        if (!ord || !keys) {
            nomem(c);
            return;
        }
        for (int i = 0; i < v.d->n; i++) keys[i] = &v.d->k[i];
        if (o->sort_keys) qsort(keys, (size_t)v.d->n, sizeof *keys, key_cmp);
        puts_(c, b, "{");
        for (int i = 0; i < v.d->n; i++) {
            const int k = (int)(keys[i] - v.d->k);
            if (i) puts_(c, b, o->item_sep);
            if (o->indent >= 0) newline_indent(c, b, o->indent, level + 1);
            json_str(c, b, v.d->k[k]->s, v.d->k[k]->n, o->ensure_ascii);
            puts_(c, b, o->key_sep);
            to_json(c, b, v.d->v[k], o, level + 1);
        }
        if (o->indent >= 0) newline_indent(c, b, o->indent, level);
        puts_(c, b, "}");
        return;
    }
    default:
        ds_jerr(c, o->line, DS_ERR_INVALID, "Object of type %s is not JSON serializable", ds_jv_type_name(v));
        return;
    }
}

void ds_jv_to_json(ds_jctx *c, ds_jbuf *b, ds_jv v, int indent, int sort_keys, int level, int line) {
    json_opts o = {.indent = indent, .sort_keys = sort_keys, .item_sep = indent >= 0 ? "," : ", ", .key_sep = ": ", .line = line};
    to_json(c, b, v, &o, level);
}

// ---------------------------------------------------------------------------------------------
// Arguments

// Positional argument i or keyword `name` (NULL when neither was given).
static const ds_jv *arg(const ds_jargs *a, int i, const char *name) {
    if (i >= 0 && i < a->n_pos) return &a->pos[i];
    for (int k = 0; name && k < a->n_kw; k++)
        if (!strcmp(a->kw[k], name)) return &a->kwv[k];
    return NULL;
}

static int arg_int(ds_jctx *c, int line, const ds_jargs *a, int i, const char *name, int64_t dflt, int64_t *out) {
    const ds_jv *v = arg(a, i, name);
    *out = dflt;
    if (!v || v->t == JV_NONE) return 1;
    if (v->t != JV_INT && v->t != JV_BOOL) {
        ds_jerr(c, line, DS_ERR_INVALID, "argument '%s' must be an integer, not %s", name ? name : "?", ds_jv_type_name(*v));
        return 0;
    }
    *out = v->t == JV_INT ? v->i : v->b;
    return 1;
}

static int arg_str(ds_jctx *c, int line, const ds_jargs *a, int i, const char *name, const ds_jstr **out) {
    const ds_jv *v = arg(a, i, name);
    *out = NULL;
    if (!v || v->t == JV_NONE) return 1;
    if (v->t != JV_STR) {
        ds_jerr(c, line, DS_ERR_INVALID, "argument '%s' must be a string, not %s", name ? name : "?", ds_jv_type_name(*v));
        return 0;
    }
    *out = v->s;
    return 1;
}

// ---------------------------------------------------------------------------------------------
// String helpers

static ds_jv strip_chars(ds_jctx *c, const ds_jstr *s, const ds_jstr *chars, int left, int right) {
    size_t a = 0, b = s->n;
    if (!chars) {
        if (left) a = ds_jinja_lstrip_len(s->s, s->n);
        if (right) b = a + ds_jinja_rstrip_len(s->s + a, s->n - a);
    } else { // (ASCII or whole-byte sets; multi-byte chars work when all their bytes are in the set)
        while (left && a < b && memchr(chars->s, s->s[a], chars->n)) a++;
        while (right && b > a && memchr(chars->s, s->s[b - 1], chars->n)) b--;
    }
    return ds_jv_str(c, s->s + a, b - a);
}

static char up(char ch) { return ch >= 'a' && ch <= 'z' ? (char)(ch - 32) : ch; }
static char low(char ch) { return ch >= 'A' && ch <= 'Z' ? (char)(ch + 32) : ch; }
static int alpha(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'); }

// case: 0 lower, 1 upper, 2 capitalize, 3 Python's str.title, 4 jinja's title filter
static ds_jv recase(ds_jctx *c, const ds_jstr *s, int mode) {
    ds_jv r = ds_jv_str(c, s->s, s->n);
    if (c->err) return r;
    char *p = r.s->s;
    int prev_letter = 0;
    for (size_t i = 0; i < s->n; i++) {
        char ch = p[i];
        switch (mode) {
        case 0: p[i] = low(ch); break;
        case 1: p[i] = up(ch); break;
        case 2: p[i] = i == 0 ? up(ch) : low(ch); break;
        case 3:
            p[i] = prev_letter ? low(ch) : up(ch);
            prev_letter = alpha(ch) || ((unsigned char)ch >= 0x80);
            break;
        case 4: { // words start after whitespace or one of -({[<
            int start = i == 0 || p[i - 1] == ' ' || p[i - 1] == '\t' || p[i - 1] == '\n' || p[i - 1] == '-' || p[i - 1] == '(' ||
                        p[i - 1] == '{' || p[i - 1] == '[' || p[i - 1] == '<';
            p[i] = start ? up(ch) : low(ch);
            break;
        }
        }
    }
    return r;
}

static ds_jv replace(ds_jctx *c, const ds_jstr *s, const ds_jstr *old, const ds_jstr *new_, int64_t count) {
    ds_jbuf b = {0};
    size_t i = 0;
    int64_t done = 0;
    if (!old->n) { // Python inserts `new` between every character
        int64_t n_cp = utf8_len(s->s, s->n);
        for (int64_t k = 0; k <= n_cp; k++) {
            if (count < 0 || done < count) ds_jbuf_put(c, &b, new_->s, new_->n), done++;
            if (i < s->n) {
                size_t j = i + 1;
                while (j < s->n && ((unsigned char)s->s[j] & 0xc0) == 0x80) j++;
                ds_jbuf_put(c, &b, s->s + i, j - i);
                i = j;
            }
        }
        return ds_jbuf_value(c, &b);
    }
    while (i < s->n) {
        if ((count < 0 || done < count) && i + old->n <= s->n && !memcmp(s->s + i, old->s, old->n)) {
            ds_jbuf_put(c, &b, new_->s, new_->n);
            i += old->n;
            done++;
        } else {
            ds_jbuf_put(c, &b, s->s + i, 1);
            i++;
        }
    }
    return ds_jbuf_value(c, &b);
}

// Python's str.split(sep=None, maxsplit=-1) (rsplit when `right`).
static ds_jv split(ds_jctx *c, const ds_jstr *s, const ds_jstr *sep, int64_t maxsplit, int right) {
    ds_jv parts[4096];
    int n = 0;
    if (sep && !sep->n) return ds_jerr(c, 0, DS_ERR_INVALID, "empty separator");
    if (right && maxsplit >= 0 && sep) { // rsplit with a limit: split from the end
        size_t end = s->n;
        int64_t done = 0;
        ds_jv rev[4096];
        int nr = 0;
        size_t i = s->n;
        while (i >= sep->n && done < maxsplit && nr < 4095) {
            if (!memcmp(s->s + i - sep->n, sep->s, sep->n)) {
                rev[nr++] = ds_jv_str(c, s->s + i, end - i);
                end = i - sep->n;
                i = end;
                done++;
            } else {
                i--;
            }
        }
        rev[nr++] = ds_jv_str(c, s->s, end);
        ds_jv r = ds_jv_list(c, nr);
        for (int k = 0; k < nr && !c->err; k++) r.l->a[k] = rev[nr - 1 - k];
        return r;
    }
    if (!sep) {
        size_t i = 0;
        int64_t done = 0;
        for (;;) {
            i += ds_jinja_lstrip_len(s->s + i, s->n - i);
            if (i >= s->n) break;
            if (maxsplit >= 0 && done >= maxsplit) {
                size_t e = i + ds_jinja_rstrip_len(s->s + i, s->n - i);
                if (n < 4096) parts[n++] = ds_jv_str(c, s->s + i, e - i);
                break;
            }
            size_t j = i;
            while (j < s->n && !ds_jinja_lstrip_len(s->s + j, s->n - j)) j++;
            if (n < 4096) parts[n++] = ds_jv_str(c, s->s + i, j - i);
            done++;
            i = j;
        }
    } else {
        size_t start = 0, i = 0;
        int64_t done = 0;
        while (i + sep->n <= s->n) {
            if ((maxsplit < 0 || done < maxsplit) && !memcmp(s->s + i, sep->s, sep->n)) {
                if (n < 4096) parts[n++] = ds_jv_str(c, s->s + start, i - start);
                i += sep->n;
                start = i;
                done++;
            } else {
                i++;
            }
        }
        if (n < 4096) parts[n++] = ds_jv_str(c, s->s + start, s->n - start);
    }
    if (n >= 4096) return ds_jerr(c, 0, DS_ERR_UNSUPPORTED, "split into more than 4096 parts is not supported");
    ds_jv r = ds_jv_list(c, n);
    for (int k = 0; k < n && !c->err; k++) r.l->a[k] = parts[k];
    return r;
}

static int starts_ends(const ds_jstr *s, const ds_jv *p, int end, int *ok) {
    if (p->t == JV_STR) {
        if (p->s->n > s->n) return 0;
        return !memcmp(end ? s->s + s->n - p->s->n : s->s, p->s->s, p->s->n);
    }
    if (p->t == JV_LIST) {
        for (int i = 0; i < p->l->n; i++)
            if (starts_ends(s, &p->l->a[i], end, ok)) return 1;
        return 0;
    }
    *ok = 0;
    return 0;
}

// markupsafe's escape of a plain string.
ds_jv ds_jinja_escape(ds_jctx *c, ds_jv s) {
    ds_jbuf b = {0};
    for (size_t i = 0; i < s.s->n; i++) {
        char ch = s.s->s[i];
        const char *e = ch == '&' ? "&amp;" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : ch == '"' ? "&#34;" : ch == '\'' ? "&#39;" : NULL;
        if (e) puts_(c, &b, e);
        else ds_jbuf_put(c, &b, &ch, 1);
    }
    return ds_jbuf_value(c, &b);
}

// ---------------------------------------------------------------------------------------------
// Methods: obj.name(args). One function per method (aliases share one and read `name`), in one
// table per receiver type; the result is undefined after an error.

static int is(const char *name, const char *s) { return !strcmp(name, s); }

typedef ds_jv method_fn(ds_jctx *c, int line, ds_jv obj, const char *name, const ds_jargs *a);

typedef struct {
    const char *name;
    method_fn *fn;
} jmethod;

// startswith, endswith
static ds_jv str_starts_ends(ds_jctx *c, int line, ds_jv obj, const char *name, const ds_jargs *a) {
    const ds_jv *p = arg(a, 0, NULL);
    int ok = 1;
    if (!p) return ds_jerr(c, line, DS_ERR_INVALID, "%s() takes at least 1 argument", name);
    int r = starts_ends(obj.s, p, is(name, "endswith"), &ok);
    if (!ok) return ds_jerr(c, line, DS_ERR_INVALID, "%s arg must be str or a tuple of str, not %s", name, ds_jv_type_name(*p));
    return ds_jv_bool(r);
}

// strip, lstrip, rstrip
static ds_jv str_strip(ds_jctx *c, int line, ds_jv obj, const char *name, const ds_jargs *a) {
    const ds_jstr *x;
    if (!arg_str(c, line, a, 0, "chars", &x)) return ds_jv_undef(NULL);
    return strip_chars(c, obj.s, x, !is(name, "rstrip"), !is(name, "lstrip"));
}

// split, rsplit
static ds_jv str_split(ds_jctx *c, int line, ds_jv obj, const char *name, const ds_jargs *a) {
    const ds_jstr *x;
    int64_t m;
    if (!arg_str(c, line, a, 0, "sep", &x) || !arg_int(c, line, a, 1, "maxsplit", -1, &m)) return ds_jv_undef(NULL);
    return split(c, obj.s, x, m, is(name, "rsplit"));
}

// upper, lower, capitalize, title
static ds_jv str_recase(ds_jctx *c, int line, ds_jv obj, const char *name, const ds_jargs *a) {
    return recase(c, obj.s, is(name, "lower") ? 0 : is(name, "upper") ? 1 : is(name, "capitalize") ? 2 : 3);
}

static ds_jv str_replace(ds_jctx *c, int line, ds_jv obj, const char *name, const ds_jargs *a) {
    const ds_jstr *x, *y;
    int64_t n;
    if (!arg_str(c, line, a, 0, "old", &x) || !arg_str(c, line, a, 1, "new", &y) || !arg_int(c, line, a, 2, "count", -1, &n))
        return ds_jv_undef(NULL);
    if (!x || !y) return ds_jerr(c, line, DS_ERR_INVALID, "replace() takes 2 string arguments");
    return replace(c, obj.s, x, y, n);
}

// find, rfind, count, index (positions in code points)
static ds_jv str_find(ds_jctx *c, int line, ds_jv obj, const char *name, const ds_jargs *a) {
    const ds_jstr *s = obj.s, *x;
    if (!arg_str(c, line, a, 0, "sub", &x)) return ds_jv_undef(NULL);
    if (!x) return ds_jerr(c, line, DS_ERR_INVALID, "%s() takes a string argument", name);
    int64_t found = -1, cnt = 0;
    for (size_t i = 0; i + x->n <= s->n;) {
        if (!memcmp(s->s + i, x->s, x->n)) {
            int64_t cp = utf8_len(s->s, i);
            if (found < 0 || is(name, "rfind")) found = cp;
            cnt++;
            i += x->n ? x->n : 1;
            if (!x->n && i > s->n) break;
        } else i++;
    }
    if (is(name, "count")) return ds_jv_int(cnt);
    if (is(name, "index") && found < 0) return ds_jerr(c, line, DS_ERR_INVALID, "substring not found");
    return ds_jv_int(found);
}

static ds_jv str_join(ds_jctx *c, int line, ds_jv obj, const char *name, const ds_jargs *a) {
    const ds_jstr *s = obj.s;
    const ds_jv *it = arg(a, 0, NULL);
    if (!it) return ds_jerr(c, line, DS_ERR_INVALID, "join() takes 1 argument");
    ds_jv l = ds_jinja_iterable(c, line, *it);
    if (c->err) return ds_jv_undef(NULL);
    ds_jbuf b = {0};
    for (int i = 0; i < l.l->n; i++) {
        if (l.l->a[i].t != JV_STR) {
            free(b.s);
            return ds_jerr(c, line, DS_ERR_INVALID, "sequence item %d: expected str instance, %s found", i, ds_jv_type_name(l.l->a[i]));
        }
        if (i) ds_jbuf_put(c, &b, s->s, s->n);
        ds_jbuf_put(c, &b, l.l->a[i].s->s, l.l->a[i].s->n);
    }
    return ds_jbuf_value(c, &b);
}

// removeprefix, removesuffix
static ds_jv str_remove_affix(ds_jctx *c, int line, ds_jv obj, const char *name, const ds_jargs *a) {
    const ds_jstr *s = obj.s, *x;
    if (!arg_str(c, line, a, 0, NULL, &x)) return ds_jv_undef(NULL);
    if (!x) return ds_jerr(c, line, DS_ERR_INVALID, "%s() takes a string argument", name);
    int pre = is(name, "removeprefix");
    if (x->n <= s->n && !memcmp(pre ? s->s : s->s + s->n - x->n, x->s, x->n)) return ds_jv_str(c, pre ? s->s + x->n : s->s, s->n - x->n);
    return obj;
}

// isdigit, isalpha, isspace, isalnum, isupper, islower (ASCII classes)
static ds_jv str_is_class(ds_jctx *c, int line, ds_jv obj, const char *name, const ds_jargs *a) {
    const ds_jstr *s = obj.s;
    int r = s->n > 0, cased = 0;
    for (size_t i = 0; i < s->n; i++) {
        char ch = s->s[i];
        int d = ch >= '0' && ch <= '9', al = alpha(ch);
        if (is(name, "isdigit")) r &= d;
        else if (is(name, "isalpha")) r &= al;
        else if (is(name, "isalnum")) r &= al || d;
        else if (is(name, "isspace")) r &= ch == ' ' || (ch >= 9 && ch <= 13);
        else if (is(name, "isupper")) r &= !(ch >= 'a' && ch <= 'z'), cased |= ch >= 'A' && ch <= 'Z';
        else r &= !(ch >= 'A' && ch <= 'Z'), cased |= ch >= 'a' && ch <= 'z';
    }
    if (is(name, "isupper") || is(name, "islower")) r = r && cased;
    return ds_jv_bool(r);
}

static ds_jv str_format(ds_jctx *c, int line, ds_jv obj, const char *name, const ds_jargs *a) {
    return ds_jerr(c, line, DS_ERR_UNSUPPORTED, "str.format() is not supported");
}

static ds_jv str_splitlines(ds_jctx *c, int line, ds_jv obj, const char *name, const ds_jargs *a) {
    const ds_jstr *s = obj.s;
    ds_jv nl = ds_jv_str(c, "\n", 1);
    ds_jv r = split(c, s, nl.s, -1, 0);
    if (!c->err && r.l->n && s->n && s->s[s->n - 1] == '\n') r.l->n--;
    if (!c->err && !s->n) r.l->n = 0;
    return r;
}

static const jmethod k_str_methods[] = {
    {"startswith", str_starts_ends}, {"endswith", str_starts_ends}, {"strip", str_strip},      {"lstrip", str_strip},
    {"rstrip", str_strip},           {"split", str_split},          {"rsplit", str_split},     {"upper", str_recase},
    {"lower", str_recase},           {"capitalize", str_recase},    {"title", str_recase},     {"replace", str_replace},
    {"find", str_find},              {"rfind", str_find},           {"count", str_find},       {"index", str_find},
    {"join", str_join},              {"removeprefix", str_remove_affix}, {"removesuffix", str_remove_affix},
    {"isdigit", str_is_class},       {"isalpha", str_is_class},     {"isspace", str_is_class}, {"isalnum", str_is_class},
    {"isupper", str_is_class},       {"islower", str_is_class},     {"format", str_format},    {"splitlines", str_splitlines},
    {NULL, NULL}};

// items, keys, values
static ds_jv dict_view(ds_jctx *c, int line, ds_jv obj, const char *name, const ds_jargs *a) {
    ds_jv r = ds_jv_list(c, obj.d->n);
    for (int i = 0; i < obj.d->n && !c->err; i++) {
        ds_jv k = ds_jv_str(c, obj.d->k[i]->s, obj.d->k[i]->n);
        if (is(name, "keys")) r.l->a[i] = k;
        else if (is(name, "values")) r.l->a[i] = obj.d->v[i];
        else {
            ds_jv t = ds_jv_list(c, 2);
            if (c->err) break;
            t.l->tuple = 1;
            t.l->a[0] = k, t.l->a[1] = obj.d->v[i];
            r.l->a[i] = t;
        }
    }
    return r;
}

static ds_jv dict_get(ds_jctx *c, int line, ds_jv obj, const char *name, const ds_jargs *a) {
    const ds_jv *k = arg(a, 0, NULL), *d = arg(a, 1, NULL);
    if (!k) return ds_jerr(c, line, DS_ERR_INVALID, "get() takes at least 1 argument");
    ds_jv *v = k->t == JV_STR ? ds_jv_dict_get(obj.d, k->s->s, k->s->n) : NULL;
    return v ? *v : d ? *d : ds_jv_none();
}

// the sandbox refuses methods that change a dict
static ds_jv dict_unsafe(ds_jctx *c, int line, ds_jv obj, const char *name, const ds_jargs *a) {
    return ds_jerr(c, line, DS_ERR_INVALID, "access to attribute '%s' of 'dict' object is unsafe.", name);
}

static const jmethod k_dict_methods[] = {
    {"items", dict_view},     {"keys", dict_view},    {"values", dict_view},  {"get", dict_get},      {"copy", dict_unsafe},
    {"update", dict_unsafe},  {"pop", dict_unsafe},   {"setdefault", dict_unsafe}, {"clear", dict_unsafe},
    {"popitem", dict_unsafe}, {NULL, NULL}};

// ... and a list
static ds_jv list_unsafe(ds_jctx *c, int line, ds_jv obj, const char *name, const ds_jargs *a) {
    return ds_jerr(c, line, DS_ERR_INVALID, "access to attribute '%s' of '%s' object is unsafe.", name, ds_jv_type_name(obj));
}

// index, count
static ds_jv list_find(ds_jctx *c, int line, ds_jv obj, const char *name, const ds_jargs *a) {
    const ds_jv *x = arg(a, 0, NULL);
    if (!x) return ds_jerr(c, line, DS_ERR_INVALID, "%s() takes 1 argument", name);
    int64_t cnt = 0, first = -1;
    for (int i = 0; i < obj.l->n; i++)
        if (ds_jv_equal(obj.l->a[i], *x)) cnt++, first = first < 0 ? i : first;
    if (is(name, "count")) return ds_jv_int(cnt);
    if (first < 0) return ds_jerr(c, line, DS_ERR_INVALID, "x not in list");
    return ds_jv_int(first);
}

static const jmethod k_list_methods[] = {
    {"append", list_unsafe}, {"pop", list_unsafe},     {"extend", list_unsafe}, {"insert", list_unsafe}, {"remove", list_unsafe},
    {"sort", list_unsafe},   {"reverse", list_unsafe}, {"clear", list_unsafe},  {"index", list_find},    {"count", list_find},
    {NULL, NULL}};

int ds_jinja_method(ds_jctx *c, int line, ds_jv obj, const char *name, const ds_jargs *a, ds_jv *res) {
    *res = ds_jv_undef(NULL);
    const jmethod *m = obj.t == JV_STR ? k_str_methods : obj.t == JV_DICT && !obj.d->ns ? k_dict_methods : obj.t == JV_LIST ? k_list_methods : NULL;
    for (; m && m->name; m++)
        if (is(name, m->name)) {
            *res = m->fn(c, line, obj, name, a);
            return 1;
        }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Global functions

static ds_jv namespace_(ds_jctx *c, int line, const ds_jargs *a) {
    ds_jv r = ds_jv_dict(c);
    if (c->err) return r;
    r.d->ns = 1;
    for (int i = 0; i < a->n_pos; i++) {
        if (a->pos[i].t != JV_DICT) return ds_jerr(c, line, DS_ERR_INVALID, "namespace() takes a mapping or keyword arguments");
        for (int k = 0; k < a->pos[i].d->n; k++) ds_jv_dict_set(c, r.d, a->pos[i].d->k[k]->s, a->pos[i].d->k[k]->n, a->pos[i].d->v[k]);
    }
    for (int k = 0; k < a->n_kw; k++) ds_jv_dict_set(c, r.d, a->kw[k], strlen(a->kw[k]), a->kwv[k]);
    return r;
}

ds_jv ds_jinja_call_func(ds_jctx *c, int line, int fn, const ds_jargs *a) {
    switch (fn) {
    case JF_RANGE: {
        int64_t lo = 0, hi, st = 1;
        if (a->n_pos == 1) {
            if (!arg_int(c, line, a, 0, "stop", 0, &hi)) return ds_jv_undef(NULL);
        } else if (a->n_pos == 2 || a->n_pos == 3) {
            if (!arg_int(c, line, a, 0, "start", 0, &lo) || !arg_int(c, line, a, 1, "stop", 0, &hi) ||
                !arg_int(c, line, a, 2, "step", 1, &st))
                return ds_jv_undef(NULL);
        } else return ds_jerr(c, line, DS_ERR_INVALID, "range expected 1 to 3 integer arguments");
        if (!st) return ds_jerr(c, line, DS_ERR_INVALID, "range() arg 3 must not be zero");
        int64_t n = st > 0 ? (hi > lo ? (hi - lo + st - 1) / st : 0) : (lo > hi ? (lo - hi - st - 1) / -st : 0);
        if (n > 100000) return ds_jerr(c, line, DS_ERR_INVALID, "range too big, refusing to make range with %lld items", (long long)n);
        ds_jv r = ds_jv_list(c, (int)n);
        for (int64_t i = 0; i < n && !c->err; i++) r.l->a[i] = ds_jv_int(lo + i * st);
        return r;
    }
    case JF_NAMESPACE: return namespace_(c, line, a);
    case JF_DICT: {
        ds_jv r = namespace_(c, line, a);
        if (!c->err) r.d->ns = 0;
        return r;
    }
    case JF_RAISE: {
        const ds_jv *m = arg(a, 0, NULL);
        ds_jv s = m ? ds_jv_stringify(c, *m) : cstr(c, "");
        if (c->err) return s;
        return ds_jerr(c, line, DS_ERR_INVALID, "raise_exception: %s", s.s->s);
    }
    case JF_STRFTIME: {
        const ds_jstr *f;
        if (!arg_str(c, line, a, 0, "format", &f)) return ds_jv_undef(NULL);
        if (!f) return ds_jerr(c, line, DS_ERR_INVALID, "strftime_now() takes a format string");
        time_t now = time(NULL);
        struct tm tm;
        char buf[512];
        if (!localtime_r(&now, &tm)) return ds_jerr(c, line, DS_ERR_INVALID, "strftime_now: no local time");
        size_t n = strftime(buf, sizeof buf, f->s, &tm);
        return ds_jv_str(c, buf, n);
    }
    default: return ds_jerr(c, line, DS_ERR_UNSUPPORTED, "this function is not supported");
    }
}

// ---------------------------------------------------------------------------------------------
// Tests: `v is name(x)`. One function per test (aliases share one); x is the first argument,
// NULL when none was given (the table says which tests need it).

typedef ds_jv test_fn(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jv *x);

typedef struct {
    const char *name;
    test_fn *fn;
    int needs_arg;
} jtest;

static ds_jv t_defined(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jv *x) { return ds_jv_bool(v.t != JV_UNDEF); }
static ds_jv t_undefined(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jv *x) { return ds_jv_bool(v.t == JV_UNDEF); }
static ds_jv t_none(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jv *x) { return ds_jv_bool(v.t == JV_NONE); }
static ds_jv t_string(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jv *x) { return ds_jv_bool(v.t == JV_STR); }
static ds_jv t_mapping(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jv *x) { return ds_jv_bool(v.t == JV_DICT && !v.d->ns); }
static ds_jv t_integer(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jv *x) { return ds_jv_bool(v.t == JV_INT); }
static ds_jv t_float(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jv *x) { return ds_jv_bool(v.t == JV_FLOAT); }
static ds_jv t_boolean(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jv *x) { return ds_jv_bool(v.t == JV_BOOL); }
static ds_jv t_true(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jv *x) { return ds_jv_bool(v.t == JV_BOOL && v.b); }
static ds_jv t_false(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jv *x) { return ds_jv_bool(v.t == JV_BOOL && !v.b); }
static ds_jv t_number(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jv *x) { return ds_jv_bool(numeric(v)); }

static ds_jv t_callable(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jv *x) {
    return ds_jv_bool(v.t == JV_MACRO || v.t == JV_FUNC);
}

// iterable, sequence
static ds_jv t_iterable(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jv *x) {
    return ds_jv_bool(v.t == JV_STR || v.t == JV_LIST || (v.t == JV_DICT && !v.d->ns) || v.t == JV_UNDEF);
}

// lower, upper: a string equal to its own lower/upper case
static ds_jv t_case(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jv *x) {
    if (v.t != JV_STR) return ds_jv_bool(0);
    ds_jv r = recase(c, v.s, is(name, "upper"));
    return ds_jv_bool(!c->err && ds_jv_equal(r, v));
}

// odd, even
static ds_jv t_parity(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jv *x) {
    if (v.t != JV_INT && v.t != JV_BOOL) return ds_jerr(c, line, DS_ERR_INVALID, "test '%s' needs an integer", name);
    int64_t i = v.t == JV_INT ? v.i : v.b;
    return ds_jv_bool(is(name, "odd") ? (i % 2 != 0) : (i % 2 == 0));
}

// equalto, eq
static ds_jv t_eq(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jv *x) { return ds_jv_bool(ds_jv_equal(v, *x)); }
static ds_jv t_ne(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jv *x) { return ds_jv_bool(!ds_jv_equal(v, *x)); }

// Python's `is`: None and small ints are singletons, containers compare by identity
static ds_jv t_sameas(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jv *x) {
    if (v.t != x->t) return ds_jv_bool(0);
    if (v.t == JV_NONE || v.t == JV_UNDEF) return ds_jv_bool(1);
    if (v.t == JV_BOOL) return ds_jv_bool(v.b == x->b);
    if (v.t == JV_INT) return ds_jv_bool(v.i == x->i && v.i >= -5 && v.i <= 256); // CPython's small-int cache
    return ds_jv_bool(v.t == JV_STR ? v.s == x->s : v.t == JV_LIST ? v.l == x->l : v.t == JV_DICT ? v.d == x->d : 0);
}

static ds_jv t_in(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jv *x) {
    if (x->t == JV_STR && v.t == JV_STR) {
        for (size_t i = 0; i + v.s->n <= x->s->n; i++)
            if (!memcmp(x->s->s + i, v.s->s, v.s->n)) return ds_jv_bool(1);
        return ds_jv_bool(0);
    }
    if (x->t == JV_LIST) {
        for (int i = 0; i < x->l->n; i++)
            if (ds_jv_equal(v, x->l->a[i])) return ds_jv_bool(1);
        return ds_jv_bool(0);
    }
    if (x->t == JV_DICT) return ds_jv_bool(v.t == JV_STR && ds_jv_dict_get(x->d, v.s->s, v.s->n));
    return ds_jerr(c, line, DS_ERR_INVALID, "argument of type '%s' is not iterable", ds_jv_type_name(*x));
}

static ds_jv t_divisibleby(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jv *x) {
    if ((v.t != JV_INT && v.t != JV_BOOL) || x->t != JV_INT || !x->i) return ds_jerr(c, line, DS_ERR_INVALID, "divisibleby needs integers");
    return ds_jv_bool((v.t == JV_INT ? v.i : v.b) % x->i == 0);
}

// gt, greaterthan, lt, lessthan, ge, le
static ds_jv t_order(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jv *x) {
    int o = ds_jinja_order(v, *x);
    if (o == -2) return ds_jerr(c, line, DS_ERR_INVALID, "test '%s': '%s' and '%s' do not compare", name, ds_jv_type_name(v), ds_jv_type_name(*x));
    if (is(name, "gt") || is(name, "greaterthan")) return ds_jv_bool(o > 0);
    if (is(name, "lt") || is(name, "lessthan")) return ds_jv_bool(o < 0);
    if (is(name, "ge")) return ds_jv_bool(o >= 0);
    return ds_jv_bool(o <= 0);
}

static const jtest k_tests[] = {
    {"defined", t_defined, 0},    {"undefined", t_undefined, 0}, {"none", t_none, 0},         {"string", t_string, 0},
    {"mapping", t_mapping, 0},    {"iterable", t_iterable, 0},   {"sequence", t_iterable, 0}, {"number", t_number, 0},
    {"integer", t_integer, 0},    {"float", t_float, 0},         {"boolean", t_boolean, 0},   {"true", t_true, 0},
    {"false", t_false, 0},        {"callable", t_callable, 0},   {"lower", t_case, 0},        {"upper", t_case, 0},
    {"odd", t_parity, 0},         {"even", t_parity, 0},         {"equalto", t_eq, 1},        {"eq", t_eq, 1},
    {"ne", t_ne, 1},              {"sameas", t_sameas, 1},       {"in", t_in, 1},             {"divisibleby", t_divisibleby, 1},
    {"gt", t_order, 1},           {"greaterthan", t_order, 1},   {"lt", t_order, 1},          {"lessthan", t_order, 1},
    {"ge", t_order, 1},           {"le", t_order, 1},            {NULL, NULL, 0}};

static const jtest *find_test(const char *name) {
    for (const jtest *t = k_tests; t->name; t++)
        if (is(name, t->name)) return t;
    return NULL;
}

int ds_jinja_test_known(const char *name) { return find_test(name) != NULL; }

ds_jv ds_jinja_test(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) {
    const jtest *t = find_test(name);
    const ds_jv *x = arg(a, 0, NULL);
    if (!t) return ds_jerr(c, line, DS_ERR_UNSUPPORTED, "no test named '%s' (not supported)", name); // (the parser refuses it first)
    if (t->needs_arg && !x) return ds_jerr(c, line, DS_ERR_INVALID, "test '%s' takes an argument", name);
    return t->fn(c, line, name, v, x);
}

// ---------------------------------------------------------------------------------------------
// Filters

// item.attr with dotted paths ("function.name"), integer parts as indices.
static ds_jv attr_path(ds_jctx *c, int line, ds_jv v, const ds_jstr *path) {
    size_t i = 0;
    while (i <= path->n && !c->err) {
        size_t j = i;
        while (j < path->n && path->s[j] != '.') j++;
        if (v.t == JV_UNDEF) return v;
        if (v.t == JV_DICT) {
            ds_jv *x = ds_jv_dict_get(v.d, path->s + i, j - i);
            v = x ? *x : ds_jv_undef("no such attribute");
        } else if (v.t == JV_LIST && j > i && path->s[i] >= '0' && path->s[i] <= '9') {
            long k = strtol(path->s + i, NULL, 10);
            v = k < v.l->n ? v.l->a[k] : ds_jv_undef("index out of range");
        } else {
            v = ds_jv_undef("no such attribute");
        }
        i = j + 1;
    }
    (void)line;
    return v;
}

static ds_jv list_of(ds_jctx *c, int line, ds_jv v) { return ds_jinja_iterable(c, line, v); }

// select/reject(test, args) and selectattr/rejectattr(attr, test, args).
static ds_jv select_items(ds_jctx *c, int line, ds_jv v, const ds_jargs *a, int by_attr, int keep) {
    if (!ds_jv_truthy(v)) return ds_jv_list(c, 0); // (jinja2: `if value:` first)
    ds_jv l = list_of(c, line, v);
    if (c->err) return l;
    int p = 0;
    const ds_jstr *attr = NULL;
    if (by_attr) {
        if (!arg_str(c, line, a, 0, NULL, &attr)) return ds_jv_undef(NULL);
        if (!attr) return ds_jerr(c, line, DS_ERR_INVALID, "selectattr/rejectattr need an attribute name");
        p = 1;
    }
    const ds_jstr *test = NULL;
    if (!arg_str(c, line, a, p, NULL, &test)) return ds_jv_undef(NULL);
    if (test && !ds_jinja_test_known(test->s)) return ds_jerr(c, line, DS_ERR_UNSUPPORTED, "no test named '%s' (not supported)", test->s);
    ds_jargs ta = {.pos = a->n_pos > p + 1 ? a->pos + p + 1 : NULL, .n_pos = a->n_pos > p + 1 ? a->n_pos - p - 1 : 0};
    ds_jv r = ds_jv_list(c, l.l->n);
    int k = 0;
    for (int i = 0; i < l.l->n && !c->err; i++) {
        ds_jv x = by_attr ? attr_path(c, line, l.l->a[i], attr) : l.l->a[i];
        int t = test ? ds_jv_truthy(ds_jinja_test(c, line, test->s, x, &ta)) : ds_jv_truthy(x);
        if (t == keep) r.l->a[k++] = l.l->a[i];
    }
    if (!c->err) r.l->n = k;
    return r;
}

static int cmp_ci(ds_jv a, ds_jv b, int case_sensitive) {
    if (!case_sensitive && a.t == JV_STR && b.t == JV_STR) {
        size_t m = a.s->n < b.s->n ? a.s->n : b.s->n;
        for (size_t i = 0; i < m; i++) {
            char x = low(a.s->s[i]), y = low(b.s->s[i]);
            if (x != y) return (unsigned char)x < (unsigned char)y ? -1 : 1;
        }
        return a.s->n < b.s->n ? -1 : a.s->n > b.s->n;
    }
    return ds_jinja_order(a, b);
}


// One function per filter (aliases share one and read `name`), dispatched by the table below.
typedef ds_jv filter_fn(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a);

typedef struct {
    const char *name;
    filter_fn *fn;
} jfilter;

// str(v), "" for undefined: what the string filters work on.
static ds_jv str_of(ds_jctx *c, ds_jv v) { return v.t == JV_UNDEF ? cstr(c, "") : ds_jv_stringify(c, v); }

// default, d
static ds_jv f_default(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) {
    const ds_jv *d = arg(a, 0, "default_value"), *b = arg(a, 1, "boolean");
    int boolean = b && ds_jv_truthy(*b);
    if (v.t == JV_UNDEF || (boolean && !ds_jv_truthy(v))) return d ? *d : cstr(c, "");
    return v;
}

static ds_jv f_tojson(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) {
    const ds_jv *ea = arg(a, 0, "ensure_ascii"), *ind = arg(a, 1, "indent"), *sep = arg(a, 2, "separators"), *sk = arg(a, 3, "sort_keys");
    json_opts o = {.indent = -1, .ensure_ascii = ea && ds_jv_truthy(*ea), .sort_keys = sk && ds_jv_truthy(*sk), .line = line};
    if (ind && ind->t != JV_NONE) {
        if (ind->t != JV_INT || ind->i < 0 || ind->i > 64) return ds_jerr(c, line, DS_ERR_UNSUPPORTED, "tojson: indent must be an integer in 0..64");
        o.indent = (int)ind->i;
    }
    o.item_sep = o.indent >= 0 ? "," : ", ";
    o.key_sep = ": ";
    if (sep && sep->t != JV_NONE) {
        if (sep->t != JV_LIST || sep->l->n != 2 || sep->l->a[0].t != JV_STR || sep->l->a[1].t != JV_STR)
            return ds_jerr(c, line, DS_ERR_INVALID, "tojson: separators must be a pair of strings");
        o.item_sep = sep->l->a[0].s->s, o.key_sep = sep->l->a[1].s->s;
    }
    ds_jbuf b = {0};
    to_json(c, &b, v, &o, 0);
    if (c->err) {
        free(b.s);
        return ds_jv_undef(NULL);
    }
    return ds_jbuf_value(c, &b);
}

// length, count
static ds_jv f_length(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) {
    int64_t n = ds_jv_len(v);
    if (n < 0) return ds_jerr(c, line, DS_ERR_INVALID, "object of type '%s' has no len()", ds_jv_type_name(v));
    return ds_jv_int(n);
}

static ds_jv f_string(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) { return str_of(c, v); }

// safe, e, escape: markupsafe's Markup (a value already safe is not escaped again)
static ds_jv f_escape(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) {
    ds_jv r = v.t == JV_STR ? v : ds_jv_stringify(c, v);
    if (is(name, "safe") || r.safe || c->err) {
        r.safe = 1;
        return r;
    }
    r = ds_jinja_escape(c, r);
    r.safe = 1;
    return r;
}

static ds_jv f_trim(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) {
    ds_jv s = str_of(c, v);
    if (c->err) return s;
    const ds_jstr *chars;
    if (!arg_str(c, line, a, 0, "chars", &chars)) return ds_jv_undef(NULL);
    return strip_chars(c, s.s, chars, 1, 1);
}

// upper, lower, capitalize, title
static ds_jv f_recase(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) {
    ds_jv s = str_of(c, v);
    if (c->err) return s;
    return recase(c, s.s, is(name, "upper") ? 1 : is(name, "lower") ? 0 : is(name, "capitalize") ? 2 : 4);
}

static ds_jv f_replace(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) {
    ds_jv s = str_of(c, v);
    if (c->err) return s;
    const ds_jv *o = arg(a, 0, "old"), *nw = arg(a, 1, "new");
    int64_t cnt;
    if (!o || !nw || !arg_int(c, line, a, 2, "count", -1, &cnt)) return ds_jerr(c, line, DS_ERR_INVALID, "replace takes old and new");
    ds_jv os = ds_jv_stringify(c, *o), ns = ds_jv_stringify(c, *nw);
    if (c->err) return os;
    return replace(c, s.s, os.s, ns.s, cnt);
}

static ds_jv f_wordcount(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) {
    ds_jv s = str_of(c, v);
    if (c->err) return s;
    ds_jv parts = split(c, s.s, NULL, -1, 0);
    return c->err ? parts : ds_jv_int(parts.l->n);
}

static ds_jv f_center(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) {
    ds_jv s = str_of(c, v);
    if (c->err) return s;
    int64_t w;
    if (!arg_int(c, line, a, 0, "width", 80, &w)) return ds_jv_undef(NULL);
    int64_t len = utf8_len(s.s->s, s.s->n), pad = w > len ? w - len : 0, left = pad / 2 + (pad & w & 1);
    ds_jbuf b = {0};
    for (int64_t i = 0; i < left; i++) puts_(c, &b, " ");
    ds_jbuf_put(c, &b, s.s->s, s.s->n);
    for (int64_t i = 0; i < pad - left; i++) puts_(c, &b, " ");
    return ds_jbuf_value(c, &b);
}

// indent(width=4, first=False, blank=False)
static ds_jv f_indent(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) {
    ds_jv s = str_of(c, v);
    if (c->err) return s;
    const ds_jv *wv = arg(a, 0, "width"), *fv = arg(a, 1, "first"), *bv = arg(a, 2, "blank");
    ds_jbuf ind = {0};
    if (wv && wv->t == JV_STR) ds_jbuf_put(c, &ind, wv->s->s, wv->s->n);
    else {
        int64_t w = wv && (wv->t == JV_INT) ? wv->i : 4;
        for (int64_t i = 0; i < w && i < 256; i++) puts_(c, &ind, " ");
    }
    const int first = fv && ds_jv_truthy(*fv), blank = bv && ds_jv_truthy(*bv);
    // lines of s + "\n" (str.splitlines: the trailing newline ends the last line)
    ds_jbuf b = {0};
    if (first) ds_jbuf_put(c, &b, ind.s ? ind.s : "", ind.n);
    size_t i = 0, n = s.s->n;
    int line_no = 0;
    while (i <= n) {
        size_t j = i;
        while (j < n && s.s->s[j] != '\n') j++;
        if (j == n && i == n && line_no > 0) break; // the line after a trailing newline is not one
        if (line_no > 0) {
            puts_(c, &b, "\n");
            if (blank || j > i) ds_jbuf_put(c, &b, ind.s ? ind.s : "", ind.n);
        }
        ds_jbuf_put(c, &b, s.s->s + i, j - i);
        line_no++;
        i = j + 1;
    }
    free(ind.s);
    return ds_jbuf_value(c, &b);
}

static ds_jv f_int(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) {
    const ds_jv *d = arg(a, 0, "default");
    if (v.t == JV_INT) return v;
    if (v.t == JV_BOOL) return ds_jv_int(v.b);
    if (v.t == JV_FLOAT && isfinite(v.f)) return ds_jv_int((int64_t)v.f);
    if (v.t == JV_STR) {
        char *end;
        const char *p = v.s->s;
        long long x = strtoll(p, &end, 10);
        if (end != p && !*(end + ds_jinja_lstrip_len(end, strlen(end)))) return ds_jv_int(x);
        double f = strtod(p, &end);
        if (end != p && !*(end + ds_jinja_lstrip_len(end, strlen(end))) && isfinite(f)) return ds_jv_int((int64_t)f);
    }
    return d ? *d : ds_jv_int(0);
}

static ds_jv f_float(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) {
    const ds_jv *d = arg(a, 0, "default");
    if (v.t == JV_FLOAT) return v;
    if (v.t == JV_INT || v.t == JV_BOOL) return ds_jv_float(numval(v));
    if (v.t == JV_STR) {
        char *end;
        double f = strtod(v.s->s, &end);
        if (end != v.s->s && !*(end + ds_jinja_lstrip_len(end, strlen(end)))) return ds_jv_float(f);
    }
    return d ? *d : ds_jv_float(0);
}

static ds_jv f_abs(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) {
    if (v.t == JV_INT) return ds_jv_int(v.i < 0 ? -v.i : v.i);
    if (v.t == JV_FLOAT) return ds_jv_float(fabs(v.f));
    if (v.t == JV_BOOL) return ds_jv_int(v.b);
    return ds_jerr(c, line, DS_ERR_INVALID, "bad operand type for abs(): '%s'", ds_jv_type_name(v));
}

static ds_jv f_round(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) {
    int64_t prec;
    const ds_jstr *method;
    if (!arg_int(c, line, a, 0, "precision", 0, &prec) || !arg_str(c, line, a, 1, "method", &method)) return ds_jv_undef(NULL);
    if (!numeric(v)) return ds_jerr(c, line, DS_ERR_INVALID, "round needs a number");
    double m = pow(10, (double)prec), x = numval(v) * m;
    const char *md = method ? method->s : "common";
    x = !strcmp(md, "floor") ? floor(x) : !strcmp(md, "ceil") ? ceil(x) : (x < 0 ? -floor(-x + 0.5) : floor(x + 0.5));
    return ds_jv_float(x / m);
}

static ds_jv f_items(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) {
    if (v.t == JV_UNDEF) return ds_jv_list(c, 0);
    if (v.t != JV_DICT) return ds_jerr(c, line, DS_ERR_INVALID, "can only get item pairs from a mapping");
    ds_jv r;
    ds_jargs none = {0};
    ds_jinja_method(c, line, v, "items", &none, &r);
    return r;
}

static ds_jv f_dictsort(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) {
    if (v.t != JV_DICT) return ds_jerr(c, line, DS_ERR_INVALID, "dictsort needs a mapping");
    ds_jargs none = {0};
    ds_jv r;
    ds_jinja_method(c, line, v, "items", &none, &r);
    const ds_jv *cs = arg(a, 0, "case_sensitive"), *by = arg(a, 1, "by"), *rev = arg(a, 2, "reverse");
    int sens = cs && ds_jv_truthy(*cs), byv = by && by->t == JV_STR && !strcmp(by->s->s, "value"), rv = rev && ds_jv_truthy(*rev);
    for (int i = 1; !c->err && i < r.l->n; i++) // insertion sort: stable, as Python's
        for (int j = i; j > 0; j--) {
            int o = cmp_ci(r.l->a[j - 1].l->a[byv], r.l->a[j].l->a[byv], sens);
            if (rv ? o >= 0 : o <= 0) break;
            ds_jv t = r.l->a[j];
            r.l->a[j] = r.l->a[j - 1], r.l->a[j - 1] = t;
        }
    return r;
}

static ds_jv f_list(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) { return list_of(c, line, v); }

// first, last
static ds_jv f_first_last(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) {
    if (v.t == JV_UNDEF) return ds_jv_undef("No first item, sequence was empty.");
    ds_jv l = list_of(c, line, v);
    if (c->err) return l;
    if (!l.l->n) return ds_jv_undef(is(name, "first") ? "No first item, sequence was empty." : "No last item, sequence was empty.");
    return l.l->a[is(name, "first") ? 0 : l.l->n - 1];
}

static ds_jv f_reverse(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) {
    ds_jv l = list_of(c, line, v);
    if (c->err) return l;
    ds_jv r = ds_jv_list(c, l.l->n);
    for (int i = 0; i < l.l->n && !c->err; i++) r.l->a[i] = l.l->a[l.l->n - 1 - i];
    if (v.t == JV_STR && !c->err) {
        ds_jbuf b = {0};
        for (int i = 0; i < r.l->n; i++) ds_jbuf_put(c, &b, r.l->a[i].s->s, r.l->a[i].s->n);
        return ds_jbuf_value(c, &b);
    }
    return r;
}

static ds_jv f_join(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) {
    const ds_jv *sepv = arg(a, 0, "d"), *attrv = arg(a, 1, "attribute");
    ds_jv l = list_of(c, line, v);
    if (c->err) return l;
    ds_jv sep = sepv ? ds_jv_stringify(c, *sepv) : cstr(c, "");
    ds_jbuf b = {0};
    for (int i = 0; i < l.l->n && !c->err; i++) {
        if (i) ds_jbuf_put(c, &b, sep.s->s, sep.s->n);
        ds_jv x = l.l->a[i];
        if (attrv && attrv->t == JV_STR) x = attr_path(c, line, x, attrv->s);
        ds_jv_to_str(c, &b, x, 0);
    }
    return ds_jbuf_value(c, &b);
}

static ds_jv f_unique(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) {
    ds_jv l = list_of(c, line, v);
    if (c->err) return l;
    const ds_jv *cs = arg(a, 0, "case_sensitive");
    int sens = cs && ds_jv_truthy(*cs);
    ds_jv r = ds_jv_list(c, l.l->n);
    int k = 0;
    for (int i = 0; i < l.l->n && !c->err; i++) {
        int dup = 0;
        for (int j = 0; j < k && !dup; j++) dup = sens ? ds_jv_equal(r.l->a[j], l.l->a[i]) : cmp_ci(r.l->a[j], l.l->a[i], 0) == 0 && r.l->a[j].t == l.l->a[i].t;
        if (!dup) r.l->a[k++] = l.l->a[i];
    }
    if (!c->err) r.l->n = k;
    return r;
}

// sort(reverse, case_sensitive, attribute), min and max(case_sensitive, attribute)
static ds_jv f_sort(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) {
    ds_jv l = list_of(c, line, v);
    if (c->err) return l;
    const int sort = is(name, "sort");
    const ds_jv *rev = sort ? arg(a, 0, "reverse") : NULL, *cs = arg(a, sort ? 1 : 0, "case_sensitive"), *at = arg(a, sort ? 2 : 1, "attribute");
    int rv = rev && ds_jv_truthy(*rev), sens = cs && ds_jv_truthy(*cs);
    ds_jv r = ds_jv_list(c, l.l->n);
    for (int i = 0; i < l.l->n && !c->err; i++) r.l->a[i] = l.l->a[i];
    for (int i = 1; !c->err && i < r.l->n; i++)
        for (int j = i; j > 0; j--) {
            ds_jv x = r.l->a[j - 1], y = r.l->a[j];
            if (at && at->t == JV_STR) x = attr_path(c, line, x, at->s), y = attr_path(c, line, y, at->s);
            int o = cmp_ci(x, y, sens);
            if (o == -2) return ds_jerr(c, line, DS_ERR_INVALID, "sort: '%s' and '%s' do not compare", ds_jv_type_name(x), ds_jv_type_name(y));
            if (rv ? o >= 0 : o <= 0) break;
            ds_jv t = r.l->a[j];
            r.l->a[j] = r.l->a[j - 1], r.l->a[j - 1] = t;
        }
    if (sort || c->err) return r;
    if (!r.l->n) return ds_jv_undef("No aggregated item, sequence was empty.");
    return r.l->a[is(name, "min") ? 0 : r.l->n - 1];
}

static ds_jv f_sum(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) {
    ds_jv l = list_of(c, line, v);
    const ds_jv *at = arg(a, 0, "attribute"), *st = arg(a, 1, "start");
    ds_jv acc = st ? *st : ds_jv_int(0);
    for (int i = 0; i < l.l->n && !c->err; i++) {
        ds_jv x = at && at->t == JV_STR ? attr_path(c, line, l.l->a[i], at->s) : l.l->a[i];
        if (!numeric(x) || !numeric(acc)) return ds_jerr(c, line, DS_ERR_INVALID, "sum: unsupported operand types");
        acc = acc.t == JV_FLOAT || x.t == JV_FLOAT ? ds_jv_float(numval(acc) + numval(x)) : ds_jv_int((int64_t)numval(acc) + (int64_t)numval(x));
    }
    return acc;
}

// map(attribute=, default=) or map(filter_name, args...)
static ds_jv f_map(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) {
    if (!ds_jv_truthy(v)) return ds_jv_list(c, 0);
    ds_jv l = list_of(c, line, v);
    if (c->err) return l;
    const ds_jv *at = arg(a, -1, "attribute"), *dflt = arg(a, -1, "default");
    ds_jv r = ds_jv_list(c, l.l->n);
    if (at) {
        if (at->t != JV_STR) return ds_jerr(c, line, DS_ERR_INVALID, "map: attribute must be a string");
        for (int i = 0; i < l.l->n && !c->err; i++) {
            ds_jv x = attr_path(c, line, l.l->a[i], at->s);
            r.l->a[i] = x.t == JV_UNDEF && dflt ? *dflt : x;
        }
        return r;
    }
    const ds_jstr *fname;
    if (!arg_str(c, line, a, 0, NULL, &fname)) return ds_jv_undef(NULL);
    if (!fname) return ds_jerr(c, line, DS_ERR_INVALID, "map needs a filter name or attribute=");
    if (!ds_jinja_filter_known(fname->s)) return ds_jerr(c, line, DS_ERR_UNSUPPORTED, "no filter named '%s' (not supported)", fname->s);
    ds_jargs fa = {.pos = a->n_pos > 1 ? a->pos + 1 : NULL, .n_pos = a->n_pos > 1 ? a->n_pos - 1 : 0, .kw = a->kw, .kwv = a->kwv, .n_kw = a->n_kw};
    for (int i = 0; i < l.l->n && !c->err; i++) r.l->a[i] = ds_jinja_filter(c, line, fname->s, l.l->a[i], &fa);
    return r;
}

static ds_jv f_select(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) { return select_items(c, line, v, a, 0, 1); }
static ds_jv f_reject(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) { return select_items(c, line, v, a, 0, 0); }
static ds_jv f_selectattr(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) { return select_items(c, line, v, a, 1, 1); }
static ds_jv f_rejectattr(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) { return select_items(c, line, v, a, 1, 0); }

static ds_jv f_batch(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) {
    int64_t size;
    if (!arg_int(c, line, a, 0, "linecount", 1, &size) || size < 1) return ds_jerr(c, line, DS_ERR_INVALID, "batch needs a positive size");
    const ds_jv *fill = arg(a, 1, "fill_with");
    ds_jv l = list_of(c, line, v);
    if (c->err) return l;
    int nb = (int)((l.l->n + size - 1) / size);
    ds_jv r = ds_jv_list(c, nb);
    for (int b = 0; b < nb && !c->err; b++) {
        int take = (int)(l.l->n - b * size < size ? l.l->n - b * size : size);
        ds_jv part = ds_jv_list(c, fill ? (int)size : take);
        for (int k = 0; k < take && !c->err; k++) part.l->a[k] = l.l->a[b * size + k];
        for (int k = take; fill && k < size && !c->err; k++) part.l->a[k] = *fill;
        r.l->a[b] = part;
    }
    return r;
}

static const jfilter k_filters[] = {
    {"tojson", f_tojson},     {"trim", f_trim},         {"length", f_length},       {"count", f_length},
    {"upper", f_recase},      {"lower", f_recase},      {"first", f_first_last},    {"last", f_first_last},
    {"join", f_join},         {"default", f_default},   {"d", f_default},           {"items", f_items},
    {"list", f_list},         {"string", f_string},     {"int", f_int},             {"float", f_float},
    {"replace", f_replace},   {"selectattr", f_selectattr}, {"rejectattr", f_rejectattr}, {"select", f_select},
    {"reject", f_reject},     {"map", f_map},           {"safe", f_escape},         {"capitalize", f_recase},
    {"title", f_recase},      {"indent", f_indent},     {"unique", f_unique},       {"abs", f_abs},
    {"round", f_round},       {"reverse", f_reverse},   {"sort", f_sort},           {"dictsort", f_dictsort},
    {"sum", f_sum},           {"min", f_sort},          {"max", f_sort},            {"e", f_escape},
    {"escape", f_escape},     {"wordcount", f_wordcount}, {"center", f_center},     {"batch", f_batch},
    {NULL, NULL}};

static const jfilter *find_filter(const char *name) {
    for (const jfilter *f = k_filters; f->name; f++)
        if (is(name, f->name)) return f;
    return NULL;
}

int ds_jinja_filter_known(const char *name) { return find_filter(name) != NULL; }

ds_jv ds_jinja_filter(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a) {
    const jfilter *f = find_filter(name);
    if (!f) return ds_jerr(c, line, DS_ERR_UNSUPPORTED, "filter '%s' is not supported", name);
    return f->fn(c, line, name, v, a);
}
