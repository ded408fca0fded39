/* Recall engines: move a list of (host chunk, GPU destination, bytes) items from the pinned host
 * pool into GPU slots (DESIGN.md section 6). Four engines behind one interface:
 *   per-block       one async H2D copy per chunk (what the baselines do)
 *   gather-scatter  CPU workers gather chunks into pinned staging in pipelined pieces; one H2D
 *                   DMA per piece as soon as it is gathered; a GPU kernel scatters each piece
 *                   from device staging into the slots (n_stage buffers, so gather, DMA and
 *                   scatter of consecutive pieces overlap)
 *   zero-copy       a GPU kernel with a bounded grid reads the chunks straight from mapped
 *                   pinned memory into the slots
 *   batch           cudaMemcpyBatchAsync
 *
 * Zero-sync: recall_submit copies the items into a ring slot and returns; an issuer thread per
 * engine makes the copy-path calls (and waits for the cap), so the caller never blocks on a
 * transfer. Completion is a ticket the caller queries (non-blocking) or waits on.
 *
 * Failure: when any copy-path operation of a recall fails, the issuer stops issuing that recall
 * and the WHOLE recall reports the failure (status PULSE_ERR_IO): its destinations are undefined
 * (some items may have landed) and the caller must treat every item as not recalled. Completion
 * still waits for what was already issued, so destinations are quiet once it is reported. Other
 * recalls are unaffected. Counters: failed, failed_bytes, op_failures.
 *
 * Cap: a token bucket in virtual-clock form (GCRA) at rate cap_gbps and depth cap_burst_bytes.
 * The issuer releases work in units (a gather-scatter piece, or a group of items of about
 * cap_unit_bytes) no earlier than the bucket allows, and a recall reports completion no earlier
 * than its theoretical finish time (TAT: the time the stream of units paced at exactly cap_gbps
 * ends; the depth lets a late wake-up catch up but never lets a recall finish early). So the
 * achieved rate over a transfer is the cap when the real link is faster, else the link's.
 *
 * The copy path is a table of functions (struct recall_copy_ops): a CUDA implementation and a
 * CPU one (memcpy; "device" memory is host memory) that CI tests wrap to inject delays and
 * failures. No allocation after create: rings, staging, descriptors and threads are sized from
 * the params. */
#ifndef PULSE_RECALL_H
#define PULSE_RECALL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "mem.h"

#ifdef __cplusplus
extern "C" {
#endif

struct backend;

enum recall_engine {
    RECALL_PER_BLOCK = 0,
    RECALL_GATHER_SCATTER = 1,
    RECALL_ZERO_COPY = 2,
    RECALL_BATCH = 3,
    RECALL_ENGINES = 4,
};

/* One chunk to move: bytes > 0 from host memory src (pinned, or mapped for zero-copy) to
 * device memory dst. Items of one recall must not overlap in dst. */
struct recall_item {
    const void *src;
    void *dst;
    size_t bytes;
};

/* What the scatter and zero-copy kernels read, one per (part of a) chunk: addresses as the GPU
 * sees them. 32 bytes. */
struct recall_desc {
    uint64_t src, dst, bytes, pad;
};

/* The copy path. Every function returns PULSE_OK or a negative status (never aborts on a
 * transfer error); streams and events are opaque. `user` is free for wrappers. */
struct recall_copy_ops {
    const char *name;
    enum mem_kind host_kind; /* staging/descriptor memory the device reads: MEM_PINNED or HOST */
    enum mem_kind dev_kind;  /* device staging: MEM_DEVICE or MEM_HOST */
    void *user;
    int (*get_device)(const struct recall_copy_ops *o, int *dev);
    int (*set_device)(const struct recall_copy_ops *o, int dev);          /* bind a worker thread */
    int (*stream_create)(const struct recall_copy_ops *o, void **stream); /* high priority */
    void (*stream_destroy)(const struct recall_copy_ops *o, void *stream);
    int (*event_create)(const struct recall_copy_ops *o, void **ev); /* with timing */
    void (*event_destroy)(const struct recall_copy_ops *o, void *ev);
    int (*event_record)(const struct recall_copy_ops *o, void *ev, void *stream);
    /* 1 when the work before the record is done, 0 when pending, < 0 when it failed. */
    int (*event_query)(const struct recall_copy_ops *o, void *ev);
    int (*event_sync)(const struct recall_copy_ops *o, void *ev);
    int (*event_elapsed_ms)(const struct recall_copy_ops *o, void *a, void *b, float *ms);
    int (*stream_wait_event)(const struct recall_copy_ops *o, void *stream, void *ev);
    /* The device address of mapped host memory (identity under unified addressing). */
    int (*map_host)(const struct recall_copy_ops *o, const void *host, void **dev);
    int (*h2d)(const struct recall_copy_ops *o, void *dst, const void *src, size_t bytes,
               void *stream);
    int (*batch)(const struct recall_copy_ops *o, void *const *dsts, const void *const *srcs,
                 const size_t *sizes, size_t n, void *stream);
    /* Device-side copy of n descriptors (in device memory) from staging to slots. */
    int (*scatter)(const struct recall_copy_ops *o, const struct recall_desc *d_desc, int n,
                   void *stream);
    /* Zero-copy: n descriptors (in device memory) whose sources are mapped host memory, read
     * by a grid of blocks x threads, each block keeping inflight_kb KB in flight. */
    int (*gather)(const struct recall_copy_ops *o, const struct recall_desc *desc, int n,
                  int blocks, int threads, int inflight_kb, void *stream);
    /* Stores value into *flag (pinned host memory) when the stream reaches this point
     * (cuStreamWriteValue32 on cuda; a release store on the cpu path, whose copies are done). */
    int (*write_value)(const struct recall_copy_ops *o, uint32_t *flag, uint32_t value,
                       void *stream);
};

/* The built-in copy paths: CPU (always) and CUDA (NULL in CPU-only builds). */
const struct recall_copy_ops *recall_copy_ops_cpu(void);
const struct recall_copy_ops *recall_copy_ops_cuda(void);
/* The copy path that matches a backend's memory: CUDA for MEM_DEVICE, CPU otherwise. */
const struct recall_copy_ops *recall_copy_ops_for(const struct backend *be);

/* The zero-copy gather's bytes in flight per block: the default (128 KB: 16 loads a lane at 512
 * threads) and the most (recall_gather_loads). */
#define RECALL_ZC_INFLIGHT_KB 128
#define RECALL_ZC_INFLIGHT_KB_MAX 256

/* Every field's default is recall_params_init's, which reads nothing else (no environment): the
 * command line's options (experiments/runtime_opts.h) set the tuning fields of a run. */
struct recall_params {
    enum recall_engine engine;
    int max_items;      /* most items in one recall, >= 1 */
    int max_inflight;   /* recalls submitted and not complete at once, >= 1 (default 4) */
    int gather_threads; /* gather-scatter CPU workers (default recall_default_gather_threads) */
    size_t piece_bytes; /* gather-scatter: largest piece of data per DMA (default 2 MiB);
                         * a recall of B bytes goes in pieces of clamp(B / 4, P / 8 but at
                         * least 64 KiB, P) so that even small recalls pipeline */
    int n_stage;        /* gather-scatter: staging buffers, >= 2 (default 3) */
    int zc_blocks;      /* zero-copy grid (default 4 x 512 threads) */
    int zc_threads;
    int zc_inflight_kb;     /* zero-copy: KB each gather block keeps in flight, 1..256 (default
                               RECALL_ZC_INFLIGHT_KB) */
    int zc_desc_host;       /* zero-copy: 1 (default): the gather reads its descriptors from
                               the pinned host ring through its mapping, no copy ahead of it; 0:
                               copied to device memory first (one H2D on the stream) */
    double cap_gbps;        /* bandwidth cap in GB/s (1e9 B/s); 0 = none */
    size_t cap_burst_bytes; /* bucket depth (default 4 MiB; 0: strict pacing) */
    size_t cap_unit_bytes;  /* pacing unit of the non-staged engines (default 4 MiB) */
    int spin_us;            /* issuer/worker spin before sleeping, and recall_wait's for a recall
                               not yet issued, microseconds (default 200) */
    int prime;              /* 1: recall_prime wakes the sleeping threads (default 0: not
                               measured yet on the H200, where 14 spinning workers can take
                               the cores of the thread that plans) */
    int nt_stores;          /* gather-scatter: streaming stores into staging (x86; default 1) */
    /* Optional: the mapped host region every zero-copy source lies in (the host pool), so
     * sources translate by one offset; sources outside it go through ops->map_host. */
    const void *host_base;
    size_t host_bytes;
    const struct recall_copy_ops *ops; /* default: recall_copy_ops_cpu() */
};

struct recall_stats {
    int64_t recalls;      /* accepted by recall_submit */
    int64_t completed;    /* completed without failure */
    int64_t failed;       /* completed with a failure status */
    int64_t refused;      /* submissions refused: max_inflight outstanding */
    int64_t bytes;        /* bytes of the completed recalls */
    int64_t chunks;       /* items of the completed recalls */
    int64_t failed_bytes; /* bytes of the failed recalls */
    int64_t submissions;  /* copy-path operations issued (copies, batch calls, DMAs, launches) */
    int64_t pieces;       /* gather-scatter pieces (DMAs) */
    int64_t op_failures;  /* copy-path operations that reported a failure */
    double busy_s;        /* wall time with >= 1 recall submitted and not yet seen complete */
    double cap_wait_s;    /* issuer time held back by the cap */
    double gather_s;      /* gather-scatter worker time spent copying (summed over threads) */
    /* where a recall's time goes, summed over the completed ones: from submit until the issuer
     * takes it up (its wake-up and any recall ahead of it), the issuer's time on it (for
     * gather-scatter the gathers it waits for, piece by piece), and from its last operation
     * queued until its completion is seen (the copy tail, and how late the waiter looked) */
    double queued_s, issuing_s, draining_s;
    int64_t primes;     /* recall_prime calls that woke a sleeping thread */
    int64_t wait_spins; /* recall_wait calls that found their recall not yet issued and spun
                           (up to spin_us) for the issuer before sleeping */
};

struct recall;

/* Fills p with the defaults above for `engine` and max_items. */
void recall_params_init(struct recall_params *p, enum recall_engine engine, int max_items);
/* Gather-scatter workers by default: the online CPUs less two (the caller's thread and the
 * engine's issuer), at least 1, at most 16. */
int recall_default_gather_threads(void);

/* Creates an engine: allocates its rings, staging and descriptors and starts its threads (one
 * issuer, plus gather_threads workers for gather-scatter). Returns NULL with a one-line reason
 * in err for bad params, refused memory, or an engine the copy path cannot run (batch needs
 * CUDA 12.8+). p->ops must outlive the engine. */
struct recall *recall_create(const struct recall_params *p, char *err, size_t errlen);
/* Waits for every outstanding recall, stops the threads, frees everything (NULL: no-op). */
void recall_free(struct recall *r);

/* Submits a recall of items[0..n). Copies the list (the caller may reuse it at once) and
 * returns without waiting for any transfer. PULSE_OK and *ticket; PULSE_ERR_NOMEM when
 * max_inflight recalls are outstanding (complete one, then retry); PULSE_ERR_INVALID when n is
 * not in [1, max_items] or an item has a NULL pointer or zero bytes. One caller thread. */
int recall_submit(struct recall *r, const struct recall_item *items, int n, int64_t *ticket);
/* A flag the recall sets once its data has landed, so a compute stream can wait for it on the
 * device (backend wait_value) while no host thread waits: *flag = value, written on the
 * engine's stream after the recall's last copy (with a cap: no earlier than the paced
 * stream's finish time). A recall that fails does not write it; the caller must. */
struct recall_signal {
    uint32_t *flag; /* pinned host memory, 4-byte aligned */
    uint32_t value;
};
/* recall_submit, and the recall sets sig's flag when it completes without failure. */
int recall_submit_signal(struct recall *r, const struct recall_item *items, int n,
                         const struct recall_signal *sig, int64_t *ticket);
/* A recall is coming soon (the caller is planning it): with params.prime the engine's sleeping
 * threads wake now and spin (spin_us) instead of waking when it is submitted, so that their
 * wake-up overlaps the caller's planning; without it nothing happens. Non-blocking; counted
 * (recall_stats.primes). */
void recall_prime(struct recall *r);
/* Non-blocking: 0 while in flight, 1 when complete, a negative status when it completed with a
 * failure. A ticket stays valid until max_inflight newer submissions (then PULSE_ERR_INVALID). */
int recall_query(struct recall *r, int64_t ticket);
/* Blocks until the recall is complete; PULSE_OK or its failure status. */
int recall_wait(struct recall *r, int64_t ticket);
/* Waits for every outstanding recall; PULSE_OK or the first failure status seen. */
int recall_wait_all(struct recall *r);

/* A snapshot of the counters (any thread); reset zeroes them (no recall in flight). */
void recall_get_stats(struct recall *r, struct recall_stats *out);
void recall_reset_stats(struct recall *r);
/* The stats as JSON: the counts, and the times in seconds (the *_s fields). */
json_t *recall_stats_json(const struct recall_stats *st);
const struct recall_params *recall_get_params(const struct recall *r);

/* Engine names: "per-block", "gather-scatter", "zero-copy", "batch"; find returns -1. */
const char *recall_engine_name(enum recall_engine e);
int recall_engine_find(const char *name);

/* The kernels behind the copy paths, each with a CPU reference of the same signature (the
 * reference runs synchronously; stream and inflight_kb are ignored). Descriptors with src, dst and
 * bytes all multiples of 16 move in 16-byte words, others byte by byte; one of 0 bytes moves
 * nothing (its addresses may be 0); destinations must not overlap.
 *
 * scatter: d_desc[0..n) in device memory, sources in device memory (gather-scatter staging).
 * gather (zero-copy): d_desc[0..n) in device memory (the caller owns it and keeps it, and the
 *   sources, unchanged until the kernel has run on `stream`); sources in mapped pinned host
 *   memory, as device addresses (recall_copy_ops.map_host); a grid of blocks (>= 1) x threads
 *   (32..1024, a multiple of 32). Bytes in any unit; n <= 0 launches nothing.
 * gather_dev: the same, for a count that only the device knows (written by a GPU planning
 *   kernel): copies d_desc[0..c) where c = *d_count (an int32 in device memory, read when the
 *   kernel runs) clamped to [0, max_n]; d_desc must hold max_n descriptors' worth of memory. */
void recall_scatter_ref(const struct recall_desc *d_desc, int n, void *stream);
void recall_gather_ref(const struct recall_desc *d_desc, int n, int blocks, int threads,
                       int inflight_kb, void *stream);
void recall_gather_dev_ref(const struct recall_desc *d_desc, const int32_t *d_count, int max_n,
                           int blocks, int threads, int inflight_kb, void *stream);
void recall_scatter_cuda(const struct recall_desc *d_desc, int n, void *stream);
/* Loads the recall kernels now (the CUDA copy path calls it when an engine makes its streams),
 * so that no recall's first launch loads a module while a compute stream waits on it. */
void recall_kernels_load(void);
/* The zero-copy gather's 16-byte loads per lane at `threads` threads a block, each block keeping
 * inflight_kb KB in flight (recall_params.zc_inflight_kb; <= 0: RECALL_ZC_INFLIGHT_KB). */
int recall_gather_loads(int threads, int inflight_kb);
void recall_gather_cuda(const struct recall_desc *d_desc, int n, int blocks, int threads,
                        int inflight_kb, void *stream);
void recall_gather_dev_cuda(const struct recall_desc *d_desc, const int32_t *d_count, int max_n,
                            int blocks, int threads, int inflight_kb, void *stream);

#ifdef __cplusplus
}
#endif
#endif
