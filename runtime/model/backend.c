#include "backend.h"

#include <stdatomic.h>
#include <string.h>

#include "common.h"
#include "kernels_cpu.h"

/* upload / download / sync block until the copy is done: a host synchronisation, noted on the
 * cpu backend too, so that tests on the cpu see every one a decode step would make on cuda. */
static void cpu_upload(const struct kctx *c, void *dst, const void *src, size_t bytes)
{
    (void)c;
    pulse_host_sync_note();
    memcpy(dst, src, bytes);
}

static void cpu_copy_async(const struct kctx *c, void *dst, const void *src, size_t bytes)
{
    (void)c;
    memmove(dst, src, bytes);
}

static char cpu_event_token; /* every untimed cpu event: work is done when it is queued */

/* A timed cpu event: the host time of its last record (the stream is the calling thread, so
 * the work queued before it is done by then). Atomic: another thread may read it. */
struct cpu_timed_event {
    _Atomic double t;
};

static void *cpu_event_create(void)
{
    return &cpu_event_token;
}

static void *cpu_event_create_timed(void)
{
    struct cpu_timed_event *e = mem_alloc(MEM_HOST, sizeof *e, "cpu timed event");
    if (e) atomic_init(&e->t, 0.0);
    return e;
}

static void cpu_event_destroy(void *ev)
{
    if (ev != &cpu_event_token) mem_free(MEM_HOST, ev, sizeof(struct cpu_timed_event));
}

/* Untimed events are left alone; timed ones are stamped. */
static void cpu_event_record(const struct kctx *c, void *ev)
{
    (void)c;
    if (ev != &cpu_event_token) atomic_store(&((struct cpu_timed_event *)ev)->t, pulse_now());
}

static double cpu_event_elapsed_s(void *a, void *b)
{
    return atomic_load(&((struct cpu_timed_event *)b)->t) -
           atomic_load(&((struct cpu_timed_event *)a)->t);
}

static int cpu_event_query(void *ev)
{
    (void)ev;
    return 1;
}

static void cpu_event_sync(void *ev)
{
    (void)ev;
    pulse_host_sync_note();
}

static void cpu_stream_wait_event(const struct kctx *c, void *ev)
{
    (void)c;
    (void)ev; /* the work before the event ran when it was queued */
}

/* The cpu backend's stream is the calling thread: it waits here as a device would. */
static void cpu_wait_value(const struct kctx *c, const uint32_t *flag, uint32_t value)
{
    (void)c;
    pulse_wait_flag(flag, value, "cpu wait_value (a recall's flag)");
}

static void cpu_memset(const struct kctx *c, void *dst, int value, size_t bytes)
{
    (void)c;
    memset(dst, value, bytes);
}

static void cpu_sync(const struct kctx *c)
{
    (void)c;
    pulse_host_sync_note();
}

static int cpu_ctx_create(struct kctx *c, size_t workspace_bytes)
{
    memset(c, 0, sizeof *c);
    c->workspace_bytes = workspace_bytes;
    return PULSE_OK; /* the references need no workspace */
}

static int cpu_ctx_create_urgent(struct kctx *c)
{
    return cpu_ctx_create(c, 0);
}

static void cpu_ctx_free(struct kctx *c)
{
    memset(c, 0, sizeof *c);
}

/* The best of `reps` memcpy's of `bytes` between two fresh buffers, in GB/s counting
 * `counted` x bytes a copy; `alternate` swaps the direction every copy. */
static double best_memcpy_gbs(size_t bytes, int reps, double counted, int alternate)
{
    char *a = mem_alloc(MEM_HOST, bytes, "copy a"), *b = mem_alloc(MEM_HOST, bytes, "copy b");
    double best = 0.0;
    if (a && b) {
        memset(a, 1, bytes);
        memset(b, 2, bytes);
        for (int r = 0; r < reps; r++) {
            const int back = alternate && r % 2;
            double t = pulse_now();
            memcpy(back ? a : b, back ? b : a, bytes);
            double gbs = counted * (double)bytes / (pulse_now() - t) / 1e9;
            best = gbs > best ? gbs : best;
        }
    }
    mem_free(MEM_HOST, a, bytes);
    mem_free(MEM_HOST, b, bytes);
    return best;
}

static double cpu_copy_bandwidth(const struct kctx *c, size_t bytes, int reps)
{
    (void)c;
    return best_memcpy_gbs(bytes, reps, 2.0, 1); /* read + write */
}

static double cpu_h2d_bandwidth(const struct kctx *c, size_t bytes, int reps)
{
    (void)c;
    return best_memcpy_gbs(bytes, reps, 1.0, 0); /* "host to device" is a memcpy here */
}

static void cpu_describe(json_t *env)
{
    json_object_set_new(env, "device", json_string("cpu"));
}

static const struct backend cpu_backend = {
    .name = "cpu",
    .mem = MEM_HOST,
    .fill_random_bf16 = fill_random_bf16_ref,
    .embed = embed_ref,
    .rmsnorm = rmsnorm_ref,
    .gemm_bf16 = gemm_bf16_cpu,
    .qk_norm_rope_append = qk_norm_rope_append_ref,
    .attn_decode = attn_decode_cpu,
    .silu_mul = silu_mul_ref,
    .gelu_mul = gelu_mul_ref,
    .rmsnorm_add = rmsnorm_add_ref,
    .argmax = argmax_ref,
    .kv_fill_synthetic = kv_fill_synthetic_ref,
    .advance_pos = advance_pos_ref,
    .ctx_create = cpu_ctx_create,
    .ctx_create_urgent = cpu_ctx_create_urgent,
    .ctx_free = cpu_ctx_free,
    .upload = cpu_upload,
    .download = cpu_upload,
    .memset = cpu_memset,
    .sync = cpu_sync,
    .copy_async = cpu_copy_async,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .event_record_external = cpu_event_record,
    .event_query = cpu_event_query,
    .event_sync = cpu_event_sync,
    .stream_wait_event = cpu_stream_wait_event,
    .event_create_timed = cpu_event_create_timed,
    .event_elapsed_s = cpu_event_elapsed_s,
    .wait_value = cpu_wait_value,
    .copy_bandwidth = cpu_copy_bandwidth,
    .h2d_bandwidth = cpu_h2d_bandwidth,
    .describe = cpu_describe,
};

#ifdef PULSE_HAVE_CUDA
extern const struct backend cuda_backend; /* backend_cuda.c */
#endif

static const struct backend *const registry[] = {
    &cpu_backend,
#ifdef PULSE_HAVE_CUDA
    &cuda_backend,
#endif
};

const struct backend *backend_find(const char *name)
{
    for (size_t i = 0; i < PULSE_ARRAY_LEN(registry); i++)
        if (strcmp(registry[i]->name, name) == 0) return registry[i];
    return NULL;
}

const char *backend_env_device(const json_t *env)
{
    const json_t *v = json_object_get(env, "gpu");
    if (!json_is_string(v)) v = json_object_get(env, "device");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

const char *backend_names(void)
{
#ifdef PULSE_HAVE_CUDA
    return "cpu, cuda";
#else
    return "cpu";
#endif
}

#ifndef PULSE_HAVE_CUDA
int backend_cuda_available(void)
{
    return 0;
}
#endif
