#include "io/json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "io/atomic.h"

ds_status ds_json_load(const char *path, size_t max_bytes, cJSON **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return ds_fail(DS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    // Grow with what the file holds (never reserve max_bytes up front: limits are generous).
    size_t cap = 0, n = 0;
    char *buf = NULL;
    ds_status st = DS_OK;
    for (;;) {
        if (n == cap) {
            if (cap > max_bytes) break; // read max_bytes + 1: too large
            size_t want = cap ? cap * 2 : 1 << 16;
            if (want > max_bytes + 1) want = max_bytes + 1;
            char *nb = realloc(buf, want + 1);
            if (!nb) {
                st = ds_fail(DS_ERR_NOMEM, "%s: out of memory reading it", path);
                break;
            }
            buf = nb;
            cap = want;
        }
        const size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) st = ds_fail(DS_ERR_IO, "%s: read failed: %s", path, strerror(errno));
            break;
        }
    }
    fclose(f);
    if (!st && n > max_bytes) st = ds_fail(DS_ERR_FORMAT, "%s: larger than %zu bytes", path, max_bytes);
    if (!st && n == 0) st = ds_fail(DS_ERR_FORMAT, "%s: empty file (a JSON object expected)", path);
    if (!st && memchr(buf, 0, n)) st = ds_fail(DS_ERR_FORMAT, "%s: not valid JSON (holds a NUL byte)", path);
    if (st) {
        free(buf);
        return st;
    }
    buf[n] = 0;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(buf, &end, 1);
    if (!j || !cJSON_IsObject(j)) {
        const size_t at = end && end >= buf && end <= buf + n ? (size_t)(end - buf) : n;
        st = j ? ds_fail(DS_ERR_FORMAT, "%s: not a JSON object", path)
               : ds_fail(DS_ERR_FORMAT, "%s: not valid JSON (at byte %zu)", path, at);
        cJSON_Delete(j);
        free(buf);
        return st;
    }
    free(buf);
    *out = j;
    return DS_OK;
}

int ds_json_has_nul_escape(const char *text, size_t n) {
    for (size_t i = 0; i + 1 < n; i++) {
        if (text[i] != '\\') continue;
        if (text[i + 1] == 'u' && i + 5 < n && !memcmp(text + i + 2, "0000", 4)) return 1;
        i++; // skip the escaped character: the text \\u0000 is an escaped backslash, then "u0000"
    }
    return 0;
}

int ds_json_is_int(const cJSON *v, double lo, double hi) {
    // The range first: converting an out-of-range double to an integer type is undefined.
    return cJSON_IsNumber(v) && v->valuedouble >= lo && v->valuedouble <= hi && v->valuedouble == floor(v->valuedouble);
}

ds_status ds_json_int(const cJSON *obj, const char *path, const char *key, int def, int max, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        if (def < 0) return ds_fail(DS_ERR_FORMAT, "%s: missing \"%s\"", path, key);
        *out = def;
        return DS_OK;
    }
    if (!ds_json_is_int(v, 0, max))
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
