// Reading and checking a config.json quantization block (see qconfig.h).
#include "io/qconfig.h"

#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "io/json.h"
#include "kernels/affine.h"

static ds_status entry_params(const cJSON *o, const char *path, const char *what, int dbits, int dgs, int *bits,
                              int *gs) {
    ds_status st;
    if ((st = ds_json_int(o, path, "bits", dbits, 64, bits)) || (st = ds_json_int(o, path, "group_size", dgs, 1 << 20, gs)))
        return st;
    if (!ds_affine_supported(*bits, *gs))
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: quantization%s%s: bits %d, group_size %d (supported: bits 4 or 8, group size 32 or 64)",
                       path, what[0] ? " of " : "", what, *bits, *gs);
    return DS_OK;
}

ds_status ds_quant_config_parse(const cJSON *config, const char *path, ds_quant_config *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->path, sizeof out->path, "%s", path);
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(config, "quantization");
    if (!b || cJSON_IsNull(b)) b = cJSON_GetObjectItemCaseSensitive(config, "quantization_config");
    if (!b || cJSON_IsNull(b)) return DS_OK;
    if (!cJSON_IsObject(b)) return ds_fail(DS_ERR_FORMAT, "%s: \"quantization\" must be an object", path);
    const char *mode;
    ds_status st = ds_json_str(b, path, "mode", &mode);
    if (st) return st;
    if (mode && strcmp(mode, "affine"))
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: quantization mode '%s' is not supported (only MLX \"affine\")", path, mode);
    if ((st = entry_params(b, path, "", -1, -1, &out->bits, &out->group_size))) return st;
    const cJSON *e;
    cJSON_ArrayForEach(e, b) {
        if (!strcmp(e->string, "bits") || !strcmp(e->string, "group_size") || !strcmp(e->string, "mode")) continue;
        int eb, eg;
        if (cJSON_IsFalse(e)) continue;
        if (!cJSON_IsObject(e))
            return ds_fail(DS_ERR_FORMAT, "%s: quantization entry '%.80s' must be false or {\"bits\", \"group_size\"}",
                           path, e->string);
        if ((st = entry_params(e, path, e->string, out->bits, out->group_size, &eb, &eg))) return st;
    }
    if (!(out->block = cJSON_Duplicate(b, 1))) return ds_fail(DS_ERR_NOMEM, "out of memory");
    out->present = 1;
    return DS_OK;
}

ds_status ds_quant_config_load(const char *dir, ds_quant_config *out) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *j;
    memset(out, 0, sizeof *out);
    ds_status st = ds_json_load(path, 1 << 20, &j);
    if (st) return st;
    st = ds_quant_config_parse(j, path, out);
    cJSON_Delete(j);
    return st;
}

void ds_quant_config_free(ds_quant_config *q) {
    cJSON_Delete(q->block);
    memset(q, 0, sizeof *q);
}

int ds_quant_config_module(const ds_quant_config *q, const char *module, int *bits, int *group_size) {
    if (!q || !q->present) return 0;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(q->block, module);
    if (cJSON_IsFalse(e)) return 0;
    *bits = q->bits;
    *group_size = q->group_size;
    if (cJSON_IsObject(e)) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "bits"), *g = cJSON_GetObjectItemCaseSensitive(e, "group_size");
        if (cJSON_IsNumber(b)) *bits = ds_json_is_int(b, 0, 64) ? (int)b->valuedouble : -1; // -1: unsupported
        if (cJSON_IsNumber(g)) *group_size = ds_json_is_int(g, 0, 1 << 20) ? (int)g->valuedouble : -1;
    }
    return 1;
}
