/* Statistics of an accuracy table a reader can trust (issue: accuracy on the paper's layouts):
 * a 95% interval for each cell's mean score, and a paired comparison of a policy against full
 * attention on the same samples (each sample scored by both).
 *
 * Scores are per sample in [0, 1]. A cell whose scores are all 0 or 1 (the synthetic tasks:
 * right or wrong) gets Wilson's score interval; other cells (F1, ROUGE) the normal interval of
 * the mean from the sample variance, clipped to [0, 1]. The paired comparison: the mean
 * difference and the ratio of the means (the table's "relative to full"), each with a 95%
 * percentile interval from a paired bootstrap (samples resampled together, seeded, so the same
 * inputs give the same interval), and the per-sample wins, losses and ties with the exact
 * two-sided sign test on wins against losses (McNemar's exact test for binary scores). */
#ifndef PULSE_ACC_STATS_H
#define PULSE_ACC_STATS_H

#include <stdint.h>

/* Wilson's score interval of k successes in n trials at normal quantile z (1.96 for 95%). */
void acc_wilson(double k, int n, double z, double *lo, double *hi);
/* The 95% interval of the mean of n scores in [0, 1] (see above); n = 0 gives [0, 1]. */
void acc_interval(const double *s, int n, double *lo, double *hi);
/* Exact two-sided sign test: P(at least as uneven as b of b + c) under p = 1/2; 1 when b + c
 * is 0. */
double acc_sign_test(int b, int c);

struct acc_paired {
    int n, wins, losses, ties;          /* the policy's score above, below, equal to full's */
    double mean_diff, diff_lo, diff_hi; /* mean(policy - full), its 95% interval */
    double rel, rel_lo, rel_hi;         /* mean(policy) / mean(full); NaN when full's mean is 0 */
    double sign_p;                      /* acc_sign_test(wins, losses) */
};

/* The paired comparison of run[] against full[] over n samples, `reps` bootstrap resamples
 * (>= 100) from `seed`. PULSE_OK, or PULSE_ERR_NOMEM / PULSE_ERR_INVALID (n < 1, reps < 100). */
int acc_paired_compare(const double *run, const double *full, int n, int reps, uint64_t seed,
                       struct acc_paired *out);

/* Spearman's rank correlation of a[n] and b[n] (ties get their average rank): the Pearson
 * correlation of the ranks; NaN when n < 2 or either side is constant. For the stability of
 * head roles across task types (the paper finds the MAM ranking of heads stable across Qasper
 * and QMSum). */
double acc_spearman(const double *a, const double *b, int n);

#endif
