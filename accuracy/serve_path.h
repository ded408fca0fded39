/* The serving path of an accuracy run: one request at a time through the offload runtime
 * (runtime/offload/offload.h) under a policy's layer schedule (arkvale's: select, recall,
 * attend at each layer) with a real prefill of the sample's prompt into the host pool and the real
 * query (OFFLOAD_QUERY_REAL), so a sample's tokens come from the implementation whose throughput
 * `pulse run` measures. Every global layer is sparse (no dense prefix), as on the accuracy path; a
 * sliding-window layer keeps its window in a ring of GPU pages (offload.h: OFFLOAD_LAYER_WINDOW).
 *
 * With infinigen's schedule the layers are selected one layer ahead from InfiniGen's approximate
 * query of every hidden channel, as accuracy/sparse_attn.h's infinigen at --infinigen-frac 1.
 *
 * The same greedy loop as the accuracy driver's: the first token is the prefill's, each next one
 * a decode step's, until max_gen tokens or `stop` says a token ends the answer (not kept). */
#ifndef PULSE_SERVE_PATH_H
#define PULSE_SERVE_PATH_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "offload.h"

struct serve_path_params {
    int selection;           /* OFFLOAD_HEADWISE or OFFLOAD_SOLOHEAD */
    const int32_t *selector; /* SoloHead: [n_layers] KV head per layer (copied at create) */
    int budget_tokens, sink, window;
    enum recall_engine engine;
    const struct offload_schedule *schedule; /* a policy's (struct policy's offload_schedule):
                                                infinigen's selects one layer ahead from the
                                                approximate query */
    int max_tokens;    /* prompt + new tokens of the longest request */
    int prefill_chunk; /* tokens per prefill pass, <= the engine's max_batch */
    uint64_t seed;
};

struct serve_path;

/* On engine e (its own cache and offload runtime are made here). NULL with a reason in err. */
struct serve_path *serve_path_create(struct engine *e, const struct serve_path_params *p, char *err,
                                     size_t errlen);
void serve_path_free(struct serve_path *s);

typedef int (*serve_path_stop_fn)(void *user, int32_t token);

/* Decodes the prompt ids[0..n) (n >= 1, n + max_gen <= max_tokens) into out[0..*k): PULSE_OK, or
 * an error with a reason (a failed recall, a refused admission). */
int serve_path_decode(struct serve_path *s, const int32_t *ids, int n, int max_gen,
                      serve_path_stop_fn stop, void *user, int32_t *out, int *k, char *err,
                      size_t errlen);

/* The runtime's counters so far (recall bytes, steps, host synchronisations). */
void serve_path_stats(const struct serve_path *s, struct offload_stats *out);

#endif
