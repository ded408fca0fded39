/* pulseinfer: the two-level scheduler of DESIGN.md section 7 on the shared runtime.
 *
 * Two running batches of the serving loop: the normal batch (run[0]) keeps its KV whole on the
 * GPU and runs the engine's layers (vanilla's computation); the offload batch (run[1]) keeps its
 * prompt KV in the host pool and runs the offload runtime's layers (SoloHead selection and
 * gather-scatter recall by default).
 *
 * IRQ, interruptible layer-wise scheduling: a step issues the offload batch's layer (its
 * pre-attention piece, selection and recall), then at every layer boundary asks, without
 * blocking, whether that layer's recall is in place (offload_layer_ready); while it is not, the
 * normal batch's next layer runs; once it is, the offload layer finishes and the next one is
 * issued at once. Each batch's own layers keep their order, so every request decodes the tokens
 * it would alone. When the normal batch has no layer left the offload batch waits for its
 * recall (an exposed round). --no-irq: the offload batch's step runs whole, then the normal
 * batch's (the batches one after the other).
 *
 * Admission at each admission point (a request arrived or finished, or memory was freed while
 * requests wait): IOAA (runtime/sched/ioaa.h) chooses normal, offload or wait for up to max_waiting
 * waiting requests by the model's expected throughput, with the running batches; or
 * --admission fixed:LEN offloads every request longer than LEN tokens (prompt + output) and
 * runs the others normally, in arrival order. The IOAA profile is `pulse profile`'s JSON
 * (--profile) or, without one, the analytic profile from the bandwidths measured in this
 * process (ioaa_profile.h). */
#include <jansson.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "ioaa.h"
#include "ioaa_profile.h"
#include "ioaa_refit.h"
#include "mem.h"
#include "offload.h"
#include "offload_policy.h"
#include "results.h"
#include "serve.h"
#include "timeline.h"
#include "trace.h"

enum { NORMAL = 0, OFFLOAD = 1 };
/* --self-interleave: off, on (every step of an offload batch of two or more requests with no
 * normal batch runs as two halves), auto (IOAA's step model chooses per step) */
enum self_mode { SELF_OFF = 0, SELF_ON = 1, SELF_AUTO = 2 };

/* Self-interleaving's counters (pi_json's "self_interleave"): steps run as two halves (and the
 * halves: two a step), switches between the halves (a piece of one half after one of the
 * other), sparse recall rounds issued with the other half's pieces run beside them before
 * their attention, of those the ones already in when their attention was queued, rounds the
 * host waited for (cpu, host_wait) and its time; the halves' layer pieces replayed as graphs
 * (the device path: offload_lane_graph_launches); auto: the steps it chose either way and the
 * model's step times (summed) of both schedules over the steps it chose between. */
struct self_counters {
    int64_t steps, halves, switches, rounds_beside, rounds_ready, rounds_waited, graph_pieces;
    double wait_s;
    int64_t auto_self, auto_plain;
    double pred_self_s, pred_plain_s;
};
#define DEFAULT_MAX_WAITING 32

/* The first admission decisions kept for the JSON */
#define MAX_DECISIONS_KEPT 256
struct decision_rec {
    double t_s, predicted_step_s;
    int waiting, n_normal, n_offload;
    int64_t nodes;
    /* a decision that admitted some normal: the model's step with the same requests all
     * offloaded, and whether they would have fit the free budgets so (else alt_step_s < 0) */
    double alt_step_s;
    int alt_fits;
    double bytes_ctx, bytes; /* by context: the mean context its bytes were taken at, and the
                                bytes per request and layer (-1: not by context) */
};

struct pulseinfer {
    struct offload *o;
    int irq;       /* interruptible layer-wise scheduling, as asked (--no-irq: 0) */
    int irq_on;    /* and in effect (with zero-copy, its gather on a stream of its own:
                      offload_params.device_overlap) */
    int fixed_len; /* >= 0: --admission fixed:LEN; -1: IOAA */
    int self_mode; /* enum self_mode: --self-interleave */
    struct batch *half[2]; /* with it: views of the offload batch's two halves */
    struct self_counters si;
    int max_waiting;
    struct ioaa *ioaa;
    struct ioaa_profile_data prof;
    int have_prof;
    int prof_device_match; /* the profile's device is this run's: 1, 0, or -1 (it does not say) */
    /* the recall per request and layer (r) the profile carries, and where IOAA's came from:
     * "source" (the run's query source's, the default with a measured profile), "profile"
     * (--ioaa-bytes profile) or "analytic" */
    double r_profile;
    const char *r_from;
    /* the profile's recall.by_context in use (IOAA's bytes at each decision's mean context),
     * or why not (NULL: in use, or the profile has none); the last bytes taken and their
     * context, and how many decisions moved them */
    int by_ctx;
    const char *by_ctx_skip;
    double ctx_at, ctx_bytes[3];
    int64_t ctx_updates;
    double prof_scale[2]; /* another device's profile carried to this one: compute, recall (0:
                             not scaled; ioaa_profile_data_scale) */
    int cap_raised; /* t_R values the recall cap raised (make_ioaa) */
    /* the recall terms refitted from the measured steps (ioaa_refit.h; --ioaa-refit) */
    struct ioaa_refit *refit;
    int refit_on;
    int64_t refit_errors;
    /* --speculate: what IOAA's recall table was folded with (ioaa_profile_data_speculate) */
    struct ioaa_spec_fold {
        double hit, churn_ratio, miss_held;      /* the prediction's, averaged over the layers */
        double prefetch_bytes, correction_bytes; /* per request and layer */
        double window; /* the share of the layer before that the prefetch runs beside: 1 from
                          the layer's input, its MLP's weight share from mid-layer */
        const char *from;                        /* "source" or "assumed"; NULL: none */
    } spec;
    /* the last admission point's view: decide again only when it changed */
    int last_arrived, last_entries, decided_once;
    int64_t last_free_pages;
    size_t last_free_host;
    /* scratch of one decision */
    struct ioaa_request *w;
    enum ioaa_assign *assign;
    int *order, *cls; /* the chosen requests' ids and batches */
    /* the model's step time of the batches of the last two steps (by step parity; 0: none),
     * and their sums over the steps read back, with the loop's time of those steps */
    double predicted_s[2], pred_sum, meas_sum;
    int64_t pred_steps;
    /* the same steps' prediction by the profile alone (no refit), and the steps' batches */
    double unrefit_s[2], unrefit_sum, unrefit_steady_sum;
    int comp_n[2], comp_o[2];
    int64_t comp_ctx[2];
    /* the same over the steady steps: those with no request admitted since the step before
     * (a newly offloaded request's first step recalls its whole selection, 3-4x a steady
     * step at the quick scale, which the model's steady-state step does not hold) */
    int admitted_since_step, cold[2];
    int self_step[2]; /* by step parity: the step ran self-interleaved */
    double pred_steady_sum, meas_steady_sum;
    int64_t steady_steps;
    /* the normal batch's last two layers' completion (layer l records ev_layer[l & 1]): past
     * its share of normal layers, while a recall is in flight, the scheduler queues another
     * normal layer only once the one before has finished, so that it sees the recall land
     * within about a layer's time instead of queueing every normal layer ahead of it */
    const struct backend *be;
    struct engine *eng;
    void *ev_layer[2];
    /* --trace: the schedule's timeline, written after the run (pi_json) */
    struct timeline *tl;
    const char *trace_path;
    int64_t steps;
    struct decision_rec decisions[MAX_DECISIONS_KEPT];
    int n_decisions;
};

/* Trace spans: at most this many (later ones are dropped, counted); a step of qwen3-14b's
 * 40 layers takes about 120 */
#define TRACE_MAX_SPANS 40000

/* The offload batch's layer schedules (below): exact selection at each layer, and with
 * --speculate the next layer predicted and corrected. */
static const struct offload_schedule pulseinfer_schedule, pulseinfer_spec_schedule;

static struct offload *pi_offload_of(void *ctx)
{
    return ctx ? ((struct pulseinfer *)ctx)->o : NULL;
}

static void pi_free(void *ctx)
{
    struct pulseinfer *pi = ctx;
    if (!pi) return;
    offload_free(pi->o);
    timeline_free(pi->tl);
    for (int h = 0; h < 2; h++)
        batch_free(pi->eng, pi->half[h]);
    for (int i = 0; i < 2; i++)
        if (pi->ev_layer[i]) pi->be->event_destroy(pi->ev_layer[i]);
    ioaa_free(pi->ioaa);
    ioaa_refit_free(pi->refit);
    if (pi->have_prof) ioaa_profile_data_free(&pi->prof);
    const size_t n = (size_t)pi->max_waiting;
    mem_free(MEM_HOST, pi->w, sizeof *pi->w * n);
    mem_free(MEM_HOST, pi->assign, sizeof *pi->assign * n);
    mem_free(MEM_HOST, pi->order, sizeof *pi->order * n);
    mem_free(MEM_HOST, pi->cls, sizeof *pi->cls * n);
    mem_free(MEM_HOST, pi, sizeof *pi);
}

/* "on", "auto" or "off" (NULL) into pi->self_mode, and its combination checked: it is a
 * schedule of IRQ's (not with --no-irq), over the offload runtime's lanes (offload.h) on every
 * engine; with --speculate each half predicts its own next layer. */
static int parse_self(struct pulseinfer *pi, const struct policy_ctx_params *p, char *err,
                      size_t errlen)
{
    const char *a = p->self_interleave;
    pi->self_mode = !a || !strcmp(a, "off") ? SELF_OFF
                    : !strcmp(a, "on")      ? SELF_ON
                    : !strcmp(a, "auto")    ? SELF_AUTO
                                            : -1;
    const char *why = pi->self_mode < 0 ? "is not on, auto or off"
                      : !pi->self_mode  ? NULL
                      : p->no_irq       ? "needs IRQ (not with --no-irq)"
                                        : NULL;
    if (!why) return PULSE_OK;
    snprintf(err, errlen, "--self-interleave: '%s' %s", a, why);
    return PULSE_ERR_INVALID;
}

/* "ioaa" or "fixed:LEN" into pi. */
static int parse_admission(struct pulseinfer *pi, const char *a, char *err, size_t errlen)
{
    pi->fixed_len = -1;
    if (!a || !strcmp(a, "ioaa")) return PULSE_OK;
    char *end = NULL;
    if (!strncmp(a, "fixed:", 6) && a[6] >= '0' && a[6] <= '9') { /* decimal digits only */
        long v = strtol(a + 6, &end, 10);
        if (end != a + 6 && !*end && v >= 0 && v < (1L << 30)) {
            pi->fixed_len = (int)v;
            return PULSE_OK;
        }
    }
    snprintf(err, errlen, "--admission: '%s' is not ioaa or fixed:LEN (LEN >= 0 tokens)", a);
    return PULSE_ERR_INVALID;
}

/* The IOAA search over the profile (measured, else analytic). */
/* Where nothing models the prediction (the real query: its rates are measured only as it
 * runs, offload.h's speculation counters): what the approximate query did on Gemma 3 270M at
 * 4K and 8K (workloads/profiles/speculation_gemma3-270m.json: overlap 0.81-0.96, its lists
 * churning as the exact ones, 55-75% of its misses in a list of the step before) */
#define SPEC_ASSUMED_HIT 0.85
#define SPEC_ASSUMED_CHURN_RATIO 1.0
#define SPEC_ASSUMED_MISS_HELD 0.6

/* --speculate: IOAA's recall table with the prediction folded in (ioaa_profile.h), per
 * request and layer averaged over every layer as r is: the prefetch r times the approximate
 * lists' churn ratio, the corrections the scored bytes B times the misses (1 - h) that neither
 * list of the step before held; h, the ratio and the held share from the query source's
 * misprediction model, averaged over the sparse layers (a perfect prediction where it has none:
 * the exact query predicts itself), or assumed with the real query. */
static int ioaa_speculation(struct pulseinfer *pi, const struct offload_params *op,
                            const struct model_config *m, int ps, char *err, size_t errlen)
{
    const double per_tok = (double)model_kv_bytes_per_token(m) / m->n_layers;
    const int n_sparse = offload_sparse_layers(op, m);
    double h = 0, ratio = 0, held = 0;
    int modelled = 0;
    for (int l = 0; op->source && op->query != OFFLOAD_QUERY_REAL && l < m->n_layers; l++) {
        if (offload_layer_kind(op, m, l) != OFFLOAD_LAYER_SPARSE) continue;
        struct query_meter_stats ms;
        op->source->meter_stats(op->source->user, l, &ms);
        h += ms.spec_target >= 0 ? ms.spec_target : 1;
        ratio += ms.spec_churn_ratio >= 0 ? ms.spec_churn_ratio : 1;
        held += ms.spec_miss_held >= 0 ? ms.spec_miss_held : 1;
        modelled++;
    }
    struct ioaa_spec_fold *f = &pi->spec;
    f->hit = modelled ? h / modelled : SPEC_ASSUMED_HIT;
    f->churn_ratio = modelled ? ratio / modelled : SPEC_ASSUMED_CHURN_RATIO;
    f->miss_held = modelled ? held / modelled : SPEC_ASSUMED_MISS_HELD;
    f->from = modelled ? "source" : "assumed";
    const double B = (double)op->budget_tokens * per_tok * n_sparse / m->n_layers;
    /* a margin widens the prediction's lists: their new blocks grow with them; its hit rate
     * is left at the margin-free one's (the model does not say it: corrections overestimated) */
    const int k = op->budget_tokens / ps, forced = op->sink + op->window + 1;
    const double sel = k + forced, wide = select_widened_budget(k, op->spec_margin) + forced;
    f->prefetch_bytes = pi->prof.prof.recall_bytes * f->churn_ratio * wide / sel;
    f->correction_bytes = B * (1 - f->hit) * (1 - f->miss_held);
    /* from mid-layer the prefetch starts after the attention: beside the MLP's share of the
     * layer (decode's offload layers read their weights: that share of the time); from the
     * predicted lists' attention (spec_from hits) once the layer's own prefetch has landed,
     * behind its correction: beside the whole layer, as from the input */
    f->window = op->spec_from == OFFLOAD_SPEC_FROM_MID
                    ? (double)model_mlp_weight_bytes(m) / (double)model_layer_weight_bytes(m)
                    : 1;
    char why[256];
    const int rc = ioaa_profile_data_speculate(&pi->prof, f->prefetch_bytes, f->correction_bytes,
                                               f->window, op->max_batch, why, sizeof why);
    if (rc != PULSE_OK) snprintf(err, errlen, "pulseinfer: IOAA with speculation: %s", why);
    return rc;
}

/* The recall per offload request and layer of the run's query source: the budget's blocks
 * times its target churn over every layer (the dense ones recalling nothing, as the model
 * charges r at each of its L layers and pulse profile counts it); without a source, every
 * sparse layer's budget. */
static double source_recall_bytes(const struct policy_ctx_params *p)
{
    const struct model_config *m = engine_model(p->eng)->cfg;
    const struct offload_params *op = p->offload;
    const double per_tok = (double)model_kv_bytes_per_token(m) / m->n_layers;
    double churn = 0;
    for (int l = 0; op->source && l < m->n_layers; l++) {
        if (offload_layer_kind(op, m, l) != OFFLOAD_LAYER_SPARSE) continue;
        struct query_meter_stats ms;
        op->source->meter_stats(op->source->user, l, &ms);
        churn += ms.target_mean;
    }
    churn = churn > 0 ? churn / m->n_layers : (double)offload_sparse_layers(op, m) / m->n_layers;
    return op->budget_tokens * churn * per_tok;
}

/* Whether the profile's recall.by_context holds this run's bytes: measured with its schedule
 * (speculation, with its margin and point, or exact at layer); into pi->by_ctx, or the reason
 * not into pi->by_ctx_skip, said once. --ioaa-bytes profile keeps the profile's one r. */
static void by_context_check(struct pulseinfer *pi, const struct policy_ctx_params *p)
{
    const struct ioaa_bytes_by_context *bc = &pi->prof.info.by_context;
    const struct offload_params *op = p->offload;
    const int spec = op->schedule->prefetch != 0;
    if (!p->profile || bc->n < 1) return;
    const char *from = offload_spec_from_name(op->spec_from);
    const double src = source_recall_bytes(p);
    pi->by_ctx_skip = p->ioaa_bytes_profile ? "--ioaa-bytes profile"
                      : fabs(src - bc->source_bytes) > 0.01 * fmax(src, bc->source_bytes)
                          ? "measured with another locality profile or budget"
                      : bc->speculate != spec
                          ? (spec ? "measured exact at layer, this run speculates"
                                  : "measured with speculation, this run is exact at layer")
                      : spec && fabs(bc->spec_margin - op->spec_margin) > 1e-9
                          ? "measured at another --spec-margin"
                      : spec && strcmp(bc->spec_from, from) ? "measured at another --spec-from"
                                                            : NULL;
    pi->by_ctx = !pi->by_ctx_skip;
    if (pi->by_ctx)
        pi->r_from = "profile by context";
    else if (!p->ioaa_bytes_profile)
        fprintf(stderr,
                "pulse run: warning: --profile %s: its recall bytes by context were %s (its "
                "query source's r %.0f bytes, this run's %.0f): IOAA's bytes are the %s's\n",
                p->profile, pi->by_ctx_skip, bc->source_bytes, src, pi->r_from);
}

/* With the profile's bytes by context: IOAA's recall per request and layer at the mean context
 * of the requests the decision is about (the waiting ones it sees, of n, and the running
 * offload batch; the search takes one r for all, exact where they are alike) into the refit,
 * which writes the decision's table before it decides. */
static void bytes_at_decision(struct pulseinfer *pi, const struct serve_state *s, int n)
{
    if (!pi->by_ctx) return;
    const struct serve_batch *ob = &s->run[OFFLOAD];
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += (double)pi->w[i].context;
    for (int b = 0; b < ob->n_entries; b++)
        sum += ob->entries[b].pos + 1;
    const double c = sum / PULSE_MAX(1, n + ob->n_entries);
    double v[3];
    ioaa_bytes_at(&pi->prof.info.by_context, c, &v[0], &v[1], &v[2]);
    char err[200];
    const int spec = pi->prof.info.by_context.speculate;
    if (ioaa_refit_set_bytes(pi->refit, v[0], spec ? v[1] : 0, spec ? v[2] : 0, err,
                             sizeof err) != PULSE_OK) {
        pi->refit_errors++;
        return;
    }
    pi->ctx_updates += v[0] != pi->ctx_bytes[0];
    pi->ctx_at = c;
    memcpy(pi->ctx_bytes, v, sizeof v);
}

static int make_ioaa(struct pulseinfer *pi, const struct policy_ctx_params *p, char *err,
                     size_t errlen)
{
    char why[256];
    int rc;
    const struct model_config *m = engine_model(p->eng)->cfg;
    const struct offload_params *op = p->offload;
    if (p->profile) {
        rc = ioaa_profile_load(p->profile, &pi->prof, why, sizeof why);
        if (rc != PULSE_OK) {
            snprintf(err, errlen, "--profile: %s", why);
            return PULSE_ERR_INVALID;
        }
        /* a profile measured on another device is carried to this one: its layer times scaled
         * by the copy bandwidths (decode layers are bound by HBM), its recall rounds by the H2D
         * peaks, each the profile's measured one over this run's; said once, and in the JSON.
         * Without its ceilings it is used as it is (the refit corrects only recall terms). */
        const struct ioaa_profile_info *in = &pi->prof.info;
        const char *dev = p->device ? p->device : "";
        pi->prof_device_match = !in->device[0] || !dev[0] ? -1 : !strcmp(in->device, dev);
        if (pi->prof_device_match == 0 && in->copy_gbps > 0 && p->hbm_gbps > 0) {
            const double fc = in->copy_gbps / p->hbm_gbps,
                         fr = in->h2d_gbps > 0 && p->h2d_gbps > 0 ? in->h2d_gbps / p->h2d_gbps : 1;
            if ((rc = ioaa_profile_data_scale(&pi->prof, fc, fr, why, sizeof why)) != PULSE_OK) {
                snprintf(err, errlen, "--profile: %s", why);
                return rc;
            }
            pi->prof_scale[0] = fc;
            pi->prof_scale[1] = fr;
            fprintf(stderr,
                    "pulse run: warning: --profile %s was measured on %s, this run is on %s: its "
                    "layer times scaled by %.3f (copy bandwidth %.0f against %.0f GB/s), its "
                    "recall rounds by %.3f\n",
                    p->profile, in->device, dev, fc, in->copy_gbps, p->hbm_gbps, fr);
        } else if (pi->prof_device_match == 0) {
            fprintf(stderr,
                    "pulse run: warning: --profile %s was measured on %s, this run is on %s, and "
                    "has no measured ceilings to carry it: IOAA's layer times are that "
                    "device's\n",
                    p->profile, in->device, dev);
        }
        /* its recall per request (r) and offload layers were measured at its budget */
        if (in->budget_tokens > 0 && in->budget_tokens != op->budget_tokens)
            fprintf(stderr,
                    "pulse run: warning: --profile %s was measured at a %d-token budget, this "
                    "run's is %d: IOAA's recall per request and offload-layer times are that "
                    "budget's\n",
                    p->profile, in->budget_tokens, op->budget_tokens);
    } else {
        pi->prof_device_match = -1; /* the analytic profile is of no device */
        const int ps = kv_cache_page_size(p->kv);
        const int sel_tokens = op->budget_tokens + (op->sink + op->window + 1) * ps;
        const struct ioaa_analytic_params ap = {.cfg = m,
                                                .bw = {p->hbm_gbps, p->h2d_gbps},
                                                .budget_tokens = sel_tokens,
                                                .recall_bytes = source_recall_bytes(p),
                                                .backend = engine_model(p->eng)->be->name,
                                                .recall_engine = recall_engine_name(op->engine)};
        rc = ioaa_profile_analytic(&ap, &pi->prof, why, sizeof why);
        if (rc != PULSE_OK) {
            snprintf(err, errlen, "pulseinfer: the analytic IOAA profile: %s", why);
            return rc;
        }
    }
    /* a measured profile's r is its own workload's (pulse profile: offload steps at its
     * context), so by default the run's source's replaces it; --ioaa-bytes profile keeps it */
    pi->r_profile = pi->prof.prof.recall_bytes;
    pi->r_from = p->profile ? "profile" : "analytic";
    if (p->profile && !p->ioaa_bytes_profile) {
        pi->prof.prof.recall_bytes = source_recall_bytes(p);
        pi->r_from = "source";
    }
    by_context_check(pi, p);
    /* a capped recall is paced by the engine: its rounds take at least bytes / cap */
    if (op->cap_gbps > 0)
        pi->cap_raised = ioaa_profile_data_cap_recall(&pi->prof, op->cap_gbps * 1e9);
    pi->have_prof = 1;
    /* the refit's model: the profile before the speculation's fold (its tables are copied) */
    struct ioaa_refit_params rp = {.base = &pi->prof.prof,
                                   .irq = pi->irq_on,
                                   .enabled = !p->no_ioaa_refit,
                                   .beside = pi->prof.info.beside,
                                   .max_batch = op->max_batch};
    pi->refit_on = rp.enabled;
    struct ioaa_profile_data unfolded = {0};
    if (op->schedule->prefetch) { /* the refit needs the unfolded tables after the fold */
        json_t *j = ioaa_profile_to_json(&pi->prof.prof, &pi->prof.info);
        rc = ioaa_profile_from_json(j, "profile", &unfolded, why, sizeof why);
        json_decref(j);
        if (rc != PULSE_OK) {
            snprintf(err, errlen, "pulseinfer: IOAA refit: %s", why);
            return rc;
        }
        rc = ioaa_speculation(pi, op, m, kv_cache_page_size(p->kv), err, errlen);
        rp.base = &unfolded.prof;
        rp.prefetch_bytes = pi->spec.prefetch_bytes;
        rp.correction_bytes = pi->spec.correction_bytes;
        rp.window = pi->spec.window;
    }
    if (rc == PULSE_OK && !(pi->refit = ioaa_refit_create(&rp, why, sizeof why))) {
        snprintf(err, errlen, "pulseinfer: IOAA refit: %s", why);
        rc = PULSE_ERR_INVALID;
    }
    ioaa_profile_data_free(&unfolded);
    if (rc != PULSE_OK) return rc;
    struct ioaa_params ip = {
        .profile = pi->prof.prof, .max_waiting = pi->max_waiting, .irq = pi->irq_on};
    if (!(pi->ioaa = ioaa_create(&ip, why, sizeof why))) {
        snprintf(err, errlen, "pulseinfer: IOAA: %s", why);
        return PULSE_ERR_INVALID;
    }
    return PULSE_OK;
}

static int pi_create(const struct policy_ctx_params *p, void **ctx, char *err, size_t errlen)
{
    *ctx = NULL;
    if (!p->offload) {
        snprintf(err, errlen, "pulseinfer: no offload params for its context");
        return PULSE_ERR_INVALID;
    }
    struct pulseinfer *pi = mem_alloc(MEM_HOST, sizeof *pi, "pulseinfer");
    if (!pi) {
        snprintf(err, errlen, "pulseinfer: out of host memory");
        return PULSE_ERR_OOM;
    }
    memset(pi, 0, sizeof *pi);
    pi->eng = p->eng;
    pi->irq = !p->no_irq;
    pi->max_waiting = p->max_waiting > 0 ? p->max_waiting : DEFAULT_MAX_WAITING;
    int rc = parse_admission(pi, p->admission, err, errlen);
    if (rc == PULSE_OK) rc = parse_self(pi, p, err, errlen);
    const size_t n = (size_t)pi->max_waiting;
    if (rc == PULSE_OK) {
        pi->w = mem_alloc(MEM_HOST, sizeof *pi->w * n, "ioaa waiting");
        pi->assign = mem_alloc(MEM_HOST, sizeof *pi->assign * n, "ioaa assignment");
        pi->order = mem_alloc(MEM_HOST, sizeof *pi->order * n, "ioaa order");
        pi->cls = mem_alloc(MEM_HOST, sizeof *pi->cls * n, "ioaa classes");
        if (!pi->w || !pi->assign || !pi->order || !pi->cls) {
            snprintf(err, errlen, "pulseinfer: out of host memory");
            rc = PULSE_ERR_OOM;
        }
    }
    struct offload_params op = *p->offload;
    op.device_overlap = pi->irq; /* zero-copy: the gather beside the normal batch's layers */
    if (rc == PULSE_OK && pi->self_mode) { /* the halves' lanes, and their views */
        op.lanes = 2;
        for (int h = 0; h < 2; h++)
            if (!(pi->half[h] = batch_view_create(p->eng))) {
                snprintf(err, errlen, "pulseinfer: out of host memory");
                rc = PULSE_ERR_OOM;
            }
    }

    if (rc == PULSE_OK) rc = offload_create(p->eng, p->kv, &op, &pi->o, err, errlen);
    if (rc == PULSE_OK) pi->irq_on = pi->irq && offload_device_driven(pi->o) != 1;
    if (rc == PULSE_OK && pi->fixed_len < 0) rc = make_ioaa(pi, p, err, errlen);
    pi->be = engine_model(p->eng)->be;
    if (rc == PULSE_OK && p->trace) {
        char why[256];
        pi->trace_path = p->trace;
        if (!(pi->tl = timeline_create(pi->be, TRACE_MAX_SPANS, why, sizeof why))) {
            snprintf(err, errlen, "--trace: %s", why);
            rc = PULSE_ERR_OOM;
        } else {
            timeline_start(pi->tl, engine_ctx(p->eng));
            offload_set_timeline(pi->o, pi->tl);
        }
    }
    for (int i = 0; rc == PULSE_OK && i < 2; i++)
        if (!(pi->ev_layer[i] = pi->be->event_create())) {
            snprintf(err, errlen, "pulseinfer: no backend event");
            rc = PULSE_ERR_OOM;
        }
    if (rc != PULSE_OK) {
        pi_free(pi);
        return rc;
    }
    *ctx = pi;
    return PULSE_OK;
}

/* ------------------------------------------------------------------ admission */

static int total_len(const struct request *r)
{
    return request_reserved(r);
}

/* Admits reqs[next_waiting] into batch k. PULSE_OK, PULSE_ERR_NOMEM (does not fit now), or an
 * error. */
static int admit_head(struct serve_state *s, struct pulseinfer *pi, int k)
{
    if (serve_entries(s) >= s->max_batch || s->run[k].n_entries >= s->max_batch)
        return PULSE_ERR_NOMEM;
    const struct request *r = &s->reqs[s->next_waiting];
    struct offload_stats a, b;
    offload_get_stats(pi->o, &a);
    int slot, rc;
    int32_t tok = 0;
    if (k == NORMAL) { /* its prompt KV from the offload runtime's source: the same tokens as
                          if it were offloaded with every block selected */
        rc = offload_admit_normal(pi->o, r->id, r->prompt_len, total_len(r), &slot, &tok, s->why,
                                  sizeof s->why);
    } else {
        rc = offload_admit(pi->o, r->id, r->prompt_len, total_len(r), &slot, s->why, sizeof s->why);
        if (rc == PULSE_OK) tok = offload_first_token(pi->o, slot);
    }
    offload_get_stats(pi->o, &b);
    serve_pause_clock(s, b.prompt_fill_s - a.prompt_fill_s); /* a prefill instance's work */
    if (rc == PULSE_OK) serve_add_entry(s, k, s->next_waiting, slot, tok);
    if (rc == PULSE_OK) {
        pi->admitted_since_step = 1;
        s->next_waiting++;
        ++*(k == NORMAL ? &s->ctr.admitted_normal : &s->ctr.admitted_offload);
        s->why[0] = 0;
    }
    return rc;
}

/* --admission fixed:LEN: arrival order, each to its batch by length, until one does not fit. */
static int64_t free_pages(const struct kv_cache *kv)
{
    struct kv_cache_stats ks;
    kv_cache_get_stats(kv, &ks);
    return ks.free_pages;
}

/* What an admission saw (pi_admit_idle): arrivals, entries, free GPU pages and host bytes. */
static void note_admission_point(const struct serve_state *s, struct pulseinfer *pi)
{
    pi->decided_once = 1;
    pi->last_arrived = s->n_arrived;
    pi->last_entries = serve_entries(s);
    pi->last_free_pages = free_pages(s->kv);
    pi->last_free_host = offload_host_free_bytes(pi->o);
}

/* policy.admit_idle: requests wait and nothing an admission depends on has changed since the
 * last one (admit_fixed's refusal, IOAA's decision): admit would do nothing now. */
static int pi_admit_idle(const struct serve_state *s)
{
    const struct pulseinfer *pi = s->policy_ctx;
    return pi->decided_once && s->n_arrived == pi->last_arrived &&
           serve_entries(s) == pi->last_entries && free_pages(s->kv) == pi->last_free_pages &&
           offload_host_free_bytes(pi->o) == pi->last_free_host;
}

static int admit_fixed(struct serve_state *s, struct pulseinfer *pi)
{
    while (s->next_waiting < s->n_arrived) {
        const int k = total_len(&s->reqs[s->next_waiting]) > pi->fixed_len ? OFFLOAD : NORMAL;
        const int rc = admit_head(s, pi, k);
        if (rc == PULSE_ERR_NOMEM) {
            s->ctr.admission_refusals++;
            note_admission_point(s, pi);
            return PULSE_OK;
        }
        if (rc != PULSE_OK) return rc;
    }
    return PULSE_OK;
}

/* IOAA over the first max_waiting waiting requests (no more than the free slots), then the
 * chosen ones' admission in arrival order. */
static int admit_ioaa(struct serve_state *s, struct pulseinfer *pi)
{
    struct kv_cache_stats ks;
    kv_cache_get_stats(s->kv, &ks);
    const int64_t fp = ks.free_pages;
    const size_t fh = offload_host_free_bytes(pi->o);
    const int entries = serve_entries(s);
    if (s->next_waiting >= s->n_arrived) return PULSE_OK;
    if (pi_admit_idle(s)) return PULSE_OK; /* nothing changed since the last decision */
    /* at most as many as there are free cache slots (the model counts bytes, not slots) */
    const int n = PULSE_MIN(PULSE_MIN(s->n_arrived - s->next_waiting, pi->max_waiting),
                            s->max_batch - entries);
    if (n <= 0) { /* no free slot: nothing to decide until one is */
        note_admission_point(s, pi);
        return PULSE_OK;
    }
    struct ioaa_state st = {0};
    const struct serve_batch *nb = &s->run[NORMAL], *ob = &s->run[OFFLOAD];
    st.normal_count = nb->n_entries;
    for (int b = 0; b < nb->n_entries; b++)
        st.normal_ctx_sum += nb->entries[b].pos + 1;
    st.offload_count = ob->n_entries;
    st.free_gpu_bytes = fp * ks.page_bytes;
    st.free_host_bytes = (int64_t)fh;
    for (int i = 0; i < n; i++) {
        const struct request *r = &s->reqs[s->next_waiting + i];
        size_t g, h;
        offload_request_bytes(pi->o, total_len(r), &g, &h);
        pi->w[i] = (struct ioaa_request){total_len(r), r->prompt_len,
                                         (int64_t)kv_cache_request_bytes(s->kv, total_len(r)),
                                         (int64_t)g, (int64_t)h};
    }
    struct ioaa_decision d;
    char err[200];
    /* the recall terms refitted since the last decision, and its bytes, into its model's table */
    bytes_at_decision(pi, s, n);
    if (ioaa_refit_apply(pi->refit, pi->ioaa, err, sizeof err) < 0) pi->refit_errors++;
    if (ioaa_decide(pi->ioaa, &st, pi->w, n, pi->assign, &d, err, sizeof err) != PULSE_OK) {
        snprintf(s->why, sizeof s->why, "IOAA: %s", err);
        return PULSE_ERR_INVALID;
    }
    s->ctr.ioaa_decisions++;
    s->ctr.ioaa_nodes += d.nodes_visited;
    s->ctr.ioaa_nodes_max = PULSE_MAX(s->ctr.ioaa_nodes_max, d.nodes_visited);
    s->ctr.ioaa_bound_evaluations += d.bound_evaluations;
    if (pi->n_decisions < MAX_DECISIONS_KEPT) {
        struct decision_rec r = {pulse_now() - s->t0,
                                 d.step_s,
                                 n,
                                 d.n_normal,
                                 d.n_offload,
                                 d.nodes_visited,
                                 -1,
                                 0,
                                 pi->by_ctx ? pi->ctx_at : -1,
                                 pi->by_ctx ? pi->ctx_bytes[0] : -1};
        if (d.n_normal > 0) { /* what it chose the normal batch over */
            int64_t g = 0, h = 0;
            for (int i = 0; i < n; i++)
                if (pi->assign[i] != IOAA_WAIT)
                    g += pi->w[i].gpu_offload, h += pi->w[i].host_offload;
            r.alt_fits = g <= st.free_gpu_bytes && h <= st.free_host_bytes;
            r.alt_step_s = ioaa_step_time(pi->ioaa, st.normal_count, st.normal_ctx_sum,
                                          st.offload_count + d.n_normal + d.n_offload, NULL);
        }
        pi->decisions[pi->n_decisions++] = r;
    }
    /* admit the chosen ones, in arrival order, found by id (admission reorders the queue) */
    int *ids = pi->order, *cls = pi->cls, m = 0;
    for (int i = 0; i < n; i++)
        if (pi->assign[i] != IOAA_WAIT) {
            ids[m] = s->reqs[s->next_waiting + i].id;
            cls[m++] = pi->assign[i] == IOAA_NORMAL ? NORMAL : OFFLOAD;
        }
    int rc = PULSE_OK;
    for (int a = 0; a < m && rc == PULSE_OK; a++) {
        int j = s->next_waiting;
        while (j < s->n_arrived && s->reqs[j].id != ids[a])
            j++;
        serve_take_waiting(s, j);
        rc = admit_head(s, pi, cls[a]);
        if (rc == PULSE_ERR_NOMEM) { /* batch slots (outside the model) or pages: later */
            s->ctr.admission_refusals++;
            rc = PULSE_OK;
            break;
        }
    }
    /* nothing running and nothing chosen: the queue's head as whatever fits, so the loop
     * never idles on a model that would wait for ever */
    if (rc == PULSE_OK && serve_entries(s) == 0 && s->next_waiting < s->n_arrived) {
        rc = admit_head(s, pi, OFFLOAD);
        if (rc != PULSE_OK) {
            char why_off[sizeof s->why], why_normal[sizeof s->why];
            snprintf(why_off, sizeof why_off, "%s", s->why);
            const int rn = admit_head(s, pi, NORMAL);
            if (rn != PULSE_OK) { /* neither: both reasons for the loop's message */
                snprintf(why_normal, sizeof why_normal, "%s", s->why);
                snprintf(s->why, sizeof s->why, "offloaded, %.110s; normal, %.110s", why_off,
                         why_normal);
            }
            /* a request that fits neither now: the loop says it can never fit */
            rc = rn == PULSE_OK || rn == PULSE_ERR_NOMEM ? PULSE_OK : rn;
        }
    }
    note_admission_point(s, pi);
    return rc;
}

static int pi_admit(struct serve_state *s)
{
    struct pulseinfer *pi = s->policy_ctx;
    return pi->fixed_len >= 0 ? admit_fixed(s, pi) : admit_ioaa(s, pi);
}

/* ------------------------------------------------------------------ the step */

/* The offload batch's layer: pre-attention, then in a sparse layer its blocks selected from
 * its own exact query (SoloHead by default) and their recall started; IRQ (step_irq) runs the
 * normal batch's layers while it lands, and the attention (offload_layer_finish) waits for it. */
static void pulseinfer_layer(struct offload *o, struct batch *bt, int layer)
{
    offload_pre(o, bt, layer);
    if (offload_layer_sparse(o, layer)) offload_select(o, bt, layer);
}

static const struct offload_schedule pulseinfer_schedule = {"exact-at-layer", 0, pulseinfer_layer,
                                                            0};

/* Speculation with exact correction (DESIGN section 7, mechanism 5; --speculate): as above,
 * then the next layer's blocks predicted from its approximate query (the input of this layer)
 * and their recall started, so that it overlaps this layer's attention and MLP and the next
 * layer's pre-attention; the next layer's exact selection then recalls only the blocks the
 * prediction missed (offload_prefetch), and attends exactly its own lists. Where the
 * prediction runs on a stream of its own (offload_predict_forked), it is issued first: its
 * selection and plan run beside this layer's pre-attention and exact selection. Its recall
 * still queues on the gather's stream behind this layer's correction (offload_layer_issue
 * queues the exact selection's side work first), so only the selection kernels overlap. */
static void pulseinfer_spec_layer(struct offload *o, struct batch *bt, int layer)
{
    const int first = offload_predict_forked(o);
    if (first && offload_layer_sparse(o, layer + 1)) offload_prefetch(o, bt, layer + 1);
    pulseinfer_layer(o, bt, layer);
    if (!first && offload_layer_sparse(o, layer + 1)) offload_prefetch(o, bt, layer + 1);
}

static const struct offload_schedule pulseinfer_spec_schedule = {"speculate-exact", 1,
                                                                 pulseinfer_spec_layer, 1};

/* One step of both batches, the offload batch's layers interleaved with the normal batch's
 * at layer boundaries (IRQ). Counters: an interruption (layer_switches) is a visit to the
 * normal batch while an offload layer's recall is in flight; a sparse layer's round is hidden
 * when normal layers ran meanwhile and it was in when the scheduler came back, exposed when
 * the offload batch had to wait for it: on the device (its attention queued behind the recall's
 * event or flag, not timed here), or on the cpu backend and with offload_params.host_wait on the
 * host (offload_wait_s). */
static int step_irq(struct serve_state *s, struct pulseinfer *pi)
{
    struct engine *e = s->eng;
    struct serve_batch *nb = &s->run[NORMAL], *ob = &s->run[OFFLOAD];
    const int L = engine_model(e)->cfg->n_layers;
    /* an exposed recall is waited for on the device: zero-copy's gather, or on cuda the
     * planner's flag (unless offload_params.host_wait); else on the host, here */
    const int device_waits =
        offload_device_driven(pi->o) == 2 ||
        (engine_model(e)->be->mem == MEM_DEVICE && !offload_get_params(pi->o)->host_wait);
    const struct kctx *c = engine_ctx(e);
    const int64_t step = pi->steps;
    offload_step_begin(pi->o, ob->bt, ob->entries, ob->n_entries);
    /* its layers beside the offload batch's as graphs on the device path (offload_step_begin) */
    batch_graph_pieces(e, nb->bt, offload_device_driven(pi->o) > 0);
    engine_run_embed(e, nb->bt);
    int ln = 0;
    for (int lo = 0; lo < L; lo++) {
        int sp = timeline_begin(pi->tl, c, TIMELINE_OFFLOAD, "pre+select", OFFLOAD, lo, step);
        offload_layer_issue(pi->o, ob->bt, lo);
        timeline_end(pi->tl, c, sp);
        /* normal layers beside this offload layer: its share, normal layer lo (so that both
         * batches' steps end together, one normal layer queued behind each recall's launch,
         * with no host round trip between them). Where the recall is waited for on the
         * device that is all: the host queues the whole step without waiting and the device
         * runs the normal layer while the recall lands. Where the host waits for it, more
         * only while the recall is still in flight and the normal layer before has finished
         * (the device would idle otherwise). */
        const int sparse = offload_kind(pi->o, lo) == OFFLOAD_LAYER_SPARSE;
        int ran = 0;
        while (ln < L) {
            if (ln > lo) {
                if (device_waits || !sparse || offload_layer_ready(pi->o, lo)) break;
                if (!pi->be->event_query(pi->ev_layer[(ln - 1) & 1])) {
                    sched_yield();
                    continue;
                }
            }
            sp = timeline_begin(pi->tl, c, TIMELINE_NORMAL, "layer", NORMAL, ln, step);
            TRACE_PUSH("normal layer beside an offload layer");
            engine_run_layer(e, nb->bt, s->kv, ln);
            TRACE_POP();
            timeline_end(pi->tl, c, sp);
            pi->be->event_record(c, pi->ev_layer[ln++ & 1]);
            ran += sparse;
        }
        s->ctr.normal_layers_in_flight += ran;
        s->ctr.layer_switches += ran > 0;
        if (sparse) /* hidden: normal layers ran beside the round; exposed: none could */
            ++*(ran ? &s->ctr.recalls_hidden : &s->ctr.recalls_exposed);
        if (sparse && !device_waits && !offload_layer_ready(pi->o, lo)) {
            /* the recall still in flight and waited for on the host (the cpu backend, or
             * offload_params.host_wait): here, timed; on the device finish queues the attention
             * behind the recall's event or flag and the host goes on */
            const double t0 = pulse_now();
            TRACE_PUSH("offload batch waits for its recall");
            while (!offload_layer_ready(pi->o, lo))
                sched_yield();
            TRACE_POP();
            s->ctr.offload_wait_s += pulse_now() - t0;
        }
        sp = timeline_begin(pi->tl, c, TIMELINE_OFFLOAD, "attend+post", OFFLOAD, lo, step);
        offload_layer_finish(pi->o, ob->bt, lo);
        timeline_end(pi->tl, c, sp);
    }
    for (; ln < L; ln++) {
        const int sp = timeline_begin(pi->tl, c, TIMELINE_NORMAL, "layer", NORMAL, ln, step);
        engine_run_layer(e, nb->bt, s->kv, ln);
        timeline_end(pi->tl, c, sp);
    }
    engine_run_head(e, nb->bt);
    return offload_step_end(pi->o, ob->bt);
}

/* ------------------------------------------------------------------ self-interleaving */

/* Self-interleaving (DESIGN section 7, mechanism 5; --self-interleave): with no normal batch
 * to run beside a recall, the offload batch's step runs as two halves A and B (its first
 * ceil(n/2) requests and the rest: the offload runtime's two lanes, each half's layers in the
 * offload batch's own memory through a batch view), interleaved layer by layer with IRQ's
 * pieces:
 *   issue A0, issue B0, finish A0, issue A1, finish B0, issue B1, finish A1, ...
 * so that A's recall of layer l is in flight while B's pre-attention and selection of layer l
 * run, and B's while A finishes layer l and starts layer l + 1. Each request still runs its
 * layers in order on its own lists, so the tokens are exact SoloHead's. As in step_irq, the
 * host never waits for the device where the recall is waited for on the device (cuda: the
 * attention queued behind the recall's flag); on the cpu backend (and with host_wait) the
 * host waits for a round not in yet when its half's attention comes, timed. */
struct self_step {
    struct pulseinfer *pi;
    struct serve_state *s;
    int device_waits, last; /* the half whose piece ran last (-1: none) */
    int beside[2];          /* a piece of the other half ran since this half's issue */
};

static void half_issue(struct self_step *x, int h, int l)
{
    struct pulseinfer *pi = x->pi;
    const struct kctx *c = engine_ctx(x->s->eng);
    pi->si.switches += x->last >= 0 && x->last != h;
    x->last = h;
    x->beside[!h] = 1;
    x->beside[h] = 0;
    offload_lane_use(pi->o, h);
    const int sp = timeline_begin(pi->tl, c, TIMELINE_OFFLOAD, h ? "B pre+select" : "A pre+select",
                                  OFFLOAD, l, pi->steps);
    offload_layer_issue(pi->o, pi->half[h], l);
    timeline_end(pi->tl, c, sp);
}

static void half_finish(struct self_step *x, int h, int l)
{
    struct pulseinfer *pi = x->pi;
    const struct kctx *c = engine_ctx(x->s->eng);
    pi->si.switches += x->last >= 0 && x->last != h;
    x->last = h;
    x->beside[!h] = 1;
    offload_lane_use(pi->o, h);
    if (offload_kind(pi->o, l) == OFFLOAD_LAYER_SPARSE) {
        pi->si.rounds_beside += x->beside[h];
        const int ready = offload_layer_ready(pi->o, l);
        pi->si.rounds_ready += ready;
        if (!ready && !x->device_waits) { /* on the host, here (cpu, host_wait), timed */
            const double t0 = pulse_now();
            pi->si.rounds_waited++;
            while (!offload_layer_ready(pi->o, l))
                sched_yield();
            pi->si.wait_s += pulse_now() - t0;
        }
    }
    const int sp = timeline_begin(pi->tl, c, TIMELINE_OFFLOAD,
                                  h ? "B attend+post" : "A attend+post", OFFLOAD, l, pi->steps);
    offload_layer_finish(pi->o, pi->half[h], l);
    timeline_end(pi->tl, c, sp);
}

static int step_self(struct serve_state *s, struct pulseinfer *pi)
{
    struct engine *e = s->eng;
    struct serve_batch *ob = &s->run[OFFLOAD];
    const int L = engine_model(e)->cfg->n_layers, n = ob->n_entries, na = (n + 1) / 2;
    const int64_t g0 = offload_lane_graph_launches(pi->o);
    struct self_step x = {pi,
                          s,
                          engine_model(e)->be->mem == MEM_DEVICE &&
                              !offload_get_params(pi->o)->host_wait,
                          -1,
                          {0, 0}};
    offload_step_begin(pi->o, ob->bt, ob->entries, n); /* the embedding: the whole batch */
    offload_step_split(pi->o, na);
    batch_view_set(e, pi->half[0], ob->bt, 0, na);
    batch_view_set(e, pi->half[1], ob->bt, na, n - na);
    half_issue(&x, 0, 0);
    for (int l = 0; l < L; l++) {
        half_issue(&x, 1, l);
        half_finish(&x, 0, l);
        if (l + 1 < L) half_issue(&x, 0, l + 1);
        half_finish(&x, 1, l);
    }
    pi->si.steps++;
    pi->si.halves += 2;
    pi->si.graph_pieces += offload_lane_graph_launches(pi->o) - g0;
    offload_lane_use(pi->o, 0);
    return offload_step_end(pi->o, ob->bt); /* the head: the whole batch */
}

/* Whether this step runs self-interleaved: an offload batch of two or more requests and no
 * normal batch, and --self-interleave on, or auto with IOAA's refitted model of the step
 * predicting it faster than unsplit (ioaa_refit_self_step against ioaa_refit_step, both with
 * the factors the plain steps fitted and, with --speculate, the prefetch and corrections
 * unfolded; ties unsplit; without IOAA, fixed admission, auto interleaves). */
static int self_this_step(struct pulseinfer *pi, const struct serve_state *s)
{
    const int n_o = s->run[OFFLOAD].n_entries;
    if (!pi->self_mode || n_o < 2 || s->run[NORMAL].n_entries || !pi->irq_on) return 0;
    if (pi->self_mode == SELF_ON || !pi->ioaa) return 1;
    const double self = ioaa_refit_self_step(pi->refit, n_o, 1);
    const double plain = ioaa_refit_step(pi->refit, 0, 0, n_o, 1);
    const int choose = self < plain;
    pi->si.pred_plain_s += plain;
    pi->si.pred_self_s += self;
    ++*(choose ? &pi->si.auto_self : &pi->si.auto_plain);
    return choose;
}

/* The runtime's recall totals into the loop's counters, once, after the last step. */
static void pi_finish(struct serve_state *s)
{
    struct pulseinfer *pi = s->policy_ctx;
    offload_policy_counters(pi->o, &s->ctr);
}

static int pi_step(struct serve_state *s)
{
    struct pulseinfer *pi = s->policy_ctx;
    struct serve_batch *nb = &s->run[NORMAL], *ob = &s->run[OFFLOAD];
    int rc = PULSE_OK;
    const int par = (int)(pi->steps & 1);
    double *pred = &pi->predicted_s[par]; /* the model's step for the batches this step runs
                                             (IOAA only): refitted, and the profile's alone */
    *pred = pi->unrefit_s[par] = 0;
    pi->cold[pi->steps & 1] = pi->admitted_since_step;
    pi->admitted_since_step = 0;
    const int irq = ob->n_entries && nb->n_entries && pi->irq_on;
    const int self = !irq && self_this_step(pi, s);
    pi->self_step[pi->steps & 1] = self;
    if (pi->ioaa && self) { /* the self model with the factors the plain steps fitted and its
                               own (pi_traffic), and with factors 1 */
        *pred = ioaa_refit_self_step(pi->refit, ob->n_entries, 1);
        pi->unrefit_s[par] = ioaa_refit_self_step(pi->refit, ob->n_entries, 0);
        pi->comp_n[par] = 0, pi->comp_o[par] = ob->n_entries, pi->comp_ctx[par] = 0;
    } else if (pi->ioaa) {
        int64_t ctx = 0;
        for (int b = 0; b < nb->n_entries; b++)
            ctx += nb->entries[b].pos + 1;
        *pred = ioaa_refit_step(pi->refit, nb->n_entries, ctx, ob->n_entries, 1);
        pi->unrefit_s[par] = ioaa_refit_step(pi->refit, nb->n_entries, ctx, ob->n_entries, 0);
        pi->comp_n[par] = nb->n_entries, pi->comp_o[par] = ob->n_entries;
        pi->comp_ctx[par] = ctx;
    }
    const struct kctx *c = engine_ctx(s->eng);
    if (irq) {
        rc = step_irq(s, pi);
    } else if (self) {
        rc = step_self(s, pi);
    } else {
        if (ob->n_entries) {
            const int sp =
                timeline_begin(pi->tl, c, TIMELINE_OFFLOAD, "step", OFFLOAD, -1, pi->steps);
            rc = offload_step(pi->o, ob->bt, ob->entries, ob->n_entries);
            timeline_end(pi->tl, c, sp);
        }
        if (nb->n_entries) {
            const int sp =
                timeline_begin(pi->tl, c, TIMELINE_NORMAL, "step", NORMAL, -1, pi->steps);
            engine_step(s->eng, nb->bt, s->kv);
            timeline_end(pi->tl, c, sp);
        }
    }
    if (rc == PULSE_ERR_IO) { /* the offload batch's recall failed every attempt: the loop
                                 ends its requests, the normal batch's step stands */
        ob->failed = offload_clear_failure(pi->o);
    }
    pi->steps++;
    return rc;
}

/* The normal batch's traffic (vanilla's: weights and whole KV) plus the offload batch's
 * (the runtime's); and the measured step against IOAA's prediction (this is called right
 * after the step's tokens were read). */
static void pi_traffic(struct serve_state *s, int ahead, struct floor_traffic *t)
{
    struct pulseinfer *pi = s->policy_ctx;
    const struct model_config *c = engine_model(s->eng)->cfg;
    const double per_layer = (double)model_kv_bytes_per_token(c) / c->n_layers;
    const int p = (int)((pi->steps - 1 - ahead) & 1);
    const double pred = pi->predicted_s[p];
    if (pred > 0) { /* the step just read back (the loop's time of it), against the model's */
        pi->meas_sum += s->report_step_s;
        pi->pred_sum += pred;
        pi->unrefit_sum += pi->unrefit_s[p];
        pi->pred_steps++;
        if (!pi->cold[p]) {
            pi->meas_steady_sum += s->report_step_s;
            pi->pred_steady_sum += pred;
            pi->unrefit_steady_sum += pi->unrefit_s[p];
            pi->steady_steps++;
            /* a steady step of its batches against the model: the refit's sample (the loop's
             * time of a step it read back anyway: no sync of its own); a self-interleaved step
             * is not the plain model's, whose recall terms the refit corrects: it refits the
             * self step's own factor */
            if (!pi->self_step[p])
                ioaa_refit_observe(pi->refit, pi->comp_n[p], pi->comp_ctx[p], pi->comp_o[p],
                                   s->report_step_s);
            else
                ioaa_refit_observe_self(pi->refit, pi->comp_o[p], s->report_step_s);
        }
    }
    memset(t, 0, sizeof *t);
    if (s->run[OFFLOAD].n_entries) offload_step_traffic(pi->o, ahead, t);
    /* each batch runs its own GEMMs: the weights are read once per batch that ran, and the
     * layers' once more by a self-interleaved offload batch (its halves' own GEMMs; the head
     * runs once, on the whole batch) */
    t->weight_bytes = (double)model_step_weight_bytes(c) *
                          ((s->run[OFFLOAD].n_entries > 0) + (s->run[NORMAL].n_entries > 0)) +
                      (double)model_layer_weight_bytes(c) * c->n_layers * pi->self_step[p];
    const struct serve_batch *nb = &s->run[NORMAL];
    for (int b = 0; b < nb->n_entries; b++)
        for (int l = 0; l < c->n_layers; l++) {
            const int n = nb->entries[b].pos + 1 - ahead, w = model_layer_window(c, l);
            t->kv_bytes += per_layer * (w > 0 && w < n ? w : n);
        }
}

static void pi_release(struct serve_state *s, int slot)
{
    struct pulseinfer *pi = s->policy_ctx;
    /* the slot is an offload request's when the offload runtime holds it */
    for (int b = 0; b < s->run[OFFLOAD].n_entries; b++)
        if (s->run[OFFLOAD].entries[b].slot == slot) {
            offload_release(pi->o, slot);
            return;
        }
}

static json_t *self_json(const struct pulseinfer *pi)
{
    static const char *const mode[] = {"off", "on", "auto"};
    const struct self_counters *c = &pi->si;
    json_t *j = json_pack(
        "{s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "mode", mode[pi->self_mode], "steps",
        (json_int_t)c->steps, "halves", (json_int_t)c->halves, "switches", (json_int_t)c->switches,
        "rounds_beside", (json_int_t)c->rounds_beside, "rounds_ready", (json_int_t)c->rounds_ready,
        "rounds_waited", (json_int_t)c->rounds_waited, "graph_pieces", (json_int_t)c->graph_pieces);
    results_set_real(j, "wait_s", c->wait_s);
    if (pi->self_mode == SELF_AUTO) {
        json_object_set_new(j, "auto_self_steps", json_integer(c->auto_self));
        json_object_set_new(j, "auto_plain_steps", json_integer(c->auto_plain));
        const int64_t k = c->auto_self + c->auto_plain;
        if (k) {
            results_set_real(j, "predicted_self_step_ms", c->pred_self_s / k * 1e3);
            results_set_real(j, "predicted_plain_step_ms", c->pred_plain_s / k * 1e3);
        }
    }
    return j;
}

/* The recall and the compute beside each other as the fold and the refit took them:
 * beside_compute (one factor, or {bytes, factor} per round size), compute_beside, and whether
 * they came from the profile or the defaults. */
static void beside_json(json_t *rj, const struct ioaa_beside *b, double compute)
{
    json_t *bj = ioaa_beside_to_json(b);
    if (bj) /* as the profile holds it */
        json_object_set_new(rj, "beside_compute", bj);
    else
        results_set_real(rj, "beside_compute", ioaa_beside_rate(b, 0));
    json_t *gj = b->slow_n > 0 ? ioaa_compute_beside_to_json(b, compute) : NULL;
    if (gj) /* a table per round size */
        json_object_set_new(rj, "compute_beside", gj);
    else
        results_set_real(rj, "compute_beside", compute > 1 ? compute : 1);
    json_object_set_new(rj, "beside_from", json_string(b->n > 0 ? "profile" : "default"));
}

/* The context's counters, and with --trace the timeline written to its file (its summary
 * here: busy fraction, spans) */
static json_t *pi_json(const void *ctx)
{
    const struct pulseinfer *pi = ctx;
    json_t *j = json_object();
    if (pi->tl) {
        char err[512];
        const int rc = timeline_write(pi->tl, pi->trace_path, err, sizeof err);
        if (rc != PULSE_OK) fprintf(stderr, "pulse run: --trace: %s\n", err);
        json_t *tj = timeline_summary_json(pi->tl);
        json_object_set_new(tj, "path", json_string(pi->trace_path));
        json_object_set_new(tj, "written", json_boolean(rc == PULSE_OK));
        json_object_set_new(j, "trace", tj);
    }
    json_object_set_new(j, "irq", json_boolean(pi->irq));
    json_object_set_new(j, "self_interleave", self_json(pi));
    json_object_set_new(j, "irq_in_effect", json_boolean(pi->irq_on));
    json_object_set_new(j, "admission",
                        pi->fixed_len >= 0 ? json_sprintf("fixed:%d", pi->fixed_len)
                                           : json_string("ioaa"));
    if (pi->fixed_len < 0) {
        json_object_set_new(j, "ioaa_profile", json_string(pi->prof.info.source));
        json_object_set_new(j, "ioaa_profile_device",
                            pi->prof.info.device[0] ? json_string(pi->prof.info.device)
                                                    : json_null());
        json_object_set_new(j, "ioaa_profile_device_match",
                            pi->prof_device_match < 0 ? json_null()
                                                      : json_boolean(pi->prof_device_match));
        json_t *sc = json_null();
        if (pi->prof_scale[0] > 0) {
            sc = json_object();
            results_set_real(sc, "compute", pi->prof_scale[0]);
            results_set_real(sc, "recall", pi->prof_scale[1]);
        }
        json_object_set_new(j, "ioaa_profile_scaled", sc);
        json_object_set_new(j, "ioaa_profile_budget_tokens",
                            pi->prof.info.budget_tokens > 0
                                ? json_integer(pi->prof.info.budget_tokens)
                                : json_null());
        json_object_set_new(j, "max_waiting", json_integer(pi->max_waiting));
        results_set_real(j, "ioaa_recall_bytes_per_request_layer", pi->prof.prof.recall_bytes);
        results_set_real(j, "ioaa_recall_bytes_profile", pi->r_profile);
        json_object_set_new(j, "ioaa_recall_bytes_from", json_string(pi->r_from));
        json_object_set_new(j, "ioaa_recall_rounds_capped", json_integer(pi->cap_raised));
        if (pi->spec.from) {
            json_t *sj = json_pack("{s:s}", "from", pi->spec.from);
            results_set_real(sj, "hit_rate", pi->spec.hit);
            results_set_real(sj, "churn_ratio", pi->spec.churn_ratio);
            results_set_real(sj, "miss_held", pi->spec.miss_held);
            results_set_real(sj, "prefetch_bytes_per_request_layer", pi->spec.prefetch_bytes);
            results_set_real(sj, "correction_bytes_per_request_layer", pi->spec.correction_bytes);
            results_set_real(sj, "window", pi->spec.window);
            json_object_set_new(j, "ioaa_speculation", sj);
        }
        json_t *bj = ioaa_bytes_by_context_to_json(&pi->prof.info.by_context);
        if (bj) { /* the profile's bytes by context, and what the last decision took of them */
            json_object_set_new(bj, "used", json_boolean(pi->by_ctx));
            json_object_set_new(bj, "skipped",
                                pi->by_ctx_skip ? json_string(pi->by_ctx_skip) : json_null());
            json_object_set_new(bj, "updates", json_integer(pi->ctx_updates));
            if (pi->ctx_updates) {
                json_t *at = json_object();
                results_set_real(at, "context", pi->ctx_at);
                results_set_real(at, "bytes", pi->ctx_bytes[0]);
                if (pi->prof.info.by_context.speculate) {
                    results_set_real(at, "prefetch", pi->ctx_bytes[1]);
                    results_set_real(at, "after_selection", pi->ctx_bytes[2]);
                }
                json_object_set_new(bj, "last_decision", at);
            }
            json_object_set_new(j, "ioaa_bytes_by_context", bj);
        }
    }
    json_t *dj = json_array(); /* the admission decisions (the first MAX_DECISIONS_KEPT) */
    for (int i = 0; i < pi->n_decisions; i++) {
        const struct decision_rec *r = &pi->decisions[i];
        json_t *e = json_pack("{s:i,s:i,s:i,s:I}", "waiting", r->waiting, "normal", r->n_normal,
                              "offload", r->n_offload, "nodes", (json_int_t)r->nodes);
        results_set_real(e, "t_s", r->t_s);
        results_set_real(e, "predicted_step_ms", r->predicted_step_s * 1e3);
        if (r->bytes >= 0) {
            results_set_real(e, "bytes_context", r->bytes_ctx);
            results_set_real(e, "recall_bytes_per_request_layer", r->bytes);
        }
        if (r->alt_step_s >= 0) {
            results_set_real(e, "all_offload_step_ms", r->alt_step_s * 1e3);
            json_object_set_new(e, "all_offload_fits", json_boolean(r->alt_fits));
        }
        json_array_append_new(dj, e);
    }
    json_object_set_new(j, "decisions", dj);
    json_object_set_new(j, "ioaa_predicted_steps", json_integer(pi->pred_steps));
    if (pi->pred_steps) {
        results_set_real(j, "ioaa_predicted_step_ms", pi->pred_sum / pi->pred_steps * 1e3);
        results_set_real(j, "ioaa_measured_step_ms", pi->meas_sum / pi->pred_steps * 1e3);
        results_set_real(j, "ioaa_predicted_step_unrefit_ms",
                         pi->unrefit_sum / pi->pred_steps * 1e3);
    }
    json_object_set_new(j, "ioaa_steady_steps", json_integer(pi->steady_steps));
    if (pi->steady_steps) {
        results_set_real(j, "ioaa_predicted_steady_step_ms",
                         pi->pred_steady_sum / pi->steady_steps * 1e3);
        results_set_real(j, "ioaa_measured_steady_step_ms",
                         pi->meas_steady_sum / pi->steady_steps * 1e3);
        results_set_real(j, "ioaa_predicted_steady_step_unrefit_ms",
                         pi->unrefit_steady_sum / pi->steady_steps * 1e3);
    }
    if (pi->refit) { /* the refit's factors as the run left them */
        struct ioaa_refit_stats rs;
        ioaa_refit_get_stats(pi->refit, &rs);
        json_t *rj = json_pack("{s:b,s:s,s:I,s:I,s:I,s:I}", "enabled", pi->refit_on, "engine",
                               pi->prof.info.recall_engine, "refits", (json_int_t)rs.refits,
                               "uninformative", (json_int_t)rs.uninformative, "rewrites",
                               (json_int_t)rs.rewrites, "errors", (json_int_t)pi->refit_errors);
        results_set_real(rj, "recall_factor", rs.k_recall);
        results_set_real(rj, "correction_factor", rs.k_correction);
        results_set_real(rj, "self_factor", rs.k_self);
        json_object_set_new(rj, "self_refits", json_integer(rs.self_refits));
        beside_json(rj, &pi->prof.info.beside, pi->prof.prof.compute_beside);
        json_object_set_new(j, "ioaa_refit", rj);
    }
    return j;
}

const struct policy policy_pulseinfer = {
    .name = "pulseinfer",
    .n_batches = 2,
    .admit = pi_admit,
    .admit_idle = pi_admit_idle,
    .step = pi_step,
    .release = pi_release,
    .traffic = pi_traffic,
    .finish = pi_finish,
    .overlapped = 1,
    .needs_ctx = 1,
    .ctx_kind = POLICY_CTX_OFFLOAD,
    .ctx_create = pi_create,
    .ctx_free = pi_free,
    .offload_of = pi_offload_of,
    .ctx_json = pi_json,
    .offload_schedule = &pulseinfer_schedule,
    .offload_spec_schedule = &pulseinfer_spec_schedule,
    .offload_selection = "solohead",
    .offload_engine = "gather-scatter",
};
