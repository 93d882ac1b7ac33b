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

#endif
