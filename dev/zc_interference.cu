/* Why the compute beside a zero-copy gather slows down (issue 8: infinigen's overlapped step).
 * CUPTI of the 12 x 16K qwen3-14b step showed every small kernel of a layer (rmsnorm, split-K
 * reduce, RoPE append, attention combine) 3-6x longer while the gather ran on another stream,
 * by a roughly constant few microseconds a kernel that grew with the gather's bytes in flight.
 * This measures a chain of small kernels (12 blocks of 256 threads reading and writing 12 x 5120
 * floats, about a rmsnorm of a decode batch) on one stream, launched one by one or replayed as
 * one CUDA graph, alone and beside a zero-copy gather (mapped pinned host memory -> device, a
 * grid of G blocks of 512 threads, V 16-byte loads a lane in flight) on a stream of the
 * greatest priority, and the gather's own rate in each case.
 *
 * Build: make -C dev zc_interference. Run: dev/zc_interference [chain length, default 2000].
 * Lines: "direct  alone       3.10 us/kernel" and "graph   beside 4x128K 3.20 us/kernel,
 * gather 50.1 GB/s". Exit 1 when a kernel computed a wrong value. */
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));         \
            exit(2);                                                                            \
        }                                                                                       \
    } while (0)

enum { ROWS = 12, COLS = 5120, PASSES = 8 }; /* 8 x 256 MB: about 40 ms of gather */

/* y[r] = x[r] / rms(x[r]) + 1: one block a row */
__global__ void __launch_bounds__(256) small_kernel(const float *x, float *y)
{
    __shared__ float part[8];
    const float *xr = x + (size_t)blockIdx.x * COLS;
    float s = 0;
    for (int i = threadIdx.x; i < COLS; i += 256)
        s += xr[i] * xr[i];
    for (int o = 16; o; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
    __syncthreads();
    float t = 0;
    for (int w = 0; w < 8; w++)
        t += part[w];
    const float inv = rsqrtf(t / COLS + 1e-6f);
    for (int i = threadIdx.x; i < COLS; i += 256)
        y[(size_t)blockIdx.x * COLS + i] = xr[i] * inv + 1.0f;
}

/* Holds its stream for about ns nanoseconds, so the launches behind it queue up. */
__global__ void hold_kernel(long long ns)
{
    const long long t0 = clock64();
    while (clock64() - t0 < ns * 2) /* about 2 GHz or less: at least ns */
        __nanosleep(1000);
}

/* Copies n 16-byte words from host-mapped src to dst, V loads a lane in flight; pass times. */
template <int V>
__global__ void __launch_bounds__(512) gather_kernel(const uint4 *__restrict__ src, uint4 *__restrict__ dst,
                                                     size_t n, int passes)
{
    const int lane = threadIdx.x & 31;
    const size_t warps = (size_t)gridDim.x * (blockDim.x >> 5);
    const size_t warp = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const size_t piece = 32 * (size_t)V;
    for (int p = 0; p < passes; p++)
        for (size_t first = warp * piece; first + piece <= n; first += warps * piece) {
            uint4 r[V];
#pragma unroll
            for (int u = 0; u < V; u++)
                r[u] = src[first + 32 * u + lane];
#pragma unroll
            for (int u = 0; u < V; u++)
                dst[first + 32 * u + lane] = r[u];
        }
}

static void launch_gather(int v, int blocks, const uint4 *src, uint4 *dst, size_t n, int passes,
                          cudaStream_t s)
{
    switch (v) {
    case 16: gather_kernel<16><<<blocks, 512, 0, s>>>(src, dst, n, passes); break;
    case 8: gather_kernel<8><<<blocks, 512, 0, s>>>(src, dst, n, passes); break;
    case 4: gather_kernel<4><<<blocks, 512, 0, s>>>(src, dst, n, passes); break;
    default: gather_kernel<2><<<blocks, 512, 0, s>>>(src, dst, n, passes); break;
    }
    CK(cudaGetLastError());
}

int main(int argc, char **argv)
{
    const int K = argc > 1 ? atoi(argv[1]) : 2000;
    const size_t host_bytes = (size_t)256 << 20, n16 = host_bytes / 16;
    float *hx = (float *)malloc(sizeof(float) * ROWS * COLS), *d_x, *d_y;
    for (int i = 0; i < ROWS * COLS; i++)
        hx[i] = (float)((i * 7919) % 97 + 1) / 50.0f;
    CK(cudaMalloc(&d_x, sizeof(float) * ROWS * COLS));
    CK(cudaMalloc(&d_y, sizeof(float) * ROWS * COLS));
    CK(cudaMemcpy(d_x, hx, sizeof(float) * ROWS * COLS, cudaMemcpyHostToDevice));
    uint4 *h_src, *d_src, *d_dst;
    CK(cudaHostAlloc(&h_src, host_bytes, cudaHostAllocMapped));
    for (size_t i = 0; i < n16; i++)
        h_src[i] = make_uint4((unsigned)i + 1, 2, 3, 4);
    CK(cudaHostGetDevicePointer((void **)&d_src, h_src, 0));
    CK(cudaMalloc(&d_dst, host_bytes));
    int lo, hi;
    CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    cudaStream_t sc, sg;
    CK(cudaStreamCreateWithPriority(&sc, cudaStreamNonBlocking, lo));
    CK(cudaStreamCreateWithPriority(&sg, cudaStreamNonBlocking, hi));
    cudaEvent_t e0, e1, g0, g1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventCreate(&g0));
    CK(cudaEventCreate(&g1));

    /* the chain as one graph */
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(sc, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < K; k++)
        small_kernel<<<ROWS, 256, 0, sc>>>(d_x, d_y);
    CK(cudaStreamEndCapture(sc, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphUpload(ge, sc));
    CK(cudaStreamSynchronize(sc));

    struct { int v, blocks; } grids[] = {{0, 0}, {16, 4}, {8, 4}, {4, 4}, {16, 2}, {16, 16}};
    int bad = 0;
    for (int mode = 0; mode < 2; mode++)
        for (size_t gi = 0; gi < sizeof grids / sizeof grids[0]; gi++) {
            const int v = grids[gi].v, blocks = grids[gi].blocks;
            float best = 1e30f, gbest = 0;
            for (int rep = 0; rep < 3; rep++) {
                CK(cudaDeviceSynchronize());
                if (v) { /* the gather first, long enough to outlast the chain */
                    CK(cudaEventRecord(g0, sg));
                    launch_gather(v, blocks, d_src, d_dst, n16, PASSES, sg);
                    CK(cudaEventRecord(g1, sg));
                }
                hold_kernel<<<1, 32, 0, sc>>>(2000000); /* 2 ms: the launches queue behind it */
                CK(cudaEventRecord(e0, sc));
                if (mode == 0)
                    for (int k = 0; k < K; k++)
                        small_kernel<<<ROWS, 256, 0, sc>>>(d_x, d_y);
                else
                    CK(cudaGraphLaunch(ge, sc));
                CK(cudaEventRecord(e1, sc));
                CK(cudaDeviceSynchronize());
                float ms, gms = 0;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                if (v) CK(cudaEventElapsedTime(&gms, g0, g1));
                if (ms < best) best = ms, gbest = v ? (float)PASSES * host_bytes / (gms * 1e6f) : 0;
            }
            char what[64];
            if (v)
                snprintf(what, sizeof what, "beside %dx%dK", blocks, v * 512 * 16 / 1024);
            else
                snprintf(what, sizeof what, "alone");
            printf("%-7s %-14s %6.2f us/kernel", mode ? "graph" : "direct", what, best * 1e3f / K);
            if (v) printf(", gather %.1f GB/s (chain %.1f ms of its %.1f)", gbest, best, (float)PASSES * host_bytes / (gbest * 1e6f));
            printf("\n");
        }
    /* check one result and the gather's copy */
    float y0;
    CK(cudaMemcpy(&y0, d_y, sizeof y0, cudaMemcpyDeviceToHost));
    double s = 0;
    for (int i = 0; i < COLS; i++)
        s += (double)hx[i] * hx[i];
    const double want = hx[0] / sqrt(s / COLS + 1e-6) + 1.0;
    if (fabs(y0 - want) > 1e-3 * fabs(want)) printf("small_kernel wrong: %f vs %f\n", y0, want), bad = 1;
    uint4 last;
    CK(cudaMemcpy(&last, d_dst + 12345, sizeof last, cudaMemcpyDeviceToHost));
    if (last.x != 12346u || last.w != 4u) printf("gather wrong at 12345\n"), bad = 1;
    return bad;
}
