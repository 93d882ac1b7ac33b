// Jinja evaluator: statements and expressions over values in a per-render arena, with jinja2's
// scoping (a for loop's body is a fresh scope each iteration, so {% set %} inside does not leak
// out: templates use namespace(); macros see the template's top-level variables at call time) and
// its default Undefined (prints empty, is falsy and iterates empty; an attribute or item of it, or
// arithmetic with it, is an error naming the variable).
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/jinja_internal.h"

#define MAX_STEPS 20000000L
#define MAX_DEPTH 400
#define MAX_OUT ((size_t)256 << 20)

struct ds_jscope {
    ds_jscope *parent;
    int n, cap;
    const char **k;
    ds_jv *v;
};

ds_jv ds_jerr(ds_jctx *c, int line, ds_status code, const char *fmt, ...) {
    if (!c->err) {
        char msg[400];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        c->err = ds_fail(code, "%s:%d: %s", c->name, line, msg);
    }
    return ds_jv_undef(NULL);
}

static ds_jv oom(ds_jctx *c) {
    if (!c->err) c->err = ds_fail(DS_ERR_NOMEM, "%s: out of memory while rendering (or the output is too large)", c->name);
    return ds_jv_undef(NULL);
}

static ds_jscope *scope_new(ds_jctx *c, ds_jscope *parent) {
    ds_jscope *s = ds_ja_alloc(c->a, sizeof *s);
    if (s) s->parent = parent;
    else oom(c);
    return s;
}

static ds_jv *scope_find(ds_jscope *s, const char *k) {
    for (; s; s = s->parent)
        for (int i = s->n - 1; i >= 0; i--)
            if (!strcmp(s->k[i], k)) return &s->v[i];
    return NULL;
}

static void scope_set(ds_jctx *c, ds_jscope *s, const char *k, ds_jv v) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->k[i], k)) {
            s->v[i] = v;
            return;
        }
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 8;
        const char **nk = ds_ja_alloc(c->a, sizeof *nk * (size_t)cap);
        ds_jv *nv = ds_ja_alloc(c->a, sizeof *nv * (size_t)cap);
        if (!nk || !nv) {
            oom(c);
            return;
        }
        if (s->n) memcpy(nk, s->k, sizeof *nk * (size_t)s->n), memcpy(nv, s->v, sizeof *nv * (size_t)s->n);
        s->k = nk, s->v = nv, s->cap = cap;
    }
    s->k[s->n] = k;
    s->v[s->n++] = v;
}

static ds_jv eval(ds_jctx *c, ds_jscope *s, const ds_jnode *n);
static void exec_body(ds_jctx *c, ds_jscope *s, ds_jnode *const *kids, int n);

static const char *undef_msg(ds_jctx *c, const char *fmt, const char *a, const char *b) {
    char buf[300];
    snprintf(buf, sizeof buf, fmt, a, b);
    return ds_ja_strndup(c->a, buf, strlen(buf));
}

// An error for using an undefined value (jinja2's UndefinedError).
static ds_jv undef_error(ds_jctx *c, int line, ds_jv v) {
    return ds_jerr(c, line, DS_ERR_INVALID, "%s", v.undef ? v.undef : "the value is undefined");
}

ds_jv ds_jinja_attr(ds_jctx *c, int line, ds_jv obj, const char *name, size_t n, int subscript) {
    (void)subscript;
    if (obj.t == JV_UNDEF) return undef_error(c, line, obj);
    if (obj.t == JV_DICT) {
        ds_jv *v = ds_jv_dict_get(obj.d, name, n);
        if (v) return *v;
        return ds_jv_undef(undef_msg(c, "'%s' has no attribute '%s'", obj.d->ns ? "Namespace" : "dict object", name));
    }
    char tn[40];
    snprintf(tn, sizeof tn, "%s object", ds_jv_type_name(obj));
    return ds_jv_undef(undef_msg(c, "'%s' has no attribute '%s'", tn, name));
}

// Python's index of a sequence: negative from the end; out of range: -1.
static int64_t seq_index(int64_t i, int64_t len) {
    if (i < 0) i += len;
    return i < 0 || i >= len ? -1 : i;
}

// Byte offsets of the code points of s (n_cp + 1 entries).
static size_t *cp_offsets(ds_jctx *c, const ds_jstr *s, int64_t *n_cp) {
    size_t *o = ds_ja_alloc(c->a, sizeof *o * (s->n + 1));
    if (!o) return NULL;
    int64_t k = 0;
    for (size_t i = 0; i < s->n; i++)
        if (((unsigned char)s->s[i] & 0xc0) != 0x80) o[k++] = i;
    o[k] = s->n;
    *n_cp = k;
    return o;
}

static ds_jv item(ds_jctx *c, int line, ds_jv obj, ds_jv key) {
    if (obj.t == JV_UNDEF) return undef_error(c, line, obj);
    if (obj.t == JV_DICT) {
        if (key.t != JV_STR) return ds_jv_undef("no such key");
        ds_jv *v = ds_jv_dict_get(obj.d, key.s->s, key.s->n);
        return v ? *v : ds_jv_undef(undef_msg(c, "'dict object' has no attribute '%s'%s", key.s->s, ""));
    }
    if (key.t == JV_STR) return ds_jinja_attr(c, line, obj, key.s->s, key.s->n, 1);
    if (key.t != JV_INT && key.t != JV_BOOL) {
        if (obj.t == JV_LIST || obj.t == JV_STR)
            return ds_jerr(c, line, DS_ERR_INVALID, "%s indices must be integers, not %s", ds_jv_type_name(obj), ds_jv_type_name(key));
        return ds_jv_undef("no such item");
    }
    const int64_t k = key.t == JV_INT ? key.i : key.b;
    if (obj.t == JV_LIST) {
        int64_t i = seq_index(k, obj.l->n);
        return i < 0 ? ds_jv_undef("list index out of range") : obj.l->a[i];
    }
    if (obj.t == JV_STR) {
        int64_t ncp;
        size_t *o = cp_offsets(c, obj.s, &ncp);
        if (!o) return oom(c);
        int64_t i = seq_index(k, ncp);
        return i < 0 ? ds_jv_undef("string index out of range") : ds_jv_str(c, obj.s->s + o[i], o[i + 1] - o[i]);
    }
    char tn[40];
    snprintf(tn, sizeof tn, "%s object", ds_jv_type_name(obj));
    return ds_jv_undef(undef_msg(c, "'%s' has no attribute '%s'", tn, "[]"));
}

// Python slice bounds (start, stop, step) over len items.
static void slice_bounds(int64_t len, int has_lo, int64_t lo, int has_hi, int64_t hi, int64_t step, int64_t *a, int64_t *b) {
    if (step > 0) {
        lo = !has_lo ? 0 : lo < 0 ? (lo + len < 0 ? 0 : lo + len) : (lo > len ? len : lo);
        hi = !has_hi ? len : hi < 0 ? (hi + len < 0 ? 0 : hi + len) : (hi > len ? len : hi);
    } else {
        lo = !has_lo ? len - 1 : lo < 0 ? (lo + len < 0 ? -1 : lo + len) : (lo >= len ? len - 1 : lo);
        hi = !has_hi ? -1 : hi < 0 ? (hi + len < 0 ? -1 : hi + len) : (hi >= len ? len - 1 : hi);
    }
    *a = lo, *b = hi;
}

static ds_jv slice(ds_jctx *c, ds_jscope *s, const ds_jnode *n) {
    ds_jv obj = eval(c, s, n->x);
    int64_t p[3] = {0, 0, 1};
    int has[3] = {0, 0, 0};
    for (int k = 0; k < 3; k++) {
        if (!n->kids[k]) continue;
        ds_jv v = eval(c, s, n->kids[k]);
        if (c->err) return v;
        if (v.t == JV_NONE) continue;
        if (v.t != JV_INT && v.t != JV_BOOL) return ds_jerr(c, n->line, DS_ERR_INVALID, "slice indices must be integers or None");
        has[k] = 1, p[k] = v.t == JV_INT ? v.i : v.b;
    }
    if (c->err) return obj;
    if (p[2] == 0) return ds_jerr(c, n->line, DS_ERR_INVALID, "slice step cannot be zero");
    if (obj.t == JV_UNDEF) return undef_error(c, n->line, obj);
    int64_t len;
    size_t *o = NULL;
    if (obj.t == JV_LIST) len = obj.l->n;
    else if (obj.t == JV_STR) {
        if (!(o = cp_offsets(c, obj.s, &len))) return oom(c);
    } else return ds_jerr(c, n->line, DS_ERR_INVALID, "'%s' object is not subscriptable", ds_jv_type_name(obj));
    int64_t a, b;
    slice_bounds(len, has[0], p[0], has[1], p[1], p[2], &a, &b);
    int64_t cnt = 0;
    for (int64_t i = a; p[2] > 0 ? i < b : i > b; i += p[2]) cnt++;
    if (obj.t == JV_LIST) {
        ds_jv r = ds_jv_list(c, (int)cnt);
        if (c->err) return r;
        int64_t k = 0;
        for (int64_t i = a; p[2] > 0 ? i < b : i > b; i += p[2]) r.l->a[k++] = obj.l->a[i];
        return r;
    }
    ds_jbuf buf = {0};
    for (int64_t i = a; p[2] > 0 ? i < b : i > b; i += p[2]) ds_jbuf_put(c, &buf, obj.s->s + o[i], o[i + 1] - o[i]);
    return ds_jbuf_value(c, &buf);
}

static double num(ds_jv v) { return v.t == JV_FLOAT ? v.f : v.t == JV_INT ? (double)v.i : v.b; }
static int is_num(ds_jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static int64_t ival(ds_jv v) { return v.t == JV_INT ? v.i : v.b; }

static ds_jv concat2(ds_jctx *c, ds_jv a, ds_jv b) {
    ds_jbuf buf = {0};
    ds_jv_to_str(c, &buf, a, 0);
    ds_jv_to_str(c, &buf, b, 0);
    return ds_jbuf_value(c, &buf);
}

static ds_jv binary(ds_jctx *c, int line, int op, ds_jv a, ds_jv b) {
    static const char *sym[] = {"+", "-", "*", "/", "//", "%", "**"};
    if (a.t == JV_UNDEF) return undef_error(c, line, a);
    if (b.t == JV_UNDEF) return undef_error(c, line, b);
    if (is_num(a) && is_num(b)) {
        const int fl = a.t == JV_FLOAT || b.t == JV_FLOAT;
        const int64_t x = ival(a), y = ival(b);
        switch (op) {
        case JO_ADD: return fl ? ds_jv_float(num(a) + num(b)) : ds_jv_int(x + y);
        case JO_SUB: return fl ? ds_jv_float(num(a) - num(b)) : ds_jv_int(x - y);
        case JO_MUL: return fl ? ds_jv_float(num(a) * num(b)) : ds_jv_int(x * y);
        case JO_DIV:
            if (num(b) == 0) return ds_jerr(c, line, DS_ERR_INVALID, "division by zero");
            return ds_jv_float(num(a) / num(b));
        case JO_FLOORDIV:
        case JO_MOD:
            if (num(b) == 0) return ds_jerr(c, line, DS_ERR_INVALID, "integer division or modulo by zero");
            if (fl) {
                double q = floor(num(a) / num(b)), m = num(a) - q * num(b);
                return ds_jv_float(op == JO_FLOORDIV ? q : m);
            } else {
                int64_t q = x / y, m = x % y;
                if (m && ((m < 0) != (y < 0))) q--, m += y;
                return ds_jv_int(op == JO_FLOORDIV ? q : m);
            }
        case JO_POW:
            if (!fl && y >= 0) {
                int64_t r = 1;
                for (int64_t k = 0; k < y && k < 64; k++) r *= x;
                return ds_jv_int(r);
            }
            return ds_jv_float(pow(num(a), num(b)));
        }
    }
    if (op == JO_ADD && a.t == JV_STR && b.t == JV_STR) { // Markup + str escapes the str (either side)
        if (a.safe != b.safe) {
            if (!a.safe) a = ds_jinja_escape(c, a);
            else b = ds_jinja_escape(c, b);
        }
        ds_jv r = concat2(c, a, b);
        r.safe = a.safe || b.safe;
        return r;
    }
    if (op == JO_ADD && a.t == JV_LIST && b.t == JV_LIST) {
        ds_jv r = ds_jv_list(c, a.l->n + b.l->n);
        if (c->err) return r;
        for (int i = 0; i < a.l->n; i++) r.l->a[i] = a.l->a[i];
        for (int i = 0; i < b.l->n; i++) r.l->a[a.l->n + i] = b.l->a[i];
        return r;
    }
    if (op == JO_MUL && ((a.t == JV_STR || a.t == JV_LIST) && (b.t == JV_INT || b.t == JV_BOOL))) {
        const int64_t k = ival(b) < 0 ? 0 : ival(b);
        if (a.t == JV_STR) {
            if ((double)a.s->n * (double)k > 64e6) return ds_jerr(c, line, DS_ERR_INVALID, "string repetition too large");
            ds_jbuf buf = {0};
            for (int64_t i = 0; i < k; i++) ds_jbuf_put(c, &buf, a.s->s, a.s->n);
            return ds_jbuf_value(c, &buf);
        }
        if ((double)a.l->n * (double)k > 1e6) return ds_jerr(c, line, DS_ERR_INVALID, "list repetition too large");
        ds_jv r = ds_jv_list(c, (int)(a.l->n * k));
        for (int64_t i = 0; !c->err && i < k; i++)
            for (int j = 0; j < a.l->n; j++) r.l->a[i * a.l->n + j] = a.l->a[j];
        return r;
    }
    if (op == JO_MOD && a.t == JV_STR) return ds_jerr(c, line, DS_ERR_UNSUPPORTED, "printf-style string formatting ('%%') is not supported");
    return ds_jerr(c, line, DS_ERR_INVALID, "unsupported operand type(s) for %s: '%s' and '%s'", sym[op], ds_jv_type_name(a),
                   ds_jv_type_name(b));
}

// Python's ordering of two values: -2 when they do not compare.
static int order(ds_jv a, ds_jv b) {
    if (is_num(a) && is_num(b)) return num(a) < num(b) ? -1 : num(a) > num(b) ? 1 : 0;
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t m = a.s->n < b.s->n ? a.s->n : b.s->n;
        int r = memcmp(a.s->s, b.s->s, m);
        return r ? (r < 0 ? -1 : 1) : a.s->n < b.s->n ? -1 : a.s->n > b.s->n ? 1 : 0;
    }
    if (a.t == JV_LIST && b.t == JV_LIST) {
        for (int i = 0; i < a.l->n && i < b.l->n; i++) {
            if (ds_jv_equal(a.l->a[i], b.l->a[i])) continue;
            return order(a.l->a[i], b.l->a[i]);
        }
        return a.l->n < b.l->n ? -1 : a.l->n > b.l->n ? 1 : 0;
    }
    return -2;
}

int ds_jinja_order(ds_jv a, ds_jv b) { return order(a, b); }

static ds_jv contains(ds_jctx *c, int line, ds_jv needle, ds_jv hay) {
    if (hay.t == JV_UNDEF) return ds_jv_bool(0);
    if (hay.t == JV_STR) {
        if (needle.t != JV_STR)
            return ds_jerr(c, line, DS_ERR_INVALID, "'in <string>' requires string as left operand, not %s", ds_jv_type_name(needle));
        if (!needle.s->n) return ds_jv_bool(1);
        for (size_t i = 0; i + needle.s->n <= hay.s->n; i++)
            if (!memcmp(hay.s->s + i, needle.s->s, needle.s->n)) return ds_jv_bool(1);
        return ds_jv_bool(0);
    }
    if (hay.t == JV_LIST) {
        for (int i = 0; i < hay.l->n; i++)
            if (ds_jv_equal(needle, hay.l->a[i])) return ds_jv_bool(1);
        return ds_jv_bool(0);
    }
    if (hay.t == JV_DICT) return ds_jv_bool(needle.t == JV_STR && ds_jv_dict_get(hay.d, needle.s->s, needle.s->n) != NULL);
    return ds_jerr(c, line, DS_ERR_INVALID, "argument of type '%s' is not iterable", ds_jv_type_name(hay));
}

static ds_jv compare(ds_jctx *c, int line, int op, ds_jv a, ds_jv b) {
    static const char *sym[] = {"", "", "", "", "", "", "", "==", "!=", "<", "<=", ">", ">="};
    switch (op) {
    case JO_EQ: return ds_jv_bool(ds_jv_equal(a, b));
    case JO_NE: return ds_jv_bool(!ds_jv_equal(a, b));
    case JO_IN: return contains(c, line, a, b);
    case JO_NOTIN: {
        ds_jv r = contains(c, line, a, b);
        return r.t == JV_BOOL ? ds_jv_bool(!r.b) : r;
    }
    }
    if (a.t == JV_UNDEF) return undef_error(c, line, a);
    if (b.t == JV_UNDEF) return undef_error(c, line, b);
    int o = order(a, b);
    if (o == -2)
        return ds_jerr(c, line, DS_ERR_INVALID, "'%s' not supported between instances of '%s' and '%s'", sym[op], ds_jv_type_name(a),
                       ds_jv_type_name(b));
    return ds_jv_bool(op == JO_LT ? o < 0 : op == JO_LE ? o <= 0 : op == JO_GT ? o > 0 : o >= 0);
}

static int eval_args(ds_jctx *c, ds_jscope *s, const ds_jnode *n, ds_jargs *a) {
    memset(a, 0, sizeof *a);
    if (n->n_kids) {
        a->pos = ds_ja_alloc(c->a, sizeof *a->pos * (size_t)n->n_kids);
        if (!a->pos) return oom(c), 0;
        for (int i = 0; i < n->n_kids && !c->err; i++) a->pos[i] = eval(c, s, n->kids[i]);
        a->n_pos = n->n_kids;
    }
    if (n->n_names) {
        a->kwv = ds_ja_alloc(c->a, sizeof *a->kwv * (size_t)n->n_names);
        if (!a->kwv) return oom(c), 0;
        a->kw = n->names;
        for (int i = 0; i < n->n_names && !c->err; i++) a->kwv[i] = eval(c, s, n->vals[i]);
        a->n_kw = n->n_names;
    }
    return !c->err;
}

static ds_jv call_macro(ds_jctx *c, int line, const ds_jnode *m, const ds_jargs *a) {
    if (++c->depth > MAX_DEPTH) return ds_jerr(c, line, DS_ERR_INVALID, "macro calls nested too deeply (recursion?)");
    ds_jscope *s = scope_new(c, c->root);
    if (!s) return ds_jv_undef(NULL);
    if (a->n_pos > m->n_names) return ds_jerr(c, line, DS_ERR_UNSUPPORTED, "macro '%s' called with more positional arguments than it declares (varargs are not supported)", m->name);
    for (int i = 0; i < m->n_names && !c->err; i++) {
        ds_jv v = ds_jv_undef(NULL);
        int got = 0;
        if (i < a->n_pos) v = a->pos[i], got = 1;
        for (int k = 0; k < a->n_kw; k++)
            if (!strcmp(a->kw[k], m->names[i])) {
                if (got) return ds_jerr(c, line, DS_ERR_INVALID, "macro '%s' got multiple values for argument '%s'", m->name, m->names[i]);
                v = a->kwv[k], got = 1;
            }
        if (!got && m->vals[i]) v = eval(c, s, m->vals[i]);
        else if (!got) v = ds_jv_undef(undef_msg(c, "parameter '%s' was not provided%s", m->names[i], ""));
        scope_set(c, s, m->names[i], v);
    }
    for (int k = 0; k < a->n_kw; k++) {
        int found = 0;
        for (int i = 0; i < m->n_names; i++) found |= !strcmp(a->kw[k], m->names[i]);
        if (!found) return ds_jerr(c, line, DS_ERR_UNSUPPORTED, "macro '%s' takes no keyword argument '%s' (kwargs are not supported)", m->name, a->kw[k]);
    }
    ds_jbuf buf = {0}, *saved = c->out;
    c->out = &buf;
    exec_body(c, s, m->kids, m->n_kids);
    c->out = saved;
    c->ctl = 0;
    c->depth--;
    return ds_jbuf_value(c, &buf);
}

static ds_jv call(ds_jctx *c, ds_jscope *s, const ds_jnode *n) {
    ds_jargs a;
    if (n->x->kind == JN_ATTR) { // obj.method(args)
        ds_jv obj = eval(c, s, n->x->x);
        if (c->err || !eval_args(c, s, n, &a)) return ds_jv_undef(NULL);
        ds_jv res;
        if (obj.t == JV_UNDEF) return undef_error(c, n->line, obj);
        if (ds_jinja_method(c, n->line, obj, n->x->name, &a, &res)) return res;
        if (c->err) return res;
        ds_jv f = ds_jinja_attr(c, n->line, obj, n->x->name, strlen(n->x->name), 0);
        if (f.t == JV_MACRO) return call_macro(c, n->line, f.m, &a);
        if (f.t == JV_FUNC) return ds_jinja_call_func(c, n->line, f.fn, &a);
        if (f.t == JV_UNDEF) {
            static const char *const left_out[] = {"center", "ljust", "rjust", "zfill", "expandtabs", "partition", "rpartition", "casefold",
                                                   "swapcase", "encode", "format_map", "translate", "isnumeric", "isdecimal", "isidentifier",
                                                   "isprintable", "istitle", "isascii", "format", NULL};
            for (int k = 0; obj.t == JV_STR && left_out[k]; k++)
                if (!strcmp(left_out[k], n->x->name)) return ds_jerr(c, n->line, DS_ERR_UNSUPPORTED, "str.%s() is not supported", n->x->name);
            return undef_error(c, n->line, f);
        }
        return ds_jerr(c, n->line, DS_ERR_INVALID, "'%s' object is not callable", ds_jv_type_name(f));
    }
    ds_jv f = eval(c, s, n->x);
    if (c->err || !eval_args(c, s, n, &a)) return ds_jv_undef(NULL);
    if (f.t == JV_MACRO) return call_macro(c, n->line, f.m, &a);
    if (f.t == JV_FUNC) return ds_jinja_call_func(c, n->line, f.fn, &a);
    if (f.t == JV_UNDEF) return undef_error(c, n->line, f);
    return ds_jerr(c, n->line, DS_ERR_INVALID, "'%s' object is not callable", ds_jv_type_name(f));
}

static ds_jv eval(ds_jctx *c, ds_jscope *s, const ds_jnode *n) {
    if (c->err) return ds_jv_undef(NULL);
    if (++c->steps > MAX_STEPS) return ds_jerr(c, n->line, DS_ERR_INVALID, "the template runs too long (over %ld steps)", MAX_STEPS);
    switch (n->kind) {
    case JN_LIT: return n->lit;
    case JN_NAME: {
        ds_jv *v = scope_find(s, n->name);
        if (v) return *v;
        static const char *const fns[] = {"range", "namespace", "raise_exception", "strftime_now", "dict"};
        for (int k = 0; k < 5; k++)
            if (!strcmp(n->name, fns[k])) {
                ds_jv f = {.t = JV_FUNC};
                f.fn = k;
                return f;
            }
        return ds_jv_undef(undef_msg(c, "'%s' is undefined%s", n->name, ""));
    }
    case JN_LIST:
    case JN_TUPLE: {
        ds_jv r = ds_jv_list(c, n->n_kids);
        for (int i = 0; i < n->n_kids && !c->err; i++) r.l->a[i] = eval(c, s, n->kids[i]);
        if (!c->err) r.l->tuple = n->kind == JN_TUPLE;
        return r;
    }
    case JN_DICT: {
        ds_jv r = ds_jv_dict(c);
        for (int i = 0; i < n->n_kids && !c->err; i++) {
            ds_jv k = eval(c, s, n->kids[i]), v = eval(c, s, n->vals[i]);
            if (c->err) break;
            if (k.t != JV_STR) return ds_jerr(c, n->line, DS_ERR_UNSUPPORTED, "dict keys other than strings are not supported");
            ds_jv_dict_set(c, r.d, k.s->s, k.s->n, v);
        }
        return r;
    }
    case JN_ATTR: {
        ds_jv o = eval(c, s, n->x);
        if (c->err) return o;
        return ds_jinja_attr(c, n->line, o, n->name, strlen(n->name), 0);
    }
    case JN_ITEM: {
        ds_jv o = eval(c, s, n->x), k = eval(c, s, n->y);
        if (c->err) return o;
        return item(c, n->line, o, k);
    }
    case JN_SLICE: return slice(c, s, n);
    case JN_CALL: return call(c, s, n);
    case JN_FILTER: {
        ds_jv v = eval(c, s, n->x);
        ds_jargs a;
        if (c->err || !eval_args(c, s, n, &a)) return ds_jv_undef(NULL);
        return ds_jinja_filter(c, n->line, n->name, v, &a);
    }
    case JN_TEST: {
        ds_jv v = eval(c, s, n->x);
        ds_jargs a;
        if (c->err || !eval_args(c, s, n, &a)) return ds_jv_undef(NULL);
        ds_jv r = ds_jinja_test(c, n->line, n->name, v, &a);
        return n->op && r.t == JV_BOOL ? ds_jv_bool(!r.b) : r;
    }
    case JN_NEG:
    case JN_POS: {
        ds_jv v = eval(c, s, n->x);
        if (c->err) return v;
        if (!is_num(v)) return ds_jerr(c, n->line, DS_ERR_INVALID, "bad operand type for unary %c: '%s'", n->kind == JN_NEG ? '-' : '+', ds_jv_type_name(v));
        if (n->kind == JN_POS) return v.t == JV_BOOL ? ds_jv_int(v.b) : v;
        return v.t == JV_FLOAT ? ds_jv_float(-v.f) : ds_jv_int(-ival(v));
    }
    case JN_NOT: {
        ds_jv v = eval(c, s, n->x);
        return c->err ? v : ds_jv_bool(!ds_jv_truthy(v));
    }
    case JN_AND: { // Python: the deciding operand itself
        ds_jv l = eval(c, s, n->x);
        return c->err || !ds_jv_truthy(l) ? l : eval(c, s, n->y);
    }
    case JN_OR: {
        ds_jv l = eval(c, s, n->x);
        return c->err || ds_jv_truthy(l) ? l : eval(c, s, n->y);
    }
    case JN_BIN: {
        ds_jv l = eval(c, s, n->x), r = eval(c, s, n->y);
        return c->err ? l : binary(c, n->line, n->op, l, r);
    }
    case JN_CMP: {
        ds_jv l = eval(c, s, n->x), r = eval(c, s, n->y);
        return c->err ? l : compare(c, n->line, n->op, l, r);
    }
    case JN_CONCAT: {
        ds_jv l = eval(c, s, n->x), r = eval(c, s, n->y);
        return c->err ? l : concat2(c, l, r);
    }
    case JN_COND: {
        ds_jv cond = eval(c, s, n->x);
        if (c->err) return cond;
        if (ds_jv_truthy(cond)) return eval(c, s, n->y);
        return n->z ? eval(c, s, n->z) : ds_jv_undef("the conditional expression evaluated to false and has no else");
    }
    default: return ds_jerr(c, n->line, DS_ERR_INVALID, "internal: not an expression");
    }
}

static void out_value(ds_jctx *c, ds_jv v) {
    ds_jv_to_str(c, c->out, v, 0);
    if (c->out->n > MAX_OUT) oom(c);
}

// Assign v to the targets of a for loop or set: one name, or several unpacked from a sequence.
static void assign(ds_jctx *c, ds_jscope *s, int line, const char **names, int n, ds_jv v) {
    if (n == 1) {
        scope_set(c, s, names[0], v);
        return;
    }
    if (v.t == JV_STR) {
        int64_t ncp;
        size_t *o = cp_offsets(c, v.s, &ncp);
        if (!o) return;
        if (ncp != n) {
            ds_jerr(c, line, DS_ERR_INVALID, "cannot unpack %lld values into %d names", (long long)ncp, n);
            return;
        }
        for (int i = 0; i < n; i++) scope_set(c, s, names[i], ds_jv_str(c, v.s->s + o[i], o[i + 1] - o[i]));
        return;
    }
    if (v.t != JV_LIST) {
        ds_jerr(c, line, DS_ERR_INVALID, "cannot unpack a non-sequence '%s'", ds_jv_type_name(v));
        return;
    }
    if (v.l->n != n) {
        ds_jerr(c, line, DS_ERR_INVALID, "cannot unpack %d values into %d names", v.l->n, n);
        return;
    }
    for (int i = 0; i < n; i++) scope_set(c, s, names[i], v.l->a[i]);
}

// The items a for loop walks: a list's items, a dict's keys, a string's characters.
static ds_jv iterable(ds_jctx *c, int line, ds_jv v) {
    if (v.t == JV_LIST) return v;
    if (v.t == JV_UNDEF || v.t == JV_NONE) {
        if (v.t == JV_NONE) return ds_jerr(c, line, DS_ERR_INVALID, "'NoneType' object is not iterable");
        return ds_jv_list(c, 0);
    }
    if (v.t == JV_DICT) {
        ds_jv r = ds_jv_list(c, v.d->n);
        for (int i = 0; i < v.d->n && !c->err; i++) r.l->a[i] = ds_jv_str(c, v.d->k[i]->s, v.d->k[i]->n);
        return r;
    }
    if (v.t == JV_STR) {
        int64_t ncp;
        size_t *o = cp_offsets(c, v.s, &ncp);
        if (!o) return oom(c);
        ds_jv r = ds_jv_list(c, (int)ncp);
        for (int64_t i = 0; i < ncp && !c->err; i++) r.l->a[i] = ds_jv_str(c, v.s->s + o[i], o[i + 1] - o[i]);
        return r;
    }
    return ds_jerr(c, line, DS_ERR_INVALID, "'%s' object is not iterable", ds_jv_type_name(v));
}

ds_jv ds_jinja_iterable(ds_jctx *c, int line, ds_jv v) { return iterable(c, line, v); }

static void exec_for(ds_jctx *c, ds_jscope *s, const ds_jnode *n) {
    ds_jv seq = iterable(c, n->line, eval(c, s, n->x));
    if (c->err) return;
    if (n->y) { // {% for x in xs if cond %}: filter first (loop.length counts what is left)
        ds_jv kept = ds_jv_list(c, seq.l->n);
        int k = 0;
        for (int i = 0; i < seq.l->n && !c->err; i++) {
            ds_jscope *t = scope_new(c, s);
            if (!t) return;
            assign(c, t, n->line, n->names, n->n_names, seq.l->a[i]);
            if (ds_jv_truthy(eval(c, t, n->y))) kept.l->a[k++] = seq.l->a[i];
        }
        if (c->err) return;
        kept.l->n = k;
        seq = kept;
    }
    const int len = seq.l->n;
    for (int i = 0; i < len && !c->err; i++) {
        ds_jscope *t = scope_new(c, s);
        if (!t) return;
        ds_jv loop = ds_jv_dict(c);
        if (c->err) return;
#define SETL(k, v) ds_jv_dict_set(c, loop.d, k, strlen(k), v)
        SETL("index", ds_jv_int(i + 1));
        SETL("index0", ds_jv_int(i));
        SETL("revindex", ds_jv_int(len - i));
        SETL("revindex0", ds_jv_int(len - i - 1));
        SETL("first", ds_jv_bool(i == 0));
        SETL("last", ds_jv_bool(i == len - 1));
        SETL("length", ds_jv_int(len));
        SETL("depth", ds_jv_int(1));
        SETL("depth0", ds_jv_int(0));
        if (i > 0) SETL("previtem", seq.l->a[i - 1]);
        if (i + 1 < len) SETL("nextitem", seq.l->a[i + 1]);
#undef SETL
        scope_set(c, t, "loop", loop);
        assign(c, t, n->line, n->names, n->n_names, seq.l->a[i]);
        exec_body(c, t, n->kids, n->n_kids);
        if (c->ctl == 1) {
            c->ctl = 0;
            break;
        }
        c->ctl = 0;
    }
    if (!len && n->n_body2 && !c->err) exec_body(c, s, n->body2, n->n_body2);
}

static void exec_stmt(ds_jctx *c, ds_jscope *s, const ds_jnode *n) {
    if (++c->steps > MAX_STEPS) {
        ds_jerr(c, n->line, DS_ERR_INVALID, "the template runs too long (over %ld steps)", MAX_STEPS);
        return;
    }
    switch (n->kind) {
    case JS_TEXT:
        ds_jbuf_put(c, c->out, n->lit.s->s, n->lit.s->n);
        if (c->out->n > MAX_OUT) oom(c);
        return;
    case JS_OUT: {
        ds_jv v = eval(c, s, n->x);
        if (!c->err) out_value(c, v);
        return;
    }
    case JS_IF: {
        ds_jv v = eval(c, s, n->x);
        if (c->err) return;
        if (ds_jv_truthy(v)) exec_body(c, s, n->kids, n->n_kids);
        else exec_body(c, s, n->body2, n->n_body2);
        return;
    }
    case JS_FOR: exec_for(c, s, n); return;
    case JS_SET: {
        ds_jv v = eval(c, s, n->y);
        if (c->err) return;
        if (n->x) { // ns.attr = v
            ds_jv *o = scope_find(s, n->x->x->name);
            if (!o || o->t != JV_DICT || !o->d->ns) {
                ds_jerr(c, n->line, DS_ERR_INVALID, "cannot assign attribute on non-namespace object '%s'", n->x->x->name);
                return;
            }
            ds_jv_dict_set(c, o->d, n->x->name, strlen(n->x->name), v);
            return;
        }
        assign(c, s, n->line, n->names, n->n_names, v);
        return;
    }
    case JS_SET_BLOCK: {
        ds_jbuf buf = {0}, *saved = c->out;
        c->out = &buf;
        exec_body(c, s, n->kids, n->n_kids);
        c->out = saved;
        if (!c->err) scope_set(c, s, n->name, ds_jbuf_value(c, &buf));
        return;
    }
    case JS_MACRO: {
        ds_jv m = {.t = JV_MACRO};
        m.m = n;
        scope_set(c, s, n->name, m);
        return;
    }
    case JS_FILTER_BLOCK: {
        ds_jbuf buf = {0}, *saved = c->out;
        c->out = &buf;
        exec_body(c, s, n->kids, n->n_kids);
        c->out = saved;
        if (c->err) return;
        ((ds_jnode *)n->y)->lit = ds_jbuf_value(c, &buf); // the placeholder the chain starts from
        ds_jv v = eval(c, s, n->x);
        if (!c->err) out_value(c, v);
        return;
    }
    case JS_BODY: exec_body(c, s, n->kids, n->n_kids); return;
    case JS_BREAK: c->ctl = 1; return;
    case JS_CONTINUE: c->ctl = 2; return;
    default: ds_jerr(c, n->line, DS_ERR_INVALID, "internal: not a statement"); return;
    }
}

static void exec_body(ds_jctx *c, ds_jscope *s, ds_jnode *const *kids, int n) {
    for (int i = 0; i < n && !c->err && !c->ctl; i++) exec_stmt(c, s, kids[i]);
}

ds_status ds_jinja_render(const ds_jinja *t, const cJSON *vars, char **out, size_t *n_out) {
    *out = NULL;
    if (n_out) *n_out = 0;
    ds_jarena a = {.limit = (size_t)1 << 30};
    ds_jbuf buf = {0};
    ds_jctx c = {.a = &a, .out = &buf, .name = t->name};
    c.root = scope_new(&c, NULL);
    if (cJSON_IsObject(vars))
        for (const cJSON *v = vars->child; v && !c.err; v = v->next) {
            ds_jv x = ds_jv_from_json(&c, v);
            char *k = ds_ja_strndup(&a, v->string, strlen(v->string));
            if (!k) oom(&c);
            else scope_set(&c, c.root, k, x);
        }
    if (!c.err) exec_body(&c, c.root, t->root->kids, t->root->n_kids);
    if (!c.err && a.oom) oom(&c);
    ds_ja_free(&a);
    if (c.err) {
        free(buf.s);
        return c.err;
    }
    if (!buf.s && !(buf.s = calloc(1, 1))) return ds_fail(DS_ERR_NOMEM, "%s: out of memory", t->name);
    *out = buf.s;
    if (n_out) *n_out = buf.n;
    return DS_OK;
}
