// Jinja parser: tokens -> AST, with jinja2's grammar and precedence (lowest first): conditional
// `a if c else b`, or, and, not, comparisons (== != < <= > >= in, not in), + -, ~, * / // %, **,
// unary - +, then primaries with postfixes (.attr, [item], [a:b:c], (call)), filters (|f(args))
// and tests (is [not] t(args)). Statements: if/elif/else, for (targets, `if` filter, else), set
// (names, tuples, namespace attributes, block set), macro, filter blocks, break/continue and
// transformers' {% generation %}. Unknown filters and tests are errors here, as in jinja2.
// Also the arena and ds_jinja_parse / ds_jinja_free.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/jinja_internal.h"

struct ds_jchunk {
    ds_jchunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *ds_ja_alloc(ds_jarena *a, size_t n) {
    if (a->oom) return NULL;
    n = (n + 15) & ~(size_t)15;
    ds_jchunk *c = a->head;
    if (!c || c->used + n > c->cap) {
        size_t cap = n > 65536 ? n : 65536;
        if (a->limit && a->total + cap > a->limit) {
            a->oom = 1;
            return NULL;
        }
        c = malloc(sizeof *c + cap);
        if (!c) {
            a->oom = 1;
            return NULL;
        }
        c->next = a->head, c->used = 0, c->cap = cap;
        a->head = c;
        a->total += cap;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *ds_ja_strndup(ds_jarena *a, const char *s, size_t n) {
    char *p = ds_ja_alloc(a, n + 1);
    if (p) memcpy(p, s, n), p[n] = 0;
    return p;
}

void ds_ja_free(ds_jarena *a) {
    for (ds_jchunk *c = a->head, *nx; c; c = nx) nx = c->next, free(c);
    a->head = NULL;
    a->total = 0;
    a->oom = 0;
}

typedef struct {
    ds_jarena *a;
    const ds_jtok *t;
    int n, i;
    const char *name;
    ds_status err;
    int depth;
    int in_loop, in_macro;
} parser;

static const ds_jtok *cur(parser *P) { return &P->t[P->i]; }

static void *pfail(parser *P, ds_status code, const char *fmt, ...) {
    if (P->err) return NULL;
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    P->err = ds_fail(code, "%s:%d: %s", P->name, cur(P)->line, msg);
    return NULL;
}

static int is_op(parser *P, const char *op) {
    const ds_jtok *t = cur(P);
    return t->type == JT_OP && t->n == strlen(op) && !memcmp(t->s, op, t->n);
}

static int is_name(parser *P, const char *w) {
    const ds_jtok *t = cur(P);
    return t->type == JT_NAME && t->n == strlen(w) && !memcmp(t->s, w, t->n);
}

static int accept_op(parser *P, const char *op) { return is_op(P, op) ? (P->i++, 1) : 0; }
static int accept_name(parser *P, const char *w) { return is_name(P, w) ? (P->i++, 1) : 0; }

static const char *tok_desc(parser *P) {
    static _Thread_local char b[80];
    const ds_jtok *t = cur(P);
    switch (t->type) {
    case JT_BLOCK_END: return "end of statement block";
    case JT_VAR_END: return "end of print statement";
    case JT_EOF: return "end of template";
    case JT_STRING: return "string";
    case JT_TEXT: return "template text";
    default: snprintf(b, sizeof b, "'%.*s'", (int)(t->n < 40 ? t->n : 40), t->s); return b;
    }
}

static int expect_op(parser *P, const char *op) {
    if (accept_op(P, op)) return 1;
    pfail(P, DS_ERR_FORMAT, "expected '%s', got %s", op, tok_desc(P));
    return 0;
}

static char *take_name(parser *P) {
    if (cur(P)->type != JT_NAME) return pfail(P, DS_ERR_FORMAT, "expected a name, got %s", tok_desc(P));
    const ds_jtok *t = &P->t[P->i++];
    return ds_ja_strndup(P->a, t->s, t->n);
}

static ds_jnode *node(parser *P, ds_jkind k) {
    ds_jnode *n = ds_ja_alloc(P->a, sizeof *n);
    if (n) n->kind = k, n->line = cur(P)->line;
    return n;
}

// Growable node arrays while parsing.
typedef struct {
    ds_jnode **v;
    const char **names;
    int n, cap;
} vec;

static void vec_push(parser *P, vec *v, ds_jnode *x, const char *name) {
    if (v->n == v->cap) {
        int cap = v->cap ? 2 * v->cap : 8;
        ds_jnode **nv = ds_ja_alloc(P->a, sizeof *nv * (size_t)cap);
        const char **nn = ds_ja_alloc(P->a, sizeof *nn * (size_t)cap);
        if (!nv || !nn) return;
        if (v->n) memcpy(nv, v->v, sizeof *nv * (size_t)v->n), memcpy(nn, v->names, sizeof *nn * (size_t)v->n);
        v->v = nv, v->names = nn, v->cap = cap;
    }
    v->v[v->n] = x;
    v->names[v->n++] = name;
}

static ds_jnode *expr(parser *P);
static ds_jnode *or_expr(parser *P);
static ds_jnode *unary(parser *P, int with_filter);

// Call arguments after "(": positional, then name=value; into n->kids and n->names/vals.
static int call_args(parser *P, ds_jnode *n) {
    vec pos = {0}, kw = {0};
    while (!is_op(P, ")")) {
        if (is_op(P, "*") || is_op(P, "**")) return pfail(P, DS_ERR_UNSUPPORTED, "*args / **kwargs in calls are not supported"), 0;
        if (cur(P)->type == JT_NAME && P->t[P->i + 1].type == JT_OP && P->t[P->i + 1].n == 1 && P->t[P->i + 1].s[0] == '=') {
            char *k = take_name(P);
            P->i++;
            ds_jnode *v = expr(P);
            if (!v) return 0;
            vec_push(P, &kw, v, k);
        } else {
            if (kw.n) return pfail(P, DS_ERR_FORMAT, "a positional argument after keyword arguments"), 0;
            ds_jnode *v = expr(P);
            if (!v) return 0;
            vec_push(P, &pos, v, NULL);
        }
        if (!accept_op(P, ",")) break;
    }
    if (!expect_op(P, ")")) return 0;
    n->kids = pos.v, n->n_kids = pos.n;
    n->names = kw.names, n->vals = kw.v, n->n_names = kw.n;
    return 1;
}

static ds_jnode *primary(parser *P) {
    const ds_jtok *t = cur(P);
    ds_jnode *n;
    if (++P->depth > 200) return pfail(P, DS_ERR_UNSUPPORTED, "expression nested too deeply");
    if (t->type == JT_NAME) {
        P->i++;
        n = node(P, JN_LIT);
        if (!n) return NULL;
        n->line = t->line;
#define W(w_) (t->n == strlen(w_) && !memcmp(t->s, w_, t->n))
        if (W("true") || W("True")) n->lit = ds_jv_bool(1);
        else if (W("false") || W("False")) n->lit = ds_jv_bool(0);
        else if (W("none") || W("None")) n->lit = ds_jv_none();
        else n->kind = JN_NAME, n->name = ds_ja_strndup(P->a, t->s, t->n);
#undef W
    } else if (t->type == JT_STRING) {
        n = node(P, JN_LIT); // adjacent strings are one ("a" "b")
        size_t len = 0;
        int k = P->i;
        while (P->t[k].type == JT_STRING) len += P->t[k++].n;
        char *s = ds_ja_alloc(P->a, sizeof(ds_jstr) + len + 1);
        if (!n || !s) return NULL;
        ds_jstr *js = (ds_jstr *)s;
        js->n = 0;
        while (cur(P)->type == JT_STRING) {
            memcpy(js->s + js->n, cur(P)->s, cur(P)->n);
            js->n += cur(P)->n;
            P->i++;
        }
        js->s[js->n] = 0;
        n->lit.t = JV_STR;
        n->lit.s = js;
    } else if (t->type == JT_INT || t->type == JT_FLOAT) {
        n = node(P, JN_LIT);
        if (!n) return NULL;
        n->lit = t->type == JT_INT ? ds_jv_int(t->i) : ds_jv_float(t->f);
        P->i++;
    } else if (accept_op(P, "(")) {
        if (accept_op(P, ")")) {
            n = node(P, JN_TUPLE);
        } else {
            ds_jnode *first = expr(P);
            if (!first) return NULL;
            if (!is_op(P, ",")) {
                if (!expect_op(P, ")")) return NULL;
                P->depth--;
                return first;
            }
            vec v = {0};
            vec_push(P, &v, first, NULL);
            while (accept_op(P, ",") && !is_op(P, ")")) {
                ds_jnode *x = expr(P);
                if (!x) return NULL;
                vec_push(P, &v, x, NULL);
            }
            if (!expect_op(P, ")")) return NULL;
            n = node(P, JN_TUPLE);
            if (n) n->kids = v.v, n->n_kids = v.n;
        }
    } else if (accept_op(P, "[")) {
        vec v = {0};
        while (!is_op(P, "]")) {
            ds_jnode *x = expr(P);
            if (!x) return NULL;
            vec_push(P, &v, x, NULL);
            if (!accept_op(P, ",")) break;
        }
        if (!expect_op(P, "]")) return NULL;
        n = node(P, JN_LIST);
        if (n) n->kids = v.v, n->n_kids = v.n;
    } else if (accept_op(P, "{")) {
        vec k = {0}, v = {0};
        while (!is_op(P, "}")) {
            ds_jnode *kx = expr(P);
            if (!kx || !expect_op(P, ":")) return NULL;
            ds_jnode *vx = expr(P);
            if (!vx) return NULL;
            vec_push(P, &k, kx, NULL);
            vec_push(P, &v, vx, NULL);
            if (!accept_op(P, ",")) break;
        }
        if (!expect_op(P, "}")) return NULL;
        n = node(P, JN_DICT);
        if (n) n->kids = k.v, n->vals = v.v, n->n_kids = k.n;
    } else {
        return pfail(P, DS_ERR_FORMAT, "unexpected %s", tok_desc(P));
    }
    P->depth--;
    return n;
}

// One subscript part (NULL when empty) up to ':' or ']'.
static ds_jnode *slice_part(parser *P) { return is_op(P, ":") || is_op(P, "]") ? NULL : expr(P); }

static ds_jnode *postfix(parser *P, ds_jnode *n) {
    while (n && !P->err) {
        if (accept_op(P, ".")) {
            ds_jnode *a = node(P, JN_ATTR);
            if (!a) return NULL;
            a->x = n;
            if (cur(P)->type == JT_INT) { // x.0 is x[0]
                a->kind = JN_ITEM;
                a->y = node(P, JN_LIT);
                if (!a->y) return NULL;
                a->y->lit = ds_jv_int(cur(P)->i);
                P->i++;
            } else if (!(a->name = take_name(P))) {
                return NULL;
            }
            n = a;
        } else if (accept_op(P, "[")) {
            ds_jnode *a = node(P, JN_ITEM);
            if (!a) return NULL;
            a->x = n;
            ds_jnode *lo = slice_part(P);
            if (is_op(P, ":")) {
                a->kind = JN_SLICE;
                a->kids = ds_ja_alloc(P->a, sizeof *a->kids * 3);
                if (!a->kids) return NULL;
                a->n_kids = 3;
                a->kids[0] = lo;
                P->i++;
                a->kids[1] = slice_part(P);
                if (accept_op(P, ":")) a->kids[2] = slice_part(P);
            } else {
                if (!lo) return pfail(P, DS_ERR_FORMAT, "expected a subscript, got %s", tok_desc(P));
                a->y = lo;
            }
            if (P->err || !expect_op(P, "]")) return NULL;
            n = a;
        } else if (accept_op(P, "(")) {
            ds_jnode *a = node(P, JN_CALL);
            if (!a) return NULL;
            a->x = n;
            if (!call_args(P, a)) return NULL;
            n = a;
        } else {
            break;
        }
    }
    return n;
}

// One filter after '|': name, optional (args), applied to n.
static ds_jnode *one_filter(parser *P, ds_jnode *n) {
    ds_jnode *f = node(P, JN_FILTER);
    if (!f || !(f->name = take_name(P))) return NULL;
    if (is_op(P, ".")) return pfail(P, DS_ERR_UNSUPPORTED, "dotted filter names ('%s.') are not supported", f->name);
    if (!ds_jinja_filter_known(f->name)) return pfail(P, DS_ERR_UNSUPPORTED, "no filter named '%s' (not supported)", f->name);
    f->x = n;
    if (accept_op(P, "(") && !call_args(P, f)) return NULL;
    return f;
}

// Filters and tests after a unary expression: x | f(args) | g, x is [not] t [arg].
static ds_jnode *filters(parser *P, ds_jnode *n) {
    while (n && !P->err) {
        if (accept_op(P, "|")) {
            n = one_filter(P, n);
        } else if (accept_name(P, "is")) {
            ds_jnode *t = node(P, JN_TEST);
            if (!t) return NULL;
            t->op = accept_name(P, "not");
            if (!(t->name = take_name(P))) return NULL;
            while (accept_op(P, ".")) {
                char *more = take_name(P);
                if (!more) return NULL;
                return pfail(P, DS_ERR_UNSUPPORTED, "test '%s.%s' is not supported", t->name, more);
            }
            if (!ds_jinja_test_known(t->name)) return pfail(P, DS_ERR_UNSUPPORTED, "no test named '%s' (not supported)", t->name);
            t->x = n;
            const ds_jtok *c = cur(P);
            if (accept_op(P, "(")) {
                if (!call_args(P, t)) return NULL;
            } else if ((c->type == JT_NAME || c->type == JT_STRING || c->type == JT_INT || c->type == JT_FLOAT || is_op(P, "[") ||
                        is_op(P, "{")) &&
                       !is_name(P, "else") && !is_name(P, "or") && !is_name(P, "and")) {
                ds_jnode *arg = postfix(P, primary(P)); // `is divisibleby 3`
                if (!arg) return NULL;
                t->kids = ds_ja_alloc(P->a, sizeof *t->kids);
                if (!t->kids) return NULL;
                t->kids[0] = arg, t->n_kids = 1;
            }
            n = t;
        } else if (is_op(P, "(")) { // a call on a filter's result
            n = postfix(P, n);
        } else {
            break;
        }
    }
    return n;
}

static ds_jnode *unary(parser *P, int with_filter) {
    ds_jnode *n;
    if (is_op(P, "-") || is_op(P, "+")) {
        const int neg = is_op(P, "-");
        P->i++;
        if (++P->depth > 200) return pfail(P, DS_ERR_UNSUPPORTED, "expression nested too deeply");
        n = node(P, neg ? JN_NEG : JN_POS);
        if (!n || !(n->x = unary(P, 0))) return NULL;
        P->depth--;
    } else {
        n = postfix(P, primary(P));
    }
    return with_filter ? filters(P, n) : n;
}

static ds_jnode *binop(parser *P, ds_jkind k, int op, ds_jnode *l, ds_jnode *r) {
    if (!l || !r) return NULL;
    ds_jnode *n = node(P, k);
    if (n) n->op = op, n->x = l, n->y = r, n->line = l->line;
    return n;
}

static ds_jnode *pow_expr(parser *P) {
    ds_jnode *l = unary(P, 1);
    while (l && accept_op(P, "**")) l = binop(P, JN_BIN, JO_POW, l, unary(P, 1));
    return l;
}

static ds_jnode *mul_expr(parser *P) {
    ds_jnode *l = pow_expr(P);
    for (;;) {
        int op = is_op(P, "*") ? JO_MUL : is_op(P, "/") ? JO_DIV : is_op(P, "//") ? JO_FLOORDIV : is_op(P, "%") ? JO_MOD : -1;
        if (op < 0 || !l) return l;
        P->i++;
        l = binop(P, JN_BIN, op, l, pow_expr(P));
    }
}

static ds_jnode *concat_expr(parser *P) {
    ds_jnode *l = mul_expr(P);
    while (l && accept_op(P, "~")) l = binop(P, JN_CONCAT, 0, l, mul_expr(P));
    return l;
}

static ds_jnode *add_expr(parser *P) {
    ds_jnode *l = concat_expr(P);
    for (;;) {
        int op = is_op(P, "+") ? JO_ADD : is_op(P, "-") ? JO_SUB : -1;
        if (op < 0 || !l) return l;
        P->i++;
        l = binop(P, JN_BIN, op, l, concat_expr(P));
    }
}

// Comparisons chain as in Python: a < b < c is (a < b) and (b < c).
static ds_jnode *cmp_expr(parser *P) {
    ds_jnode *l = add_expr(P), *res = NULL;
    for (;;) {
        int op = is_op(P, "==") ? JO_EQ : is_op(P, "!=") ? JO_NE : is_op(P, "<") ? JO_LT : is_op(P, "<=") ? JO_LE
               : is_op(P, ">") ? JO_GT : is_op(P, ">=") ? JO_GE : is_name(P, "in") ? JO_IN : -1;
        if (op < 0 && is_name(P, "not") && P->t[P->i + 1].type == JT_NAME && P->t[P->i + 1].n == 2 && !memcmp(P->t[P->i + 1].s, "in", 2)) {
            op = JO_NOTIN;
            P->i++;
        }
        if (op < 0 || !l) return res ? res : l;
        P->i++;
        ds_jnode *r = add_expr(P);
        ds_jnode *c = binop(P, JN_CMP, op, l, r);
        res = res ? binop(P, JN_AND, 0, res, c) : c;
        l = r;
        if (!res) return NULL;
    }
}

static ds_jnode *not_expr(parser *P) {
    if (is_name(P, "not")) {
        P->i++;
        if (++P->depth > 200) return pfail(P, DS_ERR_UNSUPPORTED, "expression nested too deeply");
        ds_jnode *n = node(P, JN_NOT);
        if (!n || !(n->x = not_expr(P))) return NULL;
        P->depth--;
        return n;
    }
    return cmp_expr(P);
}

static ds_jnode *and_expr(parser *P) {
    ds_jnode *l = not_expr(P);
    while (l && accept_name(P, "and")) l = binop(P, JN_AND, 0, l, not_expr(P));
    return l;
}

static ds_jnode *or_expr(parser *P) {
    ds_jnode *l = and_expr(P);
    while (l && accept_name(P, "or")) l = binop(P, JN_OR, 0, l, and_expr(P));
    return l;
}

static ds_jnode *expr(parser *P) {
    if (++P->depth > 200) return pfail(P, DS_ERR_UNSUPPORTED, "expression nested too deeply");
    ds_jnode *n = or_expr(P);
    while (n && is_name(P, "if")) { // a if c else b (else optional: undefined)
        P->i++;
        ds_jnode *c = node(P, JN_COND);
        if (!c) return NULL;
        c->y = n;
        if (!(c->x = or_expr(P))) return NULL;
        if (accept_name(P, "else") && !(c->z = expr(P))) return NULL;
        n = c;
    }
    P->depth--;
    return n;
}

// A tuple without parentheses (`{% set a, b = ... %}`, `{{ a, b }}`): a JN_TUPLE when there is a comma.
static ds_jnode *tuple_expr(parser *P) {
    ds_jnode *first = expr(P);
    if (!first || !is_op(P, ",")) return first;
    vec v = {0};
    vec_push(P, &v, first, NULL);
    while (accept_op(P, ",")) {
        if (cur(P)->type == JT_BLOCK_END || cur(P)->type == JT_VAR_END || is_op(P, "=")) break;
        ds_jnode *x = expr(P);
        if (!x) return NULL;
        vec_push(P, &v, x, NULL);
    }
    ds_jnode *t = node(P, JN_TUPLE);
    if (t) t->kids = v.v, t->n_kids = v.n, t->line = first->line;
    return t;
}

// ---- Statements.

static int block_end(parser *P) {
    if (cur(P)->type == JT_BLOCK_END) {
        P->i++;
        return 1;
    }
    pfail(P, DS_ERR_FORMAT, "expected the end of the statement block, got %s", tok_desc(P));
    return 0;
}

// Statements until one of the words in `ends` (a block tag whose first name is one of them; the
// BLOCK_BEGIN and the name are consumed, *which gets its index). ends == NULL: until EOF.
static int body(parser *P, const char *const *ends, vec *out, int *which);

static const char *k_unsupported_tags[] = {"include", "import", "from", "extends", "block", "call", "with", "do", "autoescape", "trans", NULL};

// {% if c %}...{% elif c %}...{% else %}...{% endif %}: elif chains as a nested if in the else branch.
static ds_jnode *stmt_if(parser *P, int line) {
    ds_jnode *n = node(P, JS_IF), *top = n;
    if (!n) return NULL;
    n->line = line;
    for (;;) {
        if (!(n->x = expr(P)) || !block_end(P)) return NULL;
        static const char *const ends[] = {"elif", "else", "endif", NULL};
        vec b = {0};
        int w;
        if (!body(P, ends, &b, &w)) return NULL;
        n->kids = b.v, n->n_kids = b.n;
        if (w == 0) { // elif: a nested if in the else branch
            ds_jnode *e = node(P, JS_IF);
            if (!e) return NULL;
            n->body2 = ds_ja_alloc(P->a, sizeof *n->body2);
            if (!n->body2) return NULL;
            n->body2[0] = e, n->n_body2 = 1;
            n = e;
            continue;
        }
        if (w == 1) {
            if (!block_end(P)) return NULL;
            static const char *const ends2[] = {"endif", NULL};
            vec e = {0};
            if (!body(P, ends2, &e, &w)) return NULL;
            n->body2 = e.v, n->n_body2 = e.n;
        }
        return block_end(P) ? top : NULL;
    }
}

// {% for a, b in xs if c %}...{% else %}...{% endfor %} (the names, the iterable, the optional filter).
static ds_jnode *stmt_for(parser *P, int line) {
    ds_jnode *n = node(P, JS_FOR);
    if (!n) return NULL;
    n->line = line;
    vec names = {0};
    do {
        char *nm = take_name(P);
        if (!nm) return NULL;
        vec_push(P, &names, NULL, nm);
    } while (accept_op(P, ","));
    n->names = names.names, n->n_names = names.n;
    if (!accept_name(P, "in")) return pfail(P, DS_ERR_FORMAT, "expected 'in' in a for loop, got %s", tok_desc(P));
    if (!(n->x = or_expr(P))) return NULL; // (no conditional expression: `if` filters the loop)
    if (accept_name(P, "if") && !(n->y = expr(P))) return NULL;
    if (is_name(P, "recursive")) return pfail(P, DS_ERR_UNSUPPORTED, "recursive for loops are not supported");
    if (!block_end(P)) return NULL;
    static const char *const ends[] = {"else", "endfor", NULL};
    vec b = {0};
    int w;
    P->in_loop++;
    int ok = body(P, ends, &b, &w);
    P->in_loop--;
    if (!ok) return NULL;
    n->kids = b.v, n->n_kids = b.n;
    if (w == 0) {
        static const char *const ends2[] = {"endfor", NULL};
        vec e = {0};
        if (!block_end(P) || !body(P, ends2, &e, &w)) return NULL;
        n->body2 = e.v, n->n_body2 = e.n;
    }
    return block_end(P) ? n : NULL;
}

// {% set x = e %}, {% set a, b = e %}, {% set ns.attr = e %} and the block form {% set x %}...{% endset %}.
static ds_jnode *stmt_set(parser *P, int line) {
    ds_jnode *n = node(P, JS_SET);
    if (!n) return NULL;
    n->line = line;
    // target: name, name.attr, or names separated by commas
    vec names = {0};
    char *first = take_name(P);
    if (!first) return NULL;
    if (accept_op(P, ".")) {
        ds_jnode *t = node(P, JN_ATTR);
        if (!t || !(t->x = node(P, JN_NAME))) return NULL;
        t->x->name = first;
        if (!(t->name = take_name(P))) return NULL;
        n->x = t;
    } else {
        vec_push(P, &names, NULL, first);
        while (accept_op(P, ",")) {
            char *nm = take_name(P);
            if (!nm) return NULL;
            vec_push(P, &names, NULL, nm);
        }
        n->names = names.names, n->n_names = names.n;
    }
    if (cur(P)->type == JT_BLOCK_END && !n->x && names.n == 1) { // {% set x %}...{% endset %}
        P->i++;
        n->kind = JS_SET_BLOCK;
        n->name = first;
        static const char *const ends[] = {"endset", NULL};
        vec b = {0};
        int w;
        if (!body(P, ends, &b, &w)) return NULL;
        n->kids = b.v, n->n_kids = b.n;
        return block_end(P) ? n : NULL;
    }
    if (is_op(P, "|")) return pfail(P, DS_ERR_UNSUPPORTED, "filters on a block set are not supported");
    if (!expect_op(P, "=") || !(n->y = tuple_expr(P))) return NULL;
    return block_end(P) ? n : NULL;
}

// {% macro name(a, b=default) %}...{% endmacro %}: a loop outside does not reach into the body.
static ds_jnode *stmt_macro(parser *P, int line) {
    ds_jnode *n = node(P, JS_MACRO);
    if (!n || !(n->name = take_name(P)) || !expect_op(P, "(")) return NULL;
    n->line = line;
    vec params = {0};
    while (!is_op(P, ")")) {
        char *nm = take_name(P);
        ds_jnode *def = NULL;
        if (!nm) return NULL;
        if (accept_op(P, "=") && !(def = expr(P))) return NULL;
        vec_push(P, &params, def, nm);
        if (!accept_op(P, ",")) break;
    }
    if (!expect_op(P, ")") || !block_end(P)) return NULL;
    n->names = params.names, n->vals = params.v, n->n_names = params.n;
    static const char *const ends[] = {"endmacro", NULL};
    vec b = {0};
    int w, saved = P->in_loop;
    P->in_loop = 0;
    P->in_macro++;
    int ok = body(P, ends, &b, &w);
    P->in_macro--;
    P->in_loop = saved;
    if (!ok) return NULL;
    accept_name(P, n->name); // {% endmacro name %}
    n->kids = b.v, n->n_kids = b.n;
    return block_end(P) ? n : NULL;
}

// {% filter f | g %}...{% endfilter %}: the chain is parsed as filters on a placeholder (n->y).
static ds_jnode *stmt_filter(parser *P, int line) {
    ds_jnode *n = node(P, JS_FILTER_BLOCK);
    if (!n) return NULL;
    n->line = line;
    ds_jnode *ph = node(P, JN_LIT);
    if (!ph) return NULL;
    ph->lit = ds_jv_undef(NULL);
    ds_jnode *chain = one_filter(P, ph);
    while (chain && accept_op(P, "|")) chain = one_filter(P, chain);
    if (!chain || !block_end(P)) return NULL;
    n->x = chain;
    n->y = ph;
    static const char *const ends[] = {"endfilter", NULL};
    vec b = {0};
    int w;
    if (!body(P, ends, &b, &w)) return NULL;
    n->kids = b.v, n->n_kids = b.n;
    return block_end(P) ? n : NULL;
}

// {% generation %}...{% endgeneration %} (transformers' AssistantTracker): the body renders as it is.
static ds_jnode *stmt_generation(parser *P) {
    ds_jnode *n = node(P, JS_BODY);
    if (!n || !block_end(P)) return NULL;
    static const char *const ends[] = {"endgeneration", NULL};
    vec b = {0};
    int w;
    if (!body(P, ends, &b, &w)) return NULL;
    n->kids = b.v, n->n_kids = b.n;
    return block_end(P) ? n : NULL;
}

// {% break %} and {% continue %}, only inside a for loop.
static ds_jnode *stmt_break(parser *P) {
    const int brk = is_name(P, "break");
    if (!P->in_loop) return pfail(P, DS_ERR_FORMAT, "'%s' outside a for loop", brk ? "break" : "continue");
    P->i++;
    ds_jnode *n = node(P, brk ? JS_BREAK : JS_CONTINUE);
    return n && block_end(P) ? n : NULL;
}

// One {% ... %} tag after its BLOCK_BEGIN: the tag's name picks the statement.
static ds_jnode *statement(parser *P) {
    const int line = cur(P)->line;
    if (cur(P)->type != JT_NAME) return pfail(P, DS_ERR_FORMAT, "expected a statement name, got %s", tok_desc(P));
    for (int k = 0; k_unsupported_tags[k]; k++)
        if (is_name(P, k_unsupported_tags[k])) return pfail(P, DS_ERR_UNSUPPORTED, "the '%s' tag is not supported", k_unsupported_tags[k]);
    if (accept_name(P, "if")) return stmt_if(P, line);
    if (accept_name(P, "for")) return stmt_for(P, line);
    if (accept_name(P, "set")) return stmt_set(P, line);
    if (accept_name(P, "macro")) return stmt_macro(P, line);
    if (accept_name(P, "filter")) return stmt_filter(P, line);
    if (accept_name(P, "generation")) return stmt_generation(P);
    if (is_name(P, "break") || is_name(P, "continue")) return stmt_break(P);
    return pfail(P, DS_ERR_FORMAT, "unknown tag '%.*s'", (int)(cur(P)->n < 40 ? cur(P)->n : 40), cur(P)->s);
}

static int body(parser *P, const char *const *ends, vec *out, int *which) {
    for (;;) {
        if (P->err || P->a->oom) return 0;
        const ds_jtok *t = cur(P);
        if (t->type == JT_EOF) {
            if (!ends) return 1;
            pfail(P, DS_ERR_FORMAT, "unexpected end of template: a block is not closed (expected '%s')", ends[0]);
            return 0;
        }
        if (t->type == JT_TEXT) {
            ds_jnode *n = node(P, JS_TEXT);
            if (!n) return 0;
            n->lit.t = JV_STR;
            n->lit.s = ds_ja_alloc(P->a, sizeof(ds_jstr) + t->n + 1);
            if (!n->lit.s) return 0;
            memcpy(n->lit.s->s, t->s, t->n);
            n->lit.s->n = t->n;
            vec_push(P, out, n, NULL);
            P->i++;
            continue;
        }
        if (t->type == JT_VAR_BEGIN) {
            P->i++;
            ds_jnode *n = node(P, JS_OUT);
            if (!n || !(n->x = tuple_expr(P))) return 0;
            if (cur(P)->type != JT_VAR_END) {
                pfail(P, DS_ERR_FORMAT, "expected the end of the print statement '}}', got %s", tok_desc(P));
                return 0;
            }
            P->i++;
            vec_push(P, out, n, NULL);
            continue;
        }
        if (t->type != JT_BLOCK_BEGIN) {
            pfail(P, DS_ERR_FORMAT, "unexpected %s", tok_desc(P));
            return 0;
        }
        P->i++;
        for (int k = 0; ends && ends[k]; k++)
            if (is_name(P, ends[k])) {
                P->i++;
                *which = k;
                return 1;
            }
        static const char *const closers[] = {"endif", "endfor", "endmacro", "endset", "endfilter", "endgeneration", "elif", "else", NULL};
        for (int k = 0; closers[k]; k++)
            if (is_name(P, closers[k])) {
                pfail(P, DS_ERR_FORMAT, "unexpected '%s'%s%s", closers[k], ends ? ", expected " : "", ends ? ends[0] : "");
                return 0;
            }
        ds_jnode *n = statement(P);
        if (!n) return 0;
        vec_push(P, out, n, NULL);
    }
}

ds_status ds_jinja_parse_tokens(ds_jarena *a, const ds_jtok *toks, int n_toks, const char *name, ds_jnode **root) {
    parser P = {.a = a, .t = toks, .n = n_toks, .name = name};
    vec b = {0};
    int w;
    ds_jnode *r = node(&P, JS_BODY);
    if (r && body(&P, NULL, &b, &w)) r->kids = b.v, r->n_kids = b.n;
    if (P.err) return P.err;
    if (a->oom || !r) return ds_fail(DS_ERR_NOMEM, "%s: out of memory (or the template is too large)", name);
    *root = r;
    return DS_OK;
}

ds_status ds_jinja_parse(const char *src, size_t n, const char *name, ds_jinja **out) {
    *out = NULL;
    ds_jinja *t = calloc(1, sizeof *t);
    if (!t || !(t->name = strdup(name ? name : "template"))) {
        free(t);
        return ds_fail(DS_ERR_NOMEM, "template: out of memory");
    }
    t->arena.limit = (size_t)512 << 20;
    ds_jtok *toks;
    int nt;
    ds_status st = ds_jinja_lex(&t->arena, src, n, t->name, &toks, &nt);
    if (!st) st = ds_jinja_parse_tokens(&t->arena, toks, nt, t->name, &t->root);
    if (st) {
        ds_jinja_free(t);
        return st;
    }
    *out = t;
    return DS_OK;
}

void ds_jinja_free(ds_jinja *t) {
    if (!t) return;
    ds_ja_free(&t->arena);
    free(t->name);
    free(t);
}
