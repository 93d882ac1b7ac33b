// Datagen: the frozen target writes drafter training data (data.h's file): R sequences at a time
// through the engine (plain decoding), each from a prompt (or BOS alone) with its own seed, written
// in generation order so the file does not depend on R, on the thread count, or on the number of
// MPI ranks.
//
// Under MPI (mpirun -np N), rank r generates the sequences r, r + N, r + 2N, ... and sends them to
// rank 0, which writes the one file (and the held-out file): byte-identical to a one-process run
// with the same options. (Rank 0 holds the other ranks' sequences in memory until the end.)
//
// Datagen (the API: include/dspark_jobs.h): the runner (ds_gen_run) decodes R sequences at a time;
// completed sequences are written in index order (one process), or gathered to rank 0 and written
// there in index order (MPI).
#include "dspark_jobs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"
#include "gen/prompts.h"
#include "train/data.h"
#include "train/mpi.h"

ds_datagen_params ds_datagen_default(void) {
    ds_datagen_params o = {0};
    o.sp = ds_sampler_default();
    o.sp.temperature = 0.7f;
    o.sp.top_k = 20;
    o.sp.top_p = 0.8f;
    o.sp.min_p = 0;
    o.plain = 0.5; // half the sequences at temperature 1: what a T = 1 decode visits (docs/results.md)
    o.concurrency = 8;
    o.holdout = -1;
    return o;
}

// Whether sequence `index` is one of the plain share (ds_datagen_params.plain): floor((i+1)·f) > floor(i·f).
static int is_plain(long index, double f) {
    return f > 0 && floor((double)(index + 1) * f) > floor((double)index * f);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// A completed sequence waiting for its turn in the file.
typedef struct {
    long index;    // position in the generation order
    int32_t *toks; // (n) the prompt, the generated tokens and the stop id that ended them (if one did)
    int n, n_prompt;
} dg_seq;

typedef struct {
    const ds_datagen_params *o;
    ds_model *model;
    ds_engine *engine;
    ds_prompt_set *prompts;
    int32_t **ptoks; // (n_sources) tokenized prompts, BOS first
    int *pn;
    int n_sources;
    ds_data_writer *w, *wh;
    int R;           // sequences in flight at a time
    dg_seq *done;    // completed, not yet written (unordered)
    int n_done, cap_done;
    int32_t *sent;   // MPI: this rank's completed sequences, serialized (index lo, hi, n, n_prompt, ids)
    size_t n_sent, cap_sent;
    long n_main, n_hold;
} dg_state;

static void dg_free(dg_state *g) {
    ds_data_writer_abort(g->w);
    ds_data_writer_abort(g->wh);
    ds_engine_free(g->engine);
    ds_model_free(g->model);
    for (int i = 0; g->ptoks && i < g->n_sources; i++) free(g->ptoks[i]);
    free(g->ptoks);
    free(g->pn);
    ds_prompts_free(g->prompts);
    for (int i = 0; i < g->n_done; i++) free(g->done[i].toks);
    free(g->done);
    free(g->sent);
}

static ds_status write_seq(dg_state *g, long index, const int32_t *toks, int n, int n_prompt) {
    const ds_datagen_params *o = g->o;
    const int hold = g->wh && ds_data_is_holdout((uint64_t)index, o->seed, o->holdout);
    (*(hold ? &g->n_hold : &g->n_main))++;
    return ds_data_writer_add(hold ? g->wh : g->w, toks, n, n_prompt);
}

// A completed sequence: written (one process) or kept for rank 0 (MPI).
static ds_status emit(dg_state *g, const dg_seq *s, int ranks) {
    if (ranks == 1) return write_seq(g, s->index, s->toks, s->n, s->n_prompt);
    const size_t need = g->n_sent + 4 + (size_t)s->n;
    if (need > g->cap_sent) {
        size_t nc = g->cap_sent ? 2 * g->cap_sent : 1 << 16;
        while (nc < need) nc *= 2;
        int32_t *ns = realloc(g->sent, sizeof(int32_t) * nc);
        if (!ns) return ds_fail(DS_ERR_NOMEM, "out of memory");
        g->sent = ns;
        g->cap_sent = nc;
    }
    int32_t *r = g->sent + g->n_sent;
    r[0] = (int32_t)(s->index & 0x7fffffff);
    r[1] = (int32_t)(s->index >> 31);
    r[2] = s->n;
    r[3] = s->n_prompt;
    memcpy(r + 4, s->toks, sizeof(int32_t) * (size_t)s->n);
    g->n_sent = need;
    return DS_OK;
}

typedef struct {
    long index;
    const int32_t *rec;
} dg_ref;

static int by_index(const void *x, const void *y) {
    const long a = ((const dg_ref *)x)->index, b = ((const dg_ref *)y)->index;
    return (a > b) - (a < b);
}

static int cmp_seq(const void *x, const void *y) {
    const long a = ((const dg_seq *)x)->index, b = ((const dg_seq *)y)->index;
    return (a > b) - (a < b);
}

// Rank 0: every rank's sequences, in index order, into the writers.
static ds_status merge_ranks(dg_state *g) {
    void *all;
    size_t bytes;
    if (ds_mpi_gather_root(g->sent, sizeof(int32_t) * g->n_sent, &all, &bytes))
        return ds_fail(DS_ERR_NOMEM, "out of memory gathering the ranks' sequences");
    if (!all) return DS_OK; // not rank 0
    const int32_t *p = all, *end = p + bytes / sizeof(int32_t);
    size_t n = 0;
    for (const int32_t *r = p; r < end; r += 4 + r[2]) n++;
    dg_ref *refs = malloc(sizeof *refs * (n ? n : 1));
    ds_status st = refs ? DS_OK : ds_fail(DS_ERR_NOMEM, "out of memory");
    n = 0;
    for (const int32_t *r = p; refs && r < end; r += 4 + r[2]) refs[n++] = (dg_ref){(long)r[0] | ((long)r[1] << 31), r};
    if (refs) qsort(refs, n, sizeof *refs, by_index);
    for (size_t i = 0; !st && i < n; i++) st = write_seq(g, refs[i].index, refs[i].rec + 4, refs[i].rec[2], refs[i].rec[3]);
    free(refs);
    free(all);
    return st;
}

// The sources: tokenized prompts (chat prompts rendered), or BOS alone.
static ds_status load_sources(dg_state *g) {
    const ds_datagen_params *o = g->o;
    const ds_model_info *info = ds_model_get_info(g->model);
    ds_status st;
    if (o->prompts && (st = ds_prompts_load_chat(o->prompts, &g->prompts))) return st;
    g->n_sources = g->prompts ? g->prompts->n : 1;
    g->ptoks = calloc((size_t)g->n_sources, sizeof *g->ptoks);
    g->pn = calloc((size_t)g->n_sources, sizeof *g->pn);
    if (!g->ptoks || !g->pn) return ds_fail(DS_ERR_NOMEM, "out of memory");
    if (!g->prompts) {
        if (info->bos_id < 0)
            return ds_fail(DS_ERR_INVALID, "%s has no BOS token, so --unconditional has nothing to start from", o->target);
        if (1 + (long)o->max_tokens > info->max_ctx)
            return ds_fail(DS_ERR_INVALID, "--max-tokens %d exceeds the model's context of %d", o->max_tokens, info->max_ctx);
        if (!(g->ptoks[0] = malloc(sizeof(int32_t)))) return ds_fail(DS_ERR_NOMEM, "out of memory");
        g->ptoks[0][0] = info->bos_id;
        g->pn[0] = 1;
        return DS_OK;
    }
    ds_gen_prompts pt; // the one prompt check (gen/prompts.h); the rows move into g
    if ((st = ds_gen_prompts_tokenize(g->model, g->prompts, o->max_tokens, &pt))) return st;
    for (int i = 0; i < g->n_sources; i++) g->ptoks[i] = pt.ids[i], g->pn[i] = pt.len[i];
    free(pt.ids);
    free(pt.len);
    return DS_OK;
}

// What the run has done so far, in this rank's share (the k-th sequence is rank + k·ranks).
typedef struct {
    int rank, ranks;
    long mine;             // sequences of this rank
    long existing;         // sequences already in the output file (appending)
    long written, completed;
    long long gen_tokens;
    ds_sampler_params plain_sp;
    double t0, last_report;
} dg_run;

// The generation-order index of this rank's k-th sequence.
static long dg_index(const dg_run *run, long k) { return run->rank + k * run->ranks; }

// What the runner's callbacks see (ds_gen_run_params.ctx).
typedef struct {
    dg_state *g;  // the engine, the writers, the completed sequences
    dg_run *run;  // the counts
} dg_ctx;

// Load the target and the prompts, open the writers (rank 0: a bad output path fails before any
// generation) and start the engine.
static ds_status dg_open(dg_state *g, dg_run *run) {
    const ds_datagen_params *o = g->o;
    g->R = (int)(o->concurrency < run->mine ? o->concurrency : (run->mine > 0 ? run->mine : 1));
    ds_status st = ds_model_load(o->target, NULL, &g->model); // (the process's thread count: ds_set_threads)
    if (!st) st = load_sources(g);
    const ds_model_info *info = g->model ? ds_model_get_info(g->model) : NULL;
    if (!st && run->rank == 0) st = ds_data_writer_open(o->out, (uint64_t)info->vocab_size, o->append, &g->w);
    if (!st && run->rank == 0 && o->holdout_out)
        st = ds_data_writer_open(o->holdout_out, (uint64_t)info->vocab_size, o->append, &g->wh);
    run->existing = g->w ? (long)ds_data_writer_count(g->w) : 0;
    const ds_spec_params none = {.kind = DS_SPEC_NONE};
    if (!st) st = ds_engine_init(g->model, NULL, &none, &g->engine);
    return st;
}

// This rank's k-th sequence (ds_gen_run_params.request): its prompt (the sources in turn), sampler
// and seed.
static void dg_request(void *ctx, long k, ds_gen_request *r) {
    const dg_ctx *c = ctx;
    const ds_datagen_params *o = c->g->o;
    const long index = dg_index(c->run, k);
    const int src = (int)(index % c->g->n_sources);
    *r = (ds_gen_request){.ids = c->g->ptoks[src], .n_ids = c->g->pn[src], .max_new = o->max_tokens,
                          .sp = is_plain(index, o->plain) ? c->run->plain_sp : o->sp, .seed = o->seed + (uint64_t)index};
}

// After a round: the generated tokens so far (progress).
static void dg_count(void *ctx, long k, const ds_gen *g) { ((dg_ctx *)ctx)->run->gen_tokens += ds_gen_new_tokens(g); }

// Write the completed sequences that are next in order.
static ds_status dg_emit_ready(dg_state *g, dg_run *run) {
    for (int found = 1; found;) {
        found = 0;
        for (int j = 0; j < g->n_done; j++)
            if (g->done[j].index == dg_index(run, run->written)) {
                const ds_status st = emit(g, &g->done[j], run->ranks);
                if (st) return st;
                free(g->done[j].toks);
                g->done[j] = g->done[--g->n_done];
                run->written++;
                found = 1;
                break;
            }
    }
    return DS_OK;
}

// A sequence is complete (with the stop id it produced: EOS, <|im_end|>, ...): onto the completed
// list, then whatever is next in order into the file.
static ds_status dg_done(void *ctx, long k, const ds_gen *gen) {
    dg_state *g = ((dg_ctx *)ctx)->g;
    dg_run *run = ((dg_ctx *)ctx)->run;
    run->completed++;
    if (g->n_done == g->cap_done) {
        const int nc = g->cap_done ? 2 * g->cap_done : 16;
        dg_seq *nd = realloc(g->done, sizeof *nd * (size_t)nc);
        if (!nd) return ds_fail(DS_ERR_NOMEM, "out of memory");
        g->done = nd;
        g->cap_done = nc;
    }
    int n_prompt;
    const int32_t *prompt = ds_gen_prompt(gen, &n_prompt);
    const ds_text_out *tx = ds_gen_text(gen);
    const int n_gen = ds_text_out_tokens(tx);
    dg_seq *s = &g->done[g->n_done];
    if (!(s->toks = malloc(sizeof(int32_t) * ((size_t)n_prompt + (size_t)n_gen + 1))))
        return ds_fail(DS_ERR_NOMEM, "out of memory");
    memcpy(s->toks, prompt, sizeof(int32_t) * (size_t)n_prompt);
    for (int i = 0; i < n_gen; i++) s->toks[n_prompt + i] = ds_text_out_token_id(tx, i);
    s->n = n_prompt + n_gen;
    s->n_prompt = n_prompt;
    s->index = dg_index(run, k);
    int32_t stop_tok;
    if (ds_engine_finish_reason(g->engine, ds_gen_seq(gen), &stop_tok) == DS_FINISH_STOP) s->toks[s->n++] = stop_tok;
    g->n_done++;
    return dg_emit_ready(g, run);
}

// Rank 0 reports progress at most every 0.25 s (after every round).
static void dg_report(void *ctx) {
    const dg_state *g = ((dg_ctx *)ctx)->g;
    dg_run *run = ((dg_ctx *)ctx)->run;
    const ds_datagen_params *o = g->o;
    const double now = now_s();
    if (run->rank != 0 || !o->progress || now - run->last_report < 0.25) return;
    run->last_report = now;
    const double el = now - run->t0;
    const long completed = run->completed;
    ds_datagen_progress p = {.completed = completed * run->ranks < o->count ? completed * run->ranks : o->count,
                             .count = o->count, .gen_tokens = run->gen_tokens, .elapsed_s = el,
                             .tok_per_s = el > 0 ? (double)run->gen_tokens * run->ranks / el : 0,
                             .eta_s = completed > 0 ? el / (double)completed * (double)(run->mine - completed) : -1};
    o->progress(o->progress_ctx, &p);
}

// Stop asked (ds_datagen_params.interrupted: Ctrl-C): the runner stops before the next round.
static int dg_interrupted(void *ctx) {
    const volatile int *flag = ((dg_ctx *)ctx)->g->o->interrupted;
    return flag && *flag;
}

// The end: on an interruption keep every completed sequence (in index order; the ones in flight
// are dropped), gather the ranks, and commit the files (an interruption before any complete
// sequence leaves any existing file as it was).
static ds_status dg_finish(dg_state *g, dg_run *run, int stop, ds_datagen_result *res) {
    ds_status st;
    if (g->n_done) {
        qsort(g->done, (size_t)g->n_done, sizeof *g->done, cmp_seq);
        for (int j = 0; j < g->n_done; j++)
            if ((st = emit(g, &g->done[j], run->ranks))) return st;
    }
    double sums[3] = {(double)run->completed, (double)run->gen_tokens, stop ? 1 : 0};
    ds_mpi_allreduce_sum(sums, 3);
    if (run->ranks > 1 && (st = merge_ranks(g))) return st;
    res->interrupted = sums[2] > 0;
    if (res->interrupted && sums[0] == 0)
        return ds_fail(DS_ERR_INTERRUPTED, "interrupted before any sequence was complete: nothing written");
    if (g->wh) {
        st = ds_data_writer_commit(g->wh);
        g->wh = NULL;
        if (st) return st;
    }
    if (g->w) {
        st = ds_data_writer_commit(g->w);
        g->w = NULL;
        if (st) return st;
    }
    res->written = g->n_main;
    res->held_out = g->n_hold;
    res->in_file = run->existing + g->n_main;
    res->gen_tokens = (long long)sums[1];
    res->seconds = now_s() - run->t0;
    return DS_OK;
}

ds_status ds_datagen_run(const ds_datagen_params *o, ds_datagen_result *res) {
    memset(res, 0, sizeof *res);
    if (o->count < 1 || o->max_tokens < 1 || o->concurrency < 1 || !o->out)
        return ds_fail(DS_ERR_INVALID, "datagen needs count, max_tokens and concurrency >= 1 and an output file");
    dg_state g = {.o = o};
    dg_run run = {.rank = ds_mpi_rank(), .ranks = ds_mpi_size()};
    run.mine = o->count > run.rank ? (o->count - run.rank + run.ranks - 1) / run.ranks : 0;
    ds_status st = dg_open(&g, &run);
    run.plain_sp = ds_sampler_default();
    run.plain_sp.temperature = 1.0f;
    run.plain_sp.verify = o->sp.verify;
    run.t0 = run.last_report = now_s();
    // The sequences as token ids (no tokenizer needed: --unconditional runs on a target without one).
    // Reproducible whatever R: the generation layer asks for batch invariance, so decoding rounds run
    // every product through the multi-row kernel, whose result for a row never depends on the other
    // rows (sgemm's summation order changes with the batch size, and at R >= 10 sampled tokens near a
    // tie would differ). Measured on a 2048 x 16 model with R = 16 and 32, no slower than sgemm on
    // this memory-bound decoding. Prefill (one sequence, the same rows whatever R) keeps sgemm.
    dg_ctx c = {&g, &run};
    const ds_gen_run_params p = {.max_active = g.R, .request = dg_request, .on_update = dg_count, .on_done = dg_done,
                                 .on_round = dg_report, .interrupted = dg_interrupted, .ctx = &c};
    if (!st) st = ds_gen_run(g.engine, NULL, NULL, run.mine, &p, NULL);
    const int stop = st == DS_ERR_INTERRUPTED;
    if (!st || stop) st = dg_finish(&g, &run, stop, res);
    dg_free(&g);
    return st;
}
