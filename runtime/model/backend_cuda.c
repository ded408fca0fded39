/* The CUDA backend: the kernels of kernels_cuda.cu / attn_cuda.cu, a stream, a cuBLAS handle
 * and the engine's device workspace. Plain C over the CUDA runtime and cuBLAS C APIs. */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <string.h>

#include "backend.h"
#include "common.h"
#include "cuda_check.h"
#include "stream_value.h"

int backend_cuda_available(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n > 0;
}

/* A context on a pooled stream of normal or (greatest) the greatest priority. */
static int ctx_make(struct kctx *c, size_t workspace_bytes, int greatest)
{
    memset(c, 0, sizeof *c);
    if (!backend_cuda_available()) return PULSE_ERR_INVALID;
    cudaStream_t s;
    cublasHandle_t h;
    int dev;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&c->num_sms, cudaDevAttrMultiProcessorCount, dev));
    s = pulse_cuda_stream_acquire(greatest); /* from the pool: see stream_value.h */
    CUBLAS_CHECK(cublasCreate(&h));
    CUBLAS_CHECK(cublasSetStream(h, s));
    CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    /* a fixed cuBLAS workspace, so GEMMs never allocate inside a step or a graph capture */
    c->blas_workspace_bytes = (size_t)32 << 20;
    c->blas_workspace = mem_alloc(MEM_DEVICE, c->blas_workspace_bytes, "cublas workspace");
    if (!c->blas_workspace) {
        cublasDestroy(h);
        pulse_cuda_stream_release(s);
        memset(c, 0, sizeof *c);
        return PULSE_ERR_OOM;
    }
    CUBLAS_CHECK(cublasSetWorkspace(h, c->blas_workspace, c->blas_workspace_bytes));
    c->stream = s;
    c->blas = h;
    c->workspace_bytes = workspace_bytes;
    if (workspace_bytes) {
        c->workspace = mem_alloc(MEM_DEVICE, workspace_bytes, "workspace");
        if (!c->workspace) {
            cublasDestroy(h);
            pulse_cuda_stream_release(s);
            memset(c, 0, sizeof *c);
            return PULSE_ERR_OOM;
        }
    }
    return PULSE_OK;
}

static int cuda_ctx_create(struct kctx *c, size_t workspace_bytes)
{
    return ctx_make(c, workspace_bytes, 0);
}

static int cuda_ctx_create_urgent(struct kctx *c)
{
    return ctx_make(c, 0, 1);
}

static void cuda_ctx_free(struct kctx *c)
{
    if (c->stream) CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)c->stream));
    mem_free(MEM_DEVICE, c->workspace, c->workspace_bytes);
    mem_free(MEM_DEVICE, c->blas_workspace, c->blas_workspace_bytes);
    if (c->blas) cublasDestroy((cublasHandle_t)c->blas);
    if (c->stream) pulse_cuda_stream_release(c->stream);
    memset(c, 0, sizeof *c);
}

static void cuda_copy(const struct kctx *c, void *dst, const void *src, size_t bytes)
{
    cudaStream_t s = (cudaStream_t)c->stream;
    pulse_host_sync_note();
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
}

static void cuda_copy_async(const struct kctx *c, void *dst, const void *src, size_t bytes)
{
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)c->stream));
}

static void *cuda_event_create(void)
{
    cudaEvent_t ev;
    CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    return ev;
}

static void *cuda_event_create_timed(void)
{
    cudaEvent_t ev;
    CUDA_CHECK(cudaEventCreate(&ev)); /* default flags: with timing */
    return ev;
}

static double cuda_event_elapsed_s(void *a, void *b)
{
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, (cudaEvent_t)a, (cudaEvent_t)b));
    return (double)ms * 1e-3;
}

static void cuda_event_destroy(void *ev)
{
    if (ev) CUDA_CHECK(cudaEventDestroy((cudaEvent_t)ev));
}

static void cuda_event_record(const struct kctx *c, void *ev)
{
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)c->stream));
}

static void cuda_event_record_external(const struct kctx *c, void *ev)
{
    enum cudaStreamCaptureStatus cs;
    CUDA_CHECK(cudaStreamIsCapturing((cudaStream_t)c->stream, &cs));
    if (cs == cudaStreamCaptureStatusActive)
        CUDA_CHECK(cudaEventRecordWithFlags((cudaEvent_t)ev, (cudaStream_t)c->stream,
                                            cudaEventRecordExternal));
    else
        CUDA_CHECK(cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)c->stream));
}

static int cuda_event_query(void *ev)
{
    cudaError_t e = cudaEventQuery((cudaEvent_t)ev);
    if (e == cudaErrorNotReady) return 0;
    CUDA_CHECK(e);
    return 1;
}

static void cuda_event_sync(void *ev)
{
    pulse_host_sync_note();
    CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)ev));
}

static void cuda_stream_wait_event(const struct kctx *c, void *ev)
{
    CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)c->stream, (cudaEvent_t)ev, 0));
}

static void cuda_wait_value(const struct kctx *c, const uint32_t *flag, uint32_t value)
{
    pulse_cuda_wait_value(c->stream, flag, value);
}

static void cuda_memset(const struct kctx *c, void *dst, int value, size_t bytes)
{
    CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, (cudaStream_t)c->stream));
}

static void cuda_sync(const struct kctx *c)
{
    pulse_host_sync_note();
    CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)c->stream));
}

/* The fastest of `reps` timed cudaMemcpyAsync's of `bytes` (after one warm-up, with the device
 * idle first), in GB/s counting `counted` x bytes a copy; `alternate` swaps src and dst every
 * copy (device to device). The fastest, as a ceiling: in a sweep the last point's teardown (a
 * host pool unpinning, a stream draining) can slow some copies, never speed one up. */
static double best_copy_gbs(cudaStream_t s, void *dst, void *src, size_t bytes, int reps,
                            double counted, int alternate)
{
    if (reps < 1) return 0.0;
    CUDA_CHECK(cudaDeviceSynchronize());
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s)); /* warm-up */
    float best = 0.0f;
    for (int r = 0; r < reps; r++) {
        const int back = alternate && r % 2;
        float ms;
        CUDA_CHECK(cudaEventRecord(e0, s));
        CUDA_CHECK(
            cudaMemcpyAsync(back ? src : dst, back ? dst : src, bytes, cudaMemcpyDefault, s));
        CUDA_CHECK(cudaEventRecord(e1, s));
        CUDA_CHECK(cudaEventSynchronize(e1));
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        if (r == 0 || ms < best) best = ms;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return counted * (double)bytes / (best * 1e-3) / 1e9;
}

static double cuda_copy_bandwidth(const struct kctx *c, size_t bytes, int reps)
{
    cudaStream_t s = (cudaStream_t)c->stream;
    void *a = mem_alloc(MEM_DEVICE, bytes, "copy a"), *b = mem_alloc(MEM_DEVICE, bytes, "copy b");
    double gbs = 0.0;
    if (a && b) {
        CUDA_CHECK(cudaMemsetAsync(a, 1, bytes, s));
        gbs = best_copy_gbs(s, b, a, bytes, reps, 2.0, 1); /* read + write */
    }
    mem_free(MEM_DEVICE, a, bytes);
    mem_free(MEM_DEVICE, b, bytes);
    return gbs;
}

static double cuda_h2d_bandwidth(const struct kctx *c, size_t bytes, int reps)
{
    void *h = mem_alloc(MEM_PINNED, bytes, "h2d host"),
         *d = mem_alloc(MEM_DEVICE, bytes, "h2d dev");
    double gbs = 0.0;
    if (h && d) {
        memset(h, 1, bytes);
        gbs = best_copy_gbs((cudaStream_t)c->stream, d, h, bytes, reps, 1.0, 0);
    }
    mem_free(MEM_PINNED, h, bytes);
    mem_free(MEM_DEVICE, d, bytes);
    return gbs;
}

static void cuda_graph_begin(const struct kctx *c)
{
    CUDA_CHECK(cudaStreamBeginCapture((cudaStream_t)c->stream, cudaStreamCaptureModeThreadLocal));
}

static void *cuda_graph_end(const struct kctx *c)
{
    cudaGraph_t g;
    cudaGraphExec_t x;
    CUDA_CHECK(cudaStreamEndCapture((cudaStream_t)c->stream, &g));
    CUDA_CHECK(cudaGraphInstantiate(&x, g, 0));
    CUDA_CHECK(cudaGraphDestroy(g));
    return x;
}

static void cuda_graph_launch(const struct kctx *c, void *graph)
{
    CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)graph, (cudaStream_t)c->stream));
}

static void cuda_graph_destroy(void *graph)
{
    if (graph) CUDA_CHECK(cudaGraphExecDestroy((cudaGraphExec_t)graph));
}

static void cuda_describe(json_t *env)
{
    int dev = 0, drv = 0, rt = 0, blas = 0;
    struct cudaDeviceProp p;
    char buf[32];
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
    CUDA_CHECK(cudaDriverGetVersion(&drv));
    CUDA_CHECK(cudaRuntimeGetVersion(&rt));
    cublasHandle_t h;
    CUBLAS_CHECK(cublasCreate(&h));
    CUBLAS_CHECK(cublasGetVersion(h, &blas));
    cublasDestroy(h);
    json_object_set_new(env, "device", json_string("cuda"));
    json_object_set_new(env, "gpu", json_string(p.name));
    json_object_set_new(env, "gpu_sms", json_integer(p.multiProcessorCount));
    json_object_set_new(env, "gpu_mem_bytes", json_integer((json_int_t)p.totalGlobalMem));
    json_object_set_new(env, "gpu_cc", json_integer(p.major * 10 + p.minor));
    snprintf(buf, sizeof buf, "%d.%d", drv / 1000, (drv % 1000) / 10);
    json_object_set_new(env, "cuda_driver_api", json_string(buf));
    snprintf(buf, sizeof buf, "%d.%d", rt / 1000, (rt % 1000) / 10);
    json_object_set_new(env, "cuda_runtime", json_string(buf));
    snprintf(buf, sizeof buf, "%d.%d.%d", blas / 10000, (blas % 10000) / 100, blas % 100);
    json_object_set_new(env, "cublas", json_string(buf));
    FILE *f = popen("nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null", "r");
    if (f) {
        char line[64] = "";
        if (fgets(line, sizeof line, f)) {
            line[strcspn(line, "\r\n")] = 0;
            if (line[0]) json_object_set_new(env, "driver", json_string(line));
        }
        pclose(f);
    }
}

const struct backend cuda_backend = {
    .name = "cuda",
    .mem = MEM_DEVICE,
    .fill_random_bf16 = fill_random_bf16_cuda,
    .embed = embed_cuda,
    .rmsnorm = rmsnorm_cuda,
    .gemm_bf16 = gemm_bf16_cuda,
    .qk_norm_rope_append = qk_norm_rope_append_cuda,
    .attn_decode = attn_decode_cuda,
    .silu_mul = silu_mul_cuda,
    .gelu_mul = gelu_mul_cuda,
    .rmsnorm_add = rmsnorm_add_cuda,
    .argmax = argmax_cuda,
    .kv_fill_synthetic = kv_fill_synthetic_cuda,
    .advance_pos = advance_pos_cuda,
    .ctx_create = cuda_ctx_create,
    .ctx_create_urgent = cuda_ctx_create_urgent,
    .ctx_free = cuda_ctx_free,
    .upload = cuda_copy,
    .download = cuda_copy,
    .memset = cuda_memset,
    .sync = cuda_sync,
    .copy_async = cuda_copy_async,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_record_external = cuda_event_record_external,
    .event_query = cuda_event_query,
    .event_sync = cuda_event_sync,
    .stream_wait_event = cuda_stream_wait_event,
    .event_create_timed = cuda_event_create_timed,
    .event_elapsed_s = cuda_event_elapsed_s,
    .wait_value = cuda_wait_value,
    .copy_bandwidth = cuda_copy_bandwidth,
    .h2d_bandwidth = cuda_h2d_bandwidth,
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .graph_launch = cuda_graph_launch,
    .graph_destroy = cuda_graph_destroy,
    .describe = cuda_describe,
};
