#include "accuracy/serve_path.h"

#include <stdio.h>
#include <string.h>

#include "common.h"
#include "kv_cache.h"
#include "mem.h"

struct serve_path {
    struct engine *e;
    struct kv_cache *kv;
    struct offload *o;
    struct batch *bt;
    const int32_t *ids; /* the prompt being admitted (prompt_token reads it) */
    int n_ids, next_req, max_tokens;
};

static int32_t prompt_token(void *user, int req_id, int i)
{
    const struct serve_path *s = user;
    (void)req_id;
    PULSE_CHECK(i >= 0 && i < s->n_ids, "serve path: a prompt token past the prompt");
    return s->ids[i];
}

struct serve_path *serve_path_create(struct engine *e, const struct serve_path_params *p, char *err,
                                     size_t errlen)
{
    const struct model_config *m = engine_model(e)->cfg;
    struct serve_path *s = mem_alloc(MEM_HOST, sizeof *s, "serve path");
    if (!s) {
        snprintf(err, errlen, "serve path: out of memory");
        return NULL;
    }
    memset(s, 0, sizeof *s);
    s->e = e;
    s->max_tokens = p->max_tokens;
    struct offload_params op;
    offload_params_init(&op, 1, p->max_tokens, p->seed);
    op.budget_tokens = p->budget_tokens;
    op.sink = p->sink;
    op.window = p->window;
    op.n_dense = 0;
    op.selection = p->selection;
    op.selector = p->selector;
    op.engine = p->engine;
    op.schedule = p->schedule;
    op.prompt_kv = OFFLOAD_KV_PREFILL;
    op.query = OFFLOAD_QUERY_REAL;
    op.prefill_chunk = p->prefill_chunk;
    struct kv_cache_params kp = {m->n_layers, m->n_kv_heads, m->head_dim, 16, 0, 1, p->max_tokens};
    int rc = offload_params_check(&op, m, &kp, err, errlen);
    if (rc == PULSE_OK) {
        kp.budget_bytes = offload_request_kv_bytes(&op, m, &kp, p->max_tokens);
        s->kv = kv_cache_create(&kp, engine_model(e)->be, engine_ctx(e), err, errlen);
        s->bt = batch_create(e);
        rc = s->kv && s->bt ? offload_create(e, s->kv, &op, &s->o, err, errlen) : PULSE_ERR_NOMEM;
        if (s->kv && !s->bt) snprintf(err, errlen, "serve path: out of memory for its batch");
    }
    if (rc == PULSE_OK) rc = offload_set_prompts(s->o, prompt_token, s);
    if (rc != PULSE_OK) {
        serve_path_free(s);
        return NULL;
    }
    return s;
}

void serve_path_free(struct serve_path *s)
{
    if (!s) return;
    offload_free(s->o);
    if (s->bt) batch_free(s->e, s->bt);
    kv_cache_free(s->kv);
    mem_free(MEM_HOST, s, sizeof *s);
}

int serve_path_decode(struct serve_path *s, const int32_t *ids, int n, int max_gen,
                      serve_path_stop_fn stop, void *user, int32_t *out, int *k, char *err,
                      size_t errlen)
{
    *k = 0;
    if (n < 1 || max_gen < 1 || n + max_gen > s->max_tokens) {
        snprintf(err, errlen, "serve path: %d prompt + %d new tokens past its %d", n, max_gen,
                 s->max_tokens);
        return PULSE_ERR_INVALID;
    }
    s->ids = ids, s->n_ids = n;
    /* reserved as the accuracy session's entries are (its max_tokens): the same attention
     * bounds, so the same split plans on CUDA */
    const int req = s->next_req++, reserved = s->max_tokens;
    int slot, rc = offload_admit(s->o, req, n, reserved, &slot, err, errlen);
    if (rc != PULSE_OK) return rc;
    int32_t tok = offload_first_token(s->o, slot);
    while (*k < max_gen && !stop(user, tok)) {
        out[(*k)++] = tok;
        if (*k == max_gen) break;
        struct batch_entry en = {slot, req, n + *k - 1, reserved, tok};
        batch_set(s->e, s->bt, s->kv, &en, 1);
        if ((rc = offload_step(s->o, s->bt, &en, 1)) != PULSE_OK) {
            snprintf(err, errlen, "serve path: a decode step failed (%s)",
                     rc == PULSE_ERR_IO ? offload_clear_failure(s->o) : "offload runtime");
            break;
        }
        batch_read_tokens(s->e, s->bt, &tok);
    }
    offload_release(s->o, slot);
    kv_cache_release(s->kv, slot); /* the cache's pages are the caller's to free */
    return rc;
}

void serve_path_stats(const struct serve_path *s, struct offload_stats *out)
{
    offload_get_stats(s->o, out);
}
