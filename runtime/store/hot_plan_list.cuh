/* The device planner's work on one list (hot_plan.h, hot_plan_cuda.cu's plan kernel), for the
 * kernels that plan: a thread block of HOT_PLAN_THREADS threads calls hot_plan_list(.., v) for
 * list v, every thread, with blockDim.x == HOT_PLAN_THREADS. On return every write of the
 * list's plan (out's arrays, the unit's state) is issued; a __syncthreads() makes them visible
 * to the block (offload_kernels_cuda.cu builds on them in the same block). CUDA only. */
#ifndef PULSE_HOT_PLAN_LIST_CUH
#define PULSE_HOT_PLAN_LIST_CUH

#include <stdint.h>

#include "block_scan.cuh"
#include "common.h"
#include "hot_plan.h"
#include "select.h"

namespace hot_plan_dev
{

constexpr unsigned kFull = 0xffffffffu;
constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kPer = HOT_PLAN_MAX_SLOTS / kThreads; /* selected blocks per thread, at most */
static_assert(HOT_PLAN_MAX_SLOTS % kThreads == 0, "a thread owns a whole number of blocks");

/* The status of a list (hot_plan_out.status), identical in every thread of the block. */
__device__ __forceinline__ int list_status(const hot_plan_params &p, const int32_t *sel, int unit,
                                           int nb, int cnt, int max_sel)
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

__device__ __forceinline__ void add_total(int64_t *totals, int i, int n)
{
    if (n) atomicAdd((unsigned long long *)&totals[i], (unsigned long long)n);
}

__device__ __forceinline__ void hot_plan_list(const hot_plan_params &p, const hot_plan_state &s,
                                              const hot_plan_in &in, const hot_plan_out &out, int v)
{
    __shared__ uint64_t key[HOT_PLAN_MAX_SLOTS];  /* untouched occupied slots' stamps */
    __shared__ int32_t evict[HOT_PLAN_MAX_SLOTS]; /* victim slots by rank */
    __shared__ int s_tail_hit;
    const int b = v / in.n_lists, tid = threadIdx.x;
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
    const int hits_before = block_exclusive_scan<int, kWarps>(my_hits, &n_hits);
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

} // namespace hot_plan_dev

#define HOT_PLAN_THREADS (hot_plan_dev::kThreads)

#endif
