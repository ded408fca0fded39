/* The locality model's structured prompt keys on the device (locality.h, "device fill"): the
 * formulas of locality.c (make_dirs, block_mean, write_keys and kv_fill_synthetic's V), one
 * thread per element, with every product and sum written as __fmul_rn / __fadd_rn so that nvcc
 * cannot contract them into FMAs (the host C build does not contract), and double sums in the
 * host's order. What cannot match the host bit for bit is libm: the host calls logf, cosf and
 * expf, the device evaluates log, cos and exp in double and rounds to float (correctly rounded
 * but for the rarest cases, where glibc's float functions are within an ulp), so a gaussian may
 * differ in its last float bit; tests/gpu/test_locality_gpu.c measures what that does to the
 * bf16 keys.
 *
 *   dirs   a CTA per (KV head, direction): hd gaussians, their squared norm summed in double in
 *          element order by one thread (as normalize() does), then scaled.
 *   keys   a CTA per (block, KV head): the block's D weights and strength in shared memory,
 *          each thread a channel c: mean_c = sum_d w_d u_dc in direction order, then every
 *          token of the block in [t0, t1): K = bf16(mean_c + amp * U), V as kv_fill_synthetic.
 *          Channel-consecutive threads write consecutive bf16 of a token's row. */
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

#include "cuda_check.h"
#include "numeric.h"
#include "workloads/locality.h"

namespace
{

constexpr int kThreads = 128;
constexpr int kMaxDirs = 1024; /* locality_params.key_dirs at most */
constexpr int kMaxHd = SELECT_MAX_HEAD_DIM;

cudaStream_t stream_of(const struct kctx *c)
{
    return (cudaStream_t)c->stream;
}

/* locality.c's gauss(): Box-Muller on elements (2i, 2i+1) of stream s. */
__device__ float gauss_dev(uint64_t s, uint64_t i)
{
    const float u1 = __fmul_rn(0.5f, __fadd_rn(pulse_uniform(s, 2 * i), 1.0f));
    const float u2 = __fmul_rn(0.5f, __fadd_rn(pulse_uniform(s, 2 * i + 1), 1.0f));
    const float lg = (float)log((double)__fsub_rn(1.0f, u1));
    const float cs = (float)cos((double)__fmul_rn(6.283185307f, u2));
    return __fmul_rn(__fsqrt_rn(__fmul_rn(-2.0f, lg)), cs);
}

__global__ void __launch_bounds__(kThreads) dirs_kernel(struct locality_dev_args a, float *dirs)
{
    __shared__ float u[kMaxHd];
    __shared__ float inv;
    const int h = blockIdx.x / a.D, d = blockIdx.x % a.D, hd = a.hd;
    const uint64_t s = a.dir_seed[h];
    for (int c = threadIdx.x; c < hd; c += blockDim.x)
        u[c] = gauss_dev(s, (uint64_t)d * hd + c);
    __syncthreads();
    if (threadIdx.x == 0) {
        double ss = 0.0;
        for (int c = 0; c < hd; c++)
            ss = __dadd_rn(ss, __dmul_rn((double)u[c], (double)u[c]));
        inv = ss > 0.0 ? __double2float_rn(__ddiv_rn(1.0, __dsqrt_rn(ss))) : 0.0f;
    }
    __syncthreads();
    float *out = dirs + ((size_t)h * a.D + d) * hd;
    for (int c = threadIdx.x; c < hd; c += blockDim.x)
        out[c] = __fmul_rn(u[c], inv);
}

__global__ void __launch_bounds__(kThreads)
    keys_kernel(struct locality_dev_args a, const float *dirs, uint16_t *pool,
                const int32_t *page_ids, const int32_t *d_start, int t0, int t1)
{
    __shared__ float w[kMaxDirs];
    __shared__ float scale;
    const int h = blockIdx.y, hd = a.hd, D = a.D, bs = a.bs;
    const int i = t0 / bs + blockIdx.x; /* the block */
    const uint64_t ks = a.key_seed[h];
    const uint64_t s = pulse_seed_mix(ks, 2, (uint64_t)i), ns = pulse_seed_mix(ks, 3, 0);
    if (threadIdx.x == 0) {
        const float rho = (float)exp((double)__fmul_rn(a.sigma, gauss_dev(s, (uint64_t)D)));
        scale = __fmul_rn(rho, a.sq);
    }
    __syncthreads();
    for (int d = threadIdx.x; d < D; d += blockDim.x)
        w[d] = __fmul_rn(gauss_dev(s, (uint64_t)d), scale);
    __syncthreads();
    const int lo = max(t0, i * bs), hi = min(t1, (i + 1) * bs);
    const int page = page_ids[*d_start + i];
    const size_t page_elems = (size_t)a.nkv * 2 * bs * hd;
    const uint64_t per_token = (uint64_t)a.nkv * 2 * hd;
    uint16_t *base = pool + (size_t)page * page_elems;
    const float *u = dirs + (size_t)h * D * hd;
    for (int c = threadIdx.x; c < hd; c += blockDim.x) {
        float m = 0.0f;
        for (int d = 0; d < D; d++)
            m = __fadd_rn(m, __fmul_rn(w[d], u[(size_t)d * hd + c]));
        for (int t = lo; t < hi; t++) {
            const int r = t - i * bs;
            const float noise = __fmul_rn(a.amp, pulse_uniform(ns, (uint64_t)t * hd + c));
            base[((size_t)(h * 2) * bs + r) * hd + c] = f32_to_bf16(__fadd_rn(m, noise));
            const uint64_t e = (uint64_t)t * per_token + ((uint64_t)h * 2 + 1) * hd + c;
            base[((size_t)(h * 2 + 1) * bs + r) * hd + c] = f32_to_bf16(pulse_uniform(a.v_seed, e));
        }
    }
}

} /* namespace */

extern "C" void locality_dirs_launch(const struct kctx *c, const struct locality_dev_args *a,
                                     float *d_dirs)
{
    PULSE_CHECK(a->nkv >= 1 && a->nkv <= LOC_DEV_MAX_KV_HEADS && a->D >= 1 && a->D <= kMaxDirs &&
                    a->hd >= 1 && a->hd <= kMaxHd,
                "locality_dirs_launch: heads, directions or head_dim out of range");
    cudaStream_t st = stream_of(c);
    dirs_kernel<<<(unsigned)(a->nkv * a->D), kThreads, 0, st>>>(*a, d_dirs);
    CUDA_CHECK_LAUNCH(st);
}

extern "C" void locality_keys_launch(const struct kctx *c, const struct locality_dev_args *a,
                                     const float *d_dirs, const struct kv_view *kv,
                                     const int32_t *d_start, int t0, int t1)
{
    if (t1 <= t0) return;
    PULSE_CHECK(kv->n_kv_heads == a->nkv && kv->head_dim == a->hd && kv->page_size == a->bs,
                "locality_keys_launch: the KV view's shape is not the generator's");
    const int blocks = (t1 - 1) / a->bs - t0 / a->bs + 1;
    cudaStream_t st = stream_of(c);
    keys_kernel<<<dim3((unsigned)blocks, (unsigned)a->nkv), kThreads, 0, st>>>(
        *a, d_dirs, kv->pool, kv->page_ids, d_start, t0, t1);
    CUDA_CHECK_LAUNCH(st);
}
