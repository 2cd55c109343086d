/* A process's wall clock moved by an amount a test sets while it runs: an
 * LD_PRELOAD library standing in front of libc's clock_gettime, gettimeofday
 * and time. The shift (signed nanoseconds, 8 bytes, little-endian) is read from
 * the file named by TRAFKA_CLOCK_SHIFT, mapped shared, so a write to the file is
 * seen by the next call. Only the wall clock moves (CLOCK_REALTIME and its
 * coarse and TAI variants): monotonic clocks, and so timers and sleeps, do not,
 * as when an operator or NTP steps a machine's clock.
 *
 * Built by tests/faults/clockshift.py with the system's C compiler. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static clock_gettime_fn real_clock_gettime;
static volatile const int64_t *shift_ns;
static int ready;

static void start(void) {
    real_clock_gettime = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
    const char *path = getenv("TRAFKA_CLOCK_SHIFT");
    if (path != NULL) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            void *map = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
            if (map != MAP_FAILED) {
                shift_ns = (volatile const int64_t *)map;
            }
            close(fd);
        }
    }
    __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
}

static int wall(clockid_t id) {
    return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE || id == CLOCK_TAI;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        start();
    }
    int rc = real_clock_gettime(id, ts);
    if (rc == 0 && shift_ns != NULL && wall(id)) {
        int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + *shift_ns;
        ts->tv_sec = ns / 1000000000;
        ts->tv_nsec = ns % 1000000000;
        if (ts->tv_nsec < 0) {
            ts->tv_nsec += 1000000000;
            ts->tv_sec -= 1;
        }
    }
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    (void)tz;
    int rc = clock_gettime(CLOCK_REALTIME, &ts);
    if (rc == 0 && tv != NULL) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return rc;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out != NULL) {
        *out = ts.tv_sec;
    }
    return ts.tv_sec;
}
