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

#include "dspark_jobs.h"

typedef struct {
    FILE *f;         // write here
    char *path;      // final path (a symlink's target when <path> was a link to a regular file)
    char *tmp_path;  // temporary path in the same directory
} ds_atomic_file;

ds_status ds_atomic_open(ds_atomic_file *af, const char *path);
// Flush, fsync and rename into place. On failure the temporary file is removed.
ds_status ds_atomic_commit(ds_atomic_file *af);
// Discard everything written (removes the temporary file).
void ds_atomic_abort(ds_atomic_file *af);
// ds_atomic_write_text (a whole file from a string) and ds_atomic_check (whether `path` may be written
// by the rule above) are public: include/dspark_jobs.h.

// Directories written as a whole (quantize, init-drafter, inflate): the files go into a fresh "<dir>.tmp.<pid>"
// (trailing slashes of `dir` ignored), which is renamed to `dir` at the end. `dir` must not exist
// (anything there, even a dangling link, is refused). Stale temporaries of dead processes are removed.
// `tmp` (cap bytes) receives the temporary directory's path.
ds_status ds_atomic_dir_open(const char *dir, char *tmp, size_t cap);
// Rename `tmp` to `dir`; on failure `tmp` is removed.
ds_status ds_atomic_dir_commit(const char *tmp, const char *dir);
// The same for a directory that is replaced as a whole when it exists (a training checkpoint, the best
// drafter so far): open refuses only a non-directory at `dir`; replace swaps `tmp` and `dir` in one
// step (renameat2 RENAME_EXCHANGE: `dir` is the old tree or the new one at every moment, never
// missing or mixed) and removes the old tree, or renames when nothing is there. On failure `tmp` is
// removed and `dir` is untouched.
ds_status ds_atomic_dir_open_replace(const char *dir, char *tmp, size_t cap);
ds_status ds_atomic_dir_replace(const char *tmp, const char *dir);
// Remove `tmp` and everything in it.
void ds_atomic_dir_abort(const char *tmp);

#endif
