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
 * 1. Profile (JSON, version 1): what pulse accuracy measured, per (budget, context) run, per
 *    layer of the measured model:
 *      {"format": "pulse-speculation-profile", "version": 1, "source": "measured",
 *       "model": "gemma3-270m-q4_k_m", "n_layers": 18, "policy": "infinigen",
 *       "selection": "headwise", "block_size": 16, "mapping": "depth",
 *       "provenance": {"machine": .., "date": .., "commit": .., "command": .., "results": ..},
 *       "runs": [{"budget_tokens": 2048, "context_tokens": 8192, "samples": 6,
 *                 "layers": [{"layer": 5, "exact": 11904, "hit": 10827, "overlap": 0.9095}]}]}
 *    overlap must equal hit / exact. Unknown keys are rejected. The built-in profile
 *    (locality_spec_profile_builtin) is workloads/profiles/speculation_gemma3-270m.json, which a
 *    test compares with it.
 *    Targets for a model with other layers (locality_spec_targets): the run whose budget is
 *    nearest the run's (ratio), then whose context is nearest (ratio; the longer on a tie); a
 *    sparse layer l of n gets, by relative depth (l + 0.5) / n, the piecewise-linear
 *    interpolation of the measured layers' overlaps at their depths (constant past the first
 *    and the last): mapping "depth".
 *
 * 2. Perturbation (locality_spec_q): per query head g, with q_g's norm r and direction u, and z
 *    the part orthogonal to u of U[-1, 1)^hd counter-RNG elements seeded by (seed, request,
 *    layer, step), normalised: q_out_g = bf16(r (cos(a) u + sin(a) z)); a = 0 copies q. The
 *    angle a of each layer comes from calibration.
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
 *    calibrations and reuses one of the same params and key model (threads aside) unless the
 *    generator's calib_fresh is set.
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

struct locality_spec_point {
    int layer;      /* of the measured model */
    int64_t exact;  /* the exact query's blocks chosen by score, summed */
    int64_t hit;    /* of those, in the approximate list */
    double overlap; /* hit / exact */
};

struct locality_spec_run {
    int budget_tokens, context_tokens; /* the run's budget and the set's length */
    int samples;                       /* samples behind the counts */
    int n_points;
    struct locality_spec_point point[LOC_SPEC_MAX_POINTS]; /* layers ascending */
};

/* Plain data (~35 KB: keep it off small stacks). */
struct locality_spec_profile {
    char source[32], model[64], policy[32], selection[16], mapping[16];
    int n_layers; /* the measured model's */
    int block_size;
    char machine[128], date[32], commit[48], command[1024], results[256]; /* provenance */
    int n_runs;
    struct locality_spec_run run[LOC_SPEC_MAX_RUNS];
};

/* The built-in profile (header comment) into out. */
void locality_spec_profile_builtin(struct locality_spec_profile *out);
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
};

/* What calibration gave one layer. */
struct locality_spec_layer {
    double target;   /* < 0: none */
    double angle;    /* radians */
    double achieved; /* pooled overlap over the calibration sample at angle */
    int clipped;     /* the target is below the table's least overlap */
    int evals;       /* evaluations it took */
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
