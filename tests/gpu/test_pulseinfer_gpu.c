/* pulseinfer (baselines/pulseinfer.c) on CUDA with the tiny model: with a budget covering the
 * context, on vanilla's prompt KV, every request decodes exactly vanilla's tokens on CUDA in two
 * arrival orders of mixed lengths (the first with CUDA graphs, as pulse run, the second without:
 * --no-graph), with requests split between the normal and the offload batch
 * (fixed:200), all offloaded (fixed:0) and IOAA admission; with IRQ and without; head-wise and
 * SoloHead; gather-scatter and zero-copy (whose gather runs on its own stream beside the normal
 * batch). Runs without the per-step verification make no host synchronisation inside a step;
 * one run with it checks every resident block against its host copy. PULSE_GPU_TEST_CASES
 * runs some of the cases (0-6 the first order's, 7-13 the second's; vanilla's runs always;
 * 14-17 speculation's; 18-21 self-interleaving's).
 * Exit 77 without a GPU. */
#include "pi_serve.h"

/* Speculation with exact correction (--speculate) on CUDA: every request offloaded, a budget of
 * two blocks, the prediction perfect (the locality query's own step), negated (deliberately
 * poor) and, on a prefilled prompt, the real approximate query: the tokens are exact SoloHead's
 * on CUDA, both engines (gather-scatter's prefetch on the planner, zero-copy's plan and gather on
 * the device, its prefetch gather on the gather's stream), with CUDA graphs; a perfect predictor
 * corrects nothing, a poor one corrects; the negated gather-scatter run is verified after every
 * step (every resident block against its host copy); a margin keeps the tokens and holds at
 * least the hit rate. On zero-copy, the poor predictor's prediction made from mid-layer and from
 * the predicted lists' attention (--spec-from mid, hits; the latter verified after every step:
 * its correction may take a slot that attention reads, and waits for it): exact SoloHead's
 * tokens, with the locality query the same corrections. From the predicted lists every
 * correction is queued at its exact plan, behind its gate on the device (the default); with
 * the hot cache one selection large (no reserve) corrections take predicted blocks' slots and
 * the gate holds them (verified after every step): exact tokens, and the prediction,
 * prefetched and corrected chunks of the run that queues every correction after that attention
 * (--spec-correction late). On zero-copy the attention that recalls (--attend-recall on), exact
 * at layer (verified after every step) and with the poor predictor: exact SoloHead's tokens, its
 * layers and chunks counted. Cases 14-17 of PULSE_GPU_TEST_CASES. */
/* The gate (spec_from hits, spec_correct_early) on the device: c is the negated predictor's run
 * from the predicted lists; with the hot cache one selection large, early (verified after every
 * step) against late. */
static void gate_gpu(struct pi_cfg c, const struct pi_out *exact, int real)
{
    struct pi_out r[2];
    c.hot_slots = 6; /* 2 scored + sink, 2 window and tail blocks: one selection */
    for (int late = 0; late < 2; late++) {
        c.spec_late = late, c.no_verify = late;
        serve(&c, &r[late]);
        EXPECT_EQ_INT(r[late].rc, 0);
        EXPECT(same_tokens(&exact->w, &r[late].w));
    }
    const struct serve_counters *e = &r[0].ctr, *l = &r[1].ctr;
    EXPECT_EQ_INT(e->spec_early_corrections, e->spec_hits);
    EXPECT(e->spec_hits > 0 && e->spec_correction_holds > 0);
    EXPECT_EQ_INT(l->spec_early_corrections + l->spec_correction_holds, 0);
    EXPECT_EQ_INT(l->step_host_syncs, 0);
    EXPECT_EQ_INT(e->spec_recall_chunks, l->spec_recall_chunks);
    EXPECT_EQ_INT(e->spec_corrections, l->spec_corrections);
    EXPECT_EQ_INT(e->spec_held, l->spec_held);
    printf("cuda gate, %s query, one selection's hot cache: %lld of %lld corrections early, %lld "
           "lists held (late: %lld early), %lld prefetched, %lld corrected (late %lld, %lld), "
           "tokens %s exact SoloHead's\n",
           real ? "real" : "locality", (long long)e->spec_early_corrections,
           (long long)e->spec_hits, (long long)e->spec_correction_holds,
           (long long)l->spec_early_corrections, (long long)e->spec_recall_chunks,
           (long long)e->spec_corrections, (long long)l->spec_recall_chunks,
           (long long)l->spec_corrections,
           same_tokens(&exact->w, &r[0].w) && same_tokens(&exact->w, &r[1].w) ? "equal"
                                                                              : "DIFFER from");
    for (int k = 0; k < 2; k++)
        workload_free(&r[k].w);
}

static void test_speculation_gpu(int quick)
{
    for (int real = 0; real < 2; real++)
        for (int zc = 0; zc < 2; zc++) {
            if (!tu_case_on(14 + real * 2 + zc)) continue;
            struct pi_cfg c = {.backend = "cuda",
                               .policy = "pulseinfer",
                               .spec = quick ? "lengths:300,90,260" : "lengths:300,170,90,260,200",
                               .admission = "fixed:0",
                               .out_len = quick ? 4 : 8,
                               .max_batch = 4,
                               .selection = OFFLOAD_SOLOHEAD,
                               .budget_tokens = 32,
                               .prompt_kv = real ? OFFLOAD_KV_PREFILL : OFFLOAD_KV_LOCALITY,
                               .query = real ? OFFLOAD_QUERY_REAL : OFFLOAD_QUERY_LOCALITY,
                               .zero_copy = zc,
                               .no_verify = 1};
            struct pi_out exact, spec[2];
            serve(&c, &exact);
            EXPECT_EQ_INT(exact.rc, 0);
            c.speculate = 1;
            for (int k = 0; k < 2; k++) {
                c.spec_predictor = k ? OFFLOAD_SPEC_NEGATED : OFFLOAD_SPEC_APPROX;
                c.no_verify = !(k && !zc);
                serve(&c, &spec[k]);
                const struct serve_counters *t = &spec[k].ctr;
                EXPECT_EQ_INT(spec[k].rc, 0);
                const int same = same_tokens(&exact.w, &spec[k].w);
                EXPECT(same);
                EXPECT(t->spec_recall_chunks > 0 && t->spec_scored > 0);
                printf("cuda speculation, %s query, %s, %s predictor%s: hit rate %lld/%lld, "
                       "%lld prefetched, %lld corrected, %lld host syncs in steps, tokens %s "
                       "exact SoloHead's\n",
                       real ? "real" : "locality", zc ? "zero-copy" : "gather-scatter",
                       k ? "negated" : "approx", c.no_verify ? "" : " verified",
                       (long long)t->spec_held, (long long)t->spec_scored,
                       (long long)t->spec_recall_chunks, (long long)t->spec_corrections,
                       (long long)t->step_host_syncs, same ? "equal" : "DIFFER from");
            }
            if (!real) EXPECT_EQ_INT(spec[0].ctr.spec_corrections, 0);
            EXPECT(spec[1].ctr.spec_corrections > spec[0].ctr.spec_corrections);
            /* zero-copy, the poor predictor's run verified after every step, seven ways: the
             * prediction on its own stream issued before the exact selection (--predict-stream
             * fork); on the compute stream after it, both selections in one launch (the
             * default); one launch each (--select-launch apart); the corrections on a stream
             * of their own (--correction-stream own); and each layer's plan and build in one
             * kernel (--plan-launch fused), with the selections joint and apart; and the
             * defaults (joint, fused, the corrections recalled in the attention: --attend-recall
             * corrections). The same tokens, prefetched and corrected chunks, and each way's
             * counter: a fork per predicted layer and step, two joint selections a step per
             * predicted layer but the first (whose piece selects no exact layer), a correction
             * on its stream per predicted layer and step, every device plan (exact and
             * predicted) fused, every correction recalled in the attention */
            static const char *const ways[] = {"forked",
                                               "inline, joint",
                                               "inline, apart",
                                               "inline, joint, corrections on their stream",
                                               "inline, joint, plans fused",
                                               "inline, apart, plans fused",
                                               "the defaults: joint, fused, corrections in the "
                                               "attention"};
            int64_t predicted = 0;
            for (int way = 0; zc && way < 7; way++) {
                struct pi_out f;
                c.spec_predictor = OFFLOAD_SPEC_NEGATED, c.no_verify = 0;
                c.predict_fork = way == 0, c.select_apart = way == 2 || way == 5;
                c.correct_own = way == 3, c.plan_fused = way >= 4;
                c.attend_recall = way == 6 ? OFFLOAD_ATTEND_CORRECTIONS : OFFLOAD_ATTEND_OFF;
                serve(&c, &f);
                EXPECT_EQ_INT(f.rc, 0);
                const int same = same_tokens(&exact.w, &f.w);
                EXPECT(same);
                EXPECT_EQ_INT(f.ctr.spec_recall_chunks, spec[1].ctr.spec_recall_chunks);
                EXPECT_EQ_INT(f.ctr.spec_corrections, spec[1].ctr.spec_corrections);
                if (way == 0) predicted = f.ctr.forked_selections;
                EXPECT(predicted > f.ctr.steps);
                EXPECT_EQ_INT(f.ctr.forked_selections, way == 0 ? predicted : 0);
                EXPECT_EQ_INT(f.ctr.joint_selections, way == 1 || way == 3 || way == 4 || way == 6
                                                          ? 2 * (predicted - f.ctr.steps)
                                                          : 0);
                EXPECT_EQ_INT(f.ctr.stream_corrections, way == 3 ? predicted : 0);
                /* every sparse layer predicted (layer 0 is dense) and planned exactly once a step
                 * and lane: twice the predictions */
                EXPECT_EQ_INT(f.ctr.fused_plans, way >= 4 ? 2 * predicted : 0);
                EXPECT_EQ_INT(f.ctr.attend_recall_chunks, way == 6 ? f.ctr.spec_corrections : 0);
                EXPECT(way == 6 ? f.ctr.attend_recall_layers > 0 : !f.ctr.attend_recall_layers);
                printf("cuda speculation, %s query, zero-copy, negated predictor, %s, verified: "
                       "%lld prefetched, %lld corrected, %lld forked, %lld joint, %lld "
                       "corrections on their stream, %lld plans fused, tokens %s exact "
                       "SoloHead's\n",
                       real ? "real" : "locality", ways[way], (long long)f.ctr.spec_recall_chunks,
                       (long long)f.ctr.spec_corrections, (long long)f.ctr.forked_selections,
                       (long long)f.ctr.joint_selections, (long long)f.ctr.stream_corrections,
                       (long long)f.ctr.fused_plans, same ? "equal" : "DIFFER from");
                workload_free(&f.w);
            }
            c.select_apart = c.correct_own = c.plan_fused = c.attend_recall = 0;
            c.predict_fork = 0, c.no_verify = 1;
            /* a margin (--spec-margin 0.5): the same tokens, at least the hit rate, no host
             * round trip in a step */
            struct pi_out wide;
            c.spec_predictor = OFFLOAD_SPEC_APPROX, c.spec_margin = 0.5, c.no_verify = 1;
            serve(&c, &wide);
            c.spec_margin = 0;
            const struct serve_counters *w = &wide.ctr, *a = &spec[0].ctr;
            EXPECT_EQ_INT(wide.rc, 0);
            EXPECT(same_tokens(&exact.w, &wide.w));
            EXPECT_EQ_INT(w->step_host_syncs, 0);
            EXPECT(w->spec_held * a->spec_scored >= a->spec_held * w->spec_scored);
            EXPECT(w->spec_corrections <= a->spec_corrections);
            printf("cuda speculation, %s query, %s, margin 0.5: hit rate %lld/%lld, %lld "
                   "prefetched, %lld corrected\n",
                   real ? "real" : "locality", zc ? "zero-copy" : "gather-scatter",
                   (long long)w->spec_held, (long long)w->spec_scored,
                   (long long)w->spec_recall_chunks, (long long)w->spec_corrections);
            for (int f = 0; zc && f < 2; f++) {
                struct pi_out pt;
                c.spec_from = f ? OFFLOAD_SPEC_FROM_HITS : OFFLOAD_SPEC_FROM_MID;
                c.spec_predictor = OFFLOAD_SPEC_NEGATED, c.no_verify = !f;
                serve(&c, &pt);
                const struct serve_counters *t = &pt.ctr;
                EXPECT_EQ_INT(pt.rc, 0);
                const int same = same_tokens(&exact.w, &pt.w);
                EXPECT(same);
                EXPECT(f ? t->spec_hits > 0 : t->spec_mid > 0 && t->spec_hits == 0);
                if (!real) EXPECT_EQ_INT(t->spec_corrections, spec[1].ctr.spec_corrections);
                printf("cuda speculation, %s query, zero-copy, negated predictor from %s%s: "
                       "%lld from mid-layer, %lld from the predicted lists, %lld prefetched, %lld "
                       "corrected, tokens %s exact SoloHead's\n",
                       real ? "real" : "locality", f ? "the predicted lists" : "mid-layer",
                       c.no_verify ? "" : " verified", (long long)t->spec_mid,
                       (long long)t->spec_hits, (long long)t->spec_recall_chunks,
                       (long long)t->spec_corrections, same ? "equal" : "DIFFER from");
                if (f) {
                    EXPECT_EQ_INT(t->spec_early_corrections, t->spec_hits);
                    gate_gpu(c, &exact, real);
                }
                workload_free(&pt.w);
            }
            c.spec_from = OFFLOAD_SPEC_FROM_INPUT;
            /* zero-copy's attention that recalls (--attend-recall on): exact at layer (verified
             * after every step: the blocks the attention stored against their host copies) and
             * speculated with the poor predictor (its corrections; no host round trip) */
            for (int sp = 0; zc && sp < 2; sp++) {
                struct pi_out ar;
                c.speculate = sp, c.spec_predictor = OFFLOAD_SPEC_NEGATED, c.attend_recall = 1;
                c.no_verify = sp;
                serve(&c, &ar);
                const struct serve_counters *t = &ar.ctr;
                EXPECT_EQ_INT(ar.rc, 0);
                const int same = same_tokens(&exact.w, &ar.w);
                EXPECT(same);
                EXPECT(t->attend_recall_layers > 0 && t->attend_recall_chunks > 0);
                EXPECT_EQ_INT(t->attend_recall_chunks, sp ? t->spec_corrections : t->recall_chunks);
                if (!sp) EXPECT_EQ_INT(t->recall_chunks, exact.ctr.recall_chunks);
                if (sp) EXPECT_EQ_INT(t->step_host_syncs, 0);
                if (sp && !real) EXPECT_EQ_INT(t->spec_corrections, spec[1].ctr.spec_corrections);
                printf("cuda attend-recall, %s query, %s%s: %lld layers, %lld chunks recalled in "
                       "the attention of %lld, tokens %s exact SoloHead's\n",
                       real ? "real" : "locality", sp ? "negated predictor" : "exact at layer",
                       c.no_verify ? "" : " verified", (long long)t->attend_recall_layers,
                       (long long)t->attend_recall_chunks, (long long)t->recall_chunks,
                       same ? "equal" : "DIFFER from");
                workload_free(&ar.w);
            }
            c.speculate = 1, c.attend_recall = 0, c.spec_predictor = OFFLOAD_SPEC_APPROX;
            workload_free(&wide.w);
            workload_free(&exact.w);
            for (int k = 0; k < 2; k++)
                workload_free(&spec[k].w);
        }
}

/* Self-interleaving (--self-interleave on) on CUDA: every request offloaded, a budget of two
 * blocks, the locality query; both engines (zero-copy: each half's plan, descriptors and gather
 * events on the device, its gather on the gather's stream), alone and with speculation (each
 * half's prefetch): the tokens are exact SoloHead's unsplit, the steps ran in halves, the
 * recall is the unsplit run's to the chunk, no host round trip in a step; the gather-scatter
 * run with speculation is verified after every step. Tail blocks fill in both halves at once.
 * On zero-copy each half's layers replay as graphs of their own, dropped and captured again as
 * requests finish (the batch's size changes). Cases 18-21 of PULSE_GPU_TEST_CASES. */
static void test_self_gpu(int quick)
{
    for (int zc = 0; zc < 2; zc++)
        for (int sp = 0; sp < 2; sp++) {
            if (!tu_case_on(18 + zc * 2 + sp)) continue;
            struct pi_cfg c = {.backend = "cuda",
                               .policy = "pulseinfer",
                               .spec = quick ? "lengths:300,90,268,204"
                                             : "lengths:300,170,90,268,44,200",
                               .admission = "fixed:0",
                               .out_len = quick ? 6 : 10,
                               .max_batch = 6,
                               .selection = OFFLOAD_SOLOHEAD,
                               .budget_tokens = 32,
                               .prompt_kv = OFFLOAD_KV_LOCALITY,
                               .zero_copy = zc,
                               .speculate = sp,
                               .no_verify = 1,
                               .want_json = 1};
            struct pi_out exact, r[2];
            c.speculate = 0;
            serve(&c, &exact);
            EXPECT_EQ_INT(exact.rc, 0);
            c.speculate = sp;
            int64_t n[2][3];
            for (int si = 0; si < 2; si++) {
                c.self_interleave = si ? "on" : NULL;
                c.no_verify = !(si && sp && !zc);
                serve(&c, &r[si]);
                EXPECT_EQ_INT(r[si].rc, 0);
                EXPECT(same_tokens(&exact.w, &r[si].w));
                if (c.no_verify) EXPECT_EQ_INT(r[si].ctr.step_host_syncs, 0);
                self_counts(&r[si], n[si]);
            }
            const struct serve_counters *a = &r[0].ctr, *b = &r[1].ctr;
            EXPECT(n[1][0] > 0 && n[1][2] > 0);
            /* zero-copy's halves replay their layers as graphs of their own (both pieces of
             * every layer, once captured); the host-planned gather-scatter path has none */
            const int64_t gp = self_graph_pieces(&r[1]);
            if (zc)
                EXPECT(gp > 0);
            else
                EXPECT_EQ_INT(gp, 0);
            EXPECT_EQ_INT(b->recall_chunks, a->recall_chunks);
            EXPECT_EQ_INT(b->spec_recall_chunks, a->spec_recall_chunks);
            EXPECT_EQ_INT(b->spec_corrections, a->spec_corrections);
            printf("cuda --self-interleave on%s, %s%s: %lld steps in halves (%lld pieces from "
                   "graphs), %lld chunks recalled (unsplit %lld), %lld prefetched, %lld host "
                   "syncs in steps, tokens %s exact SoloHead's\n",
                   sp ? " --speculate" : "", zc ? "zero-copy" : "gather-scatter",
                   sp && !zc ? " verified (its syncs are the verification's)" : "",
                   (long long)n[1][0], (long long)gp, (long long)b->recall_chunks,
                   (long long)a->recall_chunks, (long long)b->spec_recall_chunks,
                   (long long)b->step_host_syncs,
                   same_tokens(&exact.w, &r[1].w) ? "equal" : "DIFFER from");
            json_decref(exact.pj);
            workload_free(&exact.w);
            for (int si = 0; si < 2; si++) {
                json_decref(r[si].pj);
                workload_free(&r[si].w);
            }
        }
}

int main(void)
{
    if (!backend_cuda_available()) {
        fprintf(stderr, "test_pulseinfer_gpu: no usable GPU: skipped\n");
        return 77;
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* each case's line out before a tool could end the run */
    /* quick (under a compute-sanitizer tool, whose racecheck grows past the machine's 128 GB
     * of host memory on the full test): one order of four shorter requests, fewer tokens,
     * every case once */
    static const char *const specs[] = {"lengths:300,170,90,260,40,200",
                                        "lengths:40,260,90,300,200,170"};
    const char *const quick_spec = "lengths:300,90,260,40";
    const int quick = tu_quick(), out_len = quick ? 6 : 12;
    for (int k = 0; k < (quick ? 1 : 2); k++) {
        const char *spec = quick ? quick_spec : specs[k];
        struct pi_cfg v = {.backend = "cuda",
                           .policy = "vanilla",
                           .spec = spec,
                           .out_len = out_len,
                           .max_batch = 4,
                           .no_graph = k == 1};
        struct pi_out van;
        serve(&v, &van);
        EXPECT_EQ_INT(van.rc, 0);
        /* fixed:200 offloads the requests longer than 200 tokens, prompt and output */
        int longer = 0;
        for (int i = 0; i < van.w.n; i++)
            longer += van.w.reqs[i].prompt_len + out_len > 200;
        EXPECT(longer > 0 && longer < van.w.n); /* both batches have requests */
        struct {
            const char *admission;
            int no_irq, selection, zero_copy, verify;
        } cases[] = {
            {"fixed:200", 0, OFFLOAD_SOLOHEAD, 0, 0}, {"fixed:200", 1, OFFLOAD_SOLOHEAD, 0, 0},
            {"fixed:200", 0, OFFLOAD_HEADWISE, 0, 1}, {"fixed:200", 0, OFFLOAD_SOLOHEAD, 1, 0},
            {"fixed:200", 0, OFFLOAD_HEADWISE, 1, 1}, {"fixed:0", 0, OFFLOAD_SOLOHEAD, 0, 0},
            {"ioaa", 0, OFFLOAD_SOLOHEAD, 0, 0}};
        for (size_t i = 0; i < PULSE_ARRAY_LEN(cases); i++) {
            /* (numbered over both orders: PULSE_GPU_TEST_CASES) */
            if (!tu_case_on((long)(k * PULSE_ARRAY_LEN(cases) + i))) continue;
            struct pi_cfg c = {.backend = "cuda",
                               .policy = "pulseinfer",
                               .spec = spec,
                               .admission = cases[i].admission,
                               .out_len = out_len,
                               .max_batch = 4,
                               .no_graph = k == 1,
                               .no_irq = cases[i].no_irq,
                               .selection = cases[i].selection,
                               .budget_tokens = 512, /* every block selected */
                               .prompt_kv = OFFLOAD_KV_SYNTHETIC,
                               .zero_copy = cases[i].zero_copy,
                               .no_verify = !cases[i].verify};
            struct pi_out r;
            serve(&c, &r);
            EXPECT_EQ_INT(r.rc, 0);
            const int same = same_tokens(&van.w, &r.w);
            EXPECT(same);
            EXPECT_EQ_INT(r.ctr.admitted_normal + r.ctr.admitted_offload, van.w.n);
            if (!strcmp(cases[i].admission, "fixed:200"))
                EXPECT_EQ_INT(r.ctr.admitted_offload, longer);
            if (!strcmp(cases[i].admission, "fixed:0")) EXPECT_EQ_INT(r.ctr.admitted_normal, 0);
            if (r.ctr.admitted_offload) EXPECT(r.ctr.recall_bytes > 0);
            printf(
                "cuda %s%s, %s%s%s, %s%s: %lld normal + %lld offloaded, %lld host syncs in steps, "
                "tokens %s vanilla's\n",
                spec, k == 1 ? " (no graphs)" : "", cases[i].admission,
                cases[i].no_irq ? " --no-irq" : "",
                cases[i].zero_copy ? " zero-copy" : " gather-scatter",
                cases[i].selection == OFFLOAD_SOLOHEAD ? "solohead" : "headwise",
                cases[i].verify ? " verified" : "", (long long)r.ctr.admitted_normal,
                (long long)r.ctr.admitted_offload, (long long)r.ctr.step_host_syncs,
                same ? "equal" : "DIFFER from");
            workload_free(&r.w);
        }
        workload_free(&van.w);
    }
    test_speculation_gpu(quick);
    test_self_gpu(quick);
    return tu_finish("test_pulseinfer_gpu");
}
