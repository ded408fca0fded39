/* The fast CPU kernels (kernels_cpu.c) against the references, bit for bit (memcmp): GEMM over
 * awkward shapes with beta 0 and 1; paged GQA attention over batches, group sizes, head dims,
 * page sizes, shuffled pages and sliding windows shorter and longer than the context; each on one
 * thread and on several, with guard regions around every output; two threads calling at once;
 * the pool's default count, which no environment variable changes. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "kernels_cpu.h"
#include "numeric.h"
#include "testutil.h"

static const struct kctx C0;
static const int THREADS[] = {1, 2, 5}; /* inline, two, more than this machine may have */

enum { GUARD = 32 };          /* elements each side of an output */
#define GUARD_F32 0x7fa5a5a5u /* a NaN no kernel writes */
#define GUARD_BF16 ((uint16_t)0x7fa5)

static void guard_f32(float *buf, size_t n)
{
    for (size_t i = 0; i < GUARD; i++) {
        uint32_t g = GUARD_F32;
        memcpy(&buf[i], &g, sizeof g);
        memcpy(&buf[GUARD + n + i], &g, sizeof g);
    }
}

static int guard_f32_ok(const float *buf, size_t n)
{
    for (size_t i = 0; i < GUARD; i++) {
        uint32_t lo, hi;
        memcpy(&lo, &buf[i], sizeof lo);
        memcpy(&hi, &buf[GUARD + n + i], sizeof hi);
        if (lo != GUARD_F32 || hi != GUARD_F32) return 0;
    }
    return 1;
}

static void guard_bf16(uint16_t *buf, size_t n)
{
    for (size_t i = 0; i < GUARD; i++)
        buf[i] = buf[GUARD + n + i] = GUARD_BF16;
}

static int guard_bf16_ok(const uint16_t *buf, size_t n)
{
    for (size_t i = 0; i < GUARD; i++)
        if (buf[i] != GUARD_BF16 || buf[GUARD + n + i] != GUARD_BF16) return 0;
    return 1;
}

/* ---- GEMM ---- */

/* One shape: the reference once, then the fast kernel on each thread count. */
static void gemm_case(int m, int n, int k, float beta, uint64_t seed)
{
    size_t on = (size_t)m * n;
    uint16_t *a = malloc(sizeof(uint16_t) * (size_t)m * k);
    uint16_t *w = malloc(sizeof(uint16_t) * (size_t)n * k);
    float *init = malloc(sizeof(float) * on), *want = malloc(sizeof(float) * on);
    float *got = malloc(sizeof(float) * (on + 2 * GUARD));
    fill_random_bf16_ref(&C0, a, (size_t)m * k, seed, 1.0f, 0.0f);
    fill_random_bf16_ref(&C0, w, (size_t)n * k, seed + 1, 0.75f, 0.125f);
    for (size_t i = 0; i < on; i++)
        init[i] = 4.0f * pulse_uniform(seed + 2, i);
    memcpy(want, init, sizeof(float) * on);
    gemm_bf16_ref(&C0, a, w, want, m, n, k, beta);
    for (size_t t = 0; t < PULSE_ARRAY_LEN(THREADS); t++) {
        kernels_cpu_set_threads(THREADS[t]);
        guard_f32(got, on);
        memcpy(got + GUARD, init, sizeof(float) * on);
        gemm_bf16_cpu(&C0, a, w, got + GUARD, m, n, k, beta);
        int same = memcmp(got + GUARD, want, sizeof(float) * on) == 0;
        int guards = guard_f32_ok(got, on);
        EXPECT(same);
        EXPECT(guards);
        if (!same || !guards)
            fprintf(stderr, "  gemm m=%d n=%d k=%d beta=%g threads=%d\n", m, n, k, beta,
                    THREADS[t]);
    }
    free(a);
    free(w);
    free(init);
    free(want);
    free(got);
}

static void test_gemm(void)
{
    static const int ms[] = {1, 3, 17, 256}, ns[] = {1, 7, 8, 9, 100, 2048};
    static const int ks[] = {1, 5, 64, 640, 1000};
    uint64_t seed = 100;
    for (size_t i = 0; i < PULSE_ARRAY_LEN(ms); i++)
        for (size_t j = 0; j < PULSE_ARRAY_LEN(ns); j++)
            for (size_t l = 0; l < PULSE_ARRAY_LEN(ks); l++) {
                double macs = (double)ms[i] * ns[j] * ks[l];
                /* the reference is slow (more so in sanitizer builds): skip the biggest shapes,
                 * whose blocking the smaller ones already cover */
                if (macs > 20e6) continue;
                gemm_case(ms[i], ns[j], ks[l], 0.0f, seed += 3);
                if (macs <= 4e6) gemm_case(ms[i], ns[j], ks[l], 1.0f, seed += 3);
            }
#ifdef __OPTIMIZE__
    gemm_case(256, 2048, 640, 0.0f, seed += 3); /* a Gemma 3 prompt chunk, in optimised builds */
#endif
}

/* ---- attention ---- */

struct attn_shape {
    int batch, nkv, group, hd, ps, window;
    float q_scale;    /* larger q gives peakier softmaxes */
    int length;       /* > 0: entry b attends length + 37 b tokens; 0: random lengths */
    int shared_pages; /* every entry reads the same pages (prompt chunk rows) */
};

/* Lengths 1 .. 2000, often right at a window or page edge. */
static int pick_length(uint64_t seed, int b, int window, int ps)
{
    uint64_t r = pulse_hash64(seed, (uint64_t)b);
    int edges[] = {1, 2, ps, ps + 1, window > 0 ? window : 24, window + 1, 2 * window + 3, 2000};
    if (r % 3 == 0) return PULSE_MAX(1, edges[(r >> 8) % PULSE_ARRAY_LEN(edges)]);
    return 1 + (int)((r >> 8) % 2000);
}

static void attn_case(const struct attn_shape *s, uint64_t seed)
{
    int B = s->batch, nq = s->nkv * s->group, hd = s->hd, ps = s->ps;
    int32_t n[8], start[8], max_n = 0, n_pages = 0;
    for (int b = 0; b < B; b++) {
        n[b] = s->length > 0 ? s->length + 37 * b : pick_length(seed, b, s->window, ps);
        max_n = PULSE_MAX(max_n, n[b]);
        start[b] = s->shared_pages ? 0 : n_pages;
        n_pages = s->shared_pages ? PULSE_CEIL_DIV(max_n, ps) : n_pages + PULSE_CEIL_DIV(n[b], ps);
    }
    n_pages += 3; /* pages no entry owns */
    int32_t *ids = malloc(sizeof(int32_t) * n_pages);
    for (int i = 0; i < n_pages; i++)
        ids[i] = i;
    for (int i = n_pages - 1; i > 0; i--) { /* shuffle: pages in no particular order */
        int j = (int)(pulse_hash64(seed + 7, (uint64_t)i) % (uint64_t)(i + 1));
        int32_t tmp = ids[i];
        ids[i] = ids[j];
        ids[j] = tmp;
    }
    size_t page_elems = (size_t)s->nkv * 2 * ps * hd, qn = (size_t)B * nq * hd;
    uint16_t *pool = malloc(sizeof(uint16_t) * page_elems * n_pages);
    uint16_t *q = malloc(sizeof(uint16_t) * qn), *want = malloc(sizeof(uint16_t) * qn);
    uint16_t *got = malloc(sizeof(uint16_t) * (qn + 2 * GUARD));
    fill_random_bf16_ref(&C0, pool, page_elems * n_pages, seed + 1, 1.0f, 0.0f);
    fill_random_bf16_ref(&C0, q, qn, seed + 2, s->q_scale, 0.0f);
    struct kv_view v = {pool, ids, start, ps, s->nkv, hd, s->window, 0, NULL, NULL};
    float scale = 1.0f / sqrtf((float)hd);
    attn_decode_ref(&C0, q, &v, n, want, B, nq, max_n, scale);
    for (size_t t = 0; t < PULSE_ARRAY_LEN(THREADS); t++) {
        kernels_cpu_set_threads(THREADS[t]);
        guard_bf16(got, qn);
        attn_decode_cpu(&C0, q, &v, n, got + GUARD, B, nq, max_n, scale);
        int same = memcmp(got + GUARD, want, sizeof(uint16_t) * qn) == 0;
        int guards = guard_bf16_ok(got, qn);
        EXPECT(same);
        EXPECT(guards);
        if (!same || !guards)
            fprintf(stderr,
                    "  attn batch=%d nkv=%d group=%d hd=%d ps=%d window=%d n0=%d threads=%d\n", B,
                    s->nkv, s->group, hd, ps, s->window, n[0], THREADS[t]);
    }
    /* a view of one KV head of the cache (page_stride) gives its query heads' rows of the full
     * view's output, on both kernels: the last head, whose pages start furthest in */
    if (s->nkv > 1) {
        const int g = s->nkv - 1, G = s->group;
        struct kv_view one = v;
        one.pool = pool + (size_t)g * 2 * ps * hd;
        one.n_kv_heads = 1;
        one.page_stride = page_elems;
        uint16_t *qg = malloc(sizeof(uint16_t) * (size_t)B * G * hd);
        uint16_t *og = malloc(sizeof(uint16_t) * (size_t)B * G * hd);
        for (int b = 0; b < B; b++)
            memcpy(qg + (size_t)b * G * hd, q + ((size_t)b * nq + (size_t)g * G) * hd,
                   sizeof(uint16_t) * G * hd);
        for (int k = 0; k < 2; k++) {
            if (k == 0)
                attn_decode_ref(&C0, qg, &one, n, og, B, G, max_n, scale);
            else
                attn_decode_cpu(&C0, qg, &one, n, og, B, G, max_n, scale);
            int same = 1;
            for (int b = 0; b < B; b++)
                same &= memcmp(og + (size_t)b * G * hd, want + ((size_t)b * nq + (size_t)g * G) * hd,
                               sizeof(uint16_t) * G * hd) == 0;
            EXPECT(same);
            if (!same)
                fprintf(stderr, "  one-head view (%s) batch=%d nkv=%d group=%d hd=%d ps=%d\n",
                        k ? "cpu" : "ref", B, s->nkv, G, hd, ps);
        }
        free(qg);
        free(og);
    }
    free(ids);
    free(pool);
    free(q);
    free(want);
    free(got);
}

static void test_attention(void)
{
    static const int hds[] = {64, 128, 256}, pss[] = {1, 5, 16}, windows[] = {0, 24, 512};
    uint64_t seed = 1000;
    int i = 0;
    for (size_t h = 0; h < PULSE_ARRAY_LEN(hds); h++)
        for (size_t p = 0; p < PULSE_ARRAY_LEN(pss); p++)
            for (size_t w = 0; w < PULSE_ARRAY_LEN(windows); w++, i++) {
                struct attn_shape s = {.batch = 1 + i % 5,
                                       .group = 1 + (i * 3) % 8,
                                       .hd = hds[h],
                                       .ps = pss[p],
                                       .window = windows[w],
                                       .q_scale = i % 4 == 3 ? 8.0f : 1.0f};
                s.nkv = s.group <= 4 ? 1 + i % 2 : 1;
                attn_case(&s, seed += 11);
            }
    /* head dims that are no multiple of the 16 lanes */
    struct attn_shape odd = {.batch = 3, .nkv = 2, .group = 3, .hd = 72, .ps = 5, .q_scale = 1};
    attn_case(&odd, seed += 11);
    odd.hd = 8;
    odd.window = 24;
    attn_case(&odd, seed += 11);
    /* Gemma 3 270M decode (4 query heads on one KV head, head dim 256), global and local */
    struct attn_shape gemma = {.batch = 1, .nkv = 1, .group = 4, .hd = 256, .ps = 16, .q_scale = 1};
    attn_case(&gemma, seed += 11);
    gemma.window = 512;
    attn_case(&gemma, seed += 11);
    /* one entry long enough that threads split its head groups (evenly and not) */
    struct attn_shape split = {
        .batch = 1, .nkv = 1, .group = 8, .hd = 256, .ps = 16, .q_scale = 1, .length = 2040};
    attn_case(&split, seed += 11);
    split.nkv = 2;
    split.group = 5;
    split.hd = 128;
    split.length = 1900;
    attn_case(&split, seed += 11);
    /* prompt chunk rows: entries over the same pages, growing lengths */
    struct attn_shape chunk = {.batch = 5,
                               .nkv = 1,
                               .group = 4,
                               .hd = 128,
                               .ps = 16,
                               .q_scale = 2,
                               .length = 1000,
                               .shared_pages = 1};
    attn_case(&chunk, seed += 11);
    chunk.window = 512;
    attn_case(&chunk, seed += 11);
}

/* ---- two callers at once (the pool serialises them; run under TSan in CI) ---- */

struct caller {
    const uint16_t *a, *w;
    const float *want;
    int m, n, k, ok;
};

static void *caller_run(void *p)
{
    struct caller *c = p;
    float *out = malloc(sizeof(float) * (size_t)c->m * c->n);
    c->ok = 1;
    for (int r = 0; r < 20; r++) {
        gemm_bf16_cpu(&C0, c->a, c->w, out, c->m, c->n, c->k, 0.0f);
        c->ok &= memcmp(out, c->want, sizeof(float) * (size_t)c->m * c->n) == 0;
    }
    free(out);
    return NULL;
}

static void test_concurrent_callers(void)
{
    enum { M = 3, N = 300, K = 200 };
    static uint16_t a[2][M * K], w[2][N * K];
    static float want[2][M * N];
    struct caller c[2];
    pthread_t th[2];
    kernels_cpu_set_threads(3);
    for (int i = 0; i < 2; i++) {
        fill_random_bf16_ref(&C0, a[i], M * K, 50 + i, 1.0f, 0.0f);
        fill_random_bf16_ref(&C0, w[i], N * K, 60 + i, 1.0f, 0.0f);
        gemm_bf16_ref(&C0, a[i], w[i], want[i], M, N, K, 0.0f);
        c[i] = (struct caller){a[i], w[i], want[i], M, N, K, 0};
    }
    for (int i = 0; i < 2; i++)
        EXPECT(pthread_create(&th[i], NULL, caller_run, &c[i]) == 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        EXPECT(c[i].ok);
    }
}

int main(void)
{
    /* the pool starts with the default, whatever the environment says (the count is
     * engine_params.cpu_threads, pulse's --cpu-threads) */
    setenv("PULSE_CPU_THREADS", "3", 1);
    const int def = kernels_cpu_default_threads();
    EXPECT(def >= 1 && def <= 16);
    EXPECT_EQ_INT(kernels_cpu_set_threads(1), def);
    unsetenv("PULSE_CPU_THREADS");
    EXPECT_EQ_INT(kernels_cpu_set_threads(0), 1); /* clamped to 1 */
    EXPECT_EQ_INT(kernels_cpu_set_threads(2), 1);
    test_gemm();
    test_attention();
    test_concurrent_callers();
    return tu_finish("test_kernels_cpu");
}
