/* pulse compare (experiments/compare.c): an unchanged result passes; an injected regression of a
 * timed metric (throughput down, TPOT up beyond the tolerance) or a changed value that must not
 * change (the tokens' fingerprint) fails with exit 1 and says which; an improvement is no
 * regression; a lost, null or retyped metric, a status other than ok and another model, policy
 * or workload each fail (exit 1) and pass with the flag that allows them; a tolerance rule
 * without its direction is refused; the github-action-benchmark files parse as arrays of
 * {name, unit, value}; bad
 * usage and bad tolerance files are one-line errors (exit 2). And the project's own regression
 * check: a CPU run of pulseinfer against the checked-in baseline
 * (tests/data/compare_baseline_cpu.json) on its deterministic counters
 * (tests/data/compare_cpu_counters.json: tokens, recall bytes, hot-cache hits and misses,
 * admission, host syncs and allocations in steps). After an intended change to those, make the
 * baseline again with the run below. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "testutil.h"

static char out[1 << 16];

static const char *src(void)
{
    const char *s = getenv("PULSE_SRC");
    return s && *s ? s : ".";
}

/* Writes j to a temporary file; its path in path. */
static void save(json_t *j, char *path)
{
    strcpy(path, "/tmp/pulse_compare_XXXXXX");
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    EXPECT_EQ_INT(json_dump_file(j, path, 0), 0);
}

static void set_real(json_t *r, const char *obj, const char *key, double v)
{
    json_object_set_new(json_object_get(r, obj), key, json_real(v));
}

int main(void)
{
    char base[512], tol[512], cmd[2048], a[64], b[64];
    snprintf(base, sizeof base, "%s/tests/data/compare_baseline_cpu.json", src());
    snprintf(tol, sizeof tol, "%s/tests/data/compare_cpu_counters.json", src());
    json_error_t je;
    json_t *r = json_load_file(base, 0, &je);
    EXPECT(r != NULL);
    if (!r) return tu_finish("test_compare");
    const double thr =
        json_number_value(json_object_get(json_object_get(r, "metrics"), "output_throughput"));
    const double tpot =
        json_number_value(json_object_get(json_object_get(r, "metrics"), "mean_tpot_ms"));
    EXPECT(thr > 0 && tpot > 0);
    save(r, a);
    /* unchanged: passes, the github-benchmark files parse */
    snprintf(cmd, sizeof cmd, "compare %s %s --github-benchmark /tmp", base, a);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
    EXPECT_STR_CONTAINS(out, "0 regressions");
    static const char *const files[] = {"/tmp/bigger_is_better.json",
                                        "/tmp/smaller_is_better.json"};
    for (int k = 0; k < 2; k++) {
        json_t *g = json_load_file(files[k], 0, &je);
        EXPECT(json_is_array(g) && json_array_size(g) > 0);
        size_t i;
        json_t *e;
        json_array_foreach(g, i, e)
        {
            EXPECT(json_is_string(json_object_get(e, "name")));
            EXPECT(json_is_string(json_object_get(e, "unit")));
            EXPECT(json_is_number(json_object_get(e, "value")));
        }
        json_decref(g);
        unlink(files[k]);
    }
    /* a regression: throughput down 30%, TPOT up 30% */
    set_real(r, "metrics", "output_throughput", thr * 0.7);
    set_real(r, "metrics", "mean_tpot_ms", tpot * 1.3);
    save(r, b);
    snprintf(cmd, sizeof cmd, "compare %s %s", base, b);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 1);
    EXPECT_STR_CONTAINS(out, "metrics.output_throughput");
    EXPECT_STR_CONTAINS(out, "2 regressions");
    /* within the tolerance (5%) and an improvement: no regression */
    set_real(r, "metrics", "output_throughput", thr * 1.5);
    set_real(r, "metrics", "mean_tpot_ms", tpot * 1.05);
    save(r, b);
    snprintf(cmd, sizeof cmd, "compare %s %s", base, b);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
    EXPECT_STR_CONTAINS(out, "improved");
    /* other tokens: a regression whatever the speed */
    json_object_set_new(json_object_get(r, "metrics"), "output_tokens_fnv1a",
                        json_string("0123456789abcdef"));
    save(r, b);
    snprintf(cmd, sizeof cmd, "compare %s %s", base, b);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 1);
    EXPECT_STR_CONTAINS(out, "CHANGED (REGRESSION)");
    unlink(b);
    /* the gate cannot be fooled: each of these fails (exit 1) on a result whose speed is the
     * baseline's, and passes with the flag that allows it */
    json_decref(r);
    static const struct {
        const char *what, *path, *allow, *says; /* path "a.b" set to the case's value */
        int kind;                               /* 0 removed, 1 null, 2 string "x" */
    } gate[] = {
        {"a lost metric", "metrics.mean_tpot_ms", "--allow-missing", "absent in the new result", 0},
        {"a null metric", "metrics.output_throughput", "--allow-missing", "null in the new result",
         1},
        {"a metric of another type", "metrics.mean_tpot_ms", "--allow-missing",
         "of another type", 2},
        {"a status other than ok", "status", "--allow-status", "not ok", 2},
        {"another model", "config.model", "--allow-config", "another configuration", 2},
        {"another policy", "config.policy", "--allow-config", "another configuration", 2},
        {"another workload", "workload.spec", "--allow-config", "another configuration", 2},
    };
    for (size_t i = 0; i < PULSE_ARRAY_LEN(gate); i++) {
        r = json_load_file(base, 0, &je);
        char obj[64];
        const char *dot = strchr(gate[i].path, '.');
        json_t *holder = r;
        const char *key = gate[i].path;
        if (dot) {
            snprintf(obj, sizeof obj, "%.*s", (int)(dot - gate[i].path), gate[i].path);
            holder = json_object_get(r, obj);
            key = dot + 1;
        }
        if (gate[i].kind == 0)
            json_object_del(holder, key);
        else
            json_object_set_new(holder, key, gate[i].kind == 1 ? json_null() : json_string("x"));
        save(r, b);
        json_decref(r);
        snprintf(cmd, sizeof cmd, "compare %s %s", base, b);
        const int code = tu_run_pulse(cmd, out, sizeof out);
        EXPECT_EQ_INT(code, 1);
        EXPECT_STR_CONTAINS(out, gate[i].says);
        EXPECT_STR_CONTAINS(out, "1 regression\n");
        if (code != 1) fprintf(stderr, "gate case: %s\n", gate[i].what);
        snprintf(cmd, sizeof cmd, "compare %s %s %s", base, b, gate[i].allow);
        EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
        EXPECT_STR_CONTAINS(out, "(allowed)");
        unlink(b);
    }
    r = json_load_file(base, 0, &je);
    /* a tolerance rule without its direction is refused, not read as "bigger" */
    json_t *nodir = json_pack("{s:[{s:s,s:f}]}", "metrics", "path", "metrics.output_throughput",
                              "rel_tol", 0.1);
    save(nodir, b);
    json_decref(nodir);
    snprintf(cmd, sizeof cmd, "compare %s %s --tolerances %s", base, a, b);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "metrics[0]: expected a \"path\", \"better\" of bigger");
    unlink(b);
    /* bad usage */
    EXPECT_EQ_INT(tu_run_pulse("compare onlyone.json", out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "expected BASELINE.json NEW.json");
    snprintf(cmd, sizeof cmd, "compare %s /nonexistent.json", base);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "/nonexistent.json: cannot open");
    json_t *t = json_pack("{s:[{s:s,s:s}]}", "metrics", "path", "metrics.x", "better", "higher");
    save(t, b);
    json_decref(t);
    snprintf(cmd, sizeof cmd, "compare %s %s --tolerances %s", base, a, b);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "metrics[0]: expected a \"path\", \"better\" of bigger");
    unlink(b);
    unlink(a);
    json_decref(r);
    /* the project's regression check on deterministic counters */
    char run[64];
    strcpy(run, "/tmp/pulse_compare_run_XXXXXX");
    int fd = mkstemp(run);
    if (fd >= 0) close(fd);
    snprintf(cmd, sizeof cmd,
             "run --backend cpu --model tiny --policy pulseinfer --admission fixed:200 --workload "
             "lengths:300,170,90,260,40,200 --output-len 8 --budget-tokens 32 --out %s",
             run);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
    snprintf(cmd, sizeof cmd, "compare %s %s --tolerances %s", base, run, tol);
    const int code = tu_run_pulse(cmd, out, sizeof out);
    EXPECT_EQ_INT(code, 0);
    if (code) fprintf(stderr, "%s", out);
    EXPECT_STR_CONTAINS(out, "13 compared, 0 regressions");
    unlink(run);
    return tu_finish("test_compare");
}
