/* CPU reference of the hot-cache planner (hot_plan.h): one list at a time, written as the LRU
 * it emulates (hot_cache_access, pass 1 the hits, pass 2 the misses), on the stamp state the
 * CUDA kernel keeps. Also the state's sizes, carving and check. */
#include "hot_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "mem.h"
#include "select.h"

/* ------------------------------------------------------------------ params, layout */

int hot_plan_params_check(const struct hot_plan_params *p, char *err, size_t errlen)
{
    const char *why = NULL;
    if (!p)
        why = "no params";
    else if (p->n_units < 1)
        why = "n_units must be >= 1";
    else if (p->n_slots < 1 || p->n_slots > HOT_PLAN_MAX_SLOTS)
        why = "n_slots must be in 1..2048 (HOT_PLAN_MAX_SLOTS)";
    else if (p->sink < 0 || p->window < 0)
        why = "sink and window must be >= 0";
    else if (p->max_blocks < 1 || p->max_blocks > (1 << 24))
        why = "max_blocks must be in 1..2^24";
    if (!why) return 0;
    if (err && errlen) snprintf(err, errlen, "hot plan: %s", why);
    return -1;
}

static size_t part_bytes(const struct hot_plan_params *p, int part)
{
    const size_t U = (size_t)p->n_units, S = (size_t)p->n_slots;
    switch (part) {
    case 0:
        return U * sizeof(struct hot_plan_unit);
    case 1: /* slot_block */
    case 2:
        return U * S * sizeof(int32_t); /* free_stack */
    case 3:
        return U * S * sizeof(uint64_t);
    default:
        return U * (size_t)p->max_blocks * sizeof(int32_t);
    }
}

size_t hot_plan_state_bytes(const struct hot_plan_params *p)
{
    if (hot_plan_params_check(p, NULL, 0) != 0) return 0;
    size_t n = 0;
    for (int part = 0; part < 5; part++)
        n += mem_aligned(part_bytes(p, part));
    return n;
}

void hot_plan_state_carve(const struct hot_plan_params *p, void *mem, struct hot_plan_state *s)
{
    PULSE_CHECK(hot_plan_params_check(p, NULL, 0) == 0, "hot_plan_state_carve: bad params");
    char *at = mem;
    s->unit = mem_carve(&at, part_bytes(p, 0));
    s->slot_block = mem_carve(&at, part_bytes(p, 1));
    s->free_stack = mem_carve(&at, part_bytes(p, 2));
    s->stamp = mem_carve(&at, part_bytes(p, 3));
    s->block_slot = mem_carve(&at, part_bytes(p, 4));
}

/* ------------------------------------------------------------------ init, reset */

static void reset_unit(const struct hot_plan_params *p, const struct hot_plan_state *s, int u)
{
    const int S = p->n_slots;
    int32_t *sb = s->slot_block + (size_t)u * S, *bs = s->block_slot + (size_t)u * p->max_blocks;
    for (int i = 0; i < S; i++) {
        if (sb[i] >= 0 && sb[i] < p->max_blocks) bs[sb[i]] = -1;
        sb[i] = -1;
        s->free_stack[(size_t)u * S + i] = S - 1 - i; /* slot 0 is popped first */
        s->stamp[(size_t)u * S + i] = 0;
    }
    s->unit[u] = (struct hot_plan_unit){S, 0, 0};
}

void hot_plan_init_ref(const struct hot_plan_params *p, const struct hot_plan_state *s,
                       void *stream)
{
    (void)stream;
    PULSE_CHECK(hot_plan_params_check(p, NULL, 0) == 0, "hot_plan_init: bad params");
    const size_t US = (size_t)p->n_units * p->n_slots;
    for (size_t i = 0; i < US; i++)
        s->slot_block[i] = -1;
    for (size_t i = 0; i < (size_t)p->n_units * p->max_blocks; i++)
        s->block_slot[i] = -1;
    for (int u = 0; u < p->n_units; u++)
        reset_unit(p, s, u);
}

void hot_plan_reset_ref(const struct hot_plan_params *p, const struct hot_plan_state *s, int unit0,
                        int count, void *stream)
{
    (void)stream;
    PULSE_CHECK(unit0 >= 0 && count >= 0 && count <= p->n_units - unit0,
                "hot_plan_reset: units out of range");
    for (int u = unit0; u < unit0 + count; u++)
        reset_unit(p, s, u);
}

/* ------------------------------------------------------------------ access */

/* PULSE_OK when list v may be planned (its unit, n_blocks, count and blocks as hot_plan_in
 * requires), else the status hot_cache_access would return. */
static int list_status(const struct hot_plan_params *p, const struct hot_plan_in *in, int v)
{
    const int b = v / in->n_lists, unit = in->unit_base[b] + v % in->n_lists;
    const int nb = in->n_blocks[b], cnt = in->sel_count[v];
    if (unit < 0 || unit >= p->n_units || nb < 1 || nb > p->max_blocks || cnt < 0 ||
        cnt > in->max_sel)
        return PULSE_ERR_INVALID;
    const int32_t *sel = in->sel_idx + (size_t)v * in->max_sel;
    int c0, c1, forced = 0;
    select_candidates(nb, p->sink, p->window, &c0, &c1);
    for (int j = 0; j < cnt; j++) {
        if (sel[j] < 0 || sel[j] >= nb || (j > 0 && sel[j] <= sel[j - 1])) return PULSE_ERR_INVALID;
        forced += sel[j] < c0 || sel[j] >= c1;
    }
    if (forced != nb - (c1 - c0)) return PULSE_ERR_INVALID;
    return cnt > p->n_slots ? PULSE_ERR_NOMEM : PULSE_OK;
}

/* The least recently used occupied slot that this access has not touched (stamp <= c0). */
static int lru_untouched(const struct hot_plan_params *p, const struct hot_plan_state *s, int u,
                         uint64_t c0)
{
    const size_t base = (size_t)u * p->n_slots;
    int best = -1;
    for (int i = 0; i < p->n_slots; i++) {
        if (s->slot_block[base + i] < 0 || s->stamp[base + i] > c0) continue;
        if (best < 0 || s->stamp[base + i] < s->stamp[base + best]) best = i;
    }
    PULSE_CHECK(best >= 0, "hot_plan: no evictable slot (capacity invariant broken)");
    return best;
}

/* One hot_cache_access of list v (already validated) on its unit; adds to tot. */
static void plan_list(const struct hot_plan_params *p, const struct hot_plan_state *s,
                      const struct hot_plan_in *in, const struct hot_plan_out *out, int v,
                      int64_t *tot)
{
    const int b = v / in->n_lists, u = in->unit_base[b] + v % in->n_lists;
    const int nb = in->n_blocks[b], cnt = in->sel_count[v], tail_new = in->tail_new[b] != 0;
    const size_t row = (size_t)v * in->max_sel, base = (size_t)u * p->n_slots;
    const int32_t *sel = in->sel_idx + row;
    int32_t *att = out->attend_slot + row, *bs = s->block_slot + (size_t)u * p->max_blocks;
    struct hot_plan_unit *un = &s->unit[u];
    const uint64_t c0 = un->clock;
    int n_hits = 0, n_rec = 0;
    out->fresh_block[v] = out->fresh_slot[v] = out->fresh_victim[v] = -1;

    /* pass 1: hits are touched in block order */
    for (int j = 0; j < cnt; j++) {
        att[j] = bs[sel[j]];
        if (att[j] < 0) continue;
        s->stamp[base + att[j]] = ++un->clock;
        n_hits++;
    }
    /* pass 2: misses take the free stack's top, else the LRU untouched block's slot */
    for (int j = 0; j < cnt; j++) {
        if (att[j] >= 0) continue;
        int32_t slot, victim = -1;
        if (un->n_free > 0) {
            slot = s->free_stack[base + --un->n_free];
        } else {
            slot = lru_untouched(p, s, u, c0);
            victim = s->slot_block[base + slot];
            bs[victim] = -1;
            tot[HOT_PLAN_EVICTIONS]++;
        }
        s->slot_block[base + slot] = sel[j];
        bs[sel[j]] = slot;
        s->stamp[base + slot] = ++un->clock;
        att[j] = slot;
        if (tail_new && sel[j] == nb - 1) {
            out->fresh_block[v] = sel[j];
            out->fresh_slot[v] = slot;
            out->fresh_victim[v] = victim;
            tot[HOT_PLAN_FRESH]++;
        } else {
            out->recall_block[row + n_rec] = sel[j];
            out->recall_slot[row + n_rec] = slot;
            out->victim_block[row + n_rec++] = victim;
            tot[HOT_PLAN_MISSES]++;
        }
    }
    un->last_nb = nb;
    out->n_hits[v] = n_hits;
    out->n_recalls[v] = n_rec;
    tot[HOT_PLAN_HITS] += n_hits;
}

void hot_plan_ref(const struct hot_plan_params *p, const struct hot_plan_state *s,
                  const struct hot_plan_in *in, const struct hot_plan_out *out, void *stream)
{
    (void)stream;
    PULSE_CHECK(hot_plan_params_check(p, NULL, 0) == 0, "hot_plan: bad params");
    PULSE_CHECK(in->batch >= 0 && in->n_lists >= 1 && in->max_sel >= 1,
                "hot_plan: batch, n_lists or max_sel out of range");
    int64_t tot[HOT_PLAN_TOTALS] = {0};
    for (int v = 0; v < in->batch * in->n_lists; v++) {
        out->status[v] = list_status(p, in, v);
        if (out->status[v] == PULSE_OK) {
            plan_list(p, s, in, out, v, tot);
        } else {
            out->n_hits[v] = out->n_recalls[v] = 0;
            out->fresh_block[v] = out->fresh_slot[v] = out->fresh_victim[v] = -1;
        }
    }
    if (out->totals)
        for (int i = 0; i < HOT_PLAN_TOTALS; i++)
            out->totals[i] += tot[i];
}

/* ------------------------------------------------------------------ check */

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        if (err && errlen) snprintf(err, errlen, __VA_ARGS__);                                     \
        return -1;                                                                                 \
    } while (0)

static int cmp_u64(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static int check_unit(const struct hot_plan_params *p, const struct hot_plan_state *s, int u,
                      char *err, size_t errlen)
{
    const int S = p->n_slots, MB = p->max_blocks;
    const struct hot_plan_unit *un = &s->unit[u];
    const int32_t *sb = s->slot_block + (size_t)u * S, *fs = s->free_stack + (size_t)u * S;
    const int32_t *bs = s->block_slot + (size_t)u * MB;
    const uint64_t *st = s->stamp + (size_t)u * S;
    uint64_t stamps[HOT_PLAN_MAX_SLOTS];
    uint8_t on_stack[HOT_PLAN_MAX_SLOTS] = {0};
    int occupied = 0, mapped = 0;
    for (int i = 0; i < S; i++) {
        if (sb[i] < 0) continue;
        if (sb[i] >= MB || bs[sb[i]] != i)
            FAIL("unit %d: slot %d holds block %d, which maps to slot %d", u, i, sb[i],
                 sb[i] < MB ? bs[sb[i]] : -2);
        if (st[i] > un->clock)
            FAIL("unit %d: slot %d has stamp %llu past the clock %llu", u, i,
                 (unsigned long long)st[i], (unsigned long long)un->clock);
        stamps[occupied++] = st[i];
    }
    for (int b = 0; b < MB; b++) {
        if (bs[b] < 0) continue;
        mapped++;
        if (bs[b] >= S || sb[bs[b]] != b)
            FAIL("unit %d: block %d maps to slot %d, which holds %d", u, b, bs[b],
                 bs[b] < S ? sb[bs[b]] : -2);
    }
    if (mapped != occupied)
        FAIL("unit %d: %d mapped blocks, %d occupied slots", u, mapped, occupied);
    if (un->n_free < 0 || occupied + un->n_free != S)
        FAIL("unit %d: %d occupied + %d free != %d slots", u, occupied, un->n_free, S);
    for (int i = 0; i < un->n_free; i++) {
        if (fs[i] < 0 || fs[i] >= S || sb[fs[i]] >= 0)
            FAIL("unit %d: free stack entry %d (slot %d) is not a free slot", u, i, fs[i]);
        if (on_stack[fs[i]]++) FAIL("unit %d: slot %d is twice on the free stack", u, fs[i]);
    }
    qsort(stamps, (size_t)occupied, sizeof stamps[0], cmp_u64);
    for (int i = 1; i < occupied; i++)
        if (stamps[i] == stamps[i - 1])
            FAIL("unit %d: two occupied slots share stamp %llu", u, (unsigned long long)stamps[i]);
    if (un->last_nb > 0) {
        int c0, c1;
        select_candidates(un->last_nb, p->sink, p->window, &c0, &c1);
        for (int b = 0; b < un->last_nb; b++) {
            if (b == c0) b = c1; /* skip the candidates */
            if (b < un->last_nb && (b >= MB || bs[b] < 0))
                FAIL("unit %d: pinned block %d of %d is not resident", u, b, un->last_nb);
        }
    }
    return 0;
}

int hot_plan_check(const struct hot_plan_params *p, const struct hot_plan_state *s, char *err,
                   size_t errlen)
{
    if (hot_plan_params_check(p, err, errlen) != 0) return -1;
    for (int u = 0; u < p->n_units; u++)
        if (check_unit(p, s, u, err, errlen) != 0) return -1;
    return 0;
}
