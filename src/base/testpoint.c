// Fault-injection points for tests: see testpoint.h.
#define _POSIX_C_SOURCE 200809L
#include "base/testpoint.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

static atomic_long g_count;

void ds_test_point(void) {
    static int inited; // points are reached from the writing thread only; the counter is atomic anyway
    static long kill_at, delay_us;
    if (!inited) {
        const char *k = getenv("DSPARK_TEST_KILL_AT_POINT"), *d = getenv("DSPARK_TEST_POINT_DELAY_US");
        kill_at = k ? atol(k) : 0;
        delay_us = d ? atol(d) : 0;
        inited = 1;
    }
    if (!kill_at && !delay_us) return;
    if (delay_us > 0) {
        struct timespec ts = {delay_us / 1000000, (delay_us % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
    if (kill_at > 0 && atomic_fetch_add(&g_count, 1) + 1 == kill_at) raise(SIGKILL);
}
