/* IOAA's recall terms refitted online (DESIGN.md section 7, mechanism 2: "check the model:
 * predicted against measured step time"). Plain C, host memory.
 *
 * The profile's t_R is measured alone, and its r at one context; in a step the recall runs
 * beside compute and moves the bytes the run's own selections churn. The serving loop knows its
 * steps' times (no extra sync: the time of a step it read back anyway), so for each steady step
 * of a composition (b_N normal requests with contexts summing to C, b_O offloaded) the refit
 * compares the measured step M with the model's step and keeps a correction factor of the recall
 * terms, which the next admission decision uses (ioaa_refit_apply rewrites the decision's t_R
 * table in place, ioaa_set_recall).
 *
 * Model (ioaa.h with the factors; t_N, t_O, t_R the unfolded profile's tables):
 *   exact at layer:  t_R = k_R t_R(b_O r)
 *   speculation:     t_R = k_C t_R(b_O C) + ioaa_overlap(w t_O, k_R t_R(b_O P), f, g) - w t_O
 *                    (ioaa_spec_recall: P, C the prefetch and correction bytes per request and
 *                    layer, f the prefetch round's rate beside compute, g the compute's slowdown
 *                    beside it, w the window of the layer it runs beside; t_O stands for w t_O
 *                    below where the prefetch is concerned)
 *   S = L (t_N + t_O + max(0, t_R - t_N)) with both batches and IRQ, else L t_N + L (t_O + t_R).
 * One step's estimate: the recall time X* that makes S = M, i.e. X* = M / L - t_O - t_N
 * (serial) or M / L - t_O (IRQ, when M / L > t_N + t_O; when the step hid its recall, X* = t_N
 * if the model had it exposed, else the step says nothing: uninformative). Exact: k_R* = X* /
 * t_R(b_O r). Speculation: the term that binds takes it: while the prefetch outlasts the
 * window's slowed compute (k_R t_R(P) / f > g t_O, or there are no corrections), its term is
 * linear in it and k_R* = (X* - k_C t_R(C) + t_O - g t_O (1 - f)) / t_R(P), unless that would
 * end the prefetch within the compute; otherwise the corrections take what the prefetch's
 * present term leaves, k_C* = (X* - prefetch term) / t_R(C) (without corrections and g > 1, the
 * compute's slowdown: k_R* = X* f / (t_R(P) (1 - 1 / g))).
 * The estimate is clamped to [k_min, k_max] and smoothed, k <- (1 - alpha) k + alpha k*: an
 * estimate does not depend on k (the exact case, or a term that keeps binding), so k converges
 * geometrically toward it, without overshoot, and noise is averaged over about 2 / alpha steps.
 * An estimate from a step whose compute terms alone (t_N + t_O) exceed M is uninformative (the
 * recall cannot be negative; those terms are the profile's to fix).
 *
 * A self-interleaved step (ioaa_self_period) is not the plain model's: its halves read the
 * weights twice and each half's compute runs beside the other's gather, which the profile's
 * alone-measured t_O does not see. Its own factor k_S scales the whole self step: from each
 * steady self step, k_S* = M / S_self(k_R, k_C) (the self model with the recall factors the
 * plain steps fitted), clamped and smoothed as above; the plain factors never see self steps,
 * nor k_S plain ones. */
#ifndef PULSE_IOAA_REFIT_H
#define PULSE_IOAA_REFIT_H

#include <stddef.h>
#include <stdint.h>

#include "ioaa.h"
#include "ioaa_profile.h"

#define IOAA_REFIT_ALPHA 0.2 /* the default smoothing */
#define IOAA_REFIT_K_MIN 0.25
#define IOAA_REFIT_K_MAX 8.0
#define IOAA_REFIT_TOL 0.01 /* a factor that moved this much (relative) rewrites the table */

struct ioaa_refit_params {
    const struct ioaa_profile *base; /* the unfolded profile (copied) */
    int irq;                         /* as the decision's ioaa_params.irq */
    int enabled;                     /* 0: observe counts nothing and the factors stay 1 */
    double alpha;                    /* in (0, 1]; 0: IOAA_REFIT_ALPHA */
    /* speculation (both 0: exact at layer): bytes per request and layer, and the recall and the
     * compute beside each other (the profile's info.beside; zeroed: the defaults) */
    double prefetch_bytes, correction_bytes;
    struct ioaa_beside beside;
    double window; /* speculation: the share of the layer before its prefetch runs beside
                      (ioaa_profile_data_speculate's w; 0: 1, the whole layer) */
    int max_batch; /* speculation: the folded table's batches 1 .. max_batch (as the fold) */
};

struct ioaa_refit_stats {
    double k_recall;     /* k_R */
    double k_correction; /* k_C (1 without speculation) */
    double k_self;       /* k_S: the self-interleaved step's factor */
    int64_t refits;      /* steps whose estimate moved a factor */
    int64_t self_refits; /* self-interleaved steps that moved k_S */
    int64_t uninformative;
    int64_t rewrites; /* tables rewritten by ioaa_refit_apply */
};

struct ioaa_refit;

/* NULL with a one-line reason in err (bad profile, alpha out of (0, 1], negative bytes, a beside
 * that ioaa_beside_check refuses, speculation with max_batch < 1). */
struct ioaa_refit *ioaa_refit_create(const struct ioaa_refit_params *p, char *err, size_t errlen);
void ioaa_refit_free(struct ioaa_refit *r);

/* The model's step for a composition with the current factors (refit 1) or with factors 1
 * (refit 0: the profile's prediction), seconds. */
double ioaa_refit_step(const struct ioaa_refit *r, int b_normal, int64_t ctx_sum, int b_offload,
                       int refit);

/* The self-interleaved step of an offload batch of b_offload requests and no normal batch
 * (ioaa_self_period over the halves of ceil and floor b_offload / 2, times L, times k_S) with
 * the current factors (refit 1) or factors 1 (refit 0): exact, each half's round k_R t_R(h r)
 * after its selection; speculation, its prefetch k_R t_R(h P) / f(h P) beside its compute and its
 * corrections k_C t_R(h C) after, both on the link. b_offload < 2: ioaa_refit_step's (nothing
 * to split). */
double ioaa_refit_self_step(const struct ioaa_refit *r, int b_offload, int refit);
/* One steady step of the composition took measured_s: updates the factors (when enabled and
 * the step is informative). Returns 1 when a factor moved, else 0. */
int ioaa_refit_observe(struct ioaa_refit *r, int b_normal, int64_t ctx_sum, int b_offload,
                       double measured_s);
/* One steady self-interleaved step of b_offload (>= 2) requests took measured_s: updates k_S
 * (when enabled). Returns 1 when it moved, else 0. */
int ioaa_refit_observe_self(struct ioaa_refit *r, int b_offload, double measured_s);

/* The recall per offload request and layer from now on (bytes, >= 0, finite): exact at layer
 * r (prefetch and correction 0), with speculation P and C (recall not used; P + C > 0), as the
 * composition's context gives them (pulseinfer: the profile's recall.by_context at the decision's
 * mean context). The model's steps and the estimates take them at once; the decision's table at
 * the next ioaa_refit_apply, which then rewrites it whatever the factors did (the decision's r
 * stays its grid's unit: its t_R(b r0) becomes the round of b requests at the new bytes).
 * PULSE_OK, or PULSE_ERR_INVALID with a reason in err (r unchanged). */
int ioaa_refit_set_bytes(struct ioaa_refit *r, double recall, double prefetch, double correction,
                         char *err, size_t errlen);

/* Writes the refitted recall table into the decision's model a (made from the same profile, the
 * speculation folded as ioaa_profile_data_speculate folds it) when a factor moved more than
 * IOAA_REFIT_TOL since the last write, or the bytes moved (ioaa_refit_set_bytes). Returns 1 when it wrote, 0 when not, or a PULSE_ERR_*
 * (< 0) with a reason in err. */
int ioaa_refit_apply(struct ioaa_refit *r, struct ioaa *a, char *err, size_t errlen);

void ioaa_refit_get_stats(const struct ioaa_refit *r, struct ioaa_refit_stats *s);

#endif
