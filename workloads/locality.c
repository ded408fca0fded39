/* The locality generator (locality.h, part 2): structured synthetic keys, per-layer query
 * streams and the churn calibration that maps a target churn to a step angle. */
#include "locality.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "mem.h"
#include "numeric.h"
#include "progress.h"

#define PI_D 3.14159265358979323846

/* Counter-RNG stream tags. */
enum {
    TAG_KEYS = 0x6b657973,     /* prompt keys of (request, layer, head) */
    TAG_CAL_KEYS = 0x636b6579, /* calibration keys of (stream, layer, head) */
    TAG_QINIT = 0x71303030,    /* step-0 query of (request, layer, head) */
    TAG_Z = 0x7a7a7a7a,        /* innovations of (request, layer, step) */
    TAG_TARGET = 0x74677274,   /* target churn draws of (request, layer, step) */
    TAG_CAL_Q = 0x63713030,    /* calibration stream's step-0 query */
    TAG_CAL_Z = 0x637a7a7a,    /* calibration stream's innovations */
};

/* Scratch of the key writer: one per thread that writes keys (the generator's own, and one per
 * calibration worker). */
struct key_scratch {
    float *dirs;    /* [nkv][D][hd] key directions of the entry being written */
    float *mean;    /* [hd] the current block's mean */
    uint16_t *page; /* one KV page: the digest path's scratch */
};

struct locality {
    struct locality_params p;
    struct locality_profile prof;
    int nq, nkv, hd, G, D;
    double *theta, *cal;            /* [calib_points] the table */
    float *q;                       /* [n_slots][n_layers][nq][hd] unit query states */
    float *q0;                      /* the same, each stream's first state (its anchor; with
                                       anchor > 0 only) */
    int32_t *step;                  /* [n_slots][n_layers] steps taken */
    int64_t *req;                   /* [n_slots] request in the slot, -1 = none */
    struct locality_gen_stats *gst; /* [n_layers] */
    struct key_scratch ks;          /* locality_fill_kv / locality_build_digests */
    int calib_threads;              /* threads the calibration ran on (0: reused) */
    int calib_reused;               /* the table came from the process's cache */
    double calib_s;                 /* its wall time */
    float *d_dirs;                  /* device fill (locality_cuda.cu): [nkv][D][hd] */
    size_t d_dirs_bytes;
    void *mem;
    size_t mem_bytes;
};

/* ------------------------------------------------------------------ random numbers */

static uint64_t stream_seed(uint64_t seed, uint64_t tag, uint64_t id, uint64_t a, uint64_t b)
{
    return pulse_seed_mix(pulse_seed_mix(seed, tag, id), a, b);
}

/* Standard normal by Box-Muller on elements (2i, 2i+1) of stream s. */
static float gauss(uint64_t s, uint64_t i)
{
    float u1 = 0.5f * (pulse_uniform(s, 2 * i) + 1.0f);
    float u2 = 0.5f * (pulse_uniform(s, 2 * i + 1) + 1.0f);
    return sqrtf(-2.0f * logf(1.0f - u1)) * cosf(6.283185307f * u2);
}

static void normalize(float *v, int n)
{
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        ss += (double)v[i] * v[i];
    float inv = ss > 0.0 ? (float)(1.0 / sqrt(ss)) : 0.0f;
    for (int i = 0; i < n; i++)
        v[i] *= inv;
}

/* ------------------------------------------------------------------ keys */

/* The directions of every KV head of (tag, id, layer) into ks->dirs. */
static void make_dirs(const struct locality *L, struct key_scratch *ks, uint64_t tag, uint64_t id,
                      int layer)
{
    const int hd = L->hd, D = L->D;
    for (int h = 0; h < L->nkv; h++) {
        uint64_t s =
            pulse_seed_mix(stream_seed(L->p.seed, tag, id, (uint64_t)layer, (uint64_t)h), 1, 0);
        for (int d = 0; d < D; d++) {
            float *u = ks->dirs + ((size_t)h * D + d) * hd;
            for (int c = 0; c < hd; c++)
                u[c] = gauss(s, (uint64_t)d * hd + c);
            normalize(u, hd);
        }
    }
}

/* The mean of block i of head h (key stream kseed) into ks->mean (make_dirs done for the same
 * entry). */
static void block_mean(const struct locality *L, struct key_scratch *ks, uint64_t kseed, int h,
                       int i)
{
    const int hd = L->hd, D = L->D;
    uint64_t s = pulse_seed_mix(kseed, 2, (uint64_t)i);
    float rho = expf(L->p.key_strength_sigma * gauss(s, (uint64_t)D));
    float scale = rho * sqrtf((float)hd / (float)D);
    for (int c = 0; c < hd; c++)
        ks->mean[c] = 0.0f;
    for (int d = 0; d < D; d++) {
        float w = gauss(s, (uint64_t)d) * scale;
        const float *u = ks->dirs + ((size_t)h * D + d) * hd;
        for (int c = 0; c < hd; c++)
            ks->mean[c] += w * u[c];
    }
}

static uint16_t *kv_at(const struct kv_view *kv, int b, int t, int h, int which)
{
    int page = kv->page_ids[kv->page_start[b] + t / kv->page_size];
    size_t page_elems = (size_t)kv->n_kv_heads * 2 * kv->page_size * kv->head_dim;
    return kv->pool + (size_t)page * page_elems +
           (((size_t)h * 2 + which) * kv->page_size + t % kv->page_size) * kv->head_dim;
}

/* K of head h, tokens [t0, t1) of (tag, id, layer) into entry b of kv at token t - t_off. */
static void write_keys(const struct locality *L, struct key_scratch *ks, uint64_t tag, uint64_t id,
                       int layer, int h, const struct kv_view *kv, int b, int t0, int t1, int t_off)
{
    const int hd = L->hd, bs = L->p.sel.block_size;
    const uint64_t kseed = stream_seed(L->p.seed, tag, id, (uint64_t)layer, (uint64_t)h);
    const uint64_t ns = pulse_seed_mix(kseed, 3, 0);
    const float amp = L->p.key_noise * 1.7320508f; /* U[-1, 1) has std 1/sqrt(3) */
    int cur = -1;
    for (int t = t0; t < t1; t++) {
        if (t / bs != cur) block_mean(L, ks, kseed, h, cur = t / bs);
        uint16_t *k = kv_at(kv, b, t - t_off, h, 0);
        for (int c = 0; c < hd; c++)
            k[c] = f32_to_bf16(ks->mean[c] + amp * pulse_uniform(ns, (uint64_t)t * hd + c));
    }
}

void locality_fill_kv(struct locality *L, const struct kv_view *kv, const int32_t *t0,
                      const int32_t *t1, const int32_t *req_ids, int batch, int layer)
{
    PULSE_CHECK(
        kv->n_kv_heads == L->nkv && kv->head_dim == L->hd && kv->page_size == L->p.sel.block_size,
        "locality_fill_kv: the KV view's heads, head_dim and page size must be the params'");
    PULSE_CHECK(layer >= 0 && layer < L->p.n_layers, "locality_fill_kv: layer out of range");
    const int hd = L->hd, nkv = L->nkv;
    const uint64_t per_token = (uint64_t)nkv * 2 * hd;
    for (int b = 0; b < batch; b++) {
        PULSE_CHECK(req_ids[b] >= 0, "locality_fill_kv: request ids must be >= 0");
        const int a = t0 ? t0[b] : 0, e = t1[b];
        make_dirs(L, &L->ks, TAG_KEYS, (uint64_t)req_ids[b], layer);
        for (int h = 0; h < nkv; h++)
            write_keys(L, &L->ks, TAG_KEYS, (uint64_t)req_ids[b], layer, h, kv, b, a, e, 0);
        /* V exactly as kv_fill_synthetic writes it */
        uint64_t s = pulse_seed_mix(L->p.seed, (uint64_t)req_ids[b], (uint64_t)layer);
        for (int t = a; t < e; t++)
            for (int h = 0; h < nkv; h++) {
                uint16_t *v = kv_at(kv, b, t, h, 1);
                uint64_t e0 = (uint64_t)t * per_token + ((uint64_t)h * 2 + 1) * hd;
                for (int d = 0; d < hd; d++)
                    v[d] = f32_to_bf16(pulse_uniform(s, e0 + d));
            }
    }
}

/* ------------------------------------------------------------------ device fill */

#ifdef PULSE_HAVE_CUDA
int locality_device_init(struct locality *L, char *err, size_t errlen)
{
    if (L->d_dirs) return PULSE_OK;
    if (L->nkv > LOC_DEV_MAX_KV_HEADS || L->hd > SELECT_MAX_HEAD_DIM) {
        snprintf(err, errlen, "locality: the device fill takes at most %d KV heads",
                 LOC_DEV_MAX_KV_HEADS);
        return PULSE_ERR_INVALID;
    }
    const size_t bytes = (size_t)L->nkv * L->D * L->hd * sizeof(float);
    if (!(L->d_dirs = mem_alloc(MEM_DEVICE, bytes, "locality key directions"))) {
        snprintf(err, errlen, "locality: out of device memory for the key directions");
        return PULSE_ERR_OOM;
    }
    L->d_dirs_bytes = bytes;
    return PULSE_OK;
}

void locality_fill_kv_cuda(struct locality *L, const struct kctx *c, const struct kv_view *kv,
                           const int32_t *t0, const int32_t *t1, const int32_t *req_ids, int batch,
                           int layer)
{
    PULSE_CHECK(L->d_dirs != NULL, "locality_fill_kv_cuda: locality_device_init was not called");
    PULSE_CHECK(layer >= 0 && layer < L->p.n_layers, "locality_fill_kv_cuda: layer out of range");
    struct locality_dev_args a;
    memset(&a, 0, sizeof a);
    a.nkv = L->nkv, a.hd = L->hd, a.D = L->D, a.bs = L->p.sel.block_size;
    a.amp = L->p.key_noise * 1.7320508f; /* as write_keys */
    a.sigma = L->p.key_strength_sigma;
    a.sq = sqrtf((float)L->hd / (float)L->D); /* as block_mean */
    for (int b = 0; b < batch; b++) {
        PULSE_CHECK(req_ids[b] >= 0, "locality_fill_kv_cuda: request ids must be >= 0");
        const uint64_t id = (uint64_t)req_ids[b];
        for (int h = 0; h < L->nkv; h++) {
            a.key_seed[h] = stream_seed(L->p.seed, TAG_KEYS, id, (uint64_t)layer, (uint64_t)h);
            a.dir_seed[h] = pulse_seed_mix(a.key_seed[h], 1, 0); /* as make_dirs */
        }
        a.v_seed = pulse_seed_mix(L->p.seed, id, (uint64_t)layer);
        locality_dirs_launch(c, &a, L->d_dirs);
        locality_keys_launch(c, &a, L->d_dirs, kv, kv->page_start + b, t0 ? t0[b] : 0, t1[b]);
    }
}
#endif

/* Digests of blocks [0, ceil(n / bs)) of (tag, id, layer) into entry b of dv, one block at a
 * time through the one-page scratch and digest_build_ref (so the bits are digest_build's). */
static void digests_entry(const struct locality *L, struct key_scratch *ks,
                          const struct digest_view *dv, int b, int n, uint64_t tag, uint64_t id,
                          int layer, int sel_head)
{
    const int bs = L->p.sel.block_size;
    const int32_t zero = 0;
    const struct kv_view one = {ks->page, &zero, &zero, bs, L->nkv, L->hd, 0, 0, NULL, NULL};
    make_dirs(L, ks, tag, id, layer);
    for (int i = 0; i * bs < n; i++) {
        const int t0 = i * bs, t1 = PULSE_MIN(n, t0 + bs);
        for (int h = 0; h < L->nkv; h++)
            if (sel_head == SELECT_HEADWISE || sel_head == h)
                write_keys(L, ks, tag, id, layer, h, &one, 0, t0, t1, t0);
        const int32_t start = dv->page_start[b] + i, cnt = t1 - t0;
        const struct digest_view d1 = {dv->pool, dv->page_ids, &start, dv->n_heads, dv->head_dim};
        digest_build_ref(NULL, &one, &d1, &cnt, 1, sel_head, bs);
    }
}

void locality_build_digests(struct locality *L, const struct digest_view *dv,
                            const int32_t *n_tokens, const int32_t *req_ids, int batch, int layer,
                            int sel_head)
{
    PULSE_CHECK(layer >= 0 && layer < L->p.n_layers, "locality_build_digests: layer out of range");
    for (int b = 0; b < batch; b++) {
        PULSE_CHECK(req_ids[b] >= 0, "locality_build_digests: request ids must be >= 0");
        digests_entry(L, &L->ks, dv, b, n_tokens[b], TAG_KEYS, (uint64_t)req_ids[b], layer,
                      sel_head);
    }
}

void locality_build_calib_digests(struct locality *L, const struct digest_view *dv, int n_tokens,
                                  int stream, int layer, int sel_head)
{
    PULSE_CHECK(layer >= 0 && layer < L->p.n_layers && stream >= 0,
                "locality_build_calib_digests: layer or stream out of range");
    digests_entry(L, &L->ks, dv, 0, n_tokens, TAG_CAL_KEYS, (uint64_t)stream, layer, sel_head);
}

/* ------------------------------------------------------------------ query streams */

/* q <- cos(th) q + sin(th) z, z = the part of U[-1, 1)^hd (stream zs, elements off..) orthogonal
 * to q, normalised; q stays a unit vector. With an anchor q0 (pull > 0), pull * sqrt(hd / 3) q0
 * is added to the draw first (sqrt(hd / 3): the draw's norm), so that the step, still of angle
 * th, leans toward q0: the walk keeps returning near where it began. */
static void advance(float *q, int hd, float ca, float sa, uint64_t zs, uint64_t off,
                    const float *q0, float pull)
{
    float z[SELECT_MAX_HEAD_DIM];
    const float w = q0 ? pull * sqrtf((float)hd / 3.0f) : 0.0f;
    double dot = 0.0;
    for (int c = 0; c < hd; c++) {
        z[c] = pulse_uniform(zs, off + (uint64_t)c);
        if (q0) z[c] += w * q0[c];
        dot += (double)z[c] * q[c];
    }
    for (int c = 0; c < hd; c++)
        z[c] -= (float)dot * q[c];
    normalize(z, hd);
    for (int c = 0; c < hd; c++)
        q[c] = ca * q[c] + sa * z[c];
    normalize(q, hd);
}

static void init_q(float *q, int nq, int hd, uint64_t seed, uint64_t tag, uint64_t id, int layer)
{
    for (int g = 0; g < nq; g++) {
        uint64_t s = stream_seed(seed, tag, id, (uint64_t)layer, (uint64_t)g);
        for (int c = 0; c < hd; c++)
            q[(size_t)g * hd + c] = gauss(s, (uint64_t)c);
        normalize(q + (size_t)g * hd, hd);
    }
}

static void q_to_bf16(const float *q, size_t n, float scale, uint16_t *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = f32_to_bf16(q[i] * scale);
}

double locality_theta_for_churn(const struct locality *L, double c)
{
    const int J = L->p.calib_points;
    if (!(c > 0.0)) return 0.0;
    for (int j = 1; j < J; j++)
        if (L->cal[j] >= c) {
            double w = (c - L->cal[j - 1]) / (L->cal[j] - L->cal[j - 1]);
            return L->theta[j - 1] + w * (L->theta[j] - L->theta[j - 1]);
        }
    return L->theta[J - 1];
}

void locality_start(struct locality *L, int slot, int64_t req_id)
{
    PULSE_CHECK(slot >= 0 && slot < L->p.n_slots, "locality_start: slot out of range");
    PULSE_CHECK(req_id >= 0, "locality_start: request ids must be >= 0");
    L->req[slot] = req_id;
    const size_t per_layer = (size_t)L->nq * L->hd;
    for (int l = 0; l < L->p.n_layers; l++) {
        size_t u = (size_t)slot * L->p.n_layers + l;
        init_q(L->q + u * per_layer, L->nq, L->hd, L->p.seed, TAG_QINIT, (uint64_t)req_id, l);
        if (L->q0) memcpy(L->q0 + u * per_layer, L->q + u * per_layer, per_layer * sizeof(float));
        L->step[u] = 0;
    }
}

void locality_step_q(struct locality *L, int layer, const int32_t *slots, int batch,
                     uint16_t *q_out)
{
    PULSE_CHECK(layer >= 0 && layer < L->p.n_layers, "locality_step_q: layer out of range");
    const int hd = L->hd, G = L->G;
    const size_t per_layer = (size_t)L->nq * hd;
    const float scale = sqrtf((float)hd) * L->p.q_scale;
    struct locality_gen_stats *st = &L->gst[layer];
    const double cmax = L->cal[L->p.calib_points - 1];
    for (int b = 0; b < batch; b++) {
        const int slot = slots[b];
        PULSE_CHECK(slot >= 0 && slot < L->p.n_slots && L->req[slot] >= 0,
                    "locality_step_q: slot out of range or not started");
        const size_t u = (size_t)slot * L->p.n_layers + layer;
        float *q = L->q + u * per_layer;
        const float *q0 = L->q0 ? L->q0 + u * per_layer : NULL;
        const int64_t step = L->step[u];
        if (step > 0) {
            const uint64_t rq = (uint64_t)L->req[slot];
            const uint64_t zs = stream_seed(L->p.seed, TAG_Z, rq, (uint64_t)layer, (uint64_t)step);
            const uint64_t ts =
                stream_seed(L->p.seed, TAG_TARGET, rq, (uint64_t)layer, (uint64_t)step);
            for (int h = 0; h < L->nkv; h++) {
                double th = PI_D / 2;
                if (!L->prof.dense[layer]) {
                    double c = locality_profile_quantile(
                        &L->prof, layer, 0.5 * (pulse_uniform(ts, (uint64_t)h) + 1.0));
                    th = locality_theta_for_churn(L, c);
                    st->draws++;
                    st->clipped += c > cmax;
                    st->target_sum += c;
                    st->expect_sum += c > cmax ? cmax : c;
                }
                float ca = (float)cos(th), sa = (float)sin(th);
                for (int g = h * G; g < (h + 1) * G; g++)
                    advance(q + (size_t)g * hd, hd, ca, sa, zs, (uint64_t)g * hd,
                            q0 ? q0 + (size_t)g * hd : NULL, L->p.anchor);
            }
        }
        L->step[u] = (int32_t)(step + 1);
        q_to_bf16(q, per_layer, scale, q_out + (size_t)b * per_layer);
    }
}

/* ------------------------------------------------------------------ calibration */

/* One calibration worker's scratch (create only): the digests of one key set, the query, the
 * selections of two steps, scores, the key writer's scratch, and the churn terms of the stream it
 * works on in the order the single-threaded loop adds them: [calib_points - 1][calib_steps][nkv],
 * -1 where a list had no budget part (not counted). terms is NULL for a lone worker whose terms
 * would be large: it adds them straight into the sums, in the same order. */
struct cal_buf {
    struct cal_run *run;
    uint16_t *dig, *qb;
    float *q0; /* the stream's first query (its anchor), with anchor > 0 */
    int32_t *ident, *sel[2], *cnt[2];
    float *scores, *qf;
    struct key_scratch ks;
    double *terms;
};

/* What the workers share. Streams are taken in order; each worker adds its stream's terms to the
 * sums only when every earlier stream has been added, so the table is the same bits whatever
 * the number of threads. */
struct cal_run {
    struct locality *L;
    struct select_cfg cfg;
    int n_sparse, sparse[LOC_MAX_LAYERS];
    size_t n_terms; /* per stream */
    pthread_mutex_t mu;
    pthread_cond_t turn;
    int next;    /* the next stream to take */
    int reduced; /* streams added to sum and cnt */
    double sum[64];
    int64_t cnt[64];
    struct progress pg;
};

#define CAL_TERMS_MAX_BYTES ((size_t)64 << 20) /* buffered terms of one stream at most */

/* Bytes of one worker's scratch; with base, carves it into c. */
static size_t cal_carve(const struct locality *L, const struct select_cfg *cfg, int nb,
                        size_t n_terms, char *base, struct cal_buf *c)
{
    const size_t ms = (size_t)select_list_stride(cfg), nkv = (size_t)L->nkv, hd = (size_t)L->hd;
    const size_t qn = (size_t)L->nq * hd;
    char *m = base;
    struct cal_buf t;
    t.dig = mem_carve(&m, (size_t)nb * nkv * 2 * hd * 2);
    t.qb = mem_carve(&m, qn * 2);
    t.ident = mem_carve(&m, (size_t)nb * 4);
    t.sel[0] = mem_carve(&m, nkv * ms * 4);
    t.sel[1] = mem_carve(&m, nkv * ms * 4);
    t.cnt[0] = mem_carve(&m, nkv * 4);
    t.cnt[1] = mem_carve(&m, nkv * 4);
    t.scores = mem_carve(&m, nkv * (size_t)nb * 4);
    t.qf = mem_carve(&m, qn * 4);
    t.q0 = mem_carve(&m, qn * 4);
    t.ks.dirs = mem_carve(&m, nkv * (size_t)L->D * hd * 4);
    t.ks.mean = mem_carve(&m, hd * 4);
    t.ks.page = mem_carve(&m, nkv * 2 * (size_t)cfg->block_size * hd * 2);
    t.terms = n_terms ? mem_carve(&m, n_terms * 8) : NULL;
    if (base) {
        *c = t;
        for (int i = 0; i < nb; i++)
            c->ident[i] = i;
    }
    return (size_t)(m - base);
}

/* Adds term idx of the current stream (value v, of angle j): buffered, or straight into the sums
 * of the lone worker. */
static void cal_term(struct cal_buf *c, size_t idx, int j, double v)
{
    if (c->terms)
        c->terms[idx] = v;
    else if (v >= 0)
        c->run->sum[j] += v, c->run->cnt[j]++;
}

/* One calibration stream r on its keys: for every angle j >= 1, calib_steps steps from the same
 * start with the same innovations; the per-list churn of each step is a term (cal_term). */
static void cal_stream(struct cal_buf *c, int r, int layer)
{
    const struct locality *L = c->run->L;
    const struct select_cfg *cfg = &c->run->cfg;
    const int n_tok = L->p.calib_tokens, S = L->p.calib_steps;
    const int32_t zero = 0, ntok[1] = {n_tok};
    const int nb = PULSE_CEIL_DIV(n_tok, cfg->block_size), ms = select_list_stride(cfg);
    const struct digest_view dv = {c->dig, c->ident, &zero, L->nkv, L->hd};
    const size_t qn = (size_t)L->nq * L->hd;
    const float scale = sqrtf((float)L->hd) * L->p.q_scale;
    digests_entry(L, &c->ks, &dv, 0, n_tok, TAG_CAL_KEYS, (uint64_t)r, layer, SELECT_HEADWISE);
    for (int j = 1; j < L->p.calib_points; j++) {
        const float ca = (float)cos(L->theta[j]), sa = (float)sin(L->theta[j]);
        init_q(c->qf, L->nq, L->hd, L->p.seed, TAG_CAL_Q, (uint64_t)r, 0);
        const int anchored = L->p.anchor > 0.0f;
        if (anchored) memcpy(c->q0, c->qf, qn * sizeof(float));
        q_to_bf16(c->qf, qn, scale, c->qb);
        select_blocks_ref(NULL, cfg, c->qb, &dv, ntok, c->scores, c->sel[0], c->cnt[0], 1,
                          SELECT_HEADWISE);
        for (int s = 1; s <= S; s++) {
            const int cur = s & 1, prev = cur ^ 1;
            uint64_t zs = stream_seed(L->p.seed, TAG_CAL_Z, (uint64_t)r, 0, (uint64_t)s);
            for (int g = 0; g < L->nq; g++)
                advance(c->qf + (size_t)g * L->hd, L->hd, ca, sa, zs, (uint64_t)g * L->hd,
                        anchored ? c->q0 + (size_t)g * L->hd : NULL, L->p.anchor);
            q_to_bf16(c->qf, qn, scale, c->qb);
            select_blocks_ref(NULL, cfg, c->qb, &dv, ntok, c->scores, c->sel[cur], c->cnt[cur], 1,
                              SELECT_HEADWISE);
            for (int h = 0; h < L->nkv; h++) {
                int nbud,
                    nn = locality_count_new(cfg, c->sel[cur] + (size_t)h * ms, c->cnt[cur][h], nb,
                                            c->sel[prev] + (size_t)h * ms, c->cnt[prev][h], &nbud);
                size_t idx = ((size_t)(j - 1) * S + (s - 1)) * L->nkv + h;
                cal_term(c, idx, j, nbud > 0 ? (double)nn / nbud : -1.0);
            }
        }
    }
}

/* Takes streams until none is left; adds each one's terms in stream order. */
static void cal_work(struct cal_buf *c)
{
    struct cal_run *run = c->run;
    const int R = run->L->p.calib_streams, S = run->L->p.calib_steps, nkv = run->L->nkv;
    for (;;) {
        pthread_mutex_lock(&run->mu);
        const int r = run->next < R ? run->next++ : -1;
        pthread_mutex_unlock(&run->mu);
        if (r < 0) return;
        cal_stream(c, r, run->n_sparse ? run->sparse[r % run->n_sparse] : 0);
        pthread_mutex_lock(&run->mu);
        while (run->reduced != r)
            pthread_cond_wait(&run->turn, &run->mu);
        for (size_t i = 0; c->terms && i < run->n_terms; i++) {
            const int j = 1 + (int)(i / ((size_t)S * nkv));
            if (c->terms[i] >= 0) run->sum[j] += c->terms[i], run->cnt[j]++;
        }
        run->reduced++;
        progress_update(&run->pg, run->reduced);
        pthread_cond_broadcast(&run->turn);
        pthread_mutex_unlock(&run->mu);
    }
}

static void *cal_thread(void *arg)
{
    cal_work(arg);
    return NULL;
}

/* Calibration threads: the params', else the online CPUs (at most LOC_CALIB_MAX_THREADS); never
 * more than the streams, nor more than the buffered terms allow. */
static int cal_threads(const struct locality_params *p, size_t n_terms)
{
    long n = p->calib_threads;
    if (n <= 0) {
        n = sysconf(_SC_NPROCESSORS_ONLN);
        n = PULSE_MIN(n, LOC_CALIB_MAX_THREADS);
    }
    n = PULSE_MIN(n, p->calib_streams);
    if (n_terms * 8 > CAL_TERMS_MAX_BYTES) n = 1;
    return (int)PULSE_MAX(n, 1);
}

/* Runs the streams on the threads, into run->sum and run->cnt. */
static int cal_run_streams(struct cal_run *run, int nb)
{
    struct locality *L = run->L;
    const int T = cal_threads(&L->p, run->n_terms);
    const size_t n_terms = T == 1 && run->n_terms * 8 > CAL_TERMS_MAX_BYTES ? 0 : run->n_terms;
    const size_t per = cal_carve(L, &run->cfg, nb, n_terms, NULL, NULL);
    struct cal_buf *bufs = mem_alloc(MEM_HOST, sizeof *bufs * T, "locality calibration workers");
    char *m = mem_alloc(MEM_HOST, per * T, "locality calibration");
    pthread_t *th = mem_alloc(MEM_HOST, sizeof *th * T, "locality calibration threads");
    if (!bufs || !m || !th) {
        mem_free(MEM_HOST, bufs, sizeof *bufs * T);
        mem_free(MEM_HOST, m, per * T);
        mem_free(MEM_HOST, th, sizeof *th * T);
        return PULSE_ERR_NOMEM;
    }
    for (int k = 0; k < T; k++) {
        cal_carve(L, &run->cfg, nb, n_terms, m + per * k, &bufs[k]);
        bufs[k].run = run;
    }
    pthread_mutex_init(&run->mu, NULL);
    pthread_cond_init(&run->turn, NULL);
    progress_begin(&run->pg, "calibration", "streams", L->p.calib_streams);
    int started = 0; /* a thread that cannot start leaves its streams to the others */
    for (int k = 1; k < T; k++)
        started += pthread_create(&th[started], NULL, cal_thread, &bufs[k]) == 0;
    cal_work(&bufs[0]);
    for (int k = 0; k < started; k++)
        pthread_join(th[k], NULL);
    progress_end(&run->pg, run->reduced);
    pthread_cond_destroy(&run->turn);
    pthread_mutex_destroy(&run->mu);
    L->calib_threads = started + 1;
    mem_free(MEM_HOST, th, sizeof *th * T);
    mem_free(MEM_HOST, m, per * T);
    mem_free(MEM_HOST, bufs, sizeof *bufs * T);
    return PULSE_OK;
}

/* The calibrations this process made, by what their tables are a pure function of: a sweep
 * or a figure driver makes many generators of one shape, and each calibration takes seconds
 * (3 s on the H200 machine's 16 cores for qwen3-14b at 16K). A key is zeroed before it is
 * filled, so memcmp compares it; max_blocks is left 0 (the calibration sets its own). */
struct cal_key {
    struct select_cfg sel;
    int n_layers, calib_tokens, calib_points, calib_steps, calib_streams, key_dirs;
    float key_noise, key_strength_sigma, q_scale, anchor;
    uint64_t seed;
    uint8_t dense[LOC_MAX_LAYERS];
};

#define CAL_CACHE 16

static struct {
    pthread_mutex_t mu;
    int n, next;
    struct cal_key key[CAL_CACHE];
    double theta[CAL_CACHE][64], cal[CAL_CACHE][64];
} cal_cache = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void cal_key_of(const struct locality *L, struct cal_key *k)
{
    memset(k, 0, sizeof *k);
    k->sel = L->p.sel;
    k->sel.max_blocks = 0;
    k->n_layers = L->p.n_layers, k->calib_tokens = L->p.calib_tokens;
    k->calib_points = L->p.calib_points, k->calib_steps = L->p.calib_steps;
    k->calib_streams = L->p.calib_streams, k->key_dirs = L->p.key_dirs;
    k->key_noise = L->p.key_noise, k->key_strength_sigma = L->p.key_strength_sigma;
    k->q_scale = L->p.q_scale, k->anchor = L->p.anchor, k->seed = L->p.seed;
    memcpy(k->dense, L->prof.dense, sizeof k->dense);
}

/* The cached table of k into L; 0 when there is none. */
static int cal_cache_get(struct locality *L, const struct cal_key *k)
{
    const size_t J = (size_t)L->p.calib_points;
    int hit = 0;
    pthread_mutex_lock(&cal_cache.mu);
    for (int i = 0; i < cal_cache.n && !hit; i++)
        if (!memcmp(&cal_cache.key[i], k, sizeof *k)) {
            memcpy(L->theta, cal_cache.theta[i], J * sizeof(double));
            memcpy(L->cal, cal_cache.cal[i], J * sizeof(double));
            hit = 1;
        }
    pthread_mutex_unlock(&cal_cache.mu);
    return hit;
}

static void cal_cache_put(const struct locality *L, const struct cal_key *k)
{
    const size_t J = (size_t)L->p.calib_points;
    pthread_mutex_lock(&cal_cache.mu);
    const int i = cal_cache.n < CAL_CACHE ? cal_cache.n++ : cal_cache.next++ % CAL_CACHE;
    cal_cache.key[i] = *k;
    memcpy(cal_cache.theta[i], L->theta, J * sizeof(double));
    memcpy(cal_cache.cal[i], L->cal, J * sizeof(double));
    pthread_mutex_unlock(&cal_cache.mu);
}

static int calibrate(struct locality *L, char *err, size_t errlen)
{
    const double t0 = pulse_now();
    struct cal_key key;
    cal_key_of(L, &key);
    if (!L->p.calib_fresh && cal_cache_get(L, &key)) {
        L->calib_reused = 1;
        L->calib_s = pulse_now() - t0;
        return PULSE_OK;
    }
    const int J = L->p.calib_points;
    struct cal_run *run = mem_alloc(MEM_HOST, sizeof *run, "locality calibration");
    if (!run) goto oom;
    memset(run, 0, sizeof *run);
    run->L = L;
    run->cfg = L->p.sel;
    const int nb = PULSE_CEIL_DIV(L->p.calib_tokens, run->cfg.block_size);
    run->cfg.max_blocks = nb;
    run->n_terms = (size_t)(J - 1) * L->p.calib_steps * L->nkv;
    for (int j = 0; j < J; j++) {
        double f = (double)j / (J - 1);
        L->theta[j] = PI_D * f * f;
    }
    for (int l = 0; l < L->p.n_layers; l++)
        if (!L->prof.dense[l]) run->sparse[run->n_sparse++] = l;
    if (cal_run_streams(run, nb) != PULSE_OK) goto oom;
    L->cal[0] = 0.0;
    for (int j = 1; j < J; j++) {
        double g = run->cnt[j] ? run->sum[j] / (double)run->cnt[j] : 0.0;
        L->cal[j] = g > L->cal[j - 1] ? g : L->cal[j - 1]; /* non-decreasing */
    }
    const int budget = run->cfg.budget;
    mem_free(MEM_HOST, run, sizeof *run);
    L->calib_s = pulse_now() - t0;
    if (!(L->cal[J - 1] > 0.0)) {
        snprintf(err, errlen,
                 "locality: calibration saw no churn at any angle (budget %d blocks "
                 "leaves no choice among the candidates of calib_tokens %d?)",
                 budget, L->p.calib_tokens);
        return PULSE_ERR_INVALID;
    }
    cal_cache_put(L, &key);
    return PULSE_OK;
oom:
    mem_free(MEM_HOST, run, sizeof *run);
    snprintf(err, errlen, "locality: out of memory for the calibration");
    return PULSE_ERR_NOMEM;
}

/* ------------------------------------------------------------------ create / free */

void locality_params_init(struct locality_params *p, const struct select_cfg *sel, int n_layers,
                          int n_slots, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    p->sel = *sel;
    p->n_layers = n_layers;
    p->n_slots = n_slots;
    p->seed = seed;
    p->key_dirs = 16;
    p->key_noise = 0.5f;
    p->key_strength_sigma = 0.5f;
    p->q_scale = 1.0f;
    /* 2048 tokens, or enough for 4x the selected blocks to be candidates, within max_blocks */
    int want = PULSE_MAX(2048, 4 * (sel->budget + sel->sink + sel->window + 1) * sel->block_size);
    p->calib_tokens = PULSE_MIN(want, sel->max_blocks * sel->block_size);
    p->calib_points = 24;
    p->calib_steps = 8;
    p->calib_streams = 16;
}

static const char *params_why(const struct locality_params *p, const struct locality_profile *f)
{
    if (p->n_layers < 1 || p->n_layers > LOC_MAX_LAYERS) return "n_layers must be in 1..256";
    if (p->n_layers != f->n_layers) return "n_layers must equal the profile's layer count";
    if (p->n_slots < 1 || p->n_slots > (1 << 20)) return "n_slots must be in 1..2^20";
    if (p->key_dirs < 1 || p->key_dirs > 1024) return "key_dirs must be in 1..1024";
    if (!(p->key_noise >= 0.0f && p->key_noise <= 100.0f)) return "key_noise must be in [0, 100]";
    if (!(p->key_strength_sigma >= 0.0f && p->key_strength_sigma <= 4.0f))
        return "key_strength_sigma must be in [0, 4]";
    if (!(p->q_scale > 0.0f && p->q_scale <= 1e4f)) return "q_scale must be in (0, 1e4]";
    if (!(p->anchor >= 0.0f && p->anchor <= LOC_MAX_ANCHOR)) return "anchor must be in [0, 16]";
    if (p->calib_tokens < 1 ||
        PULSE_CEIL_DIV(p->calib_tokens, p->sel.block_size) > p->sel.max_blocks)
        return "calib_tokens must be >= 1 with its blocks <= sel.max_blocks";
    if (p->calib_points < 3 || p->calib_points > 64) return "calib_points must be in 3..64";
    if (p->calib_steps < 1 || p->calib_steps > 100000) return "calib_steps must be in 1..100000";
    if (p->calib_streams < 1 || p->calib_streams > 1024) return "calib_streams must be in 1..1024";
    if (p->calib_threads < 0 || p->calib_threads > 1024) return "calib_threads must be in 0..1024";
    return NULL;
}

struct locality *locality_create(const struct locality_params *p,
                                 const struct locality_profile *prof, char *err, size_t errlen)
{
    char why[192];
    if (select_cfg_check(&p->sel, why, sizeof why) != 0) {
        snprintf(err, errlen, "locality: %s", why);
        return NULL;
    }
    if (locality_profile_check(prof, why, sizeof why) != 0) {
        snprintf(err, errlen, "locality: profile: %s", why);
        return NULL;
    }
    const char *bad = params_why(p, prof);
    if (bad) {
        snprintf(err, errlen, "locality: %s", bad);
        return NULL;
    }
    struct locality *L = mem_alloc(MEM_HOST, sizeof *L, "locality");
    if (!L) goto oom;
    memset(L, 0, sizeof *L);
    L->p = *p;
    L->prof = *prof;
    L->nq = p->sel.n_heads, L->nkv = p->sel.n_kv_heads, L->hd = p->sel.head_dim;
    L->G = L->nq / L->nkv, L->D = p->key_dirs;
    const size_t units = (size_t)p->n_slots * p->n_layers;
    size_t sz[] = {(size_t)p->calib_points * 8,
                   (size_t)p->calib_points * 8,
                   units * L->nq * L->hd * 4,
                   units * 4,
                   p->anchor > 0.0f ? units * L->nq * L->hd * 4 : 0,
                   (size_t)p->n_slots * 8,
                   (size_t)p->n_layers * sizeof(struct locality_gen_stats),
                   (size_t)L->nkv * L->D * L->hd * 4,
                   (size_t)L->hd * 4,
                   (size_t)L->nkv * 2 * p->sel.block_size * L->hd * 2};
    size_t off[PULSE_ARRAY_LEN(sz)], total = 0;
    for (size_t i = 0; i < PULSE_ARRAY_LEN(sz); i++)
        off[i] = total, total += (sz[i] + 63) / 64 * 64;
    char *m = mem_alloc(MEM_HOST, total, "locality state");
    if (!m) goto oom;
    L->mem = m, L->mem_bytes = total;
    memset(m, 0, total);
    L->theta = (double *)(m + off[0]), L->cal = (double *)(m + off[1]);
    L->q = (float *)(m + off[2]), L->step = (int32_t *)(m + off[3]);
    L->q0 = p->anchor > 0.0f ? (float *)(m + off[4]) : NULL;
    L->req = (int64_t *)(m + off[5]), L->gst = (struct locality_gen_stats *)(m + off[6]);
    L->ks.dirs = (float *)(m + off[7]), L->ks.mean = (float *)(m + off[8]);
    L->ks.page = (uint16_t *)(m + off[9]);
    for (int s = 0; s < p->n_slots; s++)
        L->req[s] = -1;
    if (calibrate(L, err, errlen) != PULSE_OK) {
        locality_free(L);
        return NULL;
    }
    return L;
oom:
    snprintf(err, errlen, "locality: out of host memory for %d slots x %d layers", p->n_slots,
             p->n_layers);
    locality_free(L);
    return NULL;
}

void locality_free(struct locality *L)
{
    if (!L) return;
    mem_free(MEM_DEVICE, L->d_dirs, L->d_dirs_bytes);
    mem_free(MEM_HOST, L->mem, L->mem_bytes);
    mem_free(MEM_HOST, L, sizeof *L);
}

/* ------------------------------------------------------------------ introspection */

void locality_get_calib(const struct locality *L, struct locality_calib *out)
{
    out->n = L->p.calib_points;
    out->theta = L->theta;
    out->churn = L->cal;
    out->churn_max = L->cal[L->p.calib_points - 1];
    out->reused = L->calib_reused;
}

void locality_stream_pos(const struct locality *L, int slot, int layer, int64_t *req_id,
                         int32_t *steps)
{
    PULSE_CHECK(slot >= 0 && slot < L->p.n_slots && layer >= 0 && layer < L->p.n_layers,
                "locality_stream_pos: slot or layer out of range");
    *req_id = L->req[slot];
    *steps = L->step[(size_t)slot * L->p.n_layers + layer];
}

const struct locality_params *locality_get_params(const struct locality *L)
{
    return &L->p;
}

const struct locality_profile *locality_get_profile(const struct locality *L)
{
    return &L->prof;
}

void locality_get_gen_stats(const struct locality *L, int layer, struct locality_gen_stats *out)
{
    PULSE_CHECK(layer >= 0 && layer < L->p.n_layers, "locality_get_gen_stats: layer out of range");
    *out = L->gst[layer];
}

json_t *locality_to_json(const struct locality *L)
{
    const struct locality_params *p = &L->p;
    json_t *th = json_array(), *ch = json_array(), *layers = json_array();
    for (int j = 0; j < p->calib_points; j++) {
        json_array_append_new(th, json_real(L->theta[j]));
        json_array_append_new(ch, json_real(L->cal[j]));
    }
    for (int l = 0; l < p->n_layers; l++) {
        const struct locality_gen_stats *s = &L->gst[l];
        double n = s->draws ? (double)s->draws : 1.0;
        json_array_append_new(layers,
                              json_pack("{s:i, s:b, s:I, s:I, s:f, s:f}", "layer", l, "dense",
                                        L->prof.dense[l], "draws", (json_int_t)s->draws, "clipped",
                                        (json_int_t)s->clipped, "target_mean", s->target_sum / n,
                                        "expected_mean", s->expect_sum / n));
    }
    json_t *params = json_pack(
        "{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:I}", "n_heads", p->sel.n_heads,
        "n_kv_heads", p->sel.n_kv_heads, "head_dim", p->sel.head_dim, "block_size",
        p->sel.block_size, "budget_blocks", p->sel.budget, "sink", p->sel.sink, "window",
        p->sel.window, "n_layers", p->n_layers, "n_slots", p->n_slots, "seed", (json_int_t)p->seed);
    json_t *keys = json_pack(
        "{s:s, s:i, s:f, s:f, s:f, s:f}", "model", "low-rank block means + uniform token noise",
        "dirs", p->key_dirs, "noise", (double)p->key_noise, "strength_sigma",
        (double)p->key_strength_sigma, "q_scale", (double)p->q_scale, "anchor", (double)p->anchor);
    json_t *cal = json_pack("{s:i, s:i, s:i, s:o, s:o, s:f, s:i, s:f, s:b}", "tokens",
                            p->calib_tokens, "steps", p->calib_steps, "streams", p->calib_streams,
                            "theta", th, "churn", ch, "churn_max", L->cal[p->calib_points - 1],
                            "threads", L->calib_threads, "seconds", L->calib_s, "reused",
                            L->calib_reused);
    return json_pack("{s:o, s:o, s:o, s:o, s:o}", "params", params, "key_model", keys,
                     "calibration", cal, "profile", locality_profile_to_json(&L->prof), "layers",
                     layers);
}
