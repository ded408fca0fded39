/* The recall kernels (recall.h): the gather-scatter engine's scatter (device staging -> slots)
 * and the zero-copy gather (mapped pinned host memory -> slots). Both read descriptors
 * {src, dst, bytes} from device memory; a descriptor whose src, dst and bytes are multiples of
 * 16 moves in 16-byte words, anything else byte by byte. References: recall_cpu.c.
 *
 * scatter: one thread block per descriptor at a time (grid-stride over descriptors), four
 * 16-byte loads in flight per thread; its data is in device memory, so latency is short.
 *
 * gather: every load crosses PCIe (about 1.5 us), so its rate is the bytes in flight over that
 * latency, from a bounded grid (the engine's zc_blocks) that shares its SMs with the compute
 * beside it. So: no barrier anywhere; one warp moves one piece of V x 512 bytes at a time, each
 * lane issuing all V of its 16-byte loads before its first store, with V chosen so a block keeps
 * a set number of bytes in flight (gather_inflight_bytes); warps stride over descriptors on their
 * own. With fewer descriptors than warps, each descriptor's pieces are shared by warps / n warps,
 * so a few large chunks still spread over the grid; each warp loads its next descriptor before
 * copying the current one. The count can come from device memory (recall_gather_dev_cuda: written
 * by a GPU planning kernel), clamped to [0, max_n]. */
#include <cuda_runtime.h>

#include <stdint.h>

#include "common.h"
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

/* One warp copies 16-byte words [first, first + 32 V) of a descriptor of nv words: lane l
 * takes words first + 32 u + l (each load instruction of the warp reads 512 contiguous
 * bytes), all V loads issued before the first store. */
template <int V>
__device__ __forceinline__ void warp_piece_vec(const uint4 *__restrict__ s, uint4 *__restrict__ d,
                                               size_t nv, size_t first, int lane)
{
    uint4 r[V];
    if (first + 32 * (size_t)V <= nv) { /* a whole piece: no bounds checks */
#pragma unroll
        for (int u = 0; u < V; u++)
            r[u] = s[first + 32 * u + lane];
#pragma unroll
        for (int u = 0; u < V; u++)
            d[first + 32 * u + lane] = r[u];
    } else { /* the descriptor's last, partial piece */
#pragma unroll
        for (int u = 0; u < V; u++) {
            const size_t i = first + 32 * u + lane;
            r[u] = i < nv ? s[i] : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < V; u++) {
            const size_t i = first + 32 * u + lane;
            if (i < nv) d[i] = r[u];
        }
    }
}

/* One warp copies bytes [lo, hi) byte by byte, V loads per lane before its stores. */
template <int V>
__device__ __forceinline__ void warp_piece_bytes(const unsigned char *__restrict__ s,
                                                 unsigned char *__restrict__ d, size_t lo,
                                                 size_t hi, int lane)
{
    for (size_t b = lo; b < hi; b += 32 * (size_t)V) {
        unsigned char r[V];
#pragma unroll
        for (int u = 0; u < V; u++) {
            const size_t i = b + 32 * u + lane;
            r[u] = i < hi ? s[i] : 0;
        }
#pragma unroll
        for (int u = 0; u < V; u++) {
            const size_t i = b + 32 * u + lane;
            if (i < hi) d[i] = r[u];
        }
    }
}

/* V: 16-byte loads per lane per piece (piece = 512 V bytes). d_count: NULL, or the count in
 * device memory, clamped to [0, n]. blockDim.x is a multiple of 32. */
template <int V>
__global__ void __launch_bounds__(V >= 16 ? 512 : 1024)
    gather_kernel(const recall_desc *__restrict__ desc, const int32_t *__restrict__ d_count, int n)
{
    if (d_count) {
        const int c = *d_count;
        n = c < 0 ? 0 : c < n ? c : n;
    }
    if (n <= 0) return;
    const int lane = threadIdx.x & 31, per_block = blockDim.x >> 5;
    const int warps = gridDim.x * per_block, warp = blockIdx.x * per_block + (threadIdx.x >> 5);
    const int share = n < warps ? warps / n : 1; /* warps per descriptor */
    const int groups = warps / share, grp = warp / share, sub = warp - grp * share;
    if (grp >= groups) return; /* the warps / n remainder */
    constexpr uint64_t piece = 512 * (uint64_t)V;
    /* the warp's next descriptor is loaded before the current one's copy, so its latency
     * hides behind the copy's PCIe reads instead of standing between two copies */
    ulonglong2 nsd = make_ulonglong2(0, 0), nbp = make_ulonglong2(0, 0);
    if (grp < n) {
        const ulonglong2 *dp = reinterpret_cast<const ulonglong2 *>(desc + grp);
        nsd = dp[0];
        nbp = dp[1];
    }
    for (int i = grp; i < n; i += groups) {
        const ulonglong2 sd = nsd, bp = nbp; /* (src, dst), (bytes, pad) */
        if (i + groups < n) {
            const ulonglong2 *dp = reinterpret_cast<const ulonglong2 *>(desc + i + groups);
            nsd = dp[0];
            nbp = dp[1];
        }
        const uint64_t bytes = bp.x, pieces = (bytes + piece - 1) / piece;
        if (((sd.x | sd.y | bytes) & 15) == 0) {
            const uint4 *s = reinterpret_cast<const uint4 *>(sd.x);
            uint4 *d = reinterpret_cast<uint4 *>(sd.y);
            for (uint64_t k = sub; k < pieces; k += share)
                warp_piece_vec<V>(s, d, bytes >> 4, k * 32 * V, lane);
        } else {
            const unsigned char *s = reinterpret_cast<const unsigned char *>(sd.x);
            unsigned char *d = reinterpret_cast<unsigned char *>(sd.y);
            for (uint64_t k = sub; k < pieces; k += share)
                warp_piece_bytes<V>(s, d, k * piece, k + 1 < pieces ? (k + 1) * piece : bytes,
                                    lane);
        }
    }
}

/* Bytes each gather block keeps in flight (recall_params.zc_inflight_kb, default 128 KB: 16
 * loads a lane at 512 threads): a lane's loads per piece are this over 16 x threads, a power of
 * two from 1 to 16. 16 loads a lane take 128 registers a thread (ptxas), at 512 threads the
 * whole register file of each SM the gather runs on, so no compute block shares those SMs; 4
 * loads take 60 registers, 1 takes 42. */
long gather_inflight_bytes(int inflight_kb)
{
    return (long)(inflight_kb > 0 ? inflight_kb : RECALL_ZC_INFLIGHT_KB) << 10;
}

int gather_loads(int threads, int inflight_kb)
{
    int v = 16;
    while (v > 1 && (long)v * 16 * threads > gather_inflight_bytes(inflight_kb))
        v /= 2;
    if (threads > 512 && v > 8) v = 8; /* 16 loads a lane fit 512 threads' registers only */
    return v;
}

void launch_gather(const recall_desc *d_desc, const int32_t *d_count, int n, int blocks,
                   int threads, int inflight_kb, void *stream)
{
    PULSE_CHECK(blocks >= 1 && blocks <= 65535 && threads >= 32 && threads <= 1024 &&
                    threads % 32 == 0,
                "recall gather: 1..65535 blocks of 32..1024 threads (a multiple of 32)");
    cudaStream_t st = (cudaStream_t)stream;
    switch (gather_loads(threads, inflight_kb)) {
    case 16:
        gather_kernel<16><<<blocks, threads, 0, st>>>(d_desc, d_count, n);
        break;
    case 8:
        gather_kernel<8><<<blocks, threads, 0, st>>>(d_desc, d_count, n);
        break;
    case 4:
        gather_kernel<4><<<blocks, threads, 0, st>>>(d_desc, d_count, n);
        break;
    case 2:
        gather_kernel<2><<<blocks, threads, 0, st>>>(d_desc, d_count, n);
        break;
    default:
        gather_kernel<1><<<blocks, threads, 0, st>>>(d_desc, d_count, n);
    }
    CUDA_CHECK_LAUNCH(st);
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

extern "C" void recall_gather_cuda(const struct recall_desc *d_desc, int n, int blocks, int threads,
                                   int inflight_kb, void *stream)
{
    if (n <= 0) return;
    launch_gather(d_desc, NULL, n, blocks, threads, inflight_kb, stream);
}

extern "C" void recall_gather_dev_cuda(const struct recall_desc *d_desc, const int32_t *d_count,
                                       int max_n, int blocks, int threads, int inflight_kb,
                                       void *stream)
{
    if (max_n <= 0) return;
    launch_gather(d_desc, d_count, max_n, blocks, threads, inflight_kb, stream);
}

extern "C" int recall_gather_loads(int threads, int inflight_kb)
{
    return gather_loads(threads, inflight_kb);
}

extern "C" void recall_kernels_load(void)
{
    cudaFuncAttributes a;
    CUDA_CHECK(cudaFuncGetAttributes(&a, scatter_kernel));
    CUDA_CHECK(cudaFuncGetAttributes(&a, gather_kernel<16>));
    CUDA_CHECK(cudaFuncGetAttributes(&a, gather_kernel<8>));
    CUDA_CHECK(cudaFuncGetAttributes(&a, gather_kernel<4>));
    CUDA_CHECK(cudaFuncGetAttributes(&a, gather_kernel<2>));
    CUDA_CHECK(cudaFuncGetAttributes(&a, gather_kernel<1>));
}
