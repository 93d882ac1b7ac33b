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

// Huge pages for mapped weights. A decode step streams every weight once; read through 4 KiB pages
// one core reaches ~0.65 of the bandwidth it reaches through 2 MiB ones (Zen 4, Q4_K_M file of 510 MB:
// 26-30 against 39-44 tok/s, docs/results.md), because each 4 KiB page is a separate TLB entry and a
// new hardware prefetch stream. Linux (6.x, ext4 / xfs / tmpfs) caches a file in huge folios and maps
// them with huge pages when it reads the file into a mapping advised MADV_HUGEPAGE; but a file still
// cached from being written or downloaded sits in small folios, and stays so while it is cached.
typedef struct {
    size_t resident; // bytes of the mappings holding the ranges, resident after populating
    size_t huge;     // of which mapped by huge pages (smaps' FilePmdMapped)
    int reread;      // 1: the ranges' small cached pages were dropped and read again into huge ones
} ds_huge_report;
// Populate the ranges [p[i], p[i] + n[i]) as ds_mapfile_populate does, in huge pages where the kernel
// can: the ranges, widened to huge page bounds, are advised MADV_HUGEPAGE; if under half of what is
// then resident is huge, one huge window is dropped (MADV_PAGEOUT, which leaves pages other processes
// map, and files this user cannot write, alone) and read again; if that one came back huge, every range
// is. Advice throughout: what the mapping reads never changes, and on a kernel without these calls it
// is a plain populate. Fills *r when r is not NULL.
void ds_mapfile_populate_huge(const void *const *p, const size_t *n, int count, ds_huge_report *r);
// Resident and huge-mapped bytes of the mappings holding the pointers p[0..count) (each mapping
// counted once; 0 where /proc/self/smaps cannot be read).
void ds_mapfile_huge_share(const void *const *p, int count, size_t *resident, size_t *huge);

#endif
