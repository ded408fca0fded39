/* Stream memory operations through the driver's entry points (stream_value.h). */
#include "stream_value.h"

#include <cuda.h>
#include <pthread.h>
#include <stdlib.h>

#include "common.h"
#include "cuda_check.h"

typedef CUresult (*value_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

static value_fn fn_wait, fn_write;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static value_fn entry(const char *name)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q;
    CUDA_CHECK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q));
    PULSE_CHECK(q == cudaDriverEntryPointSuccess && fn, name);
    return (value_fn)fn;
}

static void resolve(void)
{
    fn_wait = entry("cuStreamWaitValue32");
    fn_write = entry("cuStreamWriteValue32");
}

static CUdeviceptr dev_addr(const uint32_t *flag)
{
    struct cudaPointerAttributes a;
    CUDA_CHECK(cudaPointerGetAttributes(&a, flag));
    const void *d = a.type == cudaMemoryTypeHost ? a.devicePointer : (const void *)flag;
    PULSE_CHECK(d != NULL, "stream value: the flag is neither pinned host nor device memory");
    return (CUdeviceptr)(uintptr_t)d;
}

void pulse_cuda_wait_value(void *stream, const uint32_t *flag, uint32_t value)
{
    pthread_once(&once, resolve);
    CUresult r = fn_wait((CUstream)stream, dev_addr(flag), value, CU_STREAM_WAIT_VALUE_GEQ);
    if (r != CUDA_SUCCESS) {
        char d[64];
        snprintf(d, sizeof d, "CUresult %d", (int)r);
        pulse_die(__FILE__, __LINE__, "cuStreamWaitValue32", d);
    }
}

int pulse_cuda_write_value(void *stream, uint32_t *flag, uint32_t value)
{
    pthread_once(&once, resolve);
    CUresult r = fn_write((CUstream)stream, dev_addr(flag), value, CU_STREAM_WRITE_VALUE_DEFAULT);
    return r == CUDA_SUCCESS ? PULSE_OK : PULSE_ERR_IO;
}

/* Before any CUDA call of the process (both are read when the context starts), unless the
 * environment sets them: 32 hardware connections, and every kernel loaded when its module is.
 * Lazy loading (CUDA's default) loads a kernel at its first launch and may wait for the work
 * in flight to finish first: a recall kernel launched for the first time while the compute
 * stream waits on that recall's flag would wait for itself. */
__attribute__((constructor)) static void cuda_environment(void)
{
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    setenv("CUDA_MODULE_LOADING", "EAGER", 0);
}

#define POOL_MAX 64

static struct {
    pthread_mutex_t mu;
    void *free[2][POOL_MAX]; /* [greatest] */
    int n[2];
} pool = {PTHREAD_MUTEX_INITIALIZER, {{0}}, {0, 0}};

void *pulse_cuda_stream_acquire(int greatest)
{
    const int g = greatest != 0;
    pthread_mutex_lock(&pool.mu);
    void *s = pool.n[g] ? pool.free[g][--pool.n[g]] : NULL;
    pthread_mutex_unlock(&pool.mu);
    if (s) return s;
    int least = 0, most = 0;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &most));
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreateWithPriority(&st, cudaStreamNonBlocking, g ? most : 0));
    return st;
}

void pulse_cuda_stream_release(void *stream)
{
    if (!stream) return;
    CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)stream));
    int prio = 0, least = 0, most = 0;
    CUDA_CHECK(cudaStreamGetPriority((cudaStream_t)stream, &prio));
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &most));
    const int g = prio == most && most != 0;
    pthread_mutex_lock(&pool.mu);
    if (pool.n[g] < POOL_MAX) {
        pool.free[g][pool.n[g]++] = stream;
        stream = NULL;
    }
    pthread_mutex_unlock(&pool.mu);
    if (stream) CUDA_CHECK(cudaStreamDestroy((cudaStream_t)stream));
}
