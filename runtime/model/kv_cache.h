/* The paged KV cache on the backend (GPU for cuda).
 *
 *   pool       n_pages pages of page_elems bf16 each; a page is one block of page_size tokens of
 *              one layer, laid out [kv_head][K=0,V=1][token][head_dim] (kernels.h), so a page is
 *              one contiguous chunk and each head's K+V of a block is one contiguous piece.
 *   page table per request slot and layer, the ids of its pages in token order:
 *              page_ids[(slot * n_layers + layer) * max_pages + i], mirrored host -> backend.
 *              A batch's view of layer l is CSR-like: entry b starts at
 *              kv_cache_row(slot_b, l) in page_ids and holds ceil(n_tokens_b / page_size) ids;
 *              the last page holds n_tokens_b - (pages-1)*page_size tokens.
 *   free list  a stack of free page ids (host).
 *
 * A request reserves the pages of its whole length (prompt + output) in every layer at
 * admission, so the decode step never allocates and a page table row never changes while the
 * request runs. Budget: n_pages = budget_bytes / page_bytes.
 *
 * Ownership is kept apart from the page table: each (slot, layer) owns a list of pages (at
 * most max_pages + 1). A normal admission owns exactly the pages its rows map, in token order.
 * An offload admission (kv_cache_admit_mapped) says per layer how its blocks map (enum
 * kv_map): in order as a normal admission; onto a ring of a few pages (a sliding-window
 * layer keeps only its window: block i on owned page i mod n); or onto the LAST of a fixed
 * number of pages whatever the request's length (a sparse layer: the offload policy uses
 * them as hot-cache slots and the last as the tail page the decode step appends into,
 * engine.h). */
#ifndef PULSE_KV_CACHE_H
#define PULSE_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

struct kv_cache_params {
    int n_layers, n_kv_heads, head_dim;
    int page_size;       /* tokens per page (block), >= 1 */
    size_t budget_bytes; /* pool bytes on the backend */
    int max_requests;    /* concurrent request slots */
    int max_tokens;      /* longest request (prompt + output) a slot can hold */
};

struct kv_cache_stats {
    int64_t n_pages, free_pages, page_bytes;
    int active_requests, max_requests;
    int64_t admits, releases, admit_refusals;
};

struct kv_cache;

/* Creates the cache and allocates its pool and page tables on `be`. Returns NULL and writes a
 * one-line reason into err when the params are invalid or the backend refuses the memory. */
struct kv_cache *kv_cache_create(const struct kv_cache_params *p, const struct backend *be,
                                 const struct kctx *ctx, char *err, size_t errlen);
void kv_cache_free(struct kv_cache *kv);

/* Pages one layer of an n_tokens request needs; bytes of one page. */
int64_t kv_cache_pages_for(const struct kv_cache *kv, int n_tokens);
size_t kv_cache_page_bytes(const struct kv_cache *kv);
/* Tokens per page. */
int kv_cache_page_size(const struct kv_cache *kv);
/* Bytes a request of n_tokens reserves (all layers); the same from the params alone, so a
 * driver can size a pool before creating it. */
size_t kv_cache_request_bytes(const struct kv_cache *kv, int n_tokens);
size_t kv_cache_params_request_bytes(const struct kv_cache_params *p, int n_tokens);

/* Reserves a slot and the pages for n_tokens in every layer, uploads the slot's page table.
 * PULSE_OK and *slot on success; PULSE_ERR_NOMEM when pages or slots are short right now;
 * PULSE_ERR_INVALID when n_tokens can never fit (over max_tokens or the whole pool). */
int kv_cache_admit(struct kv_cache *kv, int n_tokens, int *slot);
/* How an admission maps one layer's ceil(n_tokens / page_size) blocks to the pages it owns. */
enum kv_map {
    KV_MAP_ALL = 0,  /* a page per block, block i on page i (kv_cache_admit's) */
    KV_MAP_RING = 1, /* min(pages, blocks) pages, block i on page i mod that: holds the last
                        `pages` blocks (a sliding window of at most (pages - 1) * page_size + 1
                        tokens stays intact while appends overwrite older blocks) */
    KV_MAP_TAIL = 2  /* `pages` pages, every block on the last */
};
struct kv_layer_map {
    int map;   /* enum kv_map */
    int pages; /* KV_MAP_RING and KV_MAP_TAIL: 1 .. max_pages + 1; unused for KV_MAP_ALL */
};

/* Admission with a map per layer (maps[n_layers]). Statuses as kv_cache_admit
 * (PULSE_ERR_INVALID also for a map or page count out of range). */
int kv_cache_admit_mapped(struct kv_cache *kv, int n_tokens, const struct kv_layer_map *maps,
                          int *slot);
/* Pages a mapped admission of n_tokens needs (all layers), from the params alone. */
int64_t kv_cache_params_mapped_pages(const struct kv_cache_params *p, int n_tokens,
                                     const struct kv_layer_map *maps);
/* Tokens a slot reserved at admission (0: a free slot). */
int kv_cache_slot_tokens(const struct kv_cache *kv, int slot);
/* The pages (slot, layer) owns, in reservation order; their count in *n (0 for a free slot). */
const int32_t *kv_cache_owned_pages(const struct kv_cache *kv, int slot, int layer, int *n);
/* Returns the slot's pages to the free list. */
void kv_cache_release(struct kv_cache *kv, int slot);

/* Offset of (slot, layer)'s first page id in the page table. */
int32_t kv_cache_row(const struct kv_cache *kv, int slot, int layer);
/* A view of the pool for kernels; page_start is a backend array the caller owns. */
struct kv_view kv_cache_view(const struct kv_cache *kv, const int32_t *page_start);
/* The host mirror of the page table (read-only; for tests and the CPU side). */
const int32_t *kv_cache_host_page_ids(const struct kv_cache *kv);

/* Verifies the invariants: every page is free or owned by exactly one (slot, layer);
 * free count + owned = n_pages; free slots own nothing; each row maps its blocks as the layer's
 * kv_map says (KV_MAP_ALL: exactly its owned pages in token order; KV_MAP_RING: block i on owned
 * page i mod n; KV_MAP_TAIL: every block on the last);
 * rows are -1 past the request's blocks; the backend copy of every active slot's table equals
 * the host mirror. Returns 0, or -1 with a reason in err. */
int kv_cache_check(const struct kv_cache *kv, char *err, size_t errlen);
void kv_cache_get_stats(const struct kv_cache *kv, struct kv_cache_stats *out);

#endif
