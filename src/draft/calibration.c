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

ds_status ds_calibration_save(const ds_calibration *c, const char *path) {
    if (c->K < 1 || c->K > DS_CALIBRATION_MAX) return ds_fail(DS_ERR_INVALID, "%s: %d calibrated positions", path, c->K);
    cJSON *o = cJSON_CreateObject();
    if (!o) return ds_fail(DS_ERR_NOMEM, "out of memory");
    cJSON_AddStringToObject(o, "method", "sts");
    cJSON_AddItemToObject(o, "temperatures", array_of(c->temps, c->K));
    cJSON_AddItemToObject(o, "ece_before", array_of(c->ece_before, c->K));
    cJSON_AddItemToObject(o, "ece_after", array_of(c->ece_after, c->K));
    cJSON_AddItemToObject(o, "auc", array_of(c->auc_after, c->K));
    cJSON_AddItemToObject(o, "auc_before", array_of(c->auc_before, c->K));
    cJSON_AddItemToObject(o, "n", array_of(c->n, c->K));
    cJSON_AddItemToObject(o, "acceptance", array_of(c->acceptance, c->K)); // realized 1{a >= k} rate
    cJSON_AddNumberToObject(o, "rounds", c->rounds);
    cJSON_AddNumberToObject(o, "temp", c->temp);
    cJSON_AddStringToObject(o, "prompts", c->prompts ? c->prompts : "");
    cJSON_AddNumberToObject(o, "max_tokens", (double)c->max_tokens);
    cJSON_AddNumberToObject(o, "seed", (double)c->seed);
    const ds_status st = ds_json_save(o, path); // atomically
    cJSON_Delete(o);
    return st;
}

ds_status ds_calibration_read(const char *path, int block_size, float *temps, int *n_temps, float *accept,
                              int *n_accept, float *accept_temp, int *found) {
    *n_temps = *n_accept = *found = 0;
    if (accept_temp) *accept_temp = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return DS_OK; // uncalibrated
    fclose(f);
    cJSON *j;
    ds_status st = ds_json_load(path, 1 << 20, &j);
    if (st) return st;
    const char *method;
    if ((st = ds_json_str(j, path, "method", &method)) || (method && strcmp(method, "sts"))) {
        if (!st) st = ds_fail(DS_ERR_UNSUPPORTED, "%s: calibration method '%s' is not supported (sts is)", path, method);
        cJSON_Delete(j);
        return st;
    }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "temperatures"), *e;
    int n = 0;
    if (!cJSON_IsArray(t) || cJSON_GetArraySize(t) > block_size) {
        cJSON_Delete(j);
        return ds_fail(DS_ERR_FORMAT, "%s: \"temperatures\" must be a list of at most block_size numbers", path);
    }
    cJSON_ArrayForEach(e, t) {
        if (!cJSON_IsNumber(e) || !(e->valuedouble > 0)) {
            cJSON_Delete(j);
            return ds_fail(DS_ERR_FORMAT, "%s: temperatures must be positive numbers", path);
        }
        temps[n++] = (float)e->valuedouble;
    }
    const cJSON *acc = cJSON_GetObjectItemCaseSensitive(j, "acceptance");
    if (acc && (!cJSON_IsArray(acc) || cJSON_GetArraySize(acc) > block_size)) {
        cJSON_Delete(j);
        return ds_fail(DS_ERR_FORMAT, "%s: \"acceptance\" must be a list of at most block_size numbers", path);
    }
    int k = 0;
    cJSON_ArrayForEach(e, acc) {
        if (cJSON_IsNull(e)) break; // positions past here were not observed
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= 0 && e->valuedouble <= 1)) {
            cJSON_Delete(j);
            return ds_fail(DS_ERR_FORMAT, "%s: acceptance rates must be numbers in [0, 1] (or null)", path);
        }
        if (k > 0 && e->valuedouble > accept[k - 1] + 1e-6) { // a prefix acceptance cannot grow
            st = ds_fail(DS_ERR_FORMAT, "%s: \"acceptance\" must not increase with the position (slot %d: %g, slot %d: %g)",
                         path, k, (double)accept[k - 1], k + 1, e->valuedouble);
            cJSON_Delete(j);
            return st;
        }
        accept[k++] = (float)e->valuedouble;
    }
    // The sampling temperature the acceptance was realized at (files before it was written: 0, the
    // calibrate job's default).
    const cJSON *tp = cJSON_GetObjectItemCaseSensitive(j, "temp");
    if (tp && (!cJSON_IsNumber(tp) || !(tp->valuedouble >= 0 && tp->valuedouble <= 100))) {
        cJSON_Delete(j);
        return ds_fail(DS_ERR_FORMAT, "%s: \"temp\" must be a number in [0, 100]", path);
    }
    if (accept_temp && tp) *accept_temp = (float)tp->valuedouble;
    cJSON_Delete(j);
    *n_temps = n;
    *n_accept = k;
    *found = 1;
    return DS_OK;
}
