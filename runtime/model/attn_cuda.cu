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
 * probabilities enter the second product as a sum of three bf16 terms (fp32 accumulation), so
 * they keep fp32's 24 significant bits rather than FlashAttention's 8.
 * Tokens past the split's end or n_tokens[b] are never loaded (their registers are zero) and get
 * probability 0, so stale or NaN page contents cannot leak. The 4 warps merge through shared
 * memory and the block writes one partial (m, l, acc[hd]) per query head to ctx->workspace.
 * Pass 2 (attn_combine_kernel), grid (q head, entry): merges the splits an entry actually used
 * and writes bf16 out. */
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "cuda_check.h"
#include "kernels.h"
#include "numeric.h"
#include "pdl.cuh"

namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTile = 16;       /* tokens per warp iteration (the k of the P.V mma) */
constexpr int kMaxGroup = 8;    /* query heads per KV head: the n of the P.V mma */
constexpr int kMinTilesPerSplit = ATTN_MIN_TILES_LO;     /* the workspace bound assumes no fewer */
constexpr int kDefaultMinTilesPerSplit = ATTN_MIN_TILES; /* 4 per warp: best at batch 1-8 */
constexpr int kBlocksPerSm = ATTN_BLOCKS_PER_SM_MAX; /* split target: blocks per SM in the grid */

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
    int window; /* > 0: entry b reads only its last `window` tokens */
    float scale_log2;
    const uint16_t *host; /* FILL: kv_view.host, host_ids */
    const int32_t *host_ids;
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
template <int HD, bool ALIGNED, bool FILL>
__global__ void __launch_bounds__(kThreads, HD <= 128 ? 3 : 2) attn_split_kernel(AttnParams p)
{
    static_assert(!FILL || ALIGNED, "an attention that recalls reads whole tiles of one page");
    constexpr int KC = HD / 32; /* 16-byte K loads per token per thread */
    constexpr int VJ = HD / 64; /* 16-byte V loads per token per thread */
    constexpr int MT = HD / 16; /* P.V m-tiles */
    constexpr bool kEarlyV = HD <= 128; /* V loads go out with K (registers permitting) */

    __shared__ float s_m[kWarps][kMaxGroup];
    __shared__ float s_l[kWarps][kMaxGroup];
    __shared__ __align__(16) float s_acc[kWarps][kMaxGroup][HD];

    pdl_wait();
    pdl_trigger();
    const int split = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
    const int n = p.n_tokens[b];
    const int t_begin = split * p.tps;
    if (t_begin >= n) return; /* block-uniform: the combine pass ignores this split */
    /* the last split also takes any tokens past splits * tps (n_tokens above max_tokens) */
    const int t_end = split == p.splits - 1 ? n : min(n, t_begin + p.tps);
    /* a sliding window masks tokens below t_lo; whole rounds of the warps' tiles below it are
     * skipped (a split entirely below it writes an empty partial: m = -inf, l = 0) */
    const int t_lo = p.window > 0 ? max(0, n - p.window) : 0;
    const int t_first = t_begin + max(0, t_lo - t_begin) / (kWarps * kTile) * (kWarps * kTile);
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
    /* FILL: a tile whose page has a host piece is read from it and stored into the page */
    const int32_t *hids = FILL ? p.host_ids + p.page_start[b] : nullptr;
    const uint16_t *host_head = FILL ? p.host + (size_t)kvh * 2 * ps * HD : nullptr;

    float m_run = -INFINITY, l_run = 0.0f;
    float acc[MT][4];
#pragma unroll
    for (int i = 0; i < MT; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;

    /* ALIGNED (page_size % 16 == 0, and t0 % 16 == 0): one page holds a whole tile, so every
     * load is a constant offset from two per-tile bases; the tile's page id and offset are
     * computed one iteration ahead so the K/V loads do not wait for the page table */
    const size_t k_ofs = (size_t)g * HD + qd * 8;                      /* token g, chunk 0 */
    const size_t v_ofs = v_delta + (size_t)(2 * qd) * HD + g * 8;       /* token 2q, group 0 */
    int pid_next = 0, off_next = 0, hid_next = -1;
    auto page_of = [&](int t, int &pid, int &off) {
        const int pg = t / ps;
        pid = __ldg(pids + pg);
        off = t - pg * ps;
        if (FILL) hid_next = __ldg(hids + pg);
    };
    if (ALIGNED && t_first + warp * kTile < t_end) page_of(t_first + warp * kTile, pid_next, off_next);

    /* Software pipeline: the loads of a warp's next tile are issued at the end of the iteration,
     * when the registers they go to are free, so they are in flight together across the loop
     * back-edge, where the compiler cannot sink them behind the next tile's mma (it does sink
     * loads written in front of the mma that need them). HD 256 has registers for K or V, not
     * both (the pipelined form spills): it loads K at the top of the iteration and V after
     * Q.K^T. */
    uint4 kf[2][KC], vf[4][VJ];
    const uint16_t *vrow[4]; /* V of tile tokens 2q, 2q+1, 2q+8, 2q+9 at dim g*8 */
    uint16_t *fill_tile = nullptr; /* FILL: the page tile the loaded one is stored into */
    auto issue = [&](int t0) { /* K loads of tile t0 (and V loads when kEarlyV); sets vrow */
        const uint16_t *krow[2]; /* K of tile tokens g and 8+g at dim q*8 */
        if (ALIGNED) {
            const uint16_t *tile =
                head_base + (size_t)pid_next * p.page_elems + (size_t)off_next * HD;
            if (FILL) {
                fill_tile = hid_next >= 0 ? const_cast<uint16_t *>(tile) : nullptr;
                if (hid_next >= 0)
                    tile = host_head + (size_t)hid_next * p.page_elems + (size_t)off_next * HD;
            }
            if (t0 + kWarps * kTile < t_end) page_of(t0 + kWarps * kTile, pid_next, off_next);
            krow[0] = tile + k_ofs;
            krow[1] = krow[0] + 8 * HD;
            vrow[0] = tile + v_ofs;
            vrow[1] = vrow[0] + HD;
            vrow[2] = vrow[0] + 8 * HD;
            vrow[3] = vrow[0] + 9 * HD;
        } else { /* any page size: each token's page separately (never past t_end) */
            auto row = [&](int t) -> const uint16_t * {
                if (t >= t_end) return head_base;
                int pid, off;
                page_of(t, pid, off);
                return head_base + (size_t)pid * p.page_elems + (size_t)off * HD;
            };
#pragma unroll
            for (int nt = 0; nt < 2; nt++) krow[nt] = row(t0 + nt * 8 + g) + qd * 8;
            vrow[0] = row(t0 + 2 * qd) + v_delta + g * 8;
            vrow[1] = row(t0 + 2 * qd + 1) + v_delta + g * 8;
            vrow[2] = row(t0 + 2 * qd + 8) + v_delta + g * 8;
            vrow[3] = row(t0 + 2 * qd + 9) + v_delta + g * 8;
        }
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
#pragma unroll
            for (int c = 0; c < KC; c++)
                kf[nt][c] = ld_kv(krow[nt] + c * 32, t0 + nt * 8 + g < t_end);
        }
    };
    auto load_v = [&](int t0) {
        const int tv[4] = {t0 + 2 * qd, t0 + 2 * qd + 1, t0 + 2 * qd + 8, t0 + 2 * qd + 9};
#pragma unroll
        for (int i = 0; i < 4; i++) {
#pragma unroll
            for (int j = 0; j < VJ; j++) vf[i][j] = ld_kv(vrow[i] + j * 64, tv[i] < t_end);
        }
    };
    /* FILL: a host tile's K and V, as loaded (each element by exactly one thread of the warp),
     * stored into its page where they are first used */
    auto store_k = [&](int t0) {
        if constexpr (FILL) {
            if (!fill_tile) return;
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
                if (t0 + nt * 8 + g < t_end) {
#pragma unroll
                    for (int c = 0; c < KC; c++)
                        *reinterpret_cast<uint4 *>(fill_tile + k_ofs + nt * 8 * HD + c * 32) =
                            kf[nt][c];
                }
        }
    };
    auto store_v = [&](int t0) {
        if constexpr (FILL) {
            if (!fill_tile) return;
            const int tv[4] = {t0 + 2 * qd, t0 + 2 * qd + 1, t0 + 2 * qd + 8, t0 + 2 * qd + 9};
            const size_t vo[4] = {0, HD, 8 * HD, 9 * HD};
#pragma unroll
            for (int i = 0; i < 4; i++)
                if (tv[i] < t_end) {
#pragma unroll
                    for (int j = 0; j < VJ; j++)
                        *reinterpret_cast<uint4 *>(fill_tile + v_ofs + vo[i] + j * 64) = vf[i][j];
                }
        }
    };

    int t0 = t_first + warp * kTile;
    if (kEarlyV && t0 < t_end) {
        issue(t0);
        load_v(t0);
    }
    for (; t0 < t_end; t0 += kWarps * kTile) {
        const int t_next = t0 + kWarps * kTile;
        const int tv[4] = {t0 + 2 * qd, t0 + 2 * qd + 1, t0 + 2 * qd + 8, t0 + 2 * qd + 9};
        if (!kEarlyV) issue(t0);
        store_k(t0);
        if (kEarlyV) store_v(t0);

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
        if (!kEarlyV) {
            load_v(t0);
            store_v(t0);
        }

        /* online softmax (log2 domain) for head g over tokens tv[0..3] */
        float x[4] = {s[0][0], s[0][1], s[1][0], s[1][1]};
#pragma unroll
        for (int i = 0; i < 4; i++)
            x[i] = tv[i] < t_end && tv[i] >= t_lo ? x[i] * p.scale_log2 : -INFINITY;
        float mt = fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3]));
        mt = fmaxf(mt, __shfl_xor_sync(kFull, mt, 1));
        mt = fmaxf(mt, __shfl_xor_sync(kFull, mt, 2));
        const float m_new = fmaxf(m_run, mt);
        const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
        const float corr = exp2f(m_run - m_ref);
        m_run = m_new;
        /* P enters the tensor-core product as three bf16 terms, hi + mid + lo (each the
         * rounding error of the ones before): 24 significant bits instead of FlashAttention's 8,
         * so the result matches an fp32 softmax to fp32 rounding (V is exact in bf16), at 16
         * more mma per tile in a loop whose issue slots are mostly idle waiting for memory */
        const float p0 = exp2f(x[0] - m_ref), p1 = exp2f(x[1] - m_ref);
        const float p2 = exp2f(x[2] - m_ref), p3 = exp2f(x[3] - m_ref);
        const uint32_t pb0 = pack_bf16(p0, p1), pb1 = pack_bf16(p2, p3);
        const float r0 = p0 - bf16_lo(pb0), r1 = p1 - bf16_hi(pb0);
        const float r2 = p2 - bf16_lo(pb1), r3 = p3 - bf16_hi(pb1);
        const uint32_t pr0 = pack_bf16(r0, r1), pr1 = pack_bf16(r2, r3);
        const uint32_t pt0 = pack_bf16(r0 - bf16_lo(pr0), r1 - bf16_hi(pr0));
        const uint32_t pt1 = pack_bf16(r2 - bf16_lo(pr1), r3 - bf16_hi(pr1));
        l_run = l_run * corr + ((p0 + p1) + (p2 + p3));

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
                const uint32_t a0 = __byte_perm(w0, w1, 0x5410), a1 = __byte_perm(w0, w1, 0x7632);
                const uint32_t a2 = __byte_perm(w2, w3, 0x5410), a3 = __byte_perm(w2, w3, 0x7632);
                mma_bf16(acc[j * 4 + e], a0, a1, a2, a3, pb0, pb1);
                mma_bf16(acc[j * 4 + e], a0, a1, a2, a3, pr0, pr1);
                mma_bf16(acc[j * 4 + e], a0, a1, a2, a3, pt0, pt1);
            }
        }
        if (kEarlyV && t_next < t_end) {
            issue(t_next);
            load_v(t_next);
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

/* Pass 2: one block per (q head, entry); merges the splits entry b used (ceil(n / tps)).
 * The split weights exp2(m_s - max) go through shared memory in chunks, and the threads of a
 * block split both the dims and the splits (rows r of kCombineThreads / hd threads each take
 * every R-th split), with the loads unrolled, so a long split list costs a few round trips to
 * L2 instead of one per split. */
constexpr int kCombineThreads = 256;
constexpr int kCombineChunk = 1024;

__device__ __forceinline__ float block_reduce(float v, bool is_max, float *s_red)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float w = __shfl_xor_sync(kFull, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads(); /* s_red may still be read by a previous reduction */
    if (lane == 0) s_red[warp] = v;
    __syncthreads();
    v = lane < (int)(blockDim.x >> 5) ? s_red[lane] : (is_max ? -INFINITY : 0.0f);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float w = __shfl_xor_sync(kFull, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    return v;
}

__global__ void __launch_bounds__(kCombineThreads) attn_combine_kernel(AttnParams p, int hd)
{
    __shared__ float s_w[kCombineChunk];
    __shared__ float s_red[32];
    __shared__ float s_part[kCombineThreads];
    pdl_wait();
    pdl_trigger();
    const int h = blockIdx.x, b = blockIdx.y;
    const int n = p.n_tokens[b];
    const int ns = n <= 0 ? 0 : min(p.splits, (n + p.tps - 1) / p.tps);
    const size_t part0 = ((size_t)b * p.nq + h) * p.splits;
    const float2 *ml = p.ws_ml + part0;
    const float *acc = p.ws_acc + part0 * hd;
    uint16_t *o = p.out + ((size_t)b * p.nq + h) * hd;
    const int tid = threadIdx.x, rows = kCombineThreads / hd, d = tid % hd, r = tid / hd;

    float mx = -INFINITY;
    for (int s = tid; s < ns; s += kCombineThreads) mx = fmaxf(mx, ml[s].x);
    mx = block_reduce(mx, true, s_red);
    const float ref = mx == -INFINITY ? 0.0f : mx;
    float a = 0.0f, l = 0.0f;
    for (int c0 = 0; c0 < ns; c0 += kCombineChunk) {
        const int cn = min(kCombineChunk, ns - c0);
        __syncthreads(); /* the previous chunk's weights are consumed */
        for (int i = tid; i < cn; i += kCombineThreads) {
            const float2 v = ml[c0 + i];
            const float w = exp2f(v.x - ref);
            s_w[i] = w;
            l += w * v.y;
        }
        __syncthreads();
        if (r < rows) {
            const float *ac = acc + (size_t)c0 * hd + d;
#pragma unroll 8
            for (int i = r; i < cn; i += rows) a += s_w[i] * ac[(size_t)i * hd];
        }
    }
    l = block_reduce(l, false, s_red);
    s_part[tid] = a;
    __syncthreads();
    if (tid < hd) {
        float sum = 0.0f;
        for (int k = 0; k < rows; k++) sum += s_part[k * hd + tid];
        o[tid] = f32_to_bf16(ns > 0 ? sum / l : 0.0f);
    }
}

/* The split plan: tokens per split (a multiple of 16) and the number of splits, so that the grid
 * has about kBlocksPerSm blocks per SM yet every split has at least kMinTilesPerSplit tiles.
 * splits <= min(want, ceil(tiles / 4)), which is what the workspace bound below relies on. */
struct SplitPlan {
    int tps, splits;
};

/* The split target; kctx.attn_blocks_per_sm (1..kBlocksPerSm) lowers it for experiments. */
int blocks_per_sm(const struct kctx *c)
{
    const int e = c->attn_blocks_per_sm;
    return (e >= 1 && e <= kBlocksPerSm) ? e : kBlocksPerSm;
}

long long want_splits(int batch, int nkv, const struct kctx *c)
{
    const long long sms = c->num_sms > 0 ? c->num_sms : 132;
    const long long heads = (long long)(batch > 0 ? batch : 1) * (nkv > 0 ? nkv : 1);
    return (blocks_per_sm(c) * sms + heads - 1) / heads;
}

long long tiles_of(int max_tokens) { return ((max_tokens > 0 ? max_tokens : 1) + kTile - 1) / kTile; }

/* The least tiles per split (default 16: four per warp, so each warp's loads pipeline across
 * tiles; on the H200, 2026-11-29, it took batch-1 attention from 0.20 to 0.25 of the copy
 * bandwidth at 4K and from 0.47 to 0.58 at 32K, and left batch 16 x 32K at 0.96).
 * kctx.attn_min_tiles (kMinTilesPerSplit..4096) overrides it for experiments. */
int min_tiles_per_split(const struct kctx *c)
{
    const int e = c->attn_min_tiles;
    return e >= kMinTilesPerSplit && e <= ATTN_MIN_TILES_HI ? e : kDefaultMinTilesPerSplit;
}

SplitPlan plan_splits(int batch, int nkv, int max_tokens, const struct kctx *c)
{
    const long long tiles = tiles_of(max_tokens);
    const long long want = want_splits(batch, nkv, c);
    long long tiles_per_split = (tiles + want - 1) / want;
    if (tiles_per_split < min_tiles_per_split(c)) tiles_per_split = min_tiles_per_split(c);
    SplitPlan sp;
    sp.tps = (int)(tiles_per_split * kTile);
    sp.splits = (int)((tiles + tiles_per_split - 1) / tiles_per_split);
    return sp;
}

/* Workspace layout for `parts` = batch * splits partials per query head: (m, l) pairs, padded to
 * 256 bytes, then the fp32 accumulators. Monotone in parts. */
size_t ml_bytes(int nq, long long parts)
{
    const size_t b = (size_t)nq * (size_t)parts * sizeof(float2);
    return (b + 255) & ~(size_t)255;
}

size_t workspace_for(int nq, int hd, long long parts)
{
    return ml_bytes(nq, parts) + (size_t)nq * (size_t)parts * (size_t)hd * sizeof(float);
}

template <int HD>
void launch_split(int pdl, bool aligned16, dim3 grid, cudaStream_t st, const AttnParams &p)
{
    if (p.host_ids)
        pulse_launch(pdl, attn_split_kernel<HD, true, true>, grid, kThreads, 0, st, p);
    else if (aligned16)
        pulse_launch(pdl, attn_split_kernel<HD, true, false>, grid, kThreads, 0, st, p);
    else
        pulse_launch(pdl, attn_split_kernel<HD, false, false>, grid, kThreads, 0, st, p);
}

} /* namespace */

/* A bound that holds for every launch with batch' <= batch, max_tokens' <= max_tokens and any
 * n_kv_heads the shape allows (nkv >= ceil(nq / 8)), so an engine can size the workspace once
 * from its maxima. With want(b') = ceil(16 sms / (b' nkv)):
 *   b' * splits <= b' * want(b') <= 16 sms / nkv_min + b'   and   b' * splits <= b' ceil(tiles/4). */
extern "C" size_t attn_decode_workspace_bytes(int batch, int nq, int head_dim, int max_tokens,
                                              int num_sms)
{
    const long long sms = num_sms > 0 ? num_sms : 132;
    const long long b = batch > 0 ? batch : 1;
    const long long nkv_min = nq > kMaxGroup ? (nq + kMaxGroup - 1) / kMaxGroup : 1;
    const long long by_want = (kBlocksPerSm * sms + nkv_min - 1) / nkv_min + b;
    const long long by_tiles = b * ((tiles_of(max_tokens) + kMinTilesPerSplit - 1) / kMinTilesPerSplit);
    return workspace_for(nq, head_dim, by_want < by_tiles ? by_want : by_tiles);
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
    const SplitPlan sp = plan_splits(batch, nkv, max_tokens, c);
    const long long parts = (long long)batch * sp.splits;
    PULSE_CHECK(c->workspace && c->workspace_bytes >= workspace_for(nq, hd, parts),
                "attn_decode_cuda: ctx->workspace smaller than attn_decode_workspace_bytes()");

    AttnParams p;
    p.q = q;
    p.pool = kv->pool;
    p.page_ids = kv->page_ids;
    p.page_start = kv->page_start;
    p.n_tokens = n_tokens;
    p.ws_ml = (float2 *)c->workspace;
    p.ws_acc = (float *)((char *)c->workspace + ml_bytes(nq, parts));
    p.out = out;
    p.page_elems = kv_page_elems(kv);
    p.nq = nq;
    p.group = nq / nkv;
    p.page_size = kv->page_size;
    p.tps = sp.tps;
    p.splits = sp.splits;
    p.window = kv->window;
    p.scale_log2 = scale * 1.4426950408889634f;
    p.host = kv->host;
    p.host_ids = kv->host_ids;

    cudaStream_t st = (cudaStream_t)c->stream;
    const bool al = kv->page_size % kTile == 0;
    PULSE_CHECK(!kv->host_ids ||
                    (kv->host && al && kv->window == 0 && (uintptr_t)kv->host % 16 == 0),
                "attn_decode_cuda: host pieces need a 16-byte aligned host base, page_size a "
                "multiple of 16 and no window");
    const dim3 grid((unsigned)sp.splits, (unsigned)nkv, (unsigned)batch);
    PULSE_CHECK(batch <= 65535 && nkv <= 65535, "attn_decode_cuda: grid too large");
    switch (hd) {
    case 64:
        launch_split<64>(c->pdl, al, grid, st, p);
        break;
    case 128:
        launch_split<128>(c->pdl, al, grid, st, p);
        break;
    default:
        launch_split<256>(c->pdl, al, grid, st, p);
        break;
    }
    CUDA_CHECK_LAUNCH(st);
    pulse_launch(c->pdl, attn_combine_kernel, dim3((unsigned)nq, (unsigned)batch), kCombineThreads,
                 0, st, p, hd);
    CUDA_CHECK_LAUNCH(st);
}
