/* Sparse decode attention for accuracy runs: an engine_layer_hook (engine.h) that replaces the
 * dense attention of the global layers of one request with attention over the blocks a
 * selection policy picks (select.h), on either backend. Local (sliding-window) layers keep their
 * window; the prefill is dense. The KV stays whole in the paged cache: what is measured is the
 * accuracy of the selection, not the I/O.
 *
 * Policies, one meaning per name (DESIGN.md section 5; the serving path's --selection uses the
 * same words). G = n_heads / n_kv_heads query heads share a KV head; a list is made against the
 * Quest digests of one KV head, from one query head's q or the sum of a KV head's G query
 * heads' scores; the forced sink, window and tail blocks and the `budget` best others (select.h).
 *   full        dense attention (the hook does nothing but observe).
 *   headwise    one list per KV head from its query heads' summed scores; each query head
 *               attends its KV head's list (Quest, ArkVale).
 *   queryhead   one list per query head from its own q; each query head attends its own list
 *               (what the serving path recalls is the union per KV head).
 *   solohead    per layer the KV head selector[layer] (highest MAM over KV heads, head_mass.h):
 *               its headwise list serves every head of the layer (PulseInfer's SoloHead).
 *   solohead-q  per layer the QUERY head selector[layer] (highest MAM over query heads): its
 *               list serves every head; for one-KV-head models (Gemma 3 270M), where solohead
 *               and headwise coincide.
 *   reversed    solohead with the lowest-MAM KV head; reversed-q: solohead-q with the
 *               lowest-MAM query head (accuracy ablations).
 *   infinigen   headwise lists from the approximate query of the layer made at the previous
 *               layer's input (InfiniGen-style speculation, select_approx_q), with all hidden
 *               channels or the top fraction by W_q column norm; the attention uses the real q.
 *   mean        one list from the scores of every head (ArkVale's page list: select.h's
 *               SELECT_MEAN over digests of every KV head): every head attends it.
 *   infinigen-solohead
 *               solohead's list (the selector KV head) from infinigen's approximate query:
 *               InfiniGen's schedule with PulseInfer's selection (the engine-matched tier).
 * Every policy works at any GQA shape: a list of one KV head is attended through a view of that
 * head alone (kv_view.page_stride).
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
#include "select.h"

enum sparse_policy {
    SPARSE_FULL = 0,
    SPARSE_HEADWISE,
    SPARSE_QUERYHEAD,
    SPARSE_SOLOHEAD,
    SPARSE_SOLOHEAD_Q,
    SPARSE_REVERSED,
    SPARSE_REVERSED_Q,
    SPARSE_INFINIGEN,
    SPARSE_MEAN,
    SPARSE_INFINIGEN_SOLO,
    SPARSE_POLICY_COUNT
};

/* What a policy's selector array holds: SPARSE_SEL_NONE (no selector), SPARSE_SEL_KV (a KV
 * head per layer) or SPARSE_SEL_QUERY (a query head per layer). */
enum { SPARSE_SEL_NONE = 0, SPARSE_SEL_KV, SPARSE_SEL_QUERY };
int sparse_policy_selector_kind(int policy);
/* 1 for reversed and reversed-q (the selector is the lowest-MAM head). */
int sparse_policy_reversed(int policy);
/* 1 for infinigen and infinigen-solohead (lists from the approximate query). */
int sparse_policy_approx(int policy);
/* Selection lists a policy makes per global layer and step of one request. */
int sparse_policy_lists(int policy, int n_heads, int n_kv_heads);

const char *sparse_policy_name(int policy);
/* The policy named name, or -1. */
int sparse_policy_find(const char *name);
/* Names, comma separated (messages). */
const char *sparse_policy_names(void);

/* sparse_params.spec_from */
enum sparse_spec_from {
    SPARSE_SPEC_INPUT = 0, /* InfiniGen's: from layer l's input residual */
    SPARSE_SPEC_MID = 1,   /* from layer l's residual once its attention output is added, before
                              its MLP (engine_layer_hook.mid_layer): only the MLP's update
                              missing, a later start for the recall */
    SPARSE_SPEC_HITS = 2   /* PulseInfer's speculation with exact correction (pulse run
                              --spec-from hits): the attention is over the exact lists (the
                              tokens are the exact policy's: headwise, solohead), and where layer
                              l was predicted, layer l+1's approximate query comes from l's input
                              plus an attention over l's predicted lists (engine_attn_add), else
                              from mid-layer */
};

struct sparse_params {
    int policy;              /* enum sparse_policy */
    int budget_tokens;       /* tokens chosen by score besides the forced blocks (multiple of bs) */
    int sink, window;        /* forced blocks (default 1 and 2) */
    const int32_t *selector; /* [n_layers] the selector head per layer, of the kind that
                                sparse_policy_selector_kind names; NULL for the others */
    double spec_margin;      /* in [0, 1]; infinigen, infinigen-solohead: the speculation is
                                measured against the approximate query's list made again with
                                ceil((1 + spec_margin) * budget blocks) chosen by score (the
                                prediction of pulse run --spec-margin); 0: the attended list.
                                The attention and its list do not change with it */
    int spec_from;           /* enum sparse_spec_from: where infinigen and infinigen-solohead
                                make layer l+1's approximate query */
};

/* Per-run counters (reset by sparse_attn_configure). */
struct sparse_stats {
    int64_t sparse_calls;    /* global-layer attentions done sparsely */
    int64_t dense_calls;     /* global-layer attentions left dense (budget covers the context) */
    int64_t lists;           /* selection lists made */
    int64_t attended_tokens; /* tokens attended, summed over lists */
    int64_t context_tokens;  /* tokens a dense attention would read, summed over lists */
    int64_t unspeculated;    /* infinigen, infinigen-solohead: global layers with no previous
                                layer (real q used) */
    /* infinigen, infinigen-solohead, speculated layers: the blocks the exact query (the
     * layer's real q, the same selection otherwise) selects by score (the forced sink, window
     * and tail left out), and how many of them the approximate query's list holds (with a
     * spec_margin, its list of the larger budget): the speculation's hit rate (its misses are
     * what an exact correction would recall) */
    int64_t spec_exact, spec_hit;
    int64_t spec_predicted; /* the blocks chosen by score (forced ones left out) of the
                               lists the hits were looked up in: the prediction's size,
                               spec_exact's at margin 0 */
    int64_t spec_from_hits; /* spec_from hits: approximate queries made from an attention over a
                               predicted layer's predicted lists (the others from mid-layer) */
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
/* spec_exact and spec_hit (struct sparse_stats) of one layer since the last configure; 0, 0
 * for a layer that was not speculated. */
void sparse_attn_layer_spec(const struct sparse_attn *s, int layer, int64_t *exact, int64_t *hit);
/* The step-to-step behaviour of one layer's speculated lists since the last configure (the
 * approximate lists' churn beside the exact lists', the persistence of the misses and of the
 * wrong blocks: select.h's select_persist); zero for a layer that was not speculated. Always
 * the attended (budget) lists, whatever the spec_margin. */
void sparse_attn_layer_persist(const struct sparse_attn *s, int layer, struct select_persist *out);

#endif
