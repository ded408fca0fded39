/* pulse reproduce (experiments/reproduce.c) at the tiny scale on the CPU backend: every
 * experiment runs and writes its summary, and each summary passes a schema check (the result
 * header, the experiment's name, figures and scale, every point ok with the variant's policy
 * and a throughput); the recall experiment writes a recall-bench result; a second run skips
 * every point (resumable) and rewrites the summaries, which name the builds and dates of their
 * points (two commits once a point comes from another build); the large-host scale and the
 * GPU KV and host pool flags in the points' command lines; --only, --list and --dry-run; bad
 * flags are refused. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "testutil.h"

static char out[1 << 16];

static const char *const names[] = {"e2e",      "ratio",     "long",     "util",
                                    "ablation", "admission", "capacity", "bandwidth"};

static json_t *load(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s/%s.json", dir, name, name);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) printf("  %s: %s\n", path, je.text);
    return j;
}

/* The summary's schema; returns its points. */
static int check_summary(json_t *s, const char *name)
{
    EXPECT(json_integer_value(json_object_get(s, "schema_version")) >= 1);
    EXPECT(!strcmp(json_string_value(json_object_get(s, "experiment")), "reproduce"));
    EXPECT(json_is_string(json_object_get(json_object_get(s, "tool"), "git_commit")));
    EXPECT(json_is_object(json_object_get(s, "env")));
    EXPECT(json_is_string(json_object_get(s, "date")));
    EXPECT(!strcmp(json_string_value(json_object_get(s, "name")), name));
    EXPECT(json_is_string(json_object_get(s, "figures")));
    EXPECT(!strcmp(json_string_value(json_object_get(s, "scale")), "tiny"));
    json_t *grid = json_object_get(s, "grid"), *pts = json_object_get(s, "points"), *p;
    EXPECT(json_is_array(json_object_get(grid, "variants")));
    EXPECT(json_array_size(pts) >= 3);
    size_t i;
    json_array_foreach(pts, i, p)
    {
        const char *var = json_string_value(json_object_get(p, "variant"));
        json_t *r = json_object_get(p, "result");
        EXPECT(var && json_is_object(r));
        EXPECT(!strcmp(json_string_value(json_object_get(p, "status")), "ok"));
        if (!r || !var) continue;
        EXPECT(!json_object_get(r, "requests")); /* left out of the summary */
        EXPECT(json_number_value(
                   json_object_get(json_object_get(r, "metrics"), "output_throughput")) > 0);
        EXPECT(json_integer_value(json_object_get(json_object_get(r, "counters"), "tokens")) > 0);
        /* the point ran its variant's policy */
        json_t *v, *vs = json_object_get(grid, "variants");
        size_t k;
        json_array_foreach(vs, k,
                           v) if (!strcmp(json_string_value(json_object_get(v, "name")), var))
        {
            EXPECT(!strcmp(
                json_string_value(json_object_get(v, "--policy")),
                json_string_value(json_object_get(json_object_get(r, "config"), "policy"))));
        }
    }
    return (int)json_array_size(pts);
}

int main(void)
{
    char dir[] = "/tmp/pulse_reproduce_XXXXXX", cmd[512];
    if (!mkdtemp(dir)) return 1;
    snprintf(cmd, sizeof cmd, "reproduce --tiny --out-dir %s", dir);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
    int points = 0;
    for (size_t i = 0; i < PULSE_ARRAY_LEN(names); i++) {
        json_t *s = load(dir, names[i]);
        EXPECT(s != NULL);
        if (s) points += check_summary(s, names[i]);
        json_decref(s);
    }
    /* the ablation adds one mechanism at a time from vanilla and ArkVale as published (eight
     * variants in order), then the rest of the comparison beside them: InfiniGen as published
     * and the engine-matched tier */
    json_t *ab = load(dir, "ablation");
    static const char *const ab_names[] = {"0-vanilla",
                                           "1-arkvale",
                                           "2+solohead",
                                           "3+gather-scatter",
                                           "4+two-batches",
                                           "5+irq",
                                           "6+ioaa",
                                           "6+ioaa-zc",
                                           "7+speculation",
                                           "7+speculation-zc",
                                           "7+speculation-mid-zc",
                                           "7+speculation-hits-zc",
                                           "7+self-interleaving",
                                           "7+self-interleaving-zc",
                                           "8+speculation+self-interleaving",
                                           "8+speculation+self-interleaving-zc",
                                           "infinigen",
                                           "arkvale+solohead+zc",
                                           "infinigen+solohead+gs",
                                           "infinigen+solohead+zc"};
    EXPECT_EQ_INT((int)json_array_size(json_object_get(ab, "points")), 20);
    for (size_t i = 0; i < PULSE_ARRAY_LEN(ab_names); i++)
        EXPECT_STR_EQ(json_string_value(json_object_get(
                          json_array_get(json_object_get(ab, "points"), i), "variant")),
                      ab_names[i]);
    /* the later predictions' rows: their point in the config, and wherever IOAA offloaded a
     * request (it decides on the machine's measured profile), their counters: from mid-layer,
     * from the predicted lists (and the first predicted layer's from mid-layer) */
    for (int k = 0; k < 2; k++) {
        json_t *res =
            json_object_get(json_array_get(json_object_get(ab, "points"), 10 + k), "result");
        json_t *off = json_object_get(json_object_get(res, "counters"), "offload");
        EXPECT_STR_EQ(json_string_value(json_object_get(
                          json_object_get(json_object_get(res, "config"), "offload"), "spec_from")),
                      k ? "hits" : "mid");
        const json_int_t adm = json_integer_value(json_object_get(off, "admitted"));
        const json_int_t mp = json_integer_value(json_object_get(off, "mid_prefetches"));
        const json_int_t hp = json_integer_value(json_object_get(off, "hits_prefetches"));
        EXPECT(adm == 0 || mp > 0);
        EXPECT(k && adm > 0 ? hp > 0 : hp == 0);
    }
    /* one host pool over the points: the fourth point's is the third one's, kept */
    json_t *r1 = json_object_get(json_array_get(json_object_get(ab, "points"), 3), "result");
    EXPECT(json_is_true(json_object_get(
        json_object_get(json_object_get(json_object_get(r1, "counters"), "offload"), "setup"),
        "pin_reused")));
    /* IOAA decides on a profile measured first, per engine: the pulseinfer points read it */
    json_t *r5 = json_object_get(json_array_get(json_object_get(ab, "points"), 6), "result");
    json_t *pi = json_object_get(json_object_get(r5, "counters"), "pulseinfer");
    EXPECT(pi && !strcmp(json_string_value(json_object_get(pi, "ioaa_profile")), "measured"));
    EXPECT(json_integer_value(json_object_get(pi, "ioaa_predicted_steps")) > 0);
    /* the steady steps (none admitted since the step before) are some of the predicted ones,
     * the first one after an admission not among them */
    const json_int_t steady = json_integer_value(json_object_get(pi, "ioaa_steady_steps"));
    EXPECT(steady > 0 && steady < json_integer_value(json_object_get(pi, "ioaa_predicted_steps")));
    EXPECT(json_real_value(json_object_get(pi, "ioaa_measured_steady_step_ms")) > 0);
    /* the points after the first take its locality calibration (one key: one table) */
    json_t *c1 =
        json_object_get(json_object_get(json_object_get(r1, "config"), "offload"), "locality");
    EXPECT(json_is_true(json_object_get(json_object_get(c1, "calibration"), "reused")));
    json_decref(ab);
    const char *const engines[] = {"gather-scatter", "zero-copy"};
    for (int i = 0; i < 2; i++) {
        char pp[512];
        snprintf(pp, sizeof pp, "%s/profile/ioaa_%s.json", dir, engines[i]);
        json_error_t pe;
        json_t *prof = json_load_file(pp, 0, &pe);
        EXPECT(prof &&
               !strcmp(json_string_value(json_object_get(prof, "recall_engine")), engines[i]));
        json_decref(prof);
    }
    /* the comparison shows both tiers at the 1 : 8 point: each system once, the published
     * baselines with their mechanism (ArkVale: 32-token pages, mean lists, a copy per page, a
     * cache beyond the selection; InfiniGen: head-wise lists re-fetched every step), the
     * engine-matched ones with PulseInfer's selection, page and reuse */
    json_t *ra = load(dir, "ratio");
    static const char *const sys[] = {"vanilla",
                                      "arkvale",
                                      "infinigen",
                                      "arkvale+solohead+gs",
                                      "arkvale+solohead+zc",
                                      "infinigen+solohead+gs",
                                      "infinigen+solohead+zc",
                                      "pulseinfer",
                                      "pulseinfer-zc",
                                      "pulseinfer-spec",
                                      "pulseinfer-spec-zc",
                                      "pulseinfer-spec-m25-zc",
                                      "pulseinfer-spec-hits-zc"};
    EXPECT_EQ_INT((int)json_array_size(json_object_get(ra, "points")), 13);
    for (size_t i = 0; i < PULSE_ARRAY_LEN(sys); i++) {
        json_t *pt = json_array_get(json_object_get(ra, "points"), i);
        EXPECT_STR_EQ(json_string_value(json_object_get(pt, "variant")), sys[i]);
        json_t *r = json_object_get(pt, "result");
        json_t *mech = json_object_get(json_object_get(json_object_get(r, "counters"), "offload"),
                                       "mechanism");
        const int64_t page = json_integer_value(json_object_get(mech, "page_tokens"));
        const int refetch = json_is_true(json_object_get(mech, "refetch"));
        if (i == 0) {
            EXPECT(mech == NULL);
        } else if (i == 1) {
            EXPECT_STR_EQ(json_string_value(json_object_get(mech, "selection")), "mean");
            EXPECT_EQ_INT(page, 32);
            EXPECT(json_integer_value(json_object_get(mech, "pages_cached")) >
                   json_integer_value(json_object_get(mech, "pages_selected_max")));
            EXPECT(json_real_value(json_object_get(mech, "bytes_per_copy")) ==
                   (double)json_integer_value(json_object_get(mech, "chunk_bytes")));
        } else if (i == 2) {
            EXPECT_STR_EQ(json_string_value(json_object_get(mech, "selection")), "headwise");
            EXPECT(refetch && json_integer_value(json_object_get(mech, "refetched_bytes")) > 0);
        } else {
            EXPECT_STR_EQ(json_string_value(json_object_get(mech, "selection")), "solohead");
            EXPECT(page == 16 && !refetch);
        }
        /* the speculating ones: their schedule, and the prefetches they made */
        const char *sched = json_string_value(
            json_object_get(json_object_get(json_object_get(r, "config"), "offload"), "schedule"));
        if (i >= 9) {
            EXPECT_STR_EQ(sched, "speculate-exact");
            json_t *ctr = json_object_get(r, "counters");
            json_t *sp = json_object_get(json_object_get(ctr, "offload"), "speculation");
            const int64_t offloaded = json_integer_value(
                json_object_get(json_object_get(ctr, "schedule"), "admitted_offload"));
            EXPECT(json_is_object(sp));
            EXPECT(json_integer_value(json_object_get(sp, "lists")) > 0 || offloaded == 0);
            /* the last one predicts from its predicted lists (where it offloaded) */
            json_t *off = json_object_get(ctr, "offload");
            EXPECT_STR_EQ(
                json_string_value(json_object_get(
                    json_object_get(json_object_get(r, "config"), "offload"), "spec_from")),
                i == 12 ? "hits" : "input");
            const json_int_t hp = json_integer_value(json_object_get(off, "hits_prefetches"));
            EXPECT(i == 12 && offloaded > 0 ? hp > 0 : hp == 0);
            /* the margin's: a quarter more blocks prefetched than the exact lists' budget */
            EXPECT_NEAR(
                json_number_value(json_object_get(
                    json_object_get(json_object_get(r, "config"), "offload"), "spec_margin")),
                i == 11 ? 0.25 : 0.0, 1e-12);
        }
    }
    json_decref(ra);
    /* the long-prompt point: every system of both tiers, at its own prompts, GPU KV, pool and
     * output length */
    json_t *lo = load(dir, "long");
    EXPECT_EQ_INT((int)json_array_size(json_object_get(lo, "points")), 13);
    for (size_t i = 0; i < json_array_size(json_object_get(lo, "points")); i++) {
        json_t *pt = json_array_get(json_object_get(lo, "points"), i);
        json_t *r = json_object_get(pt, "result");
        json_t *cfg = json_object_get(r, "config");
        EXPECT_STR_EQ(json_string_value(json_object_get(pt, "variant")), sys[i]);
        EXPECT_NEAR(json_number_value(json_object_get(cfg, "kv_budget_gb")), 0.004, 1e-6);
        EXPECT_EQ_INT(
            (int)json_integer_value(json_object_get(json_object_get(r, "counters"), "tokens")),
            3 * 4);
    }
    char *grid = json_dumps(json_object_get(lo, "grid"), JSON_COMPACT);
    EXPECT(grid && strstr(grid, "\"--workload\":\"uniform:1536:3\"") &&
           strstr(grid, "\"--host-pool-gb\":\"0.05\""));
    free(grid);
    json_decref(lo);
    /* the bandwidth points carry their cap fraction */
    json_t *bw = load(dir, "bandwidth");
    json_t *p0 = json_object_get(json_array_get(json_object_get(bw, "points"), 0), "result");
    EXPECT_NEAR(
        json_number_value(json_object_get(json_object_get(p0, "config"), "recall_cap_fraction")),
        0.4, 1e-12);
    json_decref(bw);
    char path[512];
    snprintf(path, sizeof path, "%s/recall/recall.json", dir);
    json_error_t je;
    json_t *rb = json_load_file(path, 0, &je);
    EXPECT(rb && !strcmp(json_string_value(json_object_get(rb, "experiment")), "recall-bench"));
    json_decref(rb);
    printf("reproduce --tiny: 7 summaries of %d points and the recall result\n", points);
    /* the points' provenance: one build, one commit (this build's), dates in order */
    json_t *e2e = load(dir, "e2e");
    json_t *pc = json_object_get(e2e, "point_commits"), *pd = json_object_get(e2e, "point_dates");
    const char *commit =
        json_string_value(json_object_get(json_object_get(e2e, "tool"), "git_commit"));
    EXPECT_EQ_INT((int)json_array_size(pc), 1);
    EXPECT(commit && json_string_value(json_array_get(pc, 0)) &&
           !strncmp(json_string_value(json_array_get(pc, 0)), commit, 7));
    const char *d0 = json_string_value(json_array_get(pd, 0)),
               *d1 = json_string_value(json_array_get(pd, 1));
    EXPECT(d0 && d1 && strcmp(d0, d1) <= 0);
    /* a point written by another build (a run resumed elsewhere): rewritten with its commit */
    const char *first = json_string_value(
        json_object_get(json_array_get(json_object_get(e2e, "points"), 0), "name"));
    char pp0[512];
    snprintf(pp0, sizeof pp0, "%s/e2e/points/%s.json", dir, first ? first : "?");
    json_error_t pe0;
    json_t *p0j = json_load_file(pp0, 0, &pe0);
    EXPECT(p0j != NULL);
    if (p0j) {
        json_t *tool = json_object_get(p0j, "tool");
        json_object_set_new(tool, "git_commit", json_string("0123456789abcdef0123"));
        json_object_set_new(tool, "git_dirty", json_true());
        json_object_set_new(p0j, "date", json_string("2000-01-01T00:00:00Z"));
        EXPECT_EQ_INT(json_dump_file(p0j, pp0, 0), 0);
        json_decref(p0j);
    }
    json_decref(e2e);
    /* started again: every point is skipped */
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
    EXPECT(strstr(out, " 0 ran,") != NULL);
    EXPECT(strstr(out, " ran, 0 skipped") == NULL);
    json_t *again = load(dir, "e2e");
    EXPECT(again && check_summary(again, "e2e") > 0);
    pc = json_object_get(again, "point_commits");
    EXPECT_EQ_INT((int)json_array_size(pc), 2);
    const char *c0 = json_string_value(json_array_get(pc, 0)),
               *f0 = json_string_value(json_array_get(json_object_get(again, "point_dates"), 0));
    EXPECT(c0 && !strcmp(c0, "0123456-dirty"));
    EXPECT(f0 && !strcmp(f0, "2000-01-01T00:00:00Z"));
    json_decref(again);
    /* --only, --list, --dry-run; refusals */
    snprintf(cmd, sizeof cmd, "reproduce --tiny --only ablation,capacity --dry-run --out-dir %s",
             dir);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
    EXPECT(strstr(out, "/ablation/points/6+ioaa.json") != NULL);
    EXPECT(strstr(out, "e2e/points") == NULL);
    EXPECT_STR_CONTAINS(out, "--recall-engine zero-copy --out ");
    EXPECT_STR_CONTAINS(out, "/profile/ioaa_gather-scatter.json --out ");
    /* the quick scale's admission runs the shipped sample traces */
    EXPECT_EQ_INT(tu_run_pulse("reproduce --quick --only admission --dry-run", out, sizeof out), 0);
    EXPECT_STR_CONTAINS(out, "--workload trace:workloads/traces/servegen_32k_gamma.jsonl");
    EXPECT_STR_CONTAINS(out, "--workload trace:workloads/traces/mooncake_like_24k_poisson.jsonl");
    /* --large-host: e2e and util only, the whole H200 as GPU KV, a 400 GB pool for every
     * offload point (not vanilla's), the Mooncake-like trace beside the lengths, util over
     * every system; --kv-budget-gb and --host-pool-gb replace them at any scale */
    EXPECT_EQ_INT(tu_run_pulse("reproduce --large-host --dry-run", out, sizeof out), 0);
    EXPECT_STR_CONTAINS(out, "--kv-budget-gb 110 --policy vanilla --workload uniform:65536:32 ");
    EXPECT_STR_CONTAINS(out, "--policy arkvale --host-pool-gb 400 --workload uniform:16384:128");
    EXPECT_STR_CONTAINS(out, "--policy infinigen --host-pool-gb 400 --workload trace:workloads/");
    EXPECT_STR_CONTAINS(out, "--cupti --policy arkvale --host-pool-gb 400 --out ");
    EXPECT_STR_CONTAINS(out, "--out results/large-host/util/points/arkvale.json");
    EXPECT(strstr(out, "vanilla --host-pool-gb") == NULL);
    EXPECT(strstr(out, "/ablation/") == NULL && strstr(out, "/ratio/") == NULL);
    EXPECT_EQ_INT(
        tu_run_pulse("reproduce --large-host --only ratio --host-pool-gb 500 --kv-budget-gb 90 "
                     "--dry-run",
                     out, sizeof out),
        0);
    EXPECT_STR_CONTAINS(out, "--kv-budget-gb 12 --workload uniform:65536:18 --policy infinigen "
                             "--host-pool-gb 500 ");
    EXPECT_EQ_INT(
        tu_run_pulse("reproduce --tiny --only util --kv-budget-gb 0.5 --dry-run", out, sizeof out),
        0);
    EXPECT_STR_CONTAINS(out, "--kv-budget-gb 0.5 ");
    EXPECT(strstr(out, "--host-pool-gb") == NULL && strstr(out, "policy arkvale") == NULL);
    EXPECT_EQ_INT(tu_run_pulse("reproduce --large-host --full", out, sizeof out), 2);
    EXPECT_EQ_INT(tu_run_pulse("reproduce --host-pool-gb 0x10 --dry-run", out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "--host-pool-gb");
    EXPECT_EQ_INT(tu_run_pulse("reproduce --kv-budget-gb -1 --dry-run", out, sizeof out), 2);
    EXPECT_EQ_INT(tu_run_pulse("reproduce --list", out, sizeof out), 0);
    EXPECT_STR_CONTAINS(out, "fig. 26");
    EXPECT_EQ_INT(tu_run_pulse("reproduce --only fig99", out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "unknown experiment 'fig99'");
    EXPECT_EQ_INT(tu_run_pulse("reproduce --tiny --full", out, sizeof out), 2);
    EXPECT_EQ_INT(tu_run_pulse("reproduce extra", out, sizeof out), 2);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("  could not remove %s\n", dir);
    return tu_finish("test_reproduce");
}
