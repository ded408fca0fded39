/* The gather-scatter engine's pipeline (recall.h): the issuer cuts a recall into pieces, CPU
 * workers gather each piece's chunks into a pinned staging buffer, and as soon as a piece is
 * gathered the issuer sends it with one H2D DMA and a scatter kernel on a second stream; with
 * n_stage buffers, gathering piece k+1 overlaps the DMA of piece k and the scatter of piece k-1.
 * Staging layout: [data: parts at 16-byte aligned offsets][descriptors], one DMA for both. */
#include <sched.h>
#include <string.h>

#include "common.h"
#include "recall_impl.h"

static void gs_plan(const struct slot *s, int *item, size_t *off, struct stage *g, size_t target)
{
    size_t used = 0;
    g->n = 0;
    while (*item < s->n && g->n < PIECE_MAX_DESC) {
        const struct recall_item *it = &s->items[*item];
        size_t at = (used + 15) & ~(size_t)15;
        if (at >= target) break;
        size_t take = PULSE_MIN(it->bytes - *off, PULSE_MIN(target - at, SEG_MAX));
        g->parts[g->n++] =
            (struct part){(const char *)it->src + *off, (char *)it->dst + *off, at, take};
        used = at + take;
        *off += take;
        if (*off == it->bytes) {
            (*item)++;
            *off = 0;
        }
    }
    g->data_bytes = used;
    g->desc_off = (used + 15) & ~(size_t)15;
    struct recall_desc *d = (struct recall_desc *)(g->h + g->desc_off);
    for (int i = 0; i < g->n; i++)
        d[i] = (struct recall_desc){(uint64_t)(uintptr_t)(g->d + g->parts[i].off),
                                    (uint64_t)(uintptr_t)g->parts[i].dst, g->parts[i].bytes, 0};
}

static void gs_post(struct recall *r, struct stage *g)
{
    atomic_store(&g->done, 0);
    atomic_fetch_add(&r->task_posted, (unsigned long long)r->p.gather_threads);
    if (atomic_load(&r->n_sleeping) > 0) {
        pthread_mutex_lock(&r->mu_work);
        pthread_cond_broadcast(&r->cv_work);
        pthread_mutex_unlock(&r->mu_work);
    }
}

/* DMA of a gathered piece, then its scatter on the kernel stream; ev_free covers both. */
static int gs_issue_piece(struct recall *r, struct stage *g, struct acc *a)
{
    const struct recall_copy_ops *o = r->o;
    size_t dma = g->desc_off + (size_t)g->n * sizeof(struct recall_desc);
    recall_cap_pace(r, g->data_bytes, a);
    int rc = o->h2d(o, g->d, g->h, dma, r->stream), waited = 0;
    a->subs++;
    a->pieces++;
    if (!rc) rc = o->event_record(o, g->ev_dma, r->stream);
    if (!rc) rc = o->stream_wait_event(o, r->kstream, g->ev_dma);
    if (!rc) {
        waited = 1;
        rc = o->scatter(o, (const struct recall_desc *)(g->d + g->desc_off), g->n, r->kstream);
        a->subs++;
    }
    if (rc) a->opf++;
    g->used = o->event_record(o, g->ev_free, waited ? r->kstream : r->stream) == PULSE_OK;
    return rc;
}

int recall_gs_issue(struct recall *r, struct slot *s, struct acc *a)
{
    const struct recall_copy_ops *o = r->o;
    const int S = r->p.n_stage, T = r->p.gather_threads;
    size_t pb = r->p.piece_bytes, lo = PULSE_MIN(pb, PULSE_MAX(pb / 8, (size_t)64 << 10));
    size_t target = PULSE_MIN(pb, PULSE_MAX(lo, s->bytes / 4)) & ~(size_t)15;
    if (target < 16) target = 16;
    uint64_t posted = r->piece_seq, issued = r->piece_seq;
    int item = 0, status = PULSE_OK;
    size_t off = 0;
    while (item < s->n || issued < posted) {
        while (status == PULSE_OK && item < s->n && posted - issued < (uint64_t)S) {
            struct stage *g = &r->stages[posted % S];
            if (g->used) { /* the buffer's previous DMA and scatter must be done */
                int q = o->event_query(o, g->ev_free);
                if (q == 0 && posted == issued) q = o->event_sync(o, g->ev_free) ? -1 : 1;
                if (q == 0) break;
                if (q < 0) {
                    status = PULSE_ERR_IO;
                    a->opf++;
                    break;
                }
            }
            gs_plan(s, &item, &off, g, target);
            gs_post(r, g);
            posted++;
        }
        if (issued == posted) break; /* failed before anything was posted */
        struct stage *g = &r->stages[issued % S];
        double spin_end = pulse_now() + r->p.spin_us * 1e-6; /* then yield to the workers */
        while (atomic_load_explicit(&g->done, memory_order_acquire) < T)
            pulse_now() < spin_end ? recall_cpu_relax() : (void)sched_yield();
        if (status == PULSE_OK) status = gs_issue_piece(r, g, a);
        issued++;
        if (status != PULSE_OK) item = s->n; /* drain the posted pieces, issue nothing more */
    }
    r->piece_seq = posted;
    /* the completion event goes on the kernel stream after the copy stream's tail */
    int rc = o->event_record(o, r->ev_tail, r->stream);
    if (!rc) rc = o->stream_wait_event(o, r->kstream, r->ev_tail);
    if (rc) a->opf++;
    return status ? status : rc;
}

static void copy_chunk(char *dst, const char *src, size_t n, int nt)
{
#if defined(__x86_64__)
    if (nt && (((uintptr_t)dst | (uintptr_t)src | n) & 63) == 0) {
        for (size_t i = 0; i < n; i += 64) {
            __m128i a = _mm_load_si128((const __m128i *)(src + i));
            __m128i b = _mm_load_si128((const __m128i *)(src + i + 16));
            __m128i c = _mm_load_si128((const __m128i *)(src + i + 32));
            __m128i d = _mm_load_si128((const __m128i *)(src + i + 48));
            _mm_stream_si128((__m128i *)(dst + i), a);
            _mm_stream_si128((__m128i *)(dst + i + 16), b);
            _mm_stream_si128((__m128i *)(dst + i + 32), c);
            _mm_stream_si128((__m128i *)(dst + i + 48), d);
        }
        return;
    }
#endif
    (void)nt;
    memcpy(dst, src, n);
}

static void gather_task(struct recall *r, uint64_t k)
{
    const uint64_t T = (uint64_t)r->p.gather_threads;
    struct stage *g = &r->stages[(k / T) % (uint64_t)r->p.n_stage];
    uint64_t slice = k % T;
    size_t total = g->data_bytes;
    size_t lo = (size_t)(total * slice / T) & ~(size_t)63;
    size_t hi = slice + 1 == T ? total : (size_t)(total * (slice + 1) / T) & ~(size_t)63;
    double t0 = pulse_now();
    int a = 0, b = g->n;
    while (a < b) { /* first part ending after lo */
        int m = (a + b) / 2;
        if (g->parts[m].off + g->parts[m].bytes <= lo)
            a = m + 1;
        else
            b = m;
    }
    for (int j = a; j < g->n && g->parts[j].off < hi; j++) {
        const struct part *p = &g->parts[j];
        size_t s = PULSE_MAX(lo, p->off), e = PULSE_MIN(hi, p->off + p->bytes);
        if (s < e) copy_chunk(g->h + s, p->src + (s - p->off), e - s, r->p.nt_stores);
    }
#if defined(__x86_64__)
    if (r->p.nt_stores) _mm_sfence();
#endif
    atomic_fetch_add(&r->gather_ns, (long long)((pulse_now() - t0) * 1e9));
    atomic_fetch_add_explicit(&g->done, 1, memory_order_release);
}

void *recall_gs_worker(void *arg)
{
    struct recall *r = arg;
    double spin_end = pulse_now() + r->p.spin_us * 1e-6;
    for (;;) {
        unsigned long long k = atomic_load(&r->task_taken);
        if (k < atomic_load(&r->task_posted)) {
            if (atomic_compare_exchange_weak(&r->task_taken, &k, k + 1)) {
                gather_task(r, k);
                spin_end = pulse_now() + r->p.spin_us * 1e-6;
            }
            continue;
        }
        if (atomic_load(&r->stop)) return NULL;
        if (pulse_now() < spin_end) {
            recall_cpu_relax();
            continue;
        }
        pthread_mutex_lock(&r->mu_work);
        atomic_fetch_add(&r->n_sleeping, 1);
        const unsigned gen = atomic_load(&r->prime_gen);
        while (atomic_load(&r->task_taken) >= atomic_load(&r->task_posted) &&
               !atomic_load(&r->stop) && atomic_load(&r->prime_gen) == gen)
            pthread_cond_wait(&r->cv_work, &r->mu_work);
        atomic_fetch_sub(&r->n_sleeping, 1);
        pthread_mutex_unlock(&r->mu_work);
        spin_end = pulse_now() + r->p.spin_us * 1e-6;
    }
}
