/* Selection-locality model for throughput runs (DESIGN.md section 5, "Selection locality").
 *
 * With random weights the query changes completely every step and every selection would be new;
 * no real model does that. This module supplies, instead, synthetic prompt keys with structure
 * and per-layer query streams whose step-to-step churn of the selected set follows a per-layer
 * profile; selection then runs for real (select_blocks_*) on those inputs, and a meter reports the
 * churn and recall bytes that were actually achieved. Three parts:
 *
 * 1. Profile (locality_profile.c). Per layer a distribution of the per-step churn, stored as
 *    quantiles at fixed cumulative levels (default p0 p10 p25 p50 p75 p90 p99 p100) and sampled
 *    by the piecewise-linear inverse CDF through them. JSON (version 1):
 *      {"format": "pulse-locality-profile", "version": 1, "source": "default" | "measured" | ..,
 *       "model": "..", "selection": "headwise" | "solohead" | "", "budget_blocks": 128,
 *       "block_size": 16, "seed": 7, "levels": [0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1],
 *       "layers": [{"layer": 0, "dense": true},
 *                  {"layer": 2, "dense": false, "churn": [8 values], "samples": 0}, ..]}
 *    "layers" holds one entry per layer in order; a dense layer (kept whole on the GPU, no
 *    selection) has no "churn". Unknown keys are rejected (a typo must not silently fall back).
 *    Default profile: the dense layers the params name (default the first 2); the others get medians log-spaced
 *    from 0.04 to 0.20 (5x, the paper's observation), assigned to layers by a seeded shuffle;
 *    each layer's shape is a lognormal with sigma 0.5 (p90 = 1.9x, p99 = 3.2x the median, long
 *    tail) tabulated at the levels, p0 = 0 and p100 = the lognormal's 99.9th percentile,
 *    clipped to [0, 1]. A measured profile comes from observed churn samples
 *    (locality_profile_from_samples, or locality_meter_to_profile fed with a real model's
 *    selections by the accuracy driver).
 *
 * 2. Generator (locality.c): keys and queries.
 *    Keys, per (request, layer, KV head): D = key_dirs random unit directions u_d (gaussian,
 *    normalised); block i gets a mean m_i = rho_i * sqrt(hd / D) * sum_d w_id u_d with w_id
 *    ~ N(0, 1) and strength rho_i = exp(key_strength_sigma * N(0, 1)) (so blocks differ in how
 *    strongly they attract attention: persistent "heavy" blocks exist); token t of block i has
 *    K = bf16(m_i + key_noise * sqrt(3) * U[-1, 1)) per element. Low-rank keys with block
 *    structure make the Quest scores dominated by q . m_i rather than by noise, so nearby
 *    queries select nearby sets. V is exactly kv_fill_synthetic's V (same seed and formula).
 *    Everything is a counter-RNG function of (seed, request, layer, head, token, dim).
 *    Queries, per (request slot, layer, query head): an fp32 unit state q evolving as
 *      q_t = cos(theta_t) q_{t-1} + sin(theta_t) z_t
 *    with z_t = the part orthogonal to q_{t-1} of a vector of iid U[-1, 1) counter-RNG elements
 *    (seeded by request, layer, step), normalised; written as bf16(q * sqrt(hd) * q_scale).
 *    This is normalize(a q + sqrt(1 - a^2) z) with a = cos(theta); theta may go past pi/2
 *    (a < 0) so that churn near 1 stays reachable. theta_t is drawn per (request,
 *    layer, KV head, step) and shared by the KV head's G query heads: a target churn c is drawn
 *    from the layer's profile and theta = g^-1(c), where g(theta) = expected churn of one step
 *    of angle theta, a table built at create by simulation on the CPU (calib_points angles
 *    theta_j = pi (j / (J-1))^2, for each of calib_streams calibration key sets at calib_tokens:
 *    calib_steps steps of the real stream with select_blocks_ref, head-wise lists, the churn
 *    definition below; common random numbers across angles, then made non-decreasing). The key
 *    model is the same for every layer, so one table serves all layers (its streams use the keys
 *    of different sparse layers). Targets above g(pi) are clipped and counted. Dense layers get
 *    theta = pi/2 (a fresh orthogonal query each step, like random weights).
 *    What is achieved: the mean churn matches the target's (the table inverts expected churn);
 *    the achieved distribution is the target convolved with the spread of the churn at a fixed
 *    angle (mostly the count noise of the new blocks, ~sqrt(new) / |B_t|), so the median
 *    matches to within about one block and the upper quantiles come out somewhat wider. The
 *    meter measures all of it; tests/test_locality.c prints target vs achieved per layer.
 *
 * 3. Meter (locality_meter.c): achieved churn and recall bytes from actual selections.
 *    Churn of one step of one list (request, layer, and KV head for head-wise / the one list of
 *    SoloHead) = |B_t \ S_{t-1}| / |B_t|, B_t = the blocks chosen by the budget (forced sink,
 *    window and tail excluded), S_{t-1} = everything selected the step before (so a block that
 *    moves from the window into the budget part is not new: it is resident). Recall of a step =
 *    the selected blocks that must be copied: without a hot cache, the new budget blocks; with a
 *    hot cache (hot_slots per list, hot_cache.h LRU), its misses. Bytes = chunks x chunk bytes,
 *    chunk = block_size * head_dim * 2 (K, V) * 2 bytes per KV head (8 KB at 16 x 128) for
 *    head-wise, x n_kv_heads (64 KB) for SoloHead. The first step of a list has no churn and its
 *    recall is counted as cold; recall per step sums the lists of one (request, layer).
 *
 * Costs (CPU, one core, measured): a query step is one counter-RNG draw per element plus two dot
 * products per head: 19 us per (request, layer) at qwen3-14b shapes (nq 40, hd 128), i.e. 24 ms
 * for a batch of 32 over 40 layers. The q of step t+1 does not depend on the model, so it can be
 * produced while the GPU runs step t and uploaded (10 KB per request and layer). Keys cost
 * 3.2 ns per K/V element: 0.11 s for 16K tokens of one layer at 8 KV heads, ~17 s for a 64K
 * prompt over 40 layers, fine for tests and short prompts; long-prompt throughput runs use the
 * device fill (locality_fill_kv_cuda, locality_cuda.cu: every element is a pure function of
 * (seed, request, layer, head, token, dim), so it is a per-element kernel of the same formula;
 * the offload runtime generates the prompt KV with it on the cuda backend). Calibration is
 * calib_streams * (calib_points - 1) * (calib_steps + 1) head-wise selections at calib_tokens
 * (defaults 16 * 23 * 9 = 3312): 0.4 s at the test shapes (nq 8, hd 64, 2.2K tokens), 15 s at
 * qwen3-14b shapes with budget 128 (calib_tokens 8448), on one core; the streams are
 * independent and run on calib_threads threads (the online CPUs, at most 16), so the wall time
 * is about ceil(calib_streams / threads) streams' worth (~1 s on 16 cores), and the table is the
 * same bits for any thread count (each stream's terms are added in stream order). Many key sets
 * with few steps each: the churn at a given angle varies more between key sets than between
 * steps (one key set's bias shifts the whole table; with 16 sets the achieved mean churn is
 * within 5% sd of the target).
 *
 * Ownership: handles own everything they allocate (through mem_alloc, at create); nothing in a
 * per-step function allocates. A generator or meter is used by one thread at a time, except that
 * locality_step_q on different layers touches disjoint state. */
#ifndef PULSE_LOCALITY_H
#define PULSE_LOCALITY_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "select.h"

#define LOC_MAX_LAYERS 256
#define LOC_MAX_LEVELS 16
#define LOC_MAX_ANCHOR 16.0f
#define LOC_HIST_BINS 4096 /* churn histogram resolution of the meter */
#define LOC_CALIB_MAX_THREADS 16

/* ================================================================== profile */

/* Plain data: a per-layer churn distribution as quantiles. ~35 KB: keep it off small stacks. */
struct locality_profile {
    int n_layers;                                 /* 1..LOC_MAX_LAYERS */
    int n_levels;                                 /* 2..LOC_MAX_LEVELS */
    double levels[LOC_MAX_LEVELS];                /* 0 first, 1 last, strictly increasing */
    double churn[LOC_MAX_LAYERS][LOC_MAX_LEVELS]; /* quantiles, non-decreasing, in [0, 1] */
    uint8_t dense[LOC_MAX_LAYERS];                /* 1: no selection, churn unused */
    int64_t samples[LOC_MAX_LAYERS];              /* measured samples behind a layer; 0 = model */
    char source[64];                              /* "default", "measured", ... */
    char model[64];                               /* model it describes, "" when generic */
    char selection[16];                           /* "headwise", "solohead" or "" */
    int budget_blocks, block_size;                /* context it was measured at; 0 = unknown */
    uint64_t seed;                                /* seed of the default generator */
};

struct locality_default_params {
    int n_layers;     /* 1..LOC_MAX_LAYERS */
    uint8_t dense[LOC_MAX_LAYERS]; /* 1: a layer without selection (default: the first 2 when
                                      there are more than 2 layers) */
    double median_lo; /* smallest layer median (default 0.04) */
    double median_hi; /* largest layer median (default 0.20), >= median_lo, <= 1 */
    double sigma;     /* lognormal shape of every layer (default 0.5), >= 0 */
    uint64_t seed;    /* assignment of medians to layers */
};

/* Fills p with the defaults above for n_layers and seed. */
void locality_default_params_init(struct locality_default_params *p, int n_layers, uint64_t seed);
/* The default profile (header comment) into out. PULSE_OK, or PULSE_ERR_INVALID with the field
 * named in err. */
int locality_profile_default(struct locality_profile *out, const struct locality_default_params *p,
                             char *err, size_t errlen);
/* 0 when p is valid, else -1 with the first violation (layer and field) in err. */
int locality_profile_check(const struct locality_profile *p, char *err, size_t errlen);
/* Inverse CDF of layer's churn at u in [0, 1] (piecewise linear through the quantiles). */
double locality_profile_quantile(const struct locality_profile *p, int layer, double u);
/* Mean of layer's churn distribution (exact for the piecewise-linear inverse CDF). */
double locality_profile_mean(const struct locality_profile *p, int layer);

/* JSON object of p (format in the header comment); caller owns the reference. */
json_t *locality_profile_to_json(const struct locality_profile *p);
/* Parses and validates j into out. `name` (a file name) prefixes every message, which names the
 * offending field, e.g. "prof.json: layers[3].churn[2]: 0.5 < previous 0.6 (must not decrease)".
 * PULSE_OK or PULSE_ERR_INVALID. */
int locality_profile_from_json(const json_t *j, const char *name, struct locality_profile *out,
                               char *err, size_t errlen);
/* Reads path into out: PULSE_OK, PULSE_ERR_IO (missing file, bad JSON) or PULSE_ERR_INVALID. */
int locality_profile_read(const char *path, struct locality_profile *out, char *err, size_t errlen);
/* Writes p to path atomically (full double precision). PULSE_OK, PULSE_ERR_INVALID (p fails
 * the check) or PULSE_ERR_IO. */
int locality_profile_write(const struct locality_profile *p, const char *path, char *err,
                           size_t errlen);
/* A measured profile from per-layer churn samples (what the accuracy driver calls with a real
 * model's selections): samples[l][0..n_samples[l]) in [0, 1]; a layer with no samples is dense.
 * Quantiles at the default levels, linear interpolation between closest ranks (numpy's
 * default; p0 = min, p100 = max). source = "measured"; model and selection are copied (may be
 * NULL). Offline: allocates scratch. PULSE_OK, PULSE_ERR_INVALID or PULSE_ERR_NOMEM. */
int locality_profile_from_samples(struct locality_profile *out, int n_layers,
                                  const double *const *samples, const int64_t *n_samples,
                                  const char *model, const char *selection, char *err,
                                  size_t errlen);
/* Relative depth of layer l of a model of n layers, (l + 0.5) / n: the coordinate by which a
 * profile measured on one model is laid onto another (this one's and the speculation
 * profile's "depth" mapping, locality_spec.h). Of the increasing depths xs[0..n) (n >= 1), the
 * two that bracket x: i0, i1 and the weight w of i1 (i0 == i1 and w = 0 at or past an end). */
double locality_depth(int l, int n_layers);
void locality_depth_bracket(const double *xs, int n, double x, int *i0, int *i1, double *w);
/* 1 when p has n_layers layers, dense exactly where dense[] is (it lays onto such a model as it
 * is), else 0. */
int locality_profile_matches(const struct locality_profile *p, int n_layers, const uint8_t *dense);
/* p laid onto a model of n_layers whose dense[] layers select nothing ("mapping": "depth"):
 * sparse layer l takes, level by level, the piecewise-linear interpolation at its depth of p's
 * sparse layers' quantiles at theirs (constant past the first and the last), so a layer's
 * quantiles still rise and its mean is the interpolated mean; samples are the nearer measured
 * layer's. Levels, model, selection, budget and seed are p's; source is p's with ", by depth
 * from N layers". The way a churn profile measured on a small real model (the accuracy
 * driver's) feeds throughput runs of another. out must not be p. PULSE_OK, or
 * PULSE_ERR_INVALID (p fails the check, has no sparse layer, or n_layers is out of range) with
 * the reason in err. */
int locality_profile_map_depth(const struct locality_profile *p, int n_layers, const uint8_t *dense,
                               struct locality_profile *out, char *err, size_t errlen);

/* ================================================================== generator */

struct locality_params {
    struct select_cfg sel; /* shape, budget, sink, window; max_blocks bounds every context */
    int n_layers;          /* == the profile's */
    int n_slots;           /* request slots (concurrent requests), >= 1 */
    uint64_t seed;
    int key_dirs;             /* D, directions per (request, layer, KV head) (default 16) */
    float key_noise;          /* token noise std per element (default 0.5) */
    float key_strength_sigma; /* lognormal sigma of the block strength (default 0.5) */
    float q_scale;            /* rms of a q element (default 1) */
    float anchor; /* pull of a query stream toward its first state, in [0, LOC_MAX_ANCHOR]
                     (default 0: a free walk). A step keeps its angle theta (the calibration,
                     which runs with it, still inverts the churn), but its direction draw gets
                     anchor x its norm of the first state added before the part orthogonal to q
                     is taken: the stream keeps returning near where it began, so blocks it
                     left are selected again, as a real model's are (a hot cache larger than
                     one selection then saves more; s37 fits it to models/gqa-tiny) */
    int calib_tokens;         /* context of the calibration: max(2048, 4 x the selected blocks'
                                 tokens) within max_blocks by default; set it to the run's
                                 typical context */
    int calib_points;         /* J, angles in the table (default 24), 3..64 */
    int calib_steps;          /* steps per angle and key set (default 8) */
    int calib_streams;        /* calibration key sets (default 16) */
    int calib_threads;        /* threads the calibration runs on; 0 (default) = the online CPUs,
                                 at most LOC_CALIB_MAX_THREADS. The table is the same bits for
                                 every thread count. */
    int calib_fresh;          /* 1: calibrate even when this process made the same table
                                 before (by default it is reused: the table is a pure function
                                 of the params above, the thread count and slots aside, and of
                                 the profile's dense layers) */
};

/* Calibration table: churn[j] = expected churn of a step of angle theta[j] (radians). */
struct locality_calib {
    int n;
    const double *theta, *churn; /* owned by the generator */
    double churn_max;            /* churn[n-1]: targets above it are clipped */
    int reused;                  /* 1: the process's earlier calibration of the same key */
};

/* What the generator drew for one layer (targets are drawn per list and step). */
struct locality_gen_stats {
    int64_t draws;     /* targets drawn */
    int64_t clipped;   /* targets above the calibration's maximum */
    double target_sum; /* sum of the drawn targets */
    double expect_sum; /* sum of g(theta) of the angles used (after clipping) */
};

struct locality;

/* Fills p with the defaults above for the selection shape, layers, slots and seed. */
void locality_params_init(struct locality_params *p, const struct select_cfg *sel, int n_layers,
                          int n_slots, uint64_t seed);
/* Validates, allocates and calibrates (the CPU simulation above: the slow part). The profile is
 * copied. NULL with a one-line reason naming the field in err. */
struct locality *locality_create(const struct locality_params *p,
                                 const struct locality_profile *prof, char *err, size_t errlen);
void locality_free(struct locality *L);

/* Starts request req_id (>= 0) in slot: every layer's query stream restarts at its step 0
 * (state seeded by (seed, req_id, layer, head)). */
void locality_start(struct locality *L, int slot, int64_t req_id);
/* One decode step of one layer for `batch` slots: q_out bf16 [batch][n_heads][head_dim] (the
 * layout select_score reads) receives each slot's query and the slot's stream of this layer
 * advances by one step (the first call after locality_start returns the step-0 state). No
 * allocation. */
void locality_step_q(struct locality *L, int layer, const int32_t *slots, int batch,
                     uint16_t *q_out);
/* Writes the structured prompt K (and kv_fill_synthetic's V) of tokens [t0[b], t1[b]) (t0 NULL
 * = 0) of entry b, request req_ids[b] (>= 0), into the host paged KV kv (layout of kernels.h;
 * kv's heads and head_dim must be the params'). Digests then come from digest_build_ref. Uses
 * the generator's scratch: not reentrant. */
void locality_fill_kv(struct locality *L, const struct kv_view *kv, const int32_t *t0,
                      const int32_t *t1, const int32_t *req_ids, int batch, int layer);
/* Writes the digests of blocks [0, ceil(n_tokens[b] / block_size)) of the keys above straight
 * into dv (no KV store), bit-identical to locality_fill_kv + digest_build_ref. sel_head as for
 * digest_build. Not reentrant. */
void locality_build_digests(struct locality *L, const struct digest_view *dv,
                            const int32_t *n_tokens, const int32_t *req_ids, int batch, int layer,
                            int sel_head);

/* The request in slot (-1 when none was started) and the steps its stream of `layer` has
 * taken (step s made by locality_step_q leaves s + 1). Reads only (slot, layer)'s state, so it
 * may run beside locality_step_q on other layers. */
void locality_stream_pos(const struct locality *L, int slot, int layer, int64_t *req_id,
                         int32_t *steps);
/* The params L was made with (valid while L lives). */
const struct locality_params *locality_get_params(const struct locality *L);
/* The churn profile L draws from (its copy, valid while L lives). */
const struct locality_profile *locality_get_profile(const struct locality *L);
/* Digests of calibration key set `stream` (>= 0) of `layer`, the keys the churn calibration
 * selects over (no request has them), of blocks [0, ceil(n_tokens / block_size)) into entry 0
 * of dv; sel_head as for digest_build. For other calibrations (locality_spec.h). Not
 * reentrant. */
void locality_build_calib_digests(struct locality *L, const struct digest_view *dv, int n_tokens,
                                  int stream, int layer, int sel_head);

/* ------------------------------------------------------------------ device fill (CUDA builds) */

/* Makes L able to write keys on the device: allocates its device scratch (the key directions
 * of one entry, n_kv_heads * key_dirs * head_dim floats). Create time only. PULSE_OK, or
 * PULSE_ERR_OOM with the reason in err. */
int locality_device_init(struct locality *L, char *err, size_t errlen);
/* locality_fill_kv on the device, queued on c->stream: the same K and V of tokens
 * [t0[b], t1[b]) (t0 NULL = 0) of request req_ids[b] into the device paged KV kv (pool,
 * page_ids and page_start are device arrays; t0, t1 and req_ids host arrays). V and the noise
 * are bit-identical to locality_fill_kv's; the key directions and block weights go through
 * log, cos and exp, which the device evaluates in double and rounds to float (correctly
 * rounded) where the host calls libm's logf, cosf and expf (glibc 2.36: not correctly rounded
 * for about 1.5% of the Box-Muller draws), so a gaussian can differ in its last float bit and a
 * tiny fraction of K elements differs: 8e-6 in a host emulation at qwen3-14b shapes, asserted
 * <= 1e-4 by tests/gpu/test_locality_gpu.c, each one bf16 ulp off or, where mean and noise
 * cancel near zero, within 2^-20. Needs locality_device_init. No allocation, no sync. */
struct kctx;
void locality_fill_kv_cuda(struct locality *L, const struct kctx *c, const struct kv_view *kv,
                           const int32_t *t0, const int32_t *t1, const int32_t *req_ids, int batch,
                           int layer);

/* What the kernels of locality_cuda.cu need of one (request, layer) (locality.c fills it from
 * the generator's seeds, so the stream formulas live in one place). */
#define LOC_DEV_MAX_KV_HEADS 64
struct locality_dev_args {
    uint64_t dir_seed[LOC_DEV_MAX_KV_HEADS]; /* per KV head: the directions' stream */
    uint64_t key_seed[LOC_DEV_MAX_KV_HEADS]; /* per KV head: blocks and noise derive from it */
    uint64_t v_seed;                         /* kv_fill_synthetic's stream of (request, layer) */
    int nkv, hd, D, bs;
    float amp;   /* key_noise * sqrt(3) */
    float sigma; /* key_strength_sigma */
    float sq;    /* sqrtf(hd / D) */
};
#ifdef __cplusplus
extern "C" {
#endif
/* The directions of every KV head into d_dirs [nkv][D][hd]. */
void locality_dirs_launch(const struct kctx *c, const struct locality_dev_args *a, float *d_dirs);
/* K and V of tokens [t0, t1) of one entry whose first page id is page_ids[*d_start] (d_start a
 * device pointer) from the directions in d_dirs. */
void locality_keys_launch(const struct kctx *c, const struct locality_dev_args *a,
                          const float *d_dirs, const struct kv_view *kv, const int32_t *d_start,
                          int t0, int t1);
#ifdef __cplusplus
}
#endif

/* The calibration table (valid while L lives). */
void locality_get_calib(const struct locality *L, struct locality_calib *out);
/* The angle whose expected churn is c (inverse of the table by linear interpolation); c above
 * the maximum gives the last angle. */
double locality_theta_for_churn(const struct locality *L, double c);
void locality_get_gen_stats(const struct locality *L, int layer, struct locality_gen_stats *out);
/* {"params", "key_model", "calibration": {"theta", "churn"}, "profile", "layers": [targets]}. */
json_t *locality_to_json(const struct locality *L);

/* ================================================================== meter */

struct locality_meter_params {
    struct select_cfg sel; /* the cfg the selections were made with */
    int n_layers;          /* 1..LOC_MAX_LAYERS */
    int n_slots;           /* request slots, >= 1 */
    int one_list;          /* 1: one list per entry serving all heads; 0: head-wise lists */
    const char *selection; /* the selection's name for the profile (NULL: by one_list,
                              "solohead" or "headwise") */
    int hot_slots;         /* hot-cache slots per list; 0 = none (recall = new blocks), else
                              >= select_list_stride(&sel) */
};

/* Achieved numbers of one layer. Churn over list-steps with a previous step and a non-empty
 * budget part; recall over steady (request, step) pairs (every list had a previous step). */
struct locality_layer_stats {
    int64_t churn_samples;
    double churn_mean, churn_median, churn_p90, churn_p99, churn_max;
    int64_t new_blocks; /* churn numerators, summed */
    int64_t steps;      /* steady (request, step) pairs */
    double recall_bytes_mean, recall_bytes_median, recall_bytes_p90, recall_bytes_p99;
    double recall_bytes_max;
    int64_t recall_bytes_total; /* steady steps */
    int64_t recall_chunks_total;
    int64_t cold_steps, cold_recall_bytes; /* first steps of (request, layer) */
};

struct locality_meter;

/* NULL with a one-line reason in err when a param is out of range or memory is refused. */
struct locality_meter *locality_meter_create(const struct locality_meter_params *p, char *err,
                                             size_t errlen);
void locality_meter_free(struct locality_meter *m);
/* Forgets slot's previous selections (and empties its hot-cache units): a new request. */
void locality_meter_reset(struct locality_meter *m, int slot);
/* Adds one step of one layer: the host copies of select_topk's sel_idx / sel_count for `batch`
 * entries (layout of select.h, n_lists = 1 for SoloHead, n_kv_heads otherwise), entry b being
 * slot slots[b] with n_tokens[b] tokens. PULSE_OK, or PULSE_ERR_INVALID (a bad slot, layer or
 * selection; nothing counted for the entries from there on). No allocation. */
int locality_meter_add(struct locality_meter *m, int layer, const int32_t *slots,
                       const int32_t *n_tokens, const int32_t *sel_idx, const int32_t *sel_count,
                       int batch);
void locality_meter_layer_stats(const struct locality_meter *m, int layer,
                                struct locality_layer_stats *out);
/* Quantile p in [0, 1] of layer's achieved churn (numpy-linear over the samples, each sample
 * read back from its histogram bin's mean: exact when a bin holds one value); 0 when empty. */
double locality_meter_churn_quantile(const struct locality_meter *m, int layer, double p);
/* Bytes of one chunk (see the header comment). */
size_t locality_meter_chunk_bytes(const struct locality_meter *m);
/* The measured profile of what the meter saw (layers without samples are dense), at the
 * default levels; source "measured". PULSE_OK or PULSE_ERR_INVALID (no samples at all). */
int locality_meter_to_profile(const struct locality_meter *m, struct locality_profile *out,
                              const char *model, char *err, size_t errlen);
/* {"selection", "hot_slots", "chunk_bytes", "budget_blocks", "layers": [{"layer", "churn":
 * {samples, mean, median, p90, p99, max[, target_mean, target_median, target_p90]},
 * "recall_bytes_per_step": {steps, mean, median, p90, p99, max, total}, "new_blocks",
 * "cold_steps", "cold_recall_bytes"}], "totals"}; target (may be NULL) adds the profile's
 * numbers beside the achieved ones. Caller owns the reference. */
json_t *locality_meter_to_json(const struct locality_meter *m,
                               const struct locality_profile *target);

/* Churn numerator of one list: the number of budget blocks of cur (ascending, n_cur entries, of
 * an nb-block entry; forced blocks per cfg) absent from prev (ascending, n_prev); *n_budget gets
 * |B_t|. Shared by the calibration and the meter. */
int locality_count_new(const struct select_cfg *cfg, const int32_t *cur, int n_cur, int nb,
                       const int32_t *prev, int n_prev, int *n_budget);

#endif
