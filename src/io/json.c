#include "io/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "io/atomic.h"

ds_status ds_json_load(const char *path, size_t max_bytes, cJSON **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return ds_fail(DS_ERR_IO, "%s: cannot open", path);
    char *buf = malloc(max_bytes + 1);
    size_t n = buf ? fread(buf, 1, max_bytes + 1, f) : 0;
    fclose(f);
    if (!buf) return ds_fail(DS_ERR_NOMEM, "out of memory reading %s", path);
    if (n > max_bytes) {
        free(buf);
        return ds_fail(DS_ERR_FORMAT, "%s: larger than %zu bytes", path, max_bytes);
    }
    buf[n] = 0;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(buf, &end, 1);
    free(buf);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return ds_fail(DS_ERR_FORMAT, "%s: not valid JSON (or not a JSON object)", path);
    }
    *out = j;
    return DS_OK;
}

ds_status ds_json_int(const cJSON *obj, const char *path, const char *key, int def, int max, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        if (def < 0) return ds_fail(DS_ERR_FORMAT, "%s: missing \"%s\"", path, key);
        *out = def;
        return DS_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(long long)v->valuedouble || v->valuedouble < 0 ||
        v->valuedouble > max)
        return ds_fail(DS_ERR_FORMAT, "%s: \"%s\" must be an integer in 0..%d", path, key, max);
    *out = (int)v->valuedouble;
    return DS_OK;
}

ds_status ds_json_num(const cJSON *obj, const char *path, const char *key, double def, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return DS_OK;
    }
    if (!cJSON_IsNumber(v)) return ds_fail(DS_ERR_FORMAT, "%s: \"%s\" must be a number", path, key);
    *out = v->valuedouble;
    return DS_OK;
}

ds_status ds_json_bool(const cJSON *obj, const char *path, const char *key, int def, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return DS_OK;
    }
    if (!cJSON_IsBool(v)) return ds_fail(DS_ERR_FORMAT, "%s: \"%s\" must be true or false", path, key);
    *out = cJSON_IsTrue(v);
    return DS_OK;
}

ds_status ds_json_str(const cJSON *obj, const char *path, const char *key, const char **out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return DS_OK;
    if (!cJSON_IsString(v)) return ds_fail(DS_ERR_FORMAT, "%s: \"%s\" must be a string", path, key);
    *out = v->valuestring;
    return DS_OK;
}

ds_status ds_json_save(const cJSON *obj, const char *path) {
    char *text = cJSON_Print(obj);
    if (!text) return ds_fail(DS_ERR_NOMEM, "out of memory");
    const size_t n = strlen(text);
    char *line = realloc(text, n + 2);
    if (!line) {
        free(text);
        return ds_fail(DS_ERR_NOMEM, "out of memory");
    }
    line[n] = '\n';
    line[n + 1] = 0;
    ds_status st = ds_atomic_write_text(path, line);
    free(line);
    return st;
}
