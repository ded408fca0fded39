/* The offload runtime's counters (offload.h): totals, per sparse layer (the runtime's hot-cache
 * and recall counts beside the locality meter's achieved churn and recall bytes per step and
 * the profile's target), the per-step series, and the resolved configuration. */
#include <math.h>
#include <string.h>

#include "common.h"
#include "offload_impl.h"
#include "results.h"

void offload_get_layer_stats(const struct offload *o, int layer, struct offload_layer_stats *out)
{
    PULSE_CHECK(layer >= 0 && layer < o->n_layers, "offload_get_layer_stats: layer out of range");
    offload_quiesce(o);
    *out = o->ls[layer];
}

void offload_get_stats(const struct offload *o, struct offload_stats *out)
{
    offload_quiesce(o);
    *out = o->st;
    out->host_syncs = o->host_syncs;
    out->stage_s = o->stage_s;
    for (int i = 0; i < OFFLOAD_HOST_PHASES; i++)
        out->host_phase_s[i] = o->host_phase_s[i];
    for (int i = 0; i < OFFLOAD_PLANNER_PHASES; i++)
        out->planner_phase_s[i] = o->plan.planner_phase_s[i];
    out->prefetch_s = o->prefetch_s;
    out->last_step_host_syncs = o->step_syncs;
    out->recall_bytes = out->recall_chunks = out->recalls = out->stalls = 0;
    out->recall_wait_s = 0;
    out->spec_misses = out->spec_recall_bytes = out->corrections = 0;
    out->spec_scored = out->spec_held = out->correction_holds = 0;
    out->attend_recall_chunks = 0;
    for (int sl = 0; sl < o->n_sparse; sl++) {
        const struct offload_layer_stats *s = &o->ls[o->layer_of[sl]];
        out->recall_bytes += s->recall_bytes;
        out->recall_chunks += s->recall_chunks;
        out->recalls += s->recalls;
        out->stalls += s->stalls;
        out->recall_wait_s += s->recall_wait_s;
        out->spec_misses += s->spec_misses;
        out->spec_recall_bytes += s->spec_recall_bytes;
        out->corrections += s->corrections;
        out->spec_scored += s->spec_scored;
        out->spec_held += s->spec_held;
        out->correction_holds += s->correction_holds;
        out->attend_recall_chunks += s->attend_recalled;
    }
    struct recall_stats rs;
    recall_get_stats(o->store.rc, &rs);
    out->engine_bytes = rs.bytes;
    out->engine_chunks = rs.chunks;
    if (o->device_plan) { /* the zero-copy gather on the compute stream is the engine */
        out->engine_bytes = out->recall_bytes;
        out->engine_chunks = out->recall_chunks;
    }
    out->host_pool_bytes = host_pool_bytes(o->store.hp);
    struct kv_cache_stats ds;
    kv_cache_get_stats(o->store.dg, &ds);
    out->digest_store_bytes = (size_t)ds.n_pages * (size_t)ds.page_bytes;
    out->prompt_kv_device = o->store.fmem != NULL;
    out->staging_bytes = o->store.fmem ? (size_t)o->max_blocks * o->page_bytes : 0;
    out->gpu_pages_per_request_max =
        kv_cache_params_mapped_pages(&o->store.kp, o->p.max_tokens, o->store.maps);
}

int offload_lookahead(const struct offload *o)
{
    return o->p.schedule->lookahead;
}

void offload_set_timeline(struct offload *o, struct timeline *tl)
{
    offload_quiesce(o);
    o->plan.tl = tl;
}

int offload_device_driven(const struct offload *o)
{
    return o->device_plan ? 1 + o->overlap : 0;
}

const struct offload_params *offload_get_params(const struct offload *o)
{
    return &o->p;
}

int64_t offload_lane_graph_launches(const struct offload *o)
{
    return o->st.lane_graph_launches;
}

int offload_kind(const struct offload *o, int layer)
{
    PULSE_CHECK(layer >= 0 && layer < o->n_layers, "offload_kind: layer out of range");
    return o->kind[layer];
}

int offload_layer_sparse(const struct offload *o, int layer)
{
    return layer >= 0 && layer < o->n_layers && o->kind[layer] == OFFLOAD_LAYER_SPARSE;
}

void offload_request_bytes(const struct offload *o, int n_tokens, size_t *gpu, size_t *host)
{
    *gpu = offload_request_kv_bytes(&o->p, o->mc, &o->store.kp, n_tokens);
    *host = offload_request_host_bytes(&o->p, o->mc, o->ps, n_tokens);
}

size_t offload_host_free_bytes(const struct offload *o)
{
    struct host_pool_stats hs;
    host_pool_get_stats(o->store.hp, &hs);
    return (size_t)hs.free_blocks * hs.block_bytes;
}

json_t *offload_config_json(const struct offload *o)
{
    struct host_pool_stats hs;
    host_pool_get_stats(o->store.hp, &hs);
    struct offload_stats st;
    offload_get_stats(o, &st);
    json_t *sel = json_array();
    for (int l = 0; l < o->n_layers; l++)
        json_array_append_new(sel,
                              offload_is_sparse(o, l) ? json_integer(o->sel_head[l]) : json_null());
    json_t *j = json_pack("{s:i, s:i, s:i, s:i, s:i, s:s, s:i, s:i, s:s, s:f, s:I, s:b, s:f, s:I, "
                          "s:s, s:b, s:I, s:I}",
                          "budget_tokens", o->p.budget_tokens, "budget_blocks", o->cfg.budget,
                          "sink_blocks", o->p.sink, "window_blocks", o->p.window, "dense_layers",
                          o->n_full, "selection", offload_selection_name(o->p.selection),
                          "hot_slots", o->hot_slots, "hot_slots_auto", o->p.hot_slots_auto,
                          "recall_engine", recall_engine_name(o->p.engine), "recall_cap_gbps",
                          o->p.cap_gbps, "host_pool_bytes", (json_int_t)hs.pool_bytes,
                          "host_pool_pinned", hs.pinned, "host_pool_pin_s", hs.pin_seconds,
                          "digest_store_bytes", (json_int_t)st.digest_store_bytes, "prompt_kv",
                          o->p.prompt_kv == OFFLOAD_KV_LOCALITY  ? "locality"
                          : o->p.prompt_kv == OFFLOAD_KV_PREFILL ? "prefill"
                                                                 : "synthetic",
                          "every_block_selected", o->all_selected, "chunk_bytes",
                          (json_int_t)(o->headwise ? o->head_bytes : o->page_bytes),
                          "gpu_pages_per_request_max", (json_int_t)st.gpu_pages_per_request_max);
    json_object_set_new(j, "selector_per_layer", sel);
    json_object_set_new(j, "reuse", json_string(o->p.refetch ? "none" : "resident"));
    /* how each layer's KV is kept (offload.h): "dense", "window" (its window in a GPU ring) or
     * "sparse" (host pool, hot slots, selected) */
    static const char *const kinds[] = {"dense", "window", "sparse"};
    json_t *kind = json_array();
    for (int l = 0; l < o->n_layers; l++)
        json_array_append_new(kind, json_string(kinds[o->kind[l]]));
    json_object_set_new(j, "layer_kinds", kind);
    /* dense_layers above counts the layers kept dense; --dense-layers asks for the first N,
     * of which a sliding-window layer keeps its window instead */
    json_object_set_new(j, "dense_layers_asked", json_integer(o->n_dense));
    json_object_set_new(j, "sparse_layers", json_integer(o->n_sparse));
    json_object_set_new(j, "schedule", json_string(o->p.schedule->name));
    json_object_set_new(j, "lookahead_layers", json_integer(o->p.schedule->lookahead));
    json_object_set_new(j, "prefetch", json_boolean(o->spec));
    json_object_set_new(j, "spec_margin", json_real(o->p.spec_margin));
    json_object_set_new(j, "spec_from", json_string(offload_spec_from_name(o->p.spec_from)));
    json_object_set_new(j, "spec_correction",
                        json_string(o->p.spec_from != OFFLOAD_SPEC_FROM_HITS ? "at_plan"
                                    : o->p.spec_correct_early                ? "early"
                                                                             : "late"));
    json_object_set_new(j, "lanes", json_integer(o->p.lanes == 2 ? 2 : 1));
    /* offload_params.predict_fork as asked, and in effect (offload_predict_forked) */
    json_object_set_new(j, "predict_stream", json_string(o->p.predict_fork ? "fork" : "inline"));
    json_object_set_new(j, "predict_forked", json_boolean(o->fork));
    /* offload_params.select_joint as asked, and in effect (a schedule that selects ahead) */
    json_object_set_new(j, "select_launch", json_string(o->p.select_joint ? "joint" : "apart"));
    json_object_set_new(j, "select_joint", json_boolean(o->joint));
    /* offload_params.plan_fused as asked, and in effect (the device plan) */
    json_object_set_new(j, "plan_launch", json_string(o->p.plan_fused ? "fused" : "apart"));
    json_object_set_new(j, "plan_fused", json_boolean(o->fused));
    /* offload_params.correct_stream as asked, and in effect */
    json_object_set_new(j, "correction_stream",
                        json_string(o->p.correct_stream ? "own" : "gather"));
    json_object_set_new(j, "correction_stream_own", json_boolean(o->cstream));
    json_object_set_new(j, "spec_budget_blocks", json_integer(o->cfg_spec.budget));
    json_object_set_new(
        j, "spec_predictor",
        json_string(o->p.spec_predictor == OFFLOAD_SPEC_NEGATED ? "negated" : "approx"));
    json_object_set_new(j, "spec_query",
                        json_string(!o->p.schedule->lookahead          ? "none"
                                    : o->p.query == OFFLOAD_QUERY_REAL ? "approximate"
                                    : o->spec_q_up && o->qs && o->qs->spec_q &&
                                            o->p.spec_predictor == OFFLOAD_SPEC_APPROX
                                        ? "source"
                                    : o->spec_q_up ? "negated"
                                                   : "exact"));
    json_object_set_new(j, "selection_query",
                        json_string(o->p.query == OFFLOAD_QUERY_REAL ? "real" : "locality"));
    json_object_set_new(j, "locality", o->qs ? o->qs->to_json(o->qs->user) : json_null());
    return j;
}

static json_t *churn_json(const struct query_meter_stats *s)
{
    json_t *c = json_pack("{s:I}", "samples", (json_int_t)s->churn_samples);
    results_set_real(c, "mean", s->churn_mean);
    results_set_real(c, "p50", s->churn_p50);
    results_set_real(c, "p90", s->churn_p90);
    results_set_real(c, "p99", s->churn_p99);
    results_set_real(c, "max", s->churn_max);
    results_set_real(c, "target_mean", s->target_mean);
    results_set_real(c, "target_p50", s->target_p50);
    results_set_real(c, "target_p90", s->target_p90);
    return c;
}

/* A prefetching schedule's counters of a layer, or of the run (offload_layer_stats): the
 * prefetch's lists, hits and recalled chunks and bytes, the corrections (the exact lists'
 * misses after a prefetch) and the lists whose correction the gate held, and the prediction's
 * hit rate (held / scored; null when nothing was scored). */
static json_t *spec_json(const struct offload_layer_stats *r)
{
    json_t *j =
        json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "lists", (json_int_t)r->spec_lists,
                  "hits", (json_int_t)r->spec_hits, "recall_chunks", (json_int_t)r->spec_misses,
                  "recall_bytes", (json_int_t)r->spec_recall_bytes, "corrections",
                  (json_int_t)r->corrections, "correction_holds", (json_int_t)r->correction_holds,
                  "scored", (json_int_t)r->spec_scored, "held", (json_int_t)r->spec_held);
    results_set_real(j, "hit_rate",
                     r->spec_scored ? (double)r->spec_held / (double)r->spec_scored : NAN);
    return j;
}

static json_t *layer_json(const struct offload *o, int l)
{
    struct query_meter_stats s = {0}; /* no source (the real query): no meter */
    if (o->qs) o->qs->meter_stats(o->qs->user, l, &s);
    const struct offload_layer_stats *r = &o->ls[l];
    json_t *rb = json_pack("{s:I, s:I}", "steps", (json_int_t)s.steps, "total",
                           (json_int_t)s.recall_bytes_total);
    results_set_real(rb, "mean", s.recall_bytes_mean);
    results_set_real(rb, "p50", s.recall_bytes_p50);
    results_set_real(rb, "p90", s.recall_bytes_p90);
    results_set_real(rb, "p99", s.recall_bytes_p99);
    results_set_real(rb, "max", s.recall_bytes_max);
    json_t *hc = json_pack("{s:I, s:I, s:I, s:I}", "hits", (json_int_t)r->hits, "misses",
                           (json_int_t)r->misses, "fresh", (json_int_t)r->fresh, "evictions",
                           (json_int_t)r->evictions);
    json_t *j = json_pack(
        "{s:i, s:o, s:o, s:I, s:I, s:o, s:I, s:I, s:I, s:I, s:I, s:I}", "layer", l, "churn",
        churn_json(&s), "recall_bytes_per_step", rb, "cold_steps", (json_int_t)s.cold_steps,
        "cold_recall_bytes", (json_int_t)s.cold_recall_bytes, "hot_cache", hc, "recall_bytes",
        (json_int_t)r->recall_bytes, "recall_chunks", (json_int_t)r->recall_chunks, "recalls",
        (json_int_t)r->recalls, "recall_stalls", (json_int_t)r->stalls, "selections",
        (json_int_t)r->selections, "tail_flushes", (json_int_t)r->tail_flushes);
    json_object_set_new(j, "refetched", json_integer(r->refetched));
    results_set_real(j, "recall_wait_s", r->recall_wait_s);
    if (o->spec) json_object_set_new(j, "speculation", spec_json(r));
    return j;
}

static json_t *series_json(const struct offload *o)
{
    const int64_t kept = PULSE_MIN(o->st.steps, o->p.max_steps);
    json_t *a = json_array();
    for (int64_t i = 0; i < kept; i++)
        json_array_append_new(a, json_integer(o->series[i]));
    return json_pack("{s:o, s:I, s:I}", "recall_bytes", a, "kept", (json_int_t)kept, "dropped",
                     (json_int_t)(o->st.steps - kept));
}

/* What the run spent before its first token, and how: pinning the host pool, the prompt KV of
 * every admission, the locality calibration. */
static json_t *setup_json(const struct offload *o, const struct offload_stats *st)
{
    struct host_pool_stats hs;
    host_pool_get_stats(o->store.hp, &hs);
    json_t *j = json_pack("{s:I, s:b, s:s, s:i, s:i, s:b, s:b, s:I}", "host_pool_bytes",
                          (json_int_t)hs.pool_bytes, "host_pool_pinned", hs.pinned, "pin_strategy",
                          hs.pin_strategy, "pin_pieces", hs.pin_pieces, "pin_threads",
                          hs.pin_threads, "pin_fallback", hs.pin_fallback, "prompt_kv_device",
                          st->prompt_kv_device, "staging_bytes", (json_int_t)st->staging_bytes);
    json_object_set_new(j, "pin_piece_bytes", json_integer((json_int_t)hs.pin_piece_bytes));
    json_object_set_new(j, "pin_numa_asked", json_integer(hs.pin_numa_asked));
    json_object_set_new(j, "pin_numa_node", json_integer(hs.pin_numa_node));
    json_object_set_new(j, "pin_numa_share",
                        hs.pin_numa_share >= 0 ? json_real(hs.pin_numa_share) : json_null());
    json_object_set_new(j, "pin_reused", json_boolean(hs.pin_reused)); /* host_pool_keep */
    results_set_real(j, "pin_s", st->pin_s);
    results_set_real(j, "pin_touch_s", hs.pin_touch_s);
    results_set_real(j, "pin_register_s", hs.pin_register_s);
    results_set_real(j, "prompt_kv_s", st->prompt_fill_s);
    results_set_real(j, "calibration_s", st->calibration_s);
    results_set_real(j, "total_s", st->pin_s + st->prompt_fill_s + st->calibration_s);
    return j;
}

/* The transfer shape a policy's recall has (DESIGN section 11's published tier is read off it):
 * copies per recall round and bytes per copy (the engine's copy-path operations: cudaMemcpyAsync
 * calls, DMAs of the gather-scatter pieces; on the device plan, one gather launch per round
 * that moved anything), the recall chunk (a whole block of
 * every head, or one head's piece), pages cached per request and layer against those one step
 * selects, and the bytes recalled again that were resident (re-fetch) against those reused. */
static json_t *mechanism_json(const struct offload *o, const struct offload_stats *st,
                              const struct recall_stats *rs)
{
    int64_t refetched = 0, hits = 0;
    for (int sl = 0; sl < o->n_sparse; sl++) {
        refetched += o->ls[o->layer_of[sl]].refetched;
        hits += o->ls[o->layer_of[sl]].hits;
    }
    const size_t chunk = offload_chunk_bytes(o);
    const int64_t copies = o->device_plan ? st->recalls : rs->submissions;
    const int64_t bytes = o->device_plan ? st->recall_bytes : rs->bytes;
    json_t *j = json_pack("{s:s, s:I, s:i, s:i, s:i, s:b, s:I, s:I, s:I}", "selection",
                          offload_selection_name(o->p.selection), "chunk_bytes", (json_int_t)chunk,
                          "page_tokens", o->ps, "pages_cached", o->hot_slots, "pages_selected_max",
                          o->ms, "refetch", o->p.refetch, "refetched_bytes",
                          (json_int_t)(refetched * (int64_t)chunk), "reused_bytes",
                          (json_int_t)(hits * (int64_t)chunk), "copies", (json_int_t)copies);
    results_set_real(j, "copies_per_round",
                     st->recalls ? (double)copies / (double)st->recalls : 0.0);
    results_set_real(j, "bytes_per_copy", copies ? (double)bytes / (double)copies : 0.0);
    return j;
}

json_t *offload_counters_json(const struct offload *o)
{
    struct offload_stats st;
    offload_get_stats(o, &st);
    struct hot_cache_stats hs;
    hot_cache_get_stats(o->store.hc, &hs);
    struct recall_stats rs;
    recall_get_stats(o->store.rc, &rs);
    json_t *layers = json_array();
    for (int sl = 0; sl < o->n_sparse; sl++)
        json_array_append_new(layers, layer_json(o, o->layer_of[sl]));
    json_t *eng = recall_stats_json(&rs);
    json_object_set_new(eng, "name", json_string(recall_engine_name(o->p.engine)));
    const struct recall_params *rp = recall_get_params(o->store.rc);
    json_object_set_new(eng, "zc_blocks", json_integer(rp->zc_blocks));
    json_object_set_new(eng, "zc_threads", json_integer(rp->zc_threads));
    json_object_set_new(eng, "zc_inflight_kb", json_integer(rp->zc_inflight_kb));
    json_object_set_new(eng, "gather_threads", json_integer(rp->gather_threads));
    json_object_set_new(eng, "spin_us", json_integer(rp->spin_us));
    json_object_set_new(eng, "gs_piece_bytes", json_integer((json_int_t)rp->piece_bytes));
    json_object_set_new(eng, "gs_stages", json_integer(rp->n_stage));
    json_object_set_new(eng, "gs_nt_stores", json_boolean(rp->nt_stores));
    json_object_set_new(eng, "prime", json_boolean(rp->prime));
#ifdef PULSE_HAVE_CUDA
    if (o->be->mem == MEM_DEVICE)
        json_object_set_new(eng, "zc_loads_per_lane",
                            json_integer(recall_gather_loads(rp->zc_threads, rp->zc_inflight_kb)));
#endif
    if (o->device_plan) { /* the device hot cache's counts (the host one is unused) */
        memset(&hs, 0, sizeof hs);
        for (int sl = 0; sl < o->n_sparse; sl++) {
            const struct offload_layer_stats *s = &o->ls[o->layer_of[sl]];
            hs.hits += s->hits, hs.misses += s->misses;
            hs.fresh += s->fresh, hs.evictions += s->evictions;
        }
        hs.resident = -1; /* not tracked on the device */
    }
    json_t *hc = json_pack("{s:I, s:I, s:I, s:I, s:I}", "hits", (json_int_t)hs.hits, "misses",
                           (json_int_t)hs.misses, "fresh", (json_int_t)hs.fresh, "evictions",
                           (json_int_t)hs.evictions, "resident", (json_int_t)hs.resident);
    json_t *j = json_pack(
        "{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o, s:o, s:o}", "selection",
        offload_selection_name(o->p.selection), "steps", (json_int_t)st.steps, "admitted",
        (json_int_t)st.admitted, "recall_bytes", (json_int_t)st.recall_bytes, "recall_chunks",
        (json_int_t)st.recall_chunks, "recalls", (json_int_t)st.recalls, "recall_stalls",
        (json_int_t)st.stalls, "recall_failures", (json_int_t)st.recall_failures, "refusals_gpu",
        (json_int_t)st.refusals_gpu, "refusals_host", (json_int_t)st.refusals_host,
        "refusals_digest", (json_int_t)st.refusals_digest, "recall_engine", eng, "hot_cache", hc,
        "layers", layers, "per_step", series_json(o));
    results_set_real(j, "recall_wait_s", st.recall_wait_s);
    results_set_real(j, "prompt_fill_s", st.prompt_fill_s);
    json_object_set_new(j, "setup", setup_json(o, &st));
    json_object_set_new(j, "host_syncs", json_integer(st.host_syncs));
    json_object_set_new(j, "layer_graph_launches", json_integer(st.layer_graph_launches));
    json_object_set_new(j, "forked_selections", json_integer(st.forked_selections));
    json_object_set_new(j, "joint_selections", json_integer(st.joint_selections));
    json_object_set_new(j, "fused_plans", json_integer(st.fused_plans));
    json_object_set_new(j, "stream_corrections", json_integer(st.stream_corrections));
    json_object_set_new(j, "lane_graph_launches", json_integer(st.lane_graph_launches));
    json_object_set_new(j, "mid_prefetches", json_integer(st.mid_prefetches));
    json_object_set_new(j, "hits_prefetches", json_integer(st.hits_prefetches));
    json_object_set_new(j, "early_corrections", json_integer(st.early_corrections));
    /* offload_params.attend_recall as asked (its --attend-recall word), and whether any layer's
     * attention recalls (in effect for the schedule: o->att_recall) */
    static const char *const attend_words[] = {"off", "on", "corrections"};
    json_object_set_new(j, "attend_recall",
                        json_pack("{s:s, s:b, s:I, s:I}", "mode", attend_words[o->p.attend_recall],
                                  "on", o->att_recall != 0, "layers",
                                  (json_int_t)st.attend_recall_layers, "chunks",
                                  (json_int_t)st.attend_recall_chunks));
    if (o->spec) { /* the layers' prefetch counters summed */
        struct offload_layer_stats sum = {0};
        for (int sl = 0; sl < o->n_sparse; sl++) {
            const struct offload_layer_stats *s = &o->ls[o->layer_of[sl]];
            sum.spec_lists += s->spec_lists, sum.spec_hits += s->spec_hits;
            sum.spec_misses += s->spec_misses, sum.spec_recall_bytes += s->spec_recall_bytes;
            sum.corrections += s->corrections, sum.spec_scored += s->spec_scored;
            sum.spec_held += s->spec_held, sum.correction_holds += s->correction_holds;
        }
        json_object_set_new(j, "speculation", spec_json(&sum));
    }
    if (o->store.faulty) /* PULSE_RECALL_FAULT */
        json_object_set_new(j, "recall_faults_injected",
                            json_integer(recall_fault_injected(&o->store.fault)));
    json_object_set_new(j, "last_step_host_syncs", json_integer(st.last_step_host_syncs));
    results_set_real(j, "host_stage_s", st.stage_s);
    results_set_real(j, "host_prefetch_s", st.prefetch_s);
    static const char *const phase[OFFLOAD_HOST_PHASES] = {"pre_attention", "select", "device_plan",
                                                           "attend", "post"};
    json_t *hq = json_object();
    for (int i = 0; i < OFFLOAD_HOST_PHASES; i++)
        results_set_real(hq, phase[i], st.host_phase_s[i]);
    json_object_set_new(j, "host_queue_s", hq);
    static const char *const pph[OFFLOAD_PLANNER_PHASES] = {"lists_wait", "plan", "recall",
                                                            "meter"};
    json_t *pq = json_object();
    for (int i = 0; i < OFFLOAD_PLANNER_PHASES; i++)
        results_set_real(pq, pph[i], st.planner_phase_s[i]);
    json_object_set_new(j, "planner_s", pq);
    /* where a sparse layer waits for its recall (offload_params.host_wait) */
    json_object_set_new(j, "recall_wait_on",
                        json_string(o->be->mem != MEM_DEVICE            ? "cpu stream (the thread)"
                                    : o->device_plan || !o->p.host_wait ? "device"
                                                                        : "host"));
    json_object_set_new(j, "device_plan", json_boolean(o->device_plan));
    json_object_set_new(j, "mechanism", mechanism_json(o, &st, &rs));
    return j;
}
