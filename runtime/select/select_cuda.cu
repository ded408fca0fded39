/* CUDA implementations of the selection kernels of select.h. Every wrapper launches on
 * ctx->stream, checks the launch, allocates nothing and never synchronises.
 *
 *   digest_build   one thread per (block, digest head, dim): min/max over the block's tokens
 *                  (reads of one token's head row are coalesced across dims).
 *   digest_update  one thread per (entry, digest head, dim).
 *   select_score   a CTA per (1-4 rounds of 64 blocks, list, entry, job; the rounds keep the
 *                  grid within about one wave): per scored KV head and channel the sums of the
 *                  group's positive and of its negative query values in shared memory (fp32;
 *                  max(q * mn, q * mx) is q * mx for q >= 0, else q * mn, so a channel's G
 *                  terms are qp * mx + qn * mn: two FMAs a channel whatever G), a warp per 8
 *                  blocks a round with all their loads in flight at once, lanes over channels
 *                  (4 consecutive channels per lane with 8-byte loads when head_dim % 128 ==
 *                  0), a warp sum per block; at most 64 registers (4 CTAs an SM).
 *   select_topk    a CTA of 512 threads per (entry, list, job): the candidates' score keys
 *                  in shared memory, radix select over the 32-bit key (passes of 8 bits, a
 *                  shared histogram counted while the next is cleared and scanned by one warp:
 *                  two barriers a pass; once the keys sharing the prefix are at most 32, one
 *                  warp ranks them instead of more passes) finds the k-th largest key T and how
 *                  many keys equal to T to take; then each thread owns a contiguous range of
 *                  block indices and one block-wide exclusive scan of two packed counts (keys
 *                  above T or forced; keys equal to T) gives each thread its first output
 *                  position, so the output comes out ascending with no sort. Same order as the
 *                  reference.
 *   select_blocks_multi
 *                  both kernels once over every job's (entry, list)s: a job's CTAs compute
 *                  exactly what its own launch's would.
 *   approx_q       select_norm_gather (a CTA per row) + gemm_bf16_cuda (cuBLAS) +
 *                  qk_norm_rope_append_cuda with zero KV heads.
 *
 * Exactness: scores are the reference's sum (select_digest_term over query heads and
 * channels) regrouped per channel, with FMAs, so they match the reference exactly when every
 * partial sum is exact (integer-valued inputs) and to fp32 rounding otherwise. Digests and
 * top-k are exact for any input. */
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

#include "block_scan.cuh"
#include "cuda_check.h"
#include "numeric.h"
#include "select.h"

namespace {

constexpr unsigned kFull = 0xffffffffu;

cudaStream_t stream_of(const struct kctx *c) { return (cudaStream_t)c->stream; }

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
    return v;
}

/* ---------------------------------------------------------------- digests */

constexpr int kDigestThreads = 256;

__device__ __forceinline__ const uint16_t *key_row(const uint16_t *pool, const int32_t *page_ids,
                                                   const int32_t *page_start, int b, int t,
                                                   int h, int ps, int hd, size_t page_elems)
{
    const int page = page_ids[page_start[b] + t / ps];
    return pool + (size_t)page * page_elems + ((size_t)h * 2 * ps + t % ps) * hd;
}

/* Item = (block i, digest head j, dim d) of entry blockIdx.y, d fastest. */
__global__ void digest_build_kernel(const uint16_t *kpool, const int32_t *kids,
                                    const int32_t *kstart, uint16_t *dpool, const int32_t *dids,
                                    const int32_t *dstart, const int32_t *n_tokens, int ps,
                                    size_t kpe, int hd, int ndh, int sel_head)
{
    const int b = blockIdx.y;
    const long long item = (long long)blockIdx.x * kDigestThreads + threadIdx.x;
    const int d = (int)(item % hd);
    const int j = (int)((item / hd) % ndh);
    const long long i = item / ((long long)hd * ndh);
    const int n = n_tokens[b];
    if (i * ps >= n) return;
    const int h = sel_head < 0 ? j : sel_head;
    const int t0 = (int)i * ps, t1 = min(t0 + ps, n);
    float lo = bf16_to_f32(key_row(kpool, kids, kstart, b, t0, h, ps, hd, kpe)[d]), hi = lo;
    for (int t = t0 + 1; t < t1; t++) {
        const float k = bf16_to_f32(key_row(kpool, kids, kstart, b, t, h, ps, hd, kpe)[d]);
        lo = k < lo ? k : lo;
        hi = k > hi ? k : hi;
    }
    uint16_t *mn =
        dpool + (size_t)dids[dstart[b] + i] * ((size_t)ndh * 2 * hd) + (size_t)j * 2 * hd;
    mn[d] = f32_to_bf16(select_canon_zero(lo));
    mn[hd + d] = f32_to_bf16(select_canon_zero(hi));
}

/* Item = (digest head j, dim d) of entry blockIdx.y. */
__global__ void digest_update_kernel(const uint16_t *kpool, const int32_t *kids,
                                     const int32_t *kstart, uint16_t *dpool, const int32_t *dids,
                                     const int32_t *dstart, const int32_t *pos, int ps, size_t kpe,
                                     int hd, int ndh, int sel_head)
{
    const int b = blockIdx.y;
    const int item = blockIdx.x * kDigestThreads + threadIdx.x;
    if (item >= ndh * hd) return;
    const int d = item % hd, j = item / hd;
    const int h = sel_head < 0 ? j : sel_head;
    const int t = pos[b];
    const float v =
        select_canon_zero(bf16_to_f32(key_row(kpool, kids, kstart, b, t, h, ps, hd, kpe)[d]));
    uint16_t *mn = dpool + (size_t)dids[dstart[b] + t / ps] * ((size_t)ndh * 2 * hd) +
                   (size_t)j * 2 * hd;
    float lo = v, hi = v;
    if (t % ps != 0) {
        const float a = bf16_to_f32(mn[d]), z = bf16_to_f32(mn[hd + d]);
        lo = v < a ? v : a;
        hi = v > z ? v : z;
    }
    mn[d] = f32_to_bf16(lo);
    mn[hd + d] = f32_to_bf16(hi);
}

/* ---------------------------------------------------------------- scores */

constexpr int kScoreWarps = 8;
constexpr int kScorePerWarp = 8;
constexpr int kScorePerCta = kScoreWarps * kScorePerWarp;
constexpr int kScoreMaxRounds = 32 / kScorePerWarp; /* a warp's page ids: one load a lane */

/* bf16 pair (lo half first) to floats. */
__device__ __forceinline__ void bf16x2(uint32_t u, float *a, float *b)
{
    *a = bf16_to_f32((uint16_t)(u & 0xffffu));
    *b = bf16_to_f32((uint16_t)(u >> 16));
}

/* One round of a warp (score_kernel): nw consecutive blocks, their page ids in lanes id0 ..
 * id0 + nw - 1 of `my`, their scores to out[0 .. nw - 1]. sq holds, per scored KV head, the
 * group's positive and negative query sums per channel (score_kernel). */
template <bool VEC>
__device__ __forceinline__ void score_round(const float *sq, const uint16_t *dpool, int32_t my,
                                            int id0, int nw, size_t dpe, int k0, int k1, int hd,
                                            int sel_head, int lane, float *out)
{
    constexpr int R = kScorePerWarp;
    const uint16_t *page[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        page[r] = dpool + (size_t)__shfl_sync(kFull, my, id0 + (r < nw ? r : 0)) * dpe;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        acc[r] = 0.0f;
    for (int k = k0; k < k1; k++) {
        const size_t off = (size_t)select_digest_head(sel_head, k) * 2 * hd;
        const float *sp = sq + (size_t)(k - k0) * 2 * hd, *sn = sp + hd;
        if (VEC) {
            for (int d = lane * 4; d < hd; d += 128) {
                uint2 a[R], z[R];
#pragma unroll
                for (int r = 0; r < R; r++) {
                    a[r] = *reinterpret_cast<const uint2 *>(page[r] + off + d);
                    z[r] = *reinterpret_cast<const uint2 *>(page[r] + off + hd + d);
                }
                const float4 qp = *reinterpret_cast<const float4 *>(sp + d);
                const float4 qn = *reinterpret_cast<const float4 *>(sn + d);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    float lo[4], hi[4];
                    bf16x2(a[r].x, &lo[0], &lo[1]), bf16x2(a[r].y, &lo[2], &lo[3]);
                    bf16x2(z[r].x, &hi[0], &hi[1]), bf16x2(z[r].y, &hi[2], &hi[3]);
                    acc[r] += qp.x * hi[0] + qn.x * lo[0];
                    acc[r] += qp.y * hi[1] + qn.y * lo[1];
                    acc[r] += qp.z * hi[2] + qn.z * lo[2];
                    acc[r] += qp.w * hi[3] + qn.w * lo[3];
                }
            }
        } else {
            for (int d = lane; d < hd; d += 32) {
                uint16_t a[R], z[R];
#pragma unroll
                for (int r = 0; r < R; r++)
                    a[r] = page[r][off + d], z[r] = page[r][off + hd + d];
                const float qp = sp[d], qn = sn[d];
#pragma unroll
                for (int r = 0; r < R; r++)
                    acc[r] += qp * bf16_to_f32(z[r]) + qn * bf16_to_f32(a[r]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        const float s = warp_sum(acc[r]);
        if (lane == 0 && r < nw) out[r] = s;
    }
}

/* What differs between the jobs of one launch (select_blocks_multi): job j's query, digests,
 * scores and selector head; the kernels' grids run over jobs x entries. The kernels take these
 * as __grid_constant__ parameters: indexed by the block's job, they are read in place from the
 * parameter space (a by-value copy indexed at run time goes to local memory, and the score
 * kernel, at its 64-register bound, then spills). */
struct score_jobs {
    const uint16_t *q[SELECT_MAX_JOBS];
    const uint16_t *dpool[SELECT_MAX_JOBS];
    const int32_t *dids[SELECT_MAX_JOBS];
    const int32_t *dstart[SELECT_MAX_JOBS];
    float *scores[SELECT_MAX_JOBS];
    int sel_head[SELECT_MAX_JOBS];
};

/* grid (ceil(max_blocks / (kScorePerCta * rounds)), n_lists, jobs x batch); dynamic shared: the
 * scored query heads (G per KV head of select_list_heads) x hd floats. A CTA covers rounds x
 * kScorePerCta consecutive blocks; in each round a warp scores kScorePerWarp consecutive blocks
 * at once. The page ids of all its rounds come one a lane, loaded before the query is staged;
 * then every block's digest loads of a channel range are issued before any is used, so a warp
 * waits on memory once per range and round instead of once per block, and rounds > 1 keep the
 * grid within about one wave of resident CTAs. Each block's sum runs in the same order as one
 * warp per block would (heads, channels, query heads), so the scores depend on neither
 * constant. VEC: each lane takes 4 consecutive channels per 128 (hd % 128 == 0, 8-byte
 * aligned digest rows). */
template <bool VEC>
__global__ void __launch_bounds__(kScoreWarps * 32, 4)
    score_kernel(const __grid_constant__ score_jobs jobs, const int32_t *n_tokens, int batch,
                 int nq, int G, int hd, int ndh, int bs, int max_blocks, int nkv, int rounds)
{
    extern __shared__ float sq[]; /* [k1 - k0][positive, negative][hd] */
    constexpr int R = kScorePerWarp;
    const int job = blockIdx.z / batch, b = blockIdx.z - job * batch;
    const int l = blockIdx.y, nl = gridDim.y;
    const uint16_t *q = jobs.q[job], *dpool = jobs.dpool[job];
    const int32_t *dids = jobs.dids[job], *dstart = jobs.dstart[job];
    float *scores = jobs.scores[job];
    const int sel_head = jobs.sel_head[job];
    const int nb = (n_tokens[b] + bs - 1) / bs;
    const int first = blockIdx.x * kScorePerCta * rounds;
    if (first >= nb) return; /* uniform over the CTA */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    /* round t's blocks of this warp start at first + (t * kScoreWarps + warp) * R; lane j
     * holds the page id of block j % R of round j / R */
    const int mine = first + ((lane / R) * kScoreWarps + warp) * R + lane % R;
    const int32_t my = lane / R < rounds && mine < nb ? dids[dstart[b] + mine] : 0;

    int k0, k1;
    select_list_heads(sel_head, l, nkv, &k0, &k1);
    /* per scored KV head and channel, the sums of the group's positive and of its negative
     * query values (select_digest_term: max(q * mn, q * mx) is q * mx for q >= 0, else q * mn,
     * so a channel's G terms are qp * mx + qn * mn) */
    const uint16_t *qg = q + ((size_t)b * nq + (size_t)k0 * G) * hd;
    for (int e = threadIdx.x; e < (k1 - k0) * hd; e += blockDim.x) {
        const int k = e / hd, d = e % hd;
        const uint16_t *qk = qg + (size_t)k * G * hd + d;
        float p = 0.0f, n = 0.0f;
        for (int g = 0; g < G; g++) {
            const float v = bf16_to_f32(qk[(size_t)g * hd]);
            if (v >= 0.0f)
                p += v;
            else
                n += v;
        }
        sq[(size_t)k * 2 * hd + d] = p;
        sq[(size_t)k * 2 * hd + hd + d] = n;
    }
    __syncthreads();

    const size_t dpe = (size_t)ndh * 2 * hd;
    float *row = scores + ((size_t)b * nl + l) * max_blocks;
    for (int t = 0; t < rounds; t++) {
        const int i0 = first + (t * kScoreWarps + warp) * R;
        const int nw = min(R, nb - i0); /* this round's blocks; <= 0 past the entry's end */
        if (nw <= 0) break;             /* uniform over the warp, and later rounds are past */
        score_round<VEC>(sq, dpool, my, t * R, nw, dpe, k0, k1, hd, sel_head, lane, row + i0);
    }
}

/* ---------------------------------------------------------------- top-k */

constexpr int kTopkThreads = 512;
constexpr int kTopkWarps = kTopkThreads / 32;
constexpr int kTopkFew = 32; /* a bin this small is ranked by one warp instead of more passes */
/* topk_kernel's scan packs two block counts of an entry into 16 bits each */
static_assert(SELECT_MAX_BLOCKS < 65536, "select_topk: block counts must fit 16 bits");

/* Radix select over keys[0, m): the k-th largest key T (1 <= k < m) and how many keys equal to
 * T belong to the top k (the rest of the top k is every key > T). Passes of 8 bits from the top;
 * each pass's histogram is counted while the next one's is cleared, and one warp scans it (two
 * barriers a pass). Once the keys that share the prefix found so far are at most kTopkFew, one
 * warp ranks them instead of further passes. keys must be visible to every thread on entry.
 * Uniform result. */
__device__ void radix_select(const uint32_t *keys, int m, int k, uint32_t *T, int *take_eq)
{
    __shared__ int hist[2][256];
    __shared__ uint32_t s_prefix[2];
    __shared__ int s_remaining[2], s_count[2], s_nfew;
    __shared__ uint32_t few[kTopkFew];
    const int t = threadIdx.x, lane = t & 31;
    if (t < 256) hist[0][t] = 0;
    if (t == 0) s_nfew = 0;
    __syncthreads();
    uint32_t prefix = 0, mask = 0;
    int remaining = k;
    for (int pass = 0, shift = 24; shift >= 0; pass++, shift -= 8) {
        int *h = hist[pass & 1];
        if (t < 256) hist[(pass + 1) & 1][t] = 0; /* read by the pass before, now done */
        for (int i = t; i < m; i += blockDim.x) {
            const uint32_t key = keys[i];
            if ((key & mask) == prefix) atomicAdd(&h[(key >> shift) & 255u], 1);
        }
        __syncthreads();
        if (t < 32) {
            /* lane j holds bins 255 - 8j .. 248 - 8j (from the top): the digit where the count
             * of keys in bins >= it first reaches `remaining` */
            int c[8], sum = 0;
#pragma unroll
            for (int j = 0; j < 8; j++)
                c[j] = h[255 - 8 * lane - j], sum += c[j];
            int incl = sum;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const int y = __shfl_up_sync(kFull, incl, o);
                if (lane >= o) incl += y;
            }
            int above = incl - sum; /* keys in the bins above this lane's */
            if (above < remaining && incl >= remaining) {
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    if (above < remaining && above + c[j] >= remaining) {
                        const int digit = 255 - 8 * lane - j;
                        s_prefix[pass & 1] = prefix | (uint32_t)digit << shift;
                        s_remaining[pass & 1] = remaining - above;
                        s_count[pass & 1] = c[j];
                    }
                    above += c[j];
                }
            }
        }
        __syncthreads();
        prefix = s_prefix[pass & 1];
        mask |= 255u << shift;
        remaining = s_remaining[pass & 1];
        if (shift > 0 && s_count[pass & 1] <= kTopkFew) {
            /* the few keys with this prefix: one warp finds the remaining-th largest */
            for (int i = t; i < m; i += blockDim.x) {
                const uint32_t key = keys[i];
                if ((key & mask) == prefix) few[atomicAdd(&s_nfew, 1)] = key;
            }
            __syncthreads();
            if (t < 32) {
                const int n = s_nfew;
                const uint32_t mine = lane < n ? few[lane] : 0u;
                int gt = 0, ge = 0;
                for (int j = 0; j < n; j++) {
                    const uint32_t o = few[j];
                    gt += o > mine;
                    ge += o >= mine;
                }
                if (lane < n && gt < remaining && ge >= remaining) {
                    s_prefix[0] = mine; /* equal keys write the same */
                    s_remaining[0] = remaining - gt;
                }
            }
            __syncthreads();
            *T = s_prefix[0];
            *take_eq = s_remaining[0];
            return;
        }
    }
    *T = prefix;
    *take_eq = remaining;
}

/* What differs between the jobs of one top-k launch: scores, outputs, stride and budget. */
struct topk_jobs {
    const float *scores[SELECT_MAX_JOBS];
    int32_t *sel_idx[SELECT_MAX_JOBS];
    int32_t *sel_count[SELECT_MAX_JOBS];
    int max_sel[SELECT_MAX_JOBS];
    int budget[SELECT_MAX_JOBS];
};

/* grid (jobs x batch, n_lists); dynamic shared: max_blocks keys. */
__global__ void __launch_bounds__(kTopkThreads)
    topk_kernel(const __grid_constant__ topk_jobs jobs, const int32_t *n_tokens, int batch,
                int max_blocks, int bs, int sink, int window)
{
    extern __shared__ uint32_t keys[];
    const int job = blockIdx.x / batch, b = blockIdx.x - job * batch;
    const int l = blockIdx.y, nl = gridDim.y;
    const float *scores = jobs.scores[job];
    int32_t *sel_idx = jobs.sel_idx[job], *sel_count = jobs.sel_count[job];
    const int max_sel = jobs.max_sel[job], budget = jobs.budget[job];
    const int nb = (n_tokens[b] + bs - 1) / bs;
    if (nb < 1 || nb > max_blocks) __trap(); /* precondition: 1 <= blocks <= max_blocks */
    int c0, c1;
    select_candidates(nb, sink, window, &c0, &c1);
    const int m = c1 - c0, k = budget < m ? budget : m;
    const float *row = scores + ((size_t)b * nl + l) * max_blocks;
    const bool partial = k > 0 && k < m; /* otherwise all or none of the candidates */

    uint32_t T = 0;
    int take_eq = 0;
    if (partial) {
        for (int i = threadIdx.x; i < m; i += blockDim.x) keys[i] = select_score_key(row[c0 + i]);
        radix_select(keys, m, k, &T, &take_eq); /* its first barrier publishes the keys */
    }

    /* thread owns blocks [lo, hi); taken(i): forced, or all candidates, or key > T ("sure"),
     * or an equal key within the first take_eq in block order. One scan of both counts (16
     * bits each: at most SELECT_MAX_BLOCKS) gives each thread its first output position. */
    const int per = (nb + kTopkThreads - 1) / kTopkThreads;
    const int lo = min((int)threadIdx.x * per, nb), hi = min(lo + per, nb);
    unsigned n_sure = 0, n_eq = 0;
    for (int i = lo; i < hi; i++) {
        if (i < c0 || i >= c1 || k == m)
            n_sure++;
        else if (partial) {
            const uint32_t key = keys[i - c0];
            n_sure += key > T;
            n_eq += key == T;
        }
    }
    unsigned tot;
    const unsigned before = block_exclusive_scan<unsigned, kTopkWarps>(n_eq << 16 | n_sure, &tot);
    int eq_rank = (int)(before >> 16);
    int at = (int)(before & 0xffffu) + min(eq_rank, take_eq);
    int32_t *out = sel_idx + ((size_t)b * nl + l) * max_sel;
    for (int i = lo; i < hi; i++) {
        bool take = i < c0 || i >= c1 || k == m;
        if (!take && partial) {
            const uint32_t key = keys[i - c0];
            take = key > T || (key == T && eq_rank++ < take_eq);
        }
        if (take) out[at++] = i;
    }
    if (threadIdx.x == 0)
        sel_count[(size_t)b * nl + l] = (int)(tot & 0xffffu) + min((int)(tot >> 16), take_eq);
}

/* ---------------------------------------------------------------- approximate query */

constexpr int kGatherThreads = 256;

__device__ float block_sum(float v)
{
    __shared__ float part[32];
    __shared__ float tot;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    v = warp_sum(v);
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float s = lane < (int)(blockDim.x >> 5) ? part[lane] : 0.0f;
        s = warp_sum(s);
        if (lane == 0) tot = s;
    }
    __syncthreads();
    return tot;
}

__global__ void __launch_bounds__(kGatherThreads)
    norm_gather_kernel(const float *x, const uint16_t *w, const int32_t *channels, int n_ch,
                       uint16_t *xn, int hidden, float eps)
{
    const float *xr = x + (size_t)blockIdx.x * hidden;
    float ss = 0.0f;
    for (int j = threadIdx.x; j < hidden; j += kGatherThreads) ss += xr[j] * xr[j];
    ss = block_sum(ss);
    const float inv = 1.0f / sqrtf(ss / (float)hidden + eps);
    uint16_t *o = xn + (size_t)blockIdx.x * n_ch;
    for (int j = threadIdx.x; j < n_ch; j += kGatherThreads) {
        const int ch = channels ? channels[j] : j;
        o[j] = f32_to_bf16((xr[ch] * inv) * bf16_to_f32(w[ch]));
    }
}

void check_heads(const struct select_cfg *cfg, const struct digest_view *dv, int sel_head)
{
    char err[128];
    PULSE_CHECK(select_cfg_check(cfg, err, sizeof err) == 0, err);
    select_check_heads(cfg->n_kv_heads, cfg->head_dim, dv, sel_head);
}

} /* namespace */

/* ================================================================ the C API */

extern "C" void digest_build_cuda(const struct kctx *c, const struct kv_view *kv,
                                  const struct digest_view *dv, const int32_t *n_tokens,
                                  int batch, int sel_head, int max_tokens)
{
    if (batch <= 0 || max_tokens <= 0) return;
    select_check_heads(kv->n_kv_heads, kv->head_dim, dv, sel_head);
    const long long nb = PULSE_CEIL_DIV((long long)max_tokens, kv->page_size);
    const long long items = nb * dv->n_heads * kv->head_dim;
    PULSE_CHECK(items / kDigestThreads < 0x7fffffffLL, "digest_build: grid too large");
    const dim3 grid((unsigned)PULSE_CEIL_DIV(items, kDigestThreads), (unsigned)batch);
    cudaStream_t st = stream_of(c);
    digest_build_kernel<<<grid, kDigestThreads, 0, st>>>(
        kv->pool, kv->page_ids, kv->page_start, dv->pool, dv->page_ids, dv->page_start, n_tokens,
        kv->page_size, kv_page_elems(kv), kv->head_dim, dv->n_heads, sel_head);
    CUDA_CHECK_LAUNCH(st);
}

extern "C" void digest_update_cuda(const struct kctx *c, const struct kv_view *kv,
                                   const struct digest_view *dv, const int32_t *pos, int batch,
                                   int sel_head)
{
    if (batch <= 0) return;
    select_check_heads(kv->n_kv_heads, kv->head_dim, dv, sel_head);
    const int items = dv->n_heads * kv->head_dim;
    const dim3 grid((unsigned)PULSE_CEIL_DIV(items, kDigestThreads), (unsigned)batch);
    cudaStream_t st = stream_of(c);
    digest_update_kernel<<<grid, kDigestThreads, 0, st>>>(
        kv->pool, kv->page_ids, kv->page_start, dv->pool, dv->page_ids, dv->page_start, pos,
        kv->page_size, kv_page_elems(kv), kv->head_dim, dv->n_heads, sel_head);
    CUDA_CHECK_LAUNCH(st);
}

namespace
{

/* One launch of the score kernel over n_jobs jobs (checked: select_jobs_check). */
void score_launch(const struct kctx *c, const struct select_job *jobs, int n_jobs,
                  const int32_t *n_tokens, int batch)
{
    const struct select_cfg *cfg = jobs[0].cfg;
    const int hd = cfg->head_dim, G = cfg->n_heads / cfg->n_kv_heads;
    const int nl = select_n_lists(cfg, jobs[0].sel_head);
    int k0, k1;
    select_list_heads(jobs[0].sel_head, 0, cfg->n_kv_heads, &k0, &k1);
    const size_t smem = (size_t)(k1 - k0) * 2 * hd * sizeof(float);
    PULSE_CHECK(smem <= 48 * 1024,
                "select_score: scored KV heads * head_dim * 8 must fit in 48 KB");
    score_jobs sj = {};
    bool vec = hd % 128 == 0;
    for (int j = 0; j < n_jobs; j++) {
        sj.q[j] = jobs[j].q, sj.dpool[j] = jobs[j].dv->pool, sj.dids[j] = jobs[j].dv->page_ids;
        sj.dstart[j] = jobs[j].dv->page_start, sj.scores[j] = jobs[j].scores;
        sj.sel_head[j] = jobs[j].sel_head;
        vec = vec && ((uintptr_t)jobs[j].dv->pool % 8) == 0;
    }
    /* rounds per CTA: enough to bring the grid within one wave of resident CTAs (at most
     * kScoreMaxRounds); the occupancy is the kernel's, asked once per process (registers bound
     * it before the query's shared memory, at most 48 KB, does) */
    static int resident[2];
    if (!resident[vec]) {
        int n = 0;
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &n, vec ? score_kernel<true> : score_kernel<false>, kScoreWarps * 32, smem));
        resident[vec] = n > 0 ? n : 1;
    }
    const long ctas = PULSE_CEIL_DIV((long)cfg->max_blocks, kScorePerCta) * nl * batch * n_jobs;
    const long wave = (long)(c->num_sms > 0 ? c->num_sms : 1) * resident[vec];
    const int rounds =
        (int)(ctas <= wave                                   ? 1
              : PULSE_CEIL_DIV(ctas, wave) < kScoreMaxRounds ? PULSE_CEIL_DIV(ctas, wave)
                                                             : kScoreMaxRounds);
    const dim3 grid((unsigned)PULSE_CEIL_DIV(cfg->max_blocks, kScorePerCta * rounds), (unsigned)nl,
                    (unsigned)(batch * n_jobs));
    cudaStream_t st = stream_of(c);
    const int ndh = jobs[0].dv->n_heads;
    if (vec)
        score_kernel<true><<<grid, kScoreWarps * 32, smem, st>>>(
            sj, n_tokens, batch, cfg->n_heads, G, hd, ndh, cfg->block_size, cfg->max_blocks,
            cfg->n_kv_heads, rounds);
    else
        score_kernel<false><<<grid, kScoreWarps * 32, smem, st>>>(
            sj, n_tokens, batch, cfg->n_heads, G, hd, ndh, cfg->block_size, cfg->max_blocks,
            cfg->n_kv_heads, rounds);
    CUDA_CHECK_LAUNCH(st);
}

/* One launch of the top-k kernel over n_jobs jobs (checked). */
void topk_launch(const struct kctx *c, const struct select_job *jobs, int n_jobs,
                 const int32_t *n_tokens, int batch)
{
    const struct select_cfg *cfg = jobs[0].cfg;
    const int nl = select_n_lists(cfg, jobs[0].sel_head);
    const size_t smem = (size_t)cfg->max_blocks * sizeof(uint32_t);
    if (smem > 48 * 1024) {
        /* once per process and size class; not a stream operation (legal during capture) */
        static size_t opted = 0;
        if (smem > opted) {
            CUDA_CHECK(cudaFuncSetAttribute(topk_kernel,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)(SELECT_MAX_BLOCKS * sizeof(uint32_t))));
            opted = SELECT_MAX_BLOCKS * sizeof(uint32_t);
        }
    }
    topk_jobs tj = {};
    for (int j = 0; j < n_jobs; j++) {
        tj.scores[j] = jobs[j].scores, tj.sel_idx[j] = jobs[j].sel_idx;
        tj.sel_count[j] = jobs[j].sel_count, tj.max_sel[j] = select_list_stride(jobs[j].cfg);
        tj.budget[j] = jobs[j].cfg->budget;
    }
    const dim3 grid((unsigned)(batch * n_jobs), (unsigned)nl);
    cudaStream_t st = stream_of(c);
    topk_kernel<<<grid, kTopkThreads, smem, st>>>(tj, n_tokens, batch, cfg->max_blocks,
                                                  cfg->block_size, cfg->sink, cfg->window);
    CUDA_CHECK_LAUNCH(st);
}

} /* namespace */

extern "C" void select_score_cuda(const struct kctx *c, const struct select_cfg *cfg,
                                  const uint16_t *q, const struct digest_view *dv,
                                  const int32_t *n_tokens, float *scores, int batch, int sel_head)
{
    if (batch <= 0) return;
    check_heads(cfg, dv, sel_head);
    const struct select_job job = {cfg, q, dv, scores, NULL, NULL, sel_head};
    score_launch(c, &job, 1, n_tokens, batch);
}

extern "C" void select_topk_cuda(const struct kctx *c, const struct select_cfg *cfg,
                                 const float *scores, const int32_t *n_tokens, int32_t *sel_idx,
                                 int32_t *sel_count, int batch, int sel_head)
{
    if (batch <= 0) return;
    check_heads(cfg, NULL, sel_head);
    const struct select_job job = {cfg, NULL, NULL, (float *)scores, sel_idx, sel_count, sel_head};
    topk_launch(c, &job, 1, n_tokens, batch);
}

extern "C" void select_blocks_cuda(const struct kctx *c, const struct select_cfg *cfg,
                                   const uint16_t *q, const struct digest_view *dv,
                                   const int32_t *n_tokens, float *scores, int32_t *sel_idx,
                                   int32_t *sel_count, int batch, int sel_head)
{
    select_score_cuda(c, cfg, q, dv, n_tokens, scores, batch, sel_head);
    select_topk_cuda(c, cfg, scores, n_tokens, sel_idx, sel_count, batch, sel_head);
}

extern "C" void select_blocks_multi_cuda(const struct kctx *c, const struct select_job *jobs,
                                         int n_jobs, const int32_t *n_tokens, int batch)
{
    select_jobs_check(jobs, n_jobs);
    if (batch <= 0) return;
    score_launch(c, jobs, n_jobs, n_tokens, batch);
    topk_launch(c, jobs, n_jobs, n_tokens, batch);
}

extern "C" void select_norm_gather_cuda(const struct kctx *c, const float *x, const uint16_t *w,
                                        const int32_t *channels, int n_channels, uint16_t *xn,
                                        int batch, int hidden, float eps)
{
    if (batch <= 0) return;
    cudaStream_t st = stream_of(c);
    norm_gather_kernel<<<batch, kGatherThreads, 0, st>>>(x, w, channels, n_channels, xn, hidden,
                                                         eps);
    CUDA_CHECK_LAUNCH(st);
}

extern "C" void select_approx_q_cuda(const struct kctx *c, const struct approx_q_weights *w,
                                     const float *x, const int32_t *pos, void *workspace,
                                     uint16_t *q_out, int batch, int hidden, int n_heads,
                                     int head_dim, const float *inv_freq, float eps)
{
    if (batch <= 0) return;
    PULSE_CHECK(w->n_channels >= 1 && w->n_channels <= hidden &&
                    (w->channels || w->n_channels == hidden),
                "approx q: n_channels must be in 1..hidden (== hidden without a channel list)");
    const size_t xn_bytes = (size_t)batch * (size_t)w->n_channels * sizeof(uint16_t);
    uint16_t *xn = (uint16_t *)workspace;
    float *qf = (float *)((char *)workspace + (xn_bytes + 255) / 256 * 256);
    select_norm_gather_cuda(c, x, w->attn_norm, w->channels, w->n_channels, xn, batch, hidden,
                            eps);
    gemm_bf16_cuda(c, xn, w->wq, qf, batch, n_heads * head_dim, w->n_channels, 0.0f);
    const struct kv_view none = {NULL, NULL, NULL, 1, 0, head_dim, 0, 0, NULL, NULL};
    qk_norm_rope_append_cuda(c, qf, w->q_norm, NULL, q_out, &none, pos, batch, n_heads, inv_freq,
                             eps);
}
