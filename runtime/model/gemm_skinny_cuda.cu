/* The suite's own skinny GEMM (gemm_skinny.h).
 *
 * Layout of one 32-wide chunk of k, for a warp (lane = 4 * g + t, g = 0..7, t = 0..3): the lane
 * loads 16 bytes of w's rows g and g + 8 of each of its 16-row tiles, elements 8t .. 8t + 7 of
 * the chunk, and the same elements of a's row g of each 8-row tile. mma m16n8k16 takes from a
 * lane the pairs (2t, 2t + 1) and (2t + 8, 2t + 9) of its 16 k-slots; giving it elements
 * 8t + 4s + {0, 1} and 8t + 4s + {2, 3} on step s = 0, 1 feeds every element of the chunk to
 * exactly one slot of one step, the same slot on w's side as on a's. The sum over k is the
 * same; only its order differs from a dense kernel's. */
#include <cuda_runtime.h>

#include <stdint.h>

#include "cuda_check.h"
#include "gemm_skinny.h"
#include "pdl.cuh"

namespace
{

constexpr int kChunk = 32;

__device__ __forceinline__ uint4 load_stream(const uint16_t *p)
{
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Chunks a lane keeps in flight: about 8 of w's 16-byte loads, fewer when a's are many. */
template <int MT, int RT> __host__ __device__ constexpr int unroll()
{
    return (8 / RT) / (MT >= 4 ? 2 : 1) > 0 ? (8 / RT) / (MT >= 4 ? 2 : 1) : 1;
}

template <int MT, int RT> struct Lane {
    const uint16_t *w[RT][2]; /* rows g and g + 8 of each tile, at element 8t */
    const uint16_t *a[MT];    /* row g of each 8-row tile of a (row 0 when past m), at 8t */
    bool a_on[MT];
    float acc[RT][MT][4];

    /* cnt <= NU chunks of w from chunk c into wv (what nothing in the step writes); every
     * load goes out before any is used, a short batch predicated, not serialised */
    template <int NU>
    __device__ __forceinline__ void load_w(int c, int cnt, uint4 (&wv)[NU][RT][2]) const
    {
#pragma unroll
        for (int u = 0; u < NU; u++) {
            const size_t off = (size_t)(c + u) * kChunk;
#pragma unroll
            for (int r = 0; r < RT; r++) {
                wv[u][r][0] = u < cnt ? load_stream(w[r][0] + off) : make_uint4(0, 0, 0, 0);
                wv[u][r][1] = u < cnt ? load_stream(w[r][1] + off) : make_uint4(0, 0, 0, 0);
            }
        }
    }

    /* a's cnt chunks from chunk c, then the products with wv */
    template <int NU>
    __device__ __forceinline__ void multiply(int c, int cnt, const uint4 (&wv)[NU][RT][2])
    {
        uint4 av[NU][MT];
#pragma unroll
        for (int u = 0; u < NU; u++)
#pragma unroll
            for (int t = 0; t < MT; t++)
                av[u][t] = a_on[t] && u < cnt
                               ? __ldg((const uint4 *)(a[t] + (size_t)(c + u) * kChunk))
                               : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < NU; u++) /* past cnt both operands are 0: adds nothing */
#pragma unroll
            for (int r = 0; r < RT; r++)
#pragma unroll
                for (int t = 0; t < MT; t++) {
                    const uint4 lo = wv[u][r][0], hi = wv[u][r][1], x = av[u][t];
                    mma_bf16(acc[r][t], lo.x, hi.x, lo.y, hi.y, x.x, x.y);
                    mma_bf16(acc[r][t], lo.z, hi.z, lo.w, hi.w, x.z, x.w);
                }
    }
};

/* MT 8-row tiles of a (m <= 8 MT), RT 16-row tiles of w a warp, KW warps splitting k. */
template <int MT, int RT, int KW>
__global__ void __launch_bounds__(KW * 32)
    skinny_kernel(const uint16_t *__restrict__ a, const uint16_t *__restrict__ w,
                  float *__restrict__ out, int m, int n, int k, float beta)
{
    constexpr int ROWS = 16 * RT, COLS = 8 * MT, U = unroll<MT, RT>();
    __shared__ float part[KW][COLS][ROWS]; /* each warp's partial sums, column-major */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int row0 = blockIdx.x * ROWS;
    const int chunks = k / kChunk;
    const int c0 = (int)((int64_t)chunks * warp / KW),
              c1 = (int)((int64_t)chunks * (warp + 1) / KW);

    Lane<MT, RT> L;
#pragma unroll
    for (int r = 0; r < RT; r++) {
        L.w[r][0] = w + (size_t)(row0 + 16 * r + g) * k + 8 * t4;
        L.w[r][1] = L.w[r][0] + (size_t)8 * k;
#pragma unroll
        for (int t = 0; t < MT; t++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                L.acc[r][t][i] = 0.0f;
    }
#pragma unroll
    for (int t = 0; t < MT; t++) {
        const int row = 8 * t + g;
        L.a_on[t] = row < m;
        L.a[t] = a + (size_t)(row < m ? row : 0) * k + 8 * t4;
    }
    /* the first chunks' weights are loaded before the wait for the kernel before (a launch
     * with programmatic dependent launch, pdl.cuh): they overlap its tail */
    {
        uint4 wv[U][RT][2];
        const int cnt = min(U, c1 - c0);
        L.template load_w<U>(c0, cnt, wv);
        pdl_wait();
        L.template multiply<U>(c0, cnt, wv);
    }
    for (int c = c0 + U; c < c1; c += U) {
        uint4 wv[U][RT][2];
        const int cnt = min(U, c1 - c);
        L.template load_w<U>(c, cnt, wv);
        L.template multiply<U>(c, cnt, wv);
    }
    pdl_trigger();

#pragma unroll
    for (int r = 0; r < RT; r++)
#pragma unroll
        for (int t = 0; t < MT; t++) {
            const int row = 16 * r + g, col = 8 * t + 2 * t4;
            part[warp][col][row] = L.acc[r][t][0];
            part[warp][col + 1][row] = L.acc[r][t][1];
            part[warp][col][row + 8] = L.acc[r][t][2];
            part[warp][col + 1][row + 8] = L.acc[r][t][3];
        }
    __syncthreads();
    /* consecutive threads, consecutive rows of out; the warps' partials summed in warp order */
    for (int i = threadIdx.x; i < ROWS * m; i += KW * 32) {
        const int col = i / ROWS, row = i % ROWS;
        float s = 0.0f;
#pragma unroll
        for (int v = 0; v < KW; v++)
            s += part[v][col][row];
        float *o = out + (size_t)col * n + row0 + row;
        *o = beta != 0.0f ? s + beta * *o : s;
    }
}

typedef void (*skinny_fn)(const uint16_t *, const uint16_t *, float *, int, int, int, float);

struct Variant {
    int rt, kw;
};
constexpr Variant kVariants[GEMM_SKINNY_VARIANTS] = {{1, 4},  {1, 8}, {1, 16}, {2, 4}, {2, 8},
                                                     {2, 16}, {4, 4}, {4, 8},  {4, 16}};
constexpr size_t kSmemLimit = 48 * 1024; /* static shared memory */

constexpr size_t smem_of(int mt, int rt, int kw)
{
    return sizeof(float) * (size_t)kw * (8 * mt) * (16 * rt);
}

template <int MT, int RT, int KW> skinny_fn pick()
{
    if constexpr (smem_of(MT, RT, KW) <= kSmemLimit)
        return skinny_kernel<MT, RT, KW>;
    else
        return nullptr;
}

template <int MT> skinny_fn table(int v)
{
    static const skinny_fn f[GEMM_SKINNY_VARIANTS] = {
        pick<MT, 1, 4>(),  pick<MT, 1, 8>(), pick<MT, 1, 16>(), pick<MT, 2, 4>(), pick<MT, 2, 8>(),
        pick<MT, 2, 16>(), pick<MT, 4, 4>(), pick<MT, 4, 8>(),  pick<MT, 4, 16>()};
    return f[v];
}

/* a's 8-row tiles for m rows: 1 .. 4 */
int mt_of(int m)
{
    return (m + 7) / 8;
}

skinny_fn fn_of(int v, int m)
{
    switch (mt_of(m)) {
    case 1:
        return table<1>(v);
    case 2:
        return table<2>(v);
    case 3:
        return table<3>(v);
    default:
        return table<4>(v);
    }
}

} // namespace

extern "C" int gemm_skinny_fits(int variant, int m, int n, int k, const void *a, const void *w)
{
    if (variant < 0 || variant >= GEMM_SKINNY_VARIANTS) return 0;
    if (m < 1 || m > GEMM_SKINNY_MAX_M || n < 1 || k < kChunk || k % kChunk) return 0;
    if (n % (16 * kVariants[variant].rt) || ((uintptr_t)a | (uintptr_t)w) % 16) return 0;
    return fn_of(variant, m) != nullptr;
}

extern "C" const char *gemm_skinny_name(int variant)
{
    static const char *const names[GEMM_SKINNY_VARIANTS] = {"rt1-kw4", "rt1-kw8", "rt1-kw16",
                                                            "rt2-kw4", "rt2-kw8", "rt2-kw16",
                                                            "rt4-kw4", "rt4-kw8", "rt4-kw16"};
    return variant >= 0 && variant < GEMM_SKINNY_VARIANTS ? names[variant] : "none";
}

extern "C" void gemm_skinny_run(int variant, void *stream, int pdl, const uint16_t *a,
                                const uint16_t *w, float *out, int m, int n, int k, float beta)
{
    PULSE_CHECK(gemm_skinny_fits(variant, m, n, k, a, w), "gemm_skinny_run: shape does not fit");
    const Variant v = kVariants[variant];
    const skinny_fn f = fn_of(variant, m);
    const unsigned blocks = (unsigned)(n / (16 * v.rt));
    pulse_launch(pdl, f, blocks, 32 * v.kw, 0, (cudaStream_t)stream, a, w, out, m, n, k, beta);
    CUDA_CHECK_LAUNCH((cudaStream_t)stream);
}
