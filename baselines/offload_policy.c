/* The offload policies' serving-loop side (offload_policy.h). */
#include "offload_policy.h"

#include <stdio.h>

#include "common.h"
#include "offload.h"

int offload_policy_ctx_create(const struct policy_ctx_params *p, void **ctx, char *err,
                              size_t errlen)
{
    *ctx = NULL;
    if (!p->offload) {
        snprintf(err, errlen, "offload policy: no offload params for its context");
        return PULSE_ERR_INVALID;
    }
    struct offload *o;
    int rc = offload_create(p->eng, p->kv, p->offload, &o, err, errlen);
    if (rc == PULSE_OK) *ctx = o;
    return rc;
}

void offload_policy_ctx_free(void *ctx)
{
    offload_free(ctx);
}

int offload_policy_admit(struct serve_state *s)
{
    struct offload *o = s->policy_ctx;
    while (s->next_waiting < s->n_arrived && s->run[0].n_entries < s->max_batch) {
        const struct request *r = &s->reqs[s->next_waiting];
        struct offload_stats a, b;
        offload_get_stats(o, &a);
        int slot, rc = offload_admit(o, r->id, r->prompt_len, request_reserved(r), &slot, s->why,
                                     sizeof s->why);
        offload_get_stats(o, &b);
        serve_pause_clock(s, b.prompt_fill_s - a.prompt_fill_s); /* a prefill instance's work */
        if (rc == PULSE_ERR_NOMEM) {
            s->ctr.admission_refusals++;
            return PULSE_OK;
        }
        if (rc != PULSE_OK) return rc;
        serve_add_entry(s, 0, s->next_waiting++, slot, offload_first_token(o, slot));
    }
    return PULSE_OK;
}

int offload_policy_step(struct serve_state *s)
{
    struct offload *o = s->policy_ctx;
    PULSE_CHECK(offload_lookahead(o) == s->pol->overlapped,
                "offload policy: the offload runtime was made for another schedule");
    int rc = offload_step(o, s->run[0].bt, s->run[0].entries, s->run[0].n_entries);
    if (rc == PULSE_ERR_IO) { /* a recall failed every attempt: the loop ends the batch */
        s->run[0].failed = offload_clear_failure(o);
    }
    return rc;
}

void offload_policy_counters(const struct offload *o, struct serve_counters *c)
{
    struct offload_stats st;
    offload_get_stats(o, &st);
    c->recall_bytes = st.recall_bytes;
    c->recall_chunks = st.recall_chunks;
    c->recall_stalls = st.stalls;
    c->spec_recall_chunks = st.spec_misses;
    c->spec_corrections = st.corrections;
    c->spec_scored = st.spec_scored;
    c->spec_held = st.spec_held;
    c->spec_mid = st.mid_prefetches;
    c->spec_hits = st.hits_prefetches;
    c->spec_early_corrections = st.early_corrections;
    c->spec_correction_holds = st.correction_holds;
    c->attend_recall_layers = st.attend_recall_layers;
    c->attend_recall_chunks = st.attend_recall_chunks;
    c->forked_selections = st.forked_selections;
    c->joint_selections = st.joint_selections;
    c->fused_plans = st.fused_plans;
    c->stream_corrections = st.stream_corrections;
}

void offload_policy_finish(struct serve_state *s)
{
    offload_policy_counters(s->policy_ctx, &s->ctr);
}

void offload_policy_traffic(struct serve_state *s, int ahead, struct floor_traffic *t)
{
    offload_step_traffic(s->policy_ctx, ahead, t);
}

void offload_policy_release(struct serve_state *s, int slot)
{
    offload_release(s->policy_ctx, slot);
}
