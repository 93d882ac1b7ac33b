// dspark/io.h: files (src/io).
// Part of the public API (include/dspark.h composes these headers); it includes only the
// headers of the layers below its own (docs/architecture.md), so a layer that includes it
// cannot name a function of a layer above it.
#ifndef DSPARK_IO_H
#define DSPARK_IO_H

#include <stddef.h>
#include <stdint.h>

#include "dspark/base.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------------------------------------
// Files (src/io/atomic.c; declared here for cli/, which writes its own plot data). Every file the library writes is written atomically: to
// "<path>.tmp.<pid>", fsync'ed, renamed over <path>. What may stand at <path>: nothing, a regular
// file or a link to one; anything else (a directory, FIFO, device, dangling link) is refused.

// Write `text` as the whole content of `path`, atomically.
ds_status ds_atomic_write_text(const char *path, const char *text);
// Whether a file may be written at `path` by the rule above (DS_OK when it may), without writing.
ds_status ds_atomic_check(const char *path);

#ifdef __cplusplus
}
#endif

#endif
