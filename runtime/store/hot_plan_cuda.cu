/* CUDA hot-cache planner (hot_plan.h). Every wrapper launches on the given stream, checks the
 * launch, allocates nothing and never synchronises.
 *
 *   plan   a thread block of 1024 threads per list. Each thread owns a contiguous piece of the
 *          selection (at most 2 blocks, n_slots <= 2048): it validates it (range, ascending,
 *          pinned count, reduced in shared memory) and looks its blocks up in the unit's
 *          block -> slot map. One block-wide exclusive scan of the hit counts gives every
 *          block its hit number i (stamp c0 + 1 + i) and its miss number m (= position - i;
 *          stamp c0 + n_hits + 1 + m). When the misses outnumber the free slots, the untouched
 *          occupied slots' stamps go into shared memory (touched and free ones as UINT64_MAX)
 *          and one warp per slot counts, by ballot over 32 slots at a time, the stamps below
 *          its own, stopping once the count reaches the number of evictions: a slot with count
 *          r below that is the r-th victim. Then every miss writes its slot and victim and the
 *          state, and thread 0 the unit header and the totals (integer atomics).
 *   init   grid-stride over the whole state.
 *   reset  a thread block per unit, over its slots.
 *
 * Races: a list's reads of the state happen before the block's first barrier, its writes
 * after the last one; within the write phase every slot and block -> slot entry has one
 * writer (the miss that takes a slot, or whose block a victim was: victims are never
 * selected). Units of one call are distinct, so thread blocks touch disjoint state. */
#include <cuda_runtime.h>

#include <stdint.h>

#include "cuda_check.h"
#include "hot_plan.h"
#include "hot_plan_list.cuh"

namespace
{

using hot_plan_dev::kThreads;
constexpr int kResetThreads = 256;

__global__ void __launch_bounds__(kThreads)
    plan_kernel(const __grid_constant__ hot_plan_params p, const __grid_constant__ hot_plan_state s,
                const __grid_constant__ hot_plan_in in, const __grid_constant__ hot_plan_out out)
{
    hot_plan_dev::hot_plan_list(p, s, in, out, blockIdx.x);
}

__global__ void init_kernel(hot_plan_params p, hot_plan_state s)
{
    const size_t S = (size_t)p.n_slots, US = (size_t)p.n_units * S;
    const size_t UB = (size_t)p.n_units * p.max_blocks;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < UB || i < US; i += stride) {
        if (i < UB) s.block_slot[i] = -1;
        if (i < US) {
            s.slot_block[i] = -1;
            s.free_stack[i] = (int32_t)(S - 1 - i % S);
            s.stamp[i] = 0;
        }
        if (i < (size_t)p.n_units) s.unit[i] = hot_plan_unit{p.n_slots, 0, 0};
    }
}

__global__ void reset_kernel(hot_plan_params p, hot_plan_state s, int unit0)
{
    const int u = unit0 + blockIdx.x, S = p.n_slots;
    const size_t base = (size_t)u * S;
    int32_t *bs = s.block_slot + (size_t)u * p.max_blocks;
    for (int i = threadIdx.x; i < S; i += kResetThreads) {
        const int32_t blk = s.slot_block[base + i];
        if (blk >= 0 && blk < p.max_blocks) bs[blk] = -1;
        s.slot_block[base + i] = -1;
        s.free_stack[base + i] = S - 1 - i;
        s.stamp[base + i] = 0;
    }
    if (threadIdx.x == 0) s.unit[u] = hot_plan_unit{S, 0, 0};
}

} // namespace

extern "C" void hot_plan_init_cuda(const struct hot_plan_params *p, const struct hot_plan_state *s,
                                   void *stream)
{
    PULSE_CHECK(hot_plan_params_check(p, NULL, 0) == 0, "hot_plan_init: bad params");
    const size_t US = (size_t)p->n_units * p->n_slots, UB = (size_t)p->n_units * p->max_blocks;
    const size_t n = US > UB ? US : UB, blocks = (n + 255) / 256;
    cudaStream_t st = (cudaStream_t)stream;
    init_kernel<<<(unsigned)(blocks < 65535 ? blocks : 65535), 256, 0, st>>>(*p, *s);
    CUDA_CHECK_LAUNCH(st);
}

extern "C" void hot_plan_reset_cuda(const struct hot_plan_params *p, const struct hot_plan_state *s,
                                    int unit0, int count, void *stream)
{
    PULSE_CHECK(unit0 >= 0 && count >= 0 && count <= p->n_units - unit0,
                "hot_plan_reset: units out of range");
    if (count == 0) return;
    cudaStream_t st = (cudaStream_t)stream;
    reset_kernel<<<count, kResetThreads, 0, st>>>(*p, *s, unit0);
    CUDA_CHECK_LAUNCH(st);
}

extern "C" void hot_plan_cuda(const struct hot_plan_params *p, const struct hot_plan_state *s,
                              const struct hot_plan_in *in, const struct hot_plan_out *out,
                              void *stream)
{
    PULSE_CHECK(hot_plan_params_check(p, NULL, 0) == 0, "hot_plan: bad params");
    PULSE_CHECK(in->batch >= 0 && in->n_lists >= 1 && in->max_sel >= 1,
                "hot_plan: batch, n_lists or max_sel out of range");
    const long long lists = (long long)in->batch * in->n_lists;
    PULSE_CHECK(lists <= 0x7fffffffLL, "hot_plan: too many lists");
    if (lists == 0) return;
    cudaStream_t st = (cudaStream_t)stream;
    plan_kernel<<<(unsigned)lists, kThreads, 0, st>>>(*p, *s, *in, *out);
    CUDA_CHECK_LAUNCH(st);
}
