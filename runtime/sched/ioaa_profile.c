/* The IOAA profile file and the analytic profile (the definitions are in ioaa_profile.h). */
#include "ioaa_profile.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "mem.h"
#include "results.h"

/* ---- the tables ---- */

int ioaa_profile_data_alloc(struct ioaa_profile_data *d, int nb, int nc, int n_offload,
                            int n_recall, char *err, size_t errlen)
{
    ioaa_profile_data_free(d);
    const int M = IOAA_PROFILE_MAX_POINTS;
    if (nb < 1 || nb > M || nc < 1 || nc > M || n_offload < 1 || n_offload > M || n_recall < 1 ||
        n_recall > M)
        return pulse_errorf(err, errlen, PULSE_ERR_INVALID, "ioaa profile",
                            "table sizes %d x %d, %d, %d: expected 1..%d points per axis", nb, nc,
                            n_offload, n_recall, M);
    const size_t dl = sizeof(double), ntn = (size_t)nb * nc;
    const size_t bytes = mem_aligned(nb * dl) + mem_aligned(nc * dl) + mem_aligned(ntn * dl) +
                         2 * mem_aligned(n_offload * dl) + 2 * mem_aligned(n_recall * dl);
    char *cur = mem_alloc(MEM_HOST, bytes, "ioaa profile");
    if (!cur)
        return pulse_errorf(err, errlen, PULSE_ERR_NOMEM, "ioaa profile",
                            "cannot allocate %zu bytes", bytes);
    memset(cur, 0, bytes);
    d->mem = cur;
    d->mem_bytes = bytes;
    d->tn_b = mem_carve(&cur, nb * dl);
    d->tn_c = mem_carve(&cur, nc * dl);
    d->tn = mem_carve(&cur, ntn * dl);
    d->to_b = mem_carve(&cur, n_offload * dl);
    d->to = mem_carve(&cur, n_offload * dl);
    d->tr_bytes = mem_carve(&cur, n_recall * dl);
    d->tr = mem_carve(&cur, n_recall * dl);
    d->prof = (struct ioaa_profile){.tn_nb = nb,
                                    .tn_nc = nc,
                                    .tn_b = d->tn_b,
                                    .tn_c = d->tn_c,
                                    .tn = d->tn,
                                    .to_n = n_offload,
                                    .to_b = d->to_b,
                                    .to = d->to,
                                    .tr_n = n_recall,
                                    .tr_bytes = d->tr_bytes,
                                    .tr = d->tr};
    return PULSE_OK;
}

void ioaa_profile_data_free(struct ioaa_profile_data *d)
{
    if (!d) return;
    mem_free(MEM_HOST, d->mem, d->mem_bytes);
    memset(d, 0, sizeof *d);
}

/* v[i] = max(v[0..i]) for i < n; returns how many values rose. */
static int prefix_max(double *v, int n)
{
    int raised = 0;
    for (int i = 1; i < n; i++)
        if (v[i] < v[i - 1]) {
            v[i] = v[i - 1];
            raised++;
        }
    return raised;
}

int ioaa_profile_data_monotone(struct ioaa_profile_data *d)
{
    const int nb = d->prof.tn_nb, nc = d->prof.tn_nc;
    int raised = 0;
    /* in row-major order the neighbours below in b and in c are final already, so one pass
     * gives the prefix maximum over b' <= b, c' <= c */
    for (int i = 0; i < nb; i++)
        for (int j = 0; j < nc; j++) {
            double *v = &d->tn[(size_t)i * nc + j], m = *v;
            if (i > 0) m = fmax(m, v[-nc]);
            if (j > 0) m = fmax(m, v[-1]);
            if (m > *v) {
                *v = m;
                raised++;
            }
        }
    raised += prefix_max(d->to, d->prof.to_n);
    raised += prefix_max(d->tr, d->prof.tr_n);
    return raised;
}

int ioaa_profile_inverted(const double *v, int n, double factor, int *i, int *j)
{
    for (int a = 0; a + 1 < n; a++) {
        int m = a + 1;
        for (int b = a + 2; b < n; b++)
            if (v[b] < v[m]) m = b;
        if (v[a] >= factor * v[m]) {
            *i = a, *j = m;
            return 1;
        }
    }
    return 0;
}

int ioaa_profile_data_cap_recall(struct ioaa_profile_data *d, double bytes_per_s)
{
    int raised = 0;
    for (int i = 0; i < d->prof.tr_n; i++) {
        const double paced = d->tr_bytes[i] / bytes_per_s;
        if (paced > d->tr[i]) {
            d->tr[i] = paced;
            raised++;
        }
    }
    return raised;
}

int ioaa_profile_data_scale(struct ioaa_profile_data *d, double compute, double recall, char *err,
                            size_t errlen)
{
    if (!(compute > 0 && isfinite(compute) && recall > 0 && isfinite(recall)))
        return pulse_errorf(err, errlen, PULSE_ERR_INVALID, "ioaa profile scale",
                            "factors %g (compute) and %g (recall): expected both finite and > 0",
                            compute, recall);
    for (int i = 0; i < d->prof.tn_nb * d->prof.tn_nc; i++)
        d->tn[i] *= compute;
    for (int i = 0; i < d->prof.to_n; i++)
        d->to[i] *= compute;
    for (int i = 0; i < d->prof.tr_n; i++)
        d->tr[i] *= recall;
    return PULSE_OK;
}

/* The table (x[n], y[n]) at v: linear between points, the end values outside. */
static double table_at(const double *x, const double *y, int n, double v)
{
    if (n == 1 || v <= x[0]) return y[0];
    if (v >= x[n - 1]) return y[n - 1];
    int i = 0;
    while (v > x[i + 1])
        i++;
    const double t = (v - x[i]) / (x[i + 1] - x[i]);
    return (1 - t) * y[i] + t * y[i + 1];
}

double ioaa_beside_slow(const struct ioaa_beside *b, double bytes, double g)
{
    return b->slow_n > 0 ? table_at(b->slow_bytes, b->slow, b->slow_n, bytes) : g;
}

double ioaa_beside_rate(const struct ioaa_beside *b, double bytes)
{
    return b->n < 1 ? IOAA_PROFILE_BESIDE_DEFAULT : table_at(b->bytes, b->factor, b->n, bytes);
}

double ioaa_overlap(double compute, double recall, double rate, double slow)
{
    if (!(recall > 0)) return compute;
    if (!(compute > 0)) return recall;
    const double rb = recall / rate, cs = slow * compute;
    if (cs >= rb) return compute + rb * (1 - 1 / slow);
    return recall + cs * (1 - rate);
}

/* A table's factors y in (lo, hi] ([lo, hi] when lo_in) and, with more than one point, its
 * sizes x > 0, finite and increasing: 0, or -1 with the first violation, prefixed by pre. */
static int table_check(const char *pre, const double *x, const double *y, int n, double lo,
                       int lo_in, double hi, char *why, size_t len)
{
    for (int i = 0; i < n; i++) {
        if (!((lo_in ? y[i] >= lo : y[i] > lo) && y[i] <= hi))
            return snprintf(why, len, "%sfactor %d is %g: expected %c%g, %g]", pre, i, y[i],
                            lo_in ? '[' : '(', lo, hi),
                   -1;
        if (n > 1 && !(isfinite(x[i]) && x[i] > 0 && (i == 0 || x[i] > x[i - 1])))
            return snprintf(why, len, "%sbytes %d is %g: expected > 0, finite, increasing", pre, i,
                            x[i]),
                   -1;
    }
    return 0;
}

int ioaa_beside_check(const struct ioaa_beside *b, char *why, size_t len)
{
    if (b->n < 0 || b->n > IOAA_BESIDE_MAX_POINTS)
        return snprintf(why, len, "%d points: expected 0 .. %d", b->n, IOAA_BESIDE_MAX_POINTS), -1;
    if (b->slow_n == 1 || b->slow_n < 0 || b->slow_n > IOAA_BESIDE_MAX_POINTS)
        return snprintf(why, len, "compute_beside: %d points: expected 2 .. %d (or one number)",
                        b->slow_n, IOAA_BESIDE_MAX_POINTS),
               -1;
    return table_check("", b->bytes, b->factor, b->n, 0, 0, IOAA_PROFILE_BESIDE_MAX, why, len) ||
                   table_check("compute_beside: ", b->slow_bytes, b->slow, b->slow_n, 1, 1,
                               IOAA_PROFILE_COMPUTE_MAX, why, len)
               ? -1
               : 0;
}

double ioaa_spec_recall(const struct ioaa *a, double b, double prefetch_bytes,
                        double correction_bytes, const struct ioaa_beside *beside, double window,
                        double k_prefetch, double k_correction)
{
    const double tc = k_correction * ioaa_t_recall(a, b * correction_bytes);
    const double tp = k_prefetch * ioaa_t_recall(a, b * prefetch_bytes);
    const double wo = window * ioaa_t_offload(a, b);
    const double f = ioaa_beside_rate(beside, b * prefetch_bytes);
    const double g = ioaa_beside_slow(beside, b * prefetch_bytes, ioaa_compute_beside(a));
    return tc + ioaa_overlap(wo, tp, f, g) - wo;
}

int ioaa_profile_data_speculate(struct ioaa_profile_data *d, double prefetch_bytes,
                                double correction_bytes, double window, int max_batch, char *err,
                                size_t errlen)
{
    const double p1 = prefetch_bytes, c1 = correction_bytes;
    if (!(p1 >= 0) || !(c1 >= 0) || !isfinite(p1 + c1) || max_batch < 1 ||
        !(window > 0 && window <= 1))
        return pulse_errorf(err, errlen, PULSE_ERR_INVALID, "ioaa speculation",
                            "prefetch %g bytes, corrections %g bytes, window %g, max batch %d: "
                            "expected finite bytes >= 0, a window in (0, 1] and a batch >= 1",
                            p1, c1, window, max_batch);
    if (!(p1 + c1 > 0)) return PULSE_OK;
    char why[256];
    const struct ioaa_params ip = {.profile = d->prof};
    struct ioaa *a = ioaa_create(&ip, why, sizeof why);
    if (!a) return pulse_errorf(err, errlen, PULSE_ERR_INVALID, "ioaa speculation", "%s", why);
    const int n = PULSE_MIN(max_batch, IOAA_PROFILE_MAX_POINTS);
    struct ioaa_profile_data s;
    memset(&s, 0, sizeof s);
    int rc =
        ioaa_profile_data_alloc(&s, d->prof.tn_nb, d->prof.tn_nc, d->prof.to_n, n, err, errlen);
    if (rc != PULSE_OK) {
        ioaa_free(a);
        return rc;
    }
    const size_t dl = sizeof(double);
    memcpy(s.tn_b, d->tn_b, dl * d->prof.tn_nb);
    memcpy(s.tn_c, d->tn_c, dl * d->prof.tn_nc);
    memcpy(s.tn, d->tn, dl * d->prof.tn_nb * d->prof.tn_nc);
    memcpy(s.to_b, d->to_b, dl * d->prof.to_n);
    memcpy(s.to, d->to, dl * d->prof.to_n);
    double top = 0;
    for (int i = 0; i < n; i++) {
        const double t = ioaa_spec_recall(a, i + 1, p1, c1, &d->info.beside, window, 1, 1);
        top = fmax(top, t);
        const double b = i + 1;
        s.tr_bytes[i] = b * (p1 + c1);
        s.tr[i] = top;
    }
    ioaa_free(a);
    s.prof.n_layers = d->prof.n_layers;
    s.prof.recall_bytes = p1 + c1;
    s.prof.compute_beside = d->prof.compute_beside;
    s.info = d->info;
    s.raised = d->raised;
    ioaa_profile_data_free(d);
    *d = s;
    return PULSE_OK;
}

/* ---- writing ---- */

/* A grid value: an integer when it is one (batch sizes, contexts, byte counts), else a real;
 * a NaN or Inf, which JSON cannot hold, as null (the reader rejects it). */
static json_t *grid_value(double v)
{
    if (!isfinite(v)) return json_null();
    if (v == floor(v) && fabs(v) < 9007199254740992.0) return json_integer((json_int_t)v);
    return json_real(v);
}

static json_t *grid_json(const double *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, grid_value(v[i]));
    return a;
}

/* Times: reals (non-finite ones as null). */
static json_t *times_json(const double *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, isfinite(v[i]) ? json_real(v[i]) : json_null());
    return a;
}

json_t *ioaa_profile_to_json(const struct ioaa_profile *p, const struct ioaa_profile_info *info)
{
    json_t *rows = json_array();
    for (int i = 0; i < p->tn_nb; i++)
        json_array_append_new(rows, times_json(p->tn + (size_t)i * p->tn_nc, p->tn_nc));
    json_t *j = json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:s, s:i, s:{s:o, s:o, s:o}, s:{s:o, s:o}, s:{s:o, s:o}}",
        "schema", IOAA_PROFILE_SCHEMA, "model", info->model, "backend", info->backend,
        "recall_engine", info->recall_engine, "date", info->date, "source", info->source,
        "n_layers", p->n_layers, "normal", "batch", grid_json(p->tn_b, p->tn_nb), "context",
        grid_json(p->tn_c, p->tn_nc), "layer_s", rows, "offload", "batch",
        grid_json(p->to_b, p->to_n), "layer_s", times_json(p->to, p->to_n), "recall", "bytes",
        grid_json(p->tr_bytes, p->tr_n), "round_s", times_json(p->tr, p->tr_n));
    PULSE_CHECK(j != NULL, "ioaa_profile_to_json: json_pack");
    json_object_set_new(j, "recall_bytes_per_request_layer",
                        isfinite(p->recall_bytes) ? json_real(p->recall_bytes) : json_null());
    if (info->note[0]) json_object_set_new(j, "note", json_string(info->note));
    json_t *rec = json_object_get(j, "recall"), *bj = ioaa_beside_to_json(&info->beside);
    if (bj) json_object_set_new(rec, "beside_compute", bj); /* measured */
    json_t *gj = ioaa_compute_beside_to_json(&info->beside, p->compute_beside);
    if (gj) json_object_set_new(rec, "compute_beside", gj);
    json_t *cj = ioaa_bytes_by_context_to_json(&info->by_context);
    if (cj) json_object_set_new(rec, "by_context", cj);
    return j;
}

json_t *ioaa_compute_beside_to_json(const struct ioaa_beside *b, double g)
{
    if (b->slow_n > 0)
        return json_pack("{s:o, s:o}", "bytes", grid_json(b->slow_bytes, b->slow_n), "factor",
                         times_json(b->slow, b->slow_n));
    return g > 0 ? json_real(g) : NULL;
}

json_t *ioaa_bytes_by_context_to_json(const struct ioaa_bytes_by_context *b)
{
    if (b->n < 1) return NULL;
    json_t *j = json_pack("{s:o, s:o, s:f, s:b}", "context", grid_json(b->context, b->n), "bytes",
                          times_json(b->bytes, b->n), "source_bytes", b->source_bytes, "speculate",
                          b->speculate);
    if (b->speculate) {
        json_object_set_new(j, "prefetch", times_json(b->prefetch, b->n));
        json_object_set_new(j, "after_selection", times_json(b->after, b->n));
        json_object_set_new(j, "spec_margin", json_real(b->spec_margin));
        json_object_set_new(j, "spec_from", json_string(b->spec_from));
    }
    return j;
}

void ioaa_bytes_at(const struct ioaa_bytes_by_context *b, double c, double *bytes,
                   double *prefetch, double *after)
{
    int i = 0;
    double t = 0; /* c between context[i] and context[i + 1], at t in log c */
    if (b->n > 1 && c > b->context[0]) {
        while (i + 2 < b->n && c > b->context[i + 1])
            i++;
        t = c >= b->context[i + 1]
                ? 1
                : log(c / b->context[i]) / log(b->context[i + 1] / b->context[i]);
    }
    const int j = b->n > 1 ? i + 1 : 0;
#define AT(v) ((1 - t) * (v)[i] + t * (v)[j])
    *bytes = AT(b->bytes);
    *prefetch = b->speculate ? AT(b->prefetch) : 0;
    *after = b->speculate ? AT(b->after) : 0;
#undef AT
}

json_t *ioaa_beside_to_json(const struct ioaa_beside *b)
{
    if (b->n < 1) return NULL;
    if (b->n == 1) return json_real(b->factor[0]);
    return json_pack("{s:o, s:o}", "bytes", grid_json(b->bytes, b->n), "factor",
                     times_json(b->factor, b->n));
}

/* ---- reading ---- */

#define BAD(...) pulse_errorf(err, errlen, PULSE_ERR_INVALID, name, __VA_ARGS__)

/* The string `key` of j into out[len]. */
static int read_string(const json_t *j, const char *key, int optional, char *out, size_t len,
                       const char *name, char *err, size_t errlen)
{
    const json_t *v = json_object_get(j, key);
    if (!v && optional) return PULSE_OK;
    if (!json_is_string(v))
        return BAD("%s: %s, expected a string", key, v ? "not a string" : "missing");
    if (json_string_length(v) >= len)
        return BAD("%s: %zu characters, expected at most %zu", key, json_string_length(v), len - 1);
    memcpy(out, json_string_value(v), json_string_length(v) + 1);
    return PULSE_OK;
}

/* The array `field` (named `what` in messages) of 1..IOAA_PROFILE_MAX_POINTS elements; its
 * size in *n. NULL after a message. */
static const json_t *read_array(const json_t *obj, const char *key, const char *what, int *n,
                                const char *name, char *err, size_t errlen)
{
    const json_t *a = json_object_get(obj, key);
    if (!json_is_array(a)) {
        BAD("%s: %s, expected an array", what, a ? "not an array" : "missing");
        return NULL;
    }
    size_t sz = json_array_size(a);
    if (sz < 1 || sz > IOAA_PROFILE_MAX_POINTS) {
        BAD("%s: %zu values, expected 1..%d", what, sz, IOAA_PROFILE_MAX_POINTS);
        return NULL;
    }
    *n = (int)sz;
    return a;
}

/* The n numbers of array a (named what) into out[n]: a grid > 0 and strictly increasing, times > 0
 * (>= 0 when zero_ok), all finite. */
static int read_numbers(const json_t *a, const char *what, int n, int grid, int zero_ok,
                        double *out, const char *name, char *err, size_t errlen)
{
    for (int i = 0; i < n; i++) {
        const json_t *e = json_array_get(a, (size_t)i);
        if (!json_is_number(e)) return BAD("%s[%d]: not a number", what, i);
        const double v = json_number_value(e);
        if (!isfinite(v)) return BAD("%s[%d]: not finite", what, i);
        if (grid && !(v > 0)) return BAD("%s[%d]: %.17g, expected a value > 0", what, i, v);
        if (grid && i > 0 && !(v > out[i - 1]))
            return BAD("%s[%d]: %.17g after %.17g (must be strictly increasing)", what, i, v,
                       out[i - 1]);
        if (!grid && (v < 0 || (!zero_ok && v == 0)))
            return BAD("%s[%d]: %.17g is not a time %s 0 seconds", what, i, v,
                       zero_ok ? ">=" : ">");
        out[i] = v;
    }
    return PULSE_OK;
}

/* The object `key` of j, or NULL after a message. */
static const json_t *read_object(const json_t *j, const char *key, const char *name, char *err,
                                 size_t errlen)
{
    const json_t *o = json_object_get(j, key);
    if (!json_is_object(o)) BAD("%s: %s, expected an object", key, o ? "not an object" : "missing");
    return json_is_object(o) ? o : NULL;
}

/* The header fields: schema, strings, n_layers, r. */
static int read_header(const json_t *j, struct ioaa_profile_info *info, int *n_layers, double *r,
                       const char *name, char *err, size_t errlen)
{
    const json_t *s = json_object_get(j, "schema");
    if (!json_is_string(s) || strcmp(json_string_value(s), IOAA_PROFILE_SCHEMA))
        return BAD("schema: %s%s%s, expected \"%s\"", s ? "\"" : "missing",
                   json_is_string(s) ? json_string_value(s) : "", s ? "\"" : "",
                   IOAA_PROFILE_SCHEMA);
    int rc;
    if ((rc = read_string(j, "model", 0, info->model, sizeof info->model, name, err, errlen)) ||
        (rc = read_string(j, "backend", 0, info->backend, sizeof info->backend, name, err,
                          errlen)) ||
        (rc = read_string(j, "recall_engine", 0, info->recall_engine, sizeof info->recall_engine,
                          name, err, errlen)) ||
        (rc = read_string(j, "date", 0, info->date, sizeof info->date, name, err, errlen)) ||
        (rc = read_string(j, "source", 0, info->source, sizeof info->source, name, err, errlen)) ||
        (rc = read_string(j, "note", 1, info->note, sizeof info->note, name, err, errlen)))
        return rc;
    const json_t *env = json_object_get(j, "env"); /* optional: a hand-made profile has none */
    if (env && !json_is_object(env)) return BAD("env: not an object");
    for (int i = 0; env && i < 2 && !info->device[0]; i++) { /* env.gpu, else env.device */
        const char *key = i ? "device" : "gpu";
        const json_t *v = json_object_get(env, key);
        if (!v || json_is_null(v)) continue;
        if (!json_is_string(v) || !json_string_length(v) ||
            json_string_length(v) >= sizeof info->device)
            return BAD("env.%s: expected a name of 1..%zu characters", key,
                       sizeof info->device - 1);
        memcpy(info->device, json_string_value(v), json_string_length(v) + 1);
    }
    if (strcmp(info->source, "measured") && strcmp(info->source, "analytic"))
        return BAD("source: \"%s\", expected \"measured\" or \"analytic\"", info->source);
    const json_t *l = json_object_get(j, "n_layers");
    if (!json_is_integer(l) || json_integer_value(l) < 1 || json_integer_value(l) > 1000000)
        return BAD("n_layers: expected an integer in 1..1000000");
    *n_layers = (int)json_integer_value(l);
    const json_t *rb = json_object_get(j, "recall_bytes_per_request_layer");
    if (!json_is_number(rb) || !isfinite(json_number_value(rb)) || json_number_value(rb) < 0)
        return BAD("recall_bytes_per_request_layer: %s, expected a number >= 0",
                   rb ? "out of range or not a number" : "missing");
    *r = json_number_value(rb);
    return PULSE_OK;
}

/* The three tables' arrays and sizes (checked for shape before anything is allocated). */
struct tables_json {
    const json_t *nb, *nc, *tn, *ob, *ot, *rx, *rt;
    int n_b, n_c, n_o, n_r;
};

static int read_shapes(const json_t *j, struct tables_json *t, const char *name, char *err,
                       size_t errlen)
{
    const json_t *nm = read_object(j, "normal", name, err, errlen);
    if (!nm) return PULSE_ERR_INVALID;
    const json_t *of = read_object(j, "offload", name, err, errlen);
    if (!of) return PULSE_ERR_INVALID;
    const json_t *rc = read_object(j, "recall", name, err, errlen);
    if (!rc) return PULSE_ERR_INVALID;
    int n;
    if (!(t->nb = read_array(nm, "batch", "normal.batch", &t->n_b, name, err, errlen)) ||
        !(t->nc = read_array(nm, "context", "normal.context", &t->n_c, name, err, errlen)) ||
        !(t->tn = read_array(nm, "layer_s", "normal.layer_s", &n, name, err, errlen)))
        return PULSE_ERR_INVALID;
    if (n != t->n_b)
        return BAD("normal.layer_s: %d rows, expected %d (one per normal.batch)", n, t->n_b);
    for (int i = 0; i < n; i++) {
        const json_t *row = json_array_get(t->tn, (size_t)i);
        if (!json_is_array(row)) return BAD("normal.layer_s[%d]: not an array", i);
        if (json_array_size(row) != (size_t)t->n_c)
            return BAD("normal.layer_s[%d]: %zu values, expected %d (one per normal.context)", i,
                       json_array_size(row), t->n_c);
    }
    if (!(t->ob = read_array(of, "batch", "offload.batch", &t->n_o, name, err, errlen)) ||
        !(t->ot = read_array(of, "layer_s", "offload.layer_s", &n, name, err, errlen)))
        return PULSE_ERR_INVALID;
    if (n != t->n_o)
        return BAD("offload.layer_s: %d values, expected %d (one per offload.batch)", n, t->n_o);
    if (!(t->rx = read_array(rc, "bytes", "recall.bytes", &t->n_r, name, err, errlen)) ||
        !(t->rt = read_array(rc, "round_s", "recall.round_s", &n, name, err, errlen)))
        return PULSE_ERR_INVALID;
    if (n != t->n_r)
        return BAD("recall.round_s: %d values, expected %d (one per recall.bytes)", n, t->n_r);
    return PULSE_OK;
}

/* measurement.copy_bandwidth_GBps and .h2d_peak_GBps when the profile has them (0 when not),
 * and config.budget_tokens (0 when not). */
static int read_ceilings(const json_t *j, struct ioaa_profile_info *info, const char *name,
                         char *err, size_t errlen)
{
    const json_t *m = json_object_get(j, "measurement");
    const char *keys[] = {"copy_bandwidth_GBps", "h2d_peak_GBps"};
    double *out[] = {&info->copy_gbps, &info->h2d_gbps};
    for (int i = 0; i < 2; i++) {
        *out[i] = 0;
        const json_t *v = json_is_object(m) ? json_object_get(m, keys[i]) : NULL;
        if (!v) continue;
        const double x = json_is_number(v) ? json_number_value(v) : NAN;
        if (!(x > 0 && isfinite(x)))
            return BAD("measurement.%s: expected a number > 0 (GB/s)", keys[i]);
        *out[i] = x;
    }
    const json_t *b = json_object_get(json_object_get(j, "config"), "budget_tokens");
    info->budget_tokens = 0;
    if (b && !json_is_null(b)) {
        if (!json_is_integer(b) || json_integer_value(b) < 1 || json_integer_value(b) > 1 << 30)
            return BAD("config.budget_tokens: expected an integer >= 1");
        info->budget_tokens = (int)json_integer_value(b);
    }
    return PULSE_OK;
}

/* A {"bytes": [...], "factor": [...]} table of 1 .. IOAA_BESIDE_MAX_POINTS points into x, y
 * (*n; non-numbers as NaN, for the check); -1 when v is not of that form. */
static int read_table(const json_t *v, double *x, double *y, int *n)
{
    const json_t *xa = json_object_get(v, "bytes"), *ya = json_object_get(v, "factor");
    const size_t m = json_array_size(xa);
    if (!json_is_object(v) || m < 1 || m > IOAA_BESIDE_MAX_POINTS || json_array_size(ya) != m)
        return -1;
    for (size_t i = 0; i < m; i++) {
        const json_t *xi = json_array_get(xa, i), *yi = json_array_get(ya, i);
        x[i] = json_is_number(xi) ? json_number_value(xi) : NAN;
        y[i] = json_is_number(yi) ? json_number_value(yi) : NAN;
    }
    *n = (int)m;
    return 0;
}

/* recall.beside_compute and recall.compute_beside, both optional (the header's forms) into *b
 * and *g (n, slow_n and g 0 when absent; with a compute table, g its largest factor). */
static int read_beside(const json_t *j, struct ioaa_beside *b, double *g, const char *name,
                       char *err, size_t errlen)
{
    const json_t *rec = json_object_get(j, "recall");
    const json_t *v = json_object_get(rec, "beside_compute");
    const json_t *gj = json_object_get(rec, "compute_beside");
    memset(b, 0, sizeof *b);
    *g = 0;
    if (json_is_number(v))
        b->n = 1, b->factor[0] = json_number_value(v);
    else if (v && read_table(v, b->bytes, b->factor, &b->n))
        return BAD("recall.beside_compute: expected a number, or {\"bytes\": [...], "
                   "\"factor\": [...]} of 1 .. %d points each",
                   IOAA_BESIDE_MAX_POINTS);
    char why[160];
    if (ioaa_beside_check(b, why, sizeof why)) return BAD("recall.beside_compute: %s", why);
    if (json_is_number(gj)) {
        *g = json_number_value(gj);
    } else if (gj) {
        if (read_table(gj, b->slow_bytes, b->slow, &b->slow_n) || b->slow_n < 2)
            return BAD("recall.compute_beside: expected a number, or {\"bytes\": [...], "
                       "\"factor\": [...]} of 2 .. %d points each",
                       IOAA_BESIDE_MAX_POINTS);
        if (ioaa_beside_check(b, why, sizeof why)) return BAD("recall.%s", why);
        for (int i = 0; i < b->slow_n; i++)
            *g = fmax(*g, b->slow[i]);
    }
    if (gj && !(*g >= 1 && *g <= IOAA_PROFILE_COMPUTE_MAX))
        return BAD("recall.compute_beside: expected a number in [1, %g] (the compute's time "
                   "beside the recall over alone)",
                   IOAA_PROFILE_COMPUTE_MAX);
    return PULSE_OK;
}

int ioaa_bytes_by_context_from_json(const json_t *j, struct ioaa_bytes_by_context *b,
                                    const char *name, char *err, size_t errlen)
{
    memset(b, 0, sizeof *b);
    const json_t *sp = json_object_get(j, "speculate");
    if (!json_is_object(j) || !json_is_boolean(sp))
        return BAD("recall.by_context: expected {\"context\": [...], \"bytes\": [...], "
                   "\"speculate\": true|false, ...}");
    b->speculate = json_is_true(sp);
    const json_t *sb = json_object_get(j, "source_bytes");
    b->source_bytes = json_is_number(sb) ? json_number_value(sb) : NAN;
    if (!(b->source_bytes >= 0) || !isfinite(b->source_bytes))
        return BAD("recall.by_context.source_bytes: expected a number >= 0 (the churn estimate "
                   "of r the steps aimed at)");
    const json_t *c = json_object_get(j, "context");
    const size_t n = json_array_size(c);
    if (!json_is_array(c) || n < 1 || n > IOAA_BYCTX_MAX_POINTS)
        return BAD("recall.by_context.context: expected an array of 1 .. %d contexts",
                   IOAA_BYCTX_MAX_POINTS);
    b->n = (int)n;
    int rc = read_numbers(c, "recall.by_context.context", b->n, 1, 0, b->context, name, err,
                          errlen);
    const char *keys[3] = {"bytes", "prefetch", "after_selection"};
    double *out[3] = {b->bytes, b->prefetch, b->after};
    for (int k = 0; k < (b->speculate ? 3 : 1) && rc == PULSE_OK; k++) {
        const json_t *a = json_object_get(j, keys[k]);
        if (json_array_size(a) != n)
            return BAD("recall.by_context.%s: expected %zu values (one per context)", keys[k], n);
        char what[48];
        snprintf(what, sizeof what, "recall.by_context.%s", keys[k]);
        rc = read_numbers(a, what, b->n, 0, 1, out[k], name, err, errlen);
    }
    if (rc != PULSE_OK || !b->speculate) return rc;
    const json_t *m = json_object_get(j, "spec_margin"), *f = json_object_get(j, "spec_from");
    b->spec_margin = json_is_number(m) ? json_number_value(m) : NAN;
    const char *from = json_string_value(f);
    if (!(b->spec_margin >= 0 && b->spec_margin <= 1))
        return BAD("recall.by_context.spec_margin: expected a number in [0, 1]");
    if (!from || (strcmp(from, "input") && strcmp(from, "mid") && strcmp(from, "hits")))
        return BAD("recall.by_context.spec_from: expected \"input\", \"mid\" or \"hits\"");
    snprintf(b->spec_from, sizeof b->spec_from, "%s", from);
    for (int i = 0; i < b->n; i++)
        if (fabs(b->prefetch[i] + b->after[i] - b->bytes[i]) > 1e-6 * fmax(1, b->bytes[i]))
            return BAD("recall.by_context: at %.17g tokens prefetch %.17g + after_selection "
                       "%.17g is not bytes %.17g",
                       b->context[i], b->prefetch[i], b->after[i], b->bytes[i]);
    return PULSE_OK;
}

static int read_tables(const struct tables_json *t, struct ioaa_profile_data *d, const char *name,
                       char *err, size_t errlen)
{
    int rc;
    if ((rc = read_numbers(t->nb, "normal.batch", t->n_b, 1, 0, d->tn_b, name, err, errlen)) ||
        (rc = read_numbers(t->nc, "normal.context", t->n_c, 1, 0, d->tn_c, name, err, errlen)))
        return rc;
    for (int i = 0; i < t->n_b; i++) {
        char what[48];
        snprintf(what, sizeof what, "normal.layer_s[%d]", i);
        if ((rc = read_numbers(json_array_get(t->tn, (size_t)i), what, t->n_c, 0, 0,
                               d->tn + (size_t)i * t->n_c, name, err, errlen)))
            return rc;
    }
    if ((rc = read_numbers(t->ob, "offload.batch", t->n_o, 1, 0, d->to_b, name, err, errlen)) ||
        (rc = read_numbers(t->ot, "offload.layer_s", t->n_o, 0, 0, d->to, name, err, errlen)) ||
        (rc = read_numbers(t->rx, "recall.bytes", t->n_r, 1, 0, d->tr_bytes, name, err, errlen)) ||
        (rc = read_numbers(t->rt, "recall.round_s", t->n_r, 0, 1, d->tr, name, err, errlen)))
        return rc;
    return PULSE_OK;
}

/* recall.by_context, optional, into *b (n 0 when absent). */
static int read_by_context(const json_t *j, struct ioaa_bytes_by_context *b, const char *name,
                           char *err, size_t errlen)
{
    const json_t *v = json_object_get(json_object_get(j, "recall"), "by_context");
    memset(b, 0, sizeof *b);
    return v ? ioaa_bytes_by_context_from_json(v, b, name, err, errlen) : PULSE_OK;
}

int ioaa_profile_from_json(const json_t *j, const char *name, struct ioaa_profile_data *d,
                           char *err, size_t errlen)
{
    ioaa_profile_data_free(d);
    if (!json_is_object(j)) return BAD("expected a JSON object");
    struct ioaa_profile_info info;
    memset(&info, 0, sizeof info);
    struct tables_json t = {0};
    int n_layers = 0, rc;
    double r = 0, g = 0;
    if ((rc = read_header(j, &info, &n_layers, &r, name, err, errlen)) ||
        (rc = read_shapes(j, &t, name, err, errlen)) ||
        (rc = read_beside(j, &info.beside, &g, name, err, errlen)) ||
        (rc = read_by_context(j, &info.by_context, name, err, errlen)) ||
        (rc = read_ceilings(j, &info, name, err, errlen)) ||
        (rc = ioaa_profile_data_alloc(d, t.n_b, t.n_c, t.n_o, t.n_r, err, errlen)))
        return rc;
    if ((rc = read_tables(&t, d, name, err, errlen))) {
        ioaa_profile_data_free(d);
        return rc;
    }
    d->info = info;
    d->prof.n_layers = n_layers;
    d->prof.recall_bytes = r;
    d->prof.compute_beside = g;
    d->raised = ioaa_profile_data_monotone(d);
    return PULSE_OK;
}

int ioaa_profile_load(const char *path, struct ioaa_profile_data *d, char *err, size_t errlen)
{
    ioaa_profile_data_free(d);
    json_t *j;
    int rc = results_read_json(path, 0, &j, err, errlen);
    if (rc != PULSE_OK) return rc;
    rc = ioaa_profile_from_json(j, path, d, err, errlen);
    json_decref(j);
    return rc;
}

/* ---- the analytic profile ---- */

void ioaa_profile_date_now(char *buf, size_t len)
{
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Tokens layer l attends at context c, averaged over the layers (a local layer its window). */
static double mean_attended(const struct model_config *m, double c)
{
    double sum = 0;
    for (int l = 0; l < m->n_layers; l++) {
        const int w = model_layer_window(m, l);
        sum += w > 0 && w < c ? w : c;
    }
    return sum / m->n_layers;
}

double ioaa_analytic_t_normal(const struct ioaa_analytic_params *p, double b, double c)
{
    const struct model_config *m = p->cfg;
    const double k = (double)model_kv_bytes_per_token(m) / m->n_layers;
    return ((double)model_layer_weight_bytes(m) + b * k * mean_attended(m, c)) /
           (p->bw.hbm_gbps * 1e9);
}

double ioaa_analytic_t_offload(const struct ioaa_analytic_params *p, double b)
{
    const struct model_config *m = p->cfg;
    const double k = (double)model_kv_bytes_per_token(m) / m->n_layers;
    return ((double)model_layer_weight_bytes(m) + b * k * p->budget_tokens) /
           (p->bw.hbm_gbps * 1e9);
}

double ioaa_analytic_t_recall(const struct ioaa_analytic_params *p, double bytes)
{
    return bytes / (p->bw.h2d_gbps * 1e9);
}

int ioaa_profile_analytic(const struct ioaa_analytic_params *p, struct ioaa_profile_data *d,
                          char *err, size_t errlen)
{
    ioaa_profile_data_free(d);
    const char *name = "ioaa analytic profile";
    if (!p || !p->cfg || p->cfg->n_layers < 1) return BAD("no model config");
    if (!(p->bw.hbm_gbps > 0) || !(p->bw.h2d_gbps > 0) || !isfinite(p->bw.hbm_gbps) ||
        !isfinite(p->bw.h2d_gbps))
        return BAD("bandwidths %g (HBM) and %g (H2D) GB/s: expected both finite and > 0",
                   p->bw.hbm_gbps, p->bw.h2d_gbps);
    if (p->budget_tokens < 1) return BAD("budget_tokens is %d: expected >= 1", p->budget_tokens);
    if (!isfinite(p->recall_bytes) || p->recall_bytes < 0)
        return BAD("recall_bytes is %g: expected a finite value >= 0", p->recall_bytes);
    enum { NB = 7, NC = 8, NR = 10 }; /* b = 1..64, c = 1K..128K, x = 4 KiB..1 GiB */
    int rc = ioaa_profile_data_alloc(d, NB, NC, NB, NR, err, errlen);
    if (rc) return rc;
    const struct model_config *m = p->cfg;
    for (int i = 0; i < NB; i++)
        d->tn_b[i] = d->to_b[i] = (double)(1 << i);
    for (int j = 0; j < NC; j++)
        d->tn_c[j] = (double)(1024 << j);
    for (int i = 0; i < NB; i++) {
        for (int j = 0; j < NC; j++)
            d->tn[i * NC + j] = ioaa_analytic_t_normal(p, d->tn_b[i], d->tn_c[j]);
        d->to[i] = ioaa_analytic_t_offload(p, d->to_b[i]);
    }
    for (int i = 0; i < NR; i++) {
        d->tr_bytes[i] = (double)((int64_t)4096 << (2 * i));
        d->tr[i] = ioaa_analytic_t_recall(p, d->tr_bytes[i]);
    }
    d->prof.n_layers = m->n_layers;
    d->prof.recall_bytes = p->recall_bytes;
    struct ioaa_profile_info *in = &d->info;
    snprintf(in->model, sizeof in->model, "%s", m->name);
    snprintf(in->backend, sizeof in->backend, "%s", p->backend ? p->backend : "");
    snprintf(in->recall_engine, sizeof in->recall_engine, "%s",
             p->recall_engine ? p->recall_engine : "");
    ioaa_profile_date_now(in->date, sizeof in->date);
    snprintf(in->source, sizeof in->source, "analytic");
    snprintf(in->note, sizeof in->note,
             "analytic: bytes over bandwidth, HBM copy %.6g GB/s (t_N: one layer's weights and "
             "its KV at the context; t_O: weights and %d selected tokens), H2D %.6g GB/s (t_R); "
             "a floor, real layers are slower",
             p->bw.hbm_gbps, p->budget_tokens, p->bw.h2d_gbps);
    d->raised = 0;
    return PULSE_OK;
}
