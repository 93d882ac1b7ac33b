// ds_tokenizer_load: a tokenizer on its own (tokenizer.json file, a directory holding one, or the
// tokenizer of a GGUF file), and ds_detokenize (whole-sequence decode).
// GGUF tokenizer.ggml.model, as llama.cpp reads it:
//   "llama"  SentencePiece (spm.c);
//   "gpt2"   byte-level BPE with the pre-tokenizer named by tokenizer.ggml.pre (llama-bpe, qwen2,
//            gpt-2), rebuilt as the tokenizer.json it came from and loaded by hf_load.c;
//   "gemma4" Gemma 4's BPE over raw UTF-8 (llama.cpp's pre-type GEMMA4): spaces escaped as "▁",
//            split into runs of non-newlines and runs of newlines, merges by rank, a newline run
//            that is a token taken whole, "<0xXX>" byte fallback, BOS always; also rebuilt as a
//            tokenizer.json (Replace, Split, BPE with byte_fallback) plus the newline-run rule.
// Anything else is refused by name.
#include <cjson/cJSON.h>
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

// Pre-tokenizer regexes of llama.cpp's tokenizer.ggml.pre names (the tokenizer.json originals).
static const char k_re_llama3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char k_re_qwen2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// llama.cpp's GEMMA4 pre-type: runs of non-newlines and runs of newlines, on raw UTF-8.
static const char k_re_gemma4[] = "[^\\n]+|[\\n]+";

// The texts llama.cpp makes end-of-generation tokens (llama-vocab.cpp at upstream 9cd719af2), and
// so control tokens whatever their stored type (that override is applied to "gemma4" vocabularies
// here; "</s>" goes back to a normal token when "<|tool_response>" is there, its Gemma 4 workaround).
static const char *const k_eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~["};

int ds_tok_is_eog_text(const char *s, size_t n) {
    for (size_t k = 0; k < sizeof k_eog_texts / sizeof *k_eog_texts; k++)
        if (n == strlen(k_eog_texts[k]) && memcmp(s, k_eog_texts[k], n) == 0) return 1;
    return 0;
}

static cJSON *str_n(const ds_gguf_str *s) {
    char *c = malloc(s->len + 1);
    if (!c) return NULL;
    memcpy(c, s->ptr, s->len);
    c[s->len] = 0;
    cJSON *j = cJSON_CreateString(c);
    free(c);
    return j;
}

// The token, merge and token-type arrays are there and of matching types and lengths.
static ds_status bpe_check_arrays(const char *path, const ds_gguf_kv *toks, const ds_gguf_kv *merges,
                                  const ds_gguf_kv *types) {
    if (!toks || toks->type != DS_GGUF_ARRAY || toks->arr_type != DS_GGUF_STRING || toks->arr_n == 0 || toks->arr_n > (1u << 24) ||
        !merges || merges->type != DS_GGUF_ARRAY || merges->arr_type != DS_GGUF_STRING ||
        (types && (types->type != DS_GGUF_ARRAY || types->arr_n != toks->arr_n || types->arr_type == DS_GGUF_STRING ||
                   types->arr_type == DS_GGUF_ARRAY)))
        return ds_fail(DS_ERR_FORMAT, "%s: tokenizer.ggml.tokens/merges/token_type are missing or inconsistent", path);
    return DS_OK;
}

// tokenizer.ggml.pre: the split regex (NULL: ByteLevel's own), NFC and ignore_merges it implies.
static ds_status bpe_read_pre(const char *path, const ds_gguf *g, const char **re, int *nfc, int *ignore_merges) {
    char pre[64] = "default";
    ds_status st;
    if (ds_gguf_find_kv(g, "tokenizer.ggml.pre") && (st = ds_gguf_get_str(g, "tokenizer.ggml.pre", pre, sizeof pre))) return st;
    *re = NULL;
    *nfc = *ignore_merges = 0;
    if (!strcmp(pre, "llama-bpe") || !strcmp(pre, "llama3") || !strcmp(pre, "llama-v3")) *re = k_re_llama3, *ignore_merges = 1;
    else if (!strcmp(pre, "qwen2") || !strcmp(pre, "deepseek-r1-qwen")) *re = k_re_qwen2, *nfc = 1;
    else if (strcmp(pre, "default") && strcmp(pre, "gpt-2") && strcmp(pre, "gpt2"))
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: BPE pre-tokenizer '%s' is not supported (llama-bpe, qwen2, gpt-2)", path, pre);
    return DS_OK;
}

static int str_is(const ds_gguf_str *s, const char *c) { return s->len == strlen(c) && memcmp(s->ptr, c, s->len) == 0; }

// The type llama.cpp gives token i of a "gemma4" vocabulary: the stored one, unknown (2) as
// control, and the k_eog_texts overrides.
static int gemma4_type(const ds_gguf_kv *toks, uint64_t i, int ty, int has_tool_response) {
    const ds_gguf_str *s = &toks->arr_strs[i];
    if (has_tool_response && str_is(s, "</s>")) return 1;
    if (ds_tok_is_eog_text(s->ptr, (size_t)s->len)) return 3;
    return ty == 2 ? 3 : ty;
}

// tokenizer.json's model (vocab, merges) and added_tokens; returns 1 when out of memory. Control
// tokens (type 3) become special added tokens, user-defined ones (4) added tokens; gemma4: byte
// fallback and gemma4_type.
static int bpe_json_model(cJSON *root, const ds_gguf_kv *toks, const ds_gguf_kv *merges, const ds_gguf_kv *types,
                          int ignore_merges, int gemma4) {
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddBoolToObject(model, "ignore_merges", ignore_merges);
    if (gemma4) cJSON_AddBoolToObject(model, "byte_fallback", 1);
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab"), *mj = cJSON_AddArrayToObject(model, "merges");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    if (!model || !vocab || !mj || !added) return 1;
    int has_tool_response = 0;
    for (uint64_t i = 0; gemma4 && i < toks->arr_n; i++) has_tool_response |= str_is(&toks->arr_strs[i], "<|tool_response>");
    for (uint64_t i = 0; i < toks->arr_n; i++) {
        cJSON *name = str_n(&toks->arr_strs[i]);
        int ty = types ? (int)ds_gguf_arr_i64(types, i) : 1;
        if (gemma4) ty = gemma4_type(toks, i, ty, has_tool_response);
        if (!name) return 1;
        if (ty == 3 || ty == 4) {
            cJSON *a = cJSON_CreateObject();
            cJSON_AddNumberToObject(a, "id", (double)i);
            cJSON_AddStringToObject(a, "content", name->valuestring);
            cJSON_AddBoolToObject(a, "special", ty == 3);
            cJSON_AddItemToArray(added, a);
        }
        // (a duplicated token text is caught by the vocabulary index: "pieces i and j are both ...")
        cJSON_AddItemToObject(vocab, name->valuestring, cJSON_CreateNumber((double)i));
        cJSON_Delete(name);
    }
    for (uint64_t i = 0; i < merges->arr_n; i++) {
        cJSON *m = str_n(&merges->arr_strs[i]);
        if (!m) return 1;
        cJSON_AddItemToArray(mj, m);
    }
    return 0;
}

// tokenizer.json's normalizer (NFC or none), pre-tokenizer (the split regex, then ByteLevel) and decoder.
static void bpe_json_pre_tokenizer(cJSON *root, const char *re, int nfc) {
    if (nfc) cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "normalizer"), "type", "NFC");
    cJSON *pt = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pt, "type", "Sequence");
    cJSON *pts = cJSON_AddArrayToObject(pt, "pretokenizers");
    if (re) {
        cJSON *sp = cJSON_CreateObject();
        cJSON_AddStringToObject(sp, "type", "Split");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(sp, "pattern"), "Regex", re);
        cJSON_AddStringToObject(sp, "behavior", "Isolated");
        cJSON_AddItemToArray(pts, sp);
    }
    cJSON *bl = cJSON_CreateObject();
    cJSON_AddStringToObject(bl, "type", "ByteLevel");
    cJSON_AddBoolToObject(bl, "use_regex", re == NULL);
    cJSON_AddItemToArray(pts, bl);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "decoder"), "type", "ByteLevel");
}

// Gemma 4's: " " -> "▁", the newline split (no ByteLevel), and a decoder turning "▁" back into
// spaces and "<0xXX>" tokens into their bytes.
static void bpe_json_gemma4(cJSON *root) {
    cJSON *n = cJSON_AddObjectToObject(root, "normalizer");
    cJSON_AddStringToObject(n, "type", "Replace");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(n, "pattern"), "String", " ");
    cJSON_AddStringToObject(n, "content", "▁");
    cJSON *pt = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pt, "type", "Split");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(pt, "pattern"), "Regex", k_re_gemma4);
    cJSON_AddStringToObject(pt, "behavior", "Isolated");
    cJSON *dec = cJSON_AddObjectToObject(root, "decoder");
    cJSON_AddStringToObject(dec, "type", "Sequence");
    cJSON *ds = cJSON_AddArrayToObject(dec, "decoders");
    cJSON *rep = cJSON_CreateObject(), *bf = cJSON_CreateObject();
    cJSON_AddStringToObject(rep, "type", "Replace");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(rep, "pattern"), "String", "▁");
    cJSON_AddStringToObject(rep, "content", " ");
    cJSON_AddStringToObject(bf, "type", "ByteFallback");
    cJSON_AddItemToArray(ds, rep);
    cJSON_AddItemToArray(ds, bf);
}

// One special token of a TemplateProcessing: its place in "single" and its ids.
static void template_special(cJSON *single, cJSON *specials, const char *name, int64_t id) {
    cJSON *it = cJSON_CreateObject();
    cJSON_AddStringToObject(cJSON_AddObjectToObject(it, "SpecialToken"), "id", name);
    cJSON_AddItemToArray(single, it);
    cJSON *ids = cJSON_AddArrayToObject(cJSON_AddObjectToObject(specials, name), "ids");
    cJSON_AddItemToArray(ids, cJSON_CreateNumber((double)id));
}

// tokenizer.json's post-processor: BOS before and/or EOS after every sequence (-1: none).
static void bpe_json_add_special(cJSON *root, int64_t bos, int64_t eos) {
    cJSON *pp = cJSON_AddObjectToObject(root, "post_processor");
    cJSON_AddStringToObject(pp, "type", "TemplateProcessing");
    cJSON *single = cJSON_AddArrayToObject(pp, "single"), *specials = cJSON_AddObjectToObject(pp, "special_tokens");
    if (bos >= 0) template_special(single, specials, "bos", bos);
    cJSON *a = cJSON_CreateObject();
    cJSON_AddStringToObject(cJSON_AddObjectToObject(a, "Sequence"), "id", "A");
    cJSON_AddItemToArray(single, a);
    if (eos >= 0) template_special(single, specials, "eos", eos);
}

// A GGUF BPE vocabulary rewritten as the tokenizer.json + tokenizer_config.json it came from, then
// loaded as one: tokens, merges, token types (3 = control -> special added token, 4 = user-defined
// -> added token), BOS when add_bos_token says so, tokenizer.chat_template; gpt2 (byte-level, as
// llama.cpp converts Qwen and Llama 3): the pre-tokenizer regex named by tokenizer.ggml.pre;
// gemma4: bpe_json_gemma4, BOS always (llama.cpp forces it), EOS when add_eos_token says so, the
// newline-run rule.
static ds_status load_gguf_bpe(const char *path, const ds_gguf *g, int gemma4, ds_tokenizer **out) {
    const ds_gguf_kv *toks = ds_gguf_find_kv(g, "tokenizer.ggml.tokens");
    const ds_gguf_kv *merges = ds_gguf_find_kv(g, "tokenizer.ggml.merges");
    const ds_gguf_kv *types = ds_gguf_find_kv(g, "tokenizer.ggml.token_type");
    const ds_gguf_kv *tmpl = ds_gguf_find_kv(g, "tokenizer.chat_template");
    ds_status st;
    if ((st = bpe_check_arrays(path, toks, merges, types))) return st;
    const char *re = NULL;
    int nfc = 0, ignore_merges = 0;
    if (!gemma4 && (st = bpe_read_pre(path, g, &re, &nfc, &ignore_merges))) return st;
    int64_t bos, eos;
    int add_bos, add_eos = 0;
    if ((st = ds_gguf_get_int_or(g, "tokenizer.ggml.bos_token_id", -1, &bos)) ||
        (st = ds_gguf_get_int_or(g, "tokenizer.ggml.eos_token_id", -1, &eos)) ||
        (st = ds_gguf_get_bool_or(g, "tokenizer.ggml.add_bos_token", 0, &add_bos)) ||
        (gemma4 && (st = ds_gguf_get_bool_or(g, "tokenizer.ggml.add_eos_token", 0, &add_eos))))
        return st;
    if (bos >= (int64_t)toks->arr_n || eos >= (int64_t)toks->arr_n)
        return ds_fail(DS_ERR_FORMAT, "%s: BOS/EOS id out of range", path);
    if (gemma4 && bos < 0) return ds_fail(DS_ERR_FORMAT, "%s: gemma4 tokenizer without tokenizer.ggml.bos_token_id", path);
    add_bos |= gemma4;

    cJSON *root = cJSON_CreateObject(), *cfg = cJSON_CreateObject();
    int oom = !root || !cfg || bpe_json_model(root, toks, merges, types, ignore_merges, gemma4);
    if (gemma4) bpe_json_gemma4(root);
    else bpe_json_pre_tokenizer(root, re, nfc);
    if ((add_bos && bos >= 0) || (add_eos && eos >= 0)) bpe_json_add_special(root, add_bos ? bos : -1, add_eos ? eos : -1);
    if (bos >= 0) cJSON_AddItemToObject(cfg, "bos_token", str_n(&toks->arr_strs[bos]));
    if (eos >= 0) cJSON_AddItemToObject(cfg, "eos_token", str_n(&toks->arr_strs[eos]));
    if (tmpl && tmpl->type == DS_GGUF_STRING) cJSON_AddItemToObject(cfg, "chat_template", str_n(&tmpl->v.s));
    cJSON_AddBoolToObject(cfg, "clean_up_tokenization_spaces", 0);
    st = oom ? ds_fail(DS_ERR_NOMEM, "%s: out of memory reading the tokenizer", path) : ds_tokenizer_from_json(path, root, cfg, out);
    if (!st && gemma4) (*out)->hf->newline_runs = 1;
    cJSON_Delete(root);
    cJSON_Delete(cfg);
    return st;
}

ds_status ds_tokenizer_load_gguf(const ds_gguf *g, ds_tokenizer **out) {
    const char *path = g->map.path;
    char model[32] = "";
    ds_status st;
    if (!ds_gguf_find_kv(g, "tokenizer.ggml.model")) return ds_fail(DS_ERR_FORMAT, "%s: no tokenizer", path);
    if ((st = ds_gguf_get_str(g, "tokenizer.ggml.model", model, sizeof model))) return st;
    if (!strcmp(model, "gpt2") || !strcmp(model, "gemma4")) return load_gguf_bpe(path, g, !strcmp(model, "gemma4"), out);
    if (strcmp(model, "llama") != 0)
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: GGUF tokenizer model '%s' is not supported (llama, gpt2, gemma4)", path, model);
    const ds_gguf_kv *toks = ds_gguf_find_kv(g, "tokenizer.ggml.tokens");
    const ds_gguf_kv *scores = ds_gguf_find_kv(g, "tokenizer.ggml.scores");
    const ds_gguf_kv *types = ds_gguf_find_kv(g, "tokenizer.ggml.token_type");
    if (!toks || toks->type != DS_GGUF_ARRAY || toks->arr_type != DS_GGUF_STRING || toks->arr_n == 0 || toks->arr_n > (1u << 24) ||
        (scores && (scores->type != DS_GGUF_ARRAY || scores->arr_n != toks->arr_n || scores->arr_type == DS_GGUF_STRING ||
                    scores->arr_type == DS_GGUF_ARRAY)) ||
        (types && (types->type != DS_GGUF_ARRAY || types->arr_n != toks->arr_n || types->arr_type == DS_GGUF_STRING ||
                   types->arr_type == DS_GGUF_ARRAY)))
        return ds_fail(DS_ERR_FORMAT, "%s: tokenizer.ggml.tokens/scores/token_type are missing or inconsistent", path);
    int64_t bos, eos, unk;
    int space;
    if ((st = ds_gguf_get_int_or(g, "tokenizer.ggml.bos_token_id", -1, &bos)) ||
        (st = ds_gguf_get_int_or(g, "tokenizer.ggml.eos_token_id", -1, &eos)) ||
        (st = ds_gguf_get_int_or(g, "tokenizer.ggml.unknown_token_id", -1, &unk)) ||
        (st = ds_gguf_get_bool_or(g, "tokenizer.ggml.add_space_prefix", 1, &space)))
        return st;
    const uint64_t n = toks->arr_n;
    const char **pieces = malloc(n * sizeof *pieces);
    size_t *lens = malloc(n * sizeof *lens);
    float *sc = malloc(n * sizeof *sc);
    int32_t *ty = malloc(n * sizeof *ty);
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
    return st;
}

static ds_status load_gguf_tok(const char *path, ds_tokenizer **out) {
    ds_gguf g;
    ds_status st = ds_gguf_open(&g, path);
    if (st) return st;
    st = ds_tokenizer_load_gguf(&g, out); // the tokenizer copies what it keeps
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
