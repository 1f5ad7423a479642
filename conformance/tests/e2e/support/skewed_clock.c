// Preloaded into a test node (LD_PRELOAD): every CLOCK_REALTIME reading is
// IGGY_TEST_CLOCK_SKEW_SECS seconds later than the machine's, as on a host whose
// clock jumped ahead. With IGGY_TEST_CLOCK_SKEW_FILE instead, the skew is the
// number of seconds that file holds, read again every 20 ms, so a test can step
// the clock of a running node. Monotonic clocks are left alone.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int (*real)(clockid_t, struct timespec *) = 0;

// The skew the file names, re-read once 20 ms passed since the last reading
// (read with plain system calls: no allocation inside a clock reading).
static long skew_from_file(const char *path) {
    static long skew = 0;
    static long long read_at = -1;
    struct timespec now;
    if (real(CLOCK_MONOTONIC, &now) != 0) {
        return __atomic_load_n(&skew, __ATOMIC_RELAXED);
    }
    long long ms = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    long long last = __atomic_load_n(&read_at, __ATOMIC_RELAXED);
    if (last >= 0 && ms - last < 20) {
        return __atomic_load_n(&skew, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&read_at, ms, __ATOMIC_RELAXED);
    char text[32] = {0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, text, sizeof text - 1);
        close(fd);
        if (n > 0) {
            __atomic_store_n(&skew, strtol(text, 0, 10), __ATOMIC_RELAXED);
        }
    }
    return __atomic_load_n(&skew, __ATOMIC_RELAXED);
}

int clock_gettime(clockid_t clock, struct timespec *out) {
    static int fixed_read = 0;
    static long fixed = 0;
    static const char *file = 0;
    if (!real) {
        real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    }
    if (!fixed_read) {
        const char *given = getenv("IGGY_TEST_CLOCK_SKEW_SECS");
        fixed = given ? atol(given) : 0;
        file = getenv("IGGY_TEST_CLOCK_SKEW_FILE");
        fixed_read = 1;
    }
    int result = real(clock, out);
    if (result == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) {
        out->tv_sec += file ? skew_from_file(file) : fixed;
    }
    return result;
}
