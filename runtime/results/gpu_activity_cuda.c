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
#include "numeric.h"
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
    int recall;        /* gpu_kernel_is_recall */
    char sym[SYM_MAX]; /* "" while the slot is free */
};

enum { REC_KERNEL, REC_MEMCPY, REC_MEMSET };

struct rec { /* one activity record, kept until stop (excluded spans are known only then) */
    uint64_t start, end, bytes;
    int32_t name; /* kernels: the names[] slot, -1 when the table was full */
    uint8_t kind, dir;
};

#define MAX_EXCLUDED 65536
/* gap labels: kernel name slots, then copies by direction, memsets, kernels without a slot */
#define LABEL_MEMSET (NAME_SLOTS + DIRS)
#define LABEL_NONAME (NAME_SLOTS + DIRS + 1)
#define N_LABELS (NAME_SLOTS + DIRS + 2)

struct gpu_activity {
    pthread_mutex_t mu;
    uint8_t *bufs[N_BUFS];
    int free_idx[N_BUFS], n_free;
    struct rec *recs;
    size_t n_recs, cap;    /* recs holds 2 cap: at most cap kernels and at most cap copies */
    size_t n_kern, n_copy; /* of each kind so far */
    struct gpu_interval *kern, *rk, *ck, *copy, *excl; /* the summary's scratch (all, recall and
                                                          compute kernels, copies); excluded */
    size_t n_excl;
    struct gpu_labeled *lab; /* every kept record, for the idle gaps */
    uint64_t gap_ns[N_LABELS];
    int64_t gap_n[N_LABELS];
    struct kname *names;
    int64_t over_cap, over_cap_kern, names_full, buffers_refused, cupti_dropped, unknown, excl_over;
    uint64_t t_start, t_stop;
    double host_base; /* pulse_now() when t_start was taken */
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct gpu_activity *g_active;

/* The names[] slot of symbol sym (found or taken), -1 when the table is full. */
static int32_t name_slot(struct gpu_activity *a, const char *sym)
{
    if (!sym) sym = "?";
    const uint64_t h = pulse_fnv1a_bytes(PULSE_FNV_INIT, sym, strlen(sym));
    for (size_t k = 0; k < NAME_SLOTS; k++) {
        const size_t i = (h + k) % NAME_SLOTS;
        struct kname *e = &a->names[i];
        if (!e->sym[0]) {
            e->hash = h;
            snprintf(e->sym, sizeof e->sym, "%s", sym);
            e->recall = gpu_kernel_is_recall(e->sym);
        } else if (e->hash != h || strncmp(e->sym, sym, SYM_MAX - 1) != 0) {
            continue;
        }
        return (int32_t)i;
    }
    a->names_full++;
    return -1;
}

static void add_rec(struct gpu_activity *a, int kind, int dir, uint64_t s, uint64_t e,
                    uint64_t bytes, int32_t name)
{
    /* kernels and copies each have their own cap, so that a flood of small copies (the
     * per-block engine's) never crowds out the kernels the busy fraction is made of */
    size_t *n = kind == REC_KERNEL ? &a->n_kern : &a->n_copy;
    if (*n < a->cap) {
        (*n)++;
        a->recs[a->n_recs++] =
            (struct rec){s, e > s ? e : s, bytes, name, (uint8_t)kind, (uint8_t)dir};
    } else {
        a->over_cap++;
        a->over_cap_kern += kind == REC_KERNEL;
    }
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
        add_rec(a, REC_KERNEL, 0, k->start, k->end, 0, name_slot(a, k->name));
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)r;
        add_rec(a, REC_MEMCPY, dir_of(m->copyKind), m->start, m->end, m->bytes, -1);
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)r;
        add_rec(a, REC_MEMSET, DIR_OTHER, m->start, m->end, m->bytes, -1);
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
    mem_free(MEM_HOST, a->recs, sizeof *a->recs * 2 * a->cap);
    mem_free(MEM_HOST, a->kern, sizeof *a->kern * a->cap);
    mem_free(MEM_HOST, a->rk, sizeof *a->rk * a->cap);
    mem_free(MEM_HOST, a->ck, sizeof *a->ck * a->cap);
    mem_free(MEM_HOST, a->copy, sizeof *a->copy * a->cap);
    mem_free(MEM_HOST, a->lab, sizeof *a->lab * 2 * a->cap);
    mem_free(MEM_HOST, a->excl, sizeof *a->excl * MAX_EXCLUDED);
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
    a->recs = mem_alloc(MEM_HOST, sizeof *a->recs * 2 * a->cap, "gpu activity records");
    a->kern = mem_alloc(MEM_HOST, sizeof *a->kern * a->cap, "gpu activity kernels");
    a->rk = mem_alloc(MEM_HOST, sizeof *a->rk * a->cap, "gpu activity recall kernels");
    a->ck = mem_alloc(MEM_HOST, sizeof *a->ck * a->cap, "gpu activity compute kernels");
    a->copy = mem_alloc(MEM_HOST, sizeof *a->copy * a->cap, "gpu activity copies");
    a->lab = mem_alloc(MEM_HOST, sizeof *a->lab * 2 * a->cap, "gpu activity gaps");
    a->excl = mem_alloc(MEM_HOST, sizeof *a->excl * MAX_EXCLUDED, "gpu activity excluded");
    a->names = mem_alloc(MEM_HOST, sizeof *a->names * NAME_SLOTS, "gpu activity names");
    int ok = a->recs && a->kern && a->rk && a->ck && a->copy && a->lab && a->excl && a->names;
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
    if (r == CUPTI_SUCCESS) {
        a->host_base = pulse_now();
        r = cuptiGetTimestamp(&a->t_start);
    }
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

void gpu_activity_exclude_host(double t0, double t1)
{
    pthread_mutex_lock(&g_mu);
    struct gpu_activity *a = g_active;
    if (a && t1 > t0) {
        pthread_mutex_lock(&a->mu);
        if (a->n_excl < MAX_EXCLUDED) {
            const double b = (double)a->t_start - a->host_base * 1e9;
            a->excl[a->n_excl++] =
                (struct gpu_interval){(uint64_t)(b + t0 * 1e9 > 0 ? b + t0 * 1e9 : 0),
                                      (uint64_t)(b + t1 * 1e9 > 0 ? b + t1 * 1e9 : 0)};
        } else {
            a->excl_over++;
        }
        pthread_mutex_unlock(&a->mu);
    }
    pthread_mutex_unlock(&g_mu);
}

/* 1 when [s, e) lies inside one of the n merged spans. */
static int excluded(const struct gpu_interval *iv, size_t n, uint64_t s, uint64_t e)
{
    size_t lo = 0, hi = n; /* the last span starting at or before s */
    while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if (iv[mid].start <= s)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo > 0 && e <= iv[lo - 1].end;
}

static int by_total(const void *x, const void *y)
{
    const struct kname *a = *(const struct kname *const *)x, *b = *(const struct kname *const *)y;
    return a->total_ns < b->total_ns ? 1 : a->total_ns > b->total_ns ? -1 : 0;
}

static int by_gap(const void *x, const void *y)
{
    const uint64_t a = **(const uint64_t *const *)x, b = **(const uint64_t *const *)y;
    return a < b ? 1 : a > b ? -1 : 0;
}

/* Where the GPU ran nothing at all (no kernel, copy or memset) between the window's first and
 * last record, by gap size and by the record that ended last before each gap. */
static json_t *gaps_json(struct gpu_activity *a, size_t nl, size_t n_excl, int top)
{
    uint64_t hist_ns[GPU_GAP_BINS] = {0};
    int64_t hist_n[GPU_GAP_BINS] = {0}, count = 0;
    memset(a->gap_ns, 0, sizeof a->gap_ns);
    memset(a->gap_n, 0, sizeof a->gap_n);
    const uint64_t total =
        gpu_gaps(a->lab, nl, a->excl, n_excl, N_LABELS, a->gap_ns, a->gap_n, hist_ns, hist_n);
    json_t *g = json_object(), *h = json_array(), *after = json_array();
    for (int b = 0; b < GPU_GAP_BINS; b++) {
        json_t *e = json_object();
        json_object_set_new(e, "below_us",
                            b < GPU_GAP_BINS - 1 ? json_real(gpu_gap_bin_us[b]) : json_null());
        json_object_set_new(e, "count", json_integer(hist_n[b]));
        results_set_real(e, "total_s", hist_ns[b] * 1e-9);
        json_array_append_new(h, e);
        count += hist_n[b];
    }
    const uint64_t *order[N_LABELS];
    int n = 0;
    for (int i = 0; i < N_LABELS; i++)
        if (a->gap_n[i]) order[n++] = &a->gap_ns[i];
    qsort(order, (size_t)n, sizeof order[0], by_gap);
    for (int i = 0; i < n && i < top; i++) {
        const int l = (int)(order[i] - a->gap_ns);
        char name[128];
        if (l < NAME_SLOTS)
            gpu_kernel_short_name(a->names[l].sym, name, sizeof name);
        else if (l < LABEL_MEMSET)
            snprintf(name, sizeof name, "memcpy %s", dir_names[l - NAME_SLOTS]);
        else
            snprintf(name, sizeof name, l == LABEL_MEMSET ? "memset" : "kernel (unnamed)");
        json_t *e = json_pack("{s:s,s:I}", "name", name, "count", (json_int_t)a->gap_n[l]);
        results_set_real(e, "total_s", a->gap_ns[l] * 1e-9);
        results_set_real(e, "mean_us", a->gap_ns[l] * 1e-3 / a->gap_n[l]);
        json_array_append_new(after, e);
    }
    json_object_set_new(g, "source", json_string("stretches inside the window where no kernel, "
                                                  "copy or memset ran, less excluded spans"));
    results_set_real(g, "total_s", total * 1e-9);
    json_object_set_new(g, "count", json_integer(count));
    json_object_set_new(g, "by_size", h);
    json_object_set_new(g, "after", after);
    return g;
}

static json_t *summary(struct gpu_activity *a, int top, double bin_s)
{
    /* the records outside the excluded spans (set-up work inside the collection: a prompt fill
     * with the serving clock paused), by kind */
    const size_t n_excl = gpu_interval_merge(a->excl, a->n_excl);
    uint64_t bytes[DIRS] = {0}, copy_ns[DIRS] = {0};
    int64_t copies[DIRS] = {0}, memsets = 0, kernels = 0, dropped_excl = 0;
    size_t nk = 0, nc = 0, nr = 0, ncomp = 0, nl = 0;
    for (int i = 0; i < NAME_SLOTS; i++)
        a->names[i].count = 0, a->names[i].total_ns = 0;
    for (size_t i = 0; i < a->n_recs; i++) {
        const struct rec *r = &a->recs[i];
        if (excluded(a->excl, n_excl, r->start, r->end)) {
            dropped_excl++;
            continue;
        }
        const uint64_t ns = r->end - r->start;
        a->lab[nl++] = (struct gpu_labeled){
            r->start, r->end,
            r->kind == REC_KERNEL   ? (r->name >= 0 ? r->name : LABEL_NONAME)
            : r->kind == REC_MEMSET ? LABEL_MEMSET
                                    : NAME_SLOTS + r->dir};
        if (r->kind == REC_KERNEL) {
            kernels++;
            const struct gpu_interval iv = {r->start, r->end};
            a->kern[nk++] = iv;
            if (r->name >= 0 && a->names[r->name].recall)
                a->rk[nr++] = iv;
            else
                a->ck[ncomp++] = iv;
            if (r->name >= 0) a->names[r->name].count++, a->names[r->name].total_ns += ns;
        } else {
            a->copy[nc++] = (struct gpu_interval){r->start, r->end};
            if (r->kind == REC_MEMSET) {
                memsets++;
            } else {
                copies[r->dir]++;
                bytes[r->dir] += r->bytes;
                copy_ns[r->dir] += ns;
            }
        }
    }
    uint64_t k0, k1, c0, c1;
    const uint64_t kbusy = gpu_interval_union(a->kern, nk, &k0, &k1);
    const uint64_t cbusy = gpu_interval_union(a->copy, nc, &c0, &c1);
    /* the window: from the first kept record's start to the last one's end, less the excluded
     * spans inside it */
    uint64_t w0 = nk ? k0 : c0, w1 = nk ? k1 : c1;
    if (nc && c0 < w0) w0 = c0;
    if (nc && c1 > w1) w1 = c1;
    const uint64_t wex = w1 > w0 ? gpu_interval_cover(a->excl, n_excl, w0, w1) : 0;
    const double win = (w1 > w0 + wex ? w1 - w0 - wex : 0) * 1e-9;
    json_t *j = json_object();
    json_object_set_new(j, "source",
                        json_string("CUPTI activity records: concurrent kernels, "
                                    "memcpy, memset; device timestamps"));
    results_set_real(j, "collected_s", (a->t_stop - a->t_start) * 1e-9);
    results_set_real(j, "window_s", win);
    results_set_real(j, "excluded_s", wex * 1e-9);
    json_object_set_new(j, "excluded_spans", json_integer((json_int_t)n_excl));
    json_object_set_new(j, "records_excluded", json_integer(dropped_excl));
    json_object_set_new(j, "kernels", json_integer(kernels));
    results_set_real(j, "kernel_busy_s", kbusy * 1e-9);
    results_set_real(j, "busy_fraction", win > 0 ? PULSE_MIN(1.0, kbusy * 1e-9 / win) : 0.0);
    results_set_real(j, "copy_busy_s", cbusy * 1e-9);
    /* the recall kernels (I/O) apart from the compute kernels */
    const size_t mr = gpu_interval_merge(a->rk, nr), mc = gpu_interval_merge(a->ck, ncomp);
    const size_t mk = gpu_interval_merge(a->kern, nk);
    const uint64_t rbusy = gpu_interval_cover(a->rk, mr, 0, UINT64_MAX),
                   cobusy = gpu_interval_cover(a->ck, mc, 0, UINT64_MAX);
    results_set_real(j, "recall_kernel_busy_s", rbusy * 1e-9);
    results_set_real(j, "compute_kernel_busy_s", cobusy * 1e-9);
    results_set_real(j, "compute_busy_fraction",
                     win > 0 ? PULSE_MIN(1.0, cobusy * 1e-9 / win) : 0.0);
    if (bin_s > 0 && w1 > w0) { /* over time: each bin's covered fraction, null when excluded */
        const uint64_t bw = (uint64_t)(bin_s * 1e9) > 0 ? (uint64_t)(bin_s * 1e9) : 1;
        const uint64_t nb = PULSE_MIN((w1 - w0 + bw - 1) / bw, (uint64_t)100000);
        json_t *t = json_array(), *ball = json_array(), *bc = json_array(), *br = json_array();
        for (uint64_t b = 0; b < nb; b++) {
            const uint64_t lo = w0 + b * bw, hi = PULSE_MIN(lo + bw, w1);
            const uint64_t live = (hi - lo) - gpu_interval_cover(a->excl, n_excl, lo, hi);
            json_array_append_new(t, json_real((lo - w0) * 1e-9));
            if (live * 2 < hi - lo) { /* mostly excluded */
                json_array_append_new(ball, json_null());
                json_array_append_new(bc, json_null());
                json_array_append_new(br, json_null());
                continue;
            }
            json_array_append_new(
                ball,
                json_real(PULSE_MIN(1.0, (double)gpu_interval_cover(a->kern, mk, lo, hi) / live)));
            json_array_append_new(
                bc,
                json_real(PULSE_MIN(1.0, (double)gpu_interval_cover(a->ck, mc, lo, hi) / live)));
            json_array_append_new(
                br,
                json_real(PULSE_MIN(1.0, (double)gpu_interval_cover(a->rk, mr, lo, hi) / live)));
        }
        json_t *bins = json_object();
        results_set_real(bins, "bin_s", bw * 1e-9);
        json_object_set_new(bins, "t_s", t);
        json_object_set_new(bins, "busy", ball);
        json_object_set_new(bins, "compute_busy", bc);
        json_object_set_new(bins, "recall_busy", br);
        json_object_set_new(j, "over_time", bins);
    }
    json_t *cp = json_object();
    for (int d = 0; d < DIRS; d++) {
        json_t *e = json_object();
        json_object_set_new(e, "count", json_integer(copies[d]));
        json_object_set_new(e, "bytes", json_integer((json_int_t)bytes[d]));
        results_set_real(e, "time_s", copy_ns[d] * 1e-9);
        results_set_real(e, "GBps", copy_ns[d] ? (double)bytes[d] / copy_ns[d] : 0.0);
        json_object_set_new(cp, dir_names[d], e);
    }
    json_object_set_new(cp, "memsets", json_integer(memsets));
    json_object_set_new(j, "copies", cp);
    json_object_set_new(j, "records_over_capacity", json_integer(a->over_cap));
    json_object_set_new(j, "kernel_records_over_capacity", json_integer(a->over_cap_kern));
    json_object_set_new(j, "records_dropped_by_cupti", json_integer(a->cupti_dropped));
    json_object_set_new(j, "buffers_refused", json_integer(a->buffers_refused));
    json_object_set_new(j, "kernel_names_over_capacity", json_integer(a->names_full));
    json_object_set_new(j, "excluded_spans_over_capacity", json_integer(a->excl_over));
    /* the kernels by name, most total time first */
    const struct kname *order[NAME_SLOTS];
    int n = 0;
    for (int i = 0; i < NAME_SLOTS; i++)
        if (a->names[i].sym[0] && a->names[i].count) order[n++] = &a->names[i];
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
        json_object_set_new(o, "recall", json_boolean(e->recall));
        json_array_append_new(arr, o);
    }
    json_object_set_new(j, "kernel_names", json_integer(n));
    json_object_set_new(j, "top_kernels", arr);
    json_object_set_new(j, "idle_gaps", gaps_json(a, nl, n_excl, top));
    return j;
}

json_t *gpu_activity_stop(struct gpu_activity *a, int top, double bin_s)
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
    json_t *j = summary(a, top, bin_s);
    release(a);
    return j;
}
