#include "io/mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/ioctl.h>
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

// PAGEMAP_SCAN (Linux 6.7): which pages of a range are present and which are mapped huge, for this
// process's own mappings, unprivileged. Spelled out: the values are the kernel's fixed ABI, and C
// library headers older than the kernel lack them.
typedef struct {
    uint64_t start, end, categories;
} pm_region;
typedef struct {
    uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
    uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
} pm_scan_arg;
#define PM_PAGEMAP_SCAN _IOWR('f', 16, pm_scan_arg)
#define PM_PRESENT (1u << 3)
#define PM_HUGE (1u << 6)
#define PM_VEC 512

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

// Bytes of [a, b) present, and of those mapped huge, added to *present / *huge; 0, or -1 where the
// kernel has no PAGEMAP_SCAN. (The kernel merges runs of pages alike: a full vector means more to ask.)
static int scan_add(int pm, uintptr_t a, uintptr_t b, size_t *present, size_t *huge) {
    pm_region v[PM_VEC];
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    a &= ~(pg - 1), b = (b + pg - 1) & ~(pg - 1); // (the scan takes whole pages)
    while (a < b) {
        pm_scan_arg q = {.size = sizeof q, .start = a, .end = b, .vec = (uintptr_t)v, .vec_len = PM_VEC,
                         .category_anyof_mask = PM_PRESENT, .return_mask = PM_PRESENT | PM_HUGE};
        const int n = ioctl(pm, PM_PAGEMAP_SCAN, &q);
        if (n < 0) return -1;
        for (int i = 0; i < n; i++) {
            *present += (size_t)(v[i].end - v[i].start);
            if (v[i].categories & PM_HUGE) *huge += (size_t)(v[i].end - v[i].start);
        }
        if (q.walk_end <= a) break;
        a = (uintptr_t)q.walk_end;
    }
    return 0;
}

typedef struct {
    uintptr_t a, b; // [a, b): a read-only private mapping of a file
} file_vma;

static int cmp_ptr(const void *x, const void *y) {
    const uintptr_t u = *(const uintptr_t *)x, v = *(const uintptr_t *)y;
    return u < v ? -1 : u > v;
}

// The read-only mappings of files (as ds_mapfile_open makes) holding any of p[0..count), from
// /proc/self/maps (NULL, *nv = 0 where it cannot be read). Nothing below touches memory outside
// them: not anonymous memory (a weight a loader converted into its own buffer), not a writable
// mapping whose private pages MADV_DONTNEED would discard.
static file_vma *vmas_read(const void *const *p, int count, int *nv) {
    *nv = 0;
    if (count <= 0) return NULL;
    uintptr_t *sorted = malloc((size_t)count * sizeof *sorted);
    FILE *f = sorted ? fopen("/proc/self/maps", "r") : NULL;
    if (!f) {
        free(sorted);
        return NULL;
    }
    for (int i = 0; i < count; i++) sorted[i] = (uintptr_t)p[i];
    qsort(sorted, (size_t)count, sizeof *sorted, cmp_ptr);
    file_vma *v = NULL;
    int cap = 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b, off, inode;
        char dash, perms[8], dev[32];
        if (sscanf(line, "%lx%c%lx %7s %lx %31s %lu", &a, &dash, &b, perms, &off, dev, &inode) != 7 || dash != '-')
            continue;
        if (inode == 0 || strcmp(perms, "r--p") != 0) continue;
        size_t lo = 0, hi = (size_t)count; // the first pointer >= a
        while (lo < hi) {
            const size_t mid = (lo + hi) / 2;
            if (sorted[mid] < a) lo = mid + 1;
            else hi = mid;
        }
        if (lo == (size_t)count || sorted[lo] >= b) continue;
        if (*nv == cap) {
            file_vma *g = realloc(v, (size_t)(cap = cap ? 2 * cap : 8) * sizeof *g);
            if (!g) break;
            v = g;
        }
        v[(*nv)++] = (file_vma){(uintptr_t)a, (uintptr_t)b};
    }
    fclose(f);
    free(sorted);
    return v;
}

// The whole huge pages [a, b) that [p, p + n) touches, inside its read-only file mapping (0 when it
// lies in none, or touches no whole huge page of it).
static int huge_span(const file_vma *v, int nv, const void *p, size_t n, uintptr_t h, uintptr_t *a, uintptr_t *b) {
    for (int i = 0; i < nv; i++) {
        if ((uintptr_t)p < v[i].a || (uintptr_t)p >= v[i].b) continue;
        *a = (uintptr_t)p & ~(h - 1);
        *b = ((uintptr_t)p + n + h - 1) & ~(h - 1);
        if (*a < v[i].a) *a = (v[i].a + h - 1) & ~(h - 1);
        if (*b > v[i].b) *b = v[i].b & ~(h - 1);
        return *b > *a;
    }
    return 0;
}

// Drop [a, b)'s cached pages (those only this process maps, of a file it may write: MADV_PAGEOUT's
// rules) and its page tables (MADV_DONTNEED frees emptied ones where the kernel has CONFIG_PT_RECLAIM:
// a huge page is only mapped where no page table is left), then read it again.
static void huge_reread(uintptr_t a, uintptr_t b) {
#ifdef MADV_PAGEOUT
    madvise((void *)a, b - a, MADV_PAGEOUT);
#endif
    madvise((void *)a, b - a, MADV_DONTNEED); // (a read-only private mapping of a file: nothing is lost)
    ds_mapfile_populate((const void *)a, b - a);
}

// Whether the huge page at w is mapped huge.
static int window_huge(int pm, uintptr_t w, uintptr_t h) {
    size_t present = 0, huge = 0;
    return scan_add(pm, w, w + h, &present, &huge) == 0 && huge == h;
}

void ds_mapfile_populate_huge(const void *const *p, const size_t *n, int count, ds_huge_report *r) {
    ds_huge_report rep = {0, 0, 0};
    const uintptr_t h = huge_size();
    int nv;
    file_vma *v = vmas_read(p, count, &nv);
    uintptr_t a, b;
    for (int i = 0; i < count; i++) {
        if (!p[i] || !n[i]) continue;
#ifdef MADV_HUGEPAGE
        if (huge_span(v, nv, p[i], n[i], h, &a, &b)) madvise((void *)a, b - a, MADV_HUGEPAGE);
#endif
        ds_mapfile_populate(p[i], n[i]);
    }
    const int pm = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    // The whole huge pages of the ranges that came in small pages: cached so from being written or
    // downloaded. One of them dropped and read again tells whether this kernel, file system and file
    // let them come back huge (up to 4 tries: a page may fail to come back huge for want of contiguous
    // memory); if one did, every one is.
    int state = 0; // 0: no try yet came back huge, 1: one did, -1: stop
    for (int tries = 0, i = 0; pm >= 0 && state >= 0 && i < count; i++) {
        if (!p[i] || !n[i] || !huge_span(v, nv, p[i], n[i], h, &a, &b)) continue;
        for (uintptr_t w = a; w < b && state >= 0; w += h) {
            if (window_huge(pm, w, h)) continue;
            huge_reread(w, w + h);
            if (state == 0 && window_huge(pm, w, h)) state = 1, rep.reread = 1;
            else if (state == 0 && ++tries == 4) state = -1;
        }
    }
    for (int i = 0; pm >= 0 && i < count; i++)
        if (p[i] && n[i] && scan_add(pm, (uintptr_t)p[i], (uintptr_t)p[i] + n[i], &rep.resident, &rep.huge)) break;
    if (pm >= 0) close(pm);
    free(v);
    if (r) *r = rep;
}
