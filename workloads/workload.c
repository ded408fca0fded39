#include "workload.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "mem.h"

#define WORKLOAD_MAX_REQUESTS 1000000
#define WORKLOAD_MAX_LEN (1 << 24)

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
    for (int i = 0; i < n; i++) {
        w->reqs[i].id = i;
        w->reqs[i].output_len = w->output_len;
        w->reqs[i].tokens = w->token_store + (size_t)i * w->output_len;
    }
    return PULSE_OK;
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
        uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull; /* splitmix64 */
        for (int i = 0; i < w->n; i++) {
            uint64_t z = (x += 0x9E3779B97F4A7C15ull);
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
            z ^= z >> 31;
            w->reqs[i].prompt_len = (int)(lo + (long)(z % (uint64_t)(hi - lo + 1)));
        }
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
             "random:MIN:MAX:COUNT or lengths:L1,L2,...)",
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

/* splitmix64 into (0, 1) */
static double uniform01(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return ((double)(z >> 11) + 0.5) / 9007199254740992.0;
}

static double normal01(uint64_t *x)
{
    return sqrt(-2.0 * log(uniform01(x))) * cos(6.283185307179586 * uniform01(x));
}

/* Gamma(shape k, scale 1), Marsaglia and Tsang; k < 1 through Gamma(k + 1) * U^(1/k). */
static double gamma_sample(uint64_t *x, double k)
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
    uint64_t x = w->seed * 0xD1B54A32D192ED03ull + 0x8CB92BA72F3D8DD7ull;
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
