// GBNF parser (llama-server's dialect) into ds_grammar's flat form.
//
//   rule    ::= name "::=" alts          (a rule ends at a newline unless what follows is not
//                                          "name ::=", so rules may span lines)
//   alts    ::= seq ("|" seq)*
//   seq     ::= (item postfix?)*
//   item    ::= "\"" chars "\"" | "[" "^"? (char ("-" char)?)* "]" | "." | "(" alts ")" | name
//   postfix ::= "*" | "+" | "?" | "{" m "}" | "{" m ",}" | "{" m "," n "}"
//   escapes \n \r \t \\ \" \' \[ \] \- \^ \/ \xHH \uHHHH \UHHHHHHHH; comments "#" to the line's end.
// Groups and repetitions become synthetic rules named "<rule>-<n>": x* -> S ::= x S | ε (the
// reference to S is in tail position, so the matcher's stacks do not grow while repeating), x+ ->
// x x*, x? -> S ::= x | ε, x{m,n} -> m copies of x then n-m nested optionals. After parsing:
// undefined rules, a missing root and left recursion are errors. Every error is one line:
// "grammar L:C: problem".
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "sample/grammar.h"

#define MAX_DEPTH 64          // nesting of parentheses
#define MAX_ELEMENTS (1 << 20) // elements after expanding repetitions
#define MAX_REPEAT 4096

typedef struct {
    ds_i32vec body;   // alternatives, each closed by DS_GEL_END
    int defined; // 0: only referenced so far
    int ref_line, ref_col;
} prule;

typedef struct {
    const char *src, *p, *end;
    ds_grammar *g;
    prule *rules;
    int n_rules, cap_rules;
    int total;   // elements so far
    int depth;
    ds_status st;
} parser;

static void pos_of(const parser *ps, const char *at, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (const char *q = ps->src; q < at && q < ps->end; q++) {
        if (*q == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

static int perr(parser *ps, const char *at, const char *msg, const char *arg) {
    if (ps->st) return -1;
    int line, col;
    pos_of(ps, at, &line, &col);
    ps->st = ds_fail(DS_ERR_INVALID, "grammar %d:%d: %s%s%s%s", line, col, msg, arg ? " '" : "", arg ? arg : "",
                     arg ? "'" : "");
    return -1;
}

static int nomem(parser *ps) {
    if (!ps->st) ps->st = ds_fail(DS_ERR_NOMEM, "grammar: out of memory");
    return -1;
}

// ---- grammar building ----------------------------------------------------------------------------

static int add_rule(parser *ps, const char *name, size_t n) {
    ds_grammar *g = ps->g;
    if (g->n_rules == g->cap_rules) {
        int cap = g->cap_rules ? 2 * g->cap_rules : 16;
        char **nm = realloc(g->rule_name, sizeof *nm * cap);
        if (nm) g->rule_name = nm;
        prule *pr = nm ? realloc(ps->rules, sizeof *pr * cap) : NULL;
        if (!pr) return nomem(ps);
        ps->rules = pr;
        g->cap_rules = ps->cap_rules = cap;
    }
    char *s = malloc(n + 1);
    if (!s) return nomem(ps);
    memcpy(s, name, n);
    s[n] = 0;
    g->rule_name[g->n_rules] = s;
    memset(&ps->rules[g->n_rules], 0, sizeof(prule));
    ps->n_rules = g->n_rules + 1;
    return g->n_rules++;
}

static int find_rule(parser *ps, const char *name, size_t n) {
    for (int i = 0; i < ps->g->n_rules; i++)
        if (strlen(ps->g->rule_name[i]) == n && !memcmp(ps->g->rule_name[i], name, n)) return i;
    return -1;
}

static int synth_rule(parser *ps, int parent) {
    char name[96];
    const int len = snprintf(name, sizeof name, "%.60s-%d", ps->g->rule_name[parent], ps->g->n_rules);
    const int r = add_rule(ps, name, (size_t)len);
    if (r >= 0) ps->rules[r].defined = 1;
    return r;
}

// A character class from ranges (lo, hi pairs); returns its id.
static int add_class(parser *ps, const uint32_t *lohi, int n, int neg) {
    ds_grammar *g = ps->g;
    if (g->n_cs == g->cap_cs) {
        int cap = g->cap_cs ? 2 * g->cap_cs : 32;
        int *o = realloc(g->cs_off, sizeof *o * cap);
        if (o) g->cs_off = o;
        int *c = o ? realloc(g->cs_n, sizeof *c * cap) : NULL;
        if (c) g->cs_n = c;
        uint8_t *ng = c ? realloc(g->cs_neg, (size_t)cap) : NULL;
        if (ng) g->cs_neg = ng;
        uint32_t *as = ng ? realloc(g->cs_ascii, sizeof *as * 4 * (size_t)cap) : NULL;
        if (!as) return nomem(ps);
        g->cs_ascii = as;
        g->cap_cs = cap;
    }
    while (g->n_rng + n > g->cap_rng) {
        int cap = g->cap_rng ? 2 * g->cap_rng : 64;
        uint32_t *r = realloc(g->rng, sizeof *r * 2 * (size_t)cap);
        if (!r) return nomem(ps);
        g->rng = r;
        g->cap_rng = cap;
    }
    const int c = g->n_cs++;
    g->cs_off[c] = g->n_rng;
    g->cs_n[c] = n;
    g->cs_neg[c] = (uint8_t)neg;
    if (n) memcpy(g->rng + 2 * (size_t)g->n_rng, lohi, sizeof(uint32_t) * 2 * (size_t)n); // ([] has none)
    g->n_rng += n;
    uint32_t *bm = g->cs_ascii + 4 * (size_t)c;
    memset(bm, 0, 16);
    for (int i = 0; i < 2 * n; i += 2)
        for (uint32_t x = lohi[i]; x <= lohi[i + 1] && x < 128; x++) bm[x >> 5] |= 1u << (x & 31);
    if (neg)
        for (int w = 0; w < 4; w++) bm[w] = ~bm[w];
    return c;
}

int ds_grammar_class_has(const ds_grammar *g, int c, uint32_t cp) {
    if (cp < 128) return (g->cs_ascii[4 * (size_t)c + (cp >> 5)] >> (cp & 31)) & 1;
    const uint32_t *r = g->rng + 2 * (size_t)g->cs_off[c];
    int in = 0;
    for (int i = 0; i < g->cs_n[c] && !in; i++) in = cp >= r[2 * i] && cp <= r[2 * i + 1];
    return in ^ g->cs_neg[c];
}

static int emit(parser *ps, ds_i32vec *seq, int32_t el) {
    if (++ps->total > MAX_ELEMENTS) return perr(ps, ps->p, "grammar too large after expanding repetitions", NULL);
    return ds_i32vec_push(seq, el) ? nomem(ps) : 0;
}

// ---- lexing --------------------------------------------------------------------------------------

static int is_name(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

// Skip spaces and comments; newlines too when `nl`.
static void skip(parser *ps, int nl) {
    while (ps->p < ps->end) {
        const char c = *ps->p;
        if (c == ' ' || c == '\t' || (nl && (c == '\n' || c == '\r'))) ps->p++;
        else if (c == '#')
            while (ps->p < ps->end && *ps->p != '\n') ps->p++;
        else break;
    }
}

// At a newline outside parentheses: does a new rule ("name ::=") or the end follow?
static int rule_ends_here(parser *ps) {
    const char *save = ps->p;
    skip(ps, 1);
    int ends = ps->p >= ps->end;
    if (!ends && is_name(*ps->p)) {
        while (ps->p < ps->end && is_name(*ps->p)) ps->p++;
        skip(ps, 0);
        ends = ps->end - ps->p >= 3 && !memcmp(ps->p, "::=", 3);
    }
    ps->p = save;
    return ends;
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

// One character of a literal or class (an escape or a UTF-8 sequence) into *cp.
static int read_char(parser *ps, uint32_t *cp) {
    const char *at = ps->p;
    if (ps->p >= ps->end) return perr(ps, at, "unexpected end of grammar", NULL);
    unsigned char c = (unsigned char)*ps->p++;
    if (c == '\\') {
        if (ps->p >= ps->end) return perr(ps, at, "unexpected end of grammar in an escape", NULL);
        const char e = *ps->p++;
        int digits = 0;
        switch (e) {
        case 'n': *cp = '\n'; return 0;
        case 'r': *cp = '\r'; return 0;
        case 't': *cp = '\t'; return 0;
        case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': *cp = (uint32_t)e; return 0;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default: {
            char s[2] = {e, 0};
            return perr(ps, at, "unknown escape", s);
        }
        }
        uint32_t v = 0;
        for (int i = 0; i < digits; i++) {
            const int h = ps->p < ps->end ? hexval(*ps->p) : -1;
            if (h < 0) return perr(ps, at, "expected hex digits in the escape", NULL);
            v = v * 16 + (uint32_t)h;
            ps->p++;
        }
        if (v > 0x10FFFF) return perr(ps, at, "code point above U+10FFFF", NULL);
        *cp = v;
        return 0;
    }
    if (c < 0x80) {
        *cp = c;
        return 0;
    }
    const int len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
    if (!len || c > 0xF4) return perr(ps, at, "invalid UTF-8 in the grammar", NULL);
    uint32_t v = c & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
    for (int i = 1; i < len; i++) {
        if (ps->p >= ps->end || ((unsigned char)*ps->p & 0xC0) != 0x80)
            return perr(ps, at, "invalid UTF-8 in the grammar", NULL);
        v = v << 6 | ((unsigned char)*ps->p++ & 0x3F);
    }
    *cp = v;
    return 0;
}

static int read_int(parser *ps, int *out) {
    const char *at = ps->p;
    long v = 0;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return perr(ps, at, "expected a number", NULL);
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        v = v * 10 + (*ps->p++ - '0');
        if (v > MAX_REPEAT) return perr(ps, at, "repetition count above 4096", NULL);
    }
    *out = (int)v;
    return 0;
}

// ---- parsing -------------------------------------------------------------------------------------

static int parse_alts(parser *ps, int rule, ds_i32vec *out, int nested);

// x* as a rule S ::= x S | ε; returns S's id.
static int star_rule(parser *ps, int rule, int32_t x) {
    const int s = synth_rule(ps, rule);
    if (s < 0) return -1;
    ds_i32vec *b = &ps->rules[s].body;
    if (emit(ps, b, x) || emit(ps, b, (s << 2) | DS_GEL_RULE) || emit(ps, b, DS_GEL_END) || emit(ps, b, DS_GEL_END))
        return -1;
    return s;
}

// Optional chain of depth k: O_1 ::= x | ε, O_j ::= x O_{j-1} | ε; returns O_k.
static int opt_rule(parser *ps, int rule, int32_t x, int k) {
    int inner = -1;
    for (int j = 1; j <= k; j++) {
        const int o = synth_rule(ps, rule);
        if (o < 0) return -1;
        ds_i32vec *b = &ps->rules[o].body;
        if (emit(ps, b, x) || (inner >= 0 && emit(ps, b, (inner << 2) | DS_GEL_RULE)) || emit(ps, b, DS_GEL_END) ||
            emit(ps, b, DS_GEL_END))
            return -1;
        inner = o;
    }
    return inner;
}

// Apply a postfix operator to seq's last item, which starts at seq->v[start].
static int postfix(parser *ps, int rule, ds_i32vec *seq, int start) {
    const char *at = ps->p;
    const char op = *ps->p++;
    int m = 0, n = -1; // n = -1: unbounded
    if (op == '*') m = 0;
    else if (op == '+') m = 1;
    else if (op == '?') n = 1;
    else { // {m}, {m,}, {m,n}
        skip(ps, 1);
        if (read_int(ps, &m)) return -1;
        skip(ps, 1);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            skip(ps, 1);
            if (ps->p < ps->end && *ps->p != '}') {
                if (read_int(ps, &n)) return -1;
                skip(ps, 1);
            }
        } else {
            n = m;
        }
        if (ps->p >= ps->end || *ps->p != '}') return perr(ps, at, "expected '}' closing the repetition", NULL);
        ps->p++;
        if (n >= 0 && n < m) return perr(ps, at, "repetition {m,n} with n < m", NULL);
    }
    // x: the item as one element (a multi-element literal becomes a rule of its own)
    int32_t x;
    if (seq->n - start == 1) {
        x = seq->v[start];
    } else {
        const int r = synth_rule(ps, rule);
        if (r < 0) return -1;
        for (int i = start; i < seq->n; i++)
            if (emit(ps, &ps->rules[r].body, seq->v[i])) return -1;
        if (emit(ps, &ps->rules[r].body, DS_GEL_END)) return -1;
        x = (r << 2) | DS_GEL_RULE;
    }
    seq->n = start;
    ps->total -= 0;
    for (int i = 0; i < m; i++)
        if (emit(ps, seq, x)) return -1;
    if (n < 0) {
        const int s = star_rule(ps, rule, x);
        if (s < 0 || emit(ps, seq, (s << 2) | DS_GEL_RULE)) return -1;
    } else if (n > m) {
        const int o = opt_rule(ps, rule, x, n - m);
        if (o < 0 || emit(ps, seq, (o << 2) | DS_GEL_RULE)) return -1;
    }
    return 0;
}

// "..." after its opening quote: one one-character class per character (none for "").
static int item_string(parser *ps, ds_i32vec *seq, const char *at) {
    while (ps->p < ps->end && *ps->p != '"') {
        uint32_t cp, lohi[2];
        if (read_char(ps, &cp)) return -1;
        lohi[0] = lohi[1] = cp;
        const int cs = add_class(ps, lohi, 1, 0);
        if (cs < 0 || emit(ps, seq, (cs << 2) | DS_GEL_CHARS)) return -1;
    }
    if (ps->p >= ps->end) return perr(ps, at, "unterminated string literal", NULL);
    ps->p++;
    return 0;
}

// [...] / [^...] after its '[': the ranges as one class.
static int item_class(parser *ps, ds_i32vec *seq, const char *at) {
    int neg = 0;
    if (ps->p < ps->end && *ps->p == '^') {
        neg = 1;
        ps->p++;
    }
    ds_i32vec r = {0};
    while (ps->p < ps->end && *ps->p != ']') {
        uint32_t lo, hi;
        if (read_char(ps, &lo)) {
            free(r.v);
            return -1;
        }
        hi = lo;
        if (ps->end - ps->p >= 2 && ps->p[0] == '-' && ps->p[1] != ']') {
            ps->p++;
            if (read_char(ps, &hi)) {
                free(r.v);
                return -1;
            }
            if (hi < lo) {
                free(r.v);
                return perr(ps, at, "character range with its end before its start", NULL);
            }
        }
        if (ds_i32vec_push(&r, (int32_t)lo) || ds_i32vec_push(&r, (int32_t)hi)) {
            free(r.v);
            return nomem(ps);
        }
    }
    if (ps->p >= ps->end) {
        free(r.v);
        return perr(ps, at, "unterminated character class", NULL);
    }
    ps->p++;
    const int cs = add_class(ps, (const uint32_t *)r.v, r.n / 2, neg);
    free(r.v);
    if (cs < 0 || emit(ps, seq, (cs << 2) | DS_GEL_CHARS)) return -1;
    return 0;
}

// '.' after the dot: any code point.
static int item_any(parser *ps, ds_i32vec *seq) {
    const uint32_t lohi[2] = {0, 0x10FFFF};
    const int cs = add_class(ps, lohi, 1, 0);
    return cs < 0 || emit(ps, seq, (cs << 2) | DS_GEL_CHARS) ? -1 : 0;
}

// ( alternatives ) after its '(': a rule of its own, referenced once.
static int item_group(parser *ps, int rule, ds_i32vec *seq, const char *at) {
    if (++ps->depth > MAX_DEPTH) return perr(ps, at, "parentheses nested deeper than 64", NULL);
    const int r = synth_rule(ps, rule);
    if (r < 0) return -1;
    ds_i32vec body = {0};
    const int rc = parse_alts(ps, rule, &body, 1);
    ps->rules[r].body = body; // (ps->rules may have moved while parsing the group)
    if (rc) return -1;
    skip(ps, 1);
    if (ps->p >= ps->end || *ps->p != ')') return perr(ps, at, "unclosed '('", NULL);
    ps->p++;
    ps->depth--;
    return emit(ps, seq, (r << 2) | DS_GEL_RULE) ? -1 : 0;
}

// A rule name: a reference, the rule declared here if it is not yet (its first use is remembered).
static int item_ref(parser *ps, ds_i32vec *seq) {
    const char *s = ps->p;
    while (ps->p < ps->end && is_name(*ps->p)) ps->p++;
    int r = find_rule(ps, s, (size_t)(ps->p - s));
    if (r < 0) {
        if ((r = add_rule(ps, s, (size_t)(ps->p - s))) < 0) return -1;
        pos_of(ps, s, &ps->rules[r].ref_line, &ps->rules[r].ref_col);
    }
    return emit(ps, seq, (r << 2) | DS_GEL_RULE) ? -1 : 0;
}

// One item of a sequence at ps->p (a literal, class, '.', group or rule name); 1 when ps->p starts none.
static int parse_item(parser *ps, int rule, ds_i32vec *seq) {
    const char *at = ps->p;
    const char c = *ps->p;
    if (c == '"') return ps->p++, item_string(ps, seq, at);
    if (c == '[') return ps->p++, item_class(ps, seq, at);
    if (c == '.') return ps->p++, item_any(ps, seq);
    if (c == '(') return ps->p++, item_group(ps, rule, seq, at);
    if (is_name(c)) return item_ref(ps, seq);
    return 1;
}

static int parse_seq(parser *ps, int rule, ds_i32vec *seq, int nested) {
    int last = -1; // start of the last item (-1: nothing to repeat, e.g. after "")
    for (;;) {
        skip(ps, nested);
        if (ps->p >= ps->end) return 0;
        const char *at = ps->p;
        const char c = *ps->p;
        if (c == '\n' || c == '\r') {
            if (rule_ends_here(ps)) return 0;
            skip(ps, 1);
            continue;
        }
        if (c == '|' || c == ')') return 0;
        if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last < 0) return perr(ps, at, "repetition operator without anything to repeat", NULL);
            if (postfix(ps, rule, seq, last)) return -1;
            last = -1;
            continue;
        }
        const int start = seq->n;
        const int rc = parse_item(ps, rule, seq);
        if (rc < 0) return -1;
        if (rc > 0) {
            char s[2] = {c, 0};
            return perr(ps, at, "unexpected character", s);
        }
        last = seq->n > start ? start : -1;
    }
}

static int parse_alts(parser *ps, int rule, ds_i32vec *out, int nested) {
    for (;;) {
        if (parse_seq(ps, rule, out, nested) || emit(ps, out, DS_GEL_END)) return -1;
        skip(ps, nested);
        if (ps->p < ps->end && (*ps->p == '\n' || *ps->p == '\r') && !rule_ends_here(ps)) skip(ps, 1);
        if (ps->p < ps->end && *ps->p == '|') {
            ps->p++;
            skip(ps, 1);
            continue;
        }
        return 0;
    }
}

static int parse_rule(parser *ps) {
    const char *at = ps->p;
    const char *s = ps->p;
    while (ps->p < ps->end && is_name(*ps->p)) ps->p++;
    if (ps->p == s) {
        char c[2] = {*ps->p, 0};
        return perr(ps, at, "expected a rule name, found", c);
    }
    const size_t n = (size_t)(ps->p - s);
    skip(ps, 0);
    if (ps->end - ps->p < 3 || memcmp(ps->p, "::=", 3)) return perr(ps, ps->p, "expected '::=' after the rule name", NULL);
    ps->p += 3;
    skip(ps, 1);
    int r = find_rule(ps, s, n);
    if (r >= 0 && ps->rules[r].defined) {
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(n < 60 ? n : 60), s);
        return perr(ps, at, "rule defined twice:", name);
    }
    if (r < 0 && (r = add_rule(ps, s, n)) < 0) return -1;
    ps->rules[r].defined = 1;
    ds_i32vec body = {0};
    const int rc = parse_alts(ps, r, &body, 0);
    ps->rules[r].body = body;
    return rc;
}

// ---- checks --------------------------------------------------------------------------------------

// Left recursion: a rule reachable from itself through leading positions (nullable prefixes
// skipped). Returns a rule on such a cycle, or -1.
static int left_recursive(const ds_grammar *g) {
    const int R = g->n_rules;
    uint8_t *nullable = calloc((size_t)R, 1), *color = calloc((size_t)R, 1);
    int *stack = malloc(sizeof(int) * 2 * (size_t)(R + 1));
    int found = -2;
    if (!nullable || !color || !stack) goto out;
    for (int changed = 1; changed;) {
        changed = 0;
        for (int r = 0; r < R; r++) {
            if (nullable[r]) continue;
            for (int a = 0; a < g->rule_nalt[r] && !nullable[r]; a++) {
                int p = g->alt[g->rule_alt[r] + a], ok = 1;
                for (; (g->el[p] & 3) != DS_GEL_END && ok; p++)
                    ok = (g->el[p] & 3) == DS_GEL_RULE && nullable[g->el[p] >> 2];
                if (ok) nullable[r] = changed = 1;
            }
        }
    }
    found = -1;
    // Iterative DFS over left edges; color 1 = on the stack, 2 = done.
    for (int r0 = 0; r0 < R && found < 0; r0++) {
        if (color[r0]) continue;
        int sp = 0;
        stack[sp++] = r0;
        stack[sp++] = 0; // (rule, next edge index)
        color[r0] = 1;
        while (sp && found < 0) {
            const int r = stack[sp - 2];
            int e = stack[sp - 1]++, target = -1, k = 0;
            for (int a = 0; a < g->rule_nalt[r] && target < 0; a++)
                for (int p = g->alt[g->rule_alt[r] + a]; (g->el[p] & 3) == DS_GEL_RULE; p++) {
                    if (k++ == e) {
                        target = g->el[p] >> 2;
                        break;
                    }
                    if (!nullable[g->el[p] >> 2]) break;
                }
            if (target < 0) {
                color[r] = 2;
                sp -= 2;
            } else if (color[target] == 1) {
                found = target;
            } else if (!color[target]) {
                color[target] = 1;
                stack[sp++] = target;
                stack[sp++] = 0;
            }
        }
    }
out:
    free(nullable);
    free(color);
    free(stack);
    return found;
}

void ds_grammar_free(ds_grammar *g) {
    if (!g) return;
    for (int i = 0; i < g->n_rules; i++) free(g->rule_name[i]);
    free(g->rule_name);
    free(g->el);
    free(g->alt);
    free(g->rule_alt);
    free(g->rule_nalt);
    free(g->rng);
    free(g->cs_off);
    free(g->cs_n);
    free(g->cs_neg);
    free(g->cs_ascii);
    free(g);
}

ds_status ds_grammar_parse(const char *text, ds_grammar **out) {
    *out = NULL;
    if (!text) return ds_fail(DS_ERR_INVALID, "grammar: no text");
    ds_grammar *g = ds_calloc(1, sizeof *g);
    if (!g) return DS_ERR_NOMEM;
    parser ps = {.src = text, .p = text, .end = text + strlen(text), .g = g};
    for (;;) {
        skip(&ps, 1);
        if (ps.p >= ps.end) break;
        if (parse_rule(&ps)) break;
    }
    ds_status st = ps.st;
    if (!st) {
        for (int r = 0; r < g->n_rules && !st; r++)
            if (!ps.rules[r].defined) {
                char msg[128];
                snprintf(msg, sizeof msg, "grammar %d:%d: undefined rule '%.60s'", ps.rules[r].ref_line,
                         ps.rules[r].ref_col, g->rule_name[r]);
                st = ds_fail(DS_ERR_INVALID, "%s", msg);
            }
        g->root = -1;
        for (int r = 0; r < g->n_rules; r++)
            if (!strcmp(g->rule_name[r], "root")) g->root = r;
        if (!st && g->root < 0) st = ds_fail(DS_ERR_INVALID, "grammar: no rule named 'root'");
    }
    if (!st) { // flatten
        size_t n_el = 0, n_alt = 0;
        for (int r = 0; r < g->n_rules; r++) {
            n_el += (size_t)ps.rules[r].body.n;
            for (int i = 0; i < ps.rules[r].body.n; i++) n_alt += ps.rules[r].body.v[i] == DS_GEL_END;
        }
        g->el = malloc(sizeof(int32_t) * (n_el + 1));
        g->alt = malloc(sizeof(int32_t) * (n_alt + 1));
        g->rule_alt = malloc(sizeof(int) * (size_t)(g->n_rules + 1));
        g->rule_nalt = malloc(sizeof(int) * (size_t)(g->n_rules + 1));
        if (!g->el || !g->alt || !g->rule_alt || !g->rule_nalt) {
            st = ds_fail(DS_ERR_NOMEM, "grammar: out of memory");
        } else {
            for (int r = 0; r < g->n_rules; r++) {
                const ds_i32vec *b = &ps.rules[r].body;
                g->rule_alt[r] = g->n_alt;
                g->rule_nalt[r] = 0;
                for (int i = 0; i < b->n; i++) {
                    if (i == 0 || b->v[i - 1] == DS_GEL_END) {
                        g->alt[g->n_alt++] = g->n_el;
                        g->rule_nalt[r]++;
                    }
                    g->el[g->n_el++] = b->v[i];
                }
            }
            const int lr = left_recursive(g);
            if (lr == -2) st = ds_fail(DS_ERR_NOMEM, "grammar: out of memory");
            else if (lr >= 0) st = ds_fail(DS_ERR_INVALID, "grammar: rule '%.60s' is left-recursive", g->rule_name[lr]);
        }
    }
    for (int r = 0; r < ps.n_rules; r++) free(ps.rules[r].body.v);
    free(ps.rules);
    if (st) {
        ds_grammar_free(g);
        return st;
    }
    *out = g;
    return DS_OK;
}
