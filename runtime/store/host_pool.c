#include "host_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "mem.h"
#include "progress.h"

struct host_pool {
    struct host_pool_params p;
    enum mem_kind kind;
    char *h_pool; /* n_blocks * block_bytes, `kind` */
    size_t block_bytes, head_bytes;
    int64_t n_blocks, max_blocks; /* max_blocks: per (slot, layer) row */
    /* one MEM_HOST allocation, carved: */
    void *tables;
    size_t tables_bytes;
    int32_t *ids;      /* [max_requests][n_layers][max_blocks] */
    int32_t *free_ids; /* stack, n_free entries */
    int32_t *tokens;   /* [max_requests] length of the reserved request, 0 = free slot */
    uint8_t *mark;     /* [n_blocks] scratch for host_pool_check */
    int64_t n_free;
    int active;
    double pin_seconds;
    struct mem_pin_report pin;
    size_t region_bytes; /* h_pool's allocation (a kept region may be larger than the pool) */
    int reused;          /* h_pool is a kept region (host_pool_keep) */
    int64_t reserves, releases, refusals;
};

/* The region host_pool_keep holds between pools: one, with what made it. */
static struct {
    pthread_mutex_t mu;
    int on;
    void *mem;
    size_t bytes, block_bytes;
    enum mem_kind kind;
    struct mem_pin_report pin;
} g_keep = {PTHREAD_MUTEX_INITIALIZER, 0, NULL, 0, 0, MEM_HOST, {0}};

static void release_kept(void)
{
    if (g_keep.mem) mem_free(g_keep.kind, g_keep.mem, g_keep.bytes);
    g_keep.mem = NULL, g_keep.bytes = 0;
}

void host_pool_keep(int on)
{
    pthread_mutex_lock(&g_keep.mu);
    g_keep.on = on;
    if (!on) release_kept();
    pthread_mutex_unlock(&g_keep.mu);
}

/* The kept region when it suits a pool of `bytes` of kind and block size (then no longer kept),
 * else NULL (and a kept region that does not suit is freed, making room for the new one). */
static void *take_kept(enum mem_kind kind, size_t bytes, size_t block, size_t *got,
                       struct mem_pin_report *pin)
{
    void *m = NULL;
    pthread_mutex_lock(&g_keep.mu);
    if (g_keep.mem && g_keep.kind == kind && g_keep.block_bytes == block && g_keep.bytes >= bytes) {
        m = g_keep.mem, *got = g_keep.bytes, *pin = g_keep.pin;
        g_keep.mem = NULL, g_keep.bytes = 0;
    } else {
        release_kept();
    }
    pthread_mutex_unlock(&g_keep.mu);
    return m;
}

static size_t align64(size_t x)
{
    return (x + 63) & ~(size_t)63;
}

static int bad_params(const struct host_pool_params *p, char *err, size_t errlen)
{
    if (p->n_layers < 1 || p->n_kv_heads < 1 || p->head_dim < 1 || p->page_size < 1 ||
        p->elem_bytes < 1 || p->max_requests < 1 || p->max_tokens < 1) {
        snprintf(err, errlen,
                 "host pool: layers, heads, head dim, page size, element bytes, "
                 "requests and tokens must all be >= 1");
        return 1;
    }
    return 0;
}

/* The pin's progress line: the pinning threads store the bytes done, a ticker thread prints
 * (one cudaHostAlloc reports nothing until it returns: its line shows the time only). */
struct pin_ticker {
    struct progress pg;
    _Atomic size_t done;
    _Atomic int stop;
    pthread_t th;
};

static void pin_progress(void *user, size_t done)
{
    atomic_store(&((struct pin_ticker *)user)->done, done);
}

static void *ticker_main(void *arg)
{
    struct pin_ticker *t = arg;
    const struct timespec tick = {0, 100 * 1000 * 1000};
    while (!atomic_load(&t->stop)) {
        nanosleep(&tick, NULL);
        progress_update(&t->pg, atomic_load(&t->done) / 1e9);
    }
    return NULL;
}

/* The pool's memory of `bytes`: pinned as pin says (with a progress line), or MEM_HOST. */
static void *pool_alloc(struct host_pool *hp, size_t bytes, const struct mem_pin_params *pin)
{
    if (hp->kind != MEM_PINNED) return mem_alloc(hp->kind, bytes, "host pool");
    struct mem_pin_params pp;
    if (pin)
        pp = *pin;
    else
        mem_pin_params_default(&pp);
    struct pin_ticker t;
    memset(&t, 0, sizeof t);
    char label[64];
    snprintf(label, sizeof label, "pin %.1f GB", bytes / 1e9);
    const int amounts = pp.strategy == MEM_PIN_REGISTER;
    progress_begin(&t.pg, amounts ? "pin" : label, "GB", amounts ? bytes / 1e9 : -1.0);
    const int ticking = t.pg.on && pthread_create(&t.th, NULL, ticker_main, &t) == 0;
    pp.progress = pin_progress, pp.user = &t;
    pp.piece_align = hp->block_bytes; /* no block straddles two registrations */
    void *m = mem_alloc_pinned(bytes, &pp, &hp->pin, "host pool");
    atomic_store(&t.stop, 1);
    if (ticking) pthread_join(t.th, NULL);
    progress_end(&t.pg, bytes / 1e9);
    return m;
}

struct host_pool *host_pool_create(const struct host_pool_params *p, char *err, size_t errlen)
{
    return host_pool_create_ex(p, NULL, err, errlen);
}

int host_pool_plan(const struct host_pool_params *p, struct host_pool_plan *out, char *err,
                   size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (bad_params(p, err, errlen)) return PULSE_ERR_INVALID;
    out->head_bytes = (size_t)2 * p->page_size * p->head_dim * p->elem_bytes;
    out->block_bytes = out->head_bytes * p->n_kv_heads;
    out->n_blocks = (int64_t)(p->pool_bytes / out->block_bytes);
    if (out->n_blocks < 1 || out->n_blocks > INT32_MAX) {
        snprintf(err, errlen, "host pool: %zu bytes hold %lld blocks of %zu bytes (need 1 to %d)",
                 p->pool_bytes, (long long)out->n_blocks, out->block_bytes, INT32_MAX);
        return PULSE_ERR_INVALID;
    }
    out->pool_bytes = (size_t)out->n_blocks * out->block_bytes;
    out->max_blocks = PULSE_CEIL_DIV((int64_t)p->max_tokens, p->page_size);
    out->rows = (size_t)p->max_requests * p->n_layers * (size_t)out->max_blocks;
    out->o_free = align64(out->rows * 4);
    out->o_tok = align64(out->o_free + (size_t)out->n_blocks * 4);
    out->o_mark = align64(out->o_tok + (size_t)p->max_requests * 4);
    out->tables_bytes = out->o_mark + (size_t)out->n_blocks;
    return PULSE_OK;
}

struct host_pool *host_pool_create_ex(const struct host_pool_params *p,
                                      const struct mem_pin_params *pin, char *err, size_t errlen)
{
    struct host_pool_plan pl;
    if (host_pool_plan(p, &pl, err, errlen) != PULSE_OK) return NULL;
    const size_t head = pl.head_bytes, block = pl.block_bytes;
    const int64_t n_blocks = pl.n_blocks;
    struct host_pool *hp = mem_alloc(MEM_HOST, sizeof *hp, "host pool");
    if (!hp) {
        snprintf(err, errlen, "host pool: out of host memory");
        return NULL;
    }
    memset(hp, 0, sizeof *hp);
    hp->p = *p;
    hp->head_bytes = head;
    hp->block_bytes = block;
    hp->n_blocks = n_blocks;
    hp->max_blocks = pl.max_blocks;
#ifdef PULSE_HAVE_CUDA
    hp->kind = p->pinned ? MEM_PINNED : MEM_HOST;
#else
    hp->kind = MEM_HOST;
#endif
    const size_t rows = pl.rows;
    hp->tables_bytes = pl.tables_bytes;
    hp->tables = mem_alloc(MEM_HOST, hp->tables_bytes, "host pool tables");
    double t0 = pulse_now();
    hp->region_bytes = (size_t)n_blocks * block;
    if (hp->tables && g_keep.on)
        hp->h_pool = take_kept(hp->kind, hp->region_bytes, block, &hp->region_bytes, &hp->pin);
    hp->reused = hp->h_pool != NULL;
    if (hp->tables && !hp->h_pool) {
        hp->region_bytes = (size_t)n_blocks * block;
        hp->h_pool = pool_alloc(hp, hp->region_bytes, pin);
    }
    hp->pin_seconds = pulse_now() - t0;
    if (!hp->tables || !hp->h_pool) {
        snprintf(err, errlen, "host pool: cannot allocate %zu bytes of %s memory",
                 hp->tables ? (size_t)n_blocks * block : hp->tables_bytes,
                 mem_kind_name(hp->tables ? hp->kind : MEM_HOST));
        host_pool_free(hp);
        return NULL;
    }
    char *t = hp->tables;
    hp->ids = (int32_t *)t;
    hp->free_ids = (int32_t *)(t + pl.o_free);
    hp->tokens = (int32_t *)(t + pl.o_tok);
    hp->mark = (uint8_t *)(t + pl.o_mark);
    memset(hp->ids, 0xff, rows * 4); /* -1 */
    memset(hp->tokens, 0, (size_t)p->max_requests * 4);
    /* the stack pops low ids first, so a fresh pool fills from its start */
    for (int64_t i = 0; i < n_blocks; i++)
        hp->free_ids[i] = (int32_t)(n_blocks - 1 - i);
    hp->n_free = n_blocks;
    return hp;
}

void host_pool_free(struct host_pool *hp)
{
    if (!hp) return;
    pthread_mutex_lock(&g_keep.mu);
    const int keep = g_keep.on && hp->h_pool && !g_keep.mem;
    if (keep) { /* the next pool of this process takes it */
        g_keep.mem = hp->h_pool, g_keep.bytes = hp->region_bytes, g_keep.kind = hp->kind;
        g_keep.block_bytes = hp->block_bytes, g_keep.pin = hp->pin;
    }
    pthread_mutex_unlock(&g_keep.mu);
    if (!keep) mem_free(hp->kind, hp->h_pool, hp->region_bytes);
    mem_free(MEM_HOST, hp->tables, hp->tables_bytes);
    mem_free(MEM_HOST, hp, sizeof *hp);
}

size_t host_pool_block_bytes(const struct host_pool *hp)
{
    return hp->block_bytes;
}
size_t host_pool_head_bytes(const struct host_pool *hp)
{
    return hp->head_bytes;
}

int64_t host_pool_blocks_for(const struct host_pool *hp, int n_tokens)
{
    return n_tokens <= 0 ? 0 : PULSE_CEIL_DIV((int64_t)n_tokens, hp->p.page_size);
}

static int32_t *row(const struct host_pool *hp, int slot, int layer)
{
    return hp->ids + ((size_t)slot * hp->p.n_layers + layer) * hp->max_blocks;
}

int host_pool_reserve(struct host_pool *hp, int n_tokens, int *slot)
{
    int64_t per_layer = host_pool_blocks_for(hp, n_tokens);
    int64_t need = per_layer * hp->p.n_layers;
    if (n_tokens < 1 || n_tokens > hp->p.max_tokens || need > hp->n_blocks) {
        hp->refusals++;
        return PULSE_ERR_INVALID;
    }
    int s = -1;
    for (int i = 0; i < hp->p.max_requests && s < 0; i++)
        if (hp->tokens[i] == 0) s = i;
    if (s < 0 || need > hp->n_free) {
        hp->refusals++;
        return PULSE_ERR_NOMEM;
    }
    for (int l = 0; l < hp->p.n_layers; l++) {
        int32_t *r = row(hp, s, l);
        for (int64_t i = 0; i < per_layer; i++)
            r[i] = hp->free_ids[--hp->n_free];
    }
    hp->tokens[s] = n_tokens;
    hp->active++;
    hp->reserves++;
    *slot = s;
    return PULSE_OK;
}

void host_pool_release(struct host_pool *hp, int slot)
{
    PULSE_CHECK(slot >= 0 && slot < hp->p.max_requests && hp->tokens[slot] > 0,
                "host_pool_release: slot is not reserved");
    int64_t per_layer = host_pool_blocks_for(hp, hp->tokens[slot]);
    for (int l = 0; l < hp->p.n_layers; l++) {
        int32_t *r = row(hp, slot, l);
        for (int64_t i = per_layer - 1; i >= 0; i--) {
            hp->free_ids[hp->n_free++] = r[i];
            r[i] = -1;
        }
    }
    hp->tokens[slot] = 0;
    hp->active--;
    hp->releases++;
}

int64_t host_pool_block_id(const struct host_pool *hp, int slot, int layer, int block)
{
    if (slot < 0 || slot >= hp->p.max_requests || layer < 0 || layer >= hp->p.n_layers ||
        block < 0 || block >= host_pool_blocks_for(hp, hp->tokens[slot]))
        return -1;
    return row(hp, slot, layer)[block];
}

void *host_pool_block(const struct host_pool *hp, int slot, int layer, int block)
{
    int64_t id = host_pool_block_id(hp, slot, layer, block);
    PULSE_CHECK(id >= 0, "host_pool_block: (slot, layer, block) is not reserved");
    return hp->h_pool + (size_t)id * hp->block_bytes;
}

void *host_pool_head(const struct host_pool *hp, int slot, int layer, int block, int head)
{
    PULSE_CHECK(head >= 0 && head < hp->p.n_kv_heads, "host_pool_head: head out of range");
    return (char *)host_pool_block(hp, slot, layer, block) + (size_t)head * hp->head_bytes;
}

void *host_pool_block_at(const struct host_pool *hp, int64_t id)
{
    PULSE_CHECK(id >= 0 && id < hp->n_blocks, "host_pool_block_at: id out of range");
    return hp->h_pool + (size_t)id * hp->block_bytes;
}

void *host_pool_base(const struct host_pool *hp)
{
    return hp->h_pool;
}
size_t host_pool_bytes(const struct host_pool *hp)
{
    return (size_t)hp->n_blocks * hp->block_bytes;
}

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        snprintf(err, errlen, __VA_ARGS__);                                                        \
        return -1;                                                                                 \
    } while (0)

int host_pool_check(const struct host_pool *hp, char *err, size_t errlen)
{
    uint8_t *mark = hp->mark; /* scratch owned by the pool */
    memset(mark, 0, (size_t)hp->n_blocks);
    if (hp->n_free < 0 || hp->n_free > hp->n_blocks) FAIL("free count %lld", (long long)hp->n_free);
    for (int64_t i = 0; i < hp->n_free; i++) {
        int32_t id = hp->free_ids[i];
        if (id < 0 || id >= hp->n_blocks) FAIL("free list entry %lld = %d", (long long)i, id);
        if (mark[id]++) FAIL("block %d is on the free list twice", id);
    }
    int64_t owned = 0;
    int active = 0;
    for (int s = 0; s < hp->p.max_requests; s++) {
        int64_t need = host_pool_blocks_for(hp, hp->tokens[s]);
        if (hp->tokens[s] < 0 || hp->tokens[s] > hp->p.max_tokens)
            FAIL("slot %d length %d", s, hp->tokens[s]);
        active += hp->tokens[s] > 0;
        for (int l = 0; l < hp->p.n_layers; l++) {
            const int32_t *r = row(hp, s, l);
            for (int64_t i = 0; i < hp->max_blocks; i++) {
                if (i >= need) {
                    if (r[i] != -1)
                        FAIL("slot %d layer %d entry %lld past its length", s, l, (long long)i);
                    continue;
                }
                if (r[i] < 0 || r[i] >= hp->n_blocks)
                    FAIL("slot %d layer %d entry %lld = %d", s, l, (long long)i, r[i]);
                if (mark[r[i]]++) FAIL("block %d owned twice or owned and free", r[i]);
                owned++;
            }
        }
    }
    if (owned + hp->n_free != hp->n_blocks)
        FAIL("owned %lld + free %lld != %lld blocks", (long long)owned, (long long)hp->n_free,
             (long long)hp->n_blocks);
    if (active != hp->active) FAIL("active slots %d, counter %d", active, hp->active);
    if (hp->reserves - hp->releases != hp->active)
        FAIL("reserves %lld - releases %lld != active %d", (long long)hp->reserves,
             (long long)hp->releases, hp->active);
    return 0;
}

void host_pool_get_stats(const struct host_pool *hp, struct host_pool_stats *out)
{
    out->n_blocks = hp->n_blocks;
    out->free_blocks = hp->n_free;
    out->block_bytes = hp->block_bytes;
    out->head_bytes = hp->head_bytes;
    out->pool_bytes = (size_t)hp->n_blocks * hp->block_bytes;
    out->pinned = hp->kind == MEM_PINNED;
    out->pin_seconds = hp->pin_seconds;
    out->pin_reused = hp->reused;
    out->pin_strategy = hp->kind == MEM_PINNED ? mem_pin_strategy_name(hp->pin.strategy) : "";
    out->pin_pieces = hp->pin.pieces;
    out->pin_piece_bytes = hp->pin.piece_bytes;
    out->pin_threads = hp->pin.threads;
    out->pin_fallback = hp->pin.fallback;
    out->pin_touch_s = hp->pin.touch_s;
    out->pin_register_s = hp->pin.register_s;
    out->pin_numa_asked = hp->kind == MEM_PINNED ? hp->pin.numa_asked : -1;
    out->pin_numa_node = hp->kind == MEM_PINNED ? hp->pin.numa_node : -1;
    out->pin_numa_share = hp->kind == MEM_PINNED ? hp->pin.numa_share : -1.0;
    out->active_requests = hp->active;
    out->max_requests = hp->p.max_requests;
    out->reserves = hp->reserves;
    out->releases = hp->releases;
    out->refusals = hp->refusals;
}
