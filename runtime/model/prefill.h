/* Real prefill of a serving request's prompt (pulse run --prompt-kv prefill). The prompt's ids
 * are deterministic: token i of request r is pulse_hash64(seed ^ "prefill", r << 32 | i) mod
 * vocab (uniform over the vocabulary; no tokenizer, a stand-in for real text). prefill_run feeds
 * them through engine_prefill in chunks of up to `chunk` consecutive tokens of the one request
 * (dense causal attention; the K/V of every layer land in the slot's pages) and returns the
 * greedy next token, the first token decode consumes. A prefill owns its batch and host entry
 * buffer, allocated at create; prefill_run allocates nothing. */
#ifndef PULSE_PREFILL_H
#define PULSE_PREFILL_H

#include <stdint.h>

#include "engine.h"

struct prefill;

/* For engine e (chunk <= the engine's max_batch) and the run's seed. NULL when out of memory. */
struct prefill *prefill_create(struct engine *e, uint64_t seed, int chunk);
void prefill_free(struct prefill *pf);

/* Token i of request req_id's prompt. */
int32_t prefill_token(const struct prefill *pf, int req_id, int i);

/* Real prompts instead of the hashed ids: token i of request req_id is fn(user, req_id, i)
 * (a tokenized text, e.g. an accuracy sample); NULL restores the hashed ids. fn must return a
 * token of the vocabulary for every i below the prompt lengths the requests are admitted with. */
typedef int32_t (*prefill_token_fn)(void *user, int req_id, int i);
void prefill_set_prompts(struct prefill *pf, prefill_token_fn fn, void *user);

/* Prefills tokens [0, prompt_len) of request req_id into cache slot `slot` of kv (reserved for
 * `reserved` > prompt_len tokens); returns the greedy token after the prompt (waits for it). With
 * prompt_len 0 nothing runs and the token is engine_first_token(req_id). */
int32_t prefill_run(struct prefill *pf, const struct kv_cache *kv, int slot, int req_id,
                    int prompt_len, int reserved);

#endif
