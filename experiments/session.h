/* One model ready to decode one request at a time: the config (built-in name, checkpoint
 * directory or .gguf), its tokenizer when the file has one, the engine, a one-slot KV cache
 * reserved for max_tokens, and a batch of up to `chunk` entries for the prefill. Shared by
 * pulse generate and pulse accuracy. */
#ifndef PULSE_SESSION_H
#define PULSE_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "accuracy/model_load.h"
#include "accuracy/tokenizer.h"
#include "engine.h"
#include "kv_cache.h"
#include "runtime_opts.h"

struct session {
    const struct model_config *cfg;
    struct loaded_config lc;
    int real; /* weights from a file */
    const char *model;
    struct tokenizer *tok; /* NULL when the model file has none */
    struct engine *e;
    struct kv_cache *kv;
    struct batch *bt;            /* prefill and decode steps: a hook set on it sees both */
    struct batch_entry *entries; /* [chunk] */
    int32_t *tokbuf;             /* [chunk] */
    int slot, max_tokens, chunk;
};

/* Resolves the model (usage errors: PULSE_ERR_INVALID with the reason in err). */
int session_config(struct session *s, const char *model, char *err, size_t errlen);
/* Opens the tokenizer of a .gguf model (none for other models: s->tok stays NULL). */
int session_tokenizer(struct session *s, char *err, size_t errlen);
/* Creates engine, cache and batch for requests up to max_tokens, prefill chunks of `chunk`
 * tokens, the engine tuned by rt (its RT_ENGINE options; NULL: the defaults). PULSE_OK,
 * PULSE_ERR_OOM or another error with a reason in err. */
int session_start(struct session *s, const struct backend *be, uint64_t seed, int max_tokens,
                  int chunk, const struct runtime_opts *rt, char *err, size_t errlen);
void session_close(struct session *s);

/* Prefill: ids[0..n) through the model in chunks (dense attention); returns the greedy next
 * token. n + the tokens decoded after must stay within max_tokens. */
int32_t session_prefill(struct session *s, const int32_t *ids, int n);
/* One decode step: token at position pos (its K/V appended there); returns the greedy next
 * token. */
int32_t session_decode(struct session *s, int pos, int32_t token);

#endif
