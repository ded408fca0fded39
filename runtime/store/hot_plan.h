/* Hot-cache planning on the device: the LRU bookkeeping of hot_cache.h as a kernel that reads
 * the selection kernel's lists (select.h) in device memory, so the device-driven (zero-copy)
 * path plans hits, recalls and victims without a host round trip.
 *
 * Semantics are exactly hot_cache_access's, unit by unit: same hits, same recalls in the same
 * order, same slots, same victims, same fresh tail, same pinned blocks. The equivalence: an LRU
 * list where every touch moves a slot to the head orders the occupied slots by their last
 * touch, so a per-unit clock that counts touches and a per-slot stamp (the clock value of the
 * slot's last touch) give the same order. One access touches its hits in block order, then its
 * misses in block order: with clock c0 before the access, n_hits hits and cnt selected blocks,
 * hit number i gets stamp c0 + 1 + i, miss number m gets c0 + n_hits + 1 + m, and the clock
 * becomes c0 + cnt. Miss m takes free_stack[n_free - 1 - m] while m < n_free (the free stack of
 * hot_cache: slot 0 on top after a reset), else the occupied slot not hit this step (stamp <=
 * c0) with the (m - n_free)-th smallest stamp; its block is the victim. Stamps of occupied slots
 * are distinct, so that order is total. The clock is 64-bit and never wraps.
 *
 * State. n_units units of n_slots slots, in one buffer of hot_plan_state_bytes() that the
 * caller allocates (host memory for the _ref functions, device memory for _cuda) and views
 * through hot_plan_state_carve(). The layout holds only offsets from the buffer's start, so a
 * byte copy of the buffer (device to host and back) is the same state. Per unit: a header
 * (free-stack depth, last n_blocks, clock), slot -> block, the free stack, slot stamps, and a
 * direct-mapped block -> slot array of max_blocks entries (so n_blocks <= max_blocks): about
 * n_units * (16 * n_slots + 4 * max_blocks) bytes.
 *
 * Calls. Every operation exists twice with one signature: `name_ref` (plain C on host pointers,
 * written for clarity; `stream` is ignored) and `name_cuda` (device pointers, queued on the
 * cudaStream_t `stream`; no allocation, no synchronisation, capturable in a CUDA graph). Struct
 * and params arguments are host memory in both. */
#ifndef PULSE_HOT_PLAN_H
#define PULSE_HOT_PLAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HOT_PLAN_MAX_SLOTS 2048

/* Sizes: the hot_cache_params fields plus the longest entry. */
struct hot_plan_params {
    int n_units;    /* independent units (>= 1) */
    int n_slots;    /* slots per unit, 1..HOT_PLAN_MAX_SLOTS; >= any list's selected count */
    int sink;       /* pinned leading blocks (>= 0), as select_cfg.sink */
    int window;     /* pinned blocks before the tail (>= 0), as select_cfg.window */
    int max_blocks; /* >= every entry's n_blocks (>= 1): entries of the block -> slot map */
};

struct hot_plan_unit {
    int32_t n_free;  /* depth of the free stack */
    int32_t last_nb; /* n_blocks of the last accepted access, 0 before any */
    uint64_t clock;  /* touches since the last reset */
};

/* Pointers carved from the state buffer (all [unit][...], unit-major). */
struct hot_plan_state {
    struct hot_plan_unit *unit; /* [n_units] */
    int32_t *slot_block;        /* [n_units][n_slots]: block in the slot, -1 when free */
    int32_t *free_stack;        /* [n_units][n_slots]: free slots, top at n_free - 1 */
    uint64_t *stamp;            /* [n_units][n_slots]: clock of the slot's last touch */
    int32_t *block_slot;        /* [n_units][max_blocks]: slot of a resident block, else -1 */
};

/* One layer's selection for a batch, in select.h's layout. List v = b * n_lists + l (entry b,
 * list l) uses unit unit_base[b] + l; the units of one call must be distinct. Blocks of list v:
 * sel_idx[v * max_sel + j], j < sel_count[v], strictly ascending in [0, n_blocks[b]) and
 * holding every pinned block of n_blocks[b] (sink, window, tail), as select_topk writes them.
 * tail_new[b] != 0: block n_blocks[b] - 1 received its first token this step (no host copy). */
struct hot_plan_in {
    const int32_t *sel_idx;   /* [batch * n_lists][max_sel] */
    const int32_t *sel_count; /* [batch * n_lists] */
    const int32_t *unit_base; /* [batch] */
    const int32_t *n_blocks;  /* [batch] */
    const int32_t *tail_new;  /* [batch] */
    int batch, n_lists, max_sel;
};

enum { HOT_PLAN_HITS, HOT_PLAN_MISSES, HOT_PLAN_FRESH, HOT_PLAN_EVICTIONS, HOT_PLAN_TOTALS };

/* Per list v, arrays of the caller with strides as shown (max_sel = hot_plan_in.max_sel).
 * Recall r of list v: copy host block recall_block[v * max_sel + r] into recall_slot[...],
 * which held victim_block[...] (-1: it was free), r < n_recalls[v]; the fresh tail (given a slot,
 * nothing to copy) is fresh_block/slot/victim[v], all -1 when there is none; attend_slot[v *
 * max_sel + j] holds block sel_idx[v * max_sel + j] after the access. status[v] is PULSE_OK, or
 * PULSE_ERR_INVALID (bad unit, n_blocks, count or list) / PULSE_ERR_NOMEM (count > n_slots) as
 * hot_cache_access returns them: the list is refused, its unit unchanged, n_hits = n_recalls =
 * 0, fresh -1, the other arrays not written. Entries past the counts are never written.
 * totals (NULL: none) gets this call's hits, misses (recalls), fresh tails and evictions (misses
 * or fresh tails that displaced a block) ADDED, so it can accumulate over steps. */
struct hot_plan_out {
    int32_t *status, *n_hits, *n_recalls;               /* [batch * n_lists] */
    int32_t *recall_block, *recall_slot, *victim_block; /* [batch * n_lists][max_sel] */
    int32_t *fresh_block, *fresh_slot, *fresh_victim;   /* [batch * n_lists] */
    int32_t *attend_slot;                               /* [batch * n_lists][max_sel] */
    int64_t *totals;                                    /* [HOT_PLAN_TOTALS] */
};

/* 0 when p is usable, else -1 with a one-line reason naming the field in err. */
int hot_plan_params_check(const struct hot_plan_params *p, char *err, size_t errlen);
/* Bytes of the state buffer (256-byte aligned parts); 0 when p is not usable. */
size_t hot_plan_state_bytes(const struct hot_plan_params *p);
/* Views a buffer of hot_plan_state_bytes(p) bytes at mem (256-byte aligned; host or device:
 * pointer arithmetic only). p must be usable. */
void hot_plan_state_carve(const struct hot_plan_params *p, void *mem, struct hot_plan_state *s);

/* Makes every unit empty (the state of a fresh hot_cache_create), whatever the buffer held. */
void hot_plan_init_ref(const struct hot_plan_params *p, const struct hot_plan_state *s,
                       void *stream);
void hot_plan_init_cuda(const struct hot_plan_params *p, const struct hot_plan_state *s,
                        void *stream);

/* Empties units [unit0, unit0 + count) exactly as hot_cache_reset does (a request is admitted
 * to or leaves them). O(n_slots) per unit; the range must lie inside [0, n_units). */
void hot_plan_reset_ref(const struct hot_plan_params *p, const struct hot_plan_state *s, int unit0,
                        int count, void *stream);
void hot_plan_reset_cuda(const struct hot_plan_params *p, const struct hot_plan_state *s, int unit0,
                         int count, void *stream);

/* One layer's access for the whole batch (hot_plan_in / hot_plan_out above): every list is one
 * hot_cache_access on its unit. The CUDA kernel runs one thread block per list. */
void hot_plan_ref(const struct hot_plan_params *p, const struct hot_plan_state *s,
                  const struct hot_plan_in *in, const struct hot_plan_out *out, void *stream);
void hot_plan_cuda(const struct hot_plan_params *p, const struct hot_plan_state *s,
                   const struct hot_plan_in *in, const struct hot_plan_out *out, void *stream);

/* Verifies a state in host memory: per unit, slot -> block and block -> slot agree both ways,
 * the free stack holds exactly the free slots once each, occupied slots have distinct stamps
 * <= the clock, and the pinned blocks of the last access are resident. Returns 0, or -1 with
 * the first violation in err. */
int hot_plan_check(const struct hot_plan_params *p, const struct hot_plan_state *s, char *err,
                   size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
