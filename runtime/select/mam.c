/* The MAM head profile (mam.h): accumulator, engine probe, profile JSON. Host code; the
 * selection itself is select.h's CPU references, so the profile picks with exactly the scoring
 * and top-k that the runtime selects with. */
#include "mam.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "mem.h"
#include "numeric.h"
#include "results.h"
#include "select.h"

/* ------------------------------------------------------------------ accumulator */

struct mam_acc {
    struct mam_params p;
    struct select_cfg cfg; /* head-wise selection of every KV head */
    struct select_cfg one; /* query selectors: one query head against one KV head's digests */
    int n_sel;             /* selectors per layer: n_kv_heads, or n_heads (query_selectors) */
    struct kctx ctx;       /* zeroed: the references ignore it */
    int max_blocks, max_sel;
    void *mem; /* one host allocation, carved below */
    size_t mem_bytes;
    uint16_t *digests;            /* [max_batch * max_blocks] digest pages */
    int32_t *dig_ids, *dig_start; /* identity digest page table: page b*max_blocks + i */
    float *scores;                /* [max_batch][n_sel][max_blocks] */
    int32_t *sel_idx, *sel_count; /* [max_batch][n_sel][max_sel], [max_batch][n_sel] */
    float *logits;                /* [max_tokens] one query head's scaled q . k */
    double *mass;                 /* [n_heads][max_blocks] exp-mass per block */
    double *total;                /* [n_heads] */
    double *sum;                  /* [n_layers][n_sel] coverage sums */
    int64_t *terms;               /* [n_layers] coverage terms per head */
};

static int params_check(const struct mam_params *p, char *err, size_t errlen)
{
    const char *why = NULL;
    if (p->n_layers < 1)
        why = "n_layers must be >= 1";
    else if (p->max_batch < 1)
        why = "max_batch must be >= 1";
    else if (p->max_tokens < 1)
        why = "max_tokens must be >= 1";
    else if (!(p->scale >= 0.0f) || isinf(p->scale))
        why = "scale must be finite and >= 0 (0 = 1/sqrt(head_dim))";
    else if (p->block_size >= 1 &&
             PULSE_CEIL_DIV((long long)p->max_tokens, p->block_size) > SELECT_MAX_BLOCKS)
        why = "max_tokens / block_size exceeds SELECT_MAX_BLOCKS blocks";
    if (why) {
        snprintf(err, errlen, "mam params: %s", why);
        return -1;
    }
    return 0;
}

struct mam_acc *mam_acc_create(const struct mam_params *p, char *err, size_t errlen)
{
    if (params_check(p, err, errlen)) return NULL;
    struct select_cfg cfg = {
        p->n_heads, p->n_kv_heads, p->head_dim, p->block_size, p->budget, p->sink, p->window, 1, 0};
    if (p->block_size >= 1) cfg.max_blocks = PULSE_CEIL_DIV(p->max_tokens, p->block_size);
    if (select_cfg_check(&cfg, err, errlen)) return NULL;
    struct mam_acc *a = mem_alloc(MEM_HOST, sizeof *a, "mam accumulator");
    if (!a) {
        snprintf(err, errlen, "mam accumulator: out of host memory");
        return NULL;
    }
    memset(a, 0, sizeof *a);
    a->p = *p;
    if (a->p.scale == 0.0f) a->p.scale = 1.0f / sqrtf((float)p->head_dim);
    a->cfg = cfg;
    a->one = cfg;
    a->one.n_heads = a->one.n_kv_heads = 1;
    a->n_sel = p->query_selectors ? p->n_heads : p->n_kv_heads;
    a->max_blocks = cfg.max_blocks;
    a->max_sel = select_max_selected(&cfg);
    size_t B = (size_t)p->max_batch, MB = (size_t)a->max_blocks, ns = (size_t)a->n_sel;
    size_t dig_page = (size_t)p->n_kv_heads * 2 * (size_t)p->head_dim;
    size_t sizes[] = {2 * B * MB * dig_page, /* query selectors: one pool per KV head */
                      4 * B * MB,
                      4 * B,
                      4 * B * ns * MB,
                      4 * B * ns * (size_t)a->max_sel,
                      4 * B * ns,
                      4 * (size_t)p->max_tokens,
                      8 * (size_t)p->n_heads * MB,
                      8 * (size_t)p->n_heads,
                      8 * (size_t)p->n_layers * ns,
                      8 * (size_t)p->n_layers};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(sizes); i++)
        a->mem_bytes += mem_aligned(sizes[i]);
    a->mem = mem_alloc(MEM_HOST, a->mem_bytes, "mam scratch");
    if (!a->mem) {
        snprintf(err, errlen, "mam accumulator: out of host memory for %.1f MB of scratch",
                 a->mem_bytes / 1e6);
        mam_acc_free(a);
        return NULL;
    }
    memset(a->mem, 0, a->mem_bytes);
    char *cur = a->mem;
    a->digests = mem_carve(&cur, sizes[0]);
    a->dig_ids = mem_carve(&cur, sizes[1]);
    a->dig_start = mem_carve(&cur, sizes[2]);
    a->scores = mem_carve(&cur, sizes[3]);
    a->sel_idx = mem_carve(&cur, sizes[4]);
    a->sel_count = mem_carve(&cur, sizes[5]);
    a->logits = mem_carve(&cur, sizes[6]);
    a->mass = mem_carve(&cur, sizes[7]);
    a->total = mem_carve(&cur, sizes[8]);
    a->sum = mem_carve(&cur, sizes[9]);
    a->terms = mem_carve(&cur, sizes[10]);
    for (size_t i = 0; i < B * MB; i++)
        a->dig_ids[i] = (int32_t)i;
    for (size_t b = 0; b < B; b++)
        a->dig_start[b] = (int32_t)(b * MB);
    return a;
}

void mam_acc_free(struct mam_acc *a)
{
    if (!a) return;
    mem_free(MEM_HOST, a->mem, a->mem_bytes);
    mem_free(MEM_HOST, a, sizeof *a);
}

int64_t mam_acc_terms(const struct mam_acc *a, int layer)
{
    PULSE_CHECK(layer >= 0 && layer < a->p.n_layers, "layer out of range");
    return a->terms[layer];
}

int mam_acc_selectors(const struct mam_acc *a)
{
    return a->n_sel;
}

void mam_acc_table(const struct mam_acc *a, double *out)
{
    for (int l = 0; l < a->p.n_layers; l++)
        for (int h = 0; h < a->n_sel; h++) {
            size_t i = (size_t)l * a->n_sel + h;
            out[i] = a->terms[l] ? fmin(1.0, a->sum[i] / (double)a->terms[l]) : 0.0;
        }
}

void mam_acc_reset(struct mam_acc *a)
{
    memset(a->sum, 0, sizeof(double) * (size_t)a->p.n_layers * a->n_sel);
    memset(a->terms, 0, sizeof(int64_t) * (size_t)a->p.n_layers);
}

/* Query selectors: a digest pool per KV head, then a list per (entry, query head) from that
 * head's q alone. */
static void select_per_query_head(struct mam_acc *a, const uint16_t *q, const struct kv_view *kv,
                                  const int32_t *n_tokens, int batch)
{
    const struct mam_params *p = &a->p;
    const int nq = p->n_heads, G = nq / p->n_kv_heads, hd = p->head_dim;
    const size_t pool = (size_t)p->max_batch * a->max_blocks * 2 * hd;
    for (int g = 0; g < p->n_kv_heads; g++) {
        struct digest_view dv = {a->digests + g * pool, a->dig_ids, a->dig_start, 1, hd};
        digest_build_ref(&a->ctx, kv, &dv, n_tokens, batch, g, p->max_tokens);
    }
    for (int b = 0; b < batch; b++)
        for (int h = 0; h < nq; h++) {
            size_t l = (size_t)b * nq + h;
            struct digest_view dv = {a->digests + (h / G) * pool, a->dig_ids, a->dig_start + b, 1,
                                     hd};
            select_blocks_ref(&a->ctx, &a->one, q + l * hd, &dv, n_tokens + b,
                              a->scores + l * a->max_blocks, a->sel_idx + l * a->max_sel,
                              a->sel_count + l, 1, SELECT_HEADWISE);
        }
}

/* K of token t, KV head h, entry b in a host paged view. */
static const uint16_t *key_at(const struct kv_view *kv, int b, int t, int h)
{
    int page = kv->page_ids[kv->page_start[b] + t / kv->page_size];
    size_t page_elems = kv_page_elems(kv);
    return kv->pool + (size_t)page * page_elems +
           ((size_t)h * 2 * kv->page_size + t % kv->page_size) * kv->head_dim;
}

/* The exact attention mass of every query head of entry b per block: mass[j][i] = sum over the
 * block's tokens of exp(logit - max), total[j] their sum in block order. */
static void block_mass(struct mam_acc *a, const uint16_t *q, const struct kv_view *kv, int b, int n)
{
    const int hd = a->p.head_dim, nq = a->p.n_heads, G = nq / a->p.n_kv_heads;
    const int bs = a->p.block_size, nb = PULSE_CEIL_DIV(n, bs);
    for (int j = 0; j < nq; j++) {
        const uint16_t *qj = q + ((size_t)b * nq + j) * hd;
        float m = -INFINITY;
        for (int t = 0; t < n; t++) { /* as attn_decode_ref: fp32 dot, then scale */
            const uint16_t *k = key_at(kv, b, t, j / G);
            float s = 0.0f;
            for (int d = 0; d < hd; d++)
                s += bf16_to_f32(qj[d]) * bf16_to_f32(k[d]);
            a->logits[t] = s * a->p.scale;
            m = fmaxf(m, a->logits[t]);
        }
        double *mj = a->mass + (size_t)j * a->max_blocks, tot = 0.0;
        for (int i = 0; i < nb; i++) {
            double s = 0.0;
            for (int t = i * bs; t < PULSE_MIN(n, (i + 1) * bs); t++)
                s += exp((double)a->logits[t] - (double)m);
            mj[i] = s;
            tot += s;
        }
        a->total[j] = tot;
    }
}

void mam_acc_add_layer(struct mam_acc *a, int layer, const uint16_t *q, const struct kv_view *kv,
                       const int32_t *n_tokens, int batch)
{
    const struct mam_params *p = &a->p;
    PULSE_CHECK(layer >= 0 && layer < p->n_layers, "mam: layer out of range");
    PULSE_CHECK(batch >= 1 && batch <= p->max_batch, "mam: batch out of [1, max_batch]");
    PULSE_CHECK(kv->page_size == p->block_size && kv->n_kv_heads == p->n_kv_heads &&
                    kv->head_dim == p->head_dim,
                "mam: the KV view's page size, heads or head_dim differ from the params");
    for (int b = 0; b < batch; b++)
        PULSE_CHECK(n_tokens[b] >= 1 && n_tokens[b] <= p->max_tokens,
                    "mam: n_tokens out of [1, max_tokens]");
    if (p->query_selectors) {
        select_per_query_head(a, q, kv, n_tokens, batch);
    } else {
        struct digest_view dv = {a->digests, a->dig_ids, a->dig_start, p->n_kv_heads, p->head_dim};
        digest_build_ref(&a->ctx, kv, &dv, n_tokens, batch, SELECT_HEADWISE, p->max_tokens);
        select_blocks_ref(&a->ctx, &a->cfg, q, &dv, n_tokens, a->scores, a->sel_idx, a->sel_count,
                          batch, SELECT_HEADWISE);
    }
    const int ns = a->n_sel, nq = p->n_heads;
    for (int b = 0; b < batch; b++) {
        block_mass(a, q, kv, b, n_tokens[b]);
        for (int h = 0; h < ns; h++) {
            const int32_t *sel = a->sel_idx + ((size_t)b * ns + h) * a->max_sel;
            const int cnt = a->sel_count[(size_t)b * ns + h];
            for (int j = 0; j < nq; j++) {
                /* ascending indices, the same order as the total: a subset sums to <= it */
                const double *mj = a->mass + (size_t)j * a->max_blocks;
                double c = 0.0;
                for (int s = 0; s < cnt; s++)
                    c += mj[sel[s]];
                a->sum[(size_t)layer * ns + h] += fmin(1.0, c / a->total[j]);
            }
        }
        a->terms[layer] += nq;
    }
}

int mam_acc_finalize(const struct mam_acc *a, struct mam_profile *out, char *err, size_t errlen)
{
    const struct mam_params *p = &a->p;
    memset(out, 0, sizeof *out);
    for (int l = 0; l < p->n_layers; l++) {
        const int local = p->sliding_pattern > 0 && (l + 1) % p->sliding_pattern != 0;
        if (a->terms[l] == 0 && !local) {
            snprintf(err, errlen, "mam: layer %d has no observation", l);
            return PULSE_ERR_INVALID;
        }
    }
    if (mam_profile_init(out, p->n_layers, a->n_sel) != PULSE_OK) {
        snprintf(err, errlen, "mam: out of host memory");
        return PULSE_ERR_OOM;
    }
    mam_acc_table(a, out->mam);
    out->meta.budget_tokens = p->budget * p->block_size;
    out->meta.block_size = p->block_size;
    out->meta.sink = p->sink;
    out->meta.window = p->window;
    return PULSE_OK;
}

/* ------------------------------------------------------------------ probe */

struct mam_probe {
    struct mam_acc *acc, *also; /* also: fed the same observations, or NULL */
    const struct backend *be;
    const struct kctx *ctx;
    int stage, max_pages;
    size_t page_elems;
    void *mem; /* host staging, one allocation (NULL without staging) */
    size_t mem_bytes;
    uint16_t *q;          /* [max_batch][nq][hd] */
    int32_t *src_start;   /* [max_batch] the view's page starts, copied */
    int32_t *src_ids;     /* [max_batch][max_pages] the entries' page ids, copied */
    int32_t *ids, *start; /* identity page table of the staged pages */
    uint16_t *pages;      /* [max_batch * max_pages] pages */
    int64_t staged_bytes;
};

struct mam_probe *mam_probe_create(struct mam_acc *acc, const struct backend *be,
                                   const struct kctx *ctx, int stage, char *err, size_t errlen)
{
    struct mam_probe *p = mem_alloc(MEM_HOST, sizeof *p, "mam probe");
    if (!p) {
        snprintf(err, errlen, "mam probe: out of host memory");
        return NULL;
    }
    memset(p, 0, sizeof *p);
    const struct mam_params *mp = &acc->p;
    p->acc = acc;
    p->be = be;
    p->ctx = ctx;
    p->stage = stage || be->mem != MEM_HOST;
    if (!p->stage) return p;
    size_t B = (size_t)mp->max_batch;
    p->max_pages = PULSE_CEIL_DIV(mp->max_tokens, mp->block_size);
    p->page_elems = (size_t)mp->n_kv_heads * 2 * mp->block_size * mp->head_dim;
    size_t MP = (size_t)p->max_pages;
    size_t sizes[] = {2 * B * mp->n_heads * mp->head_dim, 4 * B, 4 * B * MP, 4 * B * MP, 4 * B,
                      2 * B * MP * p->page_elems};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(sizes); i++)
        p->mem_bytes += mem_aligned(sizes[i]);
    p->mem = mem_alloc(MEM_HOST, p->mem_bytes, "mam staging");
    if (!p->mem) {
        snprintf(err, errlen, "mam probe: out of host memory for %.1f MB of staging",
                 p->mem_bytes / 1e6);
        mam_probe_free(p);
        return NULL;
    }
    char *cur = p->mem;
    p->q = mem_carve(&cur, sizes[0]);
    p->src_start = mem_carve(&cur, sizes[1]);
    p->src_ids = mem_carve(&cur, sizes[2]);
    p->ids = mem_carve(&cur, sizes[3]);
    p->start = mem_carve(&cur, sizes[4]);
    p->pages = mem_carve(&cur, sizes[5]);
    for (size_t i = 0; i < B * MP; i++)
        p->ids[i] = (int32_t)i;
    for (size_t b = 0; b < B; b++)
        p->start[b] = (int32_t)(b * MP);
    return p;
}

void mam_probe_free(struct mam_probe *p)
{
    if (!p) return;
    mem_free(MEM_HOST, p->mem, p->mem_bytes);
    mem_free(MEM_HOST, p, sizeof *p);
}

int64_t mam_probe_staged_bytes(const struct mam_probe *p)
{
    return p->staged_bytes;
}

/* Copies what one layer's observation reads into staging: q, then per entry its page ids and
 * its pages, one copy per run of consecutive page ids. Returns the host view. */
static struct kv_view probe_stage(struct mam_probe *p, const uint16_t *q, const struct kv_view *kv,
                                  const int32_t *n_tokens, int batch)
{
    const struct mam_params *mp = &p->acc->p;
    const struct backend *be = p->be;
    size_t qb = sizeof(uint16_t) * (size_t)batch * mp->n_heads * mp->head_dim;
    be->download(p->ctx, p->q, q, qb);
    be->download(p->ctx, p->src_start, kv->page_start, sizeof(int32_t) * (size_t)batch);
    int64_t bytes = (int64_t)qb + 4 * batch;
    const size_t pb = sizeof(uint16_t) * p->page_elems;
    for (int b = 0; b < batch; b++) {
        int np = PULSE_CEIL_DIV(n_tokens[b], mp->block_size);
        int32_t *ids = p->src_ids + (size_t)b * p->max_pages;
        be->download(p->ctx, ids, kv->page_ids + p->src_start[b], sizeof(int32_t) * (size_t)np);
        bytes += 4 * np;
        uint16_t *dst = p->pages + (size_t)b * p->max_pages * p->page_elems;
        for (int i = 0; i < np;) {
            int run = 1;
            while (i + run < np && ids[i + run] == ids[i] + run)
                run++;
            be->download(p->ctx, dst + (size_t)i * p->page_elems,
                         kv->pool + (size_t)ids[i] * p->page_elems, pb * (size_t)run);
            bytes += (int64_t)(pb * (size_t)run);
            i += run;
        }
    }
    p->staged_bytes += bytes;
    struct kv_view hv = {p->pages,     p->ids, p->start, mp->block_size, mp->n_kv_heads,
                         mp->head_dim, 0,      0,        NULL,           NULL};
    return hv;
}

static void probe_after_attention(void *user, int layer, const uint16_t *q,
                                  const struct kv_view *kv, const int32_t *n_tokens, int batch)
{
    struct mam_probe *p = user;
    if (kv->window > 0) return; /* a sliding-window layer is never selected */
    if (!p->stage) {
        mam_acc_add_layer(p->acc, layer, q, kv, n_tokens, batch);
        if (p->also) mam_acc_add_layer(p->also, layer, q, kv, n_tokens, batch);
        return;
    }
    PULSE_CHECK(kv->page_size == p->acc->p.block_size && kv->n_kv_heads == p->acc->p.n_kv_heads &&
                    kv->head_dim == p->acc->p.head_dim,
                "mam probe: the KV view's shape differs from the params");
    struct kv_view hv = probe_stage(p, q, kv, n_tokens, batch);
    mam_acc_add_layer(p->acc, layer, p->q, &hv, n_tokens, batch);
    if (p->also) mam_acc_add_layer(p->also, layer, p->q, &hv, n_tokens, batch);
}

int mam_probe_also_feed(struct mam_probe *p, struct mam_acc *also, char *err, size_t errlen)
{
    const struct mam_params *a = &p->acc->p, *b = &also->p;
    if (a->n_layers != b->n_layers || a->n_heads != b->n_heads || a->n_kv_heads != b->n_kv_heads ||
        a->head_dim != b->head_dim || a->block_size != b->block_size || a->budget != b->budget ||
        a->sink != b->sink || a->window != b->window || a->max_batch > b->max_batch ||
        a->max_tokens > b->max_tokens || a->scale != b->scale ||
        a->sliding_pattern != b->sliding_pattern) {
        snprintf(err, errlen, "mam probe: the second accumulator's shape differs from the first's");
        return PULSE_ERR_INVALID;
    }
    p->also = also;
    return PULSE_OK;
}

struct engine_layer_hook mam_probe_hook(struct mam_probe *p)
{
    struct engine_layer_hook h = {.after_attention = probe_after_attention, .user = p};
    return h;
}

/* ------------------------------------------------------------------ profile */

int mam_profile_init(struct mam_profile *p, int n_layers, int n_kv_heads)
{
    memset(p, 0, sizeof *p);
    if (n_layers < 1 || n_kv_heads < 1) return PULSE_ERR_INVALID;
    p->mam = mem_alloc(MEM_HOST, sizeof(double) * (size_t)n_layers * n_kv_heads, "mam profile");
    if (!p->mam) return PULSE_ERR_OOM;
    memset(p->mam, 0, sizeof(double) * (size_t)n_layers * n_kv_heads);
    p->n_layers = n_layers;
    p->n_kv_heads = n_kv_heads;
    return PULSE_OK;
}

void mam_profile_free(struct mam_profile *p)
{
    if (!p) return;
    if (p->mam) mem_free(MEM_HOST, p->mam, sizeof(double) * (size_t)p->n_layers * p->n_kv_heads);
    memset(p, 0, sizeof *p);
}

void mam_profile_selectors(const struct mam_profile *p, int reversed, int *out_per_layer)
{
    for (int l = 0; l < p->n_layers; l++) {
        const double *row = p->mam + (size_t)l * p->n_kv_heads;
        int best = 0;
        for (int h = 1; h < p->n_kv_heads; h++)
            if (reversed ? row[h] < row[best] : row[h] > row[best]) best = h;
        out_per_layer[l] = best;
    }
}

static json_t *int_array(const int *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_integer(v[i]));
    return a;
}

int mam_profile_write(const struct mam_profile *p, const char *path, char *err, size_t errlen)
{
    if (!p->mam || p->n_layers < 1 || p->n_kv_heads < 1) {
        snprintf(err, errlen, "%s: empty profile", path);
        return PULSE_ERR_INVALID;
    }
    const struct mam_profile_meta *m = &p->meta;
    json_t *r = results_new("profile-heads");
    json_object_set_new(r, "model", json_string(m->model));
    json_object_set_new(r, "config",
                        json_pack("{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:I,s:s}", "budget_tokens",
                                  m->budget_tokens, "block_size", m->block_size, "sink", m->sink,
                                  "window", m->window, "steps", m->steps, "prompt", m->prompt,
                                  "batch", m->batch, "seed", (json_int_t)m->seed, "backend",
                                  m->backend));
    json_t *tab = json_array();
    for (int l = 0; l < p->n_layers; l++) {
        json_t *row = json_array();
        for (int h = 0; h < p->n_kv_heads; h++)
            json_array_append_new(row, json_real(p->mam[(size_t)l * p->n_kv_heads + h]));
        json_array_append_new(tab, row);
    }
    json_object_set_new(r, "mam", tab);
    int sel[p->n_layers];
    mam_profile_selectors(p, 0, sel);
    json_object_set_new(r, "selector", int_array(sel, p->n_layers));
    mam_profile_selectors(p, 1, sel);
    json_object_set_new(r, "selector_reversed", int_array(sel, p->n_layers));
    /* full precision (JSON_REAL_PRECISION 0 = 17 digits): the table round-trips exactly */
    const int rc = results_write_exact(r, path, err, errlen);
    json_decref(r);
    return rc;
}

/* The config integer `key` in [lo, hi], or -1 after writing "FILE: config.KEY: ..." to err. */
static int read_cfg_int(json_t *cfg, const char *path, const char *key, long lo, long hi, long *out,
                        char *err, size_t errlen)
{
    json_t *v = json_object_get(cfg, key);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        snprintf(err, errlen, "%s: config.%s: expected an integer in [%ld, %ld]", path, key, lo,
                 hi);
        return -1;
    }
    *out = (long)json_integer_value(v);
    return 0;
}

static int read_meta(json_t *r, const char *path, struct mam_profile_meta *m, char *err,
                     size_t errlen)
{
    json_t *v = json_object_get(r, "schema_version");
    if (!json_is_integer(v) || json_integer_value(v) != PULSE_SCHEMA_VERSION) {
        snprintf(err, errlen, "%s: schema_version: expected %d", path, PULSE_SCHEMA_VERSION);
        return -1;
    }
    v = json_object_get(r, "model");
    if (!json_is_string(v) || json_string_length(v) == 0 ||
        json_string_length(v) >= sizeof m->model) {
        snprintf(err, errlen, "%s: model: expected a model name (1..%zu characters)", path,
                 sizeof m->model - 1);
        return -1;
    }
    snprintf(m->model, sizeof m->model, "%s", json_string_value(v));
    json_t *cfg = json_object_get(r, "config");
    if (!json_is_object(cfg)) {
        snprintf(err, errlen, "%s: config: expected an object", path);
        return -1;
    }
    const char *keys[] = {"budget_tokens", "block_size", "sink", "window", "steps", "prompt"};
    int *dst[] = {&m->budget_tokens, &m->block_size, &m->sink, &m->window, &m->steps, &m->prompt};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(keys); i++) {
        long x;
        if (read_cfg_int(cfg, path, keys[i], i == 1 ? 1 : 0, INT32_MAX, &x, err, errlen)) return -1;
        *dst[i] = (int)x;
    }
    /* optional provenance */
    json_t *b = json_object_get(cfg, "batch"), *s = json_object_get(cfg, "seed");
    json_t *be = json_object_get(cfg, "backend");
    if (json_is_integer(b)) m->batch = (int)json_integer_value(b);
    if (json_is_integer(s)) m->seed = (uint64_t)json_integer_value(s);
    if (json_is_string(be)) snprintf(m->backend, sizeof m->backend, "%s", json_string_value(be));
    return 0;
}

/* The shape of "mam": n_layers rows of one common length n_kv in 1..64. */
static int read_shape(json_t *tab, const char *path, int *nl, int *nkv, char *err, size_t errlen)
{
    if (!json_is_array(tab) || json_array_size(tab) == 0 || json_array_size(tab) > 4096) {
        snprintf(err, errlen, "%s: mam: expected a non-empty array of per-layer arrays", path);
        return -1;
    }
    *nl = (int)json_array_size(tab);
    json_t *row0 = json_array_get(tab, 0);
    *nkv = json_is_array(row0) ? (int)json_array_size(row0) : 0;
    if (*nkv < 1 || *nkv > 64) {
        snprintf(err, errlen, "%s: mam[0]: expected an array of 1..64 per-KV-head values", path);
        return -1;
    }
    for (int l = 1; l < *nl; l++) {
        json_t *row = json_array_get(tab, l);
        if (!json_is_array(row) || (int)json_array_size(row) != *nkv) {
            snprintf(err, errlen, "%s: mam[%d]: expected an array of %d values (as mam[0])", path,
                     l, *nkv);
            return -1;
        }
    }
    return 0;
}

static int read_selector(json_t *r, const char *path, const struct mam_profile *p, int reversed,
                         char *err, size_t errlen)
{
    const char *key = reversed ? "selector_reversed" : "selector";
    json_t *a = json_object_get(r, key);
    if (!json_is_array(a) || (int)json_array_size(a) != p->n_layers) {
        snprintf(err, errlen, "%s: %s: expected an array of %d head indices", path, key,
                 p->n_layers);
        return -1;
    }
    int want[p->n_layers];
    mam_profile_selectors(p, reversed, want);
    for (int l = 0; l < p->n_layers; l++) {
        json_t *v = json_array_get(a, l);
        if (!json_is_integer(v) || json_integer_value(v) != want[l]) {
            snprintf(err, errlen, "%s: %s[%d]: expected %d, the %s-MAM head of the table", path,
                     key, l, want[l], reversed ? "lowest" : "highest");
            return -1;
        }
    }
    return 0;
}

int mam_profile_read(const char *path, const struct model_config *expect, struct mam_profile *out,
                     char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    json_t *r;
    int rc = results_read_json(path, 0, &r, err, errlen);
    if (rc != PULSE_OK) return rc;
    rc = PULSE_ERR_INVALID;
    int nl, nkv;
    struct mam_profile_meta meta = {0};
    json_t *tab = json_object_get(r, "mam");
    if (!json_is_object(r)) {
        snprintf(err, errlen, "%s: expected a JSON object at the top", path);
        goto out;
    }
    if (read_meta(r, path, &meta, err, errlen) || read_shape(tab, path, &nl, &nkv, err, errlen))
        goto out;
    if (expect && (nl != expect->n_layers || nkv != expect->n_kv_heads)) {
        snprintf(err, errlen,
                 "%s: mam: the profile (of %s) has %d layers x %d KV heads but model %s has %d "
                 "x %d",
                 path, meta.model, nl, nkv, expect->name, expect->n_layers, expect->n_kv_heads);
        goto out;
    }
    if ((rc = mam_profile_init(out, nl, nkv)) != PULSE_OK) {
        snprintf(err, errlen, "%s: out of host memory", path);
        goto out;
    }
    rc = PULSE_ERR_INVALID;
    for (int l = 0; l < nl; l++)
        for (int h = 0; h < nkv; h++) {
            json_t *v = json_array_get(json_array_get(tab, l), h);
            double x = json_number_value(v);
            if (!json_is_number(v) || !(x >= 0.0 && x <= 1.0)) {
                snprintf(err, errlen, "%s: mam[%d][%d]: expected a number in [0, 1]", path, l, h);
                goto fail;
            }
            out->mam[(size_t)l * nkv + h] = x;
        }
    out->meta = meta;
    if (read_selector(r, path, out, 0, err, errlen) || read_selector(r, path, out, 1, err, errlen))
        goto fail;
    rc = PULSE_OK;
    goto out;
fail:
    mam_profile_free(out);
out:
    json_decref(r);
    return rc;
}
