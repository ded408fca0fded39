/* The CPU copy path of the recall engines (recall.h): synchronous memcpy, "device" memory is
 * host memory, events are timestamps that are always complete. CI tests run every engine on it
 * and wrap it to inject delays and failures. Also the CPU references of the recall kernels. */
#include <stdatomic.h>
#include <string.h>

#include "common.h"
#include "recall.h"

void recall_scatter_ref(const struct recall_desc *d_desc, int n, void *stream)
{
    (void)stream;
    for (int i = 0; i < n; i++) /* a descriptor of 0 bytes moves nothing (its pointers may be 0) */
        if (d_desc[i].bytes)
            memcpy((void *)(uintptr_t)d_desc[i].dst, (const void *)(uintptr_t)d_desc[i].src,
                   (size_t)d_desc[i].bytes);
}

void recall_gather_ref(const struct recall_desc *d_desc, int n, int blocks, int threads,
                       int inflight_kb, void *stream)
{
    (void)blocks;
    (void)threads;
    (void)inflight_kb;
    recall_scatter_ref(d_desc, n, stream);
}

void recall_gather_dev_ref(const struct recall_desc *d_desc, const int32_t *d_count, int max_n,
                           int blocks, int threads, int inflight_kb, void *stream)
{
    int n = *d_count < 0 ? 0 : PULSE_MIN(*d_count, max_n);
    recall_gather_ref(d_desc, n, blocks, threads, inflight_kb, stream);
}

struct cpu_event {
    _Atomic double t; /* pulse_now() at the last record */
};

static char cpu_stream_token;

static int cpu_get_device(const struct recall_copy_ops *o, int *dev)
{
    (void)o;
    *dev = 0;
    return 0;
}
static int cpu_set_device(const struct recall_copy_ops *o, int dev)
{
    (void)o;
    (void)dev;
    return 0;
}
static int cpu_stream_create(const struct recall_copy_ops *o, void **s)
{
    (void)o;
    *s = &cpu_stream_token;
    return PULSE_OK;
}
static void cpu_stream_destroy(const struct recall_copy_ops *o, void *s)
{
    (void)o;
    (void)s;
}
static int cpu_event_create(const struct recall_copy_ops *o, void **ev)
{
    (void)o;
    struct cpu_event *e = mem_alloc(MEM_HOST, sizeof *e, "cpu event");
    if (!e) return PULSE_ERR_NOMEM;
    atomic_init(&e->t, 0.0);
    *ev = e;
    return PULSE_OK;
}
static void cpu_event_destroy(const struct recall_copy_ops *o, void *ev)
{
    (void)o;
    mem_free(MEM_HOST, ev, sizeof(struct cpu_event));
}
static int cpu_event_record(const struct recall_copy_ops *o, void *ev, void *s)
{
    (void)o;
    (void)s;
    atomic_store(&((struct cpu_event *)ev)->t, pulse_now());
    return PULSE_OK;
}
static int cpu_event_query(const struct recall_copy_ops *o, void *ev)
{
    (void)o;
    (void)ev;
    return 1;
}
static int cpu_event_sync(const struct recall_copy_ops *o, void *ev)
{
    (void)o;
    (void)ev;
    return 0;
}
static int cpu_event_elapsed(const struct recall_copy_ops *o, void *a, void *b, float *ms)
{
    (void)o;
    *ms = (float)((atomic_load(&((struct cpu_event *)b)->t) -
                   atomic_load(&((struct cpu_event *)a)->t)) *
                  1e3);
    return PULSE_OK;
}
static int cpu_stream_wait(const struct recall_copy_ops *o, void *s, void *ev)
{
    (void)o, (void)s, (void)ev;
    return PULSE_OK;
}
static int cpu_map_host(const struct recall_copy_ops *o, const void *host, void **dev)
{
    (void)o;
    *dev = (void *)host;
    return PULSE_OK;
}
static int cpu_h2d(const struct recall_copy_ops *o, void *dst, const void *src, size_t bytes,
                   void *s)
{
    (void)o, (void)s;
    memcpy(dst, src, bytes);
    return PULSE_OK;
}
static int cpu_batch(const struct recall_copy_ops *o, void *const *dsts, const void *const *srcs,
                     const size_t *sizes, size_t n, void *s)
{
    (void)o, (void)s;
    for (size_t i = 0; i < n; i++)
        memcpy(dsts[i], srcs[i], sizes[i]);
    return PULSE_OK;
}
static int cpu_write_value(const struct recall_copy_ops *o, uint32_t *flag, uint32_t value, void *s)
{
    (void)o, (void)s;
    atomic_store_explicit((_Atomic uint32_t *)flag, value, memory_order_release);
    return PULSE_OK;
}

static int cpu_scatter(const struct recall_copy_ops *o, const struct recall_desc *d, int n, void *s)
{
    (void)o;
    recall_scatter_ref(d, n, s);
    return PULSE_OK;
}
static int cpu_gather(const struct recall_copy_ops *o, const struct recall_desc *d, int n,
                      int blocks, int threads, int inflight_kb, void *s)
{
    (void)o;
    recall_gather_ref(d, n, blocks, threads, inflight_kb, s);
    return PULSE_OK;
}

static const struct recall_copy_ops cpu_ops = {
    .name = "cpu",
    .host_kind = MEM_HOST,
    .dev_kind = MEM_HOST,
    .get_device = cpu_get_device,
    .set_device = cpu_set_device,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .event_query = cpu_event_query,
    .event_sync = cpu_event_sync,
    .event_elapsed_ms = cpu_event_elapsed,
    .stream_wait_event = cpu_stream_wait,
    .map_host = cpu_map_host,
    .h2d = cpu_h2d,
    .batch = cpu_batch,
    .scatter = cpu_scatter,
    .gather = cpu_gather,
    .write_value = cpu_write_value,
};

const struct recall_copy_ops *recall_copy_ops_cpu(void)
{
    return &cpu_ops;
}
