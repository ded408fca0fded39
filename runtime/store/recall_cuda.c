/* The CUDA copy path of the recall engines (recall.h), over the runtime API. Transfer and event
 * errors come back as PULSE_ERR_IO (printed once, with the CUDA error name) so that the engine
 * reports them in the recall's status; kernel launch errors are programming errors and abort
 * through CUDA_CHECK_LAUNCH (recall_kernels.cu). Streams get the highest priority, so a recall's
 * kernels are scheduled ahead of compute kernels queued beside them. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "cuda_check.h"
#include "recall.h"
#include "stream_value.h"

static int status_of(cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return PULSE_OK;
    fprintf(stderr, "recall: %s: %s (%s)\n", what, cudaGetErrorName(e), cudaGetErrorString(e));
    (void)cudaGetLastError(); /* clear a non-sticky error so later calls work */
    return PULSE_ERR_IO;
}

static int cu_get_device(const struct recall_copy_ops *o, int *dev)
{
    (void)o;
    return status_of(cudaGetDevice(dev), "cudaGetDevice");
}

static int cu_set_device(const struct recall_copy_ops *o, int dev)
{
    (void)o;
    return status_of(cudaSetDevice(dev), "cudaSetDevice");
}

static int cu_stream_create(const struct recall_copy_ops *o, void **stream)
{
    (void)o;
    recall_kernels_load();
    *stream = pulse_cuda_stream_acquire(1); /* high priority, from the pool (stream_value.h) */
    return PULSE_OK;
}

static void cu_stream_destroy(const struct recall_copy_ops *o, void *stream)
{
    (void)o;
    pulse_cuda_stream_release(stream);
}

static int cu_event_create(const struct recall_copy_ops *o, void **ev)
{
    (void)o;
    cudaEvent_t e = NULL;
    int rc = status_of(cudaEventCreate(&e), "cudaEventCreate");
    *ev = e;
    return rc;
}

static void cu_event_destroy(const struct recall_copy_ops *o, void *ev)
{
    (void)o;
    CUDA_CHECK(cudaEventDestroy((cudaEvent_t)ev));
}

static int cu_event_record(const struct recall_copy_ops *o, void *ev, void *stream)
{
    (void)o;
    return status_of(cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)stream), "cudaEventRecord");
}

static int cu_event_query(const struct recall_copy_ops *o, void *ev)
{
    (void)o;
    cudaError_t e = cudaEventQuery((cudaEvent_t)ev);
    if (e == cudaErrorNotReady) return 0;
    return e == cudaSuccess ? 1 : status_of(e, "cudaEventQuery");
}

static int cu_event_sync(const struct recall_copy_ops *o, void *ev)
{
    (void)o;
    return status_of(cudaEventSynchronize((cudaEvent_t)ev), "cudaEventSynchronize");
}

static int cu_event_elapsed(const struct recall_copy_ops *o, void *a, void *b, float *ms)
{
    (void)o;
    return status_of(cudaEventElapsedTime(ms, (cudaEvent_t)a, (cudaEvent_t)b),
                     "cudaEventElapsedTime");
}

static int cu_stream_wait(const struct recall_copy_ops *o, void *stream, void *ev)
{
    (void)o;
    return status_of(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)ev, 0),
                     "cudaStreamWaitEvent");
}

static int cu_map_host(const struct recall_copy_ops *o, const void *host, void **dev)
{
    (void)o;
    return status_of(cudaHostGetDevicePointer(dev, (void *)host, 0), "cudaHostGetDevicePointer");
}

static int cu_h2d(const struct recall_copy_ops *o, void *dst, const void *src, size_t bytes,
                  void *stream)
{
    (void)o;
    return status_of(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)stream),
                     "cudaMemcpyAsync");
}

static int cu_batch(const struct recall_copy_ops *o, void *const *dsts, const void *const *srcs,
                    const size_t *sizes, size_t n, void *stream)
{
    (void)o;
#if CUDART_VERSION >= 12080
    /* CUDA 13: (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream); one attribute
     * for every copy: sources are read in stream order (the pool is stable until completion). */
    struct cudaMemcpyAttributes attr;
    memset(&attr, 0, sizeof attr);
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    size_t first = 0;
#if CUDART_VERSION >= 13000
    cudaError_t e =
        cudaMemcpyBatchAsync(dsts, srcs, sizes, n, &attr, &first, 1, (cudaStream_t)stream);
#else
    size_t fail_idx = 0; /* CUDA 12.8-12.9 has a failIdx argument */
    cudaError_t e = cudaMemcpyBatchAsync((void **)dsts, (void **)srcs, (size_t *)sizes, n, &attr,
                                         &first, 1, &fail_idx, (cudaStream_t)stream);
#endif
    return status_of(e, "cudaMemcpyBatchAsync");
#else
    (void)dsts, (void)srcs, (void)sizes, (void)n, (void)stream;
    fprintf(stderr, "recall: cudaMemcpyBatchAsync needs CUDA 12.8 or newer\n");
    return PULSE_ERR_INVALID;
#endif
}

static int cu_write_value(const struct recall_copy_ops *o, uint32_t *flag, uint32_t value, void *s)
{
    (void)o;
    return pulse_cuda_write_value(s, flag, value);
}

static int cu_scatter(const struct recall_copy_ops *o, const struct recall_desc *d_desc, int n,
                      void *stream)
{
    (void)o;
    recall_scatter_cuda(d_desc, n, stream);
    return PULSE_OK;
}

/* d_desc: in device memory (the engine copies its descriptors there on the same stream first) */
static int cu_gather(const struct recall_copy_ops *o, const struct recall_desc *d_desc, int n,
                     int blocks, int threads, int inflight_kb, void *stream)
{
    (void)o;
    recall_gather_cuda(d_desc, n, blocks, threads, inflight_kb, stream);
    return PULSE_OK;
}

const struct recall_copy_ops recall_cuda_ops = {
    .name = "cuda",
    .host_kind = MEM_PINNED,
    .dev_kind = MEM_DEVICE,
    .get_device = cu_get_device,
    .set_device = cu_set_device,
    .stream_create = cu_stream_create,
    .stream_destroy = cu_stream_destroy,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .event_query = cu_event_query,
    .event_sync = cu_event_sync,
    .event_elapsed_ms = cu_event_elapsed,
    .stream_wait_event = cu_stream_wait,
    .map_host = cu_map_host,
    .h2d = cu_h2d,
    .batch = cu_batch,
    .scatter = cu_scatter,
    .gather = cu_gather,
    .write_value = cu_write_value,
};
