/* What the offload runtime (offload.h) needs of a model of selection locality, defined here so
 * that the runtime knows such a model only through this table (DESIGN.md section 2): the
 * selection query of every (layer, slot) step, the prompt KV of a request, a description for
 * the JSON, and a meter of what the runtime's selections achieved (churn, recall bytes).
 * workloads/locality_source.h implements it with the locality model.
 *
 * Lifetime: the implementation creates a source for one shape (offload_source_shape gives the
 * shape an offload runtime will have), the caller puts it in offload_params.source, and frees
 * it (query_source_free) after the offload runtime.
 *
 * Threads: start and the prompt functions run on the thread that drives the offload runtime;
 * step_q there too, or on several threads of the CPU pool at once, each on different layers
 * (step_q on different layers must touch disjoint state); the meter functions on its planner
 * thread, concurrently with step_q (but not with each other, nor with start or the prompt
 * functions: admission waits for the planner). Nothing a step calls allocates. */
#ifndef PULSE_QUERY_SOURCE_H
#define PULSE_QUERY_SOURCE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "select.h"

struct kctx;
struct kv_view;

#define QUERY_SOURCE_MAX_LAYERS 256

/* The shape a source serves: what the offload runtime will select with and ask for. */
struct query_source_shape {
    struct select_cfg sel; /* the runtime's selection (heads, block size, budget, sink, window;
                              max_blocks = the longest request's blocks) */
    int n_layers;          /* <= QUERY_SOURCE_MAX_LAYERS */
    uint8_t dense[QUERY_SOURCE_MAX_LAYERS]; /* 1: a layer the runtime does not select (dense
                                               or sliding-window): no queries, no meter */
    int n_slots;           /* request slots (the cache's), >= 1 */
    int one_list;          /* 1: one list per entry serving all heads; 0: one per KV head */
    const char *selection; /* the selection's name (offload_selection_name), for the meter's
                              profile */
    int hot_slots;         /* hot-cache slots per list (the runtime's; the meter models them) */
    int speculates;        /* 1: the runtime selects layers one ahead (a lookahead schedule) and
                              calls spec_q; 0: it never does (a source need not model it) */
    uint64_t seed;         /* the engine's seed */
};

/* The meter's numbers of one sparse layer, beside what the source aimed at. Churn over
 * list-steps with a previous step; recall over steady (request, step) pairs. */
struct query_meter_stats {
    int64_t churn_samples;
    double churn_mean, churn_p50, churn_p90, churn_p99, churn_max;
    double target_mean, target_p50, target_p90; /* the source's target churn */
    int64_t steps;
    double recall_bytes_mean, recall_bytes_p50, recall_bytes_p90, recall_bytes_p99;
    double recall_bytes_max;
    int64_t recall_bytes_total;
    int64_t cold_steps, cold_recall_bytes; /* first steps of (request, layer) */
    double spec_target; /* the modelled overlap of the approximate query's selection with the
                           exact one's (spec_q; select_overlap's rate), -1 when it has none */
    /* and its step-to-step behaviour (select.h's select_persist, as modelled): the approximate
     * lists' churn over the exact lists', and the share of the exact blocks they miss that one
     * of the two lists of the step before held (already resident after a step that recalled
     * both); -1 when it has none */
    double spec_churn_ratio, spec_miss_held;
};

struct query_source {
    struct query_source_shape shape; /* what it was made for (offload_create compares) */
    double setup_s;                  /* seconds its creation took (a calibration) */
    void *user;                      /* the implementation's state, first argument below */

    /* Request req_id (>= 0) starts in slot: every layer's query stream restarts at step 0. */
    void (*start)(void *user, int slot, int64_t req_id);
    /* One step of `layer` for `batch` slots: q_out bf16 [batch][n_heads][head_dim] (the layout
     * select_score reads) gets each slot's query, and the slot's stream of the layer advances. */
    void (*step_q)(void *user, int layer, const int32_t *slots, int batch, uint16_t *q_out);
    /* Optional (NULL: the approximate query is the step's own, a perfect predictor): the
     * approximate query a speculating policy selects `layer`'s blocks with one layer ahead
     * (InfiniGen's, PulseInfer's speculation; DESIGN section 7, mechanism 5), for the step
     * step_q has just made for the same slots and layer: q is that step's query ([batch][n_heads]
     * [head_dim] bf16), q_out gets the approximate one, whose selection overlaps q's by the
     * source's model of misprediction. A pure function of (request, layer, step, q); threads as
     * step_q. */
    void (*spec_q)(void *user, int layer, const int32_t *slots, int batch, const uint16_t *q,
                   uint16_t *q_out);

    /* Prompt KV (offload_params.prompt_kv = OFFLOAD_KV_LOCALITY): K and V of tokens
     * [0, n_tokens) of request req_id's `layer` into the host paged view kv. */
    void (*fill_kv)(void *user, const struct kv_view *kv, int n_tokens, int32_t req_id, int layer);
    /* Optional (NULL: the prompt KV is written on the host): readies the device variant;
     * called at create. PULSE_OK, or an error with a one-line reason in err. */
    int (*device_init)(void *user, char *err, size_t errlen);
    /* With device_init: fill_kv into the device view kv, queued on c's stream; no sync. */
    void (*fill_kv_device)(void *user, const struct kctx *c, const struct kv_view *kv, int n_tokens,
                           int32_t req_id, int layer);
    /* Its description (offload_config_json's "locality"); the caller owns the reference. */
    json_t *(*to_json)(const void *user);

    /* Meter. A new request in slot: its previous selections are forgotten. */
    void (*meter_reset)(void *user, int slot);
    /* One step of sparse layer `layer`: the host copies of select_topk's sel_idx / sel_count
     * (select.h's layout; one list per entry for SoloHead, n_kv_heads otherwise) of `batch`
     * entries, entry b being slot slots[b] with n_tokens[b] tokens. PULSE_OK, or
     * PULSE_ERR_INVALID for a bad slot, layer or selection. */
    int (*meter_add)(void *user, int layer, const int32_t *slots, const int32_t *n_tokens,
                     const int32_t *sel_idx, const int32_t *sel_count, int batch);
    void (*meter_stats)(const void *user, int layer, struct query_meter_stats *out);

    /* Frees everything, qs included. */
    void (*free)(struct query_source *qs);
};

/* Frees qs through its implementation; NULL is fine. */
static inline void query_source_free(struct query_source *qs)
{
    if (qs) qs->free(qs);
}

#endif
