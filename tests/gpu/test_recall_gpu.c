/* First the zero-copy kernels alone (recall_gather_cuda, recall_gather_dev_cuda) against their
 * CPU references, bit for bit: descriptors in device memory, sources in the pinned host pool
 * (integer-valued, never zero), destinations in a region of guard bytes; awkward cases (1
 * descriptor, 17, 97 tiny ones, unaligned bytes and offsets, 8 KB, 64 KB, 2 MB, a mix, 1024)
 * at several grids (1 x 32 threads .. 132 x 256, and over 512 threads, which takes the other
 * instantiation); the device-count variant with counts below, above and outside [0, max_n].
 * Then the four recall engines on the CUDA copy path move integer-valued chunks bit for bit from a
 * pinned host pool (qwen3-14b's block shape: 64 KB blocks, 8 KB heads) into random device slots
 * with guard bytes around them: awkward shapes (1 chunk, 97, 4099, odd sizes and offsets that
 * take the kernels' byte path, chunks larger than a piece), several recalls in flight, small
 * gather-scatter pieces; zero-copy sources outside the registered region, and zero-copy with its
 * descriptors read from the pinned ring through its mapping (zc_desc_host). Counters equal what
 * was asked and nothing is allocated per recall. Then a quick bandwidth print per engine at
 * 8 KB x 1024 and 64 KB x 1024 against the single-copy peak. Exit 77 without a GPU. */
#include "backend.h"
#include "common.h"
#include "host_pool.h"
#include "mem.h"
#include "recall.h"
#include "testutil.h"

#define GUARD 0xA5
#define MAX_ITEMS 4200
#define KMAX_DESC 1024

static const struct backend *be;
static struct kctx ctx;
static struct host_pool *pool;
static char *d_region, *h_region;
static const size_t region_bytes = (size_t)192 << 20;
static uint8_t used[1 << 22];
static uint64_t rng = 0x2545F4914F6CDD1Dull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

struct shape {
    size_t chunk;
    int n, src_skew, dst_skew;
    int inflight; /* recalls of this shape submitted before the first wait */
};

static void make_items(const struct shape *sh, struct recall_item *it)
{
    size_t bb = host_pool_block_bytes(pool), nblk = host_pool_bytes(pool) / bb;
    size_t span = sh->chunk + (size_t)sh->src_skew, per = span <= bb ? bb / span : 1;
    size_t first_ok = span <= bb ? nblk : nblk - PULSE_CEIL_DIV(span, bb);
    size_t stride = (sh->chunk + 64 + (size_t)sh->dst_skew + 15) & ~(size_t)15;
    size_t nslots = region_bytes / stride, taken = 0;
    for (size_t i = 0; i < nslots; i++)
        taken += used[i];
    PULSE_CHECK(nslots <= sizeof used && taken + (size_t)sh->n <= nslots / 2, "slot region full");
    for (int i = 0; i < sh->n; i++) {
        size_t s = rnd() % (first_ok * per), d;
        do
            d = rnd() % nslots;
        while (used[d]++);
        it[i].src = (char *)host_pool_block_at(pool, (int64_t)(s / per)) + (s % per) * span +
                    (size_t)sh->src_skew;
        it[i].dst = d_region + d * stride + 32 + (size_t)sh->dst_skew;
        it[i].bytes = sh->chunk;
    }
}

/* Reads the region back: every slot equals its source, every other byte is GUARD; then
 * restores the guard on the device. Returns the bad items plus bad guard bytes. */
static long verify(const struct recall_item *it, int n)
{
    static char guard[1 << 16];
    memset(guard, GUARD, sizeof guard);
    be->download(&ctx, h_region, d_region, region_bytes);
    long bad = 0;
    for (int i = 0; i < n; i++) {
        char *h = h_region + ((const char *)it[i].dst - d_region);
        bad += memcmp(h, it[i].src, it[i].bytes) != 0;
        memset(h, GUARD, it[i].bytes); /* the slots are done: make them guard for the scan */
    }
    for (size_t off = 0; off < region_bytes; off += sizeof guard)
        if (memcmp(h_region + off, guard, sizeof guard))
            for (size_t q = 0; q < sizeof guard; q++)
                bad += (uint8_t)h_region[off + q] != GUARD;
    be->memset(&ctx, d_region, GUARD, region_bytes);
    be->sync(&ctx);
    memset(used, 0, sizeof used);
    return bad;
}

static int g_desc_host; /* make: recall_params.zc_desc_host */

static struct recall *make(enum recall_engine e, int max_items, size_t piece, int registered)
{
    char err[256];
    struct recall_params p;
    recall_params_init(&p, e, max_items);
    p.ops = recall_copy_ops_cuda();
    p.zc_desc_host = g_desc_host;
    p.max_inflight = 3;
    if (piece) p.piece_bytes = piece;
    if (registered) {
        p.host_base = host_pool_base(pool);
        p.host_bytes = host_pool_bytes(pool);
    }
    struct recall *r = recall_create(&p, err, sizeof err);
    if (!r) fprintf(stderr, "recall_create %s: %s\n", recall_engine_name(e), err);
    return r;
}

static void test_exact(enum recall_engine e, size_t piece, int registered)
{
    static const struct shape shapes[] = {
        {8192, 1, 0, 0, 1},   {65536, 1, 0, 0, 1},   {8192, 97, 0, 0, 3},
        {65536, 97, 0, 0, 3}, {8192, 4099, 0, 0, 1}, {65536, 1000, 0, 0, 1},
        {1000, 97, 5, 3, 3},  {200000, 5, 16, 0, 3}, {48, 333, 0, 0, 1},
    };
    struct recall *r = make(e, MAX_ITEMS, piece, registered);
    EXPECT(r != NULL);
    if (!r) return;
    static struct recall_item it[3 * MAX_ITEMS];
    int64_t bytes = 0, chunks = 0;
    struct mem_stats m0, m1;
    mem_get_stats(&m0);
    for (size_t k = 0; k < PULSE_ARRAY_LEN(shapes); k++) {
        int n = shapes[k].n, nrec = shapes[k].inflight;
        int64_t t[3];
        for (int q = 0; q < nrec; q++) {
            make_items(&shapes[k], it + q * n);
            EXPECT_EQ_INT(recall_submit(r, it + q * n, n, &t[q]), PULSE_OK);
            bytes += (int64_t)shapes[k].chunk * n;
            chunks += n;
        }
        for (int q = 0; q < nrec; q++)
            EXPECT_EQ_INT(recall_wait(r, t[q]), PULSE_OK);
        long bad = verify(it, nrec * n);
        if (bad)
            fprintf(stderr, "%s (piece %zu, %s%s): %zu B x %d x %d: %ld bad\n",
                    recall_engine_name(e), piece, registered ? "registered" : "mapped per item",
                    g_desc_host ? ", descriptors on the host" : "", shapes[k].chunk, n, nrec, bad);
        EXPECT_EQ_INT(bad, 0);
    }
    mem_get_stats(&m1);
    for (int kind = 0; kind < MEM_KINDS; kind++)
        EXPECT_EQ_INT(m1.alloc_calls[kind], m0.alloc_calls[kind]);
    struct recall_stats st;
    recall_get_stats(r, &st);
    EXPECT_EQ_INT(st.bytes, bytes);
    EXPECT_EQ_INT(st.chunks, chunks);
    EXPECT_EQ_INT(st.failed + st.op_failures, 0);
    recall_free(r);
}

/* ---- the gather kernels alone against their references ---- */

struct kcase {
    const char *name;
    int n;
    size_t bytes;           /* per descriptor; 0: a mix of sizes 1..70000, half of them aligned */
    int src_skew, dst_skew; /* added to 16-aligned offsets (not 0 mod 16: the byte path) */
};

static const int kgrids[][2] = {{16, 512}, {1, 32}, {3, 96}, {132, 256}, {16, 1024}, {7, 544}};

struct kbufs {
    struct recall_desc *h_ref, *h_dev, *d_desc; /* reference's, device's (host copy), device */
    int32_t *d_count;
    char *h_ref_region, *h_got; /* the reference's destination region; the device's, read back */
    char *d_src;                /* the pool as the device sees it */
    size_t extent;              /* bytes of the region the case uses (and compares) */
};

static size_t kcase_bytes(const struct kcase *c, int i, int *ss, int *ds)
{
    *ss = c->src_skew, *ds = c->dst_skew;
    if (c->bytes) return c->bytes;
    size_t b = 1 + rnd() % 70000;
    if (i % 2) { /* odd descriptors: any size, any offsets */
        *ss = (int)(rnd() % 16), *ds = (int)(rnd() % 16);
        return b;
    }
    return (b + 15) & ~(size_t)15; /* even ones: 16-byte words */
}

/* Fills both descriptor lists of a case: n distinct slots among 2n of one stride in the region
 * (the gaps and the 32 bytes before every slot stay guard), sources anywhere in the pool. */
static void kcase_make(const struct kcase *c, struct kbufs *k)
{
    size_t maxb = c->bytes ? c->bytes : 70016, pool_b = host_pool_bytes(pool);
    size_t stride = (maxb + 64 + 16 + 15) & ~(size_t)15, nslots = 2 * (size_t)c->n;
    static uint32_t perm[2 * KMAX_DESC];
    PULSE_CHECK(c->n <= KMAX_DESC && nslots * stride + (64 << 10) <= region_bytes, "kernel case");
    for (size_t i = 0; i < nslots; i++)
        perm[i] = (uint32_t)i;
    for (size_t i = 0; i < (size_t)c->n; i++) {
        size_t j = i + rnd() % (nslots - i);
        uint32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (int i = 0; i < c->n; i++) {
        int ss, ds;
        size_t b = kcase_bytes(c, i, &ss, &ds);
        size_t src = 16 * (rnd() % ((pool_b - b - 16) / 16)) + (size_t)ss;
        size_t dst = perm[i] * stride + 32 + (size_t)ds;
        char *h_pool = host_pool_base(pool);
        k->h_ref[i] = (struct recall_desc){(uintptr_t)(h_pool + src),
                                           (uintptr_t)(k->h_ref_region + dst), b, 0};
        k->h_dev[i] =
            (struct recall_desc){(uintptr_t)(k->d_src + src), (uintptr_t)(d_region + dst), b, 0};
    }
    k->extent = nslots * stride + (64 << 10); /* and 64 KB past the last slot */
}

/* Runs one kernel (count NULL: recall_gather_cuda; else recall_gather_dev_cuda with *count)
 * and its reference on the case; returns the bytes of the region that differ. */
static long kcase_run(const struct kcase *c, struct kbufs *k, int blocks, int threads,
                      const int32_t *count, long *first_bad)
{
    memset(k->h_ref_region, GUARD, k->extent);
    be->memset(&ctx, d_region, GUARD, k->extent);
    be->upload(&ctx, k->d_desc, k->h_dev, sizeof *k->h_dev * (size_t)c->n);
    if (count) {
        be->upload(&ctx, k->d_count, count, sizeof *count);
        recall_gather_dev_ref(k->h_ref, count, c->n, blocks, threads, RECALL_ZC_INFLIGHT_KB, NULL);
        recall_gather_dev_cuda(k->d_desc, k->d_count, c->n, blocks, threads, RECALL_ZC_INFLIGHT_KB,
                               ctx.stream);
    } else {
        recall_gather_ref(k->h_ref, c->n, blocks, threads, RECALL_ZC_INFLIGHT_KB, NULL);
        recall_gather_cuda(k->d_desc, c->n, blocks, threads, RECALL_ZC_INFLIGHT_KB, ctx.stream);
    }
    be->sync(&ctx);
    be->download(&ctx, k->h_got, d_region, k->extent);
    long bad = 0;
    *first_bad = -1;
    if (memcmp(k->h_got, k->h_ref_region, k->extent))
        for (size_t q = 0; q < k->extent; q++)
            if (k->h_got[q] != k->h_ref_region[q]) {
                if (!bad++) *first_bad = (long)q;
            }
    return bad;
}

static void test_kernels(void)
{
    static const struct kcase cases[] = {
        {"1 x 8 KB", 1, 8192, 0, 0},
        {"17 x 8 KB", 17, 8192, 0, 0},
        {"17 x 1000 B, src +5, dst +3 (bytes)", 17, 1000, 5, 3},
        {"97 x 48 B", 97, 48, 0, 0},
        {"333 x 24 B (bytes: size not a multiple of 16)", 333, 24, 0, 0},
        {"1 x 2 MB", 1, (size_t)2 << 20, 0, 0},
        {"3 x 200000 B, src +16 (a partial last piece)", 3, 200000, 16, 0},
        {"5 x 200001 B, src +1, dst +7 (bytes, several pieces)", 5, 200001, 1, 7},
        {"257 of mixed sizes 1..70000 B, half unaligned", 257, 0, 0, 0},
        {"1024 x 8 KB", 1024, 8192, 0, 0},
        {"1024 x 64 KB", 1024, 65536, 0, 0},
    };
    struct kbufs k;
    size_t dbytes = sizeof(struct recall_desc) * KMAX_DESC;
    k.h_ref = mem_alloc(MEM_HOST, dbytes, "test ref descs");
    k.h_dev = mem_alloc(MEM_HOST, dbytes, "test dev descs");
    k.d_desc = mem_alloc(MEM_DEVICE, dbytes, "test descs");
    k.d_count = mem_alloc(MEM_DEVICE, sizeof(int32_t), "test count");
    k.h_ref_region = mem_alloc(MEM_HOST, region_bytes, "test ref region");
    k.h_got = h_region;
    const struct recall_copy_ops *o = recall_copy_ops_cuda();
    void *dv = NULL;
    PULSE_CHECK(k.h_ref && k.h_dev && k.d_desc && k.d_count && k.h_ref_region &&
                    !o->map_host(o, host_pool_base(pool), &dv),
                "kernel test memory");
    k.d_src = dv;
    for (size_t ci = 0; ci < PULSE_ARRAY_LEN(cases); ci++) {
        const struct kcase *c = &cases[ci];
        kcase_make(c, &k);
        /* the device count: half (1 descriptor: none); on the first grid also n + 7 (clamped to
         * max_n = n) and -3 (none) */
        int32_t counts[3] = {c->n / 2, c->n + 7, -3};
        long fails = 0;
        for (size_t g = 0; g < PULSE_ARRAY_LEN(kgrids); g++) {
            int bl = kgrids[g][0], th = kgrids[g][1];
            for (int v = -1; v < (g == 0 ? 3 : 1); v++) {
                long first, bad = kcase_run(c, &k, bl, th, v < 0 ? NULL : &counts[v], &first);
                if (!bad) continue;
                fails++;
                fprintf(stderr,
                        "  FAIL %s, grid %d x %d, %s: %ld bytes differ from the reference, the "
                        "first at region offset %ld\n",
                        c->name, bl, th, v < 0 ? "recall_gather_cuda" : "recall_gather_dev_cuda",
                        bad, first);
                if (v >= 0) fprintf(stderr, "       (device count %d of %d)\n", counts[v], c->n);
            }
        }
        fprintf(stderr,
                "gather kernels, %s: %s at %zu grids (gather; gather_dev with count %d of %d, "
                "and %d, %d on the first grid)\n",
                c->name, fails ? "FAILED" : "bit-exact", PULSE_ARRAY_LEN(kgrids), counts[0], c->n,
                counts[1], counts[2]);
        EXPECT_EQ_INT(fails, 0);
    }
    be->memset(&ctx, d_region, GUARD, region_bytes);
    be->sync(&ctx);
    mem_free(MEM_HOST, k.h_ref, dbytes);
    mem_free(MEM_HOST, k.h_dev, dbytes);
    mem_free(MEM_DEVICE, k.d_desc, dbytes);
    mem_free(MEM_DEVICE, k.d_count, sizeof(int32_t));
    mem_free(MEM_HOST, k.h_ref_region, region_bytes);
}

static double peak_gbps(size_t bytes)
{
    const struct recall_copy_ops *o = recall_copy_ops_cuda();
    void *st, *e0, *e1;
    float best = 1e30f;
    PULSE_CHECK(!o->stream_create(o, &st) && !o->event_create(o, &e0) && !o->event_create(o, &e1),
                "streams");
    for (int i = 0; i < 4; i++) {
        float ms;
        PULSE_CHECK(!o->event_record(o, e0, st) &&
                        !o->h2d(o, d_region, host_pool_base(pool), bytes, st) &&
                        !o->event_record(o, e1, st) && !o->event_sync(o, e1) &&
                        !o->event_elapsed_ms(o, e0, e1, &ms),
                    "peak copy");
        if (i && ms < best) best = ms;
    }
    o->event_destroy(o, e0);
    o->event_destroy(o, e1);
    o->stream_destroy(o, st);
    return (double)bytes / (best * 1e-3) / 1e9;
}

static void bandwidth_print(void)
{
    double peak = peak_gbps(region_bytes);
    /* the peak copy wrote over the whole slot region: restore its guard bytes */
    be->memset(&ctx, d_region, GUARD, region_bytes);
    be->sync(&ctx);
    fprintf(stderr, "single-copy H2D peak (%zu MiB): %.2f GB/s\n", region_bytes >> 20, peak);
    static struct recall_item it[1024];
    for (int e = 0; e < RECALL_ENGINES; e++) {
        struct recall *r = make((enum recall_engine)e, 1024, 0, 1);
        if (!r) continue;
        for (size_t chunk = 8192; chunk <= 65536; chunk *= 8) {
            struct shape sh = {chunk, 1024, 0, 0, 1};
            make_items(&sh, it);
            double best = 1e30;
            for (int rep = 0; rep < 6; rep++) {
                int64_t t;
                double t0 = pulse_now();
                EXPECT_EQ_INT(recall_submit(r, it, 1024, &t), PULSE_OK);
                EXPECT_EQ_INT(recall_wait(r, t), PULSE_OK);
                if (rep) best = PULSE_MIN(best, pulse_now() - t0);
            }
            double gbs = (double)chunk * 1024 / best / 1e9;
            fprintf(stderr, "  %-15s %6zu B x 1024: %6.2f GB/s (%.0f%% of peak)\n",
                    recall_engine_name((enum recall_engine)e), chunk, gbs, 100 * gbs / peak);
            EXPECT_EQ_INT(verify(it, 1024), 0);
        }
        recall_free(r);
    }
}

int main(void)
{
    if (!backend_cuda_available()) {
        fprintf(stderr, "test_recall_gpu: no GPU, skipped\n");
        return 77;
    }
    char err[256];
    be = backend_find("cuda");
    PULSE_CHECK(be && be->ctx_create(&ctx, 0) == PULSE_OK, "cuda context");
    struct host_pool_params pp = {1, 8, 128, 16, 2, (size_t)256 << 20, 1, 16, 1};
    pool = host_pool_create(&pp, err, sizeof err);
    PULSE_CHECK(pool != NULL, err);
    struct host_pool_stats hs;
    host_pool_get_stats(pool, &hs);
    EXPECT_EQ_INT(hs.pinned, 1);
    fprintf(stderr, "pinned %zu MiB in %.3f s\n", hs.pool_bytes >> 20, hs.pin_seconds);
    uint32_t *w = host_pool_base(pool);
    for (size_t i = 0; i < host_pool_bytes(pool) / 4; i++)
        w[i] = (uint32_t)(i * 2654435761u) | 1;
    d_region = mem_alloc(MEM_DEVICE, region_bytes, "test slots");
    h_region = mem_alloc(MEM_HOST, region_bytes, "test readback");
    PULSE_CHECK(d_region && h_region, "test memory");
    be->memset(&ctx, d_region, GUARD, region_bytes);
    be->sync(&ctx);
    test_kernels();
    for (int e = 0; e < RECALL_ENGINES; e++) {
        test_exact((enum recall_engine)e, 0, 1);
        if (e == RECALL_GATHER_SCATTER) test_exact((enum recall_engine)e, 24 << 10, 1);
        if (e == RECALL_ZERO_COPY) {
            test_exact((enum recall_engine)e, 0, 0);
            g_desc_host = 1; /* the gather reads the pinned ring's descriptors in place */
            test_exact((enum recall_engine)e, 0, 1);
            test_exact((enum recall_engine)e, 0, 0);
            g_desc_host = 0;
        }
    }
    bandwidth_print();
    mem_free(MEM_DEVICE, d_region, region_bytes);
    mem_free(MEM_HOST, h_region, region_bytes);
    host_pool_free(pool);
    be->ctx_free(&ctx);
    return tu_finish("test_recall_gpu");
}
