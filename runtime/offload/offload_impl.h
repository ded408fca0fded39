/* The offload runtime's private state (offload.c: create, admission, prompt KV; offload_layer.c:
 * the per-layer select / recall / attend; offload_json.c: counters). Not the interface. */
#ifndef PULSE_OFFLOAD_IMPL_H
#define PULSE_OFFLOAD_IMPL_H

#include <stdatomic.h>

#include "host_pool.h"
#include "hot_cache.h"
#include "hot_plan.h"
#include "offload.h"
#include "offload_kernels.h"
#include "query_source.h"
#include "recall_fault.h"
#include "select.h"

/* The selection kernels of the backend (the _ref or the _cuda ones of select.h). */
struct offload_sel_fns {
    void (*hot_plan)(const struct hot_plan_params *, const struct hot_plan_state *,
                     const struct hot_plan_in *, const struct hot_plan_out *, void *);
    void (*hot_plan_reset)(const struct hot_plan_params *, const struct hot_plan_state *, int, int,
                           void *);
    void (*hot_plan_init)(const struct hot_plan_params *, const struct hot_plan_state *, void *);
    void (*build)(const struct offload_build_args *, void *);
    /* offload_plan_build_{ref,cuda}: a layer's plan and build, or two layers' in one launch */
    void (*plan_build)(const struct hot_plan_params *, const struct hot_plan_state *,
                       const struct offload_plan_job *, int, void *);
    void (*gather)(const struct recall_desc *, int, int, int, int, void *);
    void (*scatter)(const struct recall_desc *, int, void *); /* recall_scatter_{ref,cuda} */
    void (*digest_update)(const struct kctx *, const struct kv_view *, const struct digest_view *,
                          const int32_t *, int, int);
    /* select_blocks_multi_{ref,cuda}: one selection or two in one launch */
    void (*select_multi)(const struct kctx *, const struct select_job *, int, const int32_t *, int);
    void (*approx_q)(const struct kctx *, const struct approx_q_weights *, const float *,
                     const int32_t *, void *, uint16_t *, int, int, int, int, const float *, float);
};

/* What the planner needs of a step: its entries' cache slots and attended lengths. */
struct offload_step_state {
    int n;
    int64_t step;
    int32_t *slot, *n_tok; /* [max_batch] */
};

/* The store (offload.c): where an offload request's KV lives and how it gets to the GPU. The
 * cache's pages and the placement of every layer, the pinned host pool, the digest store, the
 * hot cache (on the host, or on the device for the device-driven path), the recall engine,
 * and what admission writes the prompt's KV with. Per cache slot; shared by every step. */
struct offload_store {
    struct kv_cache *kv;       /* the engine's cache (not owned) */
    struct kv_cache_params kp; /* its shape (budget and slots aside) */
    char *gpu_pool;            /* the cache's page pool (backend memory) */
    struct kv_layer_map maps[OFFLOAD_MAX_LAYERS]; /* an offload admission's (kv_cache.h) */
    struct kv_cache *dg; /* digest store: one-token pages of dig_heads x [min, max] x head_dim */
    struct host_pool *hp;
    struct recall *rc;
    struct recall_fault fault; /* PULSE_RECALL_FAULT: the engine's copy path, faults injected */
    int faulty;
    struct hot_cache *hc;
    /* per cache slot */
    int32_t *hp_slot, *dg_slot, *req_id; /* [max_batch]; -1 when the slot is not ours */
    int32_t *first_tok;                  /* [max_batch] offload_first_token */
    int32_t *last_nb;                    /* [max_batch][n_sparse] blocks at the last step */
    /* the device-driven path's hot cache (hot_plan.h) and what its plans address */
    struct hot_plan_params hpp;
    struct hot_plan_state hps; /* device memory */
    void *d_hp, *h_hp;         /* the state, and a host mirror for offload_verify */
    size_t hp_bytes;
    int32_t *d_own;    /* [max_batch][n_sparse][hot_slots + 1] owned GPU pages */
    int32_t *d_hids;   /* [max_batch][n_sparse][max_blocks] host block ids */
    uint64_t host_dev; /* device address of the host pool */
    /* admission: the prefill (OFFLOAD_KV_PREFILL) */
    struct kv_cache *pf_kv; /* staging cache of one request */
    struct prefill *pf;     /* its prefill (own batch) */
    int pf_slot;            /* the staging slot during an admission */
    /* admission scratch (host) */
    int32_t *ids, *ident; /* [max_blocks] host block ids; 0, 1, 2, ... */
    uint16_t *stage_kv;   /* [max_blocks] GPU pages of one layer */
    uint16_t *stage_dg;   /* [max_blocks] digest pages of one layer */
    char *check_page;     /* one GPU page read back by offload_verify */
    /* admission on the device (cuda; locality or synthetic prompt KV): offload.c */
    uint16_t *d_stage; /* [max_blocks] device pages of one sparse layer */
    int32_t *d_fill;   /* [FILL_ARGS + n_layers] the admission's arguments, then [max_blocks]
                          0, 1, 2, ... */
    void *fmem;        /* the device allocation of both */
    size_t fmem_bytes;
};

/* A lane of a step (offload_step_split): entries [first, first + n) of the step's batch, which
 * run their layers in order on their own lists, control blocks, flags and events (the buffers,
 * fixed at create; lane 1's only with offload_params.lanes 2), beside the other lane's. */
struct offload_lane {
    int first, n;                     /* the step's entries it runs */
    int next_layer, issued, pre_done; /* its progress (saved while the other lane runs) */
    uint32_t *flags;                  /* [n_sparse] */
    int32_t *h_sel, *d_sel, *h_ctl;   /* as offload_step's */
    int32_t *d_ctl[2];
    void **ev_sel, **ev_selected; /* [2][n_sparse], [n_sparse] */
    int64_t sel_step[OFFLOAD_MAX_LAYERS];
    /* a prefetching schedule's prediction (lane 1's only with two lanes) */
    int32_t *h_sel_spec, *d_sel_spec;
    void **ev_spec_sel, **ev_spec_selected;
    int64_t spec_step[OFFLOAD_MAX_LAYERS];
    /* the device path's (zero-copy): descriptors by the layer's parity (a prediction's too), and
     * per sparse layer its plan built and its gather done (device_overlap), a prediction's plan
     * built and its gather done */
    struct recall_desc *d_desc[2], *d_desc_spec[2];
    void **ev_built, **ev_gathered, **ev_spec_built, **ev_spec_gathered;
};

/* The step (offload_layer.c; main thread): what one decode step of the batch and its layers'
 * pieces use. Fields marked (lane) are the running lane's (offload_lane_use swaps them); the
 * planner reads a job's lane's buffers from lanes[], never those. A step of parity p = steps & 1
 * uses the p-th copy of every buffer a later step could overwrite while the planner or the device
 * still reads it. */
struct offload_step {
    int n;             /* (lane) entries of the running lane (the step's, unsplit) */
    int n_step, first; /* the step's entries; the running lane's first */
    int lane, n_lanes; /* the running lane; lanes of this step (1, or 2 after a split) */
    struct offload_lane lanes[2];
    struct offload_step_state ss[2];
    int32_t *h_up[2];    /* pinned, by parity: [max_batch] pos, [n_sparse][max_batch] digest row
                            starts, then (bf16) [n_sparse][n][nq][hd] selection queries of the step's n entries */
    int32_t *d_up;       /* backend copy of the step's h_up */
    uint16_t *d_q;       /* inside d_up: the queries */
    void *ev_up[2];      /* the upload of h_up[p] has been read */
    uint16_t *q_next;    /* [max_batch][n_sparse][nq][hd] the next step's, made in advance */
    uint16_t *q_spec_next; /* [max_batch][n_sparse][nq][hd] beside q_next (spec_q_up) */
    uint8_t *q_ready;    /* [max_batch][n_sparse] q_next holds the slot's next query */
    uint32_t seq;        /* the step's signal value (steps + 1) */
    int64_t jobs_end[2]; /* planner jobs posted by the end of the last step of that parity */
    int att_max_tokens;  /* bounds every attended length of the step (min(ms * ps, max reserved)) */
    int att_max_spec;    /* and of a prediction's lists (a margin widens them: spec_from hits) */
    /* the real query one layer ahead (query real, lookahead): the approximate query of the
     * layer being selected, from the input of the layer running (backend memory) */
    uint16_t *d_aq;
    void *aq_ws; /* the approximate query's workspace */

    /* per sparse layer, by parity (pinned where the device reads or writes them) */
    int32_t *h_sel;  /* [2][n_sparse x sel_ints]: the step's layers' lists and counts, packed
                        (offload_sel; async download) */
    int32_t *h_ctl;  /* [2][n_sparse][ctl_ints] the planner's control block (att lengths
                        [V], att pages [V][ms], tail-flush descriptors [max_batch][n_lists]) */
    uint32_t *flags; /* [n_sparse] the layer's recall and control block are in place */
    void **ev_sel;   /* [2][n_sparse] the lists are on the host */
    void **ev_selected; /* [n_sparse] the layer's lists are made (compute stream) */
    void *ev_lists;     /* the step's last lists download is done (side stream) */
    struct kctx sctx;   /* the lists' downloads, on a stream of their own: the compute stream
                           never waits for a copy to the host inside a step */
    float *d_scores;      /* [max_batch][n_lists][max_blocks] */
    /* the scores of a selection of the layer ahead made beside the one at the layer: on the
     * prediction's stream (predict_fork) or in one launch with it (select_joint) */
    float *d_scores_ahead;
    /* select_joint: the running piece's selection made but not launched yet, waiting for the
     * piece's second one (its layer + 1, 0 for none; whether a prediction; its query) */
    int pend_layer1, pend_spec;
    const uint16_t *pend_q;
    /* predict_fork: the prediction's stream, its plan scratch (it runs beside the compute
     * stream's selection; plan_fused with select_joint: the second plan of a fused launch), the
     * events of its fork and join, and whether the running piece has forked */
    struct kctx pctx;
    struct hot_plan_out po_fork;
    struct kctx cctx; /* correct_stream: the corrections' gathers */
    void *ev_fork, *ev_join;
    int forked;
    int32_t *d_sel;       /* [n_sparse] per layer: [n][n_lists][ms] lists, then [n][n_lists]
                             counts, packed at offload_sel_len(n) */
    int32_t *d_ctl[2];    /* sparse layer sl's control block in d_ctl[sl & 1]: with lookahead
                             layer sl + 1's is built before sl's attention reads sl's */
    int32_t *d_att_start; /* [V] v * ms (constant) */
    struct floor_traffic traffic[2]; /* by parity: the step's bytes (main thread: weights,
                                        dense KV, digests; the planner: sparse KV, recall) */
    int next_layer; /* the layer a step issues or finishes next; -1 between steps */
    int issued;     /* next_layer has been issued (offload_layer_issue) */
    int pre_done;   /* next_layer's pre-attention has been queued (offload_pre) */
    /* per layer, the sparse layers its piece selected, in order (offload_select), and the one
     * it prefetched (offload_prefetch; -1: none), and how many of them it selected in one
     * launch (select_joint: 0 or 2): the device path queues their side work, and counts them,
     * after the piece, whose graph replays without running it */
    int16_t piece_sel[OFFLOAD_MAX_LAYERS][2];
    int8_t piece_nsel[OFFLOAD_MAX_LAYERS];
    int8_t piece_joint[OFFLOAD_MAX_LAYERS];
    int16_t piece_pf[OFFLOAD_MAX_LAYERS];
    int64_t sel_step[OFFLOAD_MAX_LAYERS];  /* (lane) per layer, the step that selected it last */
    int64_t spec_step[OFFLOAD_MAX_LAYERS]; /* (lane) per layer, the step that prefetched it last */

    /* A prefetching schedule (offload_schedule.prefetch): per sparse layer a second set of
     * lists (the prediction's), by parity on the host as h_sel; the device path's plan of them
     * into descriptors of their own (by the layer's parity) and a scratch control block. The
     * planner's PREFETCH job recalls their misses with no flag: it waits for that recall before
     * its next job, so the exact selection's plan sees the prefetched blocks landed. */
    int32_t *h_sel_spec;     /* (lane) [2][n_sparse x sel_ints] */
    int32_t *d_sel_spec;     /* (lane) [n_sparse] per layer, packed as d_sel */
    void **ev_spec_sel;      /* (lane) [2][n_sparse] the prediction's lists are on the host */
    void **ev_spec_selected; /* (lane) [n_sparse] made */
    void **ev_spec_built;    /* (lane) [n_sparse] planned (device path) */
    void **ev_spec_gathered; /* (lane) [n_sparse] its gather done (device_overlap) */
    struct recall_desc *d_desc_spec[2]; /* (lane) */
    /* the device build's control block of a prediction: its lists' pages, read by the
     * attention over them that spec_from hits predicts the next layer from (hits_body) */
    int32_t *d_ctl_spec;
    /* spec_from hits: that attention's output [max_batch][nq x hd], the residual it gives
     * [max_batch][hidden] (floats), and while a prediction is made from it, the residual the
     * real query's approximation reads (NULL: the batch's) */
    uint16_t *d_hits_attn;
    float *d_hits_x;
    const float *spec_resid;
    /* spec_from hits with spec_correct_early (one lane): per sparse layer, the gate its
     * correction's gather waits behind (open between steps), and the step whose correction
     * was queued at the exact plan (offload_layer_issue) */
    uint32_t *d_gate;
    int64_t early_corr_step[OFFLOAD_MAX_LAYERS];
    int32_t *d_zero;     /* [max_batch] zeros: no new tail (a prefetch took it) */

    /* The device-driven path (engine zero-copy): the selection's lists feed hot_plan on the
     * device, offload_build turns its plan into descriptors and page lists, the zero-copy
     * gather reads the host pool; the host sees the lists only for the meter (JOB_METER) and
     * the per-layer totals once a step (JOB_STEP). */
    struct hot_plan_out po;        /* device: the layer's plan */
    int64_t *d_totals;             /* [2][n_sparse][OFFLOAD_TOTALS] hot_plan totals, then att
                                      tokens and refused lists (offload_build); the exact
                                      selections', then the predictions' */
    int64_t *h_totals[2];          /* pinned copies, by parity */
    void *ev_end[2];               /* the step's totals are on the host */
    struct recall_desc *d_desc[2]; /* (lane) [V][ms] sparse layer sl's recall in d_desc[sl & 1] */
    /* device_overlap: the gather's context (its own stream), and per sparse layer the events
     * after the layer's plan (the gather waits for it) and after its gather (the attention
     * waits for it; offload_layer_ready queries it) */
    struct kctx gctx;
    void **ev_built, **ev_gathered; /* (lane) */
    /* the device path's layer graphs (offload_layer.c, layer_graph): [3][n_layers][3], the
     * unsplit step's, then a split step's lane 0 and lane 1 (each over its view of the batch),
     * valid for lg_bt's lg_n entries whose longest reservation is lg_len (the attention's split
     * plans; a split's lanes follow from lg_n) */
    void **lgraph;
    /* plan_fused: layers the fused kernel plans in each layer graph (counted at its capture,
     * added at each replay), and in the piece running now */
    int *lg_fused;
    int piece_fused;
    const struct batch *lg_bt;
    int lg_n, lg_len;
};

/* The planner's (offload_plan.c) working state besides its thread: the recall items of a job,
 * the hot cache's answer, the device totals it last saw, the step whose prefetch it ran last
 * per sparse layer, and its time per phase. */
struct offload_planning {
    struct timeline *tl; /* optional: the planner's recall rounds as host spans (timeline.h) */
    struct recall_item *items;
    struct hot_cache_result res;
    int64_t *prev_totals;  /* [2][n_sparse][OFFLOAD_TOTALS] the planner's last seen */
    int64_t *pl_spec_step; /* [lanes][n_sparse]: per lane */
    double planner_phase_s[OFFLOAD_PLANNER_PHASES];
};

struct offload {
    struct offload_params p;
    struct engine *eng;
    const struct backend *be;
    const struct kctx *ctx;
    const struct model_config *mc;
    struct offload_sel_fns fn;
    struct query_source *qs; /* queries, prompt keys, meter (the params', not owned) */
    /* the shape */
    struct select_cfg cfg;      /* max_blocks = the cache's row width */
    struct select_cfg cfg_spec; /* a prefetch's: cfg with spec_margin's wider budget; both
                                   lists' stride is ms (list_stride) */
    int n_layers, n_dense, n_sparse, n_lists, ms, hot_slots, dig_heads, all_selected, headwise;
    uint8_t kind[OFFLOAD_MAX_LAYERS];     /* enum offload_layer_kind of every layer */
    int16_t sl_of[OFFLOAD_MAX_LAYERS];    /* a layer's sparse index, -1 for a dense or window one */
    int16_t layer_of[OFFLOAD_MAX_LAYERS]; /* [n_sparse] the layer of a sparse index */
    int n_full, n_window;                 /* dense layers; window layers, and their windows: */
    int32_t windows[OFFLOAD_MAX_LAYERS];  /* what a step's floor charges them (tokens read) */
    int nq, nkv, hd, ps, G, max_blocks, max_batch, max_items;
    size_t page_bytes, head_bytes, dpage_bytes; /* GPU page, one head's piece, digest page */
    int32_t sel_head[OFFLOAD_MAX_LAYERS]; /* SELECT_HEADWISE, or the layer's SoloHead KV head */
    size_t sel_ints, ctl_ints;
    /* the modes: the device-driven path (zero-copy: planned on the device), its gather on a
     * stream of its own (device_overlap or a lookahead schedule), the device path's layers as
     * graphs (offload_params.layer_graphs), a prefetching schedule, and whether the step
     * upload carries the locality query's approximate queries ([n_sparse][n][nq][hd] after the
     * exact ones, made beside them) */
    int device_plan, overlap, layer_graphs, spec, spec_q_up;
    int fork; /* offload_params.predict_fork in effect (the device path, overlap, lookahead,
                 spec_from input) */
    int joint;   /* offload_params.select_joint in effect (a schedule that selects ahead) */
    int fused;   /* offload_params.plan_fused in effect (the device plan) */
    int att_recall; /* offload_params.attend_recall in effect: some layer's attention recalls
                       (offload_attend_recalls) */
    int cstream;    /* offload_params.correct_stream in effect (overlap, prefetching, spec_from
                       input, the corrections gathered: not att_recall) */

    struct offload_store store;
    struct offload_step step;
    struct offload_planner *pl; /* the planner thread (offload_plan.c) */
    struct offload_planning plan;

    /* counters */
    struct offload_layer_stats *ls; /* [n_layers] */
    struct offload_stats st;
    int64_t *series;            /* [max_steps] recall bytes per step */
    _Atomic int status;         /* first failure of a step (the planner sets it) */
    int64_t step_syncs;         /* host synchronisations of the last step (main thread) */
    int64_t host_syncs;         /* summed over steps */
    double stage_s, prefetch_s; /* host time staging the steps' uploads and making the
                                   next steps' queries (prefetch_q), summed */
    double host_phase_s[OFFLOAD_HOST_PHASES]; /* host time queuing the layers' pieces */

    /* allocations: host, pinned, backend; the approximate query's; the negated norms
     * (OFFLOAD_SPEC_NEGATED with the real query: [n_layers][hidden] every layer's input norm
     * weight negated, so its approximate query is the negated one) */
    void *hmem, *pin, *dmem, *aq_mem;
    size_t hmem_bytes, pin_bytes, dmem_bytes, aq_bytes;
    uint16_t *d_negnorm;
};

/* The planner thread (offload_plan.c): it takes a sparse layer's job once the layer's lists
 * are on the host (ev_sel), feeds the source's meter, plans the hot cache, writes the control
 * block, submits the recall with the layer's flag as its signal (or sets the flag when nothing
 * is missing), and waits for the recall itself (retrying a failed one) so the main thread never
 * does. JOB_PLAN does all of that; JOB_METER only the meter (the device path); JOB_STEP the
 * device path's per-layer totals once a step (ev_end). */
enum {
    OFFLOAD_JOB_PLAN = 1,
    OFFLOAD_JOB_METER = 2,
    OFFLOAD_JOB_STEP = 3,
    OFFLOAD_JOB_PREFETCH = 4
};
/* Where the host's time queuing a step's layers goes (offload_stats.host_phase_s). */
enum { OFFLOAD_HOST_PRE, OFFLOAD_HOST_SELECT, OFFLOAD_HOST_PLAN, OFFLOAD_HOST_ATTEND,
       OFFLOAD_HOST_POST };
/* The planner's phases (offload_stats.planner_phase_s). */
enum { OFFLOAD_PLANNER_LISTS, OFFLOAD_PLANNER_PLAN, OFFLOAD_PLANNER_RECALL, OFFLOAD_PLANNER_METER };
/* Adds the time since *t to phases[ph] and restarts *t. */
static inline void offload_lap(double *phases, int ph, double *t)
{
    const double now = pulse_now();
    phases[ph] += now - *t;
    *t = now;
}
/* Adds the time since *t to phase ph of the host's queuing time and restarts *t. */
static inline void offload_host_lap(struct offload *o, int ph, double *t)
{
    offload_lap(o->host_phase_s, ph, t);
}

/* Per-layer device totals: hot_plan's four, then attended tokens, refused lists and lists
 * whose correction was held by the gate (offload_kernels.h). */
enum { OFFLOAD_TOT_ATT = 4, OFFLOAD_TOT_REFUSED = 5, OFFLOAD_TOT_HELD = 6, OFFLOAD_TOTALS = 7 };
int offload_planner_start(struct offload *o);
void offload_planner_stop(struct offload *o);
/* Posts a job of step `step` (its parity's state) for `layer` of the running lane (its entries:
 * the job holds them); returns at once unless the job ring is full (then waits, a noted host
 * synchronisation). */
void offload_planner_post(struct offload *o, int kind, int layer, int64_t step);
/* Jobs posted so far; blocks until the planner has done the first `jobs` of them (returns 1
 * when it had to wait). */
int64_t offload_planner_posted(const struct offload *o);
int offload_planner_wait(const struct offload *o, int64_t jobs);

/* Waits until the planner has done every job posted (outside steps: admission, release,
 * counters, checks): a host synchronisation when it has to wait (inside a step the counters
 * show it). */
static inline void offload_quiesce(const struct offload *o)
{
    if (o->pl && offload_planner_wait(o, offload_planner_posted(o))) pulse_host_sync_note();
}

/* Points the step at lane 0's buffers, the whole batch one lane (offload_create). */
void offload_lane_reset(struct offload *o);

/* Starts the CPU pool's threads that prefetch_q uses, at create, so that no step starts them
 * (offload_layer.c). */
void offload_prefetch_warm(const struct offload *o);
/* Frees the device path's layer graphs (offload_layer.c). */
/* The layer graphs' sets (offload_step.lgraph): the unsplit step's and each lane's of a split
 * step */
#define OFFLOAD_LGRAPH_SETS 3
/* and each set's pieces per layer: the first, the attention over the predicted lists (spec_from
 * hits), the rest */
#define OFFLOAD_LGRAPH_PIECES 3
void offload_layer_graphs_drop(struct offload *o);
/* Bytes of the step upload, and its ints before the queries (offload_layer.c). */
size_t offload_up_bytes(const struct offload *o);
size_t offload_up_ints(const struct offload *o);

/* Control block of parity p and sparse layer sl (host) of the running lane (main thread), and
 * of lane `lane` (the planner). */
static inline int32_t *offload_ctl(const struct offload *o, int p, int sl)
{
    return o->step.h_ctl + ((size_t)p * o->n_sparse + sl) * o->ctl_ints;
}
static inline int32_t *offload_lane_ctl(const struct offload *o, int lane, int p, int sl)
{
    return o->step.lanes[lane].h_ctl + ((size_t)p * o->n_sparse + sl) * o->ctl_ints;
}
/* Ints of one sparse layer's lists ([n][n_lists][ms]) and counts ([n][n_lists]) in a step of n
 * entries: one copy brings them down; the step's layers lie packed at this stride, on the
 * device (d_sel: each layer's own, so its download may run behind the next layers) and on the
 * host (h_sel). */
static inline size_t offload_sel_len(const struct offload *o, int n)
{
    return (size_t)n * o->n_lists * (o->ms + 1);
}
/* Lists of parity p and sparse layer sl in a step of n entries (host), and on the device. */
static inline int32_t *offload_sel(const struct offload *o, int p, int sl, int n)
{
    return o->step.h_sel + (size_t)p * o->n_sparse * o->sel_ints +
           (size_t)sl * offload_sel_len(o, n);
}
static inline int32_t *offload_lane_sel(const struct offload *o, int lane, int p, int sl, int n)
{
    return o->step.lanes[lane].h_sel + (size_t)p * o->n_sparse * o->sel_ints +
           (size_t)sl * offload_sel_len(o, n);
}
static inline int32_t *offload_dsel(const struct offload *o, int sl, int n)
{
    return o->step.d_sel + (size_t)sl * offload_sel_len(o, n);
}
/* The same of the prediction's lists (a prefetching schedule): the running lane's, and lane
 * `lane`'s (the planner). */
static inline int32_t *offload_spec_sel(const struct offload *o, int p, int sl, int n)
{
    return o->step.h_sel_spec + (size_t)p * o->n_sparse * o->sel_ints +
           (size_t)sl * offload_sel_len(o, n);
}
static inline int32_t *offload_lane_spec_sel(const struct offload *o, int lane, int p, int sl,
                                             int n)
{
    return o->step.lanes[lane].h_sel_spec + (size_t)p * o->n_sparse * o->sel_ints +
           (size_t)sl * offload_sel_len(o, n);
}
/* The planner's record of the step whose prediction of sparse layer sl it recalled last, for
 * lane `lane`. */
static inline int64_t *offload_pl_spec_step(const struct offload *o, int lane, int sl)
{
    return &o->plan.pl_spec_step[(size_t)lane * o->n_sparse + sl];
}
static inline int32_t *offload_spec_dsel(const struct offload *o, int sl, int n)
{
    return o->step.d_sel_spec + (size_t)sl * offload_sel_len(o, n);
}
/* A control block (int32 units): the attention's lengths [V], its page ids [V][ms], the host
 * pieces of an attention that recalls [V][ms] (kv_view.host_ids), then (32-byte aligned) the
 * tail-flush descriptors. */
static inline size_t offload_ctl_host_off(const struct offload *o)
{
    const size_t V = (size_t)o->max_batch * o->n_lists;
    return V * (1 + (size_t)o->ms);
}
static inline size_t offload_ctl_desc_off(const struct offload *o)
{
    const size_t V = (size_t)o->max_batch * o->n_lists;
    return (V * (1 + 2 * (size_t)o->ms) + 7) / 8 * 8;
}

/* Whether sparse layer `layer`'s attention recalls its misses (offload_params.attend_recall, in
 * effect: o->att_recall): the device plan's layers selected at their own layer. */
static inline int offload_attend_recalls(const struct offload *o, int layer)
{
    return o->att_recall && o->sl_of[layer] >= 0;
}

/* Sparse layer index of a layer, -1 when it is not sparse (dense or sliding-window). */
static inline int offload_sl(const struct offload *o, int layer)
{
    return o->sl_of[layer];
}

static inline int offload_is_sparse(const struct offload *o, int layer)
{
    return o->sl_of[layer] >= 0;
}

/* The hot-cache unit of (cache slot, sparse layer, list). */
static inline int offload_unit(const struct offload *o, int slot, int sl, int list)
{
    return (slot * o->n_sparse + sl) * o->n_lists + list;
}

/* Bytes of one recalled chunk: one KV head of a block (head-wise) or the whole block. */
static inline size_t offload_chunk_bytes(const struct offload *o)
{
    return o->headwise ? o->head_bytes : o->page_bytes;
}

/* GPU memory of list k's piece of page `page`: head k of it (head-wise) or all of it. */
static inline char *offload_gpu_piece(const struct offload *o, int32_t page, int k)
{
    char *p = o->store.gpu_pool + (size_t)page * o->page_bytes;
    return o->headwise ? p + (size_t)k * o->head_bytes : p;
}

/* Its id in the attention's view: head-wise views have one KV head per page, so head k of
 * page p is page p * nkv + k (kernels.h: a head's K and V are contiguous inside a page). */
static inline int32_t offload_att_page(const struct offload *o, int32_t page, int k)
{
    return o->headwise ? page * o->nkv + k : page;
}

static inline const void *offload_host_chunk(const struct offload *o, int hslot, int sl, int block,
                                             int k)
{
    return o->headwise ? host_pool_head(o->store.hp, hslot, sl, block, k)
                       : host_pool_block(o->store.hp, hslot, sl, block);
}

#endif
