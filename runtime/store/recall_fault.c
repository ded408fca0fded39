/* Fault injection into a recall copy path (recall_fault.h). */
#include "recall_fault.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"

static struct recall_fault *fault_of(const struct recall_copy_ops *o)
{
    return (struct recall_fault *)o->user;
}

/* 1 when this copy is one that fails; a delayed copy waits here and does not fail. */
static int fails(struct recall_fault *f)
{
    const int64_t k = atomic_fetch_add(&f->copies, 1) + 1;
    if (f->delay_us) {
        struct timespec ts = {(time_t)(f->delay_us / 1000000),
                              (long)(f->delay_us % 1000000) * 1000};
        while (nanosleep(&ts, &ts) != 0) {
        }
        atomic_fetch_add(&f->injected, 1);
        return 0;
    }
    if (f->first ? k > f->first : k % f->every != 0) return 0;
    atomic_fetch_add(&f->injected, 1);
    return 1;
}

static int h2d(const struct recall_copy_ops *o, void *dst, const void *src, size_t bytes,
               void *stream)
{
    struct recall_fault *f = fault_of(o);
    return fails(f) ? PULSE_ERR_IO : f->base->h2d(f->base, dst, src, bytes, stream);
}

static int batch(const struct recall_copy_ops *o, void *const *dsts, const void *const *srcs,
                 const size_t *sizes, size_t n, void *stream)
{
    struct recall_fault *f = fault_of(o);
    return fails(f) ? PULSE_ERR_IO : f->base->batch(f->base, dsts, srcs, sizes, n, stream);
}

/* The wrapped path's operations take the wrapped path's table. */
#define FORWARD(name, params, args)                                                                \
    static int fwd_##name params                                                                   \
    {                                                                                              \
        const struct recall_copy_ops *b = fault_of(o)->base;                                       \
        return b->name args;                                                                       \
    }
FORWARD(get_device, (const struct recall_copy_ops *o, int *dev), (b, dev))
FORWARD(set_device, (const struct recall_copy_ops *o, int dev), (b, dev))
FORWARD(stream_create, (const struct recall_copy_ops *o, void **s), (b, s))
FORWARD(event_create, (const struct recall_copy_ops *o, void **ev), (b, ev))
FORWARD(event_record, (const struct recall_copy_ops *o, void *ev, void *s), (b, ev, s))
FORWARD(event_query, (const struct recall_copy_ops *o, void *ev), (b, ev))
FORWARD(event_sync, (const struct recall_copy_ops *o, void *ev), (b, ev))
FORWARD(event_elapsed_ms, (const struct recall_copy_ops *o, void *a, void *c, float *ms),
        (b, a, c, ms))
FORWARD(stream_wait_event, (const struct recall_copy_ops *o, void *s, void *ev), (b, s, ev))
FORWARD(map_host, (const struct recall_copy_ops *o, const void *h, void **d), (b, h, d))
FORWARD(scatter, (const struct recall_copy_ops *o, const struct recall_desc *d, int n, void *s),
        (b, d, n, s))
FORWARD(gather,
        (const struct recall_copy_ops *o, const struct recall_desc *d, int n, int bl, int th,
         int kb, void *s),
        (b, d, n, bl, th, kb, s))
FORWARD(write_value, (const struct recall_copy_ops *o, uint32_t *flag, uint32_t v, void *s),
        (b, flag, v, s))

static void fwd_stream_destroy(const struct recall_copy_ops *o, void *s)
{
    fault_of(o)->base->stream_destroy(fault_of(o)->base, s);
}

static void fwd_event_destroy(const struct recall_copy_ops *o, void *ev)
{
    fault_of(o)->base->event_destroy(fault_of(o)->base, ev);
}

int recall_fault_init(struct recall_fault *f, const struct recall_copy_ops *base, const char *spec,
                      char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    long v = 0;
    const int every = spec && !strncmp(spec, "every:", 6),
              first = spec && !strncmp(spec, "first:", 6),
              delay = spec && !strncmp(spec, "delay:", 6);
    if ((every || first || delay) && spec[6] >= '1' && spec[6] <= '9') {
        char *end = NULL;
        v = strtol(spec + 6, &end, 10);
        if (*end != 0 || v > (delay ? 1000000L : 1000000000L)) v = 0;
    }
    if (spec && !strcmp(spec, "dead")) v = 1;
    if (v < 1)
        return pulse_errorf(err, errlen, PULSE_ERR_INVALID, "recall fault",
                            "'%s' is not dead, first:N, every:N (N from 1 to 1e9) or delay:US "
                            "(US from 1 to 1e6)",
                            spec ? spec : "");
    f->base = base;
    f->every = first || delay ? 1 : (int)v;
    f->first = first ? v : 0;
    f->delay_us = delay ? v : 0;
    f->ops = *base;
    f->ops.name = "fault-injecting";
    f->ops.user = f;
    f->ops.h2d = h2d;
    f->ops.batch = base->batch ? batch : NULL;
#define SET(name) f->ops.name = base->name ? fwd_##name : NULL
    SET(get_device);
    SET(set_device);
    SET(stream_create);
    SET(event_create);
    SET(event_record);
    SET(event_query);
    SET(event_sync);
    SET(event_elapsed_ms);
    SET(stream_wait_event);
    SET(map_host);
    SET(scatter);
    SET(gather);
    SET(write_value);
#undef SET
    f->ops.stream_destroy = base->stream_destroy ? fwd_stream_destroy : NULL;
    f->ops.event_destroy = base->event_destroy ? fwd_event_destroy : NULL;
    return PULSE_OK;
}

int64_t recall_fault_injected(const struct recall_fault *f)
{
    return atomic_load(&((struct recall_fault *)f)->injected);
}
