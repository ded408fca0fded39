/* The GPU hot cache of offloaded KV blocks: slot bookkeeping only (host C; the caller owns the
 * slot memory on the GPU and does the copies).
 *
 * A hot cache holds n_units independent units: one per offload (request slot, layer) for
 * SoloHead / token-wise recall, or per (request slot, layer, KV head) for head-wise recall. A
 * unit has n_slots GPU slots, numbered 0..n_slots-1 within the unit (the caller maps
 * (unit, slot) to memory, e.g. unit * n_slots + slot). Each step the caller passes the unit's
 * selected blocks (ascending, as select_topk writes them) and gets back:
 *   hits      selected blocks already resident, with their slots;
 *   recalls   selected blocks not resident, each with the slot to copy it into (a free slot, or
 *             the least recently used resident block that this step did not select: the victim);
 *   fresh     the new tail block (tail_is_new): given a slot but nothing to copy;
 *   attend    the slot of every selected block, in the selection's (block) order.
 * Pinned blocks: the sink [0, sink), the window [nb-1-window, nb-1) and the tail nb-1 of the
 * current nb = n_blocks (as select.h defines them). The selection must contain them, so they are
 * resident after every access and never chosen as victims; a block that leaves the window
 * becomes an ordinary LRU entry. LRU order within one step: hits in block order, then the
 * recalled blocks in block order (the last one touched is the most recent).
 *
 * State per unit: slot -> block array, an open-addressing hash block -> slot (linear probing,
 * backward-shift deletion, capacity the power of two >= 2 * n_slots), a doubly linked LRU list
 * of the occupied slots (head = most recent), a stack of free slots, and a per-slot stamp of the
 * last step that touched it. Everything is allocated once at create; nothing after. */
#ifndef PULSE_HOT_CACHE_H
#define PULSE_HOT_CACHE_H

#include <stddef.h>
#include <stdint.h>

struct hot_cache_params {
    int n_units; /* independent caches (>= 1) */
    int n_slots; /* GPU slots per unit, >= the most blocks one step selects (>= 1) */
    int sink;    /* pinned leading blocks (>= 0), as select_cfg.sink */
    int window;  /* pinned blocks before the tail (>= 0), as select_cfg.window */
};

struct hot_cache_stats {
    int64_t accesses;  /* successful hot_cache_access calls */
    int64_t hits;      /* selected blocks found resident */
    int64_t misses;    /* selected blocks recalled (host -> GPU copies the caller must do) */
    int64_t fresh;     /* new tail blocks given a slot without a copy */
    int64_t evictions; /* misses or fresh blocks that displaced a resident block */
    int64_t resident;  /* blocks resident now, all units */
};

/* Output of one access. The caller owns the arrays; each needs room for n_sel entries. */
struct hot_cache_result {
    int32_t *hit_block, *hit_slot;       /* [n_hits] */
    int32_t *recall_block, *recall_slot; /* [n_recalls]: copy host block -> slot */
    int32_t *victim_block;               /* [n_recalls]: block evicted from recall_slot, or -1 */
    int32_t *attend_slot;                /* [n_sel]: slot holding sel[i] after the access */
    int n_hits, n_recalls;
    int fresh_block, fresh_slot, fresh_victim; /* -1 when no fresh tail this step */
};

struct hot_cache;

/* Creates a hot cache with every unit empty. NULL with a one-line reason in err when a param is
 * out of range or the host refuses the memory. */
struct hot_cache *hot_cache_create(const struct hot_cache_params *p, char *err, size_t errlen);
void hot_cache_free(struct hot_cache *hc);

/* Empties one unit (a request is admitted to or leaves its (slot, layer[, head])). O(n_slots). */
void hot_cache_reset(struct hot_cache *hc, int unit);

/* One step of one unit. sel: n_sel block indices, strictly ascending, in [0, n_blocks), holding
 * every pinned block of n_blocks (>= 1) blocks; tail_is_new: block n_blocks-1 received its first
 * token this step (so it has no host copy to recall). Returns PULSE_OK with `out` filled;
 * PULSE_ERR_INVALID (bad sel, unit or n_blocks) or PULSE_ERR_NOMEM (n_sel > n_slots), in which
 * case nothing changed. No allocation. */
int hot_cache_access(struct hot_cache *hc, int unit, const int32_t *sel, int n_sel, int n_blocks,
                     int tail_is_new, struct hot_cache_result *out);

/* The slot holding `block` in `unit`, or -1. */
int hot_cache_lookup(const struct hot_cache *hc, int unit, int block);
/* The block in `slot` of `unit`, or -1 when the slot is free. */
int hot_cache_slot_block(const struct hot_cache *hc, int unit, int slot);
/* Blocks resident in one unit. */
int hot_cache_resident(const struct hot_cache *hc, int unit);

/* Verifies every unit: the slot map and the hash agree both ways; the LRU list links exactly
 * the occupied slots, forwards and backwards; the free stack holds exactly the free slots, each
 * once; the pinned blocks of the unit's last access are resident. Returns 0, or -1 with the
 * first violation in err. */
int hot_cache_check(const struct hot_cache *hc, char *err, size_t errlen);
void hot_cache_get_stats(const struct hot_cache *hc, struct hot_cache_stats *out);

#endif
