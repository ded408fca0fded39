/* The device path's glue kernel (offload_kernels.h): one thread block per list; its threads
 * split the list's descriptors and page ids. Reference: offload_kernels_ref.c. */
#include <cuda_runtime.h>

#include "cuda_check.h"
#include "offload_kernels.h"

namespace
{

__global__ void __launch_bounds__(128) build_kernel(const offload_build_args a)
{
    const int v = blockIdx.x, b = v / a.n_lists, k = v % a.n_lists, H1 = a.hot_slots + 1;
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

} /* namespace */

extern "C" void offload_build_cuda(const struct offload_build_args *a, void *stream)
{
    if (a->B * a->n_lists <= 0) return;
    cudaStream_t st = (cudaStream_t)stream;
    build_kernel<<<a->B * a->n_lists, 128, 0, st>>>(*a);
    CUDA_CHECK_LAUNCH(st);
}
