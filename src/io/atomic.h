// Atomic file writes: write to "<path>.tmp.<pid>", fsync, then rename over <path>. An interrupted
// run leaves the old file (or nothing) in place, never half a file.
#ifndef DS_IO_ATOMIC_H
#define DS_IO_ATOMIC_H

#include <stdio.h>

#include "dspark.h"

typedef struct {
    FILE *f;         // write here
    char *path;      // final path
    char *tmp_path;  // temporary path in the same directory
} ds_atomic_file;

ds_status ds_atomic_open(ds_atomic_file *af, const char *path);
// Flush, fsync and rename into place. On failure the temporary file is removed.
ds_status ds_atomic_commit(ds_atomic_file *af);
// Discard everything written (removes the temporary file).
void ds_atomic_abort(ds_atomic_file *af);
// Write `text` as the whole content of `path`, atomically.
ds_status ds_atomic_write_text(const char *path, const char *text);
// Remove a temporary directory a writer created, with everything in it (best effort; for the
// "<dir>.tmp.<pid>" directories that are renamed into place only when complete).
void ds_remove_tree(const char *dir);

#endif
