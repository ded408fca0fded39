/* The pinned host KV pool: every block of every offloaded request lives here (DESIGN.md section
 * 4), allocated and pinned once at create (one cudaHostAlloc pins at about 1.5 GB/s; the pool
 * pins in pieces on several threads, mem.h's mem_alloc_pinned, so a process pins its pool once
 * and reuses it; the seconds spent and how are in the stats, and a progress line shows on a
 * terminal while it runs).
 *
 *   block      n_kv_heads * 2 * page_size * head_dim * elem_bytes bytes, the layout of a GPU
 *              page (kernels.h): [kv_head][K=0,V=1][token][head_dim]. A token-wise recall of a
 *              block (all heads, K and V) is one contiguous chunk (64 KB for qwen3-14b); the
 *              head-wise piece of head h is one contiguous chunk of head_bytes at h * head_bytes
 *              inside it (8 KB for qwen3-14b).
 *   pool       n_blocks = pool_bytes / block_bytes blocks, block id i at base + i * block_bytes.
 *   table      per request slot and layer, the ids of its blocks in token order:
 *              ids[(slot * n_layers + layer) * max_blocks + i]; -1 past the request's length.
 *   free list  a stack of free block ids.
 *
 * A request reserves the blocks of its whole length in every layer at once (as kv_cache_admit
 * does), so addressing never fails while it runs. Memory: MEM_PINNED (mapped, portable: usable
 * by DMA and by zero-copy kernels) when params.pinned and the build has CUDA, else MEM_HOST.
 * Not thread-safe: one thread reserves and releases; any thread may read block memory. */
#ifndef PULSE_HOST_POOL_H
#define PULSE_HOST_POOL_H

#include <stddef.h>
#include <stdint.h>

struct host_pool_params {
    int n_layers, n_kv_heads, head_dim;
    int page_size;     /* tokens per block, >= 1 */
    int elem_bytes;    /* bytes per element (2 for bf16) */
    size_t pool_bytes; /* budget; the pool holds floor(pool_bytes / block_bytes) blocks */
    int max_requests;  /* concurrent offloaded requests (slots) */
    int max_tokens;    /* longest request a slot can hold */
    int pinned;        /* 1: pin (MEM_PINNED; create fails when refused); 0: MEM_HOST */
};

struct host_pool_stats {
    int64_t n_blocks, free_blocks;
    size_t block_bytes, head_bytes, pool_bytes; /* pool_bytes = n_blocks * block_bytes */
    int pinned;                                 /* 1 when the pool is MEM_PINNED */
    int pin_reused;                             /* 1: the region host_pool_keep kept */
    double pin_seconds;                         /* wall time of the pool allocation */
    const char *pin_strategy;                   /* mem_pin_strategy_name, "" when not pinned */
    int pin_pieces, pin_threads, pin_fallback;  /* mem_pin_report's */
    size_t pin_piece_bytes; /* registered pieces (whole blocks): a copy should not cross one */
    double pin_touch_s, pin_register_s;
    int pin_numa_asked, pin_numa_node; /* the NUMA node asked and the one placed on (mem.h) */
    double pin_numa_share;             /* the fraction of sampled pages on the asked one */
    int active_requests, max_requests;
    int64_t reserves, releases, refusals;
};

struct host_pool;

/* What a pool of params p takes, computed without allocating (host_pool_create's arithmetic):
 * the blocks it holds, the pool's and its tables' bytes (the tables: ids [max_requests]
 * [n_layers][max_blocks] at 0, the free stack at o_free, tokens at o_tok, marks at o_mark), all
 * in 64 bits, so a pool of hundreds of GB (a large host beside one GPU) is planned as a small
 * one is. */
struct host_pool_plan {
    size_t head_bytes, block_bytes, pool_bytes, tables_bytes;
    int64_t n_blocks, max_blocks;
    size_t rows, o_free, o_tok, o_mark;
};
/* PULSE_OK, or PULSE_ERR_INVALID with a one-line reason (bad params; more blocks than int32
 * ids address, or none). */
int host_pool_plan(const struct host_pool_params *p, struct host_pool_plan *out, char *err,
                   size_t errlen);

/* Allocates the pool and its tables. Returns NULL with a one-line reason in err when the params
 * are invalid or the memory is refused. In CPU-only builds `pinned` falls back to MEM_HOST. */
struct host_pool *host_pool_create(const struct host_pool_params *p, char *err, size_t errlen);
/* The same with the pinning spelled out (NULL = mem_pin_params_default). */
struct mem_pin_params;
struct host_pool *host_pool_create_ex(const struct host_pool_params *p,
                                      const struct mem_pin_params *pin, char *err, size_t errlen);
/* Frees the pool (NULL is a no-op). No recall may still be reading it. */
void host_pool_free(struct host_pool *hp);
/* on: a freed pool's memory region is kept (one at a time) for the next pool of this process
 * of the same kind and block size that fits in it, which then takes it instead of allocating
 * and pinning again (pinning tens of GB takes seconds to a minute: a sweep or a figure driver
 * pins once); its stats say pin_reused. off: the kept region is freed. Call it outside any run
 * (pulse sweep and pulse reproduce turn it on for their points and off at the end). */
void host_pool_keep(int on);

/* Bytes of one block (all heads, K and V) and of one head's piece of a block. */
size_t host_pool_block_bytes(const struct host_pool *hp);
size_t host_pool_head_bytes(const struct host_pool *hp);
/* Blocks one layer of an n_tokens request needs (ceil(n_tokens / page_size)). */
int64_t host_pool_blocks_for(const struct host_pool *hp, int n_tokens);

/* Reserves a slot and the blocks of n_tokens in every layer. PULSE_OK and *slot on success;
 * PULSE_ERR_NOMEM when blocks or slots are short now; PULSE_ERR_INVALID when n_tokens < 1,
 * n_tokens > max_tokens or the request can never fit in the pool. */
int host_pool_reserve(struct host_pool *hp, int n_tokens, int *slot);
/* Returns the slot's blocks to the free list. slot must be reserved. */
void host_pool_release(struct host_pool *hp, int slot);

/* The id of block `block` of (slot, layer), or -1 when out of the slot's reserved range. */
int64_t host_pool_block_id(const struct host_pool *hp, int slot, int layer, int block);
/* The host chunk of block `block` of (slot, layer): block_bytes long. The slot must be reserved
 * and block < host_pool_blocks_for(its length) (checked: aborts otherwise). */
void *host_pool_block(const struct host_pool *hp, int slot, int layer, int block);
/* The head-wise chunk of that block: head_bytes long, at head * head_bytes inside it. */
void *host_pool_head(const struct host_pool *hp, int slot, int layer, int block, int head);
/* Block memory by id (0 <= id < n_blocks), for benchmarks that address the pool directly. */
void *host_pool_block_at(const struct host_pool *hp, int64_t id);
/* The whole pool: base pointer and n_blocks * block_bytes bytes. */
void *host_pool_base(const struct host_pool *hp);
size_t host_pool_bytes(const struct host_pool *hp);

/* Verifies: every block is free or owned by exactly one (slot, layer, index); free + owned =
 * n_blocks; free slots own nothing; a reserved slot's rows hold exactly blocks_for(length) ids
 * then -1; counters agree. Returns 0, or -1 with a reason in err. */
int host_pool_check(const struct host_pool *hp, char *err, size_t errlen);
void host_pool_get_stats(const struct host_pool *hp, struct host_pool_stats *out);

#endif
