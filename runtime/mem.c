#include "mem.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#ifdef PULSE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static _Atomic size_t live[MEM_KINDS], peak[MEM_KINDS], calls[MEM_KINDS];

static void count(enum mem_kind kind, size_t bytes)
{
    size_t now = atomic_fetch_add(&live[kind], bytes) + bytes;
    size_t p = atomic_load(&peak[kind]);
    while (now > p && !atomic_compare_exchange_weak(&peak[kind], &p, now)) {
    }
    atomic_fetch_add(&calls[kind], 1);
}

void *mem_alloc(enum mem_kind kind, size_t bytes, const char *name)
{
    (void)name;
    void *p = NULL;
    if (bytes == 0) bytes = 1;
    switch (kind) {
    case MEM_HOST:
        if (posix_memalign(&p, 64, bytes) != 0) p = NULL;
        break;
#ifdef PULSE_HAVE_CUDA
    case MEM_PINNED:
        if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped) != cudaSuccess) {
            (void)cudaGetLastError();
            p = NULL;
        }
        break;
    case MEM_DEVICE:
        if (cudaMalloc(&p, bytes) != cudaSuccess) {
            (void)cudaGetLastError(); /* clear the sticky-free error so later calls work */
            p = NULL;
        }
        break;
#endif
    default:
        p = NULL;
    }
    if (p) count(kind, bytes);
    return p;
}

void mem_free(enum mem_kind kind, void *p, size_t bytes)
{
    if (!p) return;
    if (bytes == 0) bytes = 1;
    switch (kind) {
    case MEM_HOST:
        free(p);
        break;
#ifdef PULSE_HAVE_CUDA
    case MEM_PINNED:
        cudaFreeHost(p);
        break;
    case MEM_DEVICE:
        cudaFree(p);
        break;
#endif
    default:
        return;
    }
    atomic_fetch_sub(&live[kind], bytes);
}

void mem_get_stats(struct mem_stats *out)
{
    for (int k = 0; k < MEM_KINDS; k++) {
        out->live_bytes[k] = atomic_load(&live[k]);
        out->peak_bytes[k] = atomic_load(&peak[k]);
        out->alloc_calls[k] = atomic_load(&calls[k]);
    }
}

const char *mem_kind_name(enum mem_kind kind)
{
    static const char *names[MEM_KINDS] = {"host", "pinned", "device"};
    return (unsigned)kind < MEM_KINDS ? names[kind] : "?";
}
