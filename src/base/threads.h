// The thread count of every parallel region (ds_set_threads), process-wide: OpenMP's own setting is
// per calling thread, so a forward run from another thread (the server's engine thread) would
// otherwise ignore it.
#ifndef DS_BASE_THREADS_H
#define DS_BASE_THREADS_H

// Threads for the next parallel region: the ds_set_threads value (at most the cores), or all cores.
int ds_threads(void);

#endif
