/* A backend is a struct of function pointers: the kernels of kernels.h (same signatures) plus
 * memory movement. `cpu` runs on host memory: the fast GEMM and attention of kernels_cpu.h,
 * the references for the rest; `cuda` runs the CUDA kernels on device memory. Registered by
 * name in one table (backend_find). */
#ifndef PULSE_BACKEND_H
#define PULSE_BACKEND_H

#include <jansson.h>

#include "kernels.h"
#include "mem.h"

struct backend {
    const char *name;
    enum mem_kind mem; /* where tensors live: MEM_HOST (cpu) or MEM_DEVICE (cuda) */

    void (*fill_random_bf16)(const struct kctx *, uint16_t *, size_t, uint64_t, float, float);
    void (*embed)(const struct kctx *, const int32_t *, const uint16_t *, float *, int, int, float);
    void (*rmsnorm)(const struct kctx *, const float *, const uint16_t *, uint16_t *, int, int,
                    float);
    void (*gemm_bf16)(const struct kctx *, const uint16_t *, const uint16_t *, float *, int, int,
                      int, float);
    void (*qk_norm_rope_append)(const struct kctx *, const float *, const uint16_t *,
                                const uint16_t *, uint16_t *, const struct kv_view *,
                                const int32_t *, int, int, const float *, float);
    void (*attn_decode)(const struct kctx *, const uint16_t *, const struct kv_view *,
                        const int32_t *, uint16_t *, int, int, int, float);
    void (*silu_mul)(const struct kctx *, const float *, uint16_t *, int, int);
    void (*gelu_mul)(const struct kctx *, const float *, uint16_t *, int, int);
    void (*rmsnorm_add)(const struct kctx *, float *, const float *, const uint16_t *, int, int,
                        float);
    void (*argmax)(const struct kctx *, const float *, int32_t *, int, int);
    void (*kv_fill_synthetic)(const struct kctx *, const struct kv_view *, const int32_t *,
                              const int32_t *, int, int, uint64_t, int);
    void (*advance_pos)(const struct kctx *, int32_t *, int);

    /* Creates the execution context (stream, BLAS handle, `workspace_bytes` of scratch).
     * Returns PULSE_OK or PULSE_ERR_OOM / PULSE_ERR_INVALID (no device). */
    int (*ctx_create)(struct kctx *c, size_t workspace_bytes);
    /* The same with a stream of the greatest priority, for work other streams wait on (the
     * zero-copy gather beside the compute stream): its blocks take SMs as they free, ahead of
     * the compute stream's pending ones. */
    int (*ctx_create_urgent)(struct kctx *c);
    void (*ctx_free)(struct kctx *c);
    /* Copies between host memory and backend memory, ordered on the context's stream and
     * complete when the call returns (admin-path copies, not in the decode step). */
    void (*upload)(const struct kctx *c, void *dst, const void *src, size_t bytes);
    void (*download)(const struct kctx *c, void *dst, const void *src, size_t bytes);
    void (*memset)(const struct kctx *c, void *dst, int value, size_t bytes);
    /* Waits for all work queued on the context. */
    void (*sync)(const struct kctx *c);
    /* The decode step's asynchronous side (nothing here blocks the caller on device work):
     * copies queued on the context's stream between host memory (pinned on cuda: the host side
     * must stay untouched until the copy has run) and backend memory, or within backend memory;
     * the cpu backend copies at once. */
    void (*copy_async)(const struct kctx *c, void *dst, const void *src, size_t bytes);
    /* Events: created once (outside any step), recorded on the context's stream; query is
     * non-blocking (1 done, 0 pending); sync blocks the calling thread (a host synchronisation,
     * noted). The cpu backend's work is done when it is queued, so its events are always done. */
    void *(*event_create)(void);
    void (*event_destroy)(void *ev);
    void (*event_record)(const struct kctx *c, void *ev);
    /* event_record for a record queued inside a graph capture (engine_graph_run) that another
     * stream or the host waits for: each replay of the graph records the event (cuda: an
     * external event record node); outside a capture, event_record. */
    void (*event_record_external)(const struct kctx *c, void *ev);
    int (*event_query)(void *ev);
    void (*event_sync)(void *ev);
    /* The context's stream waits, on the device, for the work before the event's last record
     * (cudaStreamWaitEvent: a dependency CUDA sees, unlike wait_value); cpu: nothing to wait. */
    void (*stream_wait_event)(const struct kctx *c, void *ev);
    /* Timed events (for timelines): event_create_timed makes one that event_record stamps with
     * the time its stream reaches it (cuda: an event with timing; cpu: pulse_now() at the
     * record, when the work queued before it is done); the calls above take it too and
     * event_destroy frees it. event_elapsed_s: seconds from a to b, both timed, recorded and
     * complete (cuda: cudaEventElapsedTime's float milliseconds, about 0.5 us resolution, a
     * microsecond or coarser past some seconds apart). */
    void *(*event_create_timed)(void);
    double (*event_elapsed_s)(void *a, void *b);
    /* The stream waits until (int32_t)(*flag - value) >= 0 (a flag in pinned host memory that
     * another thread or a recall stream writes): on cuda on the device (cuStreamWaitValue32;
     * offload_params.host_wait has the offload step wait on the host instead); the cpu
     * backend, whose stream is the calling thread, spins until then. */
    void (*wait_value)(const struct kctx *c, const uint32_t *flag, uint32_t value);
    /* Measures the memory copy bandwidth on this backend's memory: copies of `bytes`, counting
     * bytes read plus written, the fastest of `reps` (a ceiling: other work on the device can
     * only slow a copy), in GB/s. Allocates (outside any step). */
    double (*copy_bandwidth)(const struct kctx *c, size_t bytes, int reps);
    /* The single-copy host-to-device peak: one copy of `bytes` from pinned host memory, the
     * fastest of `reps`, GB/s (the cpu backend: one memcpy). Allocates (outside any step). */
    double (*h2d_bandwidth)(const struct kctx *c, size_t bytes, int reps);
    /* CUDA graphs (NULL on the cpu backend): capture the work queued on the context between
     * begin and end into an executable graph; launch replays it; destroy frees it. */
    void (*graph_begin)(const struct kctx *c);
    void *(*graph_end)(const struct kctx *c);
    void (*graph_launch)(const struct kctx *c, void *graph);
    void (*graph_destroy)(void *graph);
    /* Adds the environment (device name, driver, runtime, BLAS versions) to `env`. */
    void (*describe)(json_t *env);
};

/* The backend registered under `name` ("cpu", "cuda"), or NULL. "cuda" exists only in CUDA
 * builds; whether a device is present is known at ctx_create. */
const struct backend *backend_find(const char *name);
/* The device an environment that a backend's describe() filled names: env.gpu, else env.device
 * (e.g. "NVIDIA H200", "cpu"); NULL when it names none. Points into env. */
const char *backend_env_device(const json_t *env);
/* Names of the registered backends, comma separated (for messages). */
const char *backend_names(void);
/* 1 when a CUDA device can be used by this build. */
int backend_cuda_available(void);

#endif
