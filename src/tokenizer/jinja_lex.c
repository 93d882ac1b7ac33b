// Jinja lexer: template source -> tokens, as jinja2's lexer does with trim_blocks=True and
// lstrip_blocks=True: newlines normalized (str.splitlines + "\n".join, so one trailing newline is
// dropped), "{%-"/"-%}" (and {{- -}} {#- -#}) strip the whitespace next to them, a block or comment
// tag eats the newline after it and the spaces/tabs before it on its line ("{%+"/"+%}" opt out),
// {% raw %}...{% endraw %} is text. Inside tags: names, numbers, strings (Python escapes), operators;
// end markers only count outside brackets.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/jinja_internal.h"

typedef struct {
    ds_jarena *a;
    const char *s; // normalized source
    size_t n, pos;
    int line;
    const char *name;
    ds_jtok *t;
    int nt, cap;
    ds_status err;
} lexer;

static ds_status lfail(lexer *L, ds_status code, const char *fmt, ...) {
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return L->err = ds_fail(code, "%s:%d: %s", L->name, L->line, msg);
}

static ds_jtok *emit(lexer *L, int type, const char *s, size_t n) {
    if (L->nt == L->cap) {
        int cap = L->cap ? 2 * L->cap : 256;
        ds_jtok *t = ds_ja_alloc(L->a, sizeof *t * (size_t)cap);
        if (!t) return NULL;
        if (L->nt) memcpy(t, L->t, sizeof *t * (size_t)L->nt);
        L->t = t, L->cap = cap;
    }
    ds_jtok *k = &L->t[L->nt++];
    memset(k, 0, sizeof *k);
    k->type = type, k->line = L->line, k->s = s, k->n = n;
    return k;
}

// Python's str.isspace() at s[i] (UTF-8): the byte length of a whitespace character, else 0.
static size_t space_at(const char *s, size_t n, size_t i) {
    unsigned char c = (unsigned char)s[i];
    if (c == ' ' || (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x1f)) return 1;
    if (c == 0xc2 && i + 1 < n && ((unsigned char)s[i + 1] == 0x85 || (unsigned char)s[i + 1] == 0xa0)) return 2;
    if (i + 2 < n) {
        unsigned c1 = (unsigned char)s[i + 1], c2 = (unsigned char)s[i + 2];
        if (c == 0xe1 && c1 == 0x9a && c2 == 0x80) return 3;                            // U+1680
        if (c == 0xe2 && c1 == 0x80 && (c2 <= 0x8a || c2 == 0xa8 || c2 == 0xa9 || c2 == 0xaf)) return 3;
        if (c == 0xe2 && c1 == 0x81 && c2 == 0x9f) return 3;                            // U+205F
        if (c == 0xe3 && c1 == 0x80 && c2 == 0x80) return 3;                            // U+3000
    }
    return 0;
}

size_t ds_jinja_lstrip_len(const char *s, size_t n) {
    size_t i = 0, k;
    while (i < n && (k = space_at(s, n, i))) i += k;
    return i;
}

size_t ds_jinja_rstrip_len(const char *s, size_t n) { // the length left after rstrip()
    for (;;) {
        size_t back = 0;
        for (size_t k = 1; k <= 3 && k <= n; k++) // the last character: 1..3 bytes
            if (((unsigned char)s[n - k] & 0xc0) != 0x80) {
                if (space_at(s, n, n - k) == k) back = k;
                break;
            }
        if (!back) return n;
        n -= back;
    }
}

// jinja2 normalizes newlines: source.splitlines() joined with "\n" (a trailing one dropped).
static char *normalize(ds_jarena *a, const char *s, size_t n, size_t *out_n) {
    char *o = ds_ja_alloc(a, n + 1);
    if (!o) return NULL;
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        size_t brk = 0;
        if (c == '\r') brk = (i + 1 < n && s[i + 1] == '\n') ? 2 : 1;
        else if (c == '\n' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1e)) brk = 1;
        else if (c == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] == 0x85) brk = 2;
        else if (c == 0xe2 && i + 2 < n && (unsigned char)s[i + 1] == 0x80 &&
                 ((unsigned char)s[i + 2] == 0xa8 || (unsigned char)s[i + 2] == 0xa9)) brk = 3;
        if (brk) {
            o[w++] = '\n';
            i += brk - 1;
        } else {
            o[w++] = (char)c;
        }
    }
    if (w && o[w - 1] == '\n') w--;
    o[w] = 0;
    *out_n = w;
    return o;
}

static void count_lines(lexer *L, size_t from, size_t to) {
    for (size_t i = from; i < to; i++) L->line += L->s[i] == '\n';
}

static void emit_text(lexer *L, size_t from, size_t to) {
    if (to > from) emit(L, JT_TEXT, L->s + from, to - from);
}

static int is_name0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static size_t put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xc0 | cp >> 6), o[1] = (char)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000) return o[0] = (char)(0xe0 | cp >> 12), o[1] = (char)(0x80 | (cp >> 6 & 63)), o[2] = (char)(0x80 | (cp & 63)), 3;
    return o[0] = (char)(0xf0 | cp >> 18), o[1] = (char)(0x80 | (cp >> 12 & 63)), o[2] = (char)(0x80 | (cp >> 6 & 63)),
           o[3] = (char)(0x80 | (cp & 63)), 4;
}

// A string literal at L->pos (its quote): decoded as Python's unicode-escape does.
static int lex_string(lexer *L) {
    const char q = L->s[L->pos];
    size_t i = L->pos + 1;
    while (i < L->n && L->s[i] != q) i += L->s[i] == '\\' ? 2 : 1;
    if (i >= L->n) return lfail(L, DS_ERR_FORMAT, "unterminated string"), 0;
    char *o = ds_ja_alloc(L->a, i - L->pos + 1);
    if (!o) return 0;
    size_t w = 0;
    for (size_t k = L->pos + 1; k < i; k++) {
        char c = L->s[k];
        if (c != '\\') {
            o[w++] = c;
            continue;
        }
        char e = L->s[++k];
        int digits = 0;
        switch (e) {
        case 'n': o[w++] = '\n'; break;
        case 't': o[w++] = '\t'; break;
        case 'r': o[w++] = '\r'; break;
        case 'a': o[w++] = '\a'; break;
        case 'b': o[w++] = '\b'; break;
        case 'f': o[w++] = '\f'; break;
        case 'v': o[w++] = '\v'; break;
        case '\\': o[w++] = '\\'; break;
        case '\'': o[w++] = '\''; break;
        case '"': o[w++] = '"'; break;
        case '\n': break;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default:
            if (e >= '0' && e <= '7') {
                unsigned v = 0;
                int m = 0;
                while (m < 3 && k < i && L->s[k] >= '0' && L->s[k] <= '7') v = v * 8 + (unsigned)(L->s[k++] - '0'), m++;
                k--;
                w += put_utf8(o + w, v);
            } else {
                o[w++] = '\\', o[w++] = e;
            }
        }
        if (digits) {
            unsigned v = 0;
            for (int m = 0; m < digits; m++) {
                int h = k + 1 + (size_t)m < i ? hexval(L->s[k + 1 + m]) : -1;
                if (h < 0) return lfail(L, DS_ERR_FORMAT, "bad \\%c escape in a string", e), 0;
                v = v * 16 + (unsigned)h;
            }
            k += (size_t)digits;
            if (v > 0x10ffff || (v >= 0xd800 && v < 0xe000))
                return lfail(L, DS_ERR_UNSUPPORTED, "string escape of a surrogate or out-of-range code point is not supported"), 0;
            w += put_utf8(o + w, v);
        }
    }
    o[w] = 0;
    ds_jtok *t = emit(L, JT_STRING, o, w);
    if (!t) return 0;
    count_lines(L, L->pos, i);
    L->pos = i + 1;
    return 1;
}

static int lex_number(lexer *L) {
    size_t i = L->pos;
    char buf[64];
    size_t w = 0;
    int flt = 0;
    while (i < L->n && (is_digit(L->s[i]) || L->s[i] == '_')) {
        if (L->s[i] != '_' && w < 60) buf[w++] = L->s[i];
        i++;
    }
    if (i + 1 < L->n && L->s[i] == '.' && is_digit(L->s[i + 1])) {
        flt = 1;
        buf[w++] = '.';
        i++;
        while (i < L->n && (is_digit(L->s[i]) || L->s[i] == '_')) {
            if (L->s[i] != '_' && w < 60) buf[w++] = L->s[i];
            i++;
        }
    }
    if (i < L->n && (L->s[i] == 'e' || L->s[i] == 'E')) {
        size_t j = i + 1;
        if (j < L->n && (L->s[j] == '+' || L->s[j] == '-')) j++;
        if (j < L->n && is_digit(L->s[j])) {
            flt = 1;
            if (w < 60) buf[w++] = 'e';
            for (size_t k = i + 1; k < j; k++)
                if (w < 60) buf[w++] = L->s[k];
            i = j;
            while (i < L->n && is_digit(L->s[i]))
                if (w < 60) buf[w++] = L->s[i++];
                else i++;
        }
    }
    buf[w] = 0;
    ds_jtok *t = emit(L, flt ? JT_FLOAT : JT_INT, L->s + L->pos, i - L->pos);
    if (!t) return 0;
    if (flt) t->f = strtod(buf, NULL);
    else {
        if (w > 18) return lfail(L, DS_ERR_UNSUPPORTED, "integer literal %s is too large (64-bit integers only)", buf), 0;
        t->i = strtoll(buf, NULL, 10);
    }
    L->pos = i;
    return 1;
}

// After a tag's end marker at L->pos (past it): '-' strips all whitespace, otherwise a block or
// comment tag (trim_blocks) eats one newline. Returns whether the consumed text ended with "\n".
static int after_tag(lexer *L, int minus, int plus, int block) {
    size_t from = L->pos;
    if (minus) L->pos += ds_jinja_lstrip_len(L->s + L->pos, L->n - L->pos);
    else if (block && !plus && L->pos < L->n && L->s[L->pos] == '\n') L->pos++;
    count_lines(L, from, L->pos);
    return L->pos > from && L->s[L->pos - 1] == '\n';
}

// The text before a tag, with whitespace control: '-' rstrips it, a block/comment tag without '+'
// drops spaces/tabs between the last newline (or a line start) and the tag.
static void text_before(lexer *L, size_t from, size_t to, char sign, int lstrip_ok, int line_starting) {
    if (sign == '-') to = from + ds_jinja_rstrip_len(L->s + from, to - from);
    else if (sign != '+' && lstrip_ok) {
        size_t l = to;
        while (l > from && L->s[l - 1] != '\n') l--;
        if (l > from || line_starting) {
            size_t k = l;
            while (k < to && (L->s[k] == ' ' || L->s[k] == '\t')) k++;
            if (k == to) to = l;
        }
    }
    emit_text(L, from, to);
}

// Matches "{%" [-+]? ws WORD ws [-+]? "%}" at i; returns the end (past "%}") or 0, with the signs.
static size_t match_word_tag(const char *s, size_t n, size_t i, const char *word, char *open_sign, char *close_sign) {
    if (i + 2 > n || s[i] != '{' || s[i + 1] != '%') return 0;
    size_t k = i + 2;
    *open_sign = k < n && (s[k] == '-' || s[k] == '+') ? s[k++] : 0;
    while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\n')) k++;
    size_t wl = strlen(word);
    if (k + wl > n || memcmp(s + k, word, wl)) return 0;
    k += wl;
    while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\n')) k++;
    *close_sign = k < n && (s[k] == '-' || s[k] == '+') ? s[k++] : 0;
    if (k + 2 > n || s[k] != '%' || s[k + 1] != '}') return 0;
    return k + 2;
}

static const char *const k_ops[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(", ")",
                                    "{", "}", "<", ">", "=", ".", ":", "|", ",", ";"};

// Tokens inside a tag until its end marker ("}}" or "%}"), outside brackets.
static int lex_tag(lexer *L, int block, int *minus, int *plus) {
    int depth = 0;
    for (;;) {
        while (L->pos < L->n && (L->s[L->pos] == ' ' || L->s[L->pos] == '\t' || L->s[L->pos] == '\n' || L->s[L->pos] == '\r'))
            L->line += L->s[L->pos++] == '\n';
        if (L->pos >= L->n) return lfail(L, DS_ERR_FORMAT, "unexpected end of template inside a %s tag", block ? "{% %}" : "{{ }}"), 0;
        const char *p = L->s + L->pos;
        const size_t left = L->n - L->pos;
        const char e = block ? '%' : '}';
        if (!depth) {
            if (left >= 3 && p[0] == '-' && p[1] == e && p[2] == '}') {
                *minus = 1, L->pos += 3;
                return 1;
            }
            if (block && left >= 3 && p[0] == '+' && p[1] == '%' && p[2] == '}') {
                *plus = 1, L->pos += 3;
                return 1;
            }
            if (left >= 2 && p[0] == e && p[1] == '}') {
                L->pos += 2;
                return 1;
            }
        }
        if (*p == '"' || *p == '\'') {
            if (!lex_string(L)) return 0;
            continue;
        }
        if (is_digit(*p)) {
            if (!lex_number(L)) return 0;
            continue;
        }
        if (is_name0(*p)) {
            size_t k = 1;
            while (k < left && (is_name0(p[k]) || is_digit(p[k]))) k++;
            if (!emit(L, JT_NAME, p, k)) return 0;
            L->pos += k;
            continue;
        }
        size_t k = 0;
        for (size_t o = 0; o < sizeof k_ops / sizeof *k_ops; o++) {
            size_t ol = strlen(k_ops[o]);
            if (ol <= left && !memcmp(p, k_ops[o], ol)) {
                k = ol;
                break;
            }
        }
        if (!k) return lfail(L, DS_ERR_FORMAT, "unexpected character '%c' in a tag", *p), 0;
        if (*p == '(' || *p == '[' || *p == '{') depth++;
        if ((*p == ')' || *p == ']' || *p == '}') && depth > 0) depth--;
        if (!emit(L, JT_OP, p, k)) return 0;
        L->pos += k;
    }
}

ds_status ds_jinja_lex(ds_jarena *a, const char *src, size_t n, const char *name, ds_jtok **toks, int *n_toks) {
    lexer L = {.a = a, .line = 1, .name = name};
    L.s = normalize(a, src, n, &L.n);
    if (!L.s) return ds_fail(DS_ERR_NOMEM, "%s: out of memory", name);
    int line_starting = 1;
    while (L.pos < L.n && !L.err && !a->oom) {
        size_t p = L.pos;
        while (p + 1 < L.n && !(L.s[p] == '{' && (L.s[p + 1] == '{' || L.s[p + 1] == '%' || L.s[p + 1] == '#'))) p++;
        if (p + 1 >= L.n) { // the rest is text
            emit_text(&L, L.pos, L.n);
            count_lines(&L, L.pos, L.n);
            L.pos = L.n;
            break;
        }
        const char kind = L.s[p + 1];
        const char sign = p + 2 < L.n ? L.s[p + 2] : 0;
        char os, cs;
        size_t raw_end = kind == '%' ? match_word_tag(L.s, L.n, p, "raw", &os, &cs) : 0;
        text_before(&L, L.pos, p, sign, kind != '{', line_starting);
        count_lines(&L, L.pos, p);
        if (raw_end) { // {% raw %} ... {% endraw %}: text as it stands
            size_t q = raw_end, end = 0, body_to = 0;
            char eos = 0, ecs = 0;
            for (; q + 1 < L.n; q++)
                if (L.s[q] == '{' && L.s[q + 1] == '%' && (end = match_word_tag(L.s, L.n, q, "endraw", &eos, &ecs))) break;
            if (!end) return lfail(&L, DS_ERR_FORMAT, "{%% raw %%} without {%% endraw %%}");
            body_to = q;
            L.pos = raw_end;
            size_t from = L.pos;
            if (cs == '-') from += ds_jinja_lstrip_len(L.s + from, body_to - from);
            else if (cs != '+' && from < body_to && L.s[from] == '\n') from++;
            text_before(&L, from, body_to, eos, 1, 0);
            count_lines(&L, raw_end, end);
            L.pos = end;
            line_starting = after_tag(&L, ecs == '-', ecs == '+', 1);
            continue;
        }
        L.pos = p + 2 + (sign == '-' || sign == '+');
        if (kind == '#') { // a comment: skip to "#}"
            size_t q = L.pos;
            while (q + 1 < L.n && !(L.s[q] == '#' && L.s[q + 1] == '}')) q++;
            if (q + 1 >= L.n) return lfail(&L, DS_ERR_FORMAT, "unterminated comment");
            const int minus = q > L.pos && L.s[q - 1] == '-', plus = q > L.pos && L.s[q - 1] == '+';
            count_lines(&L, L.pos, q + 2);
            L.pos = q + 2;
            line_starting = after_tag(&L, minus, plus, 1);
            continue;
        }
        const int block = kind == '%';
        if (!emit(&L, block ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, NULL, 0)) break;
        int minus = 0, plus = 0;
        if (!lex_tag(&L, block, &minus, &plus)) break;
        if (!emit(&L, block ? JT_BLOCK_END : JT_VAR_END, NULL, 0)) break;
        line_starting = after_tag(&L, minus, plus, block);
    }
    if (!L.err && !a->oom) emit(&L, JT_EOF, NULL, 0);
    if (L.err) return L.err;
    if (a->oom) return ds_fail(DS_ERR_NOMEM, "%s: out of memory (or the template is too large)", name);
    *toks = L.t;
    *n_toks = L.nt;
    return DS_OK;
}
