// The calibrate job (include/dspark_jobs.h): the held-out prompts through the runner with the raw
// confidences and fixed full-block verification; an engine observer collects every round's
// confidence logits and accepted prefix; STS (src/sched/calibrate.c) fits them; calibration.json
// is written by its one module (src/draft/calibration.c).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "draft/calibration.h"
#include "dspark_jobs.h"
#include "gen/prompts.h"
#include "sched/calibrate.h"

ds_calibrate_params ds_calibrate_default(void) {
    return (ds_calibrate_params){.temps = {0, 1}, .n_temps = 2, .max_tokens = 128};
}

// The rounds the observer collects.
typedef struct {
    int K;
    int n, cap;
    double *z;     // (cap, K)
    int *n_slots;  // (cap)
    int *accepted; // (cap)
    int oom;
} rounds;

static void observe(void *ctx, int id, int n_drafted, const float *conf, int ell, int accepted) {
    (void)id;
    rounds *R = ctx;
    // Fixed full-block verification: ell == n_drafted. Only the verified slots are observed.
    const int m = ell < n_drafted ? ell : n_drafted;
    if (!conf || m <= 0 || R->oom) return;
    if (R->n == R->cap) {
        const int cap = R->cap ? 2 * R->cap : 1024;
        double *z = realloc(R->z, sizeof(double) * (size_t)cap * R->K);
        if (z) R->z = z;
        int *s = z ? realloc(R->n_slots, sizeof(int) * (size_t)cap) : NULL;
        if (s) R->n_slots = s;
        int *a = s ? realloc(R->accepted, sizeof(int) * (size_t)cap) : NULL;
        if (a) R->accepted = a;
        if (!a) {
            R->oom = 1;
            return;
        }
        R->cap = cap;
    }
    double *z = R->z + (size_t)R->n * R->K;
    for (int k = 0; k < R->K; k++) z[k] = k < m ? ds_calib_logit((double)conf[k]) : 0;
    R->n_slots[R->n] = m;
    R->accepted[R->n] = accepted < m ? accepted : m;
    R->n++;
}

// The runner's callbacks.
typedef struct {
    const ds_calibrate_params *o;
    const rounds *R;
    int done, total, pass;
} cal_run;

static int interrupted(void *ctx) {
    const volatile int *flag = ((cal_run *)ctx)->o->interrupted;
    return flag && *flag;
}

static ds_status on_done(void *ctx, long i, const ds_gen *g) {
    cal_run *c = ctx;
    c->done++;
    const ds_calibrate_event ev = {.kind = DS_CALIBRATE_EV_PROMPT, .done = c->done, .total = c->total,
                                   .rounds = c->R->n, .pass = c->pass, .temp = c->o->temps[c->pass]};
    if (c->o->progress) c->o->progress(c->o->progress_ctx, &ev);
    return DS_OK;
}

// One class's part of the calibration file.
static void calibration_of(const ds_calibrate_params *o, const ds_calibrate_pass *p, ds_calibration *c) {
    const ds_sts_result *r = &p->fit;
    memset(c, 0, sizeof *c);
    c->K = r->K;
    for (int k = 0; k < r->K; k++) {
        c->temps[k] = r->temps[k];
        c->ece_before[k] = r->ece_before[k];
        c->ece_after[k] = r->ece_after[k];
        c->auc_after[k] = r->auc_after[k];
        c->auc_before[k] = r->auc_before[k];
        c->n[k] = r->n[k];
        c->acceptance[k] = r->n[k] ? (double)r->n_pos[k] / r->n[k] : NAN;
    }
    c->rounds = p->rounds;
    c->temp = p->temp;
    c->prompts = o->prompts;
    c->max_tokens = o->max_tokens;
    c->seed = (long)o->seed;
}

// Reliability diagrams of the prefix survival at positions 1..min(3, K), before and after STS.
static ds_status reliability(const ds_calib_data *d, ds_calibrate_pass *r) {
    double *conf = ds_malloc(sizeof(double) * (size_t)(d->n ? d->n : 1));
    unsigned char *lab = ds_malloc((size_t)(d->n ? d->n : 1));
    if (!conf || !lab) {
        free(conf);
        free(lab);
        return DS_ERR_NOMEM;
    }
    r->n_plot = r->fit.K < DS_CALIB_PLOT_POS ? r->fit.K : DS_CALIB_PLOT_POS;
    for (int k = 1; k <= r->n_plot; k++)
        for (int pass = 0; pass < 2; pass++) {
            const int n = ds_calib_cumulative(d, pass ? r->fit.temps : NULL, k, conf, lab);
            ds_calib_reliability(conf, lab, n, DS_CALIB_BINS, r->reliability[k - 1][pass]);
        }
    free(conf);
    free(lab);
    return DS_OK;
}

// The temperatures: one or two, at most one 0 and one above 0.
static ds_status check_temps(const ds_calibrate_params *o) {
    if (o->n_temps < 1 || o->n_temps > DS_CALIBRATE_MAX_PASSES)
        return ds_fail(DS_ERR_INVALID, "calibrate takes 1 or %d temperatures, not %d", DS_CALIBRATE_MAX_PASSES,
                       o->n_temps);
    for (int i = 0; i < o->n_temps; i++)
        if (!(o->temps[i] >= 0 && o->temps[i] <= 100))
            return ds_fail(DS_ERR_INVALID, "calibration temperature %g is not in [0, 100]", (double)o->temps[i]);
    if (o->n_temps == 2 && (o->temps[0] > 0) == (o->temps[1] > 0))
        return ds_fail(DS_ERR_INVALID, "calibration temperatures %g and %g: one must be 0 (greedy sequences) and one above "
                                       "0 (sampled ones)", (double)o->temps[0], (double)o->temps[1]);
    return DS_OK;
}

// One pass: every prompt in turn through the drafter's engine (one at a time) at temperature
// o->temps[pass], the observer collecting the rounds, then the STS fit of them.
static ds_status run_pass(ds_engine *e, const ds_tokenizer *tok, const ds_gen_prompts *pt, const ds_calibrate_params *o,
                          int pass, rounds *R, ds_calibrate_pass *out) {
    ds_engine_set_observer(e, observe, R);
    ds_sampler_params sp = ds_sampler_default();
    sp.temperature = o->temps[pass];
    ds_gen_request *req = ds_calloc((size_t)pt->n, sizeof *req);
    if (!req) return DS_ERR_NOMEM;
    for (int i = 0; i < pt->n; i++)
        req[i] = (ds_gen_request){.ids = pt->ids[i], .n_ids = pt->len[i], .max_new = o->max_tokens, .sp = sp,
                                  .seed = o->seed + (uint64_t)i};
    cal_run c = {.o = o, .R = R, .total = pt->n, .pass = pass};
    const ds_gen_run_params run = {.max_active = 1, .on_done = on_done, .interrupted = interrupted, .ctx = &c};
    ds_status st = ds_gen_run(e, tok, req, pt->n, &run, NULL);
    free(req);
    if (st) return st;
    if (R->oom) return ds_fail(DS_ERR_NOMEM, "out of memory");
    const ds_calib_data data = {.K = R->K, .n = R->n, .z = R->z, .n_slots = R->n_slots, .accepted = R->accepted};
    out->temp = o->temps[pass];
    if ((st = ds_sts_fit(&data, &out->fit))) return st;
    out->rounds = data.n;
    if (!data.n)
        return ds_fail(DS_ERR_INVALID, "no round drafted anything at temperature %g (is --max-tokens at least 2?): "
                                       "nothing to calibrate", (double)o->temps[pass]);
    return reliability(&data, out);
}

ds_status ds_calibrate_run(const ds_model *m, ds_drafter *d, const ds_calibrate_params *o, ds_calibrate_result *r) {
    memset(r, 0, sizeof *r);
    if (!o->prompts || !o->out || o->max_tokens < 1)
        return ds_fail(DS_ERR_INVALID, "calibrate needs a prompt file, an output file and max_tokens >= 1");
    ds_status st = check_temps(o);
    if (st) return st;
    ds_prompt_set *prompts = NULL;
    if ((st = ds_prompts_load(o->prompts, &prompts))) return st;
    const ds_drafter_info *di = ds_drafter_get_info(d);
    if (!di->has_confidence) {
        ds_prompts_free(prompts);
        return ds_fail(DS_ERR_INVALID, "the drafter has no confidence head (enable_confidence_head is false): there is "
                                       "nothing to calibrate");
    }
    ds_gen_prompts pt = {0};
    ds_engine *e = NULL;
    rounds R[DS_CALIBRATE_MAX_PASSES];
    for (int p = 0; p < DS_CALIBRATE_MAX_PASSES; p++) R[p] = (rounds){.K = di->block_size};
    r->n_prompts = prompts->n;
    // Measure the raw head: any calibration loaded with the drafter is dropped.
    const float *old, none[1] = {1};
    if ((ds_drafter_calibration(d, 0, &old) > 0 || ds_drafter_calibration(d, 1, &old) > 0) && o->progress)
        o->progress(o->progress_ctx, &(ds_calibrate_event){.kind = DS_CALIBRATE_EV_RAW});
    if ((st = ds_drafter_set_calibration(d, none, 0))) goto done;
    const ds_spec_params spec = {.kind = DS_SPEC_DSPARK, .draft_max = di->block_size, .schedule = DS_SCHEDULE_FIXED};
    if ((st = ds_engine_init(m, d, &spec, &e))) goto done;
    if ((st = ds_gen_prompts_tokenize(m, prompts, o->max_tokens, &pt))) goto done; // (naming the file and line)
    for (int p = 0; p < o->n_temps; p++) {
        if ((st = run_pass(e, ds_model_tokenizer(m), &pt, o, p, &R[p], &r->pass[p]))) goto done;
        r->n_passes = p + 1;
    }
    // The greedy class's fit is the file's top level, the sampled one's "sampled" (one pass: the top level).
    ds_calibration cal[DS_CALIBRATE_MAX_PASSES];
    for (int p = 0; p < o->n_temps; p++) calibration_of(o, &r->pass[p], &cal[p]);
    const int top = o->n_temps == 2 && o->temps[0] > 0 ? 1 : 0;
    st = ds_calibration_save(&cal[top], o->n_temps == 2 ? &cal[1 - top] : NULL, o->out); // atomically
done:
    ds_engine_free(e);
    ds_prompts_free(prompts);
    ds_gen_prompts_free(&pt);
    for (int p = 0; p < DS_CALIBRATE_MAX_PASSES; p++) {
        free(R[p].z);
        free(R[p].n_slots);
        free(R[p].accepted);
    }
    return st;
}
