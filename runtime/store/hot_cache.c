/* The GPU hot cache's slot bookkeeping (hot_cache.h). One host allocation, carved into the
 * per-unit arrays; nothing allocates after create. */
#include "hot_cache.h"

#include <stdio.h>
#include <string.h>

#include "common.h"
#include "mem.h"
#include "select.h"

struct unit {
    int32_t head, tail; /* LRU list of occupied slots: head = most recent; -1 when empty */
    int32_t n_free;     /* entries on the free stack */
    int32_t last_nb;    /* n_blocks of the last access (0 before any) */
    uint32_t stamp;     /* current step's stamp */
};

struct hot_cache {
    struct hot_cache_params p;
    int cap, cap_bits;    /* hash capacity per unit (power of two) */
    struct unit *units;   /* [n_units] */
    int32_t *slot_block;  /* [n_units][n_slots]: block in the slot, -1 free */
    int32_t *prev, *next; /* [n_units][n_slots]: LRU links, -1 at the ends */
    int32_t *free_stack;  /* [n_units][n_slots]: free slots, top at n_free - 1 */
    uint32_t *slot_stamp; /* [n_units][n_slots]: stamp of the last step that touched the slot */
    int32_t *hkey, *hval; /* [n_units][cap]: block -> slot, key -1 = empty */
    struct hot_cache_stats st;
    void *mem;
    size_t mem_bytes;
};

/* ------------------------------------------------------------------ hash: block -> slot */

static uint32_t home(const struct hot_cache *hc, int32_t block)
{
    return ((uint32_t)block * 0x9e3779b1u) >> (32 - hc->cap_bits);
}

/* Position of `block` in unit u's table, or -1. */
static int hash_find(const struct hot_cache *hc, int u, int32_t block)
{
    const int32_t *key = hc->hkey + (size_t)u * hc->cap;
    const uint32_t mask = (uint32_t)hc->cap - 1;
    for (uint32_t i = home(hc, block);; i = (i + 1) & mask) {
        if (key[i] == block) return (int)i;
        if (key[i] < 0) return -1;
    }
}

static void hash_insert(struct hot_cache *hc, int u, int32_t block, int32_t slot)
{
    int32_t *key = hc->hkey + (size_t)u * hc->cap, *val = hc->hval + (size_t)u * hc->cap;
    const uint32_t mask = (uint32_t)hc->cap - 1;
    uint32_t i = home(hc, block);
    while (key[i] >= 0)
        i = (i + 1) & mask;
    key[i] = block;
    val[i] = slot;
}

/* Backward-shift deletion: entries after the hole move back unless their home lies cyclically
 * in (hole, entry], so every probe sequence stays unbroken and no tombstones accumulate. */
static void hash_remove(struct hot_cache *hc, int u, int32_t block)
{
    int32_t *key = hc->hkey + (size_t)u * hc->cap, *val = hc->hval + (size_t)u * hc->cap;
    const uint32_t mask = (uint32_t)hc->cap - 1;
    int found = hash_find(hc, u, block);
    PULSE_CHECK(found >= 0, "hot_cache: removing a block that is not resident");
    uint32_t i = (uint32_t)found, j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (key[j] < 0) break;
        uint32_t k = home(hc, key[j]);
        int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (stays) continue;
        key[i] = key[j];
        val[i] = val[j];
        i = j;
    }
    key[i] = -1;
}

/* ------------------------------------------------------------------ LRU list */

static void lru_unlink(struct hot_cache *hc, int u, int32_t s)
{
    struct unit *un = &hc->units[u];
    int32_t *prev = hc->prev + (size_t)u * hc->p.n_slots;
    int32_t *next = hc->next + (size_t)u * hc->p.n_slots;
    if (prev[s] >= 0)
        next[prev[s]] = next[s];
    else
        un->head = next[s];
    if (next[s] >= 0)
        prev[next[s]] = prev[s];
    else
        un->tail = prev[s];
    prev[s] = next[s] = -1;
}

static void lru_push_front(struct hot_cache *hc, int u, int32_t s)
{
    struct unit *un = &hc->units[u];
    int32_t *prev = hc->prev + (size_t)u * hc->p.n_slots;
    int32_t *next = hc->next + (size_t)u * hc->p.n_slots;
    prev[s] = -1;
    next[s] = un->head;
    if (un->head >= 0)
        prev[un->head] = s;
    else
        un->tail = s;
    un->head = s;
}

/* ------------------------------------------------------------------ create, reset */

struct hot_cache *hot_cache_create(const struct hot_cache_params *p, char *err, size_t errlen)
{
    const char *why = NULL;
    if (p->n_units < 1)
        why = "n_units must be >= 1";
    else if (p->n_slots < 1 || p->n_slots > (1 << 24))
        why = "n_slots must be in 1..2^24";
    else if (p->sink < 0 || p->window < 0)
        why = "sink and window must be >= 0";
    if (why) {
        if (err && errlen) snprintf(err, errlen, "hot cache: %s", why);
        return NULL;
    }
    struct hot_cache *hc = mem_alloc(MEM_HOST, sizeof *hc, "hot_cache");
    if (!hc) goto oom;
    memset(hc, 0, sizeof *hc);
    hc->p = *p;
    hc->cap_bits = 2;
    while ((1 << hc->cap_bits) < 2 * p->n_slots)
        hc->cap_bits++;
    hc->cap = 1 << hc->cap_bits;
    const size_t U = (size_t)p->n_units, S = (size_t)p->n_slots, C = (size_t)hc->cap;
    hc->mem_bytes =
        U * sizeof(struct unit) + U * S * 5 * sizeof(int32_t) + U * C * 2 * sizeof(int32_t);
    hc->mem = mem_alloc(MEM_HOST, hc->mem_bytes, "hot_cache state");
    if (!hc->mem) goto oom;
    char *at = hc->mem;
    hc->units = (struct unit *)at, at += U * sizeof(struct unit);
    hc->slot_block = (int32_t *)at, at += U * S * sizeof(int32_t);
    hc->prev = (int32_t *)at, at += U * S * sizeof(int32_t);
    hc->next = (int32_t *)at, at += U * S * sizeof(int32_t);
    hc->free_stack = (int32_t *)at, at += U * S * sizeof(int32_t);
    hc->slot_stamp = (uint32_t *)at, at += U * S * sizeof(uint32_t);
    hc->hkey = (int32_t *)at, at += U * C * sizeof(int32_t);
    hc->hval = (int32_t *)at;
    for (size_t i = 0; i < U * S; i++)
        hc->slot_block[i] = -1;
    for (int u = 0; u < p->n_units; u++)
        hot_cache_reset(hc, u);
    return hc;
oom:
    if (hc) mem_free(MEM_HOST, hc, sizeof *hc);
    if (err && errlen) snprintf(err, errlen, "hot cache: out of host memory");
    return NULL;
}

void hot_cache_free(struct hot_cache *hc)
{
    if (!hc) return;
    mem_free(MEM_HOST, hc->mem, hc->mem_bytes);
    mem_free(MEM_HOST, hc, sizeof *hc);
}

void hot_cache_reset(struct hot_cache *hc, int u)
{
    PULSE_CHECK(u >= 0 && u < hc->p.n_units, "hot_cache_reset: unit out of range");
    const int S = hc->p.n_slots;
    struct unit *un = &hc->units[u];
    for (int s = 0; s < S; s++)
        if (hc->slot_block[(size_t)u * S + s] >= 0) hc->st.resident--;
    un->head = un->tail = -1;
    un->n_free = S;
    un->last_nb = 0;
    un->stamp = 0;
    for (int s = 0; s < S; s++) {
        size_t i = (size_t)u * S + s;
        hc->slot_block[i] = -1;
        hc->prev[i] = hc->next[i] = -1;
        hc->slot_stamp[i] = 0;
        hc->free_stack[i] = S - 1 - s; /* slot 0 is popped first */
    }
    for (int i = 0; i < hc->cap; i++)
        hc->hkey[(size_t)u * hc->cap + i] = -1;
}

/* ------------------------------------------------------------------ access */

/* 1 when sel is strictly ascending inside [0, nb) and holds every pinned block. */
static int sel_valid(const struct hot_cache *hc, const int32_t *sel, int n_sel, int nb)
{
    int c0, c1, forced = 0;
    select_candidates(nb, hc->p.sink, hc->p.window, &c0, &c1);
    for (int i = 0; i < n_sel; i++) {
        if (sel[i] < 0 || sel[i] >= nb || (i > 0 && sel[i] <= sel[i - 1])) return 0;
        forced += sel[i] < c0 || sel[i] >= c1;
    }
    return forced == nb - (c1 - c0);
}

/* A slot for a missing block: a free one, else the LRU tail (never stamped this step, because
 * the step's blocks were all moved to the front and n_sel <= n_slots). *victim gets the block
 * it held, or -1. */
static int32_t take_slot(struct hot_cache *hc, int u, int32_t *victim)
{
    struct unit *un = &hc->units[u];
    const size_t base = (size_t)u * hc->p.n_slots;
    int32_t s;
    if (un->n_free > 0) {
        s = hc->free_stack[base + --un->n_free];
        *victim = -1;
        hc->st.resident++;
    } else {
        s = un->tail;
        PULSE_CHECK(s >= 0 && hc->slot_stamp[base + s] != un->stamp,
                    "hot_cache: no evictable slot (capacity invariant broken)");
        *victim = hc->slot_block[base + s];
        hash_remove(hc, u, *victim);
        lru_unlink(hc, u, s);
        hc->st.evictions++;
    }
    return s;
}

int hot_cache_access(struct hot_cache *hc, int unit, const int32_t *sel, int n_sel, int n_blocks,
                     int tail_is_new, struct hot_cache_result *out)
{
    if (unit < 0 || unit >= hc->p.n_units || n_blocks < 1 || n_sel < 0) return PULSE_ERR_INVALID;
    if (!sel_valid(hc, sel, n_sel, n_blocks)) return PULSE_ERR_INVALID;
    if (n_sel > hc->p.n_slots) return PULSE_ERR_NOMEM;

    struct unit *un = &hc->units[unit];
    const size_t base = (size_t)unit * hc->p.n_slots;
    if (++un->stamp == 0) { /* wrapped: old stamps could alias the new one */
        for (int s = 0; s < hc->p.n_slots; s++)
            hc->slot_stamp[base + s] = 0;
        un->stamp = 1;
    }
    out->n_hits = out->n_recalls = 0;
    out->fresh_block = out->fresh_slot = out->fresh_victim = -1;

    /* pass 1: hits move to the front, in block order */
    for (int i = 0; i < n_sel; i++) {
        int at = hash_find(hc, unit, sel[i]);
        int32_t s = at < 0 ? -1 : hc->hval[(size_t)unit * hc->cap + at];
        out->attend_slot[i] = s;
        if (s < 0) continue;
        lru_unlink(hc, unit, s);
        lru_push_front(hc, unit, s);
        hc->slot_stamp[base + s] = un->stamp;
        out->hit_block[out->n_hits] = sel[i];
        out->hit_slot[out->n_hits++] = s;
    }
    /* pass 2: misses take free slots or the least recently used unselected blocks */
    for (int i = 0; i < n_sel; i++) {
        if (out->attend_slot[i] >= 0) continue;
        int32_t victim, s = take_slot(hc, unit, &victim);
        hc->slot_block[base + s] = sel[i];
        hash_insert(hc, unit, sel[i], s);
        lru_push_front(hc, unit, s);
        hc->slot_stamp[base + s] = un->stamp;
        out->attend_slot[i] = s;
        if (tail_is_new && sel[i] == n_blocks - 1) {
            out->fresh_block = sel[i];
            out->fresh_slot = s;
            out->fresh_victim = victim;
            hc->st.fresh++;
        } else {
            out->recall_block[out->n_recalls] = sel[i];
            out->recall_slot[out->n_recalls] = s;
            out->victim_block[out->n_recalls++] = victim;
            hc->st.misses++;
        }
    }
    un->last_nb = n_blocks;
    hc->st.accesses++;
    hc->st.hits += out->n_hits;
    return PULSE_OK;
}

/* ------------------------------------------------------------------ queries and checks */

int hot_cache_lookup(const struct hot_cache *hc, int unit, int block)
{
    if (unit < 0 || unit >= hc->p.n_units || block < 0) return -1;
    int at = hash_find(hc, unit, block);
    return at < 0 ? -1 : hc->hval[(size_t)unit * hc->cap + at];
}

int hot_cache_slot_block(const struct hot_cache *hc, int unit, int slot)
{
    if (unit < 0 || unit >= hc->p.n_units || slot < 0 || slot >= hc->p.n_slots) return -1;
    return hc->slot_block[(size_t)unit * hc->p.n_slots + slot];
}

int hot_cache_resident(const struct hot_cache *hc, int unit)
{
    if (unit < 0 || unit >= hc->p.n_units) return 0;
    return hc->p.n_slots - hc->units[unit].n_free;
}

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        if (err && errlen) snprintf(err, errlen, __VA_ARGS__);                                     \
        return -1;                                                                                 \
    } while (0)

static int check_unit(const struct hot_cache *hc, int u, char *err, size_t errlen)
{
    const int S = hc->p.n_slots;
    const struct unit *un = &hc->units[u];
    const int32_t *sb = hc->slot_block + (size_t)u * S, *prev = hc->prev + (size_t)u * S;
    const int32_t *next = hc->next + (size_t)u * S, *fs = hc->free_stack + (size_t)u * S;
    const int32_t *key = hc->hkey + (size_t)u * hc->cap, *val = hc->hval + (size_t)u * hc->cap;
    int occupied = 0, entries = 0;
    for (int s = 0; s < S; s++) {
        if (sb[s] < 0) continue;
        occupied++;
        if (hot_cache_lookup(hc, u, sb[s]) != s)
            FAIL("unit %d: slot %d holds block %d but the hash maps it to %d", u, s, sb[s],
                 hot_cache_lookup(hc, u, sb[s]));
    }
    for (int i = 0; i < hc->cap; i++) {
        if (key[i] < 0) continue;
        entries++;
        if (val[i] < 0 || val[i] >= S || sb[val[i]] != key[i])
            FAIL("unit %d: hash maps block %d to slot %d, which holds %d", u, key[i], val[i],
                 val[i] >= 0 && val[i] < S ? sb[val[i]] : -2);
    }
    if (entries != occupied)
        FAIL("unit %d: %d hash entries, %d occupied slots", u, entries, occupied);
    if (occupied + un->n_free != S)
        FAIL("unit %d: %d occupied + %d free != %d slots", u, occupied, un->n_free, S);
    for (int i = 0; i < un->n_free; i++) {
        if (fs[i] < 0 || fs[i] >= S || sb[fs[i]] >= 0)
            FAIL("unit %d: free stack entry %d (slot %d) is not a free slot", u, i, fs[i]);
        for (int j = 0; j < i; j++)
            if (fs[j] == fs[i]) FAIL("unit %d: slot %d is twice on the free stack", u, fs[i]);
    }
    /* links consistent both ways + the right length => exactly the occupied slots, once */
    int n = 0, last = -1;
    for (int32_t s = un->head; s >= 0; last = s, s = next[s]) {
        if (++n > occupied || sb[s] < 0)
            FAIL("unit %d: LRU list reaches slot %d (free or past %d entries)", u, s, occupied);
        if (prev[s] != last)
            FAIL("unit %d: LRU prev of slot %d is %d, not %d", u, s, prev[s], last);
    }
    if (n != occupied || un->tail != last)
        FAIL("unit %d: LRU list has %d entries ending at %d; %d occupied, tail %d", u, n, last,
             occupied, un->tail);
    if (un->last_nb > 0) {
        int c0, c1;
        select_candidates(un->last_nb, hc->p.sink, hc->p.window, &c0, &c1);
        for (int b = 0; b < un->last_nb; b++) {
            if (b == c0) b = c1; /* skip the candidates */
            if (b < un->last_nb && hot_cache_lookup(hc, u, b) < 0)
                FAIL("unit %d: pinned block %d of %d is not resident", u, b, un->last_nb);
        }
    }
    return 0;
}

int hot_cache_check(const struct hot_cache *hc, char *err, size_t errlen)
{
    int64_t resident = 0;
    for (int u = 0; u < hc->p.n_units; u++) {
        if (check_unit(hc, u, err, errlen) != 0) return -1;
        resident += hot_cache_resident(hc, u);
    }
    if (resident != hc->st.resident)
        FAIL("resident counter %lld != %lld blocks in the units", (long long)hc->st.resident,
             (long long)resident);
    return 0;
}

void hot_cache_get_stats(const struct hot_cache *hc, struct hot_cache_stats *out)
{
    *out = hc->st;
}
