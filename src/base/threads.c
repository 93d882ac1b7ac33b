#include "base/threads.h"

#include <omp.h>
#include <stdatomic.h>

#include "dspark.h"

static atomic_int g_threads; // 0 = not set: all cores

// Never more than the cores: per-thread scratch is sized by omp_get_num_procs().
int ds_threads(void) {
    const int n = atomic_load_explicit(&g_threads, memory_order_relaxed), procs = omp_get_num_procs();
    return n > 0 && n < procs ? n : procs;
}

void ds_set_threads(int n) { atomic_store_explicit(&g_threads, n > 0 ? n : 0, memory_order_relaxed); }
