#define _GNU_SOURCE // renameat2 (RENAME_EXCHANGE)
#include "io/atomic.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"
#include "base/testpoint.h"

static const char *kind_of(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

// The directory part of `path` ("." when there is none) into out (cap bytes).
static void dir_of(const char *path, char *out, size_t cap) {
    snprintf(out, cap, "%s", path);
    char *slash = strrchr(out, '/');
    if (!slash) snprintf(out, cap, ".");
    else if (slash == out) out[1] = 0;
    else *slash = 0;
}

// Where a write to `path` lands: `path`, or the end of its chain of symbolic links (the way a shell's
// `>` follows them), which must be a regular file or nothing. *out is malloc'ed; *mode is the
// existing file's permission bits (or -1 when there is none).
static ds_status resolve(const char *path, char **out, int *mode) {
    *out = NULL;
    *mode = -1;
    char *cur = strdup(path);
    if (!cur) return ds_fail(DS_ERR_NOMEM, "out of memory");
    for (int hops = 0;; hops++) {
        struct stat sb;
        if (lstat(cur, &sb) != 0) { // nothing there (or an unreachable directory: fopen will say)
            *out = cur;
            return DS_OK;
        }
        if (S_ISREG(sb.st_mode)) {
            *mode = (int)(sb.st_mode & 07777);
            *out = cur;
            return DS_OK;
        }
        if (!S_ISLNK(sb.st_mode)) {
            ds_status st = hops ? ds_fail(DS_ERR_IO, "%s: is a symbolic link to %s (%s), not to a regular file", path,
                                          kind_of(sb.st_mode), cur)
                                : ds_fail(DS_ERR_IO, "%s: is %s, not a regular file", path, kind_of(sb.st_mode));
            free(cur);
            return st;
        }
        if (hops >= 40) {
            free(cur);
            return ds_fail(DS_ERR_IO, "%s: too many levels of symbolic links", path);
        }
        char target[4096];
        const ssize_t n = readlink(cur, target, sizeof target - 1);
        if (n <= 0) {
            free(cur);
            return ds_fail(DS_ERR_IO, "%s: cannot read the symbolic link: %s", path, strerror(errno));
        }
        target[n] = 0;
        char dir[4096];
        dir_of(cur, dir, sizeof dir);
        const size_t len = strlen(dir) + (size_t)n + 2;
        char *next = malloc(len);
        if (!next) {
            free(cur);
            return ds_fail(DS_ERR_NOMEM, "out of memory");
        }
        if (target[0] == '/') snprintf(next, len, "%s", target);
        else snprintf(next, len, "%s/%s", dir, target);
        free(cur);
        cur = next;
    }
}

ds_status ds_atomic_check(const char *path) {
    char *p;
    int mode;
    ds_status st = resolve(path, &p, &mode);
    free(p);
    return st;
}

static void remove_tree(const char *dir);

// Temporaries "<base>.tmp.<pid>" in `dir` left by processes that no longer exist (killed runs):
// removed (files, and directory trees). A live process's, ours included, are left alone. An empty
// base matches every "<name>.tmp.<pid>" (a non-empty name).
static void clean_stale_in(const char *dir, const char *base) {
    const size_t nb = strlen(base);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *s = e->d_name;
        const char *t = nb ? s + nb : strstr(s, ".tmp.");
        if (strncmp(s, base, nb) || !t || t == s || strncmp(t, ".tmp.", 5)) continue;
        const char *digits = t + 5;
        size_t k = 0;
        while (digits[k] >= '0' && digits[k] <= '9') k++;
        if (k == 0 || k > 9 || digits[k]) continue;
        const long pid = atol(digits);
        if (pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        const size_t n = strlen(dir) + strlen(s) + 2;
        char *p = malloc(n);
        if (!p) break;
        snprintf(p, n, "%s/%s", dir, s);
        struct stat sb;
        if (lstat(p, &sb) == 0) {
            if (S_ISREG(sb.st_mode)) unlink(p);
            else if (S_ISDIR(sb.st_mode)) remove_tree(p);
        }
        free(p);
    }
    closedir(d);
}

// The temporaries of `path` (next to it).
static void clean_stale(const char *path) {
    char dir[4096];
    dir_of(path, dir, sizeof dir);
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (*base) clean_stale_in(dir, base);
}

// `path` with its first "<dir>.tmp.<our pid>/" component shown as "<dir>/" (malloc'ed).
static char *display_name(const char *path) {
    char mark[48];
    snprintf(mark, sizeof mark, ".tmp.%ld/", (long)getpid());
    char *out = strdup(path);
    char *at = out ? strstr(out, mark) : NULL;
    if (at) memmove(at, at + strlen(mark) - 1, strlen(at + strlen(mark) - 1) + 1);
    return out;
}

ds_status ds_atomic_open(ds_atomic_file *af, const char *path) {
    memset(af, 0, sizeof *af);
    int mode;
    ds_status st = resolve(path, &af->path, &mode);
    if (st) return st;
    if (!(af->name = display_name(af->path))) {
        ds_atomic_abort(af);
        return ds_fail(DS_ERR_NOMEM, "out of memory");
    }
    const size_t n = strlen(af->path) + 32;
    af->tmp_path = malloc(n);
    if (!af->tmp_path) {
        ds_atomic_abort(af);
        return ds_fail(DS_ERR_NOMEM, "out of memory");
    }
    clean_stale(af->path);
    snprintf(af->tmp_path, n, "%s.tmp.%ld", af->path, (long)getpid());
    af->f = fopen(af->tmp_path, "wb");
    if (!af->f) {
        st = ds_fail(DS_ERR_IO, "%s: cannot create: %s", af->tmp_path, strerror(errno));
        ds_atomic_abort(af);
        return st;
    }
    if (mode >= 0) fchmod(fileno(af->f), (mode_t)mode); // the replaced file's permissions (best effort)
    return DS_OK;
}

ds_status ds_atomic_commit(ds_atomic_file *af) {
    ds_status st = DS_OK;
    if (fflush(af->f) != 0 || ferror(af->f) || fsync(fileno(af->f)) != 0)
        st = ds_fail(DS_ERR_IO, "%s: write failed: %s", af->name, strerror(errno ? errno : EIO));
    if (fclose(af->f) != 0 && st == DS_OK)
        st = ds_fail(DS_ERR_IO, "%s: close failed: %s", af->name, strerror(errno));
    af->f = NULL;
    // What stands at the path may have changed while we wrote: never rename over a non-file.
    if (st == DS_OK) {
        struct stat sb;
        if (lstat(af->path, &sb) == 0 && !S_ISREG(sb.st_mode))
            st = ds_fail(DS_ERR_IO, "%s: became %s while it was written; not replaced", af->path,
                         S_ISLNK(sb.st_mode) ? "a symbolic link" : kind_of(sb.st_mode));
    }
    if (st == DS_OK) ds_test_point();
    if (st == DS_OK && rename(af->tmp_path, af->path) != 0)
        st = ds_fail(DS_ERR_IO, "%s: rename failed: %s", af->path, strerror(errno));
    if (st != DS_OK) unlink(af->tmp_path);
    free(af->path);
    free(af->name);
    free(af->tmp_path);
    memset(af, 0, sizeof *af);
    return st;
}

void ds_atomic_abort(ds_atomic_file *af) {
    if (af->f) fclose(af->f);
    if (af->tmp_path) unlink(af->tmp_path);
    free(af->path);
    free(af->name);
    free(af->tmp_path);
    memset(af, 0, sizeof *af);
}

ds_status ds_atomic_write_text(const char *path, const char *text) {
    ds_atomic_file af;
    ds_status st = ds_atomic_open(&af, path);
    if (st) return st;
    if (fputs(text, af.f) == EOF) {
        st = ds_fail(DS_ERR_IO, "%s: write failed: %s", af.name, strerror(errno ? errno : EIO));
        ds_atomic_abort(&af);
        return st;
    }
    return ds_atomic_commit(&af);
}

// ---- directories ---------------------------------------------------------------------------------

// Remove a temporary directory tree of ours (links are removed, never followed).
static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[4400];
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            struct stat sb;
            if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) remove_tree(p);
            else unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

void ds_atomic_clean_stale_in(const char *dir) { clean_stale_in(dir, ""); }

ds_status ds_fsync_dir(const char *dir) {
    const int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return ds_fail(DS_ERR_IO, "%s: cannot open to sync: %s", dir, strerror(errno));
    ds_status st = DS_OK;
    if (fsync(fd) != 0 && errno != EINVAL) st = ds_fail(DS_ERR_IO, "%s: fsync failed: %s", dir, strerror(errno));
    close(fd);
    return st;
}

// fsync every regular file and directory under `dir` (the directory last), so that what a rename
// publishes is on disk before the rename is.
static ds_status fsync_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return ds_fail(DS_ERR_IO, "%s: cannot open: %s", dir, strerror(errno));
    ds_status st = DS_OK;
    struct dirent *e;
    char p[4400];
    while (!st && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(p, &sb) != 0) continue;
        if (S_ISDIR(sb.st_mode)) {
            st = fsync_tree(p);
        } else if (S_ISREG(sb.st_mode)) {
            const int fd = open(p, O_RDONLY);
            if (fd < 0) st = ds_fail(DS_ERR_IO, "%s: cannot open to sync: %s", p, strerror(errno));
            else if (fsync(fd) != 0) st = ds_fail(DS_ERR_IO, "%s: fsync failed: %s", p, strerror(errno));
            if (fd >= 0) close(fd);
        }
    }
    closedir(d);
    return st ? st : ds_fsync_dir(dir);
}

// `dir` without trailing slashes into out.
static int strip_slashes(const char *dir, char *out, size_t cap) {
    if ((size_t)snprintf(out, cap, "%s", dir) >= cap) return 0;
    for (size_t n = strlen(out); n > 1 && out[n - 1] == '/'; n--) out[n - 1] = 0;
    return 1;
}

// Whether the directory `dir` is one a dspark writer committed (holds the marker as a regular file).
static int is_dspark_output(const char *dir) {
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", dir, DS_OUTPUT_MARKER);
    struct stat sb;
    return lstat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static ds_status dir_check(const char *dir, int replace_any) {
    struct stat sb;
    if (lstat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return ds_fail(DS_ERR_IO, "%s: already exists and is %s, not a directory (refusing to replace it)", dir,
                       S_ISLNK(sb.st_mode) ? "a symbolic link" : kind_of(sb.st_mode));
    if (lstat(dir, &sb) == 0 && !replace_any && !is_dspark_output(dir))
        return ds_fail(DS_ERR_IO,
                       "%s: already exists and is not a dspark output (no %s in it): refusing to replace it; "
                       "remove it or choose another path", dir, DS_OUTPUT_MARKER);
    return DS_OK;
}

ds_status ds_atomic_dir_check(const char *dir_arg) {
    char dir[4096];
    if (!strip_slashes(dir_arg, dir, sizeof dir)) return ds_fail(DS_ERR_INVALID, "%s: path too long", dir_arg);
    return dir_check(dir, 0);
}

static ds_status dir_open(const char *dir_arg, char *tmp, size_t cap, int replace_any) {
    char dir[4096];
    tmp[0] = 0;
    if (!strip_slashes(dir_arg, dir, sizeof dir)) return ds_fail(DS_ERR_INVALID, "%s: path too long", dir_arg);
    ds_status st0 = dir_check(dir, replace_any);
    if (st0) return st0;
    clean_stale(dir);
    if ((size_t)snprintf(tmp, cap, "%s.tmp.%ld", dir, (long)getpid()) >= cap) {
        tmp[0] = 0;
        return ds_fail(DS_ERR_INVALID, "%s: path too long", dir);
    }
    if (mkdir(tmp, 0755) != 0) {
        ds_status st = ds_fail(DS_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        tmp[0] = 0;
        return st;
    }
    ds_test_point();
    return DS_OK;
}

// Publish `tmp` as `dir`: the marker, everything synced, then one rename (nothing at `dir`) or one
// exchange (a directory at `dir` that may be replaced: a dspark output, or any with replace_any), the
// old tree removed afterwards, the parent synced. On failure `tmp` is removed and `dir` untouched.
static ds_status dir_commit(const char *tmp, const char *dir_arg, int replace_any) {
    char dir[4096], parent[4096];
    ds_status st = DS_OK;
    struct stat sb;
    if (!strip_slashes(dir_arg, dir, sizeof dir)) st = ds_fail(DS_ERR_INVALID, "%s: path too long", dir_arg);
    char marker[4400];
    snprintf(marker, sizeof marker, "%s/%s", tmp, DS_OUTPUT_MARKER);
    if (!st) st = ds_atomic_write_text(marker, "written by dspark as a whole; dspark may replace this directory\n");
    if (!st) st = fsync_tree(tmp);
    if (!st) ds_test_point();
    int exchange = 0;
    if (!st && lstat(dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode))
            st = ds_fail(DS_ERR_IO, "%s: became %s while it was written; not replaced", dir,
                         S_ISLNK(sb.st_mode) ? "a symbolic link" : kind_of(sb.st_mode));
        else if (!replace_any && !is_dspark_output(dir))
            st = ds_fail(DS_ERR_IO, "%s: appeared while it was written (not a dspark output); not replaced", dir);
        else
            exchange = 1;
    }
    // One step: with an exchange the two names swap, so `dir` names the old tree or the new one at
    // every moment; the old one (now at `tmp`, a stale temporary if we die here) is removed after.
    if (!st && exchange && renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) != 0)
        st = ds_fail(DS_ERR_IO, "%s: cannot replace it atomically: %s", dir, strerror(errno));
    else if (!st && !exchange && rename(tmp, dir) != 0)
        st = ds_fail(DS_ERR_IO, "%s: cannot rename into place: %s", dir, strerror(errno));
    if (st) {
        remove_tree(tmp);
        return st;
    }
    ds_test_point();
    dir_of(dir, parent, sizeof parent);
    st = ds_fsync_dir(parent); // the rename itself on disk
    if (exchange) {
        ds_test_point();
        remove_tree(tmp);
    }
    return st;
}

ds_status ds_atomic_dir_open(const char *dir, char *tmp, size_t cap) { return dir_open(dir, tmp, cap, 0); }
ds_status ds_atomic_dir_commit(const char *tmp, const char *dir) { return dir_commit(tmp, dir, 0); }
ds_status ds_atomic_dir_open_replace(const char *dir, char *tmp, size_t cap) { return dir_open(dir, tmp, cap, 1); }
ds_status ds_atomic_dir_replace(const char *tmp, const char *dir) { return dir_commit(tmp, dir, 1); }

void ds_atomic_dir_abort(const char *tmp) {
    if (tmp && tmp[0]) remove_tree(tmp);
}
