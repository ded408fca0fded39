/* The four recall engines on the CUDA copy path move integer-valued chunks bit for bit from a
 * pinned host pool (qwen3-14b's block shape: 64 KB blocks, 8 KB heads) into random device slots
 * with guard bytes around them: awkward shapes (1 chunk, 97, 4099, odd sizes and offsets that
 * take the kernels' byte path, chunks larger than a piece), several recalls in flight, small
 * gather-scatter pieces; zero-copy sources outside the registered region. Counters equal what
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

static struct recall *make(enum recall_engine e, int max_items, size_t piece, int registered)
{
    char err[256];
    struct recall_params p;
    recall_params_init(&p, e, max_items);
    p.ops = recall_copy_ops_cuda();
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
            fprintf(stderr, "%s (piece %zu, %s): %zu B x %d x %d: %ld bad\n", recall_engine_name(e),
                    piece, registered ? "registered" : "mapped per item", shapes[k].chunk, n, nrec,
                    bad);
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
    for (int e = 0; e < RECALL_ENGINES; e++) {
        test_exact((enum recall_engine)e, 0, 1);
        if (e == RECALL_GATHER_SCATTER) test_exact((enum recall_engine)e, 24 << 10, 1);
        if (e == RECALL_ZERO_COPY) test_exact((enum recall_engine)e, 0, 0);
    }
    bandwidth_print();
    mem_free(MEM_DEVICE, d_region, region_bytes);
    mem_free(MEM_HOST, h_region, region_bytes);
    host_pool_free(pool);
    be->ctx_free(&ctx);
    return tu_finish("test_recall_gpu");
}
