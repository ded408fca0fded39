/* The IOAA model's inputs (ioaa.h's struct ioaa_profile) as an offline profile: the JSON that
 * `pulse profile` writes, read back with validation, or an analytic profile from a model config
 * and two bandwidths when nothing was measured. Plain C, host memory.
 *
 * Schema "pulse-ioaa-profile/1", one JSON object (times in seconds, sizes in bytes):
 *   schema          "pulse-ioaa-profile/1"
 *   model, backend, recall_engine, date   strings describing the profile
 *   source          "measured" or "analytic"; note: an optional string (how it was made)
 *   n_layers        L >= 1
 *   normal          {"batch": [nb], "context": [nc], "layer_s": [nb rows of nc]}: t_N(b, c),
 *                   row i at batch[i]
 *   offload         {"batch": [n], "layer_s": [n]}: t_O(b)
 *   recall          {"bytes": [n], "round_s": [n]}: t_R(x)
 *   recall_bytes_per_request_layer   r >= 0
 *   recall.beside_compute  optional: a recall round's rate beside compute (an offload layer's
 *                   attention and GEMMs on the same GPU) over its rate alone, each in
 *                   (0, IOAA_PROFILE_BESIDE_MAX]: one number for every round size, or
 *                   {"bytes": [n], "factor": [n]} per round size (n <= IOAA_BESIDE_MAX_POINTS,
 *                   bytes strictly increasing; linear between them, the end values outside);
 *                   `pulse profile` measures it on a device backend. Absent:
 *                   IOAA_PROFILE_BESIDE_DEFAULT
 *   recall.compute_beside  optional, each in [1, IOAA_PROFILE_COMPUTE_MAX]: the engine's
 *                   layers' time beside a stream of recall rounds over their time alone (`pulse
 *                   profile` measures it with recall.beside_compute): one number for every
 *                   round size (prof.compute_beside), or {"bytes": [n], "factor": [n]} per
 *                   size of the rounds (info.beside's slow table; prof.compute_beside is then
 *                   its largest factor, the one IRQ's normal layers take). Absent: 0 (none)
 *   recall.by_context  optional: the recall per offload request and layer (over all L layers,
 *                   as r) that real offload steps moved at each context (`pulse profile
 *                   --bytes-contexts`), with the schedule they ran:
 *                   {"context": [n], "bytes": [n], "source_bytes": s, "speculate": false}
 *                   exact at layer (s: the churn estimate of r its query source aimed at), or
 *                   {"context", "bytes", "prefetch": [n], "after_selection": [n],
 *                    "speculate": true, "spec_margin": m, "spec_from": "input"|"mid"|"hits"}
 *                   with speculation, bytes = prefetch + after_selection (the corrections and
 *                   the exact rounds of the layers not predicted); n <= IOAA_BYCTX_MAX_POINTS,
 *                   contexts strictly increasing (info.by_context; ioaa_bytes_at)
 *   env.gpu, else env.device   optional: where it was measured (info.device)
 *   measurement.copy_bandwidth_GBps, .h2d_peak_GBps   optional, > 0: the ceilings measured
 *                   with it (info.copy_gbps, h2d_gbps: ioaa_profile_data_scale's references)
 *   config.budget_tokens   optional, >= 1: the budget it was measured at (info.budget_tokens)
 * The reader ignores other keys (pulse profile's tool, the rest of env, config and
 * measurement). Grids hold 1..IOAA_PROFILE_MAX_POINTS values > 0, strictly increasing; times
 * are finite, t_N and t_O > 0, t_R >= 0.
 * Measured tables are noisy, and ioaa.h needs them nondecreasing along every axis: the reader
 * replaces each value by the running maximum (t_N(b, c) by the largest t_N(b', c') with b' <= b
 * and c' <= c, the smallest nondecreasing table above the measured one) and counts the values
 * it raised. Written with all 17 digits (results_write_exact), a profile reads back bit for
 * bit: to_json, write, load gives the same tables. */
#ifndef PULSE_IOAA_PROFILE_H
#define PULSE_IOAA_PROFILE_H

#include <jansson.h>
#include <stddef.h>

#include "floor.h"
#include "ioaa.h"
#include "model.h"

#define IOAA_PROFILE_SCHEMA "pulse-ioaa-profile/1"
#define IOAA_PROFILE_MAX_POINTS 1024 /* per grid axis */
/* recall.beside_compute where the profile lacks it: the zero-copy gather beside an offload
 * layer's compute moved 24-29 GB/s on the H200 against its 55.5 GB/s alone (s20), and 0.38-0.46
 * of its rate alone beside a GEMM (s16, recall-bench's interference runs): about half */
#define IOAA_PROFILE_BESIDE_DEFAULT 0.5
#define IOAA_PROFILE_BESIDE_MAX 2.0
#define IOAA_PROFILE_COMPUTE_MAX 8.0 /* within ioaa.h's limit */
#define IOAA_BESIDE_MAX_POINTS 16

/* The recall beside compute (recall.beside_compute): while the compute runs, a recall round
 * moves its bytes at factor(x) of its rate alone (x its bytes); the compute beside the recall
 * takes recall.compute_beside times as long (struct ioaa_profile's compute_beside, or per round
 * size the slow table below: a small round's gather holds fewer SMs); once one ends the other
 * runs at its own speed (ioaa_overlap). */
struct ioaa_beside {
    int n;                                 /* points; 0: not measured (the default factor) */
    double bytes[IOAA_BESIDE_MAX_POINTS];  /* round sizes, strictly increasing (n = 1: any) */
    double factor[IOAA_BESIDE_MAX_POINTS]; /* each in (0, IOAA_PROFILE_BESIDE_MAX] */
    int slow_n; /* recall.compute_beside as a table: points (>= 2), or 0 (the profile's one g) */
    double slow_bytes[IOAA_BESIDE_MAX_POINTS]; /* round sizes, strictly increasing */
    double slow[IOAA_BESIDE_MAX_POINTS];       /* each in [1, IOAA_PROFILE_COMPUTE_MAX] */
};

/* The recall bytes by context (recall.by_context): what a request's selections recall depends
 * on its context (the hot cache keeps more of a short context's returning blocks, and the
 * lists churn more at long ones), which one r per profile does not hold. */
#define IOAA_BYCTX_MAX_POINTS 16
struct ioaa_bytes_by_context {
    int n;             /* points; 0: not measured */
    int speculate;     /* 1: measured with speculation (prefetch and after_selection set) */
    double source_bytes; /* the churn estimate of r the steps' query source aimed at: budget x its
                            locality profile's mean churn x KV bytes per token and layer (a run
                            of another profile or budget aims elsewhere) */
    double spec_margin; /* its --spec-margin */
    char spec_from[8];  /* its --spec-from: "input", "mid" or "hits" */
    double context[IOAA_BYCTX_MAX_POINTS]; /* tokens, strictly increasing */
    double bytes[IOAA_BYCTX_MAX_POINTS];   /* per request and layer, all L layers */
    double prefetch[IOAA_BYCTX_MAX_POINTS], after[IOAA_BYCTX_MAX_POINTS]; /* speculate */
};

/* b at context c (tokens, > 0): each series linear in log c between the points, the end
 * values outside; *prefetch and *after 0 without speculation. b->n >= 1. */
void ioaa_bytes_at(const struct ioaa_bytes_by_context *b, double c, double *bytes,
                   double *prefetch, double *after);
/* b as recall.by_context holds it; NULL when b has none. Caller owns the reference. */
json_t *ioaa_bytes_by_context_to_json(const struct ioaa_bytes_by_context *b);
/* Parses recall.by_context's object j into b (the header's form, checked): PULSE_OK, or
 * PULSE_ERR_INVALID with the field named in err, prefixed by `name`. */
int ioaa_bytes_by_context_from_json(const json_t *j, struct ioaa_bytes_by_context *b,
                                    const char *name, char *err, size_t errlen);

/* The descriptive fields (NUL-terminated; a longer string in a file is an error). */
struct ioaa_profile_info {
    char model[64], backend[32], recall_engine[32];
    char date[32];   /* UTC, e.g. 2026-12-01T10:00:00Z */
    char source[16]; /* "measured" or "analytic" */
    char note[512];  /* "" when none */
    char device[96]; /* where it was measured: env.gpu, else env.device ("" when not said) */
    /* the ceilings measured with it (measurement.copy_bandwidth_GBps, .h2d_peak_GBps; 0: not
     * in the profile): what ioaa_profile_data_scale's factors are taken against */
    double copy_gbps, h2d_gbps;
    int budget_tokens;    /* config.budget_tokens: the budget it was measured at (0: not said) */
    struct ioaa_beside beside; /* recall.beside_compute (n 0: absent) */
    struct ioaa_bytes_by_context by_context; /* recall.by_context (n 0: absent) */
};

/* A profile that owns its tables: prof's pointers point at the arrays below, which are carved
 * from one host allocation (mem, mem_bytes). Zero it before the first alloc / load. */
struct ioaa_profile_data {
    struct ioaa_profile prof;
    struct ioaa_profile_info info;
    int raised; /* table values the reader's running maximum raised (0 for a monotone file) */
    double *tn_b, *tn_c, *tn, *to_b, *to, *tr_bytes, *tr;
    void *mem;
    size_t mem_bytes;
};

/* Frees d's tables (if any) and allocates zeroed ones of nb x nc (t_N), n_offload (t_O) and
 * n_recall (t_R) points, each in 1..IOAA_PROFILE_MAX_POINTS; prof points at them with its
 * counts set, n_layers and recall_bytes 0, info cleared. PULSE_OK, PULSE_ERR_INVALID (a count
 * out of range) or PULSE_ERR_NOMEM, with a reason in err. */
int ioaa_profile_data_alloc(struct ioaa_profile_data *d, int nb, int nc, int n_offload,
                            int n_recall, char *err, size_t errlen);
/* Frees the tables and zeroes d (a zeroed d is a no-op). */
void ioaa_profile_data_free(struct ioaa_profile_data *d);

/* Raises every table value of d to the running maximum (header comment); returns how many
 * values it raised. */
int ioaa_profile_data_monotone(struct ioaa_profile_data *d);

/* A table point at least `factor` (> 1) times a later point's value: the first such pair (i < j,
 * the smallest i, then the j of the smallest value after it) into *i and *j; returns 1, or 0
 * when there is none. A larger batch, context or round is never that much faster, so such a
 * pair is a stall during the measurement, which the running maximum would carry up the table. */
int ioaa_profile_inverted(const double *v, int n, double factor, int *i, int *j);

/* Recall rounds no faster than a cap of bytes_per_s (> 0): each t_R(x) raised to at least
 * x / bytes_per_s, as the engine's pacing makes them (recall.h, cap_gbps); the table stays
 * nondecreasing. Returns how many values it raised. */
int ioaa_profile_data_cap_recall(struct ioaa_profile_data *d, double bytes_per_s);

/* Carries d to another device: its compute times (t_N, t_O) times `compute`, its recall round
 * times (t_R) times `recall`, both finite and > 0 (pulseinfer takes them as the profile's copy
 * bandwidth and H2D peak over the run's: decode layers are bound by HBM, the rounds by the
 * link). PULSE_OK, or PULSE_ERR_INVALID with a reason in err (d unchanged). */
int ioaa_profile_data_scale(struct ioaa_profile_data *d, double compute, double recall, char *err,
                            size_t errlen);

/* A round of `bytes`' rate beside compute over its rate alone: b's factors interpolated, the
 * default when b has none. */
double ioaa_beside_rate(const struct ioaa_beside *b, double bytes);
/* The compute's slowdown beside rounds of `bytes`: b's slow table interpolated (its end values
 * outside), g (the profile's one) when it has none. */
double ioaa_beside_slow(const struct ioaa_beside *b, double bytes, double g);
/* recall.compute_beside as b and g hold it: the table when b has one, else g (a number; NULL
 * when g is 0, none). Caller owns the reference. */
json_t *ioaa_compute_beside_to_json(const struct ioaa_beside *b, double g);
/* A compute of `compute` seconds alone and a recall of `recall` seconds alone started together:
 * while both run the recall moves at `rate` of its rate alone and the compute takes `slow` (>= 1)
 * times as long; the one left runs alone after. The time until both have ended:
 *   compute + (recall / rate) (1 - 1 / slow)   when the compute ends last (slow compute >= recall
 *                                              / rate)
 *   recall + slow compute (1 - rate)           when the recall does
 * (max(compute, recall) at rate = slow = 1). rate > 0, times >= 0. */
double ioaa_overlap(double compute, double recall, double rate, double slow);
/* b as recall.beside_compute holds it: one factor a number, several {"bytes", "factor"}; NULL
 * when b has none. Caller owns the reference. */
json_t *ioaa_beside_to_json(const struct ioaa_beside *b);
/* A check of b as the readers take it: 0, or -1 with a reason in why. */
int ioaa_beside_check(const struct ioaa_beside *b, char *why, size_t len);

/* Speculation with exact correction (pulseinfer --speculate; DESIGN section 7, mechanism 5)
 * folded into the recall table. A layer of an offload batch of b requests recalls
 *   P(b) = b prefetch_bytes     the prefetch of the predicted blocks not resident, started one
 *                               layer ahead (the approximate lists' churn)
 *   C(b) = b correction_bytes   the corrections once the exact selection has run (the blocks
 *                               the prediction missed that neither list of the step before held)
 * per request and layer averaged over the L layers (as r is), serially (one planner, one
 * engine): the prefetch beside the window w of the layer before (w t_O: the whole layer, w =
 * 1, when the prediction is made at its input; its MLP's share when it is made after its
 * attention, offload_params.spec_from mid), the two slowing each other as d->info.beside says
 * (ioaa_overlap: the round at f = ioaa_beside_rate(P(b)) of its rate while the window's compute
 * runs, the compute g = ioaa_beside_slow(P(b)) times as long (g = ioaa_compute_beside(a) without
 * a slow table), each alone once the other has
 * ended), then the corrections. So the step of ioaa.h with t_R replaced by
 *   t_R'(b) = t_R(C(b)) + ioaa_overlap(w t_O(b), t_R(P(b)), f, g) - w t_O(b)
 * (at g = 1: t_R(C) + max(0, t_R(P) - f w t_O), the prefetch's part the window did not cover
 * at its beside rate) gives S = L (t_N + t_O + max(0, t_R' - t_N)) with a normal batch and IRQ
 * (the corrections and the prefetch's remainder beside normal layers), and L (t_O + t_R') +
 * L t_N without. The recall table becomes t_R' at b = 1 .. max_batch (at most
 * IOAA_PROFILE_MAX_POINTS) keyed by P(b) + C(b) bytes, r becomes P(1) + C(1), and the table is
 * made nondecreasing (the running maximum: never below t_R'). Nothing changes when
 * P(1) + C(1) = 0 (nothing moves). Bytes >= 0, window in (0, 1], max_batch >= 1. PULSE_OK, or
 * PULSE_ERR_INVALID / PULSE_ERR_NOMEM with a reason in err. */
int ioaa_profile_data_speculate(struct ioaa_profile_data *d, double prefetch_bytes,
                                double correction_bytes, double window, int max_batch, char *err,
                                size_t errlen);

/* t_R'(b) above on a's (unfolded) tables, with the prefetch's time scaled by k_prefetch and the
 * corrections' by k_correction (1, 1: the fold's; ioaa_refit.h refits them). */
double ioaa_spec_recall(const struct ioaa *a, double b, double prefetch_bytes,
                        double correction_bytes, const struct ioaa_beside *beside, double window,
                        double k_prefetch, double k_correction);

/* The schema object of p (any values: nothing is checked) and info; caller owns the reference.
 * Grid values that are integers below 2^53 are written as JSON integers. */
json_t *ioaa_profile_to_json(const struct ioaa_profile *p, const struct ioaa_profile_info *info);

/* Parses and validates j into d (freed first; on failure d is left zeroed), then takes the
 * running maximum (d->raised). `name` (a file name) prefixes every message, which names the
 * field, e.g. "prof.json: normal.layer_s[1]: 3 values, expected 4 (one per normal.context)".
 * PULSE_OK, PULSE_ERR_INVALID or PULSE_ERR_NOMEM. */
int ioaa_profile_from_json(const json_t *j, const char *name, struct ioaa_profile_data *d,
                           char *err, size_t errlen);
/* Reads path and parses it as from_json does: PULSE_OK, PULSE_ERR_IO (missing file, bad JSON)
 * or PULSE_ERR_INVALID / PULSE_ERR_NOMEM. */
int ioaa_profile_load(const char *path, struct ioaa_profile_data *d, char *err, size_t errlen);

/* An analytic profile: what each table's traffic costs at the bandwidths measured on a backend
 * (floor.h: HBM copy GB/s, read + write counted, and the single-copy H2D peak), with W = one
 * layer's weight bytes and k = one layer's KV bytes per token:
 *   t_N(b, c) = (W + b k c') / HBM   c' = c averaged over the layers, a local layer's clamped
 *                                        to its window (as the vanilla floor counts it)
 *   t_O(b)    = (W + b k budget_tokens) / HBM
 *   t_R(x)    = x / H2D
 * on b in {1, 2, 4, ..., 64} (t_N and t_O), c in {1024, 2048, ..., 131072}, x in {4 KiB,
 * 16 KiB, ..., 1 GiB}. Such a profile is a floor: real layers are slower. */
struct ioaa_analytic_params {
    const struct model_config *cfg;
    struct floor_bw bw;        /* both > 0 */
    int budget_tokens;         /* tokens an offload request's sparse layer attends, >= 1 */
    double recall_bytes;       /* r, per offload request and layer, >= 0 */
    const char *backend;       /* descriptive (may be NULL): where the bandwidths were measured */
    const char *recall_engine; /* descriptive (may be NULL) */
};
/* The formulas above at one point, seconds (p valid as ioaa_profile_analytic requires). */
double ioaa_analytic_t_normal(const struct ioaa_analytic_params *p, double b, double c);
double ioaa_analytic_t_offload(const struct ioaa_analytic_params *p, double b);
double ioaa_analytic_t_recall(const struct ioaa_analytic_params *p, double bytes);
/* Fills d (freed first) with the analytic profile: info.source "analytic", the date now, a
 * note with the bandwidths. PULSE_OK, or PULSE_ERR_INVALID / PULSE_ERR_NOMEM with a reason. */
int ioaa_profile_analytic(const struct ioaa_analytic_params *p, struct ioaa_profile_data *d,
                          char *err, size_t errlen);

/* The current UTC time as "YYYY-MM-DDTHH:MM:SSZ" into buf (>= 21 bytes). */
void ioaa_profile_date_now(char *buf, size_t len);

#endif
