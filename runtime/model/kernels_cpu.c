/* Fast CPU GEMM and decode attention (kernels_cpu.h), bit-identical to the references.
 *
 * Both reduce to dot products of bf16 rows summed in order t = 0 .. k-1. A panel transposes NB
 * rows (GEMM: rows of w, i.e. output columns; attention: K rows, i.e. tokens) into floats with
 * t outermost, so the NB dot products become NB vector lanes, each summing in the reference's
 * order. The attention's P.V needs no panel: V rows already have the dims as lanes. Built with
 * -ffp-contract=off (CMakeLists.txt): a*b+c is never fused into an FMA. */
#include "kernels_cpu.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "numeric.h"

#define NB 16                /* lanes: output columns (GEMM) or tokens (attention) per panel */
#define KC 256               /* reduction steps per panel: 16 KB of floats, stays in L1 */
#define MB 64                /* rows of a (GEMM) or query heads (attention) per pass over a panel */
#define MAX_THREADS KERNELS_CPU_MAX_THREADS /* pool size limit; the default is capped at 16 */
#define TB 128               /* tokens per pass over V rows (attention): 64 KB at head dim 256 */
#define MIN_WORK 32768       /* multiply-adds below which a call runs on one thread */
#define SPLIT_WORK (1 << 22) /* attention multiply-adds below which head groups stay whole */

/* The inner loops use the GNU C vector type (SSE on x86-64, NEON on arm64, plain code elsewhere):
 * it keeps accumulators in registers, where GCC 12 auto-vectorises the plain loops badly once
 * they are inlined. Either way each lane is an IEEE multiply then add, in the same order.
 * PULSE_CPU_PLAIN selects the plain loops (to test them). */
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ &&   \
    !defined(PULSE_CPU_PLAIN)
#define VEC 1
typedef float v4f __attribute__((vector_size(16)));
typedef uint32_t v4u __attribute__((vector_size(16)));

static v4f v4_load(const float *p)
{
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static void v4_store(float *p, v4f v)
{
    memcpy(p, &v, sizeof v);
}
#else
#define VEC 0
#endif

/* ---- the thread pool: the caller is thread 0, workers 1 .. n-1 ----
 * A job is published in one atomic word, (generation << 8) | threads, after its fields; workers
 * spin on it for a short while after a job (a decode step's kernels come microseconds apart),
 * then sleep on `wake`. The caller likewise spins, then sleeps on `done`, until `pending`
 * workers have finished. */

#define SPIN 50000 /* polls of an atomic before sleeping: ~25 us on a 2.6 GHz x86-64 */

struct slot { /* per-thread scratch, grown on demand, owned by its thread during a job */
    float *buf;
    size_t cap; /* floats */
};

static struct {
    pthread_once_t once;
    pthread_mutex_t call_mu; /* held for a whole kernel call: one call at a time */
    int n_threads;           /* threads a call may use (under call_mu) */
    int started;             /* workers running, ids 1 .. started (under call_mu) */
    unsigned long long gen;  /* generation of the last job (under call_mu) */
    atomic_ullong job;       /* (gen << 8) | threads of the current job */
    unsigned long long start_job[MAX_THREADS]; /* the job word when each worker started */
    atomic_int pending;                        /* workers yet to finish the current job */
    void (*fn)(void *, int, int);              /* the job, written before `job` is published */
    void *arg;
    pthread_mutex_t mu; /* for sleeping: wake (a new job), done (pending reached 0) */
    pthread_cond_t wake, done;
    struct slot slot[MAX_THREADS];
} pool = {
    .once = PTHREAD_ONCE_INIT,
    .call_mu = PTHREAD_MUTEX_INITIALIZER,
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
};

/* A child of fork has none of the parent's workers: it starts its own on its first call (a
 * forked test or driver would otherwise wait forever for workers that are not there). */
static void pool_after_fork_child(void)
{
    pool.started = 0;
    atomic_store(&pool.pending, 0);
    pthread_mutex_init(&pool.call_mu, NULL);
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pthread_cond_init(&pool.done, NULL);
}

int kernels_cpu_default_threads(void)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    return ncpu < 1 ? 1 : ncpu > 16 ? 16 : (int)ncpu;
}

static void pool_init(void)
{
    pthread_atfork(NULL, NULL, pool_after_fork_child);
    pool.n_threads = kernels_cpu_default_threads();
}

/* The job word once it differs from `seen`: spins, then sleeps. */
static unsigned long long pool_next_job(unsigned long long seen)
{
    unsigned long long job;
    for (int i = 0; i < SPIN; i++)
        if ((job = atomic_load_explicit(&pool.job, memory_order_acquire)) != seen) return job;
    pthread_mutex_lock(&pool.mu);
    while ((job = atomic_load_explicit(&pool.job, memory_order_acquire)) == seen)
        pthread_cond_wait(&pool.wake, &pool.mu);
    pthread_mutex_unlock(&pool.mu);
    return job;
}

static void *pool_worker(void *p)
{
    int id = (int)(intptr_t)p;
    unsigned long long seen = pool.start_job[id];
    for (;;) {
        seen = pool_next_job(seen);
        int nth = (int)(seen & 0xff);
        if (id >= nth) continue;
        pool.fn(pool.arg, id, nth);
        if (atomic_fetch_sub_explicit(&pool.pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&pool.mu);
            pthread_cond_signal(&pool.done);
            pthread_mutex_unlock(&pool.mu);
        }
    }
    return NULL;
}

/* Starts a call: takes call_mu, returns the threads it may use. */
static int call_begin(void)
{
    pthread_once(&pool.once, pool_init);
    pthread_mutex_lock(&pool.call_mu);
    return pool.n_threads;
}

static void call_end(void)
{
    pthread_mutex_unlock(&pool.call_mu);
}

/* Runs fn(arg, id, nth) on threads id = 0 .. nth-1 (0 is the caller) and waits for all.
 * Starts missing workers first; runs on fewer threads if one cannot start. Under call_mu. */
static void pool_run(int nth, void (*fn)(void *, int, int), void *arg)
{
    while (pool.started < nth - 1) {
        pthread_t th;
        int id = pool.started + 1;
        /* the job word it starts from: it runs only later jobs */
        pool.start_job[id] = atomic_load_explicit(&pool.job, memory_order_relaxed);
        if (pthread_create(&th, NULL, pool_worker, (void *)(intptr_t)id) != 0) break;
        pthread_detach(th);
        pool.started++;
    }
    nth = PULSE_MIN(nth, pool.started + 1);
    if (nth > 1) {
        pool.fn = fn;
        pool.arg = arg;
        atomic_store_explicit(&pool.pending, nth - 1, memory_order_relaxed);
        atomic_store_explicit(&pool.job, ++pool.gen << 8 | (unsigned)nth, memory_order_release);
        pthread_mutex_lock(&pool.mu); /* wakes the workers asleep in pool_next_job */
        pthread_cond_broadcast(&pool.wake);
        pthread_mutex_unlock(&pool.mu);
    }
    fn(arg, 0, nth);
    if (nth > 1) {
        int i = 0;
        while (atomic_load_explicit(&pool.pending, memory_order_acquire) && i < SPIN)
            i++;
        pthread_mutex_lock(&pool.mu);
        while (atomic_load_explicit(&pool.pending, memory_order_acquire))
            pthread_cond_wait(&pool.done, &pool.mu);
        pthread_mutex_unlock(&pool.mu);
    }
}

/* Thread id's scratch of at least n floats (64-byte aligned). */
static float *slot_floats(int id, size_t n)
{
    struct slot *s = &pool.slot[id];
    if (s->cap < n) {
        size_t cap = (n + n / 4 + 15) & ~(size_t)15;
        free(s->buf);
        s->buf = aligned_alloc(64, cap * sizeof(float));
        PULSE_CHECK(s->buf, "out of memory for CPU kernel scratch");
        s->cap = cap;
    }
    return s->buf;
}

void kernels_cpu_parallel(int nth, void (*fn)(void *arg, int id, int nth), void *arg)
{
    const int have = call_begin();
    pool_run(PULSE_MAX(1, PULSE_MIN(nth, have)), fn, arg);
    call_end();
}

int kernels_cpu_set_threads(int n)
{
    call_begin();
    int prev = pool.n_threads;
    pool.n_threads = n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : n;
    call_end();
    return prev;
}

/* ---- panels and dot products ---- */

/* A panel holds NB = 16 rows as 4 groups of 4 lanes, [group][t][lane] = rows[4 group + lane]
 * [t0 + t] as floats, t < kc: one vector per group and step, and a 4-way interleave (which
 * vectorises into cheap shuffles) to build it. */
static void pack_panel(const uint16_t *const *rows, int t0, int kc, float *restrict P)
{
    for (int g = 0; g < NB / 4; g++) {
        const uint16_t *r0 = rows[4 * g] + t0, *r1 = rows[4 * g + 1] + t0;
        const uint16_t *r2 = rows[4 * g + 2] + t0, *r3 = rows[4 * g + 3] + t0;
        float *restrict q = P + (size_t)g * kc * 4;
        for (int t = 0; t < kc; t++) {
            q[4 * t] = bf16_to_f32(r0[t]);
            q[4 * t + 1] = bf16_to_f32(r1[t]);
            q[4 * t + 2] = bf16_to_f32(r2[t]);
            q[4 * t + 3] = bf16_to_f32(r3[t]);
        }
    }
}

/* acc[jj] += a[t] * row jj's t, in order t = 0 .. kc-1: NB lanes, each summing in order. */
#if VEC
static void dots1(const uint16_t *restrict a, const float *restrict P, int kc, float *restrict acc)
{
    const float *p0 = P, *p1 = P + (size_t)kc * 4, *p2 = p1 + (size_t)kc * 4;
    const float *p3 = p2 + (size_t)kc * 4;
    v4f c0 = v4_load(acc), c1 = v4_load(acc + 4), c2 = v4_load(acc + 8), c3 = v4_load(acc + 12);
    for (int t = 0; t < kc; t++) {
        float x = bf16_to_f32(a[t]);
        v4f xv = {x, x, x, x};
        c0 += xv * v4_load(p0 + 4 * t);
        c1 += xv * v4_load(p1 + 4 * t);
        c2 += xv * v4_load(p2 + 4 * t);
        c3 += xv * v4_load(p3 + 4 * t);
    }
    v4_store(acc, c0);
    v4_store(acc + 4, c1);
    v4_store(acc + 8, c2);
    v4_store(acc + 12, c3);
}
#else
static void dots1(const uint16_t *restrict a, const float *restrict P, int kc, float *restrict acc)
{
    for (int t = 0; t < kc; t++) {
        float x = bf16_to_f32(a[t]);
        for (int g = 0; g < NB / 4; g++)
            for (int l = 0; l < 4; l++)
                acc[4 * g + l] += x * P[((size_t)g * kc + t) * 4 + l];
    }
}
#endif

/* acc[i][jj] = sum over t = 0 .. k-1, in order, of a[i][t] * rows[jj][t], for i < m <= MB, as
 * the reference's `float acc = 0; acc += ...` gives it. a has row stride lda. */
static void block_dots(const uint16_t *a, size_t lda, int m, const uint16_t *const *rows, int k,
                       float *restrict panel, float *restrict acc)
{
    memset(acc, 0, sizeof(float) * (size_t)m * NB);
    for (int t0 = 0; t0 < k; t0 += KC) {
        int kc = PULSE_MIN(KC, k - t0);
        pack_panel(rows, t0, kc, panel);
        for (int i = 0; i < m; i++)
            dots1(a + i * lda + t0, panel, kc, acc + (size_t)i * NB);
    }
}

/* ---- GEMM: threads take blocks of NB output columns ---- */

struct gemm_job {
    const uint16_t *a, *w;
    float *out;
    int m, n, k, n_blocks, chunk; /* column blocks, taken `chunk` at a time */
    float beta;
    atomic_int next; /* next column block to take */
};

/* Asks for w's rows of column block jb, so the next block streams in while this one computes. */
static void gemm_prefetch(const struct gemm_job *g, int jb)
{
#if defined(__GNUC__)
    const char *p = (const char *)(g->w + (size_t)jb * NB * g->k);
    size_t bytes = sizeof(uint16_t) * (size_t)PULSE_MIN(NB, g->n - jb * NB) * g->k;
    for (size_t o = 0; o < bytes; o += 64)
        __builtin_prefetch(p + o);
#else
    (void)g;
    (void)jb;
#endif
}

static void gemm_block(const struct gemm_job *g, int jb, float *panel, float *acc)
{
    int j0 = jb * NB, nj = PULSE_MIN(NB, g->n - j0), k = g->k;
    const uint16_t *rows[NB];
    for (int jj = 0; jj < NB; jj++) /* lanes past n repeat the last column; never stored */
        rows[jj] = g->w + (size_t)(j0 + PULSE_MIN(jj, nj - 1)) * k;
    for (int i0 = 0; i0 < g->m; i0 += MB) {
        int mb = PULSE_MIN(MB, g->m - i0);
        block_dots(g->a + (size_t)i0 * k, (size_t)k, mb, rows, k, panel, acc);
        for (int i = 0; i < mb; i++) {
            float *o = g->out + (size_t)(i0 + i) * g->n + j0;
            for (int jj = 0; jj < nj; jj++) {
                float s = acc[i * NB + jj];
                o[jj] = g->beta != 0.0f ? s + g->beta * o[jj] : s;
            }
        }
    }
}

static void gemm_task(void *p, int id, int nth)
{
    (void)id;
    (void)nth;
    struct gemm_job *g = p;
    _Alignas(64) float panel[KC * NB];
    _Alignas(64) float acc[MB * NB];
    for (;;) {
        int jb0 = atomic_fetch_add_explicit(&g->next, g->chunk, memory_order_relaxed);
        int jb1 = PULSE_MIN(jb0 + g->chunk, g->n_blocks);
        for (int jb = jb0; jb < jb1; jb++) {
            if (jb + 1 < jb1) gemm_prefetch(g, jb + 1);
            gemm_block(g, jb, panel, acc);
        }
        if (jb1 >= g->n_blocks) break;
    }
}

void gemm_bf16_cpu(const struct kctx *c, const uint16_t *a, const uint16_t *w, float *out, int m,
                   int n, int k, float beta)
{
    (void)c;
    if (m <= 0 || n <= 0) return;
    int n_blocks = PULSE_CEIL_DIV(n, NB), nth = call_begin();
    if ((double)m * n * k < MIN_WORK) nth = 1;
    nth = PULSE_MIN(nth, n_blocks);
    /* chunks of blocks: few enough to balance the threads, long enough to prefetch along */
    struct gemm_job g = {.a = a,
                         .w = w,
                         .out = out,
                         .m = m,
                         .n = n,
                         .k = k,
                         .n_blocks = n_blocks,
                         .chunk = PULSE_MAX(1, n_blocks / (8 * nth)),
                         .beta = beta};
    pool_run(nth, gemm_task, &g);
    call_end();
}

/* ---- attention: threads take (entry, KV head, run of query heads) items ---- */

struct attn_job {
    const uint16_t *q;
    const struct kv_view *kv;
    const int32_t *n_tokens;
    uint16_t *out;
    int nq, group, heads, runs; /* heads per item (<= MB), runs = ceil(group / heads) */
    int n_items, max_nt;        /* max_nt bounds the tokens any entry attends (scratch) */
    float scale;
    atomic_int next;
};

/* Token t's K (which = 0) or V (1) row of KV head h for entry b, as in the reference. */
static const uint16_t *kv_row(const struct kv_view *kv, int b, int t, int h, int which)
{
    int page = kv->page_ids[kv->page_start[b] + t / kv->page_size];
    size_t page_elems = kv_page_elems(kv);
    return kv->pool + (size_t)page * page_elems +
           (((size_t)h * 2 + which) * kv->page_size + t % kv->page_size) * kv->head_dim;
}

static int window_start(const struct kv_view *kv, int n)
{
    return kv->window > 0 && n > kv->window ? n - kv->window : 0;
}

/* o[.] += p[t] * v_t[d0 + dd] for t < cnt in order, dd < NB: NB dims as lanes. The vector
 * version splits each 8 bf16 of a row into its even and odd elements (a shift and a mask of
 * the 32-bit words), so o holds dims d0 + {0,2,4,6, 1,3,5,7, 8,10,12,14, 9,11,13,15}: see
 * pv_slot. */
#if VEC
static void pv_dots(const uint16_t *const *vrows, int d0, const float *restrict p, int cnt,
                    float *restrict o)
{
    const v4u hi = {0xffff0000u, 0xffff0000u, 0xffff0000u, 0xffff0000u};
    v4f c0 = v4_load(o), c1 = v4_load(o + 4), c2 = v4_load(o + 8), c3 = v4_load(o + 12);
    for (int t = 0; t < cnt; t++) {
        v4f xv = {p[t], p[t], p[t], p[t]};
        v4u u0, u1;
        memcpy(&u0, vrows[t] + d0, sizeof u0);
        memcpy(&u1, vrows[t] + d0 + 8, sizeof u1);
        c0 += xv * (v4f)(u0 << 16);
        c1 += xv * (v4f)(u0 & hi);
        c2 += xv * (v4f)(u1 << 16);
        c3 += xv * (v4f)(u1 & hi);
    }
    v4_store(o, c0);
    v4_store(o + 4, c1);
    v4_store(o + 8, c2);
    v4_store(o + 12, c3);
}

static int pv_slot(int dd)
{
    return dd / 8 * 8 + dd % 2 * 4 + dd % 8 / 2;
}
#else
static void pv_dots(const uint16_t *const *vrows, int d0, const float *restrict p, int cnt,
                    float *restrict o)
{
    for (int t = 0; t < cnt; t++)
        for (int dd = 0; dd < NB; dd++)
            o[dd] += p[t] * bf16_to_f32(vrows[t][d0 + dd]);
}

static int pv_slot(int dd)
{
    return dd;
}
#endif

/* The same for the last dw < NB dims. */
static void pv_tail(const uint16_t *const *vrows, int d0, int dw, const float *restrict p, int cnt,
                    float *restrict o)
{
    for (int t = 0; t < cnt; t++)
        for (int dd = 0; dd < dw; dd++)
            o[dd] += p[t] * bf16_to_f32(vrows[t][d0 + dd]);
}

/* One item: query heads h0 .. h0+nh-1 of entry b, all reading KV head kvh. scr holds the
 * scores [nh][nt] (then the probabilities) and the outputs [nh][hd]. */
static void attn_item(const struct attn_job *j, int item, float *scr, float *panel, float *acc)
{
    const struct kv_view *kv = j->kv;
    int hd = kv->head_dim, nkv = kv->n_kv_heads;
    int b = item / (nkv * j->runs), kvh = item / j->runs % nkv;
    int h0 = kvh * j->group + item % j->runs * j->heads;
    int nh = PULSE_MIN(j->heads, (kvh + 1) * j->group - h0);
    int n = j->n_tokens[b], t0 = window_start(kv, n), nt = PULSE_MAX(n - t0, 0);
    float *s = scr, *o = s + (size_t)nh * nt, l[MB];
    const uint16_t *qh = j->q + ((size_t)b * j->nq + h0) * hd;

    /* scores, scaled: NB tokens at a time as lanes */
    for (int tc = 0; tc < nt; tc += NB) {
        int nv = PULSE_MIN(NB, nt - tc);
        const uint16_t *rows[NB];
        for (int jj = 0; jj < NB; jj++)
            rows[jj] = kv_row(kv, b, t0 + tc + PULSE_MIN(jj, nv - 1), kvh, 0);
        block_dots(qh, (size_t)hd, nh, rows, hd, panel, acc);
        for (int i = 0; i < nh; i++)
            for (int jj = 0; jj < nv; jj++)
                s[(size_t)i * nt + tc + jj] = acc[i * NB + jj] * j->scale;
    }
    /* probabilities in place of the scores, and their sums, tokens in order */
    for (int i = 0; i < nh; i++) {
        float *si = s + (size_t)i * nt, mx = -INFINITY;
        for (int t = 0; t < nt; t++)
            mx = fmaxf(mx, si[t]);
        l[i] = 0.0f;
        for (int t = 0; t < nt; t++) {
            si[t] = expf(si[t] - mx);
            l[i] += si[t];
        }
    }
    /* weighted V, tokens in order: dims as lanes, TB tokens' V rows at a time */
    memset(o, 0, sizeof(float) * (size_t)nh * hd);
    for (int tb = 0; tb < nt; tb += TB) {
        int cnt = PULSE_MIN(TB, nt - tb), d0 = 0;
        const uint16_t *vrows[TB];
        for (int t = 0; t < cnt; t++)
            vrows[t] = kv_row(kv, b, t0 + tb + t, kvh, 1);
        for (; d0 + NB <= hd; d0 += NB)
            for (int i = 0; i < nh; i++)
                pv_dots(vrows, d0, s + (size_t)i * nt + tb, cnt, o + (size_t)i * hd + d0);
        for (int i = 0; i < nh && d0 < hd; i++)
            pv_tail(vrows, d0, hd - d0, s + (size_t)i * nt + tb, cnt, o + (size_t)i * hd + d0);
    }
    for (int i = 0; i < nh; i++) {
        uint16_t *dst = j->out + ((size_t)b * j->nq + h0 + i) * hd;
        const float *oi = o + (size_t)i * hd;
        for (int d = 0; d < hd; d++) /* dims past the last whole NB are in order */
            dst[d] = f32_to_bf16(oi[d < hd - hd % NB ? d - d % NB + pv_slot(d % NB) : d] / l[i]);
    }
}

static void attn_task(void *p, int id, int nth)
{
    (void)nth;
    struct attn_job *j = p;
    size_t hd = (size_t)j->kv->head_dim;
    float *scr = slot_floats(id, (size_t)j->heads * ((size_t)j->max_nt + hd));
    _Alignas(64) float panel[KC * NB];
    _Alignas(64) float acc[MB * NB];
    for (;;) {
        int item = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (item >= j->n_items) break;
        attn_item(j, item, scr, panel, acc);
    }
}

void attn_decode_cpu(const struct kctx *c, const uint16_t *q, const struct kv_view *kv,
                     const int32_t *n_tokens, uint16_t *out, int batch, int nq, int max_tokens,
                     float scale)
{
    (void)c;
    if (batch <= 0 || nq <= 0) return;
    kv_host_fill(kv, n_tokens, batch);
    /* scratch for max_tokens (what the caller reserved) rather than this call's longest entry,
     * so a growing context does not grow it step by step */
    int nkv = kv->n_kv_heads, group = nq / nkv;
    int max_nt = kv->window > 0 ? PULSE_MIN(max_tokens, kv->window) : max_tokens;
    double work = 0;
    for (int b = 0; b < batch; b++) {
        int nt = PULSE_MAX(n_tokens[b] - window_start(kv, n_tokens[b]), 0);
        max_nt = PULSE_MAX(max_nt, nt);
        work += (double)nt * nq * kv->head_dim * 2;
    }
    int nth = call_begin();
    if (work < MIN_WORK) nth = 1;
    /* whole groups share one K panel; split them only to give every thread an item, and only
     * when the work pays for packing the panel again on each thread */
    int heads = PULSE_MIN(group, MB);
    while (heads > 1 && batch * nkv * PULSE_CEIL_DIV(group, heads) < nth && work >= SPLIT_WORK)
        heads = PULSE_CEIL_DIV(heads, 2);
    int runs = PULSE_CEIL_DIV(group, heads);
    struct attn_job j = {.q = q,
                         .kv = kv,
                         .n_tokens = n_tokens,
                         .out = out,
                         .nq = nq,
                         .group = group,
                         .heads = heads,
                         .runs = runs,
                         .n_items = batch * nkv * runs,
                         .max_nt = max_nt,
                         .scale = scale};
    pool_run(PULSE_MIN(nth, j.n_items), attn_task, &j);
    call_end();
}
