#include "accuracy/serve_batch.h"

#include <stdio.h>
#include <string.h>

#include "common.h"
#include "kv_cache.h"
#include "mem.h"
#include "offload.h"

struct prompts {
    const struct serve_batch_req *reqs;
    int n;
};

/* The prompt token of request req_id (its index in reqs) for the runtime's real prefill. */
static int32_t prompt_token(void *user, int req_id, int i)
{
    const struct prompts *P = user;
    PULSE_CHECK(req_id >= 0 && req_id < P->n && i >= 0 && i < P->reqs[req_id].n,
                "serve batch: a prompt token past its request's prompt");
    return P->reqs[req_id].ids[i];
}

static int check_reqs(const struct serve_batch_params *p, const struct serve_batch_req *reqs, int n,
                      char *err, size_t errlen)
{
    if (n < 1 || p->max_batch < 1 || !p->pol || p->pol->ctx_kind != POLICY_CTX_OFFLOAD) {
        snprintf(err, errlen, "serve batch: %d requests, %d per batch, policy %s", n, p->max_batch,
                 p->pol ? p->pol->name : "none");
        return PULSE_ERR_INVALID;
    }
    for (int i = 0; i < n; i++)
        if (reqs[i].n < 1 || reqs[i].max_gen < 2 || reqs[i].n + reqs[i].max_gen > p->max_tokens) {
            snprintf(err, errlen,
                     "serve batch: request %d has %d prompt + %d new tokens (at least 1 and 2, "
                     "within %d)",
                     i, reqs[i].n, reqs[i].max_gen, p->max_tokens);
            return PULSE_ERR_INVALID;
        }
    return PULSE_OK;
}

int serve_batch_run(struct engine *e, const struct serve_batch_params *p,
                    struct serve_batch_req *reqs, int n, struct serve_batch_stats *st, char *err,
                    size_t errlen)
{
    memset(st, 0, sizeof *st);
    int rc = check_reqs(p, reqs, n, err, errlen);
    if (rc != PULSE_OK) return rc;
    const struct model_config *m = engine_model(e)->cfg;
    const struct backend *be = engine_model(e)->be;
    const struct policy *pol = p->pol;
    struct offload_params op;
    offload_params_init(&op, p->max_batch, p->max_tokens, p->seed);
    op.budget_tokens = p->budget_tokens;
    op.sink = p->sink;
    op.window = p->window;
    op.n_dense = 0; /* every global layer sparse, as on the accuracy path */
    op.selection = p->selection;
    op.selector = p->selector;
    op.engine = recall_engine_find(pol->offload_engine ? pol->offload_engine : "per-block");
    op.schedule = p->speculate ? pol->offload_spec_schedule : pol->offload_schedule;
    op.prompt_kv = OFFLOAD_KV_PREFILL;
    op.query = OFFLOAD_QUERY_REAL;
    op.prefill_chunk = p->prefill_chunk;
    struct kv_cache_params kp = {m->n_layers, m->n_kv_heads, m->head_dim,  16,
                                 0,           p->max_batch,  p->max_tokens};
    if ((rc = offload_params_check(&op, m, &kp, err, errlen)) != PULSE_OK) return rc;
    /* the offloaded requests' GPU pages (windows, tails, hot slots' pages) and the whole
     * requests of the normal batch */
    kp.budget_bytes =
        (size_t)p->max_batch * offload_request_kv_bytes(&op, m, &kp, p->max_tokens) +
        (size_t)p->normal_requests * kv_cache_params_request_bytes(&kp, p->max_tokens);
    struct kv_cache *kv = kv_cache_create(&kp, be, engine_ctx(e), err, errlen);
    struct request *R = mem_alloc(MEM_HOST, sizeof *R * (size_t)n, "serve batch requests");
    void *ctx = NULL;
    if (!kv || !R) {
        if (kv) snprintf(err, errlen, "serve batch: out of host memory");
        rc = PULSE_ERR_NOMEM;
        goto out;
    }
    /* the analytic IOAA profile's inputs, measured here when a two-batch policy's IOAA (no
     * fixed admission) takes them */
    const int dev = be->mem == MEM_DEVICE, ioaa = pol->n_batches > 1 && !p->admission;
    const size_t bw_bytes = (size_t)(dev ? 256 : 16) << 20;
    const struct policy_ctx_params cp = {
        .eng = e,
        .kv = kv,
        .seed = p->seed,
        .max_batch = p->max_batch,
        .prefill = 1,
        .offload = &op,
        .admission = p->admission,
        .hbm_gbps = ioaa ? be->copy_bandwidth(engine_ctx(e), bw_bytes, 3) : 0,
        .h2d_gbps = ioaa ? be->h2d_bandwidth(engine_ctx(e), bw_bytes, 3) : 0};
    if ((rc = pol->ctx_create(&cp, &ctx, err, errlen)) != PULSE_OK) goto out;
    struct prompts P = {reqs, n};
    struct offload *o = pol->offload_of ? pol->offload_of(ctx) : ctx;
    if ((rc = offload_set_prompts(o, prompt_token, &P)) != PULSE_OK) {
        snprintf(err, errlen, "serve batch: the policy's runtime takes no prompts");
        goto out;
    }
    memset(R, 0, sizeof *R * (size_t)n);
    for (int i = 0; i < n; i++) {
        R[i].id = i;
        R[i].prompt_len = reqs[i].n;
        R[i].output_len = reqs[i].max_gen - 1; /* the prefill gave the first */
        R[i].reserve_len = p->max_tokens;
        R[i].tokens = reqs[i].out + 1;
    }
    rc = serve_run_policy(e, kv, pol, ctx, R, n, p->max_batch, &st->ctr, &st->wall_s, err, errlen);
    if (rc != PULSE_OK) goto out;
    for (int j = 0; j < n; j++) { /* the loop may have reordered them: by id */
        struct serve_batch_req *q = &reqs[R[j].id];
        q->out[0] = R[j].first_token;
        q->batch = R[j].batch;
        q->error = R[j].error;
    }
out:
    if (ctx) pol->ctx_free(ctx);
    mem_free(MEM_HOST, R, sizeof *R * (size_t)n);
    kv_cache_free(kv);
    return rc;
}
