// Reading JSON configuration files (config.json) with cJSON: typed field access with one-line
// errors naming the file and the key.
#ifndef DS_IO_JSON_H
#define DS_IO_JSON_H

#include <cjson/cJSON.h>

#include "dspark/io.h"

// Parse `path` (at most max_bytes) into a JSON object.
ds_status ds_json_load(const char *path, size_t max_bytes, cJSON **out);

// An integer field; absent or null gives `def`, unless def < 0 (then it is required). Non-integers,
// negatives and values above `max` are errors.
ds_status ds_json_int(const cJSON *obj, const char *path, const char *key, int def, int max, int *out);
// Whether JSON text holds the escape \u0000 in a string: cJSON's strings end at a NUL, so such a
// string would be silently cut there. Callers that cannot carry lengths refuse it.
int ds_json_has_nul_escape(const char *text, size_t n);
// Whether v is a number holding an integer in lo..hi (checked before any conversion to an integer).
int ds_json_is_int(const cJSON *v, double lo, double hi);
// A number field; absent gives `def`. Non-numbers are errors.
ds_status ds_json_num(const cJSON *obj, const char *path, const char *key, double def, double *out);
// A boolean field; absent gives `def`. Non-booleans are errors.
ds_status ds_json_bool(const cJSON *obj, const char *path, const char *key, int def, int *out);
// Print `obj` (indented, with a final newline) to `path` atomically; `obj` is not freed.
ds_status ds_json_save(const cJSON *obj, const char *path);
// A string field, or NULL when absent (an error when present but not a string).
ds_status ds_json_str(const cJSON *obj, const char *path, const char *key, const char **out);

#endif
