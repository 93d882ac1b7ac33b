// JSON Schema (response_format json_schema, the "json_schema" field, --json-schema) to GBNF:
// whatever the converter accepts must give a grammar that parses.
#include <stdlib.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *gbnf = NULL;
    const char *kw = NULL;
    if (ds_json_schema_to_gbnf((const char *)data, size, &gbnf, &kw) == DS_OK) {
        ds_grammar *g = NULL;
        if (ds_grammar_parse(gbnf, &g) != DS_OK) abort(); // the converter wrote bad GBNF
        ds_grammar_free(g);
        free(gbnf);
    }
    return 0;
}
