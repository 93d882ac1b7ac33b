// Shared types of the Jinja interpreter (jinja_*.c): the arena, tokens, AST nodes, values.
#ifndef DS_TOKENIZER_JINJA_INTERNAL_H
#define DS_TOKENIZER_JINJA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/jinja.h"

// ---- Arena: everything of a parse (the AST) or of a render (its values) lives in one and is
// freed at once. Allocation failure or the size cap sets `oom` and returns NULL.
typedef struct ds_jchunk ds_jchunk;
typedef struct {
    ds_jchunk *head;
    size_t total, limit;
    int oom;
} ds_jarena;
void *ds_ja_alloc(ds_jarena *a, size_t n); // zeroed, 16-byte aligned
char *ds_ja_strndup(ds_jarena *a, const char *s, size_t n);
void ds_ja_free(ds_jarena *a);

// ---- Tokens (jinja_lex.c).
enum {
    JT_TEXT, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END, JT_NAME, JT_STRING, JT_INT, JT_FLOAT, JT_OP, JT_EOF
};
typedef struct {
    int type, line;
    const char *s; // JT_TEXT / JT_STRING: the (decoded) bytes; JT_NAME / JT_OP: the text
    size_t n;
    int64_t i;     // JT_INT
    double f;      // JT_FLOAT
} ds_jtok;
// Tokenize (after jinja2's newline normalization and whitespace control). Tokens and decoded
// strings live in `a`. Errors name `name` and the line.
ds_status ds_jinja_lex(ds_jarena *a, const char *src, size_t n, const char *name, ds_jtok **toks, int *n_toks);

// ---- Values.
typedef enum { JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_MACRO, JV_FUNC } ds_jtype;
typedef struct ds_jstr ds_jstr;
typedef struct ds_jlist ds_jlist;
typedef struct ds_jdict ds_jdict;
typedef struct ds_jnode ds_jnode;
typedef struct {
    ds_jtype t;
    int safe; // JV_STR: a Markup string (the safe / escape filters): `+` escapes a plain operand
    union {
        int b;
        int64_t i;
        double f;
        ds_jstr *s;
        ds_jlist *l;
        ds_jdict *d;
        const ds_jnode *m;  // a macro's definition
        int fn;             // JV_FUNC: a global function (JF_*)
        const char *undef;  // JV_UNDEF: why ("'x' is undefined"), or NULL
    };
} ds_jv;
struct ds_jstr {
    size_t n;
    char s[]; // n bytes + NUL
};
struct ds_jlist {
    int n, tuple;
    ds_jv a[];
};
struct ds_jdict {
    int n, cap, ns;     // ns: a namespace() (its attributes may be set)
    ds_jstr **k;        // (cap) keys, in insertion order
    ds_jv *v;           // (cap)
};
enum { JF_RANGE, JF_NAMESPACE, JF_RAISE, JF_STRFTIME, JF_DICT, JF_LOOP_CYCLE };

// ---- AST (jinja_parse.c).
typedef enum {
    // expressions
    JN_LIT, JN_NAME, JN_LIST, JN_TUPLE, JN_DICT, JN_ATTR, JN_ITEM, JN_SLICE, JN_CALL, JN_FILTER, JN_TEST,
    JN_NEG, JN_POS, JN_NOT, JN_AND, JN_OR, JN_BIN, JN_CMP, JN_CONCAT, JN_COND,
    // statements
    JS_TEXT, JS_OUT, JS_IF, JS_FOR, JS_SET, JS_SET_BLOCK, JS_MACRO, JS_BREAK, JS_CONTINUE, JS_FILTER_BLOCK, JS_BODY
} ds_jkind;
// Binary operators (JN_BIN / JN_CMP op).
enum { JO_ADD, JO_SUB, JO_MUL, JO_DIV, JO_FLOORDIV, JO_MOD, JO_POW, JO_EQ, JO_NE, JO_LT, JO_LE, JO_GT, JO_GE, JO_IN, JO_NOTIN };
struct ds_jnode {
    ds_jkind kind;
    int line, op;           // op: JO_* ; JN_TEST: 1 = negated ("is not")
    const char *name;       // JN_NAME, JN_ATTR attribute, JN_FILTER / JN_TEST name, JS_SET_BLOCK / JS_MACRO name
    ds_jv lit;              // JN_LIT
    ds_jnode *x, *y, *z;    // operands: JN_ATTR/ITEM/SLICE/CALL/FILTER/TEST x = object; JN_COND x ? y : z;
                            // JS_IF x = condition; JS_FOR x = iterable, y = filter; JS_SET x = target, y = value
    ds_jnode **kids;        // (n_kids) items / positional args / statements of a body / slice parts (3, may be NULL)
    int n_kids;
    const char **names;     // (n_names) keyword-argument names / for targets / macro parameters
    ds_jnode **vals;        // (n_names) keyword-argument values / macro defaults (NULL: none) / dict values (n_kids)
    int n_names;
    ds_jnode **body2;       // (n_body2) else branch (JS_IF, JS_FOR)
    int n_body2;
};
ds_status ds_jinja_parse_tokens(ds_jarena *a, const ds_jtok *toks, int n_toks, const char *name, ds_jnode **root);

struct ds_jinja {
    ds_jarena arena;
    ds_jnode *root; // JS_BODY
    char *name;
};

// ---- Rendering (jinja_eval.c): the state of one render.
typedef struct ds_jscope ds_jscope;
typedef struct {
    char *s;
    size_t n, cap;
} ds_jbuf;
typedef struct {
    ds_jarena *a;
    ds_jbuf *out;
    ds_jscope *root;
    const char *name;
    ds_status err;       // set once: the render stops
    int ctl;             // 1 break, 2 continue pending
    long steps;
    int depth;
} ds_jctx;

// Errors (they set c->err once and return an undefined value).
ds_jv ds_jerr(ds_jctx *c, int line, ds_status code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

// Value helpers (jinja_lib.c).
static inline ds_jv ds_jv_undef(const char *why) { ds_jv v = {.t = JV_UNDEF}; v.undef = why; return v; }
static inline ds_jv ds_jv_none(void) { ds_jv v = {.t = JV_NONE}; return v; }
static inline ds_jv ds_jv_bool(int b) { ds_jv v = {.t = JV_BOOL}; v.b = b != 0; return v; }
static inline ds_jv ds_jv_int(int64_t i) { ds_jv v = {.t = JV_INT}; v.i = i; return v; }
static inline ds_jv ds_jv_float(double f) { ds_jv v = {.t = JV_FLOAT}; v.f = f; return v; }
ds_jv ds_jv_str(ds_jctx *c, const char *s, size_t n);
ds_jv ds_jv_list(ds_jctx *c, int n);       // n items, all undefined: fill a[]
ds_jv ds_jv_dict(ds_jctx *c);
void ds_jv_dict_set(ds_jctx *c, ds_jdict *d, const char *k, size_t kn, ds_jv v);
ds_jv *ds_jv_dict_get(const ds_jdict *d, const char *k, size_t kn);
ds_jv ds_jv_from_json(ds_jctx *c, const struct cJSON *j);
int ds_jv_truthy(ds_jv v);
int ds_jv_equal(ds_jv a, ds_jv b);
const char *ds_jv_type_name(ds_jv v); // Python's: 'str', 'int', 'dict', ...
// str(v) / repr(v) appended to b (Python's). Returns 0 on out of memory.
void ds_jbuf_put(ds_jctx *c, ds_jbuf *b, const char *s, size_t n);
void ds_jv_to_str(ds_jctx *c, ds_jbuf *b, ds_jv v, int repr);
ds_jv ds_jv_stringify(ds_jctx *c, ds_jv v); // str(v) as a value
ds_jv ds_jbuf_value(ds_jctx *c, ds_jbuf *b);
ds_jv ds_jinja_escape(ds_jctx *c, ds_jv s); // HTML-escaped copy of a string (markupsafe) // b's text as a string value (b is freed)
// Python's str.strip() helpers over Unicode whitespace (jinja_lex.c): the length stripped at the
// start / the length left after stripping the end.
size_t ds_jinja_lstrip_len(const char *s, size_t n);
size_t ds_jinja_rstrip_len(const char *s, size_t n);
int ds_jinja_order(ds_jv a, ds_jv b);              // Python ordering: -1/0/1, -2 when not comparable
ds_jv ds_jinja_iterable(ds_jctx *c, int line, ds_jv v); // the items a for loop walks, as a list
// json.dumps(v, ensure_ascii=False, indent=indent (<0: none), sort_keys)
void ds_jv_to_json(ds_jctx *c, ds_jbuf *b, ds_jv v, int indent, int sort_keys, int level, int line);
// Length in the Python sense (code points of a string); -1 when it has none.
int64_t ds_jv_len(ds_jv v);

// Arguments of a call (evaluated): positional then keyword.
typedef struct {
    ds_jv *pos;
    int n_pos;
    const char **kw;
    ds_jv *kwv;
    int n_kw;
} ds_jargs;
// Filter / test / method / global function calls (jinja_lib.c). `line` for errors.
int ds_jinja_filter_known(const char *name);
int ds_jinja_test_known(const char *name);
ds_jv ds_jinja_filter(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a);
ds_jv ds_jinja_test(ds_jctx *c, int line, const char *name, ds_jv v, const ds_jargs *a);
// obj.name(args): 1 when `name` is a method of obj's type (the result in *res), else 0.
int ds_jinja_method(ds_jctx *c, int line, ds_jv obj, const char *name, const ds_jargs *a, ds_jv *res);
ds_jv ds_jinja_call_func(ds_jctx *c, int line, int fn, const ds_jargs *a);
// A filter applied by name from map(): value with no further arguments.
ds_jv ds_jinja_attr(ds_jctx *c, int line, ds_jv obj, const char *name, size_t n, int subscript);

#endif
