/* Accuracy samples served together through the serving loop (runtime/sched/serve.h) with an offload
 * policy of pulse run (arkvale or pulseinfer, whose tables the caller finds in
 * baselines/registry.h), so that a table's column
 * comes from the path whose throughput pulse run measures: the policy's admission and batches
 * (pulseinfer: IOAA, the normal and the offload batch, IRQ), the offload runtime with a real
 * prefill of each sample's prompt into the host pool and the real query.
 *
 * Every request arrives at once, reserves max_tokens (as the accuracy session's one entry does:
 * the same attention bounds, so the same split plans on CUDA) and decodes max_gen tokens with no
 * stop: the caller cuts the answer where the accuracy path stopped. A request's batch says which
 * path made its tokens: pulseinfer's normal batch (0) keeps every block, so its tokens are full
 * attention's; an offloaded request's (arkvale: 0; pulseinfer: 1) are the selection's. */
#ifndef PULSE_SERVE_BATCH_H
#define PULSE_SERVE_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "serve.h"

struct serve_batch_params {
    const struct policy *pol; /* an offload policy's table (POLICY_CTX_OFFLOAD) */
    int selection;            /* OFFLOAD_HEADWISE or OFFLOAD_SOLOHEAD */
    const int32_t *selector;  /* SoloHead: [n_layers] KV head per layer */
    int budget_tokens, sink, window;
    int max_tokens;        /* each request's reservation: its prompt and max_gen fit in it */
    int prefill_chunk;     /* tokens per prefill pass, <= the engine's max_batch */
    int max_batch;         /* entries per running batch (<= the engine's max_batch) */
    int normal_requests;   /* whole requests the GPU KV budget holds beside max_batch offloaded
                              ones (pulseinfer's normal batch; 0: none) */
    const char *admission; /* pulseinfer: NULL (IOAA on the analytic profile) or "fixed:LEN" */
    uint64_t seed;
    int speculate; /* the policy's prefetching schedule (pulseinfer --speculate) */
};

struct serve_batch_req {
    const int32_t *ids; /* the prompt, n >= 1 tokens */
    int n, max_gen;     /* max_gen >= 2: the prefill's token and max_gen - 1 decode steps */
    int32_t *out;       /* [max_gen]: filled with the answer's tokens, the prefill's first */
    int batch;          /* filled: the running batch that served it */
    const char *error;  /* filled: NULL, or why it ended unfinished */
};

struct serve_batch_stats {
    struct serve_counters ctr; /* the serving loop's (steps, recall, host syncs, IOAA, ...) */
    double wall_s;
};

/* Serves reqs[0..n) on engine e (its own cache and the policy's context are made here and
 * freed). PULSE_OK (a request that failed has its error set and st->ctr.requests_failed counts it),
 * or an error with a one-line reason in err. */
int serve_batch_run(struct engine *e, const struct serve_batch_params *p,
                    struct serve_batch_req *reqs, int n, struct serve_batch_stats *st, char *err,
                    size_t errlen);

#endif
