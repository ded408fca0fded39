/* vanilla: all KV on the GPU, full attention, FCFS admission while the KV budget allows. A
 * request reserves its whole length at admission; the head of the queue blocks the rest. Its
 * prompt KV is synthetic, or prefilled when the policy context is a struct prefill. */
#include <stdio.h>

#include "common.h"
#include "prefill.h"
#include "serve.h"

static int vanilla_admit(struct serve_state *s)
{
    while (s->next_waiting < s->n_arrived && s->run[0].n_entries < s->max_batch) {
        int rc = serve_admit_request(s, 0, s->next_waiting);
        if (rc == PULSE_ERR_NOMEM) {
            s->ctr.admission_refusals++;
            return PULSE_OK;
        }
        if (rc != PULSE_OK) return rc;
        s->next_waiting++;
    }
    return PULSE_OK;
}

static int vanilla_step(struct serve_state *s)
{
    engine_step(s->eng, s->run[0].bt, s->kv);
    return PULSE_OK;
}

/* Weights, and every layer's KV of every entry (a sliding-window layer reads its window). */
static void vanilla_traffic(struct serve_state *s, int ahead, struct floor_traffic *t)
{
    const struct model_config *c = engine_model(s->eng)->cfg;
    const double per_layer = (double)model_kv_bytes_per_token(c) / c->n_layers;
    t->weight_bytes = (double)model_step_weight_bytes(c);
    for (int k = 0; k < s->n_batches; k++)
        for (int b = 0; b < s->run[k].n_entries; b++)
            for (int l = 0; l < c->n_layers; l++) {
                const int n = s->run[k].entries[b].pos + 1 - ahead, w = model_layer_window(c, l);
                t->kv_bytes += per_layer * (w > 0 && w < n ? w : n);
            }
}

/* A struct prefill when the run prefills, else none. */
static int vanilla_ctx_create(const struct policy_ctx_params *p, void **ctx, char *err,
                              size_t errlen)
{
    *ctx = NULL;
    if (!p->prefill) return PULSE_OK;
    if (!(*ctx = prefill_create(p->eng, p->seed, p->max_batch))) {
        snprintf(err, errlen, "out of memory for the prefill");
        return PULSE_ERR_OOM;
    }
    return PULSE_OK;
}

static void vanilla_ctx_free(void *ctx)
{
    prefill_free(ctx);
}

const struct policy policy_vanilla = {
    .name = "vanilla",
    .admit = vanilla_admit,
    .admit_idle = serve_admit_idle_reserved,
    .step = vanilla_step,
    .traffic = vanilla_traffic,
    .ctx_kind = POLICY_CTX_PREFILL,
    .ctx_create = vanilla_ctx_create,
    .ctx_free = vanilla_ctx_free,
};
