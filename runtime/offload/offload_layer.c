/* One decode step under the offload runtime (offload.h), queued by the thread that calls it:
 * the step's uploads (positions, digest rows, the locality queries made during the previous
 * step) are one asynchronous copy from pinned memory; per sparse layer it queues pre-attention,
 * digest update and selection, the lists' download and an event, then one of two paths.
 * Device-driven (zero-copy): hot-cache planning, descriptors and page lists by kernels, the
 * zero-copy gather, attention; the host sees the lists only for the meter (planner JOB_METER).
 * Each layer's lists come down in one copy on a stream of their own, which the compute stream
 * waits for (on the device) only at the step's end.
 * Host-planned (the other engines): the planner thread (offload_plan.c) plans and submits the
 * recall, whose stream sets the layer's flag when the data has landed; the attention waits for
 * the flag: on the device (or, with offload_params.host_wait, this thread waits on the host
 * before queueing it, counted as a host synchronisation). Then
 * the tail flush and post-attention. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "kernels_cpu.h"
#include "offload_impl.h"
#include "timeline.h"
#include "trace.h"

/* ------------------------------------------------------------------ addressing */

static struct digest_view digest_view_of(const struct offload *o, int sl)
{
    struct kv_view dv = kv_cache_view(o->store.dg, NULL);
    /* the running lane's rows */
    struct digest_view d = {dv.pool, dv.page_ids,
                            o->step.d_up + (size_t)o->max_batch * (1 + sl) + o->step.first,
                            o->dig_heads, o->hd};
    return d;
}

/* The step upload's int rows, [max_batch] each unless noted: positions, digest row starts
 * [n_sparse], and for the device path block counts, new tails, tail indices, cache slots,
 * host-pool slots, hot-plan unit bases [n_sparse]. */
enum { UP_POS, UP_DROWS };
static size_t up_row(const struct offload *o, int which)
{
    const size_t B = (size_t)o->max_batch, S = (size_t)o->n_sparse;
    return B * (which <= UP_DROWS ? (size_t)which : 1 + S + (size_t)(which - UP_DROWS - 1));
}
enum { UP_NB = UP_DROWS + 1, UP_TNEW, UP_TIDX, UP_SLOT, UP_HSLOT, UP_UBASE, UP_END = UP_UBASE + 1 };

/* Ints of the step upload before the queries, 256-byte aligned. */
static size_t up_ints(const struct offload *o)
{
    const size_t n = up_row(o, UP_END) + (size_t)o->max_batch * (o->n_sparse - 1);
    return mem_aligned(sizeof(int32_t) * n) / sizeof(int32_t);
}

/* Bytes of a step upload of n entries: the ints, then the queries [n_sparse][n][nq][hd], and
 * as many approximate ones after them when the upload carries those (spec_q_up). */
static size_t up_bytes(const struct offload *o, int n)
{
    return sizeof(int32_t) * up_ints(o) +
           sizeof(uint16_t) * (size_t)(1 + o->spec_q_up) * o->n_sparse * n * o->nq * o->hd;
}

size_t offload_up_bytes(const struct offload *o)
{
    return up_bytes(o, o->max_batch);
}

size_t offload_up_ints(const struct offload *o)
{
    return up_ints(o);
}

/* ------------------------------------------------------------------ queries */

/* The next locality query of (slot, sparse layer sl) into q and, when the upload carries
 * them, its approximate query into aq: the source's model of misprediction (spec_q; the query
 * itself without one) or, for tests, the query negated. */
static void make_q(struct offload *o, int sl, const int32_t *slot, uint16_t *q, uint16_t *aq)
{
    o->qs->step_q(o->qs->user, o->layer_of[sl], slot, 1, q);
    if (!o->spec_q_up) return;
    const size_t per = (size_t)o->nq * o->hd;
    if (o->p.spec_predictor == OFFLOAD_SPEC_NEGATED) {
        for (size_t i = 0; i < per; i++)
            aq[i] = q[i] ^ 0x8000; /* bf16's sign */
    } else if (o->qs->spec_q) {
        o->qs->spec_q(o->qs->user, o->layer_of[sl], slot, 1, q, aq);
    } else {
        memcpy(aq, q, per * sizeof(uint16_t));
    }
}

/* Layers id, id + nth, ... of prefetch_q. */
static void prefetch_layers(void *arg, int id, int nth)
{
    struct offload *o = arg;
    const size_t per = (size_t)o->nq * o->hd;
    const struct offload_step_state *ss = &o->step.ss[o->st.steps & 1];
    for (int sl = id; sl < o->n_sparse; sl += nth)
        for (int b = 0; b < ss->n; b++) {
            const int u = ss->slot[b] * o->n_sparse + sl;
            if (o->step.q_ready[u]) continue;
            make_q(o, sl, ss->slot + b, o->step.q_next + (size_t)u * per,
                   o->spec_q_up ? o->step.q_spec_next + (size_t)u * per : NULL);
            o->step.q_ready[u] = 1;
        }
}

/* The next step's locality queries of the batch's slots, every sparse layer, made while the
 * device runs this step (a slot's stream is a pure function of its request, layer and step, so
 * when it is made does not change it), the layers spread over the CPU pool (query_source.h:
 * step_q on different layers touches disjoint state): on the H200 machine one thread took
 * about as long as a 12 x 16K offload step, so the host, not the GPU, set the step's pace
 * (CUPTI: the GPU idle a third of the step). */
static void prefetch_q(struct offload *o)
{
    if (o->p.query == OFFLOAD_QUERY_REAL) return; /* the layers' own q serve */
    kernels_cpu_parallel(PULSE_MIN(o->n_sparse, 8), prefetch_layers, o);
}

static void no_work(void *arg, int id, int nth)
{
    (void)arg, (void)id, (void)nth;
}

void offload_prefetch_warm(const struct offload *o)
{
    kernels_cpu_parallel(PULSE_MIN(o->n_sparse, 8), no_work, NULL);
}

struct take_q_arg {
    struct offload *o;
    uint16_t *dst;
};

/* Layers id, id + nth, ... of take_q. */
static void take_layers(void *arg, int id, int nth)
{
    const struct take_q_arg *a = arg;
    struct offload *o = a->o;
    const size_t per = (size_t)o->nq * o->hd;
    const struct offload_step_state *ss = &o->step.ss[o->st.steps & 1];
    uint16_t *adst = a->dst + (size_t)o->n_sparse * ss->n * per;
    for (int sl = id; sl < o->n_sparse; sl += nth)
        for (int b = 0; b < ss->n; b++) {
            const int u = ss->slot[b] * o->n_sparse + sl;
            const size_t at = ((size_t)sl * ss->n + b) * per;
            uint16_t *q = a->dst + at, *aq = o->spec_q_up ? adst + at : NULL;
            if (o->step.q_ready[u]) {
                memcpy(q, o->step.q_next + (size_t)u * per, per * sizeof(uint16_t));
                if (aq) memcpy(aq, o->step.q_spec_next + (size_t)u * per, per * sizeof(uint16_t));
            } else {
                make_q(o, sl, ss->slot + b, q, aq);
            }
            o->step.q_ready[u] = 0;
        }
}

/* This step's queries into the upload, [n_sparse][n][nq][hd] for the step's n entries, then as
 * many approximate ones when it carries them: made in advance, or now. The layers spread over
 * the CPU pool as in prefetch_q: one thread's copy of the 10-20 MB a step uploads at 32K x 24
 * (H100 machine, 2026-12-06: host_stage_s 2.7 ms a step) is time the device waits between
 * steps. */
static void take_q(struct offload *o, uint16_t *dst)
{
    if (o->p.query == OFFLOAD_QUERY_REAL) return;
    struct take_q_arg a = {o, dst};
    kernels_cpu_parallel(PULSE_MIN(o->n_sparse, 8), take_layers, &a);
}

/* ------------------------------------------------------------------ one sparse layer */

/* Whether sparse layer `layer`, predicted this step, predicts the next from an attention over
 * its predicted lists (spec_from hits, hits_body); known once its first piece has run. */
static int hits_early(const struct offload *o, int layer)
{
    return o->p.spec_from == OFFLOAD_SPEC_FROM_HITS && offload_is_sparse(o, layer) &&
           o->step.spec_step[layer] == o->st.steps && o->step.piece_pf[layer] >= 0;
}

/* Whether sparse layer `layer`'s exact plan this step arms its gate (offload_kernels.h): it was
 * predicted, and spec_from hits with spec_correct_early queues its correction at that plan
 * (offload_layer_issue), its gather behind the gate, which the build closes where a recall
 * takes a predicted block's slot and the attention over the predicted lists (hits_body) or,
 * where none runs, the layer's finish opens again. */
static int gate_armed(const struct offload *o, int layer)
{
    return o->step.d_gate && o->p.spec_correct_early && o->overlap &&
           o->step.spec_step[layer] == o->st.steps && !offload_attend_recalls(o, layer);
}

static uint32_t *gate_of(const struct offload *o, int layer)
{
    return o->step.d_gate + offload_sl(o, layer);
}

/* Whether a gated layer's correction is queued at its exact plan: where the backend's streams
 * run beside the caller, always (the gather's stream waits for the gate on the device); on the
 * cpu backend, whose streams are the calling thread and where the build has run, only when the
 * gate is open: a closed one waits for an attention not queued yet, so the correction follows
 * it (offload_layer_finish), as without the gate. */
static int correct_at_plan(const struct offload *o, int layer)
{
    if (!gate_armed(o, layer)) return 0;
    return o->be->mem == MEM_DEVICE || *gate_of(o, layer) >= 1;
}

/* The device path (zero-copy): the layer's hot-cache plan with its descriptors and page lists
 * (one job of offload_plan_build; scratch po), then (plan_after) the gather from the host pool,
 * all queued on the compute stream after the selection. A prediction's (spec: offload_prefetch)
 * plans its own lists into its own descriptors, totals and a scratch control block, and its
 * gather always runs beside (issue_side); the exact selection of a layer predicted this step
 * finds the new tail already given its slot. */
static struct offload_plan_job plan_job_of(struct offload *o, struct batch *bt, int sl, int spec,
                                           struct hot_plan_out po)
{
    const int B = o->step.n;
    const size_t lists = (size_t)B * o->n_lists;
    const int32_t *up = o->step.d_up + o->step.first; /* the running lane's entries' rows */
    const int32_t *ds = spec ? offload_spec_dsel(o, sl, B) : offload_dsel(o, sl, B);
    const int predicted = !spec && o->step.spec_step[o->layer_of[sl]] == o->st.steps;
    const struct hot_plan_in in = {ds,
                                   ds + lists * o->ms,
                                   up + up_row(o, UP_UBASE) + (size_t)sl * o->max_batch,
                                   up + up_row(o, UP_NB),
                                   predicted ? o->step.d_zero : up + up_row(o, UP_TNEW),
                                   B,
                                   o->n_lists,
                                   o->ms};
    po.totals = o->step.d_totals + ((size_t)spec * o->n_sparse + sl) * OFFLOAD_TOTALS;
    const int gate = !spec && gate_armed(o, o->layer_of[sl]);
    const int32_t *pds = gate ? offload_spec_dsel(o, sl, B) : NULL; /* the predicted lists */
    const int recalls = !spec && offload_attend_recalls(o, o->layer_of[sl]);
    const size_t V = (size_t)o->max_batch * o->n_lists;
    int32_t *ctl = spec ? o->step.d_ctl_spec : o->step.d_ctl[sl & 1];
    struct recall_desc *desc = spec ? o->step.d_desc_spec[sl & 1] : o->step.d_desc[sl & 1];
    const struct offload_build_args a = {po.status,
                                         po.n_recalls,
                                         po.recall_block,
                                         po.recall_slot,
                                         po.attend_slot,
                                         in.sel_count,
                                         batch_len(bt),
                                         up + up_row(o, UP_SLOT),
                                         up + up_row(o, UP_HSLOT),
                                         up + up_row(o, UP_TIDX),
                                         o->store.d_own,
                                         o->store.d_hids,
                                         B,
                                         o->n_lists,
                                         o->ms,
                                         o->ps,
                                         o->hot_slots,
                                         o->n_sparse,
                                         sl,
                                         o->max_blocks,
                                         o->headwise,
                                         o->nkv,
                                         o->store.host_dev,
                                         (uint64_t)(uintptr_t)o->store.gpu_pool,
                                         o->page_bytes,
                                         o->head_bytes,
                                         offload_chunk_bytes(o),
                                         desc,
                                         ctl,
                                         ctl + V,
                                         (struct recall_desc *)(ctl + offload_ctl_desc_off(o)),
                                         (unsigned long long *)(po.totals + OFFLOAD_TOT_ATT),
                                         (unsigned long long *)(po.totals + OFFLOAD_TOT_REFUSED),
                                         in.sel_idx,
                                         recalls ? ctl + offload_ctl_host_off(o) : NULL,
                                         po.victim_block,
                                         pds,
                                         pds ? pds + lists * o->ms : NULL,
                                         gate ? gate_of(o, o->layer_of[sl]) : NULL,
                                         (unsigned long long *)(po.totals + OFFLOAD_TOT_HELD)};
    return (struct offload_plan_job){in, po, a};
}

/* What follows a device plan on stream x: a prediction's event for its gather; an exact one's
 * gather here, or its event for the gather's stream (issue_side), or nothing when the attention
 * recalls. */
static void plan_after(struct offload *o, int sl, int spec, const struct kctx *x)
{
    if (spec) {
        o->be->event_record_external(x, o->step.ev_spec_built[sl]);
        return;
    }
    if (offload_attend_recalls(o, o->layer_of[sl])) return; /* no gather: the attention recalls */
    if (!o->overlap) {
        const struct recall_params *rp = recall_get_params(o->store.rc);
        o->fn.gather(o->step.d_desc[sl & 1], (int)((size_t)o->step.n * o->n_lists * o->ms),
                     rp->zc_blocks, rp->zc_threads, rp->zc_inflight_kb, x->stream);
        return;
    }
    /* the gather, on its own stream (issue_side), waits for the plan */
    o->be->event_record_external(x, o->step.ev_built[sl]);
}

/* An issued sparse layer's work off the compute stream: its lists' download on the side stream
 * and event, the planner's job and, with device_overlap, the gather on its own stream once the
 * plan is built (the attention waits for its event). A prefetch's (spec: offload_prefetch) is
 * the same over its own lists, events and descriptors: its PREFETCH job recalls them on the
 * host-planned path, and on the device path its gather goes on the gather's stream before the
 * exact selection's gather of the layer, which the attention waits for. */
static void issue_side(struct offload *o, int layer, int spec)
{
    const int sl = offload_sl(o, layer), p = o->st.steps & 1, B = o->step.n;
    const size_t ev = (size_t)p * o->n_sparse + sl;
    if (spec) o->step.spec_step[layer] = o->st.steps;
    o->be->stream_wait_event(&o->step.sctx,
                             spec ? o->step.ev_spec_selected[sl] : o->step.ev_selected[sl]);
    o->be->copy_async(&o->step.sctx,
                      spec ? offload_spec_sel(o, p, sl, B) : offload_sel(o, p, sl, B),
                      spec ? offload_spec_dsel(o, sl, B) : offload_dsel(o, sl, B),
                      sizeof(int32_t) * offload_sel_len(o, B));
    o->be->event_record(&o->step.sctx, spec ? o->step.ev_spec_sel[ev] : o->step.ev_sel[ev]);
    offload_planner_post(o,
                         spec             ? OFFLOAD_JOB_PREFETCH
                         : o->device_plan ? OFFLOAD_JOB_METER
                                          : OFFLOAD_JOB_PLAN,
                         layer, o->st.steps);
    if (!spec && offload_attend_recalls(o, layer)) { /* its attention recalls: no gather */
        o->st.attend_recall_layers++;
        return;
    }
    if (!o->overlap) return; /* (a prefetch on the device path always has the gather's stream) */
    const struct recall_params *rp = recall_get_params(o->store.rc);
    /* a predicted layer's correction on its own stream (correct_stream): after its prefetch's
     * gather, whose slots its recalls may take, as the gather's stream orders it otherwise */
    const int own = !spec && o->cstream && o->step.spec_step[layer] == o->st.steps;
    const struct kctx *g = own ? &o->step.cctx : &o->step.gctx;
    o->be->stream_wait_event(g, spec ? o->step.ev_spec_built[sl] : o->step.ev_built[sl]);
    if (own) {
        o->be->stream_wait_event(g, o->step.ev_spec_gathered[sl]);
        o->st.stream_corrections++;
    }
    /* a correction queued before the attention over the predicted lists: behind the gate */
    if (!spec && gate_armed(o, layer) && hits_early(o, layer))
        o->be->wait_value(g, gate_of(o, layer), 1);
    const int sp = timeline_begin(o->plan.tl, g, TIMELINE_RECALL, spec ? "prefetch" : "gather", 1,
                                  layer, o->st.steps);
    o->fn.gather(spec ? o->step.d_desc_spec[sl & 1] : o->step.d_desc[sl & 1],
                 (int)((size_t)B * o->n_lists * o->ms), rp->zc_blocks, rp->zc_threads,
                 rp->zc_inflight_kb, g->stream);
    timeline_end(o->plan.tl, g, sp);
    o->be->event_record(g, spec ? o->step.ev_spec_gathered[sl] : o->step.ev_gathered[sl]);
}

/* The selection query of sparse layer `layer` with the real query: its own q after its
 * pre-attention, or, selected from the layer before it (a lookahead schedule), InfiniGen's
 * approximate query from the input of the layer being issued with `layer`'s weights and every
 * hidden channel. */
static const uint16_t *real_query(struct offload *o, struct batch *bt, int layer)
{
    if (layer == o->step.next_layer) return batch_q(bt); /* at its own layer */
    const struct model_config *c = o->mc;
    const struct layer_weights *w = &engine_model(o->eng)->layers[layer];
    const uint16_t *norm = o->d_negnorm ? o->d_negnorm + (size_t)layer * c->hidden : w->attn_norm;
    const struct approx_q_weights aw = {norm, w->wqkv, w->q_norm, NULL, c->hidden};
    const float *x = o->step.spec_resid ? o->step.spec_resid : batch_residual(bt);
    o->fn.approx_q(o->ctx, &aw, x, batch_pos(bt), o->step.aq_ws, o->step.d_aq, o->step.n, c->hidden,
                   o->nq, o->hd, w->rope_inv_freq, c->norm_eps);
    return o->step.d_aq;
}

/* The query sparse layer `layer` is selected with from the piece of the layer being issued:
 * at its own layer the exact one (the real q after its pre-attention, or the locality
 * stream's); one layer ahead the approximate one (the real query's approximation from the input
 * of the layer being issued, or the upload's approximate locality queries when it carries
 * them). */
static const uint16_t *select_query(struct offload *o, struct batch *bt, int layer)
{
    if (o->p.query == OFFLOAD_QUERY_REAL) return real_query(o, bt, layer);
    /* [n_sparse][n_step][nq][hd]: the running lane's entries from its first */
    const size_t per = (size_t)o->nq * o->hd;
    const int ahead = layer != o->step.next_layer && o->spec_q_up;
    return o->step.d_q +
           (((size_t)ahead * o->n_sparse + offload_sl(o, layer)) * o->step.n_step + o->step.first) *
               per;
}

/* predict_fork: the prediction's stream, after the work queued so far on the compute stream
 * (a selection's query), inside a layer graph's capture as outside. */
static const struct kctx *fork_open(struct offload *o)
{
    o->be->event_record(o->ctx, o->step.ev_fork);
    o->be->stream_wait_event(&o->step.pctx, o->step.ev_fork);
    o->step.forked = 1;
    return &o->step.pctx;
}

/* The compute stream waits for what the running piece forked (a capture ends joined). */
static void fork_join(struct offload *o)
{
    if (!o->step.forked) return;
    o->be->event_record(&o->step.pctx, o->step.ev_join);
    o->be->stream_wait_event(o->ctx, o->step.ev_join);
    o->step.forked = 0;
}

/* Selection sparse layer `layer`'s job (a prediction's with spec): its query, its digests
 * (into *dv) and lists, scores into `scores`. */
static struct select_job select_job_of(struct offload *o, int layer, int spec, const uint16_t *q,
                                       float *scores, struct digest_view *dv)
{
    const int sl = offload_sl(o, layer), B = o->step.n;
    int32_t *ds = spec ? offload_spec_dsel(o, sl, B) : offload_dsel(o, sl, B);
    *dv = digest_view_of(o, sl);
    return (struct select_job){spec ? &o->cfg_spec : &o->cfg,
                               q,
                               dv,
                               scores,
                               ds,
                               ds + (size_t)B * o->n_lists * o->ms,
                               o->sel_head[layer]};
}

/* The scores of a selection on the compute stream: the layer ahead's apart from the layer's
 * own where it may run with it (select_joint). */
static float *select_scores(struct offload *o, int layer)
{
    return o->joint && layer != o->step.next_layer ? o->step.d_scores_ahead : o->step.d_scores;
}

/* What follows a selection on stream x: the event the side stream waits for, then its side
 * work on the host path, or on the device path its plan and build (scratch po) and what
 * follows them (plan_after). */
static void select_after(struct offload *o, struct batch *bt, int layer, int spec,
                         const struct kctx *x, struct hot_plan_out po, double *t)
{
    const int sl = offload_sl(o, layer);
    o->be->event_record_external(x, spec ? o->step.ev_spec_selected[sl] : o->step.ev_selected[sl]);
    if (!o->device_plan) issue_side(o, layer, spec);
    offload_host_lap(o, OFFLOAD_HOST_SELECT, t);
    if (o->device_plan) {
        const struct offload_plan_job pj = plan_job_of(o, bt, sl, spec, po);
        o->fn.hot_plan(&o->store.hpp, &o->store.hps, &pj.in, &pj.out, x->stream);
        o->fn.build(&pj.build, x->stream);
        plan_after(o, sl, spec, x);
    }
    offload_host_lap(o, OFFLOAD_HOST_PLAN, t);
}

/* Selections of layers[i] (predictions where spec[i]) from queries q[i], n of them (1 or 2), on
 * stream x in one launch of each kernel (select_blocks_multi), then per layer select_after; or
 * with plan_fused (the device plan) the selections' events, then every layer's plan and build
 * in one launch (offload_plan_build; a second layer's in the fork's scratch) and what follows
 * each (plan_after). */
static void select_run(struct offload *o, struct batch *bt, const struct kctx *x, int n,
                       const int *layers, const int *spec, const uint16_t *const *q, double *t)
{
    struct digest_view dv[2];
    struct select_job jobs[2];
    for (int i = 0; i < n; i++)
        jobs[i] = select_job_of(o, layers[i], spec[i], q[i],
                                x == o->ctx ? select_scores(o, layers[i]) : o->step.d_scores_ahead,
                                &dv[i]);
    o->fn.select_multi(x, jobs, n, batch_len(bt), o->step.n);
    const struct hot_plan_out po = x == o->ctx ? o->step.po : o->step.po_fork;
    if (!o->fused) {
        for (int i = 0; i < n; i++)
            select_after(o, bt, layers[i], spec[i], x, po, t);
        return;
    }
    struct offload_plan_job pj[2];
    for (int i = 0; i < n; i++) {
        const int sl = offload_sl(o, layers[i]);
        o->be->event_record_external(x, spec[i] ? o->step.ev_spec_selected[sl]
                                                : o->step.ev_selected[sl]);
        pj[i] = plan_job_of(o, bt, sl, spec[i], i == 0 ? po : o->step.po_fork);
    }
    offload_host_lap(o, OFFLOAD_HOST_SELECT, t);
    o->fn.plan_build(&o->store.hpp, &o->store.hps, pj, n, x->stream);
    o->step.piece_fused += n;
    for (int i = 0; i < n; i++)
        plan_after(o, offload_sl(o, layers[i]), spec[i], x);
    offload_host_lap(o, OFFLOAD_HOST_PLAN, t);
}

/* Selection of sparse layer `layer` (a prediction's with spec) into its lists, then its plan
 * (select_run). Its query is made on the compute stream; the selection runs there too, or, for
 * a layer ahead of the one being issued with predict_fork, on the prediction's stream with
 * scratch of its own. With `joint` (the schedule's selections, select_joint) a selection on the
 * compute stream waits for the piece's second one and both run in one launch of each kernel;
 * select_flush launches a lone one before the piece's next compute. A piece selects its own
 * layer and the one ahead at most, so at most one of the two queries is an approximate one
 * made here (real_query's buffer) and the two score buffers are distinct. */
static void select_layer(struct offload *o, struct batch *bt, int layer, int spec, int joint)
{
    double t = pulse_now();
    const uint16_t *q = select_query(o, bt, layer);
    const struct kctx *x = o->fork && layer != o->step.next_layer ? fork_open(o) : o->ctx;
    if (joint && o->joint && x == o->ctx) {
        if (!o->step.pend_layer1) { /* the first: wait for the second */
            o->step.pend_layer1 = layer + 1, o->step.pend_spec = spec, o->step.pend_q = q;
            offload_host_lap(o, OFFLOAD_HOST_SELECT, &t);
            return;
        }
        const int layers[2] = {o->step.pend_layer1 - 1, layer},
                  specs[2] = {o->step.pend_spec, spec};
        const uint16_t *const qs[2] = {o->step.pend_q, q};
        PULSE_CHECK(layers[0] != layer, "offload: a piece selects a layer once");
        o->step.pend_layer1 = 0;
        o->step.piece_joint[o->step.next_layer] = 2; /* counted after the piece */
        select_run(o, bt, x, 2, layers, specs, qs, &t);
        return;
    }
    select_run(o, bt, x, 1, &layer, &spec, &q, &t);
}

/* select_joint: the piece's selection still waiting for a second one, launched alone (before
 * the piece's next compute, or at its end). */
static void select_flush(struct offload *o, struct batch *bt)
{
    if (!o->step.pend_layer1) return;
    const int layer = o->step.pend_layer1 - 1, spec = o->step.pend_spec;
    const uint16_t *q = o->step.pend_q;
    double t = pulse_now();
    o->step.pend_layer1 = 0;
    select_run(o, bt, o->ctx, 1, &layer, &spec, &q, &t);
}

int offload_predict_forked(const struct offload *o)
{
    return o->fork;
}

/* Selection of a sparse layer on the compute stream (the device path: then its plan and, unless
 * the gather runs beside, its gather), called by the schedule's piece of the layer being
 * issued. The events other streams wait for are recorded as external ones: on the device path
 * this is queued inside the layer's graph, and the side work (issue_side) after the piece
 * (offload_layer_issue). The host path queues its side work at once. */
void offload_select(struct offload *o, struct batch *bt, int layer)
{
    const int at = o->step.next_layer;
    PULSE_CHECK(at >= 0 && !o->step.issued && layer >= 0 && layer < o->n_layers &&
                    offload_is_sparse(o, layer),
                "offload_select: a sparse layer, inside a layer's piece");
    PULSE_CHECK(layer == at || (layer == at + 1 && o->p.schedule->lookahead),
                "offload_select: the layer being issued, or with a lookahead schedule the next");
    PULSE_CHECK(layer != at || o->step.pre_done || o->p.query != OFFLOAD_QUERY_REAL,
                "offload_select: the real query of a layer exists after its pre-attention");
    PULSE_CHECK(o->step.piece_nsel[at] < 2, "offload_select: a piece selects two layers at most");
    PULSE_CHECK(o->step.piece_pf[at] != layer, "offload_select: a layer prefetched in this piece");
    o->step.piece_sel[at][o->step.piece_nsel[at]++] = (int16_t)layer;
    select_layer(o, bt, layer, 0, 1);
}

void offload_prefetch(struct offload *o, struct batch *bt, int layer)
{
    const int at = o->step.next_layer;
    PULSE_CHECK(o->spec && at >= 0 && !o->step.issued && layer == at + 1 &&
                    offload_layer_sparse(o, layer),
                "offload_prefetch: with a prefetching schedule, the next layer (sparse), inside "
                "a layer's piece");
    PULSE_CHECK(o->step.piece_pf[at] < 0, "offload_prefetch: once a piece");
    for (int i = 0; i < o->step.piece_nsel[at]; i++)
        PULSE_CHECK(o->step.piece_sel[at][i] != layer,
                    "offload_prefetch: a layer selected in this piece");
    o->step.piece_pf[at] = (int16_t)layer;
    /* from mid-layer or the predicted lists' attention: made in the layer's second or third
     * piece, after an attention (offload_layer_finish) */
    if (o->p.spec_from != OFFLOAD_SPEC_FROM_INPUT) return;
    select_layer(o, bt, layer, 1, 1);
}

/* The pre-attention piece of the layer being issued; in a sparse layer, its new key folded
 * into its digest. */
void offload_pre(struct offload *o, struct batch *bt, int layer)
{
    PULSE_CHECK(layer == o->step.next_layer && !o->step.issued && !o->step.pre_done,
                "offload_pre: once, inside the layer's piece");
    select_flush(o, bt); /* a selection queued before the pre-attention runs before it */
    double t = pulse_now();
    engine_layer_pre(o->eng, bt, o->store.kv, layer);
    if (offload_is_sparse(o, layer)) {
        const struct digest_view dv = digest_view_of(o, offload_sl(o, layer));
        const struct kv_view kv = kv_cache_view(o->store.kv, batch_page_starts(o->eng, bt, layer));
        o->fn.digest_update(o->ctx, &kv, &dv, o->step.d_up + o->step.first, o->step.n,
                            o->sel_head[layer]);
    }
    o->step.pre_done = 1;
    offload_host_lap(o, OFFLOAD_HOST_PRE, &t);
}

/* What the attention of a sparse layer waits for, queued before it on the compute stream (on
 * the device): the device path's gather on its stream (an event); the planner's control block
 * once its recall has landed (its flag), then the block's copy to the device. */
static void attend_wait(struct offload *o, int layer)
{
    const int sl = offload_sl(o, layer), p = o->st.steps & 1, nv = o->step.n * o->n_lists;
    if (offload_attend_recalls(o, layer)) { /* only what the layer's prefetch brings */
        if (o->step.spec_step[layer] == o->st.steps)
            o->be->stream_wait_event(o->ctx, o->step.ev_spec_gathered[sl]);
        return;
    }
    if (o->overlap) o->be->stream_wait_event(o->ctx, o->step.ev_gathered[sl]);
    if (o->device_plan) return;
    const int32_t *ctl = offload_ctl(o, p, sl);
    int32_t *d_ctl = o->step.d_ctl[sl & 1];
    const size_t V = (size_t)o->max_batch * o->n_lists;
    if (o->p.host_wait && o->be->mem == MEM_DEVICE) { /* for comparison: on the host */
        pulse_host_sync_note();
        pulse_wait_flag(&o->step.flags[sl], o->step.seq,
                        "offload: a recall's flag on the host (host_wait)");
    } else {
        o->be->wait_value(o->ctx, &o->step.flags[sl], o->step.seq);
    }
    o->be->copy_async(o->ctx, d_ctl, ctl, sizeof(int32_t) * (size_t)nv);
    o->be->copy_async(o->ctx, d_ctl + V, ctl + V, sizeof(int32_t) * (size_t)nv * o->ms);
}

/* Attention with the model's q over the pages of control block d_ctl (the layer's plan, or a
 * prediction's) into out: one entry per (entry, list), each with nq / n_lists query heads
 * (head-wise: entry (b, h) holds query heads h*G .. h*G+G-1, the same memory as q's
 * [b][nq][hd]). */
static void attend(struct offload *o, struct batch *bt, int32_t *d_ctl, uint16_t *out)
{
    const int spec = d_ctl == o->step.d_ctl_spec;
    const int nv = o->step.n * o->n_lists;
    const size_t V = (size_t)o->max_batch * o->n_lists;
    const int recalls = !spec && offload_attend_recalls(o, o->step.next_layer);
    struct kv_view v = {(uint16_t *)o->store.gpu_pool,
                        d_ctl + V,
                        o->step.d_att_start,
                        o->ps,
                        o->nkv / o->n_lists,
                        o->hd,
                        0,
                        0,
                        recalls ? (const uint16_t *)(uintptr_t)o->store.host_dev : NULL,
                        recalls ? d_ctl + offload_ctl_host_off(o) : NULL};
    o->be->attn_decode(o->ctx, batch_q(bt), &v, d_ctl, out, nv, o->nq / o->n_lists,
                       spec ? o->step.att_max_spec : o->step.att_max_tokens,
                       1.0f / sqrtf((float)o->hd));
}

/* Entries whose tail block filled this step (decided on the host, so queued outside the
 * layer's graph, after its post-attention, which reads no KV): the tail page into the host
 * pool and into the tail's slot (the planner's descriptors). */
static void tail_flush(struct offload *o, int layer)
{
    const int sl = offload_sl(o, layer), p = o->st.steps & 1;
    const struct offload_step_state *ss = &o->step.ss[p];
    int n_desc = 0;
    for (int i = 0; i < o->step.n; i++) { /* the running lane's entries */
        const int b = o->step.first + i;
        if (ss->n_tok[b] % o->ps) continue;
        const int slot = ss->slot[b];
        int n_own;
        const int32_t *own = kv_cache_owned_pages(o->store.kv, slot, layer, &n_own);
        o->be->copy_async(
            o->ctx,
            host_pool_block(o->store.hp, o->store.hp_slot[slot], sl, ss->n_tok[b] / o->ps - 1),
            o->store.gpu_pool + (size_t)own[n_own - 1] * o->page_bytes, o->page_bytes);
        n_desc += o->n_lists;
        o->ls[layer].tail_flushes++;
    }
    if (!n_desc) return;
    const size_t doff = offload_ctl_desc_off(o);
    struct recall_desc *d = (struct recall_desc *)(o->step.d_ctl[sl & 1] + doff);
    /* the device path's build numbers the step's tails over all its entries (UP_TIDX): a
     * lane's start after those of the entries before it */
    for (int b = 0; o->device_plan && b < o->step.first; b++)
        d += ss->n_tok[b] % o->ps ? 0 : o->n_lists;
    if (!o->device_plan)
        o->be->copy_async(o->ctx, d, offload_ctl(o, p, sl) + doff,
                          sizeof(struct recall_desc) * (size_t)n_desc);
    o->fn.scatter(d, n_desc, o->ctx->stream);
}

/* The layer graphs (device path): slot 3 l holds layer l's first piece (its issues,
 * pre-attention, digest update), 3 l + 1 its attention and post-attention, 3 l + 2 its attention
 * over its predicted lists (spec_from hits); NULL to queue them as they are. They hold the batch,
 * its size and the attention's bound, and are dropped when one changes (offload_step_begin). A
 * split step's lanes have sets of their own: each holds its view of the step's batch (the same
 * entries while the batch's size holds, since the split point follows from it) and its lane's
 * control blocks, flags and events; whether the views may replay is the step's batch's to say (a
 * view has no graphs of its own). */
static void **layer_graph(struct offload *o, struct batch *bt, int piece, int layer)
{
    const int split = o->step.n_lanes == 2;
    const struct batch *whole = split ? o->step.lg_bt : bt;
    if (!o->layer_graphs || !o->device_plan || !whole || !batch_graphs_on(o->eng, whole))
        return NULL;
    const size_t set = split ? 1 + (size_t)o->step.lane : 0;
    return &o->step.lgraph[(set * (size_t)o->n_layers + (size_t)layer) * OFFLOAD_LGRAPH_PIECES +
                           (size_t)piece];
}

void offload_layer_graphs_drop(struct offload *o)
{
    for (int i = 0;
         o->step.lgraph && o->eng && i < OFFLOAD_LGRAPH_SETS * OFFLOAD_LGRAPH_PIECES * o->n_layers;
         i++)
        engine_graph_drop(o->eng, &o->step.lgraph[i]);
    o->step.lg_bt = NULL;
}

struct layer_call {
    struct offload *o;
    struct batch *bt;
    int layer;
};

/* The schedule's piece of the layer (run as it is, or captured into the layer's graph). */
static void issue_body(void *arg)
{
    const struct layer_call *c = arg;
    struct offload *o = c->o;
    o->step.piece_nsel[c->layer] = o->step.piece_joint[c->layer] = 0;
    o->step.piece_pf[c->layer] = -1;
    o->p.schedule->layer(o, c->bt, c->layer);
    select_flush(o, c->bt);
    fork_join(o);
    PULSE_CHECK(o->step.pre_done, "offload schedule: a layer's piece runs its pre-attention");
}

/* The layer a piece of `layer` left to predict from mid-layer (spec_from mid, or hits where the
 * layer was not itself predicted), or -1. */
static int mid_prefetch(const struct offload *o, int layer)
{
    if (o->p.spec_from == OFFLOAD_SPEC_FROM_INPUT || hits_early(o, layer)) return -1;
    return o->step.piece_pf[layer];
}

/* spec_from hits, once the layer's prefetch has landed: attention over its predicted lists (all
 * resident: the exact plan's recalls, which may take a predicted block's slot, wait for it:
 * the gate opened, or without one ev_built recorded again), then the next layer's prediction
 * from the residual that attention gives, the batch's own untouched. */
static void hits_body(void *arg)
{
    const struct layer_call *c = arg;
    struct offload *o = c->o;
    attend(o, c->bt, o->step.d_ctl_spec, o->step.d_hits_attn);
    if (gate_armed(o, c->layer))
        o->be->memset(o->ctx, gate_of(o, c->layer), OFFLOAD_GATE_BYTE, sizeof(uint32_t));
    else
        o->be->event_record_external(o->ctx, o->step.ev_built[offload_sl(o, c->layer)]);
    o->be->copy_async(o->ctx, o->step.d_hits_x, batch_residual(c->bt),
                      sizeof(float) * (size_t)o->step.n * o->mc->hidden);
    engine_attn_add(o->eng, o->step.n, c->layer, o->step.d_hits_attn, o->step.d_hits_x);
    o->step.spec_resid = o->step.d_hits_x;
    select_layer(o, c->bt, o->step.piece_pf[c->layer], 1, 0);
    o->step.spec_resid = NULL;
}

static void finish_body(void *arg)
{
    const struct layer_call *c = arg;
    struct offload *o = c->o;
    double t = pulse_now();
    if (!offload_is_sparse(o, c->layer))
        engine_run_attention(o->eng, c->bt, o->store.kv, c->layer);
    else
        attend(o, c->bt, o->step.d_ctl[offload_sl(o, c->layer) & 1], batch_attn_out(c->bt));
    offload_host_lap(o, OFFLOAD_HOST_ATTEND, &t);
    const int pf = mid_prefetch(o, c->layer);
    if (pf < 0) {
        engine_layer_post(o->eng, c->bt, c->layer);
    } else { /* the next layer's prediction from the residual with the attention in it */
        engine_layer_post_attn(o->eng, c->bt, c->layer);
        offload_host_lap(o, OFFLOAD_HOST_POST, &t);
        select_layer(o, c->bt, pf, 1, 0);
        engine_layer_post_mlp(o->eng, c->bt, c->layer);
    }
    offload_host_lap(o, OFFLOAD_HOST_POST, &t);
}

/* Runs body(c) as the layer graph in slot g, or as it is (g NULL); a replay's host time goes
 * to phase ph (a body that runs laps its own phases); restarts *t. */
static void run_piece(struct offload *o, void **g, void (*body)(void *), struct layer_call *c,
                      int ph, double *t)
{
    const int replay = g && *g;
    int *fused = g ? &o->step.lg_fused[g - o->step.lgraph] : NULL;
    o->step.piece_fused = 0;
    engine_graph_run(o->eng, g, body, c);
    if (fused && !replay) *fused = o->step.piece_fused; /* captured: what it holds */
    o->st.fused_plans += replay ? *fused : o->step.piece_fused;
    o->st.layer_graph_launches += g != NULL;
    o->st.lane_graph_launches += g != NULL && o->step.n_lanes == 2;
    if (replay)
        offload_host_lap(o, ph, t);
    else
        *t = pulse_now();
}

/* The first piece of a layer: pre-attention; in a sparse layer the new key folded into its
 * digest and, unless it was issued one layer ahead, the selection and the planner's job. On the
 * device path its compute-stream work replays as one graph, and the issued layers' side work
 * (issue_side) is queued after it. */
void offload_layer_issue(struct offload *o, struct batch *bt, int layer)
{
    PULSE_CHECK(layer == o->step.next_layer && !o->step.issued,
                "offload_layer_issue: layers run in order, each issued once");
    const int64_t s0 = pulse_host_syncs();
    TRACE_PUSH("layer");
    struct layer_call c = {o, bt, layer};
    double t = pulse_now();
    run_piece(o, layer_graph(o, bt, 0, layer), issue_body, &c, OFFLOAD_HOST_PRE, &t);
    /* what the piece selected (a replayed graph did not run it: as when it was captured) */
    for (int i = 0; i < o->step.piece_nsel[layer]; i++) {
        const int sel = o->step.piece_sel[layer][i];
        o->step.sel_step[offload_sl(o, sel)] = o->st.steps;
        o->st.forked_selections += o->fork && sel != layer;
        /* a layer predicting from its predicted lists: its correction behind the gate, or
         * after that attention (offload_layer_finish) */
        if (o->device_plan && (!hits_early(o, sel) || correct_at_plan(o, sel))) {
            issue_side(o, sel, 0);
            if (hits_early(o, sel)) {
                o->step.early_corr_step[sel] = o->st.steps;
                o->st.early_corrections++;
            }
        }
    }
    if (o->device_plan && o->step.piece_pf[layer] >= 0 &&
        o->p.spec_from == OFFLOAD_SPEC_FROM_INPUT) {
        issue_side(o, o->step.piece_pf[layer], 1);
        o->st.forked_selections += o->fork;
    }
    o->st.joint_selections += o->step.piece_joint[layer];
    if (o->device_plan) offload_host_lap(o, OFFLOAD_HOST_SELECT, &t);
    o->step.issued = 1;
    o->step_syncs += pulse_host_syncs() - s0;
}

int offload_layer_ready(const struct offload *o, int layer)
{
    if (!offload_is_sparse(o, layer)) return 1;
    /* in stream order, or its gather's event (device_overlap); a layer predicting from its
     * predicted lists, whose correction its finish issues, once its prefetch has landed */
    if (o->device_plan) {
        const int sl = offload_sl(o, layer);
        if (offload_attend_recalls(o, layer)) /* its attention recalls: its prefetch only */
            return o->step.spec_step[layer] != o->st.steps ||
                   o->be->event_query(o->step.ev_spec_gathered[sl]);
        if (!o->overlap) return 1;
        return o->be->event_query(hits_early(o, layer) ? o->step.ev_spec_gathered[sl]
                                                       : o->step.ev_gathered[sl]);
    }
    const _Atomic uint32_t *f = (const _Atomic uint32_t *)&o->step.flags[offload_sl(o, layer)];
    return (int32_t)(atomic_load_explicit(f, memory_order_acquire) - o->step.seq) >= 0;
}

/* The rest: attention (a sparse layer's waits for its recall, on the device), post-attention
 * (one graph on the device path), then the tail flush. */
void offload_layer_finish(struct offload *o, struct batch *bt, int layer)
{
    PULSE_CHECK(layer == o->step.next_layer && o->step.issued,
                "offload_layer_finish: issue the layer first");
    const int64_t s0 = pulse_host_syncs();
    const int sparse = offload_is_sparse(o, layer);
    PULSE_CHECK(!sparse || o->step.sel_step[offload_sl(o, layer)] == o->st.steps,
                "offload schedule: a sparse layer is selected before its attention");
    struct layer_call c = {o, bt, layer};
    double t = pulse_now();
    if (hits_early(o, layer)) { /* the prediction once the prefetch has landed, then the link's
                                   next work: this layer's correction, the next's prefetch */
        o->be->stream_wait_event(o->ctx, o->step.ev_spec_gathered[offload_sl(o, layer)]);
        run_piece(o, layer_graph(o, bt, 2, layer), hits_body, &c, OFFLOAD_HOST_SELECT, &t);
        if (o->step.early_corr_step[layer] != o->st.steps) issue_side(o, layer, 0);
        issue_side(o, o->step.piece_pf[layer], 1);
        o->st.hits_prefetches++;
        offload_host_lap(o, OFFLOAD_HOST_SELECT, &t);
    } else if (gate_armed(o, layer)) { /* no attention over its predicted lists: open again */
        o->be->memset(o->ctx, gate_of(o, layer), OFFLOAD_GATE_BYTE, sizeof(uint32_t));
    }
    if (sparse) attend_wait(o, layer);
    offload_host_lap(o, OFFLOAD_HOST_ATTEND, &t);
    run_piece(o, layer_graph(o, bt, 1, layer), finish_body, &c, OFFLOAD_HOST_POST, &t);
    const int pf = mid_prefetch(o, layer); /* its side work after the piece, as the issue's */
    if (pf >= 0) {
        if (o->device_plan) issue_side(o, pf, 1);
        o->st.mid_prefetches++;
    }
    if (sparse) tail_flush(o, layer);
    offload_host_lap(o, OFFLOAD_HOST_ATTEND, &t);
    TRACE_POP();
    o->step.issued = o->step.pre_done = 0;
    o->step.next_layer++;
    o->step_syncs += pulse_host_syncs() - s0;
}

/* ------------------------------------------------------------------ lanes */

/* The running lane's progress into its slot, and lane k's state into the step's fields. */
static void lane_save(struct offload *o)
{
    struct offload_lane *L = &o->step.lanes[o->step.lane];
    L->first = o->step.first, L->n = o->step.n;
    L->next_layer = o->step.next_layer, L->issued = o->step.issued;
    L->pre_done = o->step.pre_done;
    memcpy(L->sel_step, o->step.sel_step, sizeof L->sel_step);
    memcpy(L->spec_step, o->step.spec_step, sizeof L->spec_step);
}

static void lane_load(struct offload *o, int k)
{
    const struct offload_lane *L = &o->step.lanes[k];
    o->step.lane = k;
    o->step.first = L->first, o->step.n = L->n;
    o->step.next_layer = L->next_layer, o->step.issued = L->issued;
    o->step.pre_done = L->pre_done;
    memcpy(o->step.sel_step, L->sel_step, sizeof L->sel_step);
    memcpy(o->step.spec_step, L->spec_step, sizeof L->spec_step);
    o->step.flags = L->flags;
    o->step.h_sel = L->h_sel, o->step.d_sel = L->d_sel, o->step.h_ctl = L->h_ctl;
    o->step.d_ctl[0] = L->d_ctl[0], o->step.d_ctl[1] = L->d_ctl[1];
    o->step.ev_sel = L->ev_sel, o->step.ev_selected = L->ev_selected;
    o->step.h_sel_spec = L->h_sel_spec, o->step.d_sel_spec = L->d_sel_spec;
    o->step.ev_spec_sel = L->ev_spec_sel, o->step.ev_spec_selected = L->ev_spec_selected;
    o->step.ev_spec_built = L->ev_spec_built, o->step.ev_spec_gathered = L->ev_spec_gathered;
    o->step.d_desc[0] = L->d_desc[0], o->step.d_desc[1] = L->d_desc[1];
    o->step.d_desc_spec[0] = L->d_desc_spec[0], o->step.d_desc_spec[1] = L->d_desc_spec[1];
    o->step.ev_built = L->ev_built, o->step.ev_gathered = L->ev_gathered;
}

void offload_lane_reset(struct offload *o)
{
    for (int k = 0; k < 2; k++) {
        struct offload_lane *L = &o->step.lanes[k];
        L->next_layer = -1;
        for (int l = 0; l < OFFLOAD_MAX_LAYERS; l++)
            L->sel_step[l] = L->spec_step[l] = -1;
    }
    lane_load(o, 0);
    o->step.n_lanes = 1;
}

void offload_step_split(struct offload *o, int n_first)
{
    PULSE_CHECK(o->p.lanes == 2, "offload_step_split: the runtime was made with one lane");
    PULSE_CHECK(o->step.next_layer == 0 && !o->step.issued && o->step.n_lanes == 1 &&
                    n_first >= 1 && n_first < o->step.n_step,
                "offload_step_split: once, before the step's first layer, into two lanes");
    lane_save(o);
    struct offload_lane *a = &o->step.lanes[0], *b = &o->step.lanes[1];
    a->first = 0, a->n = n_first;
    b->first = n_first, b->n = o->step.n_step - n_first;
    b->next_layer = 0, b->issued = b->pre_done = 0;
    o->step.n_lanes = 2;
    lane_load(o, 0);
}

void offload_lane_use(struct offload *o, int lane)
{
    PULSE_CHECK(lane >= 0 && lane < o->step.n_lanes && o->step.next_layer >= 0,
                "offload_lane_use: a lane of the running step");
    if (lane == o->step.lane) return;
    lane_save(o);
    lane_load(o, lane);
}

int offload_lane_next_layer(const struct offload *o, int lane)
{
    return lane == o->step.lane ? o->step.next_layer : o->step.lanes[lane].next_layer;
}

/* ------------------------------------------------------------------ the step */

/* The device path's rows of the step upload; the main thread keeps the block counts (the
 * planner's job on the host path). */
static void stage_device(struct offload *o, const struct offload_step_state *ss, int32_t *h)
{
    int tails = 0;
    for (int b = 0; b < ss->n; b++) {
        const int slot = ss->slot[b], nb = (int)PULSE_CEIL_DIV(ss->n_tok[b], o->ps);
        int32_t *last = &o->store.last_nb[slot * o->n_sparse];
        h[up_row(o, UP_NB) + b] = nb;
        h[up_row(o, UP_TNEW) + b] = *last > 0 && nb > *last;
        h[up_row(o, UP_TIDX) + b] = ss->n_tok[b] % o->ps ? -1 : tails++;
        h[up_row(o, UP_SLOT) + b] = slot;
        h[up_row(o, UP_HSLOT) + b] = o->store.hp_slot[slot];
        for (int sl = 0; sl < o->n_sparse; sl++) {
            h[up_row(o, UP_UBASE) + (size_t)sl * o->max_batch + b] = offload_unit(o, slot, sl, 0);
            last[sl] = nb;
        }
    }
}

/* The step's state and upload (parity p): entries, digest rows, queries; returns the entries'
 * longest reservation. */
static int stage(struct offload *o, const struct batch_entry *en, int n)
{
    const int p = o->st.steps & 1;
    const size_t MB = (size_t)o->max_batch;
    if (!o->be->event_query(o->step.ev_up[p])) o->be->event_sync(o->step.ev_up[p]);
    if (offload_planner_wait(o, o->step.jobs_end[p])) pulse_host_sync_note();
    struct offload_step_state *ss = &o->step.ss[p];
    int32_t *h = o->step.h_up[p];
    int max_len = 1; /* the split plan of the CUDA attention: the engine's (batch_set's) bound */
    ss->n = n, ss->step = o->st.steps;
    for (int b = 0; b < n; b++) {
        const int slot = en[b].slot;
        max_len = PULSE_MAX(max_len, en[b].reserved);
        PULSE_CHECK(slot >= 0 && slot < o->max_batch && o->store.hp_slot[slot] >= 0,
                    "offload_step: an entry is not an offload request");
        ss->slot[b] = slot;
        ss->n_tok[b] = en[b].pos + 1;
        h[b] = en[b].pos;
        for (int sl = 0; sl < o->n_sparse; sl++)
            h[MB * (1 + sl) + b] = kv_cache_row(o->store.dg, o->store.dg_slot[slot], sl);
    }
    if (o->device_plan) stage_device(o, ss, h);
    take_q(o, (uint16_t *)(h + up_ints(o)));
    /* the step's fixed traffic: weights, dense layers' KV, the digests selection reads */
    struct floor_traffic *t = &o->step.traffic[p];
    const double tok_bytes = (double)o->page_bytes / o->ps;
    *t = (struct floor_traffic){(double)model_step_weight_bytes(o->mc), 0, 0, 0};
    for (int b = 0; b < n; b++) {
        /* the dense layers read every token, a window layer its window */
        double toks = (double)o->n_full * ss->n_tok[b];
        for (int i = 0; i < o->n_window; i++)
            toks += PULSE_MIN(ss->n_tok[b], o->windows[i]);
        t->kv_bytes += tok_bytes * toks;
        t->digest_bytes +=
            (double)o->n_sparse * PULSE_CEIL_DIV(ss->n_tok[b], o->ps) * (double)o->dpage_bytes;
    }
    o->step.att_max_tokens = select_attend_bound(&o->cfg, max_len);
    o->step.att_max_spec = select_attend_bound(&o->cfg_spec, max_len);
    const size_t up =
        o->p.query == OFFLOAD_QUERY_REAL ? sizeof(int32_t) * up_ints(o) : up_bytes(o, n);
    o->be->copy_async(o->ctx, o->step.d_up, h, up); /* the rows of n entries (and their queries) */
    o->be->event_record(o->ctx, o->step.ev_up[p]);
    return max_len;
}

void offload_step_begin(struct offload *o, struct batch *bt, const struct batch_entry *en, int n)
{
    PULSE_CHECK(n >= 1 && n <= o->max_batch && n == batch_size(bt),
                "offload_step: batch size out of range or not the batch's");
    PULSE_CHECK(o->step.next_layer < 0, "offload_step_begin: the last step has not ended");
    const int64_t s0 = pulse_host_syncs();
    TRACE_PUSH("offload step");
    o->step.n = o->step.n_step = n; /* one lane of every entry until offload_step_split */
    o->step.first = 0;
    o->step.n_lanes = 1;
    o->step.seq = (uint32_t)(o->st.steps + 1);
    /* pre- and post-attention as graphs on the device path: launched one by one, each kernel
     * would pay for its launch's fetch over the link a zero-copy gather keeps busy (engine.h).
     * Not on the host-planned path: there the compute stream waits on the device for the
     * planner's flag, and a graph's capture or release beside that wait stalled the step (H200,
     * 2026-12-02: gather-scatter runs hung) */
    batch_graph_pieces(o->eng, bt, o->device_plan);
    const double t0 = pulse_now();
    const int max_len = stage(o, en, n);
    o->stage_s += pulse_now() - t0;
    if (o->step.lg_bt != bt || o->step.lg_n != n || o->step.lg_len != max_len) {
        offload_layer_graphs_drop(o); /* what the layer graphs hold changed */
        o->step.lg_bt = bt, o->step.lg_n = n, o->step.lg_len = max_len;
    }
    engine_run_embed(o->eng, bt);
    o->step.next_layer = 0;
    o->step_syncs = pulse_host_syncs() - s0;
}

int offload_step_end(struct offload *o, struct batch *bt)
{
    PULSE_CHECK(o->step.next_layer == o->n_layers, "offload_step_end: a layer has not run");
    if (o->step.n_lanes == 2) { /* both lanes ran every layer; lane 0 runs the next step */
        lane_save(o);
        PULSE_CHECK(o->step.lanes[0].next_layer == o->n_layers &&
                        o->step.lanes[1].next_layer == o->n_layers,
                    "offload_step_end: a lane's layer has not run");
        lane_load(o, 0);
        o->step.lanes[1].next_layer = -1;
        o->step.n = o->step.n_step, o->step.first = 0, o->step.n_lanes = 1;
    }
    const int64_t s0 = pulse_host_syncs();
    engine_run_head(o->eng, bt);
    /* the next step's selections overwrite the lists: after their downloads (on the device) */
    o->be->event_record(&o->step.sctx, o->step.ev_lists);
    o->be->stream_wait_event(o->ctx, o->step.ev_lists);
    if (o->device_plan) { /* the layers' totals come down once a step, for the counters */
        const int p = o->st.steps & 1;
        o->be->copy_async(o->ctx, o->step.h_totals[p], o->step.d_totals,
                          8 * (size_t)(1 + o->spec) * o->n_sparse * OFFLOAD_TOTALS);
        o->be->event_record(o->ctx, o->step.ev_end[p]);
        offload_planner_post(o, OFFLOAD_JOB_STEP, -1, o->st.steps);
    }
    o->step.jobs_end[o->st.steps & 1] = offload_planner_posted(o);
    const double t0 = pulse_now();
    prefetch_q(o); /* while the device runs the step */
    o->prefetch_s += pulse_now() - t0;
    o->st.steps++;
    o->step.next_layer = -1;
    TRACE_POP();
    o->step_syncs += pulse_host_syncs() - s0;
    o->host_syncs += o->step_syncs;
    char why[256];
    if (o->p.verify_steps && atomic_load(&o->status) == PULSE_OK &&
        offload_verify(o, why, sizeof why)) {
        fprintf(stderr, "offload: step %lld: %s\n", (long long)o->st.steps, why);
        atomic_store(&o->status, PULSE_ERR_INVALID);
    }
    return atomic_load(&o->status);
}

int offload_step(struct offload *o, struct batch *bt, const struct batch_entry *en, int n)
{
    offload_step_begin(o, bt, en, n);
    for (int l = 0; l < o->n_layers; l++) {
        offload_layer_issue(o, bt, l);
        offload_layer_finish(o, bt, l);
    }
    return offload_step_end(o, bt);
}

void offload_step_traffic(const struct offload *o, int ahead, struct floor_traffic *out)
{
    PULSE_CHECK(ahead >= 0 && ahead <= 1 && o->st.steps > ahead,
                "offload_step_traffic: no such step");
    const int p = (int)((o->st.steps - 1 - ahead) & 1);
    if (o->pl) offload_planner_wait(o, o->step.jobs_end[p]);
    *out = o->step.traffic[p];
}
