// ds_tok_dump TOKENIZER IN.json: load a tokenizer once (ds_tokenizer_load) and, for the request
// {"texts_hex": [hex bytes, ...], "decode": [[ids], ...], "chat": [[{"role","content"}...], ...]}
// print one JSON object:
//   "encode":           ids with the configured special tokens (ds_tokenize_ex ADD|PARSE), or the
//                       error message string for texts the tokenizer refuses (invalid UTF-8)
//   "encode_nospecial": ids without added special tokens (PARSE only)
//   "decode", "decode_skip": ds_detokenize of each "decode" list, with / without special tokens
//   "stream":           the "decode" ids pushed one at a time through ds_detok (+ flush), joined
//   "stream_chunks_valid": whether every chunk ds_detok gave was valid UTF-8 on its own
//   "chat":             ds_chat_render(add_generation_prompt = 1) of each conversation
//   "format", "eot", "bos", "eos", "load_ms"
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dspark.h"
#include "tokenizer/utf8.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static cJSON *ids_json(const int32_t *ids, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    return a;
}

static cJSON *encode(const ds_tokenizer *t, const char *s, size_t n, unsigned flags) {
    int cnt = 0;
    if (ds_tokenize_ex(t, s, n, flags, NULL, 0, &cnt)) return cJSON_CreateString(ds_last_error());
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(cnt + 1));
    if (ds_tokenize_ex(t, s, n, flags, ids, cnt, &cnt)) {
        free(ids);
        return cJSON_CreateString(ds_last_error());
    }
    cJSON *a = ids_json(ids, cnt);
    free(ids);
    return a;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: ds_tok_dump TOKENIZER IN.json\n");
        return 2;
    }
    double t0 = now_ms();
    ds_tokenizer *t;
    if (ds_tokenizer_load(argv[1], &t)) {
        fprintf(stderr, "ds_tok_dump: %s\n", ds_last_error());
        return 1;
    }
    double load_ms = now_ms() - t0;
    FILE *f = fopen(argv[2], "rb");
    if (!f) return perror(argv[2]), 1;
    fseek(f, 0, SEEK_END);
    long fl = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)fl + 1);
    if (fread(buf, 1, (size_t)fl, f) != (size_t)fl) return fprintf(stderr, "ds_tok_dump: short read\n"), 1;
    buf[fl] = 0;
    fclose(f);
    cJSON *in = cJSON_Parse(buf);
    free(buf);
    if (!in) return fprintf(stderr, "ds_tok_dump: bad JSON\n"), 1;

    cJSON *out = cJSON_CreateObject();
    cJSON_AddNumberToObject(out, "load_ms", load_ms);
    cJSON_AddStringToObject(out, "format", ds_chat_format_name(t));
    cJSON_AddNumberToObject(out, "eot", ds_chat_eot(t));
    cJSON_AddNumberToObject(out, "bos", ds_tokenizer_bos(t));
    cJSON_AddNumberToObject(out, "eos", ds_tokenizer_eos(t));
    cJSON *enc = cJSON_AddArrayToObject(out, "encode"), *encn = cJSON_AddArrayToObject(out, "encode_nospecial");
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(in, "texts_hex")) {
        const char *h = it->valuestring;
        size_t n = strlen(h) / 2;
        char *s = malloc(n + 1);
        for (size_t i = 0; i < n; i++) {
            unsigned v;
            sscanf(h + 2 * i, "%2x", &v);
            s[i] = (char)v;
        }
        cJSON_AddItemToArray(enc, encode(t, s, n, DS_TOK_ADD_SPECIAL | DS_TOK_PARSE_SPECIAL));
        cJSON_AddItemToArray(encn, encode(t, s, n, DS_TOK_PARSE_SPECIAL));
        free(s);
    }
    cJSON *dec = cJSON_AddArrayToObject(out, "decode"), *decs = cJSON_AddArrayToObject(out, "decode_skip");
    cJSON *str = cJSON_AddArrayToObject(out, "stream");
    int chunks_valid = 1;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(in, "decode")) {
        int n = cJSON_GetArraySize(it), k = 0;
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n + 1));
        const cJSON *x;
        cJSON_ArrayForEach(x, it) ids[k++] = (int32_t)x->valuedouble;
        char *s;
        ds_detokenize(t, ids, n, 0, &s, NULL);
        cJSON_AddItemToArray(dec, cJSON_CreateString(s));
        free(s);
        ds_detokenize(t, ids, n, 1, &s, NULL);
        cJSON_AddItemToArray(decs, cJSON_CreateString(s));
        free(s);
        // Streaming: one id at a time through ds_detok.
        size_t cap = 64, len = 0;
        char *acc = malloc(cap), piece[64];
        ds_detok d;
        ds_detok_init(&d, t, 0);
        for (int i = 0; i <= n; i++) {
            char *b = piece;
            int m = i < n ? ds_detok_push(&d, ids[i], piece, sizeof piece) : ds_detok_flush(&d, piece, sizeof piece);
            if (m < 0) {
                b = malloc((size_t)-m);
                m = ds_detok_push(&d, ids[i], b, -m);
            }
            if (!ds_utf8_valid((const uint8_t *)b, (size_t)m, NULL)) chunks_valid = 0;
            while (len + (size_t)m + 1 > cap) acc = realloc(acc, cap *= 2);
            memcpy(acc + len, b, (size_t)m);
            len += (size_t)m;
            if (b != piece) free(b);
        }
        acc[len] = 0;
        cJSON_AddItemToArray(str, cJSON_CreateString(acc));
        free(acc);
        free(ids);
    }
    cJSON_AddBoolToObject(out, "stream_chunks_valid", chunks_valid);
    cJSON *chat = cJSON_AddArrayToObject(out, "chat");
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(in, "chat")) {
        int n = cJSON_GetArraySize(it), k = 0;
        ds_chat_message *m = calloc((size_t)n + 1, sizeof *m);
        const cJSON *x;
        cJSON_ArrayForEach(x, it) {
            m[k].role = cJSON_GetObjectItem(x, "role")->valuestring;
            m[k].content = cJSON_GetObjectItem(x, "content")->valuestring;
            k++;
        }
        char *s;
        if (ds_chat_render(t, m, n, 1, &s)) cJSON_AddItemToArray(chat, cJSON_CreateString(ds_last_error()));
        else cJSON_AddItemToArray(chat, cJSON_CreateString(s)), free(s);
        free(m);
    }
    char *s = cJSON_PrintUnformatted(out);
    puts(s);
    free(s);
    cJSON_Delete(out);
    cJSON_Delete(in);
    ds_tokenizer_free(t);
    return 0;
}
