// The training loop (docs/formats/deepspec-checkpoint.md §6 recipe): per step, `batch` sequences (split over MPI
// ranks), each run through the frozen target for its tap rows and final hidden states, up to
// `anchors` anchor blocks sampled per sequence, forward + backward (step.c), gradients summed over
// sequences and ranks and normalized by the total slot weight, clipped, AdamW on f32 master weights
// with linear warmup then cosine decay to 0.
//
// Determinism: the sequence order and the anchors of step s come from counter-based streams keyed
// by (seed, s), never from history, so a resumed run repeats exactly what the uninterrupted run
// would have done (same thread count: every kernel's reduction order is fixed by it).
#define _GNU_SOURCE // renameat2 (RENAME_EXCHANGE)
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/threads.h"
#include "base/status.h"
#include "base/testpoint.h"
#include "io/atomic.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "jobs/heldout.h"
#include "train/data.h"
#include "train/mpi.h"


ds_train_params ds_train_default(void) {
    ds_train_params o = {0};
    o.shape = ds_drafter_init_default();
    // The recipe measured on stories260K (docs/results.md, issue 17): 3200 steps of 8 sequences x
    // 64 anchors at lr 6e-3 (2400 steps at 3e-3 before; the higher peak and longer schedule lower
    // T = 1 TV; 3200 steps fit 20 minutes of one core). DeepSpec's 512 anchors and 6e-4 are for
    // targets of billions of parameters; pass them there.
    o.steps = 3200;
    o.batch = 8;
    o.anchors = 64;
    o.lr = 6e-3f;
    o.warmup = 0.04f;
    o.clip = 1.0f;
    o.lw = (ds_loss_weights){0.1f, 0.9f, 1.0f, 4.0f, 0.0f};
    o.eval_max_tokens = 128;
    return o;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Learning rate of step t (0-based): linear warmup over the first warmup·steps steps, then cosine
// from lr to 0.
static double lr_at(const ds_train_params *o, int t) {
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
    const ds_train_params *o;
    ds_tmodel tm;
    char *config_text;  // the drafter's config.json, copied into every checkpoint
    float *m, *v;       // AdamW moments (n_params)
    int step;           // optimizer steps done
    double best_tau;    // held-out: the best τ so far (at eval_temps[0]) and its step (0: none)
    int best_step;
    int stale_evals;    // evaluations since the best
} state;

static void emit(const ds_train_params *o, const ds_train_event *ev) {
    if (o->progress) o->progress(o->progress_ctx, ev);
}

static void message(const ds_train_params *o, int step, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void message(const ds_train_params *o, int step, const char *fmt, ...) {
    if (!o->progress) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    ds_train_event ev = {.kind = DS_TRAIN_EV_MESSAGE, .step = step, .steps = o->steps, .message = line};
    emit(o, &ev);
}

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

// ---- checkpoint directories: OUT/checkpoints/step-NNNNNNNN, OUT/checkpoint -> the current one ----

#define CKPT_DIR "checkpoints"
#define CKPT_NAME "step-%08d"

// The step of a checkpoint directory's name ("step-" and 8 digits), or -1.
static int ckpt_step_of(const char *name) {
    if (strncmp(name, "step-", 5)) return -1;
    size_t k = 0;
    while (name[5 + k] >= '0' && name[5 + k] <= '9') k++;
    return k == 8 && !name[5 + k] ? atoi(name + 5) : -1;
}

// The steps of OUT/checkpoints/step-* (directories), newest first, into *out (malloc'ed); the count.
static int ckpt_list(const char *out, int **steps) {
    char root[4200];
    snprintf(root, sizeof root, "%s/" CKPT_DIR, out);
    *steps = NULL;
    DIR *d = opendir(root);
    if (!d) return 0;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const int k = ckpt_step_of(e->d_name);
        if (k < 0) continue;
        if (n == cap) {
            int *g = realloc(*steps, sizeof(int) * (size_t)(cap = cap ? 2 * cap : 16));
            if (!g) break;
            *steps = g;
        }
        (*steps)[n++] = k;
    }
    closedir(d);
    for (int i = 1; i < n; i++) // insertion sort, descending (a handful of entries)
        for (int j = i; j > 0 && (*steps)[j] > (*steps)[j - 1]; j--) {
            const int t = (*steps)[j];
            (*steps)[j] = (*steps)[j - 1];
            (*steps)[j - 1] = t;
        }
    return n;
}

// The step recorded in DIR/trainer_state.json, or -1 when there is none to read.
static int state_step(const char *dir) {
    char path[4300];
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    cJSON *j;
    if (ds_json_load(path, 1 << 20, &j)) return -1;
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "step");
    const int step = ds_json_is_int(s, 0, 1e9) ? s->valueint : -1;
    cJSON_Delete(j);
    return step;
}

// The newest complete checkpoint of OUT: the highest N whose checkpoints/step-N holds the marker of
// a committed directory and a trainer_state.json of step N; else one of an older layout (OUT/checkpoint
// a directory, or the files at OUT's top). Its path into dir (cap bytes); returns its step, or -1.
// *legacy: it is of an older layout. *skipped: newer directories passed over (never complete).
static int ckpt_newest(const char *out, char *dir, size_t cap, int *legacy, int *skipped) {
    int *steps;
    const int n = ckpt_list(out, &steps);
    *legacy = 0;
    *skipped = 0;
    for (int i = 0; i < n; i++) {
        char marker[4400];
        snprintf(dir, cap, "%s/" CKPT_DIR "/" CKPT_NAME, out, steps[i]);
        snprintf(marker, sizeof marker, "%s/%s", dir, DS_OUTPUT_MARKER);
        struct stat sb;
        if (lstat(marker, &sb) == 0 && S_ISREG(sb.st_mode) && state_step(dir) == steps[i]) {
            const int k = steps[i];
            free(steps);
            return k;
        }
        (*skipped)++;
    }
    free(steps);
    struct stat sb;
    snprintf(dir, cap, "%s/checkpoint", out);
    int k;
    if (lstat(dir, &sb) == 0 && S_ISDIR(sb.st_mode) && (k = state_step(dir)) >= 0) {
        *legacy = 1;
        return k;
    }
    snprintf(dir, cap, "%s/trainer_state.json", out);
    if (lstat(dir, &sb) == 0 && S_ISREG(sb.st_mode)) {
        snprintf(dir, cap, "%s", out);
        if ((k = state_step(dir)) >= 0) {
            *legacy = 1;
            return k;
        }
    }
    return -1;
}

// OUT/<name> as a symbolic link to checkpoint/<name> (created once; replaced atomically when a
// regular file of an older layout stands there).
static ds_status link_into_checkpoint(const char *out, const char *name) {
    char path[4200], target[256], tmp[4300], cur[256];
    snprintf(path, sizeof path, "%s/%s", out, name);
    snprintf(target, sizeof target, "checkpoint/%s", name);
    const ssize_t n = readlink(path, cur, sizeof cur - 1);
    if (n > 0 && (size_t)n == strlen(target) && !memcmp(cur, target, (size_t)n)) return DS_OK;
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    unlink(tmp);
    if (symlink(target, tmp) != 0 || rename(tmp, path) != 0) {
        ds_status st = ds_fail(DS_ERR_IO, "%s: cannot link it to %s: %s", path, target, strerror(errno));
        unlink(tmp);
        return st;
    }
    return DS_OK;
}

// Remove the checkpoints older than the newest `keep` up to `current` (never `current`): each is
// first renamed to a temporary name (one rename: a kill then leaves a stale temporary, never a
// half-removed checkpoint under a checkpoint's name), then removed.
static void ckpt_prune(const char *out, int current, int keep) {
    int *steps;
    const int n = ckpt_list(out, &steps);
    int kept = 0;
    for (int i = 0; i < n; i++) {
        if (steps[i] > current) continue; // newer ones were never complete (resume passed over them)
        if (steps[i] == current || kept < keep) {
            kept++;
            continue;
        }
        char dir[4200], tmp[4300];
        snprintf(dir, sizeof dir, "%s/" CKPT_DIR "/" CKPT_NAME, out, steps[i]);
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", dir, (long)getpid());
        if (rename(dir, tmp) == 0) {
            ds_test_point();
            ds_atomic_dir_abort(tmp);
        }
    }
    free(steps);
    char root[4200];
    snprintf(root, sizeof root, "%s/" CKPT_DIR, out);
    ds_atomic_clean_stale_in(root); // leftovers of killed saves
    ds_atomic_clean_stale_in(out);
}

// Make checkpoints/step-<step> current: OUT/checkpoint switched to it by one rename (one exchange
// over a directory of the older layout), OUT's top-level links through it, then the pruning.
static ds_status ckpt_make_current(const ds_train_params *o, int step) {
    char link[4200], tmp[4300], target[64], cur[64];
    snprintf(link, sizeof link, "%s/checkpoint", o->out);
    snprintf(target, sizeof target, CKPT_DIR "/" CKPT_NAME, step);
    const ssize_t n = readlink(link, cur, sizeof cur - 1);
    ds_status st = DS_OK;
    if (!(n > 0 && (size_t)n == strlen(target) && !memcmp(cur, target, (size_t)n))) {
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", link, (long)getpid());
        unlink(tmp);
        struct stat sb;
        const int old_dir = lstat(link, &sb) == 0 && S_ISDIR(sb.st_mode);
        if (symlink(target, tmp) != 0)
            st = ds_fail(DS_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        else if (old_dir ? renameat2(AT_FDCWD, tmp, AT_FDCWD, link, RENAME_EXCHANGE) != 0 : rename(tmp, link) != 0)
            st = ds_fail(DS_ERR_IO, "%s: cannot point it at %s: %s", link, target, strerror(errno));
        if (st) unlink(tmp);
        else if (old_dir) ds_atomic_dir_abort(tmp); // the older layout's checkpoint directory
        if (!st) ds_test_point();
        if (!st) st = ds_fsync_dir(o->out);
    }
    static const char *const names[] = {"model.safetensors", "config.json", "optimizer.safetensors", "trainer_state.json"};
    for (int i = 0; i < 4 && !st; i++) st = link_into_checkpoint(o->out, names[i]);
    if (!st) st = ds_fsync_dir(o->out);
    if (!st) ckpt_prune(o->out, step, o->keep > 0 ? o->keep : 2);
    return st;
}

// The drafter (model.safetensors + config.json) of the current parameters into `dir`.
static ds_status write_drafter(const state *S, const char *dir) {
    char path[4200];
    ds_status st = ds_tmodel_write(&S->tm, S->tm.params, DS_F32, dir);
    ds_test_point();
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!st) st = ds_atomic_write_text(path, S->config_text);
    return st;
}

// A checkpoint: model, config, optimizer and trainer_state.json written into a fresh temporary
// directory, committed as OUT/checkpoints/step-<step> (every file and the directory fsynced, one
// rename), then made current (ckpt_make_current). A kill at any moment leaves the previous
// checkpoint current or this one, never files of two steps.
static ds_status save(state *S) {
    const ds_train_params *o = S->o;
    char path[4200], root[4200], dir[4300], tmp[4400];
    snprintf(root, sizeof root, "%s/" CKPT_DIR, o->out);
    snprintf(dir, sizeof dir, "%s/" CKPT_NAME, root, S->step);
    ds_status st = DS_OK;
    if (mkdir(root, 0755) == 0) st = ds_fsync_dir(o->out);
    else if (errno != EEXIST) st = ds_fail(DS_ERR_IO, "%s: cannot create: %s", root, strerror(errno));
    if (!st) st = ds_atomic_dir_open_replace(dir, tmp, sizeof tmp); // (a step-N never made current)
    if (st) return ds_fail_prefix(st, "saving a checkpoint to %s", o->out);
    st = write_drafter(S, tmp);
    ds_test_point();
    if (!st) {
        ds_st_writer *w = ds_st_writer_new();
        const int64_t n = (int64_t)S->tm.n_params;
        char step[32];
        snprintf(step, sizeof step, "%d", S->step);
        snprintf(path, sizeof path, "%s/optimizer.safetensors", tmp);
        st = !w ? DS_ERR_NOMEM : ds_st_writer_add(w, "adam_m", DS_F32, 1, &n, S->m);
        if (!st) st = ds_st_writer_add(w, "adam_v", DS_F32, 1, &n, S->v);
        if (!st) st = ds_st_writer_set_metadata(w, "step", step);
        if (!st) st = ds_st_writer_write_file(w, path);
        ds_st_writer_free(w);
        ds_test_point();
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
        cJSON_AddNumberToObject(j, "kl", o->lw.kl);
        cJSON_AddStringToObject(j, "data", o->data);
        if (S->best_step > 0) {
            cJSON_AddNumberToObject(j, "best_tau", S->best_tau);
            cJSON_AddNumberToObject(j, "best_step", S->best_step);
            cJSON_AddNumberToObject(j, "stale_evals", S->stale_evals);
        }
        snprintf(path, sizeof path, "%s/trainer_state.json", tmp);
        st = ds_json_save(j, path);
        cJSON_Delete(j);
    }
    if (!st) ds_test_point();
    if (st) ds_atomic_dir_abort(tmp);
    else st = ds_atomic_dir_replace(tmp, dir);
    if (!st) st = ckpt_make_current(o, S->step);
    return st ? ds_fail_prefix(st, "saving a checkpoint to %s", o->out) : DS_OK;
}

// Resume: the options that shape the run must be the ones it started with.
static ds_status load_resume(state *S, const char *dir) {
    const ds_train_params *o = S->o;
    char path[4400];
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
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
    const cJSON *bt = cJSON_GetObjectItemCaseSensitive(j, "best_tau"), *bs = cJSON_GetObjectItemCaseSensitive(j, "best_step"),
                *se = cJSON_GetObjectItemCaseSensitive(j, "stale_evals");
    if (cJSON_IsNumber(bt) && ds_json_is_int(bs, 1, 1e9) && ds_json_is_int(se, 0, 1e9)) {
        S->best_tau = bt->valuedouble;
        S->best_step = bs->valueint;
        S->stale_evals = se->valueint;
    }
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
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
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
static ds_status open_metrics(const ds_train_params *o, int keep_steps, FILE **out) {
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
    fseek(*out, 0, SEEK_END); // (ftell reports the length from here on)
    return DS_OK;
}

// One line appended to metrics.jsonl; on a failed write (a full disk) the file is cut back to its
// previous length, so it never ends in half a line.
static ds_status append_metrics(const ds_train_params *o, FILE *f, const char *line) {
    const long at = ftell(f);
    if (fprintf(f, "%s}\n", line) >= 0 && fflush(f) == 0) return DS_OK;
    const int err = errno ? errno : EIO;
    clearerr(f);
    if (at >= 0 && ftruncate(fileno(f), (off_t)at) == 0) fseek(f, at, SEEK_SET);
    return ds_fail(DS_ERR_IO, "%s/metrics.jsonl: write failed: %s", o->out, strerror(err));
}

// ---- held-out evaluation -------------------------------------------------------------------------

// Evaluate the current parameters on the held-out prompts at every temperature: the drafter is
// written to a temporary directory and loaded from it, as `dspark eval -d` loads a checkpoint, so
// the τ recorded is the one eval reports for the checkpoint of this step. With keep_best, a τ
// above the best so far (at the first temperature) makes that directory OUT/best (replaced in one
// step). Appends the metrics fields (",\"heldout\":[...]") to `json` (cap bytes).
static ds_status heldout_eval(state *S, const ds_model *target, const ds_heldout *h, double t_start, char *json,
                              size_t cap) {
    const ds_train_params *o = S->o;
    const int nt = o->n_eval_temps > 0 ? o->n_eval_temps : 1;
    const float zero = 0;
    const float *temps = o->n_eval_temps > 0 ? o->eval_temps : &zero;
    ds_heldout_result res[DS_TRAIN_MAX_EVAL_TEMPS];
    char dir[4200], tmp[4300], path[4400];
    snprintf(dir, sizeof dir, "%s/best", o->out);
    ds_status st = ds_atomic_dir_open_replace(dir, tmp, sizeof tmp);
    if (!st) st = write_drafter(S, tmp);
    ds_drafter *d = NULL;
    if (!st) st = ds_drafter_load(tmp, target, &d);
    for (int k = 0; k < nt && !st; k++) st = ds_heldout_eval(h, target, d, temps[k], o->eval_seed, o->eval_max_tokens, &res[k]);
    ds_drafter_free(d);
    if (st) {
        ds_atomic_dir_abort(tmp);
        return ds_fail_prefix(st, "held-out evaluation at step %d", S->step);
    }
    const int is_best = S->best_step == 0 || res[0].tau > S->best_tau;
    if (is_best) {
        S->best_tau = res[0].tau;
        S->best_step = S->step;
        S->stale_evals = 0;
    } else {
        S->stale_evals++;
    }
    size_t len = strlen(json);
    len += (size_t)snprintf(json + len, cap - len, ",\"heldout\":[");
    for (int k = 0; k < nt && len < cap; k++) {
        len += (size_t)snprintf(json + len, cap - len, "%s{\"temp\":%g,\"tau\":%.4f,\"accept\":[", k ? "," : "",
                                (double)temps[k], res[k].tau);
        for (int p = 0; p < res[k].n_pos && len < cap; p++)
            len += (size_t)snprintf(json + len, cap - len, "%s%.4f", p ? "," : "", res[k].accept[p]);
        if (len < cap) len += (size_t)snprintf(json + len, cap - len, "]}");
    }
    if (len < cap) snprintf(json + len, cap - len, "]");
    if (o->keep_best && is_best) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "step", S->step);
        cJSON_AddNumberToObject(j, "temp", temps[0]);
        cJSON_AddNumberToObject(j, "tau", res[0].tau);
        cJSON *acc = cJSON_AddArrayToObject(j, "acceptance_by_position");
        for (int p = 0; p < res[0].n_pos; p++) cJSON_AddItemToArray(acc, cJSON_CreateNumber(res[0].accept[p]));
        cJSON_AddStringToObject(j, "prompts", o->eval_prompts);
        cJSON_AddNumberToObject(j, "max_tokens", o->eval_max_tokens);
        cJSON_AddNumberToObject(j, "seed", (double)o->eval_seed);
        snprintf(path, sizeof path, "%s/heldout.json", tmp);
        st = ds_json_save(j, path);
        cJSON_Delete(j);
        if (st) ds_atomic_dir_abort(tmp);
        else st = ds_atomic_dir_replace(tmp, dir);
        if (st) return ds_fail_prefix(st, "keeping the best drafter");
    } else {
        ds_atomic_dir_abort(tmp);
    }
    ds_train_event ev = {.kind = DS_TRAIN_EV_EVAL, .step = S->step, .steps = o->steps, .elapsed_s = now_s() - t_start,
                         .n_eval = nt, .eval_temps = temps, .eval = res, .best_tau = S->best_tau,
                         .best_step = S->best_step, .is_best = is_best};
    emit(o, &ev);
    return DS_OK;
}

// ---- the loop ------------------------------------------------------------------------------------

// One training run: the target, the data, the drafter being trained (S) with its buffers, and where
// the loop stands.
typedef struct {
    state S;
    int rank, ranks;
    ds_model *target;
    ds_data *data;
    ds_heldout *heldout;  // rank 0, with eval prompts
    ds_tws *ws;           // the drafter's training workspace
    ds_kv *kv;            // the target's cache (max_n positions)
    ds_workspace *tws;    // the target's forward workspace
    float *grad;          // [n_params]
    float *taps, *hidden; // [max_n][n_taps][H], [max_n][H]
    int *anchors;         // [max_n]
    size_t *perm;         // [count]: the order of the current epoch
    long perm_epoch;
    FILE *metrics;        // rank 0
    long metrics_at;      // metrics.jsonl's length at the current checkpoint (rank 0; else -1)
    int save_every, eval_every;
    double t_start, tokens;
    int first_step;
    int last_saved;       // the step of the newest checkpoint on disk (-1: none)
} run;

// What one step measured, summed over the ranks.
typedef struct {
    double sums[11]; // loss, ce, l1, conf, weight, slots, ptau, blocks, tokens, interrupted, kl
    double W, gnorm, lr;
} step_result;

// The target and the data, and the drafter: OUT's newest complete checkpoint (resume), --init, or a
// fresh one written to OUT/init; its optimizer state when resuming.
static ds_status run_open(run *R) {
    const ds_train_params *o = R->S.o;
    const int rank = R->rank;
    char path[4200];
    ds_status st = ds_model_load(o->target, NULL, &R->target);
    if (!st) st = ds_data_open(o->data, &R->data);
    if (st) return st;
    if (ds_data_count(R->data) == 0) return ds_fail(DS_ERR_INVALID, "%s: no training sequences", o->data);
    if (ds_data_vocab(R->data) != (uint64_t)ds_model_get_info(R->target)->vocab_size)
        return ds_fail(DS_ERR_MISMATCH, "%s: data vocabulary %llu does not match the target's %d", o->data,
                       (unsigned long long)ds_data_vocab(R->data), ds_model_get_info(R->target)->vocab_size);
    char ckpt[4300];
    int legacy = 0, skipped = 0;
    const int ckpt_step = ckpt_newest(o->out, ckpt, sizeof ckpt, &legacy, &skipped);
    struct stat sb;
    if (!o->resume && ckpt_step >= 0) return ds_fail(DS_ERR_IO, "%s already holds a training run: use --resume, or another -o", o->out);
    if (o->resume && ckpt_step < 0)
        return ds_fail(DS_ERR_IO, "%s: nothing to resume (no complete checkpoint there): start without --resume", o->out);
    if (rank == 0 && mkdir(o->out, 0755) != 0 && errno != EEXIST) return ds_fail(DS_ERR_IO, "%s: cannot create: %s", o->out, strerror(errno));
    if (o->resume && rank == 0)
        message(o, ckpt_step, "resuming from %s (step %d)%s", ckpt, ckpt_step,
                skipped ? " (newer incomplete checkpoints ignored)" : "");
    const char *src = o->resume ? ckpt : o->init;
    char init_dir[4200];
    if (!src) {
        snprintf(init_dir, sizeof init_dir, "%s/init", o->out);
        if (rank == 0 && stat(init_dir, &sb) != 0 && (st = ds_drafter_init_write(R->target, &o->shape, init_dir))) return st;
        ds_mpi_allreduce_sum(NULL, 0); // barrier: rank 0 wrote it
        src = init_dir;
    }
    if ((st = ds_tmodel_load(src, R->target, &R->S.tm))) return st;
    snprintf(path, sizeof path, "%s/config.json", src);
    R->S.config_text = read_text(path);
    R->S.m = calloc(R->S.tm.n_params, sizeof(float));
    R->S.v = calloc(R->S.tm.n_params, sizeof(float));
    R->grad = malloc(sizeof(float) * R->S.tm.n_params);
    if (!R->S.config_text || !R->S.m || !R->S.v || !R->grad) return ds_fail(DS_ERR_NOMEM, "out of memory for training state");
    if (o->resume && (st = load_resume(&R->S, ckpt))) return st;
    // The checkpoint resumed from is the current one (a kill may have come between its rename and
    // the switch of OUT/checkpoint); leftovers of killed saves are removed.
    if (o->resume && rank == 0 && !legacy && (st = ckpt_make_current(o, R->S.step))) return st;
    return DS_OK;
}

// The held-out prompts, the per-sequence buffers (sized by the longest sequence), the target's
// cache and workspaces, metrics.jsonl.
static ds_status run_buffers(run *R) {
    const ds_train_params *o = R->S.o;
    ds_status st;
    if (R->rank == 0 && o->eval_prompts && (st = ds_heldout_load(o->eval_prompts, R->target, o->eval_max_tokens, &R->heldout)))
        return st;
    int max_n = 1;
    for (size_t i = 0; i < ds_data_count(R->data); i++) {
        const int32_t *t;
        int n, np;
        ds_data_get(R->data, i, &t, &n, &np);
        max_n = n > max_n ? n : max_n;
    }
    const ds_drafter_info *di = ds_drafter_get_info(R->S.tm.d);
    const int H = di->hidden;
    R->taps = malloc(sizeof(float) * (size_t)max_n * di->n_taps * H);
    R->hidden = malloc(sizeof(float) * (size_t)max_n * H);
    R->anchors = malloc(sizeof(int) * (size_t)max_n);
    R->perm = malloc(sizeof(size_t) * ds_data_count(R->data));
    if (!R->taps || !R->hidden || !R->anchors || !R->perm) return ds_fail(DS_ERR_NOMEM, "out of memory for training buffers");
    if ((st = ds_kv_init(R->target, max_n, &R->kv)) || (st = ds_workspace_init(R->target, &R->tws)) || (st = ds_tws_init(&R->S.tm, &R->ws)))
        return st;
    if (R->rank == 0 && (st = open_metrics(o, o->resume ? R->S.step : 0, &R->metrics))) return st;
    R->metrics_at = R->rank == 0 ? ftell(R->metrics) : -1;
    return DS_OK;
}

// One optimizer step: this rank's sequences of the batch forward + backward, gradients and stats
// summed over the ranks (and whether any rank was interrupted, so that all stop at the same step),
// normalized by the total slot weight, clipped, AdamW.
static ds_status run_step(run *R, step_result *r) {
    const ds_train_params *o = R->S.o;
    const ds_drafter_info *di = ds_drafter_get_info(R->S.tm.d);
    state *S = &R->S;
    ds_status st;
    memset(R->grad, 0, sizeof(float) * S->tm.n_params);
    ds_loss_stats ls = {0};
    double step_tokens = 0;
    for (int b = R->rank; b < o->batch; b += R->ranks) {
        const long item = (long)S->step * o->batch + b;
        const size_t idx = sequence_at(o->seed, ds_data_count(R->data), item, R->perm, &R->perm_epoch);
        const int32_t *tok;
        int n, np;
        ds_data_get(R->data, idx, &tok, &n, &np);
        const int na = sample_anchors(o->seed, item, n, np, o->anchors, R->anchors);
        if (na == 0) continue;
        ds_kv_truncate(R->kv, 0);
        ds_forward_seq f = {.kv = R->kv, .tokens = tok, .n_tokens = n, .tap_layers = di->tap_layers,
                            .n_taps = di->n_taps, .taps = R->taps, .hidden = R->hidden};
        if ((st = ds_model_forward(R->target, R->tws, &f, 1))) return st;
        ds_tsample sm = {tok, n, np, R->taps, R->hidden, R->anchors, na, R->target->final_softcap};
        if ((st = ds_train_sequence(&S->tm, R->ws, &sm, &o->lw, R->grad, &ls))) return st;
        step_tokens += n;
    }
    double *sums = r->sums;
    sums[0] = ls.loss, sums[1] = ls.ce, sums[2] = ls.l1, sums[3] = ls.conf, sums[4] = ls.weight, sums[5] = ls.slots;
    sums[6] = ls.ptau, sums[7] = ls.blocks, sums[8] = step_tokens, sums[9] = o->interrupted && *o->interrupted;
    sums[10] = ls.kl;
    ds_mpi_allreduce_sum(sums, 11);
    ds_mpi_allreduce_sum_f(R->grad, S->tm.n_params);
    const double W = sums[4] > 0 ? sums[4] : 1;
    double norm2 = 0;
    for (size_t i = 0; i < S->tm.n_params; i++) {
        R->grad[i] = (float)(R->grad[i] / W);
        norm2 += (double)R->grad[i] * R->grad[i];
    }
    const double gnorm = sqrt(norm2);
    // Divergence: stop before the update, so the parameters, the optimizer state and every
    // checkpoint on disk stay as they were (and metrics.jsonl never holds a nan).
    if (!isfinite(sums[0] / W) || !isfinite(sums[1] / W) || !isfinite(sums[2] / W) || !isfinite(sums[3] / W) ||
        !isfinite(gnorm))
        return R->last_saved >= 0
                   ? ds_fail(DS_ERR_INVALID,
                             "training diverged at step %d (loss %g, gradient norm %g): stopped; the checkpoint of "
                             "step %d in %s is kept (try a lower --lr)",
                             S->step + 1, sums[0] / W, gnorm, R->last_saved, o->out)
                   : ds_fail(DS_ERR_INVALID,
                             "training diverged at step %d (loss %g, gradient norm %g): stopped before any checkpoint "
                             "was written (try a lower --lr)",
                             S->step + 1, sums[0] / W, gnorm);
    if (o->clip > 0 && gnorm > o->clip)
        for (size_t i = 0; i < S->tm.n_params; i++) R->grad[i] = (float)(R->grad[i] * (o->clip / gnorm));
    const double lr = lr_at(o, S->step);
    adamw(S->tm.params, R->grad, S->m, S->v, S->tm.n_params, lr, o->weight_decay, S->step + 1);
    S->step++;
    R->tokens += sums[8];
    r->W = W, r->gnorm = gnorm, r->lr = lr;
    return DS_OK;
}

// Rank 0 after a step: the progress event, the held-out evaluation when due, the metrics line.
static ds_status run_report(run *R, const step_result *r, int do_eval) {
    const ds_train_params *o = R->S.o;
    const state *S = &R->S;
    const double *sums = r->sums, W = r->W;
    const double ptau = sums[7] > 0 ? sums[6] / sums[7] : 0;
    ds_status st;
    char line[4096];
    snprintf(line, sizeof line,
             "{\"step\":%d,\"loss\":%.6f,\"ce\":%.6f,\"l1\":%.6f,\"conf\":%.6f,\"kl\":%.6f,\"ptau\":%.4f,"
             "\"lr\":%.3e,\"grad_norm\":%.4f,\"slots\":%.0f,\"blocks\":%.0f",
             S->step, sums[0] / W, sums[1] / W, sums[2] / W, sums[3] / W, sums[10] / W, ptau, r->lr, r->gnorm, sums[5],
             sums[7]);
    const double t = now_s() - R->t_start, per = t / (S->step - R->first_step);
    ds_train_event ev = {.kind = DS_TRAIN_EV_STEP, .step = S->step, .steps = o->steps, .first_step = R->first_step,
                         .loss = sums[0] / W, .ce = sums[1] / W, .l1 = sums[2] / W, .conf = sums[3] / W,
                         .ptau = ptau, .lr = r->lr, .grad_norm = r->gnorm, .elapsed_s = t,
                         .tok_per_s = t > 0 ? R->tokens / t : 0, .blocks_per_s = per > 0 ? sums[7] / per : 0,
                         .eta_s = per * (o->steps - S->step), .best_tau = S->best_tau, .best_step = S->best_step};
    emit(o, &ev);
    if (do_eval && (st = heldout_eval(&R->S, R->target, R->heldout, R->t_start, line, sizeof line))) return st;
    return append_metrics(o, R->metrics, line);
}

// Rank 0: metrics.jsonl's lines up to this step on disk, then the checkpoint that counts them.
static ds_status run_checkpoint(run *R) {
    const ds_train_params *o = R->S.o;
    ds_status st;
    if (fsync(fileno(R->metrics)) != 0) return ds_fail(DS_ERR_IO, "%s/metrics.jsonl: fsync failed: %s", o->out, strerror(errno));
    if ((st = save(&R->S))) {
        // (a full disk): metrics.jsonl back to the lines of the checkpoint still current
        if (R->metrics_at >= 0 && ftruncate(fileno(R->metrics), (off_t)R->metrics_at) == 0) fsync(fileno(R->metrics));
        return st;
    }
    R->metrics_at = ftell(R->metrics);
    R->last_saved = R->S.step;
    return DS_OK;
}

// Steps until the last, an interrupt (checkpointed), --stop-after, or the early stop.
static ds_status run_loop(run *R) {
    const ds_train_params *o = R->S.o;
    const int rank = R->rank;
    state *S = &R->S;
    ds_status st;
    R->save_every = o->save_every > 0 ? o->save_every : (o->steps >= 10 ? o->steps / 10 : 1);
    R->eval_every = o->eval_every > 0 ? o->eval_every : R->save_every;
    R->perm_epoch = -1;
    R->t_start = now_s();
    R->tokens = 0;
    R->first_step = S->step;
    R->last_saved = o->resume ? S->step : -1;
    while (S->step < o->steps) {
        step_result r;
        if ((st = run_step(R, &r))) return st;
        const int do_eval = o->eval_prompts && (S->step % R->eval_every == 0 || S->step == o->steps);
        if (rank == 0 && (st = run_report(R, &r, do_eval))) return st;
        // Early stop: rank 0 decides, every rank follows.
        double early = rank == 0 && do_eval && o->patience > 0 && S->stale_evals >= o->patience;
        if (do_eval) ds_mpi_allreduce_sum(&early, 1);
        const int stop = r.sums[9] > 0;
        const int pause = o->stop_after > 0 && S->step - R->first_step >= o->stop_after;
        if (rank == 0 && (S->step % R->save_every == 0 || S->step == o->steps || stop || pause || early > 0) &&
            (st = run_checkpoint(R)))
            return st;
        if (stop) {
            if (rank == 0) message(o, S->step, "interrupted: checkpoint of step %d saved in %s", S->step, o->out);
            return ds_fail(DS_ERR_INTERRUPTED, "training interrupted at step %d (resume with --resume)", S->step);
        }
        if (pause) {
            if (rank == 0) message(o, S->step, "stopped after %d steps as asked; checkpoint in %s", o->stop_after, o->out);
            return DS_OK;
        }
        if (early > 0) {
            if (rank == 0)
                message(o, S->step,
                        "stopped early at step %d: held-out tau has not improved in %d evaluations (best %.3f at step %d)",
                        S->step, o->patience, S->best_tau, S->best_step);
            return DS_OK;
        }
    }
    return DS_OK;
}

static void run_close(run *R) {
    if (R->metrics) fclose(R->metrics);
    ds_heldout_free(R->heldout);
    ds_tws_free(R->ws);
    ds_kv_free(R->kv);
    ds_workspace_free(R->tws);
    free(R->grad), free(R->taps), free(R->hidden), free(R->anchors), free(R->perm);
    free(R->S.m), free(R->S.v), free(R->S.config_text);
    if (R->S.tm.d) ds_tmodel_free(&R->S.tm);
    ds_data_close(R->data);
    ds_model_free(R->target);
}

ds_status ds_train_run(const ds_train_params *o) {
    const int rank = ds_mpi_rank(), ranks = ds_mpi_size();
    if (o->steps < 1 || o->batch < 1 || o->anchors < 1 || !(o->lr > 0) || o->warmup < 0 || o->warmup > 1)
        return ds_fail(DS_ERR_INVALID, "training needs steps, batch and anchors >= 1, lr > 0, warmup in [0, 1]");
    if (o->batch % ranks)
        return ds_fail(DS_ERR_INVALID, "--batch %d must be a multiple of the %d MPI ranks", o->batch, ranks);
    run R = {.S = {.o = o}, .rank = rank, .ranks = ranks};
    ds_status st = run_open(&R);
    if (!st && R.S.step >= o->steps) {
        if (rank == 0) message(o, R.S.step, "%s already finished %d steps", o->out, R.S.step);
    } else if (!st && !(st = run_buffers(&R))) {
        st = run_loop(&R);
    }
    run_close(&R);
    return st;
}
