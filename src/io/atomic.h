// Atomic writes: write to "<path>.tmp.<pid>", fsync, then rename over <path>. An interrupted run
// leaves the old file (or nothing) in place, never half a file.
//
// What may stand at <path> (one rule for every writer, checked here):
//  - nothing, or a regular file: it is replaced;
//  - a symbolic link to a regular file: the file it names is replaced (written next to it and renamed
//    over it), so the link stays a link;
//  - anything else (a directory, FIFO, socket, character or block device, a dangling or looping
//    link): refused with "<path>: is a FIFO, not a regular file" and the like; it is never renamed
//    over.
// Temporaries left by killed runs ("<path>.tmp.<pid>" whose process no longer exists on this machine)
// are removed when the next write to the same path starts.
#ifndef DS_IO_ATOMIC_H
#define DS_IO_ATOMIC_H

#include <stdio.h>

#include "dspark/io.h"

typedef struct {
    FILE *f;         // write here
    char *path;      // final path (a symlink's target when <path> was a link to a regular file)
    char *tmp_path;  // temporary path in the same directory
    char *name;      // the path errors name: `path`, with a temporary directory of this process
                     // ("<dir>.tmp.<pid>/", ds_atomic_dir_open) shown as the <dir> it becomes
} ds_atomic_file;

ds_status ds_atomic_open(ds_atomic_file *af, const char *path);
// Flush, fsync and rename into place. On failure the temporary file is removed.
ds_status ds_atomic_commit(ds_atomic_file *af);
// Discard everything written (removes the temporary file).
void ds_atomic_abort(ds_atomic_file *af);
// ds_atomic_write_text (a whole file from a string) and ds_atomic_check (whether `path` may be written
// by the rule above) are public: include/dspark_jobs.h.

// Directories written as a whole (quantize, init-drafter, inflate, training checkpoints): the files
// go into a fresh "<dir>.tmp.<pid>" (trailing slashes of `dir` ignored); commit writes the marker
// DS_OUTPUT_MARKER into it, fsyncs every file and directory in it, publishes it with one rename (or,
// over a previous output, one renameat2 RENAME_EXCHANGE: `dir` names the old tree or the new one at
// every moment, never a mix), removes the old tree, and fsyncs the parent.
// What may stand at `dir`: nothing; or a directory holding the marker (a dspark output: replaced
// only once the new one is complete). Anything else (a directory without the marker, even an empty
// one; a file; a link, even a dangling one) is refused: "<dir>: already exists and is not a dspark
// output ...". Stale temporaries of dead processes are removed when a write opens.
// `tmp` (cap bytes) receives the temporary directory's path.
#define DS_OUTPUT_MARKER ".dspark-output"
ds_status ds_atomic_dir_open(const char *dir, char *tmp, size_t cap);
// Whether ds_atomic_dir_open(dir) would accept what stands at `dir` (before a long job starts).
ds_status ds_atomic_dir_check(const char *dir);
// Publish `tmp` as `dir`; on failure `tmp` is removed and `dir` is untouched.
ds_status ds_atomic_dir_commit(const char *tmp, const char *dir);
// The same for a directory of the trainer's own (OUT/best, a checkpoint of an older layout) that is
// replaced as a whole when it exists, marker or not: open refuses only a non-directory at `dir`.
ds_status ds_atomic_dir_open_replace(const char *dir, char *tmp, size_t cap);
ds_status ds_atomic_dir_replace(const char *tmp, const char *dir);
// Remove `tmp` and everything in it.
void ds_atomic_dir_abort(const char *tmp);
// Remove every stale temporary ("<name>.tmp.<pid>" of a process that no longer exists) in `dir`.
void ds_atomic_clean_stale_in(const char *dir);
// fsync a directory (its entries: a rename or unlink in it is on disk afterwards).
ds_status ds_fsync_dir(const char *dir);

#endif
