/* pulse run: serves a workload with a policy on a backend and writes one result JSON. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "accuracy/model_load.h"
#include "baselines/registry.h"
#include "cli.h"
#include "common.h"
#include "engine.h"
#include "gpu_activity.h"
#include "kv_cache.h"
#include "numeric.h"
#include "offload.h"
#include "results.h"
#include "run_offload.h"
#include "runtime_opts.h"
#include "serve.h"
#include "workloads/workload.h"

static const char usage[] =
    "usage: pulse run [options]\n"
    "  Serves every request of a workload to its output length and writes a result JSON.\n"
    "  --backend B        cpu, cuda or auto (default auto: cuda when a GPU is usable)\n"
    "  --model NAME       built-in model config (default tiny; see pulse models)\n"
    "  --policy P         vanilla, arkvale, infinigen or pulseinfer (default vanilla); the\n"
    "                     baselines as published: arkvale = --page-size 32 --selection mean\n"
    "                     --recall-engine per-block --hot-slots 128, infinigen = --selection\n"
    "                     headwise --recall-engine gather-scatter --reuse none; their\n"
    "                     engine-matched tier: arkvale+solohead+gs, arkvale+solohead+zc,\n"
    "                     infinigen+solohead+gs, infinigen+solohead+zc (SoloHead, page 16,\n"
    "                     gather-scatter or zero-copy, resident blocks reused)\n"
    "  --workload SPEC    uniform:LEN:COUNT, random:MIN:MAX:COUNT or lengths:L1,L2,...\n"
    "                     (default uniform:256:4)\n"
    "  --arrival SPEC     all (default: every request at 0), poisson:RATE (requests/s) or\n"
    "                     gamma:RATE:CV (gaps of coefficient of variation CV: burstiness)\n"
    "  --output-len N     output tokens per request (default 32)\n"
    "  --kv-budget-gb G   GPU KV pool in GB (default 45 on cuda, emulating an 80 GB card; 0.25 on "
    "cpu)\n"
    "  --max-batch N      most requests decoded together (default 64)\n"
    "  --page-size N      tokens per KV block (default 16; arkvale 32)\n"
    "  --seed S           weights, prompt KV or prompt ids, and workload (default 1)\n"
    "  --out FILE         result JSON (default: none, summary only)\n"
    "  --print-tokens     print each request's output token ids\n"
    "  --no-graph         launch every kernel instead of replaying CUDA graphs (vanilla's\n"
    "                     whole steps; on the offload device path each layer's pre- and\n"
    "                     post-attention)\n"
    "  --cupti            what the GPU ran during the serving loop, from CUPTI activity records\n"
    "                     (busy fraction from the union of kernels, copies per direction, the\n"
    "                     kernels by total time) into metrics.gpu_activity; cuda backend only\n"
    "  --weights PATH     real weights: a Hugging Face Llama/Qwen3 checkpoint dir (config.json\n"
    "                     + safetensors) or a llama/qwen3 FILE.gguf; replaces --model\n";
/* The latest arrival a run waits for (seconds after the first request). */
#define RUN_MAX_ARRIVAL_S 3600

static const char usage_exit[] =
    "exit: 0 ok, 1 run failed, 2 bad usage, 3 out of device memory (result written, status oom)\n";

struct run_opts {
    const char *backend, *model, *policy, *workload, *arrival, *out, *weights;
    long output_len, max_batch, page_size;
    double budget_gb;
    int budget_set, model_set, page_size_set, print_tokens, no_graph, cupti;
    uint64_t seed;
    struct run_offload_opts off;
    struct runtime_opts rt; /* the runtime's tuning (runtime_opts.h) */
};

static int parse(int argc, char **argv, struct run_opts *o)
{
    static const struct option own[] = {{"backend", required_argument, 0, 'b'},
                                        {"model", required_argument, 0, 'm'},
                                        {"policy", required_argument, 0, 'p'},
                                        {"workload", required_argument, 0, 'w'},
                                        {"arrival", required_argument, 0, 'a'},
                                        {"output-len", required_argument, 0, 'n'},
                                        {"kv-budget-gb", required_argument, 0, 'g'},
                                        {"max-batch", required_argument, 0, 'B'},
                                        {"page-size", required_argument, 0, 'P'},
                                        {"seed", required_argument, 0, 's'},
                                        {"out", required_argument, 0, 'o'},
                                        {"print-tokens", no_argument, 0, 't'},
                                        {"help", no_argument, 0, 'h'},
                                        {"no-graph", no_argument, 0, 'G'},
                                        {"cupti", no_argument, 0, 'C'},
                                        {"weights", required_argument, 0, 'W'},
                                        RUN_OFFLOAD_OPTIONS,
                                        {0, 0, 0, 0}};
    *o = (struct run_opts){.backend = "auto",
                           .model = "tiny",
                           .policy = "vanilla",
                           .workload = "uniform:256:4",
                           .output_len = 32,
                           .max_batch = 64,
                           .page_size = 16,
                           .seed = 1};
    run_offload_opts_init(&o->off);
    runtime_opts_init(&o->rt);
    struct option opts[96];
    PULSE_CHECK(runtime_opts_getopt(own, RT_ALL, opts, 96) == 0, "run: the options' table");
    int c;
    opterr = 0;
    optind = 1;
    struct cli_seen seen = {0};
    while ((c = cli_getopt("run", argc, argv, opts, &seen)) != -1) {
        if (c >= RUN_OFF_BUDGET && c < RUN_OFF_END) {
            if (run_offload_flag(&o->off, c, optarg)) return -1;
            continue;
        }
        if (runtime_opts_code(c)) {
            if (runtime_opts_flag("run", &o->rt, c, optarg)) return -1;
            continue;
        }
        switch (c) {
        case 'b':
            o->backend = optarg;
            break;
        case 'm':
            o->model = optarg;
            o->model_set = 1;
            break;
        case 'p':
            o->policy = optarg;
            break;
        case 'w':
            o->workload = optarg;
            break;
        case 'a':
            o->arrival = optarg;
            break;
        case 'o':
            o->out = optarg;
            break;
        case 't':
            o->print_tokens = 1;
            break;
        case 'G':
            o->no_graph = 1;
            break;
        case 'C':
            o->cupti = 1;
            break;
        case 'W':
            o->weights = optarg;
            break;
        case 'n':
            if (cli_int("run", "--output-len", optarg, 1, 1 << 24, &o->output_len)) return -1;
            break;
        case 'B':
            if (cli_int("run", "--max-batch", optarg, 1, 4096, &o->max_batch)) return -1;
            break;
        case 'P':
            if (cli_int("run", "--page-size", optarg, 1, 4096, &o->page_size)) return -1;
            o->page_size_set = 1;
            break;
        case 'g':
            if (cli_double("run", "--kv-budget-gb", optarg, 1e-6, 1e6, &o->budget_gb)) return -1;
            o->budget_set = 1;
            break;
        case 's':
            if (cli_u64("run", "--seed", optarg, INT64_MAX, &o->seed)) return -1;
            break;
        case 'h':
            fputs(usage, stdout);
            fputs(run_offload_usage, stdout);
            runtime_opts_usage(stdout, RT_ALL, &o->rt);
            fputs(usage_exit, stdout);
            return 1;
        default:
            cli_unknown_flag("run", argc, argv);
            return -1;
        }
    }
    if (cli_no_extra_args("run", argc, argv)) return -1;
    static const char *const out_flags[] = {"--out", "--trace"};
    const char *const outs[] = {o->out, o->off.trace};
    if (cli_outputs("run", 2, out_flags, outs)) return -1;
    if (o->weights && o->model_set) {
        cli_error("run", "--weights and --model: give one (the weights' config replaces --model)");
        return -1;
    }
    return 0;
}

/* --weights: the path, and how its load ended (a bad file is an error, not out of memory) */
struct weights_load {
    const char *path;
    int rc;
};

static int load_hf(struct model *mdl, const struct kctx *ctx, void *user, char *err, size_t len)
{
    struct weights_load *wl = user;
    return wl->rc = model_load_path(mdl, wl->path, ctx, err, len);
}

/* FNV-1a over every request's output ids: a fingerprint of the run's tokens. */
static uint64_t tokens_hash(const struct workload *w)
{
    return pulse_fnv1a_ids(PULSE_FNV_INIT, w->token_store, (size_t)w->n * w->output_len);
}

static json_t *config_json(const struct run_opts *o, const struct model_config *m,
                           const struct backend *be, size_t budget)
{
    return json_pack("{s:s,s:s,s:s,s:I,s:f,s:i,s:i,s:I,s:I,s:I,s:I,s:b}", "backend", be->name,
                     "model", m->name, "policy", o->policy, "kv_budget_bytes", (json_int_t)budget,
                     "kv_budget_gb", budget / 1e9, "max_batch", (int)o->max_batch, "page_size",
                     (int)o->page_size, "seed", (json_int_t)o->seed, "model_params",
                     (json_int_t)model_param_count(m), "model_weight_bytes",
                     (json_int_t)model_weight_bytes(m), "kv_bytes_per_token",
                     (json_int_t)model_kv_bytes_per_token(m), "cuda_graph",
                     !o->no_graph && be->graph_begin != NULL);
}

static json_t *counters_json(const struct serve_counters *c, const struct kv_cache_stats *ks)
{
    json_t *j = json_pack(
        "{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "steps", c->steps,
        "tokens", c->tokens, "admitted", c->admitted, "batch_changes", c->batch_changes,
        "admission_refusals", c->admission_refusals, "peak_batch", c->peak_batch,
        "peak_kv_pages_used", c->peak_pages_used, "kv_pages", (json_int_t)ks->n_pages,
        "step_alloc_calls", c->step_alloc_calls, "recall_bytes", c->recall_bytes, "recall_chunks",
        c->recall_chunks, "recall_stalls", c->recall_stalls, "layer_switches", c->layer_switches,
        "ioaa_nodes", c->ioaa_nodes, "kv_page_bytes", (json_int_t)ks->page_bytes);
    json_object_set_new(j, "requests_failed", json_integer(c->requests_failed));
    json_object_set_new(j, "steps_ahead", json_integer(c->steps_ahead));
    json_object_set_new(j, "steps_ahead_waiting", json_integer(c->steps_ahead_waiting));
    results_set_real(j, "host_queue_s", c->host_queue_s);
    results_set_real(j, "host_wait_s", c->host_wait_s);
    json_object_set_new(j, "clock_paused_s", json_real(c->clock_paused_s));
    json_object_set_new(j, "step_host_syncs", json_integer(c->step_host_syncs));
    json_object_set_new(j, "step_host_syncs_max", json_integer(c->step_host_syncs_max));
    json_t *sched = json_pack(
        "{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "layer_switches", c->layer_switches,
        "normal_layers_in_flight", c->normal_layers_in_flight, "recalls_hidden", c->recalls_hidden,
        "recalls_exposed", c->recalls_exposed, "ioaa_decisions", c->ioaa_decisions, "ioaa_nodes",
        c->ioaa_nodes, "ioaa_nodes_max", c->ioaa_nodes_max, "admitted_normal", c->admitted_normal,
        "admitted_offload", c->admitted_offload);
    results_set_real(sched, "offload_wait_s", c->offload_wait_s);
    json_object_set_new(sched, "ioaa_bound_evaluations", json_integer(c->ioaa_bound_evaluations));
    results_set_real(sched, "ioaa_nodes_mean",
                     c->ioaa_decisions ? (double)c->ioaa_nodes / c->ioaa_decisions : 0.0);
    json_t *bm = json_array(), *bx = json_array();
    for (int k = 0; k < SERVE_MAX_BATCHES; k++) {
        json_array_append_new(bm, json_real(c->steps ? (double)c->batch_sum[k] / c->steps : 0.0));
        json_array_append_new(bx, json_integer(c->batch_max[k]));
    }
    json_object_set_new(sched, "batch_mean", bm);
    json_object_set_new(sched, "batch_max", bx);
    json_object_set_new(j, "schedule", sched);
    return j;
}

/* Per-request TTFT / TPOT / E2EL (seconds), the metrics block, and the requests array. */
static json_t *metrics_json(const struct workload *w, double wall, json_t **requests)
{
    /* the distributions are over the requests that finished; one that ended with an error
     * (request.error) is listed with its status and reason and counted in "failed" */
    double ttft[w->n], tpot[w->n], e2el[w->n];
    int n_tpot = 0, n_ok = 0;
    long long out_tokens = 0, in_tokens = 0;
    *requests = json_array();
    for (int i = 0; i < w->n; i++) {
        const struct request *r = &w->reqs[i];
        const double t_first = r->first_token_s - r->arrival_s, t_done = r->done_s - r->arrival_s;
        out_tokens += r->generated;
        in_tokens += r->prompt_len;
        json_t *jr = json_pack("{s:i,s:i,s:i,s:s}", "id", r->id, "prompt_len", r->prompt_len,
                               "output_len", r->generated, "status", r->error ? "error" : "ok");
        results_set_real(jr, "arrival_ms", r->arrival_s * 1e3);
        /* the running batch that took it (pulseinfer: 0 normal, 1 offload); -1: never admitted */
        json_object_set_new(jr, "batch", json_integer(r->batch));
        if (r->error) {
            json_object_set_new(jr, "error", json_string(r->error));
            results_set_real(jr, "ended_ms", t_done * 1e3);
            json_array_append_new(*requests, jr);
            continue;
        }
        ttft[n_ok] = t_first;
        e2el[n_ok] = t_done;
        if (r->generated > 1) tpot[n_tpot++] = (t_done - t_first) / (r->generated - 1);
        results_set_real(jr, "ttft_ms", t_first * 1e3);
        results_set_real(jr, "e2el_ms", t_done * 1e3);
        results_set_real(jr, "tpot_ms", r->generated > 1 ? tpot[n_tpot - 1] * 1e3 : NAN);
        results_set_real(jr, "admit_ms", (r->admit_s - r->arrival_s) * 1e3);
        json_array_append_new(*requests, jr);
        n_ok++;
    }
    struct dist_summary d;
    json_t *m = json_object();
    json_object_set_new(m, "completed", json_integer(n_ok));
    json_object_set_new(m, "failed", json_integer(w->n - n_ok));
    json_object_set_new(m, "total_input_tokens", json_integer(in_tokens));
    json_object_set_new(m, "total_output_tokens", json_integer(out_tokens));
    results_set_real(m, "duration", wall);
    results_set_real(m, "output_throughput", out_tokens / wall);
    results_set_real(m, "total_token_throughput", (out_tokens + in_tokens) / wall);
    results_set_real(m, "request_throughput", n_ok / wall);
    metrics_summarize(ttft, n_ok, &d);
    results_add_dist_ms(m, "ttft", &d);
    metrics_summarize(tpot, n_tpot, &d);
    results_add_dist_ms(m, "tpot", &d);
    metrics_summarize(e2el, n_ok, &d);
    results_add_dist_ms(m, "e2el", &d);
    json_object_set_new(m, "percentile_method", json_string("linear"));
    return m;
}

/* Writes res to out; code, or 1 when the write failed. Every usage error returns before res
 * exists, so a file already at out stays. */
static int finish(json_t *res, const char *out, int code)
{
    char err[512];
    if (out && results_write(res, out, err, sizeof err) != PULSE_OK) {
        cli_error("run", "--out: %s", err);
        code = 1;
    }
    json_decref(res);
    return code;
}

/* The KV budget (and for an offload policy the offload params and host pool) must hold the
 * longest request. 0, or -1 after a message. */
static int check_sizes(const struct run_opts *o, const struct policy *pol,
                       const struct model_config *m, const struct backend *be,
                       const struct workload *w, const struct kv_cache_params *kp,
                       struct run_offload *ro)
{
    if (!pol->needs_ctx && o->off.first_flag) {
        cli_error("run", "%s: only for offload policies (arkvale, infinigen, pulseinfer)",
                  o->off.first_flag);
        return -1;
    }
    if (pol->n_batches < 2 && o->off.two_batch_flag) {
        cli_error("run", "%s: only for pulseinfer", o->off.two_batch_flag);
        return -1;
    }
    if (!pol->needs_ctx && o->off.prompt_kv && !strcmp(o->off.prompt_kv, "locality")) {
        cli_error("run", "--prompt-kv locality: only for offload policies (vanilla takes synthetic "
                         "or prefill)");
        return -1;
    }
    if (pol->needs_ctx) return run_offload_resolve(ro, &o->off, &o->rt, pol, m, be, w, kp, o->seed);
    size_t need = kv_cache_params_request_bytes(kp, kp->max_tokens);
    if (need <= kp->budget_bytes) return 0;
    cli_error("run",
              "--kv-budget-gb: %g GB cannot hold even one request: the longest (%d tokens "
              "of %s) needs %.4f GB of KV",
              o->budget_gb, kp->max_tokens, m->name, need / 1e9);
    return -1;
}

/* The summary line, the tokens when asked, metrics, requests and counters into res. */
static void report(const struct run_opts *o, json_t *res, const struct workload *w,
                   const struct serve_counters *ctr, double wall, struct engine *e,
                   const struct kv_cache *kv, const struct offload *off)
{
    const char *be_name = engine_model(e)->be->name, *model = engine_model(e)->cfg->name;
    struct kv_cache_stats ks;
    kv_cache_get_stats(kv, &ks);
    json_t *requests;
    json_t *metrics = metrics_json(w, wall, &requests);
    char hash[32];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)tokens_hash(w));
    json_object_set_new(metrics, "output_tokens_fnv1a", json_string(hash));
    printf("%s %s %s %s: %d requests, %lld tokens in %.3f s: %.1f tok/s, mean TPOT %.3f ms, "
           "tokens %s\n",
           be_name, model, o->policy, w->spec, w->n, (long long)ctr->tokens, wall,
           json_real_value(json_object_get(metrics, "output_throughput")),
           json_is_real(json_object_get(metrics, "mean_tpot_ms"))
               ? json_real_value(json_object_get(metrics, "mean_tpot_ms"))
               : NAN,
           hash);
    if (ctr->steps > 0 && ctr->traffic_sum.weight_bytes > 0)
        printf("steps: %lld, mean %.3f ms, %lld host syncs inside steps\n", (long long)ctr->steps,
               ctr->step_s_sum / ctr->steps * 1e3, (long long)ctr->step_host_syncs);
    if (off)
        printf("offload: %lld bytes recalled in %lld chunks, %lld stalled rounds\n",
               (long long)ctr->recall_bytes, (long long)ctr->recall_chunks,
               (long long)ctr->recall_stalls);
    if (off && ctr->spec_scored > 0)
        printf("speculation: %lld chunks prefetched, %lld corrected; the prediction held %.3f of "
               "the exact selections' scored blocks\n",
               (long long)ctr->spec_recall_chunks, (long long)ctr->spec_corrections,
               (double)ctr->spec_held / (double)ctr->spec_scored);
    if (ctr->ioaa_decisions > 0)
        printf("IOAA: %lld decisions, %.2f nodes each (at most %lld), %.1f step evaluations each\n",
               (long long)ctr->ioaa_decisions, (double)ctr->ioaa_nodes / ctr->ioaa_decisions,
               (long long)ctr->ioaa_nodes_max,
               (double)ctr->ioaa_bound_evaluations / ctr->ioaa_decisions);
    if (o->print_tokens)
        for (int i = 0; i < w->n; i++) {
            printf("request %d:", w->reqs[i].id);
            for (int t = 0; t < w->reqs[i].generated; t++)
                printf(" %d", w->reqs[i].tokens[t]);
            printf("\n");
        }
    json_object_set_new(res, "metrics", metrics);
    json_object_set_new(res, "requests", requests);
    json_t *cj = counters_json(ctr, &ks);
    struct engine_stats es;
    engine_get_stats(e, &es);
    json_object_set_new(cj, "graph_captures", json_integer(es.graph_captures));
    json_object_set_new(cj, "graph_launches", json_integer(es.graph_launches));
    char gline[320];
    json_object_set_new(cj, "gemm", engine_gemm_json(e, gline, sizeof gline));
    if (off) json_object_set_new(cj, "offload", offload_counters_json(off));
    json_object_set_new(res, "counters", cj);
}

/* The steps against their floors: the mean step (mean time over the mean step's floor), the
 * bandwidths, and the per-step series (time, floors, batch). */
static json_t *step_json(const struct serve_counters *c, const struct serve_step *series,
                         int64_t cap, const struct floor_bw *bw, const struct policy *pol)
{
    json_t *j = json_object();
    const double n = c->steps > 0 ? (double)c->steps : 1.0;
    struct floor_traffic mean = {c->traffic_sum.weight_bytes / n, c->traffic_sum.kv_bytes / n,
                                 c->traffic_sum.digest_bytes / n, c->traffic_sum.recall_bytes / n};
    struct floor_result f;
    floor_compute(&mean, bw, pol->overlapped, &f);
    results_set_real(j, "mean_step_ms", c->step_s_sum / n * 1e3);
    json_object_set_new(j, "mean_step_floor", floor_json(&mean, bw, pol->overlapped));
    results_set_real(j, "ratio_to_floor", f.floor_s > 0 ? c->step_s_sum / n / f.floor_s : NAN);
    results_set_real(j, "hbm_copy_GBps", bw->hbm_gbps);
    results_set_real(j, "h2d_peak_GBps", bw->h2d_gbps);
    json_object_set_new(j, "policy_reports_traffic", json_boolean(pol->traffic != NULL));
    json_t *ms = json_array(), *fl = json_array(), *hb = json_array(), *pc = json_array(),
           *bs = json_array(), *bk = json_array();
    for (int64_t i = 0; i < c->steps && i < cap; i++) {
        const struct serve_step *st = &series[i];
        floor_compute(&st->t, bw, pol->overlapped, &f);
        json_array_append_new(ms, json_real(st->step_s * 1e3));
        json_array_append_new(fl, json_real(f.floor_s * 1e3));
        json_array_append_new(hb, json_real(f.hbm_s * 1e3));
        json_array_append_new(pc, json_real(f.pcie_s * 1e3));
        json_array_append_new(bs, json_integer(st->batch));
        json_t *one = json_array();
        for (int k = 0; k < (pol->n_batches > 0 ? pol->n_batches : 1); k++)
            json_array_append_new(one, json_integer(st->batches[k]));
        json_array_append_new(bk, one);
    }
    json_t *ps = json_pack("{s:o,s:o,s:o,s:o,s:o,s:o}", "step_ms", ms, "floor_ms", fl,
                           "hbm_floor_ms", hb, "pcie_floor_ms", pc, "batch", bs, "batches", bk);
    json_object_set_new(j, "per_step", ps);
    return j;
}

/* Marks res failed (status, error) and returns code. */
static int failed(json_t *res, const char *status, const char *err, int code)
{
    cli_error("run", "%s", err);
    json_object_set_new(res, "status", json_string(status));
    json_object_set_new(res, "error", json_string(err));
    return code;
}

int cmd_run(int argc, char **argv)
{
    struct run_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc > 0 ? 0 : EXIT_USAGE;
    struct loaded_config loaded;
    char err[512];
    const struct model_config *m;
    if (o.weights) {
        if (model_config_from_path(o.weights, &loaded, err, sizeof err) != PULSE_OK) {
            cli_error("run", "--weights: %s", err);
            return EXIT_USAGE;
        }
        m = &loaded.cfg;
    } else if (!(m = cli_model("run", o.model))) {
        return EXIT_USAGE;
    }
    const struct policy *pol = policy_find(o.policy);
    if (!pol) {
        cli_error("run", "--policy: unknown policy '%s' (known: %s)", o.policy, policy_names());
        return EXIT_USAGE;
    }
    if (!o.page_size_set && pol->offload_page_size) o.page_size = pol->offload_page_size;
    const struct backend *be = cli_backend("run", o.backend);
    if (!be) return EXIT_USAGE;
    if (o.cupti && be->mem != MEM_DEVICE) { /* "auto" resolved too: before any work */
        cli_error("run", "--cupti: needs the cuda backend (CUPTI records what a GPU ran)");
        return EXIT_USAGE;
    }
    if (model_config_check_backend(m, be->name, err, sizeof err) != PULSE_OK) {
        cli_error("run", "%s", err);
        return EXIT_USAGE;
    }
    struct workload w;
    if (workload_create(&w, o.workload, (int)o.output_len, o.seed, err, sizeof err) != PULSE_OK) {
        cli_error("run", "%s", err);
        return EXIT_USAGE;
    }
    if (o.arrival && workload_set_arrivals(&w, o.arrival, err, sizeof err) != PULSE_OK) {
        cli_error("run", "%s", err);
        workload_free(&w);
        return EXIT_USAGE;
    }
    /* the serving loop waits for each arrival in real time: a trace whose last request comes
     * after RUN_MAX_ARRIVAL_S is refused, not slept through without a word */
    const double last_arrival = w.n ? w.reqs[w.n - 1].arrival_s : 0;
    if (last_arrival > RUN_MAX_ARRIVAL_S) {
        cli_error("run",
                  "--workload: the last request arrives %.0f s after the first (more than %d s "
                  "the run would wait in real time): give --arrival all, poisson:RATE or "
                  "gamma:RATE:CV to replace the trace's times",
                  last_arrival, RUN_MAX_ARRIVAL_S);
        workload_free(&w);
        return EXIT_USAGE;
    }
    if (!o.budget_set) o.budget_gb = be->mem == MEM_DEVICE ? 45.0 : 0.25;
    size_t budget = (size_t)(o.budget_gb * 1e9);
    int max_tokens = workload_max_tokens(&w);
    struct kv_cache_params kp = {m->n_layers, m->n_kv_heads,    m->head_dim, (int)o.page_size,
                                 budget,      (int)o.max_batch, max_tokens};
    struct run_offload *ro = mem_alloc(MEM_HOST, sizeof *ro, "run offload");
    if (!ro) cli_error("run", "out of host memory");
    if (!ro || check_sizes(&o, pol, m, be, &w, &kp, ro)) {
        mem_free(MEM_HOST, ro, sizeof *ro);
        workload_free(&w);
        return ro ? EXIT_USAGE : EXIT_OOM;
    }

    json_t *res = results_new("run");
    json_t *cfg_json = config_json(&o, m, be, budget);
    json_object_set_new(cfg_json, "command", cli_command_json(argc, argv));
    json_object_set_new(cfg_json, "weights", o.weights ? json_string(o.weights) : json_null());
    json_object_set_new(cfg_json, "options", runtime_opts_json(&o.rt, RT_ALL));
    json_object_set_new(res, "config", cfg_json);
    json_object_set_new(res, "workload", workload_to_json(&w));
    struct weights_load wload = {o.weights, PULSE_OK};
    struct engine_params ep = {.cfg = m,
                               .be = be,
                               .seed = o.seed,
                               .max_batch = (int)o.max_batch,
                               .max_tokens = max_tokens,
                               .use_graph = !o.no_graph,
                               .load_weights = o.weights ? load_hf : NULL,
                               .load_user = &wload};
    runtime_opts_engine(&o.rt, &ep);
    struct engine *e = engine_create(&ep, err, sizeof err);
    struct kv_cache *kv = NULL;
    void *ctx = NULL;               /* the policy's context (its ctx_create) */
    struct offload *off = NULL;     /* ctx of an offload policy */
    struct query_source *qs = NULL; /* the offload runtime's: the locality model */
    struct serve_step *series = NULL;
    struct gpu_activity *act = NULL; /* --cupti's collector while the serving loop runs */
    json_t *gpu_act = NULL;
    int64_t series_cap = 0;
    const int prefill = o.off.prompt_kv && !strcmp(o.off.prompt_kv, "prefill");
    int code = 0;
    if (!e) { /* the weights' file refused (missing tensor, shape, values), or no memory */
        const int bad =
            wload.rc != PULSE_OK && wload.rc != PULSE_ERR_OOM && wload.rc != PULSE_ERR_NOMEM;
        code = bad ? failed(res, "error", err, 1) : failed(res, "oom", err, EXIT_OOM);
        goto out;
    }
    be->describe(results_env(res));
    if (!(kv = kv_cache_create(&kp, be, engine_ctx(e), err, sizeof err))) {
        code = failed(res, "oom", err, EXIT_OOM);
        goto out;
    }
    if (pol->needs_ctx) {
        struct query_source_shape sh;
        offload_source_shape(&ro->p, m, kp.page_size, &sh);
        if (!(qs = locality_source_create(&sh, &ro->src, err, sizeof err))) {
            code = failed(res, "error", err, 1);
            goto out;
        }
        ro->p.source = qs;
        double churn_run, churn_spec;
        if (locality_source_churn_mismatch(qs, &churn_run, &churn_spec))
            fprintf(stderr,
                    "pulse run: warning: --spec-overlap: its persistence was measured at an exact "
                    "churn of %.3f a layer, the run's churn profile gives %.3f: the approximate "
                    "lists churn as in that model's run (give --locality-profile and "
                    "--spec-overlap from one model)\n",
                    churn_spec, churn_run);
        int from_run, from_spec;
        if (locality_source_point_mismatch(qs, &from_run, &from_spec))
            fprintf(stderr,
                    "pulse run: warning: --spec-overlap: its predictions were made from %s, the "
                    "run predicts from %s: its approximate lists miss as the other point's "
                    "would (a profile measured at the run's point: pulse accuracy --spec-from)\n",
                    locality_spec_from_names[from_spec], locality_spec_from_names[from_run]);
    } else {
        json_object_set_new(cfg_json, "prompt_kv", json_string(prefill ? "prefill" : "synthetic"));
    }
    /* the step floor's bandwidths, measured once in this process before the run (and the
     * analytic IOAA profile's inputs) */
    const int dev = be->mem == MEM_DEVICE;
    const struct floor_bw bw = {
        be->copy_bandwidth(engine_ctx(e), (size_t)(dev ? 512 : 64) << 20, 10),
        be->h2d_bandwidth(engine_ctx(e), (size_t)(dev ? 256 : 64) << 20, 10)};
    if (o.off.cap_fraction > 0) { /* the cap against the peak just measured */
        ro->p.cap_gbps = o.off.cap_fraction * bw.h2d_gbps;
        json_object_set_new(cfg_json, "recall_cap_fraction", json_real(o.off.cap_fraction));
    }
    const struct policy_ctx_params cp = {.eng = e,
                                         .kv = kv,
                                         .seed = o.seed,
                                         .max_batch = (int)o.max_batch,
                                         .prefill = prefill,
                                         .offload = &ro->p,
                                         .no_irq = o.off.no_irq,
                                         .self_interleave = o.off.self_interleave,
                                         .admission = o.off.admission,
                                         .profile = o.off.ioaa_profile,
                                         .trace = o.off.trace,
                                         .max_waiting = o.off.max_waiting,
                                         .no_ioaa_refit = !o.rt.serve.ioaa_refit,
                                         .ioaa_bytes_profile = o.rt.serve.ioaa_bytes,
                                         .hbm_gbps = bw.hbm_gbps,
                                         .h2d_gbps = bw.h2d_gbps,
                                         .device = backend_env_device(results_env(res))};
    rc = pol->ctx_create ? pol->ctx_create(&cp, &ctx, err, sizeof err) : PULSE_OK;
    if (rc != PULSE_OK) {
        code =
            rc == PULSE_ERR_OOM ? failed(res, "oom", err, EXIT_OOM) : failed(res, "error", err, 1);
        goto out;
    }
    if (pol->ctx_kind == POLICY_CTX_OFFLOAD) {
        off = pol->offload_of ? pol->offload_of(ctx) : ctx;
        json_object_set_new(cfg_json, "offload", offload_config_json(off));
    }
    struct serve_counters ctr;
    if (o.cupti && !(act = gpu_activity_start(1 << 21, err, sizeof err))) {
        code = failed(res, "error", err, 1);
        goto out;
    }
    series_cap = (int64_t)w.n * w.output_len;
    series = mem_alloc(MEM_HOST, sizeof(struct serve_step) * (size_t)series_cap, "series");
    double wall;
    struct serve_params sp;
    serve_params_init(&sp);
    runtime_opts_serve(&o.rt, &sp);
    sp.series = series;
    sp.series_cap = series ? series_cap : 0;
    if (serve_run_params(e, kv, pol, ctx, w.reqs, w.n, (int)o.max_batch, &sp, &ctr, &wall, err,
                         sizeof err) != PULSE_OK) {
        code = failed(res, "error", err, 1);
        goto out;
    }
    if (act) {
        be->sync(engine_ctx(e));                    /* the last step's work is in the records */
        gpu_act = gpu_activity_stop(act, 40, 0.01); /* busy over time in 10 ms bins */
        act = NULL;
    }
    report(&o, res, &w, &ctr, wall, e, kv, off);
    if (pol->ctx_json)
        json_object_set_new(json_object_get(res, "counters"), pol->name, pol->ctx_json(ctx));
    json_object_set_new(json_object_get(res, "metrics"), "step",
                        step_json(&ctr, series, series ? series_cap : 0, &bw, pol));
    if (gpu_act) {
        json_object_set_new(json_object_get(res, "metrics"), "gpu_activity", gpu_act);
        gpu_act = NULL;
    }
    if (ctr.requests_failed) { /* the run went on; its result is not ok */
        snprintf(err, sizeof err, "%lld of %d requests ended with an error (see requests[])",
                 (long long)ctr.requests_failed, w.n);
        code = failed(res, "error", err, 1);
    }
out:
    json_decref(gpu_activity_stop(act, 0, 0));
    json_decref(gpu_act);
    mem_free(MEM_HOST, series, sizeof(struct serve_step) * (size_t)series_cap);
    if (ctx) pol->ctx_free(ctx);
    query_source_free(qs);
    kv_cache_free(kv);
    engine_free(e);
    workload_free(&w);
    mem_free(MEM_HOST, ro, sizeof *ro);
    return finish(res, o.out, code);
}
