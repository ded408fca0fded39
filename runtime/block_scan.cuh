/* Block-wide exclusive prefix sum for the suite's kernels: the hot-cache plan's per-list body
 * (store/hot_plan_list.cuh: the hits before each thread's blocks) and the top-k (select: two
 * packed 16-bit counts scanned at once).
 *
 * Every thread of the block calls it with its value; each gets the sum of the values of the
 * threads before it, and *total the block's sum. Two levels: a shuffle scan in each warp, then
 * one warp scans the warps' sums. The trailing barrier lets a kernel call it again (its shared
 * sums are reused). kWarpsN is the block's warp count, at most 32. */
#ifndef PULSE_BLOCK_SCAN_CUH
#define PULSE_BLOCK_SCAN_CUH

template <typename T, int kWarpsN>
__device__ __forceinline__ T block_exclusive_scan(T v, T *total)
{
    static_assert(kWarpsN >= 1 && kWarpsN <= 32, "the scan's second level is one warp");
    constexpr unsigned full = 0xffffffffu;
    __shared__ T warp_sum[kWarpsN];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    T x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const T y = __shfl_up_sync(full, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) warp_sum[w] = x;
    __syncthreads();
    if (w == 0) {
        T t = lane < kWarpsN ? warp_sum[lane] : T(0);
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const T y = __shfl_up_sync(full, t, o);
            if (lane >= o) t += y;
        }
        if (lane < kWarpsN) warp_sum[lane] = t; /* inclusive over warps */
    }
    __syncthreads();
    const T before = w > 0 ? warp_sum[w - 1] : T(0);
    *total = warp_sum[kWarpsN - 1];
    __syncthreads(); /* warp_sum may be reused by the next call */
    return before + x - v;
}

#endif
