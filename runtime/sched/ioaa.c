/* IO-Adaptive Offloading Admission: the model and the searches (the definitions are in ioaa.h). */
#include "ioaa.h"

#include <math.h>
#include <string.h>

#include "common.h"
#include "mem.h"

struct ioaa {
    struct ioaa_profile p; /* its arrays point into this allocation */
    int max_waiting, irq, no_bound;
    int *order; /* [max_waiting]: sorted position -> caller index */
    size_t bytes;
    /* one search */
    const struct ioaa_state *st;
    const struct ioaa_request *w;
    int n;
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

/* min over the c grid of t_N(b, c): no t_N(b, c) at any c is below it. */
static double t_normal_lo(const struct ioaa *a, double b)
{
    const struct ioaa_profile *p = &a->p;
    double lo = INFINITY;
    for (int j = 0; j < p->tn_nc; j++)
        lo = fmin(lo, interp1(p->tn_b, p->tn + j, p->tn_nc, p->tn_nb, b));
    return lo;
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

/* The step time; lower: t_N replaced by its minimum over c (the search's bound). */
static double step_s(const struct ioaa *a, int bn, int64_t ctx, int bo, int lower, int *depth)
{
    double L = a->p.n_layers, tn = 0, to = 0, tr = 0;
    if (bn > 0) tn = lower ? t_normal_lo(a, bn) : ioaa_t_normal(a, bn, (double)ctx / bn);
    if (bo > 0) {
        to = ioaa_t_offload(a, bo);
        tr = ioaa_t_recall(a, (double)bo * a->p.recall_bytes);
    }
    if (depth) *depth = (bn > 0 && bo > 0) ? (int)ceil(tr / tn) : 0;
    if (bn > 0 && bo > 0 && a->irq) return L * tn + L * to + L * fmax(0, tr - tn);
    return L * tn + L * (to + tr);
}

double ioaa_step_time(const struct ioaa *a, int b_normal, int64_t ctx_sum, int b_offload,
                      int *depth)
{
    return step_s(a, b_normal, ctx_sum, b_offload, 0, depth);
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
    size_t ntn = (size_t)p->tn_nb * p->tn_nc, d = sizeof(double);
    size_t bytes = mem_aligned(sizeof(struct ioaa)) + mem_aligned(p->tn_nb * d) +
                   mem_aligned(p->tn_nc * d) + mem_aligned(ntn * d) + 2 * mem_aligned(p->to_n * d) +
                   2 * mem_aligned(p->tr_n * d) +
                   mem_aligned((size_t)params->max_waiting * sizeof(int));
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
    a->order = mem_carve(&cur, (size_t)params->max_waiting * sizeof(int));
    a->max_waiting = params->max_waiting;
    a->irq = params->irq != 0;
    a->no_bound = params->no_bound != 0;
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
    return throughput(bn + bo, step_s(a, bn, a->st->normal_ctx_sum + ctx, bo, 0, NULL));
}

/* The bound of the node's strict descendants (ioaa.h). A strict descendant admits the next j
 * sorted requests i .. i+j-1 (j >= 1), the first x of them normal and the rest offloaded (x = 0
 * once the node has offloaded one): the pair (j, x) is one descendant, whose bytes and contexts
 * are known, so the bound is the best throughput over the pairs that fit the budgets (exact:
 * the search then enters only the nodes on the way to the best; bound_evaluations says what the
 * bounds cost); -INFINITY when none fits. */
static double bound(struct ioaa *a, int i, int m, int64_t ctx, int64_t gpu, int64_t host, int off)
{
    const int64_t g = a->st->free_gpu_bytes - gpu, h = a->st->free_host_bytes - host;
    const int bn = a->st->normal_count + m, bo = a->st->offload_count + (i - m);
    double ub = -INFINITY;
    int64_t ng = 0, nc = 0; /* GPU bytes and contexts of requests i .. i+x-1 as normal ones */
    for (int x = 0; i + x <= a->n && (x == 0 || !off); x++) {
        if (x > 0) {
            ng += a->w[a->order[i + x - 1]].gpu_normal;
            nc += a->w[a->order[i + x - 1]].context;
        }
        if (ng > g) break; /* more normal ones fit even less */
        int64_t og = 0, oh = 0; /* requests i+x .. i+j-1 offloaded */
        for (int j = PULSE_MAX(x, 1); i + j <= a->n; j++) {
            if (j > x) {
                const struct ioaa_request *r = &a->w[a->order[i + j - 1]];
                og += r->gpu_offload;
                oh += r->host_offload;
            }
            if (ng + og > g || oh > h) break; /* a longer prefix needs every byte of this one */
            a->dec.bound_evaluations++;
            const double st = step_s(a, bn + x, a->st->normal_ctx_sum + ctx + nc, bo + j - x,
                                     0, NULL);
            if (!(st > 0)) return INFINITY;
            ub = fmax(ub, (bn + bo + j) / st);
        }
    }
    return ub;
}

/* Node at depth i: m of the first i sorted requests normal (the rest of them offloaded, off set
 * when any is), using ctx tokens of context and gpu / host bytes. Its children that fit are
 * entered in the order of their subtrees' bounds (the higher first), and one whose bound (its
 * own throughput, or its descendants' bound) is below the best found is pruned unentered. */
static void visit(struct ioaa *a, int i, int m, int64_t ctx, int64_t gpu, int64_t host, int off)
{
    a->dec.nodes_visited++;
    offer(a, eval(a, m, ctx, i), i, m);
    if (i == a->n) return;
    const struct ioaa_request *r = &a->w[a->order[i]];
    /* child 0: request i normal; child 1: offloaded */
    int fits[2] = {1, 1};
    if (off) {
        a->dec.pruned_monotone++;
        fits[0] = 0;
    } else if (gpu + r->gpu_normal > a->st->free_gpu_bytes) {
        a->dec.pruned_memory++;
        fits[0] = 0;
    }
    if (gpu + r->gpu_offload > a->st->free_gpu_bytes ||
        host + r->host_offload > a->st->free_host_bytes) {
        a->dec.pruned_memory++;
        fits[1] = 0;
    }
    const int cm[2] = {m + 1, m};
    const int64_t cctx[2] = {ctx + r->context, ctx};
    const int64_t cgpu[2] = {gpu + r->gpu_normal, gpu + r->gpu_offload};
    const int64_t chost[2] = {host, host + r->host_offload};
    double ub[2] = {INFINITY, INFINITY};
    if (!a->no_bound)
        for (int c = 0; c < 2; c++)
            if (fits[c])
                ub[c] = fmax(eval(a, cm[c], cctx[c], i + 1),
                             bound(a, i + 1, cm[c], cctx[c], cgpu[c], chost[c], c == 1 || off));
    const int first = ub[1] > ub[0] ? 1 : 0;
    for (int t = 0; t < 2; t++) {
        const int c = t == 0 ? first : 1 - first;
        if (!fits[c]) continue;
        if (!a->no_bound && ub[c] * (1 + 1e-12) < a->best_t) {
            a->dec.pruned_bound++;
            continue;
        }
        visit(a, i + 1, cm[c], cctx[c], cgpu[c], chost[c], c == 1 || off);
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
    d->step_s = step_s(a, bn, a->st->normal_ctx_sum + ctx, bo, 0, &d->overlap_depth);
    d->throughput = a->best_t;
    if (out) *out = *d;
}

int ioaa_decide(struct ioaa *a, const struct ioaa_state *st, const struct ioaa_request *w, int n,
                enum ioaa_assign *assign, struct ioaa_decision *out, char *err, size_t errlen)
{
    int rc = begin(a, st, w, n, a->max_waiting, err, errlen);
    if (rc) return rc;
    visit(a, 0, 0, 0, 0, 0, 0);
    finish(a, assign, out);
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
