// calibration.json: written and read here only (see calibration.h).
#include "draft/calibration.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "io/json.h"

static cJSON *num_or_null(double x) { return isfinite(x) ? cJSON_CreateNumber(x) : cJSON_CreateNull(); }

static cJSON *array_of(const double *x, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) cJSON_AddItemToArray(a, num_or_null(x[i]));
    return a;
}

// The keys of one class of rounds (the top level's, or "sampled"'s).
static void add_class(cJSON *o, const ds_calibration *c) {
    cJSON_AddItemToObject(o, "temperatures", array_of(c->temps, c->K));
    cJSON_AddItemToObject(o, "ece_before", array_of(c->ece_before, c->K));
    cJSON_AddItemToObject(o, "ece_after", array_of(c->ece_after, c->K));
    cJSON_AddItemToObject(o, "auc", array_of(c->auc_after, c->K));
    cJSON_AddItemToObject(o, "auc_before", array_of(c->auc_before, c->K));
    cJSON_AddItemToObject(o, "n", array_of(c->n, c->K));
    cJSON_AddItemToObject(o, "acceptance", array_of(c->acceptance, c->K)); // realized 1{a >= k} rate
    cJSON_AddNumberToObject(o, "rounds", c->rounds);
    cJSON_AddNumberToObject(o, "temp", c->temp);
}

ds_status ds_calibration_save(const ds_calibration *c, const ds_calibration *sampled, const char *path) {
    if (c->K < 1 || c->K > DS_CALIBRATION_MAX) return ds_fail(DS_ERR_INVALID, "%s: %d calibrated positions", path, c->K);
    if (sampled && (c->temp != 0 || !(sampled->temp > 0) || sampled->K != c->K))
        return ds_fail(DS_ERR_INVALID, "%s: a sampled class (temp %g, %d positions) next to temp %g, %d positions", path,
                       sampled->temp, sampled->K, c->temp, c->K);
    cJSON *o = cJSON_CreateObject();
    if (!o) return ds_fail(DS_ERR_NOMEM, "out of memory");
    cJSON_AddStringToObject(o, "method", "sts");
    add_class(o, c);
    cJSON_AddStringToObject(o, "prompts", c->prompts ? c->prompts : "");
    cJSON_AddNumberToObject(o, "max_tokens", (double)c->max_tokens);
    cJSON_AddNumberToObject(o, "seed", (double)c->seed);
    if (sampled) {
        cJSON *so = cJSON_AddObjectToObject(o, "sampled");
        if (so) add_class(so, sampled);
    }
    const ds_status st = ds_json_save(o, path); // atomically
    cJSON_Delete(o);
    return st;
}

// One class's temperatures, acceptance prior and "temp" from object j (`where` names it in errors:
// "" for the top level, "\"sampled\": " inside it).
static ds_status read_class(const cJSON *j, const char *path, const char *where, int block_size,
                            ds_calibration_class *c, double *temp) {
    memset(c, 0, sizeof *c);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "temperatures"), *e;
    if (!cJSON_IsArray(t) || cJSON_GetArraySize(t) > block_size)
        return ds_fail(DS_ERR_FORMAT, "%s: %s\"temperatures\" must be a list of at most block_size numbers", path, where);
    cJSON_ArrayForEach(e, t) {
        if (!cJSON_IsNumber(e) || !(e->valuedouble > 0))
            return ds_fail(DS_ERR_FORMAT, "%s: %stemperatures must be positive numbers", path, where);
        c->temps[c->n_temps++] = (float)e->valuedouble;
    }
    const cJSON *acc = cJSON_GetObjectItemCaseSensitive(j, "acceptance");
    if (acc && (!cJSON_IsArray(acc) || cJSON_GetArraySize(acc) > block_size))
        return ds_fail(DS_ERR_FORMAT, "%s: %s\"acceptance\" must be a list of at most block_size numbers", path, where);
    int k = 0;
    cJSON_ArrayForEach(e, acc) {
        if (cJSON_IsNull(e)) break; // positions past here were not observed
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= 0 && e->valuedouble <= 1))
            return ds_fail(DS_ERR_FORMAT, "%s: %sacceptance rates must be numbers in [0, 1] (or null)", path, where);
        if (k > 0 && e->valuedouble > c->accept[k - 1] + 1e-6) // a prefix acceptance cannot grow
            return ds_fail(DS_ERR_FORMAT, "%s: %s\"acceptance\" must not increase with the position (slot %d: %g, slot %d: %g)",
                           path, where, k, (double)c->accept[k - 1], k + 1, e->valuedouble);
        c->accept[k++] = (float)e->valuedouble;
    }
    c->n_accept = k;
    // The sampling temperature the acceptance was realized at (files before it was written: 0, the
    // calibrate job's default).
    const cJSON *tp = cJSON_GetObjectItemCaseSensitive(j, "temp");
    if (tp && (!cJSON_IsNumber(tp) || !(tp->valuedouble >= 0 && tp->valuedouble <= 100)))
        return ds_fail(DS_ERR_FORMAT, "%s: %s\"temp\" must be a number in [0, 100]", path, where);
    *temp = tp ? tp->valuedouble : 0;
    return DS_OK;
}

ds_status ds_calibration_read(const char *path, int block_size, ds_calibration_class cls[DS_CALIB_CLASSES],
                              int *found) {
    memset(cls, 0, sizeof *cls * DS_CALIB_CLASSES);
    *found = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return DS_OK; // uncalibrated
    fclose(f);
    cJSON *j;
    ds_status st = ds_json_load(path, 1 << 20, &j);
    if (st) return st;
    const char *method;
    ds_calibration_class top, own;
    double temp = 0, own_temp = 0;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(j, "sampled");
    if ((st = ds_json_str(j, path, "method", &method)) || (method && strcmp(method, "sts"))) {
        if (!st) st = ds_fail(DS_ERR_UNSUPPORTED, "%s: calibration method '%s' is not supported (sts is)", path, method);
    } else if (!(st = read_class(j, path, "", block_size, &top, &temp)) && so) {
        if (!cJSON_IsObject(so)) st = ds_fail(DS_ERR_FORMAT, "%s: \"sampled\" must be an object", path);
        else if (temp != 0)
            st = ds_fail(DS_ERR_FORMAT, "%s: \"sampled\" next to a calibration at temp %g (the top level must be temp 0)",
                         path, temp);
        else if (!(st = read_class(so, path, "\"sampled\": ", block_size, &own, &own_temp)) && !(own_temp > 0))
            st = ds_fail(DS_ERR_FORMAT, "%s: \"sampled\": \"temp\" must be above 0", path);
    }
    cJSON_Delete(j);
    if (st) return st;
    // The top level's temperatures serve both classes; its prior, its own class only.
    const int c = temp > 0 ? DS_CALIB_SAMPLED : DS_CALIB_GREEDY;
    for (int i = 0; i < DS_CALIB_CLASSES; i++) {
        cls[i] = top;
        if (i != c) cls[i].n_accept = 0;
    }
    if (so) cls[DS_CALIB_SAMPLED] = own;
    *found = 1;
    return DS_OK;
}
