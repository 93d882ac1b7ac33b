// The thread pool (src/base/threads.c): every item runs exactly once with a valid worker index,
// whatever the thread count; the caller and a pool thread really run items at the same time;
// nested loops, concurrent callers, ds_set_threads changes, shutdown and restart, fork and signals
// are safe; OpenBLAS stays single-threaded on every thread; and a forward pass gives bitwise the
// same logits on 1 and on every other thread count.
#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include <cblas.h>
#include <omp.h>

#include "base/threads.h"
#include "dspark.h"
#include "kernels/matmul.h"
#include "stories.h"

#define MAX_ITEMS 5000

typedef struct {
    atomic_int runs[MAX_ITEMS];
    atomic_int bad_worker; // items that saw a worker index outside [0, ds_threads())
    int threads;
} count_ctx;

static void count_item(void *ctx, int item, int worker) {
    count_ctx *c = ctx;
    atomic_fetch_add(&c->runs[item], 1);
    if (worker < 0 || worker >= c->threads) atomic_fetch_add(&c->bad_worker, 1);
}

// ds_parallel_for(n) on `threads` threads: each item once, worker indexes in range.
static void check_counts(int n, int threads) {
    static count_ctx c;
    memset(&c, 0, sizeof c);
    ds_set_threads(threads);
    c.threads = ds_threads();
    ds_parallel_for(n, count_item, &c);
    for (int i = 0; i < n; i++) {
        if (atomic_load(&c.runs[i]) != 1)
            print_error("n %d threads %d: item %d ran %d times\n", n, threads, i, atomic_load(&c.runs[i]));
        assert_int_equal(atomic_load(&c.runs[i]), 1);
    }
    for (int i = n; i < MAX_ITEMS; i++) assert_int_equal(atomic_load(&c.runs[i]), 0);
    assert_int_equal(atomic_load(&c.bad_worker), 0);
}

static void test_every_item_once(void **state) {
    const int ns[] = {0, 1, 2, 3, 17, 1000, MAX_ITEMS};
    const int max = ds_threads_max();
    for (int t = 1; t <= max + 2; t++) // beyond the cores: capped
        for (size_t k = 0; k < sizeof ns / sizeof *ns; k++)
            for (int rep = 0; rep < 20; rep++) check_counts(ns[k], t);
    ds_set_threads(max + 5);
    assert_int_equal(ds_threads(), max);
    ds_set_threads(0);
    assert_int_equal(ds_threads(), max);
    ds_set_threads(-3);
    assert_int_equal(ds_threads(), max);
}

// Items that each wait until all have started: only that many threads running at once can finish
// them, so the loop returning proves the caller and every pool thread shared it (the caller alone
// would wait forever: the bound below turns that into a failure instead of a hang).
typedef struct {
    atomic_int started, workers_seen, timed_out;
    int need;
} rendezvous_ctx;

static void rendezvous_item(void *ctx, int item, int worker) {
    rendezvous_ctx *c = ctx;
    atomic_fetch_add(&c->started, 1);
    atomic_fetch_or(&c->workers_seen, 1 << worker);
    for (long spin = 0; atomic_load(&c->started) < c->need; spin++)
        if (spin > 4000000000L) { // far beyond any scheduling delay
            atomic_store(&c->timed_out, 1);
            return;
        }
}

// One loop of ds_threads() rendezvous items: every thread ran one (adaptive back-off off: a busy
// machine must not send it inline).
static void rendezvous_all(void) {
    ds_threads_set_adaptive(0);
    rendezvous_ctx c = {.need = ds_threads()};
    ds_parallel_for(c.need, rendezvous_item, &c);
    assert_int_equal(atomic_load(&c.timed_out), 0);
    assert_int_equal(atomic_load(&c.workers_seen), (1 << c.need) - 1);
    ds_threads_set_adaptive(1);
}

static void test_caller_and_pool_run_together(void **state) {
    if (ds_threads_max() < 2) {
        print_message("(one core: skipped)\n");
        skip();
    }
    ds_threads_shutdown();
    for (int t = 2; t <= ds_threads_max() && t <= 16; t++) {
        ds_set_threads(t);
        for (int rep = 0; rep < 5; rep++) rendezvous_all();
        assert_int_equal(ds_threads_started(), t - 1);
    }
    ds_set_threads(0);
}

// The back-off decision on synthetic clock readings (ns): winning jobs keep the pool in use; a job
// where a thread held an item for a long time sends loops inline for a while, longer while it
// keeps happening, shorter again after a long run of wins; jobs nobody shared change nothing.
static void test_adapt_decision(void **state) {
    ds_pool_adapt a;
    ds_pool_adapt_init(&a);
    const uint64_t min = a.backoff, base = 1000000000u;
    uint64_t t = base;
    for (int i = 0; i < 100; i++, t += 100000) { // 2 items, each 40 us, run side by side: 45 us
        ds_pool_adapt_observe(&a, t, t + 40000, t + 45000, 1, 2);
        assert_true(a.serial_until < t);
    }
    ds_pool_adapt_observe(&a, t, t + 40000, t + 40000, 2, 2); // the caller ran everything
    ds_pool_adapt_observe(&a, t, t + 40000, t + 40000, 0, 2); // or nothing
    assert_true(a.serial_until < t);
    assert_int_equal(a.backoff, min);
    // The other item took 5 ms (its thread was preempted): inline for the back-off period.
    ds_pool_adapt_observe(&a, t, t + 40000, t + 5000000, 1, 2);
    assert_int_equal(a.serial_until, t + 5000000 + min);
    assert_int_equal(a.backoff, 2 * min);
    // It keeps happening: the period doubles, up to a cap.
    uint64_t prev = a.backoff;
    for (int i = 0; i < 20; i++) {
        t = a.serial_until + 1000;
        ds_pool_adapt_observe(&a, t, t + 40000, t + 5000000, 1, 2);
        assert_int_equal(a.serial_until, t + 5000000 + prev);
        assert_true(a.backoff == 2 * prev || a.backoff == prev);
        prev = a.backoff;
    }
    const uint64_t cap = a.backoff;
    assert_true(cap > min && cap <= 1000000000u);
    // A long run of winning jobs brings it back down.
    t = a.serial_until + 1000;
    for (int i = 0; i < 200000 && a.backoff > min; i++, t += 100000)
        ds_pool_adapt_observe(&a, t, t + 40000, t + 45000, 1, 2);
    assert_int_equal(a.backoff, min);
    assert_true(a.serial_until < t);
}

// A loop inside an item runs inline on that item's thread, with its worker index.
typedef struct {
    atomic_int inner_runs[64 * 64];
    atomic_int mismatched; // inner items that saw another worker index than their outer item
} nested_ctx;

typedef struct {
    nested_ctx *c;
    int outer, worker;
} inner_ctx;

static void inner_item(void *ctx, int item, int worker) {
    inner_ctx *ic = ctx;
    atomic_fetch_add(&ic->c->inner_runs[ic->outer * 64 + item], 1);
    if (worker != ic->worker) atomic_fetch_add(&ic->c->mismatched, 1);
}

static void outer_item(void *ctx, int item, int worker) {
    inner_ctx ic = {ctx, item, worker};
    ds_parallel_for(64, inner_item, &ic);
}

static void test_nested(void **state) {
    for (int t = 1; t <= ds_threads_max(); t++) {
        static nested_ctx c;
        memset(&c, 0, sizeof c);
        ds_set_threads(t);
        ds_parallel_for(64, outer_item, &c);
        for (int i = 0; i < 64 * 64; i++) assert_int_equal(atomic_load(&c.inner_runs[i]), 1);
        assert_int_equal(atomic_load(&c.mismatched), 0);
    }
    ds_set_threads(0);
}

// Several threads calling loops at once: each loop still runs every item once (the pool serves one
// caller at a time; the others run theirs inline).
static void *caller_main(void *arg) {
    count_ctx *c = arg;
    for (int rep = 0; rep < 200; rep++) ds_parallel_for(MAX_ITEMS / 200, count_item, c);
    return NULL;
}

static void test_concurrent_callers(void **state) {
    static count_ctx c[3];
    memset(c, 0, sizeof c);
    pthread_t t[3];
    for (int i = 0; i < 3; i++) {
        c[i].threads = ds_threads();
        assert_int_equal(pthread_create(&t[i], NULL, caller_main, &c[i]), 0);
    }
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < MAX_ITEMS / 200; k++) assert_int_equal(atomic_load(&c[i].runs[k]), 200);
        assert_int_equal(atomic_load(&c[i].bad_worker), 0);
    }
}

// ds_set_threads(1) keeps everything on the calling thread; raising it again uses the pool again.
static void record_worker(void *ctx, int item, int worker) { atomic_fetch_or((atomic_int *)ctx, 1 << worker); }

static void test_set_threads_honoured(void **state) {
    ds_set_threads(1);
    atomic_int seen = 0;
    for (int rep = 0; rep < 50; rep++) ds_parallel_for(100, record_worker, &seen);
    assert_int_equal(atomic_load(&seen), 1);
    if (ds_threads_max() >= 2) {
        ds_set_threads(2);
        rendezvous_all();
    }
    ds_set_threads(0);
}

static void test_shutdown_and_restart(void **state) {
    for (int rep = 0; rep < 3; rep++) {
        check_counts(1000, 0);
        ds_threads_shutdown();
        assert_int_equal(ds_threads_started(), 0);
        ds_threads_shutdown(); // twice is harmless
    }
    check_counts(1000, 0);
    assert_int_equal(ds_threads_started(), ds_threads_max() - 1);
}

// A forked child (the pool's threads do not survive fork) still runs every item.
static void test_fork(void **state) {
    check_counts(1000, 0); // the parent's pool is running
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        static count_ctx c;
        c.threads = ds_threads();
        for (int rep = 0; rep < 10; rep++) ds_parallel_for(1000, count_item, &c);
        int ok = atomic_load(&c.bad_worker) == 0;
        for (int i = 0; i < 1000; i++) ok = ok && atomic_load(&c.runs[i]) == 10;
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

// Pool threads block asynchronous signals (SIGINT, SIGTERM, ...), so handlers (Ctrl-C in datagen
// and train, SIGTERM in serve) run on the application's threads: every thread but the main one
// here is the pool's, and /proc shows each one's blocked set.
static void test_pool_threads_block_signals(void **state) {
    ds_set_threads(0);
    if (ds_threads_max() >= 2 && ds_threads_max() <= 16)
        rendezvous_all(); // every pool thread has run an item: its start-up (every signal blocked
                          // for a moment, inside pthread_create) is over
    else
        check_counts(1000, 0);
    const int started = ds_threads_started();
    assert_int_equal(started, ds_threads_max() - 1);
    DIR *dir = opendir("/proc/self/task");
    assert_non_null(dir);
    int others = 0;
    for (struct dirent *e; (e = readdir(dir));) {
        if (e->d_name[0] == '.' || atoi(e->d_name) == (int)getpid()) continue;
        char path[300], line[256];
        snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        unsigned long long blk = 0;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "SigBlk: %llx", &blk) == 1) break;
        fclose(f);
        const int sigs[] = {SIGINT, SIGTERM, SIGUSR1, SIGHUP, SIGPIPE};
        for (size_t k = 0; k < sizeof sigs / sizeof *sigs; k++) assert_true(blk & (1ull << (sigs[k] - 1)));
        assert_false(blk & (1ull << (SIGSEGV - 1))); // faults stay with the faulting thread
        others++;
    }
    closedir(dir);
    assert_int_equal(others, started);
}

// OpenBLAS (its OpenMP build) sizes its threading from the calling thread's OpenMP setting, which on
// any thread but one that set it is all cores: sgemm items on pool threads, or on a caller thread of
// the application's (the server's engine thread), must still run single-threaded, never start an
// OpenMP team of their own, and leave the caller's own OpenMP setting as it was.
static int n_tasks(void) {
    DIR *dir = opendir("/proc/self/task");
    int n = 0;
    for (struct dirent *e; dir && (e = readdir(dir));) n += e->d_name[0] != '.';
    if (dir) closedir(dir);
    return n;
}

static void sgemm_products(void) {
    const int rows = 512, cols = 256, n = 64; // the sgemm path, several items
    float *w = malloc(sizeof(float) * rows * cols), *x = malloc(sizeof(float) * n * cols);
    float *y = malloc(sizeof(float) * n * rows);
    for (int i = 0; i < rows * cols; i++) w[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < n * cols; i++) x[i] = (float)(i % 5) - 2.0f;
    ds_weight wt = {DS_F32, rows, cols, w};
    for (int rep = 0; rep < 20; rep++) ds_matmul(y, x, &wt, n, NULL);
    free(w);
    free(x);
    free(y);
}

static void *caller_thread(void *arg) {
    const int before = omp_get_max_threads();
    sgemm_products();
    *(int *)arg = omp_get_max_threads() == before && openblas_get_num_threads() == 1;
    return NULL;
}

static void test_openblas_stays_single_threaded(void **state) {
    ds_threads_shutdown();
    ds_set_threads(0);
    sgemm_products(); // (the first product also sets up matmul.c once)
    const int before = omp_get_max_threads();
    sgemm_products();
    assert_int_equal(openblas_get_num_threads(), 1);
    assert_int_equal(omp_get_max_threads(), before);
    assert_int_equal(n_tasks(), 1 + ds_threads_started());
    int ok = 0;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, caller_thread, &ok), 0);
    pthread_join(t, NULL);
    assert_int_equal(ok, 1);
    assert_int_equal(openblas_get_num_threads(), 1);
    assert_int_equal(n_tasks(), 1 + ds_threads_started()); // no OpenMP team was started anywhere
}

// A prefill (sgemm products, parallel attention) and decode steps: bitwise the same logits on 1
// thread and on every other thread count.
static void forward_logits(ds_model *m, int threads, float *out, int n_prefill, int n_decode) {
    const int V = ds_model_get_info(m)->vocab_size;
    ds_set_threads(threads);
    ds_kv *kv;
    ds_workspace *ws;
    assert_int_equal(ds_kv_init(m, n_prefill + n_decode, &kv), DS_OK);
    assert_int_equal(ds_workspace_init(m, &ws), DS_OK);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(n_prefill + n_decode));
    for (int i = 0; i < n_prefill + n_decode; i++) tok[i] = (int32_t)((i * 7919 + 1) % V);
    ds_forward_seq s = {.kv = kv, .tokens = tok, .n_tokens = n_prefill, .n_logits = n_prefill, .logits = out};
    assert_int_equal(ds_model_forward(m, ws, &s, 1), DS_OK);
    for (int i = 0; i < n_decode; i++) {
        ds_forward_seq d = {.kv = kv, .tokens = tok + n_prefill + i, .n_tokens = 1, .n_logits = 1,
                            .logits = out + (size_t)(n_prefill + i) * V};
        assert_int_equal(ds_model_forward(m, ws, &d, 1), DS_OK);
    }
    free(tok);
    ds_kv_free(kv);
    ds_workspace_free(ws);
}

static void test_forward_same_on_any_thread_count(void **state) {
    ds_model *m;
    assert_int_equal(stories_load(&m), 0);
    const int V = ds_model_get_info(m)->vocab_size, P = 300, D = 20;
    const size_t n = (size_t)(P + D) * V;
    float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
    forward_logits(m, 1, a, P, D);
    for (int t = 2; t <= ds_threads_max(); t++)
        for (int rep = 0; rep < 3; rep++) {
            memset(b, 0xff, sizeof(float) * n);
            forward_logits(m, t, b, P, D);
            assert_memory_equal(a, b, sizeof(float) * n);
        }
    free(a);
    free(b);
    ds_model_free(m);
    ds_set_threads(0);
}

// Tiny products never pay for the pool: decoding stories260K (every product below the parallel
// threshold) on 2 threads starts no thread at all, while its 300-row prefill does use them.
static void test_tiny_products_stay_inline(void **state) {
    ds_model *m;
    assert_int_equal(stories_load(&m), 0);
    const int V = ds_model_get_info(m)->vocab_size;
    float *logits = malloc(sizeof(float) * (size_t)300 * V);
    ds_threads_shutdown();
    forward_logits(m, 2, logits, 8, 50);
    assert_int_equal(ds_threads_started(), 0);
    if (ds_threads_max() >= 2) {
        forward_logits(m, 2, logits, 300, 0);
        assert_int_equal(ds_threads_started(), 1);
    }
    free(logits);
    ds_model_free(m);
    ds_set_threads(0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_item_once),
        cmocka_unit_test(test_caller_and_pool_run_together),
        cmocka_unit_test(test_adapt_decision),
        cmocka_unit_test(test_nested),
        cmocka_unit_test(test_concurrent_callers),
        cmocka_unit_test(test_set_threads_honoured),
        cmocka_unit_test(test_shutdown_and_restart),
        cmocka_unit_test(test_fork),
        cmocka_unit_test(test_pool_threads_block_signals),
        cmocka_unit_test(test_openblas_stays_single_threaded),
        cmocka_unit_test(test_forward_same_on_any_thread_count),
        cmocka_unit_test(test_tiny_products_stay_inline),
    };
    const int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ds_threads_shutdown();
    return rc;
}
