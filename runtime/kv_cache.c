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
    if (!kv->pool || !kv->d_page_ids || !kv->h_page_ids || !kv->free_pages || !kv->slot_tokens) {
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
    mem_free(MEM_HOST, kv, sizeof *kv);
}

int32_t kv_cache_row(const struct kv_cache *kv, int slot, int layer)
{
    return (int32_t)(((int64_t)slot * kv->p.n_layers + layer) * kv->max_pages);
}

int kv_cache_admit(struct kv_cache *kv, int n_tokens, int *slot)
{
    int64_t need = kv_cache_pages_for(kv, n_tokens) * kv->p.n_layers;
    if (n_tokens < 1 || n_tokens > kv->p.max_tokens || need > kv->n_pages) return PULSE_ERR_INVALID;
    int s = -1;
    for (int i = 0; i < kv->p.max_requests && s < 0; i++)
        if (kv->slot_tokens[i] == 0) s = i;
    if (s < 0 || need > kv->n_free) {
        kv->st.admit_refusals++;
        return PULSE_ERR_NOMEM;
    }
    int64_t per_layer = kv_cache_pages_for(kv, n_tokens);
    for (int l = 0; l < kv->p.n_layers; l++) {
        int32_t *row = kv->h_page_ids + kv_cache_row(kv, s, l);
        for (int64_t i = 0; i < per_layer; i++)
            row[i] = kv->free_pages[--kv->n_free];
    }
    kv->slot_tokens[s] = n_tokens;
    int32_t *first = kv->h_page_ids + kv_cache_row(kv, s, 0);
    kv->be->upload(kv->ctx, kv->d_page_ids + kv_cache_row(kv, s, 0), first,
                   sizeof(int32_t) * (size_t)kv->p.n_layers * kv->max_pages);
    kv->st.admits++;
    *slot = s;
    return PULSE_OK;
}

void kv_cache_release(struct kv_cache *kv, int slot)
{
    PULSE_CHECK(slot >= 0 && slot < kv->p.max_requests && kv->slot_tokens[slot] > 0,
                "release of a free slot");
    int64_t per_layer = kv_cache_pages_for(kv, kv->slot_tokens[slot]);
    for (int l = 0; l < kv->p.n_layers; l++) {
        int32_t *row = kv->h_page_ids + kv_cache_row(kv, slot, l);
        for (int64_t i = per_layer - 1; i >= 0; i--) {
            kv->free_pages[kv->n_free++] = row[i];
            row[i] = -1;
        }
    }
    kv->slot_tokens[slot] = 0;
    kv->st.releases++;
}

int kv_cache_check(const struct kv_cache *kv, char *err, size_t errlen)
{
    /* one bit per page: set when some owner (free list or a slot row) claims it */
    size_t words = (size_t)(kv->n_pages + 63) / 64;
    uint64_t *seen = mem_alloc(MEM_HOST, words * 8, "check bitmap");
    int rc = 0;
    if (!seen) {
        fmt(err, errlen, "check: out of host memory");
        return -1;
    }
    memset(seen, 0, words * 8);
#define MARK(pg, what, ...)                                                                        \
    do {                                                                                           \
        int64_t pg_ = (pg);                                                                        \
        if (pg_ < 0 || pg_ >= kv->n_pages) {                                                       \
            fmt(err, errlen, "page %lld out of range in " what, (long long)pg_, __VA_ARGS__);      \
            rc = -1;                                                                               \
            goto out;                                                                              \
        }                                                                                          \
        if (seen[pg_ / 64] >> (pg_ % 64) & 1) {                                                    \
            fmt(err, errlen, "page %lld owned twice (at " what ")", (long long)pg_, __VA_ARGS__);  \
            rc = -1;                                                                               \
            goto out;                                                                              \
        }                                                                                          \
        seen[pg_ / 64] |= 1ull << (pg_ % 64);                                                      \
    } while (0)
    if (kv->n_free < 0 || kv->n_free > kv->n_pages) {
        fmt(err, errlen, "free count %lld outside [0, %lld]", (long long)kv->n_free,
            (long long)kv->n_pages);
        rc = -1;
        goto out;
    }
    for (int64_t i = 0; i < kv->n_free; i++)
        MARK(kv->free_pages[i], "free list %lld", (long long)i);
    int64_t owned = 0;
    for (int s = 0; s < kv->p.max_requests; s++) {
        int64_t used = kv->slot_tokens[s] ? kv_cache_pages_for(kv, kv->slot_tokens[s]) : 0;
        for (int l = 0; l < kv->p.n_layers; l++) {
            const int32_t *row = kv->h_page_ids + kv_cache_row(kv, s, l);
            for (int64_t i = 0; i < kv->max_pages; i++) {
                if (i < used) {
                    MARK(row[i], "slot %d layer %d index %lld", s, l, (long long)i);
                    owned++;
                } else if (row[i] != -1) {
                    fmt(err, errlen, "slot %d layer %d index %lld holds page %d past its length", s,
                        l, (long long)i, row[i]);
                    rc = -1;
                    goto out;
                }
            }
        }
    }
    if (owned + kv->n_free != kv->n_pages) {
        fmt(err, errlen, "%lld owned + %lld free != %lld pages", (long long)owned,
            (long long)kv->n_free, (long long)kv->n_pages);
        rc = -1;
        goto out;
    }
    size_t slot_ids = (size_t)kv->p.n_layers * kv->max_pages;
    int32_t *copy = mem_alloc(MEM_HOST, slot_ids * sizeof(int32_t), "check copy");
    if (!copy) {
        fmt(err, errlen, "check: out of host memory");
        rc = -1;
        goto out;
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
#undef MARK
out:
    mem_free(MEM_HOST, seen, words * 8);
    return rc;
}

struct kv_view kv_cache_view(const struct kv_cache *kv, const int32_t *page_start)
{
    struct kv_view v = {kv->pool,        kv->d_page_ids,   page_start,
                        kv->p.page_size, kv->p.n_kv_heads, kv->p.head_dim, 0};
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
