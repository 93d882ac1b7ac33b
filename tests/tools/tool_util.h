// Shared by the test tools: parsing comma-separated integer lists.
#ifndef DS_TESTS_TOOL_UTIL_H
#define DS_TESTS_TOOL_UTIL_H

#include <stdlib.h>

// "1,2,3" -> out[0..n); returns n, or -1 when malformed.
static inline int parse_list(const char *s, int *out, int cap) {
    int n = 0;
    while (s && *s && n < cap) {
        char *end;
        out[n++] = (int)strtol(s, &end, 10);
        if (end == s || (*end && *end != ',')) return -1;
        s = *end ? end + 1 : end;
    }
    return n;
}

#endif
