#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
        cached = pulse_diag_switch(PULSE_DIAG_SYNC);
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

int pulse_check_regular(const char *path, const char *what, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return pulse_errorf(err, errlen, PULSE_ERR_IO, path, "cannot open (%s)", strerror(errno));
    if (S_ISDIR(st.st_mode))
        return pulse_errorf(err, errlen, PULSE_ERR_IO, path, "is a directory, not a %s", what);
    if (!S_ISREG(st.st_mode))
        return pulse_errorf(err, errlen, PULSE_ERR_IO, path,
                            "is not a regular file (a FIFO or a device): not read");
    return PULSE_OK;
}

int pulse_read_file(const char *path, const char *what, char **buf, size_t *len, char *err,
                    size_t errlen)
{
    *buf = NULL;
    *len = 0;
    int rc = pulse_check_regular(path, what, err, errlen);
    if (rc != PULSE_OK) return rc;
    FILE *f = fopen(path, "rb");
    if (!f)
        return pulse_errorf(err, errlen, PULSE_ERR_IO, path, "cannot open (%s)", strerror(errno));
    struct stat st;
    char *b = fstat(fileno(f), &st) == 0 ? malloc((size_t)st.st_size + 1) : NULL;
    const size_t got = b ? fread(b, 1, (size_t)st.st_size, f) : 0;
    const int failed = b && (got != (size_t)st.st_size || ferror(f));
    fclose(f);
    if (!b) return pulse_errorf(err, errlen, PULSE_ERR_NOMEM, path, "out of memory reading it");
    if (failed) {
        free(b);
        return pulse_errorf(err, errlen, PULSE_ERR_IO, path, "read error");
    }
    b[got] = 0;
    *buf = b;
    *len = got;
    return PULSE_OK;
}

int pulse_check_text(const char *buf, size_t len, const char *path, char *err, size_t errlen)
{
    const char *nul = memchr(buf, 0, len);
    if (!nul) return PULSE_OK;
    long line = 1;
    for (const char *p = buf; p < nul; p++)
        line += *p == '\n';
    return pulse_errorf(err, errlen, PULSE_ERR_INVALID, path, "line %ld: a NUL byte (not a text file)",
                        line);
}

/* ---- diagnostics (common.h): the one table of the PULSE_* variables the runtime reads ---- */

enum diag_kind { DIAG_SWITCH, DIAG_NUMBER, DIAG_TEXT };

static const struct {
    const char *name;
    enum diag_kind kind;
    double lo, hi;
} diags[PULSE_DIAGS] = {
    [PULSE_DIAG_SYNC] = {"PULSE_SYNC", DIAG_SWITCH, 0, 1},
    [PULSE_DIAG_OFFLOAD_VERIFY] = {"PULSE_OFFLOAD_VERIFY", DIAG_SWITCH, 0, 1},
    [PULSE_DIAG_OFFLOAD_TRACE] = {"PULSE_OFFLOAD_TRACE", DIAG_SWITCH, 0, 1},
    [PULSE_DIAG_PROGRESS] = {"PULSE_PROGRESS", DIAG_SWITCH, 0, 1},
    [PULSE_DIAG_WAIT_TIMEOUT_S] = {"PULSE_WAIT_TIMEOUT_S", DIAG_NUMBER, 1e-3, 1e7},
    [PULSE_DIAG_STACKS_AFTER_S] = {"PULSE_STACKS_AFTER_S", DIAG_NUMBER, 1e-3, 1e7},
    [PULSE_DIAG_RECALL_FAULT] = {"PULSE_RECALL_FAULT", DIAG_TEXT, 0, 0},
};

const char *pulse_diag_name(enum pulse_diag d)
{
    return (unsigned)d < PULSE_DIAGS ? diags[d].name : "?";
}

const char *pulse_diag_raw(enum pulse_diag d)
{
    return (unsigned)d < PULSE_DIAGS ? getenv(diags[d].name) : NULL;
}

/* A switch: 0 or 1 (decimal digits, no sign, no spaces). */
static int diag_switch_value(const char *e, double *out)
{
    char *end;
    const long v = strtol(e, &end, 10);
    if (!(e[0] >= '0' && e[0] <= '9') || *end || v < 0 || v > 1) return 0;
    *out = (double)v;
    return 1;
}

/* A decimal number in [lo, hi] (no sign, no inf or nan, nothing after it). */
static int diag_number_value(const char *e, double lo, double hi, double *out)
{
    char *end;
    const double v = strtod(e, &end);
    const int decimal = (e[0] >= '0' && e[0] <= '9') || (e[0] == '.' && e[1] >= '0' && e[1] <= '9');
    if (!decimal || *end || !isfinite(v) || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

int pulse_diag_number(enum pulse_diag d, double *out)
{
    if ((unsigned)d >= PULSE_DIAGS || diags[d].kind == DIAG_TEXT) return 0;
    const char *e = getenv(diags[d].name);
    if (!e || !*e) return 0;
    if (diags[d].kind == DIAG_SWITCH) {
        if (diag_switch_value(e, out)) return 1;
        fprintf(stderr, "%s=%s: expected an integer in 0..1; ignored\n", diags[d].name, e);
        return 0;
    }
    if (diag_number_value(e, diags[d].lo, diags[d].hi, out)) return 1;
    fprintf(stderr, "%s=%s: expected a number in %g..%g; ignored\n", diags[d].name, e, diags[d].lo,
            diags[d].hi);
    return 0;
}

int pulse_diag_switch(enum pulse_diag d)
{
    double v = 0;
    return pulse_diag_number(d, &v) && v == 1;
}

const char *pulse_diag_text(enum pulse_diag d)
{
    if ((unsigned)d >= PULSE_DIAGS || diags[d].kind != DIAG_TEXT) return NULL;
    const char *e = getenv(diags[d].name);
    return e && *e ? e : NULL;
}

void pulse_wait_flag(const uint32_t *flag, uint32_t value, const char *what)
{
    const _Atomic uint32_t *f = (const _Atomic uint32_t *)flag;
    double t0 = 0, timeout = 120.0;
    for (int spins = 0; (int32_t)(atomic_load_explicit(f, memory_order_acquire) - value) < 0;) {
        if (++spins < 1000) continue;
        sched_yield();
        if (spins % 4096) continue;
        const double now = pulse_now();
        if (t0 == 0) { /* a slow wait: read the limit once */
            t0 = now;
            pulse_diag_number(PULSE_DIAG_WAIT_TIMEOUT_S, &timeout);
        }
        if (now - t0 > timeout) {
            char d[160];
            snprintf(d, sizeof d,
                     "%s: flag %u, waiting for %u, after %.0f s (PULSE_WAIT_TIMEOUT_S)", what,
                     (unsigned)atomic_load(f), (unsigned)value, now - t0);
            pulse_die(__FILE__, __LINE__, "pulse_wait_flag", d);
        }
    }
}

int pulse_mkdirs(const char *path)
{
    char buf[4096];
    const size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) {
        errno = n ? ENAMETOOLONG : ENOENT;
        return PULSE_ERR_IO;
    }
    memcpy(buf, path, n + 1);
    for (char *c = buf + 1; *c; c++) {
        if (*c != '/') continue;
        *c = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) return PULSE_ERR_IO;
        *c = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST) return PULSE_ERR_IO;
    struct stat st;
    if (stat(buf, &st) != 0) return PULSE_ERR_IO;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return PULSE_ERR_IO;
    }
    return PULSE_OK;
}
