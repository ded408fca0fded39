/* pulse bench decode-step --policy arkvale|infinigen: one (batch x context) point of offload
 * steps, timed and set against their floor (runtime/results/floor.h). */
#ifndef PULSE_BENCH_OFFLOAD_H
#define PULSE_BENCH_OFFLOAD_H

#include <jansson.h>

#include "engine.h"
#include "floor.h"
#include "run_offload.h"
#include "serve.h"

/* Runs `steps` offload steps of policy pol (an offload policy) for `batch` requests of `ctx`
 * prompt tokens on engine e (its max_batch >= batch, max_tokens >= ctx + steps + 1), the first
 * `warmup` untimed; each step is synchronised, so its time is the step's own. Fills pj with the
 * samples, the median, the mean step's floors (bandwidths bw) and the ratio, the host
 * synchronisations inside the steps, and the offload config. 0; EXIT_OOM when the memory is
 * refused; 1 after a message on another failure. */
int bench_offload_point(struct engine *e, const struct policy *pol,
                        const struct run_offload_opts *oo, const struct runtime_opts *rt, int batch,
                        int ctx, int warmup, int steps, int page_size, uint64_t seed,
                        const struct floor_bw *bw, json_t *pj);

#endif
