/* The device path's glue kernels (offload_kernels.h): one thread block per list; its threads
 * split the list's descriptors and page ids. The build alone (128 threads a block), or after
 * the list's hot-cache plan in the same block (the plan's 1024 threads, hot_plan_list.cuh), for
 * up to two layers in one launch. Reference: offload_kernels_ref.c. */
#include <cuda_runtime.h>

#include "cuda_check.h"
#include "hot_plan_list.cuh"
#include "offload_kernels.h"

namespace
{

/* List v's build; every thread of the block calls it. */
__device__ __forceinline__ void build_list(const offload_build_args &a, int v)
{
    const int b = v / a.n_lists, k = v % a.n_lists, H1 = a.hot_slots + 1;
    const int32_t *own = a.own + ((size_t)a.slot[b] * a.n_sparse + a.sl) * H1;
    const int32_t *ids = a.host_ids + ((size_t)a.hslot[b] * a.n_sparse + a.sl) * a.max_blocks;
    const uint64_t koff = a.headwise ? (uint64_t)k * a.head_bytes : 0;
    recall_desc *d = a.desc + (size_t)v * a.ms;
    const bool ok = a.status[v] == 0;
    if (!ok && threadIdx.x == 0) atomicAdd(a.refused, 1ull);
    const int nr = ok ? a.n_recalls[v] : 0;
    for (int r = threadIdx.x; r < a.ms; r += blockDim.x) {
        const size_t i = (size_t)v * a.ms + r;
        recall_desc x = {0, 0, 0, 0};
        if (r < nr) {
            x.src = a.host_base + (uint64_t)ids[a.recall_block[i]] * a.page_bytes + koff;
            x.dst = a.gpu_pool + (uint64_t)own[a.recall_slot[i]] * a.page_bytes + koff;
            x.bytes = a.chunk_bytes;
        }
        d[r] = x;
    }
    if (!ok) return;
    if (a.spec_idx) { /* the gate: a recall into a predicted block's slot */
        bool hit = false;
        for (int r = threadIdx.x; r < nr; r += blockDim.x)
            hit |= offload_sorted_has(a.spec_idx + (size_t)v * a.ms, a.spec_count[v],
                                      a.victim_block[(size_t)v * a.ms + r]);
        if (__syncthreads_or(hit) && threadIdx.x == 0) {
            atomicAdd(a.held, 1ull);
            *a.gate = 0;
        }
    }
    const int cnt = a.sel_count[v], n = a.n_tok[b], nb = (n + a.ps - 1) / a.ps;
    int32_t *pages = a.att_pages + (size_t)v * a.ms;
    const int32_t *att = a.attend_slot + (size_t)v * a.ms;
    for (int j = threadIdx.x; j < cnt; j += blockDim.x) {
        const int32_t pg = j < cnt - 1 ? own[att[j]] : own[H1 - 1];
        pages[j] = a.headwise ? pg * a.nkv + k : pg;
        if (a.att_host) {
            const size_t i = (size_t)v * a.ms + j;
            const int32_t blk = a.sel_idx[i];
            const bool miss =
                j < cnt - 1 && offload_sorted_has(a.recall_block + (size_t)v * a.ms, nr, blk);
            a.att_host[i] = !miss ? -1 : a.headwise ? ids[blk] * a.nkv + k : ids[blk];
        }
    }
    if (threadIdx.x == 0) {
        const int len = (cnt - 1) * a.ps + (n - (nb - 1) * a.ps);
        a.att_len[v] = len;
        atomicAdd(a.att_tokens, (unsigned long long)len);
        if (a.tail_index[b] >= 0) {
            recall_desc t;
            t.src = a.gpu_pool + (uint64_t)own[H1 - 1] * a.page_bytes + koff;
            t.dst = a.gpu_pool + (uint64_t)own[att[cnt - 1]] * a.page_bytes + koff;
            t.bytes = a.chunk_bytes;
            t.pad = 0;
            a.tail_desc[(size_t)a.tail_index[b] * a.n_lists + k] = t;
        }
    }
}

__global__ void __launch_bounds__(128) build_kernel(const __grid_constant__ offload_build_args a)
{
    build_list(a, blockIdx.x);
}

struct plan_jobs {
    hot_plan_params p;
    hot_plan_state s;
    offload_plan_job job[OFFLOAD_PLAN_MAX_JOBS];
    int lists0; /* job 0's lists; the blocks after them are job 1's */
};

/* Block x: list x of job 0, or list x - lists0 of job 1: its plan, then (once the block has
 * seen the plan's writes) its build. */
__global__ void __launch_bounds__(HOT_PLAN_THREADS)
    plan_build_kernel(const __grid_constant__ plan_jobs J)
{
    const int j = (int)blockIdx.x >= J.lists0, v = (int)blockIdx.x - (j ? J.lists0 : 0);
    const offload_plan_job &job = J.job[j];
    hot_plan_dev::hot_plan_list(J.p, J.s, job.in, job.out, v);
    __syncthreads();
    build_list(job.build, v);
}

} /* namespace */

extern "C" void offload_build_cuda(const struct offload_build_args *a, void *stream)
{
    if (a->B * a->n_lists <= 0) return;
    cudaStream_t st = (cudaStream_t)stream;
    build_kernel<<<a->B * a->n_lists, 128, 0, st>>>(*a);
    CUDA_CHECK_LAUNCH(st);
}

extern "C" void offload_plan_build_cuda(const struct hot_plan_params *p,
                                        const struct hot_plan_state *s,
                                        const struct offload_plan_job *jobs, int n, void *stream)
{
    offload_plan_jobs_check(p, jobs, n);
    PULSE_CHECK(hot_plan_params_check(p, NULL, 0) == 0, "offload_plan_build: bad plan params");
    plan_jobs J = {};
    J.p = *p, J.s = *s;
    long long lists = 0;
    for (int i = 0; i < n; i++) {
        J.job[i] = jobs[i];
        PULSE_CHECK(jobs[i].in.batch >= 0 && jobs[i].in.n_lists >= 1 && jobs[i].in.max_sel >= 1,
                    "offload_plan_build: batch, n_lists or max_sel out of range");
        if (i == 0) J.lists0 = (int)((long long)jobs[0].in.batch * jobs[0].in.n_lists);
        lists += (long long)jobs[i].in.batch * jobs[i].in.n_lists;
    }
    PULSE_CHECK(lists <= 0x7fffffffLL, "offload_plan_build: too many lists");
    if (lists == 0) return;
    cudaStream_t st = (cudaStream_t)stream;
    plan_build_kernel<<<(unsigned)lists, HOT_PLAN_THREADS, 0, st>>>(J);
    CUDA_CHECK_LAUNCH(st);
}
