/* The accuracy table's intervals and paired comparison (stats.h). */
#include "stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "mem.h"
#include "numeric.h"

void acc_wilson(double k, int n, double z, double *lo, double *hi)
{
    if (n <= 0) {
        *lo = 0, *hi = 1;
        return;
    }
    const double p = k / n, z2 = z * z, den = 1 + z2 / n;
    const double mid = (p + z2 / (2.0 * n)) / den;
    const double half = z * sqrt(p * (1 - p) / n + z2 / (4.0 * n * n)) / den;
    *lo = PULSE_MAX(0.0, mid - half);
    *hi = PULSE_MIN(1.0, mid + half);
}

void acc_interval(const double *s, int n, double *lo, double *hi)
{
    if (n <= 0) {
        *lo = 0, *hi = 1;
        return;
    }
    double sum = 0;
    int binary = 1;
    for (int i = 0; i < n; i++) {
        sum += s[i];
        binary &= s[i] == 0.0 || s[i] == 1.0;
    }
    if (binary) {
        acc_wilson(sum, n, 1.96, lo, hi);
        return;
    }
    const double mean = sum / n;
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (s[i] - mean) * (s[i] - mean);
    const double se = n > 1 ? sqrt(ss / (n - 1) / n) : 0.5;
    *lo = PULSE_MAX(0.0, mean - 1.96 * se);
    *hi = PULSE_MIN(1.0, mean + 1.96 * se);
}

double acc_sign_test(int b, int c)
{
    const int m = b + c, k = b < c ? b : c;
    if (m == 0) return 1.0;
    /* 2 * P(X <= k), X ~ Binomial(m, 1/2), each term through lgamma */
    double p = 0;
    for (int i = 0; i <= k; i++)
        p += exp(lgamma(m + 1.0) - lgamma(i + 1.0) - lgamma(m - i + 1.0) - m * log(2.0));
    return PULSE_MIN(1.0, 2 * p);
}

static int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y ? 1 : 0;
}

/* The q-quantile of sorted v[n] (the nearest rank). */
static double quantile(const double *v, int n, double q)
{
    int i = (int)floor(q * (n - 1) + 0.5);
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

int acc_paired_compare(const double *run, const double *full, int n, int reps, uint64_t seed,
                       struct acc_paired *out)
{
    memset(out, 0, sizeof *out);
    if (n < 1 || reps < 100) return PULSE_ERR_INVALID;
    double sr = 0, sf = 0;
    for (int i = 0; i < n; i++) {
        sr += run[i], sf += full[i];
        out->wins += run[i] > full[i];
        out->losses += run[i] < full[i];
        out->ties += run[i] == full[i];
    }
    out->n = n;
    out->mean_diff = (sr - sf) / n;
    out->rel = sf > 0 ? sr / sf : NAN;
    out->sign_p = acc_sign_test(out->wins, out->losses);
    double *d = mem_alloc(MEM_HOST, sizeof(double) * 2 * (size_t)reps, "paired bootstrap");
    if (!d) return PULSE_ERR_NOMEM;
    double *rel = d + reps;
    int n_rel = 0;
    for (int r = 0; r < reps; r++) { /* one resample of n sample indices, taken together */
        double a = 0, b = 0;
        for (int i = 0; i < n; i++) {
            const int j =
                (int)(pulse_hash64(pulse_hash64(seed, (uint64_t)r), (uint64_t)i) % (uint64_t)n);
            a += run[j], b += full[j];
        }
        d[r] = (a - b) / n;
        if (b > 0) rel[n_rel++] = a / b;
    }
    qsort(d, (size_t)reps, sizeof *d, by_value);
    out->diff_lo = quantile(d, reps, 0.025);
    out->diff_hi = quantile(d, reps, 0.975);
    if (n_rel > 0) {
        qsort(rel, (size_t)n_rel, sizeof *rel, by_value);
        out->rel_lo = quantile(rel, n_rel, 0.025);
        out->rel_hi = quantile(rel, n_rel, 0.975);
    } else {
        out->rel_lo = out->rel_hi = NAN;
    }
    mem_free(MEM_HOST, d, sizeof(double) * 2 * (size_t)reps);
    return PULSE_OK;
}

/* The average ranks (1-based) of v[n] into r[n]; idx is scratch [n]. */
static void ranks(const double *v, int n, double *r, int *idx)
{
    for (int i = 0; i < n; i++)
        idx[i] = i;
    for (int i = 1; i < n; i++) /* insertion sort of the indices by value (n is small) */
        for (int j = i; j > 0 && v[idx[j - 1]] > v[idx[j]]; j--) {
            const int t = idx[j];
            idx[j] = idx[j - 1], idx[j - 1] = t;
        }
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && v[idx[j + 1]] == v[idx[i]])
            j++;
        for (int k = i; k <= j; k++)
            r[idx[k]] = 0.5 * (i + j) + 1;
        i = j + 1;
    }
}

double acc_spearman(const double *a, const double *b, int n)
{
    if (n < 2) return NAN;
    double *ra = mem_alloc(MEM_HOST, sizeof(double) * 2 * (size_t)n, "spearman ranks");
    int *idx = mem_alloc(MEM_HOST, sizeof(int) * (size_t)n, "spearman order");
    double rho = NAN;
    if (ra && idx) {
        double *rb = ra + n;
        ranks(a, n, ra, idx);
        ranks(b, n, rb, idx);
        const double m = 0.5 * (n + 1);
        double sab = 0, saa = 0, sbb = 0;
        for (int i = 0; i < n; i++) {
            sab += (ra[i] - m) * (rb[i] - m);
            saa += (ra[i] - m) * (ra[i] - m);
            sbb += (rb[i] - m) * (rb[i] - m);
        }
        if (saa > 0 && sbb > 0) rho = sab / sqrt(saa * sbb);
    }
    mem_free(MEM_HOST, ra, sizeof(double) * 2 * (size_t)n);
    mem_free(MEM_HOST, idx, sizeof(int) * (size_t)n);
    return rho;
}
