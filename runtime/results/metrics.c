#include "metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double metrics_percentile_sorted(const double *sorted, int n, double p)
{
    double rank = p / 100.0 * (n - 1);
    int lo = (int)floor(rank), hi = (int)ceil(rank);
    if (lo < 0) lo = 0;
    if (hi > n - 1) hi = n - 1;
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo);
}

void metrics_summarize(const double *v, int n, struct dist_summary *out)
{
    memset(out, 0, sizeof *out);
    out->n = n;
    if (n <= 0) return;
    double *s = mem_alloc(MEM_HOST, sizeof(double) * n, "summary");
    if (!s) return;
    memcpy(s, v, sizeof(double) * n);
    qsort(s, n, sizeof(double), cmp_double);
    double sum = 0, sq = 0;
    for (int i = 0; i < n; i++)
        sum += s[i];
    out->mean = sum / n;
    for (int i = 0; i < n; i++)
        sq += (s[i] - out->mean) * (s[i] - out->mean);
    out->std = sqrt(sq / n);
    out->median = metrics_percentile_sorted(s, n, 50);
    out->p90 = metrics_percentile_sorted(s, n, 90);
    out->p99 = metrics_percentile_sorted(s, n, 99);
    out->min = s[0];
    out->max = s[n - 1];
    mem_free(MEM_HOST, s, sizeof(double) * n);
}
