/* Allocation wrapper with byte counters per memory kind. Every runtime allocation goes through
 * it, so a test can assert that the counters do not move across decode steps. */
#ifndef PULSE_MEM_H
#define PULSE_MEM_H

#include <stddef.h>

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
const char *mem_kind_name(enum mem_kind kind);

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
