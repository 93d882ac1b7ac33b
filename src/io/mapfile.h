// Read-only memory-mapped files: model weights are used in place, never copied.
#ifndef DS_IO_MAPFILE_H
#define DS_IO_MAPFILE_H

#include <stddef.h>
#include <stdint.h>

#include "dspark/io.h"

typedef struct {
    const uint8_t *data; // (size) bytes, read-only
    size_t size;
    char *path;          // owned copy, for error messages
} ds_mapfile;

ds_status ds_mapfile_open(ds_mapfile *m, const char *path);
void ds_mapfile_close(ds_mapfile *m);
// Drop the whole pages inside [p, p + n) of a read-only mapping from this process (a pass that read
// them once stays out of the resident set; a later read maps them again from the page cache).
void ds_mapfile_drop(const void *p, size_t n);
// Enter the pages [p, p + n) touches into this process's page tables now (MADV_POPULATE_READ,
// reading from the file what the page cache lacks), so the first pass over them takes no page
// faults. Advice: on a kernel without it (before Linux 5.14) nothing happens.
void ds_mapfile_populate(const void *p, size_t n);

// Huge pages for mapped weights. A decode step streams every weight once; through 4 KiB pages one
// core reads them at ~0.65-0.8 of its rate through 2 MiB ones (Zen 4, docs/results.md "Weights in
// huge pages"): each 4 KiB page is a TLB entry of its own and a new hardware prefetch stream. Linux
// (6.x; ext4, xfs, tmpfs) caches a file in huge folios and maps them huge when it reads the file into
// a mapping advised MADV_HUGEPAGE; but pages still cached from the file being written or downloaded
// are small, and stay so while they are cached.
typedef struct {
    size_t resident; // bytes of the ranges present after populating (0: the kernel cannot say)
    size_t huge;     // of which mapped by huge pages
    int reread;      // 1: some of their small cached pages were dropped and came back huge
} ds_huge_report;
// Populate the ranges [p[i], p[i] + n[i]) as ds_mapfile_populate does, in huge pages where the kernel
// can: each range's whole huge pages inside its read-only file mapping are advised MADV_HUGEPAGE, and
// those that came in small pages (found with PAGEMAP_SCAN, Linux 6.7) are dropped (MADV_PAGEOUT: it
// leaves pages other processes map, and files this user may not write, alone) and read again, once
// one of the first four so treated came back huge. Nothing outside read-only mappings of files is
// touched. Advice throughout: what the mapping reads never changes, and on a kernel without these
// calls it is a plain populate. Fills *r when r is not NULL.
void ds_mapfile_populate_huge(const void *const *p, const size_t *n, int count, ds_huge_report *r);

#endif
