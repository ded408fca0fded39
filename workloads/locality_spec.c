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

enum {
    TAG_SPEC = 0x73706563,     /* noise of (request, layer, step) */
    TAG_SPEC_CAL = 0x73636c6e, /* calibration sample s's noise */
    TAG_SPEC_Q = 0x73637171,   /* calibration sample s's query */
};

struct locality_spec {
    struct locality_spec_params p;
    uint64_t seed;
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

static void perturb(const uint16_t *q, uint16_t *out, int nq, int hd, double a, uint64_t zs)
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
            z[c] = pulse_uniform(zs, (uint64_t)g * hd + c);
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

static uint64_t noise_seed(uint64_t seed, uint64_t tag, uint64_t id, uint64_t a, uint64_t b)
{
    return pulse_seed_mix(pulse_seed_mix(seed, tag, id), a, b);
}

void locality_spec_q(struct locality_spec *S, int layer, int64_t req_id, int32_t step,
                     const uint16_t *q, uint16_t *q_out)
{
    PULSE_CHECK(layer >= 0 && layer < S->p.n_layers, "locality_spec_q: layer out of range");
    const double a = S->lay[layer].target < 0 ? 0.0 : S->lay[layer].angle;
    perturb(q, q_out, S->nq, S->hd, a,
            noise_seed(S->seed, TAG_SPEC, (uint64_t)req_id, (uint64_t)layer, (uint64_t)step));
    S->calls[layer]++;
}

/* ------------------------------------------------------------------ calibration */

/* The sample and what the work items share (create only). */
struct cal {
    struct locality_spec *S;
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
        perturb(c->base + s * qn, w->q, S->nq, S->hd, a,
                noise_seed(S->seed, TAG_SPEC_CAL, (uint64_t)s, 0, 0));
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
    else
        calibrate_target(w, c->item_target[i], &c->item_out[i]);
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
    for (int k = 0; k < T; k++) {
        struct worker w = {c, NULL, NULL, NULL, NULL};
        w.q = mem_carve(&m, qn * 2);
        w.scores = mem_carve(&m, (size_t)c->nl * c->nb * 4);
        w.sel = mem_carve(&m, (size_t)c->nl * c->ms * 4);
        w.cnt = mem_carve(&m, (size_t)c->nl * 4);
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
    c->n_tok = p->calib_tokens;
    c->nb = PULSE_CEIL_DIV(p->calib_tokens, p->sel.block_size);
    c->cfg = p->sel;
    c->cfg.max_blocks = c->nb;
    c->nl = select_n_lists(&c->cfg, p->sel_head);
    c->ms = select_max_selected(&c->cfg);
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
        pthread_mutex_destroy(&c->mu);
        S->threads = T;
    }
    for (int l = 0; l < p->n_layers; l++) {
        S->lay[l] = (struct locality_spec_layer){-1.0, 0.0, 0.0, 0, 0};
        for (int i = 0; i < n_targets && p->target[l] >= 0; i++)
            if (c->item_target[i] == p->target[l]) S->lay[l] = c->item_out[i];
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
    uint64_t seed;
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
    for (int l = 0; l < p->n_layers; l++)
        if (!(p->target[l] < 0 || p->target[l] <= 1.0)) return "a target is above 1";
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
        json_array_append_new(
            layers, json_pack("{s:i, s:f, s:f, s:f, s:b, s:i, s:I}", "layer", l, "target_overlap",
                              y->target, "angle", y->angle, "calib_overlap", y->achieved, "clipped",
                              y->clipped, "evals", y->evals, "calls", (json_int_t)S->calls[l]));
    }
    json_t *cal =
        json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:b, s:f, s:f, s:o, s:o}", "selection",
                  p->sel_head == SELECT_MEAN ? "mean" : "headwise", "tokens", p->calib_tokens,
                  "keys", p->calib_keys, "queries", S->queries, "points", p->calib_points,
                  "threads", S->threads, "reused", S->reused, "seconds", S->seconds,
                  "refine_tolerance", REFINE_TOL, "angle", ang, "overlap", ov);
    return json_pack("{s:s, s:o, s:o}", "perturbation",
                     "q_g -> |q_g| (cos(a) u + sin(a) z), z orthogonal noise of (request, layer, "
                     "step); a per layer from calibration",
                     "calibration", cal, "layers", layers);
}
