/* Offload points of pulse bench decode-step (bench_offload.h). */
#include "bench_offload.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "kv_cache.h"
#include "metrics.h"
#include "offload.h"
#include "results.h"

/* The requests' entries, admitted into the offload runtime (prompt KV off the clock). */
static int admit_all(struct offload *o, int batch, int ctx, int reserved, struct batch_entry *en)
{
    char why[256];
    for (int b = 0; b < batch; b++) {
        int slot;
        if (offload_admit(o, b, ctx, reserved, &slot, why, sizeof why) != PULSE_OK) {
            cli_error("bench", "offload admission: %s", why);
            return -1;
        }
        en[b] = (struct batch_entry){slot, b, ctx, reserved, offload_first_token(o, slot)};
    }
    return 0;
}

int bench_offload_point(struct engine *e, const struct policy *pol,
                        const struct run_offload_opts *oo, const struct runtime_opts *rt, int batch,
                        int ctx, int warmup, int steps, int page_size, uint64_t seed,
                        const struct floor_bw *bw, json_t *pj)
{
    const struct model_config *m = engine_model(e)->cfg;
    const struct backend *be = engine_model(e)->be;
    const int reserved = ctx + steps + 1;
    char spec[64], err[512] = "";
    snprintf(spec, sizeof spec, "uniform:%d:%d", ctx, batch);
    struct workload w;
    struct run_offload *ro = mem_alloc(MEM_HOST, sizeof *ro, "bench offload");
    struct kv_cache *kv = NULL;
    struct query_source *qs = NULL;
    struct offload *o = NULL;
    struct batch *bt = NULL;
    struct batch_entry *en = mem_alloc(MEM_HOST, sizeof *en * (size_t)batch, "entries");
    double *ms = mem_alloc(MEM_HOST, sizeof(double) * (size_t)steps, "samples");
    int code = 1;
    if (!ro || !en || !ms || workload_create(&w, spec, steps + 1, seed, err, sizeof err)) {
        mem_free(MEM_HOST, ro, sizeof *ro);
        mem_free(MEM_HOST, en, sizeof *en * (size_t)batch);
        mem_free(MEM_HOST, ms, sizeof(double) * (size_t)steps);
        return EXIT_OOM;
    }
    /* a KV budget for the batch's dense layers, hot slots and tails (resolved, then sized) */
    struct kv_cache_params kp = {m->n_layers, m->n_kv_heads, m->head_dim, page_size,
                                 0,           batch,         reserved};
    kp.budget_bytes = (size_t)batch * kv_cache_params_request_bytes(&kp, reserved);
    if (run_offload_resolve(ro, oo, rt, pol, m, be, &w, &kp, seed)) goto out;
    kp.budget_bytes = (size_t)batch * offload_request_kv_bytes(&ro->p, m, &kp, reserved);
    code = EXIT_OOM;
    if (!(kv = kv_cache_create(&kp, be, engine_ctx(e), err, sizeof err))) goto out;
    struct query_source_shape sh;
    offload_source_shape(&ro->p, m, page_size, &sh);
    code = 1;
    if (!(qs = locality_source_create(&sh, &ro->src, err, sizeof err))) goto out;
    ro->p.source = qs; /* (the schedule is the resolved one: --speculate's or the policy's) */
    int rc = offload_create(e, kv, &ro->p, &o, err, sizeof err);
    if (rc != PULSE_OK) {
        code = rc == PULSE_ERR_OOM ? EXIT_OOM : 1;
        goto out;
    }
    if (!(bt = batch_create(e)) || admit_all(o, batch, ctx, reserved, en)) goto out;
    batch_set(e, bt, kv, en, batch);
    be->sync(engine_ctx(e));
    struct floor_traffic sum = {0, 0, 0, 0};
    struct offload_stats st0; /* before the first timed step */
    memset(&st0, 0, sizeof st0);
    for (int i = 0; i < steps; i++) {
        if (i == warmup) offload_get_stats(o, &st0);
        const double t = pulse_now();
        if (offload_step(o, bt, en, batch) != PULSE_OK) {
            cli_error("bench", "offload step %d failed", i);
            goto out;
        }
        be->sync(engine_ctx(e));
        ms[i] = (pulse_now() - t) * 1e3;
        struct floor_traffic tr;
        offload_step_traffic(o, 0, &tr);
        if (i >= warmup) floor_traffic_add(&sum, &tr);
        for (int b = 0; b < batch; b++)
            en[b].pos++; /* the next step's host view (tokens are the device's own) */
    }
    const int timed = steps - warmup;
    const struct floor_traffic mean = {sum.weight_bytes / timed, sum.kv_bytes / timed,
                                       sum.digest_bytes / timed, sum.recall_bytes / timed};
    struct floor_result f;
    floor_compute(&mean, bw, pol->overlapped, &f);
    struct dist_summary ds;
    metrics_summarize(ms + warmup, timed, &ds);
    struct offload_stats st;
    offload_get_stats(o, &st);
    json_t *a = json_array();
    for (int i = warmup; i < steps; i++)
        json_array_append_new(a, json_real(ms[i]));
    json_object_set_new(pj, "ms_samples", a);
    results_set_real(pj, "ms_per_step_median", ds.median);
    results_set_real(pj, "ms_per_step_mean", ds.mean);
    json_object_set_new(pj, "mean_step_floor", floor_json(&mean, bw, pol->overlapped));
    results_set_real(pj, "floor_ms", f.floor_s * 1e3);
    results_set_real(pj, "ratio_to_floor", ds.mean / (f.floor_s * 1e3));
    results_set_real(pj, "output_tokens_per_s", batch / (ds.median * 1e-3));
    json_object_set_new(pj, "host_syncs_in_steps", json_integer(st.host_syncs));
    /* the timed steps' recall, all requests and sparse layers: a prefetching schedule's
     * prefetch among it (the rest follows the selections: corrections, and the rounds of the
     * layers not predicted) */
    json_object_set_new(pj, "timed_recall",
                        json_pack("{s:i, s:I, s:I}", "steps", timed, "bytes",
                                  (json_int_t)(st.recall_bytes - st0.recall_bytes),
                                  "prefetch_bytes",
                                  (json_int_t)(st.spec_recall_bytes - st0.spec_recall_bytes)));
    json_object_set_new(pj, "offload", offload_config_json(o));
    json_object_set_new(pj, "status", json_string("ok"));
    code = 0;
out:
    if (code == 1 && err[0] && !json_object_get(pj, "error")) /* else the message is out */
        json_object_set_new(pj, "error", json_string(err));
    if (code) json_object_set_new(pj, "status", json_string(code == EXIT_OOM ? "oom" : "error"));
    if (bt) batch_free(e, bt);
    offload_free(o);
    query_source_free(qs);
    kv_cache_free(kv);
    workload_free(&w);
    mem_free(MEM_HOST, ro, sizeof *ro);
    mem_free(MEM_HOST, en, sizeof *en * (size_t)batch);
    mem_free(MEM_HOST, ms, sizeof(double) * (size_t)steps);
    return code;
}
