/* The step floor's arithmetic (runtime/results/floor.h) on hand-computed cases, and the floors a run
 * reports: every offload step's traffic adds up to what its counters say it moved. */
#include <jansson.h>
#include <string.h>

#include "floor.h"
#include "testutil.h"

/* qwen3-14b-like step: 29.5 GB of weights, 3 GB of KV, 0.1 GB of digests, 0.55 GB recalled,
 * at 4.25 TB/s copy and 55 GB/s H2D: HBM (29.5+3+0.1+0.55) / 4250 = 7.8 ms, PCIe 10 ms. */
static void test_cases(void)
{
    const struct floor_traffic t = {29.5e9, 3e9, 0.1e9, 0.55e9};
    const struct floor_bw bw = {4250.0, 55.0};
    struct floor_result f;
    floor_compute(&t, &bw, 0, &f);
    EXPECT_NEAR(f.hbm_s, 33.15e9 / 4250e9, 1e-12);
    EXPECT_NEAR(f.pcie_s, 0.55e9 / 55e9, 1e-12);
    EXPECT_NEAR(f.hbm_s, 7.8e-3, 1e-9);
    EXPECT_NEAR(f.pcie_s, 10e-3, 1e-12);
    EXPECT_NEAR(f.floor_s, 17.8e-3, 1e-9); /* synchronous: the sum */
    floor_compute(&t, &bw, 1, &f);
    EXPECT_NEAR(f.floor_s, 10e-3, 1e-12);            /* overlapped: the larger, here PCIe */
    const struct floor_traffic v = {1e9, 1e9, 0, 0}; /* nothing recalled: no PCIe term */
    floor_compute(&v, &(struct floor_bw){2000.0, 0.0}, 0, &f);
    EXPECT_NEAR(f.hbm_s, 1e-3, 1e-15);
    EXPECT_NEAR(f.pcie_s, 0.0, 0.0);
    EXPECT_NEAR(f.floor_s, 1e-3, 1e-15);
    struct floor_traffic a = t;
    floor_traffic_add(&a, &v);
    EXPECT_NEAR(a.weight_bytes, 30.5e9, 1.0);
    EXPECT_NEAR(a.kv_bytes, 4e9, 1.0);
    EXPECT_NEAR(a.recall_bytes, 0.55e9, 1.0);
    json_t *j = floor_json(&t, &bw, 1);
    EXPECT_NEAR(json_real_value(json_object_get(j, "floor_ms")), 10.0, 1e-9);
    EXPECT_NEAR(json_real_value(json_object_get(j, "hbm_floor_ms")), 7.8, 1e-6);
    EXPECT(json_is_true(json_object_get(j, "overlapped")));
    json_decref(j);
}

/* pulse run on the cpu: the per-step series has a floor per step, the mean step's recall bytes
 * times the steps are the run's recall bytes, and the sync policy's floor is HBM + PCIe. */
/* Runs `pulse ARGS --out FILE` and returns the result JSON (NULL after a failed check). */
static json_t *pulse_json(const char *args)
{
    const char *bin = getenv("PULSE_BIN");
    if (!bin) {
        fprintf(stderr, "PULSE_BIN not set: run through ctest\n");
        tu_failures++;
        return NULL;
    }
    char cmd[1024];
    const char *out = "/tmp/pulse_test_floor.json";
    snprintf(cmd, sizeof cmd, "%s %s --out %s >/dev/null", bin, args, out);
    EXPECT_EQ_INT(system(cmd), 0);
    json_error_t e;
    json_t *r = json_load_file(out, 0, &e);
    EXPECT(r != NULL);
    return r;
}

static void test_run_json(void)
{
    json_t *r = pulse_json("run --backend cpu --model tiny --policy arkvale --workload "
                           "uniform:300:3 --output-len 6 --budget-tokens 64");
    if (!r) return;
    json_t *st = json_object_get(json_object_get(r, "metrics"), "step");
    json_t *mf = json_object_get(st, "mean_step_floor");
    const double steps =
        (double)json_integer_value(json_object_get(json_object_get(r, "counters"), "steps"));
    const double recalled =
        (double)json_integer_value(json_object_get(json_object_get(r, "counters"), "recall_bytes"));
    EXPECT(steps >= 6);
    EXPECT(recalled > 0);
    EXPECT_NEAR(json_real_value(json_object_get(mf, "recall_bytes")) * steps, recalled, 0.5);
    EXPECT(json_real_value(json_object_get(mf, "weight_bytes")) > 0);
    EXPECT(json_real_value(json_object_get(mf, "kv_bytes")) > 0);
    EXPECT(json_real_value(json_object_get(mf, "digest_bytes")) > 0);
    EXPECT(!json_is_true(json_object_get(mf, "overlapped")));
    /* the JSON keeps 9 significant digits of each */
    EXPECT_NEAR(json_real_value(json_object_get(mf, "floor_ms")),
                json_real_value(json_object_get(mf, "hbm_floor_ms")) +
                    json_real_value(json_object_get(mf, "pcie_floor_ms")),
                1e-7 * json_real_value(json_object_get(mf, "floor_ms")));
    EXPECT(json_real_value(json_object_get(st, "ratio_to_floor")) > 0);
    json_t *ps = json_object_get(st, "per_step");
    EXPECT_EQ_INT(json_array_size(json_object_get(ps, "step_ms")), (size_t)steps);
    EXPECT_EQ_INT(json_array_size(json_object_get(ps, "floor_ms")), (size_t)steps);
    json_decref(r);
}

/* pulse bench decode-step --policy: offload steps against their floors, per point. */
static void test_bench_offload(void)
{
    json_t *r = pulse_json("bench decode-step --backend cpu --model tiny --policy infinigen "
                           "--points 2x300,3x170 --iters 3 --warmup 1 --budget-tokens 64");
    if (!r) return;
    json_t *pts = json_object_get(r, "points");
    EXPECT_EQ_INT(json_array_size(pts), 2);
    EXPECT(!strcmp(json_string_value(json_object_get(json_object_get(r, "config"), "policy")),
                   "infinigen"));
    for (size_t i = 0; i < json_array_size(pts); i++) {
        json_t *p = json_array_get(pts, i), *f = json_object_get(p, "mean_step_floor");
        EXPECT(!strcmp(json_string_value(json_object_get(p, "status")), "ok"));
        EXPECT_EQ_INT(json_integer_value(json_object_get(p, "host_syncs_in_steps")), 0);
        EXPECT_EQ_INT(json_array_size(json_object_get(p, "ms_samples")), 3);
        EXPECT(json_real_value(json_object_get(f, "recall_bytes")) > 0);
        EXPECT(json_is_true(json_object_get(f, "overlapped")));
        EXPECT(json_real_value(json_object_get(p, "ratio_to_floor")) > 0);
        EXPECT(json_object_get(json_object_get(p, "offload"), "recall_engine") != NULL);
    }
    json_decref(r);
    /* an offload flag without an offload policy: a one-line usage error */
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "%s bench decode-step --backend cpu --model tiny --selection solohead 2>/dev/null",
             getenv("PULSE_BIN"));
    const int st = system(cmd);
    EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 2);
}

int main(void)
{
    test_cases();
    test_run_json();
    test_bench_offload();
    return tu_finish("test_floor");
}
