/* The selection references (select.h) against brute force: digests (partial tail blocks, pages in
 * shuffled order, digest_update sequences equal to digest_build), scores against a direct
 * computation and the Quest upper bound, top-k against a sort-based oracle (ties to the lower
 * index, NaN and -0), the forced blocks, budgets at and past the context, SoloHead equal to the
 * selector's head-wise list and token-wise in the stats, and the InfiniGen approximate query
 * (bit-identical to the real path with every channel, bounded error with a partial weight). */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels.h"
#include "model.h"
#include "numeric.h"
#include "select.h"
#include "testutil.h"

static const struct kctx C0;
static uint64_t g_seed = 0x5e1ec7, g_ctr;

static float rnd(void)
{
    return pulse_uniform(g_seed, g_ctr++);
} /* [-1, 1) */
static uint32_t rnd_u32(uint32_t n)
{
    return (uint32_t)(pulse_hash64(g_seed, g_ctr++) % n);
}
/* A nonzero integer in [-r, r]. */
static float rnd_int_nz(int r)
{
    int v = (int)rnd_u32(2u * (uint32_t)r) - r;
    return (float)(v >= 0 ? v + 1 : v);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    PULSE_CHECK(p != NULL, "malloc");
    return p;
}

static void shuffle(int32_t *a, int n)
{
    for (int i = n; i > 1; i--) {
        int j = (int)rnd_u32((uint32_t)i);
        int32_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

/* ------------------------------------------------------------------ a paged KV + digest set */

struct set {
    int batch, nkv, hd, bs, ndh, sel;
    int32_t n[32];
    int n_pages;
    int32_t *kv_ids, *kv_start, *d_ids, *d_start;
    uint16_t *kv_pool, *d_pool;
    struct kv_view kv;
    struct digest_view dv;
};

#define SENTINEL 0x7fc1 /* a NaN no kernel writes */

/* Entries with n[b] tokens; KV and digest pages each in their own random order, with two junk
 * ids (-1) after each entry. Keys: nonzero small integers when ints, else random bf16. */
static void set_init(struct set *s, int batch, const int32_t *n, int nkv, int hd, int bs, int sel,
                     int ints)
{
    memset(s, 0, sizeof *s);
    s->batch = batch, s->nkv = nkv, s->hd = hd, s->bs = bs, s->sel = sel;
    s->ndh = select_digest_heads(nkv, sel);
    int used = 0;
    for (int b = 0; b < batch; b++)
        s->n[b] = n[b], used += PULSE_CEIL_DIV(n[b], bs);
    s->n_pages = used + 3;
    int32_t *pk = xmalloc(sizeof(int32_t) * (size_t)s->n_pages);
    int32_t *pd = xmalloc(sizeof(int32_t) * (size_t)s->n_pages);
    for (int i = 0; i < s->n_pages; i++)
        pk[i] = pd[i] = i;
    shuffle(pk, s->n_pages);
    shuffle(pd, s->n_pages);
    s->kv_ids = xmalloc(sizeof(int32_t) * (size_t)(used + 2 * batch));
    s->d_ids = xmalloc(sizeof(int32_t) * (size_t)(used + 2 * batch));
    s->kv_start = xmalloc(sizeof(int32_t) * (size_t)batch);
    s->d_start = xmalloc(sizeof(int32_t) * (size_t)batch);
    int at = 0, next = 0;
    for (int b = 0; b < batch; b++) {
        s->kv_start[b] = s->d_start[b] = at;
        for (int i = 0; i < PULSE_CEIL_DIV(n[b], bs); i++, next++) {
            s->kv_ids[at] = pk[next];
            s->d_ids[at++] = pd[next];
        }
        for (int j = 0; j < 2; j++)
            s->kv_ids[at] = s->d_ids[at] = -1, at++;
    }
    free(pk);
    free(pd);
    size_t kv_elems = (size_t)s->n_pages * nkv * 2 * bs * hd;
    size_t d_elems = (size_t)s->n_pages * s->ndh * 2 * hd;
    s->kv_pool = xmalloc(kv_elems * sizeof(uint16_t));
    s->d_pool = xmalloc(d_elems * sizeof(uint16_t));
    for (size_t i = 0; i < kv_elems; i++)
        s->kv_pool[i] = f32_to_bf16(ints ? rnd_int_nz(8) : (rnd() + (rnd() > 0 ? 0.01f : -0.01f)));
    for (size_t i = 0; i < d_elems; i++)
        s->d_pool[i] = SENTINEL;
    s->kv = (struct kv_view){s->kv_pool, s->kv_ids, s->kv_start, bs, nkv, hd, 0, 0, NULL, NULL};
    s->dv = (struct digest_view){s->d_pool, s->d_ids, s->d_start, s->ndh, hd};
}

static void set_free(struct set *s)
{
    free(s->kv_ids), free(s->d_ids), free(s->kv_start), free(s->d_start);
    free(s->kv_pool), free(s->d_pool);
}

static size_t set_d_elems(const struct set *s)
{
    return (size_t)s->n_pages * s->ndh * 2 * s->hd;
}

/* K element d of token t, head h of entry b, addressed independently of the kernels. */
static float key_of(const struct set *s, int b, int t, int h, int d)
{
    size_t page = (size_t)s->kv_ids[s->kv_start[b] + t / s->bs];
    size_t off = page * (size_t)s->nkv * 2 * s->bs * s->hd +
                 (((size_t)h * 2 + 0) * s->bs + (size_t)(t % s->bs)) * s->hd + (size_t)d;
    return bf16_to_f32(s->kv_pool[off]);
}

static const uint16_t *dig_of(const struct set *s, const uint16_t *pool, int b, int i, int j)
{
    size_t page = (size_t)s->d_ids[s->d_start[b] + i];
    return pool + page * (size_t)s->ndh * 2 * s->hd + (size_t)j * 2 * s->hd;
}

/* ------------------------------------------------------------------ digests */

static void check_digests_brute(const struct set *s)
{
    int bad = 0;
    for (int b = 0; b < s->batch; b++)
        for (int i = 0; i * s->bs < s->n[b]; i++)
            for (int j = 0; j < s->ndh; j++) {
                int h = s->sel < 0 ? j : s->sel;
                const uint16_t *g = dig_of(s, s->d_pool, b, i, j);
                for (int d = 0; d < s->hd; d++) {
                    float lo = INFINITY, hi = -INFINITY;
                    for (int t = i * s->bs; t < s->n[b] && t < (i + 1) * s->bs; t++) {
                        lo = fminf(lo, key_of(s, b, t, h, d));
                        hi = fmaxf(hi, key_of(s, b, t, h, d));
                    }
                    bad += g[d] != f32_to_bf16(lo) || g[s->hd + d] != f32_to_bf16(hi);
                }
            }
    EXPECT_EQ_INT(bad, 0);
    /* the pages of no block (3 spare) are untouched */
    int used = 0;
    for (size_t i = 0; i < set_d_elems(s); i++)
        used += s->d_pool[i] != SENTINEL;
    int blocks = 0;
    for (int b = 0; b < s->batch; b++)
        blocks += PULSE_CEIL_DIV(s->n[b], s->bs);
    EXPECT_EQ_INT(used, blocks * s->ndh * 2 * s->hd);
}

static void test_digest_build_update(int sel, int ints)
{
    int32_t n[6] = {1, 4, 5, 13, 16, 29}; /* one-token, full, 1-token tail, partial tails */
    struct set s;
    set_init(&s, 6, n, 3, 6, 4, sel, ints);
    digest_build_ref(&C0, &s.kv, &s.dv, s.n, s.batch, sel, 29);
    check_digests_brute(&s);

    /* digest_update for t = 0 .. n-1, entry by entry, over garbage digests: after every
     * update the block so far equals digest_build over t+1 tokens; at the end, the same pool */
    size_t de = set_d_elems(&s);
    uint16_t *built = xmalloc(de * sizeof(uint16_t)), *ref = xmalloc(de * sizeof(uint16_t));
    memcpy(built, s.d_pool, de * sizeof(uint16_t));
    for (size_t i = 0; i < de; i++)
        s.d_pool[i] = SENTINEL;
    int bad = 0;
    for (int b = 0; b < s.batch; b++) {
        struct kv_view kv1 = s.kv;
        struct digest_view dv1 = s.dv;
        kv1.page_start = s.kv_start + b;
        dv1.page_start = s.d_start + b;
        for (int t = 0; t < n[b]; t++) {
            int32_t pos = t, nt = t + 1;
            if (t % s.bs == 0) /* garbage in a block's digest before its first token */
                for (int j = 0; j < s.ndh; j++) {
                    uint16_t *g = (uint16_t *)dig_of(&s, s.d_pool, b, t / s.bs, j);
                    for (int d = 0; d < 2 * s.hd; d++)
                        g[d] = f32_to_bf16(rnd() * 100);
                }
            digest_update_ref(&C0, &kv1, &dv1, &pos, 1, sel);
            memcpy(ref, s.d_pool, de * sizeof(uint16_t));
            struct digest_view dvr = dv1;
            dvr.pool = ref;
            digest_build_ref(&C0, &kv1, &dvr, &nt, 1, sel, nt);
            bad += memcmp(ref, s.d_pool, de * sizeof(uint16_t)) != 0;
        }
    }
    EXPECT_EQ_INT(bad, 0);
    EXPECT(memcmp(built, s.d_pool, de * sizeof(uint16_t)) == 0);
    free(built);
    free(ref);
    set_free(&s);
}

/* -0 keys are stored as +0, whatever the order. */
static void test_digest_zero(void)
{
    int32_t n[1] = {2};
    struct set s;
    set_init(&s, 1, n, 1, 2, 2, SELECT_HEADWISE, 1);
    size_t p = (size_t)s.kv_ids[0] * 1 * 2 * 2 * 2;       /* page elems = 8; K rows at 0 and 2 */
    s.kv_pool[p + 0] = 0x8000, s.kv_pool[p + 2] = 0x0000; /* d0: -0 then +0 */
    s.kv_pool[p + 1] = 0x3f80, s.kv_pool[p + 3] = 0x8000; /* d1: 1 then -0 */
    digest_build_ref(&C0, &s.kv, &s.dv, n, 1, SELECT_HEADWISE, 2);
    const uint16_t *g = dig_of(&s, s.d_pool, 0, 0, 0);
    EXPECT_EQ_INT(g[0], 0x0000);
    EXPECT_EQ_INT(g[2], 0x0000);
    EXPECT_EQ_INT(g[1], 0x0000);
    EXPECT_EQ_INT(g[3], 0x3f80);
    set_free(&s);
}

/* ------------------------------------------------------------------ scores */

static struct select_cfg cfg_of(int nq, int nkv, int hd, int bs, int budget, int max_blocks)
{
    struct select_cfg c = {nq, nkv, hd, bs, budget, 1, 2, max_blocks, 0};
    return c;
}

static void test_scores(int ints)
{
    const int nq = 6, nkv = 3, hd = 6, bs = 4, G = nq / nkv;
    int32_t n[5] = {1, 7, 16, 29, 40};
    for (int mode = 0; mode < 3; mode++) {
        int sel = mode == 0 ? SELECT_HEADWISE : mode == 1 ? 1 : SELECT_MEAN;
        struct set s;
        set_init(&s, 5, n, nkv, hd, bs, sel, ints);
        digest_build_ref(&C0, &s.kv, &s.dv, s.n, 5, sel, 40);
        struct select_cfg cfg = cfg_of(nq, nkv, hd, bs, 3, 10);
        uint16_t q[5 * nq * hd];
        for (int i = 0; i < 5 * nq * hd; i++)
            q[i] = f32_to_bf16(ints ? rnd_int_nz(4) : rnd());
        int nl = select_n_lists(&cfg, sel);
        float *sc = xmalloc(select_scores_bytes(&cfg, 5, sel));
        for (int i = 0; i < 5 * nl * 10; i++)
            sc[i] = -12345.0f;
        select_score_ref(&C0, &cfg, q, &s.dv, s.n, sc, 5, sel);
        int bad = 0, untouched = 0, bound_bad = 0;
        for (int b = 0; b < 5; b++)
            for (int l = 0; l < nl; l++) {
                /* the KV heads this list scores: its own, the selector, or all (mean) */
                int h0 = sel == SELECT_HEADWISE ? l : sel == SELECT_MEAN ? 0 : sel;
                int h1 = sel == SELECT_MEAN ? nkv : h0 + 1, nb = PULSE_CEIL_DIV(n[b], bs);
                for (int i = 0; i < 10; i++) {
                    float got = sc[(b * nl + l) * 10 + i];
                    if (i >= nb) {
                        untouched += got == -12345.0f;
                        continue;
                    }
                    /* direct: per channel in double, from the brute-force min/max */
                    double want = 0.0, mag = 0.0, exact = -INFINITY;
                    for (int h = h0; h < h1; h++)
                        for (int g = 0; g < G; g++)
                            for (int d = 0; d < hd; d++) {
                                double lo = INFINITY, hi = -INFINITY;
                                for (int t = i * bs; t < n[b] && t < (i + 1) * bs; t++) {
                                    lo = fmin(lo, key_of(&s, b, t, h, d));
                                    hi = fmax(hi, key_of(&s, b, t, h, d));
                                }
                                double qv = bf16_to_f32(q[(b * nq + h * G + g) * hd + d]);
                                want += fmax(qv * lo, qv * hi);
                                mag += fabs(qv) * fmax(fabs(lo), fabs(hi));
                            }
                    /* Quest bound: no token's group-summed q.k exceeds the score */
                    for (int t = i * bs; t < n[b] && t < (i + 1) * bs; t++) {
                        double dot = 0.0;
                        for (int h = h0; h < h1; h++)
                            for (int g = 0; g < G; g++)
                                for (int d = 0; d < hd; d++)
                                    dot += bf16_to_f32(q[(b * nq + h * G + g) * hd + d]) *
                                           key_of(&s, b, t, h, d);
                        exact = fmax(exact, dot);
                    }
                    double tol = ints ? 0.0 : 1e-6 * mag;
                    bad += !(fabs(got - want) <= tol);
                    bound_bad += !(got >= exact - tol);
                }
            }
        EXPECT_EQ_INT(bad, 0);
        EXPECT_EQ_INT(bound_bad, 0);
        int should = 0;
        for (int b = 0; b < 5; b++)
            should += nl * (10 - PULSE_CEIL_DIV(n[b], bs));
        EXPECT_EQ_INT(untouched, should);
        free(sc);
        set_free(&s);
    }
}

/* ------------------------------------------------------------------ top-k */

struct cand {
    uint32_t key;
    int idx;
};

static int by_rank(const void *pa, const void *pb)
{
    const struct cand *a = pa, *b = pb;
    if (a->key != b->key) return a->key > b->key ? -1 : 1;
    return a->idx - b->idx;
}

/* Oracle: sort the candidates by (key desc, index asc), take the first k, add the forced. */
static int oracle(const struct select_cfg *cfg, const float *row, int n_tokens, int32_t *out)
{
    int nb = PULSE_CEIL_DIV(n_tokens, cfg->block_size), c0, c1;
    select_candidates(nb, cfg->sink, cfg->window, &c0, &c1);
    struct cand *c = xmalloc(sizeof *c * (size_t)(c1 - c0 + 1));
    for (int i = c0; i < c1; i++)
        c[i - c0] = (struct cand){select_score_key(row[i]), i};
    qsort(c, (size_t)(c1 - c0), sizeof *c, by_rank);
    uint8_t *take = calloc((size_t)nb, 1);
    for (int i = 0; i < nb; i++)
        take[i] = i < c0 || i >= c1;
    for (int j = 0; j < cfg->budget && j < c1 - c0; j++)
        take[c[j].idx] = 1;
    int n = 0;
    for (int i = 0; i < nb; i++)
        if (take[i]) out[n++] = i;
    free(c);
    free(take);
    return n;
}

/* Runs select_topk_ref on rows of scores for entries of n_tokens and compares with the oracle
 * and select_count_for; the slots past each count must stay untouched. */
static void topk_vs_oracle(const struct select_cfg *cfg, const float *scores, const int32_t *n,
                           int batch, int nl)
{
    int ms = select_max_selected(cfg);
    int32_t *idx = xmalloc(sizeof(int32_t) * (size_t)(batch * nl * ms + 1));
    int32_t *cnt = xmalloc(sizeof(int32_t) * (size_t)(batch * nl));
    int32_t *want = xmalloc(sizeof(int32_t) * (size_t)cfg->max_blocks);
    for (int i = 0; i < batch * nl * ms; i++)
        idx[i] = -7;
    select_topk_ref(&C0, cfg, scores, n, idx, cnt, batch, nl == 1 ? 0 : SELECT_HEADWISE);
    int bad = 0, tail_bad = 0;
    for (int b = 0; b < batch; b++)
        for (int l = 0; l < nl; l++) {
            const float *row = scores + ((size_t)b * nl + l) * cfg->max_blocks;
            int wn = oracle(cfg, row, n[b], want);
            int got = cnt[b * nl + l];
            const int32_t *g = idx + ((size_t)b * nl + l) * ms;
            bad += got != wn || got != select_count_for(cfg, n[b]) ||
                   memcmp(g, want, sizeof(int32_t) * (size_t)wn) != 0;
            for (int j = got; j < ms; j++)
                tail_bad += g[j] != -7;
        }
    EXPECT_EQ_INT(bad, 0);
    EXPECT_EQ_INT(tail_bad, 0);
    free(idx), free(cnt), free(want);
}

static void test_topk_cases(void)
{
    /* all scores equal: the lowest candidates win. nb 20, sink 1, window 2, budget 5 */
    struct select_cfg cfg = cfg_of(4, 2, 8, 16, 5, 32);
    float row[32];
    for (int i = 0; i < 32; i++)
        row[i] = 1.5f;
    int32_t n1[1] = {20 * 16 - 3}, idx[40], cnt[1];
    select_topk_ref(&C0, &cfg, row, n1, idx, cnt, 1, 0);
    int32_t want[] = {0, 1, 2, 3, 4, 5, 17, 18, 19};
    EXPECT_EQ_INT(cnt[0], 9);
    EXPECT(memcmp(idx, want, sizeof want) == 0);
    /* forced blocks get in on the worst scores and are not counted against the budget */
    for (int i = 0; i < 32; i++)
        row[i] = (float)i;
    row[0] = row[17] = row[18] = row[19] = -INFINITY;
    select_topk_ref(&C0, &cfg, row, n1, idx, cnt, 1, 0);
    int32_t want2[] = {0, 12, 13, 14, 15, 16, 17, 18, 19};
    EXPECT_EQ_INT(cnt[0], 9);
    EXPECT(memcmp(idx, want2, sizeof want2) == 0);
    /* a tie across the k-th place: scores 5 at 3, 7, 9, 11; 9 elsewhere at 14, 15; budget 4 */
    for (int i = 0; i < 32; i++)
        row[i] = 1.0f;
    row[3] = row[7] = row[9] = row[11] = 5.0f;
    row[14] = row[15] = 9.0f;
    cfg.budget = 4;
    select_topk_ref(&C0, &cfg, row, n1, idx, cnt, 1, 0);
    int32_t want3[] = {0, 3, 7, 14, 15, 17, 18, 19};
    EXPECT_EQ_INT(cnt[0], 8);
    EXPECT(memcmp(idx, want3, sizeof want3) == 0);
    /* NaN never wins; -0 ties +0 (lower index first) */
    for (int i = 0; i < 32; i++)
        row[i] = NAN;
    row[6] = -0.0f, row[4] = 0.0f, row[9] = -1.0f;
    cfg.budget = 3;
    select_topk_ref(&C0, &cfg, row, n1, idx, cnt, 1, 0);
    int32_t want4[] = {0, 4, 6, 9, 17, 18, 19};
    EXPECT_EQ_INT(cnt[0], 7);
    EXPECT(memcmp(idx, want4, sizeof want4) == 0);
    /* budget >= candidates: everything; one block; budget 0: the forced only */
    cfg.budget = 17;
    select_topk_ref(&C0, &cfg, row, n1, idx, cnt, 1, 0);
    EXPECT_EQ_INT(cnt[0], 20);
    for (int i = 0; i < 20; i++)
        EXPECT_EQ_INT(idx[i], i);
    int32_t one[1] = {5};
    select_topk_ref(&C0, &cfg, row, one, idx, cnt, 1, 0);
    EXPECT_EQ_INT(cnt[0], 1);
    EXPECT_EQ_INT(idx[0], 0);
    cfg.budget = 0;
    select_topk_ref(&C0, &cfg, row, n1, idx, cnt, 1, 0);
    EXPECT_EQ_INT(cnt[0], 4);
    /* cfg checks */
    char err[128];
    cfg.n_heads = 5;
    EXPECT_EQ_INT(select_cfg_check(&cfg, err, sizeof err), -1);
    EXPECT_STR_CONTAINS(err, "n_heads");
}

static void test_topk_random(void)
{
    /* many ties (values from a small set), NaNs, budgets below, at and past the candidates;
     * sink/window variants; head-wise (3 lists) and one list */
    const int batch = 9;
    int32_t n[9] = {1, 2, 16, 17, 33, 97, 250, 511, 1000};
    int budgets[] = {0, 1, 3, 7, 30, 64, 100};
    int sinks[][2] = {{1, 2}, {0, 0}, {2, 3}, {1, 0}};
    for (size_t bi = 0; bi < PULSE_ARRAY_LEN(budgets); bi++)
        for (size_t si = 0; si < PULSE_ARRAY_LEN(sinks); si++)
            for (int nl = 1; nl <= 3; nl += 2) {
                struct select_cfg cfg = cfg_of(6, 3, 4, 8, budgets[bi], 130);
                cfg.sink = sinks[si][0], cfg.window = sinks[si][1];
                size_t ns = (size_t)batch * nl * cfg.max_blocks;
                float *sc = xmalloc(ns * sizeof(float));
                for (size_t i = 0; i < ns; i++) {
                    uint32_t r = rnd_u32(40);
                    sc[i] = r == 0 ? NAN : r == 1 ? -0.0f : (float)(r % 5) - 2.0f;
                    if (bi % 2) sc[i] += rnd(); /* fewer ties on odd budgets */
                }
                topk_vs_oracle(&cfg, sc, n, batch, nl);
                free(sc);
            }
}

/* SoloHead: one list per entry, equal to the selector head's head-wise list; stats. */
static void test_solohead(void)
{
    const int nq = 8, nkv = 4, hd = 8, bs = 4, batch = 5, hstar = 2;
    int32_t n[5] = {3, 40, 77, 128, 200};
    struct set hw, so;
    uint64_t c = g_ctr;
    set_init(&hw, batch, n, nkv, hd, bs, SELECT_HEADWISE, 1);
    g_ctr = c; /* the same keys and page orders for the SoloHead set */
    set_init(&so, batch, n, nkv, hd, bs, hstar, 1);
    EXPECT(memcmp(hw.kv_pool, so.kv_pool, sizeof(uint16_t) * 16) == 0);
    digest_build_ref(&C0, &hw.kv, &hw.dv, n, batch, SELECT_HEADWISE, 200);
    digest_build_ref(&C0, &so.kv, &so.dv, n, batch, hstar, 200);
    struct select_cfg cfg = cfg_of(nq, nkv, hd, bs, 6, 64);
    uint16_t q[5 * 8 * 8];
    for (int i = 0; i < batch * nq * hd; i++)
        q[i] = f32_to_bf16(rnd_int_nz(5));
    int ms = select_max_selected(&cfg);
    float *sc = xmalloc(select_scores_bytes(&cfg, batch, SELECT_HEADWISE));
    int32_t *ih = xmalloc(sizeof(int32_t) * (size_t)(batch * nkv * ms)), ch[5 * 4];
    int32_t *is = xmalloc(sizeof(int32_t) * (size_t)(batch * ms)), cs[5];
    select_blocks_ref(&C0, &cfg, q, &hw.dv, n, sc, ih, ch, batch, SELECT_HEADWISE);
    select_blocks_ref(&C0, &cfg, q, &so.dv, n, sc, is, cs, batch, hstar);
    for (int b = 0; b < batch; b++) {
        EXPECT_EQ_INT(cs[b], ch[b * nkv + hstar]);
        EXPECT(memcmp(is + b * ms, ih + ((size_t)b * nkv + hstar) * ms,
                      sizeof(int32_t) * (size_t)cs[b]) == 0);
    }
    struct select_stats st_so = {0}, st_hw = {0};
    select_stats_add(&cfg, hstar, is, cs, batch, &st_so);
    select_stats_add(&cfg, SELECT_HEADWISE, ih, ch, batch, &st_hw);
    /* SoloHead: one list per entry, every chunk a token-wise block (all KV heads) */
    EXPECT_EQ_INT(st_so.lists, batch);
    EXPECT_EQ_INT(st_so.distinct, batch);
    EXPECT_EQ_INT(st_so.min_chunk_heads, nkv);
    EXPECT_EQ_INT(st_so.max_chunk_heads, nkv);
    int64_t blocks = 0;
    for (int b = 0; b < batch; b++)
        blocks += cs[b];
    EXPECT_EQ_INT(st_so.chunks, blocks);
    EXPECT_EQ_INT(st_so.head_blocks, blocks * nkv);
    /* head-wise on random keys: lists differ and some chunks are smaller than a block */
    EXPECT_EQ_INT(st_hw.lists, batch * nkv);
    EXPECT(st_hw.distinct > batch);
    EXPECT(st_hw.min_chunk_heads >= 1 && st_hw.min_chunk_heads < nkv);
    EXPECT(st_hw.chunks > st_so.chunks);
    int64_t hb = 0;
    for (int i = 0; i < batch * nkv; i++)
        hb += ch[i];
    EXPECT_EQ_INT(st_hw.head_blocks, hb);
    EXPECT_EQ_INT(st_hw.blocks, hb);
    free(sc), free(ih), free(is);
    set_free(&hw);
    set_free(&so);
}

/* ------------------------------------------------------------------ several jobs */

/* select_jobs_check on a call's jobs, for tu_aborts. */
struct jobs_call {
    const struct select_job *jobs;
    int n;
};

static void check_jobs(const void *arg)
{
    const struct jobs_call *c = arg;
    select_jobs_check(c->jobs, c->n);
}

/* Whether select_jobs_check refuses jobs (in a child; its stderr into why). */
static int jobs_refused(const struct select_job *jobs, int n, char *why, size_t len)
{
    const struct jobs_call c = {jobs, n};
    return tu_aborts(check_jobs, &c, why, len);
}

/* select_blocks_multi_ref is select_blocks_ref job by job (other digests, query, head and
 * budget per job), and the jobs must agree on everything else. */
static void test_multi(void)
{
    const int nq = 8, nkv = 4, hd = 8, bs = 4, batch = 5;
    int32_t n[5] = {3, 40, 77, 128, 200};
    struct set a, b;
    set_init(&a, batch, n, nkv, hd, bs, 1, 1);
    set_init(&b, batch, n, nkv, hd, bs, 3, 1);
    digest_build_ref(&C0, &a.kv, &a.dv, n, batch, 1, 200);
    digest_build_ref(&C0, &b.kv, &b.dv, n, batch, 3, 200);
    const struct select_cfg ca = cfg_of(nq, nkv, hd, bs, 6, 64);
    struct select_cfg cb = ca;
    cb.budget = select_widened_budget(ca.budget, 0.5);
    cb.list_stride = select_max_selected(&cb) + 2;
    uint16_t q[2][5 * 8 * 8];
    for (int i = 0; i < batch * nq * hd; i++)
        q[0][i] = f32_to_bf16(rnd_int_nz(5)), q[1][i] = f32_to_bf16(rnd_int_nz(5));
    const size_t sb = select_scores_bytes(&ca, batch, 1);
    const int sa = select_list_stride(&ca), sbs = select_list_stride(&cb);
    float *sc[4];
    int32_t *idx[4], cnt[4][5];
    for (int i = 0; i < 4; i++) {
        sc[i] = xmalloc(sb);
        idx[i] = xmalloc(sizeof(int32_t) * (size_t)batch * sbs);
    }
    const struct select_job jobs[2] = {{&ca, q[0], &a.dv, sc[0], idx[0], cnt[0], 1},
                                       {&cb, q[1], &b.dv, sc[1], idx[1], cnt[1], 3}};
    select_blocks_multi_ref(&C0, jobs, 2, n, batch);
    select_blocks_ref(&C0, &ca, q[0], &a.dv, n, sc[2], idx[2], cnt[2], batch, 1);
    select_blocks_ref(&C0, &cb, q[1], &b.dv, n, sc[3], idx[3], cnt[3], batch, 3);
    for (int j = 0; j < 2; j++) {
        EXPECT(memcmp(cnt[j], cnt[j + 2], sizeof cnt[0]) == 0);
        for (int e = 0; e < batch; e++)
            EXPECT(memcmp(idx[j] + e * (j ? sbs : sa), idx[j + 2] + e * (j ? sbs : sa),
                          sizeof(int32_t) * (size_t)cnt[j][e]) == 0);
    }
    /* the wider budget selects more where the context allows it, within its stride */
    EXPECT(cnt[1][4] > cnt[0][4] && cnt[1][4] <= sbs);
    char why[1024];
    struct select_job bad[2] = {jobs[0], jobs[1]};
    EXPECT(!jobs_refused(bad, 2, why, sizeof why));
    EXPECT(jobs_refused(bad, 0, why, sizeof why));
    EXPECT(jobs_refused(bad, SELECT_MAX_JOBS + 1, why, sizeof why));
    EXPECT_STR_CONTAINS(why, "1 to SELECT_MAX_JOBS jobs");
    bad[1].sel_head = SELECT_HEADWISE; /* one SoloHead job, one head-wise */
    EXPECT(jobs_refused(bad, 2, why, sizeof why));
    EXPECT_STR_CONTAINS(why, "selector heads are of different kinds");
    struct select_cfg cw = cb;
    cw.window = 3;
    bad[1] = jobs[1], bad[1].cfg = &cw;
    EXPECT(jobs_refused(bad, 2, why, sizeof why));
    EXPECT_STR_CONTAINS(why, "shapes differ");
    bad[1] = jobs[1], bad[1].scores = jobs[0].scores; /* one score buffer for both */
    EXPECT(jobs_refused(bad, 2, why, sizeof why));
    EXPECT_STR_CONTAINS(why, "share an output");
    struct digest_view odd = b.dv; /* a pool 2 bytes off 8-byte alignment */
    odd.pool = (uint16_t *)((char *)b.dv.pool + 2);
    bad[1] = jobs[1], bad[1].dv = &odd;
    EXPECT(jobs_refused(bad, 2, why, sizeof why));
    EXPECT_STR_CONTAINS(why, "aligned differently");
    for (int i = 0; i < 4; i++)
        free(sc[i]), free(idx[i]);
    set_free(&a);
    set_free(&b);
}

/* ------------------------------------------------------------------ InfiniGen query */

enum { HID = 80, NQ = 4, NKV = 2, HD = 8, QKV = (NQ + 2 * NKV) * HD, B = 3 };
static float inv_freq[HD / 2]; /* RoPE base 1e6 (main fills it) */

struct qset {
    float x[B * HID];
    uint16_t attn_norm[HID], wqkv[QKV * HID], q_norm[HD], k_norm[HD];
    int32_t pos[B];
};

static void qset_init(struct qset *s, float heavy)
{
    for (int i = 0; i < B * HID; i++)
        s->x[i] = rnd() * 3.0f;
    for (int i = 0; i < HID; i++)
        s->attn_norm[i] = f32_to_bf16(1.0f + 0.5f * rnd());
    for (int i = 0; i < HD; i++)
        s->q_norm[i] = f32_to_bf16(1.0f + 0.3f * rnd());
    for (int i = 0; i < HD; i++)
        s->k_norm[i] = f32_to_bf16(1.0f + 0.3f * rnd());
    for (int i = 0; i < QKV * HID; i++)
        s->wqkv[i] = f32_to_bf16(0.2f * rnd());
    if (heavy > 0) /* every fifth column (20%) carries `heavy` times the weight */
        for (int r = 0; r < NQ * HD; r++)
            for (int j = 0; j < HID; j += 5)
                s->wqkv[r * HID + j] = f32_to_bf16(heavy * bf16_to_f32(s->wqkv[r * HID + j]));
    for (int b = 0; b < B; b++)
        s->pos[b] = (int32_t)rnd_u32(5000);
}

/* The real path: rmsnorm + QKV GEMM + QK-norm/RoPE/append. K and V go to a scratch pool of one
 * one-token page per entry: page_start[b] = b - pos[b] makes token pos[b]'s page id ids[b] = b. */
static void real_q(const struct qset *s, const uint16_t *qn, uint16_t *q)
{
    uint16_t xn[B * HID], pool[B * NKV * 2 * 1 * HD];
    float qkv[B * QKV];
    int32_t ids[B], start[B];
    for (int b = 0; b < B; b++)
        ids[b] = b, start[b] = b - s->pos[b];
    struct kv_view kv = {pool, ids, start, 1, NKV, HD, 0, 0, NULL, NULL};
    rmsnorm_ref(&C0, s->x, s->attn_norm, xn, B, HID, 1e-6f);
    gemm_bf16_ref(&C0, xn, s->wqkv, qkv, B, QKV, HID, 0.0f);
    qk_norm_rope_append_ref(&C0, qkv, qn, s->k_norm, q, &kv, s->pos, B, NQ, inv_freq, 1e-6f);
}

static void test_approx_full(void)
{
    static struct qset s;
    qset_init(&s, 0);
    uint16_t want[B * NQ * HD], got[B * NQ * HD], got2[B * NQ * HD];
    real_q(&s, s.q_norm, want);
    void *ws = xmalloc(select_approx_q_workspace_bytes(B, HID, NQ, HD));
    struct approx_q_weights w = {s.attn_norm, s.wqkv, s.q_norm, NULL, HID};
    select_approx_q_ref(&C0, &w, s.x, s.pos, ws, got, B, HID, NQ, HD, inv_freq, 1e-6f);
    EXPECT(memcmp(want, got, sizeof want) == 0); /* bit-identical */
    int32_t all[HID];
    for (int j = 0; j < HID; j++)
        all[j] = j;
    w.channels = all;
    select_approx_q_ref(&C0, &w, s.x, s.pos, ws, got2, B, HID, NQ, HD, inv_freq, 1e-6f);
    EXPECT(memcmp(want, got2, sizeof want) == 0);
    free(ws);
}

/* Partial weight: the chosen channels are the heavy columns; without QK-norm, RoPE is a rotation,
 * so each head's error is bounded by Cauchy-Schwarz on the dropped channels (plus bf16
 * rounding of both outputs); with heavy columns the relative error is small. */
static void test_approx_partial(void)
{
    static struct qset s;
    qset_init(&s, 8.0f);
    int32_t ch[HID];
    int keep = select_channels_build(s.wqkv, NQ * HD, HID, 0.2, ch);
    EXPECT_EQ_INT(keep, HID / 5);
    int bad = 0;
    for (int j = 0; j < keep; j++)
        bad += ch[j] != 5 * j;
    EXPECT_EQ_INT(bad, 0);
    static uint16_t wp[NQ * HD * HID];
    select_partial_weight_build(s.wqkv, NQ * HD, HID, ch, keep, wp);
    uint16_t full[B * NQ * HD], part[B * NQ * HD], xn[B * HID];
    real_q(&s, NULL, full);
    void *ws = xmalloc(select_approx_q_workspace_bytes(B, HID, NQ, HD));
    struct approx_q_weights w = {s.attn_norm, wp, NULL, ch, keep};
    select_approx_q_ref(&C0, &w, s.x, s.pos, ws, part, B, HID, NQ, HD, inv_freq, 1e-6f);
    rmsnorm_ref(&C0, s.x, s.attn_norm, xn, B, HID, 1e-6f);
    double num = 0, den = 0;
    int bound_bad = 0;
    for (int b = 0; b < B; b++) {
        double xd = 0; /* norm of the dropped inputs */
        for (int j = 0; j < HID; j++)
            if (j % 5) xd += pow(bf16_to_f32(xn[b * HID + j]), 2);
        xd = sqrt(xd);
        for (int h = 0; h < NQ; h++) {
            double bound2 = 0, diff2 = 0, norm2 = 0;
            for (int d = 0; d < HD; d++) {
                int r = h * HD + d;
                double wd = 0;
                for (int j = 0; j < HID; j++)
                    if (j % 5) wd += pow(bf16_to_f32(s.wqkv[r * HID + j]), 2);
                bound2 += xd * xd * wd;
                double f = bf16_to_f32(full[(b * NQ + h) * HD + d]);
                double p = bf16_to_f32(part[(b * NQ + h) * HD + d]);
                diff2 += (f - p) * (f - p);
                norm2 += f * f + p * p;
            }
            num += diff2, den += norm2 / 2;
            bound_bad += !(sqrt(diff2) <= sqrt(bound2) + sqrt(norm2) / 128 + 1e-6);
        }
    }
    EXPECT_EQ_INT(bound_bad, 0);
    double rel = sqrt(num / den);
    EXPECT(rel > 0.0 && rel < 0.35); /* 8x heavy columns: ~ sqrt(64 / (64*16 + 64)) ~ 0.24 */
    /* the same number of light channels is far worse */
    int32_t light[HID];
    for (int j = 0; j < keep; j++)
        light[j] = 5 * j + 1;
    select_partial_weight_build(s.wqkv, NQ * HD, HID, light, keep, wp);
    w.channels = light;
    select_approx_q_ref(&C0, &w, s.x, s.pos, ws, part, B, HID, NQ, HD, inv_freq, 1e-6f);
    double num2 = 0;
    for (int i = 0; i < B * NQ * HD; i++)
        num2 += pow(bf16_to_f32(full[i]) - bf16_to_f32(part[i]), 2);
    EXPECT(sqrt(num2 / den) > 2 * rel);
    free(ws);
    /* channel list: equal columns -> the lowest; bad fractions refused */
    uint16_t flat[4 * 10];
    for (int i = 0; i < 40; i++)
        flat[i] = f32_to_bf16(0.5f);
    int32_t c3[10];
    EXPECT_EQ_INT(select_channels_build(flat, 4, 10, 0.25, c3), 3);
    EXPECT(c3[0] == 0 && c3[1] == 1 && c3[2] == 2);
    EXPECT_EQ_INT(select_channels_build(flat, 4, 10, 0.0, c3), -1);
    EXPECT_EQ_INT(select_channels_build(flat, 4, 10, 1.0, c3), 10);
}

/* select_persist_add on hand-made lists: 20 blocks, sink 1, window 2 (0, 17, 18, 19 forced). */
static void test_persist(void)
{
    const int32_t ep[] = {0, 3, 4, 5, 6, 17, 18, 19}, ap[] = {0, 3, 4, 8, 9, 17, 18, 19};
    const int32_t e[] = {0, 3, 5, 6, 7, 17, 18, 19}, a[] = {0, 3, 6, 8, 10, 17, 18, 19};
    struct select_persist p = {0};
    select_persist_add(20, 1, 2, e, 8, a, 8, ep, 8, ap, 8, &p);
    EXPECT_EQ_INT(p.steps, 1);
    EXPECT_NEAR(p.churn_exact, 0.25, 1e-12); /* 7 is new */
    EXPECT_NEAR(p.churn_approx, 0.5, 1e-12); /* 6 and 10 are new */
    EXPECT_EQ_INT(p.missed, 2);              /* 5, 7 */
    EXPECT_EQ_INT(p.missed_again, 1);        /* 5 was missed before */
    EXPECT_EQ_INT(p.missed_held, 1);         /* 5 was resident, 7 was not */
    EXPECT_EQ_INT(p.wrong, 2);               /* 8, 10 */
    EXPECT_EQ_INT(p.wrong_again, 1);         /* 8 was wrong before */
    /* no block chosen by score (3 blocks, all forced): nothing added */
    const int32_t all[] = {0, 1, 2};
    select_persist_add(3, 1, 1, all, 3, all, 3, all, 3, all, 3, &p);
    EXPECT_EQ_INT(p.steps, 1);
}

int main(void)
{
    model_rope_inv_freq_plain(1e6f, HD, inv_freq);
    test_digest_build_update(SELECT_HEADWISE, 1);
    test_digest_build_update(SELECT_HEADWISE, 0);
    test_digest_build_update(2, 1);
    test_digest_build_update(0, 0);
    test_digest_build_update(SELECT_MEAN, 1);
    test_digest_zero();
    test_scores(1);
    test_scores(0);
    test_topk_cases();
    test_topk_random();
    test_solohead();
    test_multi();
    test_approx_full();
    test_approx_partial();
    test_persist();
    return tu_finish("test_select");
}
