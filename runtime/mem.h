/* Allocation wrapper with byte counters per memory kind. Every runtime allocation goes through
 * it, so a test can assert that the counters do not move across decode steps. */
#ifndef PULSE_MEM_H
#define PULSE_MEM_H

#include <stddef.h>
#include <stdint.h>

enum mem_kind { MEM_HOST = 0, MEM_PINNED = 1, MEM_DEVICE = 2, MEM_KINDS = 3 };

struct mem_stats {
    size_t live_bytes[MEM_KINDS]; /* currently allocated */
    size_t peak_bytes[MEM_KINDS];
    size_t alloc_calls[MEM_KINDS]; /* cumulative number of successful allocations */
};

/* Allocates `bytes` of the given kind (pinned and device need the CUDA build). Returns NULL when
 * the allocation is refused (the caller reports it as out of memory). `name` is for messages. */
void *mem_alloc(enum mem_kind kind, size_t bytes, const char *name);
/* Frees what mem_alloc returned; `bytes` must be the size it was allocated with. NULL is a no-op.
 */
void mem_free(enum mem_kind kind, void *p, size_t bytes);
/* A snapshot of the counters. */
void mem_get_stats(struct mem_stats *out);
/* Fault injection for tests: the allocation (mem_alloc or mem_alloc_pinned, any thread) after
 * the next n is refused as if out of memory, once; n < 0 cancels. mem_failures_injected counts
 * the refusals made so far. */
void mem_fail_after(int64_t n);
int64_t mem_failures_injected(void);
const char *mem_kind_name(enum mem_kind kind);

/* Pinned host memory made at hardware speed (DESIGN.md section 10; HARDWARE.md: one
 * cudaHostAlloc pins at about 1.5 GB/s). Strategies:
 *   MEM_PIN_ALLOC     one cudaHostAlloc of the whole size: the driver allocates, zeroes and pins
 *                     it on the calling thread.
 *   MEM_PIN_REGISTER  one anonymous mapping (2 MiB aligned; transparent huge pages asked for),
 *                     split into pieces that `threads` threads fault in (touch) and register
 *                     (cudaHostRegister, portable + mapped), each thread the pieces it touched.
 * Either way the result is ONE contiguous region, counted as ONE MEM_PINNED allocation of its
 * bytes and freed by mem_free(MEM_PINNED, p, bytes); mapped for the device at the same address
 * (unified addressing: REGISTER registers the region in one call when the device cannot use
 * host pointers for registered memory, so the device view stays contiguous). A failed
 * registration undoes the others and falls back to ALLOC (report.fallback). CPU-only builds
 * cannot pin: NULL. */
enum mem_pin_strategy { MEM_PIN_ALLOC = 0, MEM_PIN_REGISTER = 1, MEM_PIN_STRATEGIES = 2 };
#define MEM_NUMA_NEAREST (-2)

struct mem_pin_params {
    enum mem_pin_strategy strategy;
    size_t piece_bytes; /* REGISTER: bytes per registration, rounded up to a multiple of 2 MiB
                           and of piece_align (default 1 GiB) */
    size_t piece_align; /* REGISTER: pieces are a multiple of this too (the pool's block, so that
                           no block straddles two registrations); 0 = none */
    int threads;        /* REGISTER: threads that touch and register (default: online CPUs, at
                           most 16; 0: the same) */
    int hugepages;      /* REGISTER: madvise(MADV_HUGEPAGE) before touching (default 1) */
    int numa_node;      /* REGISTER: the host NUMA node its pages go to (host_numa.h), asked
                           before they are touched; -1 none; MEM_NUMA_NEAREST (the default) the
                           node nearest the device where the host has several */
    /* Optional: called (from any of the threads) after each piece with the bytes done so far. */
    void (*progress)(void *user, size_t bytes_done);
    void *user;
};

struct mem_pin_report {
    enum mem_pin_strategy strategy; /* what made the region (ALLOC after a fallback) */
    int pieces, threads, fallback;  /* fallback: REGISTER failed, ALLOC made it */
    size_t piece_bytes;             /* piece k is bytes [k * piece_bytes, ...) of the region (the
                                       whole region when it is one): a cudaMemcpy should not
                                       cross a piece boundary, or the driver may take it as
                                       pageable */
    double seconds;                 /* wall time of the whole allocation */
    double touch_s, register_s;     /* REGISTER: summed over the threads */
    int numa_asked;                 /* the node its pages were asked on, -1 none */
    int numa_node;                  /* numa_asked where the placement was taken, else -1 (the
                                       reason printed on stderr) */
    double numa_share;              /* of the pages sampled after the touch, the fraction on
                                       numa_asked; -1 when none asked or not known */
};

/* The default strategy is REGISTER (MEM_PIN_DEFAULT); mem_pin_params_default fills the defaults
 * above and reads nothing else (no environment: a run's pinning comes from its command line,
 * experiments/runtime_opts.h). */
#define MEM_PIN_DEFAULT MEM_PIN_REGISTER
void mem_pin_params_default(struct mem_pin_params *p);
const char *mem_pin_strategy_name(enum mem_pin_strategy s);
/* The strategy called `name` ("alloc", "register"), or -1. */
int mem_pin_strategy_find(const char *name);
/* `bytes` of pinned, mapped, portable host memory made as pp says (NULL = the defaults); rep
 * (may be NULL) says how. NULL when refused. */
void *mem_alloc_pinned(size_t bytes, const struct mem_pin_params *pp, struct mem_pin_report *rep,
                       const char *name);

/* One allocation carved into parts: the bytes a part of n takes (256-byte aligned, enough for
 * any vector load), and the next part from a cursor. */
static inline size_t mem_aligned(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

static inline void *mem_carve(char **cur, size_t n)
{
    void *p = *cur;
    *cur += mem_aligned(n);
    return p;
}

#endif
