/* The device-driven (zero-copy) offload path's glue kernel: one sparse layer's hot-cache plan
 * (hot_plan.h) turned into the recall's copy descriptors, the attention's page lists and
 * lengths, and the tail-flush descriptors, in device memory, with no host involvement.
 *
 * Addressing (offload_impl.h): entry b (cache slot slot[b], host-pool slot hslot[b]) has, in the
 * layer, owned GPU pages own[(slot * n_sparse + sl) * (hot_slots + 1) + s] (hot slots s <
 * hot_slots, then its tail page T) and host blocks host_ids[(hslot * n_sparse + sl) *
 * max_blocks + i]. List v = b * n_lists + k (k a KV head head-wise, else 0) moves chunks of
 * chunk_bytes: KV head k of a block (head-wise, head k at k * head_bytes inside a page or a host
 * block) or the whole block. Recall r of list v: from host_base + host_id * block_bytes (+ k *
 * head_bytes) to gpu_pool + own[recall_slot] * page_bytes (+ k * head_bytes), written at
 * desc[v * ms + r]; desc[v * ms + r] for r >= n_recalls[v] gets bytes 0 (nothing to move), so
 * the gather walks a fixed V * ms descriptors. Attention: att_len[v] = (cnt - 1) * ps + the tail
 * block's tokens, att_pages[v * ms + j] = the attention's page id of attend_slot[j] (j < cnt -
 * 1; head-wise page * nkv + k) and the tail page T for j = cnt - 1. Tail flush: entries with
 * tail_index[b] >= 0 (their tail block filled this step) get desc tail_desc[tail_index[b] *
 * n_lists + k] from T's piece to the tail block's slot's piece. Counters (ADDED): att_tokens +=
 * sum of att_len; refused += lists whose plan status was not PULSE_OK (their outputs are not
 * written: the caller fails the step).
 *
 * An attention that recalls (att_host not NULL, offload_params.attend_recall): att_host[v * ms
 * + j] = the host piece of list position j when its block sel_idx[v * ms + j] is one of the
 * list's recalls (the piece's index in units of chunk_bytes from host_base: host_id * nkv + k
 * head-wise, else host_id), else -1 (the tail j = cnt - 1 always -1), for the attention to read
 * it from the host and store it into its page (kernels.h, kv_view.host_ids). The descriptors are
 * written as without it.
 *
 * The gate (spec_idx not NULL: a predicted layer whose correction is queued at its exact plan,
 * offload_params.spec_correct_early): list v's recalls take the slots of victim_block[v * ms +
 * r] (r < n_recalls[v]; -1: a free slot); a list where one of them is in its predicted list
 * spec_idx[v * ms + j], j < spec_count[v] (strictly ascending, hot_plan_in's layout), whose
 * slot the attention over the predicted lists reads, adds 1 to held and closes the gate (writes
 * 0 to *gate). The caller opens it (every byte OFFLOAD_GATE_BYTE: a memset) after that
 * attention; the correction's gather waits until *gate >= 1.
 *
 * `_ref` (host pointers, clarity) and `_cuda` (device pointers, queued on `stream`, no
 * allocation or synchronisation) have one signature. */
#ifndef PULSE_OFFLOAD_KERNELS_H
#define PULSE_OFFLOAD_KERNELS_H

#include <stdint.h>

#include "common.h"
#include "hot_plan.h"
#include "recall.h"

/* Whether x is among the n ascending values of a (the gate's test of a recall's victim). */
PULSE_HD int offload_sorted_has(const int32_t *a, int n, int32_t x)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (a[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && a[lo] == x;
}

#ifdef __cplusplus
extern "C" {
#endif

struct offload_build_args {
    /* the layer's plan (hot_plan_out) and selection counts */
    const int32_t *status, *n_recalls, *recall_block, *recall_slot, *attend_slot, *sel_count;
    /* per entry [B]: attended tokens, cache slot, host-pool slot, tail index or -1 */
    const int32_t *n_tok, *slot, *hslot, *tail_index;
    const int32_t *own;      /* [max_batch][n_sparse][hot_slots + 1] owned GPU pages */
    const int32_t *host_ids; /* [max_batch][n_sparse][max_blocks] host block ids */
    int B, n_lists, ms, ps, hot_slots, n_sparse, sl, max_blocks, headwise, nkv;
    uint64_t host_base, gpu_pool; /* device addresses of host block 0 and GPU page 0 */
    uint64_t page_bytes, head_bytes, chunk_bytes;
    /* outputs */
    struct recall_desc *desc;                 /* [B * n_lists][ms] */
    int32_t *att_len, *att_pages;             /* [B * n_lists], [B * n_lists][ms] */
    struct recall_desc *tail_desc;            /* [tails * n_lists] */
    unsigned long long *att_tokens, *refused; /* one counter each */
    /* an attention that recalls (above; att_host NULL: none, sel_idx unread) */
    const int32_t *sel_idx; /* [B * n_lists][ms]: the lists' blocks (hot_plan_in.sel_idx) */
    int32_t *att_host;      /* [B * n_lists][ms] */
    /* the gate (above; spec_idx NULL: none, the others unread) */
    const int32_t *victim_block, *spec_idx, *spec_count;
    uint32_t *gate;
    unsigned long long *held;
};

/* The byte an open gate holds in each of its four (a memset: 0x01010101 >= 1). */
#define OFFLOAD_GATE_BYTE 1

void offload_build_ref(const struct offload_build_args *a, void *stream);
void offload_build_cuda(const struct offload_build_args *a, void *stream);

/* A layer's hot-cache plan (hot_plan.h) and its build in one: hot_plan_* on (in, out), then
 * offload_build_* on build, whose plan inputs (status, n_recalls, recall_block, recall_slot,
 * attend_slot, victim_block) are out's arrays and sel_count in's, and whose B, n_lists and ms
 * are in's batch, n_lists and max_sel. The CUDA form runs each list's plan and build in one
 * thread block, and up to OFFLOAD_PLAN_MAX_JOBS jobs in one launch (a layer's exact selection
 * and the next layer's prediction): the jobs' units and outputs must be distinct, as two
 * layers' are, so that running them side by side is running them one after the other. */
#define OFFLOAD_PLAN_MAX_JOBS 2
struct offload_plan_job {
    struct hot_plan_in in;
    struct hot_plan_out out;
    struct offload_build_args build;
};

/* Aborts (PULSE_CHECK) unless jobs[0..n) are a valid call: 1 <= n <= OFFLOAD_PLAN_MAX_JOBS,
 * each build reads its own plan (and with att_host its lists) with its shape and p's slots and
 * blocks, no two jobs share an output (the plan's status and slots, descriptors, lengths,
 * pages, tail descriptors, host pieces, totals) or a unit_base row. Both forms call it; that
 * distinct rows name distinct units is the caller's to ensure. */
void offload_plan_jobs_check(const struct hot_plan_params *p, const struct offload_plan_job *jobs,
                             int n);
void offload_plan_build_ref(const struct hot_plan_params *p, const struct hot_plan_state *s,
                            const struct offload_plan_job *jobs, int n, void *stream);
void offload_plan_build_cuda(const struct hot_plan_params *p, const struct hot_plan_state *s,
                             const struct offload_plan_job *jobs, int n, void *stream);

#ifdef __cplusplus
}
#endif
#endif
