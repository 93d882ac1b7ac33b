// Unit-test helper: a private folder for this run under $DSPARK_TMP (or /tmp), emptied and removed
// at the end, and unique file names inside it.
#ifndef DS_TESTS_TMPDIR_H
#define DS_TESTS_TMPDIR_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_tmp_base[512];
static int g_tmp_counter;

// Create the folder "<tmp>/<name>.<pid>"; 0 on success (cmocka group setup convention).
static inline int tmpdir_create(const char *name) {
    const char *tmp = getenv("DSPARK_TMP");
    if (!tmp || !tmp[0]) tmp = "/tmp";
    snprintf(g_tmp_base, sizeof g_tmp_base, "%s/%s.%ld", tmp, name, (long)getpid());
    return mkdir(g_tmp_base, 0777) == 0 ? 0 : -1;
}

// Remove every file in the folder, then the folder.
static inline int tmpdir_remove(void) {
    DIR *d = opendir(g_tmp_base);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        char sub[1024];
        snprintf(sub, sizeof sub, "%s/%s", g_tmp_base, de->d_name);
        unlink(sub);
    }
    if (d) closedir(d);
    rmdir(g_tmp_base);
    return 0;
}

// A fresh path "<folder>/<what>.<n><ext>".
static inline void tmpdir_path(char *out, size_t cap, const char *what, const char *ext) {
    snprintf(out, cap, "%s/%s.%d%s", g_tmp_base, what, g_tmp_counter++, ext);
}

#endif
