/* The recall kernels (recall.h): the gather-scatter engine's scatter (device staging -> slots)
 * and the zero-copy gather (mapped pinned host memory -> slots). Both walk descriptors
 * {src, dst, bytes}, one thread block per descriptor at a time (grid-stride over descriptors);
 * a descriptor whose src, dst and bytes are multiples of 16 moves in 16-byte words, four loads
 * in flight per thread, anything else byte by byte. References: recall_cpu.c.
 *
 * The zero-copy kernel reads its descriptors from mapped host memory too; it gives each
 * descriptor to one warp, so a block has as many chunks in flight as it has warps, and each
 * warp prefetches its next descriptor while it copies the current one: the PCIe read latency
 * of a descriptor hides behind the data. Its grid is bounded (the engine's zc_blocks), since a few
 * blocks already saturate the link (HARDWARE.md) and every block is an SM slot taken from
 * compute that runs beside it. */
#include <cuda_runtime.h>

#include <stdint.h>

#include "cuda_check.h"
#include "recall.h"

namespace
{

__device__ __forceinline__ void copy_desc(uint64_t src, uint64_t dst, uint64_t bytes)
{
    if (((src | dst | bytes) & 15) == 0) {
        const uint4 *s = reinterpret_cast<const uint4 *>(src);
        uint4 *d = reinterpret_cast<uint4 *>(dst);
        const size_t nv = bytes >> 4, step = blockDim.x;
        size_t i = threadIdx.x;
        for (; i + 3 * step < nv; i += 4 * step) {
            const uint4 a = s[i], b = s[i + step], c = s[i + 2 * step], e = s[i + 3 * step];
            d[i] = a;
            d[i + step] = b;
            d[i + 2 * step] = c;
            d[i + 3 * step] = e;
        }
        for (; i < nv; i += step)
            d[i] = s[i];
    } else {
        const unsigned char *s = reinterpret_cast<const unsigned char *>(src);
        unsigned char *d = reinterpret_cast<unsigned char *>(dst);
        for (size_t i = threadIdx.x; i < bytes; i += blockDim.x)
            d[i] = s[i];
    }
}

__global__ void __launch_bounds__(256) scatter_kernel(const recall_desc *desc, int n)
{
    for (int i = blockIdx.x; i < n; i += gridDim.x) {
        const recall_desc d = desc[i];
        copy_desc(d.src, d.dst, d.bytes);
    }
}

/* One warp per descriptor (grid-stride over descriptors by warp): small chunks need many
 * chunks in flight at once, which a block-wide barrier per chunk prevents; each warp keeps
 * eight 16-byte loads per lane in flight and fetches its next descriptor (three 8-byte words,
 * lanes 0-2) from mapped memory while it copies the current one. */
__device__ __forceinline__ void copy_desc_warp(uint64_t src, uint64_t dst, uint64_t bytes,
                                               int lane)
{
    if (((src | dst | bytes) & 15) == 0) {
        const uint4 *s = reinterpret_cast<const uint4 *>(src);
        uint4 *d = reinterpret_cast<uint4 *>(dst);
        const size_t nv = bytes >> 4;
        size_t i = lane;
        for (; i + 7 * 32 < nv; i += 8 * 32) {
            uint4 v[8];
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = s[i + k * 32];
#pragma unroll
            for (int k = 0; k < 8; k++) d[i + k * 32] = v[k];
        }
        for (; i < nv; i += 32)
            d[i] = s[i];
    } else {
        const unsigned char *s = reinterpret_cast<const unsigned char *>(src);
        unsigned char *d = reinterpret_cast<unsigned char *>(dst);
        for (size_t i = lane; i < bytes; i += 32)
            d[i] = s[i];
    }
}

__global__ void __launch_bounds__(1024) gather_kernel(const recall_desc *desc, int n)
{
    const unsigned full = 0xffffffffu;
    const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const int stride = gridDim.x * warps;
    int w = blockIdx.x * warps + (threadIdx.x >> 5);
    if (w >= n) return; /* warp-uniform */
    const uint64_t *words = reinterpret_cast<const uint64_t *>(desc);
    uint64_t cur = lane < 3 ? words[(size_t)w * 4 + lane] : 0;
    for (; w < n; w += stride) {
        const int next = w + stride;
        const uint64_t nxt = lane < 3 && next < n ? words[(size_t)next * 4 + lane] : 0;
        const uint64_t src = __shfl_sync(full, cur, 0), dst = __shfl_sync(full, cur, 1);
        const uint64_t bytes = __shfl_sync(full, cur, 2);
        copy_desc_warp(src, dst, bytes, lane);
        cur = nxt;
    }
}

} /* namespace */

extern "C" void recall_scatter_cuda(const struct recall_desc *d_desc, int n, void *stream)
{
    if (n <= 0) return;
    cudaStream_t st = (cudaStream_t)stream;
    const int grid = n < 1024 ? n : 1024;
    scatter_kernel<<<grid, 256, 0, st>>>(d_desc, n);
    CUDA_CHECK_LAUNCH(st);
}

extern "C" void recall_gather_cuda(const struct recall_desc *desc, int n, int blocks, int threads,
                                   void *stream)
{
    if (n <= 0) return;
    cudaStream_t st = (cudaStream_t)stream;
    const int grid = n < blocks ? n : blocks;
    gather_kernel<<<grid, threads, 0, st>>>(desc, n);
    CUDA_CHECK_LAUNCH(st);
}
