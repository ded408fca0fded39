/* Recall engines (recall.h): the submission ring, the issuer thread, the per-block, batch and
 * zero-copy issue paths, and the cap. The gather-scatter pipeline: recall_gather_scatter.c; private
 * state and threading: recall_impl.h; the copy paths: recall_cpu.c, recall_cuda.c. */
#include "recall_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "common.h"
#include "results.h"

static const char *const engine_names[RECALL_ENGINES] = {"per-block", "gather-scatter", "zero-copy",
                                                         "batch"};

const char *recall_engine_name(enum recall_engine e)
{
    return (unsigned)e < RECALL_ENGINES ? engine_names[e] : "?";
}

int recall_engine_find(const char *name)
{
    for (int i = 0; i < RECALL_ENGINES; i++)
        if (strcmp(engine_names[i], name) == 0) return i;
    return -1;
}

int recall_default_gather_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 18 ? 16 : n > 3 ? (int)n - 2 : 1;
}

void recall_params_init(struct recall_params *p, enum recall_engine engine, int max_items)
{
    memset(p, 0, sizeof *p);
    p->engine = engine;
    p->max_items = max_items;
    p->max_inflight = 4;
    /* measured on the H200 machine (16 cores), 2026-11-29: 8 workers and plain stores gather
     * 8-64 KB chunks at 22-24 GB/s; 14 workers with streaming stores at 31-41 GB/s
     * (--gs-threads, --gs-nt-stores for experiments) */
    p->gather_threads = recall_default_gather_threads();
    p->nt_stores = 1;
    p->piece_bytes = (size_t)2048 << 10;
    p->n_stage = 3;
    /* the zero-copy gather's grid (--zc-blocks for experiments). Measured on the H200,
     * 2026-12-01 (CUPTI, qwen3-14b, 128 KB in flight per block): 4 blocks gather a decode
     * step's recall 5% slower than 16 but take 12 fewer SMs from the compute beside it:
     * pulseinfer at 32 x 16K 38.8 ms a step against 42.5 with 16, arkvale and infinigen the
     * same within 2%. recall-bench keeps 16 for its sweep (--zc-blocks). */
    p->zc_blocks = 4;
    p->zc_threads = 512;
    p->zc_inflight_kb = RECALL_ZC_INFLIGHT_KB;
    /* the gather reads its descriptors from the pinned ring, no H2D copy ahead of it (--zc-desc
     * device for comparisons): measured on the H100, 2026-12-05 (recall-bench, one call), 0.82
     * of the peak end to end at 8 KB x 1024 against 0.76 with the copy, 0.92 against 0.89 at
     * 64 KB; test_recall_gpu's exact cases and compute-sanitizer memcheck pass with both
     * (H200, 2026-12-05) */
    p->zc_desc_host = 1;
    p->cap_burst_bytes = (size_t)4 << 20;
    /* measured on the H200 machine, 2026-11-29 (256 KB x 1024 zero-copy recalls capped at 0.8
     * of the peak): a 1 MiB unit reached 0.93 of the target (the gap between paced launches),
     * 4 MiB 0.99 and 16 MiB 0.99; 0.4 and 0.6 held within 1% with each */
    p->cap_unit_bytes = (size_t)4 << 20;
    p->spin_us = 200; /* --recall-spin-us, --recall-prime for experiments */
    p->prime = 0;
}

static void sleep_until(double t)
{
    for (;;) {
        double left = t - pulse_now();
        if (left <= 0) return;
        if (left < 50e-6) { /* short: spin, nanosleep overshoots by tens of microseconds */
            recall_cpu_relax();
            continue;
        }
        left -= 30e-6;
        struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

/* GCRA: a unit of `bytes` arriving at `now` may start at TAT - tau; TAT then moves on by
 * bytes / rate from max(now, TAT), never from the (late) wake-up, so oversleeping does not
 * accumulate. */
void recall_cap_pace(struct recall *r, size_t bytes, struct acc *a)
{
    if (r->cap_rate <= 0) return;
    double now = pulse_now(), start = r->cap_tat - r->cap_tau;
    if (start > now) {
        sleep_until(start);
        a->capw += pulse_now() - now;
    }
    r->cap_tat = (r->cap_tat > now ? r->cap_tat : now) + (double)bytes / r->cap_rate;
}

/* ---- completion (all under mu) ---- */

static void finish_locked(struct recall *r, struct slot *s, double now)
{
    s->state = SLOT_DONE;
    if (s->status == PULSE_OK) {
        r->st.queued_s += s->t_issue - s->t_submit;
        r->st.issuing_s += s->t_issued - s->t_issue;
        r->st.draining_s += now - s->t_issued;
        r->st.completed++;
        r->st.bytes += (int64_t)s->bytes;
        r->st.chunks += s->n;
    } else {
        r->st.failed++;
        r->st.failed_bytes += (int64_t)s->bytes;
    }
    if (--r->inflight == 0) r->st.busy_s += now - r->busy_since;
    pthread_cond_broadcast(&r->cv_done);
}

static void try_complete_locked(struct recall *r, struct slot *s)
{
    if (s->state != SLOT_ISSUED) return;
    if (s->ev_ok) {
        int q = r->o->event_query(r->o, s->ev);
        if (q == 0) return;
        if (q < 0) {
            if (s->status == PULSE_OK) s->status = q;
            r->st.op_failures++;
            s->ev_ok = 0;
        }
    }
    double now = pulse_now();
    if (now < s->not_before) return;
    finish_locked(r, s, now);
}

static void poll_locked(struct recall *r)
{
    while (r->oldest < r->next_ticket) {
        struct slot *s = &r->slots[r->oldest % r->p.max_inflight];
        try_complete_locked(r, s);
        if (s->state != SLOT_DONE) return;
        r->oldest++;
    }
}

/* ---- issue: one function per engine; each returns PULSE_OK or the first failure ---- */

/* Items [i, end) form the next pacing unit: all items without a cap, else about unit bytes. */
static int unit_end(const struct recall *r, const struct slot *s, int i, size_t *bytes)
{
    size_t b = 0;
    int j = i;
    do {
        b += s->items[j++].bytes;
    } while (j < s->n && (r->cap_rate <= 0 || b < r->p.cap_unit_bytes));
    *bytes = b;
    return j;
}

static int issue_per_block(struct recall *r, struct slot *s, struct acc *a)
{
    for (int i = 0; i < s->n;) {
        size_t ub;
        int end = unit_end(r, s, i, &ub);
        recall_cap_pace(r, ub, a);
        for (; i < end; i++) {
            const struct recall_item *it = &s->items[i];
            int rc = r->o->h2d(r->o, it->dst, it->src, it->bytes, r->stream);
            a->subs++;
            if (rc) return a->opf++, rc;
        }
    }
    return PULSE_OK;
}

static int issue_batch(struct recall *r, struct slot *s, struct acc *a)
{
    for (int i = 0; i < s->n;) {
        size_t ub;
        int end = unit_end(r, s, i, &ub);
        for (int k = i; k < end; k++) {
            r->b_dst[k - i] = s->items[k].dst;
            r->b_src[k - i] = s->items[k].src;
            r->b_size[k - i] = s->items[k].bytes;
        }
        recall_cap_pace(r, ub, a);
        int rc = r->o->batch(r->o, r->b_dst, r->b_src, r->b_size, (size_t)(end - i), r->stream);
        a->subs++;
        if (rc) return a->opf++, rc;
        i = end;
    }
    return PULSE_OK;
}

static int issue_zero_copy(struct recall *r, struct slot *s, struct acc *a)
{
    size_t span = r->p.host_bytes;
    for (int i = 0; i < s->n; i++) {
        const struct recall_item *it = &s->items[i];
        uintptr_t src = (uintptr_t)it->src, base = (uintptr_t)r->host_base;
        void *dev;
        if (base && src >= base && src - base <= span && it->bytes <= span - (src - base)) {
            dev = (void *)(r->dev_base + (src - base));
        } else {
            int rc = r->o->map_host(r->o, it->src, &dev);
            if (rc) return a->opf++, rc;
        }
        s->h_desc[i] = (struct recall_desc){(uint64_t)(uintptr_t)dev, (uint64_t)(uintptr_t)it->dst,
                                            it->bytes, 0};
    }
    /* the kernel reads its descriptors from device memory, one copy ahead of it on the stream,
     * or (zc_desc_host) from h_desc through its mapping; h_desc is pinned and stays untouched
     * until the slot's event, recorded after the kernels */
    int rc = PULSE_OK;
    if (!r->p.zc_desc_host) {
        rc = r->o->h2d(r->o, s->d_desc, s->h_desc, sizeof *s->h_desc * (size_t)s->n, r->stream);
        a->subs++;
        if (rc) return a->opf++, rc;
    }
    for (int i = 0; i < s->n;) {
        size_t ub;
        int end = unit_end(r, s, i, &ub);
        recall_cap_pace(r, ub, a);
        rc = r->o->gather(r->o, s->d_desc + i, end - i, r->p.zc_blocks, r->p.zc_threads,
                          r->p.zc_inflight_kb, r->stream);
        a->subs++;
        if (rc) return a->opf++, rc;
        i = end;
    }
    return PULSE_OK;
}

/* Queues slot s on its engine, then its signal and completion event, and marks it issued. */
static void issue(struct recall *r, struct slot *s)
{
    struct acc a = {0, 0, 0, 0.0};
    const double t_issue = pulse_now();
    int st;
    switch (r->p.engine) {
    case RECALL_PER_BLOCK:
        st = issue_per_block(r, s, &a);
        break;
    case RECALL_BATCH:
        st = issue_batch(r, s, &a);
        break;
    case RECALL_ZERO_COPY:
        st = issue_zero_copy(r, s, &a);
        break;
    default:
        st = recall_gs_issue(r, s, &a);
        break;
    }
    void *es = r->p.engine == RECALL_GATHER_SCATTER ? r->kstream : r->stream;
    if (st == PULSE_OK && s->sig.flag) { /* the signal: after the data, and paced by the cap */
        if (r->cap_rate > 0) sleep_until(r->cap_tat);
        st = r->o->write_value(r->o, s->sig.flag, s->sig.value, es);
        if (st) a.opf++;
    }
    int rec = r->o->event_record(r->o, s->ev, es);
    if (rec) a.opf++;
    const double t_issued = pulse_now();
    pthread_mutex_lock(&r->mu);
    s->t_issue = t_issue;
    s->t_issued = t_issued;
    s->status = st ? st : rec;
    s->ev_ok = rec == PULSE_OK;
    s->not_before = r->cap_rate > 0 ? r->cap_tat : 0.0; /* the paced stream's finish time */
    s->state = SLOT_ISSUED;
    r->st.submissions += a.subs;
    r->st.pieces += a.pieces;
    r->st.op_failures += a.opf;
    r->st.cap_wait_s += a.capw;
    pthread_cond_broadcast(&r->cv_done);
    pthread_mutex_unlock(&r->mu);
    r->issue_ticket++;
    atomic_store(&r->issued, r->issue_ticket);
}

/* Waits for a queued recall; 0 when stopping. Spins spin_us, then sleeps (waking every
 * 100 us while recalls are in flight, to see them complete). */
static int issuer_wait(struct recall *r)
{
    double spin_end = pulse_now() + r->p.spin_us * 1e-6;
    for (;;) {
        if (atomic_load(&r->submitted) > r->issue_ticket) return 1;
        if (atomic_load(&r->stop)) return 0;
        if (pulse_now() < spin_end) {
            recall_cpu_relax();
            continue;
        }
        pthread_mutex_lock(&r->mu);
        poll_locked(r);
        const unsigned gen = atomic_load(&r->prime_gen);
        if (atomic_load(&r->submitted) <= r->issue_ticket && !atomic_load(&r->stop)) {
            r->issuer_sleeping = 1;
            if (r->oldest < r->next_ticket) {
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                ts.tv_nsec += 100000;
                if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
                pthread_cond_timedwait(&r->cv_issue, &r->mu, &ts);
            } else {
                pthread_cond_wait(&r->cv_issue, &r->mu);
            }
            r->issuer_sleeping = 0;
        }
        pthread_mutex_unlock(&r->mu);
        if (atomic_load(&r->prime_gen) != gen) /* primed: a recall is coming, spin again */
            spin_end = pulse_now() + r->p.spin_us * 1e-6;
    }
}

static void *issuer_main(void *arg)
{
    struct recall *r = arg;
    r->o->set_device(r->o, r->device);
    while (issuer_wait(r))
        issue(r, &r->slots[r->issue_ticket % r->p.max_inflight]);
    return NULL;
}

/* ---- create / free ---- */

static size_t up(size_t x, size_t a)
{
    return (x + a - 1) / a * a;
}

static int check_params(const struct recall_params *p, const struct recall_copy_ops *o, char *err,
                        size_t errlen)
{
    const char *why = NULL;
    if ((unsigned)p->engine >= RECALL_ENGINES)
        why = "unknown engine";
    else if (p->max_items < 1 || p->max_items > (1 << 24))
        why = "max_items must be 1..2^24";
    else if (p->max_inflight < 1 || p->max_inflight > 1024)
        why = "max_inflight must be 1..1024";
    else if (p->cap_gbps < 0 || p->cap_gbps != p->cap_gbps)
        why = "cap_gbps must be >= 0";
    else if (p->cap_gbps > 0 && p->cap_unit_bytes < 1)
        why = "cap_unit_bytes must be >= 1";
    else if (p->spin_us < 0)
        why = "spin_us must be >= 0";
    else if (p->engine == RECALL_GATHER_SCATTER &&
             (p->gather_threads < 1 || p->gather_threads > 256 || p->n_stage < 2 ||
              p->n_stage > 64 || p->piece_bytes < 16 || p->piece_bytes > ((size_t)1 << 30)))
        why = "gather-scatter needs 1..256 threads, 2..64 stages, 16 B..1 GiB pieces";
    else if (p->engine == RECALL_ZERO_COPY &&
             (p->zc_blocks < 1 || p->zc_blocks > 65535 || p->zc_threads < 32 ||
              p->zc_threads > 1024 || p->zc_threads % 32 || p->zc_inflight_kb < 1 ||
              p->zc_inflight_kb > RECALL_ZC_INFLIGHT_KB_MAX))
        why = "zero-copy needs 1..65535 blocks of 32..1024 threads (a multiple of 32) and 1..256 "
              "KB in flight a block";
    else if (p->engine == RECALL_BATCH && !o->batch)
        why = "this copy path has no batch copy";
    if (!why) return 0;
    snprintf(err, errlen, "recall %s: %s", recall_engine_name(p->engine), why);
    return -1;
}

/* One allocation per memory kind, carved into the named arrays. */
static int alloc_memory(struct recall *r)
{
    const struct recall_params *p = &r->p;
    const int gs = p->engine == RECALL_GATHER_SCATTER, zc = p->engine == RECALL_ZERO_COPY;
    size_t ni = (size_t)p->max_inflight * p->max_items, S = gs ? (size_t)p->n_stage : 0;
    r->stage_bytes =
        gs ? up(p->piece_bytes + 16 + PIECE_MAX_DESC * sizeof(struct recall_desc), 4096) : 0;
    size_t o_items = up(sizeof(struct slot) * p->max_inflight, 64);
    size_t o_stages = up(o_items + sizeof(struct recall_item) * ni, 64);
    size_t o_parts = up(o_stages + sizeof(struct stage) * S, 64);
    size_t o_workers = up(o_parts + sizeof(struct part) * PIECE_MAX_DESC * S, 64);
    size_t o_bdst = up(o_workers + sizeof(pthread_t) * (gs ? p->gather_threads : 0), 64);
    size_t nb = p->engine == RECALL_BATCH ? (size_t)p->max_items : 0;
    size_t o_bsrc = up(o_bdst + sizeof(void *) * nb, 64),
           o_bsize = up(o_bsrc + sizeof(void *) * nb, 64);
    r->n_host = o_bsize + sizeof(size_t) * nb;
    size_t o_hstage = up((zc ? ni : 0) * sizeof(struct recall_desc), 4096);
    r->n_pinned = o_hstage + S * r->stage_bytes;
    size_t o_ddesc = S * r->stage_bytes; /* zero-copy: the device copy of the descriptors */
    r->n_dev = o_ddesc + (zc ? ni : 0) * sizeof(struct recall_desc);
    char *h = r->m_host = mem_alloc(MEM_HOST, r->n_host, "recall host");
    char *ph = r->n_pinned
                   ? (r->m_pinned = mem_alloc(r->o->host_kind, r->n_pinned, "recall staging"))
                   : NULL;
    char *dv =
        r->n_dev ? (r->m_dev = mem_alloc(r->o->dev_kind, r->n_dev, "recall dev staging")) : NULL;
    if (!h || (r->n_pinned && !ph) || (r->n_dev && !dv)) return -1;
    memset(h, 0, r->n_host);
    r->slots = (struct slot *)h;
    r->stages = (struct stage *)(h + o_stages);
    r->workers = (pthread_t *)(h + o_workers);
    r->b_dst = (void **)(h + o_bdst);
    r->b_src = (const void **)(h + o_bsrc);
    r->b_size = (size_t *)(h + o_bsize);
    struct recall_item *items = (struct recall_item *)(h + o_items);
    struct part *parts = (struct part *)(h + o_parts);
    for (int i = 0; i < p->max_inflight; i++) {
        r->slots[i].ticket = -1;
        r->slots[i].items = items + (size_t)i * p->max_items;
        if (zc) {
            r->slots[i].h_desc = (struct recall_desc *)ph + (size_t)i * p->max_items;
            r->slots[i].d_desc = (struct recall_desc *)(dv + o_ddesc) + (size_t)i * p->max_items;
        }
    }
    for (size_t i = 0; i < S; i++) {
        r->stages[i].h = ph + o_hstage + i * r->stage_bytes;
        r->stages[i].d = dv + i * r->stage_bytes;
        r->stages[i].parts = parts + i * PIECE_MAX_DESC;
        atomic_init(&r->stages[i].done, 0);
    }
    return 0;
}

static int make_events(struct recall *r)
{
    const struct recall_copy_ops *o = r->o;
    int rc = o->get_device(o, &r->device);
    if (!rc) rc = o->stream_create(o, &r->stream);
    if (!rc) rc = o->stream_create(o, &r->kstream);
    if (!rc) rc = o->event_create(o, &r->ev_tail);
    for (int i = 0; !rc && i < r->p.max_inflight; i++)
        rc = o->event_create(o, &r->slots[i].ev);
    for (int i = 0; !rc && r->p.engine == RECALL_GATHER_SCATTER && i < r->p.n_stage; i++) {
        rc = o->event_create(o, &r->stages[i].ev_dma);
        if (!rc) rc = o->event_create(o, &r->stages[i].ev_free);
    }
    if (!rc && r->p.engine == RECALL_ZERO_COPY && r->p.zc_desc_host) {
        void *d; /* the descriptor ring's mapping: each slot's h_desc as the device sees it */
        rc = o->map_host(o, r->m_pinned, &d);
        for (int i = 0; !rc && i < r->p.max_inflight; i++)
            r->slots[i].d_desc = (struct recall_desc *)((char *)d + ((char *)r->slots[i].h_desc -
                                                                     (char *)r->m_pinned));
    }
    if (!rc && r->p.engine == RECALL_ZERO_COPY && r->p.host_base) {
        void *d; /* map the region's base, then offset (interior pointers need not map) */
        rc = o->map_host(o, r->p.host_base, &d);
        r->host_base = r->p.host_base;
        r->dev_base = d;
    }
    return rc;
}

struct recall *recall_create(const struct recall_params *p, char *err, size_t errlen)
{
    const struct recall_copy_ops *o = p->ops ? p->ops : recall_copy_ops_cpu();
    if (check_params(p, o, err, errlen)) return NULL;
    struct recall *r = mem_alloc(MEM_HOST, sizeof *r, "recall");
    if (!r) {
        snprintf(err, errlen, "recall: out of host memory");
        return NULL;
    }
    memset(r, 0, sizeof *r);
    r->p = *p;
    r->o = o;
    r->cap_rate = p->cap_gbps * 1e9;
    r->cap_tau = p->cap_gbps > 0 ? (double)p->cap_burst_bytes / r->cap_rate : 0.0;
    atomic_init(&r->submitted, 0);
    atomic_init(&r->stop, 0);
    atomic_init(&r->task_posted, 0);
    atomic_init(&r->task_taken, 0);
    atomic_init(&r->n_sleeping, 0);
    atomic_init(&r->prime_gen, 0u);
    atomic_init(&r->primes, 0);
    atomic_init(&r->gather_ns, 0);
    atomic_init(&r->issued, 0);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->mu_work, NULL);
    pthread_cond_init(&r->cv_issue, &ca);
    pthread_cond_init(&r->cv_done, NULL);
    pthread_cond_init(&r->cv_work, NULL);
    pthread_condattr_destroy(&ca);
    if (alloc_memory(r)) {
        snprintf(err, errlen, "recall %s: cannot allocate %zu host, %zu %s and %zu %s bytes",
                 recall_engine_name(p->engine), r->n_host, r->n_pinned, mem_kind_name(o->host_kind),
                 r->n_dev, mem_kind_name(o->dev_kind));
        goto fail;
    }
    if (make_events(r)) {
        snprintf(err, errlen, "recall %s: the %s copy path cannot create its streams and events",
                 recall_engine_name(p->engine), o->name);
        goto fail;
    }
    if (pthread_create(&r->issuer, NULL, issuer_main, r)) goto fail_thread;
    r->issuer_started = 1;
    for (int i = 0; p->engine == RECALL_GATHER_SCATTER && i < p->gather_threads; i++) {
        if (pthread_create(&r->workers[i], NULL, recall_gs_worker, r)) goto fail_thread;
        r->workers_started++;
    }
    return r;
fail_thread:
    snprintf(err, errlen, "recall: cannot start threads");
fail:
    recall_free(r);
    return NULL;
}

void recall_free(struct recall *r)
{
    if (!r) return;
    const struct recall_copy_ops *o = r->o;
    if (r->issuer_started) recall_wait_all(r);
    atomic_store(&r->stop, 1);
    pthread_mutex_lock(&r->mu);
    pthread_cond_broadcast(&r->cv_issue);
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_lock(&r->mu_work);
    pthread_cond_broadcast(&r->cv_work);
    pthread_mutex_unlock(&r->mu_work);
    if (r->issuer_started) pthread_join(r->issuer, NULL);
    for (int i = 0; i < r->workers_started; i++)
        pthread_join(r->workers[i], NULL);
    if (r->slots) {
        for (int i = 0; i < r->p.max_inflight; i++)
            if (r->slots[i].ev) o->event_destroy(o, r->slots[i].ev);
        for (int i = 0; r->p.engine == RECALL_GATHER_SCATTER && i < r->p.n_stage; i++) {
            if (r->stages[i].ev_dma) o->event_destroy(o, r->stages[i].ev_dma);
            if (r->stages[i].ev_free) o->event_destroy(o, r->stages[i].ev_free);
        }
    }
    if (r->ev_tail) o->event_destroy(o, r->ev_tail);
    if (r->stream) o->stream_destroy(o, r->stream);
    if (r->kstream) o->stream_destroy(o, r->kstream);
    mem_free(o->dev_kind, r->m_dev, r->n_dev);
    mem_free(o->host_kind, r->m_pinned, r->n_pinned);
    mem_free(MEM_HOST, r->m_host, r->n_host);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->mu_work);
    pthread_cond_destroy(&r->cv_issue);
    pthread_cond_destroy(&r->cv_done);
    pthread_cond_destroy(&r->cv_work);
    mem_free(MEM_HOST, r, sizeof *r);
}

/* ---- the caller's side ---- */

int recall_submit(struct recall *r, const struct recall_item *items, int n, int64_t *ticket)
{
    return recall_submit_signal(r, items, n, NULL, ticket);
}

int recall_submit_signal(struct recall *r, const struct recall_item *items, int n,
                         const struct recall_signal *sig, int64_t *ticket)
{
    if (sig && !sig->flag) return PULSE_ERR_INVALID;
    if (!items || n < 1 || n > r->p.max_items) return PULSE_ERR_INVALID;
    size_t bytes = 0;
    for (int i = 0; i < n; i++) {
        if (!items[i].src || !items[i].dst || !items[i].bytes) return PULSE_ERR_INVALID;
        bytes += items[i].bytes;
    }
    pthread_mutex_lock(&r->mu);
    struct slot *s = &r->slots[r->next_ticket % r->p.max_inflight];
    try_complete_locked(r, s);
    if (s->state == SLOT_QUEUED || s->state == SLOT_ISSUED) {
        r->st.refused++;
        pthread_mutex_unlock(&r->mu);
        return PULSE_ERR_NOMEM;
    }
    memcpy(s->items, items, sizeof *items * (size_t)n);
    s->n = n;
    s->sig = sig ? *sig : (struct recall_signal){NULL, 0};
    s->bytes = bytes;
    s->ticket = r->next_ticket;
    s->status = PULSE_OK;
    s->state = SLOT_QUEUED;
    s->t_submit = pulse_now();
    if (r->inflight++ == 0) r->busy_since = s->t_submit;
    r->st.recalls++;
    *ticket = r->next_ticket++;
    atomic_store(&r->submitted, r->next_ticket);
    if (r->issuer_sleeping) pthread_cond_signal(&r->cv_issue);
    pthread_mutex_unlock(&r->mu);
    return PULSE_OK;
}

void recall_prime(struct recall *r)
{
    if (!r->p.prime) return;
    atomic_fetch_add(&r->prime_gen, 1);
    int woke = 0;
    if (atomic_load(&r->n_sleeping) > 0) {
        pthread_mutex_lock(&r->mu_work);
        pthread_cond_broadcast(&r->cv_work);
        pthread_mutex_unlock(&r->mu_work);
        woke = 1;
    }
    pthread_mutex_lock(&r->mu);
    if (r->issuer_sleeping) {
        pthread_cond_signal(&r->cv_issue);
        woke = 1;
    }
    pthread_mutex_unlock(&r->mu);
    if (woke) atomic_fetch_add(&r->primes, 1);
}

static struct slot *lookup_locked(struct recall *r, int64_t t)
{
    if (t < 0 || t >= r->next_ticket) return NULL;
    struct slot *s = &r->slots[t % r->p.max_inflight];
    return s->ticket == t ? s : NULL;
}

int recall_query(struct recall *r, int64_t ticket)
{
    pthread_mutex_lock(&r->mu);
    struct slot *s = lookup_locked(r, ticket);
    int rc = PULSE_ERR_INVALID;
    if (s) {
        try_complete_locked(r, s);
        rc = s->state != SLOT_DONE ? 0 : s->status == PULSE_OK ? 1 : s->status;
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int recall_wait(struct recall *r, int64_t ticket)
{
    pthread_mutex_lock(&r->mu);
    struct slot *s = lookup_locked(r, ticket);
    if (!s) {
        pthread_mutex_unlock(&r->mu);
        return PULSE_ERR_INVALID;
    }
    int spun = 0;
    while (s->state != SLOT_DONE) {
        if (s->state != SLOT_ISSUED && !spun) {
            /* not issued yet: spin up to spin_us for the issuer (a wake-up through cv_done
             * costs tens of microseconds, a tenth of a small recall), then sleep */
            spun = 1;
            pthread_mutex_unlock(&r->mu);
            const double end = pulse_now() + r->p.spin_us * 1e-6;
            while (atomic_load(&r->issued) <= ticket && !atomic_load(&r->stop) && pulse_now() < end)
                recall_cpu_relax();
            pthread_mutex_lock(&r->mu);
            r->st.wait_spins++;
            continue;
        }
        if (s->state != SLOT_ISSUED) {
            pthread_cond_wait(&r->cv_done, &r->mu);
            continue;
        }
        void *ev = s->ev;
        int ev_ok = s->ev_ok;
        double nb = s->not_before;
        pthread_mutex_unlock(&r->mu);
        if (ev_ok) r->o->event_sync(r->o, ev); /* a failure shows in the query below */
        sleep_until(nb);
        pthread_mutex_lock(&r->mu);
        try_complete_locked(r, s);
        if (s->state != SLOT_DONE) { /* the copy path's sync returned early: back off */
            pthread_mutex_unlock(&r->mu);
            sleep_until(pulse_now() + 20e-6);
            pthread_mutex_lock(&r->mu);
        }
    }
    int rc = s->status;
    poll_locked(r);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int recall_wait_all(struct recall *r)
{
    pthread_mutex_lock(&r->mu);
    int64_t end = r->next_ticket, t = PULSE_MAX(r->oldest, end - r->p.max_inflight);
    pthread_mutex_unlock(&r->mu);
    int first = PULSE_OK;
    for (; t < end; t++) {
        int rc = recall_wait(r, t);
        if (rc != PULSE_OK && rc != PULSE_ERR_INVALID && first == PULSE_OK) first = rc;
    }
    return first;
}

void recall_get_stats(struct recall *r, struct recall_stats *out)
{
    pthread_mutex_lock(&r->mu);
    *out = r->st;
    if (r->inflight > 0) out->busy_s += pulse_now() - r->busy_since;
    pthread_mutex_unlock(&r->mu);
    out->gather_s = (double)atomic_load(&r->gather_ns) * 1e-9;
    out->primes = atomic_load(&r->primes);
}

void recall_reset_stats(struct recall *r)
{
    pthread_mutex_lock(&r->mu);
    memset(&r->st, 0, sizeof r->st);
    r->busy_since = pulse_now();
    pthread_mutex_unlock(&r->mu);
    atomic_store(&r->gather_ns, 0);
    atomic_store(&r->primes, 0);
}

json_t *recall_stats_json(const struct recall_stats *st)
{
    json_t *j = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "bytes", (json_int_t)st->bytes,
                          "chunks", (json_int_t)st->chunks, "recalls", (json_int_t)st->completed,
                          "failed", (json_int_t)st->failed, "submissions",
                          (json_int_t)st->submissions, "pieces", (json_int_t)st->pieces, "primes",
                          (json_int_t)st->primes, "wait_spins", (json_int_t)st->wait_spins);
    const struct {
        const char *k;
        double v;
    } t[] = {{"busy_s", st->busy_s},         {"cap_wait_s", st->cap_wait_s},
             {"gather_s", st->gather_s},     {"queued_s", st->queued_s},
             {"issuing_s", st->issuing_s},   {"draining_s", st->draining_s}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        results_set_real(j, t[i].k, t[i].v);
    return j;
}

const struct recall_params *recall_get_params(const struct recall *r)
{
    return &r->p;
}

#ifdef PULSE_HAVE_CUDA
extern const struct recall_copy_ops recall_cuda_ops; /* recall_cuda.c */
const struct recall_copy_ops *recall_copy_ops_cuda(void)
{
    return &recall_cuda_ops;
}
#else
const struct recall_copy_ops *recall_copy_ops_cuda(void)
{
    return NULL;
}
#endif

const struct recall_copy_ops *recall_copy_ops_for(const struct backend *be)
{
    return be && be->mem == MEM_DEVICE && recall_copy_ops_cuda() ? recall_copy_ops_cuda()
                                                                 : recall_copy_ops_cpu();
}
