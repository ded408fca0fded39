/* The calibrated perturbation of the misprediction model (locality_spec.h, parts 2 and 3). */
#include "locality_spec.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "mem.h"
#include "numeric.h"

#define PI_D 3.14159265358979323846
#define SPEC_MAX_THREADS 16
#define REFINE_TOL 0.005 /* a layer's calibration is refined while it misses by more */
#define MAX_EVALS 4
#define MIN_LISTS 64 /* calib_queries 0: enough queries for this many exact lists */

#define N_KEYFRAMES 8 /* the persistence table: keyframes every 0.5, 1, 2, .. 64 steps */

enum {
    TAG_SPEC = 0x73706563,       /* fresh noise of (request, layer, step) */
    TAG_SPEC_KEY = 0x73706b66,   /* keyframe noise of (request, layer, keyframe), and phase */
    TAG_SPEC_CAL = 0x73636c6e,   /* calibration sample s's noise */
    TAG_SPEC_Q = 0x73637171,     /* calibration sample s's query */
    TAG_SPEC_CKEY = 0x73636b66,  /* calibration stream's keyframe noise */
    TAG_SPEC_CZ = 0x73637a7a,    /* calibration stream's exact query steps */
    TAG_SPEC_CHURN = 0x73636368, /* calibration stream's churn draws */
};

struct locality_spec {
    struct locality_spec_params p;
    uint64_t seed, prof_hash; /* prof_hash: the generator's churn model (spec_key) */
    int nq, hd;
    double *angle_tab, *over_tab;    /* [calib_points] */
    struct locality_spec_layer *lay; /* [n_layers] */
    int64_t *calls;                  /* [n_layers] locality_spec_q calls */
    int queries;                     /* per key set, resolved */
    int threads;                     /* the calibration's (0: reused) */
    int reused;                      /* the process's earlier calibration of the same key */
    double seconds;
    void *mem;
    size_t mem_bytes;
};

/* ------------------------------------------------------------------ the perturbation */

/* The noise of one approximate query: element i is c0 U(s0, i) + c1 U(s1, i) (c1 = 0: U(s0, i)
 * alone, the fresh noise). */
struct noise {
    uint64_t s0, s1;
    float c0, c1;
};

static uint64_t noise_seed(uint64_t seed, uint64_t tag, uint64_t id, uint64_t a, uint64_t b)
{
    return pulse_seed_mix(pulse_seed_mix(seed, tag, id), a, b);
}

/* The noise of (id, layer, step) with keyframes every K steps (header comment, part 2); K <= 0:
 * fresh noise of tag fresh. */
static struct noise noise_of(uint64_t seed, uint64_t fresh, uint64_t key, uint64_t id, int layer,
                             int32_t step, double K)
{
    if (!(K > 0.0))
        return (struct noise){noise_seed(seed, fresh, id, (uint64_t)layer, (uint64_t)step), 0, 1.0f,
                              0.0f};
    const double phase =
        0.5 * (pulse_uniform(noise_seed(seed, key, id, (uint64_t)layer, ~0ull), 0) + 1.0);
    const double x = (double)step / K + phase, k = floor(x), w = x - k;
    return (struct noise){noise_seed(seed, key, id, (uint64_t)layer, (uint64_t)k),
                          noise_seed(seed, key, id, (uint64_t)layer, (uint64_t)k + 1),
                          (float)cos(0.5 * PI_D * w), (float)sin(0.5 * PI_D * w)};
}

static float noise_at(const struct noise *n, uint64_t i)
{
    if (n->c1 == 0.0f) return pulse_uniform(n->s0, i);
    return n->c0 * pulse_uniform(n->s0, i) + n->c1 * pulse_uniform(n->s1, i);
}

static void perturb(const uint16_t *q, uint16_t *out, int nq, int hd, double a,
                    const struct noise *zn)
{
    if (a == 0.0) {
        memcpy(out, q, sizeof(uint16_t) * (size_t)nq * hd);
        return;
    }
    const float ca = (float)cos(a), sa = (float)sin(a);
    float u[SELECT_MAX_HEAD_DIM], z[SELECT_MAX_HEAD_DIM];
    for (int g = 0; g < nq; g++) {
        const uint16_t *qg = q + (size_t)g * hd;
        uint16_t *og = out + (size_t)g * hd;
        double ss = 0.0;
        for (int c = 0; c < hd; c++) {
            u[c] = bf16_to_f32(qg[c]);
            ss += (double)u[c] * u[c];
        }
        if (!(ss > 0.0)) { /* no direction to turn */
            memcpy(og, qg, sizeof(uint16_t) * (size_t)hd);
            continue;
        }
        const float r = (float)sqrt(ss), inv = (float)(1.0 / sqrt(ss));
        double dot = 0.0;
        for (int c = 0; c < hd; c++) {
            u[c] *= inv;
            z[c] = noise_at(zn, (uint64_t)g * hd + c);
            dot += (double)z[c] * u[c];
        }
        double zz = 0.0;
        for (int c = 0; c < hd; c++) {
            z[c] -= (float)dot * u[c];
            zz += (double)z[c] * z[c];
        }
        const float zi = zz > 0.0 ? (float)(1.0 / sqrt(zz)) : 0.0f;
        for (int c = 0; c < hd; c++)
            og[c] = f32_to_bf16(r * (ca * u[c] + sa * z[c] * zi));
    }
}

void locality_spec_q(struct locality_spec *S, int layer, int64_t req_id, int32_t step,
                     const uint16_t *q, uint16_t *q_out)
{
    PULSE_CHECK(layer >= 0 && layer < S->p.n_layers, "locality_spec_q: layer out of range");
    const struct locality_spec_layer *y = &S->lay[layer];
    const double a = y->target < 0 ? 0.0 : y->angle;
    const struct noise zn =
        noise_of(S->seed, TAG_SPEC, TAG_SPEC_KEY, (uint64_t)req_id, layer, step, y->keyframe);
    perturb(q, q_out, S->nq, S->hd, a, &zn);
    S->calls[layer]++;
}

/* ------------------------------------------------------------------ calibration */

/* The sample and what the work items share (create only). */
struct cal {
    struct locality_spec *S;
    struct locality *L; /* read only: its churn profile and angle table */
    const struct locality_profile *prof;
    struct select_cfg cfg; /* max_blocks = nb */
    int nb, nl, ms, ndh, queries, n_samples, n_tok;
    uint16_t *dig;   /* [calib_keys][nb][ndh][2][hd] */
    int32_t *ident;  /* [nb] */
    uint16_t *base;  /* [n_samples][nq][hd] */
    int32_t *ex_sel; /* [n_samples][nl][ms] */
    int32_t *ex_cnt; /* [n_samples][nl] */
    /* work items */
    int phase, n_items;
    double item_target[LOC_MAX_LAYERS]; /* phase 2: distinct targets */
    int item_layer[LOC_MAX_LAYERS];     /* phase 3: layers with a persistence target */
    struct locality_spec_layer item_out[LOC_MAX_LAYERS];
    pthread_mutex_t mu;
    int next;
};

/* One thread's scratch. */
struct worker {
    struct cal *c;
    uint16_t *q;
    float *scores;
    int32_t *sel, *cnt;
    /* phase 3: a stream's unit query state and its bf16 query; the exact lists of two steps
     * [2][nl][ms] and counts [2][nl]; the approximate lists [N_KEYFRAMES][2][nl][ms], counts */
    float *qf;
    uint16_t *qe;
    int32_t *ex, *exn, *ap, *apn;
};

static struct digest_view dv_of(const struct cal *c, int s, const int32_t *zero)
{
    const int k = s / c->queries;
    const size_t page = (size_t)c->ndh * 2 * c->S->hd;
    return (struct digest_view){c->dig + (size_t)k * c->nb * page, c->ident, zero, c->ndh,
                                c->S->hd};
}

static void select_one(struct worker *w, int s, const uint16_t *q, int32_t *sel, int32_t *cnt)
{
    const struct cal *c = w->c;
    const int32_t zero = 0, ntok = c->n_tok;
    const struct digest_view dv = dv_of(c, s, &zero);
    select_blocks_ref(NULL, &c->cfg, q, &dv, &ntok, w->scores, sel, cnt, 1, c->S->p.sel_head);
}

/* The pooled overlap of the approximate selections at angle a with the exact ones. */
static double eval_angle(struct worker *w, double a)
{
    const struct cal *c = w->c;
    const struct locality_spec *S = c->S;
    const size_t qn = (size_t)S->nq * S->hd;
    int64_t hits = 0, exact = 0;
    for (int s = 0; s < c->n_samples; s++) {
        const struct noise zn = {noise_seed(S->seed, TAG_SPEC_CAL, (uint64_t)s, 0, 0), 0, 1.0f,
                                 0.0f};
        perturb(c->base + s * qn, w->q, S->nq, S->hd, a, &zn);
        select_one(w, s, w->q, w->sel, w->cnt);
        for (int l = 0; l < c->nl; l++) {
            const size_t e = (size_t)s * c->nl + l;
            int n;
            hits += select_overlap(c->nb, c->cfg.sink, c->cfg.window, c->ex_sel + e * c->ms,
                                   c->ex_cnt[e], w->sel + (size_t)l * c->ms, w->cnt[l], &n);
            exact += n;
        }
    }
    return exact ? (double)hits / (double)exact : 1.0;
}

/* The angle of target t and the overlap there (header comment, part 3). */
static void calibrate_target(struct worker *w, double t, struct locality_spec_layer *out)
{
    const struct locality_spec *S = w->c->S;
    const int J = S->p.calib_points;
    const double *A = S->angle_tab, *O = S->over_tab;
    memset(out, 0, sizeof *out);
    out->target = t;
    if (t >= 1.0) { /* the exact query */
        out->achieved = 1.0;
        return;
    }
    int j = 1;
    while (j < J && O[j] > t)
        j++;
    if (j == J) { /* below what the table reaches */
        out->clipped = 1;
        out->angle = A[J - 1];
        out->achieved = eval_angle(w, out->angle);
        out->evals = 1;
        return;
    }
    double la = A[j - 1], lo = O[j - 1], ha = A[j], ho = O[j]; /* lo > t >= ho */
    double best_err = INFINITY;
    for (int e = 0; e < MAX_EVALS; e++) {
        const double a = ho < lo ? la + (lo - t) / (lo - ho) * (ha - la) : ha;
        const double o = eval_angle(w, a);
        out->evals++;
        if (fabs(o - t) < best_err) best_err = fabs(o - t), out->angle = a, out->achieved = o;
        if (best_err <= REFINE_TOL) break;
        if (o > t)
            la = a, lo = o;
        else
            ha = a, ho = o;
    }
}

/* q <- cos(th) q + sin(th) z, z = the part of U[-1, 1)^hd (stream zs, elements off..)
 * orthogonal to q, normalised (the generator's step, locality.c). */
static void stream_advance(float *q, int hd, float ca, float sa, uint64_t zs, uint64_t off)
{
    float z[SELECT_MAX_HEAD_DIM];
    double dot = 0.0, zz = 0.0, qq = 0.0;
    for (int c = 0; c < hd; c++) {
        z[c] = pulse_uniform(zs, off + (uint64_t)c);
        dot += (double)z[c] * q[c];
    }
    for (int c = 0; c < hd; c++) {
        z[c] -= (float)dot * q[c];
        zz += (double)z[c] * z[c];
    }
    const float zi = zz > 0.0 ? (float)(1.0 / sqrt(zz)) : 0.0f;
    for (int c = 0; c < hd; c++) {
        q[c] = ca * q[c] + sa * z[c] * zi;
        qq += (double)q[c] * q[c];
    }
    const float qi = (float)(1.0 / sqrt(qq));
    for (int c = 0; c < hd; c++)
        q[c] *= qi;
}

/* Step t of calibration stream k's exact query at layer into w->qe: t = 0 is sample k's query
 * (make_sample), every later step turns each KV head's query heads by the angle of churn `churn`
 * (< 0: a churn drawn from the layer's profile, as the generator's streams do; locality.h,
 * part 2). */
static void stream_step(struct worker *w, int k, int layer, int t, double churn)
{
    const struct cal *c = w->c;
    const struct locality_spec *S = c->S;
    const int hd = S->hd, nkv = S->p.sel.n_kv_heads, G = S->nq / nkv;
    const size_t qn = (size_t)S->nq * hd;
    const float scale = sqrtf((float)hd) * locality_get_params(c->L)->q_scale;
    if (t == 0) {
        const uint16_t *b = c->base + (size_t)k * c->queries * qn;
        for (int g = 0; g < S->nq; g++) {
            double ss = 0.0;
            for (int d = 0; d < hd; d++) {
                const float v = bf16_to_f32(b[(size_t)g * hd + d]);
                w->qf[(size_t)g * hd + d] = v, ss += (double)v * v;
            }
            const float inv = (float)(1.0 / sqrt(ss));
            for (int d = 0; d < hd; d++)
                w->qf[(size_t)g * hd + d] *= inv;
        }
    } else {
        const uint64_t zs = noise_seed(S->seed, TAG_SPEC_CZ, (uint64_t)k, (uint64_t)layer, t);
        const uint64_t ts = noise_seed(S->seed, TAG_SPEC_CHURN, (uint64_t)k, (uint64_t)layer, t);
        for (int h = 0; h < nkv; h++) {
            double th = PI_D / 2;
            if (churn >= 0)
                th = locality_theta_for_churn(c->L, churn);
            else if (!c->prof->dense[layer])
                th = locality_theta_for_churn(
                    c->L, locality_profile_quantile(c->prof, layer,
                                                    0.5 * (pulse_uniform(ts, (uint64_t)h) + 1.0)));
            const float ca = (float)cos(th), sa = (float)sin(th);
            for (int g = h * G; g < (h + 1) * G; g++)
                stream_advance(w->qf + (size_t)g * hd, hd, ca, sa, zs, (uint64_t)g * hd);
        }
    }
    for (size_t i = 0; i < qn; i++)
        w->qe[i] = f32_to_bf16(w->qf[i] * scale);
}

/* The calibration streams of layer (exact churn `churn`, as stream_step) at angle a with
 * keyframes every K[j] steps (j < nk): per spacing the step-to-step counts (acc[j]) and the
 * overlap counts (hit[j] of exact[j]). The exact stream and the noise are the same for every
 * spacing. */
static void eval_streams(struct worker *w, int layer, double churn, double a, const double *K,
                         int nk, struct select_persist *acc, int64_t *hit, int64_t *exact)
{
    const struct cal *c = w->c;
    const struct locality_spec *S = c->S;
    const int nl = c->nl, ms = c->ms, sink = c->cfg.sink, win = c->cfg.window;
    const size_t L2 = (size_t)nl * ms;
    for (int j = 0; j < nk; j++)
        acc[j] = (struct select_persist){0}, hit[j] = exact[j] = 0;
    for (int k = 0; k < S->p.calib_keys; k++) {
        const int s = k * c->queries; /* key set k's sample */
        for (int t = 0; t <= S->p.calib_steps; t++) {
            const int cur = t & 1, prv = cur ^ 1;
            stream_step(w, k, layer, t, churn);
            int32_t *ex = w->ex + cur * L2, *exn = w->exn + cur * nl;
            const int32_t *ep = w->ex + prv * L2, *epn = w->exn + prv * nl;
            select_one(w, s, w->qe, ex, exn);
            for (int j = 0; j < nk; j++) {
                const struct noise zn =
                    noise_of(S->seed, TAG_SPEC_CAL, TAG_SPEC_CKEY, (uint64_t)k, layer, t, K[j]);
                perturb(w->qe, w->q, S->nq, S->hd, a, &zn);
                int32_t *ap = w->ap + (2 * (size_t)j + cur) * L2,
                        *apn = w->apn + (2 * (size_t)j + cur) * nl;
                const int32_t *pp = w->ap + (2 * (size_t)j + prv) * L2,
                              *ppn = w->apn + (2 * (size_t)j + prv) * nl;
                select_one(w, s, w->q, ap, apn);
                for (int l = 0; l < nl; l++) {
                    int n;
                    hit[j] += select_overlap(c->nb, sink, win, ex + l * ms, exn[l], ap + l * ms,
                                             apn[l], &n);
                    exact[j] += n;
                    if (t > 0)
                        select_persist_add(c->nb, sink, win, ex + l * ms, exn[l], ap + l * ms,
                                           apn[l], ep + l * ms, epn[l], pp + l * ms, ppn[l],
                                           &acc[j]);
                }
            }
        }
    }
}

static double miss_persistence(const struct select_persist *p)
{
    return p->missed ? (double)p->missed_again / (double)p->missed : 0.0;
}

/* The keyframe spacing of layer for its persistence target (header comment, part 4). */
static void calibrate_persist(struct worker *w, int layer)
{
    struct locality_spec_layer *y = &w->c->S->lay[layer];
    if (!(y->angle > 0.0)) return; /* the exact query: nothing to miss (fresh noise) */
    double K[N_KEYFRAMES], P[N_KEYFRAMES], logk;
    struct select_persist acc[N_KEYFRAMES];
    int64_t hit[N_KEYFRAMES], ex[N_KEYFRAMES];
    for (int j = 0; j < N_KEYFRAMES; j++)
        K[j] = ldexp(0.5, j);
    const double churn = w->c->S->p.persist_churn[layer];
    eval_streams(w, layer, churn, y->angle, K, N_KEYFRAMES, acc, hit, ex);
    for (int j = 0; j < N_KEYFRAMES; j++) /* non-decreasing */
        y->persist_table[j] = P[j] = PULSE_MAX(miss_persistence(&acc[j]), j ? P[j - 1] : 0.0);
    const double t = y->persist_target;
    if (t <= P[0]) {
        logk = -1.0, y->persist_clipped = t < P[0];
    } else if (t >= P[N_KEYFRAMES - 1]) {
        logk = N_KEYFRAMES - 2, y->persist_clipped = t > P[N_KEYFRAMES - 1];
    } else {
        int j = 1;
        while (P[j] < t)
            j++;
        logk = j - 2 + (t - P[j - 1]) / (P[j] - P[j - 1]);
    }
    y->keyframe = exp2(logk);
    eval_streams(w, layer, churn, y->angle, &y->keyframe, 1, &y->calib, hit, ex);
    y->calib_overlap = ex[0] ? (double)hit[0] / (double)ex[0] : 1.0;
    if (churn >= 0) /* and at the generator's churn of the layer */
        eval_streams(w, layer, -1.0, y->angle, &y->keyframe, 1, &y->calib_gen, hit, ex);
    else
        y->calib_gen = y->calib;
}

static void do_item(struct worker *w, int i)
{
    struct cal *c = w->c;
    struct locality_spec *S = c->S;
    const size_t qn = (size_t)S->nq * S->hd;
    if (c->phase == 0)
        select_one(w, i, c->base + i * qn, c->ex_sel + (size_t)i * c->nl * c->ms,
                   c->ex_cnt + (size_t)i * c->nl);
    else if (c->phase == 1)
        S->over_tab[i + 1] = eval_angle(w, S->angle_tab[i + 1]);
    else if (c->phase == 2)
        calibrate_target(w, c->item_target[i], &c->item_out[i]);
    else
        calibrate_persist(w, c->item_layer[i]);
}

static void *work(void *arg)
{
    struct worker *w = arg;
    struct cal *c = w->c;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        const int i = c->next < c->n_items ? c->next++ : -1;
        pthread_mutex_unlock(&c->mu);
        if (i < 0) return NULL;
        do_item(w, i);
    }
}

/* Runs the phase's n items on the workers (each result is its item's alone). */
static void run_phase(struct cal *c, struct worker *ws, int T, int phase, int n)
{
    pthread_t th[SPEC_MAX_THREADS];
    c->phase = phase, c->n_items = n, c->next = 0;
    int started = 0; /* a thread that cannot start leaves its items to the others */
    for (int k = 1; k < T; k++)
        started += pthread_create(&th[started], NULL, work, &ws[k]) == 0;
    work(&ws[0]);
    for (int k = 0; k < started; k++)
        pthread_join(th[k], NULL);
}

/* Standard normal by Box-Muller on elements (2i, 2i+1) of stream s. */
static float gauss(uint64_t s, uint64_t i)
{
    float u1 = 0.5f * (pulse_uniform(s, 2 * i) + 1.0f);
    float u2 = 0.5f * (pulse_uniform(s, 2 * i + 1) + 1.0f);
    return sqrtf(-2.0f * logf(1.0f - u1)) * cosf(6.283185307f * u2);
}

/* The sample: digests of the key sets and the queries. */
static void make_sample(struct cal *c, struct locality *L, const int *sparse, int n_sparse,
                        float q_scale)
{
    const struct locality_spec *S = c->S;
    const int32_t zero = 0;
    for (int k = 0; k < S->p.calib_keys; k++) {
        const struct digest_view dv = dv_of(c, k * c->queries, &zero);
        locality_build_calib_digests(L, &dv, c->n_tok, k, sparse[k % n_sparse], SELECT_HEADWISE);
    }
    const float scale = sqrtf((float)S->hd) * q_scale;
    float v[SELECT_MAX_HEAD_DIM];
    for (int s = 0; s < c->n_samples; s++)
        for (int g = 0; g < S->nq; g++) {
            const uint64_t qs = noise_seed(S->seed, TAG_SPEC_Q, (uint64_t)s, (uint64_t)g, 0);
            double ss = 0.0;
            for (int d = 0; d < S->hd; d++) {
                v[d] = gauss(qs, (uint64_t)d);
                ss += (double)v[d] * v[d];
            }
            const float inv = (float)(1.0 / sqrt(ss));
            uint16_t *dst = c->base + ((size_t)s * S->nq + g) * S->hd;
            for (int d = 0; d < S->hd; d++)
                dst[d] = f32_to_bf16(v[d] * inv * scale);
        }
}

static int threads_for(const struct locality_spec_params *p)
{
    long n = p->calib_threads;
    if (n <= 0) n = PULSE_MIN(sysconf(_SC_NPROCESSORS_ONLN), SPEC_MAX_THREADS);
    return (int)PULSE_MAX(1, PULSE_MIN(n, SPEC_MAX_THREADS));
}

/* Bytes of the calibration's memory; with base, carves it into c and ws. */
static size_t cal_carve(struct cal *c, int T, char *base, struct worker *ws)
{
    const struct locality_spec *S = c->S;
    const size_t qn = (size_t)S->nq * S->hd, page = (size_t)c->ndh * 2 * S->hd;
    char *m = base;
    struct cal t;
    t.dig = mem_carve(&m, (size_t)S->p.calib_keys * c->nb * page * 2);
    t.ident = mem_carve(&m, (size_t)c->nb * 4);
    t.base = mem_carve(&m, (size_t)c->n_samples * qn * 2);
    t.ex_sel = mem_carve(&m, (size_t)c->n_samples * c->nl * c->ms * 4);
    t.ex_cnt = mem_carve(&m, (size_t)c->n_samples * c->nl * 4);
    const size_t L2 = (size_t)c->nl * c->ms;
    for (int k = 0; k < T; k++) {
        struct worker w;
        memset(&w, 0, sizeof w);
        w.c = c;
        w.q = mem_carve(&m, qn * 2);
        w.scores = mem_carve(&m, (size_t)c->nl * c->nb * 4);
        w.sel = mem_carve(&m, L2 * 4);
        w.cnt = mem_carve(&m, (size_t)c->nl * 4);
        w.qf = mem_carve(&m, qn * 4);
        w.qe = mem_carve(&m, qn * 2);
        w.ex = mem_carve(&m, 2 * L2 * 4);
        w.exn = mem_carve(&m, 2 * (size_t)c->nl * 4);
        w.ap = mem_carve(&m, 2 * N_KEYFRAMES * L2 * 4);
        w.apn = mem_carve(&m, 2 * N_KEYFRAMES * (size_t)c->nl * 4);
        if (base) ws[k] = w;
    }
    if (base) {
        c->dig = t.dig, c->ident = t.ident, c->base = t.base;
        c->ex_sel = t.ex_sel, c->ex_cnt = t.ex_cnt;
        for (int i = 0; i < c->nb; i++)
            c->ident[i] = i;
    }
    return (size_t)(m - base);
}

/* The table and every layer's angle. */
static int calibrate(struct locality_spec *S, struct locality *L, char *err, size_t errlen)
{
    const struct locality_spec_params *p = &S->p;
    const int J = p->calib_points;
    for (int j = 0; j < J; j++) {
        const double f = (double)j / (J - 1);
        S->angle_tab[j] = PI_D * f * f;
    }
    S->over_tab[0] = 1.0;
    struct cal *c = mem_alloc(MEM_HOST, sizeof *c, "speculation calibration");
    if (!c) goto oom;
    memset(c, 0, sizeof *c);
    c->S = S;
    c->L = L;
    c->prof = locality_get_profile(L);
    c->n_tok = p->calib_tokens;
    c->nb = PULSE_CEIL_DIV(p->calib_tokens, p->sel.block_size);
    c->cfg = p->sel;
    c->cfg.max_blocks = c->nb;
    c->nl = select_n_lists(&c->cfg, p->sel_head);
    c->ms = select_list_stride(&c->cfg);
    c->ndh = p->sel.n_kv_heads; /* head-wise and mean keep every head */
    c->queries = p->calib_queries ? p->calib_queries
                                  : PULSE_MAX(2, PULSE_CEIL_DIV(MIN_LISTS, p->calib_keys * c->nl));
    c->n_samples = p->calib_keys * c->queries;
    S->queries = c->queries;
    int sparse[LOC_MAX_LAYERS], n_sparse = 0;
    for (int l = 0; l < p->n_layers; l++) {
        if (p->target[l] < 0) continue;
        sparse[n_sparse++] = l;
        int i = 0; /* distinct targets */
        while (i < c->n_items && c->item_target[i] != p->target[l])
            i++;
        if (i == c->n_items) c->item_target[c->n_items++] = p->target[l];
    }
    const int n_targets = c->n_items;
    const int T = threads_for(p);
    struct worker ws[SPEC_MAX_THREADS];
    const size_t bytes = cal_carve(c, T, NULL, NULL);
    char *m = n_sparse ? mem_alloc(MEM_HOST, bytes, "speculation calibration sample") : NULL;
    if (n_sparse && !m) goto oom;
    if (n_sparse) {
        cal_carve(c, T, m, ws);
        make_sample(c, L, sparse, n_sparse, locality_get_params(L)->q_scale);
        pthread_mutex_init(&c->mu, NULL);
        run_phase(c, ws, T, 0, c->n_samples);
        run_phase(c, ws, T, 1, J - 1);
        for (int j = 1; j < J; j++) /* non-increasing */
            S->over_tab[j] = PULSE_MIN(S->over_tab[j], S->over_tab[j - 1]);
        run_phase(c, ws, T, 2, n_targets);
    }
    int n_persist = 0;
    for (int l = 0; l < p->n_layers; l++) {
        memset(&S->lay[l], 0, sizeof S->lay[l]);
        S->lay[l].target = -1.0;
        for (int i = 0; i < n_targets && p->target[l] >= 0; i++)
            if (c->item_target[i] == p->target[l]) S->lay[l] = c->item_out[i];
        S->lay[l].persist_target = -1.0;
        if (p->target[l] >= 0 && p->persist_target[l] >= 0) {
            S->lay[l].persist_target = p->persist_target[l];
            c->item_layer[n_persist++] = l;
        }
    }
    if (n_sparse) {
        run_phase(c, ws, T, 3, n_persist);
        pthread_mutex_destroy(&c->mu);
        S->threads = T;
    }
    mem_free(MEM_HOST, m, bytes);
    mem_free(MEM_HOST, c, sizeof *c);
    return PULSE_OK;
oom:
    mem_free(MEM_HOST, c, sizeof *c);
    snprintf(err, errlen, "speculation: out of host memory for the calibration");
    return PULSE_ERR_NOMEM;
}

/* ------------------------------------------------------------------ the process's tables */

/* The calibrations this process made, by what they are a pure function of (a sweep makes many
 * sources of one shape): the params (threads aside) and the generator's key model. A key is
 * zeroed before it is filled, so memcmp compares it. */
struct spec_key {
    struct locality_spec_params p;
    uint64_t seed, prof_hash;
    int key_dirs;
    float key_noise, key_strength_sigma, q_scale;
};

#define SPEC_CACHE 8

static struct {
    pthread_mutex_t mu;
    int n, next;
    struct spec_key key[SPEC_CACHE];
    double angle[SPEC_CACHE][64], over[SPEC_CACHE][64];
    struct locality_spec_layer lay[SPEC_CACHE][LOC_MAX_LAYERS];
    int queries[SPEC_CACHE];
} spec_cache = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void key_of(const struct locality_spec *S, const struct locality *L, struct spec_key *k)
{
    const struct locality_params *lp = locality_get_params(L);
    memset(k, 0, sizeof *k); /* field by field: the padding stays zero */
    k->p.sel = S->p.sel;     /* ints only */
    k->p.sel.max_blocks = 0;
    k->p.sel_head = S->p.sel_head, k->p.n_layers = S->p.n_layers;
    memcpy(k->p.target, S->p.target, sizeof k->p.target);
    k->p.calib_tokens = S->p.calib_tokens, k->p.calib_keys = S->p.calib_keys;
    k->p.calib_queries = S->p.calib_queries, k->p.calib_points = S->p.calib_points;
    memcpy(k->p.persist_target, S->p.persist_target, sizeof k->p.persist_target);
    memcpy(k->p.persist_churn, S->p.persist_churn, sizeof k->p.persist_churn);
    k->p.calib_steps = S->p.calib_steps;
    k->prof_hash = S->prof_hash;
    k->seed = lp->seed, k->key_dirs = lp->key_dirs, k->key_noise = lp->key_noise;
    k->key_strength_sigma = lp->key_strength_sigma, k->q_scale = lp->q_scale;
}

/* With copy_in: the cached calibration of k into S (1), or 0 when there is none; else S's
 * calibration into the cache. */
static int cache_use(struct locality_spec *S, const struct spec_key *k, int copy_in)
{
    const size_t J = (size_t)S->p.calib_points, nl = (size_t)S->p.n_layers;
    int hit = 0;
    pthread_mutex_lock(&spec_cache.mu);
    if (copy_in) {
        for (int i = 0; i < spec_cache.n && !hit; i++)
            if (!memcmp(&spec_cache.key[i], k, sizeof *k)) {
                memcpy(S->angle_tab, spec_cache.angle[i], J * sizeof(double));
                memcpy(S->over_tab, spec_cache.over[i], J * sizeof(double));
                memcpy(S->lay, spec_cache.lay[i], nl * sizeof *S->lay);
                S->queries = spec_cache.queries[i];
                hit = 1;
            }
    } else {
        const int i = spec_cache.n < SPEC_CACHE ? spec_cache.n++ : spec_cache.next++ % SPEC_CACHE;
        spec_cache.key[i] = *k;
        memcpy(spec_cache.angle[i], S->angle_tab, J * sizeof(double));
        memcpy(spec_cache.over[i], S->over_tab, J * sizeof(double));
        memcpy(spec_cache.lay[i], S->lay, nl * sizeof *S->lay);
        spec_cache.queries[i] = S->queries;
    }
    pthread_mutex_unlock(&spec_cache.mu);
    return hit;
}

/* ------------------------------------------------------------------ create / free */

void locality_spec_params_init(struct locality_spec_params *p, const struct select_cfg *sel,
                               int sel_head, int n_layers)
{
    memset(p, 0, sizeof *p);
    p->sel = *sel;
    p->sel_head = sel_head;
    p->n_layers = n_layers;
    for (int l = 0; l < LOC_MAX_LAYERS; l++)
        p->target[l] = -1.0;
    p->calib_tokens = PULSE_MIN(2048, sel->max_blocks * sel->block_size);
    p->calib_keys = 16;
    p->calib_queries = 0;
    p->calib_points = 16;
    for (int l = 0; l < LOC_MAX_LAYERS; l++)
        p->persist_target[l] = p->persist_churn[l] = -1.0;
    p->calib_steps = 8;
}

/* FNV-1a of n bytes into h. */
static uint64_t fnv(uint64_t h, const void *v, size_t n)
{
    const unsigned char *b = v;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* What the persistence calibration's exact streams depend on besides the key model: the
 * generator's churn profile (levels, quantiles, dense layers) and its angle table. */
static uint64_t churn_model_hash(const struct locality *L)
{
    const struct locality_profile *f = locality_get_profile(L);
    struct locality_calib cal;
    locality_get_calib(L, &cal);
    uint64_t h = fnv(0xcbf29ce484222325ull, &f->n_levels, sizeof f->n_levels);
    h = fnv(h, f->levels, sizeof(double) * (size_t)f->n_levels);
    for (int l = 0; l < f->n_layers; l++)
        h = fnv(h, f->churn[l], sizeof(double) * (size_t)f->n_levels);
    h = fnv(h, f->dense, (size_t)f->n_layers);
    h = fnv(h, cal.theta, sizeof(double) * (size_t)cal.n);
    return fnv(h, cal.churn, sizeof(double) * (size_t)cal.n);
}

static const char *params_why(const struct locality_spec_params *p, const struct locality *L)
{
    const struct locality_params *lp = locality_get_params(L);
    if (p->sel_head != SELECT_HEADWISE && p->sel_head != SELECT_MEAN)
        return "sel_head must be SELECT_HEADWISE or SELECT_MEAN";
    if (p->sel.n_heads != lp->sel.n_heads || p->sel.n_kv_heads != lp->sel.n_kv_heads ||
        p->sel.head_dim != lp->sel.head_dim || p->sel.block_size != lp->sel.block_size)
        return "sel's heads, head_dim and block size must be the generator's";
    if (p->n_layers != lp->n_layers) return "n_layers must be the generator's";
    for (int l = 0; l < p->n_layers; l++) {
        if (!(p->target[l] < 0 || p->target[l] <= 1.0)) return "a target is above 1";
        if (!(p->persist_target[l] < 0 || p->persist_target[l] <= 1.0))
            return "a persistence target is above 1";
        if (!(p->persist_churn[l] < 0 || p->persist_churn[l] <= 1.0))
            return "a persistence churn is above 1";
    }
    if (p->calib_steps < 2 || p->calib_steps > 64) return "calib_steps must be in 2..64";
    if (p->calib_tokens < 1 ||
        PULSE_CEIL_DIV(p->calib_tokens, p->sel.block_size) > SELECT_MAX_BLOCKS)
        return "calib_tokens must be >= 1 and its blocks <= SELECT_MAX_BLOCKS";
    if (p->calib_keys < 1 || p->calib_keys > 256) return "calib_keys must be in 1..256";
    if (p->calib_queries < 0 || p->calib_queries > 256) return "calib_queries must be in 0..256";
    if (p->calib_points < 3 || p->calib_points > 64) return "calib_points must be in 3..64";
    if (p->calib_threads < 0 || p->calib_threads > 1024) return "calib_threads must be in 0..1024";
    return NULL;
}

struct locality_spec *locality_spec_create(struct locality *L, const struct locality_spec_params *p,
                                           char *err, size_t errlen)
{
    char why[192];
    if (select_cfg_check(&p->sel, why, sizeof why) != 0) {
        snprintf(err, errlen, "speculation: %s", why);
        return NULL;
    }
    const char *bad = params_why(p, L);
    if (bad) {
        snprintf(err, errlen, "speculation: %s", bad);
        return NULL;
    }
    const double t0 = pulse_now();
    struct locality_spec *S = mem_alloc(MEM_HOST, sizeof *S, "speculation");
    if (!S) goto oom;
    memset(S, 0, sizeof *S);
    S->p = *p;
    S->seed = locality_get_params(L)->seed;
    S->prof_hash = churn_model_hash(L);
    S->nq = p->sel.n_heads, S->hd = p->sel.head_dim;
    const size_t J = (size_t)p->calib_points, nl = (size_t)p->n_layers;
    const size_t sz[] = {J * 8, J * 8, nl * sizeof(struct locality_spec_layer), nl * 8};
    size_t off[PULSE_ARRAY_LEN(sz)], total = 0;
    for (size_t i = 0; i < PULSE_ARRAY_LEN(sz); i++)
        off[i] = total, total += (sz[i] + 63) / 64 * 64;
    char *m = mem_alloc(MEM_HOST, total, "speculation state");
    if (!m) goto oom;
    memset(m, 0, total);
    S->mem = m, S->mem_bytes = total;
    S->angle_tab = (double *)(m + off[0]), S->over_tab = (double *)(m + off[1]);
    S->lay = (struct locality_spec_layer *)(m + off[2]), S->calls = (int64_t *)(m + off[3]);
    struct spec_key key;
    key_of(S, L, &key);
    if (!locality_get_params(L)->calib_fresh && cache_use(S, &key, 1)) {
        S->reused = 1;
    } else {
        if (calibrate(S, L, err, errlen) != PULSE_OK) {
            locality_spec_free(S);
            return NULL;
        }
        cache_use(S, &key, 0);
    }
    S->seconds = pulse_now() - t0;
    return S;
oom:
    snprintf(err, errlen, "speculation: out of host memory");
    locality_spec_free(S);
    return NULL;
}

void locality_spec_free(struct locality_spec *S)
{
    if (!S) return;
    mem_free(MEM_HOST, S->mem, S->mem_bytes);
    mem_free(MEM_HOST, S, sizeof *S);
}

/* ------------------------------------------------------------------ introspection */

void locality_spec_get_layer(const struct locality_spec *S, int layer,
                             struct locality_spec_layer *out)
{
    PULSE_CHECK(layer >= 0 && layer < S->p.n_layers, "locality_spec_get_layer: layer out of range");
    *out = S->lay[layer];
}

/* The means of p: {"steps", "miss", "wrong", "churn_exact", "churn_approx"}. */
static json_t *persist_json(const struct select_persist *p)
{
    const double n = p->steps ? (double)p->steps : 1.0;
    return json_pack("{s:I, s:f, s:f, s:f, s:f}", "steps", (json_int_t)p->steps, "miss",
                     miss_persistence(p), "wrong",
                     p->wrong ? (double)p->wrong_again / (double)p->wrong : 0.0, "churn_exact",
                     p->churn_exact / n, "churn_approx", p->churn_approx / n);
}

json_t *locality_spec_to_json(const struct locality_spec *S)
{
    const struct locality_spec_params *p = &S->p;
    json_t *ang = json_array(), *ov = json_array(), *layers = json_array();
    for (int j = 0; j < p->calib_points; j++) {
        json_array_append_new(ang, json_real(S->angle_tab[j]));
        json_array_append_new(ov, json_real(S->over_tab[j]));
    }
    for (int l = 0; l < p->n_layers; l++) {
        const struct locality_spec_layer *y = &S->lay[l];
        if (y->target < 0) continue;
        json_t *e = json_pack("{s:i, s:f, s:f, s:f, s:b, s:i, s:I}", "layer", l, "target_overlap",
                              y->target, "angle", y->angle, "calib_overlap", y->achieved, "clipped",
                              y->clipped, "evals", y->evals, "calls", (json_int_t)S->calls[l]);
        json_object_set_new(e, "keyframe_steps", json_real(y->keyframe));
        if (y->persist_target >= 0) {
            json_t *tab = json_array();
            for (int j = 0; j < N_KEYFRAMES; j++)
                json_array_append_new(tab, json_real(y->persist_table[j]));
            json_t *pe = json_pack("{s:f, s:f, s:b, s:o, s:o, s:o}", "target_miss",
                                   y->persist_target, "churn", p->persist_churn[l], "clipped",
                                   y->persist_clipped, "calib", persist_json(&y->calib),
                                   "calib_gen", persist_json(&y->calib_gen), "table_miss", tab);
            json_object_set_new(json_object_get(pe, "calib"), "overlap",
                                json_real(y->calib_overlap));
            json_object_set_new(e, "persistence", pe);
        }
        json_array_append_new(layers, e);
    }
    json_t *kf = json_array();
    for (int j = 0; j < N_KEYFRAMES; j++)
        json_array_append_new(kf, json_real(ldexp(0.5, j)));
    json_t *cal =
        json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:b, s:f, s:f, s:o, s:o}", "selection",
                  p->sel_head == SELECT_MEAN ? "mean" : "headwise", "tokens", p->calib_tokens,
                  "keys", p->calib_keys, "queries", S->queries, "points", p->calib_points,
                  "threads", S->threads, "reused", S->reused, "seconds", S->seconds,
                  "refine_tolerance", REFINE_TOL, "angle", ang, "overlap", ov);
    json_object_set_new(cal, "persistence",
                        json_pack("{s:i, s:i, s:o}", "streams", p->calib_keys, "steps",
                                  p->calib_steps, "keyframe_steps", kf));
    return json_pack(
        "{s:s, s:s, s:o, s:o}", "perturbation",
        "q_g -> |q_g| (cos(a) u + sin(a) z), z the part orthogonal to u of noise of (request, "
        "layer, step); a per layer from calibration",
        "noise",
        "keyframe_steps K > 0: keyframe noises e_k of (request, layer, k), z from cos(pi w / 2) "
        "e_k + sin(pi w / 2) e_(k+1) at x = step / K + phase(request, layer) = k + w, K per "
        "layer calibrated to the target persistence of the misses; K = 0: fresh noise of "
        "(request, layer, step)",
        "calibration", cal, "layers", layers);
}
