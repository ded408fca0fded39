/* IO-Adaptive Offloading Admission: the model and the searches (the definitions are in ioaa.h). */
#include "ioaa.h"

#include <math.h>
#include <string.h>

#include "common.h"
#include "mem.h"

struct ioaa {
    struct ioaa_profile p; /* its arrays point into this allocation */
    int max_waiting, irq, no_bound;
    /* t_N's bilinear pieces: in cell (i, j), t_N(b, c) = a + B_b b + B_c c + B_bc b c, and slope
     * holds B_b, B_c, B_bc. b-cell 0 is b <= tn_b[0] (the first row), cell i >= 1 is
     * [tn_b[i-1], tn_b[i]] (the last one extended above); c-cell 0 is c <= tn_c[0] and cell nc
     * is c >= tn_c[nc-1] (both clamped), cell j in 1..nc-1 is [tn_c[j-1], tn_c[j]]. */
    int cells_b, cells_c;
    double *slope;   /* [cells_b * cells_c * 3] */
    double tn_floor; /* the least t_N (tn[0]): no normal batch runs a layer faster */
    double g, k;     /* compute_beside (1 when none) and k = 1 - 1 / g (ioaa.h) */
    /* scratch for max_waiting requests, over the sorted order */
    int *order;                                 /* [max_waiting]: sorted position -> caller index */
    int64_t *pre_gn, *pre_go, *pre_ho, *pre_cx; /* [max_waiting + 1] prefix sums */
    int *omax;                                  /* [max_waiting + 1]: the most cuts a split fits */
    unsigned char *mark;                        /* [max_waiting + 1]: candidate offloaded counts */
    size_t bytes;
    int last_m;    /* the previous decision's normal count (the next search starts there), or -1 */
    int last_edge; /* 1: that count was the most memory admitted */
    /* one search */
    const struct ioaa_state *st;
    const struct ioaa_request *w;
    int n, n_splits; /* n_splits: the normal counts whose normal requests fit, 0 .. n_splits-1 */
    double split0_t; /* split 0's best throughput once visited, else -1 */
    double best_t;
    int best_k, best_m; /* admitted prefix length, of which the first best_m are normal */
    struct ioaa_decision dec;
};

/* ---- the profile ---- */

/* y at q over the points (x[i], y[i * stride]): linear inside, the last segment extended above,
 * the first value below. */
static double interp1(const double *x, const double *y, int stride, int n, double q)
{
    if (n == 1 || q <= x[0]) return y[0];
    int i = 0;
    while (i + 2 < n && q > x[i + 1])
        i++;
    double y0 = y[i * stride], y1 = y[(i + 1) * stride];
    return y0 + (q - x[i]) * (y1 - y0) / (x[i + 1] - x[i]);
}

double ioaa_t_normal(const struct ioaa *a, double b, double c)
{
    const struct ioaa_profile *p = &a->p;
    int nc = p->tn_nc;
    if (nc == 1) return interp1(p->tn_b, p->tn, 1, p->tn_nb, b);
    if (c <= p->tn_c[0]) c = p->tn_c[0];
    if (c >= p->tn_c[nc - 1]) c = p->tn_c[nc - 1];
    int j = 0;
    while (j + 2 < nc && c > p->tn_c[j + 1])
        j++;
    double v = (c - p->tn_c[j]) / (p->tn_c[j + 1] - p->tn_c[j]);
    double r0 = interp1(p->tn_b, p->tn + j, nc, p->tn_nb, b);
    double r1 = interp1(p->tn_b, p->tn + j + 1, nc, p->tn_nb, b);
    return (1 - v) * r0 + v * r1;
}

double ioaa_t_offload(const struct ioaa *a, double b)
{
    return interp1(a->p.to_b, a->p.to, 1, a->p.to_n, b);
}

double ioaa_t_recall(const struct ioaa *a, double bytes)
{
    if (bytes <= 0) return 0;
    return interp1(a->p.tr_bytes, a->p.tr, 1, a->p.tr_n, bytes);
}

double ioaa_compute_beside(const struct ioaa *a)
{
    return a->g;
}

/* The step time of the model (ioaa.h). */
static double step_s(const struct ioaa *a, int bn, int64_t ctx, int bo, int *depth)
{
    double L = a->p.n_layers, tn = 0, to = 0, tr = 0;
    if (bn > 0) tn = ioaa_t_normal(a, bn, (double)ctx / bn);
    if (bo > 0) {
        to = ioaa_t_offload(a, bo);
        tr = ioaa_t_recall(a, (double)bo * a->p.recall_bytes);
    }
    if (depth) *depth = (bn > 0 && bo > 0) ? (int)ceil(tr / tn) : 0;
    if (bn > 0 && bo > 0 && a->irq) {
        const double tk = tn + a->k * tr; /* the normal layers beside the recall */
        return L * tk + L * to + L * fmax(0, tr - tk);
    }
    return L * tn + L * (to + tr);
}

double ioaa_step_time(const struct ioaa *a, int b_normal, int64_t ctx_sum, int b_offload,
                      int *depth)
{
    return step_s(a, b_normal, ctx_sum, b_offload, depth);
}

/* ------------------------------------------------------------------ self-interleaving */

double ioaa_self_period(double pp_a, double cc_a, double o_a, double pp_b, double cc_b, double o_b)
{
    const double link = pp_a + cc_a + pp_b + cc_b, compute = o_a + o_b;
    const double chain_a = fmax(o_a, pp_a) + cc_a, chain_b = fmax(o_b, pp_b) + cc_b;
    return fmax(fmax(link, compute), fmax(chain_a, chain_b));
}

static double throughput(int total, double s)
{
    return total > 0 && s > 0 ? total / s : 0;
}

/* Checks one table axis: n >= 1 points, strictly increasing, finite. */
static int check_grid(const char *name, const double *x, int n, char *err, size_t errlen)
{
    if (n < 1 || !x)
        return pulse_errorf(err, errlen, PULSE_ERR_INVALID, "ioaa profile",
                            "%s: expected at least one point, got %d", name, n);
    for (int i = 0; i < n; i++) {
        if (!isfinite(x[i]))
            return pulse_errorf(err, errlen, PULSE_ERR_INVALID, "ioaa profile",
                                "%s[%d] is not finite", name, i);
        if (i > 0 && !(x[i] > x[i - 1]))
            return pulse_errorf(err, errlen, PULSE_ERR_INVALID, "ioaa profile",
                                "%s must be strictly increasing: [%d] = %g after %g", name, i, x[i],
                                x[i - 1]);
    }
    return PULSE_OK;
}

/* Checks values y[i * stride], i < n: finite, > 0 (or >= 0 when zero_ok), nondecreasing. */
static int check_values(const char *name, const double *y, int stride, int n, int zero_ok,
                        char *err, size_t errlen)
{
    if (!y)
        return pulse_errorf(err, errlen, PULSE_ERR_INVALID, "ioaa profile", "%s: no values", name);
    for (int i = 0; i < n; i++) {
        double v = y[i * stride];
        if (!isfinite(v) || v < 0 || (!zero_ok && v == 0))
            return pulse_errorf(err, errlen, PULSE_ERR_INVALID, "ioaa profile",
                                "%s value %d is %g: expected a finite time %s 0", name, i, v,
                                zero_ok ? ">=" : ">");
        if (i > 0 && v < y[(i - 1) * stride])
            return pulse_errorf(err, errlen, PULSE_ERR_INVALID, "ioaa profile",
                                "%s must be nondecreasing: value %d = %g after %g", name, i, v,
                                y[(i - 1) * stride]);
    }
    return PULSE_OK;
}

static int check_profile(const struct ioaa_profile *p, char *err, size_t errlen)
{
    if (p->n_layers < 1)
        return pulse_errorf(err, errlen, PULSE_ERR_INVALID, "ioaa profile",
                            "n_layers is %d: expected >= 1", p->n_layers);
    if (!isfinite(p->recall_bytes) || p->recall_bytes < 0)
        return pulse_errorf(err, errlen, PULSE_ERR_INVALID, "ioaa profile",
                            "recall_bytes is %g: expected a finite value >= 0", p->recall_bytes);
    if (p->compute_beside != 0 && !(p->compute_beside >= 1 && p->compute_beside <= 64))
        return pulse_errorf(err, errlen, PULSE_ERR_INVALID, "ioaa profile",
                            "compute_beside is %g: expected 0 or 1 (none), or in (1, 64]",
                            p->compute_beside);
    int rc;
    if ((rc = check_grid("t_N batch grid (tn_b)", p->tn_b, p->tn_nb, err, errlen)) ||
        (rc = check_grid("t_N context grid (tn_c)", p->tn_c, p->tn_nc, err, errlen)) ||
        (rc = check_grid("t_O batch grid (to_b)", p->to_b, p->to_n, err, errlen)) ||
        (rc = check_grid("t_R bytes grid (tr_bytes)", p->tr_bytes, p->tr_n, err, errlen)))
        return rc;
    if (!p->tn)
        return pulse_errorf(err, errlen, PULSE_ERR_INVALID, "ioaa profile", "t_N: no values");
    for (int j = 0; j < p->tn_nc; j++)
        if ((rc = check_values("t_N along the batch grid", p->tn + j, p->tn_nc, p->tn_nb, 0, err,
                               errlen)))
            return rc;
    for (int i = 0; i < p->tn_nb; i++)
        if ((rc = check_values("t_N along the context grid", p->tn + (size_t)i * p->tn_nc, 1,
                               p->tn_nc, 0, err, errlen)))
            return rc;
    if ((rc = check_values("t_O", p->to, 1, p->to_n, 0, err, errlen)) ||
        (rc = check_values("t_R", p->tr, 1, p->tr_n, 1, err, errlen)))
        return rc;
    return PULSE_OK;
}

static double *copy_doubles(char **cur, const double *src, size_t n)
{
    double *d = mem_carve(cur, n * sizeof *d);
    memcpy(d, src, n * sizeof *d);
    return d;
}

/* The b-cell and c-cell of a point (struct ioaa). */
static int cell_b(const struct ioaa_profile *p, double b)
{
    if (p->tn_nb == 1 || b <= p->tn_b[0]) return 0;
    int i = 1;
    while (i < p->tn_nb - 1 && b > p->tn_b[i])
        i++;
    return i;
}

static int cell_c(const struct ioaa_profile *p, double c)
{
    const int nc = p->tn_nc;
    if (nc == 1 || c <= p->tn_c[0]) return 0;
    if (c >= p->tn_c[nc - 1]) return nc;
    int j = 1;
    while (c > p->tn_c[j])
        j++;
    return j;
}

/* B_b, B_c, B_bc of every cell, from the four corners ioaa_t_normal interpolates between. */
static void fill_slopes(struct ioaa *a)
{
    const struct ioaa_profile *p = &a->p;
    const int nc = p->tn_nc;
    for (int i = 0; i < a->cells_b; i++)
        for (int j = 0; j < a->cells_c; j++) {
            const int r0 = i > 0 ? i - 1 : 0, r1 = i;
            const int c0 = nc == 1 || j == 0 ? 0 : j == nc ? nc - 1 : j - 1;
            const int c1 = nc == 1 || j == 0 ? 0 : j == nc ? nc - 1 : j;
            const double du = r0 == r1 ? 0 : 1 / (p->tn_b[r1] - p->tn_b[r0]);
            const double dv = c0 == c1 ? 0 : 1 / (p->tn_c[c1] - p->tn_c[c0]);
            const double f00 = p->tn[r0 * nc + c0], f10 = p->tn[r1 * nc + c0];
            const double f01 = p->tn[r0 * nc + c1], f11 = p->tn[r1 * nc + c1];
            const double x = f11 - f10 - f01 + f00;
            double *s = a->slope + ((size_t)i * a->cells_c + j) * 3;
            s[0] = (f10 - f00) * du - x * du * dv * p->tn_c[c0];
            s[1] = (f01 - f00) * dv - x * du * dv * p->tn_b[r0];
            s[2] = x * du * dv;
        }
}

struct ioaa *ioaa_create(const struct ioaa_params *params, char *err, size_t errlen)
{
    if (!params) {
        pulse_errorf(err, errlen, PULSE_ERR_INVALID, "ioaa", "no params");
        return NULL;
    }
    const struct ioaa_profile *p = &params->profile;
    if (check_profile(p, err, errlen)) return NULL;
    if (params->max_waiting < 0) {
        pulse_errorf(err, errlen, PULSE_ERR_INVALID, "ioaa", "max_waiting is %d: expected >= 0",
                     params->max_waiting);
        return NULL;
    }
    const int cells_b = p->tn_nb, cells_c = p->tn_nc == 1 ? 1 : p->tn_nc + 1;
    const size_t ntn = (size_t)p->tn_nb * p->tn_nc, d = sizeof(double);
    const size_t nw = (size_t)params->max_waiting + 1;
    size_t bytes = mem_aligned(sizeof(struct ioaa)) + mem_aligned(p->tn_nb * d) +
                   mem_aligned(p->tn_nc * d) + mem_aligned(ntn * d) + 2 * mem_aligned(p->to_n * d) +
                   2 * mem_aligned(p->tr_n * d) + mem_aligned((size_t)cells_b * cells_c * 3 * d) +
                   mem_aligned((size_t)params->max_waiting * sizeof(int)) +
                   4 * mem_aligned(nw * sizeof(int64_t)) + mem_aligned(nw * sizeof(int)) +
                   mem_aligned(nw);
    char *base = mem_alloc(MEM_HOST, bytes, "ioaa"), *cur = base;
    if (!base) {
        pulse_errorf(err, errlen, PULSE_ERR_NOMEM, "ioaa", "cannot allocate %zu bytes", bytes);
        return NULL;
    }
    struct ioaa *a = mem_carve(&cur, sizeof *a);
    memset(a, 0, sizeof *a);
    a->bytes = bytes;
    a->p = *p;
    a->p.tn_b = copy_doubles(&cur, p->tn_b, p->tn_nb);
    a->p.tn_c = copy_doubles(&cur, p->tn_c, p->tn_nc);
    a->p.tn = copy_doubles(&cur, p->tn, ntn);
    a->p.to_b = copy_doubles(&cur, p->to_b, p->to_n);
    a->p.to = copy_doubles(&cur, p->to, p->to_n);
    a->p.tr_bytes = copy_doubles(&cur, p->tr_bytes, p->tr_n);
    a->p.tr = copy_doubles(&cur, p->tr, p->tr_n);
    a->cells_b = cells_b;
    a->cells_c = cells_c;
    a->slope = mem_carve(&cur, (size_t)cells_b * cells_c * 3 * d);
    fill_slopes(a);
    a->tn_floor = a->p.tn[0];
    a->g = a->p.compute_beside > 1 ? a->p.compute_beside : 1;
    a->k = 1 - 1 / a->g;
    a->order = mem_carve(&cur, (size_t)params->max_waiting * sizeof(int));
    a->pre_gn = mem_carve(&cur, nw * sizeof(int64_t));
    a->pre_go = mem_carve(&cur, nw * sizeof(int64_t));
    a->pre_ho = mem_carve(&cur, nw * sizeof(int64_t));
    a->pre_cx = mem_carve(&cur, nw * sizeof(int64_t));
    a->omax = mem_carve(&cur, nw * sizeof(int));
    a->mark = mem_carve(&cur, nw);
    a->max_waiting = params->max_waiting;
    a->irq = params->irq != 0;
    a->no_bound = params->no_bound != 0;
    a->last_m = -1;
    return a;
}

void ioaa_free(struct ioaa *a)
{
    if (a) mem_free(MEM_HOST, a, a->bytes);
}

/* ---- the searches ---- */

/* Validates the input and sorts a->order by (length, caller index). */
static int begin(struct ioaa *a, const struct ioaa_state *st, const struct ioaa_request *w, int n,
                 int nmax, char *err, size_t errlen)
{
    if (!st || (n > 0 && !w) || n < 0 || n > nmax)
        return pulse_errorf(err, errlen, PULSE_ERR_INVALID, "ioaa",
                            "%d waiting requests: expected 0..%d and a state", n, nmax);
    if (st->normal_count < 0 || st->offload_count < 0 || st->normal_ctx_sum < 0 ||
        st->free_gpu_bytes < 0 || st->free_host_bytes < 0)
        return pulse_errorf(err, errlen, PULSE_ERR_INVALID, "ioaa",
                            "state: counts, context sum and free budgets must be >= 0");
    for (int i = 0; i < n; i++) {
        const struct ioaa_request *r = &w[i];
        if (r->length < 0 || r->context < 0 || r->gpu_normal < 0 || r->gpu_offload < 0 ||
            r->host_offload < 0)
            return pulse_errorf(err, errlen, PULSE_ERR_INVALID, "ioaa",
                                "waiting request %d: length, context and bytes must be >= 0", i);
    }
    for (int i = 0; i < n; i++) {
        int j = i;
        while (j > 0 && w[a->order[j - 1]].length > w[i].length) {
            a->order[j] = a->order[j - 1];
            j--;
        }
        a->order[j] = i;
    }
    a->st = st;
    a->w = w;
    a->n = n;
    a->best_t = -1;
    a->best_k = a->best_m = 0;
    memset(&a->dec, 0, sizeof a->dec);
    return PULSE_OK;
}

/* Keeps (k admitted, m normal) of throughput t when it beats the best under the ties. */
static void offer(struct ioaa *a, double t, int k, int m)
{
    if (t > a->best_t || (t == a->best_t && (k > a->best_k || (k == a->best_k && m > a->best_m)))) {
        a->best_t = t;
        a->best_k = k;
        a->best_m = m;
    }
}

static double eval(const struct ioaa *a, int m, int64_t ctx, int k)
{
    int bn = a->st->normal_count + m, bo = a->st->offload_count + (k - m);
    return throughput(bn + bo, step_s(a, bn, a->st->normal_ctx_sum + ctx, bo, NULL));
}

/* ---- the plans: prefix sums, and what memory admits ---- */

/* Prefix sums over the sorted order, the splits whose normal requests fit (n_splits) and each
 * one's most offloaded requests (omax): a plan (m, o), the first m normal and the next o
 * offloaded, fits iff o <= omax[m], since every request only adds bytes. */
static void plans(struct ioaa *a)
{
    const struct ioaa_state *st = a->st;
    const int n = a->n;
    a->pre_gn[0] = a->pre_go[0] = a->pre_ho[0] = a->pre_cx[0] = 0;
    for (int j = 0; j < n; j++) {
        const struct ioaa_request *r = &a->w[a->order[j]];
        a->pre_gn[j + 1] = a->pre_gn[j] + r->gpu_normal;
        a->pre_go[j + 1] = a->pre_go[j] + r->gpu_offload;
        a->pre_ho[j + 1] = a->pre_ho[j] + r->host_offload;
        a->pre_cx[j + 1] = a->pre_cx[j] + r->context;
    }
    int m_max = 0;
    while (m_max < n && a->pre_gn[m_max + 1] <= st->free_gpu_bytes)
        m_max++;
    int64_t fit = 0;
    for (int m = 0; m <= m_max; m++) {
        int lo = 0, hi = n - m; /* (m, lo) fits; the most that fits is in [lo, hi] */
        while (lo < hi) {
            const int o = lo + (hi - lo + 1) / 2;
            const int fits = a->pre_gn[m] + a->pre_go[m + o] - a->pre_go[m] <= st->free_gpu_bytes &&
                             a->pre_ho[m + o] - a->pre_ho[m] <= st->free_host_bytes;
            if (fits)
                lo = o;
            else
                hi = o - 1;
        }
        a->omax[m] = lo;
        fit += lo + 1;
    }
    a->n_splits = m_max + 1;
    a->split0_t = -1;
    a->dec.pruned_memory = (int64_t)(n + 1) * (n + 2) / 2 - fit;
}

/* Mean context of split m's normal batch (normal_count + m >= 1). */
static double ctx_mean(const struct ioaa *a, int m)
{
    return (double)(a->st->normal_ctx_sum + a->pre_cx[m]) / (a->st->normal_count + m);
}

/* Throughput of the plan (m normal, o offloaded): the model, as the exhaustive search sees it. */
static double plan_t(struct ioaa *a, int m, int o)
{
    a->dec.bound_evaluations++;
    return eval(a, m, a->pre_cx[m], m + o);
}

/* t_R of the offload batch with o of the waiting requests. */
static double recall_o(struct ioaa *a, int o)
{
    const int bo = a->st->offload_count + o;
    a->dec.bound_evaluations++;
    return bo > 0 ? ioaa_t_recall(a, (double)bo * a->p.recall_bytes) : 0;
}

/* ---- candidate offloaded counts ---- */

/* Marks the integers next to x (an offloaded count where a piece of the model ends). */
static void mark_at(struct ioaa *a, double x, int hi)
{
    if (!(x > -3 && x < hi + 3.0)) return;
    const int f = (int)floor(x);
    for (int q = PULSE_MAX(f - 1, 0); q <= PULSE_MIN(f + 2, hi); q++)
        a->mark[q] = 1;
}

/* Clears the marks of 0..hi, then marks 0, 1, hi and the offloaded counts at the t_O and t_R
 * grid points: between two marks both tables are linear in the offloaded count. */
static void mark_tables(struct ioaa *a, int hi)
{
    const struct ioaa_profile *p = &a->p;
    const double o0 = a->st->offload_count;
    memset(a->mark, 0, (size_t)hi + 1);
    a->mark[0] = a->mark[hi] = 1;
    if (hi >= 1) a->mark[1] = 1;
    for (int i = 0; i + 1 < p->to_n; i++)
        mark_at(a, p->to_b[i] - o0, hi);
    if (p->recall_bytes > 0)
        for (int i = 0; i + 1 < p->tr_n; i++)
            mark_at(a, p->tr_bytes[i] / p->recall_bytes - o0, hi);
}

/* Marks where, for o in [lo, hi], the recall round t_R(o) first reaches v(o) = max(v0 + dv o,
 * vmin): the kink of max(t_N, t_R). With dv <= 0, t_R(o) - v(o) only grows, so bisection finds
 * the one crossing (the two integers around it are marked); dv > 0 marks every o. */
static void mark_recall_reaches(struct ioaa *a, int lo, int hi, double v0, double dv, double vmin)
{
    if (lo > hi) return;
    if (dv > 0) {
        memset(a->mark + lo, 1, (size_t)(hi - lo + 1));
        return;
    }
#define IOAA_GAP(o) (recall_o(a, o) - fmax(v0 + dv * (o), vmin))
    if (IOAA_GAP(lo) >= 0) {
        a->mark[lo] = 1;
        return;
    }
    if (IOAA_GAP(hi) < 0) return;
    int l = lo, r = hi;
    while (r - l > 1) {
        const int mid = l + (r - l) / 2;
        if (IOAA_GAP(mid) >= 0)
            r = mid;
        else
            l = mid;
    }
#undef IOAA_GAP
    a->mark[l] = a->mark[r] = 1;
}

/* ---- the nodes ---- */

/* Split m's best cut in closed form: on each stretch between two marked offloaded counts
 * (mark_tables and the kink of max(t_N, t_R)) the step time is linear in o, so the throughput
 * (total) / (step) is monotone there and its best is at a marked end; a stretch whose ends are
 * within 1e-9 of each other is scanned whole, so float rounding cannot hide a tie. Returns
 * the throughput and, in *o_best, the cut (the larger on a tie). */
static double best_cut(struct ioaa *a, int m, int *o_best)
{
    const int hi = a->omax[m], bn = a->st->normal_count + m;
    mark_tables(a, hi);
    if (a->irq && bn > 0) {
        a->dec.bound_evaluations++;
        const double tn = ioaa_t_normal(a, bn, ctx_mean(a, m));
        mark_recall_reaches(a, a->st->offload_count > 0 ? 0 : 1, hi, a->g * tn, 0, 0);
    }
    double best = -1, prev_t = 0;
    int prev = -1;
    *o_best = 0;
    for (int o = 0; o <= hi; o++) {
        if (!a->mark[o]) continue;
        const double t = plan_t(a, m, o);
        if (prev >= 0 && o - prev > 1 && fabs(t - prev_t) <= 1e-9 * fmax(t, prev_t))
            for (int q = prev + 1; q < o; q++) {
                const double tq = plan_t(a, m, q);
                if (tq >= best) {
                    best = tq;
                    *o_best = q;
                }
            }
        if (t >= best) {
            best = t;
            *o_best = o;
        }
        prev = o;
        prev_t = t;
    }
    return best;
}

/* A leaf of the tree: split m, its best cut offered. Returns its throughput. Split 0 is kept:
 * with nothing normal running, a branch holding it is bounded by it (range_bound). */
static double visit_split(struct ioaa *a, int m)
{
    if (m == 0 && a->split0_t >= 0) return a->split0_t;
    int o;
    a->dec.nodes_visited++;
    const double t = best_cut(a, m, &o);
    offer(a, t, m + o, m);
    if (m == 0) a->split0_t = t;
    return t;
}

/* The least t_N(b, c) slopes of cells over a box: B_b, B_c and B_bc, each its min and max. */
static void slope_box(const struct ioaa *a, double b0, double b1, double c0, double c1,
                      double lo[3], double hi[3])
{
    const int i0 = cell_b(&a->p, b0), i1 = cell_b(&a->p, b1);
    const int j0 = cell_c(&a->p, c0), j1 = cell_c(&a->p, c1);
    for (int k = 0; k < 3; k++) {
        lo[k] = INFINITY;
        hi[k] = -INFINITY;
    }
    for (int i = i0; i <= i1; i++)
        for (int j = j0; j <= j1; j++)
            for (int k = 0; k < 3; k++) {
                const double s = a->slope[((size_t)i * a->cells_c + j) * 3 + k];
                lo[k] = fmin(lo[k], s);
                hi[k] = fmax(hi[k], s);
            }
}

/* The slope g of a line through (e, t_N of split e) below t_N of every split m in [lo, hi]
 * (normal_count + lo >= 1; e = lo or hi). Going from split j to j + 1 adds the normal batch one
 * request of context l_j: b grows by 1 and c by dc = c_{j+1} - c_j, so along the segment
 * between the two points t_N grows by B_b + B_c dc + B_bc (the growth of b c, which sums to
 * l_j), each term within its extremes over the cells of the splits' box (the B_bc term less
 * its spread times the part of b c's path that falls, at most max(0, |dc| - l_j)). g is the
 * least mean growth from e (e = lo) or the largest mean fall towards lo (e = hi). */
static double line_slope(struct ioaa *a, int lo, int hi, int e)
{
    if (hi <= lo) return 0;
    const int n0 = a->st->normal_count;
    double cmin = INFINITY, cmax = -INFINITY;
    for (int m = lo; m <= hi; m++) {
        const double c = ctx_mean(a, m);
        cmin = fmin(cmin, c);
        cmax = fmax(cmax, c);
    }
    double sl[3], sh[3];
    slope_box(a, n0 + lo, n0 + hi, cmin, cmax, sl, sh);
    const double spread = sh[2] - sl[2];
    double sum = 0, g = e == lo ? INFINITY : -INFINITY;
    for (int t = 0; t < hi - lo; t++) {
        const int j = e == lo ? lo + t : hi - 1 - t;
        const double dc = ctx_mean(a, j + 1) - ctx_mean(a, j);
        const double l = (double)(a->pre_cx[j + 1] - a->pre_cx[j]);
        const double fall = fmax(0, fabs(dc) - l);
        if (e == lo) {
            sum += sl[0] + fmin(sl[1] * dc, sh[1] * dc) + sl[2] * l - spread * fall;
            g = fmin(g, sum / (t + 1));
        } else {
            sum += sh[0] + fmax(sl[1] * dc, sh[1] * dc) + sh[2] * l + spread * fall;
            g = fmax(g, sum / (t + 1));
        }
    }
    return g;
}

/* A branch of the tree: the splits m1..m2 (e, the end next to the splits already visited).
 * Returns an upper bound of every plan's throughput under it, in closed form: t_N of split m is
 * replaced by lambda(m) = max(t_N(e) + g (m - e), tn_floor) (line_slope), the cut o by any
 * count up to the most any split fits, with m + o up to the most any admits; then for a fixed o
 * the throughput over a real m in [m1, m2] is largest at m1, at the largest m, or where
 * lambda(m) meets t_R(o) or tn_floor, and over o each of those is monotone between the marks
 * (mark_tables, the kinks and where the largest m switches), so the marked o's hold the
 * largest. A split with nothing normal (normal_count = 0, m = 0) has t_N = 0: its best cut is
 * the bound's. */
static double range_bound(struct ioaa *a, int m1, int m2, int e)
{
    const struct ioaa_state *st = a->st;
    double ub = -INFINITY;
    int lo = m1;
    if (st->normal_count == 0 && m1 == 0) { /* split 0 whole: the leaf, visited once */
        ub = visit_split(a, 0);
        if (m2 < 1) return ub;
        lo = 1;
        e = PULSE_MAX(e, 1);
    }
    a->dec.bound_evaluations++;
    const double te = ioaa_t_normal(a, st->normal_count + e, ctx_mean(a, e));
    const double g = line_slope(a, lo, m2, e), fl = a->tn_floor;
    int kmax = 0, omost = 0;
    for (int m = lo; m <= m2; m++) {
        kmax = PULSE_MAX(kmax, m + a->omax[m]);
        omost = PULSE_MAX(omost, a->omax[m]);
    }
    const int hi = PULSE_MIN(omost, kmax - lo), sw = kmax - m2; /* o > sw: m up to kmax - o */
    const int olo = st->offload_count > 0 ? 0 : 1;
    mark_tables(a, hi);
    mark_at(a, sw, hi);
    if (g != 0) mark_at(a, kmax - (e + (fl - te) / g), hi); /* m up to kmax - o meets the floor */
    if (a->irq) { /* the kink: t_R reaching gc times the line */
        const double gc = a->g;
        mark_recall_reaches(a, olo, hi, gc * (te + g * (lo - e)), 0, gc * fl);
        mark_recall_reaches(a, olo, PULSE_MIN(hi, sw), gc * (te + g * (m2 - e)), 0, gc * fl);
        mark_recall_reaches(a, PULSE_MAX(olo, sw), hi, gc * (te + g * (kmax - e)), -gc * g,
                            gc * fl);
        mark_recall_reaches(a, olo, hi, gc * fl, 0, 0);
    }
    const double L = a->p.n_layers, b0 = st->normal_count + st->offload_count;
    for (int o = 0; o <= hi; o++) {
        if (!a->mark[o]) continue;
        const int bo = st->offload_count + o;
        const double to = bo > 0 ? ioaa_t_offload(a, bo) : 0, tr = recall_o(a, o);
        const double mh = PULSE_MIN(m2, kmax - o);
        double cand[4] = {lo, mh, lo, lo};
        if (g != 0) {
            cand[2] = fmin(fmax(e + (tr / a->g - te) / g, lo), mh);
            cand[3] = fmin(fmax(e + (fl - te) / g, lo), mh);
        }
        for (int k = 0; k < 4; k++) {
            const double lam = fmax(te + g * (cand[k] - e), fl);
            const double d = a->irq && bo > 0 ? to + fmax(lam + a->k * tr, tr) : lam + to + tr;
            a->dec.bound_evaluations++;
            ub = fmax(ub, (b0 + cand[k] + o) / (L * d));
        }
    }
    return ub;
}

/* ---- the searches ---- */

/* Where the search starts: with something running, the previous decision's normal count (in
 * serving, consecutive decisions land close), or the most normal requests memory now admits
 * when memory was what bounded the previous one; else (a first decision, or a batch start) the
 * split that admits the most, the most of them normal. */
static int first_split(const struct ioaa *a)
{
    const int last = a->n_splits - 1;
    if (a->last_m >= 0 && a->st->normal_count + a->st->offload_count > 0)
        return a->last_edge ? last : PULSE_MIN(a->last_m, last);
    int k = -1, p = 0;
    for (int m = 0; m <= last; m++)
        if (m + a->omax[m] >= k) {
            k = m + a->omax[m];
            p = m;
        }
    return p;
}

/* The pruned search (ioaa.h): from the first split, each side walks away one split at a time;
 * before each step the rest of that side is bounded as one branch and dropped when the bound is
 * below the best found. A side of at most IOAA_SMALL splits, or one whose throughput rose
 * IOAA_TREND steps in a row (its bound would not prune), steps without bounding. */
#define IOAA_SMALL 1
#define IOAA_TREND 2
static void search(struct ioaa *a)
{
    struct side {
        int dir, next, end, rises;
        double last;
    } s[2];
    const int p = first_split(a), last = a->n_splits - 1;
    const double t0 = visit_split(a, p);
    int ns = 0;
    if (p < last) s[ns++] = (struct side){1, p + 1, last, 0, t0};
    if (p > 0) s[ns++] = (struct side){-1, p - 1, 0, 0, t0};
    while (ns > 0) {
        const int i = ns == 2 && s[1].last > s[0].last ? 1 : 0;
        struct side *d = &s[i];
        const int lo = PULSE_MIN(d->next, d->end), hi = PULSE_MAX(d->next, d->end);
        if (hi - lo + 1 > IOAA_SMALL && d->rises < IOAA_TREND) {
            a->dec.nodes_visited++;
            if (range_bound(a, lo, hi, d->next) * (1 + 1e-12) < a->best_t) {
                a->dec.pruned_bound += hi - lo + 1;
                s[i] = s[--ns];
                continue;
            }
        }
        const double t = visit_split(a, d->next);
        d->rises = t > d->last ? d->rises + 1 : 0;
        d->last = t;
        if (d->next == d->end)
            s[i] = s[--ns];
        else
            d->next += d->dir;
    }
}

/* The unpruned search: every plan that fits, each one a node. */
static void search_all(struct ioaa *a)
{
    for (int m = 0; m < a->n_splits; m++)
        for (int o = 0; o <= a->omax[m]; o++) {
            a->dec.nodes_visited++;
            offer(a, eval(a, m, a->pre_cx[m], m + o), m + o, m);
        }
}

/* Writes the best (k, m) out in the caller's order. */
static void finish(struct ioaa *a, enum ioaa_assign *assign, struct ioaa_decision *out)
{
    struct ioaa_decision *d = &a->dec;
    int64_t ctx = 0;
    d->gpu_bytes = d->host_bytes = 0;
    for (int j = 0; j < a->n; j++) {
        const struct ioaa_request *r = &a->w[a->order[j]];
        enum ioaa_assign as = j >= a->best_k  ? IOAA_WAIT
                              : j < a->best_m ? IOAA_NORMAL
                                              : IOAA_OFFLOAD;
        if (as == IOAA_NORMAL) {
            ctx += r->context;
            d->gpu_bytes += r->gpu_normal;
        } else if (as == IOAA_OFFLOAD) {
            d->gpu_bytes += r->gpu_offload;
            d->host_bytes += r->host_offload;
        }
        if (assign) assign[a->order[j]] = as;
    }
    d->n_normal = a->best_m;
    d->n_offload = a->best_k - a->best_m;
    int bn = a->st->normal_count + d->n_normal, bo = a->st->offload_count + d->n_offload;
    d->step_s = step_s(a, bn, a->st->normal_ctx_sum + ctx, bo, &d->overlap_depth);
    d->throughput = a->best_t;
    if (out) *out = *d;
}

int ioaa_decide(struct ioaa *a, const struct ioaa_state *st, const struct ioaa_request *w, int n,
                enum ioaa_assign *assign, struct ioaa_decision *out, char *err, size_t errlen)
{
    int rc = begin(a, st, w, n, a->max_waiting, err, errlen);
    if (rc) return rc;
    plans(a);
    if (a->no_bound)
        search_all(a);
    else
        search(a);
    finish(a, assign, out);
    a->last_m = a->best_m;
    a->last_edge = a->best_m == a->n_splits - 1;
    return PULSE_OK;
}

int ioaa_decide_exhaustive(struct ioaa *a, const struct ioaa_state *st,
                           const struct ioaa_request *w, int n, enum ioaa_assign *assign,
                           struct ioaa_decision *out, char *err, size_t errlen)
{
    int rc = begin(a, st, w, n, PULSE_MIN(a->max_waiting, IOAA_EXHAUSTIVE_MAX), err, errlen);
    if (rc) return rc;
    int64_t total = 1;
    for (int j = 0; j < n; j++)
        total *= 3;
    for (int64_t code = 0; code < total; code++) {
        a->dec.nodes_visited++;
        int64_t c = code, gpu = 0, host = 0, ctx = 0;
        int k = 0, m = 0, ok = 1, waited = 0, off = 0;
        for (int j = 0; j < n && ok; j++, c /= 3) {
            const struct ioaa_request *r = &w[a->order[j]];
            int digit = (int)(c % 3); /* the request at sorted position j */
            if (digit == IOAA_WAIT) {
                waited = 1;
                continue;
            }
            if (waited || (digit == IOAA_NORMAL && off)) {
                a->dec.pruned_monotone++;
                ok = 0;
                break;
            }
            k++;
            if (digit == IOAA_NORMAL) {
                m++;
                ctx += r->context;
                gpu += r->gpu_normal;
            } else {
                off = 1;
                gpu += r->gpu_offload;
                host += r->host_offload;
            }
        }
        if (!ok) continue;
        if (gpu > st->free_gpu_bytes || host > st->free_host_bytes) {
            a->dec.pruned_memory++;
            continue;
        }
        offer(a, eval(a, m, ctx, k), k, m);
    }
    finish(a, assign, out);
    return PULSE_OK;
}

int ioaa_set_recall(struct ioaa *a, const double *tr, int n, char *err, size_t errlen)
{
    if (n != a->p.tr_n)
        return pulse_errorf(err, errlen, PULSE_ERR_INVALID, "ioaa recall table",
                            "%d values, expected %d (the profile's t_R points)", n, a->p.tr_n);
    for (int i = 0; i < a->p.tr_n; i++)
        if (!isfinite(tr[i]) || tr[i] < 0 || (i > 0 && tr[i] < tr[i - 1]))
            return pulse_errorf(err, errlen, PULSE_ERR_INVALID, "ioaa recall table",
                                "tr[%d] = %g: expected finite values >= 0, nondecreasing", i,
                                tr[i]);
    memcpy((double *)a->p.tr, tr, sizeof *tr * (size_t)a->p.tr_n);
    return PULSE_OK;
}
