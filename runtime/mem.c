#include "mem.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common.h"
#include "host_numa.h"

#ifdef PULSE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static _Atomic size_t live[MEM_KINDS], peak[MEM_KINDS], calls[MEM_KINDS];

static void count(enum mem_kind kind, size_t bytes)
{
    size_t now = atomic_fetch_add(&live[kind], bytes) + bytes;
    size_t p = atomic_load(&peak[kind]);
    while (now > p && !atomic_compare_exchange_weak(&peak[kind], &p, now)) {
    }
    atomic_fetch_add(&calls[kind], 1);
}

/* mem_fail_after: allocations left before the one refused (-1: none), and the refusals made */
static _Atomic int64_t fail_countdown = -1, failures_injected;

void mem_fail_after(int64_t n)
{
    atomic_store(&fail_countdown, n < 0 ? -1 : n);
}

int64_t mem_failures_injected(void)
{
    return atomic_load(&failures_injected);
}

/* 1 when this allocation is the one mem_fail_after asked to refuse. */
static int refuse(void)
{
    int64_t n = atomic_load(&fail_countdown);
    while (n >= 0 && !atomic_compare_exchange_weak(&fail_countdown, &n, n - 1)) {
    }
    if (n != 0) return 0;
    atomic_fetch_add(&failures_injected, 1);
    return 1;
}

void *mem_alloc(enum mem_kind kind, size_t bytes, const char *name)
{
    (void)name;
    void *p = NULL;
    if (bytes == 0) bytes = 1;
    if (refuse()) return NULL;
    switch (kind) {
    case MEM_HOST:
        if (posix_memalign(&p, 64, bytes) != 0) p = NULL;
        break;
#ifdef PULSE_HAVE_CUDA
    case MEM_PINNED:
        if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped) != cudaSuccess) {
            (void)cudaGetLastError();
            p = NULL;
        }
        break;
    case MEM_DEVICE:
        if (cudaMalloc(&p, bytes) != cudaSuccess) {
            (void)cudaGetLastError(); /* clear the sticky-free error so later calls work */
            p = NULL;
        }
        break;
#endif
    default:
        p = NULL;
    }
    if (p) count(kind, bytes);
    return p;
}

/* ================================================================== pinning */

#define PIN_ALIGN ((size_t)2 << 20) /* huge page */
#define PIN_MAX_THREADS 16
#define PIN_MAX_REGIONS 64

static const char *const pin_names[MEM_PIN_STRATEGIES] = {"alloc", "register"};

const char *mem_pin_strategy_name(enum mem_pin_strategy s)
{
    return (unsigned)s < MEM_PIN_STRATEGIES ? pin_names[s] : "?";
}

int mem_pin_strategy_find(const char *name)
{
    for (int i = 0; i < MEM_PIN_STRATEGIES; i++)
        if (name && !strcmp(name, pin_names[i])) return i;
    return -1;
}

/* REGISTER's threads when none are asked for: the online CPUs, at most PIN_MAX_THREADS. */
static int pin_default_threads(void)
{
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return (int)PULSE_MIN(PULSE_MAX(cpus, 1), PIN_MAX_THREADS);
}

void mem_pin_params_default(struct mem_pin_params *p)
{
    memset(p, 0, sizeof *p);
    p->strategy = MEM_PIN_DEFAULT;
    p->piece_bytes = (size_t)1 << 30;
    p->threads = pin_default_threads();
    p->hugepages = 1;
    p->numa_node = MEM_NUMA_NEAREST;
}

#ifdef PULSE_HAVE_CUDA

/* Regions made by REGISTER (mem_free must unregister and unmap them, not cudaFreeHost). */
struct pin_region {
    char *base;
    size_t bytes, piece; /* registered length; piece = bytes when registered in one call */
    void *map;
    size_t map_bytes;
};
static struct pin_region g_regions[PIN_MAX_REGIONS];
static pthread_mutex_t g_regions_lock = PTHREAD_MUTEX_INITIALIZER;

static void unregister_pieces(char *base, size_t bytes, size_t piece, const uint8_t *done)
{
    for (size_t k = 0, off = 0; off < bytes; k++, off += piece)
        if (!done || done[k]) {
            cudaHostUnregister(base + off);
            (void)cudaGetLastError();
        }
}

/* Unregistering a region's pieces, on several threads (unpinning costs about what pinning
 * does, minus the zeroing). */
struct unpin_job {
    struct pin_region r;
    pthread_mutex_t mu;
    size_t next; /* offset of the next piece */
    int dev;
};

static void *unpin_worker(void *arg)
{
    struct unpin_job *j = arg;
    if (cudaSetDevice(j->dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL; /* the others take its pieces */
    }
    for (;;) {
        pthread_mutex_lock(&j->mu);
        const size_t off = j->next;
        j->next += j->r.piece;
        pthread_mutex_unlock(&j->mu);
        if (off >= j->r.bytes) return NULL;
        cudaHostUnregister(j->r.base + off);
        (void)cudaGetLastError();
    }
}

static void unpin_region(const struct pin_region *r)
{
    struct unpin_job j = {*r, PTHREAD_MUTEX_INITIALIZER, 0, 0};
    if (cudaGetDevice(&j.dev) != cudaSuccess) (void)cudaGetLastError();
    const size_t pieces = (r->bytes + r->piece - 1) / r->piece;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int T = (int)PULSE_MIN(PULSE_MIN(PULSE_MAX(cpus, 1), PIN_MAX_THREADS), (long)pieces);
    pthread_t th[PIN_MAX_THREADS];
    int started = 0;
    for (int k = 1; k < T; k++)
        started += pthread_create(&th[started], NULL, unpin_worker, &j) == 0;
    unpin_worker(&j);
    for (int k = 0; k < started; k++)
        pthread_join(th[k], NULL);
    pthread_mutex_destroy(&j.mu);
}

static void pinned_free(void *p)
{
    struct pin_region r = {0};
    pthread_mutex_lock(&g_regions_lock);
    for (int i = 0; i < PIN_MAX_REGIONS && !r.base; i++)
        if (g_regions[i].base == p) r = g_regions[i], memset(&g_regions[i], 0, sizeof r);
    pthread_mutex_unlock(&g_regions_lock);
    if (!r.base) {
        cudaFreeHost(p);
        return;
    }
    unpin_region(&r);
    munmap(r.map, r.map_bytes);
}

static int remember_region(const struct pin_region *r)
{
    int ok = 0;
    pthread_mutex_lock(&g_regions_lock);
    for (int i = 0; i < PIN_MAX_REGIONS && !ok; i++)
        if (!g_regions[i].base) g_regions[i] = *r, ok = 1;
    pthread_mutex_unlock(&g_regions_lock);
    return ok;
}

/* MemAvailable of /proc/meminfo in bytes, or 0 when unknown. */
static size_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (size_t)kb << 10;
}

static size_t gcd_size(size_t a, size_t b)
{
    while (b) {
        size_t t = a % b;
        a = b, b = t;
    }
    return a;
}

/* The unit pieces are a multiple of: lcm(huge page, align); 0 when that is absurdly large
 * (then the region is one piece). */
static size_t pin_unit(size_t align)
{
    if (!align) return PIN_ALIGN;
    const size_t g = gcd_size(PIN_ALIGN, align), m = PIN_ALIGN / g;
    return align > ((size_t)16 << 30) / m ? 0 : align * m;
}

/* One REGISTER allocation in progress: its pieces are taken in order by the threads. */
struct pin_job {
    char *base;
    size_t bytes, piece;
    int n_pieces, dev, whole; /* whole: touch only; the caller registers the region at once */
    const struct mem_pin_params *pp;
    uint8_t *registered; /* [n_pieces] */
    pthread_mutex_t mu;
    int next, failed;
    size_t done;
    double touch_s, register_s;
};

static void *pin_worker(void *arg)
{
    struct pin_job *j = arg;
    if (cudaSetDevice(j->dev) != cudaSuccess) { /* the thread cannot work: leave it to others */
        (void)cudaGetLastError();
        return NULL;
    }
    for (;;) {
        pthread_mutex_lock(&j->mu);
        const int k = j->failed || j->next >= j->n_pieces ? -1 : j->next++;
        pthread_mutex_unlock(&j->mu);
        if (k < 0) return NULL;
        char *a = j->base + (size_t)k * j->piece;
        const size_t len = PULSE_MIN(j->piece, j->bytes - (size_t)k * j->piece);
        const double t0 = pulse_now();
        for (size_t off = 0; off < len; off += 4096) /* fault every page in */
            ((volatile char *)a)[off] = 0;
        const double t1 = pulse_now();
        int ok = 1;
        if (!j->whole) {
            ok = cudaHostRegister(a, len, cudaHostRegisterPortable | cudaHostRegisterMapped) ==
                 cudaSuccess;
            if (!ok) (void)cudaGetLastError();
            j->registered[k] = (uint8_t)ok;
        }
        const double t2 = pulse_now();
        pthread_mutex_lock(&j->mu);
        j->touch_s += t1 - t0, j->register_s += t2 - t1;
        j->failed |= !ok;
        const size_t done = j->done += len;
        pthread_mutex_unlock(&j->mu);
        if (ok && j->pp->progress) j->pp->progress(j->pp->user, done);
    }
}

/* The node a REGISTER region's pages go to: `asked`, or for MEM_NUMA_NEAREST the host node
 * nearest device dev where the host has several (-1: none). */
static int pin_numa_node(int asked, int dev)
{
    if (asked != MEM_NUMA_NEAREST) return asked;
    int id = -1;
    if (host_numa_nodes() < 2 ||
        cudaDeviceGetAttribute(&id, cudaDevAttrHostNumaId, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    return id;
}

/* REGISTER (mem.h); NULL when any step fails (everything undone). */
static void *pin_register(size_t bytes, const struct mem_pin_params *pp, struct mem_pin_report *r)
{
    const size_t len = (bytes + PIN_ALIGN - 1) / PIN_ALIGN * PIN_ALIGN;
    const size_t avail = mem_available();
    if (avail && len > avail) return NULL; /* touching would wake the OOM killer: let ALLOC fail */
    struct pin_job j;
    memset(&j, 0, sizeof j);
    j.pp = pp;
    j.bytes = len;
    const size_t unit = pin_unit(pp->piece_align);
    const size_t want = pp->piece_bytes ? pp->piece_bytes : (size_t)1 << 30;
    j.piece = unit ? PULSE_MAX(unit, (want + unit - 1) / unit * unit) : len;
    j.piece = PULSE_MIN(j.piece, len);
    j.n_pieces = (int)((len + j.piece - 1) / j.piece);
    int can = 0;
    if (cudaGetDevice(&j.dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&can, cudaDevAttrCanUseHostPointerForRegisteredMem, j.dev) !=
            cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    j.whole = !can; /* pieces would not be contiguous for the device: one registration */
    const size_t map_bytes = len + PIN_ALIGN;
    void *map = mmap(NULL, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) return NULL;
    j.base = (char *)(((uintptr_t)map + PIN_ALIGN - 1) / PIN_ALIGN * PIN_ALIGN);
    if (pp->hugepages) madvise(j.base, len, MADV_HUGEPAGE); /* advisory: ignore a refusal */
    r->numa_asked = pin_numa_node(pp->numa_node, j.dev);
    char why[160];
    if (r->numa_asked >= 0 && host_numa_place(j.base, len, r->numa_asked, why, sizeof why) == 0)
        r->numa_node = r->numa_asked;
    else if (r->numa_asked >= 0) /* advisory too: the pool works from any node, more slowly */
        fprintf(stderr, "pin: pages left where the kernel puts them (%s)\n", why);
    madvise(j.base, len, MADV_DONTFORK); /* a child (popen) must not share pinned pages COW */
    j.registered = calloc((size_t)j.n_pieces, 1);
    int T = pp->threads > 0 ? pp->threads : pin_default_threads();
    T = PULSE_MIN(PULSE_MIN(T, j.n_pieces), 256);
    pthread_t th[256];
    int started = 0;
    if (j.registered) {
        pthread_mutex_init(&j.mu, NULL);
        for (int k = 1; k < T; k++)
            started += pthread_create(&th[started], NULL, pin_worker, &j) == 0;
        pin_worker(&j);
        for (int k = 0; k < started; k++)
            pthread_join(th[k], NULL);
        pthread_mutex_destroy(&j.mu);
    }
    int ok = j.registered && !j.failed && j.done == len;
    if (ok && j.whole) {
        const double t0 = pulse_now();
        ok = cudaHostRegister(j.base, len, cudaHostRegisterPortable | cudaHostRegisterMapped) ==
             cudaSuccess;
        if (!ok) (void)cudaGetLastError();
        j.register_s += pulse_now() - t0;
    }
    struct pin_region reg = {j.base, len, j.whole ? len : j.piece, map, map_bytes};
    if (ok && !remember_region(&reg)) {
        unregister_pieces(j.base, len, reg.piece, NULL);
        ok = 0;
    } else if (!ok && j.registered && !j.whole) {
        unregister_pieces(j.base, len, j.piece, j.registered);
    }
    free(j.registered);
    if (!ok) {
        munmap(map, map_bytes);
        return NULL;
    }
    r->pieces = j.whole ? 1 : j.n_pieces;
    r->piece_bytes = j.whole ? len : j.piece;
    r->threads = started + 1;
    r->touch_s = j.touch_s, r->register_s = j.register_s;
    if (r->numa_asked >= 0) r->numa_share = host_numa_share(j.base, len, r->numa_asked, 256);
    return j.base;
}

#endif

void *mem_alloc_pinned(size_t bytes, const struct mem_pin_params *pp, struct mem_pin_report *rep,
                       const char *name)
{
    (void)name;
    struct mem_pin_params d;
    if (!pp) mem_pin_params_default(&d), pp = &d;
    struct mem_pin_report r;
    memset(&r, 0, sizeof r);
    r.numa_asked = r.numa_node = -1, r.numa_share = -1.0;
    const double t0 = pulse_now();
    void *p = NULL;
    if (bytes == 0) bytes = 1;
    if (refuse()) {
        if (rep) *rep = r;
        return NULL;
    }
#ifdef PULSE_HAVE_CUDA
    r.strategy = pp->strategy;
    if (pp->strategy == MEM_PIN_REGISTER) {
        p = pin_register(bytes, pp, &r);
        r.fallback = !p;
    }
    if (!p) {
        r.strategy = MEM_PIN_ALLOC, r.pieces = 1, r.threads = 1, r.piece_bytes = bytes;
        r.numa_asked = r.numa_node = -1, r.numa_share = -1.0; /* the driver places it */
        if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped) != cudaSuccess) {
            (void)cudaGetLastError();
            p = NULL;
        }
    }
#endif
    r.seconds = pulse_now() - t0;
    if (p) count(MEM_PINNED, bytes);
    if (rep) *rep = r;
    return p;
}

void mem_free(enum mem_kind kind, void *p, size_t bytes)
{
    if (!p) return;
    if (bytes == 0) bytes = 1;
    switch (kind) {
    case MEM_HOST:
        free(p);
        break;
#ifdef PULSE_HAVE_CUDA
    case MEM_PINNED:
        pinned_free(p);
        break;
    case MEM_DEVICE:
        cudaFree(p);
        break;
#endif
    default:
        return;
    }
    atomic_fetch_sub(&live[kind], bytes);
}

void mem_get_stats(struct mem_stats *out)
{
    for (int k = 0; k < MEM_KINDS; k++) {
        out->live_bytes[k] = atomic_load(&live[k]);
        out->peak_bytes[k] = atomic_load(&peak[k]);
        out->alloc_calls[k] = atomic_load(&calls[k]);
    }
}

const char *mem_kind_name(enum mem_kind kind)
{
    static const char *names[MEM_KINDS] = {"host", "pinned", "device"};
    return (unsigned)kind < MEM_KINDS ? names[kind] : "?";
}
