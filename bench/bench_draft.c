// The cost of one drafting round against the target's decode step at a realistic shape.
//
//   bench_draft [--dim 4096 --ffn 12288 --heads 32 --kv-heads 8 --vocab 151936] (default: Qwen3-8B)
//               [--target-layers 5] [--full-layers 36] [--threads 1,2] [--repeats 5] [--ctx 128]
//               [--append 3] [--rs 1,4] [--drafters bf16,q8,q4] [--draft-vocab 0,32768] [--profile 0|1]
//               [--slots N]
//
// The drafter is what init-drafter writes for the target (5 layers, block 7, Markov rank 256,
// confidence head, bf16; quantized to 8 or 4 bits, group 64, by `quantize` for q8 / q4), with the
// target's hidden size, FFN and vocabulary. A 16 GB Qwen3-8B cannot be written and decoded here, so
// the target is a random-weight Qwen3 of that shape with --target-layers layers and its LM head, and
// its decode step is taken to the full depth two ways, both reported:
//   measured:  step(L) + (full - L) * layer,  layer = (step(L) - head) / L, head = the LM head
//              product (1 row per sequence) timed on its own;
//   bandwidth: weight bytes of the full-depth target per step / the read bandwidth measured in the
//              same repeat (best of 5 passes over 1 GiB: the bound a memory-bound step could reach).
// A drafting round is what the engine runs per round: the context projection of `--append` newly
// committed rows per sequence (ds_drafter_append) plus the block forward, LM head and Markov walk of
// every sequence (ds_drafter_draft_batch, all block slots, or --slots N of them: the block forward
// still runs every slot), for R sequences with --ctx context rows each; the decode step it is
// compared with is one plain decoding step of the same R sequences.
// Within a repeat every measurement is taken back to back (step, then each drafter), so each ratio
// comes from one repeat's pair; the lines give median, min and max over the repeats. The LM head
// term of the round is also timed alone (lm_head_ms); rest_ms = round - append - LM head (the block
// forward through the draft layers, norms and the Markov walk). --draft-vocab K > 0 restricts the drafter's
// LM head and Markov head to K token ids (ds_drafter_set_vocab; here the first K ids, which costs
// the same as any K).
// --profile 1 adds a "draft_profile" line per drafter: the round term by term, each term the same
// calls the round makes (ds_matmul on the drafter's weights at the round's row counts, the Markov
// walk's per-slot pieces), timed alone in the same repeat, next to its roofline max(bytes / read
// bandwidth, multiply-adds / f32 FMA peak), both measured in the run (bench_read_bandwidth,
// bench_fma_peak); "other" = round - the terms (attention, norms, RoPE, embedding rows, copies).
// Models go to build/bench-models/ (about 3.2 GB for the target, 4.7 GB for the bf16 drafter, 2.6 /
// 1.4 GB for q8 / q4); delete them when done.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench_util.h"
#include "draft/drafter.h"
#include "dspark.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "dspark_jobs.h"

#define MAX_R 16
#define MAX_REPEATS 64

static int g_nseq = 1;  // sequences set up (the largest R asked for)
static int g_slots = 0; // --slots: slots drafted per sequence (0 = the block)

// Slots a round drafts per sequence of drafter d.
static int round_slots(const ds_drafter *d) {
    return g_slots > 0 && g_slots < d->info.block_size ? g_slots : d->info.block_size;
}

typedef struct {
    double v[MAX_REPEATS];
    int n;
} series;

static void series_add(series *s, double x) {
    if (s->n < MAX_REPEATS) s->v[s->n++] = x;
}

// "name": {"median": .., "min": .., "max": ..}, scaled by k
static void series_print(const char *name, series *s, double k) {
    qsort(s->v, (size_t)s->n, sizeof(double), bench_cmp_double);
    printf(", \"%s\": {\"median\": %.4g, \"min\": %.4g, \"max\": %.4g}", name, s->v[s->n / 2] * k, s->v[0] * k,
           s->v[s->n - 1] * k);
}

// Bytes a decode step reads from one decoder layer of shape s (bf16 matrices, f32 norms).
static double layer_bytes(const bench_shape *s) {
    const double H = s->dim, qd = (double)s->heads * s->head_dim, kvd = (double)s->kv_heads * s->head_dim;
    return 2.0 * (H * qd * 2 + H * kvd * 2 + 3.0 * H * s->ffn) + 4.0 * (2 * H + 2 * s->head_dim);
}

// ---- the target's decode step --------------------------------------------------------------------

typedef struct {
    ds_model *m;
    ds_workspace *ws;
    ds_kv *kv[MAX_R];
    float *logits; // (MAX_R, vocab)
    float *x, *y;  // (MAX_R, dim), (MAX_R, vocab): the LM head product alone
    float *scratch;
    int ctx;
} target_bench;

static int target_open(target_bench *t, const char *dir, int ctx) {
    memset(t, 0, sizeof *t);
    if (ds_model_load(dir, NULL, &t->m) || ds_workspace_init(t->m, &t->ws)) return 1;
    const ds_model_info *in = ds_model_get_info(t->m);
    t->ctx = ctx;
    t->logits = malloc(sizeof(float) * MAX_R * (size_t)in->vocab_size);
    t->y = malloc(sizeof(float) * MAX_R * (size_t)in->vocab_size);
    t->x = malloc(sizeof(float) * MAX_R * (size_t)in->dim);
    t->scratch = malloc(sizeof(float) * (ds_matmul_scratch_floats(&t->m->output) + 16) * (size_t)omp_get_num_procs());
    for (int i = 0; i < MAX_R * in->dim; i++) t->x[i] = bench_frand();
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)ctx);
    for (int i = 0; i < ctx; i++) prompt[i] = (int32_t)((i * 7919 + 1) % in->vocab_size);
    for (int r = 0; r < g_nseq; r++) { // every sequence holds ctx rows
        if (ds_kv_init(t->m, ctx + 8, &t->kv[r])) return 1;
        ds_forward_seq s = {.kv = t->kv[r], .tokens = prompt, .n_tokens = ctx, .n_logits = 1, .logits = t->logits};
        if (ds_model_forward(t->m, t->ws, &s, 1)) return 1;
    }
    free(prompt);
    return 0;
}

static void target_close(target_bench *t) {
    for (int r = 0; r < MAX_R; r++) ds_kv_free(t->kv[r]);
    ds_workspace_free(t->ws);
    ds_model_free(t->m);
    free(t->logits);
    free(t->x);
    free(t->y);
    free(t->scratch);
}

// Seconds of one plain decoding step of R sequences (one new row each), rolled back after.
static double target_step(target_bench *t, int R) {
    ds_forward_seq s[MAX_R];
    int32_t tok[MAX_R];
    const int V = ds_model_get_info(t->m)->vocab_size;
    for (int r = 0; r < R; r++) {
        tok[r] = (int32_t)((r * 104729 + 17) % V);
        s[r] = (ds_forward_seq){.kv = t->kv[r], .tokens = &tok[r], .n_tokens = 1, .n_logits = 1,
                                .logits = t->logits + (size_t)r * V};
    }
    const double t0 = bench_now();
    ds_model_forward(t->m, t->ws, s, R);
    const double dt = bench_now() - t0;
    for (int r = 0; r < R; r++) ds_kv_truncate(t->kv[r], t->ctx);
    return dt;
}

// Seconds of the target's LM head product over R rows.
static double target_head(target_bench *t, int R) {
    const double t0 = bench_now();
    ds_matmul(t->y, t->x, &t->m->output, R, t->scratch);
    return bench_now() - t0;
}

// ---- the drafting round --------------------------------------------------------------------------

typedef struct {
    const char *name;
    ds_drafter *d;
    ds_draft_batch *batch;
    ds_draft_state *st[MAX_R];
    float *taps;          // (append, T * H) rows appended per sequence per round
    int32_t *tokens[MAX_R];
    float *logits[MAX_R]; // (block, V) each
    float *conf[MAX_R];
    float *h, *u, *scratch; // the LM head product alone: (MAX_R * block, H), (MAX_R * block, V)
    float *px, *py;         // --profile: inputs (MAX_R * block, max(T*H, F)) and outputs (.., max(F, qd))
    float *pscratch;        // --profile: scratch as forward.c sizes it (its largest weights)
    ds_rng rng[MAX_R];
    int ctx, append;
} draft_bench;

static int draft_open(draft_bench *b, const char *name, const char *dir, const ds_model *target, int ctx, int append) {
    memset(b, 0, sizeof *b);
    b->name = name;
    b->ctx = ctx;
    b->append = append;
    if (ds_drafter_load(dir, target, &b->d) || ds_draft_batch_init(b->d, &b->batch)) return 1;
    const ds_drafter *d = b->d;
    const int B = d->info.block_size, T = d->T, H = d->H, V = d->V;
    const int rows = ctx > append ? ctx : append;
    float *ctx_taps = malloc(sizeof(float) * (size_t)rows * T * H);
    for (size_t i = 0; i < (size_t)rows * T * H; i++) ctx_taps[i] = bench_frand();
    b->taps = malloc(sizeof(float) * (size_t)append * T * H);
    memcpy(b->taps, ctx_taps, sizeof(float) * (size_t)append * T * H);
    for (int r = 0; r < g_nseq; r++) {
        if (ds_draft_state_init(d, ctx + append + 8, &b->st[r]) || ds_drafter_append(d, b->st[r], ctx_taps, ctx))
            return 1;
        b->tokens[r] = malloc(sizeof(int32_t) * B);
        b->logits[r] = malloc(sizeof(float) * (size_t)B * V);
        b->conf[r] = malloc(sizeof(float) * B);
        b->rng[r] = ds_rng_init(1, (uint64_t)r);
    }
    free(ctx_taps);
    b->h = malloc(sizeof(float) * (size_t)MAX_R * B * H);
    b->u = malloc(sizeof(float) * (size_t)MAX_R * B * V);
    b->scratch = malloc(sizeof(float) * (ds_matmul_scratch_floats(&d->lm_head) + 16) * (size_t)omp_get_num_procs());
    for (size_t i = 0; i < (size_t)MAX_R * B * H; i++) b->h[i] = bench_frand();
    const size_t in = (size_t)(T * H > d->F ? T * H : d->F), qd = (size_t)d->nq * d->hd;
    const size_t outc = (size_t)d->F > qd ? (size_t)d->F : qd;
    b->px = malloc(sizeof(float) * (size_t)MAX_R * B * in);
    b->py = malloc(sizeof(float) * (size_t)MAX_R * B * outc);
    for (size_t i = 0; i < (size_t)MAX_R * B * in; i++) b->px[i] = bench_frand();
    size_t sc = 0;
    const ds_weight *ws[] = {&d->fc, &d->lm_head, &d->markov_w2, &d->layers[0].wq, &d->layers[0].w_gate,
                             &d->layers[0].w_down};
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++)
        if (ws[i]->data && ds_matmul_scratch_floats(ws[i]) > sc) sc = ds_matmul_scratch_floats(ws[i]);
    b->pscratch = malloc(sizeof(float) * (sc + 16) * (size_t)omp_get_num_procs());
    return 0;
}

static void draft_close(draft_bench *b) {
    for (int r = 0; r < MAX_R; r++) {
        ds_draft_state_free(b->st[r]);
        free(b->tokens[r]);
        free(b->logits[r]);
        free(b->conf[r]);
    }
    ds_draft_batch_free(b->batch);
    ds_drafter_free(b->d);
    free(b->taps);
    free(b->h);
    free(b->u);
    free(b->scratch);
    free(b->px);
    free(b->py);
    free(b->pscratch);
}

// ---- the round term by term (--profile) ----------------------------------------------------------

enum { P_FC, P_KV, P_Q, P_K, P_V, P_O, P_GATE, P_UP, P_DOWN, P_HEAD, P_MARKOV, P_CONF, P_ARGMAX, P_N };
static const char *const prof_names[P_N] = {"append_fc", "append_kv", "q", "k", "v", "o", "gate",
                                            "up", "down", "lm_head", "markov", "confidence", "argmax"};

typedef struct {
    double bytes[P_N], macs[P_N]; // per round
} prof_cost;

// Seconds of ds_matmul(w) over n rows of the profile input, summed into *acc; bytes and MACs too.
static void prof_mm(draft_bench *b, const ds_weight *w, int n, double *acc, double *bytes, double *macs) {
    const double t0 = bench_now();
    ds_matmul(b->py, b->px, w, n, b->pscratch);
    *acc += bench_now() - t0;
    *bytes += (double)ds_weight_bytes(w);
    *macs += (double)n * w->rows * w->cols;
}

// One timing of every term of a round for R sequences into t[P_N] (seconds); their costs into c.
static void draft_profile(draft_bench *b, int R, double *t, prof_cost *c) {
    const ds_drafter *d = b->d;
    const int B = d->info.block_size, M = R * B, K = ds_drafter_vocab_size(d), S = round_slots(d), Ms = R * S;
    memset(c, 0, sizeof *c);
    for (int i = 0; i < P_N; i++) t[i] = 0;
    for (int r = 0; r < R; r++) prof_mm(b, &d->fc, b->append, &t[P_FC], &c->bytes[P_FC], &c->macs[P_FC]);
    for (int l = 0; l < d->info.n_layers; l++) {
        const ds_layer *y = &d->layers[l];
        for (int r = 0; r < R; r++) { // appends are per sequence
            prof_mm(b, &y->wk, b->append, &t[P_KV], &c->bytes[P_KV], &c->macs[P_KV]);
            if (y->wv.data) prof_mm(b, &y->wv, b->append, &t[P_KV], &c->bytes[P_KV], &c->macs[P_KV]);
        }
        prof_mm(b, &y->wq, M, &t[P_Q], &c->bytes[P_Q], &c->macs[P_Q]);
        prof_mm(b, &y->wk, M, &t[P_K], &c->bytes[P_K], &c->macs[P_K]);
        if (y->wv.data) prof_mm(b, &y->wv, M, &t[P_V], &c->bytes[P_V], &c->macs[P_V]);
        prof_mm(b, &y->wo, M, &t[P_O], &c->bytes[P_O], &c->macs[P_O]);
        prof_mm(b, &y->w_gate, M, &t[P_GATE], &c->bytes[P_GATE], &c->macs[P_GATE]);
        prof_mm(b, &y->w_up, M, &t[P_UP], &c->bytes[P_UP], &c->macs[P_UP]);
        prof_mm(b, &y->w_down, M, &t[P_DOWN], &c->bytes[P_DOWN], &c->macs[P_DOWN]);
    }
    const ds_weight *head = K < d->V ? &d->vocab_head : &d->lm_head;
    { // the LM head over every slot: one product, as the round does it
        const double t0 = bench_now();
        ds_matmul(b->u, b->h, head, Ms, b->scratch);
        t[P_HEAD] = bench_now() - t0;
        c->bytes[P_HEAD] = (double)ds_weight_bytes(head);
        c->macs[P_HEAD] = (double)Ms * head->rows * head->cols;
    }
    // The walk's pieces per slot: Markov (W1 row, the head's projection, W2 · v over the draft
    // vocabulary), the confidence dot product, the argmax over V.
    const ds_weight *w2 = K < d->V ? &d->vocab_w2 : &d->markov_w2;
    const ds_weight *proj = d->markov == DS_MARKOV_GATED ? &d->gate_proj : d->markov == DS_MARKOV_RNN ? &d->joint_proj : NULL;
    float *w1 = b->py, *z = b->px; // (r) W1[prev]; (proj cols) the gated / rnn head's input
    volatile float sink = 0;
    double t0 = bench_now();
    for (int k = 0; k < Ms && d->r > 0; k++) {
        ds_weight_row_f32(&d->markov_w1, (k * 7919 + 3) % d->V, w1);
        if (proj) ds_matmul(b->py + d->r, z, proj, 1, b->pscratch);
        ds_matmul(b->u + (size_t)k * K, w1, w2, 1, b->pscratch);
    }
    t[P_MARKOV] = bench_now() - t0;
    if (d->r > 0) {
        c->bytes[P_MARKOV] = (double)Ms * (double)ds_weight_bytes(w2); // W2 once per slot (L3 may hold it)
        c->macs[P_MARKOV] = (double)Ms * ((double)w2->rows * w2->cols + (proj ? (double)proj->rows * proj->cols : 0));
        if (proj) c->bytes[P_MARKOV] += (double)Ms * ds_weight_bytes(proj);
    }
    t0 = bench_now();
    for (int k = 0; k < Ms && d->conf_w; k++) sink += ds_dot(d->conf_w, b->h + (size_t)k * d->H, d->H);
    t[P_CONF] = bench_now() - t0;
    c->macs[P_CONF] = d->conf_w ? (double)Ms * d->H : 0;
    c->bytes[P_CONF] = d->conf_w ? 4.0 * d->H : 0;
    t0 = bench_now();
    for (int k = 0; k < Ms; k++) sink += (float)ds_argmax(b->logits[k / S] + (size_t)(k % S) * d->V, d->V);
    t[P_ARGMAX] = bench_now() - t0;
    c->bytes[P_ARGMAX] = 4.0 * Ms * d->V; // the slots' logits (in cache: this is a floor)
    (void)sink;
}

// Seconds of one round for R sequences (greedy): the append of b->append rows per sequence and the
// drafting of round_slots() slots; then the contexts are rolled back to b->ctx. *append_s gets the
// append part.
static double draft_round(draft_bench *b, int R, double *append_s) {
    const ds_drafter *d = b->d;
    int32_t anchors[MAX_R];
    int slots[MAX_R];
    const ds_sampler_params greedy = {.temperature = 0, .top_k = 0, .top_p = 1, .min_p = 0};
    const ds_sampler_params *sp[MAX_R];
    ds_rng *rng[MAX_R];
    for (int r = 0; r < R; r++) {
        anchors[r] = (int32_t)((r * 7919 + 5) % d->V);
        slots[r] = round_slots(d);
        sp[r] = &greedy;
        rng[r] = &b->rng[r];
    }
    const double t0 = bench_now();
    for (int r = 0; r < R; r++) ds_drafter_append(d, b->st[r], b->taps, b->append);
    const double t1 = bench_now();
    ds_draft_seq q[MAX_R];
    for (int r = 0; r < R; r++)
        q[r] = (ds_draft_seq){.state = b->st[r], .anchor = anchors[r], .n_slots = slots[r], .sp = sp[r], .rng = rng[r],
                              .tokens = b->tokens[r], .logits = b->logits[r], .conf = b->conf[r]};
    ds_status st = ds_drafter_draft_batch(d, b->batch, q, R);
    const double t2 = bench_now();
    if (st) fprintf(stderr, "bench_draft: %s\n", ds_last_error());
    for (int r = 0; r < R; r++) ds_draft_state_truncate(b->st[r], b->ctx);
    *append_s = t1 - t0;
    return t2 - t0;
}

// Seconds of the round's LM head term alone: the drafter's LM head over R·block rows.
static double draft_head(draft_bench *b, int R) {
    const ds_weight *w = ds_drafter_vocab_size(b->d) < b->d->V ? &b->d->vocab_head : &b->d->lm_head;
    const double t0 = bench_now();
    ds_matmul(b->u, b->h, w, R * round_slots(b->d), b->scratch);
    return bench_now() - t0;
}

// ---- models --------------------------------------------------------------------------------------

static int exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

// The target (L layers), its drafter and the requested quantized drafters, written if absent.
static int prepare(const bench_shape *s, const char *tdir, const char *ddir, const char *drafters) {
    mkdir("build", 0755);
    mkdir("build/bench-models", 0755);
    if (bench_make_synthetic(tdir, s)) return 1;
    if (!exists(ddir)) {
        ds_model *m;
        if (ds_model_load(tdir, NULL, &m)) return 1;
        ds_drafter_init_params p = ds_drafter_init_default();
        p.dtype = DS_BF16;
        int taps[5], n = 0; // the last five tap ids the target allows (the released 8B drafter has five)
        for (int id = s->layers - 2; id >= -1 && n < 5; id--) taps[n++] = id;
        for (int i = 0; i < n / 2; i++) {
            const int x = taps[i];
            taps[i] = taps[n - 1 - i];
            taps[n - 1 - i] = x;
        }
        p.tap_layers = taps;
        p.n_taps = n;
        fprintf(stderr, "bench: writing a %d-layer bf16 drafter to %s\n", p.n_layers, ddir);
        const ds_status st = ds_drafter_init_write(m, &p, ddir);
        ds_model_free(m);
        if (st) return 1;
    }
    for (int bits = 8; bits >= 4; bits -= 4) {
        char want[8], qdir[4200];
        snprintf(want, sizeof want, "q%d", bits);
        snprintf(qdir, sizeof qdir, "%s-%s", ddir, want);
        if (!strstr(drafters, want) || exists(qdir)) continue;
        ds_quantize_params p = ds_quantize_default();
        p.bits = bits;
        p.group_size = 64;
        fprintf(stderr, "bench: quantizing the drafter to %d bits\n", bits);
        if (ds_quantize_run(ddir, qdir, &p, &(ds_quantize_stats){0})) return 1;
    }
    return 0;
}

static int parse_list(const char *s, int *out, int cap) {
    int n = 0;
    for (const char *p = s; *p && n < cap;) {
        out[n++] = atoi(p);
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    return n;
}

int main(int argc, char **argv) {
    bench_openblas_reexec(argv);
    bench_shape s = {4096, 5, 12288, 32, 8, 151936, DS_BF16, 128, 1, NULL};
    int full = 36, repeats = 5, ctx = 128, append = 3, profile = 0;
    const char *threads = "1,2", *rs = "1,4", *drafters = "bf16", *vocabs = "0";
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *o = argv[i], *v = argv[i + 1];
        if (!strcmp(o, "--target-layers")) s.layers = atoi(v);
        else if (bench_shape_option(o, v, &s) && strcmp(o, "--layers")) continue;
        else if (!strcmp(o, "--full-layers")) full = atoi(v);
        else if (!strcmp(o, "--threads")) threads = v;
        else if (!strcmp(o, "--repeats")) repeats = atoi(v);
        else if (!strcmp(o, "--ctx")) ctx = atoi(v);
        else if (!strcmp(o, "--append")) append = atoi(v);
        else if (!strcmp(o, "--rs")) rs = v;
        else if (!strcmp(o, "--drafters")) drafters = v;
        else if (!strcmp(o, "--draft-vocab")) vocabs = v;
        else if (!strcmp(o, "--profile")) profile = atoi(v);
        else if (!strcmp(o, "--slots")) g_slots = atoi(v);
        else {
            fprintf(stderr, "bench_draft: unknown option %s\n", o);
            return 2;
        }
    }
    int R[8], nR = parse_list(rs, R, 8), K[8], nK = parse_list(vocabs, K, 8);
    if (s.layers < 2 || full < s.layers || repeats < 1 || repeats > MAX_REPEATS || ctx < 1 || append < 1 || !nR) {
        fprintf(stderr, "bench_draft: need --target-layers >= 2, --full-layers >= it, 1..%d repeats\n", MAX_REPEATS);
        return 2;
    }
    for (int i = 0; i < nR; i++) {
        if (R[i] < 1 || R[i] > MAX_R) {
            fprintf(stderr, "bench_draft: R must be 1..%d\n", MAX_R);
            return 2;
        }
        if (R[i] > g_nseq) g_nseq = R[i];
    }
    char tdir[4096], ddir[4200];
    snprintf(tdir, sizeof tdir, "build/bench-models/synth-d%d-f%d-v%d-l%d-bf16", s.dim, s.ffn, s.vocab, s.layers);
    snprintf(ddir, sizeof ddir, "%s-drafter", tdir);
    if (prepare(&s, tdir, ddir, drafters)) {
        fprintf(stderr, "bench_draft: %s\n", ds_last_error());
        return 1;
    }
    target_bench tb;
    if (target_open(&tb, tdir, ctx)) {
        fprintf(stderr, "bench_draft: %s: %s\n", tdir, ds_last_error());
        return 1;
    }
    // Drafter variants: each weight format in --drafters, each at each --draft-vocab size.
    draft_bench db[16];
    int nd = 0;
    const char *names[3] = {"bf16", "q8", "q4"};
    for (int f = 0; f < 3; f++) {
        if (!strstr(drafters, names[f])) continue;
        char dir[4300];
        if (f) snprintf(dir, sizeof dir, "%s-%s", ddir, names[f]);
        else snprintf(dir, sizeof dir, "%s", ddir);
        for (int k = 0; k < (nK ? nK : 1) && nd < 16; k++) {
            if (draft_open(&db[nd], names[f], dir, tb.m, ctx, append)) {
                fprintf(stderr, "bench_draft: %s: %s\n", dir, ds_last_error());
                return 1;
            }
            if (nK && K[k] > 0) {
                int32_t *ids = malloc(sizeof(int32_t) * (size_t)K[k]);
                for (int i = 0; i < K[k]; i++) ids[i] = i;
                const ds_status st = ds_drafter_set_vocab(db[nd].d, ids, K[k]);
                free(ids);
                if (st) {
                    fprintf(stderr, "bench_draft: %s\n", ds_last_error());
                    return 1;
                }
            }
            nd++;
        }
    }
    const double hb = (double)ds_weight_bytes(&tb.m->output);
    const double full_bytes = full * layer_bytes(&s) + hb + 4.0 * s.dim;
    for (const char *p = threads; *p;) {
        const int th = atoi(p);
        ds_set_threads(th);
        for (int ri = 0; ri < nR; ri++) {
            const int r = R[ri];
            series step, head, full_step, round[16], app[16], dhead[16], rest[16], ratio[16], ratio_bw[16], bws, peaks;
            bws.n = peaks.n = 0;
            static series pterm[16][P_N + 1]; // --profile: each term, then "other"
            prof_cost pcost[16];
            memset(pterm, 0, sizeof pterm);
            step.n = head.n = full_step.n = 0;
            for (int i = 0; i < 16; i++) round[i].n = app[i].n = dhead[i].n = rest[i].n = ratio[i].n = ratio_bw[i].n = 0;
            target_step(&tb, r); // warm up every path once
            for (int i = 0; i < nd; i++) draft_round(&db[i], r, &(double){0});
            for (int rep = 0; rep < repeats; rep++) {
                // The bandwidth (and, profiling, the FMA peak) in every repeat, next to what it prices.
                const double bw_r = bench_read_bandwidth(th);
                series_add(&bws, bw_r);
                if (profile) series_add(&peaks, bench_fma_peak(th));
                const double ts = target_step(&tb, r), th_ = target_head(&tb, r);
                const double tf = ts + (full - s.layers) * (ts - th_) / s.layers;
                series_add(&step, ts);
                series_add(&head, th_);
                series_add(&full_step, tf);
                for (int i = 0; i < nd; i++) {
                    double ta;
                    const double tr = draft_round(&db[i], r, &ta);
                    series_add(&round[i], tr);
                    series_add(&app[i], ta);
                    const double tl = draft_head(&db[i], r);
                    series_add(&dhead[i], tl);
                    series_add(&rest[i], tr - ta - tl);
                    series_add(&ratio[i], tr / tf);
                    series_add(&ratio_bw[i], tr / (full_bytes / bw_r));
                    if (profile) {
                        double tt[P_N], sum = 0;
                        draft_profile(&db[i], r, tt, &pcost[i]);
                        for (int k = 0; k < P_N; k++) {
                            series_add(&pterm[i][k], tt[k]);
                            sum += tt[k];
                        }
                        series_add(&pterm[i][P_N], tr - sum);
                    }
                }
            }
            qsort(bws.v, (size_t)bws.n, sizeof(double), bench_cmp_double);
            qsort(peaks.v, (size_t)peaks.n, sizeof(double), bench_cmp_double);
            const double bw = bws.v[bws.n / 2], peak = profile ? peaks.v[peaks.n / 2] : 0; // medians
            printf("{\"bench\": \"decode_step\", \"threads\": %d, \"R\": %d, \"ctx\": %d, \"dim\": %d, \"ffn\": %d, "
                   "\"vocab\": %d, \"target_layers\": %d, \"full_layers\": %d",
                   th, r, ctx, s.dim, s.ffn, s.vocab, s.layers, full);
            series_print("step_ms", &step, 1e3);
            series_print("head_ms", &head, 1e3);
            series_print("full_step_ms", &full_step, 1e3);
            series_print("read_gb_per_s", &bws, 1e-9);
            printf(", \"full_bytes\": %.0f, \"bw_full_step_ms\": %.1f}\n", full_bytes, full_bytes / bw * 1e3);
            for (int i = 0; i < nd; i++) {
                printf("{\"bench\": \"draft_round\", \"drafter\": \"%s\", \"draft_vocab\": %d, \"threads\": %d, \"R\": %d, "
                       "\"block\": %d, \"slots\": %d, \"draft_layers\": %d, \"append_rows\": %d",
                       db[i].name, ds_drafter_vocab_size(db[i].d), th, r, db[i].d->info.block_size,
                       round_slots(db[i].d), db[i].d->info.n_layers, append);
                series_print("round_ms", &round[i], 1e3);
                series_print("append_ms", &app[i], 1e3);
                series_print("lm_head_ms", &dhead[i], 1e3);
                series_print("rest_ms", &rest[i], 1e3);
                series_print("round_over_step", &ratio[i], 1);
                series_print("round_over_bw_step", &ratio_bw[i], 1);
                printf("}\n");
            }
            for (int i = 0; i < nd && profile; i++) {
                qsort(full_step.v, (size_t)full_step.n, sizeof(double), bench_cmp_double);
                const double fs = full_step.v[full_step.n / 2];
                printf("{\"bench\": \"draft_profile\", \"drafter\": \"%s\", \"draft_vocab\": %d, \"threads\": %d, "
                       "\"R\": %d, \"read_gb_per_s\": %.2f, \"fma_gmac_per_s\": %.1f, \"full_step_ms\": %.1f",
                       db[i].name, ds_drafter_vocab_size(db[i].d), th, r, bw / 1e9, peak / 1e9, fs * 1e3);
                double roof_total = 0;
                for (int k = 0; k <= P_N; k++) {
                    series *t = &pterm[i][k];
                    qsort(t->v, (size_t)t->n, sizeof(double), bench_cmp_double);
                    const double med = t->v[t->n / 2];
                    printf(", \"%s\": {\"ms\": %.4g, \"min\": %.4g, \"max\": %.4g, \"of_step\": %.4f", k < P_N ? prof_names[k] : "other",
                           med * 1e3, t->v[0] * 1e3, t->v[t->n - 1] * 1e3, med / fs);
                    if (k < P_N) {
                        const double t_b = pcost[i].bytes[k] / bw, t_c = pcost[i].macs[k] / peak;
                        const double roof = t_b > t_c ? t_b : t_c;
                        roof_total += roof;
                        printf(", \"mb\": %.1f, \"gmac\": %.3f, \"roof_ms\": %.4g, \"bound\": \"%s\", \"over_roof\": %.2f",
                               pcost[i].bytes[k] / 1e6, pcost[i].macs[k] / 1e9, roof * 1e3, t_b > t_c ? "bytes" : "flops",
                               roof > 0 ? med / roof : 0);
                    }
                    printf("}");
                }
                printf(", \"roof_round_ms\": %.1f, \"roof_round_of_step\": %.4f}\n", roof_total * 1e3, roof_total / fs);
            }
            fflush(stdout);
        }
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    for (int i = 0; i < nd; i++) draft_close(&db[i]);
    target_close(&tb);
    return 0;
}
