/* Summaries of per-request latencies with vLLM's conventions: population std, percentiles by
 * linear interpolation between closest ranks (numpy's default). */
#ifndef PULSE_METRICS_H
#define PULSE_METRICS_H

struct dist_summary {
    int n;
    double mean, median, std, p90, p99, min, max;
};

/* Summarises v[0..n) (not modified; n may be 0, giving all zeros). */
void metrics_summarize(const double *v, int n, struct dist_summary *out);
/* The p-th percentile (0..100) of sorted[0..n), n >= 1, linear interpolation. */
double metrics_percentile_sorted(const double *sorted, int n, double p);

#endif
