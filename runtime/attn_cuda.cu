/* Decode attention over the paged KV cache (kernels.h: attn_decode_cuda), flash-decoding style.
 *
 * Pass 1 (attn_split_kernel), grid (split, kv_head, entry), 4 warps: a block reads the tokens
 * [split * tps, (split + 1) * tps) of one KV head of one entry once and computes all G = nq/nkv
 * query heads of that group from it. Each warp takes 16-token tiles in turn (tile w, w + 4, ...)
 * and does the two products on the tensor cores with mma.sync m16n8k16 (bf16 in, fp32 out):
 *   S (heads x 16 tokens) = Q (heads, padded to 16 rows) . K^T       two n-tiles of 8 tokens
 *   O^T (dims x heads)   += V^T (dims x 16 tokens) . P^T (16 tokens x heads)   hd/16 m-tiles
 * The fragments are loaded straight from global memory with 16-byte loads: a dot product does not
 * care about the order of its terms, so the reduction dimension of each mma is permuted to match
 * what one 16-byte load holds (8 consecutive dims of one token), the same permutation on both
 * operands; the output dims of P.V are permuted the same way and un-permuted when stored.
 * The S accumulator of the first product is, element for element, the P^T operand of the second
 * (thread (g, q) holds head g, tokens 2q, 2q+1, 2q+8, 2q+9), so softmax needs no data exchange
 * besides a 4-lane max. A thread issues all of its K and V loads of a tile (16 x 16 B at
 * hd 128) before it uses any: 8 KB in flight per warp. Online softmax in fp32, log2 domain; the
 * probabilities enter the second product as bf16 (fp32 accumulation), as in FlashAttention.
 * Tokens past the split's end or n_tokens[b] are never loaded (their registers are zero) and get
 * probability 0, so stale or NaN page contents cannot leak. The 4 warps merge through shared
 * memory and the block writes one partial (m, l, acc[hd]) per query head to ctx->workspace.
 * Pass 2 (attn_combine_kernel), grid (q head, entry): merges the splits an entry actually used
 * and writes bf16 out. */
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

#include "cuda_check.h"
#include "kernels.h"
#include "numeric.h"

namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTile = 16;       /* tokens per warp iteration (the k of the P.V mma) */
constexpr int kMaxGroup = 8;    /* query heads per KV head: the n of the P.V mma */
constexpr int kMinTilesPerSplit = 4;
constexpr int kBlocksPerSm = 16; /* split target: about this many blocks per SM in the grid */

struct AttnParams {
    const uint16_t *q;
    const uint16_t *pool;
    const int32_t *page_ids;
    const int32_t *page_start;
    const int32_t *n_tokens;
    float2 *ws_ml;   /* [batch][nq][splits] (m in log2 units, l) */
    float *ws_acc;   /* [batch][nq][splits][hd], unnormalised, relative to m */
    uint16_t *out;
    size_t page_elems;
    int nq, group, page_size, tps, splits;
    float scale_log2;
};

/* 16-byte global load that skips memory when !pred (result zero). .nc: the KV cache and q are
 * read-only during the kernel; L1::no_allocate: each byte is read once; L2::256B: prefetch the
 * rest of the token row. */
__device__ __forceinline__ uint4 ld_kv(const uint16_t *p, bool pred)
{
    uint4 r;
    asm("{\n\t.reg .pred p;\n\t"
                 "setp.ne.b32 p, %5, 0;\n\t"
                 "mov.b32 %0, 0;\n\tmov.b32 %1, 0;\n\tmov.b32 %2, 0;\n\tmov.b32 %3, 0;\n\t"
                 "@p ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n\t}"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p), "r"((int)pred));
    return r;
}

/* d += a (16x16, row) . b (16x8, col); bf16 operands, fp32 accumulators. */
__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Two fp32 to a bf16 pair (round to nearest even); lo in the low half. */
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

__device__ __forceinline__ uint32_t word(const uint4 &v, int e)
{
    return e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w;
}

/* Fragment map (lane = 4 * g + q; g = lane / 4 is the mma "group", q = lane % 4):
 *  QK, per 32-dim chunk c: the thread loads dims [c*32 + q*8, +8) of q head g (A rows g; rows
 *    g + 8 are zero padding) and of tile tokens g and 8 + g (B columns, n-tiles 0 and 1); words
 *    0,1 feed k-step 2c and words 2,3 k-step 2c+1.
 *  S: thread holds head g, tile tokens 2q, 2q+1 (n-tile 0) and 2q+8, 2q+9 (n-tile 1).
 *  PV: the thread loads dims [j*64 + g*8, +8) of tile tokens 2q, 2q+1, 2q+8, 2q+9; m-tile
 *    i = 4j + e has row g = dim j*64 + g*8 + 2e and row g + 8 = that dim + 1.
 *  acc[i]: {0: head 2q, dim row g; 1: head 2q+1, row g; 2: head 2q, row g+8; 3: head 2q+1, g+8}. */
template <int HD, bool ALIGNED>
__global__ void __launch_bounds__(kThreads, HD <= 128 ? 3 : 2) attn_split_kernel(AttnParams p)
{
    constexpr int KC = HD / 32; /* 16-byte K loads per token per thread */
    constexpr int VJ = HD / 64; /* 16-byte V loads per token per thread */
    constexpr int MT = HD / 16; /* P.V m-tiles */
    constexpr bool kEarlyV = HD <= 128; /* issue V loads before QK (registers permitting) */

    __shared__ float s_m[kWarps][kMaxGroup];
    __shared__ float s_l[kWarps][kMaxGroup];
    __shared__ __align__(16) float s_acc[kWarps][kMaxGroup][HD];

    const int split = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
    const int n = p.n_tokens[b];
    const int t_begin = split * p.tps;
    if (t_begin >= n) return; /* block-uniform: the combine pass ignores this split */
    const int t_end = min(n, t_begin + p.tps);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, qd = lane & 3;
    const int G = p.group;

    uint32_t qf[KC][4];
    {
        const bool hv = g < G;
        const uint16_t *qp = p.q + ((size_t)b * p.nq + kvh * G + (hv ? g : 0)) * HD + qd * 8;
#pragma unroll
        for (int c = 0; c < KC; c++) {
            const uint4 v = ld_kv(qp + c * 32, hv);
            qf[c][0] = v.x, qf[c][1] = v.y, qf[c][2] = v.z, qf[c][3] = v.w;
        }
    }

    const int32_t *pids = p.page_ids + p.page_start[b];
    const int ps = p.page_size;
    const uint16_t *head_base = p.pool + (size_t)kvh * 2 * ps * HD; /* K of head kvh, page 0 */
    const size_t v_delta = (size_t)ps * HD;

    float m_run = -INFINITY, l_run = 0.0f;
    float acc[MT][4];
#pragma unroll
    for (int i = 0; i < MT; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;

    for (int t0 = t_begin + warp * kTile; t0 < t_end; t0 += kWarps * kTile) {
        const int tk[2] = {t0 + g, t0 + 8 + g};
        const int tv[4] = {t0 + 2 * qd, t0 + 2 * qd + 1, t0 + 2 * qd + 8, t0 + 2 * qd + 9};
        /* Row address (K of token t); V is v_delta further. Only for t < t_end. */
        const uint16_t *tile = nullptr;
        if (ALIGNED) { /* page_size % 16 == 0 and t0 % 16 == 0: one page holds the tile */
            const int pg = t0 / ps;
            tile = head_base + (size_t)__ldg(pids + pg) * p.page_elems + (size_t)(t0 - pg * ps) * HD;
        }
        auto row = [&](int t) -> const uint16_t * {
            if (ALIGNED) return tile + (size_t)(t - t0) * HD;
            if (t >= t_end) return head_base;
            const int pg = t / ps;
            return head_base + (size_t)__ldg(pids + pg) * p.page_elems + (size_t)(t - pg * ps) * HD;
        };

        uint4 kf[2][KC], vf[4][VJ];
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            const uint16_t *r = row(tk[nt]) + qd * 8;
#pragma unroll
            for (int c = 0; c < KC; c++) kf[nt][c] = ld_kv(r + c * 32, tk[nt] < t_end);
        }
        auto load_v = [&]() {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const uint16_t *r = row(tv[i]) + v_delta + g * 8;
#pragma unroll
                for (int j = 0; j < VJ; j++) vf[i][j] = ld_kv(r + j * 64, tv[i] < t_end);
            }
        };
        if (kEarlyV) load_v();

        /* S = Q . K^T for the 16 tokens of the tile */
        float s[2][4];
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
            for (int c = 0; c < KC; c++) {
                mma_bf16(s[nt], qf[c][0], 0u, qf[c][1], 0u, kf[nt][c].x, kf[nt][c].y);
                mma_bf16(s[nt], qf[c][2], 0u, qf[c][3], 0u, kf[nt][c].z, kf[nt][c].w);
            }
        }
        if (!kEarlyV) load_v();

        /* online softmax (log2 domain) for head g over tokens tv[0..3] */
        float x[4] = {s[0][0], s[0][1], s[1][0], s[1][1]};
#pragma unroll
        for (int i = 0; i < 4; i++) x[i] = tv[i] < t_end ? x[i] * p.scale_log2 : -INFINITY;
        float mt = fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3]));
        mt = fmaxf(mt, __shfl_xor_sync(kFull, mt, 1));
        mt = fmaxf(mt, __shfl_xor_sync(kFull, mt, 2));
        const float m_new = fmaxf(m_run, mt);
        const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
        const float corr = exp2f(m_run - m_ref);
        m_run = m_new;
        const uint32_t pb0 = pack_bf16(exp2f(x[0] - m_ref), exp2f(x[1] - m_ref));
        const uint32_t pb1 = pack_bf16(exp2f(x[2] - m_ref), exp2f(x[3] - m_ref));
        /* l sums the probabilities as rounded for the product, so the weights sum to 1 */
        l_run = l_run * corr + ((bf16_lo(pb0) + bf16_hi(pb0)) + (bf16_lo(pb1) + bf16_hi(pb1)));

        /* acc columns are heads 2q and 2q+1, whose statistics live in lanes 8q and 8q+4 */
        const float ca = __shfl_sync(kFull, corr, qd * 8);
        const float cb = __shfl_sync(kFull, corr, qd * 8 + 4);
#pragma unroll
        for (int i = 0; i < MT; i++) {
            acc[i][0] *= ca;
            acc[i][1] *= cb;
            acc[i][2] *= ca;
            acc[i][3] *= cb;
        }
        /* O^T += V^T . P^T */
#pragma unroll
        for (int j = 0; j < VJ; j++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const uint32_t w0 = word(vf[0][j], e), w1 = word(vf[1][j], e);
                const uint32_t w2 = word(vf[2][j], e), w3 = word(vf[3][j], e);
                mma_bf16(acc[j * 4 + e], __byte_perm(w0, w1, 0x5410), __byte_perm(w0, w1, 0x7632),
                         __byte_perm(w2, w3, 0x5410), __byte_perm(w2, w3, 0x7632), pb0, pb1);
            }
        }
    }

    /* merge the warps: each publishes (m, l, acc) per head, then the block combines them */
    l_run += __shfl_xor_sync(kFull, l_run, 1);
    l_run += __shfl_xor_sync(kFull, l_run, 2);
    if (qd == 0 && g < G) {
        s_m[warp][g] = m_run;
        s_l[warp][g] = l_run;
    }
#pragma unroll
    for (int j = 0; j < VJ; j++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int d = j * 64 + g * 8 + 2 * e;
            const float *a = acc[j * 4 + e];
            if (2 * qd < G)
                *reinterpret_cast<float2 *>(&s_acc[warp][2 * qd][d]) = make_float2(a[0], a[2]);
            if (2 * qd + 1 < G)
                *reinterpret_cast<float2 *>(&s_acc[warp][2 * qd + 1][d]) = make_float2(a[1], a[3]);
        }
    }
    __syncthreads();

    const size_t part0 = ((size_t)b * p.nq + (size_t)kvh * G) * p.splits + split;
    for (int idx = threadIdx.x; idx < G * HD; idx += kThreads) {
        const int h = idx / HD, d = idx - h * HD;
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < kWarps; w++) mx = fmaxf(mx, s_m[w][h]);
        const float ref = mx == -INFINITY ? 0.0f : mx;
        float a = 0.0f, l = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; w++) {
            const float f = exp2f(s_m[w][h] - ref);
            a += f * s_acc[w][h][d];
            l += f * s_l[w][h];
        }
        const size_t part = part0 + (size_t)h * p.splits;
        p.ws_acc[part * HD + d] = a;
        if (d == 0) p.ws_ml[part] = make_float2(mx, l);
    }
}

/* Pass 2: one block per (q head, entry); merges the splits entry b used (ceil(n / tps)). */
__global__ void __launch_bounds__(128) attn_combine_kernel(AttnParams p, int hd)
{
    const int h = blockIdx.x, b = blockIdx.y;
    const int n = p.n_tokens[b];
    const int ns = n <= 0 ? 0 : min(p.splits, (n + p.tps - 1) / p.tps);
    const size_t part0 = ((size_t)b * p.nq + h) * p.splits;
    const float2 *ml = p.ws_ml + part0;
    const float *acc = p.ws_acc + part0 * hd;
    uint16_t *o = p.out + ((size_t)b * p.nq + h) * hd;

    float mx = -INFINITY;
    for (int s = 0; s < ns; s++) mx = fmaxf(mx, ml[s].x);
    const float ref = mx == -INFINITY ? 0.0f : mx;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float a = 0.0f, l = 0.0f;
        for (int s = 0; s < ns; s++) {
            const float2 v = ml[s];
            const float f = exp2f(v.x - ref);
            a += f * acc[(size_t)s * hd + d];
            l += f * v.y;
        }
        o[d] = f32_to_bf16(ns > 0 ? a / l : 0.0f);
    }
}

/* The split plan: tokens per split (a multiple of 16) and the number of splits, so that the grid
 * has about kBlocksPerSm blocks per SM yet every split has at least 4 tiles. Non-increasing in
 * nkv, so the bound with the fewest KV heads a shape allows covers every real nkv. */
struct SplitPlan {
    int tps, splits;
};

SplitPlan plan_splits(int batch, int nkv, int max_tokens, int num_sms)
{
    const long long sms = num_sms > 0 ? num_sms : 132;
    const long long heads = (long long)(batch > 0 ? batch : 1) * (nkv > 0 ? nkv : 1);
    const long long tokens = max_tokens > 0 ? max_tokens : 1;
    const long long tiles = (tokens + kTile - 1) / kTile;
    const long long want = (kBlocksPerSm * sms + heads - 1) / heads;
    long long tiles_per_split = (tiles + want - 1) / want;
    if (tiles_per_split < kMinTilesPerSplit) tiles_per_split = kMinTilesPerSplit;
    SplitPlan sp;
    sp.tps = (int)(tiles_per_split * kTile);
    sp.splits = (int)((tokens + sp.tps - 1) / sp.tps);
    return sp;
}

size_t ml_bytes(int batch, int nq, int splits)
{
    const size_t b = (size_t)batch * nq * splits * sizeof(float2);
    return (b + 255) & ~(size_t)255;
}

size_t workspace_for(int batch, int nq, int hd, int splits)
{
    return ml_bytes(batch, nq, splits) + (size_t)batch * nq * splits * hd * sizeof(float);
}

template <int HD>
void launch_split(bool aligned16, dim3 grid, cudaStream_t st, const AttnParams &p)
{
    if (aligned16)
        attn_split_kernel<HD, true><<<grid, kThreads, 0, st>>>(p);
    else
        attn_split_kernel<HD, false><<<grid, kThreads, 0, st>>>(p);
}

} /* namespace */

extern "C" size_t attn_decode_workspace_bytes(int batch, int nq, int head_dim, int max_tokens,
                                              int num_sms)
{
    /* nkv is not an argument: G = nq / nkv <= 8, so nkv >= ceil(nq / 8), the worst case */
    const int nkv_min = (nq + kMaxGroup - 1) / kMaxGroup;
    const SplitPlan sp = plan_splits(batch, nkv_min, max_tokens, num_sms);
    return workspace_for(batch, nq, head_dim, sp.splits);
}

extern "C" void attn_decode_cuda(const struct kctx *c, const uint16_t *q,
                                 const struct kv_view *kv, const int32_t *n_tokens,
                                 uint16_t *out, int batch, int nq, int max_tokens, float scale)
{
    if (batch <= 0) return;
    const int hd = kv->head_dim, nkv = kv->n_kv_heads;
    PULSE_CHECK(hd == 64 || hd == 128 || hd == 256, "attn_decode_cuda: head_dim 64, 128 or 256");
    PULSE_CHECK(nkv >= 1 && nq % nkv == 0 && nq / nkv <= kMaxGroup,
                "attn_decode_cuda: nq must be a multiple of n_kv_heads, at most 8 times it");
    PULSE_CHECK(kv->page_size >= 1 && max_tokens >= 1, "attn_decode_cuda: page_size, max_tokens");
    PULSE_CHECK(((uintptr_t)q | (uintptr_t)kv->pool | (uintptr_t)c->workspace) % 16 == 0,
                "attn_decode_cuda: q, pool and workspace must be 16-byte aligned");
    const SplitPlan sp = plan_splits(batch, nkv, max_tokens, c->num_sms);
    PULSE_CHECK(c->workspace && c->workspace_bytes >= workspace_for(batch, nq, hd, sp.splits),
                "attn_decode_cuda: ctx->workspace smaller than attn_decode_workspace_bytes()");

    AttnParams p;
    p.q = q;
    p.pool = kv->pool;
    p.page_ids = kv->page_ids;
    p.page_start = kv->page_start;
    p.n_tokens = n_tokens;
    p.ws_ml = (float2 *)c->workspace;
    p.ws_acc = (float *)((char *)c->workspace + ml_bytes(batch, nq, sp.splits));
    p.out = out;
    p.page_elems = (size_t)nkv * 2 * kv->page_size * hd;
    p.nq = nq;
    p.group = nq / nkv;
    p.page_size = kv->page_size;
    p.tps = sp.tps;
    p.splits = sp.splits;
    p.scale_log2 = scale * 1.4426950408889634f;

    cudaStream_t st = (cudaStream_t)c->stream;
    const bool al = kv->page_size % kTile == 0;
    const dim3 grid((unsigned)sp.splits, (unsigned)nkv, (unsigned)batch);
    PULSE_CHECK(batch <= 65535 && nkv <= 65535, "attn_decode_cuda: grid too large");
    switch (hd) {
    case 64: launch_split<64>(al, grid, st, p); break;
    case 128: launch_split<128>(al, grid, st, p); break;
    default: launch_split<256>(al, grid, st, p); break;
    }
    CUDA_CHECK_LAUNCH(st);
    attn_combine_kernel<<<dim3((unsigned)nq, (unsigned)batch), 128, 0, st>>>(p, hd);
    CUDA_CHECK_LAUNCH(st);
}
