/* Serving the tiny model under a policy with a policy context (pulseinfer), for the CPU test
 * (test_pulseinfer) and the CUDA one (gpu/test_pulseinfer_gpu). */
#ifndef PULSE_TEST_PI_SERVE_H
#define PULSE_TEST_PI_SERVE_H

#include <jansson.h>
#include <string.h>

#include "backend.h"
#include "baselines/registry.h"
#include "common.h"
#include "engine.h"
#include "kv_cache.h"
#include "offload.h"
#include "recall.h"
#include "serve.h"
#include "testsource.h"
#include "testutil.h"
#include "workloads/workload.h"

struct pi_cfg {
    const char *backend; /* NULL: cpu */
    const char *model;   /* NULL: tiny */
    const char *policy, *spec, *admission;
    int out_len, max_batch, no_irq;
    int selection, budget_tokens, prompt_kv;
    const struct recall_copy_ops *ops;
    size_t kv_budget; /* GPU KV bytes; 0 = 64 MB */
    int zero_copy;    /* the zero-copy engine (device-driven, its gather beside), else
                         gather-scatter */
    int no_verify;    /* without offload_verify after each step (then host syncs are 0) */
    int check_steps;  /* kv_cache_check after every step (failures in pi_check_failures) */
    uint64_t seed;    /* the workload's (random: specs); 0 = 1 */
    int no_graph;     /* without CUDA graphs (pulse run --no-graph); else with them, as pulse
                         run (cuda only) */
    int host_wait;    /* cuda: a recall waited for on the host (offload_params.host_wait, pulse
                         run --recall-wait host); else on the device */
    int speculate;    /* the policy's prefetching schedule (pulse run --speculate) */
    int spec_predictor; /* enum offload_spec_predictor */
    int spec_from;      /* enum offload_spec_from */
    double spec_margin; /* offload_params.spec_margin */
    int spec_late;      /* offload_params.spec_correct_early 0 (pulse run --spec-correction late) */
    int hot_slots;      /* offload_params.hot_slots (0: the default) */
    int query;          /* enum offload_query (real: with prompt_kv prefill) */
    int spec_model;     /* the locality source's misprediction model (its speculation profile);
                           else its approximate query is the exact one (a perfect predictor) */
    int attend_recall;  /* offload_params.attend_recall, enum offload_attend_recall (0: off, not
                           pulse run's default, corrections) */
    int predict_fork;   /* offload_params.predict_fork (pulse run --predict-stream fork) */
    int select_apart;   /* offload_params.select_joint 0 (pulse run --select-launch apart) */
    int correct_own;    /* offload_params.correct_stream (pulse run --correction-stream own) */
    int plan_fused;     /* offload_params.plan_fused (0: apart, not pulse run's default, fused) */
    const char *self_interleave; /* pulseinfer --self-interleave (NULL: off) */
    int want_json;               /* the policy context's counters into pi_out.pj */
};

struct pi_out {
    struct workload w;
    struct serve_counters ctr;
    int rc;
    json_t *pj; /* with want_json: the context's counters (policy.ctx_json; caller decrefs) */
};

/* The self-interleaving counters of a run (its context's JSON, want_json) into v: steps,
 * switches, rounds issued beside the other half; -1 when absent. */
static inline void self_counts(const struct pi_out *r, int64_t v[3])
{
    json_t *si = r->pj ? json_object_get(r->pj, "self_interleave") : NULL;
    static const char *const k[] = {"steps", "switches", "rounds_beside"};
    for (int i = 0; i < 3; i++) {
        json_t *x = si ? json_object_get(si, k[i]) : NULL;
        v[i] = json_is_integer(x) ? json_integer_value(x) : -1;
    }
}

/* The halves' layer pieces a run replayed as graphs (its "self_interleave" JSON's
 * graph_pieces); -1 when absent. */
static inline int64_t self_graph_pieces(const struct pi_out *r)
{
    json_t *si = r->pj ? json_object_get(r->pj, "self_interleave") : NULL;
    json_t *x = si ? json_object_get(si, "graph_pieces") : NULL;
    return json_is_integer(x) ? json_integer_value(x) : -1;
}

/* check_steps: the policy's step, then the cache's invariants */
static const struct policy *pi_checked_pol;
static int64_t pi_check_failures, pi_checked_steps;

static inline int pi_checked_step(struct serve_state *s)
{
    const int rc = pi_checked_pol->step(s);
    char why[256];
    pi_checked_steps++;
    if (kv_cache_check(s->kv, why, sizeof why) != PULSE_OK) {
        if (!pi_check_failures++) fprintf(stderr, "kv_cache_check after a step: %s\n", why);
    }
    return rc;
}

/* Serves c on its backend (page size 16, 64 MB of GPU KV unless c says). */
static inline void serve(const struct pi_cfg *c, struct pi_out *r)
{
    char err[512];
    memset(r, 0, sizeof *r);
    r->rc = -1;
    if (workload_create(&r->w, c->spec, c->out_len, c->seed ? c->seed : 1, err, sizeof err) != 0)
        return;
    const int max_tokens = workload_max_tokens(&r->w);
    const struct model_config *m = model_config_find(c->model ? c->model : "tiny");
    struct engine_params ep = {.cfg = m,
                               .be = backend_find(c->backend ? c->backend : "cpu"),
                               .seed = 1,
                               .max_batch = c->max_batch,
                               .max_tokens = max_tokens,
                               .use_graph = !c->no_graph};
    struct engine *e = engine_create(&ep, err, sizeof err);
    struct kv_cache_params kp = {
        m->n_layers,  m->n_kv_heads, m->head_dim, 16, c->kv_budget ? c->kv_budget : 64u << 20,
        c->max_batch, max_tokens};
    struct kv_cache *kv = e ? kv_cache_create(&kp, ep.be, engine_ctx(e), err, sizeof err) : NULL;
    const struct policy *pol = policy_find(c->policy);
    struct offload_params p;
    offload_params_init(&p, c->max_batch, max_tokens, 1);
    p.verify_steps = !c->no_verify;
    p.selection = c->selection;
    p.budget_tokens = c->budget_tokens;
    p.prompt_kv = c->prompt_kv;
    p.engine = c->zero_copy ? RECALL_ZERO_COPY : RECALL_GATHER_SCATTER;
    p.recall_ops = c->ops;
    p.host_wait = c->host_wait;
    p.schedule = c->speculate ? pol->offload_spec_schedule : pol->offload_schedule;
    p.spec_predictor = c->spec_predictor;
    p.spec_from = c->spec_from;
    p.spec_margin = c->spec_margin;
    p.spec_correct_early = !c->spec_late;
    if (c->hot_slots) p.hot_slots = c->hot_slots;
    p.query = c->query;
    p.attend_recall = c->attend_recall;
    p.predict_fork = c->predict_fork;
    p.select_joint = !c->select_apart;
    p.correct_stream = c->correct_own;
    p.plan_fused = c->plan_fused;
    void *ctx = NULL;
    if (kv && pol->needs_ctx) {
        int64_t prompt = 0;
        for (int i = 0; i < r->w.n; i++)
            prompt += r->w.reqs[i].prompt_len;
        const struct locality_source_params lp = {.typical_tokens = (int)(prompt / r->w.n),
                                                  .spec_mode = c->spec_model ? LOC_SPEC_PROFILE
                                                                             : LOC_SPEC_EXACT};
        const struct policy_ctx_params cp = {.eng = e,
                                             .kv = kv,
                                             .seed = 1,
                                             .max_batch = c->max_batch,
                                             .offload = &p,
                                             .no_irq = c->no_irq,
                                             .self_interleave = c->self_interleave,
                                             .admission = c->admission,
                                             .hbm_gbps = 20,
                                             .h2d_gbps = 5};
        if (!test_source(e, kv, &p, &lp) || pol->ctx_create(&cp, &ctx, err, sizeof err)) {
            fprintf(stderr, "pulseinfer: %s\n", err);
            ctx = NULL;
        }
    }
    double wall;
    static struct policy checked;
    if (c->check_steps) {
        pi_checked_pol = pol;
        checked = *pol;
        checked.step = pi_checked_step;
        pol = &checked;
    }
    if (kv && (ctx || !pol->needs_ctx))
        r->rc = serve_run_policy(e, kv, pol, ctx, r->w.reqs, r->w.n, c->max_batch, &r->ctr, &wall,
                                 err, sizeof err);
    if (r->rc) fprintf(stderr, "serve %s %s: %s\n", c->policy, c->spec, err);
    /* no host round trip inside a step (offload_verify's checks synchronise: only without) */
    /* (on cuda the host-planned engines wait for a recall on the host unless the device wait
     * is on: offload_params.host_wait) */
    const int device_waits =
        !c->backend || !strcmp(c->backend, "cpu") || c->zero_copy || !c->host_wait;
    /* (a step whose recall failed for good synchronises to recover: offload_clear_failure) */
    if (r->rc == 0 && c->no_verify && device_waits && !r->ctr.requests_failed)
        EXPECT_EQ_INT(r->ctr.step_host_syncs, 0);
    if (ctx && c->want_json && pol->ctx_json) r->pj = pol->ctx_json(ctx);
    if (ctx) pol->ctx_free(ctx);
    query_source_free(p.source);
    kv_cache_free(kv);
    engine_free(e);
}

static inline int same_tokens(const struct workload *a, const struct workload *b)
{
    if (a->n != b->n || a->output_len != b->output_len) return 0;
    return !memcmp(a->token_store, b->token_store, sizeof(int32_t) * a->n * a->output_len);
}

#endif
