#include "kv_cache.h"

#include <stdarg.h>
#include <string.h>

#include "common.h"

struct kv_cache {
    struct kv_cache_params p;
    const struct backend *be;
    const struct kctx *ctx;
    int64_t n_pages, max_pages; /* pool pages; page-table row length */
    size_t page_elems;
    uint16_t *pool;      /* backend */
    int32_t *d_page_ids; /* backend page table */
    int32_t *h_page_ids; /* host mirror */
    size_t table_bytes;
    int32_t *free_pages; /* host stack */
    int64_t n_free;
    int32_t *slot_tokens; /* reserved tokens per slot; 0 = free slot */
    uint8_t *slot_map;    /* [max_requests][n_layers] enum kv_map of each (slot, layer) */
    int32_t *owned;       /* [max_requests][n_layers][max_owned] pages each (slot, layer) owns */
    int32_t *n_owned;     /* [max_requests][n_layers] */
    int64_t max_owned;    /* max_pages + 1 */
    size_t owned_bytes;
    struct kv_cache_stats st;
};

static void fmt(char *err, size_t len, const char *f, ...)
{
    if (!err || !len) return;
    va_list ap;
    va_start(ap, f);
    vsnprintf(err, len, f, ap);
    va_end(ap);
}

int64_t kv_cache_pages_for(const struct kv_cache *kv, int n_tokens)
{
    return PULSE_CEIL_DIV((int64_t)n_tokens, kv->p.page_size);
}

size_t kv_cache_page_bytes(const struct kv_cache *kv)
{
    return kv->page_elems * sizeof(uint16_t);
}

int kv_cache_page_size(const struct kv_cache *kv)
{
    return kv->p.page_size;
}

size_t kv_cache_params_request_bytes(const struct kv_cache_params *p, int n_tokens)
{
    size_t page_bytes = (size_t)p->n_kv_heads * 2 * p->page_size * p->head_dim * sizeof(uint16_t);
    return (size_t)PULSE_CEIL_DIV((int64_t)n_tokens, p->page_size) * p->n_layers * page_bytes;
}

size_t kv_cache_request_bytes(const struct kv_cache *kv, int n_tokens)
{
    return kv_cache_params_request_bytes(&kv->p, n_tokens);
}

struct kv_cache *kv_cache_create(const struct kv_cache_params *p, const struct backend *be,
                                 const struct kctx *ctx, char *err, size_t errlen)
{
    if (p->n_layers < 1 || p->n_kv_heads < 1 || p->head_dim < 1 || p->page_size < 1 ||
        p->max_requests < 1 || p->max_tokens < 1) {
        fmt(err, errlen, "invalid KV cache shape");
        return NULL;
    }
    struct kv_cache *kv = mem_alloc(MEM_HOST, sizeof *kv, "kv_cache");
    if (!kv) return NULL;
    memset(kv, 0, sizeof *kv);
    kv->p = *p;
    kv->be = be;
    kv->ctx = ctx;
    kv->page_elems = (size_t)p->n_kv_heads * 2 * p->page_size * p->head_dim;
    kv->n_pages = (int64_t)(p->budget_bytes / kv_cache_page_bytes(kv));
    kv->max_pages = kv_cache_pages_for(kv, p->max_tokens);
    if (kv->n_pages < (int64_t)p->n_layers * kv->max_pages) {
        /* still allowed: max_tokens bounds a slot, the budget bounds what is admitted; but a
         * pool that cannot hold one page per layer is useless */
        if (kv->n_pages < p->n_layers) {
            fmt(err, errlen, "KV budget %.3f GB holds %lld pages of %zu bytes; need at least %d",
                p->budget_bytes / 1e9, (long long)kv->n_pages, kv_cache_page_bytes(kv),
                p->n_layers);
            mem_free(MEM_HOST, kv, sizeof *kv);
            return NULL;
        }
    }
    if (kv->n_pages > INT32_MAX) kv->n_pages = INT32_MAX;
    kv->table_bytes = sizeof(int32_t) * (size_t)p->max_requests * p->n_layers * kv->max_pages;
    kv->pool = mem_alloc(be->mem, (size_t)kv->n_pages * kv_cache_page_bytes(kv), "kv pool");
    kv->d_page_ids = mem_alloc(be->mem, kv->table_bytes, "page table");
    kv->h_page_ids = mem_alloc(MEM_HOST, kv->table_bytes, "page table mirror");
    kv->free_pages = mem_alloc(MEM_HOST, sizeof(int32_t) * (size_t)kv->n_pages, "free list");
    kv->slot_tokens = mem_alloc(MEM_HOST, sizeof(int32_t) * p->max_requests, "slots");
    kv->slot_map = mem_alloc(MEM_HOST, (size_t)p->max_requests * p->n_layers, "slot maps");
    kv->max_owned = kv->max_pages + 1;
    kv->owned_bytes = sizeof(int32_t) * (size_t)p->max_requests * p->n_layers * (kv->max_owned + 1);
    kv->owned = mem_alloc(MEM_HOST, kv->owned_bytes, "owned pages");
    if (!kv->pool || !kv->d_page_ids || !kv->h_page_ids || !kv->free_pages || !kv->slot_tokens ||
        !kv->slot_map || !kv->owned) {
        fmt(err, errlen, "cannot allocate a %.3f GB KV pool on %s", p->budget_bytes / 1e9,
            be->name);
        kv_cache_free(kv);
        return NULL;
    }
    for (int64_t i = 0; i < kv->n_pages; i++)
        kv->free_pages[i] = (int32_t)(kv->n_pages - 1 - i);
    kv->n_free = kv->n_pages;
    memset(kv->h_page_ids, 0xff, kv->table_bytes); /* -1: no page */
    memset(kv->slot_tokens, 0, sizeof(int32_t) * p->max_requests);
    memset(kv->slot_map, KV_MAP_ALL, (size_t)p->max_requests * p->n_layers);
    kv->n_owned = kv->owned + (size_t)p->max_requests * p->n_layers * kv->max_owned;
    memset(kv->n_owned, 0, sizeof(int32_t) * (size_t)p->max_requests * p->n_layers);
    be->upload(ctx, kv->d_page_ids, kv->h_page_ids, kv->table_bytes);
    return kv;
}

void kv_cache_free(struct kv_cache *kv)
{
    if (!kv) return;
    mem_free(kv->be->mem, kv->pool, (size_t)kv->n_pages * kv_cache_page_bytes(kv));
    mem_free(kv->be->mem, kv->d_page_ids, kv->table_bytes);
    mem_free(MEM_HOST, kv->h_page_ids, kv->table_bytes);
    mem_free(MEM_HOST, kv->free_pages, sizeof(int32_t) * (size_t)kv->n_pages);
    mem_free(MEM_HOST, kv->slot_tokens, sizeof(int32_t) * kv->p.max_requests);
    mem_free(MEM_HOST, kv->slot_map, (size_t)kv->p.max_requests * kv->p.n_layers);
    mem_free(MEM_HOST, kv->owned, kv->owned_bytes);
    mem_free(MEM_HOST, kv, sizeof *kv);
}

int32_t kv_cache_row(const struct kv_cache *kv, int slot, int layer)
{
    return (int32_t)(((int64_t)slot * kv->p.n_layers + layer) * kv->max_pages);
}

static int32_t *owned_row(const struct kv_cache *kv, int slot, int layer)
{
    return kv->owned + ((size_t)slot * kv->p.n_layers + layer) * kv->max_owned;
}

static int32_t *owned_count(const struct kv_cache *kv, int slot, int layer)
{
    return kv->n_owned + (size_t)slot * kv->p.n_layers + layer;
}

/* Pages layer map m owns for `blocks` blocks. */
static int64_t map_pages(const struct kv_layer_map *m, int64_t blocks)
{
    return m->map == KV_MAP_ALL ? blocks : m->map == KV_MAP_RING ? PULSE_MIN(m->pages, blocks)
                                                                 : m->pages;
}

int64_t kv_cache_params_mapped_pages(const struct kv_cache_params *p, int n_tokens,
                                     const struct kv_layer_map *maps)
{
    const int64_t blocks = PULSE_CEIL_DIV((int64_t)n_tokens, p->page_size);
    int64_t need = 0;
    for (int l = 0; l < p->n_layers; l++)
        need += maps ? map_pages(&maps[l], blocks) : blocks;
    return need;
}

/* The page block i of (slot, layer) maps to under map kind `map` with n_own owned pages. */
static int32_t mapped_page(int map, const int32_t *own, int64_t n_own, int64_t i)
{
    return map == KV_MAP_ALL ? own[i] : map == KV_MAP_RING ? own[i % n_own] : own[n_own - 1];
}

/* Takes a free slot and the pages of an admission (maps NULL: every layer KV_MAP_ALL); uploads
 * the slot's rows. */
static int admit_pages(struct kv_cache *kv, int n_tokens, const struct kv_layer_map *maps,
                       int *slot)
{
    int64_t need = kv_cache_params_mapped_pages(&kv->p, n_tokens, maps);
    if (n_tokens < 1 || n_tokens > kv->p.max_tokens || need > kv->n_pages) return PULSE_ERR_INVALID;
    int s = -1;
    for (int i = 0; i < kv->p.max_requests && s < 0; i++)
        if (kv->slot_tokens[i] == 0) s = i;
    if (s < 0 || need > kv->n_free) {
        kv->st.admit_refusals++;
        return PULSE_ERR_NOMEM;
    }
    int64_t blocks = kv_cache_pages_for(kv, n_tokens);
    for (int l = 0; l < kv->p.n_layers; l++) {
        int32_t *row = kv->h_page_ids + kv_cache_row(kv, s, l), *own = owned_row(kv, s, l);
        const int map = maps ? maps[l].map : KV_MAP_ALL;
        const int64_t n_own = maps ? map_pages(&maps[l], blocks) : blocks;
        for (int64_t i = 0; i < n_own; i++)
            own[i] = kv->free_pages[--kv->n_free];
        for (int64_t i = 0; i < blocks; i++)
            row[i] = mapped_page(map, own, n_own, i);
        *owned_count(kv, s, l) = (int32_t)n_own;
        kv->slot_map[(size_t)s * kv->p.n_layers + l] = (uint8_t)map;
    }
    kv->slot_tokens[s] = n_tokens;
    int32_t *first = kv->h_page_ids + kv_cache_row(kv, s, 0);
    kv->be->upload(kv->ctx, kv->d_page_ids + kv_cache_row(kv, s, 0), first,
                   sizeof(int32_t) * (size_t)kv->p.n_layers * kv->max_pages);
    kv->st.admits++;
    *slot = s;
    return PULSE_OK;
}

int kv_cache_admit(struct kv_cache *kv, int n_tokens, int *slot)
{
    return admit_pages(kv, n_tokens, NULL, slot);
}

int kv_cache_admit_mapped(struct kv_cache *kv, int n_tokens, const struct kv_layer_map *maps,
                          int *slot)
{
    for (int l = 0; l < kv->p.n_layers; l++)
        if (maps[l].map < KV_MAP_ALL || maps[l].map > KV_MAP_TAIL ||
            (maps[l].map != KV_MAP_ALL && (maps[l].pages < 1 || maps[l].pages > kv->max_owned)))
            return PULSE_ERR_INVALID;
    return admit_pages(kv, n_tokens, maps, slot);
}

int kv_cache_slot_tokens(const struct kv_cache *kv, int slot)
{
    PULSE_CHECK(slot >= 0 && slot < kv->p.max_requests, "kv_cache_slot_tokens: slot out of range");
    return kv->slot_tokens[slot];
}

const int32_t *kv_cache_owned_pages(const struct kv_cache *kv, int slot, int layer, int *n)
{
    PULSE_CHECK(slot >= 0 && slot < kv->p.max_requests && layer >= 0 && layer < kv->p.n_layers,
                "kv_cache_owned_pages: slot or layer out of range");
    *n = *owned_count(kv, slot, layer);
    return owned_row(kv, slot, layer);
}

void kv_cache_release(struct kv_cache *kv, int slot)
{
    PULSE_CHECK(slot >= 0 && slot < kv->p.max_requests && kv->slot_tokens[slot] > 0,
                "release of a free slot");
    for (int l = 0; l < kv->p.n_layers; l++) {
        int32_t *row = kv->h_page_ids + kv_cache_row(kv, slot, l), *own = owned_row(kv, slot, l);
        for (int64_t i = *owned_count(kv, slot, l) - 1; i >= 0; i--)
            kv->free_pages[kv->n_free++] = own[i];
        *owned_count(kv, slot, l) = 0;
        for (int64_t i = 0; i < kv->max_pages; i++)
            row[i] = -1;
    }
    kv->slot_tokens[slot] = 0;
    kv->st.releases++;
}

/* Rows of (slot, layer) against what it owns (header comment of kv_cache_check). */
static int check_row(const struct kv_cache *kv, int s, int l, char *err, size_t errlen)
{
    const int64_t used = kv->slot_tokens[s] ? kv_cache_pages_for(kv, kv->slot_tokens[s]) : 0;
    const int32_t *row = kv->h_page_ids + kv_cache_row(kv, s, l), *own = owned_row(kv, s, l);
    const int32_t n_own = *owned_count(kv, s, l);
    const int map = kv->slot_map[(size_t)s * kv->p.n_layers + l];
    if (!used && n_own) {
        fmt(err, errlen, "free slot %d owns %d pages in layer %d", s, n_own, l);
        return -1;
    }
    if (used && (map == KV_MAP_ALL ? n_own != used : map == KV_MAP_RING ? n_own > used : 0)) {
        fmt(err, errlen, "slot %d layer %d owns %d pages for %lld blocks (map %d)", s, l, n_own,
            (long long)used, map);
        return -1;
    }
    if (used && n_own < 1) {
        fmt(err, errlen, "slot %d layer %d owns no page", s, l);
        return -1;
    }
    for (int64_t i = 0; i < kv->max_pages; i++) {
        int32_t want = i >= used ? -1 : mapped_page(map, own, n_own, i);
        if (row[i] != want) {
            fmt(err, errlen, "slot %d layer %d index %lld maps page %d, expected %d", s, l,
                (long long)i, row[i], want);
            return -1;
        }
    }
    return 0;
}

/* Every page is on the free list or owned by one (slot, layer), exactly once. */
static int check_owners(const struct kv_cache *kv, uint64_t *seen, char *err, size_t errlen)
{
    if (kv->n_free < 0 || kv->n_free > kv->n_pages) {
        fmt(err, errlen, "free count %lld outside [0, %lld]", (long long)kv->n_free,
            (long long)kv->n_pages);
        return -1;
    }
    int64_t claims = 0;
    for (int64_t k = 0; k < kv->n_free + (int64_t)kv->p.max_requests * kv->p.n_layers; k++) {
        const int32_t *ids = k < kv->n_free ? kv->free_pages + k : NULL;
        int n = 1;
        if (!ids) {
            int64_t u = k - kv->n_free;
            ids = owned_row(kv, (int)(u / kv->p.n_layers), (int)(u % kv->p.n_layers));
            n = kv->n_owned[u];
        }
        for (int i = 0; i < n; i++, claims++) {
            int64_t pg = ids[i];
            if (pg < 0 || pg >= kv->n_pages || (seen[pg / 64] >> (pg % 64) & 1)) {
                fmt(err, errlen, "page %lld %s (claim %lld: %s)", (long long)pg,
                    pg < 0 || pg >= kv->n_pages ? "out of range" : "claimed twice",
                    (long long)claims, k < kv->n_free ? "free list" : "owned by a slot");
                return -1;
            }
            seen[pg / 64] |= 1ull << (pg % 64);
        }
    }
    if (claims != kv->n_pages) {
        fmt(err, errlen, "%lld owned + free pages != %lld pages", (long long)claims,
            (long long)kv->n_pages);
        return -1;
    }
    return 0;
}

/* The backend copy of every active slot's rows equals the host mirror. */
static int check_backend(const struct kv_cache *kv, char *err, size_t errlen)
{
    size_t slot_ids = (size_t)kv->p.n_layers * kv->max_pages;
    int32_t *copy = mem_alloc(MEM_HOST, slot_ids * sizeof(int32_t), "check copy");
    int rc = 0;
    if (!copy) {
        fmt(err, errlen, "check: out of host memory");
        return -1;
    }
    for (int s = 0; s < kv->p.max_requests && rc == 0; s++) {
        if (!kv->slot_tokens[s]) continue;
        size_t off = (size_t)kv_cache_row(kv, s, 0);
        kv->be->download(kv->ctx, copy, kv->d_page_ids + off, slot_ids * sizeof(int32_t));
        if (memcmp(copy, kv->h_page_ids + off, slot_ids * sizeof(int32_t)) != 0) {
            fmt(err, errlen, "slot %d: backend page table differs from the host mirror", s);
            rc = -1;
        }
    }
    mem_free(MEM_HOST, copy, slot_ids * sizeof(int32_t));
    return rc;
}

int kv_cache_check(const struct kv_cache *kv, char *err, size_t errlen)
{
    /* one bit per page: set when some owner (free list or a slot) claims it */
    size_t words = (size_t)(kv->n_pages + 63) / 64;
    uint64_t *seen = mem_alloc(MEM_HOST, words * 8, "check bitmap");
    if (!seen) {
        fmt(err, errlen, "check: out of host memory");
        return -1;
    }
    memset(seen, 0, words * 8);
    int rc = check_owners(kv, seen, err, errlen);
    for (int s = 0; s < kv->p.max_requests && rc == 0; s++)
        for (int l = 0; l < kv->p.n_layers && rc == 0; l++)
            rc = check_row(kv, s, l, err, errlen);
    if (rc == 0) rc = check_backend(kv, err, errlen);
    mem_free(MEM_HOST, seen, words * 8);
    return rc;
}

struct kv_view kv_cache_view(const struct kv_cache *kv, const int32_t *page_start)
{
    struct kv_view v = {
        kv->pool, kv->d_page_ids, page_start, kv->p.page_size, kv->p.n_kv_heads, kv->p.head_dim, 0,
        0,        NULL,           NULL};
    return v;
}

const int32_t *kv_cache_host_page_ids(const struct kv_cache *kv)
{
    return kv->h_page_ids;
}

void kv_cache_get_stats(const struct kv_cache *kv, struct kv_cache_stats *out)
{
    *out = kv->st;
    out->n_pages = kv->n_pages;
    out->free_pages = kv->n_free;
    out->page_bytes = (int64_t)kv_cache_page_bytes(kv);
    out->max_requests = kv->p.max_requests;
    out->active_requests = 0;
    for (int s = 0; s < kv->p.max_requests; s++)
        out->active_requests += kv->slot_tokens[s] > 0;
}
