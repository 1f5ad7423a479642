// Preloaded into a test node (LD_PRELOAD): every CLOCK_REALTIME reading is
// IGGY_TEST_CLOCK_SKEW_SECS seconds later than the machine's, as on a host whose
// clock jumped ahead. Monotonic clocks are left alone.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

int clock_gettime(clockid_t clock, struct timespec *out) {
    static int (*real)(clockid_t, struct timespec *) = 0;
    static long skew = -1;
    if (!real) {
        real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    }
    if (skew < 0) {
        const char *given = getenv("IGGY_TEST_CLOCK_SKEW_SECS");
        skew = given ? atol(given) : 0;
    }
    int result = real(clock, out);
    if (result == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) {
        out->tv_sec += skew;
    }
    return result;
}
