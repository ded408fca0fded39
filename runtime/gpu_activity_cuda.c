/* The GPU activity collector over CUPTI's activity API (gpu_activity.h). CUPTI asks for record
 * buffers (buf_requested) and hands them back full (buf_completed, from its own thread or from
 * the flush): both take the collector's lock; a full buffer's records go into fixed arrays and
 * the buffer back into the pool. */
#include "gpu_activity.h"

#include <cupti.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "mem.h"
#include "results.h"

#define BUF_BYTES ((size_t)4 << 20)
#define N_BUFS 16
#define NAME_SLOTS 2048 /* open addressing over distinct kernel symbols */
#define SYM_MAX 200

enum { DIR_H2D, DIR_D2H, DIR_D2D, DIR_OTHER, DIRS };
static const char *const dir_names[DIRS] = {"h2d", "d2h", "d2d", "other"};

struct kname {
    uint64_t hash, total_ns;
    int64_t count;
    char sym[SYM_MAX]; /* "" while the slot is free */
};

struct gpu_activity {
    pthread_mutex_t mu;
    uint8_t *bufs[N_BUFS];
    int free_idx[N_BUFS], n_free;
    struct gpu_interval *kern, *copy; /* kernels; memcpys and memsets */
    size_t n_kern, n_copy, cap;
    struct kname *names;
    uint64_t bytes[DIRS], copy_ns[DIRS];
    int64_t copies[DIRS], memsets, memset_bytes, kernels;
    int64_t over_cap, names_full, buffers_refused, cupti_dropped, unknown;
    uint64_t t_start, t_stop;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct gpu_activity *g_active;

static uint64_t fnv(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static void add_name(struct gpu_activity *a, const char *sym, uint64_t ns)
{
    if (!sym) sym = "?";
    const uint64_t h = fnv(sym);
    for (size_t k = 0; k < NAME_SLOTS; k++) {
        struct kname *e = &a->names[(h + k) % NAME_SLOTS];
        if (!e->sym[0]) {
            e->hash = h;
            snprintf(e->sym, sizeof e->sym, "%s", sym);
        } else if (e->hash != h || strncmp(e->sym, sym, SYM_MAX - 1) != 0) {
            continue;
        }
        e->count++;
        e->total_ns += ns;
        return;
    }
    a->names_full++;
}

static void add_interval(struct gpu_activity *a, struct gpu_interval *iv, size_t *n, uint64_t s,
                         uint64_t e)
{
    if (*n < a->cap)
        iv[(*n)++] = (struct gpu_interval){s, e > s ? e : s};
    else
        a->over_cap++;
}

static int dir_of(uint8_t kind)
{
    switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
        return DIR_H2D;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
        return DIR_D2H;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
        return DIR_D2D;
    default:
        return DIR_OTHER;
    }
}

static void take_record(struct gpu_activity *a, const CUpti_Activity *r)
{
    switch (r->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL: {
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
        a->kernels++;
        add_interval(a, a->kern, &a->n_kern, k->start, k->end);
        add_name(a, k->name, k->end > k->start ? k->end - k->start : 0);
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)r;
        const int d = dir_of(m->copyKind);
        a->copies[d]++;
        a->bytes[d] += m->bytes;
        a->copy_ns[d] += m->end > m->start ? m->end - m->start : 0;
        add_interval(a, a->copy, &a->n_copy, m->start, m->end);
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)r;
        a->memsets++;
        a->memset_bytes += (int64_t)m->bytes;
        add_interval(a, a->copy, &a->n_copy, m->start, m->end);
        break;
    }
    default:
        a->unknown++;
    }
}

static void CUPTIAPI buf_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = NULL;
    *size = 0;
    *max_records = 0;
    pthread_mutex_lock(&g_mu);
    struct gpu_activity *a = g_active;
    if (a) {
        pthread_mutex_lock(&a->mu);
        if (a->n_free > 0) {
            *buffer = a->bufs[a->free_idx[--a->n_free]];
            *size = BUF_BYTES;
        } else {
            a->buffers_refused++; /* CUPTI drops these records and counts them */
        }
        pthread_mutex_unlock(&a->mu);
    }
    pthread_mutex_unlock(&g_mu);
}

static void CUPTIAPI buf_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                   size_t valid)
{
    (void)size;
    pthread_mutex_lock(&g_mu);
    struct gpu_activity *a = g_active;
    if (a && buffer) {
        pthread_mutex_lock(&a->mu);
        CUpti_Activity *r = NULL;
        while (cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS)
            take_record(a, r);
        size_t dropped = 0;
        if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS)
            a->cupti_dropped += (int64_t)dropped;
        for (int i = 0; i < N_BUFS; i++)
            if (a->bufs[i] == buffer) a->free_idx[a->n_free++] = i;
        pthread_mutex_unlock(&a->mu);
    }
    pthread_mutex_unlock(&g_mu);
}

static const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                           CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET};
#define N_KINDS (sizeof kinds / sizeof kinds[0])

static void release(struct gpu_activity *a)
{
    if (!a) return;
    for (int i = 0; i < N_BUFS; i++)
        mem_free(MEM_HOST, a->bufs[i], BUF_BYTES);
    mem_free(MEM_HOST, a->kern, sizeof *a->kern * a->cap);
    mem_free(MEM_HOST, a->copy, sizeof *a->copy * a->cap);
    mem_free(MEM_HOST, a->names, sizeof *a->names * NAME_SLOTS);
    pthread_mutex_destroy(&a->mu);
    mem_free(MEM_HOST, a, sizeof *a);
}

static const char *cupti_error(CUptiResult r)
{
    const char *s = NULL;
    return cuptiGetResultString(r, &s) == CUPTI_SUCCESS && s ? s : "unknown CUPTI error";
}

struct gpu_activity *gpu_activity_start(int max_records, char *err, size_t errlen)
{
    if (max_records < 1) {
        snprintf(err, errlen, "GPU activity: max_records must be >= 1");
        return NULL;
    }
    struct gpu_activity *a = mem_alloc(MEM_HOST, sizeof *a, "gpu activity");
    if (!a) {
        snprintf(err, errlen, "GPU activity: out of host memory");
        return NULL;
    }
    memset(a, 0, sizeof *a);
    pthread_mutex_init(&a->mu, NULL);
    a->cap = (size_t)max_records;
    a->kern = mem_alloc(MEM_HOST, sizeof *a->kern * a->cap, "gpu activity kernels");
    a->copy = mem_alloc(MEM_HOST, sizeof *a->copy * a->cap, "gpu activity copies");
    a->names = mem_alloc(MEM_HOST, sizeof *a->names * NAME_SLOTS, "gpu activity names");
    int ok = a->kern && a->copy && a->names;
    for (int i = 0; ok && i < N_BUFS; i++) {
        ok = (a->bufs[i] = mem_alloc(MEM_HOST, BUF_BYTES, "gpu activity buffer")) != NULL;
        a->free_idx[a->n_free++] = i;
    }
    if (!ok) {
        snprintf(err, errlen, "GPU activity: out of host memory");
        release(a);
        return NULL;
    }
    memset(a->names, 0, sizeof *a->names * NAME_SLOTS);
    pthread_mutex_lock(&g_mu);
    if (g_active) {
        pthread_mutex_unlock(&g_mu);
        snprintf(err, errlen, "GPU activity: another collector is active in this process");
        release(a);
        return NULL;
    }
    g_active = a;
    pthread_mutex_unlock(&g_mu);
    CUptiResult r = cuptiActivityRegisterCallbacks(buf_requested, buf_completed);
    size_t k = 0;
    for (; r == CUPTI_SUCCESS && k < N_KINDS; k++)
        r = cuptiActivityEnable(kinds[k]);
    if (r == CUPTI_SUCCESS) r = cuptiGetTimestamp(&a->t_start);
    if (r != CUPTI_SUCCESS) {
        snprintf(err, errlen, "GPU activity: CUPTI refused: %s", cupti_error(r));
        while (k-- > 0)
            cuptiActivityDisable(kinds[k]);
        pthread_mutex_lock(&g_mu);
        g_active = NULL;
        pthread_mutex_unlock(&g_mu);
        release(a);
        return NULL;
    }
    return a;
}

static int by_total(const void *x, const void *y)
{
    const struct kname *a = *(const struct kname *const *)x, *b = *(const struct kname *const *)y;
    return a->total_ns < b->total_ns ? 1 : a->total_ns > b->total_ns ? -1 : 0;
}

static json_t *summary(struct gpu_activity *a, int top)
{
    uint64_t k0, k1, c0, c1;
    const uint64_t kbusy = gpu_interval_union(a->kern, a->n_kern, &k0, &k1);
    const uint64_t cbusy = gpu_interval_union(a->copy, a->n_copy, &c0, &c1);
    /* the window: from the first record's start to the last one's end, kernels and copies */
    uint64_t w0 = a->n_kern ? k0 : c0, w1 = a->n_kern ? k1 : c1;
    if (a->n_copy && c0 < w0) w0 = c0;
    if (a->n_copy && c1 > w1) w1 = c1;
    const double win = (w1 > w0 ? w1 - w0 : 0) * 1e-9;
    json_t *j = json_object();
    json_object_set_new(j, "source",
                        json_string("CUPTI activity records: concurrent kernels, "
                                    "memcpy, memset; device timestamps"));
    results_set_real(j, "collected_s", (a->t_stop - a->t_start) * 1e-9);
    results_set_real(j, "window_s", win);
    json_object_set_new(j, "kernels", json_integer(a->kernels));
    results_set_real(j, "kernel_busy_s", kbusy * 1e-9);
    results_set_real(j, "busy_fraction", win > 0 ? kbusy * 1e-9 / win : 0.0);
    results_set_real(j, "copy_busy_s", cbusy * 1e-9);
    json_t *cp = json_object();
    for (int d = 0; d < DIRS; d++) {
        json_t *e = json_object();
        json_object_set_new(e, "count", json_integer(a->copies[d]));
        json_object_set_new(e, "bytes", json_integer((json_int_t)a->bytes[d]));
        results_set_real(e, "time_s", a->copy_ns[d] * 1e-9);
        results_set_real(e, "GBps", a->copy_ns[d] ? (double)a->bytes[d] / a->copy_ns[d] : 0.0);
        json_object_set_new(cp, dir_names[d], e);
    }
    json_object_set_new(cp, "memsets", json_integer(a->memsets));
    json_object_set_new(j, "copies", cp);
    json_object_set_new(j, "records_over_capacity", json_integer(a->over_cap));
    json_object_set_new(j, "records_dropped_by_cupti", json_integer(a->cupti_dropped));
    json_object_set_new(j, "buffers_refused", json_integer(a->buffers_refused));
    json_object_set_new(j, "kernel_names_over_capacity", json_integer(a->names_full));
    /* the kernels by name, most total time first */
    const struct kname *order[NAME_SLOTS];
    int n = 0;
    for (int i = 0; i < NAME_SLOTS; i++)
        if (a->names[i].sym[0]) order[n++] = &a->names[i];
    qsort(order, (size_t)n, sizeof order[0], by_total);
    json_t *arr = json_array();
    for (int i = 0; i < n && i < top; i++) {
        char name[128];
        const struct kname *e = order[i];
        gpu_kernel_short_name(e->sym, name, sizeof name);
        json_t *o = json_pack("{s:s,s:I}", "name", name, "count", (json_int_t)e->count);
        results_set_real(o, "total_s", e->total_ns * 1e-9);
        results_set_real(o, "mean_us", e->count ? e->total_ns * 1e-3 / e->count : 0.0);
        results_set_real(o, "share_of_busy", kbusy ? (double)e->total_ns / kbusy : 0.0);
        json_array_append_new(arr, o);
    }
    json_object_set_new(j, "kernel_names", json_integer(n));
    json_object_set_new(j, "top_kernels", arr);
    return j;
}

json_t *gpu_activity_stop(struct gpu_activity *a, int top)
{
    if (!a) return NULL;
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    for (size_t k = 0; k < N_KINDS; k++)
        cuptiActivityDisable(kinds[k]);
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    if (cuptiGetTimestamp(&a->t_stop) != CUPTI_SUCCESS) a->t_stop = a->t_start;
    pthread_mutex_lock(&g_mu);
    g_active = NULL;
    pthread_mutex_unlock(&g_mu);
    json_t *j = summary(a, top);
    release(a);
    return j;
}
