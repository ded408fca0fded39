/* The speculation profile (locality_spec.h, part 1): the built-in measurement, JSON read and
 * write, and the per-layer targets of a model. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "json_in.h"
#include "locality_spec.h"
#include "results.h"

#define SPEC_FORMAT "pulse-speculation-profile"
#define SPEC_VERSION 2 /* written; 1 and 2 read */

/* ------------------------------------------------------------------ built-in */

/* Gemma 3 270M Q4_K_M's global layers (5, 11 and 17 of 18), where every built-in run was measured
 * by pulse accuracy's infinigen runs. */
static const int k_layers[] = {5, 11, 17};

struct k_run {
    int budget, context, samples;
    int64_t exact[3], hit[3];
};
/* a run's step-to-step behaviour of the lists: per layer list-steps, mean churn of the exact and
 * the approximate lists, missed, missed again, wrong, wrong again */
struct k_layer_persist {
    int64_t steps;
    double churn_exact, churn_approx;
    int64_t missed, missed_again, wrong, wrong_again;
};
struct k_run_persist {
    int samples;
    struct k_layer_persist l[3];
};
struct k_profile {
    int predicted_from; /* enum locality_spec_from */
    const char *date, *commit, *command, *results;
    int n_runs;
    const struct k_run *runs;
    const struct k_run_persist *persist; /* a row per run */
};

#define K_MACHINE                                                                                  \
    "Intel(R) Xeon(R) Processor (2 shared cores, no GPU), Linux 6.18.44, pulse accuracy "          \
    "--backend cpu"

/* workloads/profiles/speculation_gemma3-270m.json (tests/test_locality_spec.c compares them): the
 * approximate query from the layer's input (InfiniGen's). Persistence measured later (the
 * persistence columns of experiments/results/cpu-2026-12-04-s19/README.md). */
static const struct k_run k_input_runs[] = {
    {1024, 4096, 8, {15872, 15872, 15872}, {13273, 13712, 14734}},
    {2048, 4096, 8, {31744, 31744, 31744}, {27993, 28680, 30314}},
    {1024, 8192, 6, {11904, 11904, 11904}, {9677, 10295, 10759}},
    {2048, 8192, 6, {23808, 23808, 23808}, {20236, 20789, 22327}},
};
static const struct k_run_persist k_input_persist[] = {
    {7,
     {{210, 0.176190476, 0.183184524, 2260, 822, 2260, 753},
      {210, 0.110639881, 0.13266369, 1804, 727, 1804, 723},
      {210, 0.1328125, 0.1171875, 937, 225, 937, 191}}},
    {7,
     {{210, 0.128571429, 0.145386905, 3260, 1123, 3260, 1087},
      {210, 0.0819196429, 0.101488095, 2523, 918, 2523, 917},
      {210, 0.08046875, 0.076078869, 1208, 281, 1208, 293}}},
    {4,
     {{120, 0.1859375, 0.192057292, 1487, 597, 1487, 622},
      {120, 0.109895833, 0.127994792, 1054, 473, 1054, 430},
      {120, 0.124739583, 0.1046875, 705, 261, 705, 274}}},
    {4,
     {{120, 0.162109375, 0.169856771, 2468, 976, 2468, 986},
      {120, 0.105013021, 0.122395833, 2019, 847, 2019, 904},
      {120, 0.0904296875, 0.0814453125, 916, 329, 916, 316}}},
};
static const struct k_profile k_input = {
    LOC_SPEC_FROM_INPUT,
    "2026-12-04",
    "4d1c1737fd4184cb466a6ff754034eb693a41194",
    "pulse synth --length 4096 --length 8192 --task passkey --task niah_multikey "
    "--samples 8 --seed 1 --tokenizer MODEL --out-dir DATA; then for L in 4096 "
    "(--samples 4) and 8192 (--samples 3): pulse accuracy --backend cpu --model "
    "MODEL --data DATA --lengths L --tasks passkey,niah_multikey --policies "
    "full,infinigen --budgets 1024,2048 --samples S --calib-samples 0 --max-gen 32 "
    "--time-limit 780 --out accuracy_L.json (MODEL: gemma3-270m-q4_k_m.gguf, sha256 "
    "a5fd3b62...6818, scripts/setup-model.sh); overlap = "
    "speculation[].per_layer[].hit / exact; persistence (runs[].persistence_samples, "
    "layers[].persistence): the same commands at 72f18321 (2026-12-04/05, same "
    "machine) with --samples 4 (4096) and 2 (8192) --time-limit 690; select_persist = "
    "speculation[].per_layer[]",
    "experiments/results/cpu-2026-12-04-s19/accuracy_4096.json, accuracy_8192.json; "
    "persistence: persist_4096.json, persist_8192.json",
    (int)PULSE_ARRAY_LEN(k_input_runs),
    k_input_runs,
    k_input_persist,
};

/* workloads/profiles/speculation_gemma3-270m-hits.json (tests/test_locality_spec.c compares
 * them): the same sets and runs with PulseInfer's prediction from the predicted lists (pulse
 * accuracy --spec-from hits: an attention over a predicted layer's predicted lists added to its
 * input gives the next layer's approximate query), list persistence from the same runs. */
static const struct k_run k_hits_runs[] = {
    {1024, 4096, 8, {15872, 15872, 15872}, {14616, 14459, 14950}},
    {2048, 4096, 8, {31744, 31744, 31744}, {29978, 29617, 30636}},
    {1024, 8192, 6, {11904, 11904, 11904}, {10783, 10770, 10998}},
    {2048, 8192, 6, {23808, 23808, 23808}, {22049, 21075, 22602}},
};
static const struct k_run_persist k_hits_persist[] = {
    {8,
     {{240, 0.176497396, 0.159375, 1211, 218, 1211, 218},
      {240, 0.111197917, 0.109570313, 1326, 423, 1326, 353},
      {240, 0.136002604, 0.117057292, 887, 154, 887, 150}}},
    {8,
     {{240, 0.12906901, 0.1171875, 1712, 294, 1712, 306},
      {240, 0.0788411458, 0.079296875, 1999, 688, 1999, 601},
      {240, 0.0779296875, 0.0707682292, 1078, 199, 1078, 212}}},
    {6,
     {{180, 0.193489583, 0.177256944, 1076, 210, 1076, 261},
      {180, 0.106163194, 0.105989583, 1061, 371, 1061, 341},
      {180, 0.1265625, 0.10546875, 866, 298, 866, 283}}},
    {6,
     {{180, 0.1640625, 0.148611111, 1690, 355, 1690, 392},
      {180, 0.106944444, 0.111024306, 2585, 1122, 2585, 965},
      {180, 0.0979166667, 0.08671875, 1149, 346, 1149, 327}}},
};
static const struct k_profile k_hits = {
    LOC_SPEC_FROM_HITS,
    "2026-12-06",
    "69b2c3ceb10febaa2aba9f7d847f22b2f8399d6c",
    "pulse synth --length 4096 --length 8192 --task passkey --task niah_multikey "
    "--samples 8 --seed 1 --tokenizer MODEL --out-dir DATA; then for L in 4096 "
    "(--samples 4) and 8192 (--samples 3): pulse accuracy --backend cpu --model "
    "MODEL --data DATA --lengths L --tasks passkey,niah_multikey --policies "
    "full,infinigen --budgets 1024,2048 --samples S --calib-samples 0 --max-gen 32 "
    "--time-limit 1500 --spec-from hits --out accuracy_hits_L.json (MODEL: "
    "gemma3-270m-q4_k_m.gguf, sha256 a5fd3b62...6818, scripts/setup-model.sh); overlap = "
    "speculation[].per_layer[].hit / exact; persistence = speculation[].per_layer[]",
    "experiments/results/cpu-2026-12-06-s28/accuracy_hits_4096.json, accuracy_hits_8192.json",
    (int)PULSE_ARRAY_LEN(k_hits_runs),
    k_hits_runs,
    k_hits_persist,
};

static void builtin(const struct k_profile *k, struct locality_spec_profile *out)
{
    memset(out, 0, sizeof *out);
    out->version = SPEC_VERSION;
    out->predicted_from = k->predicted_from;
    copy_str(out->source, sizeof out->source, "measured");
    copy_str(out->model, sizeof out->model, "gemma3-270m-q4_k_m");
    copy_str(out->policy, sizeof out->policy, "infinigen");
    copy_str(out->selection, sizeof out->selection, "headwise");
    copy_str(out->mapping, sizeof out->mapping, "depth");
    out->n_layers = 18;
    out->block_size = 16;
    copy_str(out->machine, sizeof out->machine, K_MACHINE);
    copy_str(out->date, sizeof out->date, k->date);
    copy_str(out->commit, sizeof out->commit, k->commit);
    copy_str(out->command, sizeof out->command, k->command);
    copy_str(out->results, sizeof out->results, k->results);
    out->n_runs = k->n_runs;
    for (int r = 0; r < out->n_runs; r++) {
        const struct k_run *kr = &k->runs[r];
        struct locality_spec_run *u = &out->run[r];
        u->budget_tokens = kr->budget;
        u->context_tokens = kr->context;
        u->samples = kr->samples;
        u->n_points = (int)PULSE_ARRAY_LEN(k_layers);
        for (int i = 0; i < u->n_points; i++)
            u->point[i] = (struct locality_spec_point){k_layers[i],
                                                       kr->exact[i],
                                                       kr->hit[i],
                                                       (double)kr->hit[i] / (double)kr->exact[i],
                                                       {0}};
        u->persist_samples = k->persist[r].samples;
        for (int i = 0; i < u->n_points && u->persist_samples; i++) {
            const struct k_layer_persist *m = &k->persist[r].l[i];
            u->point[i].persist =
                (struct locality_spec_persist){m->steps,
                                               m->churn_exact,
                                               m->churn_approx,
                                               m->missed,
                                               m->missed_again,
                                               m->wrong,
                                               m->wrong_again,
                                               (double)m->missed_again / (double)m->missed,
                                               (double)m->wrong_again / (double)m->wrong};
        }
    }
}

const char *const locality_spec_from_names[3] = {"input", "mid", "hits"};

void locality_spec_profile_builtin(int from, struct locality_spec_profile *out)
{
    if (from == LOC_SPEC_FROM_INPUT)
        builtin(&k_input, out);
    else
        builtin(&k_hits, out);
}

/* ------------------------------------------------------------------ JSON */

static json_t *persist_to_json(const struct locality_spec_persist *q)
{
    return json_pack("{s:I, s:f, s:f, s:I, s:I, s:f, s:I, s:I, s:f}", "steps", (json_int_t)q->steps,
                     "churn_exact", q->churn_exact, "churn_approx", q->churn_approx, "missed",
                     (json_int_t)q->missed, "missed_again", (json_int_t)q->missed_again,
                     "miss_persistence", q->miss_persistence, "wrong", (json_int_t)q->wrong,
                     "wrong_again", (json_int_t)q->wrong_again, "wrong_persistence",
                     q->wrong_persistence);
}

json_t *locality_spec_profile_to_json(const struct locality_spec_profile *p)
{
    json_t *runs = json_array();
    for (int r = 0; r < p->n_runs; r++) {
        const struct locality_spec_run *u = &p->run[r];
        json_t *layers = json_array();
        for (int i = 0; i < u->n_points; i++) {
            json_t *e = json_pack("{s:i, s:I, s:I, s:f}", "layer", u->point[i].layer, "exact",
                                  (json_int_t)u->point[i].exact, "hit", (json_int_t)u->point[i].hit,
                                  "overlap", u->point[i].overlap);
            if (u->persist_samples)
                json_object_set_new(e, "persistence", persist_to_json(&u->point[i].persist));
            json_array_append_new(layers, e);
        }
        json_t *e = json_pack("{s:i, s:i, s:i}", "budget_tokens", u->budget_tokens,
                              "context_tokens", u->context_tokens, "samples", u->samples);
        if (u->persist_samples)
            json_object_set_new(e, "persistence_samples", json_integer(u->persist_samples));
        json_object_set_new(e, "layers", layers);
        json_array_append_new(runs, e);
    }
    json_t *prov = json_pack("{s:s, s:s, s:s, s:s, s:s}", "machine", p->machine, "date", p->date,
                             "commit", p->commit, "command", p->command, "results", p->results);
    return json_pack("{s:s, s:i, s:s, s:s, s:i, s:s, s:s, s:s, s:i, s:s, s:o, s:o}", "format",
                     SPEC_FORMAT, "version", SPEC_VERSION, "source", p->source, "model", p->model,
                     "n_layers", p->n_layers, "policy", p->policy, "selection", p->selection,
                     "predicted_from", locality_spec_from_names[p->predicted_from], "block_size",
                     p->block_size, "mapping", p->mapping, "provenance", prov, "runs", runs);
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

static int get_ratio(const struct pctx *c, const json_t *o, const char *where, const char *key,
                     double *out)
{
    char f[160];
    snprintf(f, sizeof f, "%s.%s", where, key);
    json_t *v = json_object_get(o, key);
    if (!json_is_number(v)) return fail(c, f, "missing or not a number");
    *out = json_number_value(v);
    if (!(*out >= 0.0 && *out <= 1.0)) return fail(c, f, "not in [0, 1]");
    return PULSE_OK;
}

/* A point's "persistence" (version 2). */
static int parse_persist(const struct pctx *c, const json_t *e, const char *where,
                         struct locality_spec_persist *q)
{
    static const char *const keys[] = {"steps",  "churn_exact",  "churn_approx",
                                       "missed", "missed_again", "miss_persistence",
                                       "wrong",  "wrong_again",  "wrong_persistence"};
    if (!json_is_object(e)) return fail(c, where, "missing or not an object");
    int rc = only_keys(c, e, where, keys, (int)PULSE_ARRAY_LEN(keys));
    long long st, m, ma, w, wa;
    if (rc || (rc = get_int(c, e, where, "steps", 1, INT64_MAX, &st)) ||
        (rc = get_int(c, e, where, "missed", 0, INT64_MAX, &m)) ||
        (rc = get_int(c, e, where, "missed_again", 0, m, &ma)) ||
        (rc = get_int(c, e, where, "wrong", 0, INT64_MAX, &w)) ||
        (rc = get_int(c, e, where, "wrong_again", 0, w, &wa)) ||
        (rc = get_ratio(c, e, where, "churn_exact", &q->churn_exact)) ||
        (rc = get_ratio(c, e, where, "churn_approx", &q->churn_approx)) ||
        (rc = get_ratio(c, e, where, "miss_persistence", &q->miss_persistence)) ||
        (rc = get_ratio(c, e, where, "wrong_persistence", &q->wrong_persistence)))
        return rc;
    q->steps = st, q->missed = m, q->missed_again = ma, q->wrong = w, q->wrong_again = wa;
    char f[160];
    snprintf(f, sizeof f, "%s.miss_persistence", where);
    if (!(fabs(q->miss_persistence - (m ? (double)ma / (double)m : 0.0)) <= 1e-6))
        return fail(c, f, "not missed_again / missed");
    snprintf(f, sizeof f, "%s.wrong_persistence", where);
    if (!(fabs(q->wrong_persistence - (w ? (double)wa / (double)w : 0.0)) <= 1e-6))
        return fail(c, f, "not wrong_again / wrong");
    q->miss_persistence = m ? (double)ma / (double)m : 0.0;
    q->wrong_persistence = w ? (double)wa / (double)w : 0.0;
    return PULSE_OK;
}

static int parse_point(const struct pctx *c, const json_t *e, const char *where, int n_layers,
                       int prev, int version, int persist, struct locality_spec_point *pt)
{
    static const char *const keys[] = {"layer", "exact", "hit", "overlap", "persistence"};
    if (!json_is_object(e)) return fail(c, where, "expected an object");
    /* version 1 knows no persistence; version 2 has it in a run with persistence_samples */
    int rc = only_keys(c, e, where, keys, (int)PULSE_ARRAY_LEN(keys) - (version < 2 || !persist));
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
    *pt = (struct locality_spec_point){(int)layer, exact, hit, want, {0}};
    if (!persist) return PULSE_OK;
    snprintf(f, sizeof f, "%s.persistence", where);
    return parse_persist(c, json_object_get(e, "persistence"), f, &pt->persist);
}

static int parse_run(const struct pctx *c, const json_t *e, int r, int n_layers, int version,
                     struct locality_spec_run *u)
{
    static const char *const keys[] = {"budget_tokens", "context_tokens", "samples", "layers",
                                       "persistence_samples"};
    char where[32], f[64];
    snprintf(where, sizeof where, "runs[%d]", r);
    if (!json_is_object(e)) return fail(c, where, "expected an object");
    int rc = only_keys(c, e, where, keys, (int)PULSE_ARRAY_LEN(keys) - (version < 2));
    long long b, ctx, s, ps = 0;
    if (rc || (rc = get_int(c, e, where, "budget_tokens", 1, 1 << 30, &b)) ||
        (rc = get_int(c, e, where, "context_tokens", 1, 1 << 30, &ctx)) ||
        (rc = get_int(c, e, where, "samples", 1, 1 << 30, &s)))
        return rc;
    if (json_object_get(e, "persistence_samples") &&
        (rc = get_int(c, e, where, "persistence_samples", 1, 1 << 30, &ps)))
        return rc;
    u->budget_tokens = (int)b, u->context_tokens = (int)ctx, u->samples = (int)s;
    u->persist_samples = (int)ps;
    json_t *a = json_object_get(e, "layers");
    snprintf(f, sizeof f, "%s.layers", where);
    if (!json_is_array(a) || json_array_size(a) < 1 || json_array_size(a) > LOC_SPEC_MAX_POINTS)
        return fail(c, f, "missing or not an array of 1..64 layer objects");
    u->n_points = (int)json_array_size(a);
    for (int i = 0; i < u->n_points; i++) {
        char w[96];
        snprintf(w, sizeof w, "%s[%d]", f, i);
        if ((rc = parse_point(c, json_array_get(a, (size_t)i), w, n_layers,
                              i ? u->point[i - 1].layer : -1, version, ps > 0, &u->point[i])))
            return rc;
    }
    return PULSE_OK;
}

int locality_spec_profile_from_json(const json_t *j, const char *name,
                                    struct locality_spec_profile *out, char *err, size_t errlen)
{
    static const char *const keys[] = {"format",   "version",    "source",    "model",
                                       "n_layers", "policy",     "selection", "block_size",
                                       "mapping",  "provenance", "runs",      "predicted_from"};
    static const char *const pkeys[] = {"machine", "date", "commit", "command", "results"};
    const struct pctx c = {name ? name : "speculation profile", err, errlen};
    memset(out, 0, sizeof *out);
    if (!json_is_object(j)) return fail(&c, "(top level)", "expected a JSON object");
    int rc = only_keys(&c, j, "", keys, (int)PULSE_ARRAY_LEN(keys));
    if (rc) return rc;
    json_t *fmt = json_object_get(j, "format"), *ver = json_object_get(j, "version");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), SPEC_FORMAT) != 0)
        return fail(&c, "format", "missing or not \"" SPEC_FORMAT "\"");
    if (!json_is_integer(ver) || json_integer_value(ver) < 1 ||
        json_integer_value(ver) > SPEC_VERSION)
        return fail(&c, "version", "missing or not 1 or 2 (the versions this build reads)");
    out->version = (int)json_integer_value(ver);
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
    /* absent: the input; otherwise one of the names */
    const json_t *pf = json_object_get(j, "predicted_from");
    out->predicted_from = pf ? -1 : LOC_SPEC_FROM_INPUT;
    for (int i = 0; json_is_string(pf) && i < 3; i++)
        if (!strcmp(json_string_value(pf), locality_spec_from_names[i])) out->predicted_from = i;
    if (out->predicted_from < 0)
        return fail(&c, "predicted_from", "not \"input\", \"mid\" or \"hits\"");
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
        if ((rc = parse_run(&c, json_array_get(runs, (size_t)r), r, out->n_layers, out->version,
                            &out->run[r])))
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

/* The measured points of run u bracketing relative depth x of a layer: i0, i1 and the weight
 * of i1 (i0 == i1 past the ends). */
static void bracket(const struct locality_spec_profile *p, const struct locality_spec_run *u,
                    double x, int *i0, int *i1, double *w)
{
    double xs[LOC_SPEC_MAX_POINTS];
    for (int i = 0; i < u->n_points; i++)
        xs[i] = locality_depth(u->point[i].layer, p->n_layers);
    locality_depth_bracket(xs, u->n_points, x, i0, i1, w);
}

static double lerp(double a, double b, double w)
{
    return a + w * (b - a);
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
        int i0, i1;
        double w;
        bracket(p, u, locality_depth(l, n_layers), &i0, &i1, &w);
        target[l] = lerp(u->point[i0].overlap, u->point[i1].overlap, w);
    }
}

void locality_spec_persist_targets(const struct locality_spec_profile *p, int run, int n_layers,
                                   const uint8_t *dense, struct locality_spec_persist *out)
{
    const struct locality_spec_run *u = &p->run[run];
    for (int l = 0; l < n_layers; l++) {
        memset(&out[l], 0, sizeof out[l]);
        if ((dense && dense[l]) || !u->persist_samples) continue;
        int i0, i1;
        double w;
        bracket(p, u, locality_depth(l, n_layers), &i0, &i1, &w);
        const struct locality_spec_persist *a = &u->point[i0].persist, *b = &u->point[i1].persist;
        out[l] = w < 0.5 ? *a : *b;
        out[l].churn_exact = lerp(a->churn_exact, b->churn_exact, w);
        out[l].churn_approx = lerp(a->churn_approx, b->churn_approx, w);
        out[l].miss_persistence = lerp(a->miss_persistence, b->miss_persistence, w);
        out[l].wrong_persistence = lerp(a->wrong_persistence, b->wrong_persistence, w);
    }
}
