// JSON Schema -> GBNF (the subset OpenAI's structured outputs and llama-server use):
//   type (one, or an array of types), properties + required (in the order given; an optional
//   property may be left out), additionalProperties (never generated: valid whatever its value),
//   items, prefixItems, minItems, maxItems, enum, const, anyOf, oneOf (as anyOf: alternatives that
//   overlap may produce output matching more than one), $defs / definitions with local $ref
//   ("#", "#/$defs/x", "#/definitions/x"; recursion allowed), minLength, maxLength, format (date,
//   time, date-time, uuid). Annotations (title, description, default, examples, $schema, $id,
//   $comment, deprecated, readOnly, writeOnly) are ignored; any other keyword is refused by name.
// Whitespace: none (compact JSON, as JSON.stringify writes it): one way to write every value is
// what lets a small model finish. Numbers are bounded (16 integer digits, 16 fraction digits, a
// 3-digit exponent) for the same reason; every output is still valid JSON.
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "base/utf8.h"
#include "dspark/sample.h"

#define MAX_DEPTH 64
#define MAX_RULES 100000

static const char k_prims[] =
    "value ::= object | array | string | number | boolean | null\n"
    "object ::= \"{\" ( string \":\" value ( \",\" string \":\" value )* )? \"}\"\n"
    "array ::= \"[\" ( value ( \",\" value )* )? \"]\"\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "number ::= integer ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?\n" // (|x| < 1e116: always a finite double)
    "integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"
    "boolean ::= \"true\" | \"false\"\n"
    "null ::= \"null\"\n"
    "date ::= [0-9]{4} \"-\" ( \"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) | ( \"0\" [13-9] | \"1\" [0-2] ) \"-\" "
    "( \"0\" [1-9] | [12] [0-9] | \"30\" ) | ( \"0\" [13578] | \"1\" [02] ) \"-31\" )\n"
    "time ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? \"Z\"\n"
    "date-time ::= date \"T\" time\n"
    "uuid ::= [0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12}\n";

const char *ds_json_object_gbnf(void) {
    static char text[sizeof k_prims + 32];
    if (!text[0]) snprintf(text, sizeof text, "root ::= object\n%s", k_prims);
    return text;
}

typedef struct {
    char *s;
    size_t n, cap;
    int bad;
} sbuf;

static void sb_add(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(sbuf *b, const char *fmt, ...) {
    if (b->bad) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const int n = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->bad = 1;
            return;
        }
        if (b->s && b->n + (size_t)n < b->cap) {
            b->n += (size_t)n;
            return;
        }
        const size_t cap = (b->cap ? 2 * b->cap : 1024) + (size_t)n;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->bad = 1;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
}

// Text as a GBNF string literal.
static void sb_lit(sbuf *b, const char *text) {
    sb_add(b, "\"");
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        if (*p == '"' || *p == '\\') sb_add(b, "\\%c", *p);
        else if (*p == '\n') sb_add(b, "\\n");
        else if (*p < 0x20 || *p == 0x7f) sb_add(b, "\\x%02x", *p);
        else sb_add(b, "%c", *p);
    }
    sb_add(b, "\"");
}

typedef struct {
    const cJSON *root;
    sbuf rules;      // rules written so far
    int n_rules;
    const char *bad_kw;
    ds_status st;
    // $ref memo: the ref string -> its rule number
    char **ref_name;
    int *ref_rule;
    int n_ref, cap_ref;
} conv;

static int cfail(conv *c, ds_status code, const char *kw, const char *fmt, const char *arg) {
    if (c->st) return -1;
    c->bad_kw = kw;
    c->st = ds_fail(code, fmt, arg);
    return -1;
}

static int new_rule(conv *c) {
    if (c->n_rules >= MAX_RULES) return cfail(c, DS_ERR_INVALID, NULL, "json schema: %s", "too large");
    return c->n_rules++;
}

static int expr(conv *c, const cJSON *s, sbuf *out, int depth);

static const char *const k_ignored[] = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                        "deprecated", "readOnly", "writeOnly", NULL};
static const char *const k_known[] = {"type", "properties", "required", "additionalProperties", "items", "prefixItems",
                                      "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "$defs",
                                      "definitions", "$ref", "minLength", "maxLength", "format", "minimum", "maximum",
                                      "exclusiveMinimum", "exclusiveMaximum", NULL};

static int in_list(const char *const *l, const char *k) {
    for (; *l; l++)
        if (!strcmp(*l, k)) return 1;
    return 0;
}

// A non-negative integer keyword, or def when absent.
static int nonneg(conv *c, const cJSON *s, const char *kw, long def, long *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, kw);
    *out = def;
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e6 || v->valuedouble != (double)(long)v->valuedouble)
        return cfail(c, DS_ERR_INVALID, NULL, "json schema: '%s' must be a non-negative integer (at most 1000000)", kw);
    *out = (long)v->valuedouble;
    return 0;
}

// Repetition suffix for {lo, hi} (hi < 0: unbounded).
static void rep(sbuf *b, long lo, long hi) {
    if (hi < 0) sb_add(b, "{%ld,}", lo);
    else sb_add(b, "{%ld,%ld}", lo, hi);
}

static int ref_rule(conv *c, const char *ref, int depth) {
    for (int i = 0; i < c->n_ref; i++)
        if (!strcmp(c->ref_name[i], ref)) return c->ref_rule[i];
    const cJSON *target = NULL;
    if (!strcmp(ref, "#")) {
        target = c->root;
    } else if (!strncmp(ref, "#/$defs/", 8) || !strncmp(ref, "#/definitions/", 14)) {
        const int defs = ref[2] == '$';
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(c->root, defs ? "$defs" : "definitions");
        target = d ? cJSON_GetObjectItemCaseSensitive(d, ref + (defs ? 8 : 14)) : NULL;
        if (!target) return cfail(c, DS_ERR_INVALID, NULL, "json schema: $ref '%.200s' names no definition", ref);
    } else {
        return cfail(c, DS_ERR_UNSUPPORTED, "$ref", "json schema: $ref '%.200s' is not local (#, #/$defs/.., #/definitions/..)", ref);
    }
    const int r = new_rule(c);
    if (r < 0) return -1;
    if (c->n_ref == c->cap_ref) {
        const int cap = c->cap_ref ? 2 * c->cap_ref : 8;
        char **n = realloc(c->ref_name, sizeof *n * cap);
        if (n) c->ref_name = n;
        int *rr = n ? realloc(c->ref_rule, sizeof *rr * cap) : NULL;
        if (!rr) return cfail(c, DS_ERR_NOMEM, NULL, "json schema: %s", "out of memory");
        c->ref_rule = rr;
        c->cap_ref = cap;
    }
    c->ref_name[c->n_ref] = strdup(ref);
    if (!c->ref_name[c->n_ref]) return cfail(c, DS_ERR_NOMEM, NULL, "json schema: %s", "out of memory");
    c->ref_rule[c->n_ref++] = r; // before converting: a recursive reference finds it
    sbuf body = {0};
    if (expr(c, target, &body, depth + 1)) {
        free(body.s);
        return -1;
    }
    sb_add(&c->rules, "s%d ::= %s\n", r, body.s ? body.s : "");
    free(body.s);
    return r;
}

static int object_expr(conv *c, const cJSON *s, sbuf *out, int depth) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (props && !cJSON_IsObject(props)) return cfail(c, DS_ERR_INVALID, NULL, "json schema: '%s' must be an object", "properties");
    if (req && !cJSON_IsArray(req)) return cfail(c, DS_ERR_INVALID, NULL, "json schema: '%s' must be an array", "required");
    const cJSON *r;
    cJSON_ArrayForEach(r, req) if (!cJSON_IsString(r)) return cfail(c, DS_ERR_INVALID, NULL, "json schema: %s", "'required' holds a non-string");
    if (!props && !req) { // no properties: any object, unless additionalProperties is false
        sb_add(out, cJSON_IsFalse(addl) ? "\"{}\"" : "object");
        return 0;
    }
    // The properties: those listed, then required names not listed (any value).
    int n = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, props) n++;
    cJSON_ArrayForEach(r, req) if (!cJSON_GetObjectItemCaseSensitive(props, r->valuestring)) n++;
    if (n > 10000) return cfail(c, DS_ERR_INVALID, NULL, "json schema: %s", "more than 10000 properties");
    if (!n) {
        sb_add(out, "\"{}\"");
        return 0;
    }
    const char **names = malloc(sizeof *names * (size_t)n);
    const cJSON **schemas = malloc(sizeof *schemas * (size_t)n);
    int *required = calloc((size_t)n, sizeof(int));
    int i = 0, rc = -1;
    if (!names || !schemas || !required) {
        cfail(c, DS_ERR_NOMEM, NULL, "json schema: %s", "out of memory");
        goto out;
    }
    cJSON_ArrayForEach(p, props) {
        names[i] = p->string;
        schemas[i++] = p;
    }
    cJSON_ArrayForEach(r, req) if (!cJSON_GetObjectItemCaseSensitive(props, r->valuestring)) {
        names[i] = r->valuestring;
        schemas[i++] = NULL;
    }
    for (int j = 0; j < n; j++) {
        cJSON_ArrayForEach(r, req) if (!strcmp(r->valuestring, names[j])) required[j] = 1;
    }
    // kv_j rules, then A_j (after something was written) and F_j (nothing written yet):
    //   A_j ::= ("," kv_j)? A_{j+1}   (required: "," kv_j A_{j+1});  A_n ::= ε
    //   F_j ::= kv_j A_{j+1} | F_{j+1} (required: kv_j A_{j+1});     F_n ::= ε
    const int base = c->n_rules;
    for (int j = 0; j < 3 * n + 2; j++)
        if (new_rule(c) < 0) goto out;
    for (int j = 0; j < n; j++) {
        sbuf kv = {0};
        cJSON *key = cJSON_CreateString(names[j]);
        char *kj = key ? cJSON_PrintUnformatted(key) : NULL;
        cJSON_Delete(key);
        if (!kj) {
            cfail(c, DS_ERR_NOMEM, NULL, "json schema: %s", "out of memory");
            goto out;
        }
        sb_add(&kv, "%s", "");
        sb_lit(&kv, kj);
        free(kj);
        sb_add(&kv, " \":\" ");
        if (schemas[j]) {
            if (expr(c, schemas[j], &kv, depth + 1)) {
                free(kv.s);
                goto out;
            }
        } else {
            sb_add(&kv, "value");
        }
        sb_add(&c->rules, "s%d ::= %s\n", base + j, kv.s);
        free(kv.s);
    }
    const int A = base + n, F = base + 2 * n + 1; // A_j = A + j, F_j = F + j (j = 0..n)
    for (int j = 0; j <= n; j++) {
        if (j == n) {
            sb_add(&c->rules, "s%d ::= \"\"\ns%d ::= \"\"\n", A + j, F + j);
        } else if (required[j]) {
            sb_add(&c->rules, "s%d ::= \",\" s%d s%d\ns%d ::= s%d s%d\n", A + j, base + j, A + j + 1, F + j, base + j, A + j + 1);
        } else {
            sb_add(&c->rules, "s%d ::= ( \",\" s%d )? s%d\ns%d ::= s%d s%d | s%d\n", A + j, base + j, A + j + 1, F + j,
                   base + j, A + j + 1, F + j + 1);
        }
    }
    sb_add(out, "\"{\" s%d \"}\"", F);
    rc = 0;
out:
    free(names);
    free(schemas);
    free(required);
    return rc;
}

static int array_expr(conv *c, const cJSON *s, sbuf *out, int depth) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    long lo, hi;
    if (nonneg(c, s, "minItems", 0, &lo) || nonneg(c, s, "maxItems", -1, &hi)) return -1;
    if (hi >= 0 && hi < lo) return cfail(c, DS_ERR_INVALID, NULL, "json schema: %s", "maxItems below minItems");
    if (prefix && !cJSON_IsArray(prefix)) return cfail(c, DS_ERR_INVALID, NULL, "json schema: '%s' must be an array", "prefixItems");
    if (items && !cJSON_IsObject(items) && !cJSON_IsBool(items))
        return cfail(c, DS_ERR_INVALID, NULL, "json schema: '%s' must be a schema", "items");
    const int k = prefix ? cJSON_GetArraySize(prefix) : 0;
    if (hi >= 0 && hi < k) return cfail(c, DS_ERR_INVALID, NULL, "json schema: %s", "maxItems below the prefixItems count");
    const int none = cJSON_IsFalse(items); // no items past the prefix
    long elo = lo > k ? lo - k : 0, ehi = none ? 0 : hi >= 0 ? hi - k : -1;
    if (none && elo > 0) return cfail(c, DS_ERR_INVALID, NULL, "json schema: %s", "minItems above prefixItems with items false");
    sbuf item = {0};
    if (!none) {
        if (items && cJSON_IsObject(items)) {
            if (expr(c, items, &item, depth + 1)) {
                free(item.s);
                return -1;
            }
        } else {
            sb_add(&item, "value");
        }
    }
    const int ir = new_rule(c);
    if (ir < 0) {
        free(item.s);
        return -1;
    }
    if (!none) sb_add(&c->rules, "s%d ::= %s\n", ir, item.s);
    free(item.s);
    sb_add(out, "\"[\"");
    int i = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, prefix) {
        sb_add(out, i++ ? " \",\" " : " ");
        if (expr(c, p, out, depth + 1)) return -1;
    }
    if (!none && ehi != 0) {
        if (k) { // every extra item follows a comma
            sb_add(out, " ( \",\" s%d )", ir);
            rep(out, elo, ehi);
        } else if (elo >= 1) {
            sb_add(out, " s%d ( \",\" s%d )", ir, ir);
            rep(out, elo - 1, ehi < 0 ? -1 : ehi - 1);
        } else {
            sb_add(out, " ( s%d ( \",\" s%d )", ir, ir);
            rep(out, 0, ehi < 0 ? -1 : ehi - 1);
            sb_add(out, " )?");
        }
    }
    sb_add(out, " \"]\"");
    return 0;
}

static int string_expr(conv *c, const cJSON *s, sbuf *out) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
    if (fmt) {
        const char *f = cJSON_IsString(fmt) ? fmt->valuestring : "";
        if (strcmp(f, "date") && strcmp(f, "time") && strcmp(f, "date-time") && strcmp(f, "uuid"))
            return cfail(c, DS_ERR_UNSUPPORTED, "format", "json schema: format '%.100s' is not supported (date, time, date-time, uuid are)", f);
        if (cJSON_GetObjectItemCaseSensitive(s, "minLength") || cJSON_GetObjectItemCaseSensitive(s, "maxLength"))
            return cfail(c, DS_ERR_UNSUPPORTED, "format", "json schema: %s", "format with minLength / maxLength is not supported");
        sb_add(out, "\"\\\"\" %s \"\\\"\"", f);
        return 0;
    }
    long lo, hi;
    if (nonneg(c, s, "minLength", 0, &lo) || nonneg(c, s, "maxLength", -1, &hi)) return -1;
    if (hi >= 0 && hi < lo) return cfail(c, DS_ERR_INVALID, NULL, "json schema: %s", "maxLength below minLength");
    if (lo > 4096 || hi > 4096) return cfail(c, DS_ERR_UNSUPPORTED, "maxLength", "json schema: %s", "string lengths above 4096 are not supported");
    if (!lo && hi < 0) {
        sb_add(out, "string");
        return 0;
    }
    sb_add(out, "\"\\\"\" char");
    rep(out, lo, hi);
    sb_add(out, " \"\\\"\"");
    return 0;
}

// ---- bounded numbers -------------------------------------------------------------------------
// integer / number with minimum, maximum, exclusiveMinimum, exclusiveMaximum: integers in [lo, hi]
// (an integer is a valid number, so a bounded number is generated as one). Unbounded sides stay at
// the grammar's ±(10^16 - 1). A range of at most 512 values lists them; a wider one keeps whole
// decimal lengths that lie inside it (e.g. minimum -2^53+1, maximum 2^53-1, zod's int(): up to 15
// digits either side), so every value generated validates, though not every valid value is
// generated.

#define DS_INT_LIMIT 9999999999999999LL // 10^16 - 1: the widest the grammar writes

static long long pow10ll(int k) {
    long long p = 1;
    while (k-- > 0) p *= 10;
    return p;
}

static int n_digits(long long v) { // v >= 0
    int d = 1;
    while (v >= 10 && d < 19) v /= 10, d++;
    return d;
}

// A non-empty subset of the integers in [lo, hi], 0 <= lo <= hi <= DS_INT_LIMIT, as decimal text.
static void nonneg_range(sbuf *o, long long lo, long long hi) {
    if (hi - lo <= 512) {
        sb_add(o, "(");
        for (long long v = lo; v <= hi; v++) sb_add(o, v > lo ? " | \"%lld\"" : " \"%lld\"", v);
        sb_add(o, " )");
        return;
    }
    int kp = n_digits(hi); // the longest length all of whose values are <= hi
    if (pow10ll(kp) - 1 > hi) kp--;
    const int d = n_digits(lo), from = lo == 0 || lo == pow10ll(d - 1) ? d : d + 1; // shortest length all >= lo
    if (from > kp) { // no whole length inside: the 513 values from lo
        nonneg_range(o, lo, lo + 512);
        return;
    }
    if (lo == 0) sb_add(o, "( \"0\" | [1-9] [0-9]{0,%d} )", kp - 1);
    else if (lo < 10 && kp >= 2) sb_add(o, "( [%lld-9] | [1-9] [0-9]{1,%d} )", lo, kp - 1); // (one digit >= lo, or more)
    else sb_add(o, "( [1-9] [0-9]{%d,%d} )", from - 1, kp - 1);
}

// 1: the schema bounds the value (the expression is written), 0: no bounds, -1: refused.
static int bounded_number(conv *c, const cJSON *s, sbuf *out) {
    static const char *const kws[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    double lo = -(double)DS_INT_LIMIT, hi = (double)DS_INT_LIMIT;
    int any = 0;
    for (int i = 0; i < 4; i++) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(s, kws[i]);
        if (!b) continue;
        if (!cJSON_IsNumber(b) || !isfinite(b->valuedouble))
            return cfail(c, DS_ERR_INVALID, kws[i], "json schema: '%s' must be a number", kws[i]);
        any = 1;
        const double v = b->valuedouble;
        if (i == 0 && ceil(v) > lo) lo = ceil(v);
        if (i == 1 && floor(v) < hi) hi = floor(v);
        if (i == 2 && floor(v) + 1 > lo) lo = floor(v) + 1;
        if (i == 3 && ceil(v) - 1 < hi) hi = ceil(v) - 1;
    }
    if (!any) return 0;
    if (lo < -(double)DS_INT_LIMIT) lo = -(double)DS_INT_LIMIT;
    if (hi > (double)DS_INT_LIMIT) hi = (double)DS_INT_LIMIT;
    if (lo > hi)
        return cfail(c, DS_ERR_INVALID, NULL, "json schema: %s", "the bounds leave no integer to generate");
    const long long L = (long long)lo, H = (long long)hi;
    sb_add(out, "(");
    if (H >= 0) {
        sb_add(out, " ");
        nonneg_range(out, L > 0 ? L : 0, H);
    }
    if (L < 0) {
        sb_add(out, H >= 0 ? " | \"-\" " : " \"-\" ");
        nonneg_range(out, H < -1 ? -H : 1, -L);
    }
    sb_add(out, " )");
    return 1;
}

// The expression for one type name.
static int type_expr(conv *c, const cJSON *s, const char *t, sbuf *out, int depth) {
    if (!strcmp(t, "object")) return object_expr(c, s, out, depth);
    if (!strcmp(t, "array")) return array_expr(c, s, out, depth);
    if (!strcmp(t, "string")) return string_expr(c, s, out);
    if (!strcmp(t, "number") || !strcmp(t, "integer")) {
        const int b = bounded_number(c, s, out);
        if (b) return b < 0 ? -1 : 0;
    }
    if (!strcmp(t, "number") || !strcmp(t, "integer") || !strcmp(t, "boolean") || !strcmp(t, "null")) {
        sb_add(out, "%s", t);
        return 0;
    }
    return cfail(c, DS_ERR_INVALID, NULL, "json schema: unknown type '%.100s'", t);
}

static int expr(conv *c, const cJSON *s, sbuf *out, int depth) {
    if (depth > MAX_DEPTH) return cfail(c, DS_ERR_INVALID, NULL, "json schema: %s", "nested deeper than 64");
    if (cJSON_IsTrue(s)) {
        sb_add(out, "value");
        return 0;
    }
    if (cJSON_IsFalse(s)) return cfail(c, DS_ERR_INVALID, NULL, "json schema: %s", "a false schema allows no value");
    if (!cJSON_IsObject(s)) return cfail(c, DS_ERR_INVALID, NULL, "json schema: %s", "a schema must be an object or a boolean");
    const cJSON *k;
    cJSON_ArrayForEach(k, s) if (!in_list(k_ignored, k->string) && !in_list(k_known, k->string)) {
        c->bad_kw = NULL;
        // the keyword's name in static storage: look it up in a fixed table where possible
        static _Thread_local char kw[64];
        snprintf(kw, sizeof kw, "%s", k->string);
        return cfail(c, DS_ERR_UNSUPPORTED, kw, "json schema: keyword '%.60s' is not supported", k->string);
    }
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    if (ref) {
        if (!cJSON_IsString(ref)) return cfail(c, DS_ERR_INVALID, NULL, "json schema: %s", "$ref must be a string");
        const int r = ref_rule(c, ref->valuestring, depth);
        if (r < 0) return -1;
        sb_add(out, "s%d", r);
        return 0;
    }
    const cJSON *cst = cJSON_GetObjectItemCaseSensitive(s, "const"), *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    if (cst || en) {
        if (en && (!cJSON_IsArray(en) || !cJSON_GetArraySize(en)))
            return cfail(c, DS_ERR_INVALID, NULL, "json schema: %s", "enum must be a non-empty array");
        sb_add(out, "(");
        int i = 0;
        const cJSON *v;
        for (v = cst ? cst : en->child; v; v = cst ? NULL : v->next) {
            char *text = cJSON_PrintUnformatted(v);
            if (!text) return cfail(c, DS_ERR_NOMEM, NULL, "json schema: %s", "out of memory");
            sb_add(out, i++ ? " | " : " ");
            sb_lit(out, text);
            free(text);
        }
        sb_add(out, " )");
        return 0;
    }
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    if (!any) any = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
    if (any) {
        if (!cJSON_IsArray(any) || !cJSON_GetArraySize(any))
            return cfail(c, DS_ERR_INVALID, NULL, "json schema: %s", "anyOf / oneOf must be a non-empty array");
        sb_add(out, "(");
        int i = 0;
        const cJSON *v;
        cJSON_ArrayForEach(v, any) {
            sb_add(out, i++ ? " | " : " ");
            if (expr(c, v, out, depth + 1)) return -1;
        }
        sb_add(out, " )");
        return 0;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (!type) { // untyped: infer from the keywords, else any value
        if (cJSON_GetObjectItemCaseSensitive(s, "properties") || cJSON_GetObjectItemCaseSensitive(s, "required"))
            return object_expr(c, s, out, depth);
        if (cJSON_GetObjectItemCaseSensitive(s, "items") || cJSON_GetObjectItemCaseSensitive(s, "prefixItems"))
            return array_expr(c, s, out, depth);
        sb_add(out, "value");
        return 0;
    }
    if (cJSON_IsString(type)) return type_expr(c, s, type->valuestring, out, depth);
    if (!cJSON_IsArray(type) || !cJSON_GetArraySize(type))
        return cfail(c, DS_ERR_INVALID, NULL, "json schema: %s", "type must be a string or a non-empty array");
    sb_add(out, "(");
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, type) {
        if (!cJSON_IsString(t)) return cfail(c, DS_ERR_INVALID, NULL, "json schema: %s", "type array holds a non-string");
        sb_add(out, i++ ? " | " : " ");
        if (type_expr(c, s, t->valuestring, out, depth)) return -1;
    }
    sb_add(out, " )");
    return 0;
}

ds_status ds_json_schema_to_gbnf(const char *schema_json, size_t len, char **gbnf, const char **bad_keyword) {
    *gbnf = NULL;
    if (bad_keyword) *bad_keyword = NULL;
    if (!schema_json) {
        if (!(*gbnf = strdup(ds_json_object_gbnf()))) return ds_fail(DS_ERR_NOMEM, "out of memory");
        return DS_OK;
    }
    size_t bad = 0; // (cJSON passes invalid UTF-8 through; a const or enum string would carry it into the grammar)
    if (!ds_utf8_valid((const uint8_t *)schema_json, len, &bad))
        return ds_fail(DS_ERR_INVALID, "json schema: not valid UTF-8 (byte %zu)", bad);
    cJSON *root = cJSON_ParseWithLength(schema_json, len);
    if (!root) return ds_fail(DS_ERR_INVALID, "json schema: not valid JSON");
    conv c = {.root = root};
    sbuf top = {0};
    expr(&c, root, &top, 0);
    ds_status st = c.st;
    if (!st && (top.bad || c.rules.bad)) st = ds_fail(DS_ERR_NOMEM, "json schema: out of memory");
    if (!st) {
        sbuf all = {0};
        sb_add(&all, "root ::= %s\n%s%s", top.s, c.rules.s ? c.rules.s : "", k_prims);
        if (all.bad) st = ds_fail(DS_ERR_NOMEM, "json schema: out of memory");
        else *gbnf = all.s;
    }
    if (!st) { // e.g. {"$ref": "#"}: a $ref cycle that consumes nothing is a left-recursive grammar
        ds_grammar *g = NULL;
        if (ds_grammar_parse(*gbnf, &g)) {
            char why[256];
            snprintf(why, sizeof why, "%s", ds_last_error());
            st = ds_fail(DS_ERR_INVALID, "json schema: its grammar is refused (a $ref cycle that consumes nothing?): %s", why);
            free(*gbnf);
            *gbnf = NULL;
        }
        ds_grammar_free(g);
    }
    if (bad_keyword) *bad_keyword = st ? c.bad_kw : NULL;
    free(top.s);
    free(c.rules.s);
    for (int i = 0; i < c.n_ref; i++) free(c.ref_name[i]);
    free(c.ref_name);
    free(c.ref_rule);
    cJSON_Delete(root);
    return st;
}
