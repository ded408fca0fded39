/* The speculation profile (locality_spec.h, part 1): the built-in measurement, JSON read and
 * write, and the per-layer targets of a model. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "locality_spec.h"
#include "results.h"

#define SPEC_FORMAT "pulse-speculation-profile"
#define SPEC_VERSION 1

static void copy_str(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src ? src : "");
}

/* ------------------------------------------------------------------ built-in */

/* workloads/profiles/speculation_gemma3-270m.json (tests/test_locality_spec.c compares them):
 * pulse accuracy's infinigen runs on Gemma 3 270M Q4_K_M, global layers 5, 11 and 17 of 18. */
static const int k_layers[] = {5, 11, 17};
static const struct {
    int budget, context, samples;
    int64_t exact[3], hit[3];
} k_runs[] = {
    {1024, 4096, 8, {15872, 15872, 15872}, {13273, 13712, 14734}},
    {2048, 4096, 8, {31744, 31744, 31744}, {27993, 28680, 30314}},
    {1024, 8192, 6, {11904, 11904, 11904}, {9677, 10295, 10759}},
    {2048, 8192, 6, {23808, 23808, 23808}, {20236, 20789, 22327}},
};

void locality_spec_profile_builtin(struct locality_spec_profile *out)
{
    memset(out, 0, sizeof *out);
    copy_str(out->source, sizeof out->source, "measured");
    copy_str(out->model, sizeof out->model, "gemma3-270m-q4_k_m");
    copy_str(out->policy, sizeof out->policy, "infinigen");
    copy_str(out->selection, sizeof out->selection, "headwise");
    copy_str(out->mapping, sizeof out->mapping, "depth");
    out->n_layers = 18;
    out->block_size = 16;
    copy_str(out->machine, sizeof out->machine,
             "Intel(R) Xeon(R) Processor (2 shared cores, no GPU), Linux 6.18.44, pulse "
             "accuracy --backend cpu");
    copy_str(out->date, sizeof out->date, "2026-12-04");
    copy_str(out->commit, sizeof out->commit, "4d1c1737fd4184cb466a6ff754034eb693a41194");
    copy_str(out->command, sizeof out->command,
             "pulse synth --length 4096 --length 8192 --task passkey --task niah_multikey "
             "--samples 8 --seed 1 --tokenizer MODEL --out-dir DATA; then for L in 4096 "
             "(--samples 4) and 8192 (--samples 3): pulse accuracy --backend cpu --model "
             "MODEL --data DATA --lengths L --tasks passkey,niah_multikey --policies "
             "full,infinigen --budgets 1024,2048 --samples S --calib-samples 0 --max-gen 32 "
             "--time-limit 780 --out accuracy_L.json (MODEL: gemma3-270m-q4_k_m.gguf, sha256 "
             "a5fd3b62...6818, scripts/setup-model.sh); overlap = "
             "speculation[].per_layer[].hit / exact");
    copy_str(out->results, sizeof out->results,
             "experiments/results/cpu-2026-12-04-s19/accuracy_4096.json, accuracy_8192.json");
    out->n_runs = (int)PULSE_ARRAY_LEN(k_runs);
    for (int r = 0; r < out->n_runs; r++) {
        struct locality_spec_run *u = &out->run[r];
        u->budget_tokens = k_runs[r].budget;
        u->context_tokens = k_runs[r].context;
        u->samples = k_runs[r].samples;
        u->n_points = (int)PULSE_ARRAY_LEN(k_layers);
        for (int i = 0; i < u->n_points; i++)
            u->point[i] =
                (struct locality_spec_point){k_layers[i], k_runs[r].exact[i], k_runs[r].hit[i],
                                             (double)k_runs[r].hit[i] / (double)k_runs[r].exact[i]};
    }
}

/* ------------------------------------------------------------------ JSON */

json_t *locality_spec_profile_to_json(const struct locality_spec_profile *p)
{
    json_t *runs = json_array();
    for (int r = 0; r < p->n_runs; r++) {
        const struct locality_spec_run *u = &p->run[r];
        json_t *layers = json_array();
        for (int i = 0; i < u->n_points; i++)
            json_array_append_new(
                layers, json_pack("{s:i, s:I, s:I, s:f}", "layer", u->point[i].layer, "exact",
                                  (json_int_t)u->point[i].exact, "hit", (json_int_t)u->point[i].hit,
                                  "overlap", u->point[i].overlap));
        json_array_append_new(runs, json_pack("{s:i, s:i, s:i, s:o}", "budget_tokens",
                                              u->budget_tokens, "context_tokens", u->context_tokens,
                                              "samples", u->samples, "layers", layers));
    }
    json_t *prov = json_pack("{s:s, s:s, s:s, s:s, s:s}", "machine", p->machine, "date", p->date,
                             "commit", p->commit, "command", p->command, "results", p->results);
    return json_pack("{s:s, s:i, s:s, s:s, s:i, s:s, s:s, s:i, s:s, s:o, s:o}", "format",
                     SPEC_FORMAT, "version", SPEC_VERSION, "source", p->source, "model", p->model,
                     "n_layers", p->n_layers, "policy", p->policy, "selection", p->selection,
                     "block_size", p->block_size, "mapping", p->mapping, "provenance", prov, "runs",
                     runs);
}

struct pctx {
    const char *name;
    char *err;
    size_t errlen;
};

static int fail(const struct pctx *c, const char *field, const char *what)
{
    snprintf(c->err, c->errlen, "%s: %s: %s", c->name, field, what);
    return PULSE_ERR_INVALID;
}

static int only_keys(const struct pctx *c, const json_t *obj, const char *where,
                     const char *const *keys, int n)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        int ok = 0;
        for (int i = 0; i < n && !ok; i++)
            ok = strcmp(key, keys[i]) == 0;
        if (!ok) {
            char f[96];
            snprintf(f, sizeof f, "%s%s%s", where, where[0] ? "." : "", key);
            return fail(c, f, "unknown key");
        }
    }
    return PULSE_OK;
}

static int get_str(const struct pctx *c, const json_t *o, const char *where, const char *key,
                   char *dst, size_t cap)
{
    char f[96];
    snprintf(f, sizeof f, "%s%s%s", where, where[0] ? "." : "", key);
    json_t *v = json_object_get(o, key);
    if (!v) return fail(c, f, "missing (expected a string)");
    if (!json_is_string(v)) return fail(c, f, "expected a string");
    if (strlen(json_string_value(v)) >= cap) return fail(c, f, "string too long");
    copy_str(dst, cap, json_string_value(v));
    return PULSE_OK;
}

static int get_int(const struct pctx *c, const json_t *o, const char *where, const char *key,
                   long long lo, long long hi, long long *out)
{
    char f[96], w[96];
    snprintf(f, sizeof f, "%s%s%s", where, where[0] ? "." : "", key);
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v)) return fail(c, f, "missing or not an integer");
    long long x = json_integer_value(v);
    if (x < lo || x > hi) {
        snprintf(w, sizeof w, "%lld is not in [%lld, %lld]", x, lo, hi);
        return fail(c, f, w);
    }
    *out = x;
    return PULSE_OK;
}

static int parse_point(const struct pctx *c, const json_t *e, const char *where, int n_layers,
                       int prev, struct locality_spec_point *pt)
{
    static const char *const keys[] = {"layer", "exact", "hit", "overlap"};
    if (!json_is_object(e)) return fail(c, where, "expected an object");
    int rc = only_keys(c, e, where, keys, (int)PULSE_ARRAY_LEN(keys));
    long long layer, exact, hit;
    if (rc || (rc = get_int(c, e, where, "layer", 0, n_layers - 1, &layer)) ||
        (rc = get_int(c, e, where, "exact", 1, INT64_MAX, &exact)) ||
        (rc = get_int(c, e, where, "hit", 0, exact, &hit)))
        return rc;
    char f[128];
    snprintf(f, sizeof f, "%s.layer", where);
    if (layer <= prev) return fail(c, f, "not after the previous entry's (layers ascend)");
    snprintf(f, sizeof f, "%s.overlap", where);
    json_t *o = json_object_get(e, "overlap");
    if (!json_is_number(o)) return fail(c, f, "missing or not a number");
    const double want = (double)hit / (double)exact, got = json_number_value(o);
    if (!(fabs(got - want) <= 1e-6)) return fail(c, f, "not hit / exact");
    *pt = (struct locality_spec_point){(int)layer, exact, hit, want};
    return PULSE_OK;
}

static int parse_run(const struct pctx *c, const json_t *e, int r, int n_layers,
                     struct locality_spec_run *u)
{
    static const char *const keys[] = {"budget_tokens", "context_tokens", "samples", "layers"};
    char where[32], f[64];
    snprintf(where, sizeof where, "runs[%d]", r);
    if (!json_is_object(e)) return fail(c, where, "expected an object");
    int rc = only_keys(c, e, where, keys, (int)PULSE_ARRAY_LEN(keys));
    long long b, ctx, s;
    if (rc || (rc = get_int(c, e, where, "budget_tokens", 1, 1 << 30, &b)) ||
        (rc = get_int(c, e, where, "context_tokens", 1, 1 << 30, &ctx)) ||
        (rc = get_int(c, e, where, "samples", 1, 1 << 30, &s)))
        return rc;
    u->budget_tokens = (int)b, u->context_tokens = (int)ctx, u->samples = (int)s;
    json_t *a = json_object_get(e, "layers");
    snprintf(f, sizeof f, "%s.layers", where);
    if (!json_is_array(a) || json_array_size(a) < 1 || json_array_size(a) > LOC_SPEC_MAX_POINTS)
        return fail(c, f, "missing or not an array of 1..64 layer objects");
    u->n_points = (int)json_array_size(a);
    for (int i = 0; i < u->n_points; i++) {
        char w[96];
        snprintf(w, sizeof w, "%s[%d]", f, i);
        if ((rc = parse_point(c, json_array_get(a, (size_t)i), w, n_layers,
                              i ? u->point[i - 1].layer : -1, &u->point[i])))
            return rc;
    }
    return PULSE_OK;
}

int locality_spec_profile_from_json(const json_t *j, const char *name,
                                    struct locality_spec_profile *out, char *err, size_t errlen)
{
    static const char *const keys[] = {"format",   "version",    "source",    "model",
                                       "n_layers", "policy",     "selection", "block_size",
                                       "mapping",  "provenance", "runs"};
    static const char *const pkeys[] = {"machine", "date", "commit", "command", "results"};
    const struct pctx c = {name ? name : "speculation profile", err, errlen};
    memset(out, 0, sizeof *out);
    if (!json_is_object(j)) return fail(&c, "(top level)", "expected a JSON object");
    int rc = only_keys(&c, j, "", keys, (int)PULSE_ARRAY_LEN(keys));
    if (rc) return rc;
    json_t *fmt = json_object_get(j, "format"), *ver = json_object_get(j, "version");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), SPEC_FORMAT) != 0)
        return fail(&c, "format", "missing or not \"" SPEC_FORMAT "\"");
    if (!json_is_integer(ver) || json_integer_value(ver) != SPEC_VERSION)
        return fail(&c, "version", "missing or not 1 (the only version this build reads)");
    long long nl, bs;
    if ((rc = get_str(&c, j, "", "source", out->source, sizeof out->source)) ||
        (rc = get_str(&c, j, "", "model", out->model, sizeof out->model)) ||
        (rc = get_str(&c, j, "", "policy", out->policy, sizeof out->policy)) ||
        (rc = get_str(&c, j, "", "selection", out->selection, sizeof out->selection)) ||
        (rc = get_str(&c, j, "", "mapping", out->mapping, sizeof out->mapping)) ||
        (rc = get_int(&c, j, "", "n_layers", 1, LOC_MAX_LAYERS, &nl)) ||
        (rc = get_int(&c, j, "", "block_size", 1, 1 << 20, &bs)))
        return rc;
    if (strcmp(out->mapping, "depth") != 0)
        return fail(&c, "mapping", "not \"depth\" (the only mapping this build knows)");
    out->n_layers = (int)nl, out->block_size = (int)bs;
    json_t *pv = json_object_get(j, "provenance");
    if (!json_is_object(pv)) return fail(&c, "provenance", "missing or not an object");
    if ((rc = only_keys(&c, pv, "provenance", pkeys, (int)PULSE_ARRAY_LEN(pkeys))) ||
        (rc = get_str(&c, pv, "provenance", "machine", out->machine, sizeof out->machine)) ||
        (rc = get_str(&c, pv, "provenance", "date", out->date, sizeof out->date)) ||
        (rc = get_str(&c, pv, "provenance", "commit", out->commit, sizeof out->commit)) ||
        (rc = get_str(&c, pv, "provenance", "command", out->command, sizeof out->command)) ||
        (rc = get_str(&c, pv, "provenance", "results", out->results, sizeof out->results)))
        return rc;
    json_t *runs = json_object_get(j, "runs");
    if (!json_is_array(runs) || json_array_size(runs) < 1 ||
        json_array_size(runs) > LOC_SPEC_MAX_RUNS)
        return fail(&c, "runs", "missing or not an array of 1..16 run objects");
    out->n_runs = (int)json_array_size(runs);
    for (int r = 0; r < out->n_runs; r++)
        if ((rc = parse_run(&c, json_array_get(runs, (size_t)r), r, out->n_layers, &out->run[r])))
            return rc;
    return PULSE_OK;
}

int locality_spec_profile_read(const char *path, struct locality_spec_profile *out, char *err,
                               size_t errlen)
{
    json_t *j;
    int rc = results_read_json(path, JSON_REJECT_DUPLICATES, &j, err, errlen);
    if (rc != PULSE_OK) {
        memset(out, 0, sizeof *out);
        return rc;
    }
    rc = locality_spec_profile_from_json(j, path, out, err, errlen);
    json_decref(j);
    return rc;
}

/* ------------------------------------------------------------------ targets */

/* |log(a / b)|: how far apart two positive sizes are. */
static double log_ratio(double a, double b)
{
    return fabs(log(a / b));
}

void locality_spec_targets(const struct locality_spec_profile *p, int n_layers,
                           const uint8_t *dense, int budget_tokens, int context_tokens,
                           double *target, int *run)
{
    int best = 0;
    for (int r = 1; r < p->n_runs; r++) {
        const struct locality_spec_run *u = &p->run[r], *b = &p->run[best];
        const double db = log_ratio(u->budget_tokens, budget_tokens),
                     bb = log_ratio(b->budget_tokens, budget_tokens);
        const double dc = log_ratio(u->context_tokens, context_tokens),
                     bc = log_ratio(b->context_tokens, context_tokens);
        if (db < bb - 1e-12 || (fabs(db - bb) <= 1e-12 &&
                                (dc < bc - 1e-12 || (fabs(dc - bc) <= 1e-12 &&
                                                     u->context_tokens > b->context_tokens))))
            best = r;
    }
    *run = best;
    const struct locality_spec_run *u = &p->run[best];
    for (int l = 0; l < n_layers; l++) {
        if (dense && dense[l]) {
            target[l] = -1.0;
            continue;
        }
        const double x = (l + 0.5) / n_layers;
        double t = u->point[u->n_points - 1].overlap;
        for (int i = 0; i < u->n_points; i++) {
            const double xi = (u->point[i].layer + 0.5) / p->n_layers;
            if (x <= xi) {
                if (i == 0) {
                    t = u->point[0].overlap;
                } else {
                    const double x0 = (u->point[i - 1].layer + 0.5) / p->n_layers;
                    const double w = (x - x0) / (xi - x0);
                    t = u->point[i - 1].overlap +
                        w * (u->point[i].overlap - u->point[i - 1].overlap);
                }
                break;
            }
        }
        target[l] = t;
    }
}
