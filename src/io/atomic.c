#include "io/atomic.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"

ds_status ds_atomic_open(ds_atomic_file *af, const char *path) {
    memset(af, 0, sizeof *af);
    size_t n = strlen(path) + 32;
    af->path = strdup(path);
    af->tmp_path = malloc(n);
    if (!af->path || !af->tmp_path) {
        ds_atomic_abort(af);
        return ds_fail(DS_ERR_NOMEM, "out of memory");
    }
    snprintf(af->tmp_path, n, "%s.tmp.%ld", path, (long)getpid());
    af->f = fopen(af->tmp_path, "wb");
    if (!af->f) {
        ds_status st = ds_fail(DS_ERR_IO, "%s: cannot create: %s", af->tmp_path, strerror(errno));
        ds_atomic_abort(af);
        return st;
    }
    return DS_OK;
}

ds_status ds_atomic_commit(ds_atomic_file *af) {
    ds_status st = DS_OK;
    if (fflush(af->f) != 0 || ferror(af->f) || fsync(fileno(af->f)) != 0)
        st = ds_fail(DS_ERR_IO, "%s: write failed: %s", af->tmp_path, strerror(errno));
    if (fclose(af->f) != 0 && st == DS_OK)
        st = ds_fail(DS_ERR_IO, "%s: close failed: %s", af->tmp_path, strerror(errno));
    af->f = NULL;
    if (st == DS_OK && rename(af->tmp_path, af->path) != 0)
        st = ds_fail(DS_ERR_IO, "%s: rename failed: %s", af->path, strerror(errno));
    if (st != DS_OK) unlink(af->tmp_path);
    free(af->path);
    free(af->tmp_path);
    memset(af, 0, sizeof *af);
    return st;
}

void ds_atomic_abort(ds_atomic_file *af) {
    if (af->f) fclose(af->f);
    if (af->tmp_path) unlink(af->tmp_path);
    free(af->path);
    free(af->tmp_path);
    memset(af, 0, sizeof *af);
}

ds_status ds_atomic_write_text(const char *path, const char *text) {
    ds_atomic_file af;
    ds_status st = ds_atomic_open(&af, path);
    if (st) return st;
    fputs(text, af.f);
    return ds_atomic_commit(&af);
}

void ds_remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[4400];
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            struct stat sb;
            if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) ds_remove_tree(p);
            else unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}
