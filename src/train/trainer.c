// The training loop (deepspec-format.md §6 recipe): per step, `batch` sequences (split over MPI
// ranks), each run through the frozen target for its tap rows and final hidden states, up to
// `anchors` anchor blocks sampled per sequence, forward + backward (step.c), gradients summed over
// sequences and ranks and normalized by the total slot weight, clipped, AdamW on f32 master weights
// with linear warmup then cosine decay to 0.
//
// Determinism: the sequence order and the anchors of step s come from counter-based streams keyed
// by (seed, s), never from history, so a resumed run repeats exactly what the uninterrupted run
// would have done (same thread count: every kernel's reduction order is fixed by it).
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/threads.h"
#include "base/status.h"
#include "io/atomic.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "train/data.h"
#include "train/trainer.h"


ds_train_opts ds_train_defaults(void) {
    ds_train_opts o = {0};
    o.shape = ds_drafter_init_default();
    o.steps = 200;
    o.batch = 8;
    o.anchors = 512;
    o.lr = 6e-4f;
    o.warmup = 0.04f;
    o.clip = 1.0f;
    o.lw = (ds_loss_weights){0.1f, 0.9f, 1.0f, 4.0f};
    return o;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Learning rate of step t (0-based): linear warmup over the first warmup·steps steps, then cosine
// from lr to 0.
static double lr_at(const ds_train_opts *o, int t) {
    const int warm = (int)ceil(o->warmup * o->steps);
    if (t < warm) return o->lr * (t + 1) / (double)warm;
    const double prog = o->steps > warm ? (double)(t - warm) / (o->steps - warm) : 1.0;
    return o->lr * 0.5 * (1.0 + cos(M_PI * prog));
}

typedef struct {
    float *p, *m, *v;
    const float *g;
    size_t n;
    double lr, wd, c1, c2;
} adamw_job;

#define DS_ADAMW_ITEM 16384 // parameters per item of the parallel loop

static void adamw_item(void *ctx, int item, int worker) {
    const adamw_job *j = ctx;
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    float *p = j->p, *m = j->m, *v = j->v;
    const float *g = j->g;
    const size_t end = (size_t)item * DS_ADAMW_ITEM + DS_ADAMW_ITEM < j->n ? (size_t)item * DS_ADAMW_ITEM + DS_ADAMW_ITEM : j->n;
    for (size_t i = (size_t)item * DS_ADAMW_ITEM; i < end; i++) {
        m[i] = (float)(b1 * m[i] + (1 - b1) * g[i]);
        v[i] = (float)(b2 * v[i] + (1 - b2) * (double)g[i] * g[i]);
        const double mh = m[i] / j->c1, vh = v[i] / j->c2;
        p[i] -= (float)(j->lr * (mh / (sqrt(vh) + eps) + j->wd * p[i]));
    }
}

// AdamW (β1 0.9, β2 0.999, ε 1e-8, decoupled weight decay) at 1-based step t.
static void adamw(float *p, const float *g, float *m, float *v, size_t n, double lr, double wd, int t) {
    adamw_job j = {p, m, v, g, n, lr, wd, 1.0 - pow(0.9, t), 1.0 - pow(0.999, t)};
    ds_parallel_for((int)((n + DS_ADAMW_ITEM - 1) / DS_ADAMW_ITEM), adamw_item, &j);
}

// The `b`-th sequence of step `step` (global index over ranks): epoch-wise permutations of the data
// drawn from (seed, epoch), so every sequence is seen once per epoch.
static size_t sequence_at(uint64_t seed, size_t count, long item, size_t *perm, long *perm_epoch) {
    const long epoch = item / (long)count;
    if (*perm_epoch != epoch) {
        ds_rng r = ds_rng_init(seed, 0x7065726d00000000ULL + (uint64_t)epoch); // "perm"
        for (size_t i = 0; i < count; i++) perm[i] = i;
        for (size_t i = count - 1; i > 0; i--) {
            const size_t j = (size_t)(ds_rng_uniform(&r) * (double)(i + 1));
            const size_t t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        *perm_epoch = epoch;
    }
    return perm[item % (long)count];
}

// Up to k anchors among positions p with mask[p] and mask[p + 1], uniformly without replacement,
// from the stream (seed, item); sorted.
static int sample_anchors(uint64_t seed, long item, int n, int n_prompt, int k, int *out) {
    int c = 0;
    for (int p = n_prompt; p + 1 < n; p++) out[c++] = p;
    if (c <= k) return c;
    ds_rng r = ds_rng_init(seed, 0x616e6300000000ULL + (uint64_t)item); // "anc"
    for (int i = 0; i < k; i++) { // partial Fisher-Yates
        const int j = i + (int)(ds_rng_uniform(&r) * (c - i));
        const int t = out[i];
        out[i] = out[j];
        out[j] = t;
    }
    for (int i = 1; i < k; i++) // insertion sort (k is small)
        for (int j = i; j > 0 && out[j] < out[j - 1]; j--) {
            const int t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return k;
}

// ---- checkpoints ---------------------------------------------------------------------------------

typedef struct {
    const ds_train_opts *o;
    ds_tmodel tm;
    char *config_text;  // the drafter's config.json, copied into every checkpoint
    float *m, *v;       // AdamW moments (n_params)
    int step;           // optimizer steps done
} state;

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 && n < (1 << 24) ? malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

// Model, optimizer, config, then trainer_state.json last: a checkpoint is complete when its state
// file names its step (each file is written atomically).
static ds_status save(state *S) {
    const ds_train_opts *o = S->o;
    char path[4200];
    ds_status st = ds_tmodel_write(&S->tm, S->tm.params, DS_F32, o->out);
    snprintf(path, sizeof path, "%s/config.json", o->out);
    if (!st) st = ds_atomic_write_text(path, S->config_text);
    if (!st) {
        ds_st_writer *w = ds_st_writer_new();
        const int64_t n = (int64_t)S->tm.n_params;
        char step[32];
        snprintf(step, sizeof step, "%d", S->step);
        snprintf(path, sizeof path, "%s/optimizer.safetensors", o->out);
        st = !w ? DS_ERR_NOMEM : ds_st_writer_add(w, "adam_m", DS_F32, 1, &n, S->m);
        if (!st) st = ds_st_writer_add(w, "adam_v", DS_F32, 1, &n, S->v);
        if (!st) st = ds_st_writer_set_metadata(w, "step", step);
        if (!st) st = ds_st_writer_write_file(w, path);
        ds_st_writer_free(w);
    }
    if (!st) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "step", S->step);
        cJSON_AddNumberToObject(j, "steps", o->steps);
        cJSON_AddNumberToObject(j, "batch", o->batch);
        cJSON_AddNumberToObject(j, "anchors", o->anchors);
        cJSON_AddNumberToObject(j, "seed", (double)o->seed);
        cJSON_AddNumberToObject(j, "lr", o->lr);
        cJSON_AddNumberToObject(j, "warmup", o->warmup);
        cJSON_AddNumberToObject(j, "clip", o->clip);
        cJSON_AddNumberToObject(j, "ce", o->lw.ce);
        cJSON_AddNumberToObject(j, "l1", o->lw.l1);
        cJSON_AddNumberToObject(j, "conf", o->lw.conf);
        cJSON_AddNumberToObject(j, "decay", o->lw.decay);
        cJSON_AddStringToObject(j, "data", o->data);
        snprintf(path, sizeof path, "%s/trainer_state.json", o->out);
        st = ds_json_save(j, path);
        cJSON_Delete(j);
    }
    return st ? ds_fail_prefix(st, "saving a checkpoint to %s", o->out) : DS_OK;
}

// Resume: the options that shape the run must be the ones it started with.
static ds_status load_resume(state *S) {
    const ds_train_opts *o = S->o;
    char path[4200];
    snprintf(path, sizeof path, "%s/trainer_state.json", o->out);
    cJSON *j;
    ds_status st = ds_json_load(path, 1 << 20, &j);
    if (st) return ds_fail_prefix(st, "--resume");
    double step, steps, batch, anchors, seed, lr, warmup;
    if ((st = ds_json_num(j, path, "step", -1, &step)) || (st = ds_json_num(j, path, "steps", -1, &steps)) ||
        (st = ds_json_num(j, path, "batch", -1, &batch)) || (st = ds_json_num(j, path, "anchors", -1, &anchors)) ||
        (st = ds_json_num(j, path, "seed", -1, &seed)) || (st = ds_json_num(j, path, "lr", -1, &lr)) ||
        (st = ds_json_num(j, path, "warmup", -1, &warmup))) {
        cJSON_Delete(j);
        return st;
    }
    const int step_ok = ds_json_is_int(cJSON_GetObjectItemCaseSensitive(j, "step"), 0, 1e9);
    cJSON_Delete(j);
    if (!step_ok)
        return ds_fail(DS_ERR_FORMAT, "%s: \"step\" must be the number of steps done (a non-negative integer)", path);
    if (steps != o->steps || batch != o->batch || anchors != o->anchors || seed != (double)o->seed ||
        fabs(lr - o->lr) > 1e-9 || fabs(warmup - o->warmup) > 1e-9)
        return ds_fail(DS_ERR_MISMATCH,
                       "%s: --resume needs the options the run started with (steps %g, batch %g, anchors %g, seed %g, "
                       "lr %g, warmup %g)",
                       path, steps, batch, anchors, seed, lr, warmup);
    S->step = (int)step;
    snprintf(path, sizeof path, "%s/optimizer.safetensors", o->out);
    ds_safetensors *sf;
    if ((st = ds_st_open(path, &sf))) return st;
    const ds_st_tensor *m = ds_st_find(sf, "adam_m"), *v = ds_st_find(sf, "adam_v");
    const char *ms = ds_st_metadata(sf, "step");
    if (!m || !v || m->dtype != DS_F32 || v->dtype != DS_F32 || m->nbytes != S->tm.n_params * 4 ||
        v->nbytes != S->tm.n_params * 4 || !ms || atoi(ms) != S->step)
        st = ds_fail(DS_ERR_FORMAT, "%s: optimizer state does not match the checkpoint (step %d)", path, S->step);
    else {
        memcpy(S->m, m->data, m->nbytes);
        memcpy(S->v, v->data, v->nbytes);
    }
    ds_st_close(sf);
    return st;
}

// metrics.jsonl: on resume keep the lines of the steps already done (complete JSON lines only: a
// kill can cut the last one), rewritten atomically (never truncated in place: a kill at any moment
// leaves the old or the new file), then appended to.
static ds_status open_metrics(const ds_train_opts *o, int keep_steps, FILE **out) {
    char path[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", o->out);
    *out = NULL;
    ds_status st = DS_OK;
    if (keep_steps > 0) {
        char *old = read_text(path);
        ds_atomic_file af;
        if ((st = ds_atomic_open(&af, path))) {
            free(old);
            return st;
        }
        for (char *line = old ? strtok(old, "\n") : NULL; line; line = strtok(NULL, "\n")) {
            int step = 0;
            if (sscanf(line, "{\"step\":%d", &step) != 1 || step > keep_steps) continue;
            cJSON *j = cJSON_Parse(line);
            if (cJSON_IsObject(j)) fprintf(af.f, "%s\n", line);
            cJSON_Delete(j);
        }
        free(old);
        if ((st = ds_atomic_commit(&af))) return st;
        *out = fopen(path, "a");
    } else {
        ds_atomic_file af; // a fresh run: an empty file, by the same rule (never through a FIFO or device)
        if ((st = ds_atomic_open(&af, path)) || (st = ds_atomic_commit(&af))) return st;
        *out = fopen(path, "a");
    }
    if (!*out) return ds_fail(DS_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    return DS_OK;
}

// The loss curve as a PNG: metrics.jsonl -> a two-column file -> gnuplot.
static void plot(const ds_train_opts *o) {
    char path[4200], dat[4200], cmd[9000];
    snprintf(path, sizeof path, "%s/metrics.jsonl", o->out);
    snprintf(dat, sizeof dat, "%s/loss.dat", o->out);
    FILE *in = fopen(path, "r"), *out = fopen(dat, "w");
    char line[1024];
    while (in && out && fgets(line, sizeof line, in)) {
        int step;
        double loss;
        if (sscanf(line, "{\"step\":%d,\"loss\":%lf", &step, &loss) == 2) fprintf(out, "%d %g\n", step, loss);
    }
    if (in) fclose(in);
    if (out) fclose(out);
    snprintf(cmd, sizeof cmd,
             "gnuplot -e \"set terminal png size 900,500; set output '%s'; set xlabel 'step'; set ylabel 'loss'; "
             "plot '%s' using 1:2 with lines title 'training loss'\" 2>/dev/null",
             o->plot, dat);
    const int rc = system(cmd);
    if (rc != 0 && WIFEXITED(rc) && WEXITSTATUS(rc) == 127)
        fprintf(stderr, "dspark: could not draw %s: gnuplot is not installed\n", o->plot);
    else if (rc != 0)
        fprintf(stderr, "dspark: could not draw %s: gnuplot failed (exit status %d)\n", o->plot, WIFEXITED(rc) ? WEXITSTATUS(rc) : rc);
}

// ---- the loop ------------------------------------------------------------------------------------

ds_status ds_train_run(const ds_train_opts *o) {
    const int rank = ds_mpi_rank(), ranks = ds_mpi_size();
    if (o->steps < 1 || o->batch < 1 || o->anchors < 1 || !(o->lr > 0) || o->warmup < 0 || o->warmup > 1)
        return ds_fail(DS_ERR_INVALID, "training needs steps, batch and anchors >= 1, lr > 0, warmup in [0, 1]");
    if (o->batch % ranks)
        return ds_fail(DS_ERR_INVALID, "--batch %d must be a multiple of the %d MPI ranks", o->batch, ranks);
    ds_set_threads(o->threads);
    state S = {.o = o};
    ds_model *target = NULL;
    ds_data *data = NULL;
    ds_tws *ws = NULL;
    ds_kv *kv = NULL;
    ds_workspace *tws = NULL;
    float *grad = NULL, *taps = NULL, *hidden = NULL;
    size_t *perm = NULL;
    int *anchors = NULL;
    FILE *metrics = NULL;
    char path[4200];
    ds_status st = ds_model_load(o->target, NULL, &target);
    if (!st) st = ds_data_open(o->data, &data);
    if (st) goto done;
    if (ds_data_count(data) == 0) {
        st = ds_fail(DS_ERR_INVALID, "%s: no training sequences", o->data);
        goto done;
    }
    if (ds_data_vocab(data) != (uint64_t)ds_model_get_info(target)->vocab_size) {
        st = ds_fail(DS_ERR_MISMATCH, "%s: data vocabulary %llu does not match the target's %d", o->data,
                     (unsigned long long)ds_data_vocab(data), ds_model_get_info(target)->vocab_size);
        goto done;
    }
    // Where the drafter comes from: OUT (resume), --init, or a fresh one written to OUT/init.
    snprintf(path, sizeof path, "%s/trainer_state.json", o->out);
    struct stat sb;
    if (!o->resume && stat(path, &sb) == 0) {
        st = ds_fail(DS_ERR_IO, "%s already holds a training run: use --resume, or another -o", o->out);
        goto done;
    }
    if (o->resume && stat(path, &sb) != 0) {
        st = ds_fail(DS_ERR_IO, "%s: nothing to resume (no trainer_state.json there): start without --resume", o->out);
        goto done;
    }
    if (rank == 0 && mkdir(o->out, 0755) != 0 && errno != EEXIST) {
        st = ds_fail(DS_ERR_IO, "%s: cannot create: %s", o->out, strerror(errno));
        goto done;
    }
    const char *src = o->resume ? o->out : o->init;
    char init_dir[4200];
    if (!src) {
        snprintf(init_dir, sizeof init_dir, "%s/init", o->out);
        if (rank == 0 && stat(init_dir, &sb) != 0 && (st = ds_drafter_init_write(target, &o->shape, init_dir))) goto done;
        ds_mpi_allreduce_sum(NULL, 0); // barrier: rank 0 wrote it
        src = init_dir;
    }
    if ((st = ds_tmodel_load(src, target, &S.tm))) goto done;
    snprintf(path, sizeof path, "%s/config.json", src);
    S.config_text = read_text(path);
    S.m = calloc(S.tm.n_params, sizeof(float));
    S.v = calloc(S.tm.n_params, sizeof(float));
    grad = malloc(sizeof(float) * S.tm.n_params);
    if (!S.config_text || !S.m || !S.v || !grad) {
        st = ds_fail(DS_ERR_NOMEM, "out of memory for training state");
        goto done;
    }
    if (o->resume && (st = load_resume(&S))) goto done;
    if (S.step >= o->steps) {
        if (rank == 0) fprintf(stderr, "dspark: %s already finished %d steps\n", o->out, S.step);
        goto done;
    }
    // Per-sequence buffers, sized by the longest sequence.
    int max_n = 1;
    for (size_t i = 0; i < ds_data_count(data); i++) {
        const int32_t *t;
        int n, np;
        ds_data_get(data, i, &t, &n, &np);
        max_n = n > max_n ? n : max_n;
    }
    const ds_drafter_info *di = ds_drafter_get_info(S.tm.d);
    const int H = di->hidden;
    taps = malloc(sizeof(float) * (size_t)max_n * di->n_taps * H);
    hidden = malloc(sizeof(float) * (size_t)max_n * H);
    anchors = malloc(sizeof(int) * (size_t)max_n);
    perm = malloc(sizeof(size_t) * ds_data_count(data));
    if (!taps || !hidden || !anchors || !perm) {
        st = ds_fail(DS_ERR_NOMEM, "out of memory for training buffers");
        goto done;
    }
    if ((st = ds_kv_init(target, max_n, &kv)) || (st = ds_workspace_init(target, &tws)) || (st = ds_tws_init(&S.tm, &ws)))
        goto done;
    if (rank == 0 && (st = open_metrics(o, o->resume ? S.step : 0, &metrics))) goto done;
    const int save_every = o->save_every > 0 ? o->save_every : (o->steps >= 10 ? o->steps / 10 : 1);
    long perm_epoch = -1;
    const double t_start = now_s();
    double t_print = 0, tokens = 0;
    const int first_step = S.step;
    int last_saved = o->resume ? S.step : -1; // the step of the newest checkpoint on disk
    while (S.step < o->steps) {
        memset(grad, 0, sizeof(float) * S.tm.n_params);
        ds_loss_stats ls = {0};
        double step_tokens = 0;
        for (int b = rank; b < o->batch; b += ranks) {
            const long item = (long)S.step * o->batch + b;
            const size_t idx = sequence_at(o->seed, ds_data_count(data), item, perm, &perm_epoch);
            const int32_t *tok;
            int n, np;
            ds_data_get(data, idx, &tok, &n, &np);
            const int na = sample_anchors(o->seed, item, n, np, o->anchors, anchors);
            if (na == 0) continue;
            ds_kv_truncate(kv, 0);
            ds_forward_seq f = {.kv = kv, .tokens = tok, .n_tokens = n, .tap_layers = di->tap_layers,
                                .n_taps = di->n_taps, .taps = taps, .hidden = hidden};
            if ((st = ds_model_forward(target, tws, &f, 1))) goto done;
            ds_tsample sm = {tok, n, np, taps, hidden, anchors, na, target->final_softcap};
            if ((st = ds_train_sequence(&S.tm, ws, &sm, &o->lw, grad, &ls))) goto done;
            step_tokens += n;
        }
        // Sum over ranks, then normalize by the total slot weight.
        // (and whether any rank was interrupted, so that all stop at the same step)
        double sums[10] = {ls.loss, ls.ce, ls.l1, ls.conf, ls.weight, ls.slots, ls.ptau, ls.blocks, step_tokens,
                           o->interrupted && *o->interrupted};
        ds_mpi_allreduce_sum(sums, 10);
        ds_mpi_allreduce_sum_f(grad, S.tm.n_params);
        const double W = sums[4] > 0 ? sums[4] : 1;
        double norm2 = 0;
        for (size_t i = 0; i < S.tm.n_params; i++) {
            grad[i] = (float)(grad[i] / W);
            norm2 += (double)grad[i] * grad[i];
        }
        const double gnorm = sqrt(norm2);
        // Divergence: stop before the update, so the parameters, the optimizer state and every
        // checkpoint on disk stay as they were (and metrics.jsonl never holds a nan).
        if (!isfinite(sums[0] / W) || !isfinite(sums[1] / W) || !isfinite(sums[2] / W) || !isfinite(sums[3] / W) ||
            !isfinite(gnorm)) {
            st = last_saved >= 0
                     ? ds_fail(DS_ERR_INVALID,
                               "training diverged at step %d (loss %g, gradient norm %g): stopped; the checkpoint of "
                               "step %d in %s is kept (try a lower --lr)",
                               S.step + 1, sums[0] / W, gnorm, last_saved, o->out)
                     : ds_fail(DS_ERR_INVALID,
                               "training diverged at step %d (loss %g, gradient norm %g): stopped before any checkpoint "
                               "was written (try a lower --lr)",
                               S.step + 1, sums[0] / W, gnorm);
            goto done;
        }
        if (o->clip > 0 && gnorm > o->clip)
            for (size_t i = 0; i < S.tm.n_params; i++) grad[i] = (float)(grad[i] * (o->clip / gnorm));
        const double lr = lr_at(o, S.step);
        adamw(S.tm.params, grad, S.m, S.v, S.tm.n_params, lr, o->weight_decay, S.step + 1);
        S.step++;
        tokens += sums[8];
        const double ptau = sums[7] > 0 ? sums[6] / sums[7] : 0;
        if (rank == 0) {
            fprintf(metrics,
                    "{\"step\":%d,\"loss\":%.6f,\"ce\":%.6f,\"l1\":%.6f,\"conf\":%.6f,\"ptau\":%.4f,\"lr\":%.3e,"
                    "\"grad_norm\":%.4f,\"slots\":%.0f,\"blocks\":%.0f}\n",
                    S.step, sums[0] / W, sums[1] / W, sums[2] / W, sums[3] / W, ptau, lr, gnorm, sums[5], sums[7]);
            fflush(metrics);
            const double t = now_s() - t_start;
            // A terminal gets one line rewritten twice a second; a log file a line every 10 s.
            const int tty = isatty(2);
            if (!o->quiet && (t - t_print > (tty ? 0.5 : 10.0) || S.step == o->steps)) {
                t_print = t;
                const double per = t / (S.step - first_step), eta = per * (o->steps - S.step);
                fprintf(stderr,
                        "%sstep %d/%d  loss %.4f  ce %.3f  l1 %.3f  conf %.3f  ptau %.3f  %.0f tok/s  %.1f blocks/s  "
                        "ETA %dm%02ds   %s",
                        tty ? "\r" : "", S.step, o->steps, sums[0] / W, sums[1] / W, sums[2] / W, sums[3] / W, ptau, tokens / t,
                        sums[7] / per, (int)eta / 60, (int)eta % 60, tty ? "" : "\n");
                if (tty && S.step == o->steps) fputc('\n', stderr);
            }
        }
        const int stop = sums[9] > 0;
        const int pause = o->stop_after > 0 && S.step - first_step >= o->stop_after;
        if (rank == 0 && (S.step % save_every == 0 || S.step == o->steps || stop || pause)) {
            if ((st = save(&S))) goto done;
            last_saved = S.step;
        }
        if (stop) {
            if (rank == 0) fprintf(stderr, "\ndspark: interrupted: checkpoint of step %d saved in %s\n", S.step, o->out);
            st = ds_fail(DS_ERR_INTERRUPTED, "training interrupted at step %d (resume with --resume)", S.step);
            goto done;
        }
        if (pause) {
            if (rank == 0) fprintf(stderr, "dspark: stopped after %d steps as asked; checkpoint in %s\n", o->stop_after, o->out);
            goto done;
        }
    }
    if (rank == 0 && o->plot) plot(o);
done:
    if (metrics) fclose(metrics);
    ds_tws_free(ws);
    ds_kv_free(kv);
    ds_workspace_free(tws);
    free(grad), free(taps), free(hidden), free(anchors), free(perm);
    free(S.m), free(S.v), free(S.config_text);
    if (S.tm.d) ds_tmodel_free(&S.tm);
    ds_data_close(data);
    ds_model_free(target);
    return st;
}
