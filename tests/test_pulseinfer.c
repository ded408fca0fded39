/* pulseinfer (baselines/pulseinfer.c) on the CPU backend with the tiny model:
 * - semantics: with a budget covering the context, on vanilla's prompt KV, every request
 *   decodes vanilla's tokens: fixed:LEN admission with some requests normal and some offloaded,
 *   IOAA admission, with and without IRQ, in two arrival orders of mixed lengths;
 * - on the locality model's prompt KV a request decodes the same tokens normal or offloaded;
 * - IRQ: with a delay injected into the recall's copies and a small budget (every step
 *   recalls), the normal batch's layers run while the offload batch's recalls are in flight
 *   (layer switches, hidden rounds) and the tokens equal those of the same run without IRQ
 *   (IRQ changes when layers run, never what they compute); --no-irq makes no switch;
 * - counters: IOAA decides and counts its nodes, fixed admission makes no decision; SoloHead's
 *   recall chunks are whole blocks (token-wise), head-wise ones a KV head's;
 * - bad --admission is refused with one line; pulse run's pulseinfer flags are refused for
 *   other policies, and a pulseinfer run's JSON carries the schedule counters; its --trace is
 *   a timeline whose schema holds and whose batches run their layers in order, with spans on
 *   the normal, offload and recall tracks;
 * - self-interleaving (--self-interleave): vanilla's tokens with a covering budget, exact
 *   SoloHead's at a small budget, its counters (steps in halves, switches, rounds beside the
 *   other half; none off or with one request), auto's choice by IOAA's model recorded, and its
 *   refusals (bad mode, --speculate, --no-irq, zero-copy, another policy). */
#include <jansson.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "baselines/registry.h"
#include "common.h"
#include "engine.h"
#include "ioaa_profile.h"
#include "kv_cache.h"
#include "offload.h"
#include "pi_serve.h"
#include "recall.h"
#include "serve.h"
#include "testsource.h"
#include "testutil.h"
#include "timeline.h"
#include "workloads/workload.h"

/* ------------------------------------------------------------------ semantics */

static void test_equals_vanilla(void)
{
    static const char *const specs[] = {"lengths:300,170,90,260,40,200",
                                        "lengths:40,260,90,300,200,170"};
    for (int k = 0; k < 2; k++) {
        struct pi_cfg v = {.policy = "vanilla", .spec = specs[k], .out_len = 10, .max_batch = 4};
        struct pi_out van;
        serve(&v, &van);
        EXPECT_EQ_INT(van.rc, 0);
        /* a GPU budget of about two whole requests: IOAA must offload some to run more */
        const struct model_config *m = model_config_find("tiny");
        const size_t tight = (size_t)model_kv_bytes_per_token(m) * 320 * 2;
        struct {
            const char *admission;
            int no_irq, selection;
            size_t kv_budget;
            int zero_copy, speculate;
        } cases[] = {{"fixed:200", 0, OFFLOAD_SOLOHEAD, 0, 0, 0},
                     {"fixed:200", 1, OFFLOAD_SOLOHEAD, 0, 0, 0},
                     {"fixed:200", 0, OFFLOAD_HEADWISE, 0, 0, 0},
                     {"ioaa", 0, OFFLOAD_SOLOHEAD, 0, 0, 0},
                     {"ioaa", 0, OFFLOAD_SOLOHEAD, tight, 0, 0},
                     {"fixed:0", 0, OFFLOAD_SOLOHEAD, 0, 0, 0},
                     {"fixed:200", 0, OFFLOAD_SOLOHEAD, 0, 1, 0},
                     {"fixed:200", 0, OFFLOAD_HEADWISE, 0, 1, 0},
                     /* speculation with exact correction, both engines, both selections */
                     {"fixed:200", 0, OFFLOAD_SOLOHEAD, 0, 0, 1},
                     {"fixed:0", 0, OFFLOAD_HEADWISE, 0, 0, 1},
                     {"fixed:0", 1, OFFLOAD_SOLOHEAD, 0, 1, 1},
                     {"ioaa", 0, OFFLOAD_SOLOHEAD, tight, 1, 1}};
        /* (with a covering budget an offload request's hot slots hold its whole KV: offloading
         * frees nothing, so IOAA keeps every request normal even when the GPU is tight) */
        for (size_t i = 0; i < PULSE_ARRAY_LEN(cases); i++) {
            struct pi_cfg c = {.policy = "pulseinfer",
                               .spec = specs[k],
                               .admission = cases[i].admission,
                               .out_len = 10,
                               .max_batch = 4,
                               .no_irq = cases[i].no_irq,
                               .selection = cases[i].selection,
                               .budget_tokens = 512, /* every block selected */
                               .prompt_kv = OFFLOAD_KV_SYNTHETIC,
                               .kv_budget = cases[i].kv_budget,
                               .zero_copy = cases[i].zero_copy,
                               .speculate = cases[i].speculate};
            struct pi_out r;
            serve(&c, &r);
            EXPECT_EQ_INT(r.rc, 0);
            const int same = same_tokens(&van.w, &r.w);
            EXPECT(same);
            printf("%s, %s%s%s%s%s, %s: %lld normal + %lld offloaded, tokens %s vanilla's\n",
                   specs[k], cases[i].admission, cases[i].no_irq ? " --no-irq" : "",
                   cases[i].speculate ? " --speculate" : "", cases[i].zero_copy ? " zero-copy" : "",
                   cases[i].kv_budget ? " (tight GPU budget)" : "",
                   cases[i].selection == OFFLOAD_SOLOHEAD ? "solohead" : "headwise",
                   (long long)r.ctr.admitted_normal, (long long)r.ctr.admitted_offload,
                   same ? "equal" : "DIFFER from");
            EXPECT_EQ_INT(r.ctr.admitted_normal + r.ctr.admitted_offload, 6);
            /* 6 requests, 4 slots: two wait, and the loop runs ahead while the policy's
             * admission would still refuse them (policy.admit_idle) */
            EXPECT(r.ctr.steps_ahead_waiting > 0 && r.ctr.steps_ahead_waiting <= r.ctr.steps_ahead);
            if (!strcmp(cases[i].admission, "fixed:200")) {
                EXPECT_EQ_INT(r.ctr.admitted_offload, 3); /* 300, 260 and 200 tokens + 10 */
                EXPECT_EQ_INT(r.ctr.ioaa_decisions, 0);
            }
            if (!strcmp(cases[i].admission, "fixed:0")) EXPECT_EQ_INT(r.ctr.admitted_normal, 0);
            if (!strcmp(cases[i].admission, "ioaa")) {
                EXPECT(r.ctr.ioaa_decisions > 0);
                EXPECT(r.ctr.ioaa_nodes >= r.ctr.ioaa_decisions);
            }
            workload_free(&r.w);
        }
        workload_free(&van.w);
    }
}

/* On the locality model's prompt KV (not vanilla's) a request decodes the same tokens whichever
 * batch it is in: all normal, all offloaded with every block selected, and mixed. */
static void test_batch_independent(void)
{
    const char *adm[] = {"fixed:100000", "fixed:0", "fixed:200"};
    struct pi_out r[3];
    for (int i = 0; i < 3; i++) {
        struct pi_cfg c = {.policy = "pulseinfer",
                           .spec = "lengths:300,170,90,260",
                           .admission = adm[i],
                           .out_len = 8,
                           .max_batch = 4,
                           .selection = OFFLOAD_SOLOHEAD,
                           .budget_tokens = 512,
                           .prompt_kv = OFFLOAD_KV_LOCALITY};
        serve(&c, &r[i]);
        EXPECT_EQ_INT(r[i].rc, 0);
    }
    EXPECT_EQ_INT(r[0].ctr.admitted_offload, 0);
    EXPECT_EQ_INT(r[1].ctr.admitted_normal, 0);
    EXPECT(r[2].ctr.admitted_normal > 0 && r[2].ctr.admitted_offload > 0);
    EXPECT(same_tokens(&r[0].w, &r[1].w));
    EXPECT(same_tokens(&r[0].w, &r[2].w));
    for (int i = 0; i < 3; i++)
        workload_free(&r[i].w);
}

/* IOAA with a small selection budget and a GPU budget of about two whole requests: offloading
 * frees GPU memory, so it runs more requests at once by offloading some. */
static void test_ioaa_offloads(void)
{
    const struct model_config *m = model_config_find("tiny");
    struct pi_cfg c = {.policy = "pulseinfer",
                       .spec = "lengths:300,170,90,260,40,200,310,280",
                       .admission = "ioaa",
                       .out_len = 8,
                       .max_batch = 8,
                       .selection = OFFLOAD_SOLOHEAD,
                       .budget_tokens = 32,
                       .prompt_kv = OFFLOAD_KV_LOCALITY,
                       .kv_budget = (size_t)model_kv_bytes_per_token(m) * 330 * 2};
    struct pi_out r;
    serve(&c, &r);
    EXPECT_EQ_INT(r.rc, 0);
    EXPECT_EQ_INT(r.ctr.admitted_normal + r.ctr.admitted_offload, 8);
    EXPECT(r.ctr.admitted_offload > 0);
    EXPECT(r.ctr.ioaa_decisions > 0);
    EXPECT(r.ctr.ioaa_nodes_max >= 1);
    EXPECT_EQ_INT(r.ctr.tokens, 8 * 8);
    printf("IOAA, GPU budget of two requests: %lld normal + %lld offloaded, %lld decisions, "
           "%.1f nodes each (at most %lld), peak batch %lld\n",
           (long long)r.ctr.admitted_normal, (long long)r.ctr.admitted_offload,
           (long long)r.ctr.ioaa_decisions,
           r.ctr.ioaa_decisions ? (double)r.ctr.ioaa_nodes / r.ctr.ioaa_decisions : 0.0,
           (long long)r.ctr.ioaa_nodes_max, (long long)r.ctr.peak_batch);
    workload_free(&r.w);
}

/* A decision that admits some normal records the model's step for the same requests all
 * offloaded (counters.pulseinfer.decisions[].all_offload_step_ms, all_offload_fits): with the
 * offload layers of a measured profile made 1000x slower, IOAA keeps what fits the GPU whole
 * normal, and the alternative it passed over fit and was slower (the search is exact); with
 * the normal layers made so instead, it offloads everything and no decision carries one. */
static void test_ioaa_alternative(void)
{
    char prof[] = "/tmp/pulse_pi_alt_XXXXXX", scaled[] = "/tmp/pulse_pi_alts_XXXXXX";
    char *tmp[] = {prof, scaled};
    for (int i = 0; i < 2; i++) {
        const int fd = mkstemp(tmp[i]);
        if (fd >= 0) close(fd);
    }
    char args[512], out[4096];
    snprintf(args, sizeof args,
             "profile --backend cpu --model tiny --recall-engine gather-scatter --selection "
             "solohead --budget-tokens 64 --out %s",
             prof);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 0);
    for (int slow = 0; slow < 2; slow++) { /* which part is made slow: 0 normal, 1 offload */
        json_error_t pe;
        json_t *pj = json_load_file(prof, 0, &pe);
        json_t *part = json_object_get(pj, slow ? "offload" : "normal");
        json_t *ls = json_object_get(part, "layer_s"), *v, *row;
        size_t i, j;
        json_array_foreach(ls, i, v)
        {
            if (!json_is_array(v)) json_real_set(v, 1000 * json_number_value(v));
            json_array_foreach(v, j, row) json_real_set(row, 1000 * json_number_value(row));
        }
        EXPECT_EQ_INT(json_dump_file(pj, scaled, 0), 0);
        json_decref(pj);
        snprintf(args, sizeof args,
                 "run --backend cpu --policy pulseinfer --workload uniform:256:6 --output-len 2 "
                 "--budget-tokens 64 --profile %s --kv-budget-gb 0.002",
                 scaled);
        json_t *rj = tu_run_pulse_json(args, out, sizeof out);
        json_t *dec = json_object_get(
            json_object_get(json_object_get(rj, "counters"), "pulseinfer"), "decisions");
        size_t k, with_normal = 0;
        json_t *dj;
        EXPECT(json_array_size(dec) > 0);
        json_array_foreach(dec, k, dj)
        {
            const double step = json_number_value(json_object_get(dj, "predicted_step_ms"));
            json_t *alt = json_object_get(dj, "all_offload_step_ms");
            const int normal = (int)json_integer_value(json_object_get(dj, "normal"));
            EXPECT(step > 0);
            EXPECT_EQ_INT(alt != NULL, normal > 0);
            EXPECT_EQ_INT(json_object_get(dj, "all_offload_fits") != NULL, normal > 0);
            if (!alt) continue;
            with_normal++;
            EXPECT(json_is_true(json_object_get(dj, "all_offload_fits")));
            EXPECT(json_number_value(alt) > step);
        }
        EXPECT_EQ_INT(with_normal > 0, slow);
        json_decref(rj);
    }
    /* the recall and the compute beside each other as the profile measured them (a factor per
     * round size, the compute's slowdown): the fold and the refit take them, the run says so */
    json_error_t pe;
    json_t *pj = json_load_file(scaled, 0, &pe), *rec = json_object_get(pj, "recall");
    json_object_set_new(
        rec, "beside_compute",
        json_pack("{s:[f,f], s:[f,f]}", "bytes", 262144.0, 16777216.0, "factor", 0.25, 0.75));
    json_object_set_new(rec, "compute_beside", json_real(1.5));
    EXPECT_EQ_INT(json_dump_file(pj, scaled, 0), 0);
    json_decref(pj);
    json_t *rj = tu_run_pulse_json(args, out, sizeof out);
    json_t *rf = json_object_get(json_object_get(json_object_get(rj, "counters"), "pulseinfer"),
                                 "ioaa_refit");
    json_t *bc = json_object_get(rf, "beside_compute");
    EXPECT_EQ_INT((int)json_array_size(json_object_get(bc, "factor")), 2);
    EXPECT_NEAR(json_number_value(json_array_get(json_object_get(bc, "factor"), 1)), 0.75, 0);
    EXPECT_NEAR(json_number_value(json_array_get(json_object_get(bc, "bytes"), 0)), 262144, 0);
    EXPECT_NEAR(json_number_value(json_object_get(rf, "compute_beside")), 1.5, 0);
    EXPECT_STR_EQ(json_string_value(json_object_get(rf, "beside_from")), "profile");
    json_decref(rj);
    /* the compute's slowdown per round size: echoed as the table */
    pj = json_load_file(scaled, 0, &pe), rec = json_object_get(pj, "recall");
    json_object_set_new(rec, "compute_beside",
                        json_pack("{s:[f,f], s:[f,f]}", "bytes", 1e6, 16e6, "factor", 1.2, 1.5));
    EXPECT_EQ_INT(json_dump_file(pj, scaled, 0), 0);
    json_decref(pj);
    rj = tu_run_pulse_json(args, out, sizeof out);
    rf = json_object_get(json_object_get(json_object_get(rj, "counters"), "pulseinfer"),
                         "ioaa_refit");
    json_t *gj = json_object_get(rf, "compute_beside");
    EXPECT_NEAR(json_number_value(json_array_get(json_object_get(gj, "factor"), 1)), 1.5, 0);
    EXPECT_NEAR(json_number_value(json_array_get(json_object_get(gj, "bytes"), 0)), 1e6, 0);
    json_decref(rj);
    for (int i = 0; i < 2; i++)
        remove(tmp[i]);
}

/* The profile's recall bytes by context (recall.by_context): a run of the schedule measured
 * takes them at each decision's mean context (here every prompt's, 512 tokens: half way in
 * log c between 256 and 1024, so the two points' mean), says so in the JSON, and its decision's
 * table is rewritten for them; a run of another source, margin or schedule does not, says why,
 * and warns. */
static void test_ioaa_by_context(void)
{
    char prof[] = "/tmp/pulse_pi_ctx_XXXXXX";
    const int fd = mkstemp(prof);
    if (fd >= 0) close(fd);
    char args[768], out[8192];
    const char *flags = "--selection solohead --recall-engine gather-scatter --budget-tokens 64";
    snprintf(args, sizeof args,
             "profile --backend cpu --model tiny %s --bytes-contexts 256,1024 --speculate "
             "--spec-margin 0.25 --out %s",
             flags, prof);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 0);
    for (int big = 0; big < 2; big++) { /* the bytes set by hand, then 100x */
        json_error_t pe;
        json_t *pj = json_load_file(prof, 0, &pe);
        json_t *bc = json_object_get(json_object_get(pj, "recall"), "by_context");
        const double k = big ? 100 : 1;
        json_object_set_new(bc, "prefetch", json_pack("[f,f]", 1000 * k, 4000 * k));
        json_object_set_new(bc, "after_selection", json_pack("[f,f]", 100 * k, 400 * k));
        json_object_set_new(bc, "bytes", json_pack("[f,f]", 1100 * k, 4400 * k));
        EXPECT_EQ_INT(json_dump_file(pj, prof, 0), 0);
        json_decref(pj);
        snprintf(args, sizeof args,
                 "run --backend cpu --policy pulseinfer --workload uniform:512:6 --output-len 2 "
                 "%s --speculate --spec-margin 0.25 --profile %s --kv-budget-gb 0.002 "
                 "--ioaa-refit off",
                 flags, prof);
        json_t *rj = tu_run_pulse_json(args, out, sizeof out);
        json_t *pc = json_object_get(json_object_get(rj, "counters"), "pulseinfer");
        json_t *bj = json_object_get(pc, "ioaa_bytes_by_context");
        json_t *d0 = json_array_get(json_object_get(pc, "decisions"), 0);
        EXPECT(json_is_true(json_object_get(bj, "used")));
        EXPECT(json_is_null(json_object_get(bj, "skipped")));
        EXPECT_EQ_INT(json_integer_value(json_object_get(bj, "updates")), 1);
        EXPECT_STR_EQ(json_string_value(json_object_get(pc, "ioaa_recall_bytes_from")),
                      "profile by context");
        json_t *at = json_object_get(bj, "last_decision");
        EXPECT_NEAR(json_number_value(json_object_get(at, "context")), 512, 0);
        EXPECT_NEAR(json_number_value(json_object_get(at, "prefetch")), 2500 * k, 1e-9 * k);
        EXPECT_NEAR(json_number_value(json_object_get(at, "after_selection")), 250 * k, 1e-9 * k);
        EXPECT_NEAR(json_number_value(json_object_get(d0, "bytes_context")), 512, 0);
        EXPECT_NEAR(json_number_value(json_object_get(d0, "recall_bytes_per_request_layer")),
                    2750 * k, 1e-9 * k);
        /* the bytes reached the decision's table: the refit (off: its factors stay 1) rewrote
         * it for them */
        json_t *rf = json_object_get(pc, "ioaa_refit");
        EXPECT(json_integer_value(json_object_get(rf, "rewrites")) >= 1);
        EXPECT_EQ_INT(json_integer_value(json_object_get(rf, "errors")), 0);
        json_decref(rj);
    }
    /* the source's r the profile's steps aimed at, the run's own with the same profile and
     * budget; another (another locality profile's churn) is not this run's */
    json_error_t pe;
    json_t *pj = json_load_file(prof, 0, &pe);
    json_t *sb = json_object_get(json_object_get(json_object_get(pj, "recall"), "by_context"),
                                 "source_bytes");
    EXPECT(json_number_value(sb) > 0);
    json_real_set(sb, 2 * json_number_value(sb));
    EXPECT_EQ_INT(json_dump_file(pj, prof, 0), 0);
    json_decref(pj);
    static const struct {
        const char *flags, *why;
    } other[] = {
        {"--speculate --spec-margin 0.25", "measured with another locality profile or budget"},
        {"--speculate --spec-margin 0.5", "measured at another --spec-margin"},
        {"", "measured with speculation, this run is exact at layer"},
        {"--speculate --spec-margin 0.25 --ioaa-bytes profile", "--ioaa-bytes profile"}};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(other); i++) {
        snprintf(args, sizeof args,
                 "run --backend cpu --policy pulseinfer --workload uniform:512:6 --output-len 2 "
                 "%s %s --profile %s --ioaa-refit off",
                 flags, other[i].flags, prof);
        json_t *rj = tu_run_pulse_json(args, out, sizeof out);
        json_t *pc = json_object_get(json_object_get(rj, "counters"), "pulseinfer");
        json_t *bj = json_object_get(pc, "ioaa_bytes_by_context");
        EXPECT(json_is_false(json_object_get(bj, "used")));
        EXPECT_STR_EQ(json_string_value(json_object_get(bj, "skipped")), other[i].why);
        EXPECT_EQ_INT(json_integer_value(json_object_get(bj, "updates")), 0);
        EXPECT_EQ_INT(
            json_integer_value(json_object_get(json_object_get(pc, "ioaa_refit"), "rewrites")), 0);
        EXPECT(json_object_get(json_array_get(json_object_get(pc, "decisions"), 0),
                               "bytes_context") == NULL);
        if (i < 3) EXPECT_STR_CONTAINS(out, other[i].why);
        if (i == 0) { /* back to the run's */
            pj = json_load_file(prof, 0, &pe);
            sb = json_object_get(json_object_get(json_object_get(pj, "recall"), "by_context"),
                                 "source_bytes");
            json_real_set(sb, json_number_value(sb) / 2);
            EXPECT_EQ_INT(json_dump_file(pj, prof, 0), 0);
            json_decref(pj);
        }
        json_decref(rj);
    }
    remove(prof);
}

/* ------------------------------------------------------------------ IRQ */

static _Atomic long g_delay_ns;

static int slow_h2d(const struct recall_copy_ops *o, void *dst, const void *src, size_t bytes,
                    void *stream)
{
    const long ns = atomic_load(&g_delay_ns);
    if (ns > 0) nanosleep(&(struct timespec){0, ns}, NULL);
    return recall_copy_ops_cpu()->h2d(o, dst, src, bytes, stream);
}

static void test_irq(void)
{
    struct recall_copy_ops ops = *recall_copy_ops_cpu();
    ops.h2d = slow_h2d;
    atomic_store(&g_delay_ns, 3000000); /* 3 ms per copied piece: a slow link */
    struct pi_cfg c = {.policy = "pulseinfer",
                       .spec = "lengths:60,70,300,280",
                       .admission = "fixed:200",
                       .out_len = 6,
                       .max_batch = 4,
                       .selection = OFFLOAD_SOLOHEAD,
                       .budget_tokens = 32, /* a few blocks: every step recalls */
                       .prompt_kv = OFFLOAD_KV_LOCALITY,
                       .ops = &ops};
    struct pi_out irq, seq, irq_zc;
    c.no_verify = 1;
    c.zero_copy = 1;
    serve(&c, &irq_zc); /* zero-copy's gather beside the normal layers: no host round trip */
    EXPECT_EQ_INT(irq_zc.rc, 0);
    c.zero_copy = 0;
    serve(&c, &irq);
    c.no_irq = 1;
    serve(&c, &seq);
    EXPECT_EQ_INT(irq.rc, 0);
    EXPECT_EQ_INT(seq.rc, 0);
    EXPECT(same_tokens(&irq.w, &seq.w));
    EXPECT_EQ_INT(irq.ctr.admitted_offload, 2);
    EXPECT(irq.ctr.recall_bytes > 0);
    EXPECT_EQ_INT(irq.ctr.recall_bytes, seq.ctr.recall_bytes);
    EXPECT(irq.ctr.layer_switches > 0);
    EXPECT(irq.ctr.normal_layers_in_flight >= irq.ctr.layer_switches);
    EXPECT(irq.ctr.recalls_hidden + irq.ctr.recalls_exposed > 0);
    EXPECT_EQ_INT(seq.ctr.layer_switches, 0);
    EXPECT_EQ_INT(seq.ctr.normal_layers_in_flight, 0);
    printf("IRQ with a slow link: %lld switches, %lld normal layers during recalls, %lld rounds "
           "hidden, %lld exposed (%.1f ms waited); --no-irq: %lld switches\n",
           (long long)irq.ctr.layer_switches, (long long)irq.ctr.normal_layers_in_flight,
           (long long)irq.ctr.recalls_hidden, (long long)irq.ctr.recalls_exposed,
           irq.ctr.offload_wait_s * 1e3, (long long)seq.ctr.layer_switches);
    atomic_store(&g_delay_ns, 0);
    EXPECT(same_tokens(&irq.w, &irq_zc.w)); /* the same selection, another engine */
    workload_free(&irq.w);
    workload_free(&seq.w);
    workload_free(&irq_zc.w);
}

/* SoloHead recalls whole blocks (every KV head: token-wise chunks), head-wise one head's. */
static void test_chunks(void)
{
    const struct model_config *m = model_config_find("tiny");
    const int64_t block = (int64_t)16 * m->n_kv_heads * m->head_dim * 2 * 2; /* K and V, bf16 */
    for (int sel = 0; sel < 2; sel++) {
        struct pi_cfg c = {.policy = "pulseinfer",
                           .spec = "lengths:300,280",
                           .admission = "fixed:0",
                           .out_len = 4,
                           .max_batch = 2,
                           .selection = sel ? OFFLOAD_SOLOHEAD : OFFLOAD_HEADWISE,
                           .budget_tokens = 32,
                           .prompt_kv = OFFLOAD_KV_LOCALITY};
        struct pi_out r;
        serve(&c, &r);
        EXPECT_EQ_INT(r.rc, 0);
        EXPECT(r.ctr.recall_chunks > 0);
        if (r.ctr.recall_chunks)
            EXPECT_EQ_INT(r.ctr.recall_bytes / r.ctr.recall_chunks,
                          sel ? block : block / m->n_kv_heads);
        workload_free(&r.w);
    }
    struct pi_cfg v = {
        .policy = "vanilla", .spec = "lengths:300,280", .out_len = 4, .max_batch = 2};
    struct pi_out van;
    serve(&v, &van);
    EXPECT_EQ_INT(van.ctr.recall_bytes, 0);
    workload_free(&van.w);
}

/* ------------------------------------------------------------------ a dead link */

static int dead_h2d(const struct recall_copy_ops *o, void *dst, const void *src, size_t bytes,
                    void *stream)
{
    (void)o, (void)dst, (void)src, (void)bytes, (void)stream;
    return PULSE_ERR_IO;
}

/* Every recall fails for good: the offload batch's requests end with an error and a reason,
 * the normal batch's finish with exactly the tokens of a clean run, none is lost, the run
 * completes. */
static void test_dead_link(void)
{
    struct recall_copy_ops ops = *recall_copy_ops_cpu();
    ops.h2d = dead_h2d;
    struct pi_cfg c = {.policy = "pulseinfer",
                       .spec = "lengths:300,170,90,260,40,200",
                       .admission = "fixed:200",
                       .out_len = 6,
                       .max_batch = 4,
                       .selection = OFFLOAD_SOLOHEAD,
                       .budget_tokens = 32,
                       .no_verify = 1};
    struct pi_out clean, r;
    serve(&c, &clean);
    EXPECT_EQ_INT(clean.rc, 0);
    c.ops = &ops;
    serve(&c, &r);
    EXPECT_EQ_INT(r.rc, 0);
    int failed = 0, same = 0, lost = 0;
    for (int i = 0; i < r.w.n; i++) {
        const struct request *q = &r.w.reqs[i];
        lost += q->done_s < 0 || (!q->error && q->generated != q->output_len);
        if (q->error) {
            failed++;
            EXPECT(q->prompt_len + q->output_len > 200); /* only offloaded ones */
            continue;
        }
        for (int j = 0; j < clean.w.n; j++)
            if (clean.w.reqs[j].id == q->id)
                same += !memcmp(q->tokens, clean.w.reqs[j].tokens, sizeof(int32_t) * q->output_len);
    }
    EXPECT_EQ_INT(failed, 3);
    EXPECT_EQ_INT(same, 3);
    EXPECT_EQ_INT(lost, 0);
    EXPECT_EQ_INT(r.ctr.requests_failed, 3);
    printf("a dead link: %d offloaded requests ended with an error, %d normal ones finished with "
           "the clean run's tokens, %d lost\n",
           failed, same, lost);
    workload_free(&r.w);
    workload_free(&clean.w);
}

/* ------------------------------------------------------------------ flags */

static char out[1 << 16];

/* Faults through `pulse run` itself (PULSE_RECALL_FAULT, runtime/store/recall_fault.h): on a dead
 * link pulseinfer's run exits 1 with status "error" and every request listed, the offloaded ones
 * with status "error" and a reason, the normal ones "ok"; a transient fault (first:2) is retried
 * and gives the clean run's tokens, for every offload policy; a bad spec is one line. */
static void test_fault_cli(void)
{
    char path[] = "/tmp/pulse_fault_XXXXXX", cmd[512], clean_hash[64] = "";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    const char *common = "run --backend cpu --model tiny --workload lengths:300,170,90,260,40,200 "
                         "--output-len 6 --budget-tokens 32";
    setenv("PULSE_RECALL_FAULT", "dead", 1);
    snprintf(cmd, sizeof cmd, "%s --policy pulseinfer --admission fixed:200 --out %s", common,
             path);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 1);
    EXPECT(strstr(out, "3 of 6 requests ended with an error") != NULL);
    json_error_t je;
    json_t *r = json_load_file(path, 0, &je);
    EXPECT(r != NULL);
    if (r) {
        EXPECT(!strcmp(json_string_value(json_object_get(r, "status")), "error"));
        json_t *reqs = json_object_get(r, "requests"), *q;
        size_t i;
        int n_err = 0, n_ok = 0;
        EXPECT_EQ_INT((int)json_array_size(reqs), 6);
        json_array_foreach(reqs, i, q)
        {
            const char *st = json_string_value(json_object_get(q, "status"));
            const int len = (int)json_integer_value(json_object_get(q, "prompt_len"));
            /* the batch that took it: fixed:200 offloads (1) the longer ones */
            EXPECT_EQ_INT(json_integer_value(json_object_get(q, "batch")), len + 6 > 200);
            if (st && !strcmp(st, "error")) {
                n_err++;
                EXPECT(len + 6 > 200 && json_is_string(json_object_get(q, "error")));
            } else if (st && !strcmp(st, "ok")) {
                n_ok++;
                EXPECT(len + 6 <= 200);
            }
        }
        EXPECT_EQ_INT(n_err, 3);
        EXPECT_EQ_INT(n_ok, 3);
        json_t *m = json_object_get(r, "metrics");
        EXPECT_EQ_INT(json_integer_value(json_object_get(m, "failed")), 3);
        EXPECT(json_integer_value(
                   json_object_get(json_object_get(json_object_get(r, "counters"), "offload"),
                                   "recall_faults_injected")) > 0);
        json_decref(r);
    }
    /* a dead link under speculation: its prefetches fail too, the same requests end */
    snprintf(cmd, sizeof cmd, "%s --policy pulseinfer --speculate --admission fixed:200 --out %s",
             common, path);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 1);
    EXPECT(strstr(out, "3 of 6 requests ended with an error") != NULL);
    static const char *const pols[] = {"arkvale", "infinigen", "pulseinfer",
                                       "pulseinfer --speculate"};
    for (size_t k = 0; k < PULSE_ARRAY_LEN(pols); k++) {
        unsetenv("PULSE_RECALL_FAULT");
        snprintf(cmd, sizeof cmd, "%s --policy %s --out %s", common, pols[k], path);
        EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
        const char *h = strstr(out, "ms, tokens "); /* the run line's token hash */
        if (h) snprintf(clean_hash, sizeof clean_hash, "%.27s", h);
        setenv("PULSE_RECALL_FAULT", "first:2", 1);
        EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
        EXPECT(h && strstr(out, clean_hash) != NULL); /* the same tokens */
        r = json_load_file(path, 0, &je);
        EXPECT(r != NULL);
        if (r) {
            json_t *off = json_object_get(json_object_get(r, "counters"), "offload");
            EXPECT_EQ_INT(json_integer_value(json_object_get(off, "recall_failures")), 2);
            EXPECT_EQ_INT(json_integer_value(json_object_get(off, "recall_faults_injected")), 2);
            json_decref(r);
        }
        setenv("PULSE_RECALL_FAULT", "delay:300", 1); /* a slow link: late, never wrong */
        EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
        EXPECT(h && strstr(out, clean_hash) != NULL);
        r = json_load_file(path, 0, &je);
        EXPECT(r != NULL);
        if (r) {
            json_t *off = json_object_get(json_object_get(r, "counters"), "offload");
            EXPECT_EQ_INT(json_integer_value(json_object_get(off, "recall_failures")), 0);
            EXPECT(json_integer_value(json_object_get(off, "recall_faults_injected")) > 0);
            json_decref(r);
        }
    }
    setenv("PULSE_RECALL_FAULT", "every:0", 1);
    snprintf(cmd, sizeof cmd, "%s --policy arkvale --out %s", common, path);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 1);
    EXPECT(strstr(out, "PULSE_RECALL_FAULT: recall fault: 'every:0' is not") != NULL);
    unsetenv("PULSE_RECALL_FAULT");
    remove(path);
    printf("faults through pulse run: a dead link ends the offloaded requests with an error, "
           "first:2 is retried and delay:300 waits, both with the clean tokens (arkvale, "
           "infinigen, pulseinfer, pulseinfer --speculate)\n");
}

static void test_flags(void)
{
    struct pi_cfg c = {.policy = "pulseinfer",
                       .spec = "lengths:100",
                       .admission = "fixed:x",
                       .out_len = 2,
                       .max_batch = 1,
                       .budget_tokens = 32};
    struct pi_out r;
    serve(&c, &r); /* ctx_create refuses it: the run never starts */
    EXPECT(r.rc != 0);
    workload_free(&r.w);
    static const char *const bad[] = {"fixed: 5", "fixed:+5", "fixed:0x10", "fixed:5 ", "fixed:"};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(bad); i++) {
        c.admission = bad[i];
        serve(&c, &r);
        EXPECT(r.rc != 0);
        workload_free(&r.w);
    }
    EXPECT_EQ_INT(tu_run_pulse("run --backend cpu --policy arkvale --no-irq", out, sizeof out), 2);
    EXPECT(strstr(out, "--no-irq: only for pulseinfer") != NULL);
    EXPECT_EQ_INT(
        tu_run_pulse("run --backend cpu --policy vanilla --admission fixed:10", out, sizeof out),
        2);
    EXPECT_EQ_INT(
        tu_run_pulse("run --backend cpu --policy pulseinfer --admission fixe", out, sizeof out), 2);
    EXPECT(strstr(out, "--admission") != NULL);
    EXPECT_EQ_INT(tu_run_pulse("run --backend cpu --policy pulseinfer --trace /nonexistent/t.json",
                               out, sizeof out),
                  2);
    EXPECT(strstr(out, "--trace: /nonexistent/t.json: cannot write in /nonexistent") != NULL);
    /* an IOAA profile the run cannot use, and a malformed fixed admission, are usage errors */
    EXPECT_EQ_INT(tu_run_pulse("run --backend cpu --policy pulseinfer --profile /nonexistent.json",
                               out, sizeof out),
                  2);
    EXPECT(strstr(out, "--profile: /nonexistent.json: cannot open") != NULL);
    /* a profile of another engine or model is refused before the work, naming what differs */
    {
        char prof[] = "/tmp/pulse_pi_prof_XXXXXX", args[512];
        int pfd = mkstemp(prof);
        if (pfd >= 0) close(pfd);
        snprintf(args, sizeof args,
                 "profile --backend cpu --model tiny --recall-engine gather-scatter --selection "
                 "solohead --budget-tokens 64 --batches 1,2 --contexts 256,512 --out %s",
                 prof);
        EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 0);
        snprintf(args, sizeof args,
                 "run --backend cpu --policy pulseinfer --recall-engine zero-copy --profile %s",
                 prof);
        EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 2);
        EXPECT(strstr(out, "made for recall engine gather-scatter, this run's is zero-copy"));
        snprintf(args, sizeof args,
                 "run --backend cpu --model tiny-gemma3 --policy pulseinfer --profile %s", prof);
        EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 2);
        EXPECT(strstr(out, "made for model tiny, this run's is tiny-gemma3"));
        /* the profile's device is recorded and compared with the run's: a profile measured on
         * another device (here one whose copy bandwidth was 10x this run's) is carried to this
         * one, its layer times scaled by the copy bandwidths, with a warning, and
         * ioaa_profile_device_match false */
        char res[] = "/tmp/pulse_pi_dev_XXXXXX";
        int rfd = mkstemp(res);
        if (rfd >= 0) close(rfd);
        /* round 2: the same without its measured ceilings, used as it is (said so), and at a
         * budget (128) other than the profile's (64): the budget's warning */
        double first_step[3] = {0, 0, 0}, copy = 0;
        { /* its recall rounds made 1000x faster: the steps are layer-bound whatever the load
             the profile was measured under */
            json_error_t pe;
            json_t *pj = json_load_file(prof, 0, &pe), *v;
            size_t i;
            json_array_foreach(json_object_get(json_object_get(pj, "recall"), "round_s"), i, v)
                json_real_set(v, 1e-3 * json_number_value(v));
            EXPECT_EQ_INT(json_dump_file(pj, prof, 0), 0);
            json_decref(pj);
        }
        for (int other = 0; other < 3; other++) {
            if (other) {
                json_error_t pe;
                json_t *pj = json_load_file(prof, 0, &pe);
                EXPECT(pj != NULL);
                json_object_set_new(json_object_get(pj, "env"), "gpu", json_string("NVIDIA H200"));
                json_t *m = json_object_get(pj, "measurement");
                if (other == 1) {
                    copy = 10 * json_number_value(json_object_get(m, "copy_bandwidth_GBps"));
                    json_object_set_new(m, "copy_bandwidth_GBps", json_real(copy));
                } else {
                    json_object_del(pj, "measurement");
                }
                EXPECT_EQ_INT(json_dump_file(pj, prof, 0), 0);
                json_decref(pj);
            }
            snprintf(
                args, sizeof args,
                "run --backend cpu --policy pulseinfer --workload uniform:256:2 --output-len 2 "
                "--budget-tokens %d --profile %s --out %s",
                other == 2 ? 128 : 64, prof, res);
            EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 0);
            EXPECT_EQ_INT(strstr(out, "was measured on NVIDIA H200, this run is on cpu") != NULL,
                          other > 0);
            EXPECT_EQ_INT(strstr(out, "has no measured ceilings") != NULL, other == 2);
            EXPECT_EQ_INT(strstr(out, "measured at a 64-token budget, this run's is 128") != NULL,
                          other == 2);
            json_error_t re;
            json_t *rj = json_load_file(res, 0, &re);
            const json_t *pc = json_object_get(json_object_get(rj, "counters"), "pulseinfer");
            EXPECT_STR_EQ(json_string_value(json_object_get(pc, "ioaa_profile_device")) ?: "",
                          other ? "NVIDIA H200" : "cpu");
            EXPECT(json_is_boolean(json_object_get(pc, "ioaa_profile_device_match")) &&
                   json_boolean_value(json_object_get(pc, "ioaa_profile_device_match")) == !other);
            EXPECT_EQ_INT(json_integer_value(json_object_get(pc, "ioaa_profile_budget_tokens")),
                          64);
            const json_t *sc = json_object_get(pc, "ioaa_profile_scaled");
            const double hbm = json_number_value(json_object_get(
                json_object_get(json_object_get(rj, "metrics"), "step"), "hbm_copy_GBps"));
            if (other == 1) {
                EXPECT(hbm > 0);
                EXPECT_NEAR(json_number_value(json_object_get(sc, "compute")), copy / hbm,
                            1e-6 * copy / hbm);
                EXPECT(json_number_value(json_object_get(sc, "recall")) > 0);
                EXPECT(strstr(out, "its layer times scaled by") != NULL);
            } else {
                EXPECT(json_is_null(sc));
            }
            first_step[other] = json_number_value(json_object_get(
                json_array_get(json_object_get(pc, "decisions"), 0), "predicted_step_ms"));
            json_decref(rj);
        }
        /* the carried profile's layers take about 10x as long: the first decision's step
         * (every request admitted at once, layer-bound with those rounds) grows with them */
        EXPECT(first_step[0] > 0 && first_step[1] > 3 * first_step[0]);
        /* --ioaa-bytes: IOAA's recall per request and layer (r) with a measured profile is the
         * run's query source's (the default), which is the analytic profile's r, or with
         * profile the profile's (its own workload's); the JSON says which and keeps the
         * profile's */
        json_error_t pe;
        json_t *pj = json_load_file(prof, 0, &pe); /* its own workload: another r */
        const double measured =
            3 * json_number_value(json_object_get(pj, "recall_bytes_per_request_layer"));
        json_object_set_new(pj, "recall_bytes_per_request_layer", json_real(measured));
        EXPECT_EQ_INT(json_dump_file(pj, prof, 0), 0);
        json_decref(pj);
        static const char *const how[] = {"", "--profile", "--ioaa-bytes profile --profile"};
        static const char *const from[] = {"analytic", "source", "profile"};
        double r[3] = {0, 0, 0}, r_prof[3] = {0, 0, 0};
        for (int k = 0; k < 3; k++) {
            snprintf(args, sizeof args,
                     "run --backend cpu --policy pulseinfer --workload uniform:256:2 --output-len "
                     "2 --budget-tokens 64 %s %s --out %s",
                     how[k], k ? prof : "", res);
            EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 0);
            json_error_t re;
            json_t *rj = json_load_file(res, 0, &re);
            const json_t *pc = json_object_get(json_object_get(rj, "counters"), "pulseinfer");
            EXPECT_STR_EQ(json_string_value(json_object_get(pc, "ioaa_recall_bytes_from")) ?: "",
                          from[k]);
            r[k] = json_number_value(json_object_get(pc, "ioaa_recall_bytes_per_request_layer"));
            r_prof[k] = json_number_value(json_object_get(pc, "ioaa_recall_bytes_profile"));
            json_decref(rj);
        }
        EXPECT(r[0] > 0 && measured > 0 && fabs(r[0] - measured) > 1e-3 * measured);
        EXPECT_NEAR(r[1], r[0], 1e-9 * r[0]);
        EXPECT_NEAR(r[2], measured, 1e-9 * measured);
        EXPECT_NEAR(r_prof[1], measured, 1e-9 * measured);
        printf("IOAA's r: the profile's %.0f bytes, the run's source's %.0f\n", measured, r[1]);
        remove(res);
        remove(prof);
    }
    for (size_t i = 0; i < PULSE_ARRAY_LEN(bad); i++) {
        char args[128];
        snprintf(args, sizeof args, "run --backend cpu --policy pulseinfer --admission '%s'",
                 bad[i]);
        EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 2);
        EXPECT(strstr(out, "is not ioaa or fixed:LEN") != NULL);
    }
    char path[] = "/tmp/pulse_pi_XXXXXX", trace[] = "/tmp/pulse_pi_trace_XXXXXX", cmd[512];
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    if ((fd = mkstemp(trace)) >= 0) close(fd);
    snprintf(cmd, sizeof cmd,
             "run --backend cpu --policy pulseinfer --workload lengths:60,300,280,90 "
             "--output-len 4 --max-batch 4 --budget-tokens 32 --admission fixed:200 --out %s "
             "--trace %s",
             path, trace);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    remove(path);
    EXPECT(j != NULL);
    /* the timeline: its schema, every batch's layers in order, spans on all three tracks */
    char why[512];
    EXPECT_EQ_INT(timeline_check(trace, why, sizeof why), 0);
    json_t *tr = json_load_file(trace, 0, &je);
    remove(trace);
    int per_track[TIMELINE_TRACKS] = {0};
    json_t *ev;
    size_t k;
    json_array_foreach(json_object_get(tr, "traceEvents"), k, ev)
    {
        const int tid = (int)json_integer_value(json_object_get(ev, "tid"));
        if (!strcmp(json_string_value(json_object_get(ev, "ph")) ?: "", "X") && tid >= 0 &&
            tid < TIMELINE_TRACKS)
            per_track[tid]++;
    }
    json_decref(tr);
    /* 4 steps x 4 layers of each batch (offload: two pieces a layer) while both run */
    EXPECT(per_track[TIMELINE_NORMAL] >= 4 * 4);
    EXPECT(per_track[TIMELINE_OFFLOAD] >= 2 * 4 * 4);
    EXPECT(per_track[TIMELINE_RECALL] > 0);
    json_t *tj =
        json_object_get(json_object_get(json_object_get(j, "counters"), "pulseinfer"), "trace");
    EXPECT(json_is_true(json_object_get(tj, "written")));
    const double busy = json_real_value(json_object_get(tj, "device_busy_fraction"));
    EXPECT(busy > 0 && busy <= 1.0);
    json_t *sched = json_object_get(json_object_get(j, "counters"), "schedule");
    EXPECT_EQ_INT(json_integer_value(json_object_get(sched, "admitted_offload")), 2);
    EXPECT_EQ_INT(json_integer_value(json_object_get(sched, "admitted_normal")), 2);
    EXPECT(json_is_array(json_object_get(sched, "batch_max")));
    EXPECT_EQ_INT(
        json_integer_value(json_object_get(json_object_get(j, "counters"), "step_host_syncs")), 0);
    json_t *pi = json_object_get(json_object_get(j, "counters"), "pulseinfer");
    EXPECT(json_is_true(json_object_get(pi, "irq")));
    EXPECT(!strcmp(json_string_value(json_object_get(pi, "admission")) ?: "", "fixed:200"));
    EXPECT(json_is_array(json_object_get(pi, "decisions")) &&
           json_array_size(json_object_get(pi, "decisions")) == 0); /* fixed: IOAA never ran */
    json_t *cfg = json_object_get(json_object_get(j, "config"), "offload");
    EXPECT(!strcmp(json_string_value(json_object_get(cfg, "selection")) ?: "", "solohead"));
    json_t *batches = json_object_get(
        json_object_get(json_object_get(json_object_get(j, "metrics"), "step"), "per_step"),
        "batches");
    EXPECT(json_array_size(batches) == 4 && json_array_size(json_array_get(batches, 0)) == 2);
    json_decref(j);
}

/* With a recall cap IOAA's recall rounds take at least bytes / cap (its profile's t_R raised,
 * a counter the JSON carries); without one nothing is raised. */
static void test_ioaa_cap(void)
{
    for (int capped = 0; capped < 2; capped++) {
        char cmd[512];
        snprintf(cmd, sizeof cmd,
                 "run --backend cpu --policy pulseinfer --workload lengths:60,300,280,90 "
                 "--output-len 2 --max-batch 4 --budget-tokens 32 %s",
                 capped ? "--recall-cap-gbps 0.01" : "");
        json_t *j = tu_run_pulse_json(cmd, out, sizeof out);
        const json_int_t raised = json_integer_value(
            json_object_get(json_object_get(json_object_get(j, "counters"), "pulseinfer"),
                            "ioaa_recall_rounds_capped"));
        if (capped)
            EXPECT(raised > 0);
        else
            EXPECT(raised == 0);
        json_decref(j);
    }
}

/* ------------------------------------------------------------------ speculation */

static double rate(const struct serve_counters *c)
{
    return c->spec_scored ? (double)c->spec_held / (double)c->spec_scored : -1;
}

/* The speculation tests' runs: every request offloaded, SoloHead at a budget of two blocks, on
 * the real query (prefilled prompt KV) or the locality one, on zero-copy or gather-scatter. */
static struct pi_cfg spec_cfg(int real, int zc)
{
    return (struct pi_cfg){.policy = "pulseinfer",
                           .spec =
                               real ? "lengths:300,90,260,200" : "lengths:300,170,90,260,40,200",
                           .admission = "fixed:0",
                           .out_len = real ? 6 : 10,
                           .max_batch = 4,
                           .selection = OFFLOAD_SOLOHEAD,
                           .budget_tokens = 32,
                           .prompt_kv = real ? OFFLOAD_KV_PREFILL : OFFLOAD_KV_LOCALITY,
                           .query = real ? OFFLOAD_QUERY_REAL : OFFLOAD_QUERY_LOCALITY,
                           .zero_copy = zc};
}

/* An attention that recalls (offload_params.attend_recall, zero-copy): the layers selected at
 * their own layer read their misses from the host pool in their attention, which stores them
 * into the slots the plan gave them, with no gather. The tokens are the gather's runs', exact
 * (a layer's every miss) and speculated with a poor predictor (its corrections), with and
 * without IRQ, on the locality and the real query; every step verifies every resident block
 * (offload_verify), so the attention stored what a gather would have. The counters: the layers
 * and chunks it recalled, every miss exact, the corrections speculated, the same plans. Layers
 * selected ahead (infinigen) keep their gather. */
/* c run with the gather (g, --attend-recall off) and with --attend-recall on (a), and with
 * --attend-recall corrections (the default): all run, the same tokens and the same chunks
 * recalled; the corrections' run recalls in the attention exactly what `on` does where c
 * speculates from the layer's input (its exact selections' misses are the corrections), and
 * nothing elsewhere (every miss gathered); returns whether a's tokens are g's. */
static int attend_recall_pair(struct pi_cfg c, struct pi_out *g, struct pi_out *a)
{
    c.attend_recall = OFFLOAD_ATTEND_OFF;
    serve(&c, g);
    c.attend_recall = OFFLOAD_ATTEND_ON;
    serve(&c, a);
    struct pi_out k;
    c.attend_recall = OFFLOAD_ATTEND_CORRECTIONS;
    serve(&c, &k);
    EXPECT_EQ_INT(g->rc, 0);
    EXPECT_EQ_INT(a->rc, 0);
    EXPECT_EQ_INT(k.rc, 0);
    const int same = same_tokens(&g->w, &a->w);
    EXPECT(same);
    EXPECT(same_tokens(&g->w, &k.w));
    EXPECT_EQ_INT(a->ctr.recall_chunks, g->ctr.recall_chunks);
    EXPECT_EQ_INT(k.ctr.recall_chunks, g->ctr.recall_chunks);
    EXPECT_EQ_INT(g->ctr.attend_recall_layers + g->ctr.attend_recall_chunks, 0);
    const int corrections = c.speculate && c.spec_from == OFFLOAD_SPEC_FROM_INPUT;
    EXPECT_EQ_INT(k.ctr.attend_recall_layers, corrections ? a->ctr.attend_recall_layers : 0);
    EXPECT_EQ_INT(k.ctr.attend_recall_chunks, corrections ? a->ctr.attend_recall_chunks : 0);
    printf("attend-recall corrections: %lld layers, %lld chunks in the attention (on: %lld, "
           "%lld)\n",
           (long long)k.ctr.attend_recall_layers, (long long)k.ctr.attend_recall_chunks,
           (long long)a->ctr.attend_recall_layers, (long long)a->ctr.attend_recall_chunks);
    workload_free(&k.w);
    return same;
}

static void test_attend_recall(void)
{
    for (int real = 0; real < 2; real++)
        for (int no_irq = 0; no_irq < 2; no_irq++)
            for (int speculate = 0; speculate < 2; speculate++) {
                if (real && no_irq) continue;
                struct pi_cfg c = spec_cfg(real, 1);
                c.no_irq = no_irq, c.speculate = speculate;
                c.spec_predictor = OFFLOAD_SPEC_NEGATED;
                struct pi_out g, a;
                const int same = attend_recall_pair(c, &g, &a);
                const struct serve_counters *t = &a.ctr;
                printf("attend-recall, %s query%s%s: tokens %s the gather's; %lld layers, %lld "
                       "chunks recalled in the attention (%lld recalled, %lld corrected)\n",
                       real ? "real" : "locality", no_irq ? ", --no-irq" : "",
                       speculate ? ", --speculate (poor predictor)" : "",
                       same ? "equal" : "DIFFER from", (long long)t->attend_recall_layers,
                       (long long)t->attend_recall_chunks, (long long)t->recall_chunks,
                       (long long)t->spec_corrections);
                EXPECT(t->attend_recall_layers > 0);
                EXPECT_EQ_INT(t->attend_recall_chunks,
                              speculate ? t->spec_corrections : t->recall_chunks);
                EXPECT(t->attend_recall_chunks > 0);
                EXPECT_EQ_INT(t->spec_recall_chunks, g.ctr.spec_recall_chunks);
                workload_free(&g.w);
                workload_free(&a.w);
            }
    /* predicted from mid-layer or from the predicted lists: `on` recalls their corrections in
     * the attention, `corrections` (made for predictions from the layer's input) gathers them */
    static const int froms[] = {OFFLOAD_SPEC_FROM_MID, OFFLOAD_SPEC_FROM_HITS};
    for (size_t f = 0; f < PULSE_ARRAY_LEN(froms); f++) {
        const int from = froms[f];
        struct pi_cfg c = spec_cfg(0, 1);
        c.speculate = 1, c.spec_predictor = OFFLOAD_SPEC_NEGATED, c.spec_from = from;
        struct pi_out g, a;
        const int same = attend_recall_pair(c, &g, &a);
        EXPECT(a.ctr.attend_recall_layers > 0 && a.ctr.attend_recall_chunks > 0);
        printf("attend-recall, --speculate --spec-from %s (poor predictor): tokens %s the "
               "gather's; on: %lld layers, %lld chunks recalled in the attention\n",
               from == OFFLOAD_SPEC_FROM_MID ? "mid" : "hits", same ? "equal" : "DIFFER from",
               (long long)a.ctr.attend_recall_layers, (long long)a.ctr.attend_recall_chunks);
        workload_free(&g.w);
        workload_free(&a.w);
    }
    /* split steps (--self-interleave on, two lanes): each lane's layers recall in their
     * attention, the tokens and recall the unsplit gather's */
    {
        struct pi_cfg c = spec_cfg(0, 1);
        c.speculate = 1, c.spec_predictor = OFFLOAD_SPEC_NEGATED, c.self_interleave = "on";
        struct pi_out g, a;
        const int same = attend_recall_pair(c, &g, &a);
        EXPECT(a.ctr.attend_recall_layers > 0);
        EXPECT_EQ_INT(a.ctr.attend_recall_chunks, a.ctr.spec_corrections);
        printf("attend-recall, --self-interleave on --speculate (poor predictor): tokens %s the "
               "gather's; %lld layers, %lld chunks recalled in the attention\n",
               same ? "equal" : "DIFFER from", (long long)a.ctr.attend_recall_layers,
               (long long)a.ctr.attend_recall_chunks);
        workload_free(&g.w);
        workload_free(&a.w);
    }
    /* InfiniGen's layers, selected one ahead, keep their gather */
    struct pi_cfg c = spec_cfg(0, 1);
    c.policy = "infinigen";
    struct pi_out g, a;
    attend_recall_pair(c, &g, &a);
    /* 6 requests, 4 slots: an offload baseline runs ahead while two wait (its admission
     * reserves a request whole: serve_admit_idle_reserved) */
    EXPECT(g.ctr.steps_ahead_waiting > 0 && g.ctr.steps_ahead_waiting <= g.ctr.steps_ahead);
    EXPECT_EQ_INT(a.ctr.attend_recall_layers + a.ctr.attend_recall_chunks, 0);
    EXPECT(a.ctr.recall_chunks > 0);
    workload_free(&g.w);
    workload_free(&a.w);
}

/* With the locality query a prediction is the source's whatever its point: runs a and b
 * prefetched, corrected, recalled and held the same chunks. */
static void same_prediction(const struct serve_counters *a, const struct serve_counters *b)
{
    EXPECT_EQ_INT(a->spec_recall_chunks, b->spec_recall_chunks);
    EXPECT_EQ_INT(a->spec_corrections, b->spec_corrections);
    EXPECT_EQ_INT(a->recall_chunks, b->recall_chunks);
    EXPECT_EQ_INT(a->spec_held, b->spec_held);
}

/* Where a predicted layer's correction goes (spec_from hits; offload_params.spec_correct_early),
 * given c and its runs exact (no speculation) and hits (early, the default): queued at the exact
 * plan where no recall takes a predicted block's slot (the cpu backend's streams are the calling
 * thread: where one does, the gate held it and it follows the attention over the predicted
 * lists, as late puts every one). Early and late make the same predictions, chunks and tokens;
 * late queues none early and arms no gate. With the hot cache one selection large (no reserve)
 * and a deliberately poor predictor, corrections take predicted blocks' slots: the gate holds
 * them, fewer go early, and the tokens stay exact. */
static void spec_correction(struct pi_cfg c, const struct pi_out *exact, const struct pi_out *hits)
{
    const struct serve_counters *h = &hits->ctr;
    EXPECT(h->spec_early_corrections > 0 && h->spec_early_corrections <= h->spec_hits);
    if (!h->spec_correction_holds) EXPECT_EQ_INT(h->spec_early_corrections, h->spec_hits);
    if (h->spec_early_corrections < h->spec_hits) EXPECT(h->spec_correction_holds > 0);
    struct pi_out late, tight[2];
    c.spec_late = 1;
    serve(&c, &late);
    EXPECT_EQ_INT(late.rc, 0);
    EXPECT(same_tokens(&exact->w, &late.w));
    same_prediction(&late.ctr, h);
    EXPECT_EQ_INT(late.ctr.spec_hits, h->spec_hits);
    EXPECT_EQ_INT(late.ctr.spec_early_corrections + late.ctr.spec_correction_holds, 0);
    c.hot_slots = 6; /* 2 scored + sink, 2 window and tail blocks: one selection */
    c.spec_predictor = OFFLOAD_SPEC_NEGATED;
    c.no_verify = 1;
    for (int k = 0; k < 2; k++) {
        c.spec_late = k;
        serve(&c, &tight[k]);
        EXPECT_EQ_INT(tight[k].rc, 0);
        EXPECT(same_tokens(&exact->w, &tight[k].w));
        EXPECT_EQ_INT(tight[k].ctr.step_host_syncs, 0);
    }
    const struct serve_counters *t = &tight[0].ctr;
    EXPECT(t->spec_correction_holds > 0);
    EXPECT(t->spec_early_corrections < t->spec_hits);
    same_prediction(&tight[1].ctr, t);
    EXPECT_EQ_INT(tight[1].ctr.spec_early_corrections, 0);
    printf("correction at the exact plan: %lld of %lld layers' corrections early (late: %lld), "
           "%lld lists held; one selection's hot cache, a poor predictor: %lld of %lld early, "
           "%lld lists held, tokens %s\n",
           (long long)h->spec_early_corrections, (long long)h->spec_hits,
           (long long)late.ctr.spec_early_corrections, (long long)h->spec_correction_holds,
           (long long)t->spec_early_corrections, (long long)t->spec_hits,
           (long long)t->spec_correction_holds,
           same_tokens(&exact->w, &tight[0].w) ? "exact" : "DIFFER");
    json_decref(late.pj), json_decref(tight[0].pj), json_decref(tight[1].pj);
    workload_free(&late.w), workload_free(&tight[0].w), workload_free(&tight[1].w);
}

/* Speculation from mid-layer (offload_params.spec_from mid): the prediction of layer l+1 made in
 * layer l's second piece, after its attention, its recall beside l's MLP. On both engines,
 * with the locality query (the source's misprediction model: the same prediction as from the
 * input, so the same prefetched, corrected and recalled chunks, only made later) and the real
 * query (the approximate query from the mid-layer residual): exact SoloHead's tokens, the
 * mid-layer predictions counted (none from the input); and split in halves
 * (--self-interleave on), the unsplit run's chunks. From a predicted layer's attention over its
 * predicted lists (spec_from hits, zero-copy only): the same, each layer after the first
 * predicted from its predicted lists (the first from mid-layer); refused on the host-planned
 * engine and in halves. */
static void test_speculation_mid(void)
{
    for (int real = 0; real < 2; real++)
        for (int zc = 0; zc < 2; zc++) {
            struct pi_cfg c = spec_cfg(real, zc);
            c.want_json = 1;
            struct pi_out exact, in, mid;
            serve(&c, &exact);
            c.speculate = 1;
            c.spec_model = !real; /* the locality query: the profile's mispredictions */
            serve(&c, &in);
            c.spec_from = OFFLOAD_SPEC_FROM_MID;
            serve(&c, &mid);
            EXPECT_EQ_INT(exact.rc + in.rc + mid.rc, 0);
            EXPECT(same_tokens(&exact.w, &in.w));
            EXPECT(same_tokens(&exact.w, &mid.w));
            EXPECT_EQ_INT(in.ctr.spec_mid, 0);
            EXPECT(mid.ctr.spec_mid > 0);
            EXPECT(mid.ctr.spec_scored > 0 && mid.ctr.spec_recall_chunks > 0);
            EXPECT(mid.ctr.spec_recall_chunks + mid.ctr.spec_corrections <= mid.ctr.recall_chunks);
            if (!real) same_prediction(&mid.ctr, &in.ctr); /* the same prediction, made later */
            printf("speculation from mid-layer, %s query, %s: tokens %s exact SoloHead's; %lld "
                   "predictions from mid-layer; hit rate %.3f (from the input %.3f), %lld chunks "
                   "prefetched, %lld corrected (from the input %lld, %lld)\n",
                   real ? "real" : "locality", zc ? "zero-copy" : "gather-scatter",
                   same_tokens(&exact.w, &mid.w) ? "equal" : "DIFFER from",
                   (long long)mid.ctr.spec_mid, rate(&mid.ctr), rate(&in.ctr),
                   (long long)mid.ctr.spec_recall_chunks, (long long)mid.ctr.spec_corrections,
                   (long long)in.ctr.spec_recall_chunks, (long long)in.ctr.spec_corrections);
            if (!real) { /* in halves: each half predicts from its own mid-layer */
                struct pi_out si;
                c.self_interleave = "on";
                serve(&c, &si);
                c.self_interleave = NULL;
                EXPECT_EQ_INT(si.rc, 0);
                EXPECT(same_tokens(&exact.w, &si.w));
                EXPECT_EQ_INT(si.ctr.spec_recall_chunks, mid.ctr.spec_recall_chunks);
                EXPECT_EQ_INT(si.ctr.recall_chunks, mid.ctr.recall_chunks);
                EXPECT(si.ctr.spec_mid > mid.ctr.spec_mid); /* each half's own */
                int64_t n[3];
                self_counts(&si, n);
                EXPECT(n[0] > 0);
                json_decref(si.pj);
                workload_free(&si.w);
            }
            struct pi_out hits;
            c.spec_from = OFFLOAD_SPEC_FROM_HITS;
            serve(&c, &hits);
            if (!zc) { /* the host-planned path has no predicted lists' pages on the device */
                EXPECT(hits.rc != 0);
            } else {
                EXPECT_EQ_INT(hits.rc, 0);
                EXPECT(same_tokens(&exact.w, &hits.w));
                EXPECT(hits.ctr.spec_hits > 0 && hits.ctr.spec_mid > 0);
                /* every prediction of a layer after a predicted one from its lists */
                EXPECT_EQ_INT(hits.ctr.spec_hits + hits.ctr.spec_mid, mid.ctr.spec_mid);
                EXPECT_EQ_INT(mid.ctr.spec_hits + in.ctr.spec_hits, 0);
                if (!real) same_prediction(&hits.ctr, &in.ctr); /* made from another point */
                printf("speculation from the predicted lists, %s query: tokens %s exact "
                       "SoloHead's; %lld predictions from them, %lld from mid-layer; hit rate "
                       "%.3f, %lld chunks prefetched, %lld corrected\n",
                       real ? "real" : "locality",
                       same_tokens(&exact.w, &hits.w) ? "equal" : "DIFFER from",
                       (long long)hits.ctr.spec_hits, (long long)hits.ctr.spec_mid, rate(&hits.ctr),
                       (long long)hits.ctr.spec_recall_chunks,
                       (long long)hits.ctr.spec_corrections);
                spec_correction(c, &exact, &hits);
                struct pi_out si; /* one lane only */
                c.self_interleave = "on";
                serve(&c, &si);
                c.self_interleave = NULL;
                EXPECT(si.rc != 0);
                json_decref(si.pj);
                workload_free(&si.w);
            }
            c.spec_from = OFFLOAD_SPEC_FROM_MID;
            json_decref(hits.pj);
            workload_free(&hits.w);
            json_decref(exact.pj), json_decref(in.pj), json_decref(mid.pj);
            workload_free(&exact.w), workload_free(&in.w), workload_free(&mid.w);
        }
}

/* Speculation with exact correction (--speculate, offload_prefetch): every request offloaded,
 * a budget of two blocks of up to 19 (so a prediction can miss), mixed lengths. Whatever the
 * prediction -- the step's own query (a perfect predictor), the approximate real query, or the
 * query negated (a deliberately poor one) -- the tokens are exact SoloHead's; the counters show
 * the prediction's hit rate and the corrections it cost: none for a perfect predictor, some for
 * a poor one, and the prefetched plus corrected chunks are every chunk recalled. Both engines'
 * paths (host-planned gather-scatter, device-planned zero-copy), with and without IRQ, and the
 * real query on a prefilled prompt. */
static void test_speculation(void)
{
    static const char *const names[] = {"approx", "negated"};
    for (int real = 0; real < 2; real++)
        for (int zc = 0; zc < 2; zc++)
            for (int no_irq = 0; no_irq < 2; no_irq++) {
                if (real && no_irq) continue;
                struct pi_cfg c = spec_cfg(real, zc);
                c.no_irq = no_irq;
                struct pi_out exact, spec[2];
                serve(&c, &exact);
                EXPECT_EQ_INT(exact.rc, 0);
                EXPECT_EQ_INT(exact.ctr.spec_recall_chunks + exact.ctr.spec_scored, 0);
                c.speculate = 1;
                for (int k = 0; k < 2; k++) {
                    c.spec_predictor = k ? OFFLOAD_SPEC_NEGATED : OFFLOAD_SPEC_APPROX;
                    /* the poor predictor's runs unverified: serve() then asserts that no
                     * step made a host round trip; the others verify every resident block */
                    c.no_verify = k;
                    serve(&c, &spec[k]);
                    if (k) EXPECT_EQ_INT(spec[k].ctr.step_host_syncs, 0);
                    const struct serve_counters *t = &spec[k].ctr;
                    EXPECT_EQ_INT(spec[k].rc, 0);
                    const int same = same_tokens(&exact.w, &spec[k].w);
                    EXPECT(same);
                    printf("speculation, %s query, %s%s, %s predictor: tokens %s exact "
                           "SoloHead's; hit rate %.3f (%lld of %lld), %lld chunks prefetched, "
                           "%lld corrected, %lld recalled (exact alone: %lld)\n",
                           real ? "real" : "locality", zc ? "zero-copy" : "gather-scatter",
                           no_irq ? " --no-irq" : "", names[k], same ? "equal" : "DIFFER from",
                           rate(t), (long long)t->spec_held, (long long)t->spec_scored,
                           (long long)t->spec_recall_chunks, (long long)t->spec_corrections,
                           (long long)t->recall_chunks, (long long)exact.ctr.recall_chunks);
                    EXPECT(t->spec_scored > 0 && t->spec_recall_chunks > 0);
                    EXPECT(t->spec_recall_chunks + t->spec_corrections <= t->recall_chunks);
                    EXPECT(t->spec_corrections > 0 || t->spec_held == t->spec_scored);
                }
                const struct serve_counters *good = &spec[0].ctr, *poor = &spec[1].ctr;
                if (!real) { /* the locality query's own step: a perfect predictor */
                    EXPECT_EQ_INT(good->spec_held, good->spec_scored);
                    EXPECT_EQ_INT(good->spec_corrections, 0);
                    /* the source's misprediction model (the speculation profile) */
                    struct pi_out m;
                    c.spec_predictor = OFFLOAD_SPEC_APPROX;
                    c.spec_model = 1;
                    serve(&c, &m);
                    c.spec_model = 0;
                    EXPECT_EQ_INT(m.rc, 0);
                    EXPECT(same_tokens(&exact.w, &m.w));
                    printf("speculation, locality query, %s%s, the misprediction model: hit "
                           "rate %.3f, %lld corrected, tokens %s\n",
                           zc ? "zero-copy" : "gather-scatter", no_irq ? " --no-irq" : "",
                           rate(&m.ctr), (long long)m.ctr.spec_corrections,
                           same_tokens(&exact.w, &m.w) ? "equal" : "DIFFER");
                    EXPECT(rate(&m.ctr) > rate(poor) && rate(&m.ctr) < 1.0);
                    EXPECT(m.ctr.spec_corrections > 0);
                    /* a margin: the prediction's wider lists hold more of the exact ones,
                     * fewer corrections for more prefetched chunks, the same tokens */
                    struct pi_out mm;
                    c.spec_model = 1, c.spec_margin = 0.5;
                    serve(&c, &mm);
                    c.spec_model = 0, c.spec_margin = 0;
                    EXPECT_EQ_INT(mm.rc, 0);
                    EXPECT(same_tokens(&exact.w, &mm.w));
                    printf("speculation, locality query, %s%s, the misprediction model with a "
                           "margin of 0.5: hit rate %.3f, %lld prefetched (%lld without), %lld "
                           "corrected (%lld)\n",
                           zc ? "zero-copy" : "gather-scatter", no_irq ? " --no-irq" : "",
                           rate(&mm.ctr), (long long)mm.ctr.spec_recall_chunks,
                           (long long)m.ctr.spec_recall_chunks, (long long)mm.ctr.spec_corrections,
                           (long long)m.ctr.spec_corrections);
                    EXPECT(rate(&mm.ctr) > rate(&m.ctr));
                    EXPECT(mm.ctr.spec_corrections < m.ctr.spec_corrections);
                    EXPECT(mm.ctr.spec_recall_chunks > m.ctr.spec_recall_chunks);
                    workload_free(&mm.w);
                    workload_free(&m.w);
                }
                EXPECT(rate(poor) < 0.5 && rate(poor) < rate(good));
                EXPECT(poor->spec_corrections > good->spec_corrections);
                workload_free(&exact.w);
                for (int k = 0; k < 2; k++)
                    workload_free(&spec[k].w);
            }
}

/* A run-time switch of the offload step, each policy run with its two words: the config's
 * `key` says the word asked, the config's `effect` key whether it is in effect, the counter
 * `counter` counts what it did; the tokens are the same both ways. tiny, 3 requests, 6 steps. */
enum {
    FLAG_NONE,
    FLAG_PER_LAYER,
    FLAG_PAIRS,
    FLAG_TWO_PER_LAYER
}; /* the counter: 0, steps x sparse layers, two a step for each sparse layer followed by one,
      two a step for each sparse layer */
struct flag_run {
    const char *policy;
    int want;   /* the counter with the switch on */
    int effect; /* whether the switch is in effect (where it can be without acting) */
};

static void flag_pairs(const char *flag, const char *words[2], const char *key, const char *effect,
                       const char *counter, const struct flag_run *runs, size_t n_runs)
{
    for (size_t r = 0; r < n_runs; r++) {
        char fnv[2][32] = {{0}};
        for (int off = 0; off < 2; off++) {
            char path[] = "/tmp/pulse_pi_flag_XXXXXX", cmd[512];
            const int fd = mkstemp(path);
            if (fd >= 0) close(fd);
            snprintf(cmd, sizeof cmd,
                     "run --backend cpu --model tiny --policy %s --workload lengths:300,260,190 "
                     "--output-len 6 --max-batch 3 --budget-tokens 32 %s %s --out %s",
                     runs[r].policy, flag, words[off], path);
            EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
            json_error_t je;
            json_t *j = json_load_file(path, 0, &je);
            remove(path);
            EXPECT(j != NULL);
            if (!j) continue;
            json_t *cfg = json_object_get(json_object_get(j, "config"), "offload");
            json_t *ctr = json_object_get(json_object_get(j, "counters"), "offload");
            EXPECT_STR_EQ(json_string_value(json_object_get(cfg, key)), words[off]);
            const int on = runs[r].want != FLAG_NONE && !off;
            EXPECT(json_is_boolean(json_object_get(cfg, effect)) &&
                   json_is_true(json_object_get(cfg, effect)) == (runs[r].effect && !off));
            const int64_t steps = json_integer_value(json_object_get(ctr, "steps"));
            const int64_t sparse = json_integer_value(json_object_get(cfg, "sparse_layers"));
            EXPECT(steps > 0 && sparse > 1);
            const int64_t want = !on                                  ? 0
                                 : runs[r].want == FLAG_PER_LAYER     ? steps * sparse
                                 : runs[r].want == FLAG_TWO_PER_LAYER ? 2 * steps * sparse
                                                                      : 2 * steps * (sparse - 1);
            EXPECT_EQ_INT(json_integer_value(json_object_get(ctr, counter)), want);
            snprintf(fnv[off], sizeof fnv[off], "%s",
                     json_string_value(
                         json_object_get(json_object_get(j, "metrics"), "output_tokens_fnv1a"))
                         ?: "");
            json_decref(j);
        }
        EXPECT(fnv[0][0] && !strcmp(fnv[0], fnv[1]));
        printf("%s, %s: tokens %s with %s and %s (%s)\n", flag, runs[r].policy,
               strcmp(fnv[0], fnv[1]) ? "DIFFER" : "equal", words[0], words[1], fnv[0]);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "run --backend cpu --policy pulseinfer %s neither", flag);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 2);
    EXPECT(strstr(out, flag) != NULL);
}

#define PI_SPEC "pulseinfer --speculate --admission fixed:0 --recall-engine "

/* --predict-stream: on the device path (zero-copy) with a lookahead or prefetching schedule, the
 * selection of the layer ahead runs on its own stream (pulseinfer --speculate issues it before
 * its exact selection): one fork a sparse layer and step (layer 0 is dense), the same tokens
 * as inline; not in effect on gather-scatter or without a layer ahead. */
static void test_predict_stream(void)
{
    static const struct flag_run runs[] = {
        {PI_SPEC "zero-copy", FLAG_PER_LAYER, 1},
        {"infinigen+solohead+zc", FLAG_PER_LAYER, 1},
        {PI_SPEC "gather-scatter", FLAG_NONE, 0},
        {"pulseinfer --admission fixed:0 --recall-engine zero-copy", FLAG_NONE, 0}};
    const char *words[2] = {"fork", "inline"};
    flag_pairs("--predict-stream", words, "predict_stream", "predict_forked", "forked_selections",
               runs, PULSE_ARRAY_LEN(runs));
}

/* --select-launch: a layer's piece that selects two layers (pulseinfer --speculate: its exact
 * selection and its prediction of the next layer) scores and ranks both in one launch each:
 * two joint selections a step for each sparse layer followed by a sparse one, on either
 * engine; none where the prediction runs on its own stream (--predict-stream fork) or the
 * pieces select one layer (InfiniGen past its first layer, which is dense here; pulseinfer
 * without --speculate, whose schedule selects no layer ahead). */
static void test_select_launch(void)
{
    static const struct flag_run runs[] = {
        {PI_SPEC "zero-copy", FLAG_PAIRS, 1},
        {PI_SPEC "gather-scatter", FLAG_PAIRS, 1},
        {PI_SPEC "zero-copy --predict-stream fork", FLAG_NONE, 1},
        {"infinigen+solohead+zc", FLAG_NONE, 1},
        {"pulseinfer --admission fixed:0 --recall-engine zero-copy", FLAG_NONE, 0}};
    const char *words[2] = {"joint", "apart"};
    flag_pairs("--select-launch", words, "select_launch", "select_joint", "joint_selections", runs,
               PULSE_ARRAY_LEN(runs));
}

/* --plan-launch: on the device path (zero-copy) each layer's hot-cache plan and build run as one
 * kernel, a piece's two layers in one launch: every sparse layer planned once a step, and with
 * --speculate its prediction too (layer 0 is dense: every sparse layer is predicted), whether
 * the two selections launch together or not, and InfiniGen's first piece's two layers where
 * layer 0 is sparse; the same tokens as the plan and build apart; not
 * on gather-scatter (planned on the host). */
static void test_plan_launch(void)
{
    static const struct flag_run runs[] = {
        {PI_SPEC "zero-copy", FLAG_TWO_PER_LAYER, 1},
        {PI_SPEC "zero-copy --select-launch apart", FLAG_TWO_PER_LAYER, 1},
        {"infinigen+solohead+zc", FLAG_PER_LAYER, 1},
        {"infinigen+solohead+zc --dense-layers 0", FLAG_PER_LAYER, 1}, /* its first piece: two */
        {"pulseinfer --admission fixed:0 --recall-engine zero-copy", FLAG_PER_LAYER, 1},
        {PI_SPEC "gather-scatter", FLAG_NONE, 0}};
    const char *words[2] = {"fused", "apart"};
    flag_pairs("--plan-launch", words, "plan_launch", "plan_fused", "fused_plans", runs,
               PULSE_ARRAY_LEN(runs));
}

/* --attend-recall through pulse run: the JSON's counters.offload.attend_recall says the mode
 * asked (corrections by default) and whether any layer's attention recalled (on), with the
 * layers and chunks it recalled: a speculation from the layer's input on zero-copy recalls
 * every correction there by default; off, an exact-at-layer schedule, a speculation from
 * mid-layer and gather-scatter gather them; on recalls an exact schedule's every miss. */
static void test_attend_recall_cli(void)
{
    static const struct {
        const char *policy;
        const char *mode;
        int on;
    } runs[] = {
        {PI_SPEC "zero-copy", "corrections", 1},
        {PI_SPEC "zero-copy --attend-recall off", "off", 0},
        {PI_SPEC "zero-copy --spec-from mid", "corrections", 0},
        {PI_SPEC "gather-scatter", "corrections", 0},
        {"pulseinfer --admission fixed:0 --recall-engine zero-copy", "corrections", 0},
        {"pulseinfer --admission fixed:0 --recall-engine zero-copy --attend-recall on", "on", 1},
        {"infinigen+solohead+zc --attend-recall on", "on", 0}};
    for (size_t r = 0; r < PULSE_ARRAY_LEN(runs); r++) {
        char cmd[512];
        snprintf(cmd, sizeof cmd,
                 "run --backend cpu --model tiny --policy %s --workload lengths:300,260,190 "
                 "--output-len 6 --max-batch 3 --budget-tokens 32",
                 runs[r].policy);
        json_t *j = tu_run_pulse_json(cmd, out, sizeof out);
        json_t *ctr = json_object_get(json_object_get(j, "counters"), "offload");
        json_t *ar = json_object_get(ctr, "attend_recall");
        EXPECT_STR_EQ(json_string_value(json_object_get(ar, "mode")), runs[r].mode);
        EXPECT(json_is_boolean(json_object_get(ar, "on")) &&
               json_is_true(json_object_get(ar, "on")) == runs[r].on);
        const json_int_t layers = json_integer_value(json_object_get(ar, "layers"));
        const json_int_t chunks = json_integer_value(json_object_get(ar, "chunks"));
        EXPECT(runs[r].on ? layers > 0 && chunks > 0 : layers == 0 && chunks == 0);
        json_t *sp = json_object_get(ctr, "speculation");
        if (runs[r].on && strstr(runs[r].policy, "--speculate")) { /* its corrections */
            EXPECT(sp != NULL);
            EXPECT_EQ_INT(chunks, json_integer_value(json_object_get(sp, "corrections")));
        }
        printf("--attend-recall, %s: mode %s, %s, %lld layers, %lld chunks\n", runs[r].policy,
               json_string_value(json_object_get(ar, "mode")) ?: "?", runs[r].on ? "on" : "off",
               (long long)layers, (long long)chunks);
        json_decref(j);
    }
}

/* --correction-stream: with pulseinfer --speculate on zero-copy and the corrections gathered
 * (--attend-recall off), each predicted layer's correction (every sparse layer: layer 0 is
 * dense) is gathered on its own stream; not where the attention recalls them (the default), on
 * gather-scatter (no gather stream), nor for a schedule that does not prefetch. */
static void test_correction_stream(void)
{
    static const struct flag_run runs[] = {
        {PI_SPEC "zero-copy --attend-recall off", FLAG_PER_LAYER, 1},
        {PI_SPEC "zero-copy --attend-recall off --predict-stream fork", FLAG_PER_LAYER, 1},
        {PI_SPEC "zero-copy", FLAG_NONE, 0},
        {PI_SPEC "gather-scatter", FLAG_NONE, 0},
        {"infinigen+solohead+zc", FLAG_NONE, 0}};
    const char *words[2] = {"own", "gather"};
    flag_pairs("--correction-stream", words, "correction_stream", "correction_stream_own",
               "stream_corrections", runs, PULSE_ARRAY_LEN(runs));
}

/* pulse run: --speculate's schedule and counters in the JSON; the flags refused where they do
 * not apply. */
static void test_speculation_cli(void)
{
    EXPECT_EQ_INT(tu_run_pulse("run --backend cpu --policy arkvale --speculate", out, sizeof out),
                  2);
    EXPECT(strstr(out, "--speculate: arkvale has no speculation") != NULL);
    EXPECT_EQ_INT(tu_run_pulse("run --backend cpu --policy pulseinfer --spec-predictor negated",
                               out, sizeof out),
                  2);
    EXPECT(strstr(out, "--spec-predictor: only where a layer is selected one ahead") != NULL);
    EXPECT_EQ_INT(tu_run_pulse("run --backend cpu --policy infinigen --spec-predictor worst", out,
                               sizeof out),
                  2);
    EXPECT(strstr(out, "--spec-predictor") != NULL);
    EXPECT_EQ_INT(tu_run_pulse("run --backend cpu --policy pulseinfer --speculate --reuse none",
                               out, sizeof out),
                  2);
    EXPECT(strstr(out, "--reuse none: not with --speculate") != NULL);
    EXPECT_EQ_INT(
        tu_run_pulse("run --backend cpu --policy pulseinfer --attend-recall on", out, sizeof out),
        2);
    EXPECT(strstr(out, "--attend-recall on: only with --recall-engine zero-copy") != NULL);
    EXPECT_EQ_INT(tu_run_pulse("run --backend cpu --policy pulseinfer --attend-recall maybe", out,
                               sizeof out),
                  2);
    EXPECT(strstr(out, "--attend-recall") != NULL);
    EXPECT_EQ_INT(
        tu_run_pulse("run --backend cpu --policy pulseinfer --spec-margin 0.2", out, sizeof out),
        2);
    EXPECT(strstr(out, "--spec-margin: only with a prediction beside the exact selection"));
    EXPECT_EQ_INT(
        tu_run_pulse("run --backend cpu --policy pulseinfer --speculate --spec-margin 1.5", out,
                     sizeof out),
        2);
    EXPECT(strstr(out, "--spec-margin") != NULL);
    char path[] = "/tmp/pulse_pi_spec_XXXXXX", cmd[512];
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    snprintf(cmd, sizeof cmd,
             "run --backend cpu --policy pulseinfer --speculate --spec-predictor negated "
             "--workload lengths:300,260 --output-len 4 --max-batch 2 --budget-tokens 32 "
             "--admission fixed:0 --out %s",
             path);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
    EXPECT(strstr(out, "speculation: ") && strstr(out, " corrected; the prediction held 0."));
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    remove(path);
    EXPECT(j != NULL);
    json_t *cfg = json_object_get(json_object_get(j, "config"), "offload");
    EXPECT(!strcmp(json_string_value(json_object_get(cfg, "schedule")) ?: "", "speculate-exact"));
    EXPECT(json_is_true(json_object_get(cfg, "prefetch")));
    EXPECT(!strcmp(json_string_value(json_object_get(cfg, "spec_predictor")) ?: "", "negated"));
    json_t *off = json_object_get(json_object_get(j, "counters"), "offload");
    json_t *sp = json_object_get(off, "speculation");
    EXPECT(json_integer_value(json_object_get(sp, "recall_chunks")) > 0);
    EXPECT(json_integer_value(json_object_get(sp, "corrections")) > 0);
    const double hr = json_real_value(json_object_get(sp, "hit_rate"));
    EXPECT(hr >= 0 && hr < 0.5);
    /* the layers' sum to the run's */
    int64_t corr = 0;
    json_t *l;
    size_t i;
    json_array_foreach(json_object_get(off, "layers"), i, l) corr +=
        json_integer_value(json_object_get(json_object_get(l, "speculation"), "corrections"));
    EXPECT_EQ_INT(corr, json_integer_value(json_object_get(sp, "corrections")));
    json_decref(j);
    /* --spec-from: refused without --speculate or with another word, hits off the device path;
     * from mid-layer (and the predicted lists) the predictions are counted, the config says so
     * and IOAA's prefetch runs beside the MLP's share of a layer (the whole layer from the
     * predicted lists) (tiny: 3 x 128 x 256 of 3 x 128 x 256 + 128 x 512 + 128 x 128 + norms) */
    EXPECT_EQ_INT(
        tu_run_pulse("run --backend cpu --policy pulseinfer --spec-from mid", out, sizeof out), 2);
    EXPECT(strstr(out, "--spec-from: only with a prediction beside the exact selection"));
    EXPECT_EQ_INT(tu_run_pulse("run --backend cpu --policy pulseinfer --speculate --spec-from late",
                               out, sizeof out),
                  2);
    EXPECT(strstr(out, "--spec-from: 'late' is not input, mid or hits"));
    static const struct {
        const char *args, *says;
    } refused[] = {{"--spec-from hits --recall-engine gather-scatter",
                    "--spec-from hits: only with --recall-engine zero-copy"},
                   {"--spec-from hits --recall-engine zero-copy --self-interleave on",
                    "--spec-from hits: not with --self-interleave on (one lane)"},
                   {"--spec-from mid --spec-correction late --recall-engine zero-copy",
                    "--spec-correction: only with --spec-from hits"},
                   {"--spec-from hits --spec-correction soon --recall-engine zero-copy",
                    "--spec-correction: 'soon' is not early or late"}};
    for (size_t k = 0; k < PULSE_ARRAY_LEN(refused); k++) {
        char args[256];
        snprintf(args, sizeof args,
                 "run --backend cpu --model tiny --policy pulseinfer --speculate %s",
                 refused[k].args);
        EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 2);
        EXPECT(strstr(out, refused[k].says) != NULL);
    }
    static const char *const points[] = {"input", "mid", "hits"};
    for (int pt = 0; pt < 3; pt++) {
        const int mid = pt == 1, hits = pt == 2;
        if ((fd = mkstemp(path)) >= 0) close(fd);
        snprintf(cmd, sizeof cmd,
                 "run --backend cpu --model tiny --policy pulseinfer --speculate --spec-from %s "
                 "--workload lengths:300,260 --output-len 4 --max-batch 2 --budget-tokens 32 "
                 "--admission ioaa --recall-engine zero-copy --out %s",
                 points[pt], path);
        EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
        json_t *jm = json_load_file(path, 0, &je);
        remove(path);
        EXPECT(jm != NULL);
        if (!jm) continue;
        json_t *cnt = json_object_get(jm, "counters");
        EXPECT_STR_EQ(json_string_value(json_object_get(
                          json_object_get(json_object_get(jm, "config"), "offload"), "spec_from")),
                      points[pt]);
        const int64_t mp =
            json_integer_value(json_object_get(json_object_get(cnt, "offload"), "mid_prefetches"));
        const int64_t hp =
            json_integer_value(json_object_get(json_object_get(cnt, "offload"), "hits_prefetches"));
        EXPECT(mid || hits ? mp > 0 : mp == 0); /* (hits: the first predicted layer's) */
        EXPECT(hits ? hp > 0 : hp == 0);
        /* a predicted layer's correction: at the exact plan, early where hits (its count) */
        EXPECT_STR_EQ(
            json_string_value(json_object_get(
                json_object_get(json_object_get(jm, "config"), "offload"), "spec_correction")),
            hits ? "early" : "at_plan");
        const int64_t ec = json_integer_value(
            json_object_get(json_object_get(cnt, "offload"), "early_corrections"));
        EXPECT(hits ? ec > 0 && ec <= hp : ec == 0);
        EXPECT(json_is_integer(json_object_get(
            json_object_get(json_object_get(cnt, "offload"), "speculation"), "correction_holds")));
        const struct model_config *tc = model_config_find("tiny");
        const double w = json_real_value(json_object_get(
            json_object_get(json_object_get(cnt, "pulseinfer"), "ioaa_speculation"), "window"));
        EXPECT_NEAR(w,
                    mid ? (double)model_mlp_weight_bytes(tc) / (double)model_layer_weight_bytes(tc)
                        : 1.0,
                    1e-9);
        EXPECT(w > 0.3 && w <= 1);
        /* the misprediction model of the run's point: Gemma 3 270M's profile measured from the
         * input for the input, from the predicted lists for mid and hits; matched, no warning */
        json_t *lsp = json_object_get(
            json_object_get(json_object_get(json_object_get(jm, "config"), "offload"), "locality"),
            "speculation");
        EXPECT_STR_EQ(
            json_string_value(json_object_get(json_object_get(lsp, "profile"), "predicted_from")),
            pt ? "hits" : "input");
        EXPECT(json_is_true(json_object_get(json_object_get(lsp, "point_check"), "matched")));
        EXPECT(!strstr(out, "its predictions were made from"));
        json_decref(jm);
    }
    /* the predicted lists' run given the input's profile: flagged, with one warning line */
    if ((fd = mkstemp(path)) >= 0) close(fd);
    snprintf(cmd, sizeof cmd,
             "run --backend cpu --model tiny --policy pulseinfer --speculate --spec-from hits "
             "--spec-overlap workloads/profiles/speculation_gemma3-270m.json --workload "
             "lengths:300,260 --output-len 4 --max-batch 2 --budget-tokens 32 --admission ioaa "
             "--recall-engine zero-copy --out %s",
             path);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
    EXPECT(strstr(out, "pulse run: warning: --spec-overlap: its predictions were made from "
                       "input, the run predicts from hits"));
    j = json_load_file(path, 0, &je);
    remove(path);
    EXPECT(j != NULL);
    json_t *pc = json_object_get(
        json_object_get(
            json_object_get(json_object_get(json_object_get(j, "config"), "offload"), "locality"),
            "speculation"),
        "point_check");
    EXPECT(pc && json_is_false(json_object_get(pc, "matched")) &&
           !strcmp(json_string_value(json_object_get(pc, "profile")) ?: "", "input"));
    json_decref(j);
    /* the speculation's hot-cache reserve: a quarter more slots than one step selects, so
     * the prediction's blocks displace old ones, not the exact selection's it missed */
    /* and a margin: the prediction's budget and the hot cache's slots grow by it, fewer
     * corrections */
    /* and --hot-slots auto: the cache grown into the GPU budget (0.25 GB holds all six
     * requests' 66 blocks a layer), the same tokens, fewer corrections */
    static const char *const hc_flags[] = {"", " --hot-slots 8", " --spec-margin 0.5",
                                           " --hot-slots auto"};
    static const int hc_slots[] = {10, 8, 12, 66}; /* 4 scored + 4 forced blocks selected */
    int64_t hc_corr[4] = {0, 0, 0, 0};
    char hc_fnv[4][32] = {{0}};
    for (int k = 0; k < 4; k++) {
        if ((fd = mkstemp(path)) >= 0) close(fd);
        snprintf(cmd, sizeof cmd,
                 "run --backend cpu --model tiny --policy pulseinfer --speculate --workload "
                 "uniform:1024:6 --output-len 32 --budget-tokens 64 --admission fixed:0%s --out %s",
                 hc_flags[k], path);
        EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
        j = json_load_file(path, 0, &je);
        remove(path);
        cfg = json_object_get(json_object_get(j, "config"), "offload");
        EXPECT_EQ_INT(json_integer_value(json_object_get(cfg, "hot_slots")), hc_slots[k]);
        EXPECT_EQ_INT(json_integer_value(json_object_get(cfg, "hot_slots_auto")), k == 3 ? 6 : 0);
        snprintf(
            hc_fnv[k], sizeof hc_fnv[k], "%s",
            json_string_value(json_object_get(json_object_get(j, "metrics"), "output_tokens_fnv1a"))
                ?: "");
        EXPECT_NEAR(json_real_value(json_object_get(cfg, "spec_margin")), k == 2 ? 0.5 : 0, 1e-12);
        EXPECT_EQ_INT(json_integer_value(json_object_get(cfg, "spec_budget_blocks")),
                      k == 2 ? 6 : 4);
        hc_corr[k] = json_integer_value(json_object_get(
            json_object_get(json_object_get(json_object_get(j, "counters"), "offload"),
                            "speculation"),
            "corrections"));
        json_decref(j);
    }
    printf("speculation's hot-cache reserve: %lld corrections with 10 slots, %lld with 8; a "
           "margin of 0.5: %lld; 66 slots (auto): %lld\n",
           (long long)hc_corr[0], (long long)hc_corr[1], (long long)hc_corr[2],
           (long long)hc_corr[3]);
    EXPECT(hc_corr[0] > 0 && 2 * hc_corr[0] < hc_corr[1]);
    EXPECT(hc_corr[2] < hc_corr[0]);
    EXPECT(hc_corr[3] < hc_corr[0]);
    for (int k = 1; k < 4; k++)
        EXPECT(hc_fnv[k][0] && !strcmp(hc_fnv[k], hc_fnv[0]));
    /* IOAA models the speculation: its recall table folded with the source's hit rate */
    if ((fd = mkstemp(path)) >= 0) close(fd);
    snprintf(cmd, sizeof cmd,
             "run --backend cpu --policy pulseinfer --speculate --workload lengths:300,260,120 "
             "--output-len 4 --max-batch 4 --budget-tokens 32 --out %s",
             path);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
    j = json_load_file(path, 0, &je);
    remove(path);
    json_t *is = json_object_get(json_object_get(json_object_get(j, "counters"), "pulseinfer"),
                                 "ioaa_speculation");
    EXPECT_STR_EQ(json_string_value(json_object_get(is, "from")), "source");
    const double h = json_real_value(json_object_get(is, "hit_rate"));
    EXPECT(h > 0.5 && h < 1.0); /* the speculation profile's overlaps, by depth */
    const double cr = json_real_value(json_object_get(is, "churn_ratio")),
                 held = json_real_value(json_object_get(is, "miss_held"));
    EXPECT(cr > 0.5 && cr < 2.0 && held > 0 && held < 1);
    EXPECT(json_real_value(json_object_get(is, "prefetch_bytes_per_request_layer")) > 0);
    EXPECT(json_real_value(json_object_get(is, "correction_bytes_per_request_layer")) > 0);
    printf("IOAA's speculation fold: hit rate %.3f, churn ratio %.3f, misses held %.3f\n", h, cr,
           held);
    json_decref(j);
    /* the refit of IOAA's recall terms from the measured steps (--ioaa-refit, default on): its
     * counters in the JSON; off: no refit, the factors 1, the prediction the profile's */
    for (int on = 1; on >= 0; on--) {
        if ((fd = mkstemp(path)) >= 0) close(fd);
        snprintf(cmd, sizeof cmd,
                 "run --backend cpu --policy pulseinfer --speculate --workload lengths:300,260,120 "
                 "--output-len 12 --max-batch 4 --budget-tokens 32 --ioaa-refit %s --out %s",
                 on ? "on" : "off", path);
        EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
        j = json_load_file(path, 0, &je);
        remove(path);
        json_t *pj = json_object_get(json_object_get(j, "counters"), "pulseinfer");
        json_t *rf = json_object_get(pj, "ioaa_refit");
        EXPECT_STR_EQ(json_string_value(json_object_get(
                          json_object_get(json_object_get(j, "config"), "options"), "ioaa_refit")),
                      on ? "on" : "off");
        EXPECT(json_is_true(json_object_get(rf, "enabled")) == on);
        const long long refits = json_integer_value(json_object_get(rf, "refits"));
        const double kr = json_real_value(json_object_get(rf, "recall_factor"));
        const double pred = json_real_value(json_object_get(pj, "ioaa_predicted_step_ms")),
                     unref = json_real_value(json_object_get(pj, "ioaa_predicted_step_unrefit_ms"));
        EXPECT_NEAR(json_real_value(json_object_get(rf, "beside_compute")),
                    IOAA_PROFILE_BESIDE_DEFAULT, 0);
        EXPECT_STR_EQ(json_string_value(json_object_get(rf, "beside_from")), "default");
        EXPECT(unref > 0);
        if (on) {
            EXPECT(refits > 0);
            EXPECT(kr != 1.0 || json_real_value(json_object_get(rf, "correction_factor")) != 1.0);
            EXPECT(pred != unref);
        } else {
            EXPECT_EQ_INT(refits, 0);
            EXPECT_NEAR(kr, 1, 0);
            EXPECT_NEAR(pred, unref, 1e-9 * unref);
        }
        printf("IOAA refit %s: %lld refits, recall factor %.3f, predicted %.3f ms (profile's "
               "%.3f), measured %.3f\n",
               on ? "on" : "off", refits, kr, pred, unref,
               json_real_value(json_object_get(pj, "ioaa_measured_step_ms")));
        json_decref(j);
    }
}

/* ------------------------------------------------------------------ self-interleaving */

/* --self-interleave on: with a covering budget on vanilla's prompt KV every request decodes
 * vanilla's tokens (every request offloaded, so no normal batch runs: every step of two or
 * more requests in halves; and mixed with normal requests), in two arrival orders of mixed
 * lengths; the halves switch at every piece. */
static void test_self_equals_vanilla(void)
{
    static const char *const specs[] = {"lengths:300,170,90,260,40,200",
                                        "lengths:40,260,90,300,200,170"};
    static const char *const adm[] = {"fixed:0", "fixed:200"};
    for (int k = 0; k < 2; k++) {
        struct pi_cfg v = {.policy = "vanilla", .spec = specs[k], .out_len = 10, .max_batch = 4};
        struct pi_out van;
        serve(&v, &van);
        EXPECT_EQ_INT(van.rc, 0);
        for (int a = 0; a < 2; a++)
            for (int sel = 0; sel < 2; sel++) {
                struct pi_cfg c = {.policy = "pulseinfer",
                                   .spec = specs[k],
                                   .admission = adm[a],
                                   .out_len = 10,
                                   .max_batch = 4,
                                   .selection = sel ? OFFLOAD_HEADWISE : OFFLOAD_SOLOHEAD,
                                   .budget_tokens = 512,
                                   .prompt_kv = OFFLOAD_KV_SYNTHETIC,
                                   .self_interleave = "on",
                                   .want_json = 1};
                struct pi_out r;
                serve(&c, &r);
                EXPECT_EQ_INT(r.rc, 0);
                int64_t n[3];
                self_counts(&r, n);
                EXPECT_EQ_INT(self_graph_pieces(&r), 0); /* layer graphs are cuda's */
                const int same = same_tokens(&van.w, &r.w);
                EXPECT(same);
                printf("%s, %s, %s, --self-interleave on: %lld steps in halves, %lld switches, "
                       "tokens %s vanilla's\n",
                       specs[k], adm[a], sel ? "headwise" : "solohead", (long long)n[0],
                       (long long)n[1], same ? "equal" : "DIFFER from");
                if (a == 0) { /* all offloaded: every step of >= 2 requests ran in halves */
                    EXPECT(n[0] > 0);
                    EXPECT(n[1] >= 4 * n[0]); /* at least A, B, A, B in a step */
                    EXPECT(n[2] > 0);
                }
                json_decref(r.pj);
                workload_free(&r.w);
            }
        workload_free(&van.w);
    }
}

/* A small budget on the locality model's prompt KV (every step recalls): the tokens with
 * --self-interleave are exactly those without (exact SoloHead's), as are the bytes recalled; the
 * halves switch and their rounds run beside the other half; with it off, or with one offloaded
 * request (nothing to split), no switch. No host round trip inside a step (pi_serve checks). */
static void test_self_exact(void)
{
    static const char *const modes[] = {NULL, "on", "off"};
    struct pi_out r[3];
    int64_t n[3][3];
    for (int i = 0; i < 3; i++) {
        struct pi_cfg c = {.policy = "pulseinfer",
                           .spec = "lengths:300,170,90,260,120",
                           .admission = "fixed:0",
                           .out_len = 12,
                           .max_batch = 5,
                           .selection = OFFLOAD_SOLOHEAD,
                           .budget_tokens = 32,
                           .prompt_kv = OFFLOAD_KV_LOCALITY,
                           .no_verify = 1,
                           .self_interleave = modes[i],
                           .want_json = 1};
        serve(&c, &r[i]);
        EXPECT_EQ_INT(r[i].rc, 0);
        self_counts(&r[i], n[i]);
    }
    EXPECT(same_tokens(&r[0].w, &r[1].w));
    EXPECT(same_tokens(&r[0].w, &r[2].w));
    EXPECT_EQ_INT(r[0].ctr.recall_bytes, r[1].ctr.recall_bytes);
    EXPECT(r[1].ctr.recall_bytes > 0);
    EXPECT_EQ_INT(n[0][0], 0);
    EXPECT_EQ_INT(n[0][1], 0);
    EXPECT_EQ_INT(n[2][1], 0);
    EXPECT_EQ_INT(n[1][0], 12); /* 5 requests of 12 tokens: 12 steps of 5 */
    EXPECT(n[1][1] >= 4 * 12 && n[1][2] > 0);
    EXPECT_EQ_INT(r[1].ctr.step_host_syncs, 0);
    printf("--self-interleave on at a budget of 32: the tokens of exact SoloHead, %lld bytes "
           "recalled either way; %lld steps in halves, %lld switches, %lld rounds beside the "
           "other half\n",
           (long long)r[1].ctr.recall_bytes, (long long)n[1][0], (long long)n[1][1],
           (long long)n[1][2]);
    for (int i = 0; i < 3; i++) {
        json_decref(r[i].pj);
        workload_free(&r[i].w);
    }
    /* one offloaded request: never split */
    struct pi_cfg c = {.policy = "pulseinfer",
                       .spec = "lengths:300",
                       .admission = "fixed:0",
                       .out_len = 6,
                       .max_batch = 2,
                       .selection = OFFLOAD_SOLOHEAD,
                       .budget_tokens = 32,
                       .prompt_kv = OFFLOAD_KV_LOCALITY,
                       .self_interleave = "on",
                       .want_json = 1};
    struct pi_out one;
    serve(&c, &one);
    EXPECT_EQ_INT(one.rc, 0);
    int64_t m[3];
    self_counts(&one, m);
    EXPECT_EQ_INT(m[0], 0);
    EXPECT_EQ_INT(m[1], 0);
    json_decref(one.pj);
    workload_free(&one.w);
}

/* Self-interleaving on both engines' paths (host-planned gather-scatter, device-planned
 * zero-copy: each lane its own descriptors, plan and gather events, its entries' rows of the
 * step upload and its tails), alone and with speculation (--speculate: each half predicts its own
 * next layer; the prediction's lists, events and the planner's record of them per lane). At a
 * budget of two blocks, every request offloaded, with the locality query whatever the predictor
 * -- the step's own query (perfect), the misprediction model, the query negated (poor) -- and
 * with the real query on a prefilled prompt: the tokens are exact SoloHead's, the steps run in
 * halves, and with the locality query (whose lists depend on the request and step only) the
 * recall is the unsplit run's chunk for chunk: recalled, prefetched, corrected and held the
 * same, since each request's hot cache sees the same accesses in the same order; those runs
 * verify every resident block against the host pool after each step, the real query's make no
 * host round trip inside a step. */
static void test_self_speculation(void)
{
    static const char *const names[] = {"perfect", "model", "poor"};
    for (int zc = 0; zc < 2; zc++)
        for (int real = 0; real < 2; real++) {
            struct pi_cfg c = {
                .policy = "pulseinfer",
                /* tail blocks fill in both halves at step 4 (n % 16 = 12) */
                .spec = real ? "lengths:300,90,268,204" : "lengths:300,170,90,268,44,200",
                .admission = "fixed:0",
                .out_len = real ? 6 : 10,
                .max_batch = 6,
                .selection = OFFLOAD_SOLOHEAD,
                .budget_tokens = 32,
                .prompt_kv = real ? OFFLOAD_KV_PREFILL : OFFLOAD_KV_LOCALITY,
                .query = real ? OFFLOAD_QUERY_REAL : OFFLOAD_QUERY_LOCALITY,
                .zero_copy = zc,
                .no_verify = real, /* the locality runs verify every resident block */
                .want_json = 1};
            struct pi_out exact;
            serve(&c, &exact);
            EXPECT_EQ_INT(exact.rc, 0);
            /* k = -1: no speculation; then the predictors */
            for (int k = -1; k < (real ? 1 : 3); k++) {
                c.speculate = k >= 0;
                c.spec_predictor = k == 2 ? OFFLOAD_SPEC_NEGATED : OFFLOAD_SPEC_APPROX;
                c.spec_model = k == 1;
                struct pi_out r[2];
                int64_t n[2][3];
                for (int si = 0; si < 2; si++) {
                    c.self_interleave = si ? "on" : NULL;
                    serve(&c, &r[si]);
                    EXPECT_EQ_INT(r[si].rc, 0);
                    if (c.no_verify) EXPECT_EQ_INT(r[si].ctr.step_host_syncs, 0);
                    EXPECT(same_tokens(&exact.w, &r[si].w));
                    self_counts(&r[si], n[si]);
                }
                const struct serve_counters *a = &r[0].ctr, *b = &r[1].ctr;
                printf("--self-interleave on%s, %s, %s query%s%s: tokens %s exact SoloHead's; "
                       "%lld steps in halves; %lld chunks recalled (unsplit %lld), hit rate "
                       "%.3f (%.3f), %lld prefetched (%lld), %lld corrected (%lld)\n",
                       k >= 0 ? " --speculate" : "", zc ? "zero-copy" : "gather-scatter",
                       real ? "real" : "locality", k >= 0 ? ", predictor " : "",
                       k >= 0 ? (real ? "approximate" : names[k]) : "",
                       same_tokens(&exact.w, &r[1].w) ? "equal" : "DIFFER from", (long long)n[1][0],
                       (long long)b->recall_chunks, (long long)a->recall_chunks, rate(b), rate(a),
                       (long long)b->spec_recall_chunks, (long long)a->spec_recall_chunks,
                       (long long)b->spec_corrections, (long long)a->spec_corrections);
                EXPECT(n[1][0] > 0 && n[1][2] > 0);
                EXPECT_EQ_INT(n[0][0], 0);
                EXPECT(b->recall_chunks > 0);
                if (k >= 0) EXPECT(b->spec_scored > 0 && b->spec_recall_chunks > 0);
                if (!real) {
                    EXPECT_EQ_INT(b->recall_chunks, a->recall_chunks);
                    EXPECT_EQ_INT(b->spec_recall_chunks, a->spec_recall_chunks);
                    EXPECT_EQ_INT(b->spec_corrections, a->spec_corrections);
                    EXPECT_EQ_INT(b->spec_held, a->spec_held);
                    EXPECT_EQ_INT(b->spec_scored, a->spec_scored);
                    if (k == 0) EXPECT_EQ_INT(b->spec_corrections, 0);
                    if (k == 2) EXPECT(b->spec_corrections > 0 && rate(b) < 0.5);
                }
                for (int si = 0; si < 2; si++) {
                    json_decref(r[si].pj);
                    workload_free(&r[si].w);
                }
            }
            json_decref(exact.pj);
            workload_free(&exact.w);
        }
}

/* pulse run: --self-interleave's JSON (config and counters), its auto mode choosing by IOAA's
 * model (the steps it ran in halves are those it chose, and the model's two step times are
 * recorded), and its refusals: a bad mode, --speculate, --no-irq, zero-copy, another policy. */
static void test_self_cli(void)
{
    char path[] = "/tmp/pulse_selfint_XXXXXX", cmd[1024], out[8192];
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    const char *common = "run --backend cpu --model tiny --workload lengths:200,200,200,200 "
                         "--output-len 6 --max-batch 4 --budget-tokens 32";
    /* on without IOAA, auto, and on with IOAA (every step in halves: the self step's factor
     * refitted from them) */
    static const char *const modes[] = {"on", "auto", "on"};
    for (int k = 0; k < 3; k++) {
        snprintf(cmd, sizeof cmd,
                 "%s --policy pulseinfer --admission %s --self-interleave %s --out %s", common,
                 k ? "ioaa" : "fixed:0", modes[k], path);
        EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
        json_error_t je;
        json_t *j = json_load_file(path, 0, &je);
        EXPECT(j != NULL);
        if (!j) continue;
        json_t *si = json_object_get(json_object_get(json_object_get(j, "counters"), "pulseinfer"),
                                     "self_interleave");
        EXPECT_STR_EQ(json_string_value(json_object_get(si, "mode")), modes[k]);
        EXPECT_EQ_INT(json_integer_value(json_object_get(
                          json_object_get(json_object_get(j, "config"), "offload"), "lanes")),
                      2);
        const int64_t steps = json_integer_value(json_object_get(si, "steps"));
        if (k != 1) {
            EXPECT_EQ_INT(steps, 6);
            EXPECT(json_integer_value(json_object_get(si, "switches")) > 0);
        }
        if (k == 2) { /* every steady step refits k_S, none the recall factors */
            json_t *pj = json_object_get(json_object_get(j, "counters"), "pulseinfer");
            json_t *rf = json_object_get(pj, "ioaa_refit");
            const int64_t sr = json_integer_value(json_object_get(rf, "self_refits")),
                          steady = json_integer_value(json_object_get(pj, "ioaa_steady_steps"));
            EXPECT(sr > 0 && sr == steady);
            EXPECT_EQ_INT(json_integer_value(json_object_get(rf, "refits")), 0);
            const double f = json_real_value(json_object_get(rf, "self_factor"));
            EXPECT(f > 0 && f != 1.0);
            printf("--self-interleave on, ioaa: %lld self steps refitted, self factor %.3f\n",
                   (long long)sr, f);
        } else if (k == 1) { /* auto: the model's choice, recorded */
            const int64_t as = json_integer_value(json_object_get(si, "auto_self_steps")),
                          ap = json_integer_value(json_object_get(si, "auto_plain_steps"));
            const double ps = json_real_value(json_object_get(si, "predicted_self_step_ms")),
                         pp = json_real_value(json_object_get(si, "predicted_plain_step_ms"));
            EXPECT(as + ap > 0 && ps > 0 && pp > 0);
            EXPECT_EQ_INT(steps, as);
            /* one batch size throughout (4 alike requests, admitted together): one choice */
            EXPECT(ps < pp ? ap == 0 : as == 0);
            /* the recall factors learn from the unsplit steps only, the self step's factor from
             * the steps in halves only (the first step of each is cold: not a sample) */
            json_t *rf = json_object_get(
                json_object_get(json_object_get(j, "counters"), "pulseinfer"), "ioaa_refit");
            const int64_t sr = json_integer_value(json_object_get(rf, "self_refits"));
            EXPECT(json_integer_value(json_object_get(rf, "refits")) <= ap);
            EXPECT(sr <= as);
            if (as >= 3) EXPECT(sr > 0);
            EXPECT(json_real_value(json_object_get(rf, "self_factor")) > 0);
            printf("--self-interleave auto: the model's step %.3f ms in halves, %.3f ms unsplit: "
                   "%lld steps in halves, %lld unsplit\n",
                   ps, pp, (long long)as, (long long)ap);
        }
        json_decref(j);
    }
    static const struct {
        const char *flags, *msg;
    } bad[] = {{"--policy pulseinfer --self-interleave maybe",
                "--self-interleave: 'maybe' is not on, "
                "auto or off"},
               {"--policy pulseinfer --self-interleave on --no-irq",
                "--self-interleave: 'on' needs IRQ (not with --no-irq)"},
               {"--policy arkvale --self-interleave on", "--self-interleave: only for pulseinfer"}};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(bad); i++) {
        snprintf(cmd, sizeof cmd, "%s %s --out %s", common, bad[i].flags, path);
        EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 2); /* usage errors */
        const int found = strstr(out, bad[i].msg) != NULL;
        EXPECT(found);
        if (!found) fprintf(stderr, "expected '%s' in: %s\n", bad[i].msg, out);
    }
    remove(path);
}

int main(void)
{
    test_equals_vanilla();
    test_batch_independent();
    test_ioaa_offloads();
    test_ioaa_alternative();
    test_ioaa_by_context();
    test_irq();
    test_chunks();
    test_dead_link();
    test_fault_cli();
    test_flags();
    test_ioaa_cap();
    test_speculation();
    test_speculation_mid();
    test_speculation_cli();
    test_predict_stream();
    test_select_launch();
    test_plan_launch();
    test_correction_stream();
    test_attend_recall();
    test_attend_recall_cli();
    test_self_equals_vanilla();
    test_self_exact();
    test_self_speculation();
    test_self_cli();
    return tu_finish("test_pulseinfer");
}
