// The drafter registry: what `train --register` and `quantize --register` wrote, under the identity
// of the target each drafter was made for (config.json's "target_id", ds_model_target_id), so that
// generate, eval, calibrate and serve can pick a drafter for the loaded target by itself.
//
// The directory: $DSPARK_REGISTRY when set, else $XDG_DATA_HOME/dspark/drafters, else
// $HOME/.local/share/dspark/drafters (created on the first registration). One JSON file per
// registered drafter directory, named by a hash of its absolute path (registering it again replaces
// the entry), written atomically:
//   {"target_id": "llama:735c4ef8608a1084", "path": "/abs/drafter", "source": "train",
//    "tau": 3.61, "temp": 0, "step": 2400, "time": 1764590000}
// tau / temp / step: the drafter's recorded held-out τ (absent when none was measured).
// A drafter is only ever picked for the target whose identity it was registered under, and only
// while its directory's config.json still records that identity.
//
// The drafter registry (the API: include/dspark_jobs.h).
#include "dspark/speculate.h"
#include "dspark/train.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "base/status.h"
#include "io/atomic.h"
#include "io/json.h"
#include "train/data.h"

ds_status ds_registry_dir(char *out, size_t cap) {
    const char *env = getenv("DSPARK_REGISTRY"), *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    int n;
    if (env && *env) n = snprintf(out, cap, "%s", env);
    else if (xdg && *xdg) n = snprintf(out, cap, "%s/dspark/drafters", xdg);
    else if (home && *home) n = snprintf(out, cap, "%s/.local/share/dspark/drafters", home);
    else return ds_fail(DS_ERR_INVALID, "no registry directory: set DSPARK_REGISTRY (or HOME)");
    if (n < 0 || (size_t)n >= cap) return ds_fail(DS_ERR_INVALID, "the registry directory's path is too long");
    return DS_OK;
}

// mkdir -p
static ds_status make_dirs(const char *path) {
    char p[4096];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1;; s++) {
        const char c = *s;
        if (c != '/' && c) continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) return ds_fail(DS_ERR_IO, "%s: cannot create: %s", p, strerror(errno));
        *s = c;
        if (!c) break;
    }
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) return ds_fail(DS_ERR_IO, "%s: is not a directory", path);
    return DS_OK;
}

// dir/config.json's "target_id" into out ("" when there is none).
static ds_status target_of(const char *dir, char *out, size_t cap) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *j;
    ds_status st = ds_json_load(path, 1 << 24, &j);
    if (st) return st;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "target_id");
    snprintf(out, cap, "%s", cJSON_IsString(t) ? t->valuestring : "");
    cJSON_Delete(j);
    return DS_OK;
}

static const char *str_of(const cJSON *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

ds_status ds_registry_add(const char *dir, const char *source, int has_tau, double tau, double temp, int step,
                          ds_registry_entry *out) {
    ds_registry_entry e = {0};
    if (!realpath(dir, e.path)) return ds_fail(DS_ERR_IO, "%s: cannot register it: %s", dir, strerror(errno));
    ds_status st = target_of(e.path, e.target_id, sizeof e.target_id);
    if (st) return ds_fail_prefix(st, "%s: cannot register it", dir);
    if (!e.target_id[0])
        return ds_fail(DS_ERR_FORMAT, "%s: cannot register it: its config.json records no target_id", dir);
    snprintf(e.source, sizeof e.source, "%s", source);
    e.has_tau = has_tau, e.tau = tau, e.temp = temp, e.step = step;
    if (!has_tau) { // what train --keep-best recorded next to the drafter
        char path[4200];
        snprintf(path, sizeof path, "%s/heldout.json", e.path);
        cJSON *h;
        if (ds_json_load(path, 1 << 20, &h) == DS_OK) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(h, "tau"), *tt = cJSON_GetObjectItemCaseSensitive(h, "temp"),
                        *s = cJSON_GetObjectItemCaseSensitive(h, "step");
            if (cJSON_IsNumber(t)) {
                e.has_tau = 1;
                e.tau = t->valuedouble;
                e.temp = cJSON_IsNumber(tt) ? tt->valuedouble : 0;
                e.step = cJSON_IsNumber(s) ? s->valueint : 0;
            }
            cJSON_Delete(h);
        }
    }
    e.time = (double)time(NULL);
    e.present = 1;
    char reg[4096], file[4200];
    if ((st = ds_registry_dir(reg, sizeof reg)) || (st = make_dirs(reg))) return st;
    snprintf(file, sizeof file, "%s/%016llx.json", reg,
             (unsigned long long)ds_fnv1a64(DS_FNV1A64_INIT, e.path, strlen(e.path)));
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "target_id", e.target_id);
    cJSON_AddStringToObject(j, "path", e.path);
    cJSON_AddStringToObject(j, "source", e.source);
    if (e.has_tau) {
        cJSON_AddNumberToObject(j, "tau", e.tau);
        cJSON_AddNumberToObject(j, "temp", e.temp);
        cJSON_AddNumberToObject(j, "step", e.step);
    }
    cJSON_AddNumberToObject(j, "time", e.time);
    st = ds_json_save(j, file);
    cJSON_Delete(j);
    if (st) return st;
    if (out) *out = e;
    return DS_OK;
}

static int by_rank(const void *x, const void *y) {
    const ds_registry_entry *a = x, *b = y;
    if (a->has_tau != b->has_tau) return b->has_tau - a->has_tau;
    if (a->has_tau && a->tau != b->tau) return a->tau < b->tau ? 1 : -1;
    if (a->time != b->time) return a->time < b->time ? 1 : -1;
    return strcmp(a->path, b->path);
}

ds_status ds_registry_list(const char *target_id, ds_registry_entry **out, int *n_out) {
    *out = NULL;
    *n_out = 0;
    char reg[4096];
    ds_status st = ds_registry_dir(reg, sizeof reg);
    if (st) return st;
    DIR *d = opendir(reg);
    if (!d) return DS_OK; // nothing registered yet
    ds_registry_entry *v = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        const size_t len = strlen(de->d_name);
        if (len < 6 || strcmp(de->d_name + len - 5, ".json")) continue;
        char file[4400];
        snprintf(file, sizeof file, "%s/%s", reg, de->d_name);
        cJSON *j;
        if (ds_json_load(file, 1 << 20, &j) != DS_OK) continue;
        const char *tid = str_of(j, "target_id"), *path = str_of(j, "path"), *src = str_of(j, "source");
        if (tid && path && (!target_id || !strcmp(tid, target_id))) {
            if (n == cap) {
                cap = cap ? 2 * cap : 8;
                ds_registry_entry *nv = realloc(v, sizeof *v * (size_t)cap);
                if (!nv) {
                    cJSON_Delete(j);
                    closedir(d);
                    free(v);
                    return ds_fail(DS_ERR_NOMEM, "out of memory");
                }
                v = nv;
            }
            ds_registry_entry *e = &v[n++];
            memset(e, 0, sizeof *e);
            snprintf(e->target_id, sizeof e->target_id, "%s", tid);
            snprintf(e->path, sizeof e->path, "%s", path);
            snprintf(e->source, sizeof e->source, "%s", src ? src : "");
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "tau"), *tt = cJSON_GetObjectItemCaseSensitive(j, "temp"),
                        *s = cJSON_GetObjectItemCaseSensitive(j, "step"), *tm = cJSON_GetObjectItemCaseSensitive(j, "time");
            e->has_tau = cJSON_IsNumber(t);
            e->tau = e->has_tau ? t->valuedouble : 0;
            e->temp = cJSON_IsNumber(tt) ? tt->valuedouble : 0;
            e->step = cJSON_IsNumber(s) ? s->valueint : 0;
            e->time = cJSON_IsNumber(tm) ? tm->valuedouble : 0;
            char now_id[128];
            e->present = target_of(e->path, now_id, sizeof now_id) == DS_OK && !strcmp(now_id, e->target_id);
        }
        cJSON_Delete(j);
    }
    closedir(d);
    if (n > 1) qsort(v, (size_t)n, sizeof *v, by_rank);
    *out = v;
    *n_out = n;
    return DS_OK;
}

ds_status ds_registry_best(const char *target_id, ds_registry_entry *out, int *found) {
    *found = 0;
    ds_registry_entry *v;
    int n;
    ds_status st = ds_registry_list(target_id, &v, &n);
    if (st) return st;
    for (int i = 0; i < n; i++)
        if (v[i].present && !strcmp(v[i].target_id, target_id)) {
            *out = v[i];
            *found = 1;
            break;
        }
    free(v);
    return DS_OK;
}
