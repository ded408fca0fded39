/* Every selection kernel of select.h, CUDA against its CPU reference (CONVENTIONS.md, 5).
 * Inputs are random and never zero; keys, digests and queries are small nonzero integers, so
 * every fp32 sum is exact and digests, scores and selections must match bit for bit. Sizes are
 * awkward on purpose: batch 17, 97 tokens, one-token tail blocks, one-token pages, 8192-block
 * (128K-token) contexts, k = 1, 128, 2048, GQA groups of 5 and 4 (and a head_dim off the vector
 * path). Every device output sits between guard bytes; kernels that write into a pool must leave
 * all other pages as they were (the whole pool is compared). The approximate query (GEMM, rsqrt,
 * RoPE) is compared under a normalised-error tolerance. Then a timing line: scoring + top-k at
 * batch 16 x 32K tokens with Qwen3-14B shapes (nq 40, nkv 8, hd 128, block 16, k 128).
 * Exit 77 when there is no GPU. PULSE_GPU_TEST_NO_TIMING=1 skips the timing. */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda_check.h"
#include "kernels.h"
#include "model.h"
#include "numeric.h"
#include "select.h"
#include "tests/testutil.h"

/* ------------------------------------------------------------------ helpers */

#define GUARD 256
#define GUARD_BYTE 0xA5

/* The selection a sel_head stands for, in the tests' output. */
static const char *sel_name(int sel)
{
    return sel == SELECT_HEADWISE ? "head-wise" : sel == SELECT_MEAN ? "mean" : "solohead";
}

static struct kctx g_dev;
static const struct kctx g_host = {0};
static uint64_t g_seed = 0x5e1ec7ed, g_ctr;

static float rnd(void)
{
    return pulse_uniform(g_seed, g_ctr++);
} /* [-1, 1) */
static uint32_t rnd_u32(uint32_t n)
{
    return (uint32_t)(pulse_hash64(g_seed, g_ctr++) % n);
}
static float rnd_int_nz(int r) /* nonzero integer in [-r, r] */
{
    int v = (int)rnd_u32(2u * (uint32_t)r) - r;
    return (float)(v >= 0 ? v + 1 : v);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    PULSE_CHECK(p != NULL, "host malloc");
    return p;
}

struct dbuf {
    unsigned char *base;
    void *p;
    size_t bytes, total;
};

static struct dbuf dalloc(size_t bytes)
{
    struct dbuf d;
    d.bytes = bytes;
    d.total = bytes + 2 * GUARD;
    CUDA_CHECK(cudaMalloc((void **)&d.base, d.total));
    CUDA_CHECK(cudaMemset(d.base, GUARD_BYTE, d.total));
    d.p = d.base + GUARD;
    return d;
}

static struct dbuf dput(const void *h, size_t bytes)
{
    struct dbuf d = dalloc(bytes);
    if (bytes) CUDA_CHECK(cudaMemcpy(d.p, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

static void dget(const struct dbuf *d, void *h)
{
    CUDA_CHECK(cudaDeviceSynchronize());
    if (d->bytes) CUDA_CHECK(cudaMemcpy(h, d->p, d->bytes, cudaMemcpyDeviceToHost));
}

static int dguard_ok(const struct dbuf *d)
{
    unsigned char g[GUARD];
    CUDA_CHECK(cudaDeviceSynchronize());
    for (int side = 0; side < 2; side++) {
        CUDA_CHECK(cudaMemcpy(g, side ? d->base + GUARD + d->bytes : d->base, GUARD,
                              cudaMemcpyDeviceToHost));
        for (int i = 0; i < GUARD; i++)
            if (g[i] != GUARD_BYTE) return 0;
    }
    return 1;
}

static void dfree(struct dbuf *d)
{
    CUDA_CHECK(cudaFree(d->base));
}

static void report(const char *kernel, const char *cs, double err, double tol, int ok)
{
    tu_checks++;
    if (!ok) tu_failures++;
    printf("%-20s %-56s err %-10.3e tol %-8.1e %s\n", kernel, cs, err, tol, ok ? "pass" : "FAIL");
    fflush(stdout);
}

/* Bit-exact: err is the number of differing bytes. */
static void report_exact(const char *k, const char *cs, const void *g, const void *r, size_t bytes,
                         int guard)
{
    size_t diff = 0;
    for (size_t i = 0; i < bytes; i++)
        diff += ((const unsigned char *)g)[i] != ((const unsigned char *)r)[i];
    if (!guard) printf("  %s %s: guard bytes overwritten\n", k, cs);
    report(k, cs, (double)diff, 0.0, diff == 0 && guard);
}

/* ||g - r|| / ||r|| over bf16 values; *bad counts NaN/Inf disagreements. */
static double nerr_bf16(const uint16_t *g, const uint16_t *r, size_t n, size_t *bad)
{
    double num = 0.0, den = 0.0;
    *bad = 0;
    for (size_t i = 0; i < n; i++) {
        float a = bf16_to_f32(g[i]), b = bf16_to_f32(r[i]);
        if (!isfinite(a) || !isfinite(b)) {
            *bad += !((isnan(a) && isnan(b)) || a == b);
            continue;
        }
        num += ((double)a - b) * ((double)a - b);
        den += (double)b * b;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* ------------------------------------------------------------------ page tables */

/* A table of `batch` entries, entry b owning blocks[b] pages of a pool of n_pages (2 spare), ids
 * in random order, two junk ids (-1) after each entry. */
struct table {
    int batch, n_pages, n_ids;
    int32_t *ids, *start;
    struct dbuf d_ids, d_start;
};

static void table_init(struct table *t, int batch, const int *blocks)
{
    memset(t, 0, sizeof *t);
    t->batch = batch;
    int used = 0;
    for (int b = 0; b < batch; b++)
        used += blocks[b];
    t->n_pages = used + 2;
    int32_t *perm = xmalloc(sizeof(int32_t) * (size_t)t->n_pages);
    for (int i = 0; i < t->n_pages; i++)
        perm[i] = i;
    for (int i = t->n_pages; i > 1; i--) {
        int j = (int)rnd_u32((uint32_t)i);
        int32_t x = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = x;
    }
    t->n_ids = used + 2 * batch;
    t->ids = xmalloc(sizeof(int32_t) * (size_t)t->n_ids);
    t->start = xmalloc(sizeof(int32_t) * (size_t)batch);
    int at = 0, next = 0;
    for (int b = 0; b < batch; b++) {
        t->start[b] = at;
        for (int i = 0; i < blocks[b]; i++)
            t->ids[at++] = perm[next++];
        t->ids[at++] = -1;
        t->ids[at++] = -1;
    }
    free(perm);
    t->d_ids = dput(t->ids, sizeof(int32_t) * (size_t)t->n_ids);
    t->d_start = dput(t->start, sizeof(int32_t) * (size_t)batch);
}

static void table_free(struct table *t)
{
    dfree(&t->d_ids);
    dfree(&t->d_start);
    free(t->ids);
    free(t->start);
}

/* ------------------------------------------------------------------ digests */

static void test_digest(void)
{
    static const struct {
        int nkv, hd, bs, sel;
    } cases[] = {{8, 128, 16, SELECT_HEADWISE}, {8, 128, 16, 5},
                 {4, 64, 1, SELECT_HEADWISE},   {3, 40, 5, 2},
                 {2, 128, 16, SELECT_HEADWISE}, {8, 128, 16, SELECT_MEAN}};
    const int batch = 17;
    for (size_t ci = 0; ci < TU_CASES(cases); ci++) {
        const int nkv = cases[ci].nkv, hd = cases[ci].hd, bs = cases[ci].bs, sel = cases[ci].sel;
        const int ndh = select_digest_heads(nkv, sel);
        /* n[b] tokens are built, token n[b] is then appended (update); pages cover n[b] + 1 */
        int32_t n[17], pos[17];
        int blocks[17], max_n = 0;
        static const int fixed[] = {97, 1, 16, 17, 33, 0, 15, 2 * 16 + 1, 160, 1};
        for (int b = 0; b < batch; b++) {
            n[b] = b < (int)PULSE_ARRAY_LEN(fixed) ? fixed[b] : 1 + (int)rnd_u32(600);
            if (n[b] == 0) n[b] = bs; /* a full block: the update starts a new one */
            pos[b] = n[b];
            blocks[b] = PULSE_CEIL_DIV(n[b] + 1, bs);
            max_n = PULSE_MAX(max_n, n[b] + 1);
        }
        struct table kt, dt;
        table_init(&kt, batch, blocks);
        table_init(&dt, batch, blocks);
        size_t kv_elems = (size_t)kt.n_pages * nkv * 2 * bs * hd;
        size_t d_elems = (size_t)dt.n_pages * ndh * 2 * hd;
        uint16_t *hk = xmalloc(kv_elems * 2), *hd_ref = xmalloc(d_elems * 2);
        uint16_t *hd_gpu = xmalloc(d_elems * 2);
        for (size_t i = 0; i < kv_elems; i++)
            hk[i] = f32_to_bf16(rnd_int_nz(8));
        for (size_t i = 0; i < d_elems; i++)
            hd_ref[i] = 0x7fc1; /* NaN sentinel */
        struct dbuf dk = dput(hk, kv_elems * 2), dd = dput(hd_ref, d_elems * 2);
        struct dbuf dn = dput(n, sizeof n), dpos = dput(pos, sizeof pos);
        struct kv_view hkv = {hk, kt.ids, kt.start, bs, nkv, hd, 0, 0, NULL, NULL};
        struct kv_view dkv = {dk.p, kt.d_ids.p, kt.d_start.p, bs, nkv, hd, 0, 0, NULL, NULL};
        struct digest_view hdv = {hd_ref, dt.ids, dt.start, ndh, hd};
        struct digest_view ddv = {dd.p, dt.d_ids.p, dt.d_start.p, ndh, hd};
        char cs[96];
        snprintf(cs, sizeof cs, "B=%d nkv=%d hd=%d bs=%d %s", batch, nkv, hd, bs, sel_name(sel));

        digest_build_ref(&g_host, &hkv, &hdv, n, batch, sel, max_n);
        digest_build_cuda(&g_dev, &dkv, &ddv, dn.p, batch, sel, max_n);
        dget(&dd, hd_gpu);
        report_exact("digest_build", cs, hd_gpu, hd_ref, d_elems * 2, dguard_ok(&dd));

        /* update at pos = n: from the reference's build on both sides */
        CUDA_CHECK(cudaMemcpy(dd.p, hd_ref, d_elems * 2, cudaMemcpyHostToDevice));
        digest_update_ref(&g_host, &hkv, &hdv, pos, batch, sel);
        digest_update_cuda(&g_dev, &dkv, &ddv, dpos.p, batch, sel);
        dget(&dd, hd_gpu);
        report_exact("digest_update", cs, hd_gpu, hd_ref, d_elems * 2, dguard_ok(&dd));
        /* ... and that equals building n + 1 tokens */
        uint16_t *rebuilt = xmalloc(d_elems * 2);
        memcpy(rebuilt, hd_ref, d_elems * 2);
        struct digest_view rdv = hdv;
        rdv.pool = rebuilt;
        int32_t n1[17];
        for (int b = 0; b < batch; b++)
            n1[b] = n[b] + 1;
        digest_build_ref(&g_host, &hkv, &rdv, n1, batch, sel, max_n);
        report_exact("digest_update=build", cs, rebuilt, hd_ref, d_elems * 2, 1);

        free(rebuilt), free(hk), free(hd_ref), free(hd_gpu);
        dfree(&dk), dfree(&dd), dfree(&dn), dfree(&dpos);
        table_free(&kt);
        table_free(&dt);
    }
}

/* ------------------------------------------------------------------ scores and top-k */

/* Block counts of a mixed batch: every sixth entry max_blocks, others 1-4 or 1-2500 blocks. */
static void mixed_blocks(int *blocks, int batch, int max_blocks)
{
    for (int b = 0; b < batch; b++)
        blocks[b] = b % 6 == 0   ? max_blocks
                    : b % 5 == 1 ? 1 + (int)rnd_u32(4)
                                 : 1 + (int)rnd_u32(2500);
}

/* Digests (min <= max, nonzero integers) for entries of the given token counts, and q. */
#define SSET_MAX_BATCH 24
struct sset {
    int batch, nq, nkv, hd, bs, sel, ndh, nl;
    int32_t n[SSET_MAX_BATCH];
    int blocks[SSET_MAX_BATCH];
    struct table t;
    size_t d_elems;
    uint16_t *h_dig, *h_q;
    struct dbuf d_dig, d_q, d_n;
    struct digest_view hdv, ddv;
};

static void sset_init(struct sset *s, int batch, int nq, int nkv, int hd, int bs, int sel,
                      const int *blocks)
{
    memset(s, 0, sizeof *s);
    PULSE_CHECK(batch >= 1 && batch <= SSET_MAX_BATCH, "sset_init: batch out of range");
    s->batch = batch, s->nq = nq, s->nkv = nkv, s->hd = hd, s->bs = bs, s->sel = sel;
    s->ndh = select_digest_heads(nkv, sel);
    s->nl = sel == SELECT_HEADWISE ? nkv : 1;
    for (int b = 0; b < batch; b++) {
        s->blocks[b] = blocks[b];
        s->n[b] = (blocks[b] - 1) * bs + 1 + (b % 3 == 1 ? 0 : (int)rnd_u32((uint32_t)bs));
    }
    table_init(&s->t, batch, blocks);
    s->d_elems = (size_t)s->t.n_pages * s->ndh * 2 * hd;
    s->h_dig = xmalloc(s->d_elems * 2);
    for (size_t r = 0; r < s->d_elems / (2 * (size_t)hd); r++)
        for (int d = 0; d < hd; d++) {
            float a = rnd_int_nz(8), z = rnd_int_nz(8);
            s->h_dig[r * 2 * hd + d] = f32_to_bf16(fminf(a, z));
            s->h_dig[r * 2 * hd + hd + d] = f32_to_bf16(fmaxf(a, z));
        }
    s->h_q = xmalloc((size_t)batch * nq * hd * 2);
    for (size_t i = 0; i < (size_t)batch * nq * hd; i++)
        s->h_q[i] = f32_to_bf16(rnd_int_nz(4));
    s->d_dig = dput(s->h_dig, s->d_elems * 2);
    s->d_q = dput(s->h_q, (size_t)batch * nq * hd * 2);
    s->d_n = dput(s->n, sizeof(int32_t) * (size_t)batch);
    s->hdv = (struct digest_view){s->h_dig, s->t.ids, s->t.start, s->ndh, hd};
    s->ddv = (struct digest_view){s->d_dig.p, s->t.d_ids.p, s->t.d_start.p, s->ndh, hd};
}

static void sset_free(struct sset *s)
{
    free(s->h_dig), free(s->h_q);
    dfree(&s->d_dig), dfree(&s->d_q), dfree(&s->d_n);
    table_free(&s->t);
}

/* Scores of s under cfg on both sides, compared bit for bit with the unwritten slots (NaN)
 * included, reported as `what`; returns the reference's scores (the caller frees them). */
static float *score_case(const struct select_cfg *cfg, const struct sset *s, const char *what)
{
    const size_t sb = select_scores_bytes(cfg, s->batch, s->sel);
    float *rs = xmalloc(sb), *gs = xmalloc(sb);
    for (size_t i = 0; i < sb / 4; i++)
        rs[i] = NAN;
    struct dbuf dsc = dput(rs, sb);
    select_score_ref(&g_host, cfg, s->h_q, &s->hdv, s->n, rs, s->batch, s->sel);
    select_score_cuda(&g_dev, cfg, s->d_q.p, &s->ddv, s->d_n.p, dsc.p, s->batch, s->sel);
    dget(&dsc, gs);
    report_exact("select_score", what, gs, rs, sb, dguard_ok(&dsc));
    dfree(&dsc);
    free(gs);
    return rs;
}

/* The score kernel groups a CTA's blocks into 1 to 4 rounds by the grid's size against the
 * resident CTAs (select_cuda.cu): batches of 1 to 7 entries of up to 8192 blocks (SoloHead,
 * one list) span every count on a 132-SM part, each bit for bit against the reference. */
static void test_score_rounds(void)
{
    static const int batches[] = {1, 2, 3, 5, 7};
    const int bs = 16, max_blocks = 8192;
    for (size_t bi = 0; bi < PULSE_ARRAY_LEN(batches); bi++) {
        const int batch = batches[bi];
        int blocks[17];
        for (int b = 0; b < batch; b++)
            blocks[b] = b == 0 ? max_blocks : 1 + (int)rnd_u32(max_blocks);
        struct sset s;
        sset_init(&s, batch, 40, 8, 128, bs, 5, blocks);
        struct select_cfg cfg = {s.nq, s.nkv, s.hd, bs, 128, 1, 2, max_blocks, 0};
        char cs[96];
        snprintf(cs, sizeof cs, "B=%d to 8192 blocks (the grid's rounds) %s", batch,
                 sel_name(s.sel));
        free(score_case(&cfg, &s, cs));
        sset_free(&s);
    }
}

/* Top-k of host scores `hs` on both sides (the device gets the same scores), compared bit for
 * bit with the unwritten slots (sentinel -7) included. */
static void topk_case(const struct select_cfg *cfg, const struct sset *s, const float *hs,
                      const char *what)
{
    const int ms = select_max_selected(cfg), nl = s->nl, batch = s->batch;
    const size_t ni = (size_t)batch * nl * ms, nc = (size_t)batch * nl;
    int32_t *ri = xmalloc(ni * 4), *gi = xmalloc(ni * 4);
    int32_t *rc = xmalloc(nc * 4), *gc = xmalloc(nc * 4);
    for (size_t i = 0; i < ni; i++)
        ri[i] = -7;
    for (size_t i = 0; i < nc; i++)
        rc[i] = -7;
    struct dbuf dsc = dput(hs, select_scores_bytes(cfg, batch, s->sel));
    struct dbuf di = dput(ri, ni * 4), dc = dput(rc, nc * 4);
    select_topk_ref(&g_host, cfg, hs, s->n, ri, rc, batch, s->sel);
    select_topk_cuda(&g_dev, cfg, dsc.p, s->d_n.p, di.p, dc.p, batch, s->sel);
    dget(&di, gi);
    dget(&dc, gc);
    char cs[128];
    snprintf(cs, sizeof cs, "%s k=%d sink=%d win=%d %s", what, cfg->budget, cfg->sink, cfg->window,
             sel_name(s->sel));
    report_exact("select_topk idx", cs, gi, ri, ni * 4, dguard_ok(&di));
    report_exact("select_topk count", cs, gc, rc, nc * 4, dguard_ok(&dc));
    free(ri), free(gi), free(rc), free(gc);
    dfree(&dsc), dfree(&di), dfree(&dc);
}

static void test_score_topk(void)
{
    static const struct {
        int nq, nkv, hd, sel;
    } cases[] = {
        {40, 8, 128, SELECT_HEADWISE}, {40, 8, 128, 3},          /* G = 5 (Qwen3-14B) */
        {32, 8, 128, SELECT_HEADWISE}, {32, 8, 128, 7},          /* G = 4 (Llama-3.1-8B) */
        {12, 3, 72, SELECT_HEADWISE},                            /* off the vector path */
        {40, 8, 128, SELECT_MEAN},     {12, 3, 72, SELECT_MEAN}, /* ArkVale's page list */
    };
    const int batch = 17, bs = 16, max_blocks = 8192;
    for (size_t ci = 0; ci < TU_CASES(cases); ci++) {
        int blocks[17];
        mixed_blocks(blocks, batch, max_blocks);
        struct sset s;
        sset_init(&s, batch, cases[ci].nq, cases[ci].nkv, cases[ci].hd, bs, cases[ci].sel, blocks);
        struct select_cfg cfg = {s.nq, s.nkv, s.hd, bs, 128, 1, 2, max_blocks, 0};
        char cs[128];
        snprintf(cs, sizeof cs, "B=%d nq=%d nkv=%d hd=%d to 8192 blocks %s", batch, s.nq, s.nkv,
                 s.hd, sel_name(s.sel));
        float *rs = score_case(&cfg, &s, cs);
        struct dbuf dsc = dalloc(select_scores_bytes(&cfg, batch, s.sel));

        static const int ks[] = {1, 128, 2048};
        for (size_t ki = 0; ki < PULSE_ARRAY_LEN(ks); ki++) {
            cfg.budget = ks[ki];
            snprintf(cs, sizeof cs, "nq=%d nkv=%d hd=%d", s.nq, s.nkv, s.hd);
            topk_case(&cfg, &s, rs, cs);
        }
        /* the composition, k = 128 */
        cfg.budget = 128;
        const int ms = select_max_selected(&cfg);
        size_t ni = (size_t)batch * s.nl * ms, nc = (size_t)batch * s.nl;
        int32_t *ri = xmalloc(ni * 4), *gi = xmalloc(ni * 4), *rc = xmalloc(nc * 4);
        int32_t *gc = xmalloc(nc * 4);
        for (size_t i = 0; i < ni; i++)
            ri[i] = -7;
        for (size_t i = 0; i < nc; i++)
            rc[i] = -7;
        struct dbuf di = dput(ri, ni * 4), dc = dput(rc, nc * 4);
        select_blocks_ref(&g_host, &cfg, s.h_q, &s.hdv, s.n, rs, ri, rc, batch, s.sel);
        select_blocks_cuda(&g_dev, &cfg, s.d_q.p, &s.ddv, s.d_n.p, dsc.p, di.p, dc.p, batch, s.sel);
        dget(&di, gi);
        dget(&dc, gc);
        int guards = dguard_ok(&di) && dguard_ok(&dc) && dguard_ok(&dsc);
        report_exact("select_blocks idx", cs, gi, ri, ni * 4, guards);
        report_exact("select_blocks count", cs, gc, rc, nc * 4, guards);
        free(ri), free(gi), free(rc), free(gc), free(rs);
        dfree(&di), dfree(&dc), dfree(&dsc);
        sset_free(&s);
    }
}

/* Ties everywhere: scores from {NaN, -0, +0, -2..2}, sink and window variants, 1-block and
 * 8192-block entries, k past the candidates. */
static void test_topk_ties(void)
{
    const int batch = 17, max_blocks = 8192;
    int blocks[17];
    for (int b = 0; b < batch; b++)
        blocks[b] = b % 4 == 0   ? max_blocks
                    : b % 4 == 1 ? 1 + (int)rnd_u32(6)
                                 : 1 + (int)rnd_u32(3000);
    static const struct {
        int sink, window, k;
    } cases[] = {{1, 2, 1},    {1, 2, 128},  {1, 2, 2048}, {0, 0, 128},
                 {3, 5, 2048}, {1, 2, 8191}, {2, 0, 0}};
    for (int mode = 0; mode < 2; mode++) {
        struct sset s;
        sset_init(&s, batch, 8, 4, 64, 16, mode ? 1 : SELECT_HEADWISE, blocks);
        struct select_cfg cfg = {8, 4, 64, 16, 1, 1, 2, max_blocks, 0};
        size_t n = select_scores_bytes(&cfg, batch, s.sel) / 4;
        float *hs = xmalloc(n * 4);
        for (size_t i = 0; i < n; i++) {
            uint32_t r = rnd_u32(50);
            hs[i] = r == 0 ? NAN : r == 1 ? -0.0f : r == 2 ? 0.0f : (float)(r % 5) - 2.0f;
        }
        for (size_t ci = 0; ci < TU_CASES(cases); ci++) {
            cfg.sink = cases[ci].sink, cfg.window = cases[ci].window, cfg.budget = cases[ci].k;
            topk_case(&cfg, &s, hs, "ties B=17 to 8192 blocks");
        }
        free(hs);
        sset_free(&s);
    }
}

/* Real-valued scores, as a step's are: spread over magnitudes and signs (the kernel's last
 * bits are ranked among a few keys of one bin), once nearly all distinct and once drawn from 300
 * values (ties inside those few). */
static void test_topk_spread(void)
{
    const int batch = 17, max_blocks = 8192;
    int blocks[17];
    for (int b = 0; b < batch; b++)
        blocks[b] = b % 4 == 0 ? max_blocks : 1 + (int)rnd_u32(4000);
    static const int ks[] = {1, 31, 128, 160, 2048, 8000};
    for (int mode = 0; mode < 2; mode++) {
        struct sset s;
        sset_init(&s, batch, 40, 8, 128, 16, mode ? 3 : SELECT_HEADWISE, blocks);
        struct select_cfg cfg = {40, 8, 128, 16, 1, 1, 2, max_blocks, 0};
        size_t n = select_scores_bytes(&cfg, batch, s.sel) / 4;
        float pool[300];
        for (int i = 0; i < 300; i++)
            pool[i] = rnd() * 64.0f;
        float *hs = xmalloc(n * 4);
        for (size_t i = 0; i < n; i++)
            hs[i] = mode ? pool[rnd_u32(300)] : rnd() * ldexpf(1.0f, (int)rnd_u32(12));
        for (size_t ki = 0; ki < PULSE_ARRAY_LEN(ks); ki++) {
            cfg.budget = ks[ki];
            topk_case(&cfg, &s, hs,
                      mode ? "300 values B=17 to 8192 blocks" : "spread B=17 to 8192 blocks");
        }
        free(hs);
        sset_free(&s);
    }
}

/* ------------------------------------------------------------------ approximate query */

static void test_approx_q(void)
{
    static const struct {
        int batch, hidden, nq, hd;
        double frac;
        int qn;
    } cases[] = {{17, 1000, 40, 128, 1.0, 1},
                 {17, 1000, 40, 128, 0.2, 1},
                 {16, 5120, 40, 128, 0.2, 1},
                 {3, 97, 4, 64, 0.2, 0}};
    for (size_t ci = 0; ci < TU_CASES(cases); ci++) {
        const int batch = cases[ci].batch, hid = cases[ci].hidden, nq = cases[ci].nq;
        const int hd = cases[ci].hd, rows = nq * hd;
        float *x = xmalloc(sizeof(float) * (size_t)batch * hid);
        uint16_t *norm = xmalloc(2 * (size_t)hid), *wq = xmalloc(2 * (size_t)rows * hid);
        uint16_t qn[512];
        int32_t *pos = xmalloc(sizeof(int32_t) * (size_t)batch), *ch = xmalloc(4 * (size_t)hid);
        for (int i = 0; i < batch * hid; i++)
            x[i] = 2.0f * rnd();
        for (int i = 0; i < hid; i++)
            norm[i] = f32_to_bf16(1.0f + 0.5f * rnd());
        for (size_t i = 0; i < (size_t)rows * hid; i++)
            wq[i] = f32_to_bf16(0.05f * rnd());
        for (int i = 0; i < hd; i++)
            qn[i] = f32_to_bf16(1.0f + 0.3f * rnd());
        for (int b = 0; b < batch; b++)
            pos[b] = (int32_t)rnd_u32(131072);
        int keep = hid;
        uint16_t *wp = wq;
        if (cases[ci].frac < 1.0) {
            keep = select_channels_build(wq, rows, hid, cases[ci].frac, ch);
            wp = xmalloc(2 * (size_t)rows * keep);
            select_partial_weight_build(wq, rows, hid, ch, keep, wp);
        }
        struct approx_q_weights hw = {norm, wp, cases[ci].qn ? qn : NULL, keep < hid ? ch : NULL,
                                      keep};
        size_t wsb = select_approx_q_workspace_bytes(batch, keep, nq, hd);
        void *hws = xmalloc(wsb);
        size_t qb = 2 * (size_t)batch * rows;
        uint16_t *rq = xmalloc(qb), *gq = xmalloc(qb);
        float inv_freq[256];
        model_rope_inv_freq_plain(1e6f, hd, inv_freq);
        select_approx_q_ref(&g_host, &hw, x, pos, hws, rq, batch, hid, nq, hd, inv_freq, 1e-6f);

        struct dbuf dx = dput(x, sizeof(float) * (size_t)batch * hid);
        struct dbuf dnorm = dput(norm, 2 * (size_t)hid);
        struct dbuf dw = dput(wp, 2 * (size_t)rows * keep), dqn = dput(qn, 2 * (size_t)hd);
        struct dbuf dch = dput(ch, 4 * (size_t)keep), dpos = dput(pos, 4 * (size_t)batch);
        struct dbuf dws = dalloc(wsb), dq = dalloc(qb);
        struct approx_q_weights dw_ = {dnorm.p, dw.p, cases[ci].qn ? dqn.p : NULL,
                                       keep < hid ? dch.p : NULL, keep};
        struct dbuf dinv = dput(inv_freq, sizeof(float) * (size_t)(hd / 2));
        select_approx_q_cuda(&g_dev, &dw_, dx.p, dpos.p, dws.p, dq.p, batch, hid, nq, hd,
                             (const float *)dinv.p, 1e-6f);
        dget(&dq, gq);
        size_t bad;
        double e = nerr_bf16(gq, rq, qb / 2, &bad);
        char cs[96];
        snprintf(cs, sizeof cs, "B=%d hidden=%d nq=%d hd=%d channels=%d%s", batch, hid, nq, hd,
                 keep, cases[ci].qn ? " qk-norm" : "");
        int guard = dguard_ok(&dq) && dguard_ok(&dws);
        if (bad) printf("  approx_q %s: %zu NaN/Inf disagreements\n", cs, bad);
        report("select_approx_q", cs, e, 1e-2, e <= 1e-2 && bad == 0 && guard);

        dfree(&dx), dfree(&dnorm), dfree(&dw), dfree(&dqn), dfree(&dch), dfree(&dpos);
        dfree(&dws), dfree(&dq), dfree(&dinv);
        if (wp != wq) free(wp);
        free(x), free(norm), free(wq), free(pos), free(ch), free(hws), free(rq), free(gq);
    }
}

/* ------------------------------------------------------------------ several jobs at once */

/* select_blocks_multi: two jobs over the same entries (as PulseInfer's exact selection of one
 * layer and its prediction of the next: other digests, query, selector head and a wider
 * budget with its own list stride), one launch of each kernel, against the reference job by
 * job, bit for bit: scores (unwritten slots included), lists and counts. */
static void test_multi(void)
{
    static const struct {
        int sel0, sel1, k0, k1;
    } cases[] = {{3, 6, 128, 160},
                 {SELECT_HEADWISE, SELECT_HEADWISE, 64, 80},
                 {SELECT_MEAN, SELECT_MEAN, 128, 2048},
                 {5, 5, 1, 2}};
    const int batch = 17, bs = 16, max_blocks = 8192;
    for (size_t ci = 0; ci < TU_CASES(cases); ci++) {
        int blocks[17];
        mixed_blocks(blocks, batch, max_blocks);
        struct sset s[2];
        sset_init(&s[0], batch, 40, 8, 128, bs, cases[ci].sel0, blocks);
        sset_init(&s[1], batch, 40, 8, 128, bs, cases[ci].sel1, blocks);
        /* the same entries: job 1 takes job 0's token counts */
        memcpy(s[1].n, s[0].n, sizeof s[0].n);
        const struct select_cfg c0 = {40, 8, 128, bs, cases[ci].k0, 1, 2, max_blocks, 0};
        struct select_cfg c1 = c0;
        c1.budget = cases[ci].k1;
        c1.list_stride = select_max_selected(&c1) + 3; /* a stride of its own */
        const struct select_cfg *cfgs[2] = {&c0, &c1};
        struct select_job hj[2], dj[2];
        struct dbuf dsc[2], di[2], dc[2];
        float *rs[2];
        int32_t *ri[2], *rc[2];
        size_t sb[2], ni[2], nc[2];
        for (int j = 0; j < 2; j++) {
            sb[j] = select_scores_bytes(cfgs[j], batch, s[j].sel);
            ni[j] = (size_t)batch * s[j].nl * select_list_stride(cfgs[j]);
            nc[j] = (size_t)batch * s[j].nl;
            rs[j] = xmalloc(sb[j]), ri[j] = xmalloc(ni[j] * 4), rc[j] = xmalloc(nc[j] * 4);
            for (size_t i = 0; i < sb[j] / 4; i++)
                rs[j][i] = NAN;
            for (size_t i = 0; i < ni[j]; i++)
                ri[j][i] = -7;
            for (size_t i = 0; i < nc[j]; i++)
                rc[j][i] = -7;
            dsc[j] = dput(rs[j], sb[j]), di[j] = dput(ri[j], ni[j] * 4);
            dc[j] = dput(rc[j], nc[j] * 4);
            hj[j] =
                (struct select_job){cfgs[j], s[j].h_q, &s[j].hdv, rs[j], ri[j], rc[j], s[j].sel};
            dj[j] = (struct select_job){cfgs[j], s[j].d_q.p, &s[j].ddv, dsc[j].p,
                                        di[j].p, dc[j].p,    s[j].sel};
        }
        select_blocks_multi_ref(&g_host, hj, 2, s[0].n, batch);
        select_blocks_multi_cuda(&g_dev, dj, 2, s[0].d_n.p, batch);
        for (int j = 0; j < 2; j++) {
            float *gs = xmalloc(sb[j]);
            int32_t *gi = xmalloc(ni[j] * 4), *gc = xmalloc(nc[j] * 4);
            dget(&dsc[j], gs), dget(&di[j], gi), dget(&dc[j], gc);
            char cs[128];
            snprintf(cs, sizeof cs, "job %d of 2: B=%d to 8192 blocks k=%d %s", j, batch,
                     cfgs[j]->budget, sel_name(s[j].sel));
            const int guards = dguard_ok(&dsc[j]) && dguard_ok(&di[j]) && dguard_ok(&dc[j]);
            report_exact("select_blocks_multi scores", cs, gs, rs[j], sb[j], guards);
            report_exact("select_blocks_multi idx", cs, gi, ri[j], ni[j] * 4, guards);
            report_exact("select_blocks_multi count", cs, gc, rc[j], nc[j] * 4, guards);
            free(gs), free(gi), free(gc);
        }
        /* one job through the same entry point, over refilled outputs: job 1's lists */
        CUDA_CHECK(cudaMemset(di[1].p, 0xff, ni[1] * 4));
        CUDA_CHECK(cudaMemset(dc[1].p, 0xff, nc[1] * 4));
        select_blocks_multi_cuda(&g_dev, &dj[1], 1, s[0].d_n.p, batch);
        {
            int32_t *gi = xmalloc(ni[1] * 4), *gc = xmalloc(nc[1] * 4);
            dget(&di[1], gi), dget(&dc[1], gc);
            int same = memcmp(gc, rc[1], nc[1] * 4) == 0;
            const size_t ls = (size_t)select_list_stride(&c1);
            for (size_t e = 0; same && e < nc[1]; e++)
                same = memcmp(gi + e * ls, ri[1] + e * ls, sizeof(int32_t) * (size_t)rc[1][e]) == 0;
            report("select_blocks_multi", "one job: the reference's lists and counts", 0, 0, same);
            free(gi), free(gc);
        }
        for (int j = 0; j < 2; j++) {
            free(rs[j]), free(ri[j]), free(rc[j]);
            dfree(&dsc[j]), dfree(&di[j]), dfree(&dc[j]);
            sset_free(&s[j]);
        }
    }
}

/* ------------------------------------------------------------------ timing */

static void time_select(void)
{
    const char *no = getenv("PULSE_GPU_TEST_NO_TIMING");
    if (no && strcmp(no, "0") != 0) return;
    /* the copy ceiling of this run (read + write counted), to read the score kernel against */
    const double copy_gbs = backend_find("cuda")->copy_bandwidth(&g_dev, (size_t)256 << 20, 10);
    cudaStream_t st = (cudaStream_t)g_dev.stream;
    cudaEvent_t e0, e1, e2;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    CUDA_CHECK(cudaEventCreate(&e2));
    printf("timing select: device copy %.0f GB/s (read + write)\n", copy_gbs);
    /* batch x context, selection, budget 128 blocks of 16; 24 x 32K is the offload batch of
     * the 32K x 24 point, the last the 1 : 8 point's (9 x 64K), both SoloHead */
    static const struct {
        int batch, ctx, sel;
        const char *name;
    } pts[] = {{16, 32768, SELECT_HEADWISE, "head-wise"},
               {16, 32768, 3, "solohead"},
               {16, 32768, SELECT_MEAN, "mean"},
               {24, 32768, 3, "solohead"},
               {9, 65536, 3, "solohead"}};
    const int bs = 16, reps = 50;
    for (size_t pi = 0; pi < sizeof pts / sizeof pts[0]; pi++) {
        const int batch = pts[pi].batch, ctx = pts[pi].ctx, nb = ctx / bs;
        int blocks[SSET_MAX_BATCH];
        for (int b = 0; b < batch; b++)
            blocks[b] = nb;
        struct sset s;
        sset_init(&s, batch, 40, 8, 128, bs, pts[pi].sel, blocks);
        int32_t n[SSET_MAX_BATCH];
        for (int b = 0; b < batch; b++)
            n[b] = ctx;
        CUDA_CHECK(cudaMemcpy(s.d_n.p, n, sizeof(int32_t) * (size_t)batch, cudaMemcpyHostToDevice));
        struct select_cfg cfg = {40, 8, 128, bs, 128, 1, 2, nb, 0};
        struct dbuf dsc = dalloc(select_scores_bytes(&cfg, batch, s.sel));
        int ms = select_max_selected(&cfg);
        struct dbuf di = dalloc((size_t)batch * s.nl * ms * 4);
        struct dbuf dc = dalloc((size_t)batch * s.nl * 4);
        for (int w = 0; w < 3; w++)
            select_blocks_cuda(&g_dev, &cfg, s.d_q.p, &s.ddv, s.d_n.p, dsc.p, di.p, dc.p, batch,
                               s.sel);
        float t_score = 0, t_all = 0;
        for (int r = 0; r < reps; r++) {
            CUDA_CHECK(cudaEventRecord(e0, st));
            select_score_cuda(&g_dev, &cfg, s.d_q.p, &s.ddv, s.d_n.p, dsc.p, batch, s.sel);
            CUDA_CHECK(cudaEventRecord(e1, st));
            select_topk_cuda(&g_dev, &cfg, dsc.p, s.d_n.p, di.p, dc.p, batch, s.sel);
            CUDA_CHECK(cudaEventRecord(e2, st));
            CUDA_CHECK(cudaEventSynchronize(e2));
            float a, b;
            CUDA_CHECK(cudaEventElapsedTime(&a, e0, e1));
            CUDA_CHECK(cudaEventElapsedTime(&b, e0, e2));
            t_score += a, t_all += b;
        }
        const double us_score = 1e3 * t_score / reps, us_all = 1e3 * t_all / reps;
        const double bytes = (double)batch * nb * s.ndh * 2 * 128 * 2;
        const double gbs = bytes / (us_score * 1e3);
        printf("timing select %-9s batch %d x %d tokens (%d blocks), nq 40 nkv 8 hd 128 k 128: "
               "score+topk %.1f us (score %.1f us, digests %.1f MB at %.0f GB/s, %.2f of the "
               "copy rate; topk %.1f us)\n",
               pts[pi].name, batch, ctx, nb, us_all, us_score, bytes / 1e6, gbs, gbs / copy_gbs,
               us_all - us_score);
        if (pts[pi].sel >= 0) { /* two selections (other budgets): apart, then in one launch */
            struct select_cfg cw = cfg;
            cw.budget = select_widened_budget(cfg.budget, 0.25);
            cw.list_stride = select_max_selected(&cw);
            struct dbuf dsc2 = dalloc(select_scores_bytes(&cfg, batch, s.sel));
            struct dbuf di2 = dalloc((size_t)batch * s.nl * select_list_stride(&cw) * 4);
            struct dbuf dc2 = dalloc((size_t)batch * s.nl * 4);
            const struct select_job jobs[2] = {
                {&cfg, s.d_q.p, &s.ddv, dsc.p, di.p, dc.p, s.sel},
                {&cw, s.d_q.p, &s.ddv, dsc2.p, di2.p, dc2.p, (s.sel + 1) % 8}};
            float t_apart = 0, t_joint = 0;
            for (int r = 0; r < reps + 3; r++) {
                CUDA_CHECK(cudaEventRecord(e0, st));
                for (int j = 0; j < 2; j++)
                    select_blocks_multi_cuda(&g_dev, &jobs[j], 1, s.d_n.p, batch);
                CUDA_CHECK(cudaEventRecord(e1, st));
                select_blocks_multi_cuda(&g_dev, jobs, 2, s.d_n.p, batch);
                CUDA_CHECK(cudaEventRecord(e2, st));
                CUDA_CHECK(cudaEventSynchronize(e2));
                float a, b;
                CUDA_CHECK(cudaEventElapsedTime(&a, e0, e1));
                CUDA_CHECK(cudaEventElapsedTime(&b, e1, e2));
                if (r >= 3) t_apart += a, t_joint += b;
            }
            printf("timing select %-9s batch %d x %d tokens, two selections (k 128 and %d): "
                   "apart %.1f us, in one launch each %.1f us (%.2fx)\n",
                   pts[pi].name, batch, ctx, cw.budget, 1e3 * t_apart / reps, 1e3 * t_joint / reps,
                   t_apart / t_joint);
            dfree(&dsc2), dfree(&di2), dfree(&dc2);
        }
        dfree(&dsc), dfree(&di), dfree(&dc);
        sset_free(&s);
    }
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    CUDA_CHECK(cudaEventDestroy(e2));
}

int main(void)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "test_select_gpu: no GPU, skipped\n");
        return 77;
    }
    cudaStream_t st;
    cublasHandle_t blas;
    CUDA_CHECK(cudaStreamCreate(&st));
    CUBLAS_CHECK(cublasCreate(&blas));
    CUBLAS_CHECK(cublasSetStream(blas, st));
    int dev = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    g_dev = (struct kctx){.stream = st, .blas = blas, .num_sms = sms};

    test_digest();
    test_score_topk();
    test_score_rounds();
    test_topk_ties();
    test_topk_spread();
    test_approx_q();
    test_multi();
    time_select();

    CUBLAS_CHECK(cublasDestroy(blas));
    CUDA_CHECK(cudaStreamDestroy(st));
    return tu_finish("test_select_gpu");
}
