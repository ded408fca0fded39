/* Misprediction of speculating policies in throughput runs (DESIGN.md section 7, mechanism 5;
 * query_source.h's spec_q): the approximate query a policy selects layer l's blocks with one
 * layer ahead, made from the locality model's exact query so that their selections overlap as
 * measured on a real model.
 *
 * Overlap of one step and list = |B_exact & S_approx| / |B_exact|, B_exact = the blocks the
 * exact query chooses by score (forced sink, window and tail left out), S_approx = the
 * approximate query's whole list; a layer's overlap pools the counts of its lists and steps
 * (pulse accuracy's speculation_hit_rate, accuracy/sparse_attn.c's measure_speculation).
 *
 * 1. Profile (JSON, version 2; version 1 is read too): what pulse accuracy measured, per
 *    (budget, context) run, per layer of the measured model:
 *      {"format": "pulse-speculation-profile", "version": 2, "source": "measured",
 *       "model": "gemma3-270m-q4_k_m", "n_layers": 18, "policy": "infinigen",
 *       "selection": "headwise", "block_size": 16, "mapping": "depth",
 *       "provenance": {"machine": .., "date": .., "commit": .., "command": .., "results": ..},
 *       "runs": [{"budget_tokens": 2048, "context_tokens": 8192, "samples": 6,
 *                 "persistence_samples": 4,
 *                 "layers": [{"layer": 5, "exact": 11904, "hit": 10827, "overlap": 0.9095,
 *                             "persistence": {"steps": 124, "churn_exact": 0.12,
 *                               "churn_approx": 0.13, "missed": 1500, "missed_again": 520,
 *                               "miss_persistence": 0.3467, "wrong": 1500, "wrong_again": 500,
 *                               "wrong_persistence": 0.3333}}]}]}
 *    overlap must equal hit / exact, the persistences their ratios (select.h's select_persist:
 *    the step-to-step behaviour of the lists, pulse accuracy's speculation[].per_layer[]).
 *    "persistence_samples" (version 2, optional: a run measured before has none) says that
 *    every layer of the run has "persistence", measured on that many samples. Unknown keys are
 *    rejected (version 1 knows neither persistence key). "predicted_from" (optional, "input"
 *    when absent): where the measured runs made layer l+1's approximate query (pulse accuracy
 *    --spec-from): "input", layer l's input (InfiniGen's); "mid", its residual once its
 *    attention is added; "hits", PulseInfer's speculation from the predicted lists (an
 *    attention over them added to the input). The built-in profiles
 *    (locality_spec_profile_builtin) are workloads/profiles/speculation_gemma3-270m.json (from
 *    the input) and speculation_gemma3-270m-hits.json (from the predicted lists), which a test
 *    compares with them.
 *    Targets for a model with other layers (locality_spec_targets): the run whose budget is
 *    nearest the run's (ratio), then whose context is nearest (ratio; the longer on a tie); a
 *    sparse layer l of n gets, by relative depth (l + 0.5) / n, the piecewise-linear
 *    interpolation of the measured layers' overlaps at their depths (constant past the first
 *    and the last): mapping "depth".
 *
 * 2. Perturbation (locality_spec_q): per query head g, with q_g's norm r and direction u, and z
 *    the part orthogonal to u of a noise vector v, normalised: q_out_g = bf16(r (cos(a) u +
 *    sin(a) z)); a = 0 copies q. The angle a of each layer comes from calibration. The noise:
 *    with keyframe spacing K > 0 (steps), keyframe noises e_k = U[-1, 1) counter-RNG elements
 *    of (seed, request, layer, k), x = step / K + phase (phase in [0, 1) of (seed, request,
 *    layer)) = k + w, v = cos(pi w / 2) e_k + sin(pi w / 2) e_(k+1): a noise that turns slowly
 *    (consecutive steps correlate by about cos(pi / (2K)); K <= 0.5: independent), so the
 *    approximate list's mistakes persist over steps as a real approximate query's do. K = 0:
 *    v = U[-1, 1) elements of (seed, request, layer, step), fresh every step (the model before
 *    version 2 of the profile, kept where no persistence was measured). Either way a pure
 *    function of (request, layer, step, q), two counter draws per element at most.
 *
 * 3. Calibration (locality_spec_create): calib_keys key sets (the churn calibration's, key set r
 *    on the r-th sparse layer, at calib_tokens) x calib_queries random queries each (unit
 *    gaussian directions per head, the streams' marginal); the exact selections once; the
 *    pooled overlap at calib_points angles a_j = pi (j / (J-1))^2 with the same noise at every
 *    angle (made non-increasing); per layer the angle interpolated for its target, the overlap
 *    there measured on the same sample and, when it misses by more than 0.005, refined by
 *    secant steps inside the bracketing angles (at most 4 evaluations; the closest is kept).
 *    Targets below the table's least overlap are clipped to the last angle and counted.
 *    Selection is select_blocks_ref with the runtime's cfg and sel_head (SELECT_HEADWISE: one
 *    list per KV head, which is also what a SoloHead list is; SELECT_MEAN: one list from every
 *    head). Work items (angles, then layers) run on calib_threads threads, each result from
 *    its item alone: the same bits for any thread count. The process keeps its last 8
 *    calibrations and reuses one of the same params and key and churn model (threads aside)
 *    unless the generator's calib_fresh is set.
 *
 * 4. Persistence (calibration, after the angles): per layer with a persist_target, calib_keys
 *    streams of calib_steps + 1 steps: stream k starts at key set k's first query and turns as
 *    the generator's streams do (locality.h, part 2) at the churn persist_churn (the exact
 *    lists' churn of the measurement; < 0: the generator's profile of the layer); every step's
 *    exact selection against the approximate ones at the layer's angle with keyframes every
 *    K_j = 0.5 * 2^j steps (j < 8, the same noise and streams for all), counted by
 *    select_persist_add. The miss persistence over K_j (made non-decreasing) is inverted at the
 *    target (linear in log2 K; outside the table the nearest end, counted as clipped); the
 *    streams are run again at that K, at persist_churn and at the generator's churn, for the
 *    description. The spacing is what carries over to a run whose churn differs from the
 *    measurement's: a real approximate query's error drifts with the hidden state at its own
 *    pace, whatever the exact lists' churn. What the measured Gemma 3 270M lists show (issue
 *    34; experiments/results/cpu-2026-12-04-s19/): the approximate lists churn as the exact ones
 *    (within 0.02) and 23-45% of the misses repeat the step before's, which slow noise gives
 *    (K of 2-5 steps: miss persistence within 0.05, wrong persistence within 0.07, churn beyond
 *    the exact lists' within 0.03, tests/test_locality_spec.c) and fresh noise does not (its
 *    approximate lists churn 0.05-0.1 more, 10-18% of its misses repeat).
 *
 * Ownership: a handle owns its memory (mem_alloc, at create); locality_spec_q allocates nothing
 * and writes only (layer)'s counter, so it runs on several threads at once on different
 * layers. */
#ifndef PULSE_LOCALITY_SPEC_H
#define PULSE_LOCALITY_SPEC_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "select.h"
#include "workloads/locality.h"

#define LOC_SPEC_MAX_RUNS 16
#define LOC_SPEC_MAX_POINTS 64 /* measured layers per run */

/* ================================================================== profile */

/* The step-to-step behaviour of one layer's lists (select.h's select_persist): steps = 0 when
 * none was measured. */
struct locality_spec_persist {
    int64_t steps;                    /* list-steps with a previous step */
    double churn_exact, churn_approx; /* mean churn of the exact and the approximate lists */
    int64_t missed, missed_again;     /* the exact blocks the approximate list missed; also
                                         missed the step before */
    int64_t wrong, wrong_again;       /* the approximate list's blocks not exact; also wrong
                                         the step before */
    double miss_persistence;          /* missed_again / missed */
    double wrong_persistence;         /* wrong_again / wrong */
};

struct locality_spec_point {
    int layer;      /* of the measured model */
    int64_t exact;  /* the exact query's blocks chosen by score, summed */
    int64_t hit;    /* of those, in the approximate list */
    double overlap; /* hit / exact */
    struct locality_spec_persist persist; /* version 2, optional */
};

struct locality_spec_run {
    int budget_tokens, context_tokens; /* the run's budget and the set's length */
    int samples;                       /* samples behind the counts */
    int persist_samples;               /* samples behind every point's persist; 0: none */
    int n_points;
    struct locality_spec_point point[LOC_SPEC_MAX_POINTS]; /* layers ascending */
};

/* Where a prediction's approximate query is made (the profile's "predicted_from", the run's
 * --spec-from). */
enum locality_spec_from { LOC_SPEC_FROM_INPUT = 0, LOC_SPEC_FROM_MID, LOC_SPEC_FROM_HITS };
extern const char *const locality_spec_from_names[3]; /* "input", "mid", "hits" */

/* Plain data (~35 KB: keep it off small stacks). */
struct locality_spec_profile {
    char source[32], model[64], policy[32], selection[16], mapping[16];
    int predicted_from; /* enum locality_spec_from */
    int version;  /* of the file it was read from (1 or 2); written as 2 */
    int n_layers; /* the measured model's */
    int block_size;
    char machine[128], date[32], commit[48], command[1024], results[256]; /* provenance */
    int n_runs;
    struct locality_spec_run run[LOC_SPEC_MAX_RUNS];
};

/* The built-in profile (header comment) of predictions made at `from` (enum
 * locality_spec_from) into out: Gemma 3 270M's from the input for LOC_SPEC_FROM_INPUT, from the
 * predicted lists for the two points after the attention (on the GQA test model mid-layer and
 * the predicted lists held the same hit rate, within 0.2-1.9% of the missed blocks). */
void locality_spec_profile_builtin(int from, struct locality_spec_profile *out);
/* Parses and validates j; `name` prefixes every message, which names the field. PULSE_OK or
 * PULSE_ERR_INVALID. */
int locality_spec_profile_from_json(const json_t *j, const char *name,
                                    struct locality_spec_profile *out, char *err, size_t errlen);
/* Reads path: PULSE_OK, PULSE_ERR_IO (missing file, bad JSON) or PULSE_ERR_INVALID. */
int locality_spec_profile_read(const char *path, struct locality_spec_profile *out, char *err,
                               size_t errlen);
/* JSON object of p; caller owns the reference. */
json_t *locality_spec_profile_to_json(const struct locality_spec_profile *p);
/* Per layer of a model of n_layers (dense[l] = 1: no target, -1), the target overlap from p's
 * run nearest (budget_tokens, context_tokens), mapped by depth (header comment); the run's
 * index in *run. */
void locality_spec_targets(const struct locality_spec_profile *p, int n_layers,
                           const uint8_t *dense, int budget_tokens, int context_tokens,
                           double *target, int *run);
/* Per layer of a model of n_layers, the step-to-step behaviour of p's run `run` mapped by depth
 * as the overlaps (every ratio interpolated; counts and steps those of the nearest measured
 * layer); out[l].steps = 0 for dense layers and when the run has none (persist_samples 0). */
void locality_spec_persist_targets(const struct locality_spec_profile *p, int run, int n_layers,
                                   const uint8_t *dense, struct locality_spec_persist *out);

/* ================================================================== calibrated perturbation */

struct locality_spec_params {
    struct select_cfg sel; /* the runtime's selection; max_blocks >= the calibration's blocks */
    int sel_head;          /* SELECT_HEADWISE or SELECT_MEAN */
    int n_layers;          /* the generator's */
    double target[LOC_MAX_LAYERS]; /* overlap per layer in [0, 1]; < 0: no speculation there */
    int calib_tokens;              /* context of the sample (>= 1, within max_blocks) */
    int calib_keys;                /* key sets (default 16), 1..256 */
    int calib_queries;             /* queries per key set, 1..256; 0 (default): enough for
                                      64 exact lists, at least 2 */
    int calib_points;              /* J, angles in the table (default 16), 3..64 */
    int calib_threads;             /* 0 (default): the online CPUs, at most 16 */
    /* persistence of the misses per layer in [0, 1] (header comment, part 4); < 0 (default):
     * fresh noise every step (the version-1 model) */
    double persist_target[LOC_MAX_LAYERS];
    /* the exact lists' churn it was measured at: the calibration streams' (< 0, default: the
     * generator's profile of the layer) */
    double persist_churn[LOC_MAX_LAYERS];
    int calib_steps; /* steps of each calibration stream (default 8), 2..64 */
};

/* What calibration gave one layer. */
struct locality_spec_layer {
    double target;   /* < 0: none */
    double angle;    /* radians */
    double achieved; /* pooled overlap over the calibration sample at angle */
    int clipped;     /* the target is below the table's least overlap */
    int evals;       /* evaluations it took */
    /* persistence (part 4): the target (< 0: fresh noise), the keyframe spacing in steps (0:
     * fresh noise), what the calibration streams gave at it, and whether the target lies
     * outside the table (the nearest end is used) */
    double persist_target, keyframe;
    struct select_persist calib;     /* summed over the calibration streams (persist_churn) */
    struct select_persist calib_gen; /* the same at the generator's churn of the layer */
    double calib_overlap;            /* the streams' overlap at (angle, keyframe) */
    double persist_table[8];         /* miss persistence at keyframes 0.5 * 2^j */
    int persist_clipped;
};

struct locality_spec;

/* Defaults above for sel, sel_head and n_layers, every target -1, calib_tokens 2048 within
 * sel's max_blocks. */
void locality_spec_params_init(struct locality_spec_params *p, const struct select_cfg *sel,
                               int sel_head, int n_layers);
/* Calibrates over L's keys (L must have p's n_layers and head shape; its key writer is used:
 * no other use of L meanwhile). NULL with a one-line reason naming the field in err. */
struct locality_spec *locality_spec_create(struct locality *L, const struct locality_spec_params *p,
                                           char *err, size_t errlen);
void locality_spec_free(struct locality_spec *S);
/* q_out [nq][hd] bf16 = the approximate query of step `step` of request req_id at layer from
 * q (the same layout); a pure function of its arguments. No allocation. */
void locality_spec_q(struct locality_spec *S, int layer, int64_t req_id, int32_t step,
                     const uint16_t *q, uint16_t *q_out);
void locality_spec_get_layer(const struct locality_spec *S, int layer,
                             struct locality_spec_layer *out);
/* {"calibration": {selection, tokens, keys, queries, points, threads, reused, seconds,
 * refine_tolerance, angle, overlap}, "layers":
 * [{"layer", "target_overlap", "angle", "calib_overlap", "clipped", "evals", "calls"}]}
 * (sparse layers only); caller owns the reference. */
json_t *locality_spec_to_json(const struct locality_spec *S);

#endif
