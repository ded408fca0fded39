#include "accuracy/sparse_attn.h"

#include <math.h>
#include <string.h>

#include "common.h"
#include "mem.h"
#include "select.h"

static const char *const policy_names[SPARSE_POLICY_COUNT] = {
    "full",     "headwise",   "queryhead", "solohead", "solohead-q",
    "reversed", "reversed-q", "infinigen", "mean",     "infinigen-solohead"};

const char *sparse_policy_name(int policy)
{
    return policy >= 0 && policy < SPARSE_POLICY_COUNT ? policy_names[policy] : NULL;
}

int sparse_policy_find(const char *name)
{
    for (int i = 0; i < SPARSE_POLICY_COUNT; i++)
        if (!strcmp(name, policy_names[i])) return i;
    return -1;
}

const char *sparse_policy_names(void)
{
    return "full, headwise, queryhead, solohead, solohead-q, reversed, reversed-q, infinigen, "
           "mean, infinigen-solohead";
}

int sparse_policy_selector_kind(int policy)
{
    if (policy == SPARSE_SOLOHEAD || policy == SPARSE_REVERSED || policy == SPARSE_INFINIGEN_SOLO)
        return SPARSE_SEL_KV;
    if (policy == SPARSE_SOLOHEAD_Q || policy == SPARSE_REVERSED_Q) return SPARSE_SEL_QUERY;
    return SPARSE_SEL_NONE;
}

int sparse_policy_reversed(int policy)
{
    return policy == SPARSE_REVERSED || policy == SPARSE_REVERSED_Q;
}

int sparse_policy_approx(int policy)
{
    return policy == SPARSE_INFINIGEN || policy == SPARSE_INFINIGEN_SOLO;
}

int sparse_policy_lists(int policy, int n_heads, int n_kv_heads)
{
    if (policy == SPARSE_FULL) return 0;
    if (policy == SPARSE_HEADWISE || policy == SPARSE_INFINIGEN) return n_kv_heads;
    return policy == SPARSE_QUERYHEAD ? n_heads : 1;
}

/* The selection kernels of one backend. */
struct sel_fns {
    void (*digest_build)(const struct kctx *, const struct kv_view *, const struct digest_view *,
                         const int32_t *, int, int, int);
    void (*select_blocks)(const struct kctx *, const struct select_cfg *, const uint16_t *,
                          const struct digest_view *, const int32_t *, float *, int32_t *,
                          int32_t *, int, int);
    void (*approx_q)(const struct kctx *, const struct approx_q_weights *, const float *,
                     const int32_t *, void *, uint16_t *, int, int, int, int, const float *, float);
};

static const struct sel_fns fns_ref = {digest_build_ref, select_blocks_ref, select_approx_q_ref};
#ifdef PULSE_HAVE_CUDA
static const struct sel_fns fns_cuda = {digest_build_cuda, select_blocks_cuda,
                                        select_approx_q_cuda};
#endif

struct sparse_attn {
    struct engine *e;
    const struct kv_cache *kv;
    const struct model_config *c;
    const struct backend *be;
    const struct kctx *ctx;
    struct sel_fns fn;
    int bs, max_blocks, slot;
    int max_tokens; /* the entries' reservation (sparse_attn_create's): the attention's bound */
    struct sparse_params p;
    struct select_cfg one; /* one query head against one KV head's digests */
    struct select_cfg kvh; /* a KV head's query heads summed (headwise, solohead) */
    struct select_cfg all; /* every head (mean) */
    struct select_cfg wide; /* kvh with the spec_margin's budget (the speculation's lists) */
    struct sparse_stats st;
    sparse_list_fn observe;
    void *observe_user;
    /* backend memory, one allocation */
    void *mem;
    size_t mem_bytes;
    uint16_t *digests;    /* [n_kv_heads][max_blocks] digest pages of one head (2 * hd); mean:
                             [max_blocks] pages of every head (n_kv_heads * 2 * hd) */
    int32_t *d_ident;     /* [max_blocks] 0, 1, 2, ... (digest page ids) */
    int32_t *d_zero;      /* [1] 0 */
    float *d_scores;      /* [n_heads][max_blocks] */
    int32_t *d_sel;       /* [n_heads][max_blocks] selected blocks */
    int32_t *d_count;     /* [n_heads] */
    int32_t *d_pages;     /* [n_heads][max_blocks] page ids of the selected blocks */
    int32_t *d_n;         /* [n_heads] tokens attended per list */
    uint16_t *d_approx_q; /* [2][n_heads * hd]: layer l's approximate query in half l & 1 */
    void *d_approx_ws;    /* approximate query workspace */
    size_t approx_ws_bytes;
    uint16_t *d_partial_wq; /* [global layers][n_heads*hd][n_channels] (frac < 1) */
    int32_t *d_channels;    /* [global layers][n_channels] */
    int n_channels;
    int *global_index; /* [n_layers] index among global layers, -1 for local */
    int approx_for[2]; /* the layer whose approximate query half p of d_approx_q holds (made at
                          the previous layer's input: layer l in half l & 1); -1 none */
    /* spec_from hits: the attention over a predicted layer's predicted lists [n_heads * hd],
     * the layer's input residual and then that attention's residual [hidden] (floats), and the
     * layer d_hits_out holds (-1: none) */
    uint16_t *d_hits_out;
    float *d_hits_x;
    int hits_for;
    /* host */
    int32_t *h_sel, *h_count, *h_pages, *h_n;
    int32_t *h_exact, *h_exact_n;   /* the exact query's lists beside a speculated one's */
    int32_t *h_wide, *h_wide_n;     /* the approximate query's lists of the wide budget */
    int64_t *spec_exact, *spec_hit; /* [n_layers] (sparse_attn_layer_spec) */
    /* the speculated lists' previous step, per global layer and list: [n_global][n_kv_heads]
     * [2 (exact, approximate)][max_blocks] and their counts (-1: none since configure) */
    int32_t *h_prev, *h_prev_n;
    struct select_persist *persist; /* [n_layers] (sparse_attn_layer_persist) */
    int n_global;
};

static size_t device_bytes(const struct model_config *c, int max_blocks, int n_global, int nch,
                           size_t approx_ws)
{
    size_t H = (size_t)c->n_heads, hd = (size_t)c->head_dim, mb = (size_t)max_blocks;
    size_t parts[] = {2 * (size_t)c->n_kv_heads * mb * 2 * hd,
                      4 * mb,
                      4,
                      4 * H * mb,
                      4 * H * mb,
                      4 * H,
                      4 * H * mb,
                      4 * H,
                      2 * 2 * H * hd,
                      approx_ws,
                      nch < c->hidden ? 2 * (size_t)n_global * H * hd * nch : 0,
                      nch < c->hidden ? 4 * (size_t)n_global * nch : 0,
                      2 * H * hd,
                      4 * (size_t)c->hidden};
    size_t total = 0;
    for (size_t i = 0; i < PULSE_ARRAY_LEN(parts); i++)
        total += mem_aligned(parts[i]);
    return total;
}

/* Partial W_q (InfiniGen's channel subset) of every global layer, built on the host from the
 * engine's weights and uploaded. */
static int build_partial(struct sparse_attn *s, double frac)
{
    const struct model_config *c = s->c;
    const struct model *m = engine_model(s->e);
    size_t qrows = (size_t)c->n_heads * c->head_dim, wq = qrows * c->hidden;
    uint16_t *h_wq = mem_alloc(MEM_HOST, wq * 2, "wq copy");
    uint16_t *h_part = mem_alloc(MEM_HOST, qrows * (size_t)s->n_channels * 2, "partial wq");
    int32_t *h_ch = mem_alloc(MEM_HOST, sizeof(int32_t) * c->hidden, "channels");
    int rc = h_wq && h_part && h_ch ? PULSE_OK : PULSE_ERR_NOMEM;
    for (int l = 0; l < c->n_layers && rc == PULSE_OK; l++) {
        int g = s->global_index[l];
        if (g < 0) continue;
        s->be->download(s->ctx, h_wq, m->layers[l].wqkv, wq * 2);
        if (select_channels_build(h_wq, (int)qrows, c->hidden, frac, h_ch) != s->n_channels) {
            rc = PULSE_ERR_NOMEM;
            break;
        }
        select_partial_weight_build(h_wq, (int)qrows, c->hidden, h_ch, s->n_channels, h_part);
        s->be->upload(s->ctx, s->d_partial_wq + (size_t)g * qrows * s->n_channels, h_part,
                      qrows * (size_t)s->n_channels * 2);
        s->be->upload(s->ctx, s->d_channels + (size_t)g * s->n_channels, h_ch,
                      sizeof(int32_t) * s->n_channels);
    }
    mem_free(MEM_HOST, h_wq, wq * 2);
    mem_free(MEM_HOST, h_part, qrows * (size_t)s->n_channels * 2);
    mem_free(MEM_HOST, h_ch, sizeof(int32_t) * c->hidden);
    return rc;
}

struct sparse_attn *sparse_attn_create(struct engine *e, const struct kv_cache *kv, int page_size,
                                       int max_tokens, double infinigen_frac, char *err,
                                       size_t errlen)
{
    const struct model *m = engine_model(e);
    const struct model_config *c = m->cfg;
    if (!(infinigen_frac > 0.0 && infinigen_frac <= 1.0) || page_size < 1 || max_tokens < 1) {
        snprintf(err, errlen, "sparse attention: bad parameters (frac %g, page %d, tokens %d)",
                 infinigen_frac, page_size, max_tokens);
        return NULL;
    }
    int max_blocks = PULSE_CEIL_DIV(max_tokens, page_size);
    if (max_blocks > SELECT_MAX_BLOCKS || c->head_dim > SELECT_MAX_HEAD_DIM) {
        snprintf(err, errlen, "sparse attention: %d blocks or head_dim %d beyond select.h's limits",
                 max_blocks, c->head_dim);
        return NULL;
    }
    struct sparse_attn *s = mem_alloc(MEM_HOST, sizeof *s, "sparse attn");
    if (!s) goto oom;
    memset(s, 0, sizeof *s);
    s->e = e;
    s->kv = kv;
    s->c = c;
    s->be = m->be;
    s->ctx = engine_ctx(e);
    s->bs = page_size;
    s->max_blocks = max_blocks;
    s->max_tokens = max_tokens;
    s->fn = fns_ref;
#ifdef PULSE_HAVE_CUDA
    if (s->be->mem == MEM_DEVICE) s->fn = fns_cuda;
#endif
    s->global_index = mem_alloc(MEM_HOST, sizeof(int) * c->n_layers, "global index");
    if (!s->global_index) goto oom;
    int n_global = 0;
    for (int l = 0; l < c->n_layers; l++)
        s->global_index[l] = model_layer_is_global(c, l) ? n_global++ : -1;
    s->n_channels = (int)ceil(infinigen_frac * c->hidden);
    s->n_channels = PULSE_MIN(PULSE_MAX(s->n_channels, 1), c->hidden);
    s->approx_ws_bytes = select_approx_q_workspace_bytes(1, c->hidden, c->n_heads, c->head_dim);
    s->mem_bytes = device_bytes(c, max_blocks, n_global, s->n_channels, s->approx_ws_bytes);
    s->mem = mem_alloc(s->be->mem, s->mem_bytes, "sparse attn");
    size_t H = (size_t)c->n_heads, mb = (size_t)max_blocks, hd = (size_t)c->head_dim;
    s->h_sel = mem_alloc(MEM_HOST, 4 * H * mb, "sel host");
    s->h_pages = mem_alloc(MEM_HOST, 4 * H * mb, "pages host");
    s->h_count = mem_alloc(MEM_HOST, 4 * H, "count host");
    s->h_n = mem_alloc(MEM_HOST, 4 * H, "n host");
    s->h_exact = mem_alloc(MEM_HOST, 4 * H * mb, "exact lists host");
    s->h_exact_n = mem_alloc(MEM_HOST, 4 * H, "exact counts host");
    s->h_wide = mem_alloc(MEM_HOST, 4 * H * mb, "wide lists host");
    s->h_wide_n = mem_alloc(MEM_HOST, 4 * H, "wide counts host");
    s->spec_exact = mem_alloc(MEM_HOST, 2 * sizeof(int64_t) * c->n_layers, "speculation");
    s->n_global = n_global;
    const size_t units = (size_t)n_global * c->n_kv_heads * 2;
    s->h_prev = mem_alloc(MEM_HOST, 4 * units * mb, "speculated lists, previous step");
    s->h_prev_n = mem_alloc(MEM_HOST, 4 * units, "speculated counts, previous step");
    s->persist = mem_alloc(MEM_HOST, sizeof *s->persist * c->n_layers, "speculation persistence");
    if (!s->mem || !s->h_sel || !s->h_pages || !s->h_count || !s->h_n || !s->h_exact ||
        !s->h_exact_n || !s->h_wide || !s->h_wide_n || !s->spec_exact || !s->h_prev ||
        !s->h_prev_n || !s->persist)
        goto oom;
    s->spec_hit = s->spec_exact + c->n_layers;
    char *cur = s->mem;
    s->digests = mem_carve(&cur, 2 * (size_t)c->n_kv_heads * mb * 2 * hd);
    s->d_ident = mem_carve(&cur, 4 * mb);
    s->d_zero = mem_carve(&cur, 4);
    s->d_scores = mem_carve(&cur, 4 * H * mb);
    s->d_sel = mem_carve(&cur, 4 * H * mb);
    s->d_count = mem_carve(&cur, 4 * H);
    s->d_pages = mem_carve(&cur, 4 * H * mb);
    s->d_n = mem_carve(&cur, 4 * H);
    s->d_approx_q = mem_carve(&cur, 2 * 2 * H * hd);
    s->d_approx_ws = mem_carve(&cur, s->approx_ws_bytes);
    if (s->n_channels < c->hidden) {
        s->d_partial_wq = mem_carve(&cur, 2 * (size_t)n_global * H * hd * s->n_channels);
        s->d_channels = mem_carve(&cur, 4 * (size_t)n_global * s->n_channels);
    }
    s->d_hits_out = mem_carve(&cur, 2 * H * hd);
    s->d_hits_x = mem_carve(&cur, 4 * (size_t)c->hidden);
    for (int i = 0; i < max_blocks; i++) /* the host page buffer stages the identity ids */
        s->h_pages[i] = i;
    s->be->upload(s->ctx, s->d_ident, s->h_pages, 4 * mb);
    s->h_pages[0] = 0;
    s->be->upload(s->ctx, s->d_zero, s->h_pages, 4);
    if (s->n_channels < c->hidden && build_partial(s, infinigen_frac) != PULSE_OK) goto oom;
    return s;
oom:
    snprintf(err, errlen, "sparse attention: out of memory");
    sparse_attn_free(s);
    return NULL;
}

void sparse_attn_free(struct sparse_attn *s)
{
    if (!s) return;
    size_t H = (size_t)s->c->n_heads, mb = (size_t)s->max_blocks;
    mem_free(s->be->mem, s->mem, s->mem_bytes);
    mem_free(MEM_HOST, s->h_sel, 4 * H * mb);
    mem_free(MEM_HOST, s->h_pages, 4 * H * mb);
    mem_free(MEM_HOST, s->h_count, 4 * H);
    mem_free(MEM_HOST, s->h_n, 4 * H);
    mem_free(MEM_HOST, s->h_exact, 4 * H * mb);
    mem_free(MEM_HOST, s->h_exact_n, 4 * H);
    mem_free(MEM_HOST, s->h_wide, 4 * H * mb);
    mem_free(MEM_HOST, s->h_wide_n, 4 * H);
    mem_free(MEM_HOST, s->spec_exact, 2 * sizeof(int64_t) * s->c->n_layers);
    const size_t units = (size_t)s->n_global * s->c->n_kv_heads * 2;
    mem_free(MEM_HOST, s->h_prev, 4 * units * mb);
    mem_free(MEM_HOST, s->h_prev_n, 4 * units);
    mem_free(MEM_HOST, s->persist, sizeof *s->persist * s->c->n_layers);
    mem_free(MEM_HOST, s->global_index, sizeof(int) * s->c->n_layers);
    mem_free(MEM_HOST, s, sizeof *s);
}

int sparse_attn_configure(struct sparse_attn *s, const struct sparse_params *p, int slot, char *err,
                          size_t errlen)
{
    const struct model_config *c = s->c;
    if (p->policy < 0 || p->policy >= SPARSE_POLICY_COUNT) {
        snprintf(err, errlen, "unknown sparse policy %d", p->policy);
        return PULSE_ERR_INVALID;
    }
    if (p->budget_tokens < 0 || p->budget_tokens % s->bs || p->sink < 0 || p->window < 0) {
        snprintf(err, errlen,
                 "budget %d tokens: not a multiple of the block size %d (or "
                 "negative sink/window)",
                 p->budget_tokens, s->bs);
        return PULSE_ERR_INVALID;
    }
    if (!(p->spec_margin >= 0.0 && p->spec_margin <= 1.0)) {
        snprintf(err, errlen, "speculation margin %g: not in [0, 1]", p->spec_margin);
        return PULSE_ERR_INVALID;
    }
    if (p->spec_from < SPARSE_SPEC_INPUT || p->spec_from > SPARSE_SPEC_HITS) {
        snprintf(err, errlen, "speculation point %d: not input (0), mid (1) or hits (2)",
                 p->spec_from);
        return PULSE_ERR_INVALID;
    }
    const int kind = sparse_policy_selector_kind(p->policy);
    const int n_sel = kind == SPARSE_SEL_KV ? c->n_kv_heads : c->n_heads;
    if (kind != SPARSE_SEL_NONE && !p->selector) {
        snprintf(err, errlen, "policy %s needs a selector head per layer",
                 sparse_policy_name(p->policy));
        return PULSE_ERR_INVALID;
    }
    if (kind != SPARSE_SEL_NONE)
        for (int l = 0; l < c->n_layers; l++)
            if (p->selector[l] < 0 || p->selector[l] >= n_sel) {
                snprintf(err, errlen, "selector of layer %d: %d is not a %s head (0..%d)", l,
                         p->selector[l], kind == SPARSE_SEL_KV ? "KV" : "query", n_sel - 1);
                return PULSE_ERR_INVALID;
            }
    s->p = *p;
    s->slot = slot;
    memset(&s->st, 0, sizeof s->st);
    memset(s->spec_exact, 0, 2 * sizeof(int64_t) * c->n_layers);
    memset(s->persist, 0, sizeof *s->persist * c->n_layers);
    memset(s->h_prev_n, 0xff, 4 * (size_t)s->n_global * c->n_kv_heads * 2); /* -1 */
    s->approx_for[0] = s->approx_for[1] = -1;
    s->hits_for = -1;
    s->one = (struct select_cfg){1,       1,         c->head_dim,   s->bs, p->budget_tokens / s->bs,
                                 p->sink, p->window, s->max_blocks, 0};
    s->kvh = s->one;
    s->kvh.n_heads = c->n_heads / c->n_kv_heads;
    s->all = s->one;
    s->all.n_heads = c->n_heads, s->all.n_kv_heads = c->n_kv_heads;
    s->wide = s->kvh;
    s->wide.budget = select_widened_budget(s->kvh.budget, p->spec_margin);
    return select_cfg_check(&s->one, err, errlen) == 0 ? PULSE_OK : PULSE_ERR_INVALID;
}

void sparse_attn_set_list_observer(struct sparse_attn *s, sparse_list_fn fn, void *user)
{
    s->observe = fn;
    s->observe_user = user;
}

void sparse_attn_get_stats(const struct sparse_attn *s, struct sparse_stats *out)
{
    *out = s->st;
}

void sparse_attn_layer_spec(const struct sparse_attn *s, int layer, int64_t *exact, int64_t *hit)
{
    PULSE_CHECK(layer >= 0 && layer < s->c->n_layers, "sparse_attn_layer_spec: no such layer");
    *exact = s->spec_exact[layer];
    *hit = s->spec_hit[layer];
}

void sparse_attn_layer_persist(const struct sparse_attn *s, int layer, struct select_persist *out)
{
    PULSE_CHECK(layer >= 0 && layer < s->c->n_layers, "sparse_attn_layer_persist: no such layer");
    *out = s->persist[layer];
}

static struct digest_view digests_of(const struct sparse_attn *s, int kv_head)
{
    size_t page = 2 * (size_t)s->c->head_dim;
    struct digest_view dv = {s->digests + (size_t)kv_head * s->max_blocks * page, s->d_ident,
                             s->d_zero, 1, s->c->head_dim};
    return dv;
}

/* Selects list l of n_lists (from KV head heads[l], its query heads' summed scores) with cfg
 * and query q into d_sel's row l and d_count[l]. */
static void select_heads(struct sparse_attn *s, const struct select_cfg *cfg, const uint16_t *q,
                         const int32_t *n_tokens, int n_lists, const int *heads)
{
    const size_t hd = (size_t)s->c->head_dim, mb = (size_t)s->max_blocks;
    const int G = s->c->n_heads / s->c->n_kv_heads;
    /* a row of d_sel is max_blocks long: any budget's list fits */
    PULSE_CHECK(select_max_selected(cfg) <= s->max_blocks, "sparse attention: list stride");
    for (int l = 0; l < n_lists; l++) {
        struct digest_view dv = digests_of(s, heads[l]);
        s->fn.select_blocks(s->ctx, cfg, q + (size_t)heads[l] * G * hd, &dv, n_tokens,
                            s->d_scores + l * mb, s->d_sel + l * mb, s->d_count + l, 1,
                            SELECT_HEADWISE);
    }
}

/* select_heads, then the lists read back into host[l * max_blocks] and counts[l]. */
static void select_lists(struct sparse_attn *s, const struct select_cfg *cfg, const uint16_t *q,
                         const int32_t *n_tokens, int n_lists, const int *heads, int32_t *host,
                         int32_t *counts)
{
    const size_t mb = (size_t)s->max_blocks;
    select_heads(s, cfg, q, n_tokens, n_lists, heads);
    s->be->download(s->ctx, counts, s->d_count, 4 * (size_t)n_lists);
    for (int l = 0; l < n_lists; l++)
        s->be->download(s->ctx, host + (size_t)l * mb, s->d_sel + (size_t)l * mb,
                        4 * (size_t)counts[l]);
}

/* A speculated layer's lists (on the host in h_sel, n_lists of them, list l from KV head
 * heads[l], made from the approximate query qs) against the exact query's (the real q): each
 * exact list made again with q, and its blocks chosen by score (the forced ones left out)
 * looked up in the speculated list, or with a spec_margin in the list qs makes with the wide
 * budget; the attended lists (h_sel) against the list's previous step (select_persist_add),
 * then kept for the next. The attention's pages were uploaded before: d_sel is free. */
static void measure_speculation(struct sparse_attn *s, int layer, const uint16_t *q,
                                const uint16_t *qs, const int32_t *n_tokens, int n, int n_lists,
                                const int *heads)
{
    const size_t mb = (size_t)s->max_blocks;
    const int nb = PULSE_CEIL_DIV(n, s->bs), wide = s->p.spec_margin > 0;
    select_lists(s, &s->kvh, q, n_tokens, n_lists, heads, s->h_exact, s->h_exact_n);
    if (wide) select_lists(s, &s->wide, qs, n_tokens, n_lists, heads, s->h_wide, s->h_wide_n);
    const int32_t *looked = wide ? s->h_wide : s->h_sel,
                  *looked_n = wide ? s->h_wide_n : s->h_count;
    for (int l = 0; l < n_lists; l++) {
        const int32_t *spec = s->h_sel + (size_t)l * mb, *ex = s->h_exact + (size_t)l * mb;
        const int32_t *pred = looked + (size_t)l * mb;
        int scored, c0, c1;
        const int hit = select_overlap(nb, s->p.sink, s->p.window, ex, s->h_exact_n[l], pred,
                                       looked_n[l], &scored);
        s->spec_exact[layer] += scored, s->spec_hit[layer] += hit;
        s->st.spec_exact += scored, s->st.spec_hit += hit;
        select_candidates(nb, s->p.sink, s->p.window, &c0, &c1);
        for (int i = 0; i < looked_n[l]; i++) /* its blocks chosen by score */
            s->st.spec_predicted += pred[i] >= c0 && pred[i] < c1;
        const size_t u = ((size_t)s->global_index[layer] * s->c->n_kv_heads + l) * 2;
        int32_t *pe = s->h_prev + u * mb, *pa = pe + mb, *pn = s->h_prev_n + u;
        if (pn[0] >= 0)
            select_persist_add(nb, s->p.sink, s->p.window, ex, s->h_exact_n[l], spec, s->h_count[l],
                               pe, pn[0], pa, pn[1], &s->persist[layer]);
        memcpy(pe, ex, 4 * (size_t)s->h_exact_n[l]);
        memcpy(pa, spec, 4 * (size_t)s->h_count[l]);
        pn[0] = s->h_exact_n[l], pn[1] = s->h_count[l];
    }
}

/* Reads the lists back, maps blocks to the layer's page ids, uploads the page lists and the
 * attended lengths; lists the output is attended over (attended) are counted and observed. */
static void pages_of(struct sparse_attn *s, int layer, int n_lists, int n_tokens, int attended)
{
    int stride = s->max_blocks, nb = PULSE_CEIL_DIV(n_tokens, s->bs);
    s->be->download(s->ctx, s->h_count, s->d_count, 4 * (size_t)n_lists);
    const int32_t *row = kv_cache_host_page_ids(s->kv) + kv_cache_row(s->kv, s->slot, layer);
    for (int l = 0; l < n_lists; l++) {
        int cnt = s->h_count[l];
        s->be->download(s->ctx, s->h_sel + (size_t)l * stride, s->d_sel + (size_t)l * stride,
                        4 * (size_t)cnt);
        const int32_t *sel = s->h_sel + (size_t)l * stride;
        PULSE_CHECK(cnt >= 1 && sel[cnt - 1] == nb - 1, "selection without its tail block");
        for (int i = 0; i < cnt; i++)
            s->h_pages[(size_t)l * stride + i] = row[sel[i]];
        /* every selected block is full but the tail, which is last */
        s->h_n[l] = (cnt - 1) * s->bs + (n_tokens - (nb - 1) * s->bs);
        if (!attended) continue;
        s->st.lists++;
        s->st.attended_tokens += s->h_n[l];
        s->st.context_tokens += n_tokens;
        if (s->observe) s->observe(s->observe_user, layer, l, sel, cnt, n_tokens);
    }
    for (int l = 0; l < n_lists; l++)
        s->be->upload(s->ctx, s->d_pages + (size_t)l * stride, s->h_pages + (size_t)l * stride,
                      4 * (size_t)s->h_count[l]);
    s->be->upload(s->ctx, s->d_n, s->h_n, 4 * (size_t)n_lists);
}

/* Attention of query heads [h0, h0 + nq) over list l's pages: of every KV head (kv_head < 0,
 * nq = all query heads), or of KV head kv_head alone (its G query heads or one of them). */
static void attend_list(struct sparse_attn *s, const struct kv_view *kv, const uint16_t *q,
                        uint16_t *out, int l, int kv_head, int h0, int nq)
{
    struct kv_view v = *kv;
    v.page_ids = s->d_pages + (size_t)l * s->max_blocks;
    v.page_start = s->d_zero;
    v.window = 0;
    if (kv_head >= 0) {
        v.page_stride = kv_page_elems(kv);
        v.pool = kv->pool + (size_t)kv_head * 2 * kv->page_size * kv->head_dim;
        v.n_kv_heads = 1;
    }
    size_t hd = (size_t)s->c->head_dim;
    /* bounded as the serving path's attention (select_attend_bound): the same split plan */
    s->be->attn_decode(s->ctx, q + h0 * hd, &v, s->d_n + l, out + h0 * hd, 1, nq,
                       select_attend_bound(&s->kvh, s->max_tokens), 1.0f / sqrtf((float)hd));
}

/* The lists of KV heads heads[0..n_lists) (each from its query heads' summed scores of query
 * qx), their pages uploaded (pages_of). */
static void kv_lists(struct sparse_attn *s, int layer, const uint16_t *qx, const int32_t *n_tokens,
                     int n, int n_lists, const int *heads, int attended)
{
    select_heads(s, &s->kvh, qx, n_tokens, n_lists, heads);
    pages_of(s, layer, n_lists, n, attended);
}

/* Attention of every query head over the uploaded lists: one list serving them all, or list g
 * serving KV head g's query heads. */
static void kv_attend(struct sparse_attn *s, const struct kv_view *kv, const uint16_t *q,
                      uint16_t *out, int n_lists)
{
    const int G = s->c->n_heads / s->c->n_kv_heads;
    if (n_lists == 1) {
        attend_list(s, kv, q, out, 0, -1, 0, s->c->n_heads);
        return;
    }
    for (int g = 0; g < n_lists; g++)
        attend_list(s, kv, q, out, g, g, g * G, G);
}

/* Lists of KV heads (headwise, solohead and their kinds) selected with qs (the approximate
 * query where the layer was predicted, else q), measured against q's where they differ, and
 * attended with q. With spec_from hits a predicted layer is attended over q's lists (the exact
 * policy's) and over the predicted ones into d_hits_out, the next layer's prediction's source. */
static void kv_select_attend(struct sparse_attn *s, int layer, const uint16_t *q,
                             const uint16_t *qs, const struct kv_view *kv, const int32_t *n_tokens,
                             int n, uint16_t *out, int n_lists, const int *heads)
{
    const int hits = s->p.spec_from == SPARSE_SPEC_HITS && qs != q;
    kv_lists(s, layer, qs, n_tokens, n, n_lists, heads, !hits);
    if (qs != q) measure_speculation(s, layer, q, qs, n_tokens, n, n_lists, heads);
    if (hits) {
        kv_attend(s, kv, q, s->d_hits_out, n_lists);
        s->hits_for = layer;
        kv_lists(s, layer, q, n_tokens, n, n_lists, heads, 1);
    }
    kv_attend(s, kv, q, out, n_lists);
}

static int sparse_attend(void *user, int layer, const uint16_t *q, const struct kv_view *kv,
                         const int32_t *n_tokens, const int32_t *n_host, uint16_t *out, int batch)
{
    struct sparse_attn *s = user;
    const struct model_config *c = s->c;
    PULSE_CHECK(batch == 1, "sparse attention decodes one request at a time");
    if (s->p.policy == SPARSE_FULL || s->global_index[layer] < 0) return 0;
    int n = n_host[0], nb = PULSE_CEIL_DIV(n, s->bs);
    if (select_count_for(&s->one, n) >= nb) { /* the budget covers the whole context */
        s->st.dense_calls++;
        return 0;
    }
    s->st.sparse_calls++;
    struct kv_view full = *kv;
    full.window = 0;
    size_t hd = (size_t)c->head_dim, mb = (size_t)s->max_blocks;
    int G = c->n_heads / c->n_kv_heads, nh = c->n_heads;
    if (s->p.policy == SPARSE_MEAN) { /* every head's digests, one list from all the scores */
        struct digest_view dv = {s->digests, s->d_ident, s->d_zero, c->n_kv_heads, c->head_dim};
        s->fn.digest_build(s->ctx, &full, &dv, n_tokens, 1, SELECT_MEAN, n);
        s->fn.select_blocks(s->ctx, &s->all, q, &dv, n_tokens, s->d_scores, s->d_sel, s->d_count, 1,
                            SELECT_MEAN);
        pages_of(s, layer, 1, n, 1);
        attend_list(s, kv, q, out, 0, -1, 0, nh);
        return 1;
    }
    for (int g = 0; g < c->n_kv_heads; g++) {
        struct digest_view dv = digests_of(s, g);
        s->fn.digest_build(s->ctx, &full, &dv, n_tokens, 1, g, n);
    }
    /* the selection query: infinigen's approximate one, made at the previous layer's input (a
     * global first layer has no speculation: its real q), or the real q */
    const uint16_t *qs = q;
    if (sparse_policy_approx(s->p.policy)) {
        if (s->approx_for[layer & 1] == layer)
            qs = s->d_approx_q + (size_t)(layer & 1) * nh * hd;
        else
            s->st.unspeculated++;
    }
    switch (s->p.policy) {
    case SPARSE_SOLOHEAD:
    case SPARSE_REVERSED:
    case SPARSE_INFINIGEN_SOLO: { /* KV head g's summed list serves every head */
        int g = s->p.selector[layer];
        kv_select_attend(s, layer, q, qs, kv, n_tokens, n, out, 1, &g);
        break;
    }
    case SPARSE_SOLOHEAD_Q:
    case SPARSE_REVERSED_Q: { /* query head h's list serves every head */
        int h = s->p.selector[layer];
        struct digest_view dv = digests_of(s, h / G);
        s->fn.select_blocks(s->ctx, &s->one, q + h * hd, &dv, n_tokens, s->d_scores, s->d_sel,
                            s->d_count, 1, SELECT_HEADWISE);
        pages_of(s, layer, 1, n, 1);
        attend_list(s, kv, q, out, 0, -1, 0, nh);
        break;
    }
    case SPARSE_QUERYHEAD:
        for (int h = 0; h < nh; h++) {
            struct digest_view dv = digests_of(s, h / G);
            s->fn.select_blocks(s->ctx, &s->one, q + h * hd, &dv, n_tokens, s->d_scores + h * mb,
                                s->d_sel + h * mb, s->d_count + h, 1, SELECT_HEADWISE);
        }
        pages_of(s, layer, nh, n, 1);
        for (int h = 0; h < nh; h++)
            attend_list(s, kv, q, out, h, h / G, h, 1);
        break;
    default: { /* headwise, infinigen: a list per KV head from its query heads' scores */
        int heads[64];
        PULSE_CHECK(c->n_kv_heads <= 64, "sparse attention: more than 64 KV heads");
        for (int g = 0; g < c->n_kv_heads; g++)
            heads[g] = g;
        kv_select_attend(s, layer, q, qs, kv, n_tokens, n, out, c->n_kv_heads, heads);
        break;
    }
    }
    return 1;
}

/* infinigen, infinigen-solohead: the approximate query of the layer after `layer`, when it is
 * global, from the residual x: the hook's before_layer (layer's input), or with spec_from mid
 * its mid_layer (its residual after the attention). */
static void approx_next(void *user, int layer, const float *x, const int32_t *pos, int batch)
{
    struct sparse_attn *s = user;
    const struct model_config *c = s->c;
    int next = layer + 1;
    if (!sparse_policy_approx(s->p.policy) || next >= c->n_layers || s->global_index[next] < 0)
        return;
    const struct layer_weights *w = &engine_model(s->e)->layers[next];
    size_t qrows = (size_t)c->n_heads * c->head_dim;
    int g = s->global_index[next];
    struct approx_q_weights aw = {w->attn_norm, w->wqkv, w->q_norm, NULL, c->hidden};
    if (s->n_channels < c->hidden) {
        aw.wq = s->d_partial_wq + (size_t)g * qrows * s->n_channels;
        aw.channels = s->d_channels + (size_t)g * s->n_channels;
        aw.n_channels = s->n_channels;
    }
    uint16_t *dst = s->d_approx_q + (size_t)(next & 1) * c->n_heads * c->head_dim;
    s->fn.approx_q(s->ctx, &aw, x, pos, s->d_approx_ws, dst, batch, c->hidden, c->n_heads,
                   c->head_dim, w->rope_inv_freq, c->norm_eps);
    s->approx_for[next & 1] = next;
}

/* spec_from hits: the layer's input residual kept (before_layer), the source of the residual
 * an attention over its predicted lists gives (hits_next). */
static void keep_input(void *user, int layer, const float *x, const int32_t *pos, int batch)
{
    (void)layer, (void)pos;
    struct sparse_attn *s = user;
    s->be->copy_async(s->ctx, s->d_hits_x, x, sizeof(float) * (size_t)batch * s->c->hidden);
}

/* spec_from hits, at mid-layer: the next layer's approximate query from the input plus the
 * attention over the layer's predicted lists where it was predicted (kv_select_attend), else
 * from the residual x (mid-layer). */
static void hits_next(void *user, int layer, const float *x, const int32_t *pos, int batch)
{
    struct sparse_attn *s = user;
    if (s->hits_for == layer) {
        engine_attn_add(s->e, batch, layer, s->d_hits_out, s->d_hits_x);
        x = s->d_hits_x;
        s->st.spec_from_hits++;
    }
    s->hits_for = -1;
    approx_next(user, layer, x, pos, batch);
}

struct engine_layer_hook sparse_attn_hook(struct sparse_attn *s)
{
    struct engine_layer_hook h = {.attend = sparse_attend, .user = s};
    if (sparse_policy_approx(s->p.policy)) {
        if (s->p.spec_from == SPARSE_SPEC_HITS) {
            h.before_layer = keep_input;
            h.mid_layer = hits_next;
        } else if (s->p.spec_from == SPARSE_SPEC_MID) {
            h.mid_layer = approx_next;
        } else {
            h.before_layer = approx_next;
        }
    }
    return h;
}
