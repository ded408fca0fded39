/* Issue 35, item 3: can SMs set aside for the zero-copy gather keep the decode GEMMs at their
 * alone speed? recall-bench (s21) measured a decode-shaped GEMM pair (18 x 17408 x 5120, then
 * 18 x 5120 x 17408 accumulating, bf16 weights, cuBLAS) slowing 1.3x beside a 4-block gather and
 * 4-4.6x beside 16-64 blocks, while the gather kept 47-49 GB/s; cuBLASLt's SM-count target did
 * not help (it bounds the GEMM's grid, not where its CTAs land). A green context places work on
 * a fixed set of SMs: here the gather runs in one of G SMs and the GEMMs in another of the rest
 * (cuDevSmResourceSplitByCount), against the same two on ordinary streams of one context.
 *
 * A third arrangement needs no green context: each gather block asks for an SM's whole shared
 * memory, so the block scheduler puts no GEMM CTA beside it ("sm-exclusive").
 *
 * Rows: "plain  gather 4 blocks: gemm 0.102 ms alone 0.135 beside (1.32x), gather 47.9 GB/s
 * alone 47.5 beside" and "green 8 SMs gather 4 blocks: ...". The GEMM's alone time in the green
 * rows is in its own partition (the cost of the SMs given away). Exit 1 when a gathered word or
 * the GEMM's result (against a CPU reference of a few outputs) is wrong.
 *
 * Copy-engine rows ("copy engine batch 64 KB: gemm ..."): the same GEMMs beside host-to-device
 * copies of 64 KB and 1 MB scattered chunks (cudaMemcpyBatchAsync), of the whole 256 MB, and of
 * 64 KB chunks one cudaMemcpyAsync each: no SM touches host memory there.
 *
 * Build: make -C dev zc_green. Run: dev/zc_green [gather SMs, default 8] [iterations, 200]. */
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));         \
            exit(2);                                                                            \
        }                                                                                       \
    } while (0)
#define CU(x)                                                                                   \
    do {                                                                                        \
        CUresult r_ = (x);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                               \
            const char *s_ = "?";                                                               \
            cuGetErrorName(r_, &s_);                                                            \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, s_);                     \
            exit(2);                                                                            \
        }                                                                                       \
    } while (0)
#define CB(x)                                                                                   \
    do {                                                                                        \
        cublasStatus_t s_ = (x);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                      \
            fprintf(stderr, "%s:%d: cublas %d\n", __FILE__, __LINE__, (int)s_);                 \
            exit(2);                                                                            \
        }                                                                                       \
    } while (0)

enum { M = 18, N1 = 17408, K1 = 5120 }; /* gate/up, then down: N2 = K1, K2 = N1 */

/* Copies n 16-byte words from host-mapped src to dst, 8 loads a lane in flight, passes times. */
__global__ void __launch_bounds__(512) gather(const uint4 *__restrict__ src, uint4 *__restrict__ dst,
                                              size_t n, int passes)
{
    const int lane = threadIdx.x & 31;
    const size_t warps = (size_t)gridDim.x * 16, warp = (size_t)blockIdx.x * 16 + (threadIdx.x >> 5);
    for (int p = 0; p < passes; p++)
        for (size_t first = warp * 256; first + 256 <= n; first += warps * 256) {
            uint4 r[8];
#pragma unroll
            for (int u = 0; u < 8; u++)
                r[u] = src[first + 32 * u + lane];
#pragma unroll
            for (int u = 0; u < 8; u++)
                dst[first + 32 * u + lane] = r[u];
        }
}

struct side {
    cudaStream_t gemm, gath; /* where each runs */
    const char *name;
    int hog; /* the gather's dynamic shared memory: an SM's whole, so that no GEMM CTA shares it */
};

struct bufs {
    __nv_bfloat16 *w1, *w2, *a1, *a2;
    float *c1, *c2;
    uint4 *src, *dst;
    size_t n16;
};

static float ms_between(cudaEvent_t a, cudaEvent_t b)
{
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    return ms;
}

/* iters GEMM pairs on s.gemm; returns ms per pair */
static float gemms(cublasHandle_t h, const struct bufs *b, cudaStream_t st, int iters)
{
    const float one = 1, zero = 0;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CB(cublasSetStream(h, st));
    CK(cudaEventRecord(e0, st));
    for (int i = 0; i < iters; i++) {
        CB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N1, M, K1, &one, b->w1, CUDA_R_16BF, K1, b->a1,
                        CUDA_R_16BF, K1, &zero, b->c1, CUDA_R_32F, N1, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT));
        CB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, K1, M, N1, &one, b->w2, CUDA_R_16BF, N1, b->a2,
                        CUDA_R_16BF, N1, &one, b->c2, CUDA_R_32F, K1, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT));
    }
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    const float ms = ms_between(e0, e1) / iters;
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return ms;
}

/* the gather of passes x n16 words on st with blocks blocks; returns GB/s (synchronous) */
static double gather_alone(const struct bufs *b, cudaStream_t st, int blocks, int passes, int hog)
{
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0, st));
    gather<<<blocks, 512, hog, st>>>(b->src, b->dst, b->n16, passes);
    CK(cudaGetLastError());
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    const double gbs = (double)passes * b->n16 * 16 / (ms_between(e0, e1) * 1e6);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return gbs;
}

/* GEMMs alone, the gather alone, then both: the gather started first and sized to outlast the
 * GEMMs, whose time is taken while it runs (the destination cleared first, so that check() sees
 * this arrangement's copy, not an earlier one's) */
static void measure(cublasHandle_t h, const struct bufs *b, const struct side *s, int blocks,
                    int iters)
{
    CK(cudaMemset(b->dst, 0, b->n16 * 16));
    gemms(h, b, s->gemm, 20); /* warm */
    const float alone = gemms(h, b, s->gemm, iters);
    const double g_alone = gather_alone(b, s->gath, blocks, 2, s->hog);
    /* enough passes to cover the GEMMs at the alone rate, twice over */
    const double need = 2.0 * alone * iters * 1e-3 * g_alone * 1e9;
    const int passes = (int)ceil(need / ((double)b->n16 * 16)) + 1;
    cudaEvent_t g0, g1;
    CK(cudaEventCreate(&g0));
    CK(cudaEventCreate(&g1));
    CK(cudaEventRecord(g0, s->gath));
    gather<<<blocks, 512, s->hog, s->gath>>>(b->src, b->dst, b->n16, passes);
    CK(cudaGetLastError());
    CK(cudaEventRecord(g1, s->gath));
    const float beside = gemms(h, b, s->gemm, iters);
    CK(cudaEventSynchronize(g1));
    const double g_all = (double)passes * b->n16 * 16 / (ms_between(g0, g1) * 1e6);
    printf("%-16s gather %2d blocks: gemm %.4f ms alone %.4f beside (%.2fx), weights %.0f GB/s "
           "alone; gather %.1f GB/s alone, %.1f over its run beside\n",
           s->name, blocks, alone, beside, beside / alone,
           ((double)N1 * K1 * 2 * 2) / (alone * 1e6), g_alone, g_all);
    CK(cudaEventDestroy(g0));
    CK(cudaEventDestroy(g1));
}

/* n copies of chunk bytes from the host source into dst, spread over it in a fixed scattered
 * order (chunk i -> slot (i * 40503) mod slots), as one batch (cudaMemcpyBatchAsync: the copy
 * engines, no SM) or one cudaMemcpyAsync each */
static void ce_copies(const struct bufs *b, const uint4 *h_src, cudaStream_t st, size_t chunk,
                      size_t n, int batch)
{
    const size_t slots = b->n16 * 16 / chunk;
    static void *dsts[1 << 16];
    static const void *srcs[1 << 16];
    static size_t sizes[1 << 16];
    for (size_t i = 0; i < n;) {
        const size_t k = n - i < (1u << 16) ? n - i : (1u << 16);
        for (size_t j = 0; j < k; j++) {
            const size_t at = ((i + j) * 40503u) % slots;
            dsts[j] = (char *)b->dst + at * chunk;
            srcs[j] = (const char *)h_src + at * chunk;
            sizes[j] = chunk;
        }
        if (batch) {
            struct cudaMemcpyAttributes attr;
            memset(&attr, 0, sizeof attr);
            attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
            size_t first = 0;
            CK(cudaMemcpyBatchAsync(dsts, srcs, sizes, k, &attr, &first, 1, st));
        } else {
            for (size_t j = 0; j < k; j++)
                CK(cudaMemcpyAsync(dsts[j], srcs[j], chunk, cudaMemcpyHostToDevice, st));
        }
        i += k;
    }
}

/* The GEMMs beside host-to-device copies made by the copy engines instead of a gather kernel:
 * does the slow-down follow the link's traffic or the SMs' loads of host memory? */
static void measure_ce(cublasHandle_t h, const struct bufs *b, const uint4 *h_src,
                       cudaStream_t sg, cudaStream_t sc, size_t chunk, int batch, int iters)
{
    gemms(h, b, sg, 20);
    const float alone = gemms(h, b, sg, iters);
    const size_t n_alone = (b->n16 * 16) / chunk;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0, sc));
    ce_copies(b, h_src, sc, chunk, n_alone, batch);
    CK(cudaEventRecord(e1, sc));
    CK(cudaEventSynchronize(e1));
    const double c_alone = (double)n_alone * chunk / (ms_between(e0, e1) * 1e6);
    const size_t n = (size_t)ceil(2.0 * alone * iters * 1e-3 * c_alone * 1e9 / chunk) + 1;
    CK(cudaEventRecord(e0, sc));
    ce_copies(b, h_src, sc, chunk, n, batch);
    CK(cudaEventRecord(e1, sc));
    const float beside = gemms(h, b, sg, iters);
    CK(cudaEventSynchronize(e1));
    const double c_all = (double)n * chunk / (ms_between(e0, e1) * 1e6);
    printf("copy engine %-6s %6zu KB: gemm %.4f ms alone %.4f beside (%.2fx); copies %.1f GB/s "
           "alone, %.1f over their run beside\n",
           batch ? "batch" : "async", chunk >> 10, alone, beside, beside / alone, c_alone, c_all);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
}

static int check(const struct bufs *b, const uint16_t *hw1, const uint16_t *ha1)
{
    /* the gather: the destination's words are the source's (source word i = (i+1, 2, 3, 4)) */
    uint4 probe[4];
    const size_t at[4] = {0, 1, b->n16 / 2, b->n16 - 1};
    for (int i = 0; i < 4; i++) {
        CK(cudaMemcpy(&probe[i], b->dst + at[i], 16, cudaMemcpyDeviceToHost));
        if (probe[i].x != (unsigned)at[i] + 1 || probe[i].w != 4) {
            fprintf(stderr, "gather: word %zu wrong\n", at[i]);
            return 1;
        }
    }
    /* the first GEMM: a few outputs against a CPU sum */
    float c[8];
    CK(cudaMemcpy(c, b->c1, sizeof c, cudaMemcpyDeviceToHost));
    for (int j = 0; j < 8; j++) {
        double ref = 0;
        for (int k = 0; k < K1; k++) {
            uint32_t wb = (uint32_t)hw1[(size_t)j * K1 + k] << 16, ab = (uint32_t)ha1[k] << 16;
            float w, a;
            memcpy(&w, &wb, 4);
            memcpy(&a, &ab, 4);
            ref += (double)w * a;
        }
        if (fabs(ref - c[j]) > 1e-2 * (1 + fabs(ref))) {
            fprintf(stderr, "gemm: c[0][%d] = %g, reference %g\n", j, c[j], ref);
            return 1;
        }
    }
    return 0;
}

static uint16_t bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

int main(int argc, char **argv)
{
    const int gsms = argc > 1 ? atoi(argv[1]) : 8, iters = argc > 2 ? atoi(argv[2]) : 200;
    CU(cuInit(0));
    CK(cudaSetDevice(0));
    CK(cudaFree(0));
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    struct bufs b;
    const size_t w1n = (size_t)N1 * K1;
    uint16_t *hw = (uint16_t *)malloc(w1n * 2), *ha = (uint16_t *)malloc((size_t)M * N1 * 2);
    for (size_t i = 0; i < w1n; i++)
        hw[i] = bf16_of((float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f);
    for (size_t i = 0; i < (size_t)M * N1; i++)
        ha[i] = bf16_of((float)((i * 40503u) % 1001) / 500.0f - 1.0f);
    CK(cudaMalloc(&b.w1, w1n * 2));
    CK(cudaMalloc(&b.w2, w1n * 2));
    CK(cudaMalloc(&b.a1, (size_t)M * K1 * 2));
    CK(cudaMalloc(&b.a2, (size_t)M * N1 * 2));
    CK(cudaMalloc(&b.c1, (size_t)M * N1 * 4));
    CK(cudaMalloc(&b.c2, (size_t)M * K1 * 4));
    CK(cudaMemcpy(b.w1, hw, w1n * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.w2, hw, w1n * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.a1, ha, (size_t)M * K1 * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.a2, ha, (size_t)M * N1 * 2, cudaMemcpyHostToDevice));
    CK(cudaMemset(b.c2, 0, (size_t)M * K1 * 4));
    const size_t host_bytes = (size_t)256 << 20;
    b.n16 = host_bytes / 16;
    uint4 *h_src;
    CK(cudaHostAlloc(&h_src, host_bytes, cudaHostAllocMapped));
    for (size_t i = 0; i < b.n16; i++)
        h_src[i] = make_uint4((unsigned)i + 1, 2, 3, 4);
    CK(cudaHostGetDevicePointer((void **)&b.src, h_src, 0));
    CK(cudaMalloc(&b.dst, host_bytes));
    cublasHandle_t h;
    CB(cublasCreate(&h));

    /* ordinary streams of the primary context, the gather's of the greatest priority */
    int lo, hi;
    CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    struct side plain = {NULL, NULL, "plain", 0};
    CK(cudaStreamCreateWithPriority(&plain.gemm, cudaStreamNonBlocking, lo));
    CK(cudaStreamCreateWithPriority(&plain.gath, cudaStreamNonBlocking, hi));
    /* 1 and 2 blocks: 64 and 128 KB in flight, about the link's bandwidth-latency product */
    const int grids[] = {1, 2, 4, 8, 16};
    enum { N_GRIDS = sizeof grids / sizeof grids[0] };
    for (int g = 0; g < N_GRIDS; g++)
        measure(h, &b, &plain, grids[g], iters);
    int bad = check(&b, hw, ha);
    /* the same bytes by the copy engines (no SM reads host memory) */
    const size_t ce_chunks[] = {(size_t)64 << 10, (size_t)1 << 20, host_bytes};
    for (int i = 0; i < 3; i++)
        measure_ce(h, &b, h_src, plain.gemm, plain.gath, ce_chunks[i], i < 2, iters);
    measure_ce(h, &b, h_src, plain.gemm, plain.gath, (size_t)64 << 10, 0, iters);
    /* the same streams, each gather block holding an SM's shared memory: the GEMMs' CTAs land
     * only on the SMs the gather leaves (no green context; cuBLAS still sizes its grid to all) */
    int smem_optin;
    CK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    CK(cudaFuncSetAttribute(gather, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_optin));
    struct side excl = {plain.gemm, plain.gath, "sm-exclusive", smem_optin};
    for (int g = 2; g < N_GRIDS; g++)
        measure(h, &b, &excl, grids[g], iters);
    bad |= check(&b, hw, ha);

    /* green contexts: the gather's partition of gsms SMs, the GEMMs' of the rest */
    CUdevResource all, parts[1], rest;
    CU(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
    unsigned int n_groups = 1;
    CU(cuDevSmResourceSplitByCount(parts, &n_groups, &all, &rest, 0, (unsigned)gsms));
    printf("SMs: %u in all, minimum partition %u, alignment %u; gather partition %u SMs, "
           "compute %u\n",
           all.sm.smCount, all.sm.minSmPartitionSize, all.sm.smCoscheduledAlignment,
           parts[0].sm.smCount, rest.sm.smCount);
    CUdevResourceDesc dg, dc;
    CU(cuDevResourceGenerateDesc(&dg, parts, 1));
    CU(cuDevResourceGenerateDesc(&dc, &rest, 1));
    CUgreenCtx gg, gc;
    CU(cuGreenCtxCreate(&gg, dg, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    CU(cuGreenCtxCreate(&gc, dc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    CUstream sg, sc;
    CU(cuGreenCtxStreamCreate(&sg, gg, CU_STREAM_NON_BLOCKING, hi));
    CU(cuGreenCtxStreamCreate(&sc, gc, CU_STREAM_NON_BLOCKING, lo));
    char name[32];
    snprintf(name, sizeof name, "green %u+%u", parts[0].sm.smCount, rest.sm.smCount);
    struct side green = {(cudaStream_t)sc, (cudaStream_t)sg, name, 0};
    for (int g = 2; g < N_GRIDS; g++)
        if (grids[g] <= (int)parts[0].sm.smCount * 4)
            measure(h, &b, &green, grids[g], iters);
    bad |= check(&b, hw, ha);
    printf("%s\n", bad ? "FAILED: a wrong value" : "values checked");
    return bad;
}
