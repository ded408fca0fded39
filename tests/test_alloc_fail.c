/* Allocation failures are results (issue: reliability): for every policy, each allocation that
 * making and running a small serving run performs (engine, KV cache, query source, policy
 * context with its offload runtime, host pool, recall engine, serving loop) is refused in turn
 * (mem_fail_after), each in a child process: the run must end with a clean error or, where the
 * failure is tolerated, with the tokens of the clean run; never a crash, never a leak (the memory
 * counters come back to where they were; ASan checks the rest in CI). Prints, per policy, the
 * allocation points tried and how each ended. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mem.h"
#include "pi_serve.h"

enum { ENDED_ERROR, ENDED_OK, ENDED_LEAK, ENDED_WRONG, ENDED_CRASH, ENDED_KINDS };
static const char *ended_name[ENDED_KINDS] = {"clean error", "tolerated, same tokens", "LEAK",
                                              "WRONG TOKENS", "CRASH"};

static int64_t alloc_calls(void)
{
    struct mem_stats m;
    mem_get_stats(&m);
    int64_t n = 0;
    for (int k = 0; k < MEM_KINDS; k++)
        n += (int64_t)m.alloc_calls[k];
    return n;
}

/* The run in the child with allocation `fail_at` refused; its exit status. */
static int child_run(const struct pi_cfg *c, int64_t fail_at, const struct pi_out *clean)
{
    struct mem_stats m0, m1;
    mem_get_stats(&m0);
    mem_fail_after(fail_at);
    struct pi_out r;
    serve(c, &r);
    mem_fail_after(-1);
    const int same = r.rc == 0 && same_tokens(&clean->w, &r.w);
    const int rc = r.rc;
    workload_free(&r.w);
    mem_get_stats(&m1);
    for (int k = 0; k < MEM_KINDS; k++)
        if (m1.live_bytes[k] != m0.live_bytes[k]) return ENDED_LEAK;
    if (rc != 0) return ENDED_ERROR;
    return same || mem_failures_injected() == 0 ? ENDED_OK : ENDED_WRONG;
}

static void policy_case(struct pi_cfg c)
{
    /* the clean run: its tokens and how many allocations it makes */
    const int64_t a0 = alloc_calls();
    struct pi_out clean;
    serve(&c, &clean);
    const int64_t n = alloc_calls() - a0;
    EXPECT_EQ_INT(clean.rc, 0);
    EXPECT(n > 10);
    int ended[ENDED_KINDS] = {0};
    for (int64_t i = 0; i < n; i++) {
        fflush(stdout);
        fflush(stderr);
        const pid_t pid = fork();
        if (pid == 0) {
            /* the child's messages (the refusals' one-line errors) are not the test's */
            if (!getenv("ALLOC_FAIL_VERBOSE") && !freopen("/dev/null", "w", stderr))
                _exit(ENDED_CRASH);
            alarm(60);
            _exit(child_run(&c, i, &clean));
        }
        int st = 0;
        waitpid(pid, &st, 0);
        const int e =
            WIFEXITED(st) && WEXITSTATUS(st) < ENDED_CRASH ? WEXITSTATUS(st) : ENDED_CRASH;
        ended[e]++;
        if (e >= ENDED_LEAK)
            fprintf(stderr, "%s%s%s: allocation %lld of %lld refused: %s\n", c.policy,
                    c.admission ? " " : "", c.admission ? c.admission : "", (long long)i,
                    (long long)n, ended_name[e]);
    }
    printf("%s%s%s: %lld allocation points refused in turn:", c.policy, c.admission ? " " : "",
           c.admission ? c.admission : "", (long long)n);
    for (int k = 0; k < ENDED_KINDS; k++)
        printf(" %d %s%s", ended[k], ended_name[k], k + 1 < ENDED_KINDS ? "," : "\n");
    EXPECT(ended[ENDED_ERROR] > 0);
    EXPECT_EQ_INT(ended[ENDED_LEAK] + ended[ENDED_WRONG] + ended[ENDED_CRASH], 0);
    workload_free(&clean.w);
}

int main(void)
{
    const struct pi_cfg base = {.spec = "lengths:300,170,90,260",
                                .out_len = 4,
                                .max_batch = 2,
                                .budget_tokens = 64,
                                .no_verify = 1};
    struct pi_cfg c = base;
    c.policy = "vanilla";
    policy_case(c);
    c = base;
    c.policy = "arkvale";
    policy_case(c);
    c.policy = "infinigen";
    c.zero_copy = 1;
    policy_case(c);
    c = base;
    c.policy = "pulseinfer";
    c.admission = "fixed:200";
    policy_case(c);
    c.admission = "ioaa";
    c.zero_copy = 1;
    policy_case(c);
    return tu_finish("test_alloc_fail");
}
