/* State and helpers that the recall-bench driver (recall_bench.c) shares with its interference
 * part (recall_bench_interference.c). Internal to `pulse recall-bench`. */
#ifndef PULSE_RECALL_BENCH_H
#define PULSE_RECALL_BENCH_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "host_pool.h"
#include "recall.h"
#include "runtime_opts.h"

#define CMD "recall-bench"
#define MAX_LIST 16
#define MAX_REPS 100
#define VERIFY_ITEMS 16
#define ZC_CHUNK ((size_t)64 << 10) /* the interference runs' zero-copy recall: 64 KB x 512 */
#define ZC_COUNT 512

/* the runtime options recall-bench takes: the engines' tuning and the pool's pinning */
#define RB_RT (RT_RECALL | RT_PIN)

struct opts {
    const char *backend, *out;
    size_t sizes[MAX_LIST], cap_chunk, pool_bytes, peak_bytes;
    size_t cap_unit, cap_burst; /* 0: the engine defaults (recall_params_init) */
    long counts[MAX_LIST], grids[MAX_LIST], reps, warmup, cap_count, zc_threads;
    double caps[MAX_LIST];
    int n_sizes, n_counts, n_grids, n_caps, engines[RECALL_ENGINES], n_engines;
    int quick, no_interf;
    uint64_t seed;
    /* the engines' tuning (rt.offload.recall: gather-scatter threads, piece and stages,
     * streaming stores, the zero-copy grid of the sweep, in flight, spin) and the pool's
     * pinning (rt.offload.pin): runtime_opts.h's flags */
    struct runtime_opts rt;
};

struct bench {
    struct opts o;
    const struct backend *be;
    const struct recall_copy_ops *ops;
    struct kctx ctx;
    struct host_pool *pool;
    char *h_pool, *d_dst, *h_check;
    size_t pool_bytes, dst_bytes, max_chunk;
    uint32_t *perm;
    size_t perm_n;
    struct recall_item *items;
    struct recall_desc *h_kdesc, *d_kdesc; /* the zero-copy kernel alone: its descriptors */
    char *d_pool;                          /* the pool as the device sees it (map_host) */
    int max_count;
    double peak;
    uint64_t rng;
};

/* n distinct random chunk-aligned sources in the pool and slots in the device region, into
 * b->items[0..n). */
void recall_bench_pick(struct bench *b, size_t chunk, int n);
/* An engine with the run's gather-scatter / zero-copy settings; NULL with a reason in err. */
struct recall *recall_bench_engine(struct bench *b, int e, int max_items, double cap_gbps,
                                   int zc_blocks, char *err, size_t errlen);
/* warmup + reps recalls of b->items[0..n); wall seconds per timed recall into s (reps values);
 * the engine's stats cover the timed recalls only. 0 or the first failure status. */
int recall_bench_time(struct bench *b, struct recall *r, int n, double *s);
json_t *recall_bench_samples(const double *v, int n);
double recall_bench_median(const double *v, int n);
/* The zero-copy-beside-compute runs into res["interference"] (a "skipped" note off CUDA). */
void recall_bench_interference(struct bench *b, json_t *res);

#endif
