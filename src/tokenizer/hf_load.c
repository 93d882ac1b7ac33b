// Hugging Face tokenizer.json (BPE model) -> ds_tokenizer. Supports what GPT-2-style byte-level
// (Qwen, Llama 3) and SentencePiece-converted (Gemma) files use:
//   normalizer:     null | NFC | Replace(String) | Sequence of those
//   pre_tokenizer:  null | Split(Regex|String, Isolated|MergedWithPrevious|MergedWithNext|Removed)
//                   | ByteLevel(add_prefix_space, use_regex) | Sequence of those
//   model:          BPE (vocab, merges as "a b" strings or [a, b] pairs, byte_fallback, fuse_unk,
//                   ignore_merges, unk_token; no dropout, no continuing_subword_prefix)
//   post_processor: null | ByteLevel (no-op on ids) | TemplateProcessing (single) | Sequence
//   decoder:        null | ByteLevel | Replace(String) | ByteFallback | Fuse | Strip | Sequence
//   added_tokens:   content/special (lstrip, rstrip, single_word and normalized are not used by
//                   these families; every added token is matched on the raw text)
// and from tokenizer_config.json: bos_token, eos_token, chat_template, clean_up_tokenization_spaces.
// Anything else is an error naming the file and the unsupported piece.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "io/json.h"
#include "tokenizer/hf_internal.h"
#include "tokenizer/tokenizer.h"

// GPT-2's byte-level pre-tokenizer regex (ByteLevel with use_regex = true).
static const char k_gpt2_re[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

void ds_hf_free(ds_hf *h) {
    if (!h) return;
    free(h->rep_from);
    free(h->rep_to);
    for (int i = 0; i < h->n_splits; i++) {
        pcre2_code_free(h->splits[i].re);
        free(h->splits[i].lit);
    }
    free(h->mkey);
    free(h->mrank);
    free(h->mnew);
    free(h->added);
    free(h->added_special);
    free(h->added_lens);
    free(h);
}

// GPT-2 bytes_to_unicode: printable bytes map to themselves, the other 68 to U+0100.. in order.
static uint32_t byte_to_cp(int b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) return (uint32_t)b;
    int n = 0;
    for (int k = 0; k < b; k++)
        if (!((k >= 33 && k <= 126) || (k >= 161 && k <= 172) || (k >= 174 && k <= 255))) n++;
    return 256u + (uint32_t)n;
}

static int utf8_put(uint32_t cp, char *o) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000)
        return o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | (cp >> 6 & 63)), o[2] = (char)(0x80 | (cp & 63)), 3;
    o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | (cp >> 12 & 63)), o[2] = (char)(0x80 | (cp >> 6 & 63));
    o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

// Decode one UTF-8 character (input known valid); returns its length.
static int utf8_get(const char *s, size_t n, uint32_t *cp) {
    const uint8_t *u = (const uint8_t *)s;
    if (u[0] < 0x80 || n < 2) return *cp = u[0], 1;
    if (u[0] < 0xE0) return *cp = (uint32_t)(u[0] & 31) << 6 | (u[1] & 63), 2;
    if (u[0] < 0xF0 || n < 4) return *cp = (uint32_t)(u[0] & 15) << 12 | (uint32_t)(u[1] & 63) << 6 | (u[2] & 63), 3;
    *cp = (uint32_t)(u[0] & 7) << 18 | (uint32_t)(u[1] & 63) << 12 | (uint32_t)(u[2] & 63) << 6 | (u[3] & 63);
    return 4;
}

static uint64_t mix64(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

typedef struct {
    const char *path; // tokenizer.json, for messages
    ds_tokenizer *t;
    ds_hf *h;
    const char **piece; // (n_vocab) borrowed from the cJSON tree
    uint8_t has_byte_fallback_dec, byte_level_dec, strip_dec;
    const char *dec_from, *dec_to;
    int16_t cp2byte[324]; // inverse of byte_to_cp (-1 where none)
} builder;

static ds_status add_split(builder *b, const char *pattern, size_t n, int is_regex, int behavior) {
    ds_hf *h = b->h;
    if (h->n_splits == DS_HF_MAX_SPLITS)
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: more than %d pre-tokenizer splits", b->path, DS_HF_MAX_SPLITS);
    ds_hf_split *s = &h->splits[h->n_splits];
    s->behavior = behavior;
    if (is_regex) {
        int err;
        PCRE2_SIZE off;
        s->re = pcre2_compile((PCRE2_SPTR)pattern, n, PCRE2_UTF | PCRE2_UCP, &err, &off, NULL);
        if (!s->re) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(err, msg, sizeof msg);
            return ds_fail(DS_ERR_FORMAT, "%s: pre-tokenizer regex does not compile at offset %zu: %s", b->path,
                           (size_t)off, (const char *)msg);
        }
        pcre2_jit_compile(s->re, PCRE2_JIT_COMPLETE); // best effort: the interpreter works without it
    } else {
        if (n == 0) return ds_fail(DS_ERR_FORMAT, "%s: empty Split pattern", b->path);
        if (!(s->lit = ds_malloc(n))) return DS_ERR_NOMEM;
        memcpy(s->lit, pattern, n);
        s->lit_n = n;
    }
    h->n_splits++;
    return DS_OK;
}

static const char *type_of(const cJSON *o) {
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(ty) ? ty->valuestring : "";
}

static ds_status parse_normalizer(builder *b, const cJSON *n) {
    if (!n || cJSON_IsNull(n)) return DS_OK;
    const char *ty = type_of(n);
    if (!strcmp(ty, "Sequence")) {
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(n, "normalizers")) {
            ds_status st = parse_normalizer(b, it);
            if (st) return st;
        }
        return DS_OK;
    }
    if (!strcmp(ty, "NFC")) {
        if (b->h->rep_from) return ds_fail(DS_ERR_UNSUPPORTED, "%s: NFC after Replace in the normalizer", b->path);
        b->h->nfc = 1;
        return DS_OK;
    }
    if (!strcmp(ty, "Replace")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(n, "pattern"), "String");
        const cJSON *con = cJSON_GetObjectItemCaseSensitive(n, "content");
        if (!cJSON_IsString(pat) || !cJSON_IsString(con) || !pat->valuestring[0] || b->h->rep_from)
            return ds_fail(DS_ERR_UNSUPPORTED, "%s: only one Replace normalizer with a String pattern is supported", b->path);
        b->h->rep_from = strdup(pat->valuestring);
        b->h->rep_to = strdup(con->valuestring);
        if (!b->h->rep_from || !b->h->rep_to) return ds_fail(DS_ERR_NOMEM, "%s: out of memory", b->path);
        b->h->rep_from_n = strlen(pat->valuestring);
        b->h->rep_to_n = strlen(con->valuestring);
        return DS_OK;
    }
    return ds_fail(DS_ERR_UNSUPPORTED, "%s: unsupported normalizer '%s'", b->path, ty);
}

static ds_status parse_pretok(builder *b, const cJSON *p) {
    if (!p || cJSON_IsNull(p)) return DS_OK;
    const char *ty = type_of(p);
    if (!strcmp(ty, "Sequence")) {
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(p, "pretokenizers")) {
            ds_status st = parse_pretok(b, it);
            if (st) return st;
        }
        return DS_OK;
    }
    if (b->h->byte_level) return ds_fail(DS_ERR_UNSUPPORTED, "%s: a pre-tokenizer after ByteLevel", b->path);
    if (!strcmp(ty, "Split")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
        const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex"), *str = cJSON_GetObjectItemCaseSensitive(pat, "String");
        const cJSON *beh = cJSON_GetObjectItemCaseSensitive(p, "behavior");
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "invert")))
            return ds_fail(DS_ERR_UNSUPPORTED, "%s: inverted Split pre-tokenizer", b->path);
        const char *bs = cJSON_IsString(beh) ? beh->valuestring : "";
        int behavior = !strcmp(bs, "Isolated") ? DS_SPLIT_ISOLATED
                     : !strcmp(bs, "MergedWithPrevious") ? DS_SPLIT_MERGED_PREV
                     : !strcmp(bs, "MergedWithNext") ? DS_SPLIT_MERGED_NEXT
                     : !strcmp(bs, "Removed") ? DS_SPLIT_REMOVED : -1;
        if (behavior < 0) return ds_fail(DS_ERR_UNSUPPORTED, "%s: unsupported Split behavior '%s'", b->path, bs);
        if (cJSON_IsString(re)) return add_split(b, re->valuestring, strlen(re->valuestring), 1, behavior);
        if (cJSON_IsString(str)) return add_split(b, str->valuestring, strlen(str->valuestring), 0, behavior);
        return ds_fail(DS_ERR_FORMAT, "%s: Split pre-tokenizer without a pattern", b->path);
    }
    if (!strcmp(ty, "ByteLevel")) {
        if (!cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(p, "use_regex"))) {
            ds_status st = add_split(b, k_gpt2_re, strlen(k_gpt2_re), 1, DS_SPLIT_ISOLATED);
            if (st) return st;
        }
        b->h->byte_level = 1;
        b->h->byte_level_prefix = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "add_prefix_space"));
        return DS_OK;
    }
    return ds_fail(DS_ERR_UNSUPPORTED, "%s: unsupported pre_tokenizer '%s'", b->path, ty);
}

static ds_status parse_post(builder *b, const cJSON *p) {
    if (!p || cJSON_IsNull(p)) return DS_OK;
    const char *ty = type_of(p);
    if (!strcmp(ty, "Sequence")) {
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(p, "processors")) {
            ds_status st = parse_post(b, it);
            if (st) return st;
        }
        return DS_OK;
    }
    if (!strcmp(ty, "ByteLevel")) return DS_OK; // offsets only
    if (!strcmp(ty, "TemplateProcessing")) {
        ds_hf *h = b->h;
        h->n_prefix = h->n_suffix = 0;
        int seen_seq = 0;
        const cJSON *it, *specials = cJSON_GetObjectItemCaseSensitive(p, "special_tokens");
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(p, "single")) {
            if (cJSON_GetObjectItemCaseSensitive(it, "Sequence")) {
                seen_seq = 1;
                continue;
            }
            const cJSON *sp = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(it, "SpecialToken"), "id");
            if (!cJSON_IsString(sp)) return ds_fail(DS_ERR_FORMAT, "%s: bad TemplateProcessing item", b->path);
            const cJSON *ids = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(specials, sp->valuestring), "ids");
            const cJSON *id;
            if (!cJSON_IsArray(ids)) return ds_fail(DS_ERR_FORMAT, "%s: TemplateProcessing has no ids for '%s'", b->path, sp->valuestring);
            cJSON_ArrayForEach(id, ids) {
                int v = ds_json_is_int(id, 0, INT32_MAX) ? (int)id->valuedouble : -1;
                if (v < 0 || v >= b->t->n_vocab || (seen_seq ? h->n_suffix : h->n_prefix) >= 8)
                    return ds_fail(DS_ERR_FORMAT, "%s: TemplateProcessing id for '%s' is out of range", b->path, sp->valuestring);
                if (seen_seq) h->suffix[h->n_suffix++] = v;
                else h->prefix[h->n_prefix++] = v;
            }
        }
        return DS_OK;
    }
    return ds_fail(DS_ERR_UNSUPPORTED, "%s: unsupported post_processor '%s'", b->path, ty);
}

static ds_status parse_decoder(builder *b, const cJSON *d) {
    if (!d || cJSON_IsNull(d)) return DS_OK;
    const char *ty = type_of(d);
    if (!strcmp(ty, "Sequence")) {
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(d, "decoders")) {
            ds_status st = parse_decoder(b, it);
            if (st) return st;
        }
        return DS_OK;
    }
    if (!strcmp(ty, "ByteLevel")) return b->byte_level_dec = 1, DS_OK;
    if (!strcmp(ty, "ByteFallback")) return b->has_byte_fallback_dec = 1, DS_OK;
    if (!strcmp(ty, "Fuse")) return DS_OK; // joining the pieces is what decoding does anyway
    if (!strcmp(ty, "Replace")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, "pattern"), "String");
        const cJSON *con = cJSON_GetObjectItemCaseSensitive(d, "content");
        if (!cJSON_IsString(pat) || !cJSON_IsString(con) || !pat->valuestring[0] || b->dec_from)
            return ds_fail(DS_ERR_UNSUPPORTED, "%s: only one Replace decoder with a String pattern is supported", b->path);
        b->dec_from = pat->valuestring;
        b->dec_to = con->valuestring;
        return DS_OK;
    }
    if (!strcmp(ty, "Strip")) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(d, "content");
        const cJSON *start = cJSON_GetObjectItemCaseSensitive(d, "start"), *stop = cJSON_GetObjectItemCaseSensitive(d, "stop");
        if (!cJSON_IsString(c) || strcmp(c->valuestring, " ") || !cJSON_IsNumber(start) ||
            (cJSON_IsNumber(stop) && stop->valuedouble != 0) || start->valuedouble < 0 || start->valuedouble > 1)
            return ds_fail(DS_ERR_UNSUPPORTED, "%s: only Strip(' ', 0..1, 0) decoders are supported", b->path);
        b->h->strip_start = (int)start->valuedouble;
        return DS_OK;
    }
    return ds_fail(DS_ERR_UNSUPPORTED, "%s: unsupported decoder '%s'", b->path, ty);
}

// "<0xHH>" -> HH, else -1.
static int byte_piece(const char *s) {
    if (strlen(s) != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
    int v = 0;
    for (int k = 3; k < 5; k++) {
        char c = s[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

// The bytes token i decodes to (ds_token_bytes), written to out (when not NULL); returns the length.
// Added (non-special) tokens go through the decoder's Replace but not its byte-level mapping, as
// transformers.js does (the contents of these families' added tokens are the same either way).
static size_t decode_token(const builder *b, int i, char *out) {
    const ds_tokenizer *t = b->t;
    const char *p = b->piece[i];
    if (!p) return 0;
    size_t n = strlen(p), o = 0;
    switch (t->types[i]) {
    case DS_TOKTYPE_CONTROL: return 0;
    case DS_TOKTYPE_USER_DEFINED: break; // the decoder's Replace applies, its byte-level mapping does not
    case DS_TOKTYPE_BYTE:
        if (b->has_byte_fallback_dec) {
            if (out) out[0] = (char)byte_piece(p);
            return 1;
        }
        break;
    default: break;
    }
    size_t fn = b->dec_from ? strlen(b->dec_from) : 0, tn = b->dec_to ? strlen(b->dec_to) : 0;
    for (size_t k = 0; k < n;) {
        if (fn && n - k >= fn && memcmp(p + k, b->dec_from, fn) == 0) {
            if (out) memcpy(out + o, b->dec_to, tn);
            o += tn, k += fn;
            continue;
        }
        if (b->byte_level_dec && t->types[i] != DS_TOKTYPE_USER_DEFINED) {
            uint32_t cp;
            int l = utf8_get(p + k, n - k, &cp);
            int byte = cp < 324 ? b->cp2byte[cp] : -1;
            if (byte >= 0) {
                if (out) out[o] = (char)byte;
                o++;
            } else {
                if (out) memcpy(out + o, p + k, (size_t)l);
                o += (size_t)l;
            }
            k += (size_t)l;
            continue;
        }
        if (out) out[o] = p[k];
        o++, k++;
    }
    return o;
}

static ds_status merges_insert(ds_hf *h, uint64_t key, int32_t rank, int32_t id) {
    for (size_t s = (size_t)mix64(key) & h->mmask;; s = (s + 1) & h->mmask) {
        if (h->mkey[s] == UINT64_MAX) {
            h->mkey[s] = key, h->mrank[s] = rank, h->mnew[s] = id;
            return DS_OK;
        }
        if (h->mkey[s] == key) return DS_OK; // HF keeps the first (lowest-rank) occurrence too
    }
}

static ds_status parse_merges(builder *b, const cJSON *merges) {
    ds_hf *h = b->h;
    ds_tokenizer *t = b->t;
    int n = cJSON_GetArraySize(merges);
    size_t cap = 16;
    while (cap < 2 * (size_t)n + 2) cap *= 2;
    h->mmask = cap - 1;
    h->mkey = ds_malloc(cap * sizeof *h->mkey);
    h->mrank = ds_malloc(cap * sizeof *h->mrank);
    h->mnew = ds_malloc(cap * sizeof *h->mnew);
    if (!h->mkey || !h->mrank || !h->mnew) return ds_fail(DS_ERR_NOMEM, "%s: out of memory for %d merges", b->path, n);
    memset(h->mkey, 0xff, cap * sizeof *h->mkey);
    char *buf = NULL;
    size_t bcap = 0;
    int rank = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        const char *a, *c;
        size_t an, cn;
        if (cJSON_IsString(m)) { // "left right"
            const char *sp = strchr(m->valuestring, ' ');
            if (!sp) {
                free(buf);
                return ds_fail(DS_ERR_FORMAT, "%s: merge %d (\"%.40s\") is not \"left right\"", b->path, rank, m->valuestring);
            }
            a = m->valuestring, an = (size_t)(sp - a), c = sp + 1, cn = strlen(c);
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
                   cJSON_IsString(m->child->next)) {
            a = m->child->valuestring, an = strlen(a), c = m->child->next->valuestring, cn = strlen(c);
        } else {
            free(buf);
            return ds_fail(DS_ERR_FORMAT, "%s: merge %d is neither a string nor a pair of strings", b->path, rank);
        }
        if (an + cn > bcap) {
            bcap = 2 * (an + cn) + 64;
            char *nb = realloc(buf, bcap);
            if (!nb) return free(buf), ds_fail(DS_ERR_NOMEM, "%s: out of memory", b->path);
            buf = nb;
        }
        memcpy(buf, a, an);
        memcpy(buf + an, c, cn);
        int32_t la = ds_tok_lookup(t, a, an), lc = ds_tok_lookup(t, c, cn), lm = ds_tok_lookup(t, buf, an + cn);
        if (la < 0 || lc < 0 || lm < 0) {
            free(buf);
            return ds_fail(DS_ERR_FORMAT, "%s: merge %d (\"%.*s\" + \"%.*s\") uses a piece missing from the vocabulary",
                           b->path, rank, (int)(an > 40 ? 40 : an), a, (int)(cn > 40 ? 40 : cn), c);
        }
        merges_insert(h, (uint64_t)(uint32_t)la << 32 | (uint32_t)lc, rank, lm);
        rank++;
    }
    free(buf);
    return DS_OK;
}

static int cmp_size_desc(const void *x, const void *y) {
    size_t a = *(const size_t *)x, c = *(const size_t *)y;
    return a < c ? 1 : a > c ? -1 : 0;
}

// bos_token / eos_token in tokenizer_config.json: a string or {"content": ...}.
static const char *token_text(const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static ds_status read_config(builder *b, const cJSON *cfg) {
    ds_tokenizer *t = b->t;
    const char *bos = token_text(cfg, "bos_token"), *eos = token_text(cfg, "eos_token");
    if (bos) t->bos = ds_tok_lookup(t, bos, strlen(bos));
    if (eos) t->eos = ds_tok_lookup(t, eos, strlen(eos));
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    const char *tmpl = NULL;
    if (cJSON_IsString(ct)) tmpl = ct->valuestring;
    else if (cJSON_IsArray(ct)) { // [{"name": "default", "template": ...}, ...]
        const cJSON *it;
        cJSON_ArrayForEach(it, ct) {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name"), *tp = cJSON_GetObjectItemCaseSensitive(it, "template");
            if (cJSON_IsString(tp) && (!tmpl || (cJSON_IsString(nm) && !strcmp(nm->valuestring, "default")))) tmpl = tp->valuestring;
        }
    }
    t->chat_format = tmpl ? ds_chat_detect(tmpl) : DS_CHAT_PLAIN;
    t->chat_flags = ds_chat_variant(tmpl);
    const char *eot = t->chat_format == DS_CHAT_CHATML ? "<|im_end|>"
                    : t->chat_format == DS_CHAT_GEMMA  ? "<end_of_turn>"
                    : t->chat_format == DS_CHAT_LLAMA3 ? "<|eot_id|>" : NULL;
    b->h->eot = eot ? ds_tok_lookup(t, eot, strlen(eot)) : -1;
    if (eot && b->h->eot < 0) t->chat_format = DS_CHAT_PLAIN; // a template we recognize but whose tokens are missing
    if (ct) { // the template itself (chat_template.c); the end of turn of its format when it has one
        const int32_t e = ds_chat_setup(t, ct, bos, eos);
        t->tmpl_eot = b->h->eot >= 0 ? b->h->eot : e;
    }
    // transformers' default is True when the key is absent.
    b->h->cleanup = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(cfg, "clean_up_tokenization_spaces"));
    return DS_OK;
}

ds_status ds_tokenizer_load_hf(const char *json_path, const char *config_path, ds_tokenizer **out) {
    cJSON *root = NULL, *cfg = NULL;
    *out = NULL;
    ds_status st = ds_json_load(json_path, (size_t)1 << 30, &root);
    if (!st && config_path) st = ds_json_load(config_path, (size_t)64 << 20, &cfg);
    if (!st) st = ds_tokenizer_from_json(json_path, root, cfg, out);
    cJSON_Delete(root);
    cJSON_Delete(cfg);
    return st;
}

// The BPE model: its type, vocab and merges present, no dropout nor subword affixes.
static ds_status check_model(const char *json_path, const cJSON *model, const cJSON *vocab, const cJSON *merges) {
    if (!cJSON_IsObject(model)) return ds_fail(DS_ERR_FORMAT, "%s: no \"model\" object", json_path);
    if (strcmp(type_of(model), "BPE") != 0)
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: model type '%s' is not supported (only BPE)", json_path, type_of(model));
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges)) return ds_fail(DS_ERR_FORMAT, "%s: BPE model without vocab or merges", json_path);
    const cJSON *csp = cJSON_GetObjectItemCaseSensitive(model, "continuing_subword_prefix");
    const cJSON *eow = cJSON_GetObjectItemCaseSensitive(model, "end_of_word_suffix");
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if ((cJSON_IsString(csp) && csp->valuestring[0]) || (cJSON_IsString(eow) && eow->valuestring[0]) ||
        (cJSON_IsNumber(dropout) && dropout->valuedouble > 0))
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: BPE with dropout or subword prefixes/suffixes is not supported", json_path);
    return DS_OK;
}

// Vocabulary size: the largest id of the vocab and the added tokens, plus one.
static ds_status vocab_size(const char *json_path, const cJSON *vocab, const cJSON *added, int *n_vocab) {
    long max_id = -1;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= (1 << 24) || it->valuedouble != (int)it->valuedouble)
            return ds_fail(DS_ERR_FORMAT, "%s: vocab entry \"%.40s\" has a bad id", json_path, it->string);
        if ((long)it->valuedouble > max_id) max_id = (long)it->valuedouble;
    }
    cJSON_ArrayForEach(it, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id"), *c = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= (1 << 24) || !cJSON_IsString(c))
            return ds_fail(DS_ERR_FORMAT, "%s: an added token has a bad id or content", json_path);
        if ((long)id->valuedouble > max_id) max_id = (long)id->valuedouble;
    }
    if (max_id < 0) return ds_fail(DS_ERR_FORMAT, "%s: empty vocabulary", json_path);
    *n_vocab = (int)max_id + 1;
    return DS_OK;
}

// The tokenizer of nv tokens and its per-token arrays (b->t, b->h, b->piece).
static ds_status alloc_tokenizer(builder *b, int nv) {
    ds_tokenizer *t = b->t = ds_calloc(1, sizeof *t);
    if (!t) return ds_fail(DS_ERR_NOMEM, "%s: out of memory", b->path);
    ds_hf *h = b->h = t->hf = ds_calloc(1, sizeof *h);
    if (!h) return ds_fail(DS_ERR_NOMEM, "%s: out of memory", b->path);
    t->kind = DS_TOK_HF;
    t->n_vocab = nv;
    t->bos = t->eos = t->unk = -1;
    h->eot = -1;
    b->piece = calloc((size_t)nv, sizeof *b->piece);
    t->types = ds_calloc((size_t)nv, 1);
    h->added_special = ds_calloc((size_t)nv, 1);
    t->off = ds_malloc(((size_t)nv + 1) * sizeof *t->off);
    t->dec_off = ds_malloc(((size_t)nv + 1) * sizeof *t->dec_off);
    if (!b->piece || !t->types || !h->added_special || !t->off || !t->dec_off) return ds_fail(DS_ERR_NOMEM, "%s: out of memory", b->path);
    return DS_OK;
}

// Each id's piece and type from the vocab, then the added tokens (which may only repeat a vocab
// piece, not change it).
static ds_status read_pieces(builder *b, const cJSON *model, const cJSON *vocab, const cJSON *added) {
    ds_tokenizer *t = b->t;
    ds_hf *h = b->h;
    const cJSON *it;
    h->byte_fallback = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"));
    h->fuse_unk = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "fuse_unk"));
    h->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));
    cJSON_ArrayForEach(it, vocab) {
        int id = (int)it->valuedouble;
        if (b->piece[id]) return ds_fail(DS_ERR_FORMAT, "%s: id %d appears twice in the vocab", b->path, id);
        b->piece[id] = it->string;
        t->types[id] = h->byte_fallback && byte_piece(it->string) >= 0 ? DS_TOKTYPE_BYTE : DS_TOKTYPE_NORMAL;
    }
    cJSON_ArrayForEach(it, added) {
        int id = (int)cJSON_GetObjectItemCaseSensitive(it, "id")->valuedouble;
        const char *c = cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring;
        if (b->piece[id] && strcmp(b->piece[id], c) != 0)
            return ds_fail(DS_ERR_FORMAT, "%s: added token %d (\"%.40s\") differs from the vocab's \"%.40s\"", b->path, id, c, b->piece[id]);
        if (!c[0]) continue;
        b->piece[id] = c;
        int special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "special"));
        t->types[id] = special ? DS_TOKTYPE_CONTROL : DS_TOKTYPE_USER_DEFINED;
        if (!h->added_special[id]) h->n_added++;
        h->added_special[id] = special ? 1 : 2;
    }
    return DS_OK;
}

// Pieces -> pool, then the text -> id index and the unknown token.
static ds_status build_pool(builder *b, const cJSON *model) {
    ds_tokenizer *t = b->t;
    const int nv = t->n_vocab;
    ds_status st;
    size_t total = 0;
    t->off[0] = 0;
    for (int i = 0; i < nv; i++) {
        size_t n = b->piece[i] ? strlen(b->piece[i]) : 0;
        if (!b->piece[i]) t->types[i] = DS_TOKTYPE_UNUSED;
        total += n;
        t->off[i + 1] = total;
        if (n > t->max_piece_len) t->max_piece_len = n;
    }
    if (!(t->pool = ds_malloc(total ? total : 1))) return ds_fail(DS_ERR_NOMEM, "%s: out of memory", b->path);
    for (int i = 0; i < nv; i++)
        if (b->piece[i]) memcpy(t->pool + t->off[i], b->piece[i], t->off[i + 1] - t->off[i]);
    if ((st = ds_tok_build_index(t))) {
        ds_fail_prefix(st, "%s", b->path);
        return st;
    }
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    if (cJSON_IsString(unk)) t->unk = ds_tok_lookup(t, unk->valuestring, strlen(unk->valuestring));
    return DS_OK;
}

// Byte tables; the added tokens' ids, first bytes and distinct lengths for the leftmost-longest
// scan; the decoded bytes of every token.
static ds_status build_tables(builder *b) {
    ds_tokenizer *t = b->t;
    ds_hf *h = b->h;
    const int nv = t->n_vocab;
    for (int x = 0; x < 256; x++) {
        char s[8];
        int l = utf8_put(byte_to_cp(x), s);
        h->byte_sym[x] = ds_tok_lookup(t, s, (size_t)l);
        snprintf(s, sizeof s, "<0x%02X>", x);
        h->byte_tok[x] = h->byte_fallback ? ds_tok_lookup(t, s, 6) : -1;
    }
    if (h->n_added > 0) {
        h->added = ds_malloc((size_t)h->n_added * sizeof *h->added);
        h->added_lens = ds_malloc((size_t)h->n_added * sizeof *h->added_lens);
        if (!h->added || !h->added_lens) return ds_fail(DS_ERR_NOMEM, "%s: out of memory", b->path);
        int k = 0;
        for (int i = 0; i < nv; i++) {
            if (!h->added_special[i]) continue;
            h->added[k++] = i;
            h->first_byte[(uint8_t)t->pool[t->off[i]]] = 1;
            size_t n = t->off[i + 1] - t->off[i];
            int seen = 0;
            for (int j = 0; j < h->n_added_lens; j++) seen |= h->added_lens[j] == n;
            if (!seen) h->added_lens[h->n_added_lens++] = n;
        }
        qsort(h->added_lens, (size_t)h->n_added_lens, sizeof *h->added_lens, cmp_size_desc);
    }
    size_t dtotal = 0;
    t->dec_off[0] = 0;
    for (int i = 0; i < nv; i++) {
        dtotal += decode_token(b, i, NULL);
        t->dec_off[i + 1] = dtotal;
    }
    if (!(t->dec = ds_malloc(dtotal ? dtotal : 1))) return ds_fail(DS_ERR_NOMEM, "%s: out of memory", b->path);
    for (int i = 0; i < nv; i++) decode_token(b, i, t->dec + t->dec_off[i]);
    for (int x = 0; x < 256; x++) t->byte_tok[x] = h->byte_fallback ? h->byte_tok[x] : -1;
    return DS_OK;
}

// The model's vocabulary and pieces, then the normalizer, pre-tokenizer, post-processor, decoder,
// merges, the tables built from them, and tokenizer_config.json (cfg) when given.
static ds_status build(builder *b, const cJSON *root, const cJSON *cfg) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    int nv = 0;
    ds_status st;
    if ((st = check_model(b->path, model, vocab, merges)) || (st = vocab_size(b->path, vocab, added, &nv)) ||
        (st = alloc_tokenizer(b, nv)) || (st = read_pieces(b, model, vocab, added)) || (st = build_pool(b, model)) ||
        (st = parse_normalizer(b, cJSON_GetObjectItemCaseSensitive(root, "normalizer"))) ||
        (st = parse_pretok(b, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"))) ||
        (st = parse_post(b, cJSON_GetObjectItemCaseSensitive(root, "post_processor"))) ||
        (st = parse_decoder(b, cJSON_GetObjectItemCaseSensitive(root, "decoder"))) || (st = parse_merges(b, merges)) ||
        (st = build_tables(b)))
        return st;
    if (cfg && (st = read_config(b, cfg))) return st;
    if (!cfg) b->t->chat_format = DS_CHAT_PLAIN;
    return DS_OK;
}

ds_status ds_tokenizer_from_json(const char *json_path, const cJSON *root, const cJSON *cfg, ds_tokenizer **out) {
    builder b = {.path = json_path};
    *out = NULL;
    memset(b.cp2byte, 0xff, sizeof b.cp2byte);
    for (int x = 0; x < 256; x++) b.cp2byte[byte_to_cp(x)] = (int16_t)x;
    if (!cJSON_IsObject(root)) return ds_fail(DS_ERR_FORMAT, "%s: not a JSON object", json_path);
    ds_status st = build(&b, root, cfg);
    free(b.piece);
    if (st) {
        ds_tokenizer_free(b.t);
        return st;
    }
    *out = b.t;
    return DS_OK;
}

const char *ds_hf_special_text(const ds_tokenizer *t, int32_t id, size_t *n) {
    if (!t || t->kind != DS_TOK_HF || id < 0 || id >= t->n_vocab || t->types[id] != DS_TOKTYPE_CONTROL) return NULL;
    *n = t->off[id + 1] - t->off[id];
    return t->pool + t->off[id];
}

int ds_hf_cleanup_spaces(const ds_tokenizer *t) { return t && t->kind == DS_TOK_HF && t->hf->cleanup; }
