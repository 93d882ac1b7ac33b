// ds_tokenizer_load: a tokenizer on its own (tokenizer.json file, a directory holding one, or the
// SentencePiece vocabulary of a GGUF file), and ds_detokenize (whole-sequence decode).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/status.h"
#include "io/gguf.h"
#include "tokenizer/hf_internal.h"
#include "tokenizer/tokenizer.h"

static int is_file(const char *p) {
    struct stat s;
    return stat(p, &s) == 0 && S_ISREG(s.st_mode);
}

// tokenizer.ggml.* (model "llama") as load_gguf.c reads it for a model.
static ds_status load_gguf_tok(const char *path, ds_tokenizer **out) {
    ds_gguf g;
    ds_status st = ds_gguf_open(&g, path);
    if (st) return st;
    char model[32] = "";
    const ds_gguf_kv *toks = ds_gguf_find_kv(&g, "tokenizer.ggml.tokens");
    const ds_gguf_kv *scores = ds_gguf_find_kv(&g, "tokenizer.ggml.scores");
    const ds_gguf_kv *types = ds_gguf_find_kv(&g, "tokenizer.ggml.token_type");
    const char **pieces = NULL;
    size_t *lens = NULL;
    float *sc = NULL;
    int32_t *ty = NULL;
    if (!ds_gguf_find_kv(&g, "tokenizer.ggml.model") || (st = ds_gguf_get_str(&g, "tokenizer.ggml.model", model, sizeof model))) {
        if (!st) st = ds_fail(DS_ERR_FORMAT, "%s: no tokenizer", path);
        goto done;
    }
    if (strcmp(model, "llama") != 0) {
        st = ds_fail(DS_ERR_UNSUPPORTED, "%s: GGUF tokenizer model '%s' is not supported (only llama/SentencePiece)", path, model);
        goto done;
    }
    if (!toks || toks->type != DS_GGUF_ARRAY || toks->arr_type != DS_GGUF_STRING || toks->arr_n == 0 || toks->arr_n > (1u << 24) ||
        (scores && (scores->type != DS_GGUF_ARRAY || scores->arr_n != toks->arr_n || scores->arr_type == DS_GGUF_STRING ||
                    scores->arr_type == DS_GGUF_ARRAY)) ||
        (types && (types->type != DS_GGUF_ARRAY || types->arr_n != toks->arr_n || types->arr_type == DS_GGUF_STRING ||
                   types->arr_type == DS_GGUF_ARRAY))) {
        st = ds_fail(DS_ERR_FORMAT, "%s: tokenizer.ggml.tokens/scores/token_type are missing or inconsistent", path);
        goto done;
    }
    int64_t bos, eos, unk;
    int space;
    if ((st = ds_gguf_get_int_or(&g, "tokenizer.ggml.bos_token_id", -1, &bos)) ||
        (st = ds_gguf_get_int_or(&g, "tokenizer.ggml.eos_token_id", -1, &eos)) ||
        (st = ds_gguf_get_int_or(&g, "tokenizer.ggml.unknown_token_id", -1, &unk)) ||
        (st = ds_gguf_get_bool_or(&g, "tokenizer.ggml.add_space_prefix", 1, &space)))
        goto done;
    const uint64_t n = toks->arr_n;
    pieces = malloc(n * sizeof *pieces), lens = malloc(n * sizeof *lens), sc = malloc(n * sizeof *sc), ty = malloc(n * sizeof *ty);
    if (!pieces || !lens || !sc || !ty) {
        st = ds_fail(DS_ERR_NOMEM, "%s: out of memory reading the tokenizer", path);
        goto done;
    }
    for (uint64_t i = 0; i < n; i++) {
        pieces[i] = toks->arr_strs[i].ptr;
        lens[i] = (size_t)toks->arr_strs[i].len;
        sc[i] = scores ? (float)ds_gguf_arr_f64(scores, i) : 0.0f;
        ty[i] = types ? (int32_t)ds_gguf_arr_i64(types, i) : 0;
    }
    st = ds_tokenizer_init_spm((int)n, pieces, lens, sc, types ? ty : NULL, (int)bos, (int)eos, (int)unk, space, out);
    if (st) ds_fail_prefix(st, "%s", path);
done:
    free(pieces);
    free(lens);
    free(sc);
    free(ty);
    ds_gguf_close(&g);
    return st;
}

ds_status ds_tokenizer_load(const char *path, ds_tokenizer **out) {
    if (!out) return ds_fail(DS_ERR_INVALID, "tokenizer: NULL output pointer");
    *out = NULL;
    if (!path) return ds_fail(DS_ERR_INVALID, "tokenizer: NULL path");
    struct stat s;
    if (stat(path, &s) != 0) return ds_fail(DS_ERR_IO, "%s: no such file or directory", path);
    size_t pl = strlen(path);
    char *json = malloc(pl + 32), *cfg = malloc(pl + 32);
    ds_status st;
    if (!json || !cfg) {
        st = ds_fail(DS_ERR_NOMEM, "tokenizer: out of memory");
        goto done;
    }
    if (S_ISDIR(s.st_mode)) {
        snprintf(json, pl + 32, "%s/tokenizer.json", path);
        snprintf(cfg, pl + 32, "%s/tokenizer_config.json", path);
        if (!is_file(json)) {
            st = ds_fail(DS_ERR_IO, "%s: no tokenizer.json in this directory", path);
            goto done;
        }
    } else {
        char magic[4] = {0};
        FILE *f = fopen(path, "rb");
        if (!f) {
            st = ds_fail(DS_ERR_IO, "%s: cannot open", path);
            goto done;
        }
        size_t got = fread(magic, 1, 4, f);
        fclose(f);
        if (got == 4 && memcmp(magic, "GGUF", 4) == 0) {
            st = load_gguf_tok(path, out);
            goto done;
        }
        strcpy(json, path);
        const char *slash = strrchr(path, '/');
        size_t dl = slash ? (size_t)(slash - path) + 1 : 0;
        memcpy(cfg, path, dl);
        strcpy(cfg + dl, "tokenizer_config.json");
    }
    st = ds_tokenizer_load_hf(json, is_file(cfg) ? cfg : NULL, out);
done:
    free(json);
    free(cfg);
    return st;
}

// transformers' clean_up_tokenization: " ." -> "." and friends, in this order.
static size_t cleanup(char *s, size_t n) {
    static const char *const from[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " 's", " 've", " 're"};
    static const char *const to[] = {".", "?", "!", ",", "'", "n't", "'m", "'s", "'ve", "'re"};
    for (int k = 0; k < 10; k++) {
        size_t fl = strlen(from[k]), tl = strlen(to[k]), o = 0;
        for (size_t i = 0; i < n;) {
            if (n - i >= fl && memcmp(s + i, from[k], fl) == 0) {
                memmove(s + o, to[k], tl);
                o += tl, i += fl;
            } else {
                s[o++] = s[i++];
            }
        }
        n = o;
    }
    return n;
}

ds_status ds_detokenize(const ds_tokenizer *t, const int32_t *ids, int n, int skip_special, char **out, size_t *n_out) {
    if (!out) return ds_fail(DS_ERR_INVALID, "detokenize: NULL output");
    *out = NULL;
    if (!t || n < 0 || (n > 0 && !ids)) return ds_fail(DS_ERR_INVALID, "detokenize: bad arguments");
    size_t total = 8;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab) return ds_fail(DS_ERR_INVALID, "detokenize: id %d is out of range (vocabulary of %d)", ids[i], t->n_vocab);
        size_t m;
        total += t->off[ids[i] + 1] - t->off[ids[i]];
        ds_tok_decoded(t, ids[i], &m);
        total += m;
    }
    // Every byte may become U+FFFD (3 bytes).
    char *s = malloc(3 * total + 8);
    if (!s) return ds_fail(DS_ERR_NOMEM, "detokenize: out of memory");
    ds_detok d;
    ds_detok_init(&d, t, t->kind == DS_TOK_SPM ? 1 : t->hf->strip_start);
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        size_t m;
        const char *sp = skip_special ? NULL : ds_hf_special_text(t, ids[i], &m);
        if (sp) { // special tokens are whole characters: flush what is pending, then the text
            int r = ds_detok_flush(&d, s + o, 8);
            o += (size_t)(r > 0 ? r : 0);
            memcpy(s + o, sp, m);
            o += m;
            continue;
        }
        int r = ds_detok_push(&d, ids[i], s + o, (int)(3 * total + 8 - o));
        o += (size_t)(r > 0 ? r : 0);
    }
    int r = ds_detok_flush(&d, s + o, 8);
    o += (size_t)(r > 0 ? r : 0);
    if (ds_hf_cleanup_spaces(t)) o = cleanup(s, o);
    s[o] = 0;
    *out = s;
    if (n_out) *n_out = o;
    return DS_OK;
}
