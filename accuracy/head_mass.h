/* The MAM head profile of the accuracy driver at both SoloHead granularities (sparse_attn.h),
 * runtime/select/mam.h's accumulators fed by one probe:
 *   KV heads (solohead, reversed): for global layer l and KV head g, MAM(l, g) is the mean over
 *     observed steps and over all query heads j of layer l of the fraction of j's exact
 *     attention probability that falls in the blocks g's headwise selection picks (its query
 *     heads' summed scores against its digests);
 *   query heads (solohead-q, reversed-q): the same with query head h's own selection (its q
 *     against its KV head's digests) in place of g's.
 * Both: the forced sink, window and tail plus the `budget` best others. The highest-MAM head is
 * SoloHead's selector, the lowest the reversed one. Sliding-window layers are not observed.
 *
 * Installed as an engine_layer_hook (after_attention) while decoding one request with dense
 * attention; on cuda it copies the layer's q and KV pages to the host (a few MB per global
 * layer and step) and computes there with the CPU references. */
#ifndef PULSE_HEAD_MASS_H
#define PULSE_HEAD_MASS_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "kv_cache.h"

struct head_mass;

/* For engine e and cache kv (page size = block size), requests up to max_tokens, selection
 * budget in tokens (a multiple of the block size) and sink / window in blocks. NULL with a
 * reason in err. */
struct head_mass *head_mass_create(struct engine *e, const struct kv_cache *kv, int page_size,
                                   int max_tokens, int budget_tokens, int sink, int window,
                                   char *err, size_t errlen);
void head_mass_free(struct head_mass *hm);
/* Forgets every observation. */
void head_mass_reset(struct head_mass *hm);
struct engine_layer_hook head_mass_hook(struct head_mass *hm);
/* query_heads 0: mam [n_layers][n_kv_heads]; 1: mam [n_layers][n_heads] (0 for local layers);
 * and observations (decode steps) per layer. */
void head_mass_table(const struct head_mass *hm, int query_heads, double *mam, int64_t *obs);
/* Selectors from a table of n_sel heads per layer: per layer the highest (reversed: lowest) MAM
 * head, ties to the lower head; local layers get 0. */
void head_mass_selectors(const double *mam, int n_layers, int n_sel, int reversed, int32_t *out);

#endif
