// Mixture-of-experts targets: decode against the bound from the bytes actually read, and what a
// verification of k rows costs against one decode step, with the distinct experts it reads.
//
//   bench_moe (--model DIR | --synthetic DIR [--preset qwen3-30b-a3b] [--layers N] [--vocab V]
//             [--dtype f32|bf16] [--experts E] [--top-k K] [--moe-ffn F] [shape options])
//             [--write-only] [-n TOKENS] [--repeats R] [--kmax 16] [--threads T]
//
// --synthetic writes a random-weight Qwen3-MoE (bench_util.h bench_make_synthetic_moe, streamed:
// bounded memory) unless DIR holds one; --preset qwen3-30b-a3b takes Qwen3-30B-A3B's shape (a later
// --layers / --vocab reduce it); --write-only stops there. Quantize it with `dspark quantize
// --target` and pass the result with --model to measure the 4-bit model.
//
// Lines (JSON):
//   "moe_decode": greedy decode tok/s (median of R runs of N steps after an 8-token prompt) and the
//     bound = read bandwidth (measured in this run) / bytes one step reads (ds_model_info
//     weight_bytes: the dense weights, one embedding row, and top_k experts per MoE layer; the
//     distinct experts measured per MoE layer pass, which a decode step must equal top_k, is
//     printed beside it);
//   "moe_verify" for k = 1..kmax: the median time of one forward of k new rows after 64 rows of
//     context (a verification of k - 1 drafts) over the decode step's (k = 1), interleaved
//     (every repeat runs k = 1..kmax once), with the distinct experts per MoE layer pass the
//     forwards read (real routing over random token ids) and the ratio of bytes read,
//     bytes(k) / bytes(1) = (dense + d(k)·expert) / (dense + top_k·expert): what a purely
//     memory-bound forward would cost.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "dspark.h"
#include "model/model.h"

int main(int argc, char **argv) {
    bench_openblas_reexec(argv);
    const char *model = NULL, *synth = NULL;
    bench_moe_shape ms = bench_moe_qwen3_30b_a3b();
    ms.s.layers = 4;
    ms.s.vocab = 32000;
    int n = 32, repeats = 5, kmax = 16, threads = 1, write_only = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(o, "--write-only")) {
            write_only = 1;
            continue;
        }
        i++;
        if (!strcmp(o, "--preset") && !strcmp(v, "qwen3-30b-a3b")) ms = bench_moe_qwen3_30b_a3b();
        else if (bench_model_option(o, v, &ms.s, &model, &synth)) continue;
        else if (!strcmp(o, "--experts")) ms.experts = atoi(v);
        else if (!strcmp(o, "--top-k")) ms.top_k = atoi(v);
        else if (!strcmp(o, "--moe-ffn")) ms.moe_ffn = atoi(v);
        else if (!strcmp(o, "-n")) n = atoi(v);
        else if (!strcmp(o, "--repeats")) repeats = atoi(v);
        else if (!strcmp(o, "--kmax")) kmax = atoi(v);
        else if (!strcmp(o, "--threads")) threads = atoi(v);
        else {
            fprintf(stderr, "bench_moe: unknown option %s\n", o);
            return 2;
        }
    }
    if (synth) {
        if (bench_make_synthetic_moe(synth, &ms)) return 1;
        if (write_only) return 0;
        model = synth;
    }
    if (!model || n < 1 || repeats < 1 || kmax < 1 || kmax > 64) {
        fprintf(stderr, "usage: bench_moe (--model DIR | --synthetic DIR [shape options]) [-n N] [--kmax 16]\n");
        return 2;
    }
    ds_set_threads(threads);
    ds_model *m;
    if (ds_model_load(model, NULL, &m)) {
        fprintf(stderr, "bench_moe: %s\n", ds_last_error());
        return 1;
    }
    const ds_model_info *in = ds_model_get_info(m);
    if (!in->moe_layers) {
        fprintf(stderr, "bench_moe: %s is not a mixture-of-experts model\n", model);
        return 1;
    }
    const double expert_all = (double)in->moe_layers * in->top_k_experts * (double)in->expert_bytes;
    const double dense = (double)in->weight_bytes - expert_all; // what a step reads besides its experts

    // decode
    const double bw = bench_read_bandwidth(threads);
    const double tps = bench_decode_tps(m, n, repeats);
    ds_kv *kv;
    ds_workspace *ws;
    const int ctx = 64;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(ctx + kmax));
    float *logits = malloc(sizeof(float) * (size_t)in->vocab_size * (size_t)kmax);
    double *t = malloc(sizeof(double) * (size_t)repeats * (size_t)(kmax + 1));
    double *dist = calloc((size_t)kmax + 1, sizeof(double));
    if (!tok || !logits || !t || !dist || ds_kv_init(m, ctx + kmax + 1, &kv) || ds_workspace_init(m, &ws)) {
        fprintf(stderr, "bench_moe: out of memory\n");
        return 1;
    }
    for (int i = 0; i < ctx + kmax; i++) tok[i] = (int32_t)((bench_frand() * 0.5f + 0.5f) * (float)(in->vocab_size - 1));
    ds_forward_seq pf = {.kv = kv, .tokens = tok, .n_tokens = ctx, .n_logits = 1, .logits = logits};
    ds_model_forward(m, ws, &pf, 1);
    for (int r = 0; r < repeats; r++)
        for (int k = 1; k <= kmax; k++) {
            ds_forward_seq s = {.kv = kv, .tokens = tok + ctx, .n_tokens = k, .n_logits = k, .logits = logits};
            // different rows each repeat: the routing (and its distinct experts) varies
            for (int i = 0; i < k; i++) tok[ctx + i] = (int32_t)((bench_frand() * 0.5f + 0.5f) * (float)(in->vocab_size - 1));
            const double t0 = bench_now();
            ds_model_forward(m, ws, &s, 1);
            t[(size_t)k * repeats + r] = bench_now() - t0;
            dist[k] += ds_workspace_last_experts(ws) / repeats;
            ds_kv_truncate(kv, ctx);
        }
    double med[65];
    for (int k = 1; k <= kmax; k++) {
        qsort(t + (size_t)k * repeats, (size_t)repeats, sizeof(double), bench_cmp_double);
        med[k] = t[(size_t)k * repeats + repeats / 2];
    }
    printf("{\"bench\": \"moe_decode\", \"model\": \"%s\", \"weights\": \"%s\", \"weight_bytes\": %zu, \"moe_layers\": %d, "
           "\"experts\": %d, \"top_k\": %d, \"expert_bytes\": %zu, \"threads\": %d, \"tokens\": %d, \"tok_per_s\": %.2f, "
           "\"read_gb_per_s\": %.2f, \"bound_tok_per_s\": %.2f, \"fraction_of_bound\": %.3f, "
           "\"decode_distinct_experts\": %.2f}\n",
           in->name, ds_dtype_name(in->weight_type), in->weight_bytes, in->moe_layers, in->n_experts, in->top_k_experts,
           in->expert_bytes, threads, n, tps, bw / 1e9, bw / (double)in->weight_bytes, tps * (double)in->weight_bytes / bw,
           dist[1]);
    for (int k = 1; k <= kmax; k++) {
        const double bytes = dense + (double)in->moe_layers * dist[k] * (double)in->expert_bytes;
        printf("{\"bench\": \"moe_verify\", \"model\": \"%s\", \"k\": %d, \"ms\": %.3f, \"min_ms\": %.3f, \"max_ms\": %.3f, "
               "\"verify_over_decode\": %.3f, \"distinct_experts\": %.2f, \"bytes_ratio\": %.3f}\n",
               in->name, k, 1e3 * med[k], 1e3 * t[(size_t)k * repeats], 1e3 * t[(size_t)k * repeats + repeats - 1],
               med[k] / med[1], dist[k], bytes / (dense + expert_all));
    }
    ds_kv_free(kv);
    ds_workspace_free(ws);
    free(tok), free(logits), free(t), free(dist);
    ds_model_free(m);
    return 0;
}
