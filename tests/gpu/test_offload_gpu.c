/* The offload policies (runtime/offload/offload.h) on CUDA with the tiny model:
 * 1. with a budget that covers the context, arkvale and infinigen decode exactly vanilla's tokens
 *    on CUDA (same prompt KV; the attention of the selected pages, all of them in token order,
 *    runs the same kernel with the same split plan as the dense one), with no host
 *    synchronisation inside a step;
 * 2. with a small budget on the locality model's KV, every recall engine (batch where the CUDA
 *    runtime has it) and both selections run with verify_steps (after every step each resident
 *    block's GPU copy equals its host copy), move bytes, and allocate nothing in a step;
 * 3. the same run on the CPU: selections agree up to fp32 ties of the scores (select.h), so the
 *    recall bytes are compared loosely and the token agreement is reported; infinigen on CUDA
 *    makes arkvale's selections (same tokens and bytes) with its recall one layer ahead;
 * 4. tiny-gemma3 (sliding-window layers kept in rings of GPU pages, the prompt KV generated on
 *    the device through the staging): with a covering budget arkvale and infinigen decode
 *    vanilla's tokens on CUDA.
 * Exit 77 without a GPU. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "baselines/registry.h"
#include "common.h"
#include "engine.h"
#include "kv_cache.h"
#include "offload.h"
#include "serve.h"
#include "testsource.h"
#include "testutil.h"
#include "workloads/workload.h"

struct run_out {
    struct workload w;
    struct serve_counters ctr;
    struct offload_stats st;
    struct engine_stats es;
    int rc, created;
};

static const char *g_model = "tiny";

/* engine_params.no_piece_graphs of the next serve() */
static int g_no_piece_graphs;

/* Serves spec with `policy` on backend `be` (offload params p for offload policies). */
/* serve()'s source: 1 makes its approximate query the exact one (--spec-overlap exact); 0 its
 * misprediction model (the default) */
static int g_spec_exact;

static void serve(const char *be_name, const char *policy, const char *spec, int out_len,
                  struct offload_params *p, struct run_out *r)
{
    char err[512];
    memset(r, 0, sizeof *r);
    r->rc = -1;
    if (workload_create(&r->w, spec, out_len, 1, err, sizeof err) != 0) return;
    /* where a run under a compute-sanitizer tool ends, should it end early */
    fprintf(stderr, "serving %s %s %s ...\n", be_name, policy, spec);
    const int max_tokens = workload_max_tokens(&r->w), max_batch = 4;
    const struct model_config *m = model_config_find(g_model);
    struct engine_params ep = {.cfg = m,
                               .be = backend_find(be_name),
                               .seed = 1,
                               .max_batch = max_batch,
                               .max_tokens = max_tokens,
                               .use_graph = 1,
                               .no_piece_graphs = g_no_piece_graphs};
    struct engine *e = engine_create(&ep, err, sizeof err);
    struct kv_cache_params kp = {m->n_layers, m->n_kv_heads, m->head_dim, 16,
                                 64u << 20,   max_batch,     max_tokens};
    struct kv_cache *kv = e ? kv_cache_create(&kp, ep.be, engine_ctx(e), err, sizeof err) : NULL;
    const struct policy *pol = policy_find(policy);
    struct offload *o = NULL;
    if (kv && pol->needs_ctx) {
        p->max_batch = max_batch, p->max_tokens = max_tokens;
        p->schedule = pol->offload_schedule;
        const struct locality_source_params lp = {.spec_mode = g_spec_exact ? LOC_SPEC_EXACT
                                                                            : LOC_SPEC_PROFILE};
        if (test_source(e, kv, p, &lp) && offload_create(e, kv, p, &o, err, sizeof err))
            fprintf(stderr, "%s %s: offload: %s\n", be_name, policy, err);
    }
    r->created = kv && (o || !pol->needs_ctx);
    double wall;
    if (r->created)
        r->rc = serve_run_policy(e, kv, pol, o, r->w.reqs, r->w.n, max_batch, &r->ctr, &wall, err,
                                 sizeof err);
    if (r->created && r->rc) fprintf(stderr, "%s %s %s: %s\n", be_name, policy, spec, err);
    if (o) offload_get_stats(o, &r->st);
    if (e) engine_get_stats(e, &r->es);
    offload_free(o);
    if (p) query_source_free(p->source), p->source = NULL;
    kv_cache_free(kv);
    engine_free(e);
}

static int same_tokens(const struct workload *a, const struct workload *b)
{
    return a->n == b->n &&
           !memcmp(a->token_store, b->token_store, sizeof(int32_t) * a->n * a->output_len);
}

static struct offload_params params(int budget, int selection, enum recall_engine eng)
{
    struct offload_params p;
    offload_params_init(&p, 1, 1, 1);
    p.budget_tokens = budget;
    p.selection = selection;
    p.engine = eng;
    p.verify_steps = 1;
    return p;
}

static void test_equals_vanilla(void)
{
    /* quick (under a compute-sanitizer tool): fewer and shorter requests */
    const char *spec = tu_quick() ? "lengths:100,61" : "lengths:300,137,61";
    const int out = tu_quick() ? 8 : 24;
    struct run_out v, a;
    serve("cuda", "vanilla", spec, out, NULL, &v);
    EXPECT_EQ_INT(v.rc, 0);
    /* (infinigen with zero-copy: the next layer's gather on its own stream beside the MLP) */
    /* then ArkVale's mean lists (the device plan and per-block) and InfiniGen's re-fetch of
     * the whole selection every step through the gather (its published transfer) */
    const char *pols[] = {"arkvale", "arkvale",   "infinigen", "infinigen",
                          "arkvale", "infinigen", "arkvale",   "infinigen"};
    const int sels[] = {OFFLOAD_HEADWISE, OFFLOAD_SOLOHEAD, OFFLOAD_HEADWISE, OFFLOAD_SOLOHEAD,
                        OFFLOAD_SOLOHEAD, OFFLOAD_MEAN,     OFFLOAD_MEAN,     OFFLOAD_HEADWISE};
    const enum recall_engine engs[] = {RECALL_PER_BLOCK, RECALL_PER_BLOCK,      RECALL_PER_BLOCK,
                                       RECALL_ZERO_COPY, RECALL_GATHER_SCATTER, RECALL_ZERO_COPY,
                                       RECALL_PER_BLOCK, RECALL_GATHER_SCATTER};
    const int refetch[] = {0, 0, 0, 0, 0, 0, 0, 1};
    for (int i = tu_quick() ? 3 : 0; i < 8; i++) { /* quick: zero-copy and gather-scatter */
        struct offload_params p = params(512, sels[i], engs[i]);
        p.refetch = refetch[i];
        p.prompt_kv = OFFLOAD_KV_SYNTHETIC;
        p.verify_steps = 0; /* (its checks synchronise) */
        serve("cuda", pols[i], spec, out, &p, &a);
        EXPECT_EQ_INT(a.ctr.step_host_syncs, 0); /* the recall waited for on the device */
        EXPECT_EQ_INT(a.rc, 0);
        /* on the device path every offload step replays each layer's pre- and post-attention
         * graphs (engine.h: batch_graph_pieces), captured once per batch size; the
         * host-planned engines queue them as they are */
        const int64_t L = model_config_find(g_model)->n_layers;
        if (pulse_sync_each_launch()) { /* PULSE_SYNC: no graphs at all (engine.h) */
            EXPECT_EQ_INT(a.es.graph_launches, 0);
        } else if (engs[i] == RECALL_ZERO_COPY) {
            EXPECT(a.st.steps > 0 && a.es.graph_launches >= 2 * L * a.st.steps);
            EXPECT(a.es.graph_captures >= 2 * L && a.es.graph_captures < a.es.graph_launches);
            /* every layer of every step as two layer graphs (offload_layer.c) */
            EXPECT_EQ_INT(a.st.layer_graph_launches, 2 * L * a.st.steps);
        } else {
            EXPECT_EQ_INT(a.es.graph_launches, 0);
        }
        if (engs[i] == RECALL_ZERO_COPY && !pulse_sync_each_launch()) {
            /* engine_params.no_piece_graphs (--piece-graphs off): the pieces launched one by
             * one */
            struct run_out g;
            g_no_piece_graphs = 1;
            serve("cuda", pols[i], spec, out, &p, &g);
            g_no_piece_graphs = 0;
            EXPECT_EQ_INT(g.rc, 0);
            EXPECT_EQ_INT(g.es.graph_launches, 0);
            EXPECT_EQ_INT(g.es.graph_captures, 0);
            EXPECT(g.st.steps > 0 && same_tokens(&v.w, &g.w));
            EXPECT_EQ_INT(g.st.layer_graph_launches, 0);
            workload_free(&g.w);
            /* offload_params.layer_graphs 0 (--layer-graphs off): the pieces' graphs only */
            p.layer_graphs = 0;
            serve("cuda", pols[i], spec, out, &p, &g);
            p.layer_graphs = 1;
            EXPECT_EQ_INT(g.rc, 0);
            EXPECT_EQ_INT(g.st.layer_graph_launches, 0);
            EXPECT(g.st.steps > 0 && g.es.graph_launches >= 2 * L * g.st.steps);
            EXPECT(same_tokens(&v.w, &g.w));
            workload_free(&g.w);
        }
        const int eq = same_tokens(&v.w, &a.w);
        fprintf(stderr,
                "%s %s %s%s, budget covering the context: tokens %s vanilla's on cuda, %lld host "
                "syncs in steps\n",
                pols[i], offload_selection_name(sels[i]), recall_engine_name(engs[i]),
                refetch[i] ? " re-fetching" : "", eq ? "equal" : "DIFFER from",
                (long long)a.ctr.step_host_syncs);
        EXPECT(eq);
        EXPECT(a.ctr.recall_bytes > 0);
        EXPECT_EQ_INT(a.ctr.step_alloc_calls, 0);
        workload_free(&a.w);
    }
    workload_free(&v.w);
}

static void test_engines(void)
{
    /* quick: SoloHead, zero-copy and gather-scatter, shorter requests, no CPU reference */
    const char *spec = tu_quick() ? "lengths:600,500" : "lengths:2048,1900,2100,1600";
    struct run_out ref = {0}, r;
    struct offload_params p = params(512, OFFLOAD_HEADWISE, RECALL_PER_BLOCK);
    if (!tu_quick()) {
        serve("cpu", "arkvale", spec, 24, &p, &ref);
        EXPECT_EQ_INT(ref.rc, 0);
    }
    for (int sel = tu_quick(); sel < 2; sel++)
        for (int eng = 0; eng < RECALL_ENGINES; eng++) {
            if (tu_quick() && eng != RECALL_ZERO_COPY && eng != RECALL_GATHER_SCATTER) continue;
            p = params(512, sel, (enum recall_engine)eng);
            serve("cuda", "arkvale", spec, 24, &p, &r);
            const char *name = recall_engine_name((enum recall_engine)eng);
            if (!r.created && eng == RECALL_BATCH) {
                fprintf(stderr, "batch engine unavailable here (CUDA < 12.8?): skipped\n");
                workload_free(&r.w);
                continue;
            }
            EXPECT_EQ_INT(r.rc, 0);
            EXPECT_EQ_INT(r.ctr.step_alloc_calls, 0);
            EXPECT(r.ctr.recall_bytes > 0);
            EXPECT_EQ_INT(r.ctr.recall_bytes, r.st.engine_bytes);
            fprintf(stderr, "cuda %s %s: %lld bytes recalled, %lld stalled rounds, wait %.3f ms\n",
                    sel ? "solohead" : "headwise", name, (long long)r.ctr.recall_bytes,
                    (long long)r.ctr.recall_stalls, r.st.recall_wait_s * 1e3);
            if (sel == 0 && eng == 0) { /* against the CPU run */
                int same = 0, total = r.w.n * r.w.output_len;
                for (int i = 0; i < total; i++)
                    same += r.w.token_store[i] == ref.w.token_store[i];
                fprintf(stderr, "cpu vs cuda: recall bytes %lld vs %lld, tokens equal %d/%d\n",
                        (long long)ref.ctr.recall_bytes, (long long)r.ctr.recall_bytes, same,
                        total);
                EXPECT_NEAR((double)r.ctr.recall_bytes / (double)ref.ctr.recall_bytes, 1.0, 0.1);
                /* infinigen on cuda with a perfect predictor: the same selections one layer
                 * ahead; with the misprediction model, more bytes (the mispredicted blocks) */
                struct run_out ig, igm;
                p = params(512, OFFLOAD_HEADWISE, RECALL_PER_BLOCK);
                g_spec_exact = 1;
                serve("cuda", "infinigen", spec, 24, &p, &ig);
                g_spec_exact = 0;
                EXPECT_EQ_INT(ig.rc, 0);
                EXPECT(same_tokens(&ig.w, &r.w));
                EXPECT_EQ_INT(ig.ctr.recall_bytes, r.ctr.recall_bytes);
                p = params(512, OFFLOAD_HEADWISE, RECALL_PER_BLOCK);
                serve("cuda", "infinigen", spec, 24, &p, &igm);
                EXPECT_EQ_INT(igm.rc, 0);
                EXPECT(igm.ctr.recall_bytes > r.ctr.recall_bytes);
                workload_free(&igm.w);
                fprintf(stderr,
                        "cuda infinigen: %lld stalled rounds (arkvale %lld), wait %.3f ms\n",
                        (long long)ig.ctr.recall_stalls, (long long)r.ctr.recall_stalls,
                        ig.st.recall_wait_s * 1e3);
                workload_free(&ig.w);
            }
            workload_free(&r.w);
        }
    workload_free(&ref.w);
}

static void test_sliding_window(void)
{
    const char *spec = tu_quick() ? "lengths:100,61" : "lengths:300,137,61";
    const int out = tu_quick() ? 8 : 24;
    struct run_out v, a;
    g_model = "tiny-gemma3";
    serve("cuda", "vanilla", spec, out, NULL, &v);
    EXPECT_EQ_INT(v.rc, 0);
    const char *pols[] = {"arkvale", "arkvale", "infinigen"};
    const enum recall_engine engs[] = {RECALL_PER_BLOCK, RECALL_ZERO_COPY, RECALL_GATHER_SCATTER};
    for (int i = 0; i < 3; i++) {
        struct offload_params p = params(512, OFFLOAD_HEADWISE, engs[i]);
        p.prompt_kv = OFFLOAD_KV_SYNTHETIC;
        p.verify_steps = 0;
        serve("cuda", pols[i], spec, out, &p, &a);
        EXPECT_EQ_INT(a.rc, 0);
        EXPECT_EQ_INT(a.ctr.step_host_syncs, 0);
        EXPECT_EQ_INT(a.st.prompt_kv_device, 1); /* the window rings filled through the staging */
        const int eq = same_tokens(&v.w, &a.w);
        fprintf(stderr,
                "tiny-gemma3 %s %s, budget covering the context: tokens %s vanilla's on cuda\n",
                pols[i], recall_engine_name(engs[i]), eq ? "equal" : "DIFFER from");
        EXPECT(eq);
        EXPECT(a.ctr.recall_bytes > 0);
        workload_free(&a.w);
    }
    workload_free(&v.w);
    g_model = "tiny";
}

int main(void)
{
    if (!backend_cuda_available()) {
        fprintf(stderr, "test_offload_gpu: no usable GPU: skipped\n");
        return 77;
    }
    test_equals_vanilla();
    test_engines();
    test_sliding_window();
    return tu_finish("test_offload_gpu");
}
