#include "workload.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "mem.h"
#include "numeric.h"
#include "results.h"

#define WORKLOAD_MAX_REQUESTS 1000000
#define WORKLOAD_MAX_LEN (1 << 24)

/* the seed's sub-streams (pulse_seed_mix) */
enum { STREAM_LENGTHS = 1, STREAM_ARRIVALS = 2 };

/* Parses a positive int in [1, max] from [s, end): decimal digits only (no sign, spaces or hex,
 * the rules of the command line's cli_int, which this library cannot link); -1 when it is not
 * one. */
static long parse_pos(const char *s, const char *end, long max)
{
    if (s == end || end - s > 12) return -1;
    long v = 0;
    for (const char *p = s; p < end; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
    }
    return v >= 1 && v <= max ? v : -1;
}

static int alloc_reqs(struct workload *w, int n)
{
    w->n = n;
    w->reqs = mem_alloc(MEM_HOST, sizeof(struct request) * n, "requests");
    w->token_store = mem_alloc(MEM_HOST, sizeof(int32_t) * (size_t)n * w->output_len, "tokens");
    if (!w->reqs || !w->token_store) return PULSE_ERR_NOMEM;
    memset(w->reqs, 0, sizeof(struct request) * n);
    /* rows longer than a request's output (a trace's) stay 0: the store hashes the same */
    memset(w->token_store, 0, sizeof(int32_t) * (size_t)n * w->output_len);
    for (int i = 0; i < n; i++) {
        w->reqs[i].id = i;
        w->reqs[i].output_len = w->output_len;
        w->reqs[i].tokens = w->token_store + (size_t)i * w->output_len;
    }
    return PULSE_OK;
}

/* ------------------------------------------------------------------ Mooncake traces */

/* One trace line: 1 and its fields, 0 for a blank line, -1 after a message. */
static int trace_line(const char *path, int line, const char *text, size_t len, long *in, long *out,
                      double *ts, char *err, size_t errlen)
{
    size_t k = 0;
    while (k < len && (text[k] == ' ' || text[k] == '\t' || text[k] == '\r'))
        k++;
    if (k == len) return 0;
    json_error_t je;
    json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    const char *why = NULL;
    json_t *ji = j ? json_object_get(j, "input_length") : NULL,
           *jo = j ? json_object_get(j, "output_length") : NULL,
           *jt = j ? json_object_get(j, "timestamp") : NULL,
           *jh = j ? json_object_get(j, "hash_ids") : NULL;
    if (!j)
        why = je.text;
    else if (!json_is_object(j))
        why = "not a JSON object";
    else if (!json_is_integer(ji) || json_integer_value(ji) < 1 ||
             json_integer_value(ji) > WORKLOAD_MAX_LEN)
        why = "input_length: expected an integer in [1, 16777216]";
    else if (!json_is_integer(jo) || json_integer_value(jo) < 1 ||
             json_integer_value(jo) > WORKLOAD_MAX_LEN)
        why = "output_length: expected an integer in [1, 16777216]";
    else if (!json_is_number(jt) || !isfinite(json_number_value(jt)) || json_number_value(jt) < 0)
        why = "timestamp: expected a finite number of milliseconds >= 0";
    else if (jh && !json_is_array(jh))
        why = "hash_ids: expected an array of block ids";
    if (!why && jh) {
        size_t i;
        json_t *h;
        json_array_foreach(jh, i, h) if (!json_is_integer(h)) why =
            "hash_ids: a block id is not an integer";
    }
    if (why) {
        snprintf(err, errlen, "--workload: %s:%d: %s", path, line, why);
        json_decref(j);
        return -1;
    }
    *in = (long)json_integer_value(ji);
    *out = (long)json_integer_value(jo);
    *ts = json_number_value(jt);
    json_decref(j);
    return 1;
}

/* trace:PATH, a Mooncake-format JSONL trace (timestamp in ms, input_length, output_length,
 * hash_ids): one request per line, its prompt and output lengths and its arrival. */
static int load_trace(struct workload *w, const char *path, char *err, size_t errlen)
{
    char *buf;
    size_t size;
    char why[400];
    int rc = pulse_read_file(path, "trace", &buf, &size, why, sizeof why);
    if (rc == PULSE_OK) {
        rc = pulse_check_text(buf, size, path, why, sizeof why);
        if (rc != PULSE_OK) free(buf), buf = NULL;
    }
    if (rc != PULSE_OK) {
        snprintf(err, errlen, "--workload: %s", why);
        return rc == PULSE_ERR_NOMEM ? PULSE_ERR_NOMEM : PULSE_ERR_INVALID;
    }
    for (int pass = 0; pass < 2 && rc == PULSE_OK; pass++) { /* count, then fill */
        int line = 0, n = 0, max_out = 1;
        double first = 0, prev = 0;
        for (const char *p = buf; *p && rc == PULSE_OK; line++) {
            const char *nl = strchr(p, '\n');
            const size_t len = nl ? (size_t)(nl - p) : strlen(p);
            long in, out;
            double ts;
            const int r = trace_line(path, line + 1, p, len, &in, &out, &ts, err, errlen);
            if (r < 0) rc = PULSE_ERR_INVALID;
            if (r > 0 && n > 0 && ts < prev) {
                snprintf(err, errlen,
                         "--workload: %s:%d: timestamp %g is before the previous request's %g",
                         path, line + 1, ts, prev);
                rc = PULSE_ERR_INVALID;
            }
            if (r > 0 && rc == PULSE_OK) {
                if (n >= WORKLOAD_MAX_REQUESTS) {
                    snprintf(err, errlen, "--workload: %s: more than %d requests", path,
                             WORKLOAD_MAX_REQUESTS);
                    rc = PULSE_ERR_INVALID;
                    break;
                }
                if (n == 0) first = ts;
                prev = ts;
                max_out = PULSE_MAX(max_out, (int)out);
                if (pass == 1) {
                    w->reqs[n].prompt_len = (int)in;
                    w->reqs[n].output_len = (int)out;
                    w->reqs[n].arrival_s = (ts - first) * 1e-3;
                }
                n++;
            }
            p = nl ? nl + 1 : p + len;
        }
        if (rc == PULSE_OK && n == 0) {
            snprintf(err, errlen, "--workload: %s: no requests in the trace", path);
            rc = PULSE_ERR_INVALID;
        }
        if (rc == PULSE_OK && pass == 0) {
            w->output_len = max_out; /* the token store's row: the longest output */
            if (alloc_reqs(w, n) != PULSE_OK) rc = PULSE_ERR_NOMEM;
        }
    }
    free(buf);
    if (rc == PULSE_OK) snprintf(w->arrival, sizeof w->arrival, "trace");
    return rc;
}

static double parse_decimal(const char *s, const char *end);

/* A uniform double in (0, 1) from 53 bits of the stream's idx-th hash. */
static double open_uniform(uint64_t stream, uint64_t idx)
{
    return ((double)(pulse_hash64(stream, idx) >> 11) + 0.5) * 0x1p-53;
}

int workload_lognormal_length(uint64_t stream, uint64_t i, double mean, double s)
{
    /* log-normal of sigma s and the given mean: mu = ln(mean) - s^2 / 2; a normal draw by
     * Box-Muller from draws 2i and 2i+1 */
    const double mu = log(mean) - 0.5 * s * s;
    const double z = sqrt(-2.0 * log(open_uniform(stream, 2 * i))) *
                     cos(6.283185307179586 * open_uniform(stream, 2 * i + 1));
    const double len = exp(mu + s * z), lo = 64.0, hi = 4.0 * mean;
    return (int)llround(len < lo ? lo : len > hi ? hi : len);
}

/* ServeGen's language input lengths in the family its paper names (a mixture of Pareto and
 * log-normal), fitted by weighted maximum likelihood to the rate-weighted lengths of
 * alibaba/ServeGen data/language/m-large (commit f891d11; each client's 10-minute windows
 * weighted by rate x 600 s, paired with the latest 6-hour length table, as its clientpool.py
 * pairs them; the 147 of 162 clients whose table was in the copy read, 1.49e8 requests: mean 914,
 * p50 601, p90 2371, p99 5452, max 30712). With probability w a Pareto of scale xm and shape
 * alpha truncated at the data's longest prompt, else a log-normal: 0.6935 x Pareto(465.0, 1.2947)
 * on [465.0, 30712] + 0.3065 x LogNormal(4.7663, 0.7062), mean 1055.3, Kolmogorov-Smirnov
 * distance to the data 0.082 (the quantile-matched log-normal of servegen: 0.145). Its p50 is the
 * data's, its p90 2035 and p99 10027 (the data: 2371 and 5452). */
static const struct {
    double w, xm, alpha, upper, mu, sigma;
} SG_MIX = {0.6935, 464.98, 1.2947, 30712.0, 4.7663, 0.7062};

static double std_normal_cdf(double z)
{
    return 0.5 * erfc(-z / sqrt(2.0));
}

/* The fitted Pareto's CDF at y, its lengths scaled by k. */
static double sg_pareto_cdf(double k, double y)
{
    const double x0 = k * SG_MIX.xm, x1 = k * SG_MIX.upper;
    if (y <= x0) return 0;
    if (y >= x1) return 1;
    return (1 - pow(x0 / y, SG_MIX.alpha)) / (1 - pow(x0 / x1, SG_MIX.alpha));
}

/* The mixture scaled by k and clipped to [lo, hi]: its mean (0 < lo < hi). */
static double sg_clipped_mean(double k, double lo, double hi)
{
    const double mu = SG_MIX.mu + log(k), s = SG_MIX.sigma;
    const double a = (log(lo) - mu) / s, b = (log(hi) - mu) / s;
    const double ln = lo * std_normal_cdf(a) +
                      exp(mu + 0.5 * s * s) * (std_normal_cdf(b - s) - std_normal_cdf(a - s)) +
                      hi * (1 - std_normal_cdf(b));
    const double x0 = k * SG_MIX.xm, x1 = k * SG_MIX.upper, al = SG_MIX.alpha;
    const double z = 1 - pow(x0 / x1, al);
    const double A = PULSE_MAX(lo, x0), B = PULSE_MIN(hi, x1);
    const double body =
        B > A ? al * pow(x0, al) / z * (pow(B, 1 - al) - pow(A, 1 - al)) / (1 - al) : 0.0;
    const double par = lo * sg_pareto_cdf(k, lo) + body + hi * (1 - sg_pareto_cdf(k, hi));
    return SG_MIX.w * par + (1 - SG_MIX.w) * ln;
}

double workload_servegen_mix_scale(double mean)
{
    double a = log(mean / 1055.3) - 6, b = a + 12; /* the clipped mean grows with the scale */
    for (int i = 0; i < 100; i++) {
        const double m = 0.5 * (a + b);
        *(sg_clipped_mean(exp(m), 64.0, 4.0 * mean) < mean ? &a : &b) = m;
    }
    return exp(0.5 * (a + b));
}

double workload_servegen_mix_cdf(double mean, double len)
{
    if (len < 64) return 0;
    if (len >= 4 * mean) return 1;
    const double k = workload_servegen_mix_scale(mean);
    return SG_MIX.w * sg_pareto_cdf(k, len) +
           (1 - SG_MIX.w) * std_normal_cdf((log(len) - SG_MIX.mu - log(k)) / SG_MIX.sigma);
}

/* The i-th length of servegen-mix: draw 3i picks the part, 3i + 1 (and 3i + 2) draw from it. */
static int sg_mix_length(uint64_t stream, uint64_t i, double mean, double k)
{
    double len;
    if (open_uniform(stream, 3 * i) < SG_MIX.w) { /* the truncated Pareto, by its inverse CDF */
        const double x0 = k * SG_MIX.xm, z = 1 - pow(SG_MIX.xm / SG_MIX.upper, SG_MIX.alpha);
        len = x0 / pow(1 - open_uniform(stream, 3 * i + 1) * z, 1 / SG_MIX.alpha);
    } else {
        const double g = sqrt(-2.0 * log(open_uniform(stream, 3 * i + 1))) *
                         cos(6.283185307179586 * open_uniform(stream, 3 * i + 2));
        len = k * exp(SG_MIX.mu + SG_MIX.sigma * g);
    }
    return (int)llround(PULSE_MIN(PULSE_MAX(len, 64.0), 4.0 * mean));
}

int workload_create(struct workload *w, const char *spec, int output_len, uint64_t seed, char *err,
                    size_t errlen)
{
    memset(w, 0, sizeof *w);
    w->seed = seed;
    w->output_len = output_len;
    if (output_len < 1 || output_len > WORKLOAD_MAX_LEN) {
        snprintf(err, errlen, "--output-len: %d is not in [1, %d]", output_len, WORKLOAD_MAX_LEN);
        return PULSE_ERR_INVALID;
    }
    if (strlen(spec) >= sizeof w->spec) {
        snprintf(err, errlen, "--workload: the spec is %zu characters, at most %zu", strlen(spec),
                 sizeof w->spec - 1);
        return PULSE_ERR_INVALID;
    }
    strcpy(w->spec, spec);
    if (strncmp(spec, "trace:", 6) == 0) {
        const int rc = load_trace(w, spec + 6, err, errlen);
        if (rc != PULSE_OK) workload_free(w);
        if (rc == PULSE_ERR_NOMEM)
            snprintf(err, errlen, "--workload: out of memory for '%s'", spec);
        return rc;
    }
    if (strncmp(spec, "uniform:", 8) == 0) {
        const char *a = spec + 8, *colon = strchr(a, ':');
        long len = colon ? parse_pos(a, colon, WORKLOAD_MAX_LEN) : -1;
        long count =
            colon ? parse_pos(colon + 1, colon + 1 + strlen(colon + 1), WORKLOAD_MAX_REQUESTS) : -1;
        if (len < 0 || count < 0) {
            snprintf(err, errlen,
                     "--workload: '%s' is not uniform:LEN:COUNT with LEN in [1, %d] and COUNT "
                     "in [1, %d] (decimal)",
                     spec, WORKLOAD_MAX_LEN, WORKLOAD_MAX_REQUESTS);
            return PULSE_ERR_INVALID;
        }
        if (alloc_reqs(w, (int)count) != PULSE_OK) goto oom;
        for (int i = 0; i < w->n; i++)
            w->reqs[i].prompt_len = (int)len;
        return PULSE_OK;
    }
    if (strncmp(spec, "random:", 7) == 0) { /* random:MIN:MAX:COUNT, uniform in [MIN, MAX] */
        const char *a = spec + 7, *c1 = strchr(a, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        long lo = c2 ? parse_pos(a, c1, WORKLOAD_MAX_LEN) : -1;
        long hi = c2 ? parse_pos(c1 + 1, c2, WORKLOAD_MAX_LEN) : -1;
        long count = c2 ? parse_pos(c2 + 1, c2 + 1 + strlen(c2 + 1), WORKLOAD_MAX_REQUESTS) : -1;
        if (lo < 0 || hi < lo || count < 0) {
            snprintf(err, errlen,
                     "--workload: '%s' is not random:MIN:MAX:COUNT with 1 <= MIN <= MAX <= %d "
                     "and COUNT in [1, %d] (decimal)",
                     spec, WORKLOAD_MAX_LEN, WORKLOAD_MAX_REQUESTS);
            return PULSE_ERR_INVALID;
        }
        if (alloc_reqs(w, (int)count) != PULSE_OK) goto oom;
        const uint64_t stream = pulse_seed_mix(seed, STREAM_LENGTHS, 0);
        for (int i = 0; i < w->n; i++)
            w->reqs[i].prompt_len =
                (int)(lo + (long)(pulse_hash64(stream, (uint64_t)i) % (uint64_t)(hi - lo + 1)));
        return PULSE_OK;
    }
    if (strncmp(spec, "drift:", 6) == 0) { /* drift:FROM:TO:COUNT, servegen's shape */
        const char *a = spec + 6, *c1 = strchr(a, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        long from = c2 ? parse_pos(a, c1, WORKLOAD_MAX_LEN / 4) : -1;
        long to = c2 ? parse_pos(c1 + 1, c2, WORKLOAD_MAX_LEN / 4) : -1;
        long count = c2 ? parse_pos(c2 + 1, c2 + 1 + strlen(c2 + 1), WORKLOAD_MAX_REQUESTS) : -1;
        if (from < 16 || to < 16 || count < 0) {
            snprintf(err, errlen,
                     "--workload: '%s' is not drift:FROM:TO:COUNT with FROM and TO in [16, %d] "
                     "and COUNT in [1, %d] (decimal)",
                     spec, WORKLOAD_MAX_LEN / 4, WORKLOAD_MAX_REQUESTS);
            return PULSE_ERR_INVALID;
        }
        if (alloc_reqs(w, (int)count) != PULSE_OK) goto oom;
        const uint64_t stream = pulse_seed_mix(seed, STREAM_LENGTHS, 2);
        for (int i = 0; i < w->n; i++) {
            const double t = w->n > 1 ? (double)i / (w->n - 1) : 0.0;
            const double mean = (double)from * pow((double)to / (double)from, t);
            w->reqs[i].prompt_len =
                workload_lognormal_length(stream, (uint64_t)i, mean, WORKLOAD_SERVEGEN_SIGMA);
        }
        return PULSE_OK;
    }
    if (strncmp(spec, "servegen-mix:", 13) == 0) { /* servegen-mix:MEAN:COUNT */
        const char *a = spec + 13, *c1 = strchr(a, ':');
        long mean = c1 ? parse_pos(a, c1, WORKLOAD_MAX_LEN / 4) : -1;
        long count = c1 ? parse_pos(c1 + 1, c1 + 1 + strlen(c1 + 1), WORKLOAD_MAX_REQUESTS) : -1;
        if (mean < 256 || count < 0) {
            snprintf(err, errlen,
                     "--workload: '%s' is not servegen-mix:MEAN:COUNT with MEAN in [256, %d] and "
                     "COUNT in [1, %d] (decimal)",
                     spec, WORKLOAD_MAX_LEN / 4, WORKLOAD_MAX_REQUESTS);
            return PULSE_ERR_INVALID;
        }
        if (alloc_reqs(w, (int)count) != PULSE_OK) goto oom;
        const uint64_t stream = pulse_seed_mix(seed, STREAM_LENGTHS, 3);
        const double k = workload_servegen_mix_scale((double)mean);
        for (int i = 0; i < w->n; i++)
            w->reqs[i].prompt_len = sg_mix_length(stream, (uint64_t)i, (double)mean, k);
        return PULSE_OK;
    }
    const int sg = strncmp(spec, "servegen:", 9) == 0, ln = strncmp(spec, "lognormal:", 10) == 0;
    if (sg || ln) { /* servegen:MEAN:COUNT, lognormal:MEAN:SIGMA:COUNT */
        const char *a = spec + (sg ? 9 : 10), *c1 = strchr(a, ':');
        const char *c2 = ln && c1 ? strchr(c1 + 1, ':') : c1;
        long mean = c1 && c2 ? parse_pos(a, c1, WORKLOAD_MAX_LEN / 4) : -1;
        double sigma = sg ? WORKLOAD_SERVEGEN_SIGMA : c2 ? parse_decimal(c1 + 1, c2) : -1;
        long count = c2 ? parse_pos(c2 + 1, c2 + 1 + strlen(c2 + 1), WORKLOAD_MAX_REQUESTS) : -1;
        if (mean < 16 || count < 0 || !(sigma > 0 && sigma <= 3)) {
            snprintf(err, errlen,
                     "--workload: '%s' is not %s with MEAN in [16, %d]%s and COUNT in [1, %d] "
                     "(decimal)",
                     spec, sg ? "servegen:MEAN:COUNT" : "lognormal:MEAN:SIGMA:COUNT",
                     WORKLOAD_MAX_LEN / 4, sg ? "" : ", SIGMA in (0, 3]", WORKLOAD_MAX_REQUESTS);
            return PULSE_ERR_INVALID;
        }
        if (alloc_reqs(w, (int)count) != PULSE_OK) goto oom;
        const uint64_t stream = pulse_seed_mix(seed, STREAM_LENGTHS, 1);
        for (int i = 0; i < w->n; i++)
            w->reqs[i].prompt_len =
                workload_lognormal_length(stream, (uint64_t)i, (double)mean, sigma);
        return PULSE_OK;
    }
    if (strncmp(spec, "lengths:", 8) == 0) {
        const char *p = spec + 8;
        int n = 1;
        for (const char *q = p; *q; q++)
            n += *q == ',';
        if (alloc_reqs(w, n) != PULSE_OK) goto oom;
        for (int i = 0; i < n; i++) {
            const char *end = strchr(p, ',');
            if (!end) end = p + strlen(p);
            long len = parse_pos(p, end, WORKLOAD_MAX_LEN);
            if (len < 0) {
                snprintf(err, errlen,
                         "--workload: '%s': length %d is not an integer in [1, %d] (%s)", spec,
                         i + 1, WORKLOAD_MAX_LEN, p == end ? "empty" : "decimal");
                workload_free(w);
                return PULSE_ERR_INVALID;
            }
            w->reqs[i].prompt_len = (int)len;
            p = *end ? end + 1 : end;
        }
        return PULSE_OK;
    }
    snprintf(err, errlen,
             "--workload: unknown kind in '%s' (expected uniform:LEN:COUNT, "
             "random:MIN:MAX:COUNT, servegen:MEAN:COUNT, servegen-mix:MEAN:COUNT, "
             "lognormal:MEAN:SIGMA:COUNT, drift:FROM:TO:COUNT, lengths:L1,L2,... or "
             "trace:FILE.jsonl)",
             spec);
    return PULSE_ERR_INVALID;
oom:
    snprintf(err, errlen, "--workload: out of memory for '%s'", spec);
    workload_free(w);
    return PULSE_ERR_NOMEM;
}

/* ------------------------------------------------------------------ arrivals */

/* A positive decimal from [s, end): digits with at most one point, no sign, exponent or spaces;
 * -1 when it is not one. */
static double parse_decimal(const char *s, const char *end)
{
    if (s == end || end - s > 24) return -1;
    double v = 0, scale = 0;
    int digits = 0;
    for (const char *p = s; p < end; p++) {
        if (*p == '.') {
            if (scale) return -1;
            scale = 1;
            continue;
        }
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
        if (scale) scale *= 10;
        digits++;
    }
    if (!digits) return -1;
    if (scale) v /= scale;
    return v > 0 ? v : -1;
}

/* A seeded stream of doubles: element i of pulse_hash64(seed, .) (numeric.h). */
struct stream {
    uint64_t seed, i;
};

/* Uniform in (0, 1), 53 random bits. */
static double uniform01(struct stream *x)
{
    return ((double)(pulse_hash64(x->seed, x->i++) >> 11) + 0.5) / 9007199254740992.0;
}

static double normal01(struct stream *x)
{
    return sqrt(-2.0 * log(uniform01(x))) * cos(6.283185307179586 * uniform01(x));
}

/* Gamma(shape k, scale 1), Marsaglia and Tsang; k < 1 through Gamma(k + 1) * U^(1/k). */
static double gamma_sample(struct stream *x, double k)
{
    if (k < 1) return gamma_sample(x, k + 1) * pow(uniform01(x), 1.0 / k);
    const double d = k - 1.0 / 3, c = 1 / sqrt(9 * d);
    for (;;) {
        double z = normal01(x), v = 1 + c * z;
        if (v <= 0) continue;
        v = v * v * v;
        const double u = uniform01(x);
        if (log(u) < 0.5 * z * z + d - d * v + d * log(v)) return d * v;
    }
}

int workload_set_arrivals(struct workload *w, const char *spec, char *err, size_t errlen)
{
    double rate = -1, cv = 1;
    if (!strcmp(spec, "all")) {
        for (int i = 0; i < w->n; i++)
            w->reqs[i].arrival_s = 0;
        snprintf(w->arrival, sizeof w->arrival, "all");
        return PULSE_OK;
    }
    if (!strncmp(spec, "poisson:", 8)) {
        rate = parse_decimal(spec + 8, spec + strlen(spec));
    } else if (!strncmp(spec, "gamma:", 6)) {
        const char *a = spec + 6, *colon = strchr(a, ':');
        rate = colon ? parse_decimal(a, colon) : -1;
        cv = colon ? parse_decimal(colon + 1, colon + 1 + strlen(colon + 1)) : -1;
    }
    if (rate <= 0 || cv <= 0 || cv > 100 || strlen(spec) >= sizeof w->arrival) {
        snprintf(err, errlen,
                 "--arrival: '%s' is not all, poisson:RATE or gamma:RATE:CV (RATE requests/s and "
                 "CV positive decimals, CV at most 100)",
                 spec);
        return PULSE_ERR_INVALID;
    }
    struct stream x = {pulse_seed_mix(w->seed, STREAM_ARRIVALS, 0), 0};
    const double k = 1 / (cv * cv); /* gamma shape: CV^2 = 1 / k */
    double t = 0;
    for (int i = 0; i < w->n; i++) {
        t += gamma_sample(&x, k) / (k * rate); /* mean 1 / rate */
        w->reqs[i].arrival_s = t;
    }
    snprintf(w->arrival, sizeof w->arrival, "%s", spec);
    return PULSE_OK;
}

void workload_free(struct workload *w)
{
    mem_free(MEM_HOST, w->reqs, sizeof(struct request) * w->n);
    mem_free(MEM_HOST, w->token_store, sizeof(int32_t) * (size_t)w->n * w->output_len);
    w->reqs = NULL;
    w->token_store = NULL;
}

int workload_max_tokens(const struct workload *w)
{
    int m = 0;
    for (int i = 0; i < w->n; i++)
        m = PULSE_MAX(m, w->reqs[i].prompt_len + w->reqs[i].output_len);
    return m;
}

json_t *workload_to_json(const struct workload *w)
{
    long long total = 0;
    for (int i = 0; i < w->n; i++)
        total += w->reqs[i].prompt_len;
    return json_pack("{s:s, s:I, s:i, s:i, s:I, s:s}", "spec", w->spec, "seed", (json_int_t)w->seed,
                     "output_len", w->output_len, "requests", w->n, "prompt_tokens_total",
                     (json_int_t)total, "arrival",
                     !w->arrival[0] || !strcmp(w->arrival, "all") ? "all_at_once" : w->arrival);
}

/* ------------------------------------------------------------------ writing a trace */

static int emit_trace(FILE *f, void *arg)
{
    const struct workload *w = arg;
    int64_t block = 0;
    for (int i = 0; i < w->n; i++) {
        const struct request *r = &w->reqs[i];
        const int out = r->output_len > 0 ? r->output_len : w->output_len;
        if (fprintf(f,
                    "{\"timestamp\": %.3f, \"input_length\": %d, \"output_length\": %d, "
                    "\"hash_ids\": [",
                    r->arrival_s * 1e3, r->prompt_len, out) < 0)
            return -1;
        const int blocks = (r->prompt_len + 511) / 512;
        for (int b = 0; b < blocks; b++)
            if (fprintf(f, b ? ", %lld" : "%lld", (long long)block++) < 0) return -1;
        if (fputs("]}\n", f) < 0) return -1;
    }
    return 0;
}

int workload_write_trace(const struct workload *w, const char *path, char *err, size_t errlen)
{
    return results_write_file(path, emit_trace, (void *)w, err, errlen);
}
