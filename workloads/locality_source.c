/* The locality model as a query source (locality_source.h). */
#include "locality_source.h"

#include <stdio.h>
#include <string.h>

#include "common.h"
#include "mem.h"

#define CALIB_CAP_TOKENS 16384 /* default calibration context at most (its cost grows with it) */

struct locality_source {
    struct query_source qs;
    struct locality *L;
    struct locality_meter *meter;
    struct locality_profile prof;      /* owned copy, laid onto the shape */
    int prof_mapped, prof_from_layers; /* the given profile was mapped by depth, from its layers */
    /* misprediction: the mode asked for, the calibrated model (NULL: spec_q is NULL), the
     * speculation profile and the run of it the targets came from (LOC_SPEC_PROFILE) */
    int spec_mode, spec_from; /* spec_from: the run's prediction point */
    struct locality_spec *spec;
    struct locality_spec_profile spec_prof;
    int spec_run;
    const char *spec_off; /* why spec_q is NULL */
    int spec_fresh;       /* the noise is fresh every step */
    struct locality_spec_persist spec_persist[LOC_MAX_LAYERS]; /* the targets, by depth */
    /* the exact lists' mean churn a sparse layer: the run's profile's, and the one the
     * misprediction's persistence was measured at (0 where it has none) */
    double churn_run, churn_spec;
};

#define BAD(...)                                                                                   \
    do {                                                                                           \
        snprintf(err, errlen, __VA_ARGS__);                                                        \
        return PULSE_ERR_INVALID;                                                                  \
    } while (0)

_Static_assert(LOC_MAX_LAYERS == QUERY_SOURCE_MAX_LAYERS, "a profile's layers are a shape's");

int locality_profile_fits(const struct locality_profile *f, const struct query_source_shape *sh,
                          char *err, size_t errlen)
{
    if (!f) return 1;
    char why[200];
    if (locality_profile_check(f, why, sizeof why)) {
        snprintf(err, errlen, "locality profile: %s", why);
        return -1;
    }
    if (locality_profile_matches(f, sh->n_layers, sh->dense)) return 1;
    int sparse = 0;
    for (int l = 0; l < f->n_layers; l++)
        sparse += !f->dense[l];
    if (!sparse) {
        snprintf(err, errlen, "locality profile: no sparse layer to map from (every layer dense)");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ the table */

static void src_start(void *u, int slot, int64_t req_id)
{
    struct locality_source *s = u;
    locality_start(s->L, slot, req_id);
}

static void src_step_q(void *u, int layer, const int32_t *slots, int batch, uint16_t *q_out)
{
    struct locality_source *s = u;
    locality_step_q(s->L, layer, slots, batch, q_out);
}

static void src_spec_q(void *u, int layer, const int32_t *slots, int batch, const uint16_t *q,
                       uint16_t *q_out)
{
    struct locality_source *s = u;
    const size_t qn = (size_t)s->qs.shape.sel.n_heads * s->qs.shape.sel.head_dim;
    for (int b = 0; b < batch; b++) {
        int64_t req;
        int32_t steps;
        locality_stream_pos(s->L, slots[b], layer, &req, &steps);
        PULSE_CHECK(req >= 0 && steps > 0, "spec_q: the slot has no step of this layer yet");
        locality_spec_q(s->spec, layer, req, steps - 1, q + b * qn, q_out + b * qn);
    }
}

static void src_fill_kv(void *u, const struct kv_view *kv, int n_tokens, int32_t req_id, int layer)
{
    struct locality_source *s = u;
    locality_fill_kv(s->L, kv, NULL, &n_tokens, &req_id, 1, layer);
}

#ifdef PULSE_HAVE_CUDA
static int src_device_init(void *u, char *err, size_t errlen)
{
    struct locality_source *s = u;
    return locality_device_init(s->L, err, errlen);
}

static void src_fill_kv_device(void *u, const struct kctx *c, const struct kv_view *kv,
                               int n_tokens, int32_t req_id, int layer)
{
    struct locality_source *s = u;
    locality_fill_kv_cuda(s->L, c, kv, NULL, &n_tokens, &req_id, 1, layer);
}
#endif

static const char *const spec_mode_names[] = {"profile", "exact", "fixed"};

/* The misprediction's part of the description. */
static json_t *spec_json(const struct locality_source *s)
{
    json_t *j = s->spec ? locality_spec_to_json(s->spec) : json_object();
    json_object_set_new(j, "mode", json_string(spec_mode_names[s->spec_mode]));
    json_object_set_new(j, "spec_q", json_string(s->spec ? "perturbed" : s->spec_off));
    if (!s->spec) return j;
    json_object_set_new(j, "persistence",
                        json_string(s->spec_fresh ? "fresh: new noise every step"
                                                  : "keyframes: the profile run's persistence "
                                                    "of the misses, mapped by depth"));
    const struct locality_spec_profile *f = &s->spec_prof;
    json_object_set_new(j, "mapping",
                        json_string("depth: sparse layer l of n takes the overlap (and the "
                                    "persistence) interpolated at (l + 0.5) / n between the "
                                    "measured layers' depths"));
    json_t *pj = locality_spec_profile_to_json(f), *runs = json_object_get(pj, "runs");
    json_t *rj = json_deep_copy(json_array_get(runs, (size_t)s->spec_run));
    json_object_del(pj, "runs");
    json_object_set_new(pj, "run", rj); /* the measured layers of the run the targets are from */
    json_object_set_new(j, "profile", pj);
    /* the measured step-to-step targets beside what the calibration streams gave */
    json_t *layers = json_object_get(j, "layers");
    for (size_t i = 0; i < json_array_size(layers) && !s->spec_fresh; i++) {
        json_t *e = json_array_get(layers, i);
        const struct locality_spec_persist *t =
            &s->spec_persist[json_integer_value(json_object_get(e, "layer"))];
        json_t *pe = json_object_get(e, "persistence");
        if (!pe || !t->steps) continue;
        json_object_set_new(pe, "target_wrong", json_real(t->wrong_persistence));
        json_object_set_new(pe, "target_churn_exact", json_real(t->churn_exact));
        json_object_set_new(pe, "target_churn_approx", json_real(t->churn_approx));
    }
    if (s->spec_mode == LOC_SPEC_PROFILE) {
        int run, spec;
        const int matched = !locality_source_point_mismatch(&s->qs, &run, &spec);
        json_object_set_new(j, "point_check",
                            json_pack("{s:s,s:s,s:b,s:s}", "run", locality_spec_from_names[run],
                                      "profile", locality_spec_from_names[spec], "matched", matched,
                                      "rule",
                                      "where the run's policy makes its prediction against "
                                      "where the profile's were made: matched when both are "
                                      "the input or both after the attention (mid, hits)"));
    }
    if (s->churn_spec > 0) {
        double run, spec;
        const int matched = !locality_source_churn_mismatch(&s->qs, &run, &spec);
        json_object_set_new(j, "churn_check",
                            json_pack("{s:f,s:f,s:b,s:f,s:s}", "run_exact", run, "profile_exact",
                                      spec, "matched", matched, "factor", LOC_CHURN_MATCH, "rule",
                                      "the exact lists' mean churn a sparse layer, the run's "
                                      "profile's against the one the persistence was measured "
                                      "at: matched within the factor"));
    }
    return j;
}

int locality_source_churn_mismatch(const struct query_source *qs, double *run, double *spec)
{
    const struct locality_source *s = qs->user;
    *run = s->churn_run, *spec = s->churn_spec;
    if (!(s->churn_spec > 0) || !(s->churn_run > 0)) return 0;
    const double r = s->churn_spec / s->churn_run;
    return r > LOC_CHURN_MATCH || r < 1.0 / LOC_CHURN_MATCH;
}

int locality_source_point_mismatch(const struct query_source *qs, int *run, int *spec)
{
    const struct locality_source *s = qs->user;
    *run = s->spec_from, *spec = s->spec_prof.predicted_from;
    if (!s->spec || s->spec_mode != LOC_SPEC_PROFILE) return 0;
    return (*run == LOC_SPEC_FROM_INPUT) != (*spec == LOC_SPEC_FROM_INPUT);
}

static json_t *src_to_json(const void *u)
{
    const struct locality_source *s = u;
    json_t *j = locality_to_json(s->L);
    json_object_set_new(j, "profile_mapping",
                        s->prof_mapped
                            ? json_pack("{s:s,s:i,s:s}", "mode", "depth", "from_layers",
                                        s->prof_from_layers, "rule",
                                        "sparse layer l of n takes, level by level, the "
                                        "quantiles interpolated at (l + 0.5) / n between the "
                                        "profile's sparse layers' depths")
                            : json_pack("{s:s}", "mode", "layer"));
    json_object_set_new(j, "speculation", spec_json(s));
    return j;
}

static void src_meter_reset(void *u, int slot)
{
    struct locality_source *s = u;
    locality_meter_reset(s->meter, slot);
}

static int src_meter_add(void *u, int layer, const int32_t *slots, const int32_t *n_tokens,
                         const int32_t *sel_idx, const int32_t *sel_count, int batch)
{
    struct locality_source *s = u;
    return locality_meter_add(s->meter, layer, slots, n_tokens, sel_idx, sel_count, batch);
}

/* The misprediction model of layer into out's spec_* (-1 without one): its target overlap,
 * and its calibration streams' churn ratio and misses held at the generator's churn. */
static void spec_stats(const struct locality_source *s, int layer, struct query_meter_stats *out)
{
    out->spec_target = out->spec_churn_ratio = out->spec_miss_held = -1;
    if (!s->spec) return;
    struct locality_spec_layer sl;
    locality_spec_get_layer(s->spec, layer, &sl);
    out->spec_target = sl.target;
    const struct select_persist *g = &sl.calib_gen;
    if (g->steps > 0 && g->churn_exact > 0)
        out->spec_churn_ratio = g->churn_approx / g->churn_exact;
    if (g->missed > 0) out->spec_miss_held = (double)g->missed_held / (double)g->missed;
}

static void src_meter_stats(const void *u, int layer, struct query_meter_stats *out)
{
    const struct locality_source *s = u;
    struct locality_layer_stats m;
    locality_meter_layer_stats(s->meter, layer, &m);
    *out = (struct query_meter_stats){
        .churn_samples = m.churn_samples,
        .churn_mean = m.churn_mean,
        .churn_p50 = m.churn_median,
        .churn_p90 = m.churn_p90,
        .churn_p99 = m.churn_p99,
        .churn_max = m.churn_max,
        .target_mean = locality_profile_mean(&s->prof, layer),
        .target_p50 = locality_profile_quantile(&s->prof, layer, 0.5),
        .target_p90 = locality_profile_quantile(&s->prof, layer, 0.9),
        .steps = m.steps,
        .recall_bytes_mean = m.recall_bytes_mean,
        .recall_bytes_p50 = m.recall_bytes_median,
        .recall_bytes_p90 = m.recall_bytes_p90,
        .recall_bytes_p99 = m.recall_bytes_p99,
        .recall_bytes_max = m.recall_bytes_max,
        .recall_bytes_total = m.recall_bytes_total,
        .cold_steps = m.cold_steps,
        .cold_recall_bytes = m.cold_recall_bytes,
    };
    spec_stats(s, layer, out);
}

static void src_free(struct query_source *qs)
{
    struct locality_source *s = qs->user;
    locality_spec_free(s->spec);
    locality_meter_free(s->meter);
    locality_free(s->L);
    mem_free(MEM_HOST, s, sizeof *s);
}

/* ------------------------------------------------------------------ create */

/* The calibration context: the given one, or the run's typical context within
 * [2 x the selected tokens, max(that, CALIB_CAP_TOKENS)], or locality's default. */
static int calib_tokens(const struct locality_source_params *p, const struct select_cfg *gc)
{
    if (p->calib_tokens > 0) return p->calib_tokens;
    const int sel_tokens = (gc->sink + gc->window + 1 + gc->budget) * gc->block_size;
    if (p->typical_tokens <= 0) return PULSE_MAX(2048, 4 * sel_tokens);
    int lo = 2 * sel_tokens, hi = PULSE_MAX(lo, CALIB_CAP_TOKENS);
    return PULSE_MAX(lo, PULSE_MIN(p->typical_tokens, hi));
}

/* The misprediction model of s (spec_q), over the generator's keys at its calibration context
 * calib with its selection gc. */
static int make_spec(struct locality_source *s, const struct query_source_shape *sh,
                     const struct locality_source_params *p, const struct select_cfg *gc,
                     int trivial, int calib, char *err, size_t errlen)
{
    char why[256];
    s->spec_mode = p->spec_mode;
    s->spec_from = p->spec_from;
    if (p->spec_mode < LOC_SPEC_PROFILE || p->spec_mode > LOC_SPEC_FIXED)
        BAD("speculation: unknown mode %d", p->spec_mode);
    if (p->spec_mode == LOC_SPEC_FIXED && !(p->spec_overlap >= 0.0 && p->spec_overlap <= 1.0))
        BAD("speculation: overlap %g is not in [0, 1]", p->spec_overlap);
    if (p->spec_mode != LOC_SPEC_EXACT) {
        if (p->spec_profile)
            s->spec_prof = *p->spec_profile;
        else
            locality_spec_profile_builtin(p->spec_from, &s->spec_prof);
    }
    if (p->spec_mode == LOC_SPEC_EXACT) {
        s->spec_off = "none: exact (a perfect predictor)";
        return PULSE_OK;
    }
    if (!sh->speculates) { /* (no calibration for a policy that never asks) */
        s->spec_off = "none: the policy selects no layer ahead";
        return PULSE_OK;
    }
    if (trivial) {
        s->spec_off = "none: the selection does not depend on the query (every block or none)";
        return PULSE_OK;
    }
    const int sel_head =
        sh->selection && !strcmp(sh->selection, "mean") ? SELECT_MEAN : SELECT_HEADWISE;
    struct locality_spec_params sp;
    locality_spec_params_init(&sp, gc, sel_head, sh->n_layers);
    sp.calib_tokens = calib;
    const int ctx = p->typical_tokens > 0 ? p->typical_tokens : calib;
    locality_spec_targets(&s->spec_prof, sh->n_layers, sh->dense,
                          sh->sel.budget * sh->sel.block_size, ctx, sp.target, &s->spec_run);
    if (p->spec_mode == LOC_SPEC_FIXED)
        for (int l = 0; l < sh->n_layers; l++)
            sp.target[l] = sh->dense[l] ? -1.0 : p->spec_overlap;
    s->spec_fresh = p->spec_fresh || !s->spec_prof.run[s->spec_run].persist_samples;
    if (!s->spec_fresh) {
        locality_spec_persist_targets(&s->spec_prof, s->spec_run, sh->n_layers, sh->dense,
                                      s->spec_persist);
        int n = 0;
        for (int l = 0; l < sh->n_layers; l++)
            if (s->spec_persist[l].steps) {
                sp.persist_target[l] = s->spec_persist[l].miss_persistence;
                sp.persist_churn[l] = s->spec_persist[l].churn_exact;
                s->churn_spec += s->spec_persist[l].churn_exact;
                s->churn_run += locality_profile_mean(&s->prof, l);
                n++;
            }
        if (n) s->churn_spec /= n, s->churn_run /= n;
    }
    if (!(s->spec = locality_spec_create(s->L, &sp, why, sizeof why))) BAD("%s", why);
    s->qs.spec_q = src_spec_q;
    return PULSE_OK;
}

/* The profile, the calibrated generator, the misprediction model and the meter of s. */
static int make(struct locality_source *s, const struct query_source_shape *sh,
                const struct locality_source_params *p, char *err, size_t errlen)
{
    char why[256];
    const int fit = locality_profile_fits(p->profile, sh, err, errlen);
    if (fit < 0) return PULSE_ERR_INVALID;
    s->prof_mapped = !fit;
    if (s->prof_mapped) { /* another model's, or other dense layers: by depth */
        s->prof_from_layers = p->profile->n_layers;
        if (locality_profile_map_depth(p->profile, sh->n_layers, sh->dense, &s->prof, err,
                                       errlen) != PULSE_OK)
            return PULSE_ERR_INVALID;
    } else if (p->profile) {
        s->prof = *p->profile;
    } else {
        struct locality_default_params dp;
        locality_default_params_init(&dp, sh->n_layers, sh->seed);
        memcpy(dp.dense, sh->dense, sizeof dp.dense);
        if (locality_profile_default(&s->prof, &dp, why, sizeof why) != PULSE_OK) BAD("%s", why);
    }
    /* when the budget covers every block (or is 0), the selection does not depend on the
     * queries: calibrate the generator (used for its keys and query streams only) minimally at a
     * nominal budget */
    struct select_cfg gc = sh->sel;
    const int all_selected = gc.sink + gc.window + 1 + gc.budget >= gc.max_blocks;
    const int trivial = all_selected || gc.budget == 0; /* no choice: no churn to calibrate */
    if (trivial) gc.budget = 8;
    const int calib = trivial ? 64 * gc.block_size : calib_tokens(p, &gc);
    gc.max_blocks = PULSE_MAX(gc.max_blocks, (int)PULSE_CEIL_DIV(calib, gc.block_size));
    if (gc.max_blocks > SELECT_MAX_BLOCKS) BAD("calibration tokens: %d are too many", calib);
    struct locality_params lp;
    locality_params_init(&lp, &gc, sh->n_layers, sh->n_slots, sh->seed);
    lp.calib_tokens = calib;
    lp.anchor = (float)p->anchor;
    if (trivial) /* the table is never used: the smallest calibration */
        lp.calib_points = 3, lp.calib_steps = 1, lp.calib_streams = 1;
    if (!(s->L = locality_create(&lp, &s->prof, why, sizeof why))) BAD("%s", why);
    if (make_spec(s, sh, p, &gc, trivial, calib, err, errlen)) return PULSE_ERR_INVALID;
    struct locality_meter_params mp = {sh->sel,      sh->n_layers,  sh->n_slots,
                                       sh->one_list, sh->selection, sh->hot_slots};
    if (!(s->meter = locality_meter_create(&mp, why, sizeof why))) BAD("%s", why);
    return PULSE_OK;
}

struct query_source *locality_source_create(const struct query_source_shape *sh,
                                            const struct locality_source_params *p, char *err,
                                            size_t errlen)
{
    const struct locality_source_params defaults = {0};
    const double t0 = pulse_now();
    struct locality_source *s = mem_alloc(MEM_HOST, sizeof *s, "locality source");
    if (!s) {
        snprintf(err, errlen, "locality source: out of host memory");
        return NULL;
    }
    memset(s, 0, sizeof *s);
    s->qs = (struct query_source){
        .shape = *sh,
        .user = s,
        .start = src_start,
        .step_q = src_step_q,
        .fill_kv = src_fill_kv,
#ifdef PULSE_HAVE_CUDA
        .device_init = src_device_init,
        .fill_kv_device = src_fill_kv_device,
#endif
        .to_json = src_to_json,
        .meter_reset = src_meter_reset,
        .meter_add = src_meter_add,
        .meter_stats = src_meter_stats,
        .free = src_free,
    };
    if (make(s, sh, p ? p : &defaults, err, errlen) != PULSE_OK) {
        src_free(&s->qs);
        return NULL;
    }
    s->qs.setup_s = pulse_now() - t0;
    return &s->qs;
}
