/* The zero-copy recall kernel (runtime/store/recall_kernels.cu, gather_kernel) grown here in versions,
 * each checked against the sources at every grid it is timed at, then timed with device events
 * against the single-copy H2D peak measured in the same run. Random chunks of a pinned, mapped
 * host pool (integer-valued, never zero) into random slots of a device region of guard bytes.
 *
 *   v1    one block per descriptor, descriptors in mapped host memory, thread 0 prefetching the
 *         next one, a barrier per descriptor (the runtime kernel before v3)
 *   v2    one block per descriptor, descriptors in device memory, no barrier, one 16-byte load
 *         per thread per step (tools/probe/probe2.cu: 50-51 GB/s with 16 blocks of 512)
 *   v3/V  one warp per piece of 512 V bytes, every lane issuing its V 16-byte loads before its
 *         stores, warps striding over descriptors, descriptors in device memory (V = 16 is the
 *         runtime kernel for grids of <= 512 threads, V = 8 above)
 *   v3h   v3/16 reading its descriptors from mapped host memory instead
 *   v4/NB one lane per warp runs a pipeline of NB stages of 8 KB through shared memory with the
 *         Hopper bulk copies (cp.async.bulk global -> shared -> global): no data in registers.
 *         Whether the bulk copy engine may read mapped host memory is what this measures; if it
 *         faults, the CUDA context is gone, so it runs only when asked for, and last.
 * Then the end-to-end cost the engine adds for v3/16 at 16 x 512: the descriptors' H2D copy
 * plus the kernel (device events), and the host's wall time from the copy's call to the sync.
 *
 * Build: make -C dev (or nvcc -O3 -std=c++17 -arch=sm_90 -o dev/recall_gather
 * dev/recall_gather.cu). Run: dev/recall_gather [versions...], versions of 1 2 3 3h 4 e2e
 * (default: 1 2 3 3h e2e). Lines: "v3/16 8192 B x 1024 grid 16 x 512: 51.20 GB/s = 0.925 of
 * peak (ok)". Exit 1 when any version moved wrong data. */
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

struct desc { /* as runtime/store/recall.h's recall_desc */
    uint64_t src, dst, bytes, pad;
};

static const unsigned char GUARD = 0xA5;

/* ---- v1: block per descriptor, mapped descriptors, barrier per descriptor ---- */

__device__ __forceinline__ void block_copy(uint64_t src, uint64_t dst, uint64_t bytes)
{
    const uint4 *s = reinterpret_cast<const uint4 *>(src);
    uint4 *d = reinterpret_cast<uint4 *>(dst);
    const size_t nv = bytes >> 4, step = blockDim.x;
    size_t i = threadIdx.x;
    for (; i + 3 * step < nv; i += 4 * step) {
        const uint4 a = s[i], b = s[i + step], c = s[i + 2 * step], e = s[i + 3 * step];
        d[i] = a, d[i + step] = b, d[i + 2 * step] = c, d[i + 3 * step] = e;
    }
    for (; i < nv; i += step)
        d[i] = s[i];
}

__global__ void __launch_bounds__(1024) v1_kernel(const desc *dd, int n)
{
    __shared__ uint64_t sd[2][3];
    int i = blockIdx.x;
    if (i >= n) return;
    if (threadIdx.x == 0) sd[0][0] = dd[i].src, sd[0][1] = dd[i].dst, sd[0][2] = dd[i].bytes;
    __syncthreads();
    int cur = 0;
    for (; i < n; i += gridDim.x) {
        const int next = i + gridDim.x;
        uint64_t ns = 0, nd = 0, nb = 0;
        if (threadIdx.x == 0 && next < n) ns = dd[next].src, nd = dd[next].dst, nb = dd[next].bytes;
        block_copy(sd[cur][0], sd[cur][1], sd[cur][2]);
        if (threadIdx.x == 0 && next < n)
            sd[cur ^ 1][0] = ns, sd[cur ^ 1][1] = nd, sd[cur ^ 1][2] = nb;
        __syncthreads();
        cur ^= 1;
    }
}

/* ---- v2: block per descriptor, device descriptors, no barrier ---- */

__global__ void __launch_bounds__(1024) v2_kernel(const desc *__restrict__ dd, int n)
{
    for (int b = blockIdx.x; b < n; b += gridDim.x) {
        const uint4 *__restrict__ s = reinterpret_cast<const uint4 *>(dd[b].src);
        uint4 *d = reinterpret_cast<uint4 *>(dd[b].dst);
        const size_t nv = dd[b].bytes >> 4;
        for (size_t i = threadIdx.x; i < nv; i += blockDim.x)
            d[i] = s[i];
    }
}

/* ---- v3: warp per piece, all loads of a lane before its stores (aligned descriptors) ---- */

template <int V>
__global__ void __launch_bounds__(V >= 16 ? 512 : 1024)
    v3_kernel(const desc *__restrict__ dd, int n)
{
    const int lane = threadIdx.x & 31, per_block = blockDim.x >> 5;
    const int warps = gridDim.x * per_block, warp = blockIdx.x * per_block + (threadIdx.x >> 5);
    const int share = n < warps ? warps / n : 1;
    const int groups = warps / share, grp = warp / share, sub = warp - grp * share;
    if (grp >= groups) return;
    for (int i = grp; i < n; i += groups) {
        const ulonglong2 *dp = reinterpret_cast<const ulonglong2 *>(dd + i);
        const ulonglong2 sd = dp[0], bp = dp[1];
        const uint4 *__restrict__ s = reinterpret_cast<const uint4 *>(sd.x);
        uint4 *__restrict__ d = reinterpret_cast<uint4 *>(sd.y);
        const uint64_t nv = bp.x >> 4, pieces = (nv + 32 * V - 1) / (32 * V);
        for (uint64_t k = sub; k < pieces; k += share) {
            const uint64_t first = k * 32 * V;
            uint4 r[V];
#pragma unroll
            for (int u = 0; u < V; u++) {
                const uint64_t j = first + 32 * u + lane;
                r[u] = j < nv ? s[j] : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < V; u++) {
                const uint64_t j = first + 32 * u + lane;
                if (j < nv) d[j] = r[u];
            }
        }
    }
}

/* ---- v4: bulk copies through shared memory, one pipeline per warp ---- */

__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

template <int NB> __global__ void v4_kernel(const desc *__restrict__ dd, int n)
{
    constexpr uint32_t S = 8192;
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) uint64_t bars[32][NB];
    const int warp = threadIdx.x >> 5, per_block = blockDim.x >> 5;
    if ((threadIdx.x & 31) != 0) return;
    unsigned char *buf = smem + (size_t)warp * NB * S;
    for (int s = 0; s < NB; s++)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bars[warp][s])));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    const int nw = gridDim.x * per_block, gw = blockIdx.x * per_block + warp;
    int li = gw, si = gw; /* next segment to load / to store: descriptor and offset */
    uint64_t lo = 0, so = 0;
    auto advance = [&](int &i, uint64_t &off) {
        off += S;
        if (off >= dd[i].bytes) i += nw, off = 0;
    };
    int jl = 0, js = 0;
    auto load = [&](int st) {
        const uint64_t left = dd[li].bytes - lo;
        const uint32_t bytes = left < S ? (uint32_t)left : S;
        const uint32_t bar = smem_addr(&bars[warp][st]);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
                     : "memory");
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
            "%2, [%3];" ::"r"(smem_addr(buf + (size_t)st * S)),
            "l"(__cvta_generic_to_global((const void *)(dd[li].src + lo))), "r"(bytes), "r"(bar)
            : "memory");
        advance(li, lo);
        jl++;
    };
    while (jl < NB && li < n)
        load(jl % NB);
    while (js < jl) {
        const int st = js % NB;
        const uint32_t parity = (uint32_t)(js / NB) & 1, bar = smem_addr(&bars[warp][st]);
        uint32_t done = 0;
        while (!done)
            asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
                         "selp.u32 %0, 1, 0, p; }"
                         : "=r"(done)
                         : "r"(bar), "r"(parity)
                         : "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        const uint64_t left = dd[si].bytes - so;
        const uint32_t bytes = left < S ? (uint32_t)left : S;
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(
                         __cvta_generic_to_global((void *)(dd[si].dst + so))),
                     "r"(smem_addr(buf + (size_t)st * S)), "r"(bytes)
                     : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        advance(si, so);
        js++;
        if (li < n) { /* stage st again: its store must have read shared memory first */
            asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
            load(st);
        }
    }
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

/* ---- the check: every slot equals its source, the 16 bytes on either side are guard ---- */

__global__ void check_kernel(const desc *dd, int n, unsigned long long *bad)
{
    for (int i = blockIdx.x; i < n; i += gridDim.x) {
        const uint4 *s = reinterpret_cast<const uint4 *>(dd[i].src);
        const uint4 *d = reinterpret_cast<const uint4 *>(dd[i].dst);
        const unsigned char *db = reinterpret_cast<const unsigned char *>(dd[i].dst);
        unsigned long long b = 0;
        for (size_t k = threadIdx.x; k < dd[i].bytes / 16; k += blockDim.x) {
            const uint4 x = s[k], y = d[k];
            b += x.x != y.x || x.y != y.y || x.z != y.z || x.w != y.w;
        }
        if (threadIdx.x < 32)
            b += db[threadIdx.x < 16 ? -1 - (long)threadIdx.x
                                     : (long)dd[i].bytes + threadIdx.x - 16] != GUARD;
        if (b) atomicAdd(bad, b);
    }
}

/* ---- the harness ---- */

struct ctx {
    char *h_pool, *d_pool_view, *d_region;
    size_t pool_bytes, region_bytes;
    desc *h_desc, *d_desc, *m_desc; /* host, device, and the device view of h_desc (mapped) */
    unsigned long long *d_bad;
    cudaStream_t st;
    cudaEvent_t e0, e1;
    double peak;
    int failures;
};

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint64_t rnd()
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

/* n distinct random chunk-aligned sources and slots (stride chunk + 256, guard around). */
static void make_descs(ctx &c, size_t chunk, int n)
{
    std::vector<uint32_t> a(c.pool_bytes / chunk), b(c.region_bytes / (chunk + 256));
    for (size_t i = 0; i < a.size(); i++)
        a[i] = (uint32_t)i;
    for (size_t i = 0; i < b.size(); i++)
        b[i] = (uint32_t)i;
    for (int i = 0; i < n; i++) {
        std::swap(a[i], a[i + rnd() % (a.size() - i)]);
        std::swap(b[i], b[i + rnd() % (b.size() - i)]);
        c.h_desc[i] = {(uint64_t)(uintptr_t)(c.d_pool_view + (size_t)a[i] * chunk),
                       (uint64_t)(uintptr_t)(c.d_region + (size_t)b[i] * (chunk + 256) + 128),
                       chunk, 0};
    }
    CK(cudaMemcpy(c.d_desc, c.h_desc, sizeof(desc) * n, cudaMemcpyHostToDevice));
}

enum { V1, V2, V3_4, V3_8, V3_16, V3H, V4_4, V4_8 };
static const char *vname[] = {"v1", "v2", "v3/4", "v3/8", "v3/16", "v3h", "v4/4", "v4/8"};

static void launch(ctx &c, int v, int n, int grid, int threads)
{
    switch (v) {
    case V1:
        v1_kernel<<<grid, threads, 0, c.st>>>(c.m_desc, n);
        break;
    case V2:
        v2_kernel<<<grid, threads, 0, c.st>>>(c.d_desc, n);
        break;
    case V3_4:
        v3_kernel<4><<<grid, threads, 0, c.st>>>(c.d_desc, n);
        break;
    case V3_8:
        v3_kernel<8><<<grid, threads, 0, c.st>>>(c.d_desc, n);
        break;
    case V3_16:
        v3_kernel<16><<<grid, threads, 0, c.st>>>(c.d_desc, n);
        break;
    case V3H:
        v3_kernel<16><<<grid, threads, 0, c.st>>>(c.m_desc, n);
        break;
    case V4_4:
        v4_kernel<4><<<grid, threads, (threads / 32) * 4 * 8192, c.st>>>(c.d_desc, n);
        break;
    case V4_8:
        v4_kernel<8><<<grid, threads, (threads / 32) * 8 * 8192, c.st>>>(c.d_desc, n);
        break;
    }
    CK(cudaGetLastError());
}

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

/* Checks one run, then times 10: GB/s from the median. */
static void measure(ctx &c, int v, size_t chunk, int n, int grid, int threads)
{
    CK(cudaMemsetAsync(c.d_region, GUARD, c.region_bytes, c.st));
    CK(cudaMemsetAsync(c.d_bad, 0, sizeof *c.d_bad, c.st));
    launch(c, v, n, grid, threads);
    check_kernel<<<264, 256, 0, c.st>>>(c.d_desc, n, c.d_bad);
    CK(cudaGetLastError());
    unsigned long long bad = 0;
    CK(cudaMemcpyAsync(&bad, c.d_bad, sizeof bad, cudaMemcpyDeviceToHost, c.st));
    CK(cudaStreamSynchronize(c.st));
    std::vector<double> s;
    for (int r = 0; r < 10; r++) {
        float ms;
        CK(cudaEventRecord(c.e0, c.st));
        launch(c, v, n, grid, threads);
        CK(cudaEventRecord(c.e1, c.st));
        CK(cudaEventSynchronize(c.e1));
        CK(cudaEventElapsedTime(&ms, c.e0, c.e1));
        s.push_back(ms * 1e-3);
    }
    const double gbs = (double)chunk * n / median(s) / 1e9;
    printf("%-6s %6zu B x %-5d grid %3d x %4d: %6.2f GB/s = %.3f of peak (%s)\n", vname[v], chunk,
           n, grid, threads, gbs, gbs / c.peak, bad ? "WRONG DATA" : "ok");
    if (bad) c.failures++;
    fflush(stdout);
}

/* What the engine adds: the descriptors' H2D copy (from pinned memory) before v3/16 at 16 x 512,
 * on device events, and on the host's clock from the copy's call to the end of the sync. */
static void end_to_end(ctx &c, size_t chunk, int n)
{
    std::vector<double> dev, wall, ker;
    for (int r = 0; r < 11; r++) {
        float ms, kms;
        cudaEvent_t mid;
        CK(cudaEventCreate(&mid));
        auto t0 = std::chrono::steady_clock::now();
        CK(cudaEventRecord(c.e0, c.st));
        CK(cudaMemcpyAsync(c.d_desc, c.h_desc, sizeof(desc) * n, cudaMemcpyHostToDevice, c.st));
        CK(cudaEventRecord(mid, c.st));
        launch(c, V3_16, n, 16, 512);
        CK(cudaEventRecord(c.e1, c.st));
        CK(cudaEventSynchronize(c.e1));
        auto t1 = std::chrono::steady_clock::now();
        CK(cudaEventElapsedTime(&ms, c.e0, c.e1));
        CK(cudaEventElapsedTime(&kms, mid, c.e1));
        CK(cudaEventDestroy(mid));
        if (r == 0) continue;
        dev.push_back(ms * 1e-3);
        ker.push_back(kms * 1e-3);
        wall.push_back(std::chrono::duration<double>(t1 - t0).count());
    }
    const double b = (double)chunk * n;
    printf("e2e    %6zu B x %-5d v3/16 16 x 512: descriptor H2D + kernel %6.2f GB/s = %.3f of peak "
           "(H2D %.1f us); host wall from the copy call to the sync %6.2f GB/s = %.3f\n",
           chunk, n, b / median(dev) / 1e9, b / median(dev) / 1e9 / c.peak,
           (median(dev) - median(ker)) * 1e6, b / median(wall) / 1e9,
           b / median(wall) / 1e9 / c.peak);
}

int main(int argc, char **argv)
{
    bool want[9] = {false};
    const char *names[] = {"1", "2", "3", "3h", "4", "e2e"};
    if (argc < 2) want[0] = want[1] = want[2] = want[3] = want[5] = true;
    for (int a = 1; a < argc; a++) {
        bool found = false;
        for (int k = 0; k < 6; k++)
            if (!strcmp(argv[a], names[k])) want[k] = found = true;
        if (!found) {
            fprintf(stderr, "usage: %s [1 2 3 3h 4 e2e]\n", argv[0]);
            return 2;
        }
    }
    ctx c = {};
    c.pool_bytes = (size_t)1 << 30;
    c.region_bytes = (size_t)640 << 20;
    CK(cudaHostAlloc((void **)&c.h_pool, c.pool_bytes, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer((void **)&c.d_pool_view, c.h_pool, 0));
    uint32_t *w = (uint32_t *)c.h_pool;
    for (size_t i = 0; i < c.pool_bytes / 4; i++)
        w[i] = (uint32_t)(i * 2654435761u) | 1;
    CK(cudaMalloc((void **)&c.d_region, c.region_bytes));
    CK(cudaHostAlloc((void **)&c.h_desc, sizeof(desc) * 4096, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer((void **)&c.m_desc, c.h_desc, 0));
    CK(cudaMalloc((void **)&c.d_desc, sizeof(desc) * 4096));
    CK(cudaMalloc((void **)&c.d_bad, sizeof *c.d_bad));
    CK(cudaStreamCreateWithFlags(&c.st, cudaStreamNonBlocking));
    CK(cudaEventCreate(&c.e0));
    CK(cudaEventCreate(&c.e1));
    std::vector<double> s;
    for (int r = 0; r < 6; r++) {
        float ms;
        CK(cudaEventRecord(c.e0, c.st));
        CK(cudaMemcpyAsync(c.d_region, c.h_pool, (size_t)512 << 20, cudaMemcpyHostToDevice, c.st));
        CK(cudaEventRecord(c.e1, c.st));
        CK(cudaEventSynchronize(c.e1));
        CK(cudaEventElapsedTime(&ms, c.e0, c.e1));
        if (r) s.push_back(ms * 1e-3);
    }
    c.peak = (double)((size_t)512 << 20) / median(s) / 1e9;
    printf("single-copy H2D peak (512 MiB): %.2f GB/s\n", c.peak);
    /* v4's stages: up to 192 KB of shared memory per block (6 warps x 4, 3 warps x 8) */
    CK(cudaFuncSetAttribute(v4_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            6 * 4 * 8192));
    CK(cudaFuncSetAttribute(v4_kernel<8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            3 * 8 * 8192));
    const size_t chunks[] = {8192, 65536};
    const int counts[] = {1024, 4096};
    for (size_t chunk : chunks)
        for (int n : counts) {
            make_descs(c, chunk, n);
            if (want[0])
                for (int g : {16, 32})
                    measure(c, V1, chunk, n, g, 512);
            if (want[1])
                for (int g : {8, 16, 32})
                    measure(c, V2, chunk, n, g, 512);
            if (want[2])
                for (int g : {4, 8, 16})
                    for (int t : {256, 512}) {
                        measure(c, V3_16, chunk, n, g, t);
                        measure(c, V3_8, chunk, n, g, t);
                        measure(c, V3_4, chunk, n, g, t);
                    }
            if (want[2])
                for (int g : {8, 16})
                    measure(c, V3_8, chunk, n, g, 1024);
            if (want[3]) measure(c, V3H, chunk, n, 16, 512);
            if (want[5]) end_to_end(c, chunk, n);
        }
    if (want[4]) /* last: a fault here ends the context */
        for (size_t chunk : chunks)
            for (int n : counts) {
                make_descs(c, chunk, n);
                for (int g : {8, 16}) {
                    for (int t : {64, 128, 192})
                        measure(c, V4_4, chunk, n, g, t);
                    for (int t : {64, 96})
                        measure(c, V4_8, chunk, n, g, t);
                }
            }
    printf("%s\n", c.failures ? "FAILED: some version moved wrong data" : "all versions exact");
    return c.failures ? 1 : 0;
}
