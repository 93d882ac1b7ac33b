#include "io/mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>

#include "base/status.h"

ds_status ds_mapfile_open(ds_mapfile *m, const char *path) {
    memset(m, 0, sizeof *m);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ds_fail(DS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ds_fail(DS_ERR_IO, "%s: not a regular file", path);
    }
    m->size = (size_t)st.st_size;
    static const uint8_t empty[1];
    m->data = empty; // an empty file is a valid pointer with size 0 (readers do data + size)
    if (m->size > 0) {
        void *p = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return ds_fail(DS_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
        }
        m->data = p;
    }
    close(fd);
    m->path = strdup(path);
    if (!m->path) {
        ds_mapfile_close(m);
        return ds_fail(DS_ERR_NOMEM, "out of memory");
    }
    return DS_OK;
}

void ds_mapfile_close(ds_mapfile *m) {
    if (m->data && m->size) munmap((void *)m->data, m->size); // (an empty file's data is not mapped)
    free(m->path);
    memset(m, 0, sizeof *m);
}

void ds_mapfile_drop(const void *p, size_t n) {
    const long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || !p || !n) return;
    const uintptr_t a = ((uintptr_t)p + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    const uintptr_t b = ((uintptr_t)p + n) & ~((uintptr_t)page - 1);
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED); // advice: failing changes nothing that is computed
}

void ds_mapfile_populate(const void *p, size_t n) {
#ifdef MADV_POPULATE_READ
    const long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || !p || !n) return;
    const uintptr_t a = (uintptr_t)p & ~((uintptr_t)page - 1);
    const uintptr_t b = ((uintptr_t)p + n + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    madvise((void *)a, b - a, MADV_POPULATE_READ); // advice: failing changes nothing that is computed
#else
    (void)p, (void)n;
#endif
}
