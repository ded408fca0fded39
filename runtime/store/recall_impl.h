/* The recall engine's private state (recall.c, recall_gather_scatter.c); not the interface.
 *
 * Threads and ownership:
 *   caller   recall_submit / query / wait (one thread). Slot state changes under r->mu.
 *   issuer   takes QUEUED slots in ticket order, makes every copy-path call of a recall, records
 *            the recall's event, publishes ISSUED under r->mu. Owns the cap clock, the staging
 *            ring and the batch arrays.
 *   workers  (gather-scatter) take gather tasks (piece, slice) from an atomic counter; a piece
 *            is done when all gather_threads slices of it are.
 * A slot is FREE -> QUEUED (submit) -> ISSUED (issuer) -> DONE (whoever first sees its event
 * complete and its emulated finish time passed); it is reused by the ticket max_inflight later. */
#ifndef PULSE_RECALL_IMPL_H
#define PULSE_RECALL_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "recall.h"

enum { SLOT_FREE, SLOT_QUEUED, SLOT_ISSUED, SLOT_DONE };
#define SEG_MAX ((size_t)64 << 10) /* most bytes one scatter descriptor moves */
#define PIECE_MAX_DESC 1024        /* descriptors per gather-scatter piece */

struct slot {
    int64_t ticket;
    int state, status, ev_ok, n; /* state, status, ev_ok: under mu */
    size_t bytes;
    double t_submit, t_issue, t_issued, not_before;
    struct recall_item *items;
    struct recall_signal sig;   /* flag NULL: none */
    struct recall_desc *h_desc; /* zero-copy descriptors, host view (pinned) ... */
    struct recall_desc *d_desc; /* ... and what the gather reads: their device copy, or with
                                   zc_desc_host the device's view of h_desc */
    void *ev;
};

struct part {
    const char *src;
    char *dst;
    size_t off, bytes; /* off: in the piece's data */
};

struct stage { /* one gather-scatter staging buffer: [data][descriptors] */
    char *h, *d;
    struct part *parts;
    int n, used;
    size_t data_bytes, desc_off;
    atomic_int done; /* slices gathered */
    void *ev_dma, *ev_free;
};

struct acc { /* issuer counters of one recall, published under mu */
    int64_t subs, pieces, opf;
    double capw;
};

struct recall {
    struct recall_params p;
    const struct recall_copy_ops *o;
    int device;
    void *stream, *kstream, *ev_tail; /* copies; gather-scatter kernels; copy-stream tail */
    pthread_mutex_t mu, mu_work;
    pthread_cond_t cv_issue, cv_done, cv_work;
    struct slot *slots;
    int64_t next_ticket, oldest; /* under mu */
    atomic_llong submitted;      /* next_ticket, readable without mu */
    int64_t issue_ticket;        /* issuer only */
    atomic_llong issued;         /* issue_ticket, readable without mu (recall_wait's spin) */
    int issuer_sleeping;         /* under mu */
    atomic_int stop;
    pthread_t issuer, *workers;
    int issuer_started, workers_started;
    struct stage *stages;
    size_t stage_bytes;
    uint64_t piece_seq; /* issuer: pieces posted */
    atomic_ullong task_posted, task_taken;
    atomic_int n_sleeping;
    atomic_uint prime_gen; /* recall_prime: a sleeping worker or issuer wakes when it moves */
    atomic_llong primes;
    atomic_llong gather_ns;
    void **b_dst;
    const void **b_src;
    size_t *b_size;
    double cap_rate, cap_tau, cap_tat; /* issuer only (rate: bytes/s) */
    const char *host_base, *dev_base;
    struct recall_stats st; /* under mu */
    int inflight;
    double busy_since;
    void *m_host, *m_pinned, *m_dev;
    size_t n_host, n_pinned, n_dev;
};

static inline void recall_cpu_relax(void)
{
#if defined(__x86_64__)
    _mm_pause();
#endif
}

/* Holds the issuer back until the cap lets `bytes` go (recall.c). */
void recall_cap_pace(struct recall *r, size_t bytes, struct acc *a);
/* Issues one recall through the gather-scatter pipeline (issuer thread). */
int recall_gs_issue(struct recall *r, struct slot *s, struct acc *a);
/* A gather worker thread's body; arg is the engine. Both in recall_gather_scatter.c. */
void *recall_gs_worker(void *arg);

#endif
