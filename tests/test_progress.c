/* Set-up progress lines (runtime/progress.h):
 * - forced on, a phase prints its line at the first update, refreshes no faster than the
 *   interval, and ends with the final amounts and a newline; a phase with no amounts shows the
 *   time only; updates from several threads print whole lines;
 * - nothing at all when off, when the stream is not a terminal (auto), or when the phase ends
 *   before the delay;
 * - under a pseudo-terminal (openpty) the auto mode prints;
 * - `pulse run` of an offload policy prints no progress when its stderr is a pipe, and prints
 *   the calibration's and the prompt KV's lines when PULSE_PROGRESS=1 forces them. */
#include <pthread.h>
#include <pty.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "progress.h"
#include "testutil.h"

static char buf[1 << 16];

/* Everything written to f so far, NUL-terminated, into buf. */
static const char *contents(FILE *f)
{
    fflush(f);
    long n = ftell(f);
    rewind(f);
    size_t got = fread(buf, 1, n > 0 && n < (long)sizeof buf ? (size_t)n : sizeof buf - 1, f);
    buf[got] = 0;
    fseek(f, 0, SEEK_END);
    return buf;
}

static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

static void test_forced(void)
{
    FILE *f = tmpfile();
    progress_configure(PROGRESS_ON, f, 0.0);
    EXPECT(progress_enabled());
    struct progress p;
    progress_begin(&p, "pin", "GB", 30.7);
    progress_update(&p, 12.0);
    progress_update(&p, 13.0); /* within the interval: no line */
    EXPECT_STR_CONTAINS(contents(f), "\rpin 12.0/30.7 GB ");
    EXPECT(strstr(contents(f), "13.0") == NULL);
    EXPECT(strchr(contents(f), '\n') == NULL);
    progress_end(&p, 30.7);
    EXPECT_STR_CONTAINS(contents(f), "\rpin 30.7/30.7 GB ");
    EXPECT(contents(f)[strlen(contents(f)) - 1] == '\n');
    EXPECT_EQ_INT(count(contents(f), "\r"), 2);
    fclose(f);
    /* no amounts: the label and the time */
    f = tmpfile();
    progress_configure(PROGRESS_ON, f, 0.0);
    progress_begin(&p, "pin 4.0 GB", "GB", -1);
    progress_update(&p, 0);
    progress_end(&p, 0);
    EXPECT_STR_CONTAINS(contents(f), "\rpin 4.0 GB 0.");
    EXPECT(strchr(contents(f), '/') == NULL);
    EXPECT_EQ_INT(count(contents(f), "\n"), 1);
    fclose(f);
}

/* Off, auto on a file, and a phase shorter than the delay print nothing. */
static void test_silent(void)
{
    FILE *f = tmpfile();
    struct progress p;
    progress_configure(PROGRESS_OFF, f, 0.0);
    EXPECT(!progress_enabled());
    progress_begin(&p, "calibration", "streams", 16);
    progress_update(&p, 3);
    progress_end(&p, 16);
    progress_configure(PROGRESS_AUTO, f, 0.0); /* a file is not a terminal */
    EXPECT(!progress_enabled());
    progress_begin(&p, "calibration", "streams", 16);
    progress_update(&p, 3);
    progress_end(&p, 16);
    progress_configure(PROGRESS_ON, f, 60.0); /* ends long before its delay */
    progress_begin(&p, "calibration", "streams", 16);
    progress_update(&p, 3);
    progress_end(&p, 16);
    EXPECT_EQ_INT(strlen(contents(f)), 0);
    fclose(f);
}

static struct progress g_shared;

static void *updater(void *arg)
{
    for (int i = 0; i < 2000; i++)
        progress_update(&g_shared, (double)(intptr_t)arg);
    return NULL;
}

/* Threads updating one phase: every line is whole (starts with \r and the label). */
static void test_threads(void)
{
    FILE *f = tmpfile();
    progress_configure(PROGRESS_ON, f, 0.0);
    progress_begin(&g_shared, "prompt KV", "layers", 40);
    pthread_t th[4];
    for (intptr_t i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, updater, (void *)i);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    progress_end(&g_shared, 40);
    const char *s = contents(f);
    EXPECT_EQ_INT(count(s, "\r"), count(s, "\rprompt KV "));
    EXPECT(count(s, "\r") >= 2);
    fclose(f);
}

/* The auto mode on a pseudo-terminal: a child writes its phase to stderr = the terminal. */
static void test_pty(void)
{
    int master, slave;
    if (openpty(&master, &slave, NULL, NULL, NULL) != 0) {
        fprintf(stderr, "test_progress: openpty failed: the terminal case is not run\n");
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(slave, 2);
        close(master);
        progress_configure(PROGRESS_AUTO, NULL, 0.0);
        struct progress p;
        progress_begin(&p, "pty phase", "GB", 2.0);
        progress_update(&p, 1.0);
        progress_end(&p, 2.0);
        _exit(progress_enabled() ? 0 : 3);
    }
    close(slave);
    int st = 0;
    waitpid(pid, &st, 0);
    EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char got[4096];
    size_t n = 0;
    ssize_t r;
    /* the child has exited: read what the terminal holds (EIO once it is drained) */
    while (n < sizeof got - 1 && (r = read(master, got + n, sizeof got - 1 - n)) > 0)
        n += (size_t)r;
    got[n] = 0;
    close(master);
    EXPECT_STR_CONTAINS(got, "pty phase 1.0/2.0 GB");
    EXPECT_STR_CONTAINS(got, "pty phase 2.0/2.0 GB");
}

/* pulse run: silent on a pipe; the phases' lines when forced. */
static void test_pulse_run(void)
{
    static char out[1 << 16];
    const char *args = "run --backend cpu --policy arkvale --workload uniform:300:2 --output-len 4 "
                       "--budget-tokens 32";
    unsetenv("PULSE_PROGRESS");
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 0);
    EXPECT(strchr(out, '\r') == NULL);
    EXPECT(strstr(out, "calibration ") == NULL && strstr(out, "prompt KV") == NULL);
    setenv("PULSE_PROGRESS", "1", 1);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 0);
    unsetenv("PULSE_PROGRESS");
    EXPECT_STR_CONTAINS(out, "\rcalibration ");
    EXPECT_STR_CONTAINS(out, " streams ");
    EXPECT_STR_CONTAINS(out, "\rprompt KV (request 0, 300 tokens) ");
    EXPECT_STR_CONTAINS(out, "\rprompt KV (request 1, 300 tokens) 4.0/4.0 layers ");
}

int main(void)
{
    test_forced();
    test_silent();
    test_threads();
    test_pty();
    test_pulse_run();
    return tu_finish("test_progress");
}
