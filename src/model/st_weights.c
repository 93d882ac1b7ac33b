#include "model/st_weights.h"

#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "kernels/ops.h"
#include "io/qconfig.h"

static void shape_text(const ds_st_tensor *t, char *got, size_t cap) {
    got[0] = 0;
    for (int i = 0; i < t->n_dims && i < 4; i++)
        snprintf(got + strlen(got), cap - strlen(got), "%s%lld", i ? ", " : "", (long long)t->shape[i]);
}

// An MLX affine weight (docs/formats/mlx-affine.md §2): `t` = X.weight (U32,
// [out, in·bits/32]) with X.scales / X.biases ([out, in/group_size], one float dtype). The logical
// shape, bits and group size follow from the packed width and the scales' width, checked against
// what config.json's quantization block says of X.
static ds_status affine_weight(const ds_safetensors *st, const char *where, const char *name, const char *module,
                               const ds_st_tensor *t, const ds_st_tensor *sc, int rows, int cols,
                               const ds_quant_config *q, ds_weight *w) {
    char sn[300], bn[300], got[64];
    snprintf(sn, sizeof sn, "%s.scales", module);
    snprintf(bn, sizeof bn, "%s.biases", module);
    const ds_st_tensor *bi = ds_st_find(st, bn);
    int eb = 0, eg = 0;
    if (!q || !q->present)
        return ds_fail(DS_ERR_FORMAT, "%s: '%s' is quantized (has '%s') but config.json has no quantization block", where,
                       name, sn);
    if (!ds_quant_config_module(q, module, &eb, &eg))
        return ds_fail(DS_ERR_FORMAT, "%s: config.json marks '%s' as not quantized but the file has '%s'", where, module,
                       sn);
    if (!bi) return ds_fail(DS_ERR_FORMAT, "%s: quantized '%s' has scales but no '%s'", where, name, bn);
    if (t->dtype != DS_U32)
        return ds_fail(DS_ERR_FORMAT, "%s: quantized '%s' must be U32 (packed words), not %s", where, name,
                       ds_dtype_name(t->dtype));
    if (sc->dtype != DS_F32 && sc->dtype != DS_F16 && sc->dtype != DS_BF16)
        return ds_fail(DS_ERR_FORMAT, "%s: '%s' has dtype %s (F32, F16 or BF16 expected)", where, sn,
                       ds_dtype_name(sc->dtype));
    if (bi->dtype != sc->dtype)
        return ds_fail(DS_ERR_FORMAT, "%s: '%s' is %s but '%s' is %s (they must match)", where, bn,
                       ds_dtype_name(bi->dtype), sn, ds_dtype_name(sc->dtype));
    if (t->n_dims != 2 || sc->n_dims != 2 || bi->n_dims != 2 || t->shape[0] > INT32_MAX || t->shape[0] < 1 ||
        sc->shape[0] != t->shape[0] || bi->shape[0] != t->shape[0] || bi->shape[1] != sc->shape[1] ||
        sc->shape[1] < 1 || sc->shape[1] > INT32_MAX / 64 || t->shape[1] > INT32_MAX / 8)
        return ds_fail(DS_ERR_FORMAT, "%s: quantized '%s': weight, scales and biases shapes disagree", where, module);
    const int64_t R = t->shape[0], P = t->shape[1], G = sc->shape[1];
    const int64_t L = cols >= 0 ? cols : G * eg; // logical input width
    if (L % G || P * 32 % L || L / G != eg || P * 32 / L != eb) {
        shape_text(t, got, sizeof got);
        return ds_fail(DS_ERR_FORMAT,
                       "%s: quantized '%s' has packed shape [%s] and %lld groups per row: not %d-bit with group size %d "
                       "over %lld columns as config.json says",
                       where, name, got, (long long)G, eb, eg, (long long)L);
    }
    if (rows >= 0 && R != rows)
        return ds_fail(DS_ERR_FORMAT, "%s: quantized '%s' has %lld rows, expected %d", where, name, (long long)R, rows);
    w->type = eb == 4 ? DS_AFFINE4 : DS_AFFINE8;
    w->rows = (int)R;
    w->cols = (int)L;
    w->data = t->data;
    w->group_size = eg;
    w->scale_type = sc->dtype;
    w->scales = sc->data;
    w->biases = bi->data;
    return DS_OK;
}

int ds_st_module_of(const char *name, char *module, size_t cap) {
    const size_t n = strlen(name);
    if (n <= 7 || strcmp(name + n - 7, ".weight") || n - 7 >= cap) return 0;
    memcpy(module, name, n - 7);
    module[n - 7] = 0;
    return 1;
}

ds_status ds_st_weight(const ds_safetensors *st, const char *where, const char *name, int rows, int cols,
                       int optional, ds_weight *w) {
    return ds_st_weight_q(st, where, name, rows, cols, optional, NULL, w);
}

ds_status ds_st_weight_q(const ds_safetensors *st, const char *where, const char *name, int rows, int cols,
                         int optional, const ds_quant_config *q, ds_weight *w) {
    const ds_st_tensor *t = ds_st_find(st, name);
    memset(w, 0, sizeof *w);
    if (!t) return optional ? DS_OK : ds_fail(DS_ERR_FORMAT, "%s: missing tensor '%s'", where, name);
    // Quantization is detected here and only here: a module is quantized iff <module>.scales exists.
    char module[256], sn[300];
    if (ds_st_module_of(name, module, sizeof module)) {
        snprintf(sn, sizeof sn, "%s.scales", module);
        const ds_st_tensor *sc = ds_st_find(st, sn);
        if (sc) return affine_weight(st, where, name, module, t, sc, rows, cols, q, w);
    }
    if (t->dtype == DS_U32)
        return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' is U32 (packed) but has no scales next to it", where, name);
    if (t->dtype != DS_F32 && t->dtype != DS_F16 && t->dtype != DS_BF16)
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s (F32, F16, BF16 supported)", where, name,
                       ds_dtype_name(t->dtype));
    if (t->n_dims != 2 || t->shape[0] > INT32_MAX || t->shape[1] > INT32_MAX ||
        (rows >= 0 && t->shape[0] != rows) || (cols >= 0 && t->shape[1] != cols)) {
        char got[64];
        shape_text(t, got, sizeof got);
        return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' has shape [%s], expected [%d, %d]", where, name, got, rows, cols);
    }
    w->type = t->dtype;
    w->rows = (int)t->shape[0];
    w->cols = (int)t->shape[1];
    w->data = t->data;
    return DS_OK;
}

ds_status ds_st_experts_q(const ds_safetensors *st, const char *where, const char *name, int n, int total_rows,
                          int row0, int rows, int cols, const ds_quant_config *q, ds_weight *w, int *found) {
    const ds_st_tensor *t = ds_st_find(st, name);
    *found = t != NULL;
    if (!t) return DS_OK;
    char module[256], sn[300], bn[300], got[64];
    if (!ds_st_module_of(name, module, sizeof module)) snprintf(module, sizeof module, "%s", name);
    snprintf(sn, sizeof sn, "%s.scales", module);
    snprintf(bn, sizeof bn, "%s.biases", module);
    const ds_st_tensor *sc = ds_st_find(st, sn), *bi = ds_st_find(st, bn);
    shape_text(t, got, sizeof got);
    if (t->n_dims != 3 || t->shape[0] != n || t->shape[1] != total_rows)
        return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' has shape [%s], expected [%d, %d, ...] (experts, rows, columns)",
                       where, name, got, n, total_rows);
    const int64_t per = (int64_t)total_rows; // rows per expert
    if (!sc) {
        if (t->dtype != DS_F32 && t->dtype != DS_F16 && t->dtype != DS_BF16)
            return ds_fail(DS_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s (F32, F16, BF16 or MLX affine supported)",
                           where, name, ds_dtype_name(t->dtype));
        if (t->shape[2] != cols)
            return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' has shape [%s], expected [%d, %d, %d]", where, name, got, n,
                           total_rows, cols);
        const size_t es = ds_dtype_size(t->dtype);
        for (int e = 0; e < n; e++) {
            memset(&w[e], 0, sizeof w[e]);
            w[e].type = t->dtype;
            w[e].rows = rows;
            w[e].cols = cols;
            w[e].data = (const char *)t->data + ((size_t)(e * per + row0) * (size_t)cols) * es;
        }
        return DS_OK;
    }
    int eb = 0, eg = 0;
    if (!q || !q->present)
        return ds_fail(DS_ERR_FORMAT, "%s: '%s' is quantized (has '%s') but config.json has no quantization block", where,
                       name, sn);
    if (!ds_quant_config_module(q, module, &eb, &eg))
        return ds_fail(DS_ERR_FORMAT, "%s: config.json marks '%s' as not quantized but the file has '%s'", where, module,
                       sn);
    if (!bi) return ds_fail(DS_ERR_FORMAT, "%s: quantized '%s' has scales but no '%s'", where, name, bn);
    if (t->dtype != DS_U32)
        return ds_fail(DS_ERR_FORMAT, "%s: quantized '%s' must be U32 (packed words), not %s", where, name,
                       ds_dtype_name(t->dtype));
    if ((sc->dtype != DS_F32 && sc->dtype != DS_F16 && sc->dtype != DS_BF16) || bi->dtype != sc->dtype)
        return ds_fail(DS_ERR_FORMAT, "%s: '%s' / '%s' must share one of F32, F16, BF16", where, sn, bn);
    const int64_t P = (int64_t)cols * eb / 32, G = cols / eg;
    if (cols % eg || sc->n_dims != 3 || bi->n_dims != 3 || t->shape[2] != P || sc->shape[0] != n ||
        sc->shape[1] != total_rows || sc->shape[2] != G || bi->shape[0] != n || bi->shape[1] != total_rows ||
        bi->shape[2] != G)
        return ds_fail(DS_ERR_FORMAT,
                       "%s: quantized '%s' has packed shape [%s]: not %d-bit with group size %d over %d columns as "
                       "config.json says (or its scales / biases disagree)", where, name, got, eb, eg, cols);
    const size_t ss = ds_dtype_size(sc->dtype);
    for (int e = 0; e < n; e++) {
        const size_t r0 = (size_t)(e * per + row0);
        memset(&w[e], 0, sizeof w[e]);
        w[e].type = eb == 4 ? DS_AFFINE4 : DS_AFFINE8;
        w[e].rows = rows;
        w[e].cols = cols;
        w[e].data = (const char *)t->data + r0 * (size_t)P * 4;
        w[e].group_size = eg;
        w[e].scale_type = sc->dtype;
        w[e].scales = (const char *)sc->data + r0 * (size_t)G * ss;
        w[e].biases = (const char *)bi->data + r0 * (size_t)G * ss;
    }
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
    if (!ds_all_finite(out, (size_t)n)) return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' holds NaN or Inf values", where, name);
    return DS_OK;
}
