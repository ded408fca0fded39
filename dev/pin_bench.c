/* Pinning strategies for the host KV pool, timed (runtime/mem.h mem_alloc_pinned; HARDWARE.md:
 * one cudaHostAlloc pins at about 1.5 GB/s). Built by the opt-in target:
 *   cmake -S . -B build-dev -DPULSE_DEV=ON && cmake --build build-dev --target pin_bench
 *   ./build-dev/pin_bench [--gb 32] [--threads N] [--piece-mb 1024[,256,...]] [--reps 1]
 *                         [--strategies touch,alloc,register,register-nohuge,register-1t,
 *                                       alloc-pieces,alloc-pieces-mt]
 * Strategies:
 *   touch            mmap + touch in N threads, not pinned: the host's page-fault rate (and the
 *                    D2H rate from pageable memory, for reference)
 *   alloc            one cudaHostAlloc of the whole size (MEM_PIN_ALLOC, the old pool)
 *   register         mmap (huge pages asked for) + touch and cudaHostRegister per piece in N
 *                    threads (MEM_PIN_REGISTER, the pool's default)
 *   register-nohuge  the same without madvise(MADV_HUGEPAGE)
 *   register-1t      the same on one thread
 *   alloc-pieces     cudaHostAlloc per piece on one thread (NOT contiguous: the pool cannot use
 *                    it as is; measured to see whether the driver's allocation parallelises)
 *   alloc-pieces-mt  the same on N threads
 * Each line: seconds to make the memory, GB/s, seconds to free it, and the D2H rate of a 1 GiB
 * copy into it (pinned memory runs at the PCIe peak, ~55 GB/s; pageable at ~8). The first
 * strategy of a fresh machine may pay first-touch costs of the VM's memory that later ones do
 * not: run each strategy in its own process too (--strategies register) and compare.
 * The pool's default is MEM_PIN_DEFAULT in runtime/mem.h; pulse's --pin alloc|register and
 * --pin-piece-mb / --pin-threads / --pin-hugepages switch a run without a rebuild. */
#include <cuda_runtime_api.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common.h"
#include "cuda_check.h"
#include "mem.h"

#define MAX_PIECES 4096

struct job {
    size_t bytes, piece;
    int n, threads, dev;
    void **ptrs; /* alloc-pieces: one per piece */
    char *base;  /* touch */
    pthread_mutex_t mu;
    int next, failed;
};

static int take(struct job *j)
{
    pthread_mutex_lock(&j->mu);
    int k = j->next < j->n ? j->next++ : -1;
    pthread_mutex_unlock(&j->mu);
    return k;
}

static size_t piece_len(const struct job *j, int k)
{
    size_t off = (size_t)k * j->piece;
    return j->bytes - off < j->piece ? j->bytes - off : j->piece;
}

static void *alloc_worker(void *arg)
{
    struct job *j = arg;
    CUDA_CHECK(cudaSetDevice(j->dev));
    for (int k; (k = take(j)) >= 0;)
        if (cudaHostAlloc(&j->ptrs[k], piece_len(j, k),
                          cudaHostAllocPortable | cudaHostAllocMapped) != cudaSuccess) {
            (void)cudaGetLastError();
            j->ptrs[k] = NULL;
            j->failed = 1;
        }
    return NULL;
}

static void *touch_worker(void *arg)
{
    struct job *j = arg;
    for (int k; (k = take(j)) >= 0;) {
        volatile char *a = j->base + (size_t)k * j->piece;
        for (size_t off = 0; off < piece_len(j, k); off += 4096)
            a[off] = 0;
    }
    return NULL;
}

static void run_threads(struct job *j, void *(*fn)(void *))
{
    pthread_t th[256];
    int started = 0;
    pthread_mutex_init(&j->mu, NULL);
    j->next = 0;
    for (int k = 1; k < j->threads; k++)
        started += pthread_create(&th[started], NULL, fn, j) == 0;
    fn(j);
    for (int k = 0; k < started; k++)
        pthread_join(th[k], NULL);
    pthread_mutex_destroy(&j->mu);
}

/* D2H rate of one 1 GiB copy into host memory h (GB/s). */
static double d2h_rate(void *h, size_t bytes, void *d_src)
{
    const size_t n = bytes < ((size_t)1 << 30) ? bytes : ((size_t)1 << 30);
    cudaEvent_t a, b;
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
    CUDA_CHECK(cudaMemcpy(h, d_src, n, cudaMemcpyDeviceToHost)); /* warm */
    CUDA_CHECK(cudaEventRecord(a, 0));
    CUDA_CHECK(cudaMemcpyAsync(h, d_src, n, cudaMemcpyDeviceToHost, 0));
    CUDA_CHECK(cudaEventRecord(b, 0));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    CUDA_CHECK(cudaEventDestroy(a));
    CUDA_CHECK(cudaEventDestroy(b));
    return n / (ms * 1e6);
}

static void line(const char *name, size_t piece, int threads, size_t bytes, double make_s,
                 double free_s, double d2h, const char *note)
{
    printf("%-16s piece %5zu MiB threads %3d  %6.1f GB in %7.3f s = %6.2f GB/s  free %6.3f s  "
           "D2H %5.1f GB/s  %s\n",
           name, piece >> 20, threads, bytes / 1e9, make_s, bytes / (make_s * 1e9), free_s, d2h,
           note);
    fflush(stdout);
}

static void bench(const char *s, size_t bytes, size_t piece, int threads, void *d_src)
{
    char note[256] = "";
    int dev;
    CUDA_CHECK(cudaGetDevice(&dev));
    if (!strcmp(s, "alloc") || !strncmp(s, "register", 8)) {
        struct mem_pin_params pp;
        mem_pin_params_default(&pp);
        pp.strategy = strcmp(s, "alloc") ? MEM_PIN_REGISTER : MEM_PIN_ALLOC;
        pp.piece_bytes = piece;
        pp.threads = !strcmp(s, "register-1t") ? 1 : threads;
        pp.hugepages = strcmp(s, "register-nohuge") != 0;
        struct mem_pin_report r;
        double t0 = pulse_now();
        char *p = mem_alloc_pinned(bytes, &pp, &r, "pin_bench");
        double make = pulse_now() - t0;
        if (!p) {
            printf("%-16s refused (%zu bytes)\n", s, bytes);
            return;
        }
        void *dp = NULL, *dl = NULL;
        CUDA_CHECK(cudaHostGetDevicePointer(&dp, p, 0));
        CUDA_CHECK(cudaHostGetDevicePointer(&dl, p + bytes - 4096, 0));
        const int same = dp == (void *)p && dl == (void *)(p + bytes - 4096);
        snprintf(note, sizeof note,
                 "made by %s, %d pieces on %d threads%s, touch %.2f s + register %.2f s (thread "
                 "sums), device address %s",
                 mem_pin_strategy_name(r.strategy), r.pieces, r.threads,
                 r.fallback ? " (FALLBACK)" : "", r.touch_s, r.register_s,
                 same ? "= host address" : "DIFFERS");
        double d2h = d2h_rate(p, bytes, d_src);
        t0 = pulse_now();
        mem_free(MEM_PINNED, p, bytes);
        line(s, r.strategy == MEM_PIN_ALLOC ? bytes : piece, r.threads, bytes, make,
             pulse_now() - t0, d2h, note);
        return;
    }
    struct job j;
    memset(&j, 0, sizeof j);
    j.bytes = bytes, j.piece = piece, j.dev = dev;
    j.n = (int)((bytes + piece - 1) / piece);
    j.threads = !strcmp(s, "alloc-pieces") ? 1 : threads;
    if (!strcmp(s, "touch")) {
        double t0 = pulse_now();
        void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            printf("touch: mmap refused\n");
            return;
        }
        j.base = m;
        run_threads(&j, touch_worker);
        double make = pulse_now() - t0, d2h = d2h_rate(m, bytes, d_src);
        t0 = pulse_now();
        munmap(m, bytes);
        line(s, piece, j.threads, bytes, make, pulse_now() - t0, d2h, "pageable (not pinned)");
        return;
    }
    if (j.n > MAX_PIECES) {
        printf("%s: more than %d pieces\n", s, MAX_PIECES);
        return;
    }
    void *ptrs[MAX_PIECES];
    j.ptrs = ptrs;
    double t0 = pulse_now();
    run_threads(&j, alloc_worker);
    double make = pulse_now() - t0, d2h = j.failed ? 0 : d2h_rate(ptrs[0], piece_len(&j, 0), d_src);
    t0 = pulse_now();
    for (int k = 0; k < j.n; k++)
        if (ptrs[k]) CUDA_CHECK(cudaFreeHost(ptrs[k]));
    snprintf(note, sizeof note, "%d separate allocations (not contiguous)%s", j.n,
             j.failed ? ", SOME REFUSED" : "");
    line(s, piece, j.threads, bytes, make, pulse_now() - t0, d2h, note);
}

int main(int argc, char **argv)
{
    double gb = 32;
    int reps = 1;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = cpus < 16 ? (int)cpus : 16;
    const char *pieces = "1024";
    const char *strategies =
        "touch,alloc,register,register-nohuge,register-1t,alloc-pieces,alloc-pieces-mt";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "pin_bench: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--gb"))
            gb = atof(v);
        else if (!strcmp(a, "--threads"))
            threads = atoi(v);
        else if (!strcmp(a, "--piece-mb"))
            pieces = v;
        else if (!strcmp(a, "--reps"))
            reps = atoi(v);
        else if (!strcmp(a, "--strategies"))
            strategies = v;
        else {
            fprintf(stderr, "pin_bench: unknown option %s\n", a);
            return 2;
        }
        i++;
    }
    if (!(gb > 0) || threads < 1 || threads > 256 || reps < 1) {
        fprintf(stderr, "pin_bench: --gb > 0, --threads 1..256, --reps >= 1\n");
        return 2;
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "pin_bench: no GPU\n");
        return 77;
    }
    const size_t bytes = (size_t)(gb * 1e9);
    void *d_src;
    CUDA_CHECK(cudaMalloc(&d_src, (size_t)1 << 30));
    CUDA_CHECK(cudaMemset(d_src, 1, (size_t)1 << 30));
    int can = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&can, cudaDevAttrCanUseHostPointerForRegisteredMem, 0));
    FILE *thp = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    char thp_mode[128] = "unknown";
    if (thp) {
        if (!fgets(thp_mode, sizeof thp_mode, thp)) snprintf(thp_mode, sizeof thp_mode, "?");
        thp_mode[strcspn(thp_mode, "\n")] = 0;
        fclose(thp);
    }
    printf("pin_bench: %.1f GB, %d threads (%ld CPUs), pieces %s MiB, %d reps; "
           "canUseHostPointerForRegisteredMem %d; transparent huge pages: %s; pool default: %s\n",
           gb, threads, cpus, pieces, reps, can, thp_mode, mem_pin_strategy_name(MEM_PIN_DEFAULT));
    for (int r = 0; r < reps; r++) {
        char list[512];
        snprintf(list, sizeof list, "%s", strategies);
        for (char *sv, *s = strtok_r(list, ",", &sv); s; s = strtok_r(NULL, ",", &sv)) {
            char plist[256];
            snprintf(plist, sizeof plist, "%s", pieces);
            for (char *pv, *p = strtok_r(plist, ",", &pv); p; p = strtok_r(NULL, ",", &pv)) {
                bench(s, bytes, (size_t)atol(p) << 20, threads, d_src);
                if (!strcmp(s, "alloc")) break; /* one cudaHostAlloc has no piece size */
            }
        }
    }
    CUDA_CHECK(cudaFree(d_src));
    return 0;
}
