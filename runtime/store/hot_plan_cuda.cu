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
#include "select.h"

namespace
{

constexpr unsigned kFull = 0xffffffffu;
constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kPer = HOT_PLAN_MAX_SLOTS / kThreads; /* selected blocks per thread, at most */
constexpr int kResetThreads = 256;
static_assert(HOT_PLAN_MAX_SLOTS % kThreads == 0, "a thread owns a whole number of blocks");
static_assert(kWarps == 32, "the scan's second level is one warp");

/* Exclusive prefix sum of v over the thread block; *total gets the sum. Every thread calls. */
__device__ int block_exclusive_scan(int v, int *total)
{
    __shared__ int warp_sum[kWarps];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(kFull, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) warp_sum[w] = x;
    __syncthreads();
    if (w == 0) {
        int t = warp_sum[lane];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(kFull, t, o);
            if (lane >= o) t += y;
        }
        warp_sum[lane] = t; /* inclusive over warps */
    }
    __syncthreads();
    const int before = w > 0 ? warp_sum[w - 1] : 0;
    *total = warp_sum[kWarps - 1];
    __syncthreads(); /* warp_sum may be reused by the next call */
    return before + x - v;
}

/* The status of a list (hot_plan_out.status), identical in every thread of the block. */
__device__ int list_status(const hot_plan_params &p, const int32_t *sel, int unit, int nb, int cnt,
                           int max_sel)
{
    __shared__ int s_bad, s_forced;
    if (unit < 0 || unit >= p.n_units || nb < 1 || nb > p.max_blocks || cnt < 0 || cnt > max_sel)
        return PULSE_ERR_INVALID;
    if (threadIdx.x == 0) s_bad = 0, s_forced = 0;
    __syncthreads();
    int c0, c1, bad = 0, forced = 0;
    select_candidates(nb, p.sink, p.window, &c0, &c1);
    for (int j = threadIdx.x; j < cnt; j += kThreads) {
        const int x = sel[j];
        bad |= x < 0 || x >= nb || (j > 0 && x <= sel[j - 1]);
        forced += x < c0 || x >= c1;
    }
    if (bad) s_bad = 1;
    if (forced) atomicAdd(&s_forced, forced);
    __syncthreads();
    const int st = s_bad || s_forced != nb - (c1 - c0) ? PULSE_ERR_INVALID
                   : cnt > p.n_slots                   ? PULSE_ERR_NOMEM
                                                       : PULSE_OK;
    __syncthreads(); /* s_bad and s_forced are read before anyone returns */
    return st;
}

__device__ void add_total(int64_t *totals, int i, int n)
{
    if (n) atomicAdd((unsigned long long *)&totals[i], (unsigned long long)n);
}

__global__ void __launch_bounds__(kThreads)
    plan_kernel(hot_plan_params p, hot_plan_state s, hot_plan_in in, hot_plan_out out)
{
    __shared__ uint64_t key[HOT_PLAN_MAX_SLOTS];  /* untouched occupied slots' stamps */
    __shared__ int32_t evict[HOT_PLAN_MAX_SLOTS]; /* victim slots by rank */
    __shared__ int s_tail_hit;
    const int v = blockIdx.x, b = v / in.n_lists, tid = threadIdx.x;
    const int unit = in.unit_base[b] + v % in.n_lists, nb = in.n_blocks[b];
    const int cnt = in.sel_count[v], tail_new = in.tail_new[b] != 0;
    const size_t row = (size_t)v * in.max_sel;
    const int32_t *sel = in.sel_idx + row;

    if (tid == 0) out.fresh_block[v] = out.fresh_slot[v] = out.fresh_victim[v] = -1;
    const int status = list_status(p, sel, unit, nb, cnt, in.max_sel);
    if (status != PULSE_OK) {
        if (tid == 0) out.status[v] = status, out.n_hits[v] = out.n_recalls[v] = 0;
        return;
    }

    const int S = p.n_slots;
    const size_t base = (size_t)unit * S;
    int32_t *bs = s.block_slot + (size_t)unit * p.max_blocks;
    const hot_plan_unit hdr = s.unit[unit];
    const uint64_t c0 = hdr.clock;
    const int n_free = hdr.n_free;

    /* lookup: this thread's blocks [j0, j1) */
    const int per = (cnt + kThreads - 1) / kThreads;
    const int j0 = min(cnt, tid * per), j1 = min(cnt, j0 + per);
    int32_t slot_of[kPer];
    int my_hits = 0;
#pragma unroll
    for (int k = 0; k < kPer; k++) {
        const int j = j0 + k;
        slot_of[k] = j < j1 ? bs[sel[j]] : -1;
        my_hits += j < j1 && slot_of[k] >= 0;
        if (j < j1 && j == cnt - 1) s_tail_hit = slot_of[k] >= 0;
    }
    int n_hits;
    const int hits_before = block_exclusive_scan(my_hits, &n_hits);
    const int n_miss = cnt - n_hits, n_evict = max(0, n_miss - n_free);

    /* victims: the n_evict untouched occupied slots of smallest stamp, by rank */
    if (n_evict > 0) {
        for (int i = tid; i < S; i += kThreads)
            key[i] = s.slot_block[base + i] >= 0 ? s.stamp[base + i] : UINT64_MAX;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < kPer; k++)
            if (j0 + k < j1 && slot_of[k] >= 0) key[slot_of[k]] = UINT64_MAX;
        __syncthreads();
        const int lane = tid & 31;
        for (int i = tid >> 5; i < S; i += kWarps) {
            const uint64_t mine = key[i];
            if (mine == UINT64_MAX) continue;
            int below = 0;
            for (int t0 = 0; t0 < S && below < n_evict; t0 += 32) {
                const int t = t0 + lane;
                below += __popc(__ballot_sync(kFull, t < S && key[t] < mine));
            }
            if (below < n_evict && lane == 0) evict[below] = i;
        }
        __syncthreads();
    }

    /* write phase: hits restamped, misses placed */
    int h = hits_before, m = j0 - hits_before;
#pragma unroll
    for (int k = 0; k < kPer; k++) {
        const int j = j0 + k;
        if (j >= j1) continue;
        int32_t slot = slot_of[k];
        if (slot >= 0) {
            s.stamp[base + slot] = c0 + 1 + (uint64_t)h++;
            out.attend_slot[row + j] = slot;
            continue;
        }
        int32_t victim = -1;
        if (m < n_free) {
            slot = s.free_stack[base + n_free - 1 - m];
        } else {
            slot = evict[m - n_free];
            victim = s.slot_block[base + slot];
            bs[victim] = -1;
        }
        const int32_t blk = sel[j];
        s.slot_block[base + slot] = blk;
        bs[blk] = slot;
        s.stamp[base + slot] = c0 + (uint64_t)n_hits + 1 + (uint64_t)m;
        out.attend_slot[row + j] = slot;
        if (tail_new && blk == nb - 1) { /* the last block: every recall precedes it */
            out.fresh_block[v] = blk;
            out.fresh_slot[v] = slot;
            out.fresh_victim[v] = victim;
        } else {
            out.recall_block[row + m] = blk;
            out.recall_slot[row + m] = slot;
            out.victim_block[row + m] = victim;
        }
        m++;
    }
    if (tid == 0) {
        const int fresh = tail_new && !s_tail_hit;
        out.status[v] = PULSE_OK;
        out.n_hits[v] = n_hits;
        out.n_recalls[v] = n_miss - fresh;
        s.unit[unit] = hot_plan_unit{max(0, n_free - n_miss), nb, c0 + (uint64_t)cnt};
        if (out.totals) {
            add_total(out.totals, HOT_PLAN_HITS, n_hits);
            add_total(out.totals, HOT_PLAN_MISSES, n_miss - fresh);
            add_total(out.totals, HOT_PLAN_FRESH, fresh);
            add_total(out.totals, HOT_PLAN_EVICTIONS, n_evict);
        }
    }
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
