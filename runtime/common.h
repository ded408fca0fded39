/* Shared helpers: the check macro family, host/device annotations, small utilities.
 *
 * Two kinds of error (CONVENTIONS.md): programming and CUDA/cuBLAS/JSON errors abort through
 * the CHECK macros below, printing the statement, file:line and error name; failures a caller
 * can handle return a negative status (enum pulse_status). */
#ifndef PULSE_COMMON_H
#define PULSE_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#if defined(__CUDACC__)
#define PULSE_HD __host__ __device__ __forceinline__
#else
#define PULSE_HD static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

enum pulse_status {
    PULSE_OK = 0,
    PULSE_ERR_NOMEM = -1,   /* a pool or budget is exhausted (recoverable: wait or reject) */
    PULSE_ERR_INVALID = -2, /* bad input or config */
    PULSE_ERR_IO = -3,      /* file or device I/O failed */
    PULSE_ERR_OOM = -4,     /* the device refused an allocation */
};

/* Prints "file:line: what: detail" and aborts. Never returns. */
void pulse_die(const char *file, int line, const char *what, const char *detail);

#define PULSE_CHECK(cond, detail)                                                                  \
    do {                                                                                           \
        if (!(cond)) pulse_die(__FILE__, __LINE__, #cond, (detail));                               \
    } while (0)

/* Writes "label: message" (printf-style) into err when err and errlen are set, and returns
 * code: the one-line error of a reader that names what it was reading. */
int pulse_errorf(char *err, size_t errlen, int code, const char *label, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Makes directory path and any missing parents (mode 0777 less the umask), as mkdir -p:
 * PULSE_OK when it exists as a directory afterwards, else PULSE_ERR_IO with errno set. */
int pulse_mkdirs(const char *path);
/* Input files. pulse_check_regular: PULSE_OK when path is a regular file, else PULSE_ERR_IO with
 * "PATH: cannot open (why)", "PATH: is a directory, not a WHAT" or "PATH: is not a regular file
 * (a FIFO or a device): not read" in err (an endless device or a FIFO with no writer is never
 * opened). pulse_read_file: that check, then the whole file into *buf (malloc'd, NUL-terminated,
 * the caller frees it) and its size into *len; PULSE_OK, PULSE_ERR_IO or PULSE_ERR_NOMEM. */
int pulse_check_regular(const char *path, const char *what, char *err, size_t errlen);
int pulse_read_file(const char *path, const char *what, char **buf, size_t *len, char *err,
                    size_t errlen);
/* A text file's bytes (buf, len, as pulse_read_file read them) hold no NUL: PULSE_OK, else
 * PULSE_ERR_INVALID with "PATH: line N: a NUL byte (not a text file)" in err, so that no line
 * after it is silently dropped. */
int pulse_check_text(const char *buf, size_t len, const char *path, char *err, size_t errlen);

/* Monotonic wall clock in seconds. */
double pulse_now(void);

/* Host synchronisations made by the calling thread: every backend call that blocks until
 * device work is done (a synchronous copy, a stream or event synchronisation) notes one. A
 * decode step's count is the difference around it on the thread that drives it (thread-local,
 * so a recall thread's waits do not count). */
void pulse_host_sync_note(void);
int64_t pulse_host_syncs(void);

/* Diagnostics: the PULSE_* environment variables that remain, switches for debugging and
 * tests that change no result (the runtime's tuning knobs are params fields, set on the command
 * line: experiments/runtime_opts.h). Read here and nowhere else, each when it is asked for (never
 * by a *_params_init); a value that is not what the variable takes gets one warning on stderr,
 * "NAME=VALUE: expected ...; ignored", and the default stands.
 *   PULSE_SYNC=0|1            synchronise after every kernel launch (pulse_sync_each_launch)
 *   PULSE_OFFLOAD_VERIFY=0|1  pulse run checks every resident block after every offload step
 *   PULSE_OFFLOAD_TRACE=0|1   the offload planner thread's jobs on stderr
 *   PULSE_PROGRESS=0|1        progress lines off, or forced (default: on a terminal only)
 *   PULSE_WAIT_TIMEOUT_S=S    a host wait for a recall's flag aborts after S s (default 120)
 *   PULSE_STACKS_AFTER_S=S    every thread's stack after S s without progress (watchdog.h)
 *   PULSE_RECALL_FAULT=SPEC   faults injected into the recall engine's copies (recall_fault.h) */
enum pulse_diag {
    PULSE_DIAG_SYNC = 0,
    PULSE_DIAG_OFFLOAD_VERIFY,
    PULSE_DIAG_OFFLOAD_TRACE,
    PULSE_DIAG_PROGRESS,
    PULSE_DIAG_WAIT_TIMEOUT_S,
    PULSE_DIAG_STACKS_AFTER_S,
    PULSE_DIAG_RECALL_FAULT,
    PULSE_DIAGS
};
/* The variable's name ("PULSE_SYNC"), and its raw value in the environment (NULL: unset). */
const char *pulse_diag_name(enum pulse_diag d);
const char *pulse_diag_raw(enum pulse_diag d);
/* A switch or number diagnostic, read now: 1 and the value in *out when set and valid; 0 when
 * unset, or set to anything else (after the warning). */
int pulse_diag_number(enum pulse_diag d, double *out);
/* A switch diagnostic: 1 when set to 1, else 0. */
int pulse_diag_switch(enum pulse_diag d);
/* A text diagnostic (PULSE_RECALL_FAULT): its value, NULL when unset or empty. */
const char *pulse_diag_text(enum pulse_diag d);

/* Waits on the calling thread until (int32_t)(*flag - value) >= 0 (a flag another thread or a
 * device stream writes), spinning, then yielding. A flag that has not reached the value after
 * PULSE_WAIT_TIMEOUT_S seconds (default 120; a stuck recall) aborts with what was awaited. */
void pulse_wait_flag(const uint32_t *flag, uint32_t value, const char *what);

/* PULSE_SYNC=1 (read once per process): synchronise after every kernel launch (debugging). */
int pulse_sync_each_launch(void);

#define PULSE_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define PULSE_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PULSE_MAX(a, b) ((a) > (b) ? (a) : (b))
#define PULSE_CEIL_DIV(a, b) (((a) + (b)-1) / (b))

#ifdef __cplusplus
}
#endif
#endif
