/* CUDA implementations of the decode-step kernels of kernels.h, except attention
 * (attn_cuda.cu). Every wrapper launches on ctx->stream, checks the launch, allocates nothing.
 *
 * Numerics: each kernel evaluates the same expression as its _ref in fp32. Where the host
 * result must be bit-exact (fill_random_bf16, kv_fill_synthetic) or where the order of rounding
 * matters (RoPE), the products and sums are written with __fmul_rn/__fadd_rn so that nvcc does
 * not contract them into FMAs (the host C build does not contract). */
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

#ifdef PULSE_HAVE_NVTX
#include <nvtx3/nvToolsExtMemCudaRt.h>
#endif

#include "cuda_check.h"
#include "gemm_lt.h"
#include "kernels.h"
#include "numeric.h"
#include "pdl.cuh"

namespace {

constexpr unsigned kFull = 0xffffffffu;

cudaStream_t stream_of(const struct kctx *c) { return (cudaStream_t)c->stream; }

int sms_of(const struct kctx *c) { return c->num_sms > 0 ? c->num_sms : 132; }

bool aligned(const void *p, size_t a) { return ((uintptr_t)p % a) == 0; }

/* Blocks for a grid-stride loop over n items with `threads` threads: enough for a few waves. */
unsigned grid_for(size_t n, int threads, const struct kctx *c)
{
    size_t want = (n + (size_t)threads - 1) / (size_t)threads;
    size_t cap = (size_t)sms_of(c) * 32;
    if (want < 1) want = 1;
    return (unsigned)(want < cap ? want : cap);
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
    return v;
}

/* Sum over the block; every thread gets the result. blockDim.x is a multiple of 32, <= 1024. */
__device__ float block_sum(float v)
{
    __shared__ float part[32];
    __shared__ float total;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    v = warp_sum(v);
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        const int nw = blockDim.x >> 5;
        float s = lane < nw ? part[lane] : 0.0f;
        s = warp_sum(s);
        if (lane == 0) total = s;
    }
    __syncthreads();
    return total;
}

/* ---------------------------------------------------------------- fill_random_bf16 */

__global__ void fill_random_kernel(uint16_t *dst, size_t n, uint64_t seed, float scale,
                                   float offset)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = f32_to_bf16(__fadd_rn(offset, __fmul_rn(scale, pulse_uniform(seed, i))));
}

/* ---------------------------------------------------------------- embed */

template <bool VEC>
__global__ void embed_kernel(const int32_t *tokens, const uint16_t *table, float *x, int hidden,
                             float scale)
{
    pdl_wait();
    pdl_trigger();
    const int b = blockIdx.x;
    const uint16_t *row = table + (size_t)tokens[b] * hidden;
    float *xr = x + (size_t)b * hidden;
    if (VEC) {
        for (int j = threadIdx.x * 8; j < hidden; j += blockDim.x * 8) {
            const uint4 v = *reinterpret_cast<const uint4 *>(row + j);
            const uint32_t w[4] = {v.x, v.y, v.z, v.w};
            float f[8];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                f[2 * k] = bf16_to_f32((uint16_t)(w[k] & 0xffffu)) * scale;
                f[2 * k + 1] = bf16_to_f32((uint16_t)(w[k] >> 16)) * scale;
            }
            *reinterpret_cast<float4 *>(xr + j) = make_float4(f[0], f[1], f[2], f[3]);
            *reinterpret_cast<float4 *>(xr + j + 4) = make_float4(f[4], f[5], f[6], f[7]);
        }
    } else {
        for (int j = threadIdx.x; j < hidden; j += blockDim.x) xr[j] = bf16_to_f32(row[j]) * scale;
    }
}

/* ---------------------------------------------------------------- rmsnorm */

constexpr int kNormThreads = 256;

/* One block per row: fp32 sum of squares, then out = bf16((x * inv) * w) as in the reference. */
template <bool VEC>
__global__ void __launch_bounds__(kNormThreads) rmsnorm_kernel(const float *x, const uint16_t *w,
                                                               uint16_t *out, int dim, float eps)
{
    pdl_wait();
    pdl_trigger();
    const float *xr = x + (size_t)blockIdx.x * dim;
    uint16_t *orow = out + (size_t)blockIdx.x * dim;
    float ss = 0.0f;
    if (VEC) {
        for (int j = threadIdx.x * 4; j < dim; j += kNormThreads * 4) {
            const float4 v = *reinterpret_cast<const float4 *>(xr + j);
            ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
    } else {
        for (int j = threadIdx.x; j < dim; j += kNormThreads) ss += xr[j] * xr[j];
    }
    ss = block_sum(ss);
    const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    if (VEC) {
        for (int j = threadIdx.x * 4; j < dim; j += kNormThreads * 4) {
            const float4 v = *reinterpret_cast<const float4 *>(xr + j);
            const uint2 wv = *reinterpret_cast<const uint2 *>(w + j);
            const float f[4] = {v.x, v.y, v.z, v.w};
            const uint16_t wb[4] = {(uint16_t)(wv.x & 0xffffu), (uint16_t)(wv.x >> 16),
                                    (uint16_t)(wv.y & 0xffffu), (uint16_t)(wv.y >> 16)};
            uint32_t o[4];
#pragma unroll
            for (int k = 0; k < 4; k++) o[k] = f32_to_bf16((f[k] * inv) * bf16_to_f32(wb[k]));
            *reinterpret_cast<uint2 *>(orow + j) = make_uint2(o[0] | (o[1] << 16), o[2] | (o[3] << 16));
        }
    } else {
        for (int j = threadIdx.x; j < dim; j += kNormThreads)
            orow[j] = f32_to_bf16((xr[j] * inv) * bf16_to_f32(w[j]));
    }
}

/* One block per row: x += y * inv(y) * w in fp32 (the Gemma 3 post-norm and residual add). */
__global__ void __launch_bounds__(kNormThreads) rmsnorm_add_kernel(float *x, const float *y,
                                                                   const uint16_t *w, int dim,
                                                                   float eps)
{
    pdl_wait();
    pdl_trigger();
    const float *yr = y + (size_t)blockIdx.x * dim;
    float *xr = x + (size_t)blockIdx.x * dim;
    float ss = 0.0f;
    for (int j = threadIdx.x; j < dim; j += kNormThreads) ss += yr[j] * yr[j];
    ss = block_sum(ss);
    const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int j = threadIdx.x; j < dim; j += kNormThreads) xr[j] += (yr[j] * inv) * bf16_to_f32(w[j]);
}

/* ---------------------------------------------------------------- silu_mul, gelu_mul */

constexpr int kEltThreads = 256;

__device__ __forceinline__ float silu_mul1(float g, float u) { return g / (1.0f + expf(-g)) * u; }
__device__ __forceinline__ float gelu_mul1(float g, float u)
{
    const float t = tanhf(0.7978845608f * (g + 0.044715f * g * g * g));
    return 0.5f * g * (1.0f + t) * u;
}
template <bool GELU> __device__ __forceinline__ float glu1(float g, float u)
{
    return GELU ? gelu_mul1(g, u) : silu_mul1(g, u);
}

template <bool VEC, bool GELU>
__global__ void glu_mul_kernel(const float *gu, uint16_t *out, int ffn)
{
    pdl_wait();
    pdl_trigger();
    const int r = blockIdx.y;
    const float *g = gu + (size_t)r * 2 * ffn;
    const float *u = g + ffn;
    uint16_t *o = out + (size_t)r * ffn;
    if (VEC) {
        const int i = (blockIdx.x * kEltThreads + threadIdx.x) * 4;
        if (i >= ffn) return;
        const float4 gv = *reinterpret_cast<const float4 *>(g + i);
        const float4 uv = *reinterpret_cast<const float4 *>(u + i);
        const uint32_t o0 = f32_to_bf16(glu1<GELU>(gv.x, uv.x));
        const uint32_t o1 = f32_to_bf16(glu1<GELU>(gv.y, uv.y));
        const uint32_t o2 = f32_to_bf16(glu1<GELU>(gv.z, uv.z));
        const uint32_t o3 = f32_to_bf16(glu1<GELU>(gv.w, uv.w));
        *reinterpret_cast<uint2 *>(o + i) = make_uint2(o0 | (o1 << 16), o2 | (o3 << 16));
    } else {
        const int i = blockIdx.x * kEltThreads + threadIdx.x;
        if (i < ffn) o[i] = f32_to_bf16(glu1<GELU>(g[i], u[i]));
    }
}

/* ---------------------------------------------------------------- argmax */

constexpr int kArgmaxThreads = 1024;

/* (v, i) replaces (bv, bi) when it is a real candidate that is larger, or equal at a lower
 * index. NaN is never stored, so it never wins; bi < 0 means "nothing yet". */
__device__ __forceinline__ void argmax_merge(float &bv, int &bi, float v, int i)
{
    if (i < 0 || isnan(v)) return;
    if (bi < 0 || v > bv || (v == bv && i < bi)) {
        bv = v;
        bi = i;
    }
}

template <bool VEC>
__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const float *logits, int32_t *out,
                                                                int vocab)
{
    pdl_wait();
    pdl_trigger();
    const float *lr = logits + (size_t)blockIdx.x * vocab;
    float bv = -INFINITY;
    int bi = -1;
    if (VEC) {
        for (int j = threadIdx.x * 4; j < vocab; j += kArgmaxThreads * 4) {
            const float4 v = *reinterpret_cast<const float4 *>(lr + j);
            argmax_merge(bv, bi, v.x, j);
            argmax_merge(bv, bi, v.y, j + 1);
            argmax_merge(bv, bi, v.z, j + 2);
            argmax_merge(bv, bi, v.w, j + 3);
        }
    } else {
        for (int j = threadIdx.x; j < vocab; j += kArgmaxThreads) argmax_merge(bv, bi, lr[j], j);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(kFull, bv, o);
        const int oi = __shfl_xor_sync(kFull, bi, o);
        argmax_merge(bv, bi, ov, oi);
    }
    __shared__ float sv[32];
    __shared__ int si[32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) {
        sv[warp] = bv;
        si[warp] = bi;
    }
    __syncthreads();
    if (warp == 0) {
        bv = lane < (kArgmaxThreads >> 5) ? sv[lane] : -INFINITY;
        bi = lane < (kArgmaxThreads >> 5) ? si[lane] : -1;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(kFull, bv, o);
            const int oi = __shfl_xor_sync(kFull, bi, o);
            argmax_merge(bv, bi, ov, oi);
        }
        if (lane == 0) out[blockIdx.x] = bi < 0 ? 0 : bi;
    }
}

/* ---------------------------------------------------------------- qk_norm_rope_append */

constexpr int kRopeWarps = 4;
constexpr int kRopeMaxPairs = 8; /* per lane: head_dim <= 2 * 32 * 8 = 512 */

/* One warp per head of one entry: q and k heads get RMSNorm (optional) and RoPE, v heads are
 * converted only. Lane l owns the rotary pairs (i, i + hd/2) for i = l, l + 32, ... */
__global__ void __launch_bounds__(kRopeWarps * 32)
    qk_norm_rope_append_kernel(const float *qkv, const uint16_t *q_norm, const uint16_t *k_norm,
                               uint16_t *q_out, uint16_t *pool, const int32_t *page_ids,
                               const int32_t *page_start, const int32_t *pos, size_t page_elems,
                               int page_size, int nq, int nkv, int hd, const float *inv_freq,
                               float eps)
{
    pdl_wait();
    pdl_trigger();
    const int b = blockIdx.y;
    const int head = blockIdx.x * kRopeWarps + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    const int nheads = nq + 2 * nkv;
    if (head >= nheads) return;
    const float *src = qkv + ((size_t)b * nheads + head) * hd;
    const int p = pos[b];

    uint16_t *dst;
    const uint16_t *w = nullptr;
    if (head < nq) {
        dst = q_out + ((size_t)b * nq + head) * hd;
        w = q_norm;
    } else {
        const int which = head < nq + nkv ? 0 : 1;
        const int kvh = head - nq - which * nkv;
        const int page = page_ids[page_start[b] + p / page_size];
        dst = pool + (size_t)page * page_elems +
              ((size_t)(kvh * 2 + which) * page_size + p % page_size) * hd;
        if (which == 1) {
            for (int d = lane; d < hd; d += 32) dst[d] = f32_to_bf16(src[d]);
            return;
        }
        w = k_norm;
    }

    const int half = hd / 2;
    float x0[kRopeMaxPairs], x1[kRopeMaxPairs];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < kRopeMaxPairs; k++) {
        const int i = lane + 32 * k;
        x0[k] = i < half ? src[i] : 0.0f;
        x1[k] = i < half ? src[i + half] : 0.0f;
        ss += x0[k] * x0[k] + x1[k] * x1[k];
    }
    if (w) {
        ss = warp_sum(ss);
        const float inv = 1.0f / sqrtf(ss / (float)hd + eps);
#pragma unroll
        for (int k = 0; k < kRopeMaxPairs; k++) {
            const int i = lane + 32 * k;
            if (i < half) {
                x0[k] = (x0[k] * inv) * bf16_to_f32(w[i]);
                x1[k] = (x1[k] * inv) * bf16_to_f32(w[i + half]);
            }
        }
    }
#pragma unroll
    for (int k = 0; k < kRopeMaxPairs; k++) {
        const int i = lane + 32 * k;
        if (i >= half) break;
        /* the layer's table (model_rope_inv_freq), read as the reference reads it */
        const float ang = (float)p * inv_freq[i];
        float sn, cs;
        sincosf(ang, &sn, &cs);
        const float y0 = __fsub_rn(__fmul_rn(x0[k], cs), __fmul_rn(x1[k], sn));
        const float y1 = __fadd_rn(__fmul_rn(x1[k], cs), __fmul_rn(x0[k], sn));
        dst[i] = f32_to_bf16(y0);
        dst[i + half] = f32_to_bf16(y1);
    }
}

/* ---------------------------------------------------------------- kv_fill_synthetic */

constexpr int kFillThreads = 256;

/* Thread item = VEC consecutive elements of one token's [kv_head][kv][dim] row (VEC | hd).
 * Grid: x over (token, element group) of the longest entry, y = batch entry. */
template <int VEC>
__global__ void kv_fill_kernel(uint16_t *pool, const int32_t *page_ids, const int32_t *page_start,
                               const int32_t *n_tokens, const int32_t *req_ids, size_t page_elems,
                               int page_size, int hd, int groups_per_token, uint64_t seed,
                               int layer)
{
    const int b = blockIdx.y;
    const long long item = (long long)blockIdx.x * kFillThreads + threadIdx.x;
    const int t = (int)(item / groups_per_token);
    if (t >= n_tokens[b]) return;
    const int e = (int)(item - (long long)t * groups_per_token) * VEC; /* in [kv_head][kv][dim] */
    const int row = e / hd, d = e - row * hd;                         /* row = kv_head*2 + kv */
    const uint64_t s = pulse_seed_mix(seed, (uint64_t)req_ids[b], (uint64_t)layer);
    const uint64_t e0 = (uint64_t)t * ((uint64_t)groups_per_token * VEC) + (uint64_t)e;
    const int page = page_ids[page_start[b] + t / page_size];
    uint16_t *dst = pool + (size_t)page * page_elems +
                    ((size_t)row * page_size + t % page_size) * hd + d;
    if (VEC == 8) {
        uint32_t w[4];
#pragma unroll
        for (int k = 0; k < 4; k++)
            w[k] = (uint32_t)f32_to_bf16(pulse_uniform(s, e0 + 2 * k)) |
                   ((uint32_t)f32_to_bf16(pulse_uniform(s, e0 + 2 * k + 1)) << 16);
        *reinterpret_cast<uint4 *>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
#pragma unroll
        for (int k = 0; k < VEC; k++) dst[k] = f32_to_bf16(pulse_uniform(s, e0 + k));
    }
}

/* ---------------------------------------------------------------- advance_pos */

__global__ void advance_pos_kernel(int32_t *pos, int batch)
{
    pdl_wait();
    pdl_trigger();
    const int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b < batch) pos[b] += 1;
}

} /* namespace */

/* ================================================================ the C API */

extern "C" void fill_random_bf16_cuda(const struct kctx *c, uint16_t *dst, size_t n,
                                      uint64_t seed, float scale, float offset)
{
    if (n == 0) return;
    cudaStream_t st = stream_of(c);
    fill_random_kernel<<<grid_for(n, 256, c), 256, 0, st>>>(dst, n, seed, scale, offset);
    CUDA_CHECK_LAUNCH(st);
}

extern "C" void embed_cuda(const struct kctx *c, const int32_t *tokens, const uint16_t *table,
                           float *x, int batch, int hidden, float scale)
{
    if (batch <= 0 || hidden <= 0) return;
    cudaStream_t st = stream_of(c);
    const bool vec = hidden % 8 == 0 && aligned(table, 16) && aligned(x, 16);
    if (vec)
        pulse_launch(c->pdl, embed_kernel<true>, batch, 256, 0, st, tokens, table, x, hidden,
                     scale);
    else
        pulse_launch(c->pdl, embed_kernel<false>, batch, 256, 0, st, tokens, table, x, hidden,
                     scale);
    CUDA_CHECK_LAUNCH(st);
}

extern "C" void rmsnorm_cuda(const struct kctx *c, const float *x, const uint16_t *w,
                             uint16_t *out, int rows, int dim, float eps)
{
    if (rows <= 0 || dim <= 0) return;
    cudaStream_t st = stream_of(c);
    const bool vec = dim % 4 == 0 && aligned(x, 16) && aligned(w, 8) && aligned(out, 8);
    if (vec)
        pulse_launch(c->pdl, rmsnorm_kernel<true>, rows, kNormThreads, 0, st, x, w, out, dim, eps);
    else
        pulse_launch(c->pdl, rmsnorm_kernel<false>, rows, kNormThreads, 0, st, x, w, out, dim, eps);
    CUDA_CHECK_LAUNCH(st);
}

/* compute-sanitizer's initcheck does not see cuBLAS's stores (dev/initcheck_cublas: every byte a
 * GEMM writes reads as uninitialized), so the GEMM's output is marked initialized through NVTX's
 * memory API; initcheck reads the mark with --nvtx yes, and with no tool attached the call
 * returns at once. Inside a stream capture the mark is a host call, not a graph node: it takes
 * effect when the graph is captured, before its GEMM first runs (the GEMMs' outputs are scratch
 * that the same graph writes before it reads them). */
static void mark_initialized(cudaStream_t st, const void *p, size_t bytes)
{
#ifdef PULSE_HAVE_NVTX
    static const nvtxDomainHandle_t domain = nvtxDomainCreateA("pulse"); /* once, thread-safe */
    nvtxMemVirtualRangeDesc_t range;
    range.size = bytes;
    range.ptr = p;
    nvtxMemMarkInitializedBatch_t batch;
    batch.extCompatID = NVTX_EXT_COMPATID_MEM;
    batch.structSize = sizeof batch;
    batch.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
    batch.regionDescCount = 1;
    batch.regionDescElementSize = sizeof range;
    batch.regionDescElements = &range;
    nvtxMemCudaMarkInitialized(domain, st, 0, &batch);
#else
    (void)st, (void)p, (void)bytes;
#endif
}

/* Row-major out[m][n] = a[m][k] . w[n][k] is, column-major, out^T (n x m) = op(W)=T (n x k)
 * times a^T (k x m): transa = T on w (ld k), transb = N on a (ld k), ldc = n. */
extern "C" void gemm_bf16_cuda(const struct kctx *c, const uint16_t *a, const uint16_t *w,
                               float *out, int m, int n, int k, float beta)
{
    if (m <= 0 || n <= 0) return;
    /* cuBLASLt when the context has a plan cache; cublasGemmEx for a shape it has no
     * algorithm for (counted there) and for contexts without one */
    if (k > 0 && c->gemm_lt &&
        gemm_lt_run((struct gemm_lt *)c->gemm_lt, c, a, w, out, m, n, k, beta) == 0) {
        CUDA_CHECK_LAUNCH(stream_of(c));
        mark_initialized(stream_of(c), out, (size_t)m * n * sizeof *out);
        return;
    }
    cublasHandle_t h = (cublasHandle_t)c->blas;
    PULSE_CHECK(h != NULL, "gemm_bf16_cuda needs ctx->blas");
    /* Rebind only when the stream differs: cublasSetStream also resets the workspace to cuBLAS's
     * own pool, so the engine's fixed workspace (no allocation in a step or a graph capture) is
     * set again after it. */
    cudaStream_t cur = NULL;
    CUBLAS_CHECK(cublasGetStream(h, &cur));
    if (cur != stream_of(c)) {
        CUBLAS_CHECK(cublasSetStream(h, stream_of(c)));
        if (c->blas_workspace)
            CUBLAS_CHECK(cublasSetWorkspace(h, c->blas_workspace, c->blas_workspace_bytes));
    }
    const float alpha = 1.0f;
    CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w, CUDA_R_16BF, k, a,
                              CUDA_R_16BF, k, &beta, out, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
    CUDA_CHECK_LAUNCH(stream_of(c));
    mark_initialized(stream_of(c), out, (size_t)m * n * sizeof *out);
}

extern "C" void qk_norm_rope_append_cuda(const struct kctx *c, const float *qkv,
                                         const uint16_t *q_norm, const uint16_t *k_norm,
                                         uint16_t *q_out, const struct kv_view *kv,
                                         const int32_t *pos, int batch, int nq,
                                         const float *inv_freq, float eps)
{
    if (batch <= 0) return;
    const int hd = kv->head_dim, nkv = kv->n_kv_heads;
    PULSE_CHECK(hd % 2 == 0 && hd <= 2 * 32 * kRopeMaxPairs, "head_dim must be even and <= 512");
    PULSE_CHECK(kv->page_size >= 1, "page_size must be >= 1");
    const size_t page_elems = kv_page_elems(kv);
    const dim3 grid((unsigned)PULSE_CEIL_DIV(nq + 2 * nkv, kRopeWarps), (unsigned)batch);
    cudaStream_t st = stream_of(c);
    pulse_launch(c->pdl, qk_norm_rope_append_kernel, grid, kRopeWarps * 32, 0, st, qkv, q_norm,
                 k_norm, q_out, kv->pool, kv->page_ids, kv->page_start, pos, page_elems,
                 kv->page_size, nq, nkv, hd, inv_freq, eps);
    CUDA_CHECK_LAUNCH(st);
}

extern "C" void rmsnorm_add_cuda(const struct kctx *c, float *x, const float *y, const uint16_t *w,
                                 int rows, int dim, float eps)
{
    if (rows <= 0 || dim <= 0) return;
    cudaStream_t st = stream_of(c);
    pulse_launch(c->pdl, rmsnorm_add_kernel, rows, kNormThreads, 0, st, x, y, w, dim, eps);
    CUDA_CHECK_LAUNCH(st);
}

template <bool GELU>
static void glu_mul_launch(const struct kctx *c, const float *gu, uint16_t *out, int rows, int ffn)
{
    if (rows <= 0 || ffn <= 0) return;
    cudaStream_t st = stream_of(c);
    const bool vec = ffn % 4 == 0 && aligned(gu, 16) && aligned(out, 8);
    if (vec) {
        const dim3 grid((unsigned)PULSE_CEIL_DIV(ffn / 4, kEltThreads), (unsigned)rows);
        pulse_launch(c->pdl, glu_mul_kernel<true, GELU>, grid, kEltThreads, 0, st, gu, out, ffn);
    } else {
        const dim3 grid((unsigned)PULSE_CEIL_DIV(ffn, kEltThreads), (unsigned)rows);
        pulse_launch(c->pdl, glu_mul_kernel<false, GELU>, grid, kEltThreads, 0, st, gu, out, ffn);
    }
    CUDA_CHECK_LAUNCH(st);
}

extern "C" void silu_mul_cuda(const struct kctx *c, const float *gu, uint16_t *out, int rows,
                              int ffn)
{
    glu_mul_launch<false>(c, gu, out, rows, ffn);
}

extern "C" void gelu_mul_cuda(const struct kctx *c, const float *gu, uint16_t *out, int rows,
                              int ffn)
{
    glu_mul_launch<true>(c, gu, out, rows, ffn);
}

extern "C" void argmax_cuda(const struct kctx *c, const float *logits, int32_t *out, int rows,
                            int vocab)
{
    if (rows <= 0) return;
    PULSE_CHECK(vocab >= 1, "argmax needs vocab >= 1");
    cudaStream_t st = stream_of(c);
    if (vocab % 4 == 0 && aligned(logits, 16))
        pulse_launch(c->pdl, argmax_kernel<true>, rows, kArgmaxThreads, 0, st, logits, out, vocab);
    else
        pulse_launch(c->pdl, argmax_kernel<false>, rows, kArgmaxThreads, 0, st, logits, out, vocab);
    CUDA_CHECK_LAUNCH(st);
}

extern "C" void kv_fill_synthetic_cuda(const struct kctx *c, const struct kv_view *kv,
                                       const int32_t *n_tokens, const int32_t *req_ids, int batch,
                                       int layer, uint64_t seed, int max_tokens)
{
    if (batch <= 0 || max_tokens <= 0) return;
    const int hd = kv->head_dim;
    const int per_token = kv->n_kv_heads * 2 * hd;
    const size_t page_elems = kv_page_elems(kv);
    const bool vec = hd % 8 == 0 && aligned(kv->pool, 16);
    const int vw = vec ? 8 : 1;
    const int groups = per_token / vw;
    const long long items = (long long)max_tokens * groups;
    PULSE_CHECK(items / kFillThreads < 0x7fffffffLL, "kv_fill_synthetic: grid too large");
    const dim3 grid((unsigned)PULSE_CEIL_DIV(items, kFillThreads), (unsigned)batch);
    cudaStream_t st = stream_of(c);
    if (vec)
        kv_fill_kernel<8><<<grid, kFillThreads, 0, st>>>(kv->pool, kv->page_ids, kv->page_start,
                                                         n_tokens, req_ids, page_elems,
                                                         kv->page_size, hd, groups, seed, layer);
    else
        kv_fill_kernel<1><<<grid, kFillThreads, 0, st>>>(kv->pool, kv->page_ids, kv->page_start,
                                                         n_tokens, req_ids, page_elems,
                                                         kv->page_size, hd, groups, seed, layer);
    CUDA_CHECK_LAUNCH(st);
}

extern "C" void advance_pos_cuda(const struct kctx *c, int32_t *pos, int batch)
{
    if (batch <= 0) return;
    cudaStream_t st = stream_of(c);
    pulse_launch(c->pdl, advance_pos_kernel, PULSE_CEIL_DIV(batch, 256), 256, 0, st, pos, batch);
    CUDA_CHECK_LAUNCH(st);
}
