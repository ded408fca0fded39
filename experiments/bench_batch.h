/* The fixture of a dense (batch x context) point, shared by pulse bench decode-step and pulse
 * profile: `batch` synthetic requests of ctx prompt tokens in a KV cache sized for exactly
 * them, the engine's batch set to them and their prompt KV written. */
#ifndef PULSE_BENCH_BATCH_H
#define PULSE_BENCH_BATCH_H

#include <stddef.h>

#include "engine.h"
#include "kv_cache.h"

struct bench_batch {
    struct kv_cache *kv;
    struct batch *bt;
    size_t kv_bytes; /* the cache's pool */
};

/* Pool bytes of `batch` requests reserving `reserved` tokens each (all layers). */
size_t bench_batch_kv_bytes(const struct model_config *m, int batch, int reserved, int page_size);

/* Creates the cache on e's backend for requests 0..batch-1 (room for `reserved` >= ctx + 1
 * tokens each; batch <= the engine's max_batch), admits them at position ctx, sets a new batch
 * to them and writes their synthetic prompt KV, then synchronises. PULSE_OK; PULSE_ERR_OOM
 * with a reason in err when the backend refuses the cache or the batch (out is then empty). */
int bench_batch_create(struct engine *e, int batch, int ctx, int reserved, int page_size,
                       struct bench_batch *out, char *err, size_t errlen);
void bench_batch_free(struct engine *e, struct bench_batch *b);

#endif
