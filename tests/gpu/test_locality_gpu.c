/* The locality model's prompt KV on the device (locality_fill_kv_cuda) against the CPU version
 * (locality_fill_kv), and the offload runtime's device prompt path against its host path:
 * 1. keys and V of awkward ranges (t0 37, one-token ranges, 97 and 4099 tokens, scattered page
 *    ids, pages nobody writes) at qwen3-14b shapes (8 KV heads, head_dim 128, 16 key
 *    directions) and at odd ones (3 KV heads, head_dim 80, 7 directions, 5-token blocks): V and
 *    every page nobody writes are bit-identical; K elements are bit-identical but for a fraction
 *    <= KEY_OFF_FRACTION (the host's logf/cosf/expf against the device's double log/cos/exp,
 *    locality.h), each of those one bf16 ulp off or, near zero, within 2^-20; digests
 *    (digest_build_cuda of the device keys against digest_build_ref of the host keys, head-wise
 *    and SoloHead) likewise;
 * 2. offload admissions on CUDA with the device fill against the same admissions with
 *    offload_params.prompt_kv_host (the CPU reference): synthetic prompt KV gives the host pool
 * byte for byte, and the dense layers' and tail pages' prompt rows too; locality prompt KV the same
 * up to the fraction above; the stats say which path ran; a served run with synthetic KV decodes
 *    the same tokens either way;
 * 3. a timing line: the device fill of one 16K-token layer at qwen3-14b shapes, digests, and its
 *    D2H copy to pinned memory.
 * Prints one line per comparison with the measured fraction. Exit 77 without a GPU. */
#include <cuda_runtime_api.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "baselines/registry.h"
#include "common.h"
#include "cuda_check.h"
#include "engine.h"
#include "kernels.h"
#include "kv_cache.h"
#include "numeric.h"
#include "offload.h"
#include "select.h"
#include "serve.h"
#include "tests/testsource.h"
#include "tests/testutil.h"
#include "workloads/locality.h"
#include "workloads/workload.h"

/* K (and digest) elements allowed off the host's: a host emulation of the kernels (glibc 2.36)
 * measured 8e-6 of K elements off; the tolerance of an element that is off: one bf16 ulp, or
 * KEY_ABS_TOL absolutely where mean + noise cancels near zero (there a last-bit difference of the
 * O(1) operands is several bf16 ulps of the small result; measured up to 4e-7) */
#define KEY_OFF_FRACTION 1e-4
#define KEY_ABS_TOL (1.0 / (1 << 20))
#define PATTERN 0xA5A5u /* what unwritten pool elements hold on both sides */

static struct kctx g_dev;
static struct locality_profile g_prof;

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    PULSE_CHECK(p != NULL, "malloc");
    return p;
}

/* bf16 bits as an integer monotone in the value (-0 and +0 adjacent), so that neighbours in
 * value differ by 1. */
static int32_t ordered(uint16_t h)
{
    return (h & 0x8000u) ? -(int32_t)(h & 0x7fffu) - 1 : (int32_t)h;
}

struct cmp {
    size_t n, equal, ulp1, near0, worse;
    double max_abs; /* largest |difference| of an element that is off */
};

static void cmp_add(struct cmp *c, uint16_t a, uint16_t b)
{
    c->n++;
    if (a == b) {
        c->equal++;
        return;
    }
    const double d = fabs((double)bf16_to_f32(a) - (double)bf16_to_f32(b));
    c->max_abs = d > c->max_abs ? d : c->max_abs;
    if (abs(ordered(a) - ordered(b)) == 1)
        c->ulp1++;
    else if (d <= KEY_ABS_TOL)
        c->near0++;
    else
        c->worse++;
}

/* One line; exact: no difference allowed. */
static void cmp_report(const char *what, const char *cs, const struct cmp *c, int exact)
{
    const size_t off = c->ulp1 + c->near0 + c->worse;
    const double frac = c->n ? (double)off / (double)c->n : 0.0;
    const int ok = exact ? off == 0 : c->worse == 0 && frac <= KEY_OFF_FRACTION;
    tu_checks++;
    if (!ok) tu_failures++;
    printf("%-12s %-40s %9zu elements: %zu bit-equal, %zu off (%.1e of them, limit %s: %zu by "
           "one bf16 ulp, %zu near zero within 2^-20, %zu further; max |diff| %.2e): %s\n",
           what, cs, c->n, c->equal, off, frac, exact ? "0" : "1e-4", c->ulp1, c->near0, c->worse,
           c->max_abs, ok ? "pass" : "FAIL");
    fflush(stdout);
}

/* ------------------------------------------------------------------ 1. the kernel */

struct shape {
    const char *name;
    int nq, nkv, hd, bs, dirs;
};

static struct locality *make_gen(const struct shape *s, int max_blocks, uint64_t seed)
{
    char err[256];
    struct select_cfg cfg = {s->nq, s->nkv, s->hd, s->bs, 8, 1, 2, max_blocks, 0};
    struct locality_default_params dp;
    locality_default_params_init(&dp, 6, seed);
    EXPECT_EQ_INT(locality_profile_default(&g_prof, &dp, err, sizeof err), PULSE_OK);
    struct locality_params lp;
    locality_params_init(&lp, &cfg, 6, 4, seed);
    lp.key_dirs = s->dirs;
    lp.calib_tokens = 64 * s->bs; /* the table is not under test: the smallest calibration */
    lp.calib_points = 3, lp.calib_steps = 1, lp.calib_streams = 1;
    struct locality *L = locality_create(&lp, &g_prof, err, sizeof err);
    if (!L) fprintf(stderr, "locality_create: %s\n", err);
    EXPECT(L != NULL);
    if (L && locality_device_init(L, err, sizeof err) != PULSE_OK) {
        fprintf(stderr, "locality_device_init: %s\n", err);
        locality_free(L);
        return NULL;
    }
    return L;
}

static void test_keys(const struct shape *s)
{
    enum { B = 4 };
    const int32_t t0[B] = {0, 37, 4098, 0}, t1[B] = {97, 1000, 4099, 4099}, req[B] = {3, 0, 7, 11};
    const int layer = 4;
    int32_t start[B], n_pages = 3; /* three pages nobody writes */
    for (int b = 0; b < B; b++)
        start[b] = n_pages, n_pages += PULSE_CEIL_DIV(t1[b], s->bs);
    const int max_blocks = PULSE_CEIL_DIV(4099, s->bs);
    struct locality *L = make_gen(s, max_blocks, 5);
    if (!L) return;
    int32_t *ids = xmalloc(sizeof(int32_t) * n_pages);
    for (int i = 0; i < n_pages; i++) /* a scattered permutation of the pool's pages */
        ids[i] = (int32_t)(((int64_t)i * 7919 + 13) % n_pages);
    const size_t page_elems = (size_t)s->nkv * 2 * s->bs * s->hd, n = page_elems * n_pages;
    uint16_t *h_pool = xmalloc(n * 2), *g_pool = xmalloc(n * 2);
    for (size_t i = 0; i < n; i++)
        h_pool[i] = PATTERN;
    uint16_t *d_pool;
    int32_t *d_ids, *d_start;
    CUDA_CHECK(cudaMalloc((void **)&d_pool, n * 2));
    CUDA_CHECK(cudaMalloc((void **)&d_ids, sizeof(int32_t) * n_pages));
    CUDA_CHECK(cudaMalloc((void **)&d_start, sizeof start));
    CUDA_CHECK(cudaMemcpy(d_pool, h_pool, n * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_ids, ids, sizeof(int32_t) * n_pages, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_start, start, sizeof start, cudaMemcpyHostToDevice));
    const struct kv_view hv = {h_pool, ids, start, s->bs, s->nkv, s->hd, 0, 0, NULL, NULL};
    const struct kv_view dv = {d_pool, d_ids, d_start, s->bs, s->nkv, s->hd, 0, 0, NULL, NULL};
    locality_fill_kv(L, &hv, t0, t1, req, B, layer);
    locality_fill_kv_cuda(L, &g_dev, &dv, t0, t1, req, B, layer);
    CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)g_dev.stream));
    CUDA_CHECK(cudaMemcpy(g_pool, d_pool, n * 2, cudaMemcpyDeviceToHost));
    /* K rows against K rows, V against V, everything else (unwritten) against the pattern */
    struct cmp ck = {0}, cv = {0}, rest = {0};
    for (int p = 0; p < n_pages; p++)
        for (size_t e = 0; e < page_elems; e++) {
            const size_t i = (size_t)p * page_elems + e;
            const int which = (int)(e / ((size_t)s->bs * s->hd)) % 2;
            const int written = h_pool[i] != PATTERN || g_pool[i] != PATTERN;
            cmp_add(!written ? &rest : which ? &cv : &ck, g_pool[i], h_pool[i]);
        }
    char cs[96];
    snprintf(cs, sizeof cs, "%s, %d dirs", s->name, s->dirs);
    cmp_report("keys K", cs, &ck, 0);
    cmp_report("keys V", cs, &cv, 1);
    size_t want = 0; /* K (and V) elements of the entries' ranges */
    for (int b = 0; b < B; b++)
        want += (size_t)(t1[b] - t0[b]) * s->nkv * s->hd;
    EXPECT_EQ_INT(ck.n, want);
    EXPECT_EQ_INT(cv.n, want);
    EXPECT(rest.n >= 3 * page_elems); /* at least the three pages nobody writes */
    /* digests of the entries' full blocks and partial tails: head-wise and SoloHead head 1 */
    for (int sel = -1; sel <= 1; sel += 2) {
        const int dh = sel == SELECT_HEADWISE ? s->nkv : 1;
        const size_t dpe = (size_t)dh * 2 * s->hd, dn = dpe * n_pages;
        uint16_t *hd_pool = xmalloc(dn * 2), *gd_pool = xmalloc(dn * 2), *d_dig;
        for (size_t i = 0; i < dn; i++)
            hd_pool[i] = PATTERN;
        CUDA_CHECK(cudaMalloc((void **)&d_dig, dn * 2));
        CUDA_CHECK(cudaMemcpy(d_dig, hd_pool, dn * 2, cudaMemcpyHostToDevice));
        int32_t *d_t1;
        CUDA_CHECK(cudaMalloc((void **)&d_t1, sizeof t1));
        CUDA_CHECK(cudaMemcpy(d_t1, t1, sizeof t1, cudaMemcpyHostToDevice));
        /* only entries written from token 0 have every block's keys: entries 0 and 3 */
        const int32_t pick[2] = {0, 3};
        for (int k = 0; k < 2; k++) {
            const int b = pick[k];
            const struct kv_view hv1 = {h_pool, ids, start + b, s->bs, s->nkv,
                                        s->hd,  0,   0,         NULL,  NULL};
            const struct kv_view dv1 = {d_pool, d_ids, d_start + b, s->bs, s->nkv,
                                        s->hd,  0,     0,           NULL,  NULL};
            const struct digest_view hdv = {hd_pool, ids, start + b, dh, s->hd};
            const struct digest_view ddv = {d_dig, d_ids, d_start + b, dh, s->hd};
            digest_build_ref(NULL, &hv1, &hdv, t1 + b, 1, sel, t1[b]);
            digest_build_cuda(&g_dev, &dv1, &ddv, d_t1 + b, 1, sel, t1[b]);
        }
        CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)g_dev.stream));
        CUDA_CHECK(cudaMemcpy(gd_pool, d_dig, dn * 2, cudaMemcpyDeviceToHost));
        struct cmp cd = {0};
        for (size_t i = 0; i < dn; i++)
            cmp_add(&cd, gd_pool[i], hd_pool[i]);
        snprintf(cs, sizeof cs, "%s, %s", s->name, sel == SELECT_HEADWISE ? "head-wise" : "head 1");
        cmp_report("digests", cs, &cd, 0);
        CUDA_CHECK(cudaFree(d_dig));
        CUDA_CHECK(cudaFree(d_t1));
        free(hd_pool), free(gd_pool);
    }
    CUDA_CHECK(cudaFree(d_pool));
    CUDA_CHECK(cudaFree(d_ids));
    CUDA_CHECK(cudaFree(d_start));
    free(h_pool), free(g_pool), free(ids);
    locality_free(L);
}

/* ------------------------------------------------------------------ 2. the offload path */

#define SPEC "lengths:100,37,1,250,16"
#define OUT_LEN 8

struct rig {
    struct workload w;
    struct engine *e;
    struct kv_cache *kv;
    struct offload *o;
    struct query_source *qs;
    int slot[8];
};

/* Engine, cache and offload runtime on cuda for SPEC; host: offload_params.prompt_kv_host. */
static int rig_init(struct rig *r, int prompt_kv, int selection, int host)
{
    char err[512];
    memset(r, 0, sizeof *r);
    if (workload_create(&r->w, SPEC, OUT_LEN, 1, err, sizeof err) != 0) return -1;
    const int max_tokens = workload_max_tokens(&r->w), max_batch = r->w.n;
    const struct model_config *m = model_config_find("tiny");
    struct engine_params ep = {.cfg = m,
                               .be = backend_find("cuda"),
                               .seed = 1,
                               .max_batch = max_batch,
                               .max_tokens = max_tokens};
    r->e = engine_create(&ep, err, sizeof err);
    struct kv_cache_params kp = {m->n_layers, m->n_kv_heads, m->head_dim, 16,
                                 64u << 20,   max_batch,     max_tokens};
    r->kv = r->e ? kv_cache_create(&kp, ep.be, engine_ctx(r->e), err, sizeof err) : NULL;
    struct offload_params p;
    offload_params_init(&p, max_batch, max_tokens, 1);
    p.schedule = policy_find("arkvale")->offload_schedule;
    p.prompt_kv = prompt_kv;
    p.selection = selection;
    p.budget_tokens = 32;
    p.prompt_kv_host = host;
    if (r->kv && !(r->qs = test_source(r->e, r->kv, &p, NULL)))
        snprintf(err, sizeof err, "no query source");
    int rc = r->qs ? offload_create(r->e, r->kv, &p, &r->o, err, sizeof err) : -1;
    if (rc != PULSE_OK) {
        fprintf(stderr, "rig: %s\n", err);
        return -1;
    }
    for (int i = 0; i < r->w.n; i++) {
        const struct request *q = &r->w.reqs[i];
        rc = offload_admit(r->o, q->id, q->prompt_len, q->prompt_len + q->output_len, &r->slot[i],
                           err, sizeof err);
        EXPECT_EQ_INT(rc, PULSE_OK);
        if (rc != PULSE_OK) fprintf(stderr, "admit: %s\n", err);
    }
    return 0;
}

static void rig_free(struct rig *r)
{
    offload_free(r->o);
    query_source_free(r->qs);
    kv_cache_free(r->kv);
    engine_free(r->e);
    workload_free(&r->w);
}

/* The prompt rows (tokens < prompt_len of block i) of GPU page `page` of a's and b's caches. */
static void cmp_page_rows(struct cmp *c, const struct rig *a, const struct rig *b, int32_t pa,
                          int32_t pb, int block, int prompt_len, uint16_t *ba, uint16_t *bb)
{
    const struct model_config *m = model_config_find("tiny");
    const size_t pbytes = kv_cache_page_bytes(a->kv);
    const char *poola = (const char *)kv_cache_view(a->kv, NULL).pool;
    const char *poolb = (const char *)kv_cache_view(b->kv, NULL).pool;
    CUDA_CHECK(cudaMemcpy(ba, poola + (size_t)pa * pbytes, pbytes, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(bb, poolb + (size_t)pb * pbytes, pbytes, cudaMemcpyDeviceToHost));
    for (int row = 0; row < 2 * m->n_kv_heads; row++)
        for (int t = 0; t < 16 && block * 16 + t < prompt_len; t++)
            for (int d = 0; d < m->head_dim; d++) {
                const size_t i = ((size_t)row * 16 + t) * m->head_dim + d;
                cmp_add(c, ba[i], bb[i]);
            }
}

static void test_offload_paths(int prompt_kv, int selection)
{
    struct rig dev, host;
    if (rig_init(&dev, prompt_kv, selection, 0) || rig_init(&host, prompt_kv, selection, 1)) {
        EXPECT(0);
        return;
    }
    struct offload_stats sd, sh;
    offload_get_stats(dev.o, &sd);
    offload_get_stats(host.o, &sh);
    EXPECT_EQ_INT(sd.prompt_kv_device, 1);
    EXPECT_EQ_INT(sh.prompt_kv_device, 0);
    EXPECT(sd.staging_bytes > 0 && sh.staging_bytes == 0);
    const struct model_config *m = model_config_find("tiny");
    const size_t pbytes = kv_cache_page_bytes(dev.kv);
    uint16_t *ba = xmalloc(pbytes), *bb = xmalloc(pbytes);
    struct cmp pool = {0}, dense = {0}, tail = {0};
    for (int i = 0; i < dev.w.n; i++) {
        const struct request *q = &dev.w.reqs[i];
        /* what admission writes: the prompt's blocks and the tail's (zeros past the prompt) */
        const int nb =
            PULSE_MIN(PULSE_CEIL_DIV(q->prompt_len + q->output_len, 16), q->prompt_len / 16 + 1);
        for (int l = 2; l < m->n_layers; l++) /* sparse layers: those rows */
            for (int blk = 0; blk < nb; blk++) {
                const uint16_t *x = offload_host_block(dev.o, dev.slot[i], l, blk);
                const uint16_t *y = offload_host_block(host.o, host.slot[i], l, blk);
                for (size_t e = 0; e < pbytes / 2; e++)
                    cmp_add(&pool, x[e], y[e]);
            }
        for (int l = 0; l < m->n_layers; l++) {
            int na, nbo;
            const int32_t *own_a = kv_cache_owned_pages(dev.kv, dev.slot[i], l, &na);
            const int32_t *own_b = kv_cache_owned_pages(host.kv, host.slot[i], l, &nbo);
            EXPECT_EQ_INT(na, nbo);
            if (l < 2) /* dense: every prompt block in its own page */
                for (int blk = 0; blk * 16 < q->prompt_len; blk++)
                    cmp_page_rows(&dense, &dev, &host, own_a[blk], own_b[blk], blk, q->prompt_len,
                                  ba, bb);
            else /* the tail page holds the prompt's last (partial) block */
                cmp_page_rows(&tail, &dev, &host, own_a[na - 1], own_b[nbo - 1], q->prompt_len / 16,
                              q->prompt_len, ba, bb);
        }
    }
    char cs[96];
    snprintf(cs, sizeof cs, "%s, %s", prompt_kv == OFFLOAD_KV_SYNTHETIC ? "synthetic" : "locality",
             selection == OFFLOAD_HEADWISE ? "head-wise" : "SoloHead");
    const int exact = prompt_kv == OFFLOAD_KV_SYNTHETIC;
    cmp_report("host pool", cs, &pool, exact);
    cmp_report("dense pages", cs, &dense, exact);
    cmp_report("tail pages", cs, &tail, exact);
    char err[512];
    EXPECT_EQ_INT(offload_check(dev.o, err, sizeof err), 0);
    printf("set-up %s: prompt KV %.4f s on the device, %.4f s on the host\n", cs, sd.prompt_fill_s,
           sh.prompt_fill_s);
    /* the pool was pinned by the default strategy, without a fallback */
    json_t *cj = offload_counters_json(dev.o);
    json_t *su = json_object_get(cj, "setup");
    const char *strategy = json_string_value(json_object_get(su, "pin_strategy"));
    EXPECT(strategy && !strcmp(strategy, mem_pin_strategy_name(MEM_PIN_DEFAULT)));
    EXPECT(json_is_true(json_object_get(su, "host_pool_pinned")));
    EXPECT(json_is_false(json_object_get(su, "pin_fallback")));
    EXPECT(json_is_true(json_object_get(su, "prompt_kv_device")));
    printf("host pool: %lld bytes pinned by %s in %lld pieces on %lld threads, %.3f s\n",
           (long long)json_integer_value(json_object_get(su, "host_pool_bytes")),
           strategy ? strategy : "?",
           (long long)json_integer_value(json_object_get(su, "pin_pieces")),
           (long long)json_integer_value(json_object_get(su, "pin_threads")),
           json_real_value(json_object_get(su, "pin_s")));
    json_decref(cj);
    free(ba), free(bb);
    rig_free(&dev);
    rig_free(&host);
}

/* A served run with synthetic prompt KV decodes the same tokens on either path. */
static void test_served_tokens(void)
{
    struct workload w[2];
    for (int host = 0; host < 2; host++) {
        char err[512];
        EXPECT_EQ_INT(workload_create(&w[host], SPEC, OUT_LEN, 1, err, sizeof err), 0);
        const int max_tokens = workload_max_tokens(&w[host]), max_batch = 2;
        const struct model_config *m = model_config_find("tiny");
        struct engine_params ep = {.cfg = m,
                                   .be = backend_find("cuda"),
                                   .seed = 1,
                                   .max_batch = max_batch,
                                   .max_tokens = max_tokens,
                                   .use_graph = 1};
        struct engine *e = engine_create(&ep, err, sizeof err);
        struct kv_cache_params kp = {m->n_layers, m->n_kv_heads, m->head_dim, 16,
                                     64u << 20,   max_batch,     max_tokens};
        struct kv_cache *kv = kv_cache_create(&kp, ep.be, engine_ctx(e), err, sizeof err);
        struct offload_params p;
        offload_params_init(&p, max_batch, max_tokens, 1);
        p.schedule = policy_find("arkvale")->offload_schedule;
        p.prompt_kv = OFFLOAD_KV_SYNTHETIC;
        p.budget_tokens = 32;
        p.prompt_kv_host = host;
        struct offload *o = NULL;
        test_source(e, kv, &p, NULL);
        EXPECT_EQ_INT(offload_create(e, kv, &p, &o, err, sizeof err), PULSE_OK);
        struct serve_counters ctr;
        double wall;
        if (o)
            EXPECT_EQ_INT(serve_run_policy(e, kv, policy_find("arkvale"), o, w[host].reqs,
                                           w[host].n, max_batch, &ctr, &wall, err, sizeof err),
                          0);
        offload_free(o);
        query_source_free(p.source);
        kv_cache_free(kv);
        engine_free(e);
    }
    const int same = !memcmp(w[0].token_store, w[1].token_store,
                             sizeof(int32_t) * (size_t)w[0].n * w[0].output_len);
    EXPECT(same);
    printf("served tokens, device vs host prompt KV: %s\n", same ? "same" : "DIFFERENT");
    workload_free(&w[0]);
    workload_free(&w[1]);
}

/* ------------------------------------------------------------------ 3. timing */

static void time_fill(void)
{
    const struct shape s = {"qwen3-14b", 40, 8, 128, 16, 16};
    const int tokens = 16384, nb = tokens / s.bs;
    struct locality *L = make_gen(&s, nb, 3);
    if (!L) return;
    const size_t page_bytes = (size_t)s.nkv * 2 * s.bs * s.hd * 2, bytes = page_bytes * nb;
    const size_t dbytes = (size_t)s.nkv * 2 * s.hd * 2 * nb;
    int32_t *ids = xmalloc(sizeof(int32_t) * nb), zero = 0, ntok = tokens;
    for (int i = 0; i < nb; i++)
        ids[i] = i;
    uint16_t *d_pool, *d_dig, *h_pinned;
    int32_t *d_ids, *d_args;
    CUDA_CHECK(cudaMalloc((void **)&d_pool, bytes));
    CUDA_CHECK(cudaMalloc((void **)&d_dig, dbytes));
    CUDA_CHECK(cudaMalloc((void **)&d_ids, sizeof(int32_t) * nb));
    CUDA_CHECK(cudaMalloc((void **)&d_args, 2 * sizeof(int32_t)));
    CUDA_CHECK(cudaHostAlloc((void **)&h_pinned, bytes, cudaHostAllocDefault));
    CUDA_CHECK(cudaMemcpy(d_ids, ids, sizeof(int32_t) * nb, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_args, &zero, sizeof zero, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_args + 1, &ntok, sizeof ntok, cudaMemcpyHostToDevice));
    const struct kv_view dv = {d_pool, d_ids, d_args, s.bs, s.nkv, s.hd, 0, 0, NULL, NULL};
    const struct digest_view gv = {d_dig, d_ids, d_args, s.nkv, s.hd};
    cudaStream_t st = (cudaStream_t)g_dev.stream;
    cudaEvent_t ev[4];
    for (int i = 0; i < 4; i++)
        CUDA_CHECK(cudaEventCreate(&ev[i]));
    const int reps = 5;
    float fill_ms = 0, dig_ms = 0, d2h_ms = 0;
    for (int r = 0; r <= reps; r++) { /* rep 0 warms up */
        CUDA_CHECK(cudaEventRecord(ev[0], st));
        locality_fill_kv_cuda(L, &g_dev, &dv, NULL, &ntok, &(int32_t){1}, 1, 2);
        CUDA_CHECK(cudaEventRecord(ev[1], st));
        digest_build_cuda(&g_dev, &dv, &gv, d_args + 1, 1, SELECT_HEADWISE, tokens);
        CUDA_CHECK(cudaEventRecord(ev[2], st));
        CUDA_CHECK(cudaMemcpyAsync(h_pinned, d_pool, bytes, cudaMemcpyDeviceToHost, st));
        CUDA_CHECK(cudaEventRecord(ev[3], st));
        CUDA_CHECK(cudaEventSynchronize(ev[3]));
        float a, b, c;
        CUDA_CHECK(cudaEventElapsedTime(&a, ev[0], ev[1]));
        CUDA_CHECK(cudaEventElapsedTime(&b, ev[1], ev[2]));
        CUDA_CHECK(cudaEventElapsedTime(&c, ev[2], ev[3]));
        if (r) fill_ms += a / reps, dig_ms += b / reps, d2h_ms += c / reps;
    }
    printf("timing qwen3-14b shapes, one layer of %d tokens (%.1f MB): fill %.3f ms (%.0f GB/s "
           "written), digests %.3f ms, D2H %.3f ms (%.1f GB/s); 12 requests x 38 sparse layers "
           "would take %.2f s at this rate\n",
           tokens, bytes / 1e6, fill_ms, bytes / (fill_ms * 1e6), dig_ms, d2h_ms,
           bytes / (d2h_ms * 1e6), 12 * 38 * (fill_ms + dig_ms + d2h_ms) / 1e3);
    for (int i = 0; i < 4; i++)
        CUDA_CHECK(cudaEventDestroy(ev[i]));
    CUDA_CHECK(cudaFreeHost(h_pinned));
    CUDA_CHECK(cudaFree(d_pool));
    CUDA_CHECK(cudaFree(d_dig));
    CUDA_CHECK(cudaFree(d_ids));
    CUDA_CHECK(cudaFree(d_args));
    free(ids);
    locality_free(L);
}

int main(void)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0 || !backend_cuda_available()) {
        fprintf(stderr, "test_locality_gpu: no GPU, skipped\n");
        return 77;
    }
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreate(&st));
    g_dev = (struct kctx){.stream = st};
    const struct shape shapes[] = {{"qwen3-14b (8 x 128, block 16)", 40, 8, 128, 16, 16},
                                   {"odd (3 x 80, block 5)", 6, 3, 80, 5, 7}};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(shapes); i++)
        test_keys(&shapes[i]);
    test_offload_paths(OFFLOAD_KV_SYNTHETIC, OFFLOAD_HEADWISE);
    test_offload_paths(OFFLOAD_KV_SYNTHETIC, OFFLOAD_SOLOHEAD);
    test_offload_paths(OFFLOAD_KV_LOCALITY, OFFLOAD_HEADWISE);
    test_offload_paths(OFFLOAD_KV_LOCALITY, OFFLOAD_SOLOHEAD);
    test_served_tokens();
    if (!getenv("PULSE_GPU_TEST_NO_TIMING")) time_fill();
    CUDA_CHECK(cudaStreamDestroy(st));
    return tu_finish("test_locality_gpu");
}
