// Speculation end to end on a memory-bound target with real acceptance: the inflated stories260K
// pair (`dspark inflate`, scripts/bench_e2e.sh builds it), driven through the engine exactly as
// `dspark eval --concurrency R` and `dspark serve` drive it, timed by the wall clock.
//
//   bench_e2e TARGET DRAFTER [--prompts FILE] [--conc 1,4,16] [--temps 0,1] [-n TOKENS]
//             [--repeats N] [--threads T] [--threshold C] [--requests N] [--tree N] [--bf16-inputs 0|1]
//             [--policies none,fixed3,auto,...]
//
// Policies: none (plain decoding, the baseline), fixed1..7 (draft L slots, verify all), threshold
// (DeepSpec's static rule at --threshold, default 0.5), auto (Algorithm 1 over a cost table
// profiled in this run, and the engine's drafting gate), none_control (none again: its ratio to
// none is the run-to-run noise) and, with --tree N, auto_tree (auto with up to N token-tree branches
// per round, depth 2). For each temperature and concurrency R, one run =
// max(R, --requests) requests (default 4; prompts cycled from --prompts, request j seeded j) with R
// in flight (one joins as soon as one finishes), each generating -n tokens (default 32), timed from
// the first round to the last (prefill included). The policies
// run interleaved within each of --repeats (default 3) repeats; each line reports the median, min
// and max tok/s over the repeats and the speedup against none as the median (min, max) of the
// per-repeat ratios (both measured in the same repeat). At temperature 0 every policy's tokens are
// checked against none's ("lossless"). A setup line reports the target's weight bytes per token,
// the measured read bandwidth, the bound (bandwidth / weight bytes) and plain single-sequence decode
// against it, and verify(8) / decode(1) from the cost table. JSON lines on stdout.
// --policies runs only the named policies (none, the baseline, always runs; the summary line then
// reports 0 for those left out).
// --bf16-inputs 1 loads the target with ds_model_params.bf16_inputs (what DSPARK_BF16_INPUTS=1 does
// for the CLI: a BF16 target's few-row products on VDPBF16PS, inputs rounded to bf16).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "dspark.h"
#include "gen/prompts.h"
#include "train/data.h"

#define N_POL (BENCH_N_POLICIES + 1) // ... and auto with token trees (--tree N), when asked for
#define POL_TREE BENCH_N_POLICIES
#define MAX_CONC 64
#define MAX_REPS 32

static void die(const char *what) {
    fprintf(stderr, "bench_e2e: %s: %s\n", what, ds_last_error());
    exit(1);
}

typedef struct {
    double tok_s;
    long tokens, rounds, accepted, drafted;
    double draft_s, wall_s;
} run_result;

// n_req requests through one engine, R in flight (a request joins as soon as one finishes);
// request j (prompt j mod P, seed j) writes its tokens to out + j·n (n_out[j] of them).
static void run_engine(const ds_model *m, const ds_drafter *d, const ds_spec_params *sp, int32_t *const *ptoks,
                       const int *plen, int n_prompts, int R, int n_req, int n, float temp, int32_t *out, int *n_out,
                       run_result *res) {
    ds_engine *e;
    if (ds_engine_init(m, sp->kind == DS_SPEC_DSPARK ? d : NULL, sp, &e)) die("engine");
    ds_sampler_params smp = ds_sampler_default();
    smp.temperature = temp;
    int id[MAX_CONC], req[MAX_CONC], active[MAX_CONC] = {0}, next = 0, n_active = 0;
    memset(res, 0, sizeof *res);
    const double t0 = bench_now();
    for (;;) {
        for (int k = 0; k < R && next < n_req; k++) {
            if (active[k]) continue;
            const int j = next++;
            if (ds_engine_add(e, &(ds_seq_params){.prompt = ptoks[j % n_prompts], .n_prompt = plen[j % n_prompts], .max_new = n, .sp = &smp,
                    .seed = (uint64_t)j, .batch_invariant = 1}, &id[k])) die("add");
            req[k] = j, n_out[j] = 0, active[k] = 1, n_active++;
        }
        if (!n_active) break;
        if (ds_engine_step(e)) die("step");
        for (int k = 0; k < R; k++) {
            if (!active[k]) continue;
            const int j = req[k];
            n_out[j] += ds_engine_take(e, id[k], out + (size_t)j * n + n_out[j], n - n_out[j]);
            if (!ds_engine_finished(e, id[k])) continue;
            const ds_seq_stats *s = ds_engine_stats(e, id[k]);
            res->tokens += n_out[j];
            res->rounds += s->rounds;
            res->accepted += s->accepted;
            res->drafted += s->drafted;
            res->draft_s += s->draft_s;
            ds_engine_remove(e, id[k]);
            active[k] = 0, n_active--;
        }
    }
    res->wall_s = bench_now() - t0;
    res->tok_s = res->tokens / res->wall_s;
    ds_engine_free(e);
}

static double median_of(double *v, int n, double *lo, double *hi) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    *lo = v[0];
    *hi = v[n - 1];
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int parse_list(const char *s, int *out, int cap) {
    int n = 0;
    while (*s && n < cap) {
        out[n++] = atoi(s);
        const char *c = strchr(s, ',');
        if (!c) break;
        s = c + 1;
    }
    return n;
}

int main(int argc, char **argv) {
    bench_openblas_reexec(argv);
    if (argc < 3) {
        fprintf(stderr, "usage: bench_e2e TARGET DRAFTER [--prompts FILE] [--conc 1,4,16] [--temps 0,1] [-n TOKENS]\n"
                        "                 [--repeats N] [--threads T] [--threshold C] [--requests N] [--tree N]\n"
                        "                 [--bf16-inputs 0|1] [--policies none,fixed3,auto,...]\n");
        return 2;
    }
    const char *prompts_path = "docs/prompts/stories-heldout.txt";
    int conc[16] = {1, 4, 16}, n_conc = 3, temps[4] = {0, 1}, n_temps = 2, n = 32, reps = 3, threads = 1, n_req0 = 4;
    int tree = 0, bf16_inputs = 0;
    float threshold = 0.5f;
    const char *policies = NULL;
    for (int i = 3; i + 1 < argc; i += 2) {
        const char *o = argv[i], *v = argv[i + 1];
        if (!strcmp(o, "--prompts")) prompts_path = v;
        else if (!strcmp(o, "--conc")) n_conc = parse_list(v, conc, 16);
        else if (!strcmp(o, "--temps")) n_temps = parse_list(v, temps, 4);
        else if (!strcmp(o, "-n")) n = atoi(v);
        else if (!strcmp(o, "--repeats")) reps = atoi(v);
        else if (!strcmp(o, "--threads")) threads = atoi(v);
        else if (!strcmp(o, "--threshold")) threshold = (float)atof(v);
        else if (!strcmp(o, "--requests")) n_req0 = atoi(v);
        else if (!strcmp(o, "--tree")) tree = atoi(v);
        else if (!strcmp(o, "--bf16-inputs")) bf16_inputs = atoi(v);
        else if (!strcmp(o, "--policies")) policies = v;
        else {
            fprintf(stderr, "bench_e2e: unknown option %s\n", o);
            return 2;
        }
    }
    const int n_policies = tree > 0 ? N_POL : N_POL - 1;
    int run_pol[N_POL]; // --policies: whether policy p runs
    for (int p = 0; p < N_POL; p++) run_pol[p] = !policies || p == 0;
    for (const char *q = policies; q && *q; q += strcspn(q, ",") + (q[strcspn(q, ",")] == ',')) {
        const size_t len = strcspn(q, ",");
        int found = 0;
        for (int p = 0; p < N_POL && !found; p++) {
            char buf[16];
            const char *name = p == POL_TREE ? "auto_tree" : bench_policy_name(p, buf);
            if ((found = len == strlen(name) && !strncmp(q, name, len))) run_pol[p] = 1;
        }
        if (!found) {
            fprintf(stderr, "bench_e2e: --policies: unknown policy '%.*s' (none, fixed1..fixed7, threshold, auto, "
                            "none_control, auto_tree)\n", (int)len, q);
            return 2;
        }
    }
    if (reps < 1 || reps > MAX_REPS || n < 1 || n_conc < 1 || n_temps < 1 || n_req0 < 1 || n_req0 > 4096 || tree < 0 ||
        tree > 16) {
        fprintf(stderr, "bench_e2e: need 1..%d repeats, -n >= 1, --conc and --temps lists\n", MAX_REPS);
        return 2;
    }
    int rmax = 1;
    for (int c = 0; c < n_conc; c++) {
        if (conc[c] < 1 || conc[c] > MAX_CONC) {
            fprintf(stderr, "bench_e2e: concurrency must be 1..%d\n", MAX_CONC);
            return 2;
        }
        rmax = conc[c] > rmax ? conc[c] : rmax;
    }
    ds_set_threads(threads);
    ds_model *m;
    ds_drafter *d;
    const ds_model_params mp = {.n_threads = threads, .bf16_inputs = bf16_inputs};
    if (ds_model_load(argv[1], &mp, &m)) die(argv[1]);
    if (ds_drafter_load(argv[2], m, &d)) die(argv[2]);
    const ds_model_info *in = ds_model_get_info(m);
    ds_prompt_set *pset;
    if (ds_prompts_load(prompts_path, &pset)) die(prompts_path);
    int32_t **ptoks = calloc((size_t)pset->n, sizeof *ptoks);
    int *plen = calloc((size_t)pset->n, sizeof *plen);
    for (int i = 0; i < pset->n; i++) {
        int k = 0;
        const char *t = pset->text[i];
        ds_tokenize(ds_model_tokenizer(m), t, strlen(t), 1, NULL, 0, &k);
        ptoks[i] = malloc(sizeof(int32_t) * (size_t)(k + 1));
        if (ds_tokenize(ds_model_tokenizer(m), t, strlen(t), 1, ptoks[i], k, &plen[i])) die("tokenize");
    }

    // Setup: the bandwidth bound, plain decode against it, the cost table (auto's, and verify(8)/decode(1)).
    fprintf(stderr, "bench_e2e: measuring read bandwidth and plain decode (%d thread%s)\n", threads, threads > 1 ? "s" : "");
    const double bw = bench_read_bandwidth(threads);
    const double bound = bw / (double)in->weight_bytes;
    const double dec = bench_decode_tps(m, 16, 3);
    fprintf(stderr, "bench_e2e: profiling the target (B = 1..%d, quick)\n", 8 * rmax);
    ds_cost_table costs;
    if (ds_profile_costs(m, 8 * rmax, 64, 3, 1, &costs)) die("profile");
    printf("{\"bench\": \"e2e_setup\", \"target\": \"%s\", \"dim\": %d, \"layers\": %d, \"ffn\": %d, \"weight_type\": \"%s\", "
           "\"weight_bytes\": %zu, \"drafter_layers\": %d, \"threads\": %d, \"read_gb_per_s\": %.2f, "
           "\"bound_tok_per_s\": %.2f, \"decode_tok_per_s\": %.2f, \"decode_over_bound\": %.3f, "
           "\"verify8_over_decode1\": %.3f, \"verify16_over_decode1\": %.3f, \"bf16_inputs\": %d}\n",
           argv[1], in->dim, in->n_layers, in->ffn_dim, ds_dtype_name(in->weight_type), in->weight_bytes,
           ds_drafter_get_info(d)->n_layers, threads, bw / 1e9, bound, dec, dec / bound,
           costs.bmax >= 8 ? costs.sps[1] / costs.sps[8] : 0, costs.bmax >= 16 ? costs.sps[1] / costs.sps[16] : 0, bf16_inputs);
    fflush(stdout);

    const int max_req = rmax > n_req0 ? rmax : n_req0;
    int32_t *out_none = malloc(sizeof(int32_t) * (size_t)max_req * n), *out_pol = malloc(sizeof(int32_t) * (size_t)max_req * n);
    int *n_none = calloc((size_t)max_req, sizeof(int)), *n_pol = calloc((size_t)max_req, sizeof(int));
    for (int ti = 0; ti < n_temps; ti++) {
        const float temp = (float)temps[ti];
        for (int c = 0; c < n_conc; c++) {
            const int R = conc[c], n_req = R > n_req0 ? R : n_req0;
            static double rate[N_POL][MAX_REPS], ratio[N_POL][MAX_REPS];
            static run_result last[N_POL];
            int lossless[N_POL];
            for (int p = 0; p < n_policies; p++) lossless[p] = 1;
            for (int rep = 0; rep < reps; rep++) {
                fprintf(stderr, "bench_e2e: T = %g, R = %d, repeat %d/%d\n", temp, R, rep + 1, reps);
                for (int p = 0; p < n_policies; p++) {
                    if (!run_pol[p]) {
                        rate[p][rep] = 0;
                        continue;
                    }
                    ds_spec_params sp = {.kind = p && p != 10 ? DS_SPEC_DSPARK : DS_SPEC_NONE};
                    if (p >= 1 && p <= 7) sp.draft_max = p;
                    if (p == 8) sp.schedule = DS_SCHEDULE_THRESHOLD, sp.conf_threshold = threshold;
                    if (p == 9 || p == POL_TREE) sp.schedule = DS_SCHEDULE_AUTO, sp.costs = &costs;
                    if (p == POL_TREE) sp.tree_branches = tree;
                    run_engine(m, d, &sp, ptoks, plen, pset->n, R, n_req, n, temp, p ? out_pol : out_none, p ? n_pol : n_none,
                               &last[p]);
                    rate[p][rep] = last[p].tok_s;
                    for (int j = 0; p && temp == 0 && j < n_req; j++)
                        if (n_pol[j] != n_none[j] || memcmp(out_pol + (size_t)j * n, out_none + (size_t)j * n,
                                                            sizeof(int32_t) * (size_t)n_pol[j]))
                            lossless[p] = 0;
                }
                for (int p = 0; p < n_policies; p++) ratio[p][rep] = rate[p][rep] / rate[0][rep];
            }
            double med[N_POL], rmed[N_POL];
            for (int p = 0; p < n_policies; p++) {
                if (!run_pol[p]) {
                    med[p] = rmed[p] = 0;
                    continue;
                }
                double lo, hi, rlo, rhi;
                char buf[16];
                med[p] = median_of(rate[p], reps, &lo, &hi);
                rmed[p] = median_of(ratio[p], reps, &rlo, &rhi);
                const run_result *r = &last[p];
                printf("{\"bench\": \"e2e\", \"temp\": %g, \"concurrency\": %d, \"requests\": %d, \"policy\": \"%s\", \"tokens\": %ld, "
                       "\"tau\": %.3f, \"mean_ell\": %.3f, \"draft_share\": %.3f, \"tok_per_s\": %.2f, "
                       "\"tok_per_s_min\": %.2f, \"tok_per_s_max\": %.2f, \"speedup_vs_none\": %.3f, "
                       "\"speedup_min\": %.3f, \"speedup_max\": %.3f, \"repeats\": %d",
                       temp, R, n_req, p == POL_TREE ? "auto_tree" : bench_policy_name(p, buf), r->tokens, r->rounds ? (double)(r->accepted + r->rounds) / r->rounds : 0,
                       r->rounds ? (double)r->drafted / r->rounds : 0, r->draft_s / r->wall_s, med[p], lo, hi, rmed[p],
                       rlo, rhi, reps);
                if (temp == 0) printf(", \"lossless\": %s", lossless[p] ? "true" : "false");
                printf("}\n");
            }
            int best = 1;
            for (int p = 2; p <= 7; p++)
                if (rmed[p] > rmed[best]) best = p;
            printf("{\"bench\": \"e2e_summary\", \"temp\": %g, \"concurrency\": %d, \"none_tok_per_s\": %.2f, "
                   "\"none_over_bound\": %.3f, \"best_fixed\": %d, \"best_fixed_speedup\": %.3f, "
                   "\"threshold_speedup\": %.3f, \"auto_speedup\": %.3f, \"auto_tree_speedup\": %.3f, \"control_speedup\": %.3f, "
                   "\"goal_auto_ge_1_5\": %s, \"goal_best_fixed_ge_1_5\": %s, \"goal_auto_ge_0_98\": %s}\n",
                   temp, R, med[0], med[0] / bound, best, rmed[best], rmed[8], rmed[9], tree ? rmed[POL_TREE] : 0,
                   rmed[10], rmed[9] >= 1.5 ? "true" : "false", rmed[best] >= 1.5 ? "true" : "false",
                   rmed[9] >= 0.98 ? "true" : "false");
            fflush(stdout);
        }
    }
    free(out_none), free(out_pol), free(n_none), free(n_pol);
    for (int i = 0; i < pset->n; i++) free(ptoks[i]);
    free(ptoks), free(plen);
    ds_prompts_free(pset);
    ds_drafter_free(d);
    ds_model_free(m);
    return 0;
}
