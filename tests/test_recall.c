/* The host pool and the recall engines on the CPU copy path:
 *  - host pool: layout (token-wise block = one chunk, head h at h * head_bytes), invariants and
 *    data integrity after a long random sequence of reserves and releases;
 *  - every engine moves integer-valued chunks bit-exactly from random pool blocks into random
 *    destination slots with guard bytes around them (8 KB, 64 KB, odd sizes and offsets, 1 and
 *    97 chunks, several recalls in flight, pieces that split chunks), and its counters equal
 *    what was asked, with no allocation per recall;
 *  - through a wrapped copy path: an injected failure surfaces in the recall's status and the
 *    counters (the whole recall is reported failed; the next recall is exact), an event that
 *    fails likewise; submission does not wait for a slow link; asynchronous completion; the cap
 *    holds the achieved rate to its target on an emulated link;
 *  - bad params and items; `pulse recall-bench --backend cpu` writes its JSON. */
#include <jansson.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

#include "common.h"
#include "host_numa.h"
#include "host_pool.h"
#include "mem.h"
#include "recall.h"
#include "testutil.h"

#define GUARD 0xA5
#define MAX_ITEMS 512

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* ---- the host pool ---- */

static void fill_block(char *b, size_t n, uint32_t tag)
{
    for (size_t i = 0; i + 4 <= n; i += 4) {
        uint32_t v = tag * 2654435761u + (uint32_t)i + 1;
        memcpy(b + i, &v, 4);
    }
}

static int block_ok(const char *b, size_t n, uint32_t tag)
{
    for (size_t i = 0; i + 4 <= n; i += 4) {
        uint32_t v = tag * 2654435761u + (uint32_t)i + 1, w;
        memcpy(&w, b + i, 4);
        if (v != w) return 0;
    }
    return 1;
}

static void test_host_pool_layout(void)
{
    char err[256];
    /* qwen3-14b's KV shape: 8 heads x K,V x 16 tokens x 128 dims x 2 bytes */
    struct host_pool_params p = {40, 8, 128, 16, 2, (size_t)8 << 20, 2, 100, 0};
    struct host_pool *hp = host_pool_create(&p, err, sizeof err);
    EXPECT(hp != NULL);
    if (!hp) return;
    EXPECT_EQ_INT(host_pool_block_bytes(hp), 65536);
    EXPECT_EQ_INT(host_pool_head_bytes(hp), 8192);
    EXPECT_EQ_INT(host_pool_blocks_for(hp, 100), 7);
    int slot;
    EXPECT_EQ_INT(host_pool_reserve(hp, 0, &slot), PULSE_ERR_INVALID);
    EXPECT_EQ_INT(host_pool_reserve(hp, 101, &slot), PULSE_ERR_INVALID);
    EXPECT_EQ_INT(host_pool_reserve(hp, 17, &slot), PULSE_OK); /* 2 blocks x 40 layers */
    char *b = host_pool_block(hp, slot, 39, 1);
    for (int h = 0; h < 8; h++)
        EXPECT(host_pool_head(hp, slot, 39, 1, h) == b + (size_t)h * 8192);
    EXPECT_EQ_INT(host_pool_block_id(hp, slot, 0, 2), -1);
    EXPECT_EQ_INT(host_pool_block_id(hp, slot, 40, 0), -1);
    int64_t id = host_pool_block_id(hp, slot, 39, 1);
    EXPECT(host_pool_block_at(hp, id) == b);
    EXPECT((char *)b >= (char *)host_pool_base(hp) &&
           (char *)b + 65536 <= (char *)host_pool_base(hp) + host_pool_bytes(hp));
    int s2;
    EXPECT_EQ_INT(host_pool_reserve(hp, 100, &s2), PULSE_ERR_INVALID); /* 280 > 128 blocks */
    EXPECT_EQ_INT(host_pool_reserve(hp, 20, &s2), PULSE_ERR_NOMEM);    /* 80 > 48 free now */
    struct host_pool_stats st;
    host_pool_get_stats(hp, &st);
    EXPECT_EQ_INT(st.n_blocks, 128);
    EXPECT_EQ_INT(st.free_blocks, 48);
    EXPECT_EQ_INT(st.refusals, 4);
    EXPECT_EQ_INT(st.pinned, 0);
    EXPECT(st.pin_seconds >= 0);
    EXPECT_EQ_INT(host_pool_check(hp, err, sizeof err), 0);
    host_pool_free(hp);
    struct host_pool_params bad = p;
    bad.pool_bytes = 1000; /* less than one block */
    EXPECT(host_pool_create(&bad, err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "blocks");
}

/* host_pool_plan: the sizing arithmetic for a pool of hundreds of GB (a large host beside one
 * GPU: 500 GB of qwen3-14b blocks for 256 requests of up to 128K tokens), in 64 bits, without
 * allocating it; the plan of a small pool is what create builds; past int32 block ids, refused. */
static void test_host_pool_plan(void)
{
    char err[256];
    struct host_pool_params p = {40, 8, 128, 16, 2, (size_t)500e9, 256, 131072, 1};
    struct host_pool_plan pl;
    EXPECT_EQ_INT(host_pool_plan(&p, &pl, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(pl.block_bytes, 65536);
    EXPECT(pl.n_blocks == 7629394);                         /* floor(500e9 / 65536) */
    EXPECT(pl.pool_bytes == (size_t)7629394 * 65536);       /* 499,999,981,568 */
    EXPECT(pl.max_blocks == 8192);                          /* 131072 / 16 */
    EXPECT(pl.rows == (size_t)256 * 40 * 8192);             /* 83,886,080 ids */
    EXPECT(pl.o_free == (size_t)335544320);                 /* 4 bytes each */
    EXPECT(pl.o_tok == (size_t)366061952);                  /* align64(o_free + 4 n_blocks) */
    EXPECT(pl.o_mark == (size_t)366062976);                 /* align64(o_tok + 4 x 256) */
    EXPECT(pl.tables_bytes == (size_t)366062976 + 7629394); /* + a mark byte a block */
    /* the plan of a small pool is what create makes */
    struct host_pool_params q = {40, 8, 128, 16, 2, (size_t)8 << 20, 2, 100, 0};
    EXPECT_EQ_INT(host_pool_plan(&q, &pl, err, sizeof err), PULSE_OK);
    struct host_pool *hp = host_pool_create(&q, err, sizeof err);
    EXPECT(hp != NULL);
    if (hp) {
        struct host_pool_stats st;
        host_pool_get_stats(hp, &st);
        EXPECT(st.n_blocks == pl.n_blocks && st.pool_bytes == pl.pool_bytes);
        EXPECT(host_pool_bytes(hp) == pl.pool_bytes);
        host_pool_free(hp);
    }
    /* more blocks than int32 ids address: 2^31 blocks of 64 KB is 140 TB */
    p.pool_bytes = (size_t)200e12;
    EXPECT_EQ_INT(host_pool_plan(&p, &pl, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "blocks");
}

/* host_numa: a node this process may not allocate on is refused with a one-line reason; a range
 * placed on node 0 and touched is found there (on a host of several nodes that is the placement's
 * doing); an untouched range has no resident page to tell. A kernel without NUMA support or one
 * that refuses the policy (a container's seccomp profile) must say so. The pin's node defaults to
 * the one nearest the device, whatever PULSE_PIN_NUMA (no longer read) says. */
static void test_host_numa(void)
{
    char err[256] = "";
    const int nodes = host_numa_nodes();
    EXPECT(nodes >= 1);
    const size_t len = (size_t)8 << 20;
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT(p != MAP_FAILED);
    if (p == MAP_FAILED) return;
    EXPECT_EQ_INT(host_numa_place(p, len, 4095, err, sizeof err), -1);
    EXPECT_STR_CONTAINS(err, "NUMA node 4095");
    EXPECT_EQ_INT(host_numa_place(p, len, -1, err, sizeof err), -1);
    EXPECT_STR_CONTAINS(err, "NUMA node -1");
    EXPECT(host_numa_share(p, len, 0, 64) < 0); /* nothing resident yet */
    err[0] = 0;
    const int rc = host_numa_place(p, len, 0, err, sizeof err);
    if (rc != 0) {
        EXPECT(strstr(err, "mbind refused") || strstr(err, "no NUMA support"));
        fprintf(stderr, "host_numa: placement refused here (%s); share not checked\n", err);
    } else {
        memset(p, 1, len);
        const double share = host_numa_share(p, len, 0, 64);
        EXPECT(share == 1.0 || share < 0); /* < 0: a kernel without move_pages */
        fprintf(stderr, "host_numa: %d node(s), 8 MB placed on node 0: share %.2f\n", nodes, share);
    }
    munmap(p, len);
    /* the node nearest the GPU by default, whatever the environment says (the place is a
     * command-line option now: runtime_opts.h's --pin-numa) */
    struct mem_pin_params pp;
    setenv("PULSE_PIN_NUMA", "0", 1);
    mem_pin_params_default(&pp);
    unsetenv("PULSE_PIN_NUMA");
    EXPECT_EQ_INT(pp.numa_node, MEM_NUMA_NEAREST);
}

/* host_pool_keep: with it on, a freed pool's region serves the next pool of the same block
 * size that fits (no new allocation, pin_reused), a pool of another block size gets its own,
 * and turning it off frees what is kept: the memory in use is back where it started. */
static void test_host_pool_keep(void)
{
    char err[256];
    struct mem_stats m0, m1;
    mem_get_stats(&m0);
    struct host_pool_params p = {40, 8, 128, 16, 2, (size_t)8 << 20, 2, 100, 0};
    host_pool_keep(1);
    struct host_pool *a = host_pool_create(&p, err, sizeof err);
    EXPECT(a != NULL);
    void *base = a ? host_pool_base(a) : NULL;
    struct host_pool_stats st;
    host_pool_get_stats(a, &st);
    EXPECT_EQ_INT(st.pin_reused, 0);
    host_pool_free(a);
    p.pool_bytes = (size_t)4 << 20; /* smaller: fits in the kept region */
    struct host_pool *b = host_pool_create(&p, err, sizeof err);
    EXPECT(b != NULL && host_pool_base(b) == base);
    host_pool_get_stats(b, &st);
    EXPECT_EQ_INT(st.pin_reused, 1);
    EXPECT(st.pool_bytes == ((size_t)4 << 20));
    EXPECT_EQ_INT(host_pool_check(b, err, sizeof err), 0);
    host_pool_free(b);
    struct host_pool_params q = p; /* another block size: its own region */
    q.n_kv_heads = 4;
    struct host_pool *c = host_pool_create(&q, err, sizeof err);
    host_pool_get_stats(c, &st);
    EXPECT_EQ_INT(st.pin_reused, 0);
    host_pool_free(c);
    p.pool_bytes = (size_t)16 << 20; /* larger than what is kept: allocated */
    struct host_pool *d = host_pool_create(&p, err, sizeof err);
    host_pool_get_stats(d, &st);
    EXPECT_EQ_INT(st.pin_reused, 0);
    host_pool_free(d);
    host_pool_keep(0);
    mem_get_stats(&m1);
    EXPECT(m1.live_bytes[MEM_HOST] == m0.live_bytes[MEM_HOST]);
}

static void test_host_pool_random(void)
{
    char err[256];
    enum { REQ = 6, LAYERS = 3, MAXTOK = 40 };
    struct host_pool_params p = {LAYERS, 2, 8, 4, 2, 200 * 256 + 100, REQ, MAXTOK, 0};
    struct host_pool *hp = host_pool_create(&p, err, sizeof err);
    EXPECT(hp != NULL);
    if (!hp) return;
    size_t bb = host_pool_block_bytes(hp);
    int len[REQ] = {0}, tag[REQ] = {0}, next_tag = 1, checks_failed = 0, data_failed = 0;
    for (int step = 0; step < 5000; step++) {
        int s = (int)(rnd() % REQ);
        if (len[s] && rnd() % 2) {
            host_pool_release(hp, s);
            len[s] = 0;
        } else if (!len[s]) {
            int n = 1 + (int)(rnd() % (MAXTOK + 4)), slot = -1;
            int rc = host_pool_reserve(hp, n, &slot);
            if (n > MAXTOK) {
                checks_failed += rc != PULSE_ERR_INVALID;
            } else if (rc == PULSE_OK) {
                len[slot] = n;
                tag[slot] = next_tag++;
                for (int l = 0; l < LAYERS; l++)
                    for (int b = 0; b < host_pool_blocks_for(hp, n); b++)
                        fill_block(host_pool_block(hp, slot, l, b), bb,
                                   (uint32_t)(tag[slot] * 1000 + l * 100 + b));
            } else {
                checks_failed += rc != PULSE_ERR_NOMEM;
            }
        }
        if (host_pool_check(hp, err, sizeof err) != 0) {
            if (!checks_failed++) fprintf(stderr, "host pool step %d: %s\n", step, err);
        }
        if (step % 50 == 0) /* every live block still holds what its owner wrote */
            for (int q = 0; q < REQ; q++)
                for (int l = 0; len[q] && l < LAYERS; l++)
                    for (int b = 0; b < host_pool_blocks_for(hp, len[q]); b++)
                        data_failed += !block_ok(host_pool_block(hp, q, l, b), bb,
                                                 (uint32_t)(tag[q] * 1000 + l * 100 + b));
    }
    EXPECT_EQ_INT(checks_failed, 0);
    EXPECT_EQ_INT(data_failed, 0);
    struct host_pool_stats st;
    host_pool_get_stats(hp, &st);
    EXPECT(st.reserves > 100 && st.refusals > 0);
    host_pool_free(hp);
}

/* ---- a copy path wrapped to inject delays and failures ---- */

struct inject {
    const struct recall_copy_ops *inner;
    atomic_int ops;         /* transfer operations seen */
    int fail_at;            /* fail the transfer op with this index (0-based); -1: none */
    atomic_int fail_event;  /* event queries report a failure */
    double link_gbps;       /* emulated link: each transfer sleeps bytes / rate; 0: none */
    double event_latency_s; /* events complete this long after their record */
    double link_free;       /* issuer thread only */
    /* what the issuer passed (read after a wait): descriptor copies and kernel launches */
    int h2d_calls, gather_calls;
    const void *h2d_dst, *gather_desc; /* the last h2d's destination, the first gather's list */
    size_t h2d_bytes;
};

struct inj_event {
    _Atomic double ready;
};

static struct inject *inj(const struct recall_copy_ops *o)
{
    return o->user;
}

static void sleep_s(double s)
{
    double end = pulse_now() + s;
    for (double left = s; left > 0; left = end - pulse_now()) {
        struct timespec ts = {0, left > 200e-6 ? 100000 : 0};
        if (ts.tv_nsec) nanosleep(&ts, NULL);
    }
}

/* Counts a transfer op; returns nonzero when it is the one to fail, else emulates the link as
 * a virtual clock (the link is free again at link_free; oversleeping does not accumulate).
 * Transfer ops come from one issuer thread. */
static int transfer(const struct recall_copy_ops *o, size_t bytes)
{
    struct inject *j = inj(o);
    int k = atomic_fetch_add(&j->ops, 1);
    if (k == j->fail_at) return PULSE_ERR_IO;
    if (j->link_gbps > 0) {
        double now = pulse_now();
        j->link_free = (j->link_free > now ? j->link_free : now) + bytes / (j->link_gbps * 1e9);
        sleep_s(j->link_free - now);
    }
    return 0;
}

static int w_h2d(const struct recall_copy_ops *o, void *d, const void *s, size_t n, void *st)
{
    inj(o)->h2d_calls++;
    inj(o)->h2d_dst = d;
    inj(o)->h2d_bytes = n;
    int rc = transfer(o, n);
    return rc ? rc : inj(o)->inner->h2d(inj(o)->inner, d, s, n, st);
}

static int w_batch(const struct recall_copy_ops *o, void *const *d, const void *const *s,
                   const size_t *sz, size_t n, void *st)
{
    size_t b = 0;
    for (size_t i = 0; i < n; i++)
        b += sz[i];
    int rc = transfer(o, b);
    return rc ? rc : inj(o)->inner->batch(inj(o)->inner, d, s, sz, n, st);
}

static int w_scatter(const struct recall_copy_ops *o, const struct recall_desc *d, int n, void *st)
{
    int rc = transfer(o, 0); /* device-side: the link time was spent by the DMA */
    return rc ? rc : inj(o)->inner->scatter(inj(o)->inner, d, n, st);
}

static int w_gather(const struct recall_copy_ops *o, const struct recall_desc *d, int n, int bl,
                    int th, int kb, void *st)
{
    size_t b = 0;
    for (int i = 0; i < n; i++)
        b += d[i].bytes;
    if (!inj(o)->gather_calls++) inj(o)->gather_desc = d;
    int rc = transfer(o, b);
    return rc ? rc : inj(o)->inner->gather(inj(o)->inner, d, n, bl, th, kb, st);
}

static int w_event_create(const struct recall_copy_ops *o, void **ev)
{
    (void)o;
    struct inj_event *e = mem_alloc(MEM_HOST, sizeof *e, "test event");
    atomic_init(&e->ready, 0.0);
    *ev = e;
    return PULSE_OK;
}
static void w_event_destroy(const struct recall_copy_ops *o, void *ev)
{
    (void)o;
    mem_free(MEM_HOST, ev, sizeof(struct inj_event));
}
static int w_event_record(const struct recall_copy_ops *o, void *ev, void *st)
{
    (void)st;
    atomic_store(&((struct inj_event *)ev)->ready, pulse_now() + inj(o)->event_latency_s);
    return PULSE_OK;
}
static int w_event_query(const struct recall_copy_ops *o, void *ev)
{
    if (atomic_load(&inj(o)->fail_event)) return PULSE_ERR_IO;
    return pulse_now() >= atomic_load(&((struct inj_event *)ev)->ready);
}
static int w_event_sync(const struct recall_copy_ops *o, void *ev)
{
    (void)o;
    double left = atomic_load(&((struct inj_event *)ev)->ready) - pulse_now();
    if (left > 0) sleep_s(left);
    return PULSE_OK;
}

static struct recall_copy_ops wrap(struct inject *j)
{
    struct recall_copy_ops o = *recall_copy_ops_cpu();
    o.name = "cpu+inject";
    o.user = j;
    o.h2d = w_h2d;
    o.batch = w_batch;
    o.scatter = w_scatter;
    o.gather = w_gather;
    o.event_create = w_event_create;
    o.event_destroy = w_event_destroy;
    o.event_record = w_event_record;
    o.event_query = w_event_query;
    o.event_sync = w_event_sync;
    j->inner = recall_copy_ops_cpu();
    atomic_init(&j->ops, 0);
    atomic_init(&j->fail_event, 0);
    return o;
}

/* ---- recall fixtures: a pool of integer-valued chunks, a slot region with guard bytes ---- */

static struct host_pool *pool;
static char *dst_region;
static size_t dst_bytes = (size_t)96 << 20;

struct shape {
    size_t chunk; /* bytes per item */
    int n;        /* items */
    int src_skew; /* extra source offset (odd offsets exercise unaligned paths) */
    int dst_skew;
};

/* Random sources (whole blocks, head pieces, odd spans) and random destination slots of stride
 * chunk + 64 (the gaps stay GUARD), distinct across the recalls made since reset_slots(). */
static uint8_t used_dst[1 << 20];
static void reset_slots(void)
{
    memset(used_dst, 0, sizeof used_dst);
}

static void make_items(const struct shape *sh, struct recall_item *it)
{
    size_t bb = host_pool_block_bytes(pool), nblk = host_pool_bytes(pool) / bb;
    size_t span = sh->chunk + (size_t)sh->src_skew;
    size_t per_block = span <= bb ? bb / span : 1;
    size_t first_ok = span <= bb ? nblk : nblk - PULSE_CEIL_DIV(span, bb);
    size_t stride = ((sh->chunk + 64 + (size_t)sh->dst_skew) + 15) & ~(size_t)15;
    size_t nslots = dst_bytes / stride;
    PULSE_CHECK(nslots <= sizeof used_dst, "test slot map too small");
    size_t taken = 0;
    for (size_t i = 0; i < nslots; i++)
        taken += used_dst[i];
    PULSE_CHECK(taken + (size_t)sh->n <= nslots / 2, "test slot region too full");
    for (int i = 0; i < sh->n; i++) {
        size_t s = rnd() % (first_ok * per_block), d;
        do
            d = rnd() % nslots;
        while (used_dst[d]++);
        char *blk = host_pool_block_at(pool, (int64_t)(s / per_block));
        it[i].src = blk + (s % per_block) * span + (size_t)sh->src_skew;
        it[i].dst = dst_region + d * stride + 32 + (size_t)sh->dst_skew;
        it[i].bytes = sh->chunk;
    }
}

static int cmp_item_dst(const void *a, const void *b)
{
    const char *x = ((const struct recall_item *)a)->dst, *y = ((const struct recall_item *)b)->dst;
    return (x > y) - (x < y);
}

/* Every slot equals its source; every other byte of the region is GUARD. Restores the guard. */
static int verify_items(struct recall_item *it, int n)
{
    int bad = 0;
    for (int i = 0; i < n; i++)
        bad += memcmp(it[i].dst, it[i].src, it[i].bytes) != 0;
    qsort(it, (size_t)n, sizeof *it, cmp_item_dst);
    static char guard[1 << 16];
    memset(guard, GUARD, sizeof guard);
    char *p = dst_region;
    for (int i = 0; i <= n; i++) {
        char *end = i < n ? (char *)it[i].dst : dst_region + dst_bytes;
        for (size_t k; p < end; p += k) {
            k = PULSE_MIN((size_t)(end - p), sizeof guard);
            if (memcmp(p, guard, k))
                for (size_t q = 0; q < k; q++)
                    bad += (uint8_t)p[q] != GUARD;
        }
        if (i < n) {
            memset(it[i].dst, GUARD, it[i].bytes);
            p = (char *)it[i].dst + it[i].bytes;
        }
    }
    return bad;
}

/* prime: recall_params.prime of the next make_engine */
static int g_prime;
static int g_desc_host; /* make_engine: recall_params.zc_desc_host */

static struct recall *make_engine(enum recall_engine e, const struct recall_copy_ops *ops,
                                  size_t piece, double cap_gbps)
{
    char err[256];
    struct recall_params p;
    recall_params_init(&p, e, MAX_ITEMS);
    p.prime = g_prime;
    p.zc_desc_host = g_desc_host;
    p.ops = ops;
    p.gather_threads = 3;
    p.max_inflight = 3;
    p.spin_us = 20;
    if (piece) p.piece_bytes = piece;
    p.cap_gbps = cap_gbps;
    p.cap_unit_bytes = (size_t)256 << 10;
    p.host_base = host_pool_base(pool);
    p.host_bytes = host_pool_bytes(pool);
    struct recall *r = recall_create(&p, err, sizeof err);
    if (!r) fprintf(stderr, "recall_create %s: %s\n", recall_engine_name(e), err);
    return r;
}

static void test_engine_exact(enum recall_engine e, size_t piece)
{
    static const struct shape shapes[] = {
        {8192, 1, 0, 0},  {8192, 97, 0, 0}, {65536, 97, 0, 0}, {65536, 200, 0, 0},
        {1000, 97, 5, 3}, {48, 300, 0, 0},  {8192, 512, 0, 0}, {200000, 5, 16, 0},
    };
    struct recall *r = make_engine(e, recall_copy_ops_cpu(), piece, 0);
    EXPECT(r != NULL);
    if (!r) return;
    static struct recall_item it[3 * MAX_ITEMS]; /* recall q: it + q * n */
    int64_t bytes = 0, chunks = 0, recalls = 0;
    struct mem_stats m0, m1;
    for (size_t k = 0; k < PULSE_ARRAY_LEN(shapes); k++) {
        int nrec = k % 2 ? 3 : 1, n = shapes[k].n; /* odd shapes: three recalls in flight */
        int64_t t[3];
        if (k == 1) mem_get_stats(&m0);
        reset_slots();
        for (int q = 0; q < nrec; q++) {
            make_items(&shapes[k], it + q * n);
            EXPECT_EQ_INT(recall_submit(r, it + q * n, n, &t[q]), PULSE_OK);
            bytes += (int64_t)shapes[k].chunk * n;
            chunks += n;
            recalls++;
        }
        for (int q = 0; q < nrec; q++) {
            EXPECT_EQ_INT(recall_wait(r, t[q]), PULSE_OK);
            EXPECT_EQ_INT(recall_query(r, t[q]), 1);
        }
        int bad = verify_items(it, nrec * n);
        if (bad)
            fprintf(stderr, "%s piece %zu: shape %zu: %d bad bytes/items\n", recall_engine_name(e),
                    piece, k, bad);
        EXPECT_EQ_INT(bad, 0);
    }
    mem_get_stats(&m1);
    for (int kind = 0; kind < MEM_KINDS; kind++) /* nothing allocated per recall */
        EXPECT_EQ_INT(m1.alloc_calls[kind], m0.alloc_calls[kind]);
    struct recall_stats st;
    recall_get_stats(r, &st);
    EXPECT_EQ_INT(st.bytes, bytes);
    EXPECT_EQ_INT(st.chunks, chunks);
    EXPECT_EQ_INT(st.recalls, recalls);
    EXPECT_EQ_INT(st.completed, recalls);
    EXPECT_EQ_INT(st.failed + st.op_failures + st.refused, 0);
    EXPECT(st.submissions >= (e == RECALL_PER_BLOCK ? chunks : recalls));
    EXPECT(st.busy_s > 0);
    if (e == RECALL_GATHER_SCATTER)
        EXPECT(st.pieces >= recalls && st.gather_s > 0);
    else
        EXPECT_EQ_INT(st.pieces, 0);
    recall_free(r);
}

/* recall_prime does nothing by default; with recall_params.prime it wakes the engine's
 * sleeping threads (counted) and changes nothing of the recalls around it: once its threads
 * sleep (spin 20 us), a prime that wakes them, then a recall of 97 chunks that lands exactly
 * with another prime beside it. */
static void test_engine_prime(enum recall_engine e)
{
    struct recall *off = make_engine(e, recall_copy_ops_cpu(), 0, 0); /* prime off: a no-op */
    EXPECT(off != NULL);
    if (!off) return;
    struct timespec t5 = {0, 5 * 1000 * 1000};
    nanosleep(&t5, NULL);
    recall_prime(off);
    struct recall_stats so;
    recall_get_stats(off, &so);
    EXPECT_EQ_INT(so.primes, 0);
    recall_free(off);
    g_prime = 1;
    struct recall *r = make_engine(e, recall_copy_ops_cpu(), 0, 0);
    g_prime = 0;
    EXPECT(r != NULL);
    if (!r) return;
    static struct recall_item it[MAX_ITEMS];
    const struct shape sh = {65536, 97, 0, 0};
    struct recall_stats st;
    memset(&st, 0, sizeof st);
    for (int i = 0; i < 400 && st.primes == 0; i++) { /* until a thread slept (up to 2 s) */
        struct timespec ts = {0, 5 * 1000 * 1000};     /* 5 ms: well past the 20 us spin */
        nanosleep(&ts, NULL);
        recall_prime(r);
        recall_get_stats(r, &st);
    }
    EXPECT_EQ_INT(st.primes, 1);
    reset_slots();
    make_items(&sh, it);
    int64_t t;
    EXPECT_EQ_INT(recall_submit(r, it, sh.n, &t), PULSE_OK);
    recall_prime(r); /* beside a recall in flight: harmless either way */
    EXPECT_EQ_INT(recall_wait(r, t), PULSE_OK);
    EXPECT_EQ_INT(verify_items(it, sh.n), 0);
    recall_get_stats(r, &st);
    EXPECT(st.primes >= 1 && st.primes <= 2);
    EXPECT_EQ_INT(st.completed, 1);
    recall_free(r);
}

/* A recall that fails in its second transfer op is reported failed (status, counters), and
 * the next recall through the same engine is exact. */
static void test_engine_failure(enum recall_engine e)
{
    struct inject j = {0};
    struct recall_copy_ops o = wrap(&j);
    j.fail_at = 1;
    /* small pieces / a cap unit below the recall size, so every engine makes several ops */
    struct recall *r =
        make_engine(e, &o, 64 << 10, e == RECALL_BATCH || e == RECALL_ZERO_COPY ? 1000.0 : 0);
    EXPECT(r != NULL);
    if (!r) return;
    static struct recall_item it[MAX_ITEMS];
    struct shape sh = {65536, 40, 0, 0};
    int64_t t;
    reset_slots();
    make_items(&sh, it);
    EXPECT_EQ_INT(recall_submit(r, it, sh.n, &t), PULSE_OK);
    EXPECT_EQ_INT(recall_wait(r, t), PULSE_ERR_IO);
    EXPECT_EQ_INT(recall_query(r, t), PULSE_ERR_IO);
    struct recall_stats st;
    recall_get_stats(r, &st);
    EXPECT_EQ_INT(st.failed, 1);
    EXPECT_EQ_INT(st.completed, 0);
    EXPECT_EQ_INT(st.failed_bytes, 65536 * 40);
    EXPECT_EQ_INT(st.bytes, 0);
    EXPECT(st.op_failures >= 1);
    for (int i = 0; i < sh.n; i++)
        memset(it[i].dst, GUARD, it[i].bytes); /* undefined: reset */
    reset_slots();
    make_items(&sh, it);
    EXPECT_EQ_INT(recall_submit(r, it, sh.n, &t), PULSE_OK);
    EXPECT_EQ_INT(recall_wait(r, t), PULSE_OK);
    EXPECT_EQ_INT(verify_items(it, sh.n), 0);
    /* an event that reports failure fails the recall too */
    atomic_store(&j.fail_event, 1);
    reset_slots();
    make_items(&sh, it);
    EXPECT_EQ_INT(recall_submit(r, it, sh.n, &t), PULSE_OK);
    EXPECT_EQ_INT(recall_wait(r, t), PULSE_ERR_IO);
    atomic_store(&j.fail_event, 0);
    for (int i = 0; i < sh.n; i++)
        memset(it[i].dst, GUARD, it[i].bytes);
    recall_get_stats(r, &st);
    EXPECT_EQ_INT(st.failed, 2);
    EXPECT_EQ_INT(st.completed, 1);
    EXPECT_EQ_INT(st.bytes, 65536 * 40);
    recall_free(r);
}

/* Submission returns at once on a slow link; completion can be asynchronous; a wait that finds
 * its recall not yet issued spins for the issuer (counted). */
static void test_engine_zero_sync(enum recall_engine e)
{
    struct inject j = {0};
    struct recall_copy_ops o = wrap(&j);
    j.fail_at = -1;
    j.link_gbps = 0.05;       /* 2 MB take 40 ms */
    j.event_latency_s = 0.01; /* and the device finishes 10 ms after the last op */
    struct recall *r = make_engine(e, &o, 0, 0);
    EXPECT(r != NULL);
    if (!r) return;
    static struct recall_item it[MAX_ITEMS];
    struct shape sh = {65536, 32, 0, 0};
    reset_slots();
    make_items(&sh, it);
    int64_t t;
    double t0 = pulse_now();
    EXPECT_EQ_INT(recall_submit(r, it, sh.n, &t), PULSE_OK);
    double t_submit = pulse_now() - t0;
    EXPECT_EQ_INT(recall_query(r, t), 0);
    EXPECT(t_submit < 0.01);
    EXPECT_EQ_INT(recall_wait(r, t), PULSE_OK);
    double t_all = pulse_now() - t0;
    EXPECT(t_all > 0.045);
    EXPECT_EQ_INT(recall_query(r, t), 1);
    EXPECT_EQ_INT(verify_items(it, sh.n), 0);
    /* the wait found its recall still being issued (the emulated link holds the issuer for
     * 40 ms): it spun for it once, then slept; a wait on a done recall does not spin */
    EXPECT_EQ_INT(recall_wait(r, t), PULSE_OK);
    struct recall_stats st;
    recall_get_stats(r, &st);
    EXPECT_EQ_INT(st.wait_spins, 1);
    json_t *sj = recall_stats_json(&st);
    EXPECT_EQ_INT(json_integer_value(json_object_get(sj, "wait_spins")), 1);
    json_decref(sj);
    fprintf(stderr, "%-15s zero-sync: submit %.3f ms, complete %.1f ms\n", recall_engine_name(e),
            t_submit * 1e3, t_all * 1e3);
    recall_free(r);
}

/* Best achieved GB/s over 3 recalls of 16 MiB through an engine capped at cap_gbps. */
static double capped_rate(enum recall_engine e, const struct recall_copy_ops *o, double cap_gbps,
                          double *cap_wait_s)
{
    struct recall *r = make_engine(e, o, (size_t)256 << 10, cap_gbps);
    EXPECT(r != NULL);
    if (!r) return 0;
    static struct recall_item it[MAX_ITEMS];
    struct shape sh = {65536, 256, 0, 0};
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        reset_slots();
        make_items(&sh, it);
        int64_t t;
        double t0 = pulse_now();
        EXPECT_EQ_INT(recall_submit(r, it, sh.n, &t), PULSE_OK);
        EXPECT_EQ_INT(recall_wait(r, t), PULSE_OK);
        double gbs = 65536.0 * sh.n / (pulse_now() - t0) / 1e9;
        best = gbs > best ? gbs : best;
        EXPECT_EQ_INT(verify_items(it, sh.n), 0);
    }
    struct recall_stats st;
    recall_get_stats(r, &st);
    *cap_wait_s = st.cap_wait_s;
    recall_free(r);
    return best;
}

/* The cap on an emulated link of 1 GB/s: a cap above what the path achieves does not speed it
 * up; a cap at 0.3 of that (at most 0.2 GB/s) is held: never above it by more than 5 %, and not
 * far below it. The uncapped rate is measured
 * first, since sanitizers slow the copies themselves below the link. */
static void test_engine_cap(enum recall_engine e)
{
    struct inject j = {0};
    struct recall_copy_ops o = wrap(&j);
    j.fail_at = -1;
    j.link_gbps = 1.0;
    double wait_s;
    double free_gbs = capped_rate(e, &o, 4.0, &wait_s);
    EXPECT(free_gbs < 1.05 * j.link_gbps);
    double cap = PULSE_MIN(0.2, 0.3 * free_gbs);
    double got = capped_rate(e, &o, cap, &wait_s);
    fprintf(stderr, "%-15s on a 1 GB/s link: uncapped %.3f GB/s; cap %.3f GB/s: achieved %.3f\n",
            recall_engine_name(e), free_gbs, cap, got);
    /* the cap holds (never 5 % above it); below it only by what a loaded machine's scheduling
     * costs (the test failed once under a parallel ctest here) */
    EXPECT(got <= 1.05 * cap);
    EXPECT(got >= 0.6 * cap);
    EXPECT(wait_s > 0); /* the cap, not the link, set the pace */
}

/* Zero-copy: the issuer copies the recall's descriptors (device addresses of the items) into
 * the copy path's device memory with one h2d, then launches the kernels on that copy: one
 * launch without a cap, one per pacing unit with one. With zc_desc_host no copy: the kernels
 * read the pinned ring through its mapping. */
static void test_zero_copy_descriptors(void)
{
    static struct recall_item it[MAX_ITEMS];
    struct shape sh = {8192, 97, 0, 0}; /* 776 KiB: four 256 KiB cap units */
    for (int host = 0; host < 2; host++)
        for (int capped = 0; capped < 2; capped++) {
            struct inject j = {0};
            struct recall_copy_ops o = wrap(&j);
            j.fail_at = -1;
            g_desc_host = host;
            struct recall *r = make_engine(RECALL_ZERO_COPY, &o, 0, capped ? 1000.0 : 0);
            g_desc_host = 0;
            EXPECT(r != NULL);
            if (!r) return;
            reset_slots();
            make_items(&sh, it);
            int64_t t;
            EXPECT_EQ_INT(recall_submit(r, it, sh.n, &t), PULSE_OK);
            EXPECT_EQ_INT(recall_wait(r, t), PULSE_OK);
            EXPECT_EQ_INT(j.h2d_calls, host ? 0 : 1);
            if (!host) EXPECT_EQ_INT(j.h2d_bytes, sh.n * sizeof(struct recall_desc));
            EXPECT_EQ_INT(j.gather_calls, capped ? 4 : 1);
            if (!host) EXPECT(j.gather_desc == j.h2d_dst);
            const struct recall_desc *d = j.gather_desc;
            int same = 0;
            for (int i = 0; d && i < sh.n; i++) /* the cpu path maps host memory to itself */
                same += d[i].src == (uintptr_t)it[i].src && d[i].dst == (uintptr_t)it[i].dst &&
                        d[i].bytes == it[i].bytes;
            EXPECT_EQ_INT(same, sh.n);
            EXPECT_EQ_INT(verify_items(it, sh.n), 0);
            struct recall_stats st;
            recall_get_stats(r, &st);
            EXPECT_EQ_INT(st.submissions, (host ? 0 : 1) + j.gather_calls);
            recall_free(r);
        }
}

static void test_bad_input(void)
{
    char err[256];
    struct recall_params p;
    recall_params_init(&p, RECALL_GATHER_SCATTER, 0);
    EXPECT(recall_create(&p, err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "max_items");
    recall_params_init(&p, RECALL_GATHER_SCATTER, 4);
    p.n_stage = 1;
    EXPECT(recall_create(&p, err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "stages");
    recall_params_init(&p, RECALL_ZERO_COPY, 4);
    p.zc_threads = 100;
    EXPECT(recall_create(&p, err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "zero-copy");
    recall_params_init(&p, RECALL_PER_BLOCK, 4);
    p.cap_gbps = -1;
    EXPECT(recall_create(&p, err, sizeof err) == NULL);
    EXPECT_EQ_INT(recall_engine_find("gather-scatter"), RECALL_GATHER_SCATTER);
    EXPECT_EQ_INT(recall_engine_find("warp-drive"), -1);
    recall_params_init(&p, RECALL_PER_BLOCK, 4);
    p.max_inflight = 1;
    struct recall *r = recall_create(&p, err, sizeof err);
    EXPECT(r != NULL);
    if (!r) return;
    char a[64], b[64];
    struct recall_item it[5] = {{a, b, 64}, {a, b, 64}, {a, b, 64}, {a, b, 64}, {a, b, 64}};
    int64_t t, t2;
    EXPECT_EQ_INT(recall_submit(r, it, 0, &t), PULSE_ERR_INVALID);
    EXPECT_EQ_INT(recall_submit(r, it, 5, &t), PULSE_ERR_INVALID);
    it[0].bytes = 0;
    EXPECT_EQ_INT(recall_submit(r, it, 1, &t), PULSE_ERR_INVALID);
    it[0].bytes = 64;
    it[0].src = NULL;
    EXPECT_EQ_INT(recall_submit(r, it, 1, &t), PULSE_ERR_INVALID);
    it[0].src = a;
    memset(a, 7, sizeof a);
    EXPECT_EQ_INT(recall_query(r, 0), PULSE_ERR_INVALID); /* not submitted yet */
    EXPECT_EQ_INT(recall_submit(r, it, 1, &t), PULSE_OK);
    EXPECT_EQ_INT(recall_wait(r, t), PULSE_OK);
    EXPECT_EQ_INT(recall_submit(r, it, 1, &t2), PULSE_OK); /* the one slot was reused */
    EXPECT_EQ_INT(recall_query(r, t), PULSE_ERR_INVALID);  /* so the old ticket expired */
    EXPECT_EQ_INT(recall_wait(r, t2), PULSE_OK);
    EXPECT_EQ_INT(memcmp(a, b, 64), 0);
    recall_free(r);
}

/* pulse recall-bench on the CPU: exit 0, the JSON's main fields; bad flags exit 2. */
static int run(const char *args, char *out, size_t cap)
{
    const char *bin = getenv("PULSE_BIN");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", bin ? bin : "./build/pulse", args);
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, cap - 1, p) : 0;
    out[n] = 0;
    int st = p ? pclose(p) : -1;
    return (st != -1 && WIFEXITED(st)) ? WEXITSTATUS(st) : -1;
}

static void test_cli(void)
{
    static char out[1 << 16];
    char path[64], args[512];
    snprintf(path, sizeof path, "/tmp/test_recall_%d.json", (int)getpid());
    snprintf(args, sizeof args,
             "recall-bench --backend cpu --sizes 8K,64K --counts 4,64 --reps 2 --warmup 0 "
             "--caps 0.5 --cap-chunk 64K --cap-count 16 --gs-threads 2 --pool-bytes 32M "
             "--zc-inflight-kb 64 --pin alloc --out %s",
             path);
    EXPECT_EQ_INT(run(args, out, sizeof out), 0);
    json_error_t je;
    json_t *r = json_load_file(path, 0, &je);
    EXPECT(r != NULL);
    if (r) {
        EXPECT_EQ_INT(json_integer_value(json_object_get(r, "schema_version")), 1);
        EXPECT(json_object_get(json_object_get(r, "peak"), "GBps") != NULL);
        EXPECT_EQ_INT(json_array_size(json_object_get(r, "sweep")), 4 * 2 * 2);
        EXPECT_EQ_INT(json_array_size(json_object_get(r, "cap")), 4);
        json_t *pt = json_array_get(json_object_get(r, "sweep"), 0);
        EXPECT(json_is_array(json_object_get(pt, "samples_s")));
        EXPECT(json_object_get(pt, "fraction_of_peak") != NULL);
        EXPECT(json_is_true(json_object_get(pt, "verified")));
        /* the shared options reach the engines and the config: theirs and the defaults */
        json_t *cfg = json_object_get(r, "config"), *op = json_object_get(cfg, "options");
        EXPECT_EQ_INT(json_integer_value(json_object_get(cfg, "gather_threads")), 2);
        EXPECT_EQ_INT(json_integer_value(json_object_get(op, "gs_threads")), 2);
        EXPECT_EQ_INT(json_integer_value(json_object_get(op, "zc_inflight_kb")), 64);
        EXPECT_EQ_INT(json_integer_value(json_object_get(op, "zc_blocks")), 16);
        EXPECT_STR_CONTAINS(json_string_value(json_object_get(op, "pin")), "alloc");
        EXPECT(json_object_get(op, "cpu_threads") == NULL); /* not recall-bench's */
        json_decref(r);
    }
    remove(path);
    static const struct {
        const char *args, *msg;
    } bad[] = {
        {"recall-bench --bogus", "unknown or incomplete option '--bogus'"},
        {"recall-bench --backend cpu --sizes 8Q", "--sizes: '8Q'"},
        {"recall-bench --backend cpu --counts 0", "--counts: '0'"},
        {"recall-bench --backend cpu --engines per-block,warp", "--engines: unknown engine 'warp'"},
        {"recall-bench --backend cpu --caps 1.5", "--caps: '1.5'"},
        {"recall-bench --backend cpu --reps 0", "--reps: '0' is not an integer"},
        {"recall-bench --backend cpu extra", "unexpected argument 'extra'"},
        {"recall-bench --backend cpu --gs-stages 1",
         "--gs-stages: '1' is not an integer in [2, 64]"},
        {"recall-bench --backend cpu --threads 2", "unknown or incomplete option '--threads'"},
        {"recall-bench --backend cpu --cpu-threads 2", "unknown or incomplete option"},
    };
    for (size_t i = 0; i < PULSE_ARRAY_LEN(bad); i++) {
        EXPECT_EQ_INT(run(bad[i].args, out, sizeof out), 2);
        EXPECT_STR_CONTAINS(out, bad[i].msg);
    }
    EXPECT_EQ_INT(run("recall-bench --help", out, sizeof out), 0);
    EXPECT_STR_CONTAINS(out, "usage: pulse recall-bench");
}

int main(void)
{
    char err[256];
    test_host_pool_layout();
    test_host_pool_plan();
    test_host_numa();
    test_host_pool_keep();
    test_host_pool_random();
    struct host_pool_params pp = {1, 8, 128, 16, 2, (size_t)32 << 20, 1, 16, 0};
    pool = host_pool_create(&pp, err, sizeof err);
    dst_region = mem_alloc(MEM_HOST, dst_bytes, "test slots");
    PULSE_CHECK(pool && dst_region, err);
    for (int64_t b = 0; b < (int64_t)(host_pool_bytes(pool) / 65536); b++)
        fill_block(host_pool_block_at(pool, b), 65536, (uint32_t)b + 7);
    memset(dst_region, GUARD, dst_bytes);
    for (int e = 0; e < RECALL_ENGINES; e++) {
        test_engine_exact((enum recall_engine)e, 0);
        if (e == RECALL_GATHER_SCATTER) test_engine_exact((enum recall_engine)e, 24 << 10);
        test_engine_failure((enum recall_engine)e);
        test_engine_prime((enum recall_engine)e);
        test_engine_zero_sync((enum recall_engine)e);
        test_engine_cap((enum recall_engine)e);
    }
    test_zero_copy_descriptors();
    test_bad_input();
    test_cli();
    mem_free(MEM_HOST, dst_region, dst_bytes);
    host_pool_free(pool);
    return tu_finish("test_recall");
}
