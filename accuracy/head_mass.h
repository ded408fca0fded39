/* The MAM head profile with QUERY heads as selectors (sparse_attn.h) for the accuracy driver:
 * runtime/mam.h's accumulator and probe with query_selectors set. For global layer l and query
 * head h, MAM(l, h) is the mean over observed steps and over all query heads j of layer l of
 * the fraction of j's exact attention probability that falls in the blocks h's own Quest
 * selection picks (its q against its KV head's digests: forced sink, window and tail plus the
 * `budget` best others). The highest-MAM head is SoloHead's selector, the lowest the reversed
 * one. Sliding-window layers are not observed.
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
/* mam [n_layers][n_heads] (0 for local layers) and observations per layer. */
void head_mass_table(const struct head_mass *hm, double *mam, int64_t *obs);
/* Selectors from a table: per layer the highest (reversed: lowest) MAM head, ties to the lower
 * head; local layers get 0. */
void head_mass_selectors(const double *mam, int n_layers, int n_heads, int reversed, int32_t *out);

#endif
