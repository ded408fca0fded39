/* IOAA's recall terms refitted online (ioaa_refit.h). */
#include "ioaa_refit.h"

#include <math.h>
#include <string.h>

#include "common.h"
#include "mem.h"

struct ioaa_refit {
    struct ioaa *base; /* the unfolded profile's tables (interpolation only) */
    int irq, enabled, spec, n_layers;
    double alpha, r, prefetch, correction, window;
    double r0;       /* the decision table's r (its grid's unit: the profile's, or the fold's) */
    int bytes_moved; /* ioaa_refit_set_bytes changed the bytes since the last table written */
    struct ioaa_beside beside;
    double k_r, k_c;             /* the factors */
    double k_s;                  /* the self-interleaved step's */
    double written_r, written_c; /* the factors of the last table written */
    int tr_n;                    /* the decision table's points */
    double *tr; /* [3 tr_n]: the table written, then (exact) the profile's values and grid */
    struct ioaa_refit_stats st;
};

struct ioaa_refit *ioaa_refit_create(const struct ioaa_refit_params *p, char *err, size_t errlen)
{
    const char *what = "ioaa refit";
    if (!p || !p->base) {
        pulse_errorf(err, errlen, PULSE_ERR_INVALID, what, "no profile");
        return NULL;
    }
    const double alpha = p->alpha > 0 ? p->alpha : IOAA_REFIT_ALPHA;
    const int spec = p->prefetch_bytes > 0 || p->correction_bytes > 0;
    char bwhy[160] = "";
    if (!(alpha <= 1) || !(p->prefetch_bytes >= 0) || !(p->correction_bytes >= 0) ||
        !(p->window >= 0 && p->window <= 1) || !isfinite(p->prefetch_bytes + p->correction_bytes) ||
        ioaa_beside_check(&p->beside, bwhy, sizeof bwhy) || (spec && p->max_batch < 1)) {
        pulse_errorf(err, errlen, PULSE_ERR_INVALID, what,
                     "alpha %g, prefetch %g and correction %g bytes, window %g, max batch %d%s%s: "
                     "expected alpha in (0, 1], finite bytes >= 0, a window in [0, 1], a valid "
                     "beside and, with speculation, a batch >= 1",
                     p->alpha, p->prefetch_bytes, p->correction_bytes, p->window, p->max_batch,
                     bwhy[0] ? ", beside: " : "", bwhy);
        return NULL;
    }
    const struct ioaa_params ip = {.profile = *p->base, .irq = p->irq};
    char why[256];
    struct ioaa *base = ioaa_create(&ip, why, sizeof why);
    if (!base) {
        pulse_errorf(err, errlen, PULSE_ERR_INVALID, what, "%s", why);
        return NULL;
    }
    struct ioaa_refit *r = mem_alloc(MEM_HOST, sizeof *r, "ioaa refit");
    const int tr_n = spec ? PULSE_MIN(p->max_batch, IOAA_PROFILE_MAX_POINTS) : p->base->tr_n;
    double *tr = r ? mem_alloc(MEM_HOST, sizeof *tr * 3 * (size_t)tr_n, "ioaa refit table") : NULL;
    if (!tr) {
        mem_free(MEM_HOST, r, sizeof *r);
        ioaa_free(base);
        pulse_errorf(err, errlen, PULSE_ERR_NOMEM, what, "out of host memory");
        return NULL;
    }
    memset(r, 0, sizeof *r);
    r->base = base;
    r->irq = p->irq != 0;
    r->enabled = p->enabled != 0;
    r->spec = spec;
    r->n_layers = p->base->n_layers;
    r->alpha = alpha;
    r->r = r->r0 = p->base->recall_bytes;
    r->prefetch = p->prefetch_bytes;
    r->correction = p->correction_bytes;
    r->beside = p->beside;
    r->window = p->window > 0 ? p->window : 1;
    r->k_r = r->k_c = r->written_r = r->written_c = r->k_s = 1;
    r->tr_n = tr_n;
    r->tr = tr;
    /* the unfolded t_R values and grid, for the exact table */
    for (int i = 0; i < tr_n && !spec; i++) {
        tr[tr_n + i] = p->base->tr[i];
        tr[2 * tr_n + i] = p->base->tr_bytes[i];
    }
    r->st.k_recall = r->st.k_correction = r->st.k_self = 1;
    return r;
}

void ioaa_refit_free(struct ioaa_refit *r)
{
    if (!r) return;
    ioaa_free(r->base);
    mem_free(MEM_HOST, r->tr, sizeof *r->tr * 3 * (size_t)r->tr_n);
    mem_free(MEM_HOST, r, sizeof *r);
}

/* One layer's terms of a composition: t_N, t_O, and the recall's pieces (exact: rr = t_R(b r);
 * speculation: pp = t_R(b P) alone, f its rate beside compute, g the compute's slowdown beside
 * it, cc = t_R(b C)), unscaled. */
struct terms {
    double tn, to, rr, pp, f, g, cc;
};

static struct terms terms_of(const struct ioaa_refit *r, int bn, int64_t ctx, int bo)
{
    struct terms t = {0, 0, 0, 0, 1, ioaa_compute_beside(r->base), 0};
    if (bn > 0) t.tn = ioaa_t_normal(r->base, bn, (double)ctx / bn);
    if (bo > 0) {
        t.to = ioaa_t_offload(r->base, bo);
        if (r->spec) {
            t.pp = ioaa_t_recall(r->base, bo * r->prefetch);
            t.f = ioaa_beside_rate(&r->beside, bo * r->prefetch);
            t.g = ioaa_beside_slow(&r->beside, bo * r->prefetch, t.g);
            t.cc = ioaa_t_recall(r->base, bo * r->correction);
        } else {
            t.rr = ioaa_t_recall(r->base, bo * r->r);
        }
    }
    return t;
}

/* The prefetch's part of a layer's recall term at factor kr: what it adds to the window's
 * compute (ioaa_overlap). */
static double prefetch_of(const struct ioaa_refit *r, const struct terms *t, double kr)
{
    const double wo = r->window * t->to;
    return ioaa_overlap(wo, kr * t->pp, t->f, t->g) - wo;
}

/* The recall term of one layer at factors (kr, kc). */
static double recall_of(const struct ioaa_refit *r, const struct terms *t, double kr, double kc)
{
    if (!r->spec) return kr * t->rr;
    return kc * t->cc + prefetch_of(r, t, kr);
}

static int overlapped(const struct ioaa_refit *r, int bn, int bo)
{
    return bn > 0 && bo > 0 && r->irq;
}

static double step_of(const struct ioaa_refit *r, const struct terms *t, int bn, int bo, double x)
{
    const double L = r->n_layers;
    if (overlapped(r, bn, bo)) { /* ioaa.h: the normal layers k x longer beside the recall */
        const double tk = t->tn + (1 - 1 / ioaa_compute_beside(r->base)) * x;
        return L * (tk + t->to + fmax(0, x - tk));
    }
    return L * t->tn + L * (t->to + x);
}

double ioaa_refit_step(const struct ioaa_refit *r, int b_normal, int64_t ctx_sum, int b_offload,
                       int refit)
{
    const struct terms t = terms_of(r, b_normal, ctx_sum, b_offload);
    const double kr = refit ? r->k_r : 1, kc = refit ? r->k_c : 1;
    return step_of(r, &t, b_normal, b_offload, recall_of(r, &t, kr, kc));
}

/* The self model's step at the recall factors (kr, kc), before k_S. */
static double self_model(const struct ioaa_refit *r, int b_offload, double kr, double kc)
{
    const int h[2] = {(b_offload + 1) / 2, b_offload / 2};
    double pp[2], cc[2], o[2];
    for (int i = 0; i < 2; i++) {
        const struct terms t = terms_of(r, 0, 0, h[i]);
        pp[i] = r->spec ? kr * t.pp / t.f : 0;
        cc[i] = r->spec ? kc * t.cc : kr * t.rr;
        o[i] = t.to;
    }
    return r->n_layers * ioaa_self_period(pp[0], cc[0], o[0], pp[1], cc[1], o[1]);
}

double ioaa_refit_self_step(const struct ioaa_refit *r, int b_offload, int refit)
{
    if (b_offload < 2) return ioaa_refit_step(r, 0, 0, b_offload, refit);
    if (!refit) return self_model(r, b_offload, 1, 1);
    return r->k_s * self_model(r, b_offload, r->k_r, r->k_c);
}

static double clamp_k(double k)
{
    return fmin(IOAA_REFIT_K_MAX, fmax(IOAA_REFIT_K_MIN, k));
}

int ioaa_refit_observe(struct ioaa_refit *r, int b_normal, int64_t ctx_sum, int b_offload,
                       double measured_s)
{
    if (!r->enabled || b_offload <= 0 || !(measured_s > 0) || !isfinite(measured_s)) return 0;
    const struct terms t = terms_of(r, b_normal, ctx_sum, b_offload);
    const double per_layer = measured_s / r->n_layers;
    const double x_now = recall_of(r, &t, r->k_r, r->k_c);
    double x; /* X*: the recall term that makes the model's step the measured one */
    if (overlapped(r, b_normal, b_offload)) {
        /* per layer t_O + max(X, t_N + k X): X past g t_N binds, else the normal layers' k X */
        const double g = ioaa_compute_beside(r->base), k = 1 - 1 / g;
        if (per_layer - t.to >= g * t.tn)
            x = per_layer - t.to;
        else if (k > 0 && per_layer > t.tn + t.to)
            x = (per_layer - t.to - t.tn) / k;
        else if (x_now > g * t.tn)
            x = g * t.tn; /* hidden, where the model had it exposed */
        else
            x = -1; /* hidden as modelled: says nothing */
    } else {
        x = per_layer - t.tn - t.to;
    }
    if (!(x > 0) || !(t.rr > 0 || t.pp > 0 || t.cc > 0)) {
        r->st.uninformative++;
        return 0;
    }
    double kr = r->k_r, kc = r->k_c;
    if (!r->spec) {
        kr = x / t.rr;
    } else {
        /* The prefetch outlasts the window's slowed compute (ioaa_overlap's second case): its
         * term is p + g w (1 - f) - w, linear in p = k_R t_R(P), so X* gives p directly. */
        const double wo = r->window * t.to, g = t.g;
        const double p = x - kc * t.cc + wo - g * wo * (1 - t.f);
        const int binds = t.pp > 0 && (kr * t.pp / t.f > g * wo || !(t.cc > 0));
        if (binds && p / t.f >= g * wo)
            kr = p / t.pp;
        else if (t.cc > 0) /* the corrections, beside what the prefetch adds now */
            kc = (x - prefetch_of(r, &t, kr)) / t.cc;
        else if (g > 1) /* no corrections, the compute outlasts the prefetch: its slowdown */
            kr = x * t.f / (t.pp * (1 - 1 / g));
    }
    const double a = r->alpha;
    r->k_r = (1 - a) * r->k_r + a * clamp_k(kr);
    r->k_c = (1 - a) * r->k_c + a * clamp_k(kc);
    r->st.refits++;
    r->st.k_recall = r->k_r;
    r->st.k_correction = r->k_c;
    return 1;
}

int ioaa_refit_observe_self(struct ioaa_refit *r, int b_offload, double measured_s)
{
    if (!r->enabled || b_offload < 2 || !(measured_s > 0) || !isfinite(measured_s)) return 0;
    const double s = self_model(r, b_offload, r->k_r, r->k_c);
    if (!(s > 0)) {
        r->st.uninformative++;
        return 0;
    }
    r->k_s = (1 - r->alpha) * r->k_s + r->alpha * clamp_k(measured_s / s);
    r->st.self_refits++;
    r->st.k_self = r->k_s;
    return 1;
}

int ioaa_refit_set_bytes(struct ioaa_refit *r, double recall, double prefetch, double correction,
                         char *err, size_t errlen)
{
    if (!(recall >= 0 && prefetch >= 0 && correction >= 0) ||
        !isfinite(recall + prefetch + correction) ||
        (r->spec && !(prefetch + correction > 0)) || (!r->spec && prefetch + correction > 0))
        return pulse_errorf(err, errlen, PULSE_ERR_INVALID, "ioaa refit bytes",
                            "recall %g, prefetch %g, correction %g: expected finite bytes >= 0, "
                            "%s",
                            recall, prefetch, correction,
                            r->spec ? "some prefetch or correction (speculation)"
                                    : "no prefetch or correction (exact at layer)");
    const int moved = recall != r->r || prefetch != r->prefetch || correction != r->correction;
    r->r = recall;
    r->prefetch = prefetch;
    r->correction = correction;
    r->bytes_moved |= moved;
    return PULSE_OK;
}

int ioaa_refit_apply(struct ioaa_refit *r, struct ioaa *a, char *err, size_t errlen)
{
    if (!r->bytes_moved && fabs(r->k_r / r->written_r - 1) <= IOAA_REFIT_TOL &&
        fabs(r->k_c / r->written_c - 1) <= IOAA_REFIT_TOL)
        return 0;
    if (r->spec) {
        double top = 0; /* the fold's running maximum */
        for (int i = 0; i < r->tr_n; i++) {
            top = fmax(top, ioaa_spec_recall(r->base, i + 1, r->prefetch, r->correction, &r->beside,
                                             r->window, r->k_r, r->k_c));
            r->tr[i] = top;
        }
    } else if (r->r == r->r0 || !(r->r0 > 0)) {
        for (int i = 0; i < r->tr_n; i++) /* the profile's values at its grid, times k_R */
            r->tr[i] = r->k_r * r->tr[r->tr_n + i];
    } else { /* the decision's t_R(b r0) is a round of b r: its grid's bytes scaled by r / r0 */
        const double s = r->r / r->r0;
        for (int i = 0; i < r->tr_n; i++)
            r->tr[i] = r->k_r * ioaa_t_recall(r->base, s * r->tr[2 * r->tr_n + i]);
    }
    const int rc = ioaa_set_recall(a, r->tr, r->tr_n, err, errlen);
    if (rc != PULSE_OK) return rc;
    r->written_r = r->k_r;
    r->written_c = r->k_c;
    r->bytes_moved = 0;
    r->st.rewrites++;
    return 1;
}

void ioaa_refit_get_stats(const struct ioaa_refit *r, struct ioaa_refit_stats *s)
{
    *s = r->st;
}
