/* The serving loop shared by every policy: requests arrive, the policy admits them into
 * batches and runs steps, the loop records tokens, per-request times and counters. */
#ifndef PULSE_SERVE_H
#define PULSE_SERVE_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "engine.h"
#include "floor.h"

#define SERVE_MAX_BATCHES_ 4 /* = SERVE_MAX_BATCHES, needed before struct serve_step */

struct request {
    int id, prompt_len, output_len;
    /* tokens its KV reserves: 0 = prompt_len + output_len (request_reserved); more makes its
     * attention's bounds another run's (e.g. a sample decoded alone with a longer reservation,
     * whose CUDA split plan follows the reservation) */
    int reserve_len;
    double arrival_s; /* after the run's start */
    /* filled by the run (seconds after the start; -1 until it happens) */
    double admit_s, first_token_s, done_s;
    int generated;
    int slot;            /* cache slot while running, else -1 */
    int batch;           /* the running batch it was admitted to (serve_add_entry), -1 before */
    int32_t first_token; /* the token its first step consumed (with a real prefill, the
                            prompt's greedy next token): its answer is this, then tokens[] */
    int32_t *tokens;     /* optional [output_len] ids, owned by the caller */
    const char *error;   /* NULL: finished (or not yet); else why it ended unfinished (done_s is
                            when): its batch's step failed (serve_batch.failed's reason) */
};

/* The tokens a request's KV reserves (request.reserve_len). */
static inline int request_reserved(const struct request *r)
{
    return PULSE_MAX(r->reserve_len, r->prompt_len + r->output_len);
}

/* One decode step as the loop saw it: wall time from the step call (or the previous step's
 * tokens, when later: the step was queued ahead) to its tokens on the host, the batch, and
 * what the step moved (the policy's traffic report; zeros without one). */
struct serve_step {
    double step_s;
    int batch;                       /* entries of every running batch */
    int batches[SERVE_MAX_BATCHES_]; /* entries of each running batch */
    struct floor_traffic t;
};

struct serve_counters {
    int64_t steps, tokens, admitted, batch_changes;
    /* steps queued before the previous step's tokens were read (the loop runs ahead while a
     * step's end changes no batch; serve_params.run_ahead 0: never) */
    int64_t steps_ahead;
    /* of those, the steps queued ahead while requests waited (policy.admit_idle) */
    int64_t steps_ahead_waiting;
    /* host time in the policy's step calls (queuing the steps) and waiting for their tokens,
     * summed: queuing close to the steps' time means the host sets the pace */
    double host_queue_s, host_wait_s;
    int64_t requests_failed;    /* ended with an error (request.error), the others went on */
    int64_t admission_refusals; /* a waiting request did not fit the KV budget yet */
    int64_t peak_batch, peak_pages_used;
    int64_t step_alloc_calls; /* allocations made while steps ran: must stay 0 */
    /* host synchronisations (common.h) made inside the policy's step calls, summed and the
     * most in one step: 0 when no step makes a host round trip. The loop's own readback of a
     * step's tokens comes after the step and is not counted here. */
    int64_t step_host_syncs, step_host_syncs_max;
    /* offload counters (zero for vanilla; carried so every result has them); ioaa_nodes: the
     * IOAA search's nodes (ioaa.h: leaves and branches evaluated) summed over its decisions */
    int64_t recall_bytes, recall_chunks, recall_stalls, layer_switches, ioaa_nodes;
    /* a prefetching schedule's (offload.h: offload_prefetch): chunks the prefetches recalled,
     * the exact selections' corrections, the prediction's scored and held blocks, and the
     * predictions made from mid-layer and from a predicted layer's attention over its predicted
     * lists (offload_params.spec_from) */
    int64_t spec_recall_chunks, spec_corrections, spec_scored, spec_held, spec_mid, spec_hits;
    /* of the latter, the layers whose correction was queued at the exact plan, and the lists
     * whose correction the gate held (offload_params.spec_correct_early) */
    int64_t spec_early_corrections, spec_correction_holds;
    /* zero-copy's attention that recalls (offload_params.attend_recall): (layer, step)s whose
     * misses the attention read from the host pool, and those misses (chunks) */
    int64_t attend_recall_layers, attend_recall_chunks;
    /* the offload step's streams and launches (offload.h's offload_stats of the same names):
     * selections on the prediction's stream, selections two in one launch, corrections
     * gathered on their own stream, layers planned by the fused kernel */
    int64_t forked_selections, joint_selections, stream_corrections, fused_plans;
    /* two-batch schedulers (pulseinfer): normal-batch layers run while an offload layer's
     * recall was in flight; sparse offload layers whose recall was done when the scheduler
     * came back to it (hidden) or not (exposed: it waited); the time it waited; admission
     * decisions (nodes per decision = ioaa_nodes / ioaa_decisions), the most nodes one visited
     * and the evaluations inside the nodes' closed forms; requests admitted to each batch;
     * batch sizes summed over steps and at most */
    int64_t normal_layers_in_flight, recalls_hidden, recalls_exposed;
    double offload_wait_s;
    int64_t ioaa_decisions, ioaa_nodes_max, ioaa_bound_evaluations, admitted_normal,
        admitted_offload;
    int64_t batch_sum[SERVE_MAX_BATCHES_], batch_max[SERVE_MAX_BATCHES_];
    double clock_paused_s; /* excluded from the recorded times (serve_pause_clock) */
    double step_s_sum;     /* steps' wall time, summed (serve_step.step_s) */
    struct floor_traffic traffic_sum;
};

/* What a policy works on. Requests are in arrival order; [0, n_arrived) have arrived, and a
 * policy admitting out of order (serve_take_waiting) permutes the waiting ones: after a run the
 * caller's array holds every request, each with its own id and tokens, perhaps reordered. */
/* One running batch of the loop: the engine batch, the host view of its entries, the request
 * each entry serves. The loop owns them; a policy adds entries (serve_add_entry) and steps the
 * batch; the loop re-sets a dirty batch before the step, reads its tokens after and retires
 * finished requests. */
struct serve_batch {
    struct batch *bt;
    struct batch_entry *entries; /* [max_batch] */
    int *entry_req;              /* [max_batch] request index of each entry */
    int n_entries;
    int dirty; /* entries changed since the last batch_set */
    /* set by the policy's step, which then returns PULSE_ERR_IO: why this batch's step failed
     * (a static string, e.g. a recall that failed every attempt: offload_clear_failure); its
     * tokens are not valid. The loop ends its requests with that error, releases them and goes
     * on with the other batches and the queue. NULL: the step did not fail. */
    const char *failed;
};

#define SERVE_MAX_BATCHES SERVE_MAX_BATCHES_

struct serve_state {
    struct engine *eng;
    struct kv_cache *kv;
    struct request *reqs;
    int n_reqs, n_arrived, next_waiting;       /* FCFS: reqs[next_waiting..n_arrived) wait */
    struct serve_batch run[SERVE_MAX_BATCHES]; /* the running batches, [0, n_batches) */
    int n_batches;
    struct batch *admit_batch; /* scratch batch for new arrivals' prompt KV */
    int max_batch;             /* entries per batch */
    double t0;
    struct serve_counters ctr;
    const struct policy *pol;
    struct serve_step *series; /* the caller's per-step record (serve_params.series), or NULL */
    int64_t series_cap;
    void *policy_ctx;     /* what serve_run_policy was given, of the policy's ctx_kind */
    double report_step_s; /* the loop's wall time of the step the policy's traffic reports */
    char why[256];        /* a policy's reason when a request can never be admitted ("" = none) */
};

/* What a policy's context (serve_run_policy's policy_ctx) is. */
enum policy_ctx_kind {
    POLICY_CTX_NONE = 0,    /* none (a context given is not used) */
    POLICY_CTX_PREFILL = 1, /* optional: NULL (synthetic prompt KV) or a struct prefill *
                               (prefill.h: admission prefills the prompt) */
    POLICY_CTX_OFFLOAD = 2, /* required: a struct offload * (offload.h) */
};

struct offload_params;

/* What a policy's ctx_create makes its context from. */
struct policy_ctx_params {
    struct engine *eng;
    struct kv_cache *kv;
    uint64_t seed;
    int max_batch;
    int prefill;                          /* POLICY_CTX_PREFILL: 1 = a real prefill, 0 = none */
    const struct offload_params *offload; /* POLICY_CTX_OFFLOAD: the runtime's params */
    /* two-batch schedulers (pulseinfer) */
    int no_irq;                /* 1: the offload batch's layers run without interruption */
    const char *admission;     /* "ioaa" (NULL: the default) or "fixed:LEN" */
    const char *profile;       /* IOAA profile JSON (pulse profile); NULL: analytic from bw */
    double hbm_gbps, h2d_gbps; /* measured in this process: the analytic profile's inputs */
    const char *device; /* the run's device (backend_env_device), or NULL: a profile measured on
                           another is carried to it (pulseinfer) */
    int max_waiting;           /* waiting requests one admission decision takes (0: 32) */
    int no_ioaa_refit;         /* 1: IOAA keeps the profile's recall terms (ioaa_refit.h) */
    int ioaa_bytes_profile;    /* 0 (default): a measured profile's recall per request and
                                  layer (r) replaced by the run's query source's (its budget
                                  times its target churn, as the analytic profile's); 1: the
                                  profile's, as measured on its own workload */
    const char *trace;         /* Chrome-trace timeline of the schedule (timeline.h), or NULL */
    const char *self_interleave; /* "on", "auto" or "off" (NULL: off): the offload batch in
                                    two interleaved halves when no normal batch runs */
};

/* A policy's table; baselines/registry.h finds them by name. */
struct offload_schedule;

struct policy {
    const char *name;
    int n_batches; /* running batches the loop holds for it (0 = 1, at most SERVE_MAX_BATCHES) */
    /* Admits waiting requests (reserving their KV and writing their prompt KV). */
    int (*admit)(struct serve_state *s);
    /* Runs one decode step of every running batch that has entries (in any interleaving: each
     * batch's layers in order); returns PULSE_OK. */
    int (*step)(struct serve_state *s);
    /* Optional: 1 when admit, called now, would admit nothing and change nothing (requests wait,
     * but nothing its decision depends on has changed since it last refused them). The loop then
     * queues the next step before reading this one's tokens (serve_params.run_ahead) even while
     * requests wait; without it, waiting requests stop the loop from running ahead. */
    int (*admit_idle)(const struct serve_state *s);
    /* Optional: frees what the policy holds for the request in cache slot `slot` (called when
     * it finishes, before its KV pages are released). */
    void (*release)(struct serve_state *s, int slot);
    /* Optional: what a step moved (floor.h), called after its tokens were read: the step queued
     * last when ahead is 0, the one before it when 1 (the loop queued the next step first;
     * the entries' positions are then one past the reported step's). */
    void (*traffic)(struct serve_state *s, int ahead, struct floor_traffic *out);
    /* Optional: called once after the last step (or a failure): the policy's final counters
     * into s->ctr (e.g. the offload runtime's recall totals, read once, not after every step:
     * reading them waits for the runtime's bookkeeping, a host round trip). */
    void (*finish)(struct serve_state *s);
    int overlapped;        /* its recall overlaps compute: the step floor is max(HBM, PCIe) */
    int needs_ctx;         /* 1: runs only with a policy context (serve_run_policy) */
    /* offload policies: their layer schedule (offload.h's struct offload_schedule, defined in
     * the policy's file) for offload_params.schedule */
    const struct offload_schedule *offload_schedule;
    /* and the one --speculate gives it (a prefetching schedule: speculation with exact
     * correction); NULL when it has none */
    const struct offload_schedule *offload_spec_schedule;
    int ctx_kind;          /* enum policy_ctx_kind */
    /* Optional (NULL: it takes no context): makes the context a run of this policy takes from
     * p into *ctx (NULL when there is none, e.g. vanilla without prefill). PULSE_OK, or
     * PULSE_ERR_OOM / PULSE_ERR_INVALID with a one-line reason in err. */
    int (*ctx_create)(const struct policy_ctx_params *p, void **ctx, char *err, size_t errlen);
    /* With ctx_create: frees what it made (NULL is fine). */
    void (*ctx_free)(void *ctx);
    /* Optional: the offload runtime inside the context (POLICY_CTX_OFFLOAD; NULL: the context
     * is the struct offload itself). */
    struct offload *(*offload_of)(void *ctx);
    /* Optional: the context's own counters and config as a new JSON object (pulse run puts it
     * in counters under the policy's name). */
    struct json_t *(*ctx_json)(const void *ctx);
    /* Offload policies' defaults of pulse run's --selection and --recall-engine (NULL:
     * headwise, per-block) */
    const char *offload_selection, *offload_engine;
    /* ... of --page-size (0: 16), of --hot-slots as a number of pages cached per request and
     * layer when that exceeds what one step selects (0: the selection; never more than the
     * request's blocks), and of --reuse (1: none, the whole selection re-fetched every step;
     * 0: resident blocks reused) */
    int offload_page_size, offload_cache_pages, offload_refetch;
};

/* Admits reqs[i] as an entry of running batch k: reserves its KV (PULSE_ERR_NOMEM when it does
 * not fit now) and queues its synthetic prompt KV, its first token engine_first_token; or, when
 * the policy's context is a prefill (POLICY_CTX_PREFILL, not NULL: vanilla with --prompt-kv
 * prefill, prefill.h), prefills the prompt into its pages (off the clock, as a prefill
 * instance's work) and starts from the prefill's greedy token. Shared by policies. */
int serve_admit_request(struct serve_state *s, int k, int i);
/* Adds reqs[i], already holding cache slot `slot` and its prompt KV, to running batch k (which
 * must have room); the first step consumes `token`. */
void serve_add_entry(struct serve_state *s, int k, int i, int slot, int32_t token);
/* Moves waiting request j (next_waiting <= j < n_arrived) to the head of the queue, so that a
 * policy admitting out of arrival order (by length: IOAA) admits reqs[next_waiting]; the
 * waiting requests' order among themselves is not kept. */
void serve_take_waiting(struct serve_state *s, int j);
/* Entries of every running batch. */
int serve_entries(const struct serve_state *s);
/* policy.admit_idle of a policy whose admission reserves a request whole (its KV, or its host
 * pool and hot cache) and takes the queue in order (vanilla, the offload baselines): what it
 * refused stays refused until a request ends or arrives, and either stops the loop's running
 * ahead by itself, so 1. */
int serve_admit_idle_reserved(const struct serve_state *s);
/* Excludes `seconds` just spent from every time the loop records (arrivals, token times, the
 * wall time): for work that stands for another machine, e.g. an offload policy writing a
 * prompt's synthetic KV into the host pool, as a prefill instance would have. */
void serve_pause_clock(struct serve_state *s, double seconds);

/* Runs every request to its output length. Returns PULSE_OK, or PULSE_ERR_INVALID with a
 * reason in err when a request can never be admitted (longer than the KV budget). */
int serve_run(struct engine *e, struct kv_cache *kv, const struct policy *pol, struct request *reqs,
              int n, int max_batch, struct serve_counters *ctr, double *wall_s, char *err,
              size_t errlen);
/* serve_run with a policy context of the policy's ctx_kind (owned by the caller, alive for the
 * run; ctx_create makes one): required by a policy with needs_ctx (PULSE_ERR_INVALID without
 * it); for vanilla NULL (synthetic prompt KV) or a struct prefill * (real prefill). */
int serve_run_policy(struct engine *e, struct kv_cache *kv, const struct policy *pol,
                     void *policy_ctx, struct request *reqs, int n, int max_batch,
                     struct serve_counters *ctr, double *wall_s, char *err, size_t errlen);
/* How the loop runs besides the policy (serve_run_params). serve_params_init's defaults read
 * nothing else (no environment: a run's come from its command line,
 * experiments/runtime_opts.h). */
struct serve_params {
    struct serve_step *series; /* the first series_cap steps' records (the caller's buffer;
                                  the counters' sums cover every step); NULL (default): none */
    int64_t series_cap;
    int run_ahead; /* 1 (default): the next step is queued before a step's tokens are read
                      wherever the step's end changes no batch (counters.steps_ahead); 0:
                      every step's tokens are read before the next is queued */
    int ioaa_refit; /* 1 (default): pulseinfer's IOAA refits its recall terms from the measured
                       steps (ioaa_refit.h); 0: the profile's as they are. Read by the policy
                       (policy_ctx_params.no_ioaa_refit), not by the loop */
    int ioaa_bytes; /* 0 (default): IOAA's recall per request and layer is the run's query
                       source's; 1: its measured profile's (policy_ctx_params.ioaa_bytes_profile) */
};
void serve_params_init(struct serve_params *p);
/* serve_run_policy as p says. */
int serve_run_params(struct engine *e, struct kv_cache *kv, const struct policy *pol,
                     void *policy_ctx, struct request *reqs, int n, int max_batch,
                     const struct serve_params *p, struct serve_counters *ctr, double *wall_s,
                     char *err, size_t errlen);

#endif
