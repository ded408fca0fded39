/* The progress watchdog (runtime/sched/watchdog.h): in a child process with PULSE_STACKS_AFTER_S set,
 * a run that stops kicking gets every thread's stack on stderr (the main thread, a blocked
 * helper thread and the watchdog's own), then the executable mappings; one that keeps kicking
 * gets nothing; a bad value is refused with a message. */
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "testutil.h"
#include "watchdog.h"

static void *blocked(void *arg)
{
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

/* Runs `kick` (1: kicks every 50 ms) for 1.2 s in a child with PULSE_STACKS_AFTER_S=value;
 * its stderr into out. */
static void child(const char *value, int kick, char *out, size_t len)
{
    int fd[2];
    EXPECT_EQ_INT(pipe(fd), 0);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], STDERR_FILENO);
        close(fd[0]);
        setenv("PULSE_STACKS_AFTER_S", value, 1);
        pthread_t th;
        pthread_create(&th, NULL, blocked, NULL);
        watchdog_start();
        for (double t0 = pulse_now(); pulse_now() - t0 < 1.2;) {
            if (kick) watchdog_kick();
            usleep(50000);
        }
        _exit(0);
    }
    close(fd[1]);
    tu_read_all(fd[0], out, len);
    int st = 0;
    waitpid(pid, &st, 0);
    EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static int count(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p++)
        n++;
    return n;
}

int main(void)
{
    static char out[1 << 16];
    child("0.3", 0, out, sizeof out);
    EXPECT(strstr(out, "no progress for 0.3 s") != NULL);
    EXPECT(strstr(out, "=== pulse watchdog: every thread's stack") != NULL);
    EXPECT(count(out, "--- thread ") >= 3); /* main, the blocked one, the watchdog */
    EXPECT(strstr(out, "executable mappings") != NULL);
    EXPECT(strstr(out, "threads wrote their stack") != NULL);
    child("0.3", 1, out, sizeof out);
    EXPECT(strstr(out, "pulse watchdog") == NULL);
    child("soon", 0, out, sizeof out);
    EXPECT(strstr(out, "PULSE_STACKS_AFTER_S=soon: expected a number in") != NULL);
    EXPECT(strstr(out, "pulse watchdog") == NULL);
    return tu_finish("test_watchdog");
}
