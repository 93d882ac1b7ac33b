// The thread pool (threads.h). One job at a time: the caller that holds the pool publishes
// (fn, ctx, n, workers) under a sequence number, then caller and workers claim items by a CAS on one
// 64-bit word, state = (seq << 32) | next item. seq is odd while the caller rewrites the job's
// fields and even while the job is open, so a late worker that read a newer job's fields can never
// claim an item with them: its CAS names the old seq and fails (a seqlock; the fences below).
// Nobody ever waits for a thread to arrive, only for items already claimed to finish.
#define _GNU_SOURCE // sched_getaffinity, CPU_COUNT
#include "base/threads.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "dspark/base.h"

// How long a thread with nothing to do spins before it sleeps. A forward pass issues its products
// microseconds apart, so the workers stay awake through one; on a busy machine a sleeping waiter
// gives its core away instead of burning the time slice the thread it waits for needs.
#define DS_SPIN_NS 50000

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

static atomic_int g_threads; // 0 = not set: all cores

int ds_threads_max(void) {
    static atomic_int procs;
    int n = atomic_load_explicit(&procs, memory_order_relaxed);
    if (!n) {
        cpu_set_t set;
        n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
        if (n < 1) n = 1;
        atomic_store_explicit(&procs, n, memory_order_relaxed);
    }
    return n;
}

int ds_threads(void) {
    const int n = atomic_load_explicit(&g_threads, memory_order_relaxed), procs = ds_threads_max();
    return n > 0 && n < procs ? n : procs;
}

void ds_set_threads(int n) { atomic_store_explicit(&g_threads, n > 0 ? n : 0, memory_order_relaxed); }

// ---- the pool ------------------------------------------------------------------------------------

static struct {
    atomic_int busy;                 // a caller holds the pool (its job is the current one)
    _Atomic uint64_t state;          // (seq << 32) | next unclaimed item
    _Atomic(ds_task_fn) fn;          // the job: fields valid while seq is even and unchanged
    _Atomic(void *) ctx;
    atomic_int n, workers;           // items; pool threads that may join (indexes 1..workers)
    atomic_int done;                 // items finished
    atomic_int sleepers, caller_waits, stop;
    pthread_mutex_t mu;
    pthread_cond_t wake, idle;       // workers sleep on wake, the caller on idle
    pthread_t *tid;                  // (cap) started threads; thread i has worker index i + 1
    int started, cap;
} g_pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER, .idle = PTHREAD_COND_INITIALIZER};

// Whether threads pay, measured (threads.h): each job the caller shared, it compares the wall time
// P with its own estimate of running every item itself, S = n · (its time per item). Time saved
// (S − P) and lost (a thread preempted while it holds an item: the caller waits out the other
// process's time slice) go into a balance that decays over DS_BALANCE_TAU_NS; when it turns
// negative, loops run inline for a back-off period (doubling while threads keep losing, halving
// while they win), then threads are tried again. Only the pool's holder touches g_adapt.
#define DS_BALANCE_TAU_NS 20000000.0
#define DS_BACKOFF_MIN_NS 2000000u
#define DS_BACKOFF_MAX_NS 256000000u

void ds_pool_adapt_init(ds_pool_adapt *a) { *a = (ds_pool_adapt){.backoff = DS_BACKOFF_MIN_NS}; }

void ds_pool_adapt_observe(ds_pool_adapt *a, uint64_t t0, uint64_t t1, uint64_t t2, int mine, int n) {
    if (mine <= 0 || mine >= n) return; // nobody helped (or the caller ran nothing): no evidence
    const double serial = (double)(t1 - t0) * n / mine, par = (double)(t2 - t0);
    const double dt = (double)(t2 - a->last);
    a->balance = t2 >= a->last && dt < DS_BALANCE_TAU_NS ? a->balance * (1.0 - dt / DS_BALANCE_TAU_NS) : 0;
    a->last = t2;
    a->balance += serial - par;
    if (a->balance < 0) {
        a->serial_until = t2 + a->backoff;
        a->stable_since = a->serial_until;
        a->backoff = a->backoff * 2 < DS_BACKOFF_MAX_NS ? a->backoff * 2 : DS_BACKOFF_MAX_NS;
        a->balance = 0;
    } else if (a->backoff > DS_BACKOFF_MIN_NS && t2 > a->stable_since && t2 - a->stable_since > 8 * a->backoff) {
        a->backoff /= 2;
        a->stable_since = t2;
    }
}

static ds_pool_adapt g_adapt = {.backoff = DS_BACKOFF_MIN_NS};
static atomic_int g_adaptive = 1;

void ds_threads_set_adaptive(int on) { atomic_store_explicit(&g_adaptive, on != 0, memory_order_relaxed); }

static _Thread_local int tls_worker = -1; // this thread's worker index inside a job, else -1

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// Claim and run items of the job open under `seq` until none is left; returns how many this thread ran.
static int claim_items(uint32_t seq, ds_task_fn fn, void *ctx, int n, int me) {
    int ran = 0;
    uint64_t s = atomic_load_explicit(&g_pool.state, memory_order_acquire);
    while ((uint32_t)(s >> 32) == seq && (uint32_t)s < (uint32_t)n) {
        if (!atomic_compare_exchange_weak_explicit(&g_pool.state, &s, s + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        fn(ctx, (int)(uint32_t)s, me);
        ran++;
        if (atomic_fetch_add_explicit(&g_pool.done, 1, memory_order_seq_cst) + 1 == n &&
            atomic_load_explicit(&g_pool.caller_waits, memory_order_seq_cst)) {
            pthread_mutex_lock(&g_pool.mu);
            pthread_cond_signal(&g_pool.idle);
            pthread_mutex_unlock(&g_pool.mu);
        }
        s = atomic_load_explicit(&g_pool.state, memory_order_acquire);
    }
    return ran;
}

static int new_job(uint32_t seen) {
    const uint32_t seq = (uint32_t)(atomic_load_explicit(&g_pool.state, memory_order_acquire) >> 32);
    return !(seq & 1) && seq != seen;
}

static void *worker_main(void *arg) {
    const int me = (int)(intptr_t)arg;
    tls_worker = me;
    omp_set_num_threads(1); // see ds_parallel_for
    uint32_t seen = 1; // odd: no job seen yet (the one being opened may already be there)
    int idle = 0; // not part of the last job: sleep at once
    for (;;) {
        if (!idle) {
            const uint64_t t0 = now_ns();
            for (int i = 0; !new_job(seen) && !atomic_load_explicit(&g_pool.stop, memory_order_relaxed); i++) {
                cpu_relax();
                if ((i & 63) == 63 && now_ns() - t0 > DS_SPIN_NS) break;
            }
        }
        if (!new_job(seen) && !atomic_load_explicit(&g_pool.stop, memory_order_relaxed)) {
            pthread_mutex_lock(&g_pool.mu);
            atomic_fetch_add_explicit(&g_pool.sleepers, 1, memory_order_seq_cst);
            while (!new_job(seen) && !atomic_load_explicit(&g_pool.stop, memory_order_seq_cst))
                pthread_cond_wait(&g_pool.wake, &g_pool.mu);
            atomic_fetch_sub_explicit(&g_pool.sleepers, 1, memory_order_relaxed);
            pthread_mutex_unlock(&g_pool.mu);
        }
        if (atomic_load_explicit(&g_pool.stop, memory_order_relaxed)) break;
        const uint64_t s = atomic_load_explicit(&g_pool.state, memory_order_acquire);
        const uint32_t seq = (uint32_t)(s >> 32);
        if (seq & 1) continue; // being rewritten: wait for it to open
        const ds_task_fn fn = atomic_load_explicit(&g_pool.fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&g_pool.ctx, memory_order_relaxed);
        const int n = atomic_load_explicit(&g_pool.n, memory_order_relaxed);
        const int workers = atomic_load_explicit(&g_pool.workers, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire); // fields read before the claim re-checks seq
        seen = seq;
        idle = me > workers;
        if (!idle) claim_items(seq, fn, ctx, n, me);
    }
    return NULL;
}

static void pool_after_fork(void) {
    // The child has only the forking thread: forget the others (their memory stays referenced).
    pthread_mutex_init(&g_pool.mu, NULL);
    pthread_cond_init(&g_pool.wake, NULL);
    pthread_cond_init(&g_pool.idle, NULL);
    g_pool.started = 0;
    atomic_store(&g_pool.sleepers, 0);
    atomic_store(&g_pool.caller_waits, 0);
    atomic_store(&g_pool.busy, 0);
}

static void pool_once(void) { pthread_atfork(NULL, NULL, pool_after_fork); }

// Start threads until `want` run (the caller holds the pool). Signals stay with the other threads.
static void pool_grow(int want) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, pool_once);
    if (want > g_pool.cap) {
        pthread_t *t = realloc(g_pool.tid, sizeof *t * (size_t)want);
        if (!t) return;
        g_pool.tid = t;
        g_pool.cap = want;
    }
    sigset_t all, old; // asynchronous signals only: faults stay with the thread that faults
    sigfillset(&all);
    const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT};
    for (size_t i = 0; i < sizeof faults / sizeof *faults; i++) sigdelset(&all, faults[i]);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    while (g_pool.started < want &&
           pthread_create(&g_pool.tid[g_pool.started], NULL, worker_main, (void *)(intptr_t)(g_pool.started + 1)) == 0)
        g_pool.started++;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void run_inline(int n, ds_task_fn fn, void *ctx, int worker) {
    for (int i = 0; i < n; i++) fn(ctx, i, worker);
}

static void pool_run(int n, ds_task_fn fn, void *ctx);

// OpenBLAS's OpenMP build takes its thread count from the calling thread's OpenMP setting at every
// call (all cores on a thread that never set it, such as any pthread) and then runs an OpenMP team
// of its own inside our item. So items run with that setting at 1 (pool threads set it once; the
// caller's is restored afterwards), and OpenBLAS stays single-threaded inside each item.
void ds_parallel_for(int n, ds_task_fn fn, void *ctx) {
    if (n <= 0) return;
    if (tls_worker >= 0) { // nested: inside an item of an enclosing loop
        run_inline(n, fn, ctx, tls_worker);
        return;
    }
    const int icv = omp_get_max_threads();
    if (icv != 1) omp_set_num_threads(1);
    pool_run(n, fn, ctx);
    if (icv != 1) omp_set_num_threads(icv);
}

static void pool_run(int n, ds_task_fn fn, void *ctx) {
    const int threads = ds_threads();
    if (n == 1 || threads == 1 || atomic_exchange_explicit(&g_pool.busy, 1, memory_order_acquire)) {
        run_inline(n, fn, ctx, 0);
        return;
    }
    const uint64_t t0 = now_ns();
    const int adaptive = atomic_load_explicit(&g_adaptive, memory_order_relaxed);
    if (adaptive && t0 < g_adapt.serial_until) { // backing off: threads lost time lately
        atomic_store_explicit(&g_pool.busy, 0, memory_order_release);
        run_inline(n, fn, ctx, 0);
        return;
    }
    if (g_pool.started < threads - 1) pool_grow(threads - 1);
    const int workers = g_pool.started < threads - 1 ? g_pool.started : threads - 1;
    if (!workers) {
        atomic_store_explicit(&g_pool.busy, 0, memory_order_release);
        run_inline(n, fn, ctx, 0);
        return;
    }
    // Close the previous job (odd seq), rewrite the fields, open this one (even seq).
    const uint32_t seq = (uint32_t)(atomic_load_explicit(&g_pool.state, memory_order_relaxed) >> 32) + 1;
    atomic_store_explicit(&g_pool.state, (uint64_t)seq << 32, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&g_pool.fn, fn, memory_order_relaxed);
    atomic_store_explicit(&g_pool.ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&g_pool.n, n, memory_order_relaxed);
    atomic_store_explicit(&g_pool.workers, workers, memory_order_relaxed);
    atomic_store_explicit(&g_pool.done, 0, memory_order_relaxed);
    atomic_store_explicit(&g_pool.state, (uint64_t)(seq + 1) << 32, memory_order_seq_cst);
    if (atomic_load_explicit(&g_pool.sleepers, memory_order_seq_cst)) {
        pthread_mutex_lock(&g_pool.mu);
        pthread_cond_broadcast(&g_pool.wake);
        pthread_mutex_unlock(&g_pool.mu);
    }
    tls_worker = 0;
    const int mine = claim_items(seq + 1, fn, ctx, n, 0);
    tls_worker = -1;
    const uint64_t t1 = now_ns();
    // Wait for the items other threads still run: spin briefly, then sleep.
    if (atomic_load_explicit(&g_pool.done, memory_order_acquire) != n) {
        for (int i = 0; atomic_load_explicit(&g_pool.done, memory_order_acquire) != n; i++) {
            cpu_relax();
            if ((i & 63) == 63 && now_ns() - t1 > DS_SPIN_NS) break;
        }
        if (atomic_load_explicit(&g_pool.done, memory_order_acquire) != n) {
            pthread_mutex_lock(&g_pool.mu);
            atomic_store_explicit(&g_pool.caller_waits, 1, memory_order_seq_cst);
            while (atomic_load_explicit(&g_pool.done, memory_order_seq_cst) != n)
                pthread_cond_wait(&g_pool.idle, &g_pool.mu);
            atomic_store_explicit(&g_pool.caller_waits, 0, memory_order_relaxed);
            pthread_mutex_unlock(&g_pool.mu);
        }
    }
    if (adaptive) ds_pool_adapt_observe(&g_adapt, t0, t1, now_ns(), mine, n);
    atomic_store_explicit(&g_pool.busy, 0, memory_order_release);
}

void ds_threads_shutdown(void) {
    while (atomic_exchange_explicit(&g_pool.busy, 1, memory_order_acquire)) sched_yield();
    pthread_mutex_lock(&g_pool.mu);
    atomic_store_explicit(&g_pool.stop, 1, memory_order_seq_cst);
    pthread_cond_broadcast(&g_pool.wake);
    pthread_mutex_unlock(&g_pool.mu);
    for (int i = 0; i < g_pool.started; i++) pthread_join(g_pool.tid[i], NULL);
    g_pool.started = 0;
    ds_pool_adapt_init(&g_adapt);
    atomic_store_explicit(&g_pool.stop, 0, memory_order_relaxed);
    atomic_store_explicit(&g_pool.busy, 0, memory_order_release);
}

int ds_threads_started(void) {
    while (atomic_exchange_explicit(&g_pool.busy, 1, memory_order_acquire)) sched_yield();
    const int n = g_pool.started;
    atomic_store_explicit(&g_pool.busy, 0, memory_order_release);
    return n;
}
