/* The progress watchdog (watchdog.h). */
#include "watchdog.h"

#include <dirent.h>
#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#define STACK_DEPTH 48

static _Atomic double last_kick;
static _Atomic int started;
static _Atomic int dumped_by; /* threads that wrote their stack in the current dump */

/* Each thread writes its own stack (backtrace_symbols_fd does not allocate). */
static void on_signal(int sig)
{
    (void)sig;
    void *frames[STACK_DEPTH];
    const int n = backtrace(frames, STACK_DEPTH);
    char head[96];
    const int len = snprintf(head, sizeof head, "--- thread %ld:\n", (long)syscall(SYS_gettid));
    if (len > 0) (void)!write(STDERR_FILENO, head, (size_t)len);
    backtrace_symbols_fd(frames, n, STDERR_FILENO);
    atomic_fetch_add(&dumped_by, 1);
}

/* The executable mappings of the process, for addr2line (frames of a PIE binary print as
 * binary(+offset): addr2line -f -e binary offset). */
static void write_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return;
    char line[512];
    fputs("--- executable mappings (address range, offset, file):\n", stderr);
    while (fgets(line, sizeof line, f))
        if (strstr(line, " r-xp ")) fputs(line, stderr);
    fclose(f);
}

void watchdog_dump(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR2, &sa, NULL);
    DIR *d = opendir("/proc/self/task");
    if (!d) return;
    const pid_t pid = getpid(), self = (pid_t)syscall(SYS_gettid);
    atomic_store(&dumped_by, 0);
    int sent = 0;
    fprintf(stderr, "=== pulse watchdog: every thread's stack (pid %d)\n", (int)pid);
    /* one thread at a time, so that the stacks do not interleave; a thread that does not take
     * the signal within a second is passed over */
    for (struct dirent *e; (e = readdir(d));) {
        const pid_t tid = (pid_t)atoi(e->d_name);
        if (tid <= 0) continue;
        const int before = atomic_load(&dumped_by);
        if (tid == self) {
            on_signal(SIGUSR2);
        } else if (syscall(SYS_tgkill, pid, tid, SIGUSR2) != 0) {
            continue;
        }
        sent++;
        for (int i = 0; i < 100 && atomic_load(&dumped_by) == before; i++) {
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    closedir(d);
    write_maps();
    fprintf(stderr, "=== %d of %d threads wrote their stack\n", atomic_load(&dumped_by), sent);
}

static void *watch(void *arg)
{
    const double after = *(const double *)arg;
    for (;;) {
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
        if (pulse_now() - atomic_load(&last_kick) < after) continue;
        fprintf(stderr, "pulse watchdog: no progress for %.1f s (PULSE_STACKS_AFTER_S)\n", after);
        watchdog_dump();
        atomic_store(&last_kick, pulse_now());
    }
    return NULL;
}

void watchdog_start(void)
{
    static double after;
    if (!pulse_diag_number(PULSE_DIAG_STACKS_AFTER_S, &after)) return;
    int expect = 0;
    if (!atomic_compare_exchange_strong(&started, &expect, 1)) return;
    atomic_store(&last_kick, pulse_now());
    pthread_t th;
    if (pthread_create(&th, NULL, watch, &after) == 0) pthread_detach(th);
}

void watchdog_kick(void)
{
    if (atomic_load_explicit(&started, memory_order_relaxed))
        atomic_store_explicit(&last_kick, pulse_now(), memory_order_relaxed);
}
