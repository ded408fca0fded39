#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <stdarg.h>
#include <string.h>
#include <time.h>

int pulse_errorf(char *err, size_t errlen, int code, const char *label, const char *fmt, ...)
{
    if (err && errlen) {
        int n = snprintf(err, errlen, "%s: ", label);
        if (n >= 0 && (size_t)n < errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return code;
}

void pulse_die(const char *file, int line, const char *what, const char *detail)
{
    fprintf(stderr, "%s:%d: check failed: %s: %s\n", file, line, what, detail ? detail : "");
    fflush(stderr);
    abort();
}

double pulse_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int pulse_sync_each_launch(void)
{
    static int cached = -1;
    if (cached < 0) {
        const char *s = getenv("PULSE_SYNC");
        cached = (s && strcmp(s, "0") != 0) ? 1 : 0;
    }
    return cached;
}

static _Thread_local int64_t host_syncs;

void pulse_host_sync_note(void)
{
    host_syncs++;
}

int64_t pulse_host_syncs(void)
{
    return host_syncs;
}

int pulse_device_wait(void)
{
    static int cached = -1;
    if (cached < 0) {
        const char *s = getenv("PULSE_DEVICE_WAIT");
        cached = (s && strcmp(s, "1") == 0) ? 1 : 0;
    }
    return cached;
}
