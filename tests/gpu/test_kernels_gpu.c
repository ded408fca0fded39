/* Every CUDA kernel of kernels.h against its CPU reference, table-driven (CONVENTIONS.md, 5).
 * For each case: random inputs made on the host (never zeros), the _ref on host copies, the _cuda
 * on device copies, then NaN/Inf agreement and ||gpu - ref|| / ||ref|| under the case's tolerance
 * (bit-exact where the kernel only moves or generates bits). Every device output lives between
 * guard bytes that must survive the kernel; kernels that write into the KV pool must leave all
 * other pages and tokens as they were. One line per case. Then a timing section: attention at
 * Qwen3-14B shapes against a device-to-device copy measured in the same run.
 * Exit 77 when there is no GPU. PULSE_GPU_TEST_NO_TIMING=1 skips the timing section. */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "kernels.h"
#include "model.h"
#include "numeric.h"
#include "testutil.h"

/* ------------------------------------------------------------------ helpers */

#define GUARD 256
#define GUARD_BYTE 0xA5

static struct kctx g_dev; /* stream, cuBLAS handle, num_sms; workspace set per case */
static const struct kctx g_host = {0};
static uint64_t g_rng_seed = 0x5eed, g_rng_ctr;

static float rnd(void)
{
    return pulse_uniform(g_rng_seed, g_rng_ctr++);
} /* [-1, 1) */
static uint32_t rnd_u32(void)
{
    return (uint32_t)(pulse_hash64(g_rng_seed, g_rng_ctr++) >> 32);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    PULSE_CHECK(p != NULL, "host malloc");
    return p;
}

static void fill_bf16(uint16_t *a, size_t n, float scale, float offset)
{
    for (size_t i = 0; i < n; i++)
        a[i] = f32_to_bf16(offset + scale * rnd());
}

static void fill_f32(float *a, size_t n, float scale, float offset)
{
    for (size_t i = 0; i < n; i++)
        a[i] = offset + scale * rnd();
}

/* A device buffer of `bytes` at p, with GUARD_BYTE everywhere else in [base, base + total). */
struct dbuf {
    unsigned char *base;
    void *p;
    size_t bytes, total;
};

static struct dbuf dalloc(size_t bytes, size_t shift)
{
    struct dbuf d;
    d.bytes = bytes;
    d.total = bytes + 2 * GUARD + shift;
    CUDA_CHECK(cudaMalloc((void **)&d.base, d.total));
    CUDA_CHECK(cudaMemset(d.base, GUARD_BYTE, d.total));
    d.p = d.base + GUARD + shift;
    return d;
}

static struct dbuf dput(const void *h, size_t bytes)
{
    struct dbuf d = dalloc(bytes, 0);
    if (bytes) CUDA_CHECK(cudaMemcpy(d.p, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

static void dget(const struct dbuf *d, void *h)
{
    CUDA_CHECK(cudaDeviceSynchronize());
    if (d->bytes) CUDA_CHECK(cudaMemcpy(h, d->p, d->bytes, cudaMemcpyDeviceToHost));
}

/* Returns 1 when every byte outside [p, p + bytes) still holds GUARD_BYTE. */
static int dguard_ok(const struct dbuf *d)
{
    unsigned char *h = xmalloc(d->total);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(h, d->base, d->total, cudaMemcpyDeviceToHost));
    size_t lo = (size_t)((unsigned char *)d->p - d->base), hi = lo + d->bytes;
    int ok = 1;
    for (size_t i = 0; i < d->total && ok; i++)
        if ((i < lo || i >= hi) && h[i] != GUARD_BYTE) ok = 0;
    free(h);
    return ok;
}

static void dfree(struct dbuf *d)
{
    CUDA_CHECK(cudaFree(d->base));
}

/* Prints the case's line and counts it (testutil's counters). */
static void report(const char *kernel, const char *cs, double err, double tol, int ok)
{
    tu_checks++;
    if (!ok) tu_failures++;
    printf("%-20s %-44s err %-10.3e tol %-8.1e %s\n", kernel, cs, err, tol, ok ? "pass" : "FAIL");
    fflush(stdout);
}

/* Normalised L2 error over the finite pairs; *bad counts NaN/Inf disagreements. */
static double nerr_f32(const float *g, const float *r, size_t n, size_t *bad)
{
    double num = 0.0, den = 0.0;
    *bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(r[i]) || !isfinite(g[i])) {
            int same = (isnan(r[i]) && isnan(g[i])) || (isinf(r[i]) && g[i] == r[i]);
            if (!same) (*bad)++;
            continue;
        }
        double d = (double)g[i] - (double)r[i];
        num += d * d;
        den += (double)r[i] * (double)r[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

static double nerr_bf16(const uint16_t *g, const uint16_t *r, size_t n, size_t *bad)
{
    float *gf = xmalloc(n * sizeof(float)), *rf = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        gf[i] = bf16_to_f32(g[i]);
        rf[i] = bf16_to_f32(r[i]);
    }
    double e = nerr_f32(gf, rf, n, bad);
    free(gf);
    free(rf);
    return e;
}

/* err/tol line for a compared output (tolerance test, specials must agree, guards intact). */
static void report_cmp(const char *k, const char *cs, double err, size_t bad, double tol, int guard)
{
    if (bad) printf("  %s %s: %zu NaN/Inf disagreements\n", k, cs, bad);
    if (!guard) printf("  %s %s: guard bytes overwritten\n", k, cs);
    report(k, cs, err, tol, err <= tol && bad == 0 && guard);
}

/* Bit-exact comparison: err is the number of differing bytes. */
static void report_exact(const char *k, const char *cs, const void *g, const void *r, size_t bytes,
                         int guard)
{
    size_t diff = 0;
    for (size_t i = 0; i < bytes; i++)
        diff += ((const unsigned char *)g)[i] != ((const unsigned char *)r)[i];
    if (!guard) printf("  %s %s: guard bytes overwritten\n", k, cs);
    report(k, cs, (double)diff, 0.0, diff == 0 && guard);
}

/* ------------------------------------------------------------------ paged KV setup */

/* A pool of `pages` pages, entry b owning need[b] of them in random order. The page table has
 * two junk entries (-1) after each entry's pages, so reading past an entry's pages faults or
 * shows. page_start[b] points at entry b's first id. */
struct kvset {
    int batch, nkv, hd, ps;
    size_t pages, page_elems, pool_elems;
    int32_t *ids, *start;
    int n_ids;
    uint16_t *h_pool;
    struct dbuf d_pool, d_ids, d_start;
    struct kv_view hv, dv;
};

static void kvset_init(struct kvset *s, int batch, int nkv, int hd, int ps, const int *tokens,
                       int spare_pages)
{
    memset(s, 0, sizeof *s);
    s->batch = batch, s->nkv = nkv, s->hd = hd, s->ps = ps;
    size_t used = 0;
    for (int b = 0; b < batch; b++)
        used += (size_t)PULSE_CEIL_DIV(tokens[b], ps);
    s->pages = used + (size_t)spare_pages;
    s->page_elems = (size_t)nkv * 2 * ps * hd;
    s->pool_elems = s->pages * s->page_elems;
    int32_t *perm = xmalloc(s->pages * sizeof(int32_t));
    for (size_t i = 0; i < s->pages; i++)
        perm[i] = (int32_t)i;
    for (size_t i = s->pages; i > 1; i--) {
        size_t j = rnd_u32() % i;
        int32_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
    s->n_ids = (int)used + 2 * batch;
    s->ids = xmalloc((size_t)s->n_ids * sizeof(int32_t));
    s->start = xmalloc((size_t)batch * sizeof(int32_t));
    int at = 0;
    size_t next = 0;
    for (int b = 0; b < batch; b++) {
        s->start[b] = at;
        for (int i = 0; i < PULSE_CEIL_DIV(tokens[b], ps); i++)
            s->ids[at++] = perm[next++];
        s->ids[at++] = -1;
        s->ids[at++] = -1;
    }
    free(perm);
    s->h_pool = xmalloc(s->pool_elems * sizeof(uint16_t));
    fill_bf16(s->h_pool, s->pool_elems, 1.0f, 0.0f);
    s->hv = (struct kv_view){s->h_pool, s->ids, s->start, ps, nkv, hd, 0, 0, NULL, NULL};
}

/* Element offset of token t's K (which = 0) or V row of head h for entry b. */
static size_t kvset_row(const struct kvset *s, int b, int t, int h, int which)
{
    size_t page = (size_t)s->ids[s->start[b] + t / s->ps];
    return page * s->page_elems + (((size_t)h * 2 + which) * s->ps + (size_t)(t % s->ps)) * s->hd;
}

/* Copies the host pool and tables to the device (call after the host pool is final). */
static void kvset_upload(struct kvset *s)
{
    s->d_pool = dput(s->h_pool, s->pool_elems * sizeof(uint16_t));
    s->d_ids = dput(s->ids, (size_t)s->n_ids * sizeof(int32_t));
    s->d_start = dput(s->start, (size_t)s->batch * sizeof(int32_t));
    s->dv = (struct kv_view){s->d_pool.p, s->d_ids.p, s->d_start.p, s->ps, s->nkv, s->hd,
                             0,           0,          NULL,         NULL};
}

static void kvset_free(struct kvset *s)
{
    dfree(&s->d_pool);
    dfree(&s->d_ids);
    dfree(&s->d_start);
    free(s->ids);
    free(s->start);
    free(s->h_pool);
}

/* ------------------------------------------------------------------ simple kernels */

static void test_fill_random(void)
{
    static const struct {
        size_t n, shift;
        uint64_t seed;
        float scale, offset;
    } cases[] = {
        {1, 0, 1, 1.0f, 0.0f}, {97, 2, 7, 0.02f, 0.0f}, {(1u << 20) + 3, 0, 42, 0.5f, 0.25f}};
    for (size_t ci = 0; ci < PULSE_ARRAY_LEN(cases); ci++) {
        size_t n = cases[ci].n;
        uint16_t *r = xmalloc(n * 2), *g = xmalloc(n * 2);
        fill_random_bf16_ref(&g_host, r, n, cases[ci].seed, cases[ci].scale, cases[ci].offset);
        struct dbuf d = dalloc(n * 2, cases[ci].shift);
        fill_random_bf16_cuda(&g_dev, d.p, n, cases[ci].seed, cases[ci].scale, cases[ci].offset);
        dget(&d, g);
        char cs[64];
        snprintf(cs, sizeof cs, "n=%zu shift=%zu", n, cases[ci].shift);
        report_exact("fill_random_bf16", cs, g, r, n * 2, dguard_ok(&d));
        dfree(&d);
        free(r);
        free(g);
    }
}

static void test_embed(void)
{
    static const struct {
        int batch, hidden;
    } cases[] = {{17, 97}, {17, 5120}, {1, 64}};
    const int vocab = 1000;
    for (size_t ci = 0; ci < PULSE_ARRAY_LEN(cases); ci++) {
        int batch = cases[ci].batch, hidden = cases[ci].hidden;
        size_t tn = (size_t)vocab * hidden, xn = (size_t)batch * hidden;
        uint16_t *table = xmalloc(tn * 2);
        fill_bf16(table, tn, 1.0f, 0.0f);
        int32_t *tok = xmalloc((size_t)batch * 4);
        for (int b = 0; b < batch; b++)
            tok[b] = b == 0 ? 0 : b == 1 ? vocab - 1 : (int)(rnd_u32() % vocab);
        float *r = xmalloc(xn * 4), *g = xmalloc(xn * 4);
        float scale = ci == 1 ? 25.298221f : 1.0f; /* sqrt(640): Gemma 3's embedding scale */
        embed_ref(&g_host, tok, table, r, batch, hidden, scale);
        struct dbuf dt = dput(table, tn * 2), dk = dput(tok, (size_t)batch * 4),
                    dx = dalloc(xn * 4, 0);
        embed_cuda(&g_dev, dk.p, dt.p, dx.p, batch, hidden, scale);
        dget(&dx, g);
        char cs[64];
        snprintf(cs, sizeof cs, "batch=%d hidden=%d", batch, hidden);
        report_exact("embed", cs, g, r, xn * 4, dguard_ok(&dx));
        dfree(&dt), dfree(&dk), dfree(&dx);
        free(table), free(tok), free(r), free(g);
    }
}

static void test_rmsnorm(void)
{
    static const struct {
        int rows, dim;
    } cases[] = {{17, 97}, {17, 5120}, {1, 128}, {3, 40}};
    for (size_t ci = 0; ci < PULSE_ARRAY_LEN(cases); ci++) {
        int rows = cases[ci].rows, dim = cases[ci].dim;
        size_t n = (size_t)rows * dim;
        float *x = xmalloc(n * 4);
        for (int r = 0; r < rows; r++)
            fill_f32(x + (size_t)r * dim, dim, 0.1f + 4.0f * (r % 5), 0.0f);
        uint16_t *w = xmalloc((size_t)dim * 2), *r = xmalloc(n * 2), *g = xmalloc(n * 2);
        fill_bf16(w, dim, 0.5f, 1.0f);
        rmsnorm_ref(&g_host, x, w, r, rows, dim, 1e-6f);
        struct dbuf dx = dput(x, n * 4), dw = dput(w, (size_t)dim * 2), dout = dalloc(n * 2, 0);
        rmsnorm_cuda(&g_dev, dx.p, dw.p, dout.p, rows, dim, 1e-6f);
        dget(&dout, g);
        size_t bad;
        double e = nerr_bf16(g, r, n, &bad);
        char cs[64];
        snprintf(cs, sizeof cs, "rows=%d dim=%d", rows, dim);
        report_cmp("rmsnorm", cs, e, bad, 1e-2, dguard_ok(&dout));
        dfree(&dx), dfree(&dw), dfree(&dout);
        free(x), free(w), free(r), free(g);
    }
}

/* The Gemma 3 post-norm fused with the residual add: x += rmsnorm(y) * w, fp32. */
static void test_rmsnorm_add(void)
{
    static const struct {
        int rows, dim;
    } cases[] = {{17, 640}, {1, 97}, {5, 5120}};
    for (size_t ci = 0; ci < PULSE_ARRAY_LEN(cases); ci++) {
        int rows = cases[ci].rows, dim = cases[ci].dim;
        size_t n = (size_t)rows * dim;
        float *x = xmalloc(n * 4), *y = xmalloc(n * 4), *r = xmalloc(n * 4), *g = xmalloc(n * 4);
        fill_f32(x, n, 3.0f, 0.5f);
        for (int i = 0; i < rows; i++)
            fill_f32(y + (size_t)i * dim, dim, 0.2f + 6.0f * (i % 3), 0.0f);
        uint16_t *w = xmalloc((size_t)dim * 2);
        fill_bf16(w, dim, 0.5f, 1.0f);
        memcpy(r, x, n * 4);
        rmsnorm_add_ref(&g_host, r, y, w, rows, dim, 1e-6f);
        struct dbuf dx = dput(x, n * 4), dy = dput(y, n * 4), dw = dput(w, (size_t)dim * 2);
        rmsnorm_add_cuda(&g_dev, dx.p, dy.p, dw.p, rows, dim, 1e-6f);
        dget(&dx, g);
        size_t bad;
        double e = nerr_f32(g, r, n, &bad);
        char cs[64];
        snprintf(cs, sizeof cs, "rows=%d dim=%d", rows, dim);
        report_cmp("rmsnorm_add", cs, e, bad, 1e-5, dguard_ok(&dx));
        dfree(&dx), dfree(&dy), dfree(&dw);
        free(x), free(y), free(r), free(g), free(w);
    }
}

static void test_gemm(void)
{
    static const struct {
        int m, n, k;
        float beta;
    } cases[] = {
        {1, 97, 40, 0.0f}, {17, 256, 5120, 1.0f}, {16, 1000, 512, 0.0f}, {3, 33, 24, 1.0f}};
    for (size_t ci = 0; ci < PULSE_ARRAY_LEN(cases); ci++) {
        int m = cases[ci].m, n = cases[ci].n, k = cases[ci].k;
        size_t an = (size_t)m * k, wn = (size_t)n * k, on = (size_t)m * n;
        uint16_t *a = xmalloc(an * 2), *w = xmalloc(wn * 2);
        fill_bf16(a, an, 1.0f, 0.0f);
        fill_bf16(w, wn, 0.1f, 0.0f);
        float *r = xmalloc(on * 4), *g = xmalloc(on * 4);
        fill_f32(r, on, 2.0f, 0.0f); /* the residual, when beta = 1 */
        struct dbuf da = dput(a, an * 2), dw = dput(w, wn * 2), dout = dput(r, on * 4);
        gemm_bf16_ref(&g_host, a, w, r, m, n, k, cases[ci].beta);
        gemm_bf16_cuda(&g_dev, da.p, dw.p, dout.p, m, n, k, cases[ci].beta);
        dget(&dout, g);
        size_t bad;
        double e = nerr_f32(g, r, on, &bad);
        double tol = 1e-5 * fmax(1.0, sqrt((double)k / 256.0)); /* summation order, grows with k */
        char cs[64];
        snprintf(cs, sizeof cs, "m=%d n=%d k=%d beta=%g", m, n, k, cases[ci].beta);
        report_cmp("gemm_bf16", cs, e, bad, tol, dguard_ok(&dout));
        dfree(&da), dfree(&dw), dfree(&dout);
        free(a), free(w), free(r), free(g);
    }
}

static void test_silu_mul(void)
{
    static const struct {
        int rows, ffn;
    } cases[] = {{17, 97}, {17, 17408}, {1, 4}, {3, 2048}};
    typedef void (*glu_fn)(const struct kctx *, const float *, uint16_t *, int, int);
    static const struct {
        const char *name;
        glu_fn ref, cuda;
    } acts[] = {{"silu_mul", silu_mul_ref, silu_mul_cuda}, {"gelu_mul", gelu_mul_ref, gelu_mul_cuda}};
    for (size_t ai = 0; ai < PULSE_ARRAY_LEN(acts); ai++)
    for (size_t ci = 0; ci < PULSE_ARRAY_LEN(cases); ci++) {
        int rows = cases[ci].rows, ffn = cases[ci].ffn;
        size_t in = (size_t)rows * 2 * ffn, on = (size_t)rows * ffn;
        float *gu = xmalloc(in * 4);
        fill_f32(gu, in, 8.0f, 0.0f);
        uint16_t *r = xmalloc(on * 2), *g = xmalloc(on * 2);
        acts[ai].ref(&g_host, gu, r, rows, ffn);
        struct dbuf dgu = dput(gu, in * 4), dout = dalloc(on * 2, 0);
        acts[ai].cuda(&g_dev, dgu.p, dout.p, rows, ffn);
        dget(&dout, g);
        size_t bad;
        double e = nerr_bf16(g, r, on, &bad);
        char cs[64];
        snprintf(cs, sizeof cs, "rows=%d ffn=%d", rows, ffn);
        report_cmp(acts[ai].name, cs, e, bad, 1e-2, dguard_ok(&dout));
        dfree(&dgu), dfree(&dout);
        free(gu), free(r), free(g);
    }
}

/* Rows: random; clear winner; a tie (lowest index must win); NaNs around a winner, one at 0;
 * all -inf (index 0); all NaN (index 0). */
static void test_argmax(void)
{
    static const struct {
        int rows, vocab;
    } cases[] = {{17, 151936}, {7, 97}, {2, 1}};
    for (size_t ci = 0; ci < PULSE_ARRAY_LEN(cases); ci++) {
        int rows = cases[ci].rows, vocab = cases[ci].vocab;
        size_t n = (size_t)rows * vocab;
        float *l = xmalloc(n * 4);
        fill_f32(l, n, 10.0f, 0.0f);
        int tie_row = -1, tie_lo = 0;
        for (int r = 0; r < rows && vocab > 1; r++) {
            float *lr = l + (size_t)r * vocab;
            int i = (int)(rnd_u32() % vocab), j = (int)(rnd_u32() % vocab);
            switch (r % 6) {
            case 1:
                lr[i] = 50.0f;
                break;
            case 2:
                if (i == j) j = (i + 1) % vocab;
                lr[i] = lr[j] = 60.0f;
                tie_row = r, tie_lo = i < j ? i : j;
                break;
            case 3:
                lr[0] = NAN, lr[i] = 70.0f, lr[j] = NAN, lr[vocab - 1] = NAN;
                break;
            case 4:
                for (int v = 0; v < vocab; v++)
                    lr[v] = -INFINITY;
                break;
            case 5:
                for (int v = 0; v < vocab; v++)
                    lr[v] = NAN;
                break;
            default:
                break;
            }
        }
        int32_t *r = xmalloc((size_t)rows * 4), *g = xmalloc((size_t)rows * 4);
        argmax_ref(&g_host, l, r, rows, vocab);
        struct dbuf dl = dput(l, n * 4), dout = dalloc((size_t)rows * 4, 0);
        argmax_cuda(&g_dev, dl.p, dout.p, rows, vocab);
        dget(&dout, g);
        if (tie_row >= 0) EXPECT_EQ_INT(g[tie_row], tie_lo);
        char cs[64];
        snprintf(cs, sizeof cs, "rows=%d vocab=%d", rows, vocab);
        report_exact("argmax", cs, g, r, (size_t)rows * 4, dguard_ok(&dout));
        dfree(&dl), dfree(&dout);
        free(l), free(r), free(g);
    }
}

static void test_advance_pos(void)
{
    static const int cases[] = {17, 1, 300};
    for (size_t ci = 0; ci < PULSE_ARRAY_LEN(cases); ci++) {
        int batch = cases[ci];
        int32_t *r = xmalloc((size_t)batch * 4), *g = xmalloc((size_t)batch * 4);
        for (int b = 0; b < batch; b++)
            r[b] = (int32_t)(rnd_u32() % 40000);
        struct dbuf d = dput(r, (size_t)batch * 4);
        advance_pos_ref(&g_host, r, batch);
        advance_pos_cuda(&g_dev, d.p, batch);
        dget(&d, g);
        char cs[64];
        snprintf(cs, sizeof cs, "batch=%d", batch);
        report_exact("advance_pos", cs, g, r, (size_t)batch * 4, dguard_ok(&d));
        dfree(&d);
        free(r), free(g);
    }
}

/* ------------------------------------------------------------------ KV-cache kernels */

static void test_kv_fill(void)
{
    static const struct {
        int batch, nkv, hd, ps, extra;
        int n[5];
    } cases[] = {{17, 8, 128, 16, 3, {1, 16, 17, 97, 40}},
                 {3, 2, 64, 5, 0, {1, 6, 11}},
                 {2, 4, 128, 1, 5, {97, 3}},
                 {2, 1, 20, 3, 2, {7, 5}}};
    for (size_t ci = 0; ci < PULSE_ARRAY_LEN(cases); ci++) {
        int batch = cases[ci].batch, *n = xmalloc((size_t)batch * 4), maxn = 0;
        for (int b = 0; b < batch; b++) {
            n[b] = cases[ci].n[b < 5 ? b : 0];
            if (b >= 5) n[b] = 1 + (int)(rnd_u32() % 97);
            maxn = PULSE_MAX(maxn, n[b]);
        }
        maxn += cases[ci].extra; /* max_tokens may exceed every n_tokens */
        int32_t *req = xmalloc((size_t)batch * 4);
        for (int b = 0; b < batch; b++)
            req[b] = 1000 + 3 * b;
        struct kvset s;
        kvset_init(&s, batch, cases[ci].nkv, cases[ci].hd, cases[ci].ps, n, 2);
        kvset_upload(&s);
        struct dbuf dn = dput(n, (size_t)batch * 4), dr = dput(req, (size_t)batch * 4);
        kv_fill_synthetic_ref(&g_host, &s.hv, n, req, batch, 5, 99, maxn);
        kv_fill_synthetic_cuda(&g_dev, &s.dv, dn.p, dr.p, batch, 5, 99, maxn);
        uint16_t *g = xmalloc(s.pool_elems * 2);
        dget(&s.d_pool, g);
        char cs[64];
        snprintf(cs, sizeof cs, "batch=%d nkv=%d hd=%d ps=%d", batch, s.nkv, s.hd, s.ps);
        report_exact("kv_fill_synthetic", cs, g, s.h_pool, s.pool_elems * 2, dguard_ok(&s.d_pool));
        dfree(&dn), dfree(&dr);
        kvset_free(&s);
        free(g), free(n), free(req);
    }
}

static void test_qk_norm_rope(void)
{
    static const struct {
        int batch, nq, nkv, hd, ps, norms;
        int pos[4];
    } cases[] = {{17, 40, 8, 128, 16, 1, {0, 15, 16, 4095}},
                 {3, 8, 2, 64, 5, 0, {0, 4, 5}},
                 {2, 4, 4, 128, 1, 1, {32767, 100}},
                 {4, 12, 4, 256, 7, 1, {6, 7, 1000, 13}}};
    for (size_t ci = 0; ci < PULSE_ARRAY_LEN(cases); ci++) {
        int batch = cases[ci].batch, nq = cases[ci].nq, nkv = cases[ci].nkv, hd = cases[ci].hd;
        int32_t *pos = xmalloc((size_t)batch * 4), *tok = xmalloc((size_t)batch * 4);
        for (int b = 0; b < batch; b++) {
            pos[b] = b < 4 ? cases[ci].pos[b] : (int32_t)(rnd_u32() % 4096);
            tok[b] = pos[b] + 1 + (b % 3) * 7; /* pages beyond the target exist */
        }
        struct kvset s;
        kvset_init(&s, batch, nkv, hd, cases[ci].ps, tok, 1);
        kvset_upload(&s);
        uint16_t *pool0 = xmalloc(s.pool_elems * 2);
        memcpy(pool0, s.h_pool, s.pool_elems * 2);
        size_t qkvn = (size_t)batch * (nq + 2 * nkv) * hd, qn = (size_t)batch * nq * hd;
        float *qkv = xmalloc(qkvn * 4);
        fill_f32(qkv, qkvn, 2.0f, 0.0f);
        uint16_t qn_w[256], kn_w[256];
        fill_bf16(qn_w, (size_t)hd, 0.3f, 1.0f);
        fill_bf16(kn_w, (size_t)hd, 0.3f, 1.0f);
        uint16_t *rq = xmalloc(qn * 2), *gq = xmalloc(qn * 2), *gpool = xmalloc(s.pool_elems * 2);
        struct dbuf dqkv = dput(qkv, qkvn * 4), dqn = dput(qn_w, (size_t)hd * 2),
                    dkn = dput(kn_w, (size_t)hd * 2), dpos = dput(pos, (size_t)batch * 4),
                    dq = dalloc(qn * 2, 0);
        const int norms = cases[ci].norms;
        float inv_freq[128];
        model_rope_inv_freq_plain(1e6f, hd, inv_freq);
        struct dbuf dinv = dput(inv_freq, sizeof(float) * (size_t)(hd / 2));
        qk_norm_rope_append_ref(&g_host, qkv, norms ? qn_w : NULL, norms ? kn_w : NULL, rq, &s.hv,
                                pos, batch, nq, inv_freq, 1e-6f);
        qk_norm_rope_append_cuda(&g_dev, dqkv.p, norms ? dqn.p : NULL, norms ? dkn.p : NULL, dq.p,
                                 &s.dv, dpos.p, batch, nq, (const float *)dinv.p, 1e-6f);
        dget(&dq, gq);
        dget(&s.d_pool, gpool);
        char cs[80];
        size_t bad;
        double e = nerr_bf16(gq, rq, qn, &bad);
        snprintf(cs, sizeof cs, "q b=%d nq=%d nkv=%d hd=%d ps=%d%s", batch, nq, nkv, hd, s.ps,
                 norms ? " norm" : "");
        report_cmp("qk_norm_rope_append", cs, e, bad, 1e-2, dguard_ok(&dq));
        /* the appended K/V rows: gather them; everything else must be untouched */
        size_t rows_n = (size_t)batch * nkv * 2 * hd, at = 0, untouched_bad = 0;
        uint16_t *gr = xmalloc(rows_n * 2), *rr = xmalloc(rows_n * 2);
        unsigned char *target = calloc(s.pool_elems, 1);
        for (int b = 0; b < batch; b++)
            for (int h = 0; h < nkv; h++)
                for (int w = 0; w < 2; w++) {
                    size_t o = kvset_row(&s, b, pos[b], h, w);
                    memcpy(gr + at, gpool + o, (size_t)hd * 2);
                    memcpy(rr + at, s.h_pool + o, (size_t)hd * 2);
                    memset(target + o, 1, (size_t)hd);
                    at += (size_t)hd;
                }
        for (size_t i = 0; i < s.pool_elems; i++)
            if (!target[i] && gpool[i] != pool0[i]) untouched_bad++;
        e = nerr_bf16(gr, rr, rows_n, &bad);
        if (untouched_bad)
            printf("  %zu pool elements outside the appended rows changed\n", untouched_bad);
        snprintf(cs, sizeof cs, "kv b=%d nq=%d nkv=%d hd=%d ps=%d%s", batch, nq, nkv, hd, s.ps,
                 norms ? " norm" : "");
        report_cmp("qk_norm_rope_append", cs, e, bad + untouched_bad, 1e-2, dguard_ok(&s.d_pool));
        dfree(&dqkv), dfree(&dqn), dfree(&dkn), dfree(&dpos), dfree(&dq), dfree(&dinv);
        kvset_free(&s);
        free(pos), free(tok), free(pool0), free(qkv), free(rq), free(gq), free(gpool);
        free(gr), free(rr), free(target);
    }
}

/* Attention: K, V random in [-1, 1); every token slot past an entry's n_tokens and every spare
 * page holds NaN, so a kernel that lets stale contents leak fails. Each case runs with the
 * device's SM count (many short splits) and with num_sms = 1 (few long splits, so each warp
 * walks many tiles and the online-softmax rescaling is exercised). */
static void test_attn(void)
{
    static const struct {
        const char *name;
        int batch, nq, nkv, hd, ps, extra;
        float qscale;
        int n[5];
        int window;
    } cases[] = {{"b17 G5 hd128 ps16 n<=97", 17, 40, 8, 128, 16, 0, 1.0f, {97, 1, 16, 17, 33}, 0},
                 {"b3 G4 hd64 ps5 tail pages, long", 3, 32, 8, 64, 5, 0, 2.0f, {1, 6, 4101}, 0},
                 {"b2 G1 hd128 ps1", 2, 8, 8, 128, 1, 3, 1.0f, {97, 33}, 0},
                 {"b2 G8 hd256 ps16 long", 2, 16, 2, 256, 16, 0, 1.0f, {4113, 300}, 0},
                 {"b2 G5 hd128 ps16 8192", 2, 40, 8, 128, 16, 0, 1.0f, {8192, 4097}, 0},
                 {"b5 G2 hd64 ps7", 5, 4, 2, 64, 7, 20, 1.0f, {1, 7, 8, 50, 97}, 0},
                 {"b1 G5 hd128 ps16 peaky 4096", 1, 40, 8, 128, 16, 0, 8.0f, {4096}, 0},
                 {"b4 G3 hd128 ps32", 4, 12, 4, 128, 32, 0, 1.0f, {33, 64, 1000, 2}, 0},
                 {"b3 G2 hd64 ps16 (tiny model)", 3, 4, 2, 64, 16, 0, 1.0f, {101, 38, 2}, 0},
                 {"b3 G4 hd256 ps16 window 512 (Gemma 3)", 3, 4, 1, 256, 16, 0, 1.0f, {4113, 300, 513}, 512},
                 {"b4 G4 hd256 ps5 window 24", 4, 4, 1, 256, 5, 0, 2.0f, {97, 10, 24, 25}, 24},
                 {"b2 G2 hd64 ps16 window 100, long", 2, 4, 2, 64, 16, 0, 1.0f, {8192, 101}, 100}};
    for (size_t ci = 0; ci < PULSE_ARRAY_LEN(cases); ci++) {
        int batch = cases[ci].batch, nq = cases[ci].nq, nkv = cases[ci].nkv, hd = cases[ci].hd;
        int *n = xmalloc((size_t)batch * 4), maxn = 0;
        for (int b = 0; b < batch; b++) {
            n[b] = b < 5 ? cases[ci].n[b] : 1 + (int)(rnd_u32() % 97);
            maxn = PULSE_MAX(maxn, n[b]);
        }
        maxn += cases[ci].extra;
        struct kvset s;
        kvset_init(&s, batch, nkv, hd, cases[ci].ps, n, 2);
        const uint16_t qnan = 0x7fc0;
        unsigned char *live = calloc(s.pages, 1);
        for (int b = 0; b < batch; b++) {
            for (int i = 0; i < PULSE_CEIL_DIV(n[b], s.ps); i++)
                live[s.ids[s.start[b] + i]] = 1;
            for (int t = n[b]; t < PULSE_CEIL_DIV(n[b], s.ps) * s.ps; t++)
                for (int h = 0; h < nkv; h++)
                    for (int w = 0; w < 2; w++)
                        for (int d = 0; d < hd; d++)
                            s.h_pool[kvset_row(&s, b, t, h, w) + d] = qnan;
        }
        for (size_t p = 0; p < s.pages; p++)
            if (!live[p])
                for (size_t i = 0; i < s.page_elems; i++)
                    s.h_pool[p * s.page_elems + i] = qnan;
        kvset_upload(&s);
        s.hv.window = s.dv.window = cases[ci].window;
        size_t qn = (size_t)batch * nq * hd;
        uint16_t *q = xmalloc(qn * 2), *r = xmalloc(qn * 2), *g = xmalloc(qn * 2);
        fill_bf16(q, qn, cases[ci].qscale, 0.0f);
        float scale = 1.0f / sqrtf((float)hd);
        attn_decode_ref(&g_host, q, &s.hv, n, r, batch, nq, maxn, scale);
        struct dbuf dq = dput(q, qn * 2), dn = dput(n, (size_t)batch * 4);
        for (int pass = 0; pass < 2; pass++) {
            struct kctx c = g_dev;
            c.num_sms = pass == 0 ? g_dev.num_sms : 1;
            size_t wsb = attn_decode_workspace_bytes(batch, nq, hd, maxn, c.num_sms);
            struct dbuf dout = dalloc(qn * 2, 0), dws = dalloc(wsb, 0);
            c.workspace = dws.p, c.workspace_bytes = wsb;
            attn_decode_cuda(&c, dq.p, &s.dv, dn.p, dout.p, batch, nq, maxn, scale);
            dget(&dout, g);
            size_t bad;
            double e = nerr_bf16(g, r, qn, &bad);
            int guards = dguard_ok(&dout) && dguard_ok(&dws);
            char cs[80];
            snprintf(cs, sizeof cs, "%s sms=%d", cases[ci].name, c.num_sms);
            report_cmp("attn_decode", cs, e, bad, 1e-2, guards);
            dfree(&dout), dfree(&dws);
        }
        if (nkv > 1) { /* a view of the last KV head alone (page_stride): its query heads' rows */
            const int gh = nkv - 1, G = nq / nkv;
            struct kv_view one = s.dv;
            one.pool = s.dv.pool + (size_t)gh * 2 * s.ps * hd;
            one.n_kv_heads = 1;
            one.page_stride = s.page_elems;
            const size_t qgn = (size_t)batch * G * hd;
            uint16_t *qg = xmalloc(qgn * 2), *rg = xmalloc(qgn * 2), *gg = xmalloc(qgn * 2);
            for (int b = 0; b < batch; b++) {
                memcpy(qg + (size_t)b * G * hd, q + ((size_t)b * nq + (size_t)gh * G) * hd, (size_t)G * hd * 2);
                memcpy(rg + (size_t)b * G * hd, r + ((size_t)b * nq + (size_t)gh * G) * hd, (size_t)G * hd * 2);
            }
            struct kctx c = g_dev;
            size_t wsb = attn_decode_workspace_bytes(batch, G, hd, maxn, c.num_sms);
            struct dbuf dqg = dput(qg, qgn * 2), dout = dalloc(qgn * 2, 0), dws = dalloc(wsb, 0);
            c.workspace = dws.p, c.workspace_bytes = wsb;
            attn_decode_cuda(&c, dqg.p, &one, dn.p, dout.p, batch, G, maxn, scale);
            dget(&dout, gg);
            size_t bad;
            double e = nerr_bf16(gg, rg, qgn, &bad);
            char cs[96];
            snprintf(cs, sizeof cs, "%s, KV head %d alone", cases[ci].name, gh);
            report_cmp("attn_decode", cs, e, bad, 1e-2, dguard_ok(&dout) && dguard_ok(&dws));
            dfree(&dqg), dfree(&dout), dfree(&dws);
            free(qg), free(rg), free(gg);
        }
        dfree(&dq), dfree(&dn);
        kvset_free(&s);
        free(n), free(live), free(q), free(r), free(g);
    }
}

/* An attention that recalls (kv_view.host_ids): about a third of each entry's whole pages are
 * given host pieces holding their contents (pinned, mapped memory, at shuffled piece indices)
 * while the pages themselves hold NaN. The output must match the plain attention over the
 * clean pool, and afterwards every such page must hold its piece bit for bit; the other pages
 * and the pool past them are untouched. The same through the CPU path (kv_host_fill then
 * attn_decode_ref), whose output must equal the clean reference bit for bit. */
static void test_attn_host(void)
{
    static const struct {
        const char *name;
        int batch, nq, nkv, hd, ps;
        int n[4];
    } cases[] = {{"b4 G5 hd128 ps16", 4, 40, 8, 128, 16, {97, 16, 1000, 33}},
                 {"b3 G2 hd64 ps32", 3, 4, 2, 64, 32, {300, 65, 2}},
                 {"b2 G4 hd256 ps16", 2, 4, 1, 256, 16, {520, 17}},
                 {"b3 G8 hd128 ps16, one KV head a list", 3, 8, 1, 128, 16, {2048, 48, 160}}};
    const uint16_t qnan = 0x7fc0;
    for (size_t ci = 0; ci < PULSE_ARRAY_LEN(cases); ci++) {
        const int batch = cases[ci].batch, nq = cases[ci].nq, nkv = cases[ci].nkv;
        const int hd = cases[ci].hd, ps = cases[ci].ps;
        int n[4], maxn = 0;
        for (int b = 0; b < batch; b++)
            n[b] = cases[ci].n[b], maxn = PULSE_MAX(maxn, n[b]);
        struct kvset s;
        kvset_init(&s, batch, nkv, hd, ps, n, 2);
        const size_t pe = s.page_elems, pool_bytes = s.pool_elems * 2;
        /* the host pieces: a shuffled index per chosen page, in a pinned mapped buffer */
        int32_t *hid = xmalloc((size_t)s.n_ids * 4);
        int pieces = 0;
        for (int i = 0; i < s.n_ids; i++)
            hid[i] = -1;
        for (int b = 0; b < batch; b++)
            for (int i = 0; i + 1 < PULSE_CEIL_DIV(n[b], ps); i++)
                if (rnd_u32() % 3 == 0) hid[s.start[b] + i] = pieces++;
        for (int i = pieces; i > 1; i--) { /* shuffle the piece indices */
            int j = (int)(rnd_u32() % (uint32_t)i), a = -1, c = -1;
            for (int k = 0; k < s.n_ids; k++) {
                if (hid[k] == i - 1) a = k;
                if (hid[k] == j) c = k;
            }
            hid[a] = j, hid[c] = i - 1;
        }
        uint16_t *host = NULL, *dhost = NULL;
        CUDA_CHECK(cudaHostAlloc((void **)&host, (size_t)PULSE_MAX(pieces, 1) * pe * 2,
                                 cudaHostAllocMapped));
        CUDA_CHECK(cudaHostGetDevicePointer((void **)&dhost, host, 0));
        uint16_t *clean = xmalloc(pool_bytes);
        memcpy(clean, s.h_pool, pool_bytes);
        for (int k = 0; k < s.n_ids; k++)
            if (hid[k] >= 0) {
                memcpy(host + (size_t)hid[k] * pe, clean + (size_t)s.ids[k] * pe, pe * 2);
                for (size_t e = 0; e < pe; e++)
                    s.h_pool[(size_t)s.ids[k] * pe + e] = qnan;
            }
        kvset_upload(&s); /* the poisoned pool */
        size_t qn = (size_t)batch * nq * hd;
        uint16_t *q = xmalloc(qn * 2), *r = xmalloc(qn * 2), *g = xmalloc(qn * 2);
        fill_bf16(q, qn, 1.0f, 0.0f);
        const float scale = 1.0f / sqrtf((float)hd);
        struct kv_view cv = s.hv;
        cv.pool = clean;
        attn_decode_ref(&g_host, q, &cv, n, r, batch, nq, maxn, scale);
        struct dbuf dq = dput(q, qn * 2), dn = dput(n, (size_t)batch * 4),
                    dh = dput(hid, (size_t)s.n_ids * 4);
        struct kctx c = g_dev;
        size_t wsb = attn_decode_workspace_bytes(batch, nq, hd, maxn, c.num_sms);
        struct dbuf dout = dalloc(qn * 2, 0), dws = dalloc(wsb, 0);
        c.workspace = dws.p, c.workspace_bytes = wsb;
        struct kv_view dv = s.dv;
        dv.host = dhost, dv.host_ids = dh.p;
        attn_decode_cuda(&c, dq.p, &dv, dn.p, dout.p, batch, nq, maxn, scale);
        dget(&dout, g);
        size_t bad;
        double e = nerr_bf16(g, r, qn, &bad);
        char cs[96];
        snprintf(cs, sizeof cs, "%s, %d host pieces", cases[ci].name, pieces);
        report_cmp("attn_decode recalls", cs, e, bad, 1e-2, dguard_ok(&dout) && dguard_ok(&dws));
        /* the pool afterwards: the recalled pages hold their pieces, the others as uploaded
         * (clean): the whole pool equals the clean one */
        uint16_t *after = xmalloc(pool_bytes);
        dget(&s.d_pool, after);
        report_exact("attn_decode recalls", "pool afterwards", after, clean, pool_bytes,
                     dguard_ok(&s.d_pool));
        /* the same sums as the plain attention over the pool it leaves (the host tiles taken
         * in the same order as the pages they fill): bit for bit */
        struct kv_view pv = s.dv;
        uint16_t *g2 = xmalloc(qn * 2);
        attn_decode_cuda(&c, dq.p, &pv, dn.p, dout.p, batch, nq, maxn, scale);
        dget(&dout, g2);
        report_exact("attn_decode recalls", "equals the plain attention", g, g2, qn * 2,
                     dguard_ok(&dout) && dguard_ok(&dws));
        free(g2);
        /* the CPU path: kv_host_fill, then the reference over the poisoned pool */
        for (int k = 0; k < s.n_ids; k++)
            if (hid[k] >= 0)
                for (size_t x = 0; x < pe; x++)
                    s.h_pool[(size_t)s.ids[k] * pe + x] = qnan;
        struct kv_view hv = s.hv;
        hv.host = host, hv.host_ids = hid;
        uint16_t *rc = xmalloc(qn * 2);
        attn_decode_ref(&g_host, q, &hv, n, rc, batch, nq, maxn, scale);
        report_exact("attn_decode_ref recalls", cs, rc, r, qn * 2, 1);
        report_exact("attn_decode_ref recalls", "pool afterwards", s.h_pool, clean, pool_bytes, 1);
        dfree(&dq), dfree(&dn), dfree(&dh), dfree(&dout), dfree(&dws);
        CUDA_CHECK(cudaFreeHost(host));
        kvset_free(&s);
        free(hid), free(clean), free(q), free(r), free(g), free(after), free(rc);
    }
}

/* ------------------------------------------------------------------ timing */

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median of `reps` timed runs of attention at (batch, ctx), Qwen3-14B shapes; L2 flushed first. */
static double time_attn(int batch, int ctx, void *flush, size_t flush_bytes)
{
    const int nq = 40, nkv = 8, hd = 128, ps = 16, reps = 15;
    int pages_per = PULSE_CEIL_DIV(ctx, ps);
    size_t pages = (size_t)batch * pages_per, page_elems = (size_t)nkv * 2 * ps * hd;
    int32_t *ids = xmalloc(pages * 4), *start = xmalloc((size_t)batch * 4),
            *n = xmalloc((size_t)batch * 4);
    for (size_t i = 0; i < pages; i++)
        ids[i] = (int32_t)i;
    for (size_t i = pages; i > 1; i--) {
        size_t j = rnd_u32() % i;
        int32_t t = ids[i - 1];
        ids[i - 1] = ids[j], ids[j] = t;
    }
    for (int b = 0; b < batch; b++)
        start[b] = b * pages_per, n[b] = ctx;
    uint16_t *pool, *q, *out;
    int32_t *d_ids, *d_start, *d_n;
    void *ws;
    size_t wsb = attn_decode_workspace_bytes(batch, nq, hd, ctx, g_dev.num_sms);
    CUDA_CHECK(cudaMalloc((void **)&pool, pages * page_elems * 2));
    CUDA_CHECK(cudaMalloc((void **)&q, (size_t)batch * nq * hd * 2));
    CUDA_CHECK(cudaMalloc((void **)&out, (size_t)batch * nq * hd * 2));
    CUDA_CHECK(cudaMalloc((void **)&d_ids, pages * 4));
    CUDA_CHECK(cudaMalloc((void **)&d_start, (size_t)batch * 4));
    CUDA_CHECK(cudaMalloc((void **)&d_n, (size_t)batch * 4));
    CUDA_CHECK(cudaMalloc(&ws, wsb));
    CUDA_CHECK(cudaMemcpy(d_ids, ids, pages * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_start, start, (size_t)batch * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_n, n, (size_t)batch * 4, cudaMemcpyHostToDevice));
    fill_random_bf16_cuda(&g_dev, pool, pages * page_elems, 11, 1.0f, 0.0f);
    fill_random_bf16_cuda(&g_dev, q, (size_t)batch * nq * hd, 12, 1.0f, 0.0f);
    struct kv_view kv = {pool, d_ids, d_start, ps, nkv, hd, 0, 0, NULL, NULL};
    struct kctx c = g_dev;
    c.workspace = ws, c.workspace_bytes = wsb;
    cudaStream_t st = (cudaStream_t)c.stream;
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    float ms[32];
    for (int i = -3; i < reps; i++) {
        CUDA_CHECK(cudaMemsetAsync(flush, i & 0xff, flush_bytes, st));
        CUDA_CHECK(cudaEventRecord(e0, st));
        attn_decode_cuda(&c, q, &kv, d_n, out, batch, nq, ctx, 1.0f / sqrtf((float)hd));
        CUDA_CHECK(cudaEventRecord(e1, st));
        CUDA_CHECK(cudaEventSynchronize(e1));
        if (i >= 0) CUDA_CHECK(cudaEventElapsedTime(&ms[i], e0, e1));
    }
    qsort(ms, reps, sizeof(float), cmp_float);
    double kv_bytes = (double)batch * ctx * nkv * hd * 2 * 2;
    double gbs = kv_bytes / (ms[reps / 2] * 1e-3) / 1e9;
    printf("timing attn_decode batch=%d ctx=%d (nq 40, nkv 8, hd 128, page 16): %.3f ms, "
           "%.1f GB/s of KV read\n",
           batch, ctx, ms[reps / 2], gbs);
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    CUDA_CHECK(cudaFree(pool));
    CUDA_CHECK(cudaFree(q));
    CUDA_CHECK(cudaFree(out));
    CUDA_CHECK(cudaFree(d_ids));
    CUDA_CHECK(cudaFree(d_start));
    CUDA_CHECK(cudaFree(d_n));
    CUDA_CHECK(cudaFree(ws));
    free(ids), free(start), free(n);
    return gbs;
}

/* Device-to-device copy of `bytes`, GB/s counting read + write. */
static double time_copy(size_t bytes)
{
    void *a, *b;
    CUDA_CHECK(cudaMalloc(&a, bytes));
    CUDA_CHECK(cudaMalloc(&b, bytes));
    CUDA_CHECK(cudaMemset(a, 1, bytes));
    cudaStream_t st = (cudaStream_t)g_dev.stream;
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    const int reps = 9;
    float ms[16];
    for (int i = -2; i < reps; i++) {
        CUDA_CHECK(cudaEventRecord(e0, st));
        CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st));
        CUDA_CHECK(cudaEventRecord(e1, st));
        CUDA_CHECK(cudaEventSynchronize(e1));
        if (i >= 0) CUDA_CHECK(cudaEventElapsedTime(&ms[i], e0, e1));
    }
    qsort(ms, reps, sizeof(float), cmp_float);
    double gbs = 2.0 * (double)bytes / (ms[reps / 2] * 1e-3) / 1e9;
    printf("timing d2d copy %.2f GB: %.3f ms, %.1f GB/s (read + write)\n", bytes / 1e9,
           ms[reps / 2], gbs);
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    CUDA_CHECK(cudaFree(a));
    CUDA_CHECK(cudaFree(b));
    return gbs;
}

static void timing(void)
{
    const size_t flush_bytes = 256u << 20;
    void *flush;
    CUDA_CHECK(cudaMalloc(&flush, flush_bytes));
    double big = time_attn(16, 32768, flush, flush_bytes);
    double small = time_attn(1, 4096, flush, flush_bytes);
    CUDA_CHECK(cudaFree(flush));
    double copy = time_copy((size_t)2000 * 1000 * 1000);
    printf("timing attn/copy ratio: batch 16 x 32768 %.2f (goal >= 0.75), batch 1 x 4096 %.2f\n",
           big / copy, small / copy);
}

int main(void)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "test_kernels_gpu: no GPU, skipped\n");
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

    test_fill_random();
    test_embed();
    test_rmsnorm();
    test_gemm();
    test_silu_mul();
    test_rmsnorm_add();
    test_argmax();
    test_advance_pos();
    test_kv_fill();
    test_qk_norm_rope();
    test_attn();
    test_attn_host();
    const char *nt = getenv("PULSE_GPU_TEST_NO_TIMING");
    if (!(nt && strcmp(nt, "0") != 0)) timing();

    CUBLAS_CHECK(cublasDestroy(blas));
    CUDA_CHECK(cudaStreamDestroy(st));
    return tu_finish("test_kernels_gpu");
}
