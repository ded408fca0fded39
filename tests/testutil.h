/* Minimal test helpers: each test file is one executable; a failed expectation prints
 * file:line and the values, and the process exits 1 at the end. Exit 77 means "skipped". */
#ifndef PULSE_TESTUTIL_H
#define PULSE_TESTUTIL_H

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int tu_failures;
static int tu_checks;

#define EXPECT(cond)                                                                               \
    do {                                                                                           \
        tu_checks++;                                                                               \
        if (!(cond)) {                                                                             \
            tu_failures++;                                                                         \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);                    \
        }                                                                                          \
    } while (0)

#define EXPECT_EQ_INT(a, b)                                                                        \
    do {                                                                                           \
        long long va_ = (long long)(a), vb_ = (long long)(b);                                      \
        tu_checks++;                                                                               \
        if (va_ != vb_) {                                                                          \
            tu_failures++;                                                                         \
            fprintf(stderr, "%s:%d: %s == %s: %lld != %lld\n", __FILE__, __LINE__, #a, #b, va_,    \
                    vb_);                                                                          \
        }                                                                                          \
    } while (0)

#define EXPECT_NEAR(a, b, tol)                                                                     \
    do {                                                                                           \
        double va_ = (double)(a), vb_ = (double)(b);                                               \
        tu_checks++;                                                                               \
        if (!(fabs(va_ - vb_) <= (tol))) {                                                         \
            tu_failures++;                                                                         \
            fprintf(stderr, "%s:%d: %s ~ %s: %.9g vs %.9g (tol %g)\n", __FILE__, __LINE__, #a, #b, \
                    va_, vb_, (double)(tol));                                                      \
        }                                                                                          \
    } while (0)

#define EXPECT_STR_CONTAINS(hay, needle)                                                           \
    do {                                                                                           \
        const char *h_ = (hay), *n_ = (needle);                                                    \
        tu_checks++;                                                                               \
        if (!h_ || !strstr(h_, n_)) {                                                              \
            tu_failures++;                                                                         \
            fprintf(stderr, "%s:%d: \"%s\" does not contain \"%s\"\n", __FILE__, __LINE__,         \
                    h_ ? h_ : "(null)", n_);                                                       \
        }                                                                                          \
    } while (0)

#define EXPECT_STR_EQ(got, want)                                                                   \
    do {                                                                                           \
        const char *g_ = (got), *w_ = (want);                                                      \
        tu_checks++;                                                                               \
        if (!g_ || strcmp(g_, w_)) {                                                               \
            tu_failures++;                                                                         \
            fprintf(stderr, "%s:%d: %s: \"%s\" != \"%s\"\n", __FILE__, __LINE__, #got,             \
                    g_ ? g_ : "(null)", w_);                                                       \
        }                                                                                          \
    } while (0)

/* Runs `$PULSE_BIN ARGS` (the pulse command; ctest sets PULSE_BIN) through the shell, capturing
 * stdout and stderr into out (NUL-terminated, truncated to outlen - 1). Returns the exit code,
 * or -1 when the command could not run or died on a signal. */
static inline int tu_run_pulse(const char *args, char *out, size_t outlen)
{
    const char *bin = getenv("PULSE_BIN");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", bin ? bin : "./build/pulse", args);
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, outlen - 1, p) : 0;
    out[n] = 0;
    int st = p ? pclose(p) : -1;
    return (st != -1 && WIFEXITED(st)) ? WEXITSTATUS(st) : -1;
}

/* The result JSON of `pulse ARGS --out TMP`, which must exit 0 (checked); out receives its
 * output. NULL (a failed check) when it did not run or wrote no JSON; the caller decrefs. */
static inline json_t *tu_run_pulse_json(const char *args, char *out, size_t outlen)
{
    char path[] = "/tmp/pulse_run_XXXXXX", cmd[2048];
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    snprintf(cmd, sizeof cmd, "%s --out %s", args, path);
    const int code = tu_run_pulse(cmd, out, outlen);
    EXPECT_EQ_INT(code, 0);
    if (code) fprintf(stderr, "%s: %s", cmd, out);
    json_error_t je;
    json_t *r = json_load_file(path, 0, &je);
    remove(path);
    EXPECT(r != NULL);
    return r;
}

/* Ends main(): prints a summary; a test file that checked nothing fails. */
/* The real model (scripts/setup-model.sh): PULSE_GEMMA_GGUF, else
 * $PULSE_SRC/models/gemma3-270m-q4_k_m.gguf. Returns 0 when it is readable; otherwise prints
 * that `test` is skipped and returns -1 (the test then exits 77). */
static inline int tu_gemma_path(const char *test, char *path, size_t len)
{
    const char *env = getenv("PULSE_GEMMA_GGUF"), *src = getenv("PULSE_SRC");
    if (env && *env)
        snprintf(path, len, "%s", env);
    else
        snprintf(path, len, "%s/models/gemma3-270m-q4_k_m.gguf", src ? src : ".");
    FILE *f = fopen(path, "rb");
    if (f) {
        fclose(f);
        return 0;
    }
    fprintf(stderr,
            "%s: %s not found (scripts/setup-model.sh installs it; or set PULSE_GEMMA_GGUF): "
            "skipped\n",
            test, path);
    return -1;
}

/* PULSE_GPU_TEST_QUICK=1: the GPU tests run a few of their cases (each kernel and path still
 * once), for the compute-sanitizer tools that run a program many times slower (gpu-suite.sh's
 * sanitize-all). */
static inline int tu_quick(void)
{
    const char *q = getenv("PULSE_GPU_TEST_QUICK");
    return q && q[0] == '1' && q[1] == 0;
}
/* The cases of table `arr` a test runs: all, or the first two when quick. */
#define TU_CASES(arr) (tu_quick() && PULSE_ARRAY_LEN(arr) > 2 ? (size_t)2 : PULSE_ARRAY_LEN(arr))

/* PULSE_GPU_TEST_CASES=A-B (or A): a test that numbers its cases runs only those from A to B
 * (so a compute-sanitizer tool whose own memory grows over a run can take a test in parts,
 * each a process of its own); unset: every case. A value not of that form ends the test. */
static inline int tu_case_on(long i)
{
    const char *v = getenv("PULSE_GPU_TEST_CASES");
    if (!v) return 1;
    long a = -1, b = -1;
    int used = 0;
    if (!((sscanf(v, "%ld-%ld%n", &a, &b, &used) == 2 || sscanf(v, "%ld%n", &a, &used) == 1) &&
          used == (int)strlen(v) && strspn(v, "0123456789-") == strlen(v) && v[0] != '-' &&
          strchr(v, '-') == strrchr(v, '-'))) {
        fprintf(stderr, "PULSE_GPU_TEST_CASES='%s': expected A-B or A (case numbers >= 0)\n", v);
        exit(2);
    }
    if (b < 0) b = a;
    if (b < a) {
        fprintf(stderr, "PULSE_GPU_TEST_CASES='%s': the range ends before it starts\n", v);
        exit(2);
    }
    return i >= a && i <= b;
}

/* Reads fd to its end (or until buf, of len >= 1 bytes, is full) into buf, NUL-terminated;
 * closes fd. Returns the bytes read. */
static inline size_t tu_read_all(int fd, char *buf, size_t len)
{
    size_t n = 0;
    for (ssize_t r; n + 1 < len && (r = read(fd, buf + n, len - 1 - n)) > 0;)
        n += (size_t)r;
    buf[n] = 0;
    close(fd);
    return n;
}

/* Whether fn(arg), run in a child process, aborts (a PULSE_CHECK's refusal); its stderr into
 * why (len >= 1 bytes, NUL-terminated). 0 when the child could not be made. */
static inline int tu_aborts(void (*fn)(const void *), const void *arg, char *why, size_t len)
{
    int fd[2];
    why[0] = 0;
    if (pipe(fd) != 0) return 0;
    fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        fn(arg);
        _exit(0);
    }
    close(fd[1]);
    tu_read_all(fd[0], why, len);
    int st = 0;
    waitpid(pid, &st, 0);
    return pid > 0 && WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
}

static inline int tu_finish(const char *name)
{
    if (tu_checks == 0) {
        fprintf(stderr, "%s: no checks ran\n", name);
        return 1;
    }
    fprintf(stderr, "%s: %d checks, %d failed\n", name, tu_checks, tu_failures);
    return tu_failures ? 1 : 0;
}

#endif
