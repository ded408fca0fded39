/* Arrival processes of workloads (workloads/workload.h, workload_set_arrivals): all at once by
 * default; poisson:RATE has exponential gaps of mean 1/RATE (coefficient of variation 1);
 * gamma:RATE:CV has gaps of mean 1/RATE and the asked CV, below and above 1; times never
 * decrease; the same seed gives the same times and another seed others; bad specs are one-line
 * errors; pulse run with arrivals serves every request at or after its arrival and the JSON
 * records the process and each arrival. Mooncake-format traces (trace:FILE): each request's
 * lengths and arrival from its line; a bad line is an error naming its number. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "testutil.h"
#include "workloads/workload.h"

/* Mean and coefficient of variation of the gaps of w. */
static void gaps(const struct workload *w, double *mean, double *cv)
{
    double s = 0, s2 = 0, prev = 0;
    for (int i = 0; i < w->n; i++) {
        const double g = w->reqs[i].arrival_s - prev;
        EXPECT(g >= 0);
        prev = w->reqs[i].arrival_s;
        s += g, s2 += g * g;
    }
    *mean = s / w->n;
    *cv = sqrt(fmax(0, s2 / w->n - *mean * *mean)) / *mean;
}

static void test_processes(void)
{
    char err[256];
    struct workload w, v;
    EXPECT_EQ_INT(workload_create(&w, "uniform:10:20000", 1, 3, err, sizeof err), PULSE_OK);
    for (int i = 0; i < w.n; i++)
        EXPECT(w.reqs[i].arrival_s == 0);
    struct {
        const char *spec;
        double mean, cv;
    } cases[] = {{"poisson:50", 0.02, 1.0},
                 {"gamma:10:0.5", 0.1, 0.5},
                 {"gamma:200:3", 0.005, 3.0},
                 {"gamma:4.5:1", 1 / 4.5, 1.0}};
    for (size_t k = 0; k < PULSE_ARRAY_LEN(cases); k++) {
        EXPECT_EQ_INT(workload_set_arrivals(&w, cases[k].spec, err, sizeof err), PULSE_OK);
        double mean, cv;
        gaps(&w, &mean, &cv);
        printf("%s: mean gap %.5f s (want %.5f), CV %.3f (want %.2f) over %d arrivals\n",
               cases[k].spec, mean, cases[k].mean, cv, cases[k].cv, w.n);
        EXPECT_NEAR(mean / cases[k].mean, 1.0, 0.05);
        EXPECT_NEAR(cv / cases[k].cv, 1.0, 0.08);
    }
    /* the seed decides the times */
    EXPECT_EQ_INT(workload_create(&v, "uniform:10:20000", 1, 3, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(workload_set_arrivals(&v, "gamma:4.5:1", err, sizeof err), PULSE_OK);
    int same = 1;
    for (int i = 0; i < w.n; i++)
        same &= v.reqs[i].arrival_s == w.reqs[i].arrival_s;
    EXPECT(same);
    workload_free(&v);
    EXPECT_EQ_INT(workload_create(&v, "uniform:10:20000", 1, 4, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(workload_set_arrivals(&v, "gamma:4.5:1", err, sizeof err), PULSE_OK);
    EXPECT(v.reqs[10].arrival_s != w.reqs[10].arrival_s);
    workload_free(&v);
    EXPECT_EQ_INT(workload_set_arrivals(&w, "all", err, sizeof err), PULSE_OK);
    EXPECT(w.reqs[w.n - 1].arrival_s == 0);
    static const char *const bad[] = {"poisson:0",    "poisson:-1", "poisson: 5", "poisson:1e3",
                                      "poisson:0x10", "gamma:5",    "gamma:5:0",  "gamma:5:101",
                                      "gamma:5:1:2",  "poisson:",   "burst:5",    "poisson:5.",
                                      "poisson:.5.5", "gamma::1"};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(bad); i++) {
        err[0] = 0;
        const int rc = workload_set_arrivals(&w, bad[i], err, sizeof err);
        if (!strcmp(bad[i], "poisson:5.")) { /* a trailing point is a decimal: 5 */
            EXPECT_EQ_INT(rc, PULSE_OK);
            continue;
        }
        EXPECT_EQ_INT(rc, PULSE_ERR_INVALID);
        EXPECT_STR_CONTAINS(err, "is not all, poisson:RATE or gamma:RATE:CV");
    }
    workload_free(&w);
}

/* A trace of lines into a temporary file; its path in path. */
static void write_trace(char *path, const char *text)
{
    strcpy(path, "/tmp/pulse_trace_XXXXXX");
    int fd = mkstemp(path);
    if (fd >= 0) {
        EXPECT(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
        close(fd);
    }
}

static void test_trace(void)
{
    char path[64], spec[96], err[256];
    struct workload w;
    write_trace(path, "{\"timestamp\": 1000, \"input_length\": 200, \"output_length\": 3, "
                      "\"hash_ids\": [0]}\n"
                      "{\"timestamp\": 1020, \"input_length\": 700, \"output_length\": 6, "
                      "\"hash_ids\": [0, 1]}\n\n"
                      "{\"timestamp\": 1045.5, \"input_length\": 90, \"output_length\": 2}\n");
    snprintf(spec, sizeof spec, "trace:%s", path);
    EXPECT_EQ_INT(workload_create(&w, spec, 32, 1, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(w.n, 3);
    EXPECT_EQ_INT(w.output_len, 6); /* the longest output */
    EXPECT_EQ_INT(w.reqs[1].prompt_len, 700);
    EXPECT_EQ_INT(w.reqs[2].output_len, 2);
    EXPECT_NEAR(w.reqs[0].arrival_s, 0.0, 1e-12); /* after the first request's timestamp */
    EXPECT_NEAR(w.reqs[1].arrival_s, 0.020, 1e-12);
    EXPECT_NEAR(w.reqs[2].arrival_s, 0.0455, 1e-12);
    EXPECT_EQ_INT(workload_max_tokens(&w), 706);
    EXPECT(!strcmp(w.arrival, "trace"));
    workload_free(&w);
    unlink(path);
    struct {
        const char *text, *msg;
    } bad[] = {
        {"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n{\"timestamp\": 1,",
         ":2: "},
        {"{\"timestamp\": 0, \"output_length\": 1}\n", ":1: input_length: expected an integer"},
        {"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 0}\n",
         ":1: output_length: expected an integer"},
        {"{\"timestamp\": -1, \"input_length\": 5, \"output_length\": 1}\n", ":1: timestamp"},
        {"{\"timestamp\": 9, \"input_length\": 5, \"output_length\": 1}\n"
         "{\"timestamp\": 3, \"input_length\": 5, \"output_length\": 1}\n",
         ":2: timestamp 3 is before the previous request's 9"},
        {"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1, \"x\"]}",
         ":1: hash_ids: a block id is not an integer"},
        {"[1, 2]\n", ":1: not a JSON object"},
        {"\n\n", "no requests in the trace"},
    };
    for (size_t i = 0; i < PULSE_ARRAY_LEN(bad); i++) {
        write_trace(path, bad[i].text);
        snprintf(spec, sizeof spec, "trace:%s", path);
        err[0] = 0;
        EXPECT_EQ_INT(workload_create(&w, spec, 32, 1, err, sizeof err), PULSE_ERR_INVALID);
        EXPECT_STR_CONTAINS(err, bad[i].msg);
        EXPECT(w.reqs == NULL);
        unlink(path);
    }
    /* a NUL byte in line 2: refused with its line, not every line after it dropped */
    {
        static const char nul_text[] = "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n"
                                       "{\"timestamp\": 1, \"input_length\": 5,\0 \"output_length\": 1}\n"
                                       "{\"timestamp\": 2, \"input_length\": 5, \"output_length\": 1}\n";
        FILE *f = fopen(path, "wb");
        EXPECT(f != NULL);
        if (f) fwrite(nul_text, 1, sizeof nul_text - 1, f), fclose(f);
        snprintf(spec, sizeof spec, "trace:%s", path);
        err[0] = 0;
        EXPECT_EQ_INT(workload_create(&w, spec, 32, 1, err, sizeof err), PULSE_ERR_INVALID);
        EXPECT_STR_CONTAINS(err, ": line 2: a NUL byte (not a text file)");
        EXPECT(w.reqs == NULL);
        unlink(path);
    }
    EXPECT_EQ_INT(workload_create(&w, "trace:/tmp", 32, 1, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "/tmp: is a directory, not a trace");
    EXPECT_EQ_INT(workload_create(&w, "trace:/dev/zero", 32, 1, err, sizeof err),
                  PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "/dev/zero: is not a regular file");
    EXPECT_EQ_INT(workload_create(&w, "trace:/nonexistent.jsonl", 32, 1, err, sizeof err),
                  PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "/nonexistent.jsonl");
}

static char out[1 << 16];

static void test_run(void)
{
    char path[] = "/tmp/pulse_arrival_XXXXXX", cmd[512];
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    snprintf(cmd, sizeof cmd,
             "run --backend cpu --model tiny --workload uniform:32:12 --output-len 3 --arrival "
             "gamma:400:2 --out %s",
             path);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
    json_error_t je;
    json_t *r = json_load_file(path, 0, &je);
    EXPECT(r != NULL);
    if (r) {
        EXPECT(
            !strcmp(json_string_value(json_object_get(json_object_get(r, "workload"), "arrival")),
                    "gamma:400:2"));
        json_t *reqs = json_object_get(r, "requests"), *q;
        size_t i;
        double last = -1;
        int n = 0;
        json_array_foreach(reqs, i, q)
        {
            const double a = json_number_value(json_object_get(q, "arrival_ms"));
            EXPECT(a >= 0);
            EXPECT(json_number_value(json_object_get(q, "admit_ms")) >= 0); /* after its arrival */
            EXPECT(!strcmp(json_string_value(json_object_get(q, "status")), "ok"));
            last = fmax(last, a);
            n++;
        }
        EXPECT_EQ_INT(n, 12);
        EXPECT(last > 0);
        json_decref(r);
    }
    EXPECT_EQ_INT(
        tu_run_pulse("run --backend cpu --model tiny --arrival poisson:x", out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "--arrival: 'poisson:x' is not");
    /* a trace whose last request comes a day later is refused at once (exit 2), not slept
     * through; with its times replaced it runs */
    remove(path);
    write_trace(path, "{\"timestamp\": 0, \"input_length\": 40, \"output_length\": 2}\n"
                      "{\"timestamp\": 86400000, \"input_length\": 40, \"output_length\": 2}\n");
    snprintf(cmd, sizeof cmd, "run --backend cpu --model tiny --workload trace:%s", path);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "the last request arrives 86400 s after the first");
    snprintf(cmd, sizeof cmd, "run --backend cpu --model tiny --workload trace:%s --arrival all",
             path);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
    remove(path);
}

static int by_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* servegen:MEAN:COUNT: the log-normal's median is MEAN exp(-sigma^2 / 2) and its p90 / p50 is
 * exp(1.2816 sigma) (the ServeGen m-large fit's 2371 / 601 = 3.945); clipped to [64, 4 MEAN];
 * the same seed gives the same lengths; bad specs are refused. */
static void test_servegen(void)
{
    struct workload w, v;
    char err[256];
    const int n = 20000;
    const double mean = 16384;
    EXPECT_EQ_INT(workload_create(&w, "servegen:16384:20000", 4, 7, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(workload_create(&v, "servegen:16384:20000", 4, 7, err, sizeof err), PULSE_OK);
    static int len[20000];
    int same = 1, lo = 1 << 30, hi = 0;
    for (int i = 0; i < n; i++) {
        len[i] = w.reqs[i].prompt_len;
        same &= len[i] == v.reqs[i].prompt_len;
        lo = len[i] < lo ? len[i] : lo;
        hi = len[i] > hi ? len[i] : hi;
    }
    EXPECT(same);
    EXPECT(lo >= 64 && hi <= 4 * 16384);
    qsort(len, (size_t)n, sizeof len[0], by_int);
    const double p50 = len[n / 2], p90 = len[n * 9 / 10];
    const double want50 = mean * exp(-0.5 * WORKLOAD_SERVEGEN_SIGMA * WORKLOAD_SERVEGEN_SIGMA);
    printf("servegen:16384: p50 %.0f (want %.0f), p90/p50 %.3f (want %.3f), range [%d, %d]\n", p50,
           want50, p90 / p50, 2371.0 / 601.0, lo, hi);
    EXPECT_NEAR(p50 / want50, 1.0, 0.03);
    EXPECT_NEAR(p90 / p50, 2371.0 / 601.0, 0.15);
    workload_free(&w);
    workload_free(&v);
    EXPECT_EQ_INT(workload_create(&w, "servegen:15:4", 4, 1, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "servegen:MEAN:COUNT");
    EXPECT_EQ_INT(workload_create(&w, "servegen:1000", 4, 1, err, sizeof err), PULSE_ERR_INVALID);
    /* lognormal:MEAN:SIGMA:COUNT with servegen's sigma is servegen */
    EXPECT_EQ_INT(workload_create(&w, "lognormal:16384:1.0709:50", 4, 7, err, sizeof err),
                  PULSE_OK);
    EXPECT_EQ_INT(workload_create(&v, "servegen:16384:50", 4, 7, err, sizeof err), PULSE_OK);
    for (int i = 0; i < 50; i++)
        EXPECT_EQ_INT(w.reqs[i].prompt_len, v.reqs[i].prompt_len);
    workload_free(&w);
    workload_free(&v);
    static const char *const bad[] = {"lognormal:1000:0:4", "lognormal:1000:3.5:4",
                                      "lognormal:1000:x:4", "lognormal:1000:4", "lognormal:8:1:4"};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(bad); i++) {
        EXPECT_EQ_INT(workload_create(&w, bad[i], 4, 1, err, sizeof err), PULSE_ERR_INVALID);
        EXPECT_STR_CONTAINS(err, "lognormal:MEAN:SIGMA:COUNT");
    }
}

/* servegen-mix:MEAN:COUNT: 20000 lengths have mean MEAN (the scale solves for the clipped
 * mean), lie in [64, 4 MEAN], follow the fitted mixture's CDF (Kolmogorov-Smirnov distance at
 * most 0.015; about 0.012 is the 1% level at this size), repeat for the same seed and differ
 * for another; bad specs are refused. */
static void test_servegen_mix(void)
{
    struct workload w, v, u;
    char err[256];
    enum { N = 20000 };
    const double mean = 16384;
    EXPECT_EQ_INT(workload_create(&w, "servegen-mix:16384:20000", 4, 7, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(workload_create(&v, "servegen-mix:16384:20000", 4, 7, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(workload_create(&u, "servegen-mix:16384:20000", 4, 8, err, sizeof err), PULSE_OK);
    static int len[N];
    int same = 1, other = 0, lo = 1 << 30, hi = 0;
    double sum = 0;
    for (int i = 0; i < N; i++) {
        len[i] = w.reqs[i].prompt_len;
        same &= len[i] == v.reqs[i].prompt_len;
        other += len[i] != u.reqs[i].prompt_len;
        lo = PULSE_MIN(lo, len[i]);
        hi = PULSE_MAX(hi, len[i]);
        sum += len[i];
    }
    EXPECT(same);
    EXPECT(other > N / 2);
    EXPECT(lo >= 64 && hi <= 4 * 16384);
    qsort(len, (size_t)N, sizeof len[0], by_int);
    double ks = 0;
    for (int i = 0; i < N; i++) { /* the step of the empirical CDF at each distinct length */
        if (i + 1 < N && len[i + 1] == len[i]) continue;
        const double f = workload_servegen_mix_cdf(mean, len[i] + 0.5); /* lengths are rounded */
        const double below = i + 1 < N ? (double)(i + 1) / N : 1.0;
        ks = PULSE_MAX(ks, fabs(f - below));
    }
    printf("servegen-mix:16384: mean %.0f (want %.0f), p50 %d, p90 %d, KS %.4f\n", sum / N, mean,
           len[N / 2], len[N * 9 / 10], ks);
    EXPECT_NEAR(sum / N / mean, 1.0, 0.03);
    EXPECT(ks <= 0.015);
    /* the model's own CDF: 0 below the clip, 1 at 4 MEAN, increasing between */
    EXPECT(workload_servegen_mix_cdf(mean, 63) == 0 &&
           workload_servegen_mix_cdf(mean, 4 * mean) == 1);
    EXPECT(workload_servegen_mix_cdf(mean, 5000) < workload_servegen_mix_cdf(mean, 20000));
    workload_free(&w);
    workload_free(&v);
    workload_free(&u);
    static const char *const bad[] = {"servegen-mix:100:4", "servegen-mix:1000", "servegen-mix:x:4",
                                      "servegen-mix:1000:0"};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(bad); i++) {
        EXPECT_EQ_INT(workload_create(&w, bad[i], 4, 1, err, sizeof err), PULSE_ERR_INVALID);
        EXPECT_STR_CONTAINS(err, "servegen-mix:MEAN:COUNT");
    }
}

/* workload_write_trace writes what trace: reads back: the same lengths and outputs, and the
 * arrivals to the microsecond after the first; pulse workload prints the statistics and writes
 * through the same writer; the shipped sample traces load. */
static void test_trace_roundtrip(void)
{
    char path[] = "/tmp/pulse_trace_rt_XXXXXX", spec[64], err[256];
    const int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    struct workload w, v;
    EXPECT_EQ_INT(workload_create(&w, "servegen:4096:50", 7, 3, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(workload_set_arrivals(&w, "gamma:20:2", err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(workload_write_trace(&w, path, err, sizeof err), PULSE_OK);
    snprintf(spec, sizeof spec, "trace:%s", path);
    EXPECT_EQ_INT(workload_create(&v, spec, 1, 1, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(v.n, 50);
    int same = v.n == 50;
    for (int i = 0; same && i < 50; i++) {
        same &= v.reqs[i].prompt_len == w.reqs[i].prompt_len && v.reqs[i].output_len == 7;
        const double a = w.reqs[i].arrival_s - w.reqs[0].arrival_s;
        same &= fabs(v.reqs[i].arrival_s - a) < 2e-6;
    }
    EXPECT(same);
    workload_free(&w);
    workload_free(&v);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "workload --workload uniform:1000:4 --arrival poisson:10 --out %s",
             path);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
    EXPECT_STR_CONTAINS(out, "4 requests");
    EXPECT_STR_CONTAINS(out, "prompt tokens: mean 1000, p50 1000");
    EXPECT_EQ_INT(workload_create(&v, spec, 1, 1, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(v.n, 4);
    workload_free(&v);
    EXPECT_EQ_INT(tu_run_pulse("workload --workload nosuch:1", out, sizeof out), 2);
    EXPECT_EQ_INT(tu_run_pulse("workload", out, sizeof out), 2);
    /* each shipped trace is what its command in workloads/traces/README.md makes (seed 1) */
    static const struct {
        const char *trace, *spec, *arrival;
    } shipped[] = {
        {"trace:workloads/traces/servegen_32k_gamma.jsonl", "servegen:32768:48", "gamma:4:2"},
        {"trace:workloads/traces/mooncake_like_24k_poisson.jsonl", "lognormal:24576:1.074:48",
         "poisson:4"},
        {"trace:workloads/traces/servegen_mix_32k_gamma.jsonl", "servegen-mix:32768:48",
         "gamma:4:2"}};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(shipped); i++) {
        EXPECT_EQ_INT(workload_create(&v, shipped[i].trace, 1, 1, err, sizeof err), PULSE_OK);
        EXPECT_EQ_INT(v.n, 48);
        EXPECT_EQ_INT(workload_create(&w, shipped[i].spec, 32, 1, err, sizeof err), PULSE_OK);
        EXPECT_EQ_INT(workload_set_arrivals(&w, shipped[i].arrival, err, sizeof err), PULSE_OK);
        int same = w.n == v.n;
        for (int r = 0; r < w.n && same; r++)
            same = w.reqs[r].prompt_len == v.reqs[r].prompt_len &&
                   w.reqs[r].output_len == v.reqs[r].output_len;
        if (!same) fprintf(stderr, "%s: not what %s makes\n", shipped[i].trace, shipped[i].spec);
        EXPECT(same);
        workload_free(&w);
        workload_free(&v);
    }
    remove(path);
}

/* drift:FROM:TO:COUNT: the mean moves geometrically from FROM to TO over the requests: the
 * first and last tenths' medians sit near FROM and TO times the log-normal's median factor. */
static void test_drift(void)
{
    struct workload w;
    char err[256];
    const int n = 20000;
    EXPECT_EQ_INT(workload_create(&w, "drift:4096:65536:20000", 4, 5, err, sizeof err), PULSE_OK);
    static int a[2000], b[2000];
    for (int i = 0; i < 2000; i++)
        a[i] = w.reqs[i].prompt_len, b[i] = w.reqs[n - 2000 + i].prompt_len;
    qsort(a, 2000, sizeof a[0], by_int);
    qsort(b, 2000, sizeof b[0], by_int);
    const double f = exp(-0.5 * WORKLOAD_SERVEGEN_SIGMA * WORKLOAD_SERVEGEN_SIGMA);
    /* the tenths' means are FROM x 16^0.05 and TO / 16^0.05 at their centres */
    const double want_a = 4096 * pow(16.0, 0.05) * f, want_b = 65536 / pow(16.0, 0.05) * f;
    printf("drift:4096:65536: first tenth's median %d (want %.0f), last tenth's %d (want %.0f)\n",
           a[1000], want_a, b[1000], want_b);
    EXPECT_NEAR(a[1000] / want_a, 1.0, 0.08);
    EXPECT_NEAR(b[1000] / want_b, 1.0, 0.08);
    workload_free(&w);
    EXPECT_EQ_INT(workload_create(&w, "drift:4096:8:10", 4, 5, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "drift:FROM:TO:COUNT");
    EXPECT_EQ_INT(workload_create(&w, "drift:4096:10", 4, 5, err, sizeof err), PULSE_ERR_INVALID);
}

int main(void)
{
    test_drift();
    test_trace_roundtrip();
    test_servegen();
    test_servegen_mix();
    test_processes();
    test_trace();
    test_run();
    return tu_finish("test_workload");
}
