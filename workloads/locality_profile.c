/* The churn profile of the locality model (locality.h, part 1): default generator, validation,
 * sampling, JSON read / write and measured profiles from samples. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "json_in.h"
#include "locality.h"
#include "mem.h"
#include "metrics.h"
#include "numeric.h"
#include "results.h"

#define PROFILE_FORMAT "pulse-locality-profile"
#define PROFILE_VERSION 1

/* The default levels and the standard normal quantiles at them (p100 uses the 99.9th
 * percentile: a lognormal has no maximum). */
static const double k_levels[] = {0.0, 0.10, 0.25, 0.50, 0.75, 0.90, 0.99, 1.0};
static const double k_z[] = {
    -INFINITY,          -1.2815515655446004, -0.6744897501960817, 0.0,
    0.6744897501960817, 1.2815515655446004,  2.3263478740408408,  3.0902323061678132};
#define N_DEFAULT_LEVELS ((int)PULSE_ARRAY_LEN(k_levels))

static void set_levels_default(struct locality_profile *p)
{
    p->n_levels = N_DEFAULT_LEVELS;
    for (int i = 0; i < N_DEFAULT_LEVELS; i++)
        p->levels[i] = k_levels[i];
}

/* ------------------------------------------------------------------ default profile */

void locality_default_params_init(struct locality_default_params *p, int n_layers, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    p->n_layers = n_layers;
    for (int l = 0; l < 2 && n_layers > 2; l++)
        p->dense[l] = 1;
    p->median_lo = 0.04;
    p->median_hi = 0.20;
    p->sigma = 0.5;
    p->seed = seed;
}

int locality_profile_default(struct locality_profile *out, const struct locality_default_params *p,
                             char *err, size_t errlen)
{
    const char *why = NULL;
    if (p->n_layers < 1 || p->n_layers > LOC_MAX_LAYERS)
        why = "n_layers must be in 1..256";
    else if (!(p->median_lo > 0.0 && p->median_lo <= p->median_hi && p->median_hi <= 1.0))
        why = "medians must satisfy 0 < median_lo <= median_hi <= 1";
    else if (!(p->sigma >= 0.0 && p->sigma <= 4.0))
        why = "sigma must be in [0, 4]";
    if (why) {
        snprintf(err, errlen, "default locality profile: %s", why);
        return PULSE_ERR_INVALID;
    }
    memset(out, 0, sizeof *out);
    out->n_layers = p->n_layers;
    set_levels_default(out);
    copy_str(out->source, sizeof out->source, "default");
    out->seed = p->seed;
    int n_sparse = 0;
    for (int l = 0; l < p->n_layers; l++)
        n_sparse += !p->dense[l];
    /* medians log-spaced over the sparse layers, then a seeded Fisher-Yates shuffle */
    int32_t order[LOC_MAX_LAYERS];
    for (int i = 0; i < n_sparse; i++)
        order[i] = i;
    for (int i = n_sparse; i > 1; i--) {
        int j = (int)(pulse_hash64(pulse_seed_mix(p->seed, 0x10ca1, 0), (uint64_t)i) % (uint64_t)i);
        int32_t t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
    for (int l = 0, sl = 0; l < p->n_layers; l++) {
        if (p->dense[l]) {
            out->dense[l] = 1;
            continue;
        }
        int rank = order[sl++];
        double f = n_sparse > 1 ? (double)rank / (n_sparse - 1) : 0.0;
        double med = p->median_lo * pow(p->median_hi / p->median_lo, f);
        for (int k = 0; k < N_DEFAULT_LEVELS; k++) {
            double v = k == 0 ? 0.0 : med * exp(p->sigma * k_z[k]);
            out->churn[l][k] = v > 1.0 ? 1.0 : v;
        }
    }
    return PULSE_OK;
}

/* ------------------------------------------------------------------ check and sampling */

int locality_profile_check(const struct locality_profile *p, char *err, size_t errlen)
{
    if (p->n_layers < 1 || p->n_layers > LOC_MAX_LAYERS) {
        snprintf(err, errlen, "n_layers: %d is not in 1..%d", p->n_layers, LOC_MAX_LAYERS);
        return -1;
    }
    if (p->n_levels < 2 || p->n_levels > LOC_MAX_LEVELS) {
        snprintf(err, errlen, "levels: %d levels, expected 2..%d", p->n_levels, LOC_MAX_LEVELS);
        return -1;
    }
    for (int k = 0; k < p->n_levels; k++) {
        double v = p->levels[k];
        double want = k == 0 ? 0.0 : k == p->n_levels - 1 ? 1.0 : NAN;
        if (!isfinite(v) || (!isnan(want) && v != want) || (k > 0 && !(v > p->levels[k - 1]))) {
            snprintf(err, errlen,
                     "levels[%d]: %g (levels must rise strictly from 0 to 1, first 0, last 1)", k,
                     v);
            return -1;
        }
    }
    for (int l = 0; l < p->n_layers; l++) {
        if (p->samples[l] < 0) {
            snprintf(err, errlen, "layers[%d].samples: %lld is negative", l,
                     (long long)p->samples[l]);
            return -1;
        }
        if (p->dense[l]) continue;
        for (int k = 0; k < p->n_levels; k++) {
            double v = p->churn[l][k];
            if (!(v >= 0.0 && v <= 1.0)) {
                snprintf(err, errlen, "layers[%d].churn[%d]: %g is not in [0, 1]", l, k, v);
                return -1;
            }
            if (k > 0 && v < p->churn[l][k - 1]) {
                snprintf(err, errlen,
                         "layers[%d].churn[%d]: %g < previous %g (quantiles must not decrease)", l,
                         k, v, p->churn[l][k - 1]);
                return -1;
            }
        }
    }
    return 0;
}

double locality_profile_quantile(const struct locality_profile *p, int layer, double u)
{
    const double *lv = p->levels, *c = p->churn[layer];
    if (!(u > 0.0)) return c[0];
    if (u >= 1.0) return c[p->n_levels - 1];
    int k = 0;
    while (k + 2 < p->n_levels && u > lv[k + 1])
        k++;
    double w = (u - lv[k]) / (lv[k + 1] - lv[k]);
    return c[k] + w * (c[k + 1] - c[k]);
}

double locality_profile_mean(const struct locality_profile *p, int layer)
{
    double m = 0.0;
    for (int k = 0; k + 1 < p->n_levels; k++)
        m +=
            (p->levels[k + 1] - p->levels[k]) * 0.5 * (p->churn[layer][k] + p->churn[layer][k + 1]);
    return m;
}

/* ------------------------------------------------------------------ JSON */

json_t *locality_profile_to_json(const struct locality_profile *p)
{
    json_t *r = json_object(), *levels = json_array(), *layers = json_array();
    json_object_set_new(r, "format", json_string(PROFILE_FORMAT));
    json_object_set_new(r, "version", json_integer(PROFILE_VERSION));
    json_object_set_new(r, "source", json_string(p->source));
    json_object_set_new(r, "model", json_string(p->model));
    json_object_set_new(r, "selection", json_string(p->selection));
    json_object_set_new(r, "budget_blocks", json_integer(p->budget_blocks));
    json_object_set_new(r, "block_size", json_integer(p->block_size));
    json_object_set_new(r, "seed", json_integer((json_int_t)p->seed));
    for (int k = 0; k < p->n_levels; k++)
        json_array_append_new(levels, json_real(p->levels[k]));
    json_object_set_new(r, "levels", levels);
    for (int l = 0; l < p->n_layers; l++) {
        json_t *e = json_object();
        json_object_set_new(e, "layer", json_integer(l));
        json_object_set_new(e, "dense", json_boolean(p->dense[l]));
        if (!p->dense[l]) {
            json_t *c = json_array();
            for (int k = 0; k < p->n_levels; k++)
                json_array_append_new(c, json_real(p->churn[l][k]));
            json_object_set_new(e, "churn", c);
            json_object_set_new(e, "samples", json_integer(p->samples[l]));
        }
        json_array_append_new(layers, e);
    }
    json_object_set_new(r, "layers", layers);
    return r;
}

static int get_str(const struct pctx *c, const json_t *o, const char *key, char *dst, size_t cap,
                   int required)
{
    json_t *v = json_object_get(o, key);
    if (!v) return required ? fail(c, key, "missing (expected a string)") : PULSE_OK;
    if (!json_is_string(v)) return fail(c, key, "expected a string");
    if (strlen(json_string_value(v)) >= cap) return fail(c, key, "string too long");
    copy_str(dst, cap, json_string_value(v));
    return PULSE_OK;
}

static int get_int(const struct pctx *c, const json_t *o, const char *key, long long lo,
                   long long hi, long long *out)
{
    json_t *v = json_object_get(o, key);
    if (!v) return PULSE_OK;
    if (!json_is_integer(v)) return fail(c, key, "expected an integer");
    long long x = json_integer_value(v);
    if (x < lo || x > hi) {
        char w[96];
        snprintf(w, sizeof w, "%lld is not in [%lld, %lld]", x, lo, hi);
        return fail(c, key, w);
    }
    *out = x;
    return PULSE_OK;
}

/* Reads a JSON array of n_want (or, n_want < 0, 2..LOC_MAX_LEVELS) numbers into out. */
static int get_reals(const struct pctx *c, const json_t *a, const char *field, int n_want,
                     double *out, int *n_out)
{
    if (!json_is_array(a)) return fail(c, field, "expected an array of numbers");
    int n = (int)json_array_size(a);
    char w[96];
    if (n_want >= 0 && n != n_want) {
        snprintf(w, sizeof w, "%d values, expected %d (one per level)", n, n_want);
        return fail(c, field, w);
    }
    if (n_want < 0 && (n < 2 || n > LOC_MAX_LEVELS)) {
        snprintf(w, sizeof w, "%d values, expected 2..%d", n, LOC_MAX_LEVELS);
        return fail(c, field, w);
    }
    for (int i = 0; i < n; i++) {
        json_t *v = json_array_get(a, (size_t)i);
        if (!json_is_number(v)) {
            char f[96];
            snprintf(f, sizeof f, "%s[%d]", field, i);
            return fail(c, f, "expected a number");
        }
        out[i] = json_number_value(v);
    }
    if (n_out) *n_out = n;
    return PULSE_OK;
}

static int parse_layer(const struct pctx *c, const json_t *e, int l, struct locality_profile *p)
{
    static const char *const keys[] = {"layer", "dense", "churn", "samples"};
    char where[32], f[64];
    snprintf(where, sizeof where, "layers[%d]", l);
    if (!json_is_object(e)) return fail(c, where, "expected an object");
    int rc = only_keys(c, e, where, keys, (int)PULSE_ARRAY_LEN(keys));
    if (rc) return rc;
    json_t *jl = json_object_get(e, "layer"), *jd = json_object_get(e, "dense");
    json_t *jc = json_object_get(e, "churn"), *js = json_object_get(e, "samples");
    snprintf(f, sizeof f, "%s.layer", where);
    if (!json_is_integer(jl) || json_integer_value(jl) != l)
        return fail(c, f, "missing or not equal to the entry's index (layers are listed in order)");
    snprintf(f, sizeof f, "%s.dense", where);
    if (jd && !json_is_boolean(jd)) return fail(c, f, "expected true or false");
    p->dense[l] = jd && json_is_true(jd);
    if (js) {
        snprintf(f, sizeof f, "%s.samples", where);
        if (!json_is_integer(js) || json_integer_value(js) < 0)
            return fail(c, f, "expected a non-negative integer");
        p->samples[l] = json_integer_value(js);
    }
    snprintf(f, sizeof f, "%s.churn", where);
    if (p->dense[l]) return jc ? fail(c, f, "a dense layer has no churn") : PULSE_OK;
    if (!jc) return fail(c, f, "missing (a layer that is not dense needs its quantiles)");
    return get_reals(c, jc, f, p->n_levels, p->churn[l], NULL);
}

int locality_profile_from_json(const json_t *j, const char *name, struct locality_profile *out,
                               char *err, size_t errlen)
{
    static const char *const keys[] = {"format",    "version",       "source",     "model",
                                       "selection", "budget_blocks", "block_size", "seed",
                                       "levels",    "layers"};
    const struct pctx c = {name ? name : "locality profile", err, errlen};
    memset(out, 0, sizeof *out);
    if (!json_is_object(j)) return fail(&c, "(top level)", "expected a JSON object");
    int rc = only_keys(&c, j, "", keys, (int)PULSE_ARRAY_LEN(keys));
    if (rc) return rc;
    json_t *fmt = json_object_get(j, "format"), *ver = json_object_get(j, "version");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), PROFILE_FORMAT) != 0)
        return fail(&c, "format", "missing or not \"" PROFILE_FORMAT "\"");
    if (!json_is_integer(ver) || json_integer_value(ver) != PROFILE_VERSION)
        return fail(&c, "version", "missing or not 1 (the only version this build reads)");
    long long budget = 0, bs = 0, seed = 0;
    if ((rc = get_str(&c, j, "source", out->source, sizeof out->source, 0)) ||
        (rc = get_str(&c, j, "model", out->model, sizeof out->model, 0)) ||
        (rc = get_str(&c, j, "selection", out->selection, sizeof out->selection, 0)) ||
        (rc = get_int(&c, j, "budget_blocks", 0, SELECT_MAX_BLOCKS, &budget)) ||
        (rc = get_int(&c, j, "block_size", 0, 1 << 20, &bs)) ||
        (rc = get_int(&c, j, "seed", INT64_MIN, INT64_MAX, &seed)))
        return rc;
    out->budget_blocks = (int)budget;
    out->block_size = (int)bs;
    out->seed = (uint64_t)seed;
    json_t *lv = json_object_get(j, "levels");
    if (!lv) return fail(&c, "levels", "missing (expected the cumulative levels, 0 .. 1)");
    if ((rc = get_reals(&c, lv, "levels", -1, out->levels, &out->n_levels))) return rc;
    json_t *layers = json_object_get(j, "layers");
    if (!json_is_array(layers) || json_array_size(layers) < 1 ||
        json_array_size(layers) > LOC_MAX_LAYERS)
        return fail(&c, "layers", "missing or not an array of 1..256 layer objects");
    out->n_layers = (int)json_array_size(layers);
    for (int l = 0; l < out->n_layers; l++)
        if ((rc = parse_layer(&c, json_array_get(layers, (size_t)l), l, out))) return rc;
    char why[192];
    if (locality_profile_check(out, why, sizeof why) != 0) {
        snprintf(err, errlen, "%s: %s", c.name, why);
        return PULSE_ERR_INVALID;
    }
    return PULSE_OK;
}

int locality_profile_read(const char *path, struct locality_profile *out, char *err, size_t errlen)
{
    json_t *j;
    int rc = results_read_json(path, JSON_REJECT_DUPLICATES, &j, err, errlen);
    if (rc != PULSE_OK) {
        memset(out, 0, sizeof *out);
        return rc;
    }
    rc = locality_profile_from_json(j, path, out, err, errlen);
    json_decref(j);
    return rc;
}

int locality_profile_write(const struct locality_profile *p, const char *path, char *err,
                           size_t errlen)
{
    char why[192];
    if (locality_profile_check(p, why, sizeof why) != 0) {
        snprintf(err, errlen, "%s: not writing an invalid profile: %s", path, why);
        return PULSE_ERR_INVALID;
    }
    json_t *j = locality_profile_to_json(p);
    const int rc = results_write_json(j, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER, err, errlen);
    json_decref(j);
    return rc;
}

/* ------------------------------------------------------------------ measured profiles */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int locality_profile_from_samples(struct locality_profile *out, int n_layers,
                                  const double *const *samples, const int64_t *n_samples,
                                  const char *model, const char *selection, char *err,
                                  size_t errlen)
{
    if (n_layers < 1 || n_layers > LOC_MAX_LAYERS) {
        snprintf(err, errlen, "churn samples: n_layers %d is not in 1..%d", n_layers,
                 LOC_MAX_LAYERS);
        return PULSE_ERR_INVALID;
    }
    memset(out, 0, sizeof *out);
    out->n_layers = n_layers;
    set_levels_default(out);
    copy_str(out->source, sizeof out->source, "measured");
    copy_str(out->model, sizeof out->model, model);
    copy_str(out->selection, sizeof out->selection, selection);
    int64_t most = 0;
    for (int l = 0; l < n_layers; l++) {
        if (n_samples[l] < 0 || (n_samples[l] > 0 && !samples[l])) {
            snprintf(err, errlen, "churn samples: layer %d: bad sample count or NULL array", l);
            return PULSE_ERR_INVALID;
        }
        for (int64_t i = 0; i < n_samples[l]; i++)
            if (!(samples[l][i] >= 0.0 && samples[l][i] <= 1.0)) {
                snprintf(err, errlen, "churn samples: layer %d sample %lld: %g is not in [0, 1]", l,
                         (long long)i, samples[l][i]);
                return PULSE_ERR_INVALID;
            }
        most = PULSE_MAX(most, n_samples[l]);
    }
    if (most > INT32_MAX) {
        snprintf(err, errlen, "churn samples: more than 2^31 samples in a layer");
        return PULSE_ERR_INVALID;
    }
    size_t bytes = sizeof(double) * (size_t)(most ? most : 1);
    double *s = mem_alloc(MEM_HOST, bytes, "churn samples");
    if (!s) {
        snprintf(err, errlen, "churn samples: out of memory");
        return PULSE_ERR_NOMEM;
    }
    for (int l = 0; l < n_layers; l++) {
        int n = (int)n_samples[l];
        out->samples[l] = n;
        if (n == 0) {
            out->dense[l] = 1;
            continue;
        }
        memcpy(s, samples[l], sizeof(double) * (size_t)n);
        qsort(s, (size_t)n, sizeof *s, cmp_double);
        for (int k = 0; k < out->n_levels; k++)
            out->churn[l][k] = metrics_percentile_sorted(s, n, 100.0 * out->levels[k]);
    }
    mem_free(MEM_HOST, s, bytes);
    return PULSE_OK;
}

/* ------------------------------------------------------------------ mapping by depth */

double locality_depth(int l, int n_layers)
{
    return (l + 0.5) / n_layers;
}

void locality_depth_bracket(const double *xs, int n, double x, int *i0, int *i1, double *w)
{
    *i0 = *i1 = n - 1, *w = 0.0;
    for (int i = 0; i < n; i++)
        if (x <= xs[i]) {
            *i0 = *i1 = i;
            if (i > 0) *i0 = i - 1, *w = (x - xs[i - 1]) / (xs[i] - xs[i - 1]);
            return;
        }
}

int locality_profile_matches(const struct locality_profile *p, int n_layers, const uint8_t *dense)
{
    if (p->n_layers != n_layers) return 0;
    for (int l = 0; l < n_layers; l++)
        if (!p->dense[l] != !dense[l]) return 0;
    return 1;
}

int locality_profile_map_depth(const struct locality_profile *p, int n_layers, const uint8_t *dense,
                               struct locality_profile *out, char *err, size_t errlen)
{
    char why[200];
    PULSE_CHECK(out != p, "locality_profile_map_depth: out must not be p");
    if (locality_profile_check(p, why, sizeof why)) {
        snprintf(err, errlen, "locality profile: %s", why);
        return PULSE_ERR_INVALID;
    }
    if (n_layers < 1 || n_layers > LOC_MAX_LAYERS) {
        snprintf(err, errlen, "locality profile: a model of %d layers (1..%d)", n_layers,
                 LOC_MAX_LAYERS);
        return PULSE_ERR_INVALID;
    }
    double xs[LOC_MAX_LAYERS];
    int src[LOC_MAX_LAYERS], n = 0;
    for (int l = 0; l < p->n_layers; l++)
        if (!p->dense[l]) xs[n] = locality_depth(l, p->n_layers), src[n++] = l;
    if (!n) {
        snprintf(err, errlen, "locality profile: no sparse layer to map from");
        return PULSE_ERR_INVALID;
    }
    memset(out, 0, sizeof *out);
    out->n_layers = n_layers;
    out->n_levels = p->n_levels;
    memcpy(out->levels, p->levels, sizeof out->levels);
    snprintf(out->source, sizeof out->source, "%.30s, by depth from %d layers", p->source,
             p->n_layers);
    copy_str(out->model, sizeof out->model, p->model);
    copy_str(out->selection, sizeof out->selection, p->selection);
    out->budget_blocks = p->budget_blocks, out->block_size = p->block_size, out->seed = p->seed;
    for (int l = 0; l < n_layers; l++) {
        if ((out->dense[l] = dense && dense[l])) continue;
        int i0, i1;
        double w;
        locality_depth_bracket(xs, n, locality_depth(l, n_layers), &i0, &i1, &w);
        const double *a = p->churn[src[i0]], *b = p->churn[src[i1]];
        for (int k = 0; k < p->n_levels; k++) /* a convex combination: still non-decreasing */
            out->churn[l][k] = PULSE_MIN(1.0, PULSE_MAX(0.0, a[k] + w * (b[k] - a[k])));
        out->samples[l] = p->samples[src[w < 0.5 ? i0 : i1]];
    }
    return PULSE_OK;
}
