// Confidence-scheduled verification under load: throughput (tok_per_s: all generated tokens / the
// time in rounds) and per-request speed (request_tok_per_s: the mean over requests of generated
// tokens / the request's time from joining to finishing) at concurrency 1, 2, 4, 8, 16, for
//   none        no speculation (ℓ = 0: the baseline every line is compared with, same concurrency)
//   fixed1..7   fixed draft length L (draft L slots, verify all)
//   threshold   static confidence threshold 0.5 (DeepSpec's rule: verify the slots before the first
//               with c_k < 0.5; all 7 slots drafted)
//   auto        Algorithm 1 with the early stop, over a cost table profiled in this run
//               (ds_profile_costs) for the target being measured
//   none_control  none again, last in each repeat: its ratio to none is the run-to-run noise,
//               and the summary's "auto_ge_none_within_noise" is auto >= 0.98 × the slower of
//               the two none runs
// on two targets:
//
//   bench_sched STORIES_GGUF DRAFTER_DIR [--synthetic DIR] [--synthetic-drafter DIR]
//               [--conc 1,2,4,8,16] [-n TOKENS] [--synthetic-tokens TOKENS] [--repeats R]
//               [--synthetic-repeats R] [--threads T] [--prompts FILE] [--draft-scale S]
//
// (a) "stories260K": the real engine (ds_engine) with the trained DSpark drafter DRAFTER_DIR
//     (real drafting and verification), greedy; prompts from --prompts (default
//     docs/prompts/stories-heldout.txt) cycled, -n TOKENS per request (default 64), 2R requests
//     per run (max(2R, 8)) with R in flight: a request joins as soon as one finishes. Its time
//     from joining includes its prefill. Best of --repeats (default 3) runs, policies
//     interleaved within each repeat. Every policy's tokens are checked against none's (greedy:
//     they must be equal; "lossless" in each line).
//
// (b) "synthetic": a random-weight Llama of realistic shape (--synthetic DIR, a Hugging Face
//     directory: scripts/bench.sh makes a dim-1024, 8-layer, 32000-vocabulary BF16 one with
//     tests/reference/make_hf_llama.py), whose ACCEPTANCE IS REPLAYED from stories260K. The replay:
//       1. Record. The stories260K engine with the trained drafter verifies the full block (fixed
//          schedule, ℓ = 7) over every prompt (256 tokens each, greedy, one request at a time); an
//          observer (ds_engine_set_observer) keeps, for every round that drafted and verified all
//          7 slots, the 7 confidences c_1..c_7 and the realized accepted prefix length a_full.
//          The rounds of all prompts are concatenated in order (the trace).
//       2. Cost table. SPS(B) of the synthetic target, B = 1..8·Rmax, profiled now
//          (ds_profile_costs, quick, 64 rows of context).
//       3. Drafting cost. A real DSpark drafter of matching shape (the trained drafter's layers,
//          block, Markov head and tap count, at the synthetic target's hidden size, vocabulary and
//          weight type; written once with ds_drafter_init_write to --synthetic-drafter, default
//          DIR-drafter) is timed here as the engine drafts: draft_ms[r][K] = the median wall time
//          of one batched drafting round of r sequences (each: ds_drafter_append of 2 new context
//          rows after 62 rows of context), then ONE ds_drafter_draft_batch of K slots for all r),
//          for r = 1 and every --conc value, K = 1..7. Its cost is then CHARGED, not spent: a round
//          in which n requests draft (the deepest drafting K slots) adds draft_ms[n][K] to that
//          round's time, once (one batched forward, not n × one sequence's time; n between two
//          timed r is interpolated linearly; every drafting request is charged at the deepest K).
//          --draft-scale S multiplies every charge (default 1: as measured). S < 1 stands for a
//          machine where drafting is relatively cheaper than here (a GPU: the drafter's small
//          matmuls are latency-bound there, not compute-bound as on these 2 cores), which is
//          where speculation pays and the scheduler has real choices to make.
//          A round in which no request drafts (none, or auto with depth 0) charges nothing. The
//          alternative the setup line also prints, the stories260K drafter's measured round time
//          scaled by (hidden ratio)², is not used: it ignores the vocabulary (512 vs 32000), whose
//          LM head and Markov head dominate.
//       4. Rounds. Each run has 2R requests, R in flight, each with a budget of
//          --synthetic-tokens (default 32) tokens after a 64-token random context (prefilled once
//          per slot, outside the timing; a joining request truncates its slot's cache back to the
//          context, so joining costs nothing). Request j replays the trace from index
//          (j·7919) mod N onwards, one recorded round per round, the same for every policy. Per
//          round: each request takes its next recorded round (c, a_full) and may draft
//          K = min(7 (fixed: L; auto: the depth cap below), remaining − 1) slots; the policy picks
//          ℓ (fixed: K; threshold: the first k with c_k < 0.5; auto: ds_schedule_auto over every
//          request's c_1..c_K and the synthetic cost table, auto's own copy, which every forward
//          refines with ds_cost_observe as the engine's does). Auto's depth cap, as in the engine, is
//          ds_gate_depth(gate, costs, R, ds_schedule_max_admissions(costs, R, 7)) (R requests in
//          flight: the admission bound, or 0 when the drafting gate says drafting does not pay);
//          the gate (one per run, fresh, with the priors a fresh engine has: the round cost
//          D(R) = a + b·R fitted to draft_ms at R = 1 and 4, and the stories drafter's calibration
//          acceptance when DRAFTER_DIR has a calibration.json) observes the charged round time
//          draft_ms[n][K] in every round that drafts, and after the forward every request's
//          (ℓ, min(ℓ, a_full)) with ds_gate_observe_round. Then ONE real ds_model_forward over all requests' rows (ℓ + 1
//          rows each, arbitrary token ids, logits for every row, real KV caches) and the argmax of
//          each committed row, timed; the request advances by min(ℓ, a_full) + 1 tokens (capped
//          at its budget): what greedy verification would have accepted; its cache is truncated
//          to the advanced length. Round time = the timed forward and argmaxes + the charged
//          drafting. Times are on this virtual clock (real forwards + charged drafting).
//     Best of --synthetic-repeats (default 1). Approximations: a round's acceptance does not
//     depend on where the request is; drafting fewer slots (fixed L < 7) is assumed to propose
//     the same first L tokens as the full block.
//
// Output: one JSON line per (target, concurrency, policy), then per (target, concurrency) a
// summary: the best fixed length, auto, and whether auto >= the best fixed length (within 5%) and
// >= none (within 5%). Every line also gives verify_only_tok_per_s = tokens / (round time −
// drafting time), and the summary the same comparison on it ("verify_only"): Algorithm 1 optimizes
// the verification side only (Θ = τ·SPS(B)); drafting (one batched drafter forward per round; the
// full block for threshold, auto's depth cap for auto) is what the drafting gate weighs. Progress goes to stderr. Threads: --threads (default 1; the 2-core
// development machine is shared, so 1 is the stable setting).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "dspark.h"
#include "kernels/matmul.h"
#include "sched/schedule.h"
#include "gen/prompts.h"
#include "train/data.h"

#define GAMMA 7      // block size of the trained drafter (and of the replay)
#define N_POL BENCH_N_POLICIES // none, fixed1..7, threshold, auto, none again (the control: run-to-run noise)
#define MAX_CONC 64
#define SYN_CTX 64   // context rows of every synthetic request
#define THRESHOLD 0.5f

static void die(const char *what) {
    fprintf(stderr, "bench_sched: %s: %s\n", what, ds_last_error());
    exit(1);
}

typedef struct {
    int valid;
    double tok_s, req_tok_s;
    long tokens, rounds, accepted, verified; // verified: drafted tokens sent to verification (Σ ℓ)
    double draft_share;                       // drafting time / round time
    double vo_tok_s;                          // tokens / (round time − drafting time): verification only
    int lossless;                             // (a) only: tokens equal none's
} result;

static void keep_best(result *best, const result *r) {
    if (!best->valid || r->tok_s > best->tok_s) *best = *r;
}

// ---- (a) the real engine on stories260K -----------------------------------------------------------

typedef struct {
    int32_t **ptoks;
    int *plen;
    int n;
} prompt_set;

// Runs n_req requests (prompt j mod P, seed j), R at a time; the tokens of request j go to
// out + j·budget (n_out[j] of them).
static void run_engine(const ds_model *m, const ds_drafter *d, const ds_spec_params *sp, const prompt_set *ps, int R,
                       int n_req, int budget, int32_t *out, int *n_out, result *res) {
    ds_engine *e;
    if (ds_engine_init(m, sp->kind == DS_SPEC_DSPARK ? d : NULL, sp, &e)) die("engine");
    const ds_sampler_params smp = ds_sampler_default();
    int id[MAX_CONC], req[MAX_CONC], active[MAX_CONC] = {0};
    double t_join[MAX_CONC];
    int next = 0, n_active = 0;
    double step_s = 0, rate_sum = 0, draft_s = 0;
    memset(res, 0, sizeof *res);
    for (;;) {
        for (int k = 0; k < R && next < n_req; k++) {
            if (active[k]) continue;
            const int j = next++, p = j % ps->n;
            t_join[k] = bench_now();
            if (ds_engine_add(e, &(ds_seq_params){.prompt = ps->ptoks[p], .n_prompt = ps->plen[p], .max_new = budget, .sp = &smp,
                    .seed = (uint64_t)j, .batch_invariant = 1}, &id[k])) die("add");
            req[k] = j;
            n_out[j] = 0;
            active[k] = 1;
            n_active++;
        }
        if (!n_active) break;
        const double t0 = bench_now();
        if (ds_engine_step(e)) die("step");
        const double t1 = bench_now();
        step_s += t1 - t0;
        for (int k = 0; k < R; k++) {
            if (!active[k]) continue;
            const int j = req[k];
            n_out[j] += ds_engine_take(e, id[k], out + (size_t)j * budget + n_out[j], budget - n_out[j]);
            if (!ds_engine_finished(e, id[k])) continue;
            const ds_seq_stats *s = ds_engine_stats(e, id[k]);
            res->tokens += n_out[j];
            res->rounds += s->rounds;
            res->accepted += s->accepted;
            res->verified += s->drafted;
            draft_s += s->draft_s;
            rate_sum += n_out[j] / (t1 - t_join[k]);
            ds_engine_remove(e, id[k]);
            active[k] = 0;
            n_active--;
        }
    }
    ds_engine_free(e);
    res->valid = 1;
    res->tok_s = res->tokens / step_s;
    res->req_tok_s = rate_sum / n_req;
    res->draft_share = draft_s / step_s;
    res->vo_tok_s = res->tokens / (step_s - draft_s);
}

// ---- (b) the replay on the synthetic target --------------------------------------------------------

typedef struct {
    float conf[GAMMA];
    int a_full;
} trace_round;

typedef struct {
    trace_round *r;
    int n, cap;
    double draft_s;
    long rounds;
} trace;

static void record_round(void *ctx, int id, int n_drafted, const float *conf, int ell, int accepted) {
    (void)id;
    trace *t = ctx;
    if (!conf || n_drafted != GAMMA || ell != GAMMA) return; // full blocks only
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 1024;
        t->r = realloc(t->r, sizeof *t->r * (size_t)t->cap);
        if (!t->r) exit(1);
    }
    memcpy(t->r[t->n].conf, conf, sizeof(float) * GAMMA);
    t->r[t->n++].a_full = accepted;
}

static void record_trace(const ds_model *m, const ds_drafter *d, const prompt_set *ps, int budget, trace *t) {
    ds_spec_params sp = {.kind = DS_SPEC_DSPARK, .draft_max = GAMMA, .schedule = DS_SCHEDULE_FIXED};
    ds_engine *e;
    if (ds_engine_init(m, d, &sp, &e)) die("engine");
    ds_engine_set_observer(e, record_round, t);
    const ds_sampler_params smp = ds_sampler_default();
    for (int p = 0; p < ps->n; p++) {
        int id;
        if (ds_engine_add(e, &(ds_seq_params){.prompt = ps->ptoks[p], .n_prompt = ps->plen[p], .max_new = budget, .sp = &smp,
                .seed = (uint64_t)p, .batch_invariant = 1}, &id)) die("add");
        while (!ds_engine_finished(e, id))
            if (ds_engine_step(e)) die("step");
        t->draft_s += ds_engine_stats(e, id)->draft_s;
        t->rounds += ds_engine_stats(e, id)->rounds;
        ds_engine_remove(e, id);
    }
    ds_engine_free(e);
}

typedef struct {
    const ds_model *m;
    int V;
    ds_workspace *ws;
    ds_kv *kv[MAX_CONC];
    float *logits[MAX_CONC];     // (GAMMA + 1, V)
    int32_t rows[MAX_CONC][GAMMA + 1];
    ds_cost_table costs;
    double draft_ms[MAX_CONC + 1][GAMMA + 1]; // charged per round: [sequences drafting][slots], batched
    double gate_a, gate_b;     // auto's drafting gate priors, as the engine's: round cost a + b·R ...
    const float *gate_accept[DS_GATE_CLASSES]; // ... and the stories drafter's calibration acceptance per
    int n_gate_accept[DS_GATE_CLASSES];         // class of rounds (greedy, sampled; 0 = not calibrated)
    double draft_scale;        // --draft-scale: charged drafting time = measured × this
} synth;

// The charged time of one batched drafting round: n sequences drafting up to K slots each (all
// charged at K, the deepest). Rows timed: 1 and the concurrencies; n between two timed rows is
// interpolated linearly, past the last one scaled in proportion.
static double draft_cost_s(const synth *sy, int n, int K) {
    if (n <= 0 || K <= 0) return 0;
    const double sc = 1e-3 * sy->draft_scale;
    if (sy->draft_ms[n][K] > 0) return sc * sy->draft_ms[n][K];
    int lo = 1, hi = 0;
    for (int r = 1; r <= MAX_CONC; r++) {
        if (!(sy->draft_ms[r][K] > 0)) continue;
        if (r < n) lo = r;
        else if (!hi) hi = r;
    }
    const double tl = sy->draft_ms[lo][K];
    if (!hi) return sc * tl * n / lo;
    return sc * (tl + (sy->draft_ms[hi][K] - tl) * (n - lo) / (hi - lo));
}

// One run of the replay: n_req requests, R in flight, `budget` tokens each.
static void run_replay(synth *sy, const trace *tr, int policy, int R, int n_req, int budget, result *res) {
    int active[MAX_CONC] = {0}, gen[MAX_CONC], cursor[MAX_CONC], pos[MAX_CONC];
    int K[MAX_CONC], ell[MAX_CONC], owner[MAX_CONC];
    const float *confp[MAX_CONC];
    double t_join[MAX_CONC];
    ds_forward_seq f[MAX_CONC];
    void *scratch = malloc(16 * (size_t)MAX_CONC * GAMMA);
    double vt = 0, step_s = 0, draft_s = 0, rate_sum = 0;
    int next = 0, n_active = 0;
    uint32_t lcg = 12345;
    ds_cost_table costs = sy->costs; // auto's own copy, refined as it runs (as an engine's is)
    ds_draft_gate gate; // a fresh gate per run with the priors a fresh engine has
    ds_gate_init(&gate, sy->gate_a, sy->gate_b, sy->gate_accept, sy->n_gate_accept);
    memset(res, 0, sizeof *res);
    for (;;) {
        for (int k = 0; k < R && next < n_req; k++) {
            if (active[k]) continue;
            const int j = next++;
            gen[k] = 0;
            cursor[k] = (int)(((long)j * 7919) % tr->n);
            pos[k] = SYN_CTX;
            ds_kv_truncate(sy->kv[k], SYN_CTX); // the slot's prefilled context
            t_join[k] = vt;
            active[k] = 1;
            n_active++;
        }
        if (!n_active) break;
        // Drafting (charged) and the schedule.
        int n = 0, n_draft = 0, k_draft = 0;
        // auto drafts no deeper than Algorithm 1 could admit, and not at all unless the gate says
        // drafting pays (as the engine does)
        const int auto_cap =
            policy == 9 ? ds_gate_depth(&gate, &costs, n_active, ds_schedule_max_admissions(&costs, n_active, GAMMA), 0)
                        : GAMMA;
        for (int k = 0; k < R; k++) {
            if (!active[k]) continue;
            const trace_round *rr = &tr->r[cursor[k]];
            const int remaining = budget - gen[k];
            const int kmax = policy == 0 || policy == 10 ? 0 : policy <= 7 ? policy : policy == 9 ? auto_cap : GAMMA;
            K[n] = kmax < remaining - 1 ? kmax : remaining - 1;
            if (K[n] < 0) K[n] = 0;
            if (K[n]) n_draft++, k_draft = K[n] > k_draft ? K[n] : k_draft;
            confp[n] = rr->conf;
            ell[n] = K[n];
            if (policy == 8)
                for (int s = 0; s < K[n]; s++)
                    if (rr->conf[s] < THRESHOLD) {
                        ell[n] = s;
                        break;
                    }
            owner[n++] = k;
        }
        // One batched drafter forward for every request that drafts (charged once for the round).
        const double round_draft = draft_cost_s(sy, n_draft, k_draft);
        if (policy == 9 && n_draft) ds_gate_observe_draft(&gate, n_draft, round_draft);
        if (policy == 9) ds_schedule_auto(confp, K, n, &costs, ell, scratch); // (K = 0 rows: ℓ = 0)
        // ONE forward over every request's verification rows, then the committed rows' argmax.
        for (int i = 0; i < n; i++) {
            const int k = owner[i];
            for (int r = 0; r <= ell[i]; r++) {
                lcg = lcg * 1664525u + 1013904223u;
                sy->rows[k][r] = (int32_t)(lcg % (uint32_t)sy->V);
            }
            f[i] = (ds_forward_seq){.kv = sy->kv[k], .tokens = sy->rows[k], .n_tokens = ell[i] + 1,
                                    .n_logits = ell[i] + 1, .logits = sy->logits[k]};
        }
        const double t0 = bench_now();
        if (ds_model_forward(sy->m, sy->ws, f, n)) die("forward");
        if (policy == 9) { // auto refines its cost table with every forward, as the engine does
            int B = 0;
            for (int i = 0; i < n; i++) B += f[i].n_tokens;
            ds_cost_observe(&costs, B, bench_now() - t0);
        }
        volatile int32_t sink = 0;
        int adv[MAX_CONC];
        for (int i = 0; i < n; i++) {
            const int k = owner[i];
            const int a_full = tr->r[cursor[k]].a_full;
            const int a = ell[i] < a_full ? ell[i] : a_full;
            for (int r = 0; r <= a; r++) sink += ds_argmax(sy->logits[k] + (size_t)r * sy->V, sy->V);
            adv[i] = a + 1 < budget - gen[k] ? a + 1 : budget - gen[k];
            ds_kv_truncate(sy->kv[k], pos[k] + adv[i]);
            res->rounds++;
            res->accepted += a;
            res->verified += ell[i];
            if (policy == 9) ds_gate_observe_round(&gate, ell[i], a, 0, 1); // greedy traces
        }
        (void)sink;
        const double dt = bench_now() - t0 + round_draft;
        vt += dt;
        step_s += dt;
        draft_s += round_draft;
        for (int i = 0; i < n; i++) {
            const int k = owner[i];
            gen[k] += adv[i];
            pos[k] += adv[i];
            cursor[k] = (cursor[k] + 1) % tr->n;
            if (gen[k] < budget) continue;
            res->tokens += gen[k];
            rate_sum += gen[k] / (vt - t_join[k]);
            active[k] = 0;
            n_active--;
        }
    }
    free(scratch);
    res->valid = 1;
    res->tok_s = res->tokens / step_s;
    res->req_tok_s = rate_sum / n_req;
    res->draft_share = draft_s / step_s;
    res->vo_tok_s = res->tokens / (step_s - draft_s);
    res->lossless = -1;
}

// Time one batched drafting round of a real drafter for `m`: r sequences (r = 1 and every
// concurrency in `rs`), each with SYN_CTX − 2 rows of context, drafting K slots each (K = 1..7):
// ds_drafter_append of 2 new context rows per sequence, then ONE ds_drafter_draft_batch of all r
// (as the engine's draft_prepare / draft_batch do). draft_ms[r][K] = the median wall time of the
// whole round (median of `reps`, after one warm-up); rows for r not timed stay 0.
static void time_drafter(const ds_model *m, const ds_drafter *d, const int *rs, int n_rs,
                         double (*draft_ms)[GAMMA + 1], int reps) {
    const ds_model_info *in = ds_model_get_info(m);
    const ds_drafter_info *di = ds_drafter_get_info(d);
    const int V = in->vocab_size, W = di->n_taps * in->dim, ctx = SYN_CTX;
    int rmax = 1;
    for (int i = 0; i < n_rs; i++) rmax = rs[i] > rmax ? rs[i] : rmax;
    ds_kv *kv;
    ds_workspace *ws;
    ds_draft_batch *bt;
    if (ds_kv_init(m, ctx + 8, &kv) || ds_workspace_init(m, &ws) || ds_draft_batch_init(d, &bt)) die("drafter");
    int32_t tok[SYN_CTX];
    for (int i = 0; i < ctx; i++) tok[i] = (int32_t)((i * 7919 + 3) % V);
    float *taps = malloc(sizeof(float) * (size_t)ctx * W);
    ds_forward_seq pf = {.kv = kv, .tokens = tok, .n_tokens = ctx, .tap_layers = di->tap_layers, .n_taps = di->n_taps,
                         .taps = taps};
    if (ds_model_forward(m, ws, &pf, 1)) die("forward");
    const ds_sampler_params smp = ds_sampler_default();
    ds_draft_state *st[MAX_CONC];
    ds_rng rng[MAX_CONC], *rngp[MAX_CONC];
    const ds_sampler_params *spp[MAX_CONC];
    int32_t anchor[MAX_CONC], out[MAX_CONC][GAMMA], *outp[MAX_CONC];
    float conf[MAX_CONC][GAMMA], *confp[MAX_CONC], *ql[MAX_CONC];
    int nk[MAX_CONC];
    for (int i = 0; i < rmax; i++) {
        if (ds_draft_state_init(d, ctx + 16, &st[i])) die("drafter");
        if (ds_drafter_append(d, st[i], taps, ctx - 2)) die("append");
        rng[i] = ds_rng_init(1, (uint64_t)i);
        rngp[i] = &rng[i];
        spp[i] = &smp;
        anchor[i] = tok[i % ctx];
        outp[i] = out[i];
        confp[i] = conf[i];
        if (!(ql[i] = malloc(sizeof(float) * GAMMA * (size_t)V))) die("out of memory");
    }
    double *t = malloc(sizeof(double) * (size_t)reps);
    for (int ri = -1; ri < n_rs; ri++) {
        const int R = ri < 0 ? 1 : rs[ri];
        if (ri >= 0 && R == 1) continue;
        for (int K = 1; K <= GAMMA; K++) {
            for (int i = 0; i < R; i++) nk[i] = K;
            for (int r = 0; r < reps + 1; r++) {
                const double t0 = bench_now();
                for (int i = 0; i < R; i++)
                    if (ds_drafter_append(d, st[i], taps + (size_t)(ctx - 2) * W, 2)) die("append");
                ds_draft_seq q[R];
                for (int i = 0; i < R; i++)
                    q[i] = (ds_draft_seq){.state = st[i], .anchor = anchor[i], .n_slots = nk[i], .sp = spp[i],
                                          .rng = rngp[i], .tokens = outp[i], .logits = ql[i], .conf = confp[i]};
                if (ds_drafter_draft_batch(d, bt, q, R)) die("draft");
                if (r) t[r - 1] = bench_now() - t0; // the first run warms up
                for (int i = 0; i < R; i++) ds_draft_state_truncate(st[i], ctx - 2);
            }
            qsort(t, (size_t)reps, sizeof *t, bench_cmp_double);
            draft_ms[R][K] = 1e3 * t[reps / 2];
        }
    }
    for (int i = 0; i < rmax; i++) ds_draft_state_free(st[i]), free(ql[i]);
    free(t), free(taps);
    ds_draft_batch_free(bt);
    ds_workspace_free(ws);
    ds_kv_free(kv);
}

// A drafter for the synthetic target shaped like the trained one (see the header).
static void write_matching_drafter(const ds_model *syn, const ds_drafter *like, const char *dir) {
    struct stat stt;
    char cfg[4096];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    if (stat(cfg, &stt) == 0) return;
    const ds_drafter_info *li = ds_drafter_get_info(like);
    const int L = ds_model_get_info(syn)->n_layers;
    ds_drafter_init_params p = ds_drafter_init_default();
    p.n_layers = li->n_layers;
    p.block_size = li->block_size;
    p.markov_rank = li->markov_rank ? -1 : 0; // the default rank (256, capped at the hidden size)
    p.markov_head = li->markov_rank ? li->markov_head : "vanilla";
    p.confidence = li->has_confidence;
    int taps[64], T = li->n_taps < L - 2 ? li->n_taps : L - 2; // spread over layers 1 .. L-2
    for (int i = 0; i < T; i++) taps[i] = T == 1 ? 1 : 1 + (int)lround((double)i * (L - 3) / (T - 1));
    p.n_taps = T;
    p.tap_layers = taps;
    p.dtype = ds_model_get_info(syn)->weight_type == DS_BF16 ? DS_BF16 : DS_F32;
    p.seed = 1;
    fprintf(stderr, "bench_sched: writing a %d-layer drafter for the synthetic target to %s\n", p.n_layers, dir);
    if (ds_drafter_init_write(syn, &p, dir)) die("init drafter");
}

// ---- output --------------------------------------------------------------------------------------

static void print_line(const char *target, int R, int policy, int n_req, int budget, const result *r,
                       const result *none) {
    char buf[16];
    printf("{\"bench\": \"sched\", \"target\": \"%s\", \"policy\": \"%s\", \"concurrency\": %d, \"requests\": %d, "
           "\"tokens_per_request\": %d, \"tokens\": %ld, \"rounds\": %ld, \"tau\": %.3f, \"mean_ell\": %.3f, "
           "\"tok_per_s\": %.1f, \"request_tok_per_s\": %.2f, \"none_tok_per_s\": %.1f, "
           "\"none_request_tok_per_s\": %.2f, \"speedup_vs_none\": %.3f, \"request_speedup_vs_none\": %.3f, "
           "\"draft_share\": %.3f, \"verify_only_tok_per_s\": %.1f, \"verify_only_speedup_vs_none\": %.3f",
           target, bench_policy_name(policy, buf), R, n_req, budget, r->tokens, r->rounds,
           r->rounds ? (double)(r->accepted + r->rounds) / r->rounds : 0, r->rounds ? (double)r->verified / r->rounds : 0,
           r->tok_s, r->req_tok_s, none->tok_s, none->req_tok_s, r->tok_s / none->tok_s, r->req_tok_s / none->req_tok_s,
           r->draft_share, r->vo_tok_s, r->vo_tok_s / none->vo_tok_s);
    if (r->lossless >= 0) printf(", \"lossless\": %s", r->lossless ? "true" : "false");
    printf("}\n");
}

static void print_summary(const char *target, int R, const result *res) {
    int best = 1, vbest = 1;
    for (int p = 2; p <= 7; p++) {
        if (res[p].tok_s > res[best].tok_s) best = p;
        if (res[p].vo_tok_s > res[vbest].vo_tok_s) vbest = p;
    }
    const double a = res[9].tok_s, bf = res[best].tok_s, no = res[0].tok_s, ctl = res[10].tok_s;
    // "Within noise": auto at least the slower of the two identical none runs, less 2%.
    const double floor_none = 0.98 * (ctl < no ? ctl : no);
    const double va = res[9].vo_tok_s, vbf = res[vbest].vo_tok_s, vno = res[0].vo_tok_s;
    printf("{\"bench\": \"sched_summary\", \"target\": \"%s\", \"concurrency\": %d, \"none_tok_per_s\": %.1f, "
           "\"best_fixed\": %d, \"best_fixed_tok_per_s\": %.1f, \"threshold_tok_per_s\": %.1f, \"auto_tok_per_s\": %.1f, "
           "\"auto_over_best_fixed\": %.3f, \"auto_over_none\": %.3f, \"auto_request_over_best_fixed\": %.3f, "
           "\"control_over_none\": %.3f, \"auto_ge_none_within_noise\": %s, "
           "\"auto_ge_best_fixed\": %s, \"auto_ge_none\": %s, \"verify_only\": {\"best_fixed\": %d, "
           "\"auto_over_best_fixed\": %.3f, \"auto_over_none\": %.3f, \"auto_ge_best_fixed\": %s, \"auto_ge_none\": %s}}\n",
           target, R, no, best, bf, res[8].tok_s, a, a / bf, a / no, res[9].req_tok_s / res[best].req_tok_s,
           ctl / no, a >= floor_none ? "true" : "false",
           a >= 0.95 * bf ? "true" : "false", a >= 0.95 * no ? "true" : "false", vbest, va / vbf, va / vno,
           va >= 0.95 * vbf ? "true" : "false", va >= 0.95 * vno ? "true" : "false");
    fflush(stdout);
}

// "sps_b": [1, 2, 4, ..], "sps": [SPS(B), ..], "verify_tok_per_s": [B·SPS(B), ..] (no braces).
static void print_sps(const ds_cost_table *t, int bmax) {
    int bs[16], n = 0;
    for (int b = 1; b <= bmax; b *= 2) bs[n++] = b;
    if (bs[n - 1] != bmax) bs[n++] = bmax;
    const char *keys[3] = {"sps_b", "sps", "verify_tok_per_s"};
    for (int k = 0; k < 3; k++) {
        printf("%s\"%s\": [", k ? ", " : "", keys[k]);
        for (int i = 0; i < n; i++) {
            const double v = k == 0 ? bs[i] : k == 1 ? ds_cost_sps(t, bs[i]) : bs[i] * ds_cost_sps(t, bs[i]);
            printf(k == 0 ? "%s%.0f" : "%s%.1f", i ? ", " : "", v);
        }
        printf("]");
    }
}

static int parse_list(const char *s, int *out, int cap) {
    int n = 0;
    while (*s && n < cap) {
        char *end;
        const long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > MAX_CONC) return 0;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return 0;
    }
    return n;
}

int main(int argc, char **argv) {
    bench_openblas_reexec(argv);
    if (argc < 3) {
        fprintf(stderr,
                "usage: bench_sched STORIES_GGUF DRAFTER_DIR [--synthetic DIR] [--synthetic-drafter DIR]\n"
                "       [--conc 1,2,4,8,16] [-n TOKENS] [--synthetic-tokens TOKENS] [--repeats R]\n"
                "       [--synthetic-repeats R] [--threads T] [--prompts FILE] [--draft-scale S]\n");
        return 2;
    }
    const char *synth_dir = NULL, *synth_drafter = NULL, *prompts_path = "docs/prompts/stories-heldout.txt";
    double draft_scale = 1;
    int conc[16] = {1, 2, 4, 8, 16}, n_conc = 5, budget_a = 64, budget_b = 32, reps_a = 3, reps_b = 1, threads = 1;
    for (int i = 3; i + 1 < argc; i += 2) {
        const char *o = argv[i], *v = argv[i + 1];
        if (!strcmp(o, "--synthetic")) synth_dir = v;
        else if (!strcmp(o, "--synthetic-drafter")) synth_drafter = v;
        else if (!strcmp(o, "--conc")) {
            if (!(n_conc = parse_list(v, conc, 16))) return fprintf(stderr, "bench_sched: bad --conc %s\n", v), 2;
        } else if (!strcmp(o, "-n")) budget_a = atoi(v);
        else if (!strcmp(o, "--synthetic-tokens")) budget_b = atoi(v);
        else if (!strcmp(o, "--repeats")) reps_a = atoi(v);
        else if (!strcmp(o, "--synthetic-repeats")) reps_b = atoi(v);
        else if (!strcmp(o, "--threads")) threads = atoi(v);
        else if (!strcmp(o, "--prompts")) prompts_path = v;
        else if (!strcmp(o, "--draft-scale")) draft_scale = atof(v);
        else return fprintf(stderr, "bench_sched: unknown option %s\n", o), 2;
    }
    if (budget_a < 2 || budget_b < 2 || reps_a < 1 || reps_b < 1 || threads < 1 || !(draft_scale > 0))
        return fprintf(stderr, "bench_sched: bad numbers\n"), 2;
    int rmax = 1;
    for (int c = 0; c < n_conc; c++) rmax = conc[c] > rmax ? conc[c] : rmax;
    ds_set_threads(threads);

    // ---- (a) stories260K, the real engine ----
    ds_model *m;
    ds_drafter *d;
    const ds_model_params mp = {.n_threads = threads};
    if (ds_model_load(argv[1], &mp, &m)) die(argv[1]);
    if (ds_drafter_load(argv[2], m, &d)) die(argv[2]);
    const ds_drafter_info *di = ds_drafter_get_info(d);
    if (!di->has_confidence || di->block_size != GAMMA) {
        fprintf(stderr, "bench_sched: the drafter needs a confidence head and block size %d\n", GAMMA);
        return 1;
    }
    ds_prompt_set *pset;
    if (ds_prompts_load(prompts_path, &pset)) die(prompts_path);
    prompt_set ps = {.n = pset->n, .ptoks = calloc((size_t)pset->n, sizeof(int32_t *)),
                     .plen = calloc((size_t)pset->n, sizeof(int))};
    for (int i = 0; i < ps.n; i++) {
        int n = 0;
        const char *t = pset->text[i];
        ds_tokenize(ds_model_tokenizer(m), t, strlen(t), 1, NULL, 0, &n);
        ps.ptoks[i] = malloc(sizeof(int32_t) * (size_t)n);
        if (ds_tokenize(ds_model_tokenizer(m), t, strlen(t), 1, ps.ptoks[i], n, &ps.plen[i])) die("tokenize");
    }
    ds_cost_table costs_a;
    fprintf(stderr, "bench_sched: profiling stories260K (B = 1..%d)\n", 8 * rmax);
    if (ds_profile_costs(m, 8 * rmax, 128, 5, 0, &costs_a)) die("profile");
    printf("{\"bench\": \"sched_setup\", \"target\": \"stories260K\", \"threads\": %d, ", threads);
    print_sps(&costs_a, 8 * rmax);
    printf("}\n");
    fflush(stdout);
    const int max_req_a = 2 * rmax > 8 ? 2 * rmax : 8;
    int32_t *out_none = malloc(sizeof(int32_t) * (size_t)max_req_a * budget_a);
    int32_t *out_pol = malloc(sizeof(int32_t) * (size_t)max_req_a * budget_a);
    int *n_none = calloc((size_t)max_req_a, sizeof(int)), *n_pol = calloc((size_t)max_req_a, sizeof(int));
    { // warm-up
        const ds_spec_params none = {.kind = DS_SPEC_NONE};
        result w;
        run_engine(m, d, &none, &ps, 1, 1, 16, out_none, n_none, &w);
    }
    for (int c = 0; c < n_conc; c++) {
        const int R = conc[c], n_req = 2 * R > 8 ? 2 * R : 8;
        result best[N_POL];
        memset(best, 0, sizeof best);
        fprintf(stderr, "bench_sched: stories260K, concurrency %d\n", R);
        for (int rep = 0; rep < reps_a; rep++)
            for (int p = 0; p < N_POL; p++) {
                ds_spec_params sp = {.kind = p && p != 10 ? DS_SPEC_DSPARK : DS_SPEC_NONE};
                if (p >= 1 && p <= 7) sp.draft_max = p;
                if (p == 8) sp.schedule = DS_SCHEDULE_THRESHOLD, sp.conf_threshold = THRESHOLD;
                if (p == 9) sp.schedule = DS_SCHEDULE_AUTO, sp.costs = &costs_a;
                result r;
                run_engine(m, d, &sp, &ps, R, n_req, budget_a, p ? out_pol : out_none, p ? n_pol : n_none, &r);
                r.lossless = 1;
                for (int j = 0; p && j < n_req; j++)
                    if (n_pol[j] != n_none[j] ||
                        memcmp(out_pol + (size_t)j * budget_a, out_none + (size_t)j * budget_a,
                               sizeof(int32_t) * (size_t)n_pol[j]))
                        r.lossless = 0;
                if (best[p].valid && !best[p].lossless) r.lossless = 0; // any repeat that differed
                keep_best(&best[p], &r);
            }
        for (int p = 0; p < N_POL; p++) print_line("stories260K", R, p, n_req, budget_a, &best[p], &best[0]);
        print_summary("stories260K", R, best);
    }

    // ---- (b) the synthetic target, acceptance replayed ----
    if (!synth_dir) {
        fprintf(stderr, "bench_sched: no --synthetic DIR: skipping the replay on a realistic-shape target\n");
        return 0;
    }
    trace tr = {0};
    fprintf(stderr, "bench_sched: recording full-block rounds on stories260K\n");
    record_trace(m, d, &ps, 256, &tr);
    if (tr.n < 50) {
        fprintf(stderr, "bench_sched: only %d full-block rounds recorded\n", tr.n);
        return 1;
    }
    long acc = 0;
    int by_len[GAMMA + 1] = {0};
    for (int i = 0; i < tr.n; i++) acc += tr.r[i].a_full, by_len[tr.r[i].a_full]++;
    const double stories_draft_ms = 1e3 * tr.draft_s / (double)tr.rounds;
    const int stories_hidden = di->hidden;

    synth sy = {0};
    sy.draft_scale = draft_scale;
    if (ds_model_load(synth_dir, &mp, (ds_model **)&sy.m)) die(synth_dir);
    const ds_model_info *si = ds_model_get_info(sy.m);
    sy.V = si->vocab_size;
    char ddir[4096];
    if (!synth_drafter) snprintf(ddir, sizeof ddir, "%s-drafter", synth_dir), synth_drafter = ddir;
    write_matching_drafter(sy.m, d, synth_drafter);
    ds_drafter *sd;
    if (ds_drafter_load(synth_drafter, sy.m, &sd)) die(synth_drafter);
    fprintf(stderr, "bench_sched: timing the matching drafter, profiling the synthetic target (B = 1..%d)\n", 8 * rmax);
    time_drafter(sy.m, sd, conc, n_conc, sy.draft_ms, 5);
    const int sd_layers = ds_drafter_get_info(sd)->n_layers, sd_rank = ds_drafter_get_info(sd)->markov_rank;
    ds_drafter_free(sd);
    if (ds_profile_costs(sy.m, 8 * rmax, SYN_CTX, 3, 1, &sy.costs)) die("profile");
    { // the gate's priors, as ds_engine_init sets them: D(1), D(4) fitted as a + b·R; calibration acceptance
        const double d1 = draft_cost_s(&sy, 1, GAMMA), d4 = draft_cost_s(&sy, 4, GAMMA);
        sy.gate_b = d4 > d1 ? (d4 - d1) / 3 : 0;
        sy.gate_a = d1 - sy.gate_b > 0 ? d1 - sy.gate_b : 0;
        for (int c = 0; c < DS_GATE_CLASSES; c++)
            sy.n_gate_accept[c] = ds_drafter_acceptance_prior(d, c == DS_GATE_SAMPLED, &sy.gate_accept[c]);
    }
    const double scale = ((double)si->dim / stories_hidden) * ((double)si->dim / stories_hidden);
    printf("{\"bench\": \"sched_setup\", \"target\": \"synthetic\", \"model\": \"%s\", \"dim\": %d, \"layers\": %d, "
           "\"vocab\": %d, \"weights\": \"%s\", \"threads\": %d, \"trace_rounds\": %d, \"trace_tau_full\": %.3f, "
           "\"trace_a_full_hist\": [%d, %d, %d, %d, %d, %d, %d, %d], "
           "\"drafter_layers\": %d, \"drafter_markov_rank\": %d, "
           "\"draft_ms_by_slots\": [%.2f, %.2f, %.2f, %.2f, %.2f, %.2f, %.2f], \"decode_ms\": %.2f, "
           "\"stories_draft_ms_per_round\": %.4f, \"scaled_alternative_draft_ms\": %.2f, \"draft_scale\": %g, ",
           si->name, si->dim, si->n_layers, si->vocab_size, ds_dtype_name(si->weight_type), threads, tr.n,
           1.0 + (double)acc / tr.n, by_len[0], by_len[1], by_len[2], by_len[3], by_len[4], by_len[5], by_len[6],
           by_len[7], sd_layers,
           sd_rank, sy.draft_ms[1][1], sy.draft_ms[1][2], sy.draft_ms[1][3], sy.draft_ms[1][4], sy.draft_ms[1][5],
           sy.draft_ms[1][6], sy.draft_ms[1][7], 1e3 / ds_cost_sps(&sy.costs, 1), stories_draft_ms, stories_draft_ms * scale,
           draft_scale);
    printf("\"batched_draft_ms\": {");
    for (int r = 1, first = 1; r <= MAX_CONC; r++) {
        if (!(sy.draft_ms[r][1] > 0)) continue;
        printf("%s\"%d\": [", first ? "" : ", ", r);
        for (int K = 1; K <= GAMMA; K++) printf("%s%.2f", K > 1 ? ", " : "", sy.draft_ms[r][K]);
        printf("]");
        first = 0;
    }
    printf("}, ");
    print_sps(&sy.costs, 8 * rmax);
    printf("}\n");
    fflush(stdout);
    // Slots: a prefilled context each, reused by every request that joins the slot.
    if (ds_workspace_init(sy.m, &sy.ws)) die("workspace");
    int32_t ctx_tok[SYN_CTX];
    for (int i = 0; i < SYN_CTX; i++) ctx_tok[i] = (int32_t)((i * 7919 + 11) % sy.V);
    for (int k = 0; k < rmax; k++) {
        if (ds_kv_init(sy.m, SYN_CTX + budget_b + GAMMA + 2, &sy.kv[k])) die("kv");
        ds_forward_seq pf = {.kv = sy.kv[k], .tokens = ctx_tok, .n_tokens = SYN_CTX};
        if (ds_model_forward(sy.m, sy.ws, &pf, 1)) die("prefill");
        sy.logits[k] = malloc(sizeof(float) * (GAMMA + 1) * (size_t)sy.V);
        if (!sy.logits[k]) die("out of memory");
    }
    for (int c = 0; c < n_conc; c++) {
        const int R = conc[c], n_req = 2 * R;
        result best[N_POL];
        memset(best, 0, sizeof best);
        fprintf(stderr, "bench_sched: synthetic, concurrency %d\n", R);
        for (int rep = 0; rep < reps_b; rep++)
            for (int p = 0; p < N_POL; p++) {
                result r;
                run_replay(&sy, &tr, p, R, n_req, budget_b, &r);
                keep_best(&best[p], &r);
            }
        for (int p = 0; p < N_POL; p++) print_line("synthetic", R, p, n_req, budget_b, &best[p], &best[0]);
        print_summary("synthetic", R, best);
    }
    for (int k = 0; k < rmax; k++) ds_kv_free(sy.kv[k]), free(sy.logits[k]);
    ds_workspace_free(sy.ws);
    ds_model_free((ds_model *)sy.m);
    free(tr.r);
    free(out_none), free(out_pol), free(n_none), free(n_pol);
    for (int i = 0; i < ps.n; i++) free(ps.ptoks[i]);
    free(ps.ptoks), free(ps.plen);
    ds_prompts_free(pset);
    ds_drafter_free(d);
    ds_model_free(m);
    return 0;
}
