/* CPU references of the selection kernels (select.h) and the host helpers: plain loops written
 * for clarity. Nothing here allocates except select_channels_build (offline). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "numeric.h"
#include "select.h"

/* ------------------------------------------------------------------ host helpers */

int select_cfg_check(const struct select_cfg *cfg, char *err, size_t errlen)
{
    const char *why = NULL;
    if (cfg->n_kv_heads < 1 || cfg->n_kv_heads > 64)
        why = "n_kv_heads must be in 1..64";
    else if (cfg->n_heads < cfg->n_kv_heads || cfg->n_heads % cfg->n_kv_heads != 0)
        why = "n_heads must be a positive multiple of n_kv_heads";
    else if (cfg->head_dim < 1 || cfg->head_dim > SELECT_MAX_HEAD_DIM)
        why = "head_dim must be in 1..512";
    else if (cfg->block_size < 1)
        why = "block_size must be >= 1";
    else if (cfg->budget < 0)
        why = "budget (blocks) must be >= 0";
    else if (cfg->sink < 0)
        why = "sink (blocks) must be >= 0";
    else if (cfg->window < 0)
        why = "window (blocks) must be >= 0";
    else if (cfg->max_blocks < 1 || cfg->max_blocks > SELECT_MAX_BLOCKS)
        why = "max_blocks must be in 1..32768";
    else if (cfg->list_stride < 0 || cfg->list_stride > SELECT_MAX_BLOCKS)
        why = "list_stride must be in 0..32768";
    if (!why) return 0;
    if (err && errlen) snprintf(err, errlen, "select config: %s", why);
    return -1;
}

int select_digest_heads(int n_kv_heads, int sel_head)
{
    return sel_head < 0 ? n_kv_heads : 1;
}

void select_check_heads(int n_kv_heads, int head_dim, const struct digest_view *dv, int sel_head)
{
    PULSE_CHECK(sel_head == SELECT_HEADWISE || sel_head == SELECT_MEAN ||
                    (sel_head >= 0 && sel_head < n_kv_heads),
                "sel_head must be SELECT_HEADWISE, SELECT_MEAN or a KV head");
    if (!dv) return;
    PULSE_CHECK(dv->head_dim == head_dim, "digest head_dim must equal the KV head_dim");
    PULSE_CHECK(dv->n_heads == select_digest_heads(n_kv_heads, sel_head),
                "digest heads must be n_kv_heads (head-wise, mean) or 1 (SoloHead)");
}

int select_n_lists(const struct select_cfg *cfg, int sel_head)
{
    return sel_head == SELECT_HEADWISE ? cfg->n_kv_heads : 1;
}

int select_max_selected(const struct select_cfg *cfg)
{
    long long want = (long long)cfg->sink + cfg->window + 1 + cfg->budget;
    return (int)(want < cfg->max_blocks ? want : cfg->max_blocks);
}

int select_widened_budget(int k, double f)
{
    return (int)ceil((1.0 + f) * k - 1e-9);
}

int select_list_stride(const struct select_cfg *cfg)
{
    const int ms = select_max_selected(cfg);
    return cfg->list_stride > ms ? cfg->list_stride : ms;
}

int select_attend_bound(const struct select_cfg *cfg, int reserved)
{
    const long long b = (long long)select_max_selected(cfg) * cfg->block_size;
    return (int)(b < reserved ? b : reserved);
}

size_t select_scores_bytes(const struct select_cfg *cfg, int batch, int sel_head)
{
    return (size_t)batch * (size_t)select_n_lists(cfg, sel_head) * (size_t)cfg->max_blocks *
           sizeof(float);
}

int select_count_for(const struct select_cfg *cfg, int n_tokens)
{
    int nb = PULSE_CEIL_DIV(n_tokens, cfg->block_size), c0, c1;
    select_candidates(nb, cfg->sink, cfg->window, &c0, &c1);
    int m = c1 - c0;
    return nb - m + (cfg->budget < m ? cfg->budget : m);
}

/* Adds the chunks of one block given the mask of KV heads that selected it. */
static void stats_add_mask(struct select_stats *st, uint64_t mask, int nkv)
{
    int h = 0;
    while (h < nkv) {
        if (!((mask >> h) & 1u)) {
            h++;
            continue;
        }
        int run = 0;
        while (h < nkv && ((mask >> h) & 1u))
            run++, h++;
        st->chunks++;
        st->head_blocks += run;
        if (st->min_chunk_heads == 0 || run < st->min_chunk_heads) st->min_chunk_heads = run;
        if (run > st->max_chunk_heads) st->max_chunk_heads = run;
    }
}

static int lists_equal(const int32_t *a, int na, const int32_t *b, int nb)
{
    return na == nb && memcmp(a, b, sizeof(int32_t) * (size_t)na) == 0;
}

int select_overlap(int nb, int sink, int window, const int32_t *exact, int n_exact,
                   const int32_t *spec, int n_spec, int *scored)
{
    int c0, c1, held = 0, j = 0;
    select_candidates(nb, sink, window, &c0, &c1);
    *scored = 0;
    for (int i = 0; i < n_exact; i++) {
        const int b = exact[i];
        if (b < c0 || b >= c1) continue;  /* forced */
        while (j < n_spec && spec[j] < b) /* both ascending */
            j++;
        ++*scored;
        held += j < n_spec && spec[j] == b;
    }
    return held;
}

/* 1 when b is in the ascending list l of n. */
static int has_block(const int32_t *l, int n, int32_t b)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        const int m = (lo + hi) / 2;
        if (l[m] < b)
            lo = m + 1;
        else
            hi = m;
    }
    return lo < n && l[lo] == b;
}

/* |B \ prev| / |B| of list cur (B: its blocks in [c0, c1)); -1 when B is empty. */
static double churn_of(int c0, int c1, const int32_t *cur, int n, const int32_t *prev, int np)
{
    int nb = 0, nn = 0;
    for (int i = 0; i < n; i++)
        if (cur[i] >= c0 && cur[i] < c1) nb++, nn += !has_block(prev, np, cur[i]);
    return nb ? (double)nn / nb : -1.0;
}

void select_persist_add(int nb, int sink, int window, const int32_t *exact, int n_exact,
                        const int32_t *approx, int n_approx, const int32_t *exact_prev,
                        int n_exact_prev, const int32_t *approx_prev, int n_approx_prev,
                        struct select_persist *acc)
{
    int c0, c1;
    select_candidates(nb, sink, window, &c0, &c1);
    const double ce = churn_of(c0, c1, exact, n_exact, exact_prev, n_exact_prev);
    const double ca = churn_of(c0, c1, approx, n_approx, approx_prev, n_approx_prev);
    if (ce < 0 || ca < 0) return;
    acc->steps++;
    acc->churn_exact += ce, acc->churn_approx += ca;
    for (int i = 0; i < n_exact; i++) { /* M_t */
        const int32_t b = exact[i];
        if (b < c0 || b >= c1 || has_block(approx, n_approx, b)) continue;
        const int ep = has_block(exact_prev, n_exact_prev, b),
                  ap = has_block(approx_prev, n_approx_prev, b);
        acc->missed++;
        acc->missed_again += ep && !ap;
        acc->missed_held += ep || ap;
    }
    for (int i = 0; i < n_approx; i++) { /* W_t */
        const int32_t b = approx[i];
        if (b < c0 || b >= c1 || has_block(exact, n_exact, b)) continue;
        acc->wrong++;
        acc->wrong_again +=
            has_block(approx_prev, n_approx_prev, b) && !has_block(exact_prev, n_exact_prev, b);
    }
}

void select_stats_add(const struct select_cfg *cfg, int sel_head, const int32_t *sel_idx,
                      const int32_t *sel_count, int batch, struct select_stats *st)
{
    const int nkv = cfg->n_kv_heads, nl = select_n_lists(cfg, sel_head);
    const int ms = select_list_stride(cfg);
    const uint64_t all = nkv == 64 ? ~0ull : ((1ull << nkv) - 1);
    for (int b = 0; b < batch; b++) {
        const int32_t *idx = sel_idx + (size_t)b * nl * ms;
        const int32_t *cnt = sel_count + (size_t)b * nl;
        st->entries++;
        st->lists += nl;
        for (int l = 0; l < nl; l++) {
            int seen = 0;
            for (int p = 0; p < l && !seen; p++)
                seen = lists_equal(idx + (size_t)l * ms, cnt[l], idx + (size_t)p * ms, cnt[p]);
            st->distinct += !seen;
            st->blocks += cnt[l];
        }
        if (nl == 1) { /* SoloHead: every selected block serves all heads */
            for (int j = 0; j < cnt[0]; j++)
                stats_add_mask(st, all, nkv);
            continue;
        }
        /* head-wise: merge the sorted lists; each block's mask = the heads that chose it */
        int cur[64] = {0};
        for (;;) {
            int32_t blk = INT32_MAX;
            for (int h = 0; h < nl; h++)
                if (cur[h] < cnt[h] && idx[(size_t)h * ms + cur[h]] < blk)
                    blk = idx[(size_t)h * ms + cur[h]];
            if (blk == INT32_MAX) break;
            uint64_t mask = 0;
            for (int h = 0; h < nl; h++)
                if (cur[h] < cnt[h] && idx[(size_t)h * ms + cur[h]] == blk) {
                    mask |= 1ull << h;
                    cur[h]++;
                }
            stats_add_mask(st, mask, nkv);
        }
    }
}

/* ------------------------------------------------------------------ digests */

static uint16_t *kv_key(const struct kv_view *kv, int b, int t, int h)
{
    int page = kv->page_ids[kv->page_start[b] + t / kv->page_size];
    size_t page_elems = kv_page_elems(kv);
    return kv->pool + (size_t)page * page_elems +
           ((size_t)h * 2 * kv->page_size + t % kv->page_size) * kv->head_dim;
}

/* Start of (min, max) of digest head j of block i of entry b; max follows at + head_dim. */
static uint16_t *digest_at(const struct digest_view *dv, int b, int i, int j)
{
    int page = dv->page_ids[dv->page_start[b] + i];
    size_t page_elems = (size_t)dv->n_heads * 2 * dv->head_dim;
    return dv->pool + (size_t)page * page_elems + (size_t)j * 2 * dv->head_dim;
}

void digest_build_ref(const struct kctx *c, const struct kv_view *kv, const struct digest_view *dv,
                      const int32_t *n_tokens, int batch, int sel_head, int max_tokens)
{
    (void)c;
    (void)max_tokens;
    select_check_heads(kv->n_kv_heads, kv->head_dim, dv, sel_head);
    const int hd = kv->head_dim, ps = kv->page_size;
    for (int b = 0; b < batch; b++) {
        const int n = n_tokens[b];
        for (int i = 0; i * ps < n; i++) {
            const int t0 = i * ps, t1 = PULSE_MIN(t0 + ps, n);
            for (int j = 0; j < dv->n_heads; j++) {
                const int h = sel_head < 0 ? j : sel_head;
                uint16_t *mn = digest_at(dv, b, i, j), *mx = mn + hd;
                for (int d = 0; d < hd; d++) {
                    float lo = bf16_to_f32(kv_key(kv, b, t0, h)[d]), hi = lo;
                    for (int t = t0 + 1; t < t1; t++) {
                        float k = bf16_to_f32(kv_key(kv, b, t, h)[d]);
                        if (k < lo) lo = k;
                        if (k > hi) hi = k;
                    }
                    mn[d] = f32_to_bf16(select_canon_zero(lo));
                    mx[d] = f32_to_bf16(select_canon_zero(hi));
                }
            }
        }
    }
}

void digest_update_ref(const struct kctx *c, const struct kv_view *kv, const struct digest_view *dv,
                       const int32_t *pos, int batch, int sel_head)
{
    (void)c;
    select_check_heads(kv->n_kv_heads, kv->head_dim, dv, sel_head);
    const int hd = kv->head_dim, ps = kv->page_size;
    for (int b = 0; b < batch; b++) {
        const int t = pos[b], first = t % ps == 0;
        for (int j = 0; j < dv->n_heads; j++) {
            const int h = sel_head < 0 ? j : sel_head;
            const uint16_t *k = kv_key(kv, b, t, h);
            uint16_t *mn = digest_at(dv, b, t / ps, j), *mx = mn + hd;
            for (int d = 0; d < hd; d++) {
                float v = select_canon_zero(bf16_to_f32(k[d]));
                float lo = first ? v : bf16_to_f32(mn[d]), hi = first ? v : bf16_to_f32(mx[d]);
                if (v < lo) lo = v;
                if (v > hi) hi = v;
                mn[d] = f32_to_bf16(lo);
                mx[d] = f32_to_bf16(hi);
            }
        }
    }
}

/* ------------------------------------------------------------------ scores and top-k */

static void select_check(const struct select_cfg *cfg, const struct digest_view *dv, int sel_head)
{
    char err[128];
    PULSE_CHECK(select_cfg_check(cfg, err, sizeof err) == 0, err);
    select_check_heads(cfg->n_kv_heads, cfg->head_dim, dv, sel_head);
}

void select_score_ref(const struct kctx *c, const struct select_cfg *cfg, const uint16_t *q,
                      const struct digest_view *dv, const int32_t *n_tokens, float *scores,
                      int batch, int sel_head)
{
    (void)c;
    select_check(cfg, dv, sel_head);
    const int hd = cfg->head_dim, G = cfg->n_heads / cfg->n_kv_heads;
    const int nl = select_n_lists(cfg, sel_head);
    for (int b = 0; b < batch; b++) {
        const int nb = PULSE_CEIL_DIV(n_tokens[b], cfg->block_size);
        PULSE_CHECK(nb >= 1 && nb <= cfg->max_blocks, "select_score: n_tokens out of range");
        for (int l = 0; l < nl; l++) {
            int k0, k1;
            select_list_heads(sel_head, l, cfg->n_kv_heads, &k0, &k1);
            float *row = scores + ((size_t)b * nl + l) * cfg->max_blocks;
            for (int i = 0; i < nb; i++) {
                float s = 0.0f;
                for (int k = k0; k < k1; k++) {
                    const uint16_t *mn = digest_at(dv, b, i, select_digest_head(sel_head, k));
                    const uint16_t *mx = mn + hd;
                    for (int g = 0; g < G; g++) {
                        const uint16_t *qg =
                            q + ((size_t)b * cfg->n_heads + (size_t)k * G + g) * hd;
                        for (int d = 0; d < hd; d++)
                            s += select_digest_term(bf16_to_f32(qg[d]), bf16_to_f32(mn[d]),
                                                    bf16_to_f32(mx[d]));
                    }
                }
                row[i] = s;
            }
        }
    }
}

/* Number of candidates in [c0, c1) whose key is >= t. */
static int count_at_least(const float *row, int c0, int c1, uint32_t t)
{
    int n = 0;
    for (int i = c0; i < c1; i++)
        n += select_score_key(row[i]) >= t;
    return n;
}

void select_topk_ref(const struct kctx *c, const struct select_cfg *cfg, const float *scores,
                     const int32_t *n_tokens, int32_t *sel_idx, int32_t *sel_count, int batch,
                     int sel_head)
{
    (void)c;
    select_check(cfg, NULL, sel_head);
    const int nl = select_n_lists(cfg, sel_head), ms = select_list_stride(cfg);
    for (int b = 0; b < batch; b++) {
        const int nb = PULSE_CEIL_DIV(n_tokens[b], cfg->block_size);
        PULSE_CHECK(nb >= 1 && nb <= cfg->max_blocks, "select_topk: n_tokens out of range");
        int c0, c1;
        select_candidates(nb, cfg->sink, cfg->window, &c0, &c1);
        const int m = c1 - c0, k = cfg->budget < m ? cfg->budget : m;
        for (int l = 0; l < nl; l++) {
            const float *row = scores + ((size_t)b * nl + l) * cfg->max_blocks;
            /* T = the k-th largest key: the largest t with at least k candidates >= t (binary
             * search over the 32-bit key space); then every key > T is in, and the first
             * (k - #{key > T}) candidates with key == T in block order. */
            uint32_t T = 0;
            int take_eq = 0;
            if (k > 0 && k < m) {
                uint32_t lo = 0, hi = 0xffffffffu;
                while (lo < hi) {
                    uint32_t mid = lo + (uint32_t)(((uint64_t)hi - lo + 1) / 2);
                    if (count_at_least(row, c0, c1, mid) >= k)
                        lo = mid;
                    else
                        hi = mid - 1;
                }
                T = lo;
                take_eq = k - (T == 0xffffffffu ? 0 : count_at_least(row, c0, c1, T + 1));
            }
            int32_t *out = sel_idx + ((size_t)b * nl + l) * ms;
            int n = 0;
            for (int i = 0; i < nb; i++) {
                int take;
                if (i < c0 || i >= c1)
                    take = 1; /* sink, window, tail */
                else if (k == m)
                    take = 1;
                else if (k == 0)
                    take = 0;
                else {
                    uint32_t key = select_score_key(row[i]);
                    take = key > T || (key == T && take_eq > 0);
                    if (key == T && take_eq > 0) take_eq--;
                }
                if (take) out[n++] = i;
            }
            sel_count[(size_t)b * nl + l] = n;
        }
    }
}

void select_blocks_ref(const struct kctx *c, const struct select_cfg *cfg, const uint16_t *q,
                       const struct digest_view *dv, const int32_t *n_tokens, float *scores,
                       int32_t *sel_idx, int32_t *sel_count, int batch, int sel_head)
{
    select_score_ref(c, cfg, q, dv, n_tokens, scores, batch, sel_head);
    select_topk_ref(c, cfg, scores, n_tokens, sel_idx, sel_count, batch, sel_head);
}

void select_jobs_check(const struct select_job *jobs, int n_jobs)
{
    PULSE_CHECK(jobs && n_jobs >= 1 && n_jobs <= SELECT_MAX_JOBS,
                "select_blocks_multi: 1 to SELECT_MAX_JOBS jobs");
    const struct select_cfg *c0 = jobs[0].cfg;
    for (int j = 0; j < n_jobs; j++) {
        const struct select_cfg *cj = jobs[j].cfg;
        char err[128];
        PULSE_CHECK(cj && select_cfg_check(cj, err, sizeof err) == 0, err);
        PULSE_CHECK(cj->n_heads == c0->n_heads && cj->n_kv_heads == c0->n_kv_heads &&
                        cj->head_dim == c0->head_dim && cj->block_size == c0->block_size &&
                        cj->sink == c0->sink && cj->window == c0->window &&
                        cj->max_blocks == c0->max_blocks,
                    "select_blocks_multi: the jobs' shapes differ (only budget and list_stride "
                    "may)");
        const int s = jobs[j].sel_head, s0 = jobs[0].sel_head;
        PULSE_CHECK(s >= 0 ? s0 >= 0 : s == s0,
                    "select_blocks_multi: the jobs' selector heads are of different kinds");
        select_check_heads(cj->n_kv_heads, cj->head_dim, jobs[j].dv, jobs[j].sel_head);
        /* the CUDA path reads every job's digests one way (8-byte loads where all allow) */
        PULSE_CHECK(((uintptr_t)jobs[j].dv->pool % 8 == 0) ==
                        ((uintptr_t)jobs[0].dv->pool % 8 == 0),
                    "select_blocks_multi: the jobs' digest pools are aligned differently");
        for (int i = 0; i < j; i++)
            PULSE_CHECK(jobs[i].scores != jobs[j].scores && jobs[i].sel_idx != jobs[j].sel_idx &&
                            jobs[i].sel_count != jobs[j].sel_count,
                        "select_blocks_multi: two jobs share an output (scores, lists or counts)");
    }
}

void select_blocks_multi_ref(const struct kctx *c, const struct select_job *jobs, int n_jobs,
                             const int32_t *n_tokens, int batch)
{
    select_jobs_check(jobs, n_jobs);
    for (int j = 0; j < n_jobs; j++)
        select_blocks_ref(c, jobs[j].cfg, jobs[j].q, jobs[j].dv, n_tokens, jobs[j].scores,
                          jobs[j].sel_idx, jobs[j].sel_count, batch, jobs[j].sel_head);
}

/* ------------------------------------------------------------------ approximate query */

struct channel_rank {
    double norm;
    int32_t ch;
};

static int by_importance(const void *pa, const void *pb)
{
    const struct channel_rank *a = pa, *b = pb;
    if (a->norm != b->norm) return a->norm > b->norm ? -1 : 1;
    return (a->ch > b->ch) - (a->ch < b->ch);
}

static int by_int(const void *pa, const void *pb)
{
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    return (a > b) - (a < b);
}

int select_channels_build(const uint16_t *wq, int q_rows, int hidden, double frac, int32_t *out)
{
    if (!(frac > 0.0 && frac <= 1.0) || hidden < 1 || q_rows < 1) return -1;
    int keep = (int)ceil(frac * (double)hidden - 1e-9);
    keep = PULSE_MAX(1, PULSE_MIN(keep, hidden));
    struct channel_rank *r = malloc(sizeof *r * (size_t)hidden);
    if (!r) return -1;
    for (int j = 0; j < hidden; j++)
        r[j] = (struct channel_rank){0.0, j};
    for (int i = 0; i < q_rows; i++)
        for (int j = 0; j < hidden; j++) {
            double v = bf16_to_f32(wq[(size_t)i * hidden + j]);
            r[j].norm += v * v; /* squared norm orders the channels like the norm */
        }
    qsort(r, (size_t)hidden, sizeof *r, by_importance);
    for (int j = 0; j < keep; j++)
        out[j] = r[j].ch;
    qsort(out, (size_t)keep, sizeof *out, by_int);
    free(r);
    return keep;
}

void select_partial_weight_build(const uint16_t *wq, int q_rows, int hidden,
                                 const int32_t *channels, int n_channels, uint16_t *out)
{
    for (int i = 0; i < q_rows; i++)
        for (int j = 0; j < n_channels; j++)
            out[(size_t)i * n_channels + j] = wq[(size_t)i * hidden + channels[j]];
}

void select_norm_gather_ref(const struct kctx *c, const float *x, const uint16_t *w,
                            const int32_t *channels, int n_channels, uint16_t *xn, int batch,
                            int hidden, float eps)
{
    (void)c;
    for (int b = 0; b < batch; b++) {
        const float *xr = x + (size_t)b * hidden;
        /* the statistic exactly as rmsnorm_ref forms it (kernels_ref.c, rms_inv) */
        float ss = 0.0f;
        for (int j = 0; j < hidden; j++)
            ss += xr[j] * xr[j];
        float inv = 1.0f / sqrtf(ss / (float)hidden + eps);
        for (int j = 0; j < n_channels; j++) {
            int ch = channels ? channels[j] : j;
            xn[(size_t)b * n_channels + j] = f32_to_bf16(xr[ch] * inv * bf16_to_f32(w[ch]));
        }
    }
}

size_t select_approx_q_workspace_bytes(int batch, int n_channels, int n_heads, int head_dim)
{
    size_t xn = (size_t)batch * (size_t)n_channels * sizeof(uint16_t);
    xn = (xn + 255) / 256 * 256;
    return xn + (size_t)batch * (size_t)n_heads * (size_t)head_dim * sizeof(float);
}

void select_approx_q_ref(const struct kctx *c, const struct approx_q_weights *w, const float *x,
                         const int32_t *pos, void *workspace, uint16_t *q_out, int batch,
                         int hidden, int n_heads, int head_dim, const float *inv_freq, float eps)
{
    PULSE_CHECK(w->n_channels >= 1 && w->n_channels <= hidden &&
                    (w->channels || w->n_channels == hidden),
                "approx q: n_channels must be in 1..hidden (== hidden without a channel list)");
    size_t xn_bytes = (size_t)batch * (size_t)w->n_channels * sizeof(uint16_t);
    uint16_t *xn = workspace;
    float *qf = (float *)((char *)workspace + (xn_bytes + 255) / 256 * 256);
    select_norm_gather_ref(c, x, w->attn_norm, w->channels, w->n_channels, xn, batch, hidden, eps);
    gemm_bf16_ref(c, xn, w->wq, qf, batch, n_heads * head_dim, w->n_channels, 0.0f);
    /* zero KV heads: the q rows are the whole qkv row and nothing is appended */
    struct kv_view none = {NULL, NULL, NULL, 1, 0, head_dim, 0, 0, NULL, NULL};
    qk_norm_rope_append_ref(c, qf, w->q_norm, NULL, q_out, &none, pos, batch, n_heads, inv_freq,
                            eps);
}
