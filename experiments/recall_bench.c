/* pulse recall-bench: the recall I/O microbenchmark (DESIGN.md section 6; the paper's figure 8).
 * In one run, against the single-copy H2D peak measured in the same run:
 *   sweep         every engine's bandwidth vs chunk size and chunk count: random chunks of the
 *                 pinned host pool into random slots of a device region (wall time from submit
 *                 to completion, median of --reps; a sample of every point's chunks is checked
 *                 bit for bit afterwards); and the zero-copy kernel alone on the same chunks
 *                 (device time around the kernel, its descriptors already in device memory),
 *                 which separates the kernel's rate from the engine's overhead
 *   cap           achieved / target at fractions of the peak, per engine
 *   interference  the slowdown of a GEMM-bound kernel (cuBLAS bf16 8192^3) and of an
 *                 attention-bound one (attn_decode over 2 GiB of paged KV) while zero-copy
 *                 recalls with 4..64 blocks run beside them, and the zero-copy bandwidth then
 * Runs on the CPU backend too (the CPU copy path; no interference part), for CI. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "host_pool.h"
#include "metrics.h"
#include "recall.h"
#include "recall_bench.h"
#include "results.h"

static const char usage[] =
    "usage: pulse recall-bench [options]\n"
    "  Recall I/O microbenchmark: the single-copy H2D peak; every engine's bandwidth vs chunk\n"
    "  size and count (random host-pool chunks into random GPU slots); the cap at fractions of\n"
    "  the peak; the cost of zero-copy to a GEMM and to an attention kernel running beside it.\n"
    "  --backend B        cpu, cuda or auto (default auto)\n"
    "  --engines LIST     default per-block,gather-scatter,zero-copy,batch\n"
    "  --sizes LIST       chunk sizes, K/M suffixes (default 8K,16K,32K,64K,128K,256K,1M)\n"
    "  --counts LIST      chunks per recall (default 64,256,1024,4096,8192)\n"
    "  --reps N           timed repetitions per point, median reported (default 5)\n"
    "  --warmup N         untimed repetitions first (default 1)\n"
    "  --caps LIST        cap fractions of the peak (default 0.4,0.6,0.8)\n"
    "  --cap-chunk SIZE   chunk of the cap points (default 256K); --cap-count N (default 1024)\n"
    "  --cap-unit SIZE    pacing unit of the non-staged engines (default 4M); --cap-burst SIZE\n"
    "                     the bucket's depth (default 4M)\n"
    "  --zc-grids LIST    zero-copy grids beside compute (default 4,8,16,32,64)\n"
    "  --no-interference  skip the runs beside compute\n"
    "  --zc-threads N     threads of a zero-copy gather block (default 512); the sweep's grid and\n"
    "                     its kernel-alone column: --zc-blocks (below; default 16 here)\n"
    "  --pool-bytes SIZE  host pool (default 1.25 x the largest recall, at least --peak-bytes)\n"
    "  --peak-bytes SIZE  the single copy (default 512M on cuda, 64M on cpu)\n"
    "  --seed S           default 1\n"
    "  --quick            small grid: sizes 8K,64K,1M, counts 64,1024, 3 reps, grids 4,16,64\n"
    "  --out FILE         result JSON\n"
    "  The gather-scatter engine's threads, piece, stages and stores: --gs-threads, "
    "--gs-piece-kb,\n"
    "  --gs-stages, --gs-nt-stores (below).\n";

/* ---- parsing ---- */

/* Splits a comma list; calls each(item, index) for every element. */
static int parse_list(const char *flag, const char *s, int *n,
                      int (*each)(const char *, int, void *), void *ctx)
{
    return cli_list(CMD, flag, s, MAX_LIST, n, each, ctx);
}

static int each_size(const char *t, int i, void *c)
{
    if (!cli_parse_size(t, &((size_t *)c)[i]) && ((size_t *)c)[i] <= ((size_t)1 << 30)) return 0;
    cli_error(CMD, "--sizes: '%s' is not a size in bytes (e.g. 8K, 64K, 1M; at most 1G)", t);
    return -1;
}
static int each_count(const char *t, int i, void *c)
{
    return cli_int(CMD, "--counts", t, 1, 1 << 20, &((long *)c)[i]);
}
static int each_grid(const char *t, int i, void *c)
{
    return cli_int(CMD, "--zc-grids", t, 1, 65535, &((long *)c)[i]);
}
static int each_cap(const char *t, int i, void *c)
{
    return cli_double(CMD, "--caps", t, 0.01, 1.0, &((double *)c)[i]);
}
static int each_engine(const char *t, int i, void *c)
{
    int e = recall_engine_find(t);
    if (e < 0)
        return cli_error(CMD,
                         "--engines: unknown engine '%s' (known: per-block, "
                         "gather-scatter, zero-copy, batch)",
                         t),
               -1;
    ((int *)c)[i] = e;
    return 0;
}

static int size_flag(const char *flag, const char *s, size_t *out)
{
    if (!cli_parse_size(s, out)) return 0;
    cli_error(CMD, "%s: '%s' is not a size in bytes (e.g. 256K, 2M, 12G)", flag, s);
    return -1;
}

static void defaults(struct opts *o)
{
    static const size_t sizes[] = {8 << 10,   16 << 10,  32 << 10, 64 << 10,
                                   128 << 10, 256 << 10, 1 << 20};
    static const long counts[] = {64, 256, 1024, 4096, 8192}, grids[] = {4, 8, 16, 32, 64};
    static const double caps[] = {0.4, 0.6, 0.8};
    if (!o->n_sizes)
        for (int i = 0; i < 7; i++)
            if (!o->quick || i == 0 || i == 3 || i == 6) o->sizes[o->n_sizes++] = sizes[i];
    if (!o->n_counts)
        for (int i = 0; i < 5; i++)
            if (!o->quick || i == 0 || i == 2) o->counts[o->n_counts++] = counts[i];
    if (!o->n_grids)
        for (int i = 0; i < 5; i++)
            if (!o->quick || i % 2 == 0) o->grids[o->n_grids++] = grids[i];
    if (!o->n_caps)
        for (int i = 0; i < 3; i++)
            o->caps[o->n_caps++] = caps[i];
    if (!o->n_engines)
        for (int i = 0; i < RECALL_ENGINES; i++)
            o->engines[o->n_engines++] = i;
    if (o->reps < 0) o->reps = o->quick ? 3 : 5;
}

static int parse(int argc, char **argv, struct opts *o)
{
    enum {
        O_ENG = 256,
        O_SIZES,
        O_COUNTS,
        O_REPS,
        O_WARM,
        O_CAPS,
        O_CCHUNK,
        O_CUNIT,
        O_CBURST,
        O_CCOUNT,
        O_GRIDS,
        O_NOINT,
        O_ZCT,
        O_POOL,
        O_PEAK,
        O_SEED,
        O_QUICK,
        O_OUT,
        O_BACKEND,
        O_HELP
    };
    static const struct option own[] = {{"backend", 1, 0, O_BACKEND},
                                        {"engines", 1, 0, O_ENG},
                                        {"sizes", 1, 0, O_SIZES},
                                        {"counts", 1, 0, O_COUNTS},
                                        {"reps", 1, 0, O_REPS},
                                        {"warmup", 1, 0, O_WARM},
                                        {"caps", 1, 0, O_CAPS},
                                        {"cap-chunk", 1, 0, O_CCHUNK},
                                        {"cap-unit", 1, 0, O_CUNIT},
                                        {"cap-burst", 1, 0, O_CBURST},
                                        {"cap-count", 1, 0, O_CCOUNT},
                                        {"zc-grids", 1, 0, O_GRIDS},
                                        {"no-interference", 0, 0, O_NOINT},
                                        {"zc-threads", 1, 0, O_ZCT},
                                        {"pool-bytes", 1, 0, O_POOL},
                                        {"peak-bytes", 1, 0, O_PEAK},
                                        {"seed", 1, 0, O_SEED},
                                        {"quick", 0, 0, O_QUICK},
                                        {"out", 1, 0, O_OUT},
                                        {"help", 0, 0, O_HELP},
                                        {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->backend = "auto";
    o->reps = -1;
    o->warmup = 1;
    o->cap_chunk = 256 << 10;
    o->cap_count = 1024;
    o->zc_threads = 512;
    o->seed = 1;
    runtime_opts_init(&o->rt);
    o->rt.offload.recall.zc_blocks = 16; /* the sweep's grid: the kernel at its rate */
    struct option opts[64];
    PULSE_CHECK(runtime_opts_getopt(own, RB_RT, opts, 64) == 0, CMD ": the options' table");
    int c, bad = 0;
    opterr = 0;
    optind = 1;
    struct cli_seen seen = {0};
    while (!bad && (c = cli_getopt(CMD, argc, argv, opts, &seen)) != -1) {
        switch (c) {
        case O_BACKEND:
            o->backend = optarg;
            break;
        case O_OUT:
            o->out = optarg;
            break;
        case O_QUICK:
            o->quick = 1;
            break;
        case O_NOINT:
            o->no_interf = 1;
            break;
        case O_ENG:
            bad = parse_list("--engines", optarg, &o->n_engines, each_engine, o->engines);
            break;
        case O_SIZES:
            bad = parse_list("--sizes", optarg, &o->n_sizes, each_size, o->sizes);
            break;
        case O_COUNTS:
            bad = parse_list("--counts", optarg, &o->n_counts, each_count, o->counts);
            break;
        case O_GRIDS:
            bad = parse_list("--zc-grids", optarg, &o->n_grids, each_grid, o->grids);
            break;
        case O_CAPS:
            bad = parse_list("--caps", optarg, &o->n_caps, each_cap, o->caps);
            break;
        case O_REPS:
            bad = cli_int(CMD, "--reps", optarg, 1, MAX_REPS, &o->reps);
            break;
        case O_WARM:
            bad = cli_int(CMD, "--warmup", optarg, 0, 100, &o->warmup);
            break;
        case O_CCOUNT:
            bad = cli_int(CMD, "--cap-count", optarg, 1, 1 << 20, &o->cap_count);
            break;
        case O_ZCT:
            bad = cli_int(CMD, "--zc-threads", optarg, 32, 1024, &o->zc_threads);
            break;
        case O_CUNIT:
            bad = size_flag("--cap-unit", optarg, &o->cap_unit);
            break;
        case O_CBURST:
            bad = size_flag("--cap-burst", optarg, &o->cap_burst);
            break;
        case O_CCHUNK:
            bad = size_flag("--cap-chunk", optarg, &o->cap_chunk);
            break;
        case O_POOL:
            bad = size_flag("--pool-bytes", optarg, &o->pool_bytes);
            break;
        case O_PEAK:
            bad = size_flag("--peak-bytes", optarg, &o->peak_bytes);
            break;
        case O_SEED:
            bad = cli_u64(CMD, "--seed", optarg, INT64_MAX, &o->seed);
            break;
        case O_HELP:
            fputs(usage, stdout);
            runtime_opts_usage(stdout, RB_RT, &o->rt);
            return 1;
        default:
            if (runtime_opts_code(c)) {
                bad = runtime_opts_flag(CMD, &o->rt, c, optarg);
                break;
            }
            cli_unknown_flag(CMD, argc, argv);
            return -1;
        }
    }
    if (bad) return -1;
    if (cli_no_extra_args(CMD, argc, argv)) return -1;
    static const char *const out_flag[] = {"--out"};
    if (cli_outputs(CMD, 1, out_flag, &o->out)) return -1;
    if (o->zc_threads % 32)
        return cli_error(CMD, "--zc-threads: '%ld' is not a multiple of 32", o->zc_threads), -1;
    o->rt.offload.recall.zc_threads = (int)o->zc_threads;
    defaults(o);
    return 0;
}

/* ---- setup ---- */

static uint64_t rnd(struct bench *b)
{
    b->rng ^= b->rng << 13;
    b->rng ^= b->rng >> 7;
    b->rng ^= b->rng << 17;
    return b->rng;
}

static int setup(struct bench *b, json_t *res, char *err, size_t errlen)
{
    const struct opts *o = &b->o;
    /* sized for every recall of the run: the sweep, the cap points and the interference runs */
    size_t max_recall = ZC_CHUNK * ZC_COUNT, min_chunk = PULSE_MIN(o->cap_chunk, ZC_CHUNK);
    b->max_count = PULSE_MAX((int)o->cap_count, ZC_COUNT);
    b->max_chunk = PULSE_MAX(o->cap_chunk, ZC_CHUNK);
    for (int i = 0; i < o->n_sizes; i++) {
        min_chunk = PULSE_MIN(min_chunk, o->sizes[i]);
        b->max_chunk = PULSE_MAX(b->max_chunk, o->sizes[i]);
        for (int j = 0; j < o->n_counts; j++) {
            max_recall = PULSE_MAX(max_recall, o->sizes[i] * (size_t)o->counts[j]);
            b->max_count = PULSE_MAX(b->max_count, (int)o->counts[j]);
        }
    }
    max_recall = PULSE_MAX(max_recall, o->cap_chunk * (size_t)o->cap_count);
    size_t want = max_recall + max_recall / 4;
    b->pool_bytes = o->pool_bytes ? o->pool_bytes : PULSE_MAX(want, o->peak_bytes);
    b->pool_bytes = (b->pool_bytes + 65535) & ~(size_t)65535;
    b->dst_bytes = PULSE_MAX(want, o->peak_bytes);
    if (b->pool_bytes < o->peak_bytes || b->pool_bytes < max_recall) {
        snprintf(err, errlen,
                 "--pool-bytes: %zu bytes cannot hold the largest recall (%zu) "
                 "and the peak copy (%zu)",
                 b->pool_bytes, max_recall, o->peak_bytes);
        return EXIT_USAGE;
    }
    struct host_pool_params hp = {1, 8, 128, 16, 2, b->pool_bytes, 1, 16, b->be->mem == MEM_DEVICE};
    if (!(b->pool = host_pool_create_ex(&hp, &o->rt.offload.pin, err, errlen))) return EXIT_OOM;
    b->h_pool = host_pool_base(b->pool);
    struct host_pool_stats hs;
    host_pool_get_stats(b->pool, &hs);
    json_object_set_new(res, "host_pool",
                        json_pack("{s:I,s:b,s:f}", "bytes", (json_int_t)hs.pool_bytes, "pinned",
                                  hs.pinned, "pin_seconds", hs.pin_seconds));
    b->perm_n = PULSE_MAX(b->pool_bytes, b->dst_bytes) / min_chunk;
    b->perm = mem_alloc(MEM_HOST, b->perm_n * 4, "bench perm");
    b->items = mem_alloc(MEM_HOST, sizeof *b->items * (size_t)b->max_count, "bench items");
    b->h_check = mem_alloc(MEM_HOST, b->max_chunk, "bench check");
    b->d_dst = mem_alloc(b->be->mem, b->dst_bytes, "bench slots");
    size_t kd = sizeof(struct recall_desc) * (size_t)b->max_count;
    b->h_kdesc = mem_alloc(MEM_HOST, kd, "bench kernel descs");
    b->d_kdesc = mem_alloc(b->be->mem, kd, "bench kernel descs");
    void *dp = NULL;
    if (b->ops->map_host(b->ops, b->h_pool, &dp)) {
        snprintf(err, errlen, "the %s copy path cannot map the host pool", b->ops->name);
        return 1;
    }
    b->d_pool = dp;
    if (!b->perm || !b->items || !b->h_check || !b->d_dst || !b->h_kdesc || !b->d_kdesc) {
        snprintf(err, errlen, "cannot allocate %zu bytes of %s memory for the slots", b->dst_bytes,
                 mem_kind_name(b->be->mem));
        return EXIT_OOM;
    }
    /* position-unique words, so a chunk that lands in the wrong slot is caught */
    uint64_t *w = (uint64_t *)b->h_pool;
    for (size_t i = 0, n = host_pool_bytes(b->pool) / 8; i < n; i++)
        w[i] = (i + 1) * 0x9E3779B97F4A7C15ull ^ o->seed;
    b->be->memset(&b->ctx, b->d_dst, 0x5a, b->dst_bytes);
    b->be->sync(&b->ctx);
    return 0;
}

/* n distinct random chunk-aligned sources in the pool and slots in the device region. */
void recall_bench_pick(struct bench *b, size_t chunk, int n)
{
    for (int side = 0; side < 2; side++) {
        size_t slots = (side ? b->dst_bytes : host_pool_bytes(b->pool)) / chunk;
        for (size_t i = 0; i < slots; i++)
            b->perm[i] = (uint32_t)i;
        for (int i = 0; i < n; i++) {
            size_t j = i + rnd(b) % (slots - i);
            uint32_t t = b->perm[i];
            b->perm[i] = b->perm[j];
            b->perm[j] = t;
            if (side)
                b->items[i].dst = b->d_dst + (size_t)b->perm[i] * chunk;
            else
                b->items[i].src = b->h_pool + (size_t)b->perm[i] * chunk;
            b->items[i].bytes = chunk;
        }
    }
}

/* Up to VERIFY_ITEMS chunks (first, last, random) read back and compared with their source. */
static int verify(struct bench *b, int n)
{
    for (int k = 0; k < PULSE_MIN(n, VERIFY_ITEMS); k++) {
        int i = k == 0 ? 0 : k == 1 ? n - 1 : (int)(rnd(b) % (uint64_t)n);
        b->be->download(&b->ctx, b->h_check, b->items[i].dst, b->items[i].bytes);
        if (memcmp(b->h_check, b->items[i].src, b->items[i].bytes)) return 0;
    }
    return 1;
}

struct recall *recall_bench_engine(struct bench *b, int e, int max_items, double cap_gbps,
                                   int zc_blocks, char *err, size_t errlen)
{
    struct recall_params p = b->o.rt.offload.recall; /* recall_params_init's, and the flags' */
    p.engine = (enum recall_engine)e;
    p.max_items = max_items;
    p.max_inflight = 2;
    p.zc_blocks = zc_blocks;
    p.cap_gbps = cap_gbps;
    if (b->o.cap_unit) p.cap_unit_bytes = b->o.cap_unit;
    if (b->o.cap_burst) p.cap_burst_bytes = b->o.cap_burst;
    p.host_base = b->h_pool;
    p.host_bytes = host_pool_bytes(b->pool);
    p.ops = b->ops;
    return recall_create(&p, err, errlen);
}

/* warmup + reps recalls of items[0..n); wall seconds per timed recall into s; the engine's
 * stats cover the timed recalls only. */
int recall_bench_time(struct bench *b, struct recall *r, int n, double *s)
{
    for (int i = 0; i < b->o.warmup + b->o.reps; i++) {
        int64_t t;
        if (i == b->o.warmup) recall_reset_stats(r);
        double t0 = pulse_now();
        int rc = recall_submit(r, b->items, n, &t);
        if (!rc) rc = recall_wait(r, t);
        if (rc) return rc;
        if (i >= b->o.warmup) s[i - b->o.warmup] = pulse_now() - t0;
    }
    return 0;
}

json_t *recall_bench_samples(const double *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_real(v[i]));
    return a;
}

double recall_bench_median(const double *v, int n)
{
    struct dist_summary d;
    metrics_summarize(v, n, &d);
    return d.median;
}

static json_t *stats_json(struct recall *r)
{
    struct recall_stats st;
    recall_get_stats(r, &st);
    return recall_stats_json(&st);
}

/* ---- the parts of the run ---- */

static void measure_peak(struct bench *b, json_t *res)
{
    const struct recall_copy_ops *o = b->ops;
    void *st, *e0, *e1;
    double s[MAX_REPS];
    int reps = (int)b->o.reps;
    PULSE_CHECK(!o->stream_create(o, &st) && !o->event_create(o, &e0) && !o->event_create(o, &e1),
                "recall-bench: streams and events");
    for (int i = -1; i < reps; i++) {
        float ms = 0;
        PULSE_CHECK(!o->event_record(o, e0, st) &&
                        !o->h2d(o, b->d_dst, b->h_pool, b->o.peak_bytes, st) &&
                        !o->event_record(o, e1, st) && !o->event_sync(o, e1) &&
                        !o->event_elapsed_ms(o, e0, e1, &ms),
                    "recall-bench: the peak copy");
        if (i >= 0) s[i] = PULSE_MAX(ms * 1e-3, 1e-9);
    }
    double med = recall_bench_median(s, reps);
    b->peak = (double)b->o.peak_bytes / med / 1e9;
    json_object_set_new(res, "peak",
                        json_pack("{s:I,s:o,s:f,s:f}", "bytes", (json_int_t)b->o.peak_bytes,
                                  "samples_s", recall_bench_samples(s, reps), "median_s", med,
                                  "GBps", b->peak));
    printf("single-copy H2D peak (%zu MiB): %.2f GB/s\n", b->o.peak_bytes >> 20, b->peak);
    o->event_destroy(o, e0);
    o->event_destroy(o, e1);
    o->stream_destroy(o, st);
}

/* The zero-copy kernel alone on b->items[0..n), as the engine launches it (the copy path's
 * gather, --zc-blocks x --zc-threads) but with its descriptors uploaded beforehand: device time
 * from an event before the kernel to one after it, warmup + reps runs, seconds into s.
 * queued: the same gather is launched once more before the first event, so the timed one waits
 * in the stream's queue with its launch done, as a decode step queues each layer's gather
 * behind earlier work; then the time leaves out the launch latency that an isolated kernel
 * pays. */
static int zc_kernel_time(struct bench *b, void *st, void *e0, void *e1, int n, int queued,
                          double *s)
{
    const struct recall_copy_ops *o = b->ops;
    const struct recall_params *rp = &b->o.rt.offload.recall;
    for (int i = 0; i < n; i++) {
        const struct recall_item *it = &b->items[i];
        b->h_kdesc[i] = (struct recall_desc){
            (uint64_t)(uintptr_t)(b->d_pool + ((const char *)it->src - b->h_pool)),
            (uint64_t)(uintptr_t)it->dst, it->bytes, 0};
    }
    b->be->upload(&b->ctx, b->d_kdesc, b->h_kdesc, sizeof *b->h_kdesc * (size_t)n);
    for (int i = 0; i < b->o.warmup + b->o.reps; i++) {
        float ms = 0;
        int rc = queued ? o->gather(o, b->d_kdesc, n, rp->zc_blocks, rp->zc_threads,
                                    rp->zc_inflight_kb, st)
                        : PULSE_OK;
        if (!rc) rc = o->event_record(o, e0, st);
        if (!rc)
            rc = o->gather(o, b->d_kdesc, n, rp->zc_blocks, rp->zc_threads, rp->zc_inflight_kb, st);
        if (!rc) rc = o->event_record(o, e1, st);
        if (!rc) rc = o->event_sync(o, e1);
        if (!rc) rc = o->event_elapsed_ms(o, e0, e1, &ms);
        if (rc) return rc;
        if (i >= b->o.warmup) s[i - b->o.warmup] = PULSE_MAX(ms * 1e-3, 1e-9);
    }
    return 0;
}

/* The zero-copy kernel alone at one sweep point into a JSON object (and *gbs); fresh slots
 * first, so the check afterwards sees what the kernel moved. Returns 1 when it failed or moved
 * wrong data. */
static int zc_kernel_point(struct bench *b, void *st, void *e0, void *e1, size_t chunk, int n,
                           json_t **out, double *gbs, double *gbs_queued)
{
    double s[MAX_REPS], sq[MAX_REPS];
    b->be->memset(&b->ctx, b->d_dst, 0x5a, b->dst_bytes);
    b->be->sync(&b->ctx);
    *gbs = *gbs_queued = 0;
    if (zc_kernel_time(b, st, e0, e1, n, 0, s)) {
        *out = json_pack("{s:s}", "status", "error");
        return 1;
    }
    int ok = verify(b, n); /* what the isolated runs moved */
    if (zc_kernel_time(b, st, e0, e1, n, 1, sq)) {
        *out = json_pack("{s:s}", "status", "error");
        return 1;
    }
    double med = recall_bench_median(s, (int)b->o.reps),
           medq = recall_bench_median(sq, (int)b->o.reps);
    *gbs = (double)chunk * n / med / 1e9;
    *gbs_queued = (double)chunk * n / medq / 1e9;
    json_t *q = json_pack("{s:s,s:o,s:f,s:f,s:f}", "timing",
                          "device events around the kernel, launched behind the same gather "
                          "(its launch done while that one runs)",
                          "samples_s", recall_bench_samples(sq, (int)b->o.reps), "median_s", medq,
                          "GBps", *gbs_queued, "fraction_of_peak", *gbs_queued / b->peak);
    *out =
        json_pack("{s:s,s:s,s:i,s:i,s:o,s:f,s:f,s:f,s:b,s:o}", "status", ok ? "ok" : "wrong data",
                  "timing", "device events around the kernel alone, descriptors in device memory",
                  "zc_blocks", b->o.rt.offload.recall.zc_blocks, "zc_threads", (int)b->o.zc_threads,
                  "samples_s", recall_bench_samples(s, (int)b->o.reps), "median_s", med, "GBps",
                  *gbs, "fraction_of_peak", *gbs / b->peak, "verified", ok, "queued", q);
    /* fresh slots again, so the engine's own check sees what the engine moved */
    b->be->memset(&b->ctx, b->d_dst, 0x5a, b->dst_bytes);
    b->be->sync(&b->ctx);
    return !ok;
}

/* Returns the points that failed or moved wrong data. */
static int sweep(struct bench *b, json_t *res)
{
    const struct opts *o = &b->o;
    struct recall *eng[RECALL_ENGINES] = {0};
    json_t *arr = json_array(), *errs = json_object();
    char err[256];
    int bad = 0;
    for (int k = 0; k < o->n_engines; k++)
        if (!(eng[k] = recall_bench_engine(b, o->engines[k], b->max_count, 0,
                                           o->rt.offload.recall.zc_blocks, err, sizeof err)))
            json_object_set_new(errs, recall_engine_name(o->engines[k]), json_string(err));
    int zk = -1; /* the zero-copy engine's index: its kernel alone gets a column of its own */
    void *kst = NULL, *ke0 = NULL, *ke1 = NULL;
    for (int k = 0; k < o->n_engines; k++)
        if (o->engines[k] == RECALL_ZERO_COPY && eng[k]) zk = k;
    if (zk >= 0)
        PULSE_CHECK(!b->ops->stream_create(b->ops, &kst) && !b->ops->event_create(b->ops, &ke0) &&
                        !b->ops->event_create(b->ops, &ke1),
                    "recall-bench: the kernel's stream and events");
    printf("%-8s %-6s", "chunk", "count");
    for (int k = 0; k < o->n_engines; k++)
        printf(" %16s", recall_engine_name(o->engines[k]));
    if (zk >= 0) printf(" %16s %16s", "zc-kernel-alone", "zc-kernel-queued");
    printf("   (GB/s (fraction of the peak), median of %ld; zero-copy grid %ld x %ld)\n", o->reps,
           (long)o->rt.offload.recall.zc_blocks, o->zc_threads);
    for (int i = 0; i < o->n_sizes; i++)
        for (int j = 0; j < o->n_counts; j++) {
            size_t chunk = o->sizes[i];
            int n = (int)o->counts[j];
            recall_bench_pick(b, chunk, n);
            printf("%-8zu %-6d", chunk, n);
            json_t *kj = NULL;
            double kgbs = 0, kqgbs = 0;
            if (zk >= 0) bad += zc_kernel_point(b, kst, ke0, ke1, chunk, n, &kj, &kgbs, &kqgbs);
            for (int k = 0; k < o->n_engines; k++) {
                double s[MAX_REPS];
                json_t *pj = json_pack(
                    "{s:s,s:I,s:i,s:I}", "engine", recall_engine_name(o->engines[k]), "chunk_bytes",
                    (json_int_t)chunk, "chunks", n, "bytes", (json_int_t)(chunk * (size_t)n));
                json_array_append_new(arr, pj);
                if (k == zk) {
                    json_object_set_new(pj, "zc_blocks",
                                        json_integer(o->rt.offload.recall.zc_blocks));
                    json_object_set_new(pj, "zc_threads", json_integer(o->zc_threads));
                    json_object_set_new(pj, "kernel", kj);
                }
                if (!eng[k]) {
                    json_object_set_new(pj, "status", json_string("unavailable"));
                    printf(" %16s", "-");
                    continue;
                }
                int rc = recall_bench_time(b, eng[k], n, s);
                if (rc) {
                    json_object_set_new(pj, "status", json_string("error"));
                    printf(" %16s", "error");
                    bad++;
                    continue;
                }
                double med = recall_bench_median(s, (int)o->reps),
                       gbs = (double)chunk * n / med / 1e9;
                int ok = verify(b, n);
                json_object_set_new(pj, "status", json_string(ok ? "ok" : "wrong data"));
                bad += !ok;
                json_object_set_new(pj, "samples_s", recall_bench_samples(s, (int)o->reps));
                json_object_set_new(pj, "median_s", json_real(med));
                json_object_set_new(pj, "GBps", json_real(gbs));
                json_object_set_new(pj, "fraction_of_peak", json_real(gbs / b->peak));
                json_object_set_new(pj, "verified", json_boolean(ok));
                json_object_set_new(pj, "stats", stats_json(eng[k]));
                printf(" %9.2f (%4.2f)%s", gbs, gbs / b->peak, ok ? "" : "!");
            }
            if (zk >= 0) {
                const char *ks = json_string_value(json_object_get(kj, "status"));
                if (strcmp(ks, "error"))
                    printf(" %9.2f (%4.2f)%s %9.2f (%4.2f)", kgbs, kgbs / b->peak,
                           strcmp(ks, "ok") ? "!" : "", kqgbs, kqgbs / b->peak);
                else
                    printf(" %16s %16s", "error", "error");
            }
            printf("\n");
            fflush(stdout);
        }
    for (int k = 0; k < o->n_engines; k++)
        recall_free(eng[k]);
    if (zk >= 0) {
        b->ops->event_destroy(b->ops, ke0);
        b->ops->event_destroy(b->ops, ke1);
        b->ops->stream_destroy(b->ops, kst);
    }
    json_object_set_new(res, "sweep", arr);
    json_object_set_new(res, "engine_errors", errs);
    return bad;
}

/* Returns the cap points whose recalls failed. */
static int caps(struct bench *b, json_t *res)
{
    const struct opts *o = &b->o;
    json_t *arr = json_array();
    int n = (int)o->cap_count, bad = 0;
    char err[256];
    recall_bench_pick(b, o->cap_chunk, n);
    printf("cap (%zu B x %d): engine, fraction, target GB/s, achieved GB/s, achieved/target\n",
           o->cap_chunk, n);
    for (int k = 0; k < o->n_engines; k++)
        for (int c = 0; c < o->n_caps; c++) {
            double target = o->caps[c] * b->peak, s[MAX_REPS];
            struct recall *r = recall_bench_engine(b, o->engines[k], n, target,
                                                   o->rt.offload.recall.zc_blocks, err, sizeof err);
            json_t *pj =
                json_pack("{s:s,s:f,s:f,s:I,s:i}", "engine", recall_engine_name(o->engines[k]),
                          "fraction", o->caps[c], "target_GBps", target, "chunk_bytes",
                          (json_int_t)o->cap_chunk, "chunks", n);
            json_array_append_new(arr, pj);
            if (!r || recall_bench_time(b, r, n, s)) {
                json_object_set_new(pj, "status", json_string(r ? "error" : "unavailable"));
                bad += r != NULL;
                recall_free(r);
                continue;
            }
            double gbs = (double)o->cap_chunk * n / recall_bench_median(s, (int)o->reps) / 1e9;
            json_object_set_new(pj, "status", json_string("ok"));
            json_object_set_new(pj, "samples_s", recall_bench_samples(s, (int)o->reps));
            json_object_set_new(pj, "GBps", json_real(gbs));
            json_object_set_new(pj, "achieved_over_target", json_real(gbs / target));
            json_object_set_new(pj, "stats", stats_json(r));
            printf("  %-15s %.2f %8.2f %8.2f %6.3f\n", recall_engine_name(o->engines[k]),
                   o->caps[c], target, gbs, gbs / target);
            recall_free(r);
        }
    json_object_set_new(res, "cap", arr);
    return bad;
}

static json_t *config_json(const struct bench *b)
{
    const struct opts *o = &b->o;
    json_t *sz = json_array(), *ct = json_array(), *en = json_array(), *cp = json_array(),
           *gr = json_array();
    for (int i = 0; i < o->n_sizes; i++)
        json_array_append_new(sz, json_integer((json_int_t)o->sizes[i]));
    for (int i = 0; i < o->n_counts; i++)
        json_array_append_new(ct, json_integer(o->counts[i]));
    for (int i = 0; i < o->n_engines; i++)
        json_array_append_new(en, json_string(recall_engine_name(o->engines[i])));
    for (int i = 0; i < o->n_caps; i++)
        json_array_append_new(cp, json_real(o->caps[i]));
    for (int i = 0; i < o->n_grids; i++)
        json_array_append_new(gr, json_integer(o->grids[i]));
    const struct recall_params def = o->rt.offload.recall; /* the engines' (but the sweep's) */
    json_t *c = json_pack(
        "{s:I,s:I,s:i}", "cap_burst_bytes",
        (json_int_t)(o->cap_burst ? o->cap_burst : def.cap_burst_bytes), "cap_unit_bytes",
        (json_int_t)(o->cap_unit ? o->cap_unit : def.cap_unit_bytes), "spin_us", def.spin_us);
    json_t *r =
        json_pack("{s:s,s:s,s:b,s:o,s:o,s:o,s:i,s:i,s:o,s:I,s:i,s:o,s:i,s:I,s:i,s:b,s:i,s:i,"
                  "s:i,s:I,s:I,s:I,s:s}",
                  "backend", b->be->name, "copy_path", b->ops->name, "quick", o->quick, "engines",
                  en, "chunk_sizes", sz, "chunk_counts", ct, "reps", (int)o->reps, "warmup",
                  (int)o->warmup, "cap_fractions", cp, "cap_chunk_bytes", (json_int_t)o->cap_chunk,
                  "cap_chunks", (int)o->cap_count, "zc_grids", gr, "gather_threads",
                  def.gather_threads, "piece_bytes", (json_int_t)def.piece_bytes, "n_stage",
                  def.n_stage, "nt_stores", def.nt_stores, "zc_blocks", def.zc_blocks, "zc_threads",
                  (int)o->zc_threads, "max_inflight", 2, "pool_bytes", (json_int_t)b->pool_bytes,
                  "dst_bytes", (json_int_t)b->dst_bytes, "seed", (json_int_t)o->seed, "timing",
                  "sweep and cap: wall time from submit to completion; the sweep's zero-copy "
                  "kernel alone, peak and compute: device events");
    json_object_update(r, c);
    json_decref(c);
    json_object_set_new(r, "zc_inflight_kb", json_integer(def.zc_inflight_kb));
    json_object_set_new(r, "options", runtime_opts_json(&o->rt, RB_RT));
    return r;
}

int cmd_recall_bench(int argc, char **argv)
{
    struct bench b;
    memset(&b, 0, sizeof b);
    int rc = parse(argc, argv, &b.o);
    if (rc) return rc > 0 ? 0 : EXIT_USAGE;
    if (!(b.be = cli_backend(CMD, b.o.backend))) return EXIT_USAGE;
    b.ops = recall_copy_ops_for(b.be);
    b.rng = b.o.seed * 0x9E3779B97F4A7C15ull + 1;
    if (!b.o.peak_bytes) { /* the default peak copy fits a smaller --pool-bytes */
        b.o.peak_bytes = b.be->mem == MEM_DEVICE ? (size_t)512 << 20 : (size_t)64 << 20;
        if (b.o.pool_bytes && b.o.pool_bytes < b.o.peak_bytes) b.o.peak_bytes = b.o.pool_bytes;
    }
    char err[512];
    json_t *res = results_new("recall-bench");
    int code = 0;
    if (b.be->ctx_create(&b.ctx, 0) != PULSE_OK) {
        cli_error(CMD, "cannot create a %s context", b.be->name);
        code = 1;
        goto out;
    }
    b.be->describe(results_env(res));
    if ((code = setup(&b, res, err, sizeof err)) != 0) {
        cli_error(CMD, "%s", err);
        json_object_set_new(res, "status", json_string(code == EXIT_OOM ? "oom" : "error"));
        json_object_set_new(res, "error", json_string(err));
        goto out;
    }
    json_object_set_new(res, "config", config_json(&b));
    printf("host pool %.2f GiB, %s, pinned in %.2f s\n",
           (double)host_pool_bytes(b.pool) / (1 << 30),
           b.be->mem == MEM_DEVICE ? "pinned" : "host memory",
           json_real_value(json_object_get(json_object_get(res, "host_pool"), "pin_seconds")));
    measure_peak(&b, res);
    int bad = sweep(&b, res);
    bad += caps(&b, res);
    if (bad) { /* a point that failed or moved wrong data fails the run */
        cli_error(CMD, "%d points failed or moved wrong data (see their status)", bad);
        json_object_set_new(res, "status", json_string("error"));
        code = 1;
    }
    recall_bench_interference(&b, res);
out:
    b.be->ctx_free(&b.ctx);
    mem_free(b.be ? b.be->mem : MEM_HOST, b.d_dst, b.dst_bytes);
    mem_free(MEM_HOST, b.perm, b.perm_n * 4);
    mem_free(MEM_HOST, b.items, sizeof *b.items * (size_t)b.max_count);
    mem_free(MEM_HOST, b.h_check, b.max_chunk);
    mem_free(MEM_HOST, b.h_kdesc, sizeof *b.h_kdesc * (size_t)b.max_count);
    mem_free(b.be ? b.be->mem : MEM_HOST, b.d_kdesc, sizeof *b.d_kdesc * (size_t)b.max_count);
    host_pool_free(b.pool);
    if (b.o.out && results_write(res, b.o.out, err, sizeof err) != PULSE_OK) {
        cli_error(CMD, "--out: %s", err);
        code = code ? code : 1;
    }
    json_decref(res);
    return code;
}
