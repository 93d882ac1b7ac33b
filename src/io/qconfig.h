// The "quantization" block of a quantized checkpoint's config.json (docs/formats/mlx-affine.md §4):
// {"group_size": 64, "bits": 4, "mode": "affine", "<module>": false | {"bits": b, "group_size": g}}.
#ifndef DS_IO_QCONFIG_H
#define DS_IO_QCONFIG_H

#include <cjson/cJSON.h>

#include "dspark/io.h"

typedef struct ds_quant_config {
    int present;     // the config has a quantization block
    int bits;        // defaults for modules without an entry
    int group_size;
    cJSON *block;    // owned copy of the block (per-module entries), NULL when absent
    char path[512];  // config.json, for messages
} ds_quant_config;

// Read the block from a parsed config.json (`quantization`, else `quantization_config`) and check
// it (mode affine, bits 4|8, group size 32|64, per-module entries false or such objects). Absent:
// present = 0, DS_OK.
ds_status ds_quant_config_parse(const cJSON *config, const char *path, ds_quant_config *out);
// The same from <dir>/config.json.
ds_status ds_quant_config_load(const char *dir, ds_quant_config *out);
void ds_quant_config_free(ds_quant_config *q);

// What the block says of `module` (a path without ".weight"): 1 and *bits, *group_size when the
// module is quantized, 0 when it is not (no block, or an entry `false`).
int ds_quant_config_module(const ds_quant_config *q, const char *module, int *bits, int *group_size);

#endif
