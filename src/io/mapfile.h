// Read-only memory-mapped files: model weights are used in place, never copied.
#ifndef DS_IO_MAPFILE_H
#define DS_IO_MAPFILE_H

#include <stddef.h>
#include <stdint.h>

#include "dspark.h"

typedef struct {
    const uint8_t *data; // (size) bytes, read-only
    size_t size;
    char *path;          // owned copy, for error messages
} ds_mapfile;

ds_status ds_mapfile_open(ds_mapfile *m, const char *path);
void ds_mapfile_close(ds_mapfile *m);

#endif
