#include "io/mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
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

// ---- huge pages for mapped weights ----------------------------------------------------------------

static uintptr_t huge_size(void) {
    uintptr_t h = (uintptr_t)2 << 20; // x86-64's PMD; the kernel says so where it can
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", "r");
    if (f) {
        unsigned long v = 0;
        if (fscanf(f, "%lu", &v) == 1 && v >= 4096 && (v & (v - 1)) == 0) h = (uintptr_t)v;
        fclose(f);
    }
    return h;
}

typedef struct {
    uintptr_t a, b;       // [a, b): one mapping of a file
    size_t resident, huge; // its Rss and FilePmdMapped
} file_vma;

static int cmp_ptr(const void *x, const void *y) {
    const uintptr_t u = *(const uintptr_t *)x, v = *(const uintptr_t *)y;
    return u < v ? -1 : u > v;
}

// The file mappings holding any of p[0..count), from /proc/self/smaps, in address order (NULL and
// *nv = 0 where it cannot be read, or out of memory). Anonymous memory (a weight a loader converted
// into its own buffer) is never in it, so nothing below touches memory that is not a mapped file.
static file_vma *vmas_read(const void *const *p, int count, int *nv) {
    *nv = 0;
    if (count <= 0) return NULL;
    uintptr_t *sorted = malloc((size_t)count * sizeof *sorted);
    file_vma *v = NULL;
    int cap = 0;
    FILE *f = sorted ? fopen("/proc/self/smaps", "r") : NULL;
    if (!f) {
        free(sorted);
        return NULL;
    }
    for (int i = 0; i < count; i++) sorted[i] = (uintptr_t)p[i];
    qsort(sorted, (size_t)count, sizeof *sorted, cmp_ptr);
    // A header line "start-end perms offset dev inode [path]" per mapping, then "Key:   N kB" lines.
    char line[512];
    file_vma *cur = NULL;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b, off, inode, kb;
        char dash, perms[8], dev[32];
        if (sscanf(line, "%lx%c%lx %7s %lx %31s %lu", &a, &dash, &b, perms, &off, dev, &inode) == 7 && dash == '-') {
            cur = NULL;
            size_t lo = 0, hi = (size_t)count; // the first pointer >= a
            while (lo < hi) {
                const size_t mid = (lo + hi) / 2;
                if (sorted[mid] < a) lo = mid + 1;
                else hi = mid;
            }
            if (inode == 0 || lo == (size_t)count || sorted[lo] >= b) continue;
            if (*nv == cap) {
                file_vma *g = realloc(v, (size_t)(cap = cap ? 2 * cap : 8) * sizeof *g);
                if (!g) break;
                v = g;
            }
            cur = &v[(*nv)++];
            *cur = (file_vma){(uintptr_t)a, (uintptr_t)b, 0, 0};
        } else if (cur && sscanf(line, "Rss: %lu kB", &kb) == 1) {
            cur->resident += (size_t)kb << 10;
        } else if (cur && sscanf(line, "FilePmdMapped: %lu kB", &kb) == 1) {
            cur->huge += (size_t)kb << 10;
        }
    }
    fclose(f);
    free(sorted);
    return v;
}

static void vmas_total(const file_vma *v, int nv, size_t *resident, size_t *huge) {
    *resident = *huge = 0;
    for (int i = 0; i < nv; i++) *resident += v[i].resident, *huge += v[i].huge;
}

void ds_mapfile_huge_share(const void *const *p, int count, size_t *resident, size_t *huge) {
    int nv;
    file_vma *v = vmas_read(p, count, &nv);
    vmas_total(v, nv, resident, huge);
    free(v);
}

// [p, p + n) widened to whole huge pages, within its file mapping (0 when it lies in none).
static int huge_bounds(const file_vma *v, int nv, const void *p, size_t n, uintptr_t h, uintptr_t *a, uintptr_t *b) {
    for (int i = 0; i < nv; i++) {
        if ((uintptr_t)p < v[i].a || (uintptr_t)p >= v[i].b) continue;
        *a = (uintptr_t)p & ~(h - 1);
        *b = ((uintptr_t)p + n + h - 1) & ~(h - 1);
        if (*a < v[i].a) *a = v[i].a;
        if (*b > v[i].b) *b = v[i].b;
        return *b > *a;
    }
    return 0;
}

// Drop [a, b)'s cached pages (those only this process maps, of a file it may write: MADV_PAGEOUT's
// rules) and its page tables (MADV_DONTNEED frees emptied ones where the kernel has CONFIG_PT_RECLAIM;
// a huge page is only mapped where no page table is left), so that the next read brings them back.
static void huge_drop(uintptr_t a, uintptr_t b) {
#ifdef MADV_PAGEOUT
    madvise((void *)a, b - a, MADV_PAGEOUT);
#endif
    madvise((void *)a, b - a, MADV_DONTNEED); // (a read-only mapping of a file: nothing of ours is lost)
}

void ds_mapfile_populate_huge(const void *const *p, const size_t *n, int count, ds_huge_report *r) {
    ds_huge_report rep = {0, 0, 0};
    const uintptr_t h = huge_size();
    int nv;
    file_vma *v = vmas_read(p, count, &nv);
    uintptr_t a, b;
    int big = -1; // the largest range in a file mapping: where the probe goes
    for (int i = 0; i < count; i++) {
        if (!p[i] || !n[i]) continue;
        if (huge_bounds(v, nv, p[i], n[i], h, &a, &b)) {
#ifdef MADV_HUGEPAGE
            madvise((void *)a, b - a, MADV_HUGEPAGE);
#endif
            if (big < 0 || n[i] > n[big]) big = i;
        }
        ds_mapfile_populate(p[i], n[i]);
    }
    free(v);
    v = vmas_read(p, count, &nv);
    vmas_total(v, nv, &rep.resident, &rep.huge);
    // Mostly small pages: one huge window of the largest range, dropped and read again, tells whether
    // this kernel, file system and file let them come back huge (dropping everything where they cannot
    // would only cost a read from disk at every load).
    if (big >= 0 && rep.resident >= 8 * h && rep.huge < rep.resident / 2 && n[big] >= h &&
        huge_bounds(v, nv, p[big], n[big], h, &a, &b)) {
        uintptr_t w = ((uintptr_t)p[big] + h - 1) & ~(h - 1); // a whole huge page of it
        if (w + h > b) w = a;
        size_t res0, huge0, res1, huge1;
        huge_drop(w, w + h);
        ds_mapfile_huge_share(p, count, &res0, &huge0);
        ds_mapfile_populate((const void *)w, h);
        ds_mapfile_huge_share(p, count, &res1, &huge1);
        if (huge1 >= huge0 + h) {
            for (int i = 0; i < count; i++)
                if (p[i] && n[i] && huge_bounds(v, nv, p[i], n[i], h, &a, &b)) huge_drop(a, b);
            for (int i = 0; i < count; i++)
                if (p[i] && n[i]) ds_mapfile_populate(p[i], n[i]);
            rep.reread = 1;
            ds_mapfile_huge_share(p, count, &rep.resident, &rep.huge);
        }
    }
    free(v);
    if (r) *r = rep;
}
