/* Sparse KV offloading in the serving loop (DESIGN.md sections 4-7): what the offload policies
 * (arkvale, infinigen) work on. The caller creates it beside the engine and the KV cache, hands it
 * to serve_run_policy, and reads its counters afterwards.
 *
 * Placement of one offload request (kv_cache_admit_mapped), by layer kind (offload_layer_kind):
 *   dense layers   [0, n_dense): the whole KV in the GPU cache, dense attention (engine's).
 *   window layers  a sliding-window layer (model_layer_window > 0), wherever it is: its window
 *                  in a ring of ceil(window / page_size) + 1 GPU pages (KV_MAP_RING; the
 *                  appends overwrite blocks that left the window), the engine's attention.
 *   sparse layers  every other layer: the prompt's KV lives in the pinned host pool (host_pool.h,
 * one row per sparse layer). The GPU holds per (request, layer) hot_slots + 1 pages: the hot-cache
 * slots (hot_cache.h, LRU; head-wise: one unit per KV head, head h of slot s is the head-h piece of
 * page s) and the tail page T. Every token block of the layer's page-table row maps to T, so the
 * engine appends each new token into T; when the tail block fills, T is copied into the tail's slot
 *                  and into the host pool. GPU KV per request is bounded by
 *                  n_sparse * (hot_slots + 1) pages, whatever its length.
 *   digests        Quest min/max per block (select.h) in a GPU digest store (a kv_cache with
 *                  one-token pages, one layer per sparse layer), built at admission from the
 *                  prompt keys and folded per decode token (digest_update).
 *
 * Keys and values: from the query source (query_source.h, the locality model's: keys, V as
 * kv_fill_synthetic) or, with prompt_kv = OFFLOAD_KV_SYNTHETIC, exactly kv_fill_synthetic's (the
 * vanilla policy's prompt KV, for equality tests) or, with OFFLOAD_KV_PREFILL, from a real
 * prefill (prefill.h: the request's deterministic prompt ids, or real ones given through
 * offload_set_prompts, through engine_prefill with the model's weights) into a staging cache of
 * full-length GPU pages for one request (every layer, max_tokens long: one whole request's KV
 * beside the cache, allocated at create); admission then copies each dense layer's pages into the
 * request's own pages (a window layer's last blocks into its ring) and each sparse layer's pages
 * into the host pool (its digests from those keys, its last block into the tail page), and the
 * first decoded token is the prefill's greedy next token (offload_first_token).
 *
 * The primitives of a step (offload_layer.c), all queued on the compute stream by the thread
 * that calls them, which never waits for the device; the policy's schedule (struct
 * offload_schedule) orders pre-attention and selections inside each layer's first piece:
 *   pre       the layer's pre-attention piece (engine.h) and, in a sparse layer, its new key
 *             folded into its digest;
 *   select    a sparse layer's selection (select_blocks_multi_{ref,cuda}, one job or a piece's
 *             two: head-wise, SoloHead or mean)
 *             on its source query (made during the previous step and uploaded with the step's
 *             one asynchronous copy; with the real query, OFFLOAD_QUERY_REAL, the layer's own q
 *             after its pre, or one layer ahead its approximate query from the input of the
 *             layer running), the lists' download into pinned memory and an event; the planner
 *             thread (offload_plan.c) takes the layer once its lists are on the host: the
 *             source's meter, hot-cache lookup, the layer's control block (attended pages in
 *             token order, lengths, tail-flush descriptors), and the misses submitted to the
 *             recall engine (recall.h) with the layer's flag as the recall's signal (zero-copy:
 *             planned and gathered on the device);
 *   ready     whether a layer's recall is in place, without blocking;
 *   finish    the compute stream waits for the flag (backend wait_value: on the device, or
 *             with offload_params.host_wait the queueing thread waits on the host),
 *             uploads the control block, runs attention with the model's real q over the
 *             selected pages (head-wise as one virtual entry per KV head), flushes filled tails
 *             (tail page into its slot, and into the host pool), and the post-attention piece.
 * Selecting layer l + 1 in layer l's piece (InfiniGen's schedule) makes the same selections
 * as at layer l + 1 (the same query streams; the digest update of layer l + 1 it runs before
 * touches only the always-attended tail block), its recall overlapping layer l. The source's
 * meter sees the same lists and a hot cache of the same size, so its churn and recall numbers
 * are the runtime's.
 * Host synchronisations made inside offload_step are counted (offload_stats.host_syncs).
 *
 * Digests of tokens the model generates come from its real keys (the prompt's from the source's
 * keys). The per-layer selection queries of the next step are made on the CPU while the GPU
 * runs this one (not with the real query, which needs none). Nothing allocates after create. One
 * thread drives it (plus its planner). */
#ifndef PULSE_OFFLOAD_H
#define PULSE_OFFLOAD_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "floor.h"
#include "kv_cache.h"
#include "prefill.h"
#include "query_source.h"
#include "recall.h"

#define OFFLOAD_MAX_LAYERS QUERY_SOURCE_MAX_LAYERS

/* Block selection (DESIGN section 5): head-wise (one list per KV head, per-head recall pieces),
 * SoloHead (the selector head's list serves every head) or mean (ArkVale's page list: one list
 * per request from the scores of every head, digests of every head kept). The last two recall
 * whole token-wise blocks. */
enum offload_selection { OFFLOAD_HEADWISE = 0, OFFLOAD_SOLOHEAD = 1, OFFLOAD_MEAN = 2 };
/* Its name in commands and JSON ("headwise", "solohead", "mean"); and back (-1: none). */
const char *offload_selection_name(int selection);
int offload_selection_find(const char *name);
#define OFFLOAD_HOST_PHASES 5
#define OFFLOAD_PLANNER_PHASES 4
enum offload_prompt_kv {
    OFFLOAD_KV_LOCALITY = 0,
    OFFLOAD_KV_SYNTHETIC = 1,
    OFFLOAD_KV_PREFILL = 2
};

/* Where a sparse layer's selection query comes from. */
enum offload_query {
    OFFLOAD_QUERY_LOCALITY = 0, /* the query source's streams (throughput runs: the locality
                                   model sets the churn, query_source.h) */
    OFFLOAD_QUERY_REAL = 1      /* the model's own query (accuracy runs through the serving
                                   path; needs the prefill's real prompt KV): the layer's q after
                                   its pre-attention piece, or with lookahead InfiniGen's
                                   approximate query of the layer from the previous layer's
                                   input (select.h, every hidden channel) */
};

struct offload;
struct batch;

/* A policy's layer schedule (its policy's file in baselines/, DESIGN section 7): the first piece
 * of every layer of a step (offload_layer_issue) as that policy orders it over offload_pre and
 * offload_select. The runtime offers those primitives and holds no policy's order of them. */
struct offload_schedule {
    const char *name; /* in the config JSON */
    int lookahead;    /* 1: layer l's piece may select layer l + 1 (the runtime readies the
                         approximate query of the real one, and runs zero-copy's gather beside
                         the compute stream); 0: a layer's piece selects that layer only */
    void (*layer)(struct offload *o, struct batch *bt, int layer);
    int prefetch; /* 1: its pieces prefetch the next layer (offload_prefetch; needs lookahead):
                     the runtime keeps a second set of lists per layer for it */
};

/* A prefetching schedule's hot cache by default: the blocks one step selects and this share
 * more, for what a prediction brings (offload.c, hot_slots_of) */
#define OFFLOAD_SPEC_RESERVE 0.25

/* The approximate query a prefetch (and a lookahead selection) selects with. */
enum offload_spec_predictor {
    OFFLOAD_SPEC_APPROX = 0, /* InfiniGen's approximate query with the real query; with the
                                locality query the source's spec_q (its misprediction model),
                                or the step's own query when it has none */
    OFFLOAD_SPEC_NEGATED = 1 /* tests: that query negated, a deliberately poor predictor (it
                                ranks the blocks nearly in reverse) */
};

/* offload_params.spec_from */
enum offload_spec_from {
    OFFLOAD_SPEC_FROM_INPUT = 0, /* in layer l's first piece, from its input (InfiniGen's): the
                                    recall beside the whole layer */
    OFFLOAD_SPEC_FROM_MID = 1,   /* in layer l's second piece, once its attention output is in
                                    the residual, before its MLP: the real query's approximation
                                    misses only the MLP's update, and the recall overlaps the
                                    MLP (with the locality query only the timing moves; the
                                    misprediction is the source's model) */
    OFFLOAD_SPEC_FROM_HITS = 2   /* where layer l was itself predicted (else from mid-layer): as
                                    soon as its prefetch has landed, from the residual of an
                                    attention over its predicted lists (all resident then), before
                                    its correction lands; its correction waits for that attention
                                    only, and layer l+1's prefetch follows it on the link with no
                                    gap for l's exact attention and post-attention (the device
                                    path, one lane) */
};
/* Its name in commands and JSON ("input", "mid", "hits"). */
const char *offload_spec_from_name(int spec_from);

struct offload_params {
    int budget_tokens;         /* selected by score besides the forced blocks (multiple of the
                                  page size, >= 0; default 2048) */
    int sink, window;          /* forced blocks (default 1 and 2) */
    int n_dense;               /* leading dense layers (default 2); sliding-window layers are
                                  window layers wherever they are (offload_layer_kind) */
    int selection;             /* enum offload_selection (default head-wise) */
    const int32_t *selector;   /* SoloHead: [n_layers] KV head per layer; NULL = head 0 */
    int hot_slots;             /* slots per hot-cache unit; 0 = the blocks one step selects
                                  (with a prefetching schedule, OFFLOAD_SPEC_RESERVE more) */
    int hot_slots_auto;        /* informational: hot_slots was sized to fill the GPU KV budget
                                  with this many offload requests (0: not sized so) */
    enum recall_engine engine; /* default per-block */
    double cap_gbps;           /* recall bandwidth cap, 0 = none */
    const struct recall_copy_ops *recall_ops; /* the recall engine's copy path; NULL = the
                                                 backend's (tests wrap it to inject failures) */
    size_t host_pool_bytes;      /* pinned host pool; 0 = max_batch requests of max_tokens */
    int prompt_kv;               /* enum offload_prompt_kv (default locality: the source's) */
    int query;                   /* enum offload_query (default locality) */
    struct query_source *source; /* queries, prompt keys and meter (query_source.h), made for
                                    offload_source_shape of these params; required by
                                    offload_create unless the query is real (then NULL runs
                                    without a meter), not owned */
    int prefill_chunk;           /* --prompt-kv prefill: tokens per prefill pass (<= the
                                    engine's max_batch, checked at create); 0 = max_batch */
    uint64_t seed;               /* the engine's seed (V and synthetic K are functions of it) */
    int max_batch, max_tokens;   /* as the engine's and the cache's */
    int64_t max_steps;           /* capacity of the per-step series (later steps are not kept) */
    const struct offload_schedule *schedule; /* the policy's layer schedule (required) */
    int device_overlap; /* zero-copy: the gather on a stream of its own, the attention
                           waiting for it on the device (an event: no host round trip), and
                           offload_layer_ready telling whether it is done, so a scheduler runs
                           other batches' layers beside it (PulseInfer's IRQ); 0: the gather
                           in stream order on the compute stream, unless the schedule selects
                           ahead (then it runs beside the MLP: InfiniGen's prefetch) */
    int refetch;        /* 1: every step recalls the whole selection (InfiniGen's published
                           transfer: no block is reused across steps; the tail, read from its
                           tail page, excepted); 0: resident blocks are reused (hot cache).
                           Host-planned engines only (not zero-copy's device plan). The
                           source's meter still models a reusing cache: its churn is the
                           selection's, the recall the runtime counts is the re-fetch's */
    int verify_steps;   /* tests: after every step, offload_verify (synchronises; pulse
                           run sets it when the environment has PULSE_OFFLOAD_VERIFY=1) */
    /* Tuning (offload_params_init's defaults read nothing else: no environment; the command
     * line's options set them, experiments/runtime_opts.h): */
    struct recall_params recall; /* the recall engine's tuning (recall_params_init's defaults:
                                    threads, pieces, stages, grid, spin, prime); offload_create
                                    sets its engine, max_items, cap_gbps, ops and host region
                                    from the fields above */
    struct mem_pin_params pin;   /* how the host pool is pinned (mem_pin_params_default) */
    int host_wait;      /* cuda, host-planned engines: 1 makes the thread that queues a step
                           wait for a sparse layer's recall flag on the host (a noted host
                           synchronisation) before it queues the layer's attention, for
                           comparison; 0 (default): the compute stream waits on the device
                           (cuStreamWaitValue32). Anything that takes the driver's locks and
                           waits for the device while a step is queued would deadlock the
                           device wait (the recall's thread could not submit what the compute
                           stream waits for): CUDA's lazy module loading (off,
                           stream_value_cuda.c), cuBLAS's lazy kernel libraries (every decode
                           GEMM runs once at engine creation, engine.c), copies into pageable
                           memory (the token readback is pinned) */
    int layer_graphs;   /* the device path's layers replayed as CUDA graphs (default 1; 0: the
                           pieces' graphs only, for comparisons) */
    int prompt_kv_host; /* 1: offload prompt KV written by the CPU even on cuda (the reference
                           path, for comparisons and timing); default 0: generated on the
                           device wherever it can be */
    int spec_predictor; /* enum offload_spec_predictor (default approx) */
    int spec_from;      /* enum offload_spec_from: where a prefetching schedule's prediction of
                           layer l+1 is made and its recall starts (default input) */
    int predict_fork;   /* the device path with its gather beside (zero-copy), spec_from input:
                           1 runs a selection of a layer ahead of the one being issued (a
                           prefetch's, or a lookahead schedule's) with its plan on a stream of
                           its own, forked from the compute stream once its query exists and
                           joined at the end of the layer's piece, so that it runs beside the
                           pre-attention and, where the schedule issues it first
                           (offload_predict_forked), the exact selection; 0 (default): on the
                           compute stream in the schedule's order. Measured slower (s37) */
    int correct_stream; /* zero-copy with a prefetching schedule (spec_from input): 1 gathers a
                           predicted layer's correction on a stream of its own, after its plan
                           and its prefetch's gather (the slots it may take), so that the next
                           layer's prefetch, on the gather's stream, does not queue behind it;
                           0 (default): on the gather's stream, after the layer's prefetch. Not
                           in effect where the attention recalls the corrections (attend_recall
                           in effect: its default, corrections) */
    int select_joint;   /* 1 (default): a layer's piece that selects two layers (PulseInfer's
                           exact selection and its prediction of the next layer; a lookahead
                           schedule's first layer and the next) scores and ranks both in one
                           launch of each kernel (select_blocks_multi), the first waiting for
                           the second (or the piece's next compute); 0: one launch each, in the
                           schedule's order (for comparison). The same lists either way */
    int plan_fused;     /* zero-copy (the device plan): 1 (default) plans a layer's hot cache and
                           builds its descriptors and page lists in one kernel, and a piece's two
                           layers (the exact selection and the prediction of the next) in one
                           launch (offload_plan_build); 0: the plan and the build as two kernels
                           a layer, one layer after the other (for comparison). The same plans */
    int spec_correct_early; /* spec_from hits: 1 (default) queues a predicted layer's
                           correction at its exact plan, its gather waiting (on the device) for
                           the attention over the predicted lists only where a recall takes a
                           predicted block's slot (offload_kernels.h's gate); 0: after that
                           attention, always (for comparison) */
    double spec_margin; /* a prefetch's lists select budget x (1 + this) blocks by score, the
                           exact lists budget: more of the exact selection prefetched (in
                           [0, 1]; default 0; only with a prefetching schedule) */
    int lanes;          /* 2: a step may run as two lanes (offload_step_split; buffers for the
                           second lane allocated at create); 0 or 1 (default): one */
    int attend_recall;  /* enum offload_attend_recall. Zero-copy (the device plan): a sparse
                           layer selected at its own layer recalls its misses in its attention:
                           the attention reads each missed block from the host pool and stores
                           it into the slot the plan gave it (kv_view.host_ids), with no gather
                           before it; a prefetch's gather is still waited for. Layers selected
                           ahead (InfiniGen's lookahead) keep their gather */
};

/* offload_params.attend_recall: which layers' attention recalls their misses. */
enum offload_attend_recall {
    /* none: the gather, then the attention */
    OFFLOAD_ATTEND_OFF = 0,
    /* every layer selected at its own layer (every layer of an exact-at-layer schedule, a
     * prefetching schedule's exact selections); refused off the device path */
    OFFLOAD_ATTEND_ON = 1,
    /* (default) a prefetching schedule's exact selections only, whose misses are the
     * corrections of its prediction, where the device path runs (zero-copy, uncapped), the
     * prediction is made from the layer's input (spec_from input) and the page size and host
     * pool allow; elsewhere the gather, without an error */
    OFFLOAD_ATTEND_CORRECTIONS = 2
};

/* Per sparse layer, what the runtime did (the source's meter adds churn and its quantiles). */
struct offload_layer_stats {
    int64_t selections;   /* (entry, step) selections */
    int64_t hits, misses; /* selected (block, list) pairs found resident / recalled */
    int64_t fresh;        /* new tail blocks given a slot without a copy */
    int64_t evictions;    /* misses or fresh tails that displaced a resident block */
    int64_t recall_bytes, recall_chunks;
    int64_t recalls, stalls; /* recall rounds; rounds not complete when waited for */
    double recall_wait_s;    /* time the step blocked waiting for recalls, summed */
    int64_t tail_flushes;    /* filled tail blocks copied to their slot and the host pool */
    int64_t refetched;       /* with refetch: misses that were resident before the step (what
                                reuse would have kept; hits are what it kept) */
    /* a prefetching schedule (offload_prefetch): the prefetch's hot-cache access (its hits,
     * and its misses: the chunks it recalled, counted in recall_bytes/chunks too), the misses
     * of the exact selections that followed a prefetch (corrections: the mispredicted blocks,
     * counted in misses too), and the prediction's overlap: of the exact lists' blocks chosen by
     * score (select_overlap), how many the prefetched lists held */
    int64_t spec_lists, spec_hits, spec_misses, spec_recall_bytes, corrections;
    int64_t spec_scored, spec_held;
    /* attend_recall: of the misses, those the layer's attention read from the host pool */
    int64_t attend_recalled;
    /* spec_from hits with spec_correct_early: lists whose correction took a predicted block's
     * slot, so that it waited for the attention over the predicted lists (the gate) */
    int64_t correction_holds;
};

struct offload_stats {
    int64_t steps, admitted, refusals_host, refusals_digest, refusals_gpu;
    int64_t recall_bytes, recall_chunks, recalls, stalls, recall_failures;
    /* the sparse layers' prefetch counters summed (offload_layer_stats) */
    int64_t spec_misses, spec_recall_bytes, corrections, spec_scored, spec_held;
    int64_t correction_holds;
    double recall_wait_s, prompt_fill_s;
    int64_t engine_bytes, engine_chunks; /* the recall engine's own counters (cross-check) */
    size_t host_pool_bytes, digest_store_bytes;
    int64_t gpu_pages_per_request_max; /* pages one offload request held on the GPU, at most */
    /* host synchronisations the main thread made inside offload_step (summed; the last step's):
     * 0 when the step is free of host round trips (verify_steps' checks are not counted) */
    int64_t host_syncs, last_step_host_syncs;
    /* the device path's layers replayed as graphs (a layer's two: its issue with pre-attention,
     * and attention with post-attention; offload_params.layer_graphs 0: none); also counted
     * in engine_stats' graph_launches); of them, those of a split step's lanes (their views'
     * own sets) */
    int64_t layer_graph_launches, lane_graph_launches;
    /* selections run on the prediction's stream (offload_params.predict_fork), one per
     * (layer, step) and lane (a split step's two lanes count theirs each) */
    int64_t forked_selections;
    /* selections made two in one launch (offload_params.select_joint): two per (piece, step)
     * and lane where a piece selected two layers on the compute stream */
    int64_t joint_selections;
    /* layers planned by the fused kernel (offload_params.plan_fused): one per device plan, a
     * prediction's or an exact one, per step and lane */
    int64_t fused_plans;
    /* corrections gathered on their own stream (offload_params.correct_stream), one per
     * predicted layer, step and lane */
    int64_t stream_corrections;
    /* prefetches made in a layer's second piece (spec_from mid, or hits where the layer was not
     * predicted), and from a predicted layer's attention over its predicted lists (spec_from
     * hits); one per (layer, step) */
    int64_t mid_prefetches, hits_prefetches;
    /* of the latter's layers, those whose correction was queued at its exact plan, before the
     * attention over the predicted lists (spec_correct_early; the cpu backend queues it there
     * only when its gate is open) */
    int64_t early_corrections;
    /* attend_recall: (layer, step)s whose misses the attention recalled, and those misses
     * (chunks; counted in recall_chunks too) */
    int64_t attend_recall_layers, attend_recall_chunks;
    /* host time of the steps' upload staging and of the next steps' queries, summed; and of
     * queuing the layers' pieces: pre-attention and digest update, selection with its
     * download and job, the device plan and gather, attention with tail flushes,
     * post-attention (OFFLOAD_HOST_PHASES, in that order) */
    double stage_s, prefetch_s;
    double host_phase_s[OFFLOAD_HOST_PHASES];
    /* the planner thread's time per phase of its layer jobs, summed: waiting for the lists,
     * planning the hot cache and control block, the recall from submit to completion, and the
     * locality meter, which runs inside the recall's time when there is one
     * (OFFLOAD_PLANNER_PHASES, in that order) */
    double planner_phase_s[OFFLOAD_PLANNER_PHASES];
    /* set-up (counters' "setup" object; prompt_fill_s above is the prompt KV's time) */
    double pin_s;         /* allocating and pinning the host pool */
    double calibration_s; /* creating the query source (its calibration: its setup_s) */
    int prompt_kv_device; /* 1: prompt KV generated on the device, 0: written by the CPU */
    size_t staging_bytes; /* device staging of the device path */
};

struct offload;

/* Defaults above for an engine of max_batch entries and max_tokens (from nothing else: no
 * environment). */
void offload_params_init(struct offload_params *p, int max_batch, int max_tokens, uint64_t seed);
/* How the runtime keeps a layer's KV (the header comment's placement). */
enum offload_layer_kind {
    OFFLOAD_LAYER_DENSE = 0,  /* [0, n_dense): every block on the GPU */
    OFFLOAD_LAYER_WINDOW = 1, /* a sliding-window layer: its window in a ring of GPU pages */
    OFFLOAD_LAYER_SPARSE = 2  /* the host pool, hot slots and the tail page; selected */
};
int offload_layer_kind(const struct offload_params *p, const struct model_config *m, int layer);
/* Sparse layers of model m under p (at least one for offload_params_check). */
int offload_sparse_layers(const struct offload_params *p, const struct model_config *m);
/* Validates the params against the model and the cache (one line naming the field in err). */
int offload_params_check(const struct offload_params *p, const struct model_config *m,
                         const struct kv_cache_params *kp, char *err, size_t errlen);
/* GPU KV bytes an offload request of n_tokens reserves in the cache (all layers of model m). */
size_t offload_request_kv_bytes(const struct offload_params *p, const struct model_config *m,
                                const struct kv_cache_params *kp, int n_tokens);
/* Host pool bytes an offload request of n_tokens reserves. */
size_t offload_request_host_bytes(const struct offload_params *p, const struct model_config *m,
                                  int page_size, int n_tokens);

/* The shape the query source of an offload runtime with params p on model m and cache page
 * size page_size must have (p valid: offload_params_check). */
void offload_source_shape(const struct offload_params *p, const struct model_config *m,
                          int page_size, struct query_source_shape *out);

/* Creates the offload runtime for engine e and its cache kv (page size = block size; request
 * slots = max_batch): host pool, digest store, hot cache, recall engine, and every buffer a step
 * uses; p->source must have been made for offload_source_shape. PULSE_OK and *out;
 * PULSE_ERR_INVALID (params, source) or PULSE_ERR_OOM (memory refused) with a one-line reason
 * in err. */
int offload_create(struct engine *e, struct kv_cache *kv, const struct offload_params *p,
                   struct offload **out, char *err, size_t errlen);
void offload_free(struct offload *o);

/* Admits request req_id with prompt_len tokens (its whole length n_tokens reserved): GPU pages,
 * host blocks and digests, then writes its prompt KV and digests. PULSE_OK and *slot (the cache
 * slot); PULSE_ERR_NOMEM when a pool is short now; PULSE_ERR_INVALID when it can never fit.
 * A one-line reason in why on failure. */
int offload_admit(struct offload *o, int req_id, int prompt_len, int n_tokens, int *slot, char *why,
                  size_t whylen);
/* Admits a request whose KV stays whole on the GPU (a two-batch scheduler's normal request)
 * into a cache slot of the runtime's cache: every layer's prompt KV written as a dense layer's,
 * from the same source as an offload request's (offload_params.prompt_kv: the query source's,
 * synthetic or prefilled), so a request decodes the same tokens whichever batch it is in;
 * *first_token as offload_first_token would give. The runtime keeps nothing for it: release
 * its slot with kv_cache_release only. Statuses as offload_admit. */
int offload_admit_normal(struct offload *o, int req_id, int prompt_len, int n_tokens, int *slot,
                         int32_t *first_token, char *why, size_t whylen);
/* The token the decode of the request admitted into `slot` consumes first: the prefill's greedy
 * next token (OFFLOAD_KV_PREFILL) or engine_first_token of its id. */
int32_t offload_first_token(const struct offload *o, int slot);
/* Frees what the request in cache slot `slot` holds besides its cache pages. */
void offload_release(struct offload *o, int slot);
/* With --prompt-kv prefill: real prompts for the requests admitted from now on (prefill.h's
 * prefill_set_prompts; NULL restores the hashed ids). PULSE_ERR_INVALID without a prefill. */
int offload_set_prompts(struct offload *o, prefill_token_fn fn, void *user);

/* One decode step of the batch (entries as batch_set got them): begin, every layer's issue
 * (the schedule's piece) and finish in order, end; the tokens are the batch's once the step has
 * run (batch_read_tokens). PULSE_OK, or the first failure seen so far (a recall that failed
 * three times: PULSE_ERR_IO, found by the planner, so it may surface at the next step; a failed
 * verify_steps check: PULSE_ERR_INVALID, its reason on stderr), after which tokens are
 * undefined. */
int offload_step(struct offload *o, struct batch *bt, const struct batch_entry *entries, int n);
/* offload_step in pieces, so a scheduler can run other batches' layers (engine.h pieces, or
 * engine_run_layer) between them: begin (the step's uploads and the embedding), every layer
 * once in order, end (the head; returns what offload_step returns). The batch's own layers
 * keep their order, so its tokens are those of offload_step. */
void offload_step_begin(struct offload *o, struct batch *bt, const struct batch_entry *entries,
                        int n);
/* A layer in two pieces, for a scheduler that runs other batches while its recall is in flight
 * (PulseInfer's interruptible layer-wise scheduling): issue runs the schedule's piece of the
 * layer (as one graph on the device path); ready says, without blocking, whether the layer's
 * recall and control block are in place (1 for a dense layer); finish queues the attention
 * (waiting for the recall as wait_value does), post-attention and the tail flush. Between
 * issue and finish only other batches' work may run. */
void offload_layer_issue(struct offload *o, struct batch *bt, int layer);
int offload_layer_ready(const struct offload *o, int layer);
void offload_layer_finish(struct offload *o, struct batch *bt, int layer);
int offload_step_end(struct offload *o, struct batch *bt);
/* Self-interleaving (offload_params.lanes 2; PulseInfer's, DESIGN section 7, mechanism 5):
 * right after offload_step_begin, split splits the step's batch into two lanes, entries
 * [0, n_first) and [n_first, n), each of which runs its layers in order on its own lists,
 * control blocks, recall flags and events (a prediction's and, on the device path, the plan's
 * descriptors too); use makes `lane` the one the calls above (issue, ready,
 * finish, pre, select) act on, between any two of them, so that one lane's recall is in flight
 * while the other's layers run. Each lane's calls take that lane's part of the step's batch (a
 * view: batch_view_set). offload_step_end wants both lanes' layers run; the next step is one
 * lane again. Every engine and schedule; on the device path each lane's layers replay as layer
 * graphs of its own (offload_params.layer_graphs; counted in lane_graph_launches), kept while
 * the step's batch and its size hold. */
void offload_step_split(struct offload *o, int n_first);
void offload_lane_use(struct offload *o, int lane);
/* The next layer lane `lane` issues or finishes (n_layers when it has run them all). */
int offload_lane_next_layer(const struct offload *o, int lane);
/* The primitives a schedule's piece of `layer` (the layer being issued) calls: pre, once;
 * select, once per sparse layer it selects: `layer` itself (with the real query: after pre), or
 * with a lookahead schedule layer + 1 (before or after pre). */
void offload_pre(struct offload *o, struct batch *bt, int layer);
void offload_select(struct offload *o, struct batch *bt, int layer);
/* With a prefetching schedule (offload_schedule.prefetch), inside the piece of layer l: selects
 * layer l + 1 (sparse, not selected in this piece) from its approximate query (enum
 * offload_spec_predictor) into the layer's prefetch lists and starts recalling their missing
 * blocks into its hot cache, overlapping layer l; no attention reads those lists. Layer l + 1's
 * own selection (offload_select at its piece, with the real query: the exact one) then finds
 * the blocks predicted right resident and recalls the rest (the corrections), so attention
 * reads exactly the exact selection, whatever the prediction. */
void offload_prefetch(struct offload *o, struct batch *bt, int layer);
/* 1 when a selection of a layer ahead of the one being issued (offload_prefetch, or a lookahead
 * schedule's offload_select) runs on the prediction's stream (offload_params.predict_fork in
 * effect): a schedule that issues it before the layer's own selection runs the two side by
 * side. */
int offload_predict_forked(const struct offload *o);

void offload_get_stats(const struct offload *o, struct offload_stats *out);
/* What a step moved (floor.h): weights, the dense layers' KV, the selected pages' KV, the
 * digests selection read, the recalled bytes; of the last step (ahead 0) or the one before it
 * (ahead 1: the next step is already queued). Waits for the planner's bookkeeping of that step
 * only (call it after the step's tokens were read). */
void offload_step_traffic(const struct offload *o, int ahead, struct floor_traffic *out);
/* The schedule's lookahead (0 or 1). */
int offload_lookahead(const struct offload *o);
/* Records the planner's recall rounds (submission to completion, host times) on tl's recall
 * track from now on (NULL: stop). tl must outlive o's use of it. */
struct timeline;
void offload_set_timeline(struct offload *o, struct timeline *tl);
/* 1 when the offload layers are device-driven (the zero-copy engine: selection, hot-cache
 * plan and gather queued by the calling thread), 2 when, besides, the gather runs beside the
 * compute stream (offload_params.device_overlap): only then does offload_layer_ready report a
 * gather in flight that a scheduler can run other work beside (else it is always 1). */
int offload_device_driven(const struct offload *o);
/* The params the runtime was created with (offload_create's copy). */
const struct offload_params *offload_get_params(const struct offload *o);
/* offload_stats' lane_graph_launches so far, without offload_get_stats' quiescing */
int64_t offload_lane_graph_launches(const struct offload *o);
/* enum offload_layer_kind of a layer of the runtime's model. */
int offload_kind(const struct offload *o, int layer);
/* 1 when `layer` is a sparse layer of the runtime's model; 0 for any other layer, or a number
 * past either end (a schedule asking about the layer after the last). */
int offload_layer_sparse(const struct offload *o, int layer);
/* What a request of n_tokens would reserve if admitted now: GPU KV bytes (dense layers, hot
 * slots, tail) and host pool bytes; and the host pool's free bytes. For admission models. */
void offload_request_bytes(const struct offload *o, int n_tokens, size_t *gpu, size_t *host);
size_t offload_host_free_bytes(const struct offload *o);
/* Stats of a layer (zeros for a dense layer). */
void offload_get_layer_stats(const struct offload *o, int layer, struct offload_layer_stats *out);
/* The resolved params and sizes ("config" side) and the measured counters: totals, one entry
 * per sparse layer (achieved churn mean/p50/p90/p99 beside the profile's target, recall bytes
 * per step mean/p50/p90/p99/total, hot-cache hits/misses/evictions), the per-step series and
 * the source's description (its calibration). Caller owns the references. */
json_t *offload_config_json(const struct offload *o);
json_t *offload_counters_json(const struct offload *o);

/* After a step that returned PULSE_ERR_IO (a recall failed every attempt): waits for the
 * planner's jobs, then makes the runtime usable again and returns why the step failed (a static
 * string, for serve_batch.failed), NULL when it had not. The failed step's requests hold blocks
 * the hot cache counts as resident that never landed, so the caller releases every request of
 * that step (the serving loop ends them with the error). */
const char *offload_clear_failure(struct offload *o);

/* Verifies the hot cache, the host pool, the digest store and the GPU cache, then
 * offload_verify. 0, or PULSE_ERR_INVALID with the first violation in err (tests; allocates). */
int offload_check(const struct offload *o, char *err, size_t errlen);
/* The hot cache's invariants, and that every resident block but a request's tail holds on the
 * GPU exactly its host-pool copy (downloads each one; no allocation). 0 or PULSE_ERR_INVALID. */
int offload_verify(const struct offload *o, char *err, size_t errlen);
/* Tests: the host pool's bytes of block `block` of (slot, layer) (a sparse layer of an admitted
 * request). */
const void *offload_host_block(const struct offload *o, int slot, int layer, int block);

#endif
