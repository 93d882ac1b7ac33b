// The library's one thread pool, process-wide behind ds_set_threads (every parallel region of every
// caller thread takes its count from it, so the server's engine thread needs nothing special).
//
// ds_parallel_for(n, fn, ctx) runs fn(ctx, item, worker) for item = 0..n-1. The calling thread takes
// part, and items are claimed one at a time from an atomic counter, so a thread the OS preempts (a
// busy machine) holds up only the item it is running: the others take over the rest. Waiting
// threads spin briefly (a few tens of microseconds: back-to-back products of one forward pass keep
// them hot) and then sleep, so they never compete with other processes for the cores.
//
// A thread that keeps losing time there (the OS runs another process on its core and the caller
// waits out that time slice for the item it holds) is caught by measurement: when using the pool
// costs more than the caller would have taken alone, loops run inline for a while (ds_pool_adapt).
//
// Results must not depend on the thread count: callers split work into items that depend only on
// the shape of the problem (never on ds_threads()), and each item is computed by one thread with the
// same code whoever runs it.
#ifndef DS_BASE_THREADS_H
#define DS_BASE_THREADS_H

#include <stdint.h>

#include "dspark/base.h"

// ds_set_threads / ds_threads (the count for the next parallel region: the ds_set_threads value, at
// most ds_threads_max(), or all cores) are public: include/dspark.h. This file is their one owner.
// The cores this process may run on (its affinity mask, read once): the most threads any region
// uses, so per-thread scratch sized by it is always enough.
int ds_threads_max(void);

// One item of a parallel loop: `worker` (0 = the calling thread, always < ds_threads()) indexes
// per-thread scratch.
typedef void (*ds_task_fn)(void *ctx, int item, int worker);

// Runs fn(ctx, item, worker) for every item in [0, n) and returns when all are done. Runs them
// inline, in order, on the calling thread when n == 1, when ds_threads() is 1, when called from inside
// an item (nested use; `worker` is then the enclosing item's) or while another thread's loop holds
// the pool (`worker` 0: that caller's scratch is its own).
void ds_parallel_for(int n, ds_task_fn fn, void *ctx);

// Whether ds_parallel_for backs off to inline loops when threads lose time (default 1; tests that
// need two threads at once turn it off).
void ds_threads_set_adaptive(int on);

// The back-off decision, a pure function of what the caller measured (nanosecond clock readings):
// a job opened at t0, the caller ran `mine` of its n items and found none left at t1, all were done
// at t2. Afterwards, loops started before serial_until run inline.
typedef struct {
    double balance;          // ns saved minus ns lost by sharing jobs, decaying
    uint64_t last;           // t2 of the last job observed
    uint64_t serial_until;   // loops run inline until then
    uint64_t stable_since;   // when the back-off last changed
    uint64_t backoff;        // the next inline period (ns)
} ds_pool_adapt;
void ds_pool_adapt_init(ds_pool_adapt *a);
void ds_pool_adapt_observe(ds_pool_adapt *a, uint64_t t0, uint64_t t1, uint64_t t2, int mine, int n);

// Stops and joins the pool's threads and forgets what it measured (tests; a later ds_parallel_for
// starts them again). Waits for a loop another thread runs to finish.
void ds_threads_shutdown(void);
// Threads the pool has started (0 before the first parallel loop and after ds_threads_shutdown).
int ds_threads_started(void);

#endif
