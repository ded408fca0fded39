/* A soak of the serving loop on the CPU backend (bounded: seconds in a release build): for
 * every policy, hundreds of requests of random lengths (random:MIN:MAX:COUNT, a different seed
 * each) through a GPU KV budget that holds a few at a time, with faults injected into the
 * recall's copies (every 11th fails; the planner retries a failed recall, and a recall that fails
 * all three attempts ends its batch with an error), kv_cache_check after every step and
 * offload_verify's hot-cache and copy checks after every offload step. Every request ends
 * exactly once (finished with all its tokens, or, if a recall failed every attempt, with an
 * error), and the memory counters are back where they were; on the tiny model and on
 * tiny-gemma3, whose window layers keep their window in rings of GPU pages and whose global
 * layers are offloaded (kv_cache_check asserts every ring row). Also the random: spec itself:
 * deterministic per seed, in range, bad forms refused. */
#include "mem.h"
#include "pi_serve.h"
#include "recall_fault.h"

static void test_random_spec(void)
{
    struct workload a, b, c;
    char err[256];
    EXPECT_EQ_INT(workload_create(&a, "random:5:40:200", 2, 7, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(workload_create(&b, "random:5:40:200", 2, 7, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(workload_create(&c, "random:5:40:200", 2, 8, err, sizeof err), PULSE_OK);
    int same = 1, differ = 0, lo = 1 << 30, hi = 0;
    for (int i = 0; i < a.n; i++) {
        same &= a.reqs[i].prompt_len == b.reqs[i].prompt_len;
        differ += a.reqs[i].prompt_len != c.reqs[i].prompt_len;
        lo = PULSE_MIN(lo, a.reqs[i].prompt_len);
        hi = PULSE_MAX(hi, a.reqs[i].prompt_len);
    }
    EXPECT(same);
    EXPECT(differ > 100);
    EXPECT(lo >= 5 && hi <= 40 && lo <= 7 && hi >= 38); /* the whole range, nothing outside */
    workload_free(&a);
    workload_free(&b);
    workload_free(&c);
    static const char *const bad[] = {"random:5:4:10", "random:0:4:10",   "random:5:40",
                                      "random:5:40:0", "random: 5:40:10", "random:5:40:1x"};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(bad); i++) {
        err[0] = 0;
        EXPECT_EQ_INT(workload_create(&a, bad[i], 2, 1, err, sizeof err), PULSE_ERR_INVALID);
        EXPECT(strstr(err, "random:MIN:MAX:COUNT") != NULL);
    }
}

int main(void)
{
    test_random_spec();
    struct {
        const char *policy, *admission;
        int selection, engine; /* engine: 0 per-block, 1 gather-scatter, 2 zero-copy */
        const char *model;     /* NULL: tiny */
    } cases[] = {{"vanilla", NULL, 0, 0, NULL},
                 {"arkvale", NULL, OFFLOAD_HEADWISE, 0, NULL},
                 {"arkvale", NULL, OFFLOAD_SOLOHEAD, 1, NULL},
                 {"infinigen", NULL, OFFLOAD_SOLOHEAD, 0, NULL},
                 {"infinigen", NULL, OFFLOAD_HEADWISE, 2, NULL},
                 {"pulseinfer", "fixed:150", OFFLOAD_SOLOHEAD, 1, NULL},
                 {"pulseinfer", "ioaa", OFFLOAD_SOLOHEAD, 2, NULL},
                 {"arkvale", NULL, OFFLOAD_HEADWISE, 1, "tiny-gemma3"},
                 {"infinigen", NULL, OFFLOAD_HEADWISE, 2, "tiny-gemma3"},
                 {"pulseinfer", "fixed:150", OFFLOAD_SOLOHEAD, 1, "tiny-gemma3"}};
    int64_t total = 0, finished = 0, failed = 0, lost = 0, faults = 0, steps = 0;
    const int64_t checks0 = pi_check_failures;
    for (size_t i = 0; i < PULSE_ARRAY_LEN(cases); i++) {
        struct recall_fault f;
        char err[256];
        EXPECT_EQ_INT(recall_fault_init(&f, recall_copy_ops_cpu(), "every:11", err, sizeof err),
                      PULSE_OK);
        const struct model_config *m = model_config_find(cases[i].model ? cases[i].model : "tiny");
        struct pi_cfg c = {.model = cases[i].model,
                           .policy = cases[i].policy,
                           .spec = "random:16:300:300",
                           .admission = cases[i].admission,
                           .out_len = 5,
                           .max_batch = 8,
                           .selection = cases[i].selection,
                           .budget_tokens = 48,
                           .ops = cases[i].engine == 2 ? NULL : &f.ops,
                           .kv_budget = (size_t)model_kv_bytes_per_token(m) * 305 * 5,
                           .zero_copy = cases[i].engine == 2,
                           .check_steps = 1,
                           .seed = 100 + i};
        struct mem_stats m0, m1;
        mem_get_stats(&m0);
        const int64_t steps0 = pi_checked_steps;
        struct pi_out r;
        serve(&c, &r);
        EXPECT_EQ_INT(r.rc, 0);
        int n_fin = 0, n_err = 0, n_lost = 0;
        for (int q = 0; q < r.w.n; q++) {
            const struct request *rq = &r.w.reqs[q];
            if (rq->done_s < 0 || rq->slot >= 0)
                n_lost++;
            else if (rq->error)
                n_err++;
            else if (rq->generated == rq->output_len)
                n_fin++;
            else
                n_lost++;
        }
        EXPECT_EQ_INT(n_lost, 0);
        EXPECT_EQ_INT(n_fin + n_err, 300);
        EXPECT_EQ_INT(n_err, (int)r.ctr.requests_failed);
        EXPECT(r.ctr.tokens >= (int64_t)n_fin * 5);
        workload_free(&r.w);
        mem_get_stats(&m1);
        for (int k = 0; k < MEM_KINDS; k++)
            EXPECT_EQ_INT(m1.live_bytes[k], m0.live_bytes[k]);
        if (c.ops) EXPECT(!strcmp(cases[i].policy, "vanilla") || recall_fault_injected(&f) > 0);
        printf("%s%s%s %s %s%s%s: %d requests finished, %d ended with an error, %d lost; %lld "
               "faults injected, %lld steps checked\n",
               cases[i].policy, cases[i].admission ? " " : "",
               cases[i].admission ? cases[i].admission : "",
               !strcmp(cases[i].policy, "vanilla")      ? "-"
               : cases[i].selection == OFFLOAD_HEADWISE ? "headwise"
                                                        : "solohead",
               !strcmp(cases[i].policy, "vanilla") ? "-"
               : cases[i].engine == 0              ? "per-block"
               : cases[i].engine == 1              ? "gather-scatter"
                                                   : "zero-copy",
               cases[i].model ? " on " : "", cases[i].model ? cases[i].model : "", n_fin, n_err, n_lost, (long long)recall_fault_injected(&f),
               (long long)(pi_checked_steps - steps0));
        total += r.w.n, finished += n_fin, failed += n_err, lost += n_lost;
        faults += recall_fault_injected(&f), steps += pi_checked_steps - steps0;
    }
    EXPECT_EQ_INT(pi_check_failures - checks0, 0);
    printf("soak: %lld requests (%lld finished, %lld ended with an error, %lld lost), %lld faults "
           "injected, %lld steps with the cache checked after each\n",
           (long long)total, (long long)finished, (long long)failed, (long long)lost,
           (long long)faults, (long long)steps);
    return tu_finish("test_soak");
}
