/* Sparse decode attention for accuracy runs: an engine_layer_hook (engine.h) that replaces the
 * dense attention of the global layers of one request with attention over the blocks a
 * selection policy picks (select.h), on either backend. Local (sliding-window) layers keep their
 * window; the prefill is dense. The KV stays whole in the paged cache: what is measured is the
 * accuracy of the selection, not the I/O.
 *
 * Selectors are QUERY heads here. A selection list is made from one query head's q (or the sum
 * over a KV head's query heads, for quest) against the Quest digests of its KV head; the forced
 * sink, window and tail blocks and the `budget` best others (select.h). Policies:
 *   full       dense attention (the hook does nothing but observe).
 *   solohead   per layer the query head selector[layer] (highest MAM, head_mass.h): its list
 *              serves every head of the layer (PulseInfer's SoloHead; with Gemma 3 270M's single
 *              KV head the selector has to be a query head).
 *   reversed   the same with the lowest-MAM head (selector array supplied by the caller).
 *   headwise   each query head its own list (Quest/ArkVale granularity at one KV head).
 *   quest      one list per KV head from the summed scores of its query heads.
 *   infinigen  as headwise, but lists come from the approximate query of the layer computed at
 *              the previous layer's input (InfiniGen-style speculation, select_approx_q), with
 *              all hidden channels or the top fraction by W_q column norm.
 * headwise, quest and infinigen need n_kv_heads == 1 (the per-head attention calls address one
 * KV head); solohead and reversed work for any model.
 *
 * Batch: exactly one entry (the accuracy driver decodes one request at a time). The hook
 * synchronises (selections are read back to build page lists); nothing here allocates after
 * create. */
#ifndef PULSE_SPARSE_ATTN_H
#define PULSE_SPARSE_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "kv_cache.h"

enum sparse_policy {
    SPARSE_FULL = 0,
    SPARSE_SOLOHEAD,
    SPARSE_REVERSED,
    SPARSE_HEADWISE,
    SPARSE_QUEST,
    SPARSE_INFINIGEN,
    SPARSE_POLICY_COUNT
};

const char *sparse_policy_name(int policy);
/* The policy named name, or -1. */
int sparse_policy_find(const char *name);
/* Names, comma separated (messages). */
const char *sparse_policy_names(void);

struct sparse_params {
    int policy;              /* enum sparse_policy */
    int budget_tokens;       /* tokens chosen by score besides the forced blocks (multiple of bs) */
    int sink, window;        /* forced blocks (default 1 and 2) */
    const int32_t *selector; /* [n_layers] query head per layer (solohead, reversed) */
};

/* Per-run counters (reset by sparse_attn_configure). */
struct sparse_stats {
    int64_t sparse_calls;    /* global-layer attentions done sparsely */
    int64_t dense_calls;     /* global-layer attentions left dense (budget covers the context) */
    int64_t lists;           /* selection lists made */
    int64_t attended_tokens; /* tokens attended, summed over lists */
    int64_t context_tokens;  /* tokens a dense attention would read, summed over lists */
    int64_t unspeculated;    /* infinigen: global layers with no previous layer (real q used) */
};

/* Called with every selection list made at a global layer (host copies; the list's blocks
 * ascending). For the churn meter (locality.h): solohead gives one list per step. */
typedef void (*sparse_list_fn)(void *user, int layer, int list, const int32_t *blocks, int count,
                               int n_tokens);

struct sparse_attn;

/* For engine e (its model and context) and cache kv; max_tokens bounds every request; block
 * size = the cache's page size. infinigen_frac in (0, 1]: the fraction of hidden channels of
 * the approximate query (1 = all). NULL with a reason in err. */
struct sparse_attn *sparse_attn_create(struct engine *e, const struct kv_cache *kv, int page_size,
                                       int max_tokens, double infinigen_frac, char *err,
                                       size_t errlen);
void sparse_attn_free(struct sparse_attn *s);
/* Sets the policy and the request's cache slot, resets the counters. PULSE_OK, or
 * PULSE_ERR_INVALID with a reason (a budget not a multiple of the block size, a policy the
 * model's KV heads rule out, a missing selector). */
int sparse_attn_configure(struct sparse_attn *s, const struct sparse_params *p, int slot, char *err,
                          size_t errlen);
/* The hook to install with batch_set_hook while decoding with the configured policy. */
struct engine_layer_hook sparse_attn_hook(struct sparse_attn *s);
/* Optional observer of the selection lists (NULL removes it). */
void sparse_attn_set_list_observer(struct sparse_attn *s, sparse_list_fn fn, void *user);
void sparse_attn_get_stats(const struct sparse_attn *s, struct sparse_stats *out);

#endif
