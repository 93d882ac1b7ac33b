#include "model/st_weights.h"

#include <stdio.h>
#include <string.h>

#include "base/status.h"

ds_status ds_st_weight(const ds_safetensors *st, const char *where, const char *name, int rows, int cols,
                       int optional, ds_weight *w) {
    const ds_st_tensor *t = ds_st_find(st, name);
    memset(w, 0, sizeof *w);
    if (!t) return optional ? DS_OK : ds_fail(DS_ERR_FORMAT, "%s: missing tensor '%s'", where, name);
    if (t->dtype != DS_F32 && t->dtype != DS_F16 && t->dtype != DS_BF16)
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s (F32, F16, BF16 supported)", where, name,
                       ds_dtype_name(t->dtype));
    if (t->n_dims != 2 || t->shape[0] > INT32_MAX || t->shape[1] > INT32_MAX ||
        (rows >= 0 && t->shape[0] != rows) || (cols >= 0 && t->shape[1] != cols)) {
        char got[64] = "";
        for (int i = 0; i < t->n_dims && i < 4; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' has shape [%s], expected [%d, %d]", where, name, got, rows, cols);
    }
    w->type = t->dtype;
    w->rows = (int)t->shape[0];
    w->cols = (int)t->shape[1];
    w->data = t->data;
    return DS_OK;
}

ds_status ds_st_vector(const ds_safetensors *st, const char *where, const char *name, int n, float *out) {
    const ds_st_tensor *t = ds_st_find(st, name);
    if (!t) return ds_fail(DS_ERR_FORMAT, "%s: missing tensor '%s'", where, name);
    if (t->dtype != DS_F32 && t->dtype != DS_F16 && t->dtype != DS_BF16)
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s (F32, F16, BF16 supported)", where, name,
                       ds_dtype_name(t->dtype));
    if (t->n_dims != 1 || t->shape[0] != n)
        return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' must have shape [%d]", where, name, n);
    ds_weight w = {t->dtype, 1, n, t->data};
    ds_weight_row_f32(&w, 0, out);
    return DS_OK;
}
