#include "accuracy/head_mass.h"

#include <math.h>
#include <string.h>

#include "common.h"
#include "mem.h"
#include "numeric.h"
#include "select.h"

struct head_mass {
    const struct kv_cache *kv;
    const struct model_config *c;
    const struct backend *be;
    const struct kctx *ctx;
    int bs, max_blocks, slot;
    struct select_cfg one;
    double *sum;  /* [n_layers][n_heads] */
    int64_t *obs; /* [n_layers] */
    /* host scratch */
    uint16_t *q;     /* [n_heads][hd] */
    uint16_t *pages; /* [max_blocks][page_elems] the layer's pages, ids 0.. */
    uint16_t *dig;   /* [n_kv_heads][max_blocks][2 hd] */
    int32_t *ident;  /* [max_blocks] */
    float *scores;   /* [max_blocks] */
    float *logit;    /* [max_tokens] */
    double *mass;    /* [n_heads][max_blocks] exact probability per block */
    int32_t *sel;    /* [max_blocks] */
    size_t page_elems, max_tokens;
};

#define HM_FIELDS(X)                                                                               \
    X(q, 2 * (size_t)c->n_heads * c->head_dim)                                                     \
    X(pages, 2 * (size_t)mb * hm->page_elems)                                                      \
    X(dig, 2 * (size_t)c->n_kv_heads * mb * 2 * c->head_dim)                                       \
    X(ident, 4 * (size_t)mb)                                                                       \
    X(scores, 4 * (size_t)mb)                                                                      \
    X(logit, 4 * hm->max_tokens)                                                                   \
    X(mass, 8 * (size_t)c->n_heads * mb)                                                           \
    X(sel, 4 * (size_t)mb)                                                                         \
    X(sum, 8 * (size_t)c->n_layers * c->n_heads)                                                   \
    X(obs, 8 * (size_t)c->n_layers)

struct head_mass *head_mass_create(struct engine *e, const struct kv_cache *kv, int page_size,
                                   int max_tokens, int budget_tokens, int sink, int window,
                                   char *err, size_t errlen)
{
    const struct model_config *c = engine_model(e)->cfg;
    if (page_size < 1 || max_tokens < 1 || budget_tokens < 0 || budget_tokens % page_size) {
        snprintf(err, errlen, "head mass: budget %d is not a multiple of the block size %d",
                 budget_tokens, page_size);
        return NULL;
    }
    struct head_mass *hm = mem_alloc(MEM_HOST, sizeof *hm, "head mass");
    if (!hm) return NULL;
    memset(hm, 0, sizeof *hm);
    hm->kv = kv;
    hm->c = c;
    hm->be = engine_model(e)->be;
    hm->ctx = engine_ctx(e);
    hm->bs = page_size;
    int mb = hm->max_blocks = PULSE_CEIL_DIV(max_tokens, page_size);
    hm->max_tokens = (size_t)max_tokens;
    hm->page_elems = (size_t)c->n_kv_heads * 2 * page_size * c->head_dim;
    hm->one = (struct select_cfg){1,    1,      c->head_dim, page_size, budget_tokens / page_size,
                                  sink, window, mb};
    if (select_cfg_check(&hm->one, err, errlen) != 0) {
        mem_free(MEM_HOST, hm, sizeof *hm);
        return NULL;
    }
    int ok = 1;
#define ALLOC(f, n) ok &= (hm->f = mem_alloc(MEM_HOST, (n), "head mass " #f)) != NULL;
    HM_FIELDS(ALLOC)
#undef ALLOC
    if (!ok) {
        snprintf(err, errlen, "head mass: out of host memory for %d tokens", max_tokens);
        head_mass_free(hm);
        return NULL;
    }
    for (int i = 0; i < mb; i++)
        hm->ident[i] = i;
    head_mass_reset(hm);
    return hm;
}

void head_mass_free(struct head_mass *hm)
{
    if (!hm) return;
    const struct model_config *c = hm->c;
    int mb = hm->max_blocks;
    (void)mb;
#define FREE(f, n) mem_free(MEM_HOST, hm->f, (n));
    HM_FIELDS(FREE)
#undef FREE
    mem_free(MEM_HOST, hm, sizeof *hm);
}

void head_mass_set_slot(struct head_mass *hm, int slot)
{
    hm->slot = slot;
}

void head_mass_reset(struct head_mass *hm)
{
    memset(hm->sum, 0, 8 * (size_t)hm->c->n_layers * hm->c->n_heads);
    memset(hm->obs, 0, 8 * (size_t)hm->c->n_layers);
}

/* Exact attention probability per block for every query head, into hm->mass. */
static void exact_mass(struct head_mass *hm, const struct kv_view *v, int n)
{
    const struct model_config *c = hm->c;
    int hd = c->head_dim, G = c->n_heads / c->n_kv_heads, nb = PULSE_CEIL_DIV(n, hm->bs);
    float scale = 1.0f / sqrtf((float)hd);
    for (int j = 0; j < c->n_heads; j++) {
        const uint16_t *qj = hm->q + (size_t)j * hd;
        float mx = -INFINITY;
        for (int t = 0; t < n; t++) {
            const uint16_t *k = v->pool + (size_t)(t / hm->bs) * hm->page_elems +
                                ((size_t)(j / G) * 2 * hm->bs + t % hm->bs) * hd;
            float s = 0.0f;
            for (int d = 0; d < hd; d++)
                s += bf16_to_f32(qj[d]) * bf16_to_f32(k[d]);
            hm->logit[t] = s * scale;
            mx = fmaxf(mx, hm->logit[t]);
        }
        double z = 0.0, *m = hm->mass + (size_t)j * hm->max_blocks;
        for (int i = 0; i < nb; i++)
            m[i] = 0.0;
        for (int t = 0; t < n; t++) {
            double p = exp((double)hm->logit[t] - mx);
            m[t / hm->bs] += p;
            z += p;
        }
        for (int i = 0; i < nb; i++)
            m[i] /= z;
    }
}

static void observe(void *user, int layer, const uint16_t *q, const struct kv_view *kv,
                    const int32_t *n_host, int batch)
{
    struct head_mass *hm = user;
    const struct model_config *c = hm->c;
    if (!model_layer_is_global(c, layer) || batch < 1) return;
    int n = n_host[0], nb = PULSE_CEIL_DIV(n, hm->bs), hd = c->head_dim;
    int G = c->n_heads / c->n_kv_heads;
    (void)kv;
    hm->be->download(hm->ctx, hm->q, q, 2 * (size_t)c->n_heads * hd);
    const int32_t *row = kv_cache_host_page_ids(hm->kv) + kv_cache_row(hm->kv, hm->slot, layer);
    const struct kv_view *dv_src = kv;
    for (int i = 0; i < nb; i++)
        hm->be->download(hm->ctx, hm->pages + (size_t)i * hm->page_elems,
                         dv_src->pool + (size_t)row[i] * hm->page_elems, 2 * hm->page_elems);
    int32_t zero = 0, nt = n, cnt = 0;
    struct kv_view hv = {hm->pages, hm->ident, &zero, hm->bs, c->n_kv_heads, hd, 0};
    for (int g = 0; g < c->n_kv_heads; g++) {
        struct digest_view dv = {hm->dig + (size_t)g * hm->max_blocks * 2 * hd, hm->ident, &zero, 1,
                                 hd};
        digest_build_ref(NULL, &hv, &dv, &nt, 1, g, n);
    }
    exact_mass(hm, &hv, n);
    for (int h = 0; h < c->n_heads; h++) {
        struct digest_view dv = {hm->dig + (size_t)(h / G) * hm->max_blocks * 2 * hd, hm->ident,
                                 &zero, 1, hd};
        select_blocks_ref(NULL, &hm->one, hm->q + (size_t)h * hd, &dv, &nt, hm->scores, hm->sel,
                          &cnt, 1, SELECT_HEADWISE);
        double covered = 0.0;
        for (int j = 0; j < c->n_heads; j++)
            for (int i = 0; i < cnt; i++)
                covered += hm->mass[(size_t)j * hm->max_blocks + hm->sel[i]];
        hm->sum[(size_t)layer * c->n_heads + h] += covered / c->n_heads;
    }
    hm->obs[layer]++;
}

struct engine_layer_hook head_mass_hook(struct head_mass *hm)
{
    struct engine_layer_hook h = {.after_attention = observe, .user = hm};
    return h;
}

void head_mass_table(const struct head_mass *hm, double *mam, int64_t *obs)
{
    const struct model_config *c = hm->c;
    for (int l = 0; l < c->n_layers; l++) {
        obs[l] = hm->obs[l];
        for (int h = 0; h < c->n_heads; h++) {
            size_t i = (size_t)l * c->n_heads + h;
            mam[i] = hm->obs[l] ? hm->sum[i] / (double)hm->obs[l] : 0.0;
        }
    }
}

void head_mass_selectors(const double *mam, int n_layers, int n_heads, int reversed, int32_t *out)
{
    for (int l = 0; l < n_layers; l++) {
        const double *r = mam + (size_t)l * n_heads;
        int best = 0;
        for (int h = 1; h < n_heads; h++)
            if (reversed ? r[h] < r[best] : r[h] > r[best]) best = h;
        out[l] = best;
    }
}
