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
#include <stdlib.h>

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

/* The grouped form: a block takes K descriptors per round and spreads the 16-byte words of all
 * of them over its threads, four loads in flight per thread, with no barrier between the
 * descriptors of a round, so K times the bytes are in flight (an 8 KB chunk is one load per
 * thread of a 512-thread block). The next round's K descriptors are prefetched by threads
 * 0..K-1 during the copy. A round with an unaligned descriptor copies its descriptors one by
 * one. */
template <int K> __global__ void __launch_bounds__(1024) gather_group_kernel(const recall_desc *desc, int n)
{
    __shared__ uint64_t sd[2][K][3];
    const int rounds = (n + K - 1) / K;
    int g = blockIdx.x;
    if (g >= rounds) return;
    if (threadIdx.x < K) {
        const int j = g * K + threadIdx.x;
        sd[0][threadIdx.x][0] = j < n ? desc[j].src : 0;
        sd[0][threadIdx.x][1] = j < n ? desc[j].dst : 0;
        sd[0][threadIdx.x][2] = j < n ? desc[j].bytes : 0;
    }
    __syncthreads();
    int cur = 0;
    for (; g < rounds; g += gridDim.x) {
        const int j = (g + gridDim.x) * K + threadIdx.x;
        uint64_t ns = 0, nd = 0, nb = 0;
        if (threadIdx.x < K && j < n) { /* issued now, used after the copy */
            ns = desc[j].src;
            nd = desc[j].dst;
            nb = desc[j].bytes;
        }
        uint64_t ofs[K + 1], any = 0;
        ofs[0] = 0;
#pragma unroll
        for (int k = 0; k < K; k++) {
            any |= sd[cur][k][0] | sd[cur][k][1] | sd[cur][k][2];
            ofs[k + 1] = ofs[k] + (sd[cur][k][2] >> 4);
        }
        if ((any & 15) == 0) {
            const uint64_t total = ofs[K], step = blockDim.x;
            for (uint64_t i = threadIdx.x; i < total; i += 4 * step) {
                uint4 v[4];
                uint4 *dst[4];
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    const uint64_t w = i + u * step;
                    dst[u] = nullptr;
                    if (w < total) {
                        int k = 0;
#pragma unroll
                        for (int q = 1; q < K; q++) k += w >= ofs[q];
                        const uint64_t o = w - ofs[k];
                        v[u] = reinterpret_cast<const uint4 *>(sd[cur][k][0])[o];
                        dst[u] = reinterpret_cast<uint4 *>(sd[cur][k][1]) + o;
                    }
                }
#pragma unroll
                for (int u = 0; u < 4; u++)
                    if (dst[u]) *dst[u] = v[u];
            }
        } else {
#pragma unroll
            for (int k = 0; k < K; k++) copy_desc(sd[cur][k][0], sd[cur][k][1], sd[cur][k][2]);
        }
        if (threadIdx.x < K && j < n) {
            sd[cur ^ 1][threadIdx.x][0] = ns;
            sd[cur ^ 1][threadIdx.x][1] = nd;
            sd[cur ^ 1][threadIdx.x][2] = nb;
        } else if (threadIdx.x < K) {
            sd[cur ^ 1][threadIdx.x][2] = 0;
            sd[cur ^ 1][threadIdx.x][0] = sd[cur ^ 1][threadIdx.x][1] = 0;
        }
        __syncthreads();
        cur ^= 1;
    }
}

} /* namespace */

extern "C" int recall_zero_copy_group(void)
{
    static int group = -1;
    if (group < 0) {
        const char *e = getenv("PULSE_ZC_GROUP");
        const int v = e ? atoi(e) : 1;
        group = v == 2 || v == 4 || v == 8 ? v : 1;
    }
    return group;
}

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
    const int k = recall_zero_copy_group(), rounds = (n + k - 1) / k;
    const int grid = rounds < blocks ? rounds : blocks;
    switch (k) {
    case 2: gather_group_kernel<2><<<grid, threads, 0, st>>>(desc, n); break;
    case 4: gather_group_kernel<4><<<grid, threads, 0, st>>>(desc, n); break;
    case 8: gather_group_kernel<8><<<grid, threads, 0, st>>>(desc, n); break;
    default: gather_kernel<<<grid, threads, 0, st>>>(desc, n); break;
    }
    CUDA_CHECK_LAUNCH(st);
}
