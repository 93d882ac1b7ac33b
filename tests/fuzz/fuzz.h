// Shared by the libFuzzer targets (tests/fuzz/fuzz_*.c): the loaders under test take paths, so each
// input is written to files in a private folder first.
//
// Multi-file inputs (a Hugging Face directory, a drafter directory, a tokenizer folder) are one
// byte string holding several files, each introduced by a line "=== NAME\n" and running up to the
// next "\n=== " (or the end):
//
//   === config.json\n{...}\n=== model.safetensors\n<bytes>
//
// NAME is 1..64 of [A-Za-z0-9._-] and not "." or ".."; a malformed header line ends the input
// there. The seeds (tests/fuzz/make_corpus.py) are real fixture directories packed this way, so
// mutations keep the layout and change the contents. Everything is deterministic: no clock, no
// random numbers, no state kept between inputs (the folder is emptied before each one).
#ifndef DS_TESTS_FUZZ_H
#define DS_TESTS_FUZZ_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dspark.h"

#ifndef DS_FUZZ_FIXTURES
#define DS_FUZZ_FIXTURES "tests/fuzz/fixtures" // set by CMake to the source tree's folder
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

// The private folder "<tmp>/dsfuzz.<pid>" (tmp: $DSPARK_TMP, else /dev/shm, else /tmp), created on
// first use; returns its path.
static inline const char *fuzz_dir(void) {
    static char dir[512];
    if (!dir[0]) {
        const char *tmp = getenv("DSPARK_TMP");
        struct stat sb;
        if (!tmp || !tmp[0]) tmp = stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) ? "/dev/shm" : "/tmp";
        snprintf(dir, sizeof dir, "%s/dsfuzz.%ld", tmp, (long)getpid());
        mkdir(dir, 0700);
    }
    return dir;
}

// Remove every plain file in the private folder (the folder itself stays).
static inline void fuzz_clear(void) {
    const char *dir = fuzz_dir();
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    if (d) closedir(d);
}

// Write n bytes as <folder>/<name>; returns the path (a static buffer per call site is the
// caller's business: this one is overwritten by the next call).
static inline const char *fuzz_write(const char *name, const void *data, size_t n) {
    static char p[1024];
    snprintf(p, sizeof p, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(p, "wb");
    if (!f) abort(); // the harness itself failed: not a finding about the code under test
    if (n && fwrite(data, 1, n, f) != n) abort();
    fclose(f);
    return p;
}

static inline int fuzz_name_ok(const char *s, size_t n) {
    if (n == 0 || n > 64 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.')) return 0;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-'))
            return 0;
    }
    return 1;
}

// Empty the folder and unpack a multi-file input into it (see the top of this file). Returns the
// number of files written.
static inline int fuzz_unpack(const uint8_t *data, size_t size) {
    fuzz_clear();
    const char *s = (const char *)data, *end = s + size;
    int n_files = 0;
    while (end - s >= 5 && !memcmp(s, "=== ", 4)) {
        const char *name = s + 4;
        const char *nl = memchr(name, '\n', (size_t)(end - name));
        if (!nl || !fuzz_name_ok(name, (size_t)(nl - name))) break;
        const char *body = nl + 1, *next = body;
        while (next < end) {
            const char *q = memchr(next, '\n', (size_t)(end - next));
            if (!q || end - q < 5) {
                next = end;
                break;
            }
            if (!memcmp(q + 1, "=== ", 4)) {
                next = q;
                break;
            }
            next = q + 1;
        }
        char fname[65];
        memcpy(fname, name, (size_t)(nl - name));
        fname[nl - name] = 0;
        fuzz_write(fname, body, (size_t)(next - body));
        n_files++;
        s = next < end ? next + 1 : end;
    }
    return n_files;
}

// A committed fixture (tests/fuzz/fixtures/<name>).
static inline const char *fuzz_fixture(const char *name) {
    static char p[1024];
    const char *root = getenv("DS_FUZZ_FIXTURES");
    snprintf(p, sizeof p, "%s/%s", root && root[0] ? root : DS_FUZZ_FIXTURES, name);
    return p;
}

// Use a loaded tokenizer the way the commands do: encode `text` (and a fixed sample) with every
// flag combination, decode the ids whole and streamed, read every token's bytes, render a chat.
// Results are not checked (the fuzzer looks for crashes, hangs and sanitizer reports).
static inline void fuzz_use_tokenizer(const ds_tokenizer *t, const char *text, size_t len) {
    static const char sample[] = "Hello, world! <s> <|im_start|>user\n caf\xc3\xa9 \xe2\x96\x81x  \n\t1234 \xf0\x9f\x98\x80";
    const char *texts[2] = {sample, text};
    const size_t lens[2] = {sizeof sample - 1, len};
    int32_t ids[512];
    for (int k = 0; k < 2; k++) {
        if (!texts[k]) continue;
        for (unsigned flags = 0; flags < 4; flags++) {
            int n = 0;
            if (ds_tokenize_ex(t, texts[k], lens[k], flags, ids, 512, &n) != DS_OK) continue;
            if (n > 512) n = 512;
            char *out = NULL;
            if (ds_detokenize(t, ids, n, (int)(flags & 1), &out, NULL) == DS_OK) free(out);
            ds_detok d;
            ds_detok_init(&d, t, (int)(flags & 1));
            char buf[64];
            for (int i = 0; i < n; i++)
                if (ds_detok_push(&d, ids[i], buf, sizeof buf) < 0) {
                    char *big = malloc(1 << 16);
                    if (big) ds_detok_push(&d, ids[i], big, 1 << 16);
                    free(big);
                }
            ds_detok_flush(&d, buf, sizeof buf);
        }
        int n = 0;
        (void)ds_tokenize(t, texts[k], lens[k], 1, ids, 512, &n);
    }
    const int V = ds_tokenizer_vocab_size(t);
    char b[16];
    for (int i = -1; i <= V && i < 1 << 16; i++) ds_token_bytes(t, i, b, sizeof b);
    ds_tokenizer_bos(t);
    ds_tokenizer_eos(t);
    ds_chat_eot(t);
    ds_chat_format_name(t);
    const ds_chat_message msgs[] = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "?"}};
    for (int n = 1; n <= 4; n++) {
        char *out = NULL;
        if (ds_chat_render(t, msgs, n, n & 1, &out) == DS_OK) free(out);
    }
}

#endif
