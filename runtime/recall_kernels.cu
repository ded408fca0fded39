/* The recall kernels (recall.h): the gather-scatter engine's scatter (device staging -> slots)
 * and the zero-copy gather (mapped pinned host memory -> slots). Both walk descriptors
 * {src, dst, bytes}, one thread block per descriptor at a time (grid-stride over descriptors);
 * a descriptor whose src, dst and bytes are multiples of 16 moves in 16-byte words, four loads
 * in flight per thread, anything else byte by byte. References: recall_cpu.c.
 *
 * The zero-copy kernel reads its descriptors from mapped host memory too, so each block
 * prefetches the next descriptor while it copies the current one: the PCIe read latency of a
 * descriptor hides behind the data. Its grid is bounded (the engine's zc_blocks), since a few
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

__global__ void __launch_bounds__(1024) gather_kernel(const recall_desc *desc, int n)
{
    __shared__ uint64_t sd[2][3]; /* current and next descriptor (src, dst, bytes) */
    int i = blockIdx.x;
    if (i >= n) return;
    if (threadIdx.x == 0) {
        sd[0][0] = desc[i].src;
        sd[0][1] = desc[i].dst;
        sd[0][2] = desc[i].bytes;
    }
    __syncthreads();
    int cur = 0;
    for (; i < n; i += gridDim.x) {
        const int next = i + gridDim.x;
        uint64_t ns = 0, nd = 0, nb = 0;
        if (threadIdx.x == 0 && next < n) { /* issued now, used after the copy */
            ns = desc[next].src;
            nd = desc[next].dst;
            nb = desc[next].bytes;
        }
        copy_desc(sd[cur][0], sd[cur][1], sd[cur][2]);
        if (threadIdx.x == 0 && next < n) {
            sd[cur ^ 1][0] = ns;
            sd[cur ^ 1][1] = nd;
            sd[cur ^ 1][2] = nb;
        }
        __syncthreads();
        cur ^= 1;
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
