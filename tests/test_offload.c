/* The offload policies arkvale and infinigen (baselines/, over runtime/offload/offload.h) on the CPU
 * backend with the tiny model:
 * - with a budget that covers the context every block is selected, so arkvale decodes exactly
 *   vanilla's tokens (same prompt KV, attention over the same tokens in the same order), head-
 *   wise and SoloHead, at page sizes 16 and 1, with requests joining released slots;
 * - with a small budget on the locality model's KV: recall moves bytes, the achieved churn per
 *   sparse layer follows the profile, the runtime's recall equals the locality meter's, every
 *   resident block's GPU copy equals its host copy after every step, the hot cache's invariants
 *   hold, the JSON has one entry per sparse layer and none for the dense ones, GPU KV per request
 *   is bounded, and no step allocates;
 * - SoloHead recalls whole blocks; every recall engine gives the same tokens and bytes;
 * - infinigen (selection and recall one layer ahead) selects what arkvale selects: the same
 *   tokens, recall bytes and churn;
 * - with the real query (offload_params.query) on real prompts, the serving path decodes the
 *   accuracy path's tokens (accuracy/sparse_attn.h, the same selection at the same budget) for
 *   head-wise and SoloHead selection, every engine, two requests of different lengths;
 * - bad flags of pulse run get one-line messages and exit 2; a good run's JSON has the series. */
#include <jansson.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "accuracy/sparse_attn.h"
#include "backend.h"
#include "baselines/registry.h"
#include "common.h"
#include "engine.h"
#include "kv_cache.h"
#include "numeric.h"
#include "offload.h"
#include "prefill.h"
#include "recall.h"
#include "recall_fault.h"
#include "serve.h"
#include "testsource.h"
#include "testutil.h"
#include "workloads/locality.h"
#include "workloads/workload.h"

struct run_cfg {
    const char *policy, *spec;
    int out_len, max_batch, page_size;
    size_t kv_budget;      /* GPU KV bytes; 0 = 64 MB */
    const char *model;     /* NULL: tiny */
    const char *admission; /* a policy that makes its own context (pulseinfer): its admission */
};

/* serve()'s source: 1 makes its approximate query the exact one (--spec-overlap exact); 0 its
 * misprediction model (the speculation profile, the default) */
static int g_spec_exact;

#define MAX_TEST_LAYERS 8

struct run_out {
    struct workload w;
    struct serve_counters ctr;
    struct offload_stats st;
    struct offload_layer_stats ls[MAX_TEST_LAYERS];
    json_t *counters; /* offload_counters_json, or NULL */
    json_t *config;   /* offload_config_json, or NULL */
    int rc, check_rc;
    int64_t peak_pages, page_bytes;
};

/* Real prompts for serve() (offload_set_prompts) when set: token i of request r. */
static int32_t real_prompt(void *user, int req_id, int i)
{
    (void)user;
    return (int32_t)(pulse_hash64(0x5eed, (uint64_t)req_id << 32 | (uint32_t)i) % 1024u);
}
static int g_real_prompts;

static void run_free(struct run_out *r)
{
    workload_free(&r->w);
    json_decref(r->counters);
    json_decref(r->config);
}

/* Serves cfg on the cpu backend: engine, cache (budget 64 MB), offload runtime for arkvale. */
static void serve(const struct run_cfg *c, struct offload_params *op, struct run_out *r)
{
    char err[512];
    memset(r, 0, sizeof *r);
    r->rc = -1;
    if (workload_create(&r->w, c->spec, c->out_len, 1, err, sizeof err) != 0) return;
    const int max_tokens = workload_max_tokens(&r->w);
    const struct model_config *m = model_config_find(c->model ? c->model : "tiny");
    PULSE_CHECK(m->n_layers <= MAX_TEST_LAYERS, "test_offload: a model of at most 8 layers");
    struct engine_params ep = {.cfg = m,
                               .be = backend_find("cpu"),
                               .seed = 1,
                               .max_batch = c->max_batch,
                               .max_tokens = max_tokens};
    struct engine *e = engine_create(&ep, err, sizeof err);
    struct kv_cache_params kp = {m->n_layers,
                                 m->n_kv_heads,
                                 m->head_dim,
                                 c->page_size,
                                 c->kv_budget ? c->kv_budget : 64u << 20,
                                 c->max_batch,
                                 max_tokens};
    struct kv_cache *kv = e ? kv_cache_create(&kp, ep.be, engine_ctx(e), err, sizeof err) : NULL;
    struct offload *o = NULL;
    void *ctx = NULL; /* the policy's own context (pulseinfer), or o */
    const struct policy *pol = policy_find(c->policy);
    if (kv && pol->needs_ctx) {
        op->max_batch = c->max_batch, op->max_tokens = max_tokens;
        op->schedule = pol->offload_schedule;
        int64_t prompt = 0;
        for (int i = 0; i < r->w.n; i++)
            prompt += r->w.reqs[i].prompt_len;
        const struct locality_source_params lp = {.typical_tokens = (int)(prompt / r->w.n),
                                                  .spec_mode = g_spec_exact ? LOC_SPEC_EXACT
                                                                            : LOC_SPEC_PROFILE};
        const struct policy_ctx_params cp = {.eng = e,
                                             .kv = kv,
                                             .seed = 1,
                                             .max_batch = c->max_batch,
                                             .offload = op,
                                             .admission = c->admission,
                                             .hbm_gbps = 20,
                                             .h2d_gbps = 5};
        if (!test_source(e, kv, op, &lp)) {
            fprintf(stderr, "offload: no query source\n");
        } else if (pol->offload_of) { /* a context around the runtime (pulseinfer) */
            if (pol->ctx_create(&cp, &ctx, err, sizeof err) != PULSE_OK)
                fprintf(stderr, "%s: %s\n", c->policy, err), ctx = NULL;
            o = ctx ? pol->offload_of(ctx) : NULL;
        } else if (offload_create(e, kv, op, &o, err, sizeof err) != PULSE_OK) {
            fprintf(stderr, "offload: %s\n", err);
        } else {
            ctx = o;
        }
        if (o && g_real_prompts) EXPECT_EQ_INT(offload_set_prompts(o, real_prompt, NULL), PULSE_OK);
    }
    double wall;
    if (kv && (ctx || !pol->needs_ctx))
        r->rc = serve_run_policy(e, kv, pol, ctx, r->w.reqs, r->w.n, c->max_batch, &r->ctr, &wall,
                                 err, sizeof err);
    if (r->rc) fprintf(stderr, "serve %s %s: %s\n", c->policy, c->spec, err);
    if (o) {
        offload_get_stats(o, &r->st);
        EXPECT_EQ_INT(r->st.host_syncs, 0); /* verify_steps' checks are not counted here */
        EXPECT_EQ_INT(r->st.layer_graph_launches, 0); /* graphs are cuda's */
        for (int l = 0; l < m->n_layers; l++)
            offload_get_layer_stats(o, l, &r->ls[l]);
        r->counters = offload_counters_json(o);
        r->config = offload_config_json(o);
        r->check_rc = offload_check(o, err, sizeof err);
        if (r->check_rc) fprintf(stderr, "check: %s\n", err);
    }
    r->peak_pages = r->ctr.peak_pages_used;
    r->page_bytes = (int64_t)m->n_kv_heads * 2 * c->page_size * m->head_dim * 2;
    if (ctx && pol->offload_of)
        pol->ctx_free(ctx);
    else
        offload_free(o);
    if (op) query_source_free(op->source), op->source = NULL;
    kv_cache_free(kv);
    engine_free(e);
}

static struct offload_params defaults(void)
{
    struct offload_params p;
    offload_params_init(&p, 1, 1, 1);
    p.verify_steps = 1;
    return p;
}

static int same_tokens(const struct workload *a, const struct workload *b)
{
    if (a->n != b->n || a->output_len != b->output_len) return 0;
    return !memcmp(a->token_store, b->token_store, sizeof(int32_t) * a->n * a->output_len);
}

/* ------------------------------------------------------------------ equality with vanilla */

/* `policy` with every block selected (budget above the context) on vanilla's prompt KV decodes
 * vanilla's tokens (v: the vanilla run of spec at page_size); with `control`, a budget of one
 * block makes them differ, so the equality is not an accident of attention hardly mattering. */
static void equal_case_refetch(const struct run_out *v, const char *policy, const char *spec,
                               int page_size, int selection, int control, enum recall_engine engine,
                               int refetch)
{
    struct run_out a;
    struct offload_params p = defaults();
    p.engine = engine;
    p.refetch = refetch;
    p.prompt_kv = OFFLOAD_KV_SYNTHETIC;            /* vanilla's prompt KV */
    p.budget_tokens = 512 / page_size * page_size; /* >= every context: all blocks selected */
    p.selection = selection;
    struct run_cfg ca = {policy, spec, 16, 2, page_size, 0, NULL, NULL};
    serve(&ca, &p, &a);
    EXPECT_EQ_INT(a.rc, 0);
    EXPECT_EQ_INT(a.check_rc, 0);
    const int eq = same_tokens(&v->w, &a.w);
    if (!eq)
        fprintf(stderr, "%s differs from vanilla: %s, ps %d, sel %d\n", policy, spec, page_size,
                selection);
    EXPECT(eq);
    EXPECT(a.ctr.recall_bytes > 0); /* the first step recalls every block it attends */
    EXPECT_EQ_INT(a.ctr.recall_bytes, a.st.engine_bytes);
    EXPECT_EQ_INT(a.ctr.step_alloc_calls, 0);
    EXPECT(a.ls[2].tail_flushes > 0 && a.ls[3].tail_flushes > 0);
    EXPECT_EQ_INT(a.ls[0].selections + a.ls[1].selections, 0); /* dense layers */
    run_free(&a);
    if (!control) return;
    p.budget_tokens = page_size;
    serve(&ca, &p, &a);
    EXPECT_EQ_INT(a.rc, 0);
    EXPECT(!same_tokens(&v->w, &a.w));
    run_free(&a);
}

static void equal_case(const struct run_out *v, const char *policy, const char *spec, int page_size,
                       int selection, int control, enum recall_engine engine)
{
    equal_case_refetch(v, policy, spec, page_size, selection, control, engine, 0);
}

static void test_equals_vanilla(void)
{
    /* a 1-token prompt, odd lengths, a batch of 2 so the third request reuses a slot */
    struct run_out v;
    struct run_cfg cv = {"vanilla", "lengths:100,37,1", 16, 2, 16, 0, NULL, NULL};
    serve(&cv, NULL, &v);
    EXPECT_EQ_INT(v.rc, 0);
    EXPECT_EQ_INT(v.ctr.recall_bytes, 0);
    /* the host-planned path (per-block) and the device-driven one (zero-copy) */
    for (int e = RECALL_PER_BLOCK; e <= RECALL_ZERO_COPY; e += RECALL_ZERO_COPY) {
        equal_case(&v, "arkvale", cv.spec, 16, OFFLOAD_HEADWISE, 1, (enum recall_engine)e);
        equal_case(&v, "arkvale", cv.spec, 16, OFFLOAD_SOLOHEAD, 0, (enum recall_engine)e);
        equal_case(&v, "infinigen", cv.spec, 16, OFFLOAD_HEADWISE, 0, (enum recall_engine)e);
        equal_case(&v, "infinigen", cv.spec, 16, OFFLOAD_SOLOHEAD, 0, (enum recall_engine)e);
    }
    run_free(&v);
    /* one-token pages: a tail flush every step */
    struct run_cfg c1 = {"vanilla", "lengths:61,130", 16, 2, 1, 0, NULL, NULL};
    serve(&c1, NULL, &v);
    EXPECT_EQ_INT(v.rc, 0);
    equal_case(&v, "arkvale", c1.spec, 1, OFFLOAD_HEADWISE, 1, RECALL_PER_BLOCK);
    equal_case(&v, "arkvale", c1.spec, 1, OFFLOAD_SOLOHEAD, 1, RECALL_ZERO_COPY);
    run_free(&v);
    /* the baselines as published and the selection they add (mean: ArkVale's page list), in two
     * orders of mixed lengths: ArkVale's 32-token pages with per-block copies, InfiniGen's
     * head-wise lists re-fetched every step through the gather, mean with every engine */
    static const char *const orders[] = {"lengths:300,37,1,210", "lengths:1,210,37,300"};
    for (int i = 0; i < 2; i++) {
        struct run_cfg c32 = {"vanilla", orders[i], 16, 2, 32, 0, NULL, NULL};
        serve(&c32, NULL, &v);
        EXPECT_EQ_INT(v.rc, 0);
        equal_case(&v, "arkvale", c32.spec, 32, OFFLOAD_MEAN, 1, RECALL_PER_BLOCK);
        run_free(&v);
        struct run_cfg c16 = {"vanilla", orders[i], 16, 2, 16, 0, NULL, NULL};
        serve(&c16, NULL, &v);
        EXPECT_EQ_INT(v.rc, 0);
        equal_case_refetch(&v, "infinigen", c16.spec, 16, OFFLOAD_HEADWISE, 1,
                           RECALL_GATHER_SCATTER, 1);
        equal_case_refetch(&v, "arkvale", c16.spec, 16, OFFLOAD_MEAN, 0, RECALL_PER_BLOCK, 1);
        for (int e = RECALL_PER_BLOCK; e < RECALL_ENGINES; e++)
            equal_case(&v, "infinigen", c16.spec, 16, OFFLOAD_MEAN, 0, (enum recall_engine)e);
        run_free(&v);
    }
}

/* ArkVale's cache larger than its selection keeps more of what earlier steps recalled: with a
 * small budget, fewer misses than a cache the size of the selection, and every invariant holds
 * (offload_check after the run, verify_steps after every step). Re-fetching recalls every
 * selected block again: no hits, and the blocks a reusing cache held counted as re-fetched. */
static void test_cache_and_refetch(void)
{
    struct run_cfg c = {"arkvale", "lengths:900,700,1000", 24, 3, 32, 0, NULL, NULL};
    int64_t misses[3], hits[3], refetched[3];
    for (int k = 0; k < 3; k++) {
        struct offload_params p = defaults();
        p.selection = OFFLOAD_MEAN;
        p.budget_tokens = 4 * 32;      /* 4 + 4 blocks of 32-34 selected */
        p.hot_slots = k == 1 ? 24 : 0; /* the cache 3x the selection, or its size */
        p.refetch = k == 2;
        struct run_out a;
        serve(&c, &p, &a);
        EXPECT_EQ_INT(a.rc, 0);
        EXPECT_EQ_INT(a.check_rc, 0);
        misses[k] = hits[k] = refetched[k] = 0;
        for (int l = 2; l < 4; l++)
            misses[k] += a.ls[l].misses, hits[k] += a.ls[l].hits, refetched[k] += a.ls[l].refetched;
        run_free(&a);
    }
    EXPECT(misses[1] < misses[0]);
    EXPECT(hits[1] > hits[0]);
    EXPECT(misses[2] > misses[0]);
    EXPECT_EQ_INT(hits[2], 0);
    EXPECT(refetched[2] > 0 && refetched[0] == 0 && refetched[1] == 0);
}

/* ------------------------------------------------------------------ small budget */

static double layer_num(json_t *layer, const char *obj, const char *key)
{
    json_t *o = obj ? json_object_get(layer, obj) : layer;
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (double)json_integer_value(v) : json_real_value(v);
}

static void check_layers(const struct run_out *r, int chunk_bytes)
{
    json_t *layers = json_object_get(r->counters, "layers");
    EXPECT_EQ_INT(json_array_size(layers), 2); /* sparse layers 2 and 3 only */
    for (size_t i = 0; i < json_array_size(layers); i++) {
        json_t *L = json_array_get(layers, i);
        const int l = (int)layer_num(L, NULL, "layer");
        EXPECT_EQ_INT(l, 2 + (int)i);
        const double mean = layer_num(L, "churn", "mean"),
                     tmean = layer_num(L, "churn", "target_mean");
        fprintf(stderr,
                "layer %d churn: target mean %.4f p50 %.4f p90 %.4f | achieved mean %.4f p50 %.4f "
                "p90 %.4f (%d samples); recall B/step mean %.0f p50 %.0f p90 %.0f\n",
                l, tmean, layer_num(L, "churn", "target_p50"), layer_num(L, "churn", "target_p90"),
                mean, layer_num(L, "churn", "p50"), layer_num(L, "churn", "p90"),
                (int)layer_num(L, "churn", "samples"),
                layer_num(L, "recall_bytes_per_step", "mean"),
                layer_num(L, "recall_bytes_per_step", "p50"),
                layer_num(L, "recall_bytes_per_step", "p90"));
        EXPECT_EQ_INT(layer_num(L, "churn", "samples"), 4 * 2 * 24); /* requests x heads x steps */
        EXPECT_NEAR(mean / tmean, 1.0, 0.3);
        /* the runtime recalled exactly what the meter counted (steady steps + cold ones) */
        const struct offload_layer_stats *s = &r->ls[l];
        EXPECT_EQ_INT(s->recall_bytes, (int64_t)layer_num(L, "recall_bytes_per_step", "total") +
                                           (int64_t)layer_num(L, NULL, "cold_recall_bytes"));
        EXPECT_EQ_INT(s->recall_bytes, s->recall_chunks * chunk_bytes);
        EXPECT_EQ_INT(s->recall_chunks, s->misses);
        EXPECT(s->evictions > 0 && s->hits > s->misses && s->fresh > 0);
        EXPECT(layer_num(L, "recall_bytes_per_step", "p90") >=
               layer_num(L, "recall_bytes_per_step", "p50"));
    }
}

/* infinigen on cfg and p with a perfect predictor (--spec-overlap exact): the same tokens,
 * recall and churn per sparse layer as arkvale's run ref (the same selections, made one layer
 * earlier). With the misprediction model (the speculation profile) its lists are the
 * approximate query's: other blocks, more recall, the overlap the model was calibrated to. */
static void infinigen_same(const struct run_cfg *cfg, const struct offload_params *p,
                           const struct run_out *ref)
{
    struct run_cfg c = *cfg;
    struct offload_params q = *p;
    struct run_out ig;
    c.policy = "infinigen";
    serve(&c, &q, &ig);
    EXPECT_EQ_INT(ig.rc, 0);
    EXPECT(ig.ctr.recall_bytes > ref->ctr.recall_bytes); /* not free */
    EXPECT_STR_EQ(
        json_string_value(json_object_get(
            json_object_get(json_object_get(ig.config, "locality"), "speculation"), "spec_q")),
        "perturbed");
    fprintf(stderr, "infinigen with the misprediction model: %lld bytes recalled (exact: %lld)\n",
            (long long)ig.ctr.recall_bytes, (long long)ref->ctr.recall_bytes);
    run_free(&ig);
    g_spec_exact = 1;
    q = *p;
    serve(&c, &q, &ig);
    g_spec_exact = 0;
    EXPECT_EQ_INT(ig.rc, 0);
    EXPECT_EQ_INT(ig.check_rc, 0);
    EXPECT_EQ_INT(ig.ctr.step_alloc_calls, 0);
    EXPECT(same_tokens(&ref->w, &ig.w));
    EXPECT_EQ_INT(ig.ctr.recall_bytes, ref->ctr.recall_bytes);
    EXPECT(ref->ctr.recall_bytes > 0);
    for (int l = p->n_dense; l < 4; l++) {
        EXPECT_EQ_INT(ig.ls[l].recall_chunks, ref->ls[l].recall_chunks);
        EXPECT_EQ_INT(ig.ls[l].evictions, ref->ls[l].evictions);
    }
    for (int l = 0; l < 4 - p->n_dense; l++) {
        json_t *lj = json_array_get(json_object_get(ig.counters, "layers"), (size_t)l);
        json_t *la = json_array_get(json_object_get(ref->counters, "layers"), (size_t)l);
        EXPECT(lj && la);
        EXPECT_NEAR(layer_num(lj, "churn", "mean"), layer_num(la, "churn", "mean"), 0);
    }
    run_free(&ig);
}

/* infinigen issues layer l+1's selection before layer l's work, so the device path builds one
 * layer's control block while the previous one's is still to be read: with every layer sparse
 * (the first layer issues itself and the next) and one dense layer, on each engine. */
static void test_lookahead_layers(void)
{
    const int dense[] = {0, 1};
    for (int d = 0; d < 2; d++)
        for (int eng = 0; eng < RECALL_ENGINES; eng++) {
            struct offload_params p = defaults();
            p.budget_tokens = 256;
            p.n_dense = dense[d];
            p.engine = (enum recall_engine)eng;
            struct run_cfg c = {"arkvale", "lengths:1500,900,1300", 14, 3, 16, 0, NULL, NULL};
            struct run_out r;
            serve(&c, &p, &r);
            EXPECT_EQ_INT(r.rc, 0);
            EXPECT_EQ_INT(r.check_rc, 0);
            infinigen_same(&c, &p, &r);
            run_free(&r);
        }
}

static void test_small_budget(void)
{
    struct offload_params p = defaults();
    p.budget_tokens = 512; /* 32 of ~130 blocks */
    struct run_cfg c = {"arkvale", "lengths:2048,1900,2100,1600", 25, 4, 16, 0, NULL, NULL};
    struct run_out r;
    serve(&c, &p, &r);
    infinigen_same(&c, &p, &r);
    EXPECT_EQ_INT(r.rc, 0);
    EXPECT_EQ_INT(r.check_rc, 0);
    EXPECT_EQ_INT(r.ctr.step_alloc_calls, 0);
    EXPECT(r.ctr.recall_bytes > 0 && r.ctr.recall_chunks > 0 && r.ctr.recall_stalls > 0);
    EXPECT_EQ_INT(r.ctr.recall_bytes, r.st.engine_bytes);
    EXPECT_EQ_INT(r.ctr.recall_chunks, r.st.engine_chunks);
    EXPECT_EQ_INT(r.ctr.recall_bytes, r.ls[2].recall_bytes + r.ls[3].recall_bytes);
    EXPECT_EQ_INT(r.st.recall_failures, 0);
    for (int l = 0; l < 2; l++)
        EXPECT_EQ_INT(r.ls[l].recall_bytes + r.ls[l].hits + r.ls[l].selections, 0);
    check_layers(&r, 2 * 16 * 64 * 2); /* head-wise: one KV head of a block, 4 KB */
    /* GPU KV per request bounded: 2 dense layers whole + 2 x (36 slots + tail page) */
    const int64_t per_req = 2 * 132 + 2 * (36 + 1);
    EXPECT(r.peak_pages <= 4 * per_req);
    /* per-step series: one entry per step, summing to the total */
    json_t *ser = json_object_get(json_object_get(r.counters, "per_step"), "recall_bytes");
    EXPECT_EQ_INT(json_array_size(ser), r.ctr.steps);
    int64_t sum = 0;
    for (size_t i = 0; i < json_array_size(ser); i++)
        sum += json_integer_value(json_array_get(ser, i));
    EXPECT_EQ_INT(sum, r.ctr.recall_bytes);
    run_free(&r);
}

/* SoloHead: token-wise recall (whole blocks); the engines agree on tokens and bytes. */
static void test_solohead_engines(void)
{
    struct run_out ref;
    for (int eng = 0; eng < RECALL_ENGINES; eng++) {
        struct offload_params p = defaults();
        p.budget_tokens = 128;
        p.selection = OFFLOAD_SOLOHEAD;
        p.engine = (enum recall_engine)eng;
        struct run_cfg c = {"arkvale", "lengths:600,500,700", 12, 3, 16, 0, NULL, NULL};
        struct run_out r;
        serve(&c, &p, &r);
        EXPECT_EQ_INT(r.rc, 0);
        EXPECT_EQ_INT(r.check_rc, 0);
        EXPECT_EQ_INT(r.ctr.step_alloc_calls, 0);
        EXPECT(r.ctr.recall_chunks > 0);
        EXPECT_EQ_INT(r.ctr.recall_bytes, r.ctr.recall_chunks * r.page_bytes); /* 8 KB blocks */
        EXPECT_EQ_INT(r.ctr.recall_bytes, r.st.engine_bytes);
        if (eng == 0) {
            ref = r;
            r.counters = NULL, memset(&r.w, 0, sizeof r.w);
            continue;
        }
        fprintf(stderr, "engine %s: %lld bytes\n", recall_engine_name((enum recall_engine)eng),
                (long long)r.ctr.recall_bytes);
        EXPECT(same_tokens(&ref.w, &r.w));
        EXPECT_EQ_INT(r.ctr.recall_bytes, ref.ctr.recall_bytes);
        run_free(&r);
    }
    /* a GPU budget for one request at a time (116 pages of 8 KB for the longest: 2 dense layers
     * x 45 blocks + 2 x 13 slots) serialises them; each request's tokens stay the same */
    struct offload_params p = defaults();
    p.budget_tokens = 128;
    p.selection = OFFLOAD_SOLOHEAD;
    struct run_cfg c = {"arkvale", "lengths:600,500,700", 12, 3, 16, 130 * 8192, NULL, NULL};
    struct run_out r;
    serve(&c, &p, &r);
    EXPECT_EQ_INT(r.rc, 0);
    EXPECT_EQ_INT(r.ctr.peak_batch, 1);
    EXPECT(r.ctr.admission_refusals > 0 && r.st.refusals_gpu > 0);
    EXPECT(same_tokens(&ref.w, &r.w));
    run_free(&r);
    run_free(&ref);
}

/* ------------------------------------------------------------------ command line */

static char out[1 << 16];

struct bad_case {
    const char *args, *message;
};

static const struct bad_case bad[] = {
    {"--selection frob", "--selection: 'frob' is not headwise, solohead or mean"},
    {"--reuse some", "--reuse: 'some' is not resident or none"},
    {"--recall-engine zero-copy --reuse none", "reuse none (re-fetching the whole selection"},
    {"--recall-engine nope", "--recall-engine: unknown recall engine 'nope'"},
    /* arkvale's pages are 32 tokens unless --page-size says otherwise */
    {"--budget-tokens 48", "--budget-tokens: 48 is not a multiple of the block size 32"},
    {"--page-size 16 --budget-tokens 100",
     "--budget-tokens: 100 is not a multiple of the block size 16"},
    {"--budget-tokens -16", "--budget-tokens: '-16' is not an integer"},
    {"--prompt-kv x", "--prompt-kv: 'x' is not locality, synthetic or prefill"},
    {"--dense-layers 4", "--dense-layers: 4 leaves no sparse layer"},
    {"--hot-slots 3", "--hot-slots: 3 is not in ["},
    {"--hot-slots auto --reuse none", "--hot-slots auto: not with --reuse none"},
    {"--hot-slots some", "--hot-slots: 'some' is not an integer"},
    {"--host-pool-gb 0.000001", "--host-pool-gb: 1e-06 GB cannot hold even one request"},
    {"--kv-budget-gb 0.0001", "--kv-budget-gb: 0.0001 GB cannot hold even one request"},
    {"--locality-profile /nonexistent/p.json", "--locality-profile: "},
    {"--head-profile /nonexistent/h.json", "--head-profile: only with --selection solohead"},
    {"--selection solohead --head-profile /nonexistent/h.json", "--head-profile: "},
    {"--recall-cap-gbps 0", "--recall-cap-gbps: '0' is not a number"},
    {"--query model", "--query: 'model' is not locality or real"},
    {"--spec-overlap 1.5", "--spec-overlap: '1.5' is not profile, exact, a number in [0, 1] or"},
    {"--spec-overlap exactly", "--spec-overlap: 'exactly' is not profile, exact, a number"},
    {"--spec-overlap /nonexistent/s.json", "--spec-overlap: /nonexistent/s.json: cannot open"},
    {"--query real",
     "the real query selects over a real prompt's keys: it needs --prompt-kv prefill"},
};

static void test_cli(void)
{
    char args[1024];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args,
                 "run --backend cpu --policy arkvale --workload uniform:256:2 --output-len 8 %s",
                 bad[i].args);
        int code = tu_run_pulse(args, out, sizeof out);
        EXPECT_EQ_INT(code, 2);
        EXPECT_STR_CONTAINS(out, bad[i].message);
        EXPECT(strchr(out, '\n') == strrchr(out, '\n')); /* one line */
        if (code != 2 || !strstr(out, bad[i].message)) fprintf(stderr, "case: %s\n", args);
    }
    EXPECT_EQ_INT(
        tu_run_pulse("run --backend cpu --policy vanilla --budget-tokens 512", out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "--budget-tokens: only for offload policies");
    EXPECT_EQ_INT(tu_run_pulse("run --backend cpu --policy infinigen --workload uniform:256:2 "
                               "--output-len 8 --query real --prompt-kv prefill",
                               out, sizeof out),
                  0);
}

/* What a policy's run must show (its published or engine-matched mechanism). */
struct cli_want {
    const char *policy, *extra; /* extra flags, or "" */
    int lookahead;
    const char *selection, *engine;
    int page_size, pages_cached, refetch;
};

/* A good run of w->policy writes its offload config and counters, and its mechanism: the
 * selection, engine and page size, the pages cached, re-fetched against reused bytes, and the
 * transfer shape (a per-block engine makes one copy of one chunk per miss). Returns the recall
 * bytes. */
static int64_t cli_json(const struct cli_want *w)
{
    char path[] = "/tmp/pulse_offload_XXXXXX", args[512];
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    snprintf(args, sizeof args,
             "run --backend cpu --policy %s --workload uniform:1024:2 --output-len 12 "
             "--budget-tokens 256 --out %s %s",
             w->policy, path, w->extra);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 0);
    json_error_t je;
    json_t *r = json_load_file(path, 0, &je);
    remove(path);
    EXPECT(r != NULL);
    if (!r) return -1;
    json_t *c = json_object_get(r, "counters"), *o = json_object_get(c, "offload");
    const int64_t bytes = json_integer_value(json_object_get(c, "recall_bytes"));
    EXPECT_EQ_INT(json_integer_value(json_object_get(c, "step_alloc_calls")), 0);
    EXPECT_EQ_INT(json_integer_value(json_object_get(c, "step_host_syncs")), 0);
    EXPECT(json_object_get(c, "step_host_syncs_max") != NULL);
    EXPECT(json_integer_value(json_object_get(o, "layer_graph_launches")) == 0 &&
           json_object_get(o, "layer_graph_launches") != NULL);
    EXPECT(bytes > 0);
    EXPECT_EQ_INT(bytes, json_integer_value(json_object_get(o, "recall_bytes")));
    EXPECT_EQ_INT(json_array_size(json_object_get(o, "layers")), 2);
    EXPECT_EQ_INT(json_array_size(json_object_get(json_object_get(o, "per_step"), "recall_bytes")),
                  12);
    json_t *cfg = json_object_get(json_object_get(r, "config"), "offload");
    EXPECT_STR_CONTAINS(json_string_value(json_object_get(cfg, "recall_engine")), w->engine);
    EXPECT_STR_CONTAINS(json_string_value(json_object_get(cfg, "selection")), w->selection);
    EXPECT_EQ_INT(json_integer_value(json_object_get(cfg, "budget_tokens")), 256);
    EXPECT_EQ_INT(json_integer_value(json_object_get(cfg, "lookahead_layers")), w->lookahead);
    /* the policy's own schedule (baselines/arkvale.c, infinigen.c) */
    EXPECT_STR_EQ(json_string_value(json_object_get(cfg, "schedule")),
                  w->lookahead ? "one-layer-ahead" : "synchronous");
    EXPECT_EQ_INT(json_integer_value(json_object_get(json_object_get(r, "config"), "page_size")),
                  w->page_size);
    EXPECT_STR_CONTAINS(json_string_value(json_object_get(cfg, "reuse")),
                        w->refetch ? "none" : "resident");
    json_t *mech = json_object_get(o, "mechanism");
    EXPECT_EQ_INT(json_integer_value(json_object_get(mech, "pages_cached")), w->pages_cached);
    EXPECT_EQ_INT(json_integer_value(json_object_get(mech, "page_tokens")), w->page_size);
    EXPECT(json_is_true(json_object_get(mech, "refetch")) == w->refetch);
    const int64_t refetched = json_integer_value(json_object_get(mech, "refetched_bytes"));
    const int64_t reused = json_integer_value(json_object_get(mech, "reused_bytes"));
    const int64_t chunk = json_integer_value(json_object_get(mech, "chunk_bytes"));
    /* tiny: 2 KV heads of K and V at head_dim 64 in bf16 per token; head-wise moves one head's
     * piece */
    const int64_t block = (int64_t)w->page_size * 2 * 2 * 64 * 2;
    EXPECT_EQ_INT(chunk, strcmp(w->selection, "headwise") ? block : block / 2);
    EXPECT(w->refetch ? refetched > 0 && reused == 0 : refetched == 0 && reused > 0);
    const int64_t copies = json_integer_value(json_object_get(mech, "copies"));
    if (!strcmp(w->engine, "per-block")) { /* ArkVale: one copy per missing whole page */
        EXPECT_EQ_INT(copies, json_integer_value(json_object_get(o, "recall_chunks")));
        EXPECT(json_real_value(json_object_get(mech, "bytes_per_copy")) == (double)chunk);
    } else { /* a DMA (or launch) moves many chunks */
        EXPECT(copies > 0 && copies < json_integer_value(json_object_get(o, "recall_chunks")));
    }
    EXPECT(json_object_get(json_object_get(cfg, "locality"), "calibration") != NULL);
    /* the misprediction model of the approximate query (--spec-overlap, default profile) */
    json_t *spec = json_object_get(json_object_get(cfg, "locality"), "speculation");
    const char *mode = strstr(w->extra, "--spec-overlap exact") ? "exact"
                       : strstr(w->extra, "--spec-overlap 0")   ? "fixed"
                                                                : "profile";
    EXPECT_STR_EQ(json_string_value(json_object_get(spec, "mode")), mode);
    /* (calibrated only for a policy that selects a layer ahead) */
    EXPECT_EQ_INT(json_array_size(json_object_get(spec, "layers")),
                  strcmp(mode, "exact") && w->lookahead ? 2 : 0);
    /* the exact churn the persistence was measured at against the run's: the built-in
     * profiles match; the GQA model's 16K churn under Gemma 3 270M's persistence does not, and
     * the run says so (a version-1 profile has no persistence to check) */
    const int persists = strcmp(mode, "exact") && w->lookahead && !strstr(w->extra, "_v1.json");
    const int mixed = strstr(w->extra, "--locality-profile") != NULL;
    json_t *cc = json_object_get(spec, "churn_check");
    EXPECT(persists ? cc && json_is_true(json_object_get(cc, "matched")) == !mixed : !cc);
    EXPECT(!strstr(out, "warning: --spec-overlap: its persistence was measured") ==
           !(persists && mixed));
    EXPECT(!strcmp(json_string_value(json_object_get(r, "status")), "ok"));
    json_decref(r);
    return bytes;
}

/* No step of any policy, selection and engine makes a host round trip: the serving loop's
 * count of blocking backend calls inside its step calls stays 0. The count is live: with
 * verify_steps (downloads after every step, inside offload_step) it moves. */
static void test_no_host_sync(void)
{
    const char *pols[] = {"vanilla", "arkvale", "infinigen"};
    for (int pi = 0; pi < 3; pi++)
        for (int sel = 0; sel < 2; sel++)
            for (int eng = 0; eng < RECALL_ENGINES; eng++) {
                if (pi == 0 && (sel || eng)) continue;
                struct offload_params p = defaults();
                p.verify_steps = 0;
                p.budget_tokens = 64;
                p.selection = sel;
                p.engine = (enum recall_engine)eng;
                struct run_cfg c = {pols[pi], "lengths:300,170,260", 10, 2, 16, 0, NULL, NULL};
                struct run_out r;
                serve(&c, &p, &r);
                EXPECT_EQ_INT(r.rc, 0);
                EXPECT_EQ_INT(r.ctr.steps > 0, 1);
                EXPECT_EQ_INT(r.ctr.step_host_syncs, 0);
                EXPECT_EQ_INT(r.ctr.step_host_syncs_max, 0);
                if (pi) EXPECT(r.ctr.recall_chunks > 0);
                if (r.ctr.step_host_syncs)
                    fprintf(stderr, "%s sel %d engine %s: %lld host syncs in steps\n", pols[pi],
                            sel, recall_engine_name((enum recall_engine)eng),
                            (long long)r.ctr.step_host_syncs);
                run_free(&r);
            }
    struct offload_params p = defaults(); /* verify_steps on */
    p.budget_tokens = 64;
    struct run_cfg c = {"arkvale", "lengths:300,170", 6, 2, 16, 0, NULL, NULL};
    struct run_out r;
    serve(&c, &p, &r);
    EXPECT_EQ_INT(r.rc, 0);
    EXPECT(r.ctr.step_host_syncs >= r.ctr.steps);
    run_free(&r);
}

/* ------------------------------------------------------------------ a failing link */

/* The cpu copy path with its per-block copies failing: the first `fail_first` of them, or every
 * one (fail_first < 0). */
static _Atomic int g_h2d_calls;
static int g_fail_first;

static int failing_h2d(const struct recall_copy_ops *o, void *dst, const void *src, size_t bytes,
                       void *stream)
{
    const int k = atomic_fetch_add(&g_h2d_calls, 1);
    if (g_fail_first < 0 || k < g_fail_first) return PULSE_ERR_IO;
    return recall_copy_ops_cpu()->h2d(o, dst, src, bytes, stream);
}

/* Every request ended exactly once: finished with all its tokens, or with an error and fewer;
 * returns how many ended with an error, and in *lost how many did neither. */
static int ended_once(const struct run_out *r, int *lost)
{
    int failed = 0;
    *lost = 0;
    for (int i = 0; i < r->w.n; i++) {
        const struct request *q = &r->w.reqs[i];
        *lost += !(q->done_s >= 0 && q->slot < 0);
        if (q->error)
            failed++;
        else if (q->generated != q->output_len)
            ++*lost;
    }
    EXPECT_EQ_INT(*lost, 0);
    return failed;
}

/* Faults injected into the recall's copies through the real serving loop, for both offload
 * policies and both host-copy engines: a recall that fails is retried by the planner (up to
 * three attempts) and the run decodes the tokens of a clean one; on a dead link every step's
 * recall fails for good, so each request of the failed step ends with an error and a reason
 * (the serving loop releases it and goes on with the queue): the run completes, no request is
 * lost or decoded twice, and the offload runtime's checks hold afterwards. */
static void test_failing_link(void)
{
    struct recall_copy_ops ops = *recall_copy_ops_cpu();
    ops.h2d = failing_h2d;
    const char *pols[] = {"arkvale", "infinigen"};
    const enum recall_engine engs[] = {RECALL_PER_BLOCK, RECALL_GATHER_SCATTER};
    int64_t transient = 0, dead = 0, lost = 0, delayed = 0;
    for (int pi = 0; pi < 2; pi++)
        for (int ei = 0; ei < 2; ei++) {
            struct run_cfg c = {pols[pi], "lengths:300,170,90", 8, 2, 16, 0, NULL, NULL};
            struct offload_params p = defaults();
            p.budget_tokens = 64;
            p.engine = engs[ei];
            struct run_out clean, r;
            serve(&c, &p, &clean);
            EXPECT_EQ_INT(clean.rc, 0);
            EXPECT_EQ_INT(clean.st.recall_failures, 0);
            int n_lost;
            EXPECT_EQ_INT(ended_once(&clean, &n_lost), 0);
            p.recall_ops = &ops;
            atomic_store(&g_h2d_calls, 0);
            g_fail_first = 2; /* the first round fails, its retry too, the third attempt lands */
            serve(&c, &p, &r);
            EXPECT_EQ_INT(r.rc, 0);
            EXPECT_EQ_INT(r.st.recall_failures, 2);
            EXPECT(same_tokens(&clean.w, &r.w));
            EXPECT_EQ_INT(r.ctr.recall_bytes, clean.ctr.recall_bytes);
            EXPECT_EQ_INT(r.ctr.requests_failed, 0);
            transient += r.st.recall_failures;
            run_free(&r);
            /* a slow link: every copy 200 us late; nothing fails, the tokens are the same */
            struct recall_fault slow;
            char why[160];
            EXPECT_EQ_INT(
                recall_fault_init(&slow, recall_copy_ops_cpu(), "delay:200", why, sizeof why),
                PULSE_OK);
            p.recall_ops = &slow.ops;
            serve(&c, &p, &r);
            EXPECT_EQ_INT(r.rc, 0);
            EXPECT_EQ_INT(r.st.recall_failures, 0);
            EXPECT(same_tokens(&clean.w, &r.w));
            EXPECT_EQ_INT(r.ctr.recall_bytes, clean.ctr.recall_bytes);
            EXPECT(recall_fault_injected(&slow) > 0);
            EXPECT_EQ_INT(recall_fault_injected(&slow), atomic_load(&slow.copies));
            delayed += recall_fault_injected(&slow);
            run_free(&r);
            p.recall_ops = &ops;
            atomic_store(&g_h2d_calls, 0);
            g_fail_first = -1; /* a dead link */
            p.verify_steps = 0;
            serve(&c, &p, &r);
            EXPECT_EQ_INT(r.rc, 0); /* the run completes: its requests carry the failure */
            EXPECT_EQ_INT(r.check_rc, 0);
            EXPECT(r.st.recall_failures >= 3);
            const int failed = ended_once(&r, &n_lost);
            EXPECT_EQ_INT(failed, 3);
            EXPECT_EQ_INT(r.ctr.requests_failed, 3);
            dead += failed;
            lost += n_lost;
            run_free(&r);
            run_free(&clean);
        }
    fprintf(stderr,
            "failing link (arkvale, infinigen x per-block, gather-scatter): %lld failed rounds "
            "retried, tokens unchanged; %lld copies delayed 200 us, tokens unchanged; a dead "
            "link: %lld requests ended with an error, %lld lost\n",
            (long long)transient, (long long)delayed, (long long)dead, (long long)lost);
}

/* A flag that never comes aborts the wait after PULSE_WAIT_TIMEOUT_S with what was awaited,
 * instead of hanging (in a child process). */
static void test_wait_timeout(void)
{
    fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
        setenv("PULSE_WAIT_TIMEOUT_S", "0.2", 1);
        if (!freopen("/dev/null", "w", stderr)) _exit(3);
        uint32_t flag = 3;
        backend_find("cpu")->wait_value(NULL, &flag, 4);
        _exit(0); /* not reached */
    }
    int st = 0;
    waitpid(pid, &st, 0);
    EXPECT(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
    uint32_t done = 9; /* a flag at or past the value: returns at once */
    backend_find("cpu")->wait_value(NULL, &done, 9);
    backend_find("cpu")->wait_value(NULL, &done, 5);
}

/* Each baseline as published shows its mechanism; the engine-matched tier's two schedules make
 * the same selections with the same cache, so they recall the same bytes; InfiniGen's
 * re-fetching moves more than reusing what is resident. 1036 tokens: 33 pages of 32, 65 of 16;
 * a step selects 4 + 256 / page. */
static void test_cli_json(void)
{
    static const struct cli_want ark = {"arkvale", "", 0, "mean", "per-block", 32, 33, 0};
    static const struct cli_want inf = {"infinigen",      "", 1,  "headwise",
                                        "gather-scatter", 16, 20, 1};
    static const struct cli_want inf_reuse = {
        "infinigen", "--reuse resident", 1, "headwise", "gather-scatter", 16, 20, 0};
    static const struct cli_want inf_fixed = {
        "infinigen", "--spec-overlap 0.7", 1, "headwise", "gather-scatter", 16, 20, 1};
    static const struct cli_want inf_exact = {
        "infinigen", "--spec-overlap exact", 1, "headwise", "gather-scatter", 16, 20, 1};
    static const struct cli_want ark_m = {"arkvale+solohead+gs", "", 0,  "solohead",
                                          "gather-scatter",      16, 20, 0};
    static const struct cli_want inf_m = {"infinigen+solohead+gs", "", 1,  "solohead",
                                          "gather-scatter",        16, 20, 0};
    static const struct cli_want inf_m_exact = {"infinigen+solohead+gs",
                                                "--spec-overlap exact",
                                                1,
                                                "solohead",
                                                "gather-scatter",
                                                16,
                                                20,
                                                0};
    static const struct cli_want ark_zc = {"arkvale+solohead+zc", "", 0,  "solohead",
                                           "zero-copy",           16, 20, 0};
    static const struct cli_want inf_m_mixed = {
        "infinigen+solohead+gs",
        "--locality-profile workloads/profiles/churn_gqa-tiny-16k.json",
        1,
        "solohead",
        "gather-scatter",
        16,
        20,
        0};
    /* a version-1 speculation profile: no persistence measured, fresh noise every step */
    static const struct cli_want inf_m_fresh = {"infinigen+solohead+gs",
                                                "--spec-overlap "
                                                "tests/data/speculation_gemma3-270m_v1.json",
                                                1,
                                                "solohead",
                                                "gather-scatter",
                                                16,
                                                20,
                                                0};
    EXPECT(cli_json(&ark) > 0);
    EXPECT(cli_json(&inf) > cli_json(&inf_reuse));
    EXPECT(cli_json(&inf_fixed) > 0 && cli_json(&inf_exact) > 0);
    /* the same selections one layer ahead with a perfect predictor; an approximate query whose
     * mistakes are new every step recalls more; one whose mistakes persist as measured about as
     * much (InfiniGen recalls its approximate lists, which churn as the exact ones:
     * experiments/results/cpu-2026-12-04-s19/README.md) */
    const int64_t exact = cli_json(&ark_m), persistent = cli_json(&inf_m);
    EXPECT_EQ_INT(exact, cli_json(&inf_m_exact));
    EXPECT(cli_json(&inf_m_fresh) > exact + exact / 10);
    EXPECT(persistent > exact - exact / 10 && persistent < exact + exact / 10);
    EXPECT(cli_json(&ark_zc) > 0);
    EXPECT(cli_json(&inf_m_mixed) > persistent);
}

/* The JSON of a good `pulse run` with `args` (NULL when it failed). */
static json_t *run_json(const char *args)
{
    return tu_run_pulse_json(args, out, sizeof out);
}

static int64_t json_int_at(json_t *r, const char *a, const char *b, const char *c)
{
    return json_integer_value(json_object_get(json_object_get(json_object_get(r, a), b), c));
}

/* A churn profile measured on another model (the GQA test model's six layers, every one
 * selected) laid onto the tiny model by depth: the run says so, every sparse layer's target is
 * the mapped profile's, and the same profile at a quarter of its churn recalls less. */
static void test_profile_by_depth(void)
{
    static struct locality_profile prof, mapped;
    char err[512], path[768], quarter[] = "/tmp/pulse_churn_XXXXXX", args[1024];
    const char *src = getenv("PULSE_SRC");
    snprintf(path, sizeof path, "%s%sworkloads/profiles/churn_gqa-tiny.json", src ? src : "",
             src ? "/" : "");
    EXPECT_EQ_INT(locality_profile_read(path, &prof, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(prof.n_layers, 6);
    int64_t bytes[2] = {0, 0};
    for (int q = 0; q < 2; q++) {
        const char *file = path;
        if (q) { /* the same profile at a quarter of its churn */
            const int fd = mkstemp(quarter);
            if (fd >= 0) close(fd);
            for (int l = 0; l < prof.n_layers; l++)
                for (int k = 0; k < prof.n_levels; k++)
                    prof.churn[l][k] *= 0.25;
            EXPECT_EQ_INT(locality_profile_write(&prof, quarter, err, sizeof err), PULSE_OK);
            file = quarter;
        }
        snprintf(args, sizeof args,
                 "run --backend cpu --policy arkvale --workload uniform:1024:2 --output-len 24 "
                 "--budget-tokens 256 --locality-profile %s",
                 file);
        json_t *r = run_json(args);
        EXPECT(r != NULL);
        if (!r) continue;
        json_t *loc =
            json_object_get(json_object_get(json_object_get(r, "config"), "offload"), "locality");
        json_t *map = json_object_get(loc, "profile_mapping");
        EXPECT_STR_EQ(json_string_value(json_object_get(map, "mode")), "depth");
        EXPECT_EQ_INT(json_integer_value(json_object_get(map, "from_layers")), 6);
        /* the model's dense layers, from the profile the run used */
        json_t *pl = json_object_get(json_object_get(loc, "profile"), "layers");
        uint8_t dense[LOC_MAX_LAYERS] = {0};
        const int n = (int)json_array_size(pl);
        for (int l = 0; l < n; l++)
            dense[l] = json_is_true(json_object_get(json_array_get(pl, (size_t)l), "dense"));
        EXPECT(n >= 3 && dense[0]);
        EXPECT_EQ_INT(locality_profile_map_depth(&prof, n, dense, &mapped, err, sizeof err),
                      PULSE_OK);
        json_t *layers =
            json_object_get(json_object_get(json_object_get(r, "counters"), "offload"), "layers");
        EXPECT(json_array_size(layers) > 0);
        for (size_t i = 0; i < json_array_size(layers); i++) {
            json_t *e = json_array_get(layers, i);
            const int l = (int)json_integer_value(json_object_get(e, "layer"));
            const double t =
                json_real_value(json_object_get(json_object_get(e, "churn"), "target_mean"));
            EXPECT(!dense[l]);
            EXPECT_NEAR(t, locality_profile_mean(&mapped, l), 1e-9);
            EXPECT(t > 0.0);
        }
        bytes[q] = json_int_at(r, "counters", "offload", "recall_bytes");
        json_decref(r);
    }
    EXPECT(bytes[1] > 0 && bytes[1] < bytes[0]);
    /* a profile with no sparse layer has nothing to lay onto the model: one line, exit 2 */
    for (int l = 0; l < prof.n_layers; l++)
        prof.dense[l] = 1;
    EXPECT_EQ_INT(locality_profile_write(&prof, quarter, err, sizeof err), PULSE_OK);
    snprintf(args, sizeof args,
             "run --backend cpu --policy arkvale --workload uniform:256:2 --output-len 4 "
             "--locality-profile %s",
             quarter);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "locality profile: no sparse layer to map from");
    EXPECT(strchr(out, '\n') == strrchr(out, '\n'));
    remove(quarter);
}

/* The host pool is sized from the workload: what the run can hold at once, the smaller of every
 * request and max-batch requests of the longest (tiny: 2 sparse layers x 8 KB blocks of 16
 * tokens); --host-pool-gb still wins. */
static void test_pool_sizing(void)
{
    const int64_t block = 8192, sparse = 2;
    struct {
        const char *workload;
        int max_batch;
        int64_t blocks; /* per sparse layer */
    } cases[] = {
        {"uniform:256:3", 8, 3 * 17},          /* 3 requests of 264 tokens, not 8 */
        {"uniform:256:3", 2, 2 * 17},          /* at most 2 at once */
        {"lengths:100,600,50", 2, 7 + 38 + 4}, /* every request is less than 2 x 38 */
        {"lengths:100,600,50,600", 2, 2 * 38}, /* 2 of the longest are less than all */
        {"lengths:1", 4, 1},                   /* one block */
    };
    char args[512];
    for (size_t i = 0; i < PULSE_ARRAY_LEN(cases); i++) {
        snprintf(args, sizeof args,
                 "run --backend cpu --policy arkvale --workload %s --output-len 8 --max-batch %d "
                 "--budget-tokens 32 --page-size 16",
                 cases[i].workload, cases[i].max_batch);
        json_t *r = run_json(args);
        const int64_t want = cases[i].blocks * sparse * block;
        EXPECT_EQ_INT(json_int_at(r, "config", "offload", "host_pool_bytes"), want);
        json_t *setup =
            json_object_get(json_object_get(json_object_get(r, "counters"), "offload"), "setup");
        EXPECT_EQ_INT(json_integer_value(json_object_get(setup, "host_pool_bytes")), want);
        if (json_integer_value(json_object_get(setup, "host_pool_bytes")) != want)
            fprintf(stderr, "pool sizing case %zu: %s\n", i, args);
        /* the set-up's phases: timed, and the CPU writes the prompt KV on the cpu backend */
        EXPECT(json_real_value(json_object_get(setup, "pin_s")) >= 0);
        EXPECT(json_real_value(json_object_get(setup, "prompt_kv_s")) > 0);
        EXPECT(json_real_value(json_object_get(setup, "calibration_s")) > 0);
        EXPECT(json_is_false(json_object_get(setup, "prompt_kv_device")));
        EXPECT(json_is_false(json_object_get(setup, "host_pool_pinned")));
        /* an unpinned pool is not placed: no node, no share */
        EXPECT_EQ_INT(json_integer_value(json_object_get(setup, "pin_numa_asked")), -1);
        EXPECT_EQ_INT(json_integer_value(json_object_get(setup, "pin_numa_node")), -1);
        EXPECT(json_is_null(json_object_get(setup, "pin_numa_share")));
        json_decref(r);
    }
    json_t *r = run_json("run --backend cpu --policy arkvale --workload uniform:256:3 "
                         "--output-len 8 --max-batch 8 --host-pool-gb 0.01");
    EXPECT_EQ_INT(json_int_at(r, "config", "offload", "host_pool_bytes"), 10000000 / block * block);
    json_decref(r);
}

/* --zc-blocks sets the zero-copy gather's grid, which the run's JSON reports in the engine's
 * counters and in config.options (default 4); a bad value is a usage error, one line; the
 * variable it replaced, PULSE_ZC_BLOCKS, is refused, naming the option. */
static void test_zc_blocks(void)
{
    static const char *const args = "run --backend cpu --policy arkvale --recall-engine zero-copy "
                                    "--workload uniform:256:2 --output-len 4 --budget-tokens 32";
    static const struct {
        const char *value;
        int want; /* -1: refused */
    } cases[] = {{NULL, 4}, {"8", 8}, {"1024", 1024}, {"0", -1}, {"' 8'", -1}, {"x", -1}};
    char cmd[512];
    for (size_t i = 0; i < PULSE_ARRAY_LEN(cases); i++) {
        snprintf(cmd, sizeof cmd, "%s%s%s", args, cases[i].value ? " --zc-blocks " : "",
                 cases[i].value ? cases[i].value : "");
        if (cases[i].want < 0) {
            EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 2);
            EXPECT_STR_CONTAINS(out, "pulse run: --zc-blocks: '");
            EXPECT_STR_CONTAINS(out, "is not an integer in [1, 65535]");
            continue;
        }
        json_t *r = run_json(cmd);
        json_t *eng = json_object_get(json_object_get(json_object_get(r, "counters"), "offload"),
                                      "recall_engine");
        EXPECT_EQ_INT(json_integer_value(json_object_get(eng, "zc_blocks")), cases[i].want);
        EXPECT_EQ_INT(json_int_at(r, "config", "options", "zc_blocks"), cases[i].want);
        json_decref(r);
    }
    setenv("PULSE_ZC_BLOCKS", "8", 1);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 2);
    unsetenv("PULSE_ZC_BLOCKS");
    EXPECT_STR_CONTAINS(out,
                        "PULSE_ZC_BLOCKS=8: this variable is no longer read: give --zc-blocks");
}

/* The gather-scatter engine's options reach the engine and its JSON (a bad value is a usage
 * error), and a run reports where its recall time went: the planner's phases and the engine's
 * per-recall times, all filled. */
static void test_gs_knobs(void)
{
    static const char *const args = "run --backend cpu --policy arkvale --recall-engine "
                                    "gather-scatter --workload uniform:256:2 --output-len 4 "
                                    "--budget-tokens 32";
    static const struct {
        const char *flag, *value, *key;
        long long want; /* -1: refused */
    } cases[] = {{"--gs-threads", "3", "gather_threads", 3},
                 {"--gs-piece-kb", "256", "gs_piece_bytes", 256 << 10},
                 {"--gs-stages", "5", "gs_stages", 5},
                 {"--recall-spin-us", "0", "spin_us", 0},
                 {"--gs-nt-stores", "off", "gs_nt_stores", 0},
                 {"--gs-stages", "1", "gs_stages", -1},
                 {"--gs-piece-kb", "x", "gs_piece_bytes", -1},
                 {"--gs-nt-stores", "1", "gs_nt_stores", -1}};
    json_t *def = run_json(args);
    json_t *off = json_object_get(json_object_get(def, "counters"), "offload");
    json_t *deng = json_object_get(off, "recall_engine");
    EXPECT_EQ_INT(json_integer_value(json_object_get(deng, "gs_piece_bytes")), 2 << 20);
    EXPECT(json_is_true(json_object_get(deng, "gs_nt_stores")));
    EXPECT(json_is_false(json_object_get(deng, "prime")));
    json_t *ps = json_object_get(off, "planner_s");
    EXPECT(json_real_value(json_object_get(ps, "plan")) > 0);
    EXPECT(json_real_value(json_object_get(ps, "recall")) > 0);
    EXPECT(json_real_value(json_object_get(ps, "meter")) > 0);
    EXPECT(json_object_get(ps, "lists_wait") != NULL);
    EXPECT(json_real_value(json_object_get(deng, "issuing_s")) > 0);
    EXPECT(json_real_value(json_object_get(deng, "queued_s")) >= 0);
    EXPECT(json_real_value(json_object_get(deng, "draining_s")) >= 0);
    for (size_t i = 0; i < PULSE_ARRAY_LEN(cases); i++) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "%s %s %s", args, cases[i].flag, cases[i].value);
        if (cases[i].want < 0) {
            EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 2);
            EXPECT_STR_CONTAINS(out, cases[i].flag);
            continue;
        }
        json_t *r = run_json(cmd);
        json_t *eng = json_object_get(json_object_get(json_object_get(r, "counters"), "offload"),
                                      "recall_engine");
        json_t *v = json_object_get(eng, cases[i].key);
        EXPECT_EQ_INT(json_is_boolean(v) ? json_is_true(v) : json_integer_value(v), cases[i].want);
        json_decref(r);
    }
    json_decref(def);
}

/* --recall-cap-fraction F caps the recall at F times the H2D peak the run measured at start:
 * the config says both, and the engine's cap is their product; zero-copy with a cap runs
 * host-planned, through the engine that paces it (test_recall: the pacing itself). */
static void test_cap_fraction(void)
{
    static const char *const engines[] = {"gather-scatter", "zero-copy"};
    for (int e = 0; e < 2; e++) {
        char args[512];
        snprintf(args, sizeof args,
                 "run --backend cpu --policy arkvale --recall-engine %s --workload uniform:256:2 "
                 "--output-len 4 --budget-tokens 32 --recall-cap-fraction 0.25",
                 engines[e]);
        json_t *r = run_json(args);
        json_t *cfg = json_object_get(r, "config");
        const double peak = json_number_value(json_object_get(
            json_object_get(json_object_get(r, "metrics"), "step"), "h2d_peak_GBps"));
        const double cap =
            json_number_value(json_object_get(json_object_get(cfg, "offload"), "recall_cap_gbps"));
        EXPECT_NEAR(json_number_value(json_object_get(cfg, "recall_cap_fraction")), 0.25, 1e-12);
        EXPECT(peak > 0);
        /* (each as the result file writes it: 9 significant digits, results.c) */
        EXPECT_NEAR(cap, 0.25 * peak, 1e-7 * peak);
        json_t *off = json_object_get(json_object_get(r, "counters"), "offload");
        EXPECT(json_is_false(json_object_get(off, "device_plan")));
        json_t *eng = json_object_get(off, "recall_engine");
        EXPECT(json_integer_value(json_object_get(eng, "bytes")) > 0);
        json_decref(r);
    }
}

/* ------------------------------------------------------------------ the real query */

/* The accuracy path's tokens for request req_id of prompt_len tokens: a prefill of the same real
 * prompt (chunks of 16; the runtime's are of its max_batch: the same tokens) on its own engine
 * and cache, then out_len greedy steps with policy
 * `sparse` at budget 32 on every layer (tiny: all global), selector KV head 1. */
static void accuracy_tokens(const char *model, int req_id, int prompt_len, int out_len, int sparse,
                            const int32_t *selector, int32_t *out)
{
    const struct model_config *m = model_config_find(model);
    const int T = prompt_len + out_len;
    char err[256];
    struct engine_params ep = {
        .cfg = m, .be = backend_find("cpu"), .seed = 1, .max_batch = 16, .max_tokens = T};
    struct engine *e = engine_create(&ep, err, sizeof err);
    struct kv_cache_params kp = {m->n_layers, m->n_kv_heads, m->head_dim, 16, 0, 1, T};
    kp.budget_bytes = kv_cache_params_request_bytes(&kp, T);
    struct kv_cache *kv = kv_cache_create(&kp, ep.be, engine_ctx(e), err, sizeof err);
    struct prefill *pf = prefill_create(e, 1, 16);
    struct sparse_attn *sa = sparse_attn_create(e, kv, 16, T, 1.0, err, sizeof err);
    struct batch *bt = batch_create(e);
    int slot = -1;
    EXPECT(e && kv && pf && sa && bt && kv_cache_admit(kv, T, &slot) == PULSE_OK);
    if (slot < 0) {
        if (bt) batch_free(e, bt);
        sparse_attn_free(sa), prefill_free(pf), kv_cache_free(kv), engine_free(e);
        return;
    }
    prefill_set_prompts(pf, real_prompt, NULL);
    int32_t tok = prefill_run(pf, kv, slot, req_id, prompt_len, T);
    struct sparse_params sp = {
        sparse, 32, 1, 2, sparse == SPARSE_SOLOHEAD ? selector : NULL, 0.0, SPARSE_SPEC_INPUT};
    EXPECT_EQ_INT(sparse_attn_configure(sa, &sp, slot, err, sizeof err), PULSE_OK);
    struct engine_layer_hook h = sparse_attn_hook(sa);
    batch_set_hook(bt, &h);
    for (int k = 0; k < out_len; k++) {
        struct batch_entry en = {slot, req_id, prompt_len + k, T, tok};
        batch_set(e, bt, kv, &en, 1);
        engine_step(e, bt, kv);
        batch_read_tokens(e, bt, &tok);
        out[k] = tok;
    }
    struct sparse_stats st;
    sparse_attn_get_stats(sa, &st);
    /* the budget did not cover the context: a real selection (full: none) */
    EXPECT(sparse == SPARSE_FULL ? st.sparse_calls == 0 : st.sparse_calls > 0);
    batch_free(e, bt);
    sparse_attn_free(sa);
    prefill_free(pf);
    kv_cache_free(kv);
    engine_free(e);
}

static void test_real_query(void)
{
    static const struct {
        const char *policy;
        int selection, sparse;
        enum recall_engine engine;
    } cases[] = {{"arkvale", OFFLOAD_HEADWISE, SPARSE_HEADWISE, RECALL_PER_BLOCK},
                 {"arkvale", OFFLOAD_SOLOHEAD, SPARSE_SOLOHEAD, RECALL_PER_BLOCK},
                 {"arkvale", OFFLOAD_SOLOHEAD, SPARSE_SOLOHEAD, RECALL_GATHER_SCATTER},
                 {"arkvale", OFFLOAD_SOLOHEAD, SPARSE_SOLOHEAD, RECALL_ZERO_COPY},
                 /* one layer ahead from the approximate query (InfiniGen's speculation) */
                 {"infinigen", OFFLOAD_HEADWISE, SPARSE_INFINIGEN, RECALL_PER_BLOCK},
                 {"infinigen", OFFLOAD_HEADWISE, SPARSE_INFINIGEN, RECALL_ZERO_COPY}};
    static const int32_t sel[4] = {1, 1, 1, 1};
    g_real_prompts = 1;
    int differ_from_full = 0; /* requests whose sparse tokens are not full attention's */
    for (size_t c = 0; c < PULSE_ARRAY_LEN(cases); c++) {
        struct offload_params p = defaults();
        p.budget_tokens = 32;
        p.n_dense = 0;
        p.selection = cases[c].selection;
        p.selector = cases[c].selection == OFFLOAD_SOLOHEAD ? sel : NULL;
        p.engine = cases[c].engine;
        p.prompt_kv = OFFLOAD_KV_PREFILL;
        p.query = OFFLOAD_QUERY_REAL;
        struct run_cfg rc = {cases[c].policy, "lengths:150,230", 10, 2, 16, 0, NULL, NULL};
        struct run_out r;
        serve(&rc, &p, &r);
        EXPECT_EQ_INT(r.rc, 0);
        EXPECT_EQ_INT(r.check_rc, 0);
        EXPECT(r.st.recall_bytes > 0); /* a small budget: blocks came back from the pool */
        const char *sq = json_string_value(json_object_get(r.config, "selection_query"));
        EXPECT(sq && !strcmp(sq, "real"));
        int same = r.rc == 0;
        for (int i = 0; i < r.w.n && same; i++) {
            int32_t want[16];
            const struct request *q = &r.w.reqs[i];
            accuracy_tokens("tiny", q->id, q->prompt_len, q->output_len, cases[c].sparse, sel,
                            want);
            same &= memcmp(want, q->tokens, sizeof(int32_t) * q->output_len) == 0;
            accuracy_tokens("tiny", q->id, q->prompt_len, q->output_len, SPARSE_FULL, sel, want);
            differ_from_full += memcmp(want, q->tokens, sizeof(int32_t) * q->output_len) != 0;
        }
        EXPECT(same);
        fprintf(stderr,
                "real query, %s %s %s: serving tokens %s the accuracy path's (%lld recall bytes)\n",
                cases[c].policy, sparse_policy_name(cases[c].sparse),
                recall_engine_name(cases[c].engine), same ? "equal" : "DIFFER from",
                (long long)r.st.recall_bytes);
        run_free(&r);
    }
    g_real_prompts = 0;
    EXPECT(differ_from_full > 0); /* so the equality above is the selection's, not attention's
                                     indifference to it */
    fprintf(stderr, "real query: %d of 12 requests' tokens differ from full attention's\n",
            differ_from_full);
    /* the real query needs the prefill's keys */
    const struct model_config *m = model_config_find("tiny");
    struct kv_cache_params kp = {m->n_layers, m->n_kv_heads, m->head_dim, 16, 1 << 20, 1, 64};
    char err[256];
    struct offload_params p = defaults();
    p.query = OFFLOAD_QUERY_REAL;
    EXPECT(offload_params_check(&p, m, &kp, err, sizeof err) != PULSE_OK);
    EXPECT_STR_CONTAINS(err, "--prompt-kv prefill");
    p.prompt_kv = OFFLOAD_KV_PREFILL;
    EXPECT_EQ_INT(offload_params_check(&p, m, &kp, err, sizeof err), PULSE_OK);
}

/* ------------------------------------------------------------------ sliding-window models */

/* Layer l of tiny-gemma3 is offloaded (selected) under n_dense: a global layer past them. */
static int gemma_sparse(int l, int n_dense)
{
    return model_layer_is_global(model_config_find("tiny-gemma3"), l) && l >= n_dense;
}

/* tiny-gemma3 (6 layers, 2 and 5 global, a 24-token window, one KV head): the window layers
 * keep their window in a ring of GPU pages, the global layers past the dense ones are
 * offloaded. With a covering budget on vanilla's prompt KV, arkvale (every engine) and
 * infinigen decode vanilla's tokens through prompts that wrap the rings, and one block of
 * budget makes them differ; the config names every layer's kind; only the sparse layers
 * select; a request's GPU pages are the rings, the sparse layers' hot slots and tails, and the
 * dense layers' blocks. */
static void test_sliding_window(void)
{
    const char *spec = "lengths:100,37,70"; /* 100 and 70 > the window: the rings wrap */
    struct run_out v;
    struct run_cfg cv = {"vanilla", spec, 16, 2, 16, 0, "tiny-gemma3", NULL};
    serve(&cv, NULL, &v);
    EXPECT_EQ_INT(v.rc, 0);
    static const struct {
        const char *policy;
        enum recall_engine engine;
        int n_dense;
    } cases[] = {{"arkvale", RECALL_PER_BLOCK, 2},
                 {"arkvale", RECALL_ZERO_COPY, 0},
                 {"arkvale", RECALL_GATHER_SCATTER, 3},
                 {"infinigen", RECALL_PER_BLOCK, 0},
                 {"infinigen", RECALL_ZERO_COPY, 2}};
    for (size_t c = 0; c < PULSE_ARRAY_LEN(cases); c++) {
        struct offload_params p = defaults();
        p.engine = cases[c].engine;
        p.n_dense = cases[c].n_dense;
        p.prompt_kv = OFFLOAD_KV_SYNTHETIC;
        p.budget_tokens = 512;
        struct run_cfg ca = {cases[c].policy, spec, 16, 2, 16, 0, "tiny-gemma3", NULL};
        struct run_out a;
        serve(&ca, &p, &a);
        EXPECT_EQ_INT(a.rc, 0);
        EXPECT_EQ_INT(a.check_rc, 0);
        const int eq = same_tokens(&v.w, &a.w);
        if (!eq)
            fprintf(stderr, "sliding window: %s case %zu differs from vanilla\n", ca.policy, c);
        EXPECT(eq);
        EXPECT(a.ctr.recall_bytes > 0);
        EXPECT_EQ_INT(a.ctr.step_alloc_calls, 0);
        int n_sparse = 0, rings = 0;
        json_t *kinds = json_object_get(a.config, "layer_kinds");
        EXPECT_EQ_INT(json_array_size(kinds), 6);
        for (int l = 0; l < 6; l++) {
            const int sp = gemma_sparse(l, p.n_dense);
            const int win = !model_layer_is_global(model_config_find("tiny-gemma3"), l);
            const char *k = json_string_value(json_array_get(kinds, (size_t)l));
            EXPECT(k && !strcmp(k, sp ? "sparse" : win ? "window" : "dense"));
            EXPECT(sp ? a.ls[l].selections > 0 && a.ls[l].tail_flushes > 0
                      : a.ls[l].selections == 0);
            n_sparse += sp, rings += win;
        }
        EXPECT_EQ_INT(json_array_size(json_object_get(a.counters, "layers")), (size_t)n_sparse);
        /* dense_layers counts the layers kept dense, dense_layers_asked is n_dense */
        EXPECT_EQ_INT(json_integer_value(json_object_get(a.config, "dense_layers")),
                      6 - n_sparse - rings);
        EXPECT_EQ_INT(json_integer_value(json_object_get(a.config, "dense_layers_asked")),
                      p.n_dense);
        /* max 100 + 16 tokens = 8 blocks; a ring of ceil(24 / 16) + 1 = 3 */
        const int hot = (int)json_integer_value(json_object_get(a.config, "hot_slots"));
        EXPECT_EQ_INT(a.st.gpu_pages_per_request_max,
                      rings * 3 + n_sparse * (hot + 1) + (6 - rings - n_sparse) * 8);
        /* the floor's KV bytes, by hand: a step of an entry with n tokens reads n tokens in a
         * dense layer, min(n, 24) in a window layer and, the budget covering the context, n in
         * a sparse one (512 B a token); request r's k-th step has prompt_r + k + 1 tokens */
        double want_kv = 0;
        for (int r = 0; r < a.w.n; r++)
            for (int k = 0; k < a.w.reqs[r].output_len; k++) {
                const int n = a.w.reqs[r].prompt_len + k + 1;
                for (int l = 0; l < 6; l++)
                    want_kv += 512.0 * (model_layer_is_global(model_config_find("tiny-gemma3"), l)
                                            ? n
                                            : PULSE_MIN(n, 24));
            }
        if (a.ctr.traffic_sum.kv_bytes != want_kv)
            fprintf(stderr, "sliding window: case %zu: floor KV bytes %.0f, by hand %.0f\n", c,
                    a.ctr.traffic_sum.kv_bytes, want_kv);
        EXPECT(a.ctr.traffic_sum.kv_bytes == want_kv);
        run_free(&a);
        if (c) continue;
        p.budget_tokens = 16; /* the control: one block of budget */
        serve(&ca, &p, &a);
        EXPECT_EQ_INT(a.rc, 0);
        EXPECT(!same_tokens(&v.w, &a.w));
        run_free(&a);
    }
    run_free(&v);
    /* a model whose every layer past the dense ones has a window: nothing to offload */
    struct model_config m = *model_config_find("tiny-gemma3");
    m.sliding_pattern = 100; /* no global layer among the 6 */
    struct kv_cache_params kp = {m.n_layers, m.n_kv_heads, m.head_dim, 16, 1 << 20, 1, 64};
    struct offload_params p = defaults();
    char err[256];
    EXPECT_EQ_INT(offload_params_check(&p, &m, &kp, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "no layer to offload");
    EXPECT_EQ_INT(offload_sparse_layers(&p, &m), 0);
    EXPECT_EQ_INT(offload_sparse_layers(&p, model_config_find("tiny-gemma3")), 2);
}

/* The real query on tiny-gemma3 with real prompts: the serving path (window layers in their
 * rings, the global layers offloaded and selected) decodes the accuracy path's tokens for
 * head-wise and InfiniGen selection on the host-planned and the device-driven path. */
static void test_sliding_window_real_query(void)
{
    static const struct {
        const char *policy;
        int sparse;
        enum recall_engine engine;
    } cases[] = {{"arkvale", SPARSE_HEADWISE, RECALL_PER_BLOCK},
                 {"arkvale", SPARSE_HEADWISE, RECALL_ZERO_COPY},
                 {"infinigen", SPARSE_INFINIGEN, RECALL_PER_BLOCK},
                 {"infinigen", SPARSE_INFINIGEN, RECALL_GATHER_SCATTER}};
    static const int32_t sel[6] = {0};
    g_real_prompts = 1;
    int differ_from_full = 0, requests = 0;
    for (size_t c = 0; c < PULSE_ARRAY_LEN(cases); c++) {
        struct offload_params p = defaults();
        p.budget_tokens = 32;
        p.n_dense = 0;
        p.engine = cases[c].engine;
        p.prompt_kv = OFFLOAD_KV_PREFILL;
        p.query = OFFLOAD_QUERY_REAL;
        struct run_cfg rc = {cases[c].policy, "lengths:150,230", 10, 2, 16, 0, "tiny-gemma3", NULL};
        struct run_out r;
        serve(&rc, &p, &r);
        EXPECT_EQ_INT(r.rc, 0);
        EXPECT_EQ_INT(r.check_rc, 0);
        EXPECT(r.st.recall_bytes > 0);
        int same = r.rc == 0;
        for (int i = 0; i < r.w.n && same; i++, requests++) {
            int32_t want[16];
            const struct request *q = &r.w.reqs[i];
            accuracy_tokens("tiny-gemma3", q->id, q->prompt_len, q->output_len, cases[c].sparse,
                            sel, want);
            same &= memcmp(want, q->tokens, sizeof(int32_t) * q->output_len) == 0;
            accuracy_tokens("tiny-gemma3", q->id, q->prompt_len, q->output_len, SPARSE_FULL, sel,
                            want);
            differ_from_full += memcmp(want, q->tokens, sizeof(int32_t) * q->output_len) != 0;
        }
        EXPECT(same);
        fprintf(
            stderr, "sliding window, real query, %s %s: serving tokens %s the accuracy path's\n",
            cases[c].policy, recall_engine_name(cases[c].engine), same ? "equal" : "DIFFER from");
        run_free(&r);
    }
    /* pulseinfer, its layers interleaved: each request decodes the tokens of running it alone,
     * the short ones in the normal batch full attention's, the long ones offloaded (fixed:200)
     * the sparse accuracy path's; both batches ran beside each other */
    for (int zc = 0; zc < 2; zc++) {
        struct offload_params p = defaults();
        p.budget_tokens = 32;
        p.n_dense = 0;
        p.selection = OFFLOAD_HEADWISE; /* one KV head: SoloHead's list too */
        p.engine = zc ? RECALL_ZERO_COPY : RECALL_GATHER_SCATTER;
        p.prompt_kv = OFFLOAD_KV_PREFILL;
        p.query = OFFLOAD_QUERY_REAL;
        p.verify_steps = 0;
        struct run_cfg rc = {"pulseinfer", "lengths:150,230,120,260", 10, 4, 16, 0, "tiny-gemma3",
                             "fixed:200"};
        struct run_out r;
        serve(&rc, &p, &r);
        EXPECT_EQ_INT(r.rc, 0);
        EXPECT_EQ_INT(r.check_rc, 0);
        EXPECT(r.st.recall_bytes > 0);
        EXPECT_EQ_INT(r.ctr.admitted_normal, 2);
        EXPECT_EQ_INT(r.ctr.admitted_offload, 2);
        EXPECT(r.ctr.batch_max[0] == 2 && r.ctr.batch_max[1] == 2); /* both batches ran */
        int same = r.rc == 0, offloaded_differ = 0;
        for (int i = 0; i < r.w.n && same; i++) {
            int32_t want[16], full[16];
            const struct request *q = &r.w.reqs[i];
            const int off = q->prompt_len > 200;
            accuracy_tokens("tiny-gemma3", q->id, q->prompt_len, q->output_len, SPARSE_FULL, sel,
                            full);
            if (off)
                accuracy_tokens("tiny-gemma3", q->id, q->prompt_len, q->output_len, SPARSE_HEADWISE,
                                sel, want);
            same &= memcmp(off ? want : full, q->tokens, sizeof(int32_t) * q->output_len) == 0;
            offloaded_differ += off && memcmp(want, full, sizeof want[0] * q->output_len) != 0;
        }
        EXPECT(same);
        EXPECT(offloaded_differ > 0); /* the offloaded requests' selection mattered */
        fprintf(stderr,
                "sliding window, real query, pulseinfer %s: every request's tokens %s running it "
                "alone (%d of 2 offloaded unlike full attention)\n",
                recall_engine_name(p.engine), same ? "equal" : "DIFFER from", offloaded_differ);
        run_free(&r);
    }
    g_real_prompts = 0;
    EXPECT(differ_from_full > 0);
    fprintf(stderr, "sliding window, real query: %d of %d requests differ from full attention\n",
            differ_from_full, requests);
}

static void timed(const char *name, void (*fn)(void))
{
    double t0 = pulse_now();
    fn();
    fprintf(stderr, "%s: %.2f s\n", name, pulse_now() - t0);
}

/* --hot-slots auto grows the hot cache into the GPU KV budget the offload requests leave: 4
 * requests of 2064 tokens (129 blocks of 16) on tiny (4 layers, 2 dense; a page is 8 KB) hold 2 x
 * 129 dense pages and 2 x (H + 1) sparse ones each, so 12.452 MB fits H = 60 and not 61
 * (4 x (258 + 124) pages). The cache then misses less than the selection's 20 slots, the tokens
 * stay the same, all four run at once; a budget that cannot hold the four even at the default
 * keeps it. */
static void test_hot_slots_auto(void)
{
    static const char *const base = "run --backend cpu --policy infinigen+solohead+gs "
                                    "--workload uniform:2048:4 --output-len 16 --budget-tokens 256";
    char args[512];
    json_t *r[3];
    const char *kv[3] = {"0.012452", "0.012452 --hot-slots auto", "0.0096 --hot-slots auto"};
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args, "%s --kv-budget-gb %s", base, kv[i]);
        r[i] = run_json(args);
        if (!r[i]) return;
    }
    const int64_t hot[3] = {json_int_at(r[0], "config", "offload", "hot_slots"),
                            json_int_at(r[1], "config", "offload", "hot_slots"),
                            json_int_at(r[2], "config", "offload", "hot_slots")};
    EXPECT_EQ_INT(hot[0], 20);
    EXPECT_EQ_INT(hot[1], 60);
    EXPECT_EQ_INT(hot[2], 20); /* 4 x (258 + 42) pages are 9.83 MB: three fit, none grows */
    EXPECT_EQ_INT(json_int_at(r[0], "config", "offload", "hot_slots_auto"), 0);
    EXPECT_EQ_INT(json_int_at(r[1], "config", "offload", "hot_slots_auto"), 4);
    EXPECT_EQ_INT(json_int_at(r[1], "config", "offload", "gpu_pages_per_request_max"),
                  2 * 129 + 2 * 61);
    const int64_t miss0 = json_int_at(r[0], "counters", "offload", "recall_chunks"),
                  miss1 = json_int_at(r[1], "counters", "offload", "recall_chunks");
    EXPECT(miss1 > 0 && miss1 < miss0);
    EXPECT(json_int_at(r[1], "counters", "offload", "recall_bytes") <
           json_int_at(r[0], "counters", "offload", "recall_bytes"));
    for (int i = 0; i < 3; i++) {
        EXPECT_EQ_INT(
            json_integer_value(json_object_get(json_object_get(r[i], "counters"), "peak_batch")),
            i < 2 ? 4 : 3);
        EXPECT_STR_EQ(json_string_value(
                          json_object_get(json_object_get(r[i], "metrics"), "output_tokens_fnv1a")),
                      json_string_value(json_object_get(json_object_get(r[0], "metrics"),
                                                        "output_tokens_fnv1a")));
    }
    fprintf(stderr, "  hot slots 20 / auto %lld: %lld / %lld chunks recalled\n", (long long)hot[1],
            (long long)miss0, (long long)miss1);
    for (int i = 0; i < 3; i++)
        json_decref(r[i]);
}

int main(void)
{
    timed("equals_vanilla", test_equals_vanilla);
    timed("small_budget", test_small_budget);
    timed("lookahead_layers", test_lookahead_layers);
    timed("solohead_engines", test_solohead_engines);
    timed("cache_and_refetch", test_cache_and_refetch);
    timed("no_host_sync", test_no_host_sync);
    timed("failing_link", test_failing_link);
    timed("wait_timeout", test_wait_timeout);
    timed("cli", test_cli);
    timed("cli_json", test_cli_json);
    timed("pool_sizing", test_pool_sizing);
    timed("hot_slots_auto", test_hot_slots_auto);
    timed("profile_by_depth", test_profile_by_depth);
    timed("zc_blocks", test_zc_blocks);
    timed("gs_knobs", test_gs_knobs);
    timed("cap_fraction", test_cap_fraction);
    timed("real_query", test_real_query);
    timed("sliding_window", test_sliding_window);
    timed("sliding_window_real_query", test_sliding_window_real_query);
    return tu_finish("test_offload");
}
