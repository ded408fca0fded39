/* Request generators. A spec string names the workload:
 *   uniform:LEN:COUNT     COUNT requests of LEN prompt tokens
 *   random:MIN:MAX:COUNT  COUNT requests whose prompt lengths are uniform in [MIN, MAX], from
 *                         the seed (splitmix64)
 *   servegen:MEAN:COUNT   COUNT prompt lengths from a log-normal fitted to ServeGen's language
 *                         data (alibaba/ServeGen data/language/m-large, rate-weighted over its
 *                         client windows: median 601, p90 2371 tokens, so sigma = ln(2371/601)
 *                         / z(0.9) = 1.071), scaled to mean MEAN (16 to a quarter of the
 *                         longest length): the shape of production prompts at the paper's
 *                         16K-64K means; clipped to [64, 4 MEAN]; from the seed
 *   servegen-mix:MEAN:COUNT  COUNT prompt lengths from the family ServeGen's paper names for
 *                         language inputs, a mixture of Pareto and log-normal, fitted by
 *                         maximum likelihood to the same data (workload.c: SG_MIX; 0.6935 x
 *                         Pareto(465, 1.2947) truncated at 30712 + 0.3065 x LogNormal(4.766,
 *                         0.706): Kolmogorov-Smirnov distance 0.082 to the data, servegen's
 *                         0.145), scaled so that the lengths clipped to [64, 4 MEAN] have mean
 *                         MEAN (256 to a quarter of the longest length); from the seed
 *   lognormal:MEAN:SIGMA:COUNT  servegen's log-normal with another shape SIGMA (a decimal
 *                         in (0, 3]); the Mooncake conversation trace (kvcache-ai/Mooncake
 *                         FAST25-release: median 6909, p90 27367 tokens) gives SIGMA 1.074
 *   drift:FROM:TO:COUNT   workload drift (the paper's section 3.3: ServeGen's length
 *                         distribution shifts over time, changing the short-to-long mix):
 *                         servegen's shape with its mean moving geometrically from FROM for the
 *                         first request to TO for the last, in arrival order
 *   lengths:L1,L2,...     one request per listed prompt length
 *   trace:FILE.jsonl      a Mooncake-format trace (kvcache-ai/Mooncake FAST25-release): one
 *                         JSON object a line, "timestamp" (ms, non-decreasing), "input_length",
 *                         "output_length" (tokens), optional "hash_ids" (integers; prefix
 *                         blocks, not used here); each request's own lengths, arriving at its
 *                         timestamp after the first's; output_len is then the longest output.
 *                         A bad line is reported with its number.
 * Otherwise every request gets output_len output tokens and arrives at time 0 (all at once;
 * workload_set_arrivals gives other processes). */
#ifndef PULSE_WORKLOAD_H
#define PULSE_WORKLOAD_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "serve.h"

struct workload {
    char spec[256];
    char arrival[64]; /* the arrival spec (workload_set_arrivals): "all" by default */
    uint64_t seed;
    int output_len;
    int n;
    struct request *reqs; /* owned */
    int32_t *token_store; /* owned, n * output_len ids, reqs[i].tokens point into it */
};

/* servegen's log-normal shape (sigma of ln length); the i-th length of a log-normal of mean
 * `mean` and shape sigma from a hash stream (numeric.h), clipped to [64, 4 mean]. */
#define WORKLOAD_SERVEGEN_SIGMA 1.0709
int workload_lognormal_length(uint64_t stream, uint64_t i, double mean, double sigma);

/* servegen-mix at mean `mean`: the scale of the fitted mixture's lengths, and the CDF of the
 * clipped lengths at len (for statistics and tests). */
double workload_servegen_mix_scale(double mean);
double workload_servegen_mix_cdf(double mean, double len);

/* Parses spec into w. PULSE_OK, or PULSE_ERR_INVALID with a one-line reason in err. */
int workload_create(struct workload *w, const char *spec, int output_len, uint64_t seed, char *err,
                    size_t errlen);
void workload_free(struct workload *w);
/* Arrival times of w's requests, from spec:
 *   all              every request at time 0 (the default)
 *   poisson:RATE     a Poisson process of RATE requests/s (exponential gaps)
 *   gamma:RATE:CV    gaps from a gamma distribution of mean 1/RATE and coefficient of variation
 *                    CV (1 is Poisson; above 1 burstier, below 1 more regular)
 * RATE and CV are positive decimals (no sign, exponent or spaces). Seeded by w->seed: the same
 * seed gives the same times. PULSE_OK, or PULSE_ERR_INVALID with a one-line reason. */
int workload_set_arrivals(struct workload *w, const char *spec, char *err, size_t errlen);
/* The longest prompt + output of any request. */
int workload_max_tokens(const struct workload *w);
/* Writes w as a Mooncake-format trace (the trace: kind reads it back): a line per request,
 * {"timestamp": arrival in ms (to the microsecond), "input_length", "output_length",
 * "hash_ids": ceil(input / 512) ids, each block its own (no shared prefixes)}. Through
 * results_write_file. PULSE_OK or PULSE_ERR_IO with a reason. */
int workload_write_trace(const struct workload *w, const char *path, char *err, size_t errlen);
/* {"spec", "seed", "output_len", "requests", "prompt_tokens_total", "arrival"}. */
json_t *workload_to_json(const struct workload *w);

#endif
