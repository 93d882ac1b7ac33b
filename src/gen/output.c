// A request's text output (include/dspark.h ds_text_out): committed tokens -> text, the one place
// every front end (generate, chat, the server) turns tokens into what it shows. Streaming
// detokenization (ds_detok: never half a UTF-8 character), stop ids (a chat format's end of turn:
// the token ends the output and is not part of it), stop strings (the text is cut before the
// earliest match, which may span tokens) and the streaming hold-back (text that could begin a stop
// string is not safe to show until the next token decides).
#define _GNU_SOURCE // memmem
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "dspark/gen.h"

#define DS_TEXT_MAX_STOP_IDS 8

struct ds_text_out {
    ds_detok dt;
    char *text;     // (cap) the output so far, NUL-terminated, cut at a stop string
    size_t len, cap;
    size_t safe;    // text[0..safe) may be shown
    int n_tokens;   // tokens that made the output (a stop id is not one of them)
    ds_text_end end;
    int32_t stop_ids[DS_TEXT_MAX_STOP_IDS];
    int n_stop_ids;
    char **stops;   // (n_stops) non-empty UTF-8 strings
    int n_stops;
    size_t *tok_end; // (cap_tok) text length after each token (before a stop-string cut)
    int32_t *tok_id; // (cap_tok) the tokens
    int cap_tok;
};

ds_status ds_text_out_init(const ds_tokenizer *t, ds_text_out **out) {
    *out = NULL;
    ds_text_out *o = ds_calloc(1, sizeof *o);
    if (!o) return DS_ERR_NOMEM;
    ds_detok_init(&o->dt, t, 0); // a continuation keeps its leading space (no tokenizer: no text, ids only)
    if (!(o->text = ds_malloc(256))) {
        free(o);
        return DS_ERR_NOMEM;
    }
    o->cap = 256;
    o->text[0] = 0;
    *out = o;
    return DS_OK;
}

void ds_text_out_free(ds_text_out *o) {
    if (!o) return;
    for (int i = 0; i < o->n_stops; i++) free(o->stops[i]);
    free(o->stops);
    free(o->text);
    free(o->tok_end);
    free(o->tok_id);
    free(o);
}

ds_status ds_text_out_add_stop_id(ds_text_out *o, int32_t id) {
    if (id < 0) return DS_OK; // "none" (ds_chat_eot of a format without one)
    for (int i = 0; i < o->n_stop_ids; i++)
        if (o->stop_ids[i] == id) return DS_OK;
    if (o->n_stop_ids == DS_TEXT_MAX_STOP_IDS) return ds_fail(DS_ERR_INVALID, "more than %d stop ids", DS_TEXT_MAX_STOP_IDS);
    o->stop_ids[o->n_stop_ids++] = id;
    return DS_OK;
}

ds_status ds_text_out_add_stop(ds_text_out *o, const char *s) {
    if (!s || !*s) return ds_fail(DS_ERR_INVALID, "a stop string must not be empty");
    char **ns = realloc(o->stops, sizeof *ns * (size_t)(o->n_stops + 1));
    if (!ns) return ds_fail(DS_ERR_NOMEM, "out of memory");
    o->stops = ns;
    if (!(ns[o->n_stops] = strdup(s))) return ds_fail(DS_ERR_NOMEM, "out of memory");
    o->n_stops++;
    return DS_OK;
}

static int append(ds_text_out *o, const char *b, size_t n) {
    if (o->len + n + 1 > o->cap) {
        const size_t cap = 2 * o->cap + n + 1;
        char *t = realloc(o->text, cap);
        if (!t) return 0;
        o->text = t;
        o->cap = cap;
    }
    memcpy(o->text + o->len, b, n);
    o->len += n;
    o->text[o->len] = 0;
    return 1;
}

// The earliest match of any stop string that ends after text[from] (a match may begin earlier).
static long stop_find(const ds_text_out *o, size_t from) {
    long best = -1;
    for (int i = 0; i < o->n_stops; i++) {
        const size_t sl = strlen(o->stops[i]);
        if (sl > o->len) continue;
        const size_t start = from + 1 > sl ? from + 1 - sl : 0;
        const char *p = memmem(o->text + start, o->len - start, o->stops[i], sl);
        if (p && (best < 0 || p - o->text < best)) best = p - o->text;
    }
    return best;
}

// Bytes at the end of the text that could begin a stop string: the longest proper prefix of a stop
// that the text ends with.
static size_t holdback(const ds_text_out *o) {
    size_t hold = 0;
    for (int i = 0; i < o->n_stops; i++) {
        const size_t sl = strlen(o->stops[i]);
        for (size_t k = (sl - 1 < o->len ? sl - 1 : o->len); k > hold; k--)
            if (!memcmp(o->text + o->len - k, o->stops[i], k)) {
                hold = k;
                break;
            }
    }
    return hold;
}

// Text was appended after `before`: cut at a stop string, update what is safe to show.
static void settle(ds_text_out *o, size_t before) {
    const long at = o->n_stops ? stop_find(o, before) : -1;
    if (at >= 0) {
        o->len = (size_t)at;
        o->text[o->len] = 0;
        o->end = DS_TEXT_STOP_STRING;
    }
    o->safe = o->end ? o->len : o->len - holdback(o);
}

static ds_status push_one(ds_text_out *o, int32_t id) {
    for (int i = 0; i < o->n_stop_ids; i++)
        if (id == o->stop_ids[i]) {
            o->end = DS_TEXT_STOP_ID;
            return ds_text_out_finish(o);
        }
    if (o->n_tokens == o->cap_tok) {
        const int cap = o->cap_tok ? 2 * o->cap_tok : 64;
        size_t *te = realloc(o->tok_end, sizeof *te * (size_t)cap);
        if (te) o->tok_end = te;
        int32_t *ti = te ? realloc(o->tok_id, sizeof *ti * (size_t)cap) : NULL;
        if (!ti) return ds_fail(DS_ERR_NOMEM, "out of memory");
        o->tok_id = ti;
        o->cap_tok = cap;
    }
    const size_t before = o->len;
    char piece[64], *buf = piece;
    int w = ds_detok_push(&o->dt, id, piece, sizeof piece);
    if (w < 0 && (buf = malloc((size_t)-w))) w = ds_detok_push(&o->dt, id, buf, -w); // a very long piece
    const int ok = buf && (w <= 0 || append(o, buf, (size_t)w));
    if (buf != piece) free(buf);
    if (!ok) return ds_fail(DS_ERR_NOMEM, "out of memory");
    o->tok_id[o->n_tokens] = id;
    o->tok_end[o->n_tokens++] = o->len;
    settle(o, before);
    return DS_OK;
}

ds_status ds_text_out_push(ds_text_out *o, const int32_t *ids, int n, int *used) {
    int i = 0;
    ds_status st = DS_OK;
    for (; i < n && !o->end && !st; i++) st = push_one(o, ids[i]);
    if (used) *used = i;
    return st;
}

ds_status ds_text_out_finish(ds_text_out *o) {
    char tail[8];
    const size_t before = o->len;
    const int w = ds_detok_flush(&o->dt, tail, sizeof tail); // an incomplete character: U+FFFD
    if (w > 0 && o->end != DS_TEXT_STOP_STRING && !append(o, tail, (size_t)w)) return ds_fail(DS_ERR_NOMEM, "out of memory");
    if (!o->end) o->end = DS_TEXT_ENDED;
    if (o->end != DS_TEXT_STOP_STRING) settle(o, before);
    o->safe = o->len;
    return DS_OK;
}

const char *ds_text_out_text(const ds_text_out *o, size_t *len) {
    if (len) *len = o->len;
    return o->text;
}

size_t ds_text_out_safe(const ds_text_out *o) { return o->safe; }
int ds_text_out_tokens(const ds_text_out *o) { return o->n_tokens; }
ds_text_end ds_text_out_end(const ds_text_out *o) { return o->end; }

int32_t ds_text_out_token_id(const ds_text_out *o, int i) { return i >= 0 && i < o->n_tokens ? o->tok_id[i] : -1; }

size_t ds_text_out_token_end(const ds_text_out *o, int i) {
    if (i < 0 || i >= o->n_tokens) return o->len;
    return o->tok_end[i] < o->len ? o->tok_end[i] : o->len;
}
