/* pulse bench decode-step: times the vanilla decode step at (batch, context) points against the
 * memory floor (weight bytes + KV bytes read) / copy bandwidth measured in the same run, and
 * the attention kernel alone against the copy bandwidth. Optionally merges a peer's JSON. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baselines/registry.h"
#include "bench_batch.h"
#include "bench_offload.h"
#include "cli.h"
#include "common.h"
#include "engine.h"
#include "gpu_activity.h"
#include "kv_cache.h"
#include "metrics.h"
#include "numeric.h"
#include "results.h"
#include "runtime_opts.h"

#define MAX_POINTS 32
/* the runtime options bench decode-step takes (no serving loop) */
#define BENCH_RT (RT_RECALL | RT_PIN | RT_ENGINE | RT_OFFLOAD)

static const char usage[] =
    "usage: pulse bench decode-step [options]\n"
    "  Times the vanilla decode step (all layers, LM head, argmax) per (batch x context) point\n"
    "  and the attention kernel alone; reports both against the memory floor from the copy\n"
    "  bandwidth measured in the same run.\n"
    "  --backend B      cpu, cuda or auto (default auto)\n"
    "  --model NAME     default qwen3-14b\n"
    "  --points LIST    BxCTX,... (default 1x4096,8x4096,32x4096,1x32768,8x32768,16x32768)\n"
    "  --iters N        timed steps per point (default 20); --warmup N (default 3)\n"
    "  --page-size N    tokens per KV block (default 16)\n"
    "  --seed S         weights and synthetic KV (default 1)\n"
    "  --peer FILE      a peer's result JSON (experiments/peer) to put beside ours\n"
    "  --no-graph       launch every kernel instead of replaying the step as a CUDA graph\n"
    "  --cupti          what the GPU ran during each point's timed steps, from CUPTI activity\n"
    "                   records (per step: kernels, busy fraction, idle gaps, the kernels by\n"
    "                   time) into points[].gpu_activity; vanilla on cuda only\n"
    "  --policy P       vanilla (default), or an offload policy (arkvale, infinigen): its steps\n"
    "                   against their floor (HBM + PCIe, runtime/results/floor.h), with pulse "
    "run's\n"
    "                   offload flags (--budget-tokens, --selection, --recall-engine, ...)\n"
    "  --out FILE       result JSON\n";

struct point {
    int batch, ctx;
};

struct bench_opts {
    const char *backend, *model, *points, *peer, *out, *policy;
    struct run_offload_opts off;
    struct runtime_opts rt; /* the runtime's tuning (runtime_opts.h) */
    long iters, warmup, page_size;
    int page_size_set; /* --page-size given (else the policy's, else 16) */
    uint64_t seed;
    int no_graph, cupti;
};

static int each_point(const char *t, int i, void *c)
{
    char buf[32];
    const char *x = strchr(t, 'x');
    long b, ctx;
    if (!x || (size_t)(x - t) >= sizeof buf ||
        (memcpy(buf, t, (size_t)(x - t)), buf[x - t] = 0, cli_parse_long(buf, 1, 4096, &b)) ||
        cli_parse_long(x + 1, 1, 1 << 22, &ctx)) {
        cli_error("bench",
                  "--points: '%s' is not BATCHxCONTEXT with BATCH in [1, 4096] and CONTEXT in "
                  "[1, %d] (decimal, e.g. 8x4096)",
                  t, 1 << 22);
        return -1;
    }
    ((struct point *)c)[i] = (struct point){(int)b, (int)ctx};
    return 0;
}

static int parse_points(const char *s, struct point *pts, int *n)
{
    return cli_list("bench", "--points", s, MAX_POINTS, n, each_point, pts);
}

static int parse(int argc, char **argv, struct bench_opts *o)
{
    static const struct option own[] = {{"backend", required_argument, 0, 'b'},
                                        {"model", required_argument, 0, 'm'},
                                        {"points", required_argument, 0, 'p'},
                                        {"iters", required_argument, 0, 'i'},
                                        {"warmup", required_argument, 0, 'w'},
                                        {"page-size", required_argument, 0, 'P'},
                                        {"seed", required_argument, 0, 's'},
                                        {"peer", required_argument, 0, 'e'},
                                        {"out", required_argument, 0, 'o'},
                                        {"help", no_argument, 0, 'h'},
                                        {"no-graph", no_argument, 0, 'G'},
                                        {"cupti", no_argument, 0, 'C'},
                                        {"policy", required_argument, 0, 'y'},
                                        RUN_OFFLOAD_OPTIONS,
                                        {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->backend = "auto", o->model = "qwen3-14b", o->policy = "vanilla";
    o->points = "1x4096,8x4096,32x4096,1x32768,8x32768,16x32768";
    o->iters = 20, o->warmup = 3, o->page_size = 16, o->seed = 1;
    run_offload_opts_init(&o->off);
    runtime_opts_init(&o->rt);
    struct option opts[96];
    PULSE_CHECK(runtime_opts_getopt(own, BENCH_RT, opts, 96) == 0, "bench: the options' table");
    int c;
    opterr = 0;
    optind = 1;
    struct cli_seen seen = {0};
    while ((c = cli_getopt("bench", argc, argv, opts, &seen)) != -1) {
        switch (c) {
        case 'b':
            o->backend = optarg;
            break;
        case 'm':
            o->model = optarg;
            break;
        case 'p':
            o->points = optarg;
            break;
        case 'e':
            o->peer = optarg;
            break;
        case 'o':
            o->out = optarg;
            break;
        case 'G':
            o->no_graph = 1;
            break;
        case 'C':
            o->cupti = 1;
            break;
        case 'i':
            if (cli_int("bench", "--iters", optarg, 1, 10000, &o->iters)) return -1;
            break;
        case 'w':
            if (cli_int("bench", "--warmup", optarg, 0, 1000, &o->warmup)) return -1;
            break;
        case 'P':
            if (cli_int("bench", "--page-size", optarg, 1, 4096, &o->page_size)) return -1;
            o->page_size_set = 1;
            break;
        case 's':
            if (cli_u64("bench", "--seed", optarg, INT64_MAX, &o->seed)) return -1;
            break;
        case 'y':
            o->policy = optarg;
            break;
        case 'h':
            fputs(usage, stdout);
            runtime_opts_usage(stdout, BENCH_RT, &o->rt);
            return 1;
        default:
            if (c >= RUN_OFF_BUDGET && c < RUN_OFF_END) {
                if (run_offload_flag(&o->off, c, optarg)) return -1;
                break;
            }
            if (runtime_opts_code(c)) {
                if (runtime_opts_flag("bench", &o->rt, c, optarg)) return -1;
                break;
            }
            cli_unknown_flag("bench", argc, argv);
            return -1;
        }
    }
    if (cli_no_extra_args("bench", argc, argv)) return -1;
    static const char *const out_flag[] = {"--out"};
    if (cli_outputs("bench", 1, out_flag, &o->out)) return -1;
    const struct policy *pol = policy_find(o->policy);
    if (!pol) {
        cli_error("bench", "--policy: unknown policy '%s' (known: %s)", o->policy, policy_names());
        return -1;
    }
    if (!o->page_size_set && pol->offload_page_size) o->page_size = pol->offload_page_size;
    if (o->cupti && pol->ctx_kind == POLICY_CTX_OFFLOAD) {
        cli_error("bench",
                  "--cupti: vanilla steps only (pulse run --cupti for the offload policies)");
        return -1;
    }
    if (pol->ctx_kind != POLICY_CTX_OFFLOAD && o->off.first_flag) {
        cli_error("bench", "%s: only for offload policies (arkvale, infinigen)", o->off.first_flag);
        return -1;
    }
    return 0;
}

static json_t *samples_json(const double *ms, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_real(ms[i]));
    return a;
}

/* A point whose step was timed: status "ok" or none (older peer files). */
static int peer_point_ok(json_t *p)
{
    json_t *st = json_object_get(p, "status");
    return !st || (json_is_string(st) && !strcmp(json_string_value(st), "ok"));
}

/* The peer's result JSON (experiments/peer), checked: an object whose "points" is an array of
 * objects with integer "batch" and "context" >= 1 and, when timed, a positive finite
 * "ms_per_step_median". NULL after a one-line message naming the first bad field. */
static json_t *load_peer(const char *path)
{
    json_t *peer = cli_load_json("bench", "--peer", path);
    if (!peer) return NULL;
    char why[128] = "";
    json_t *pts = json_object_get(peer, "points"), *p;
    size_t i;
    if (!json_is_object(peer) || !json_is_array(pts))
        snprintf(why, sizeof why, "no \"points\" array");
    json_array_foreach(why[0] ? NULL : pts, i, p)
    {
        const char *keys[] = {"batch", "context"};
        for (int k = 0; k < 2 && !why[0]; k++) {
            json_t *v = json_object_get(p, keys[k]);
            if (!json_is_integer(v) || json_integer_value(v) < 1)
                snprintf(why, sizeof why, "points[%zu].%s is not an integer >= 1", i, keys[k]);
        }
        json_t *ms = json_object_get(p, "ms_per_step_median");
        if (!why[0] && peer_point_ok(p) &&
            !(json_is_number(ms) && isfinite(json_number_value(ms)) && json_number_value(ms) > 0))
            snprintf(why, sizeof why, "points[%zu].ms_per_step_median is not a positive number", i);
        if (why[0]) break;
    }
    if (why[0]) {
        cli_error("bench", "--peer: %s: %s (not a peer result of experiments/peer)", path, why);
        json_decref(peer);
        return NULL;
    }
    return peer;
}

/* The peer's timed point with the same batch and context, or NULL. */
static json_t *peer_point(json_t *peer, int batch, int ctx)
{
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(peer, "points"), i, p)
    {
        if (json_integer_value(json_object_get(p, "batch")) == batch &&
            json_integer_value(json_object_get(p, "context")) == ctx && peer_point_ok(p))
            return p;
    }
    return NULL;
}

/* Runs one point; fills pj. Returns 0, or EXIT_OOM when the KV does not fit. */
static int run_point(struct engine *e, const struct bench_opts *o, const struct model_config *m,
                     struct point pt, double copy_gbs, json_t *pj)
{
    const struct backend *be = engine_model(e)->be;
    const struct kctx *ctx = engine_ctx(e);
    int steps = (int)(o->warmup + o->iters), attn_iters = (int)o->iters;
    const int reserved = pt.ctx + steps + 1;
    char err[256];
    json_object_set_new(pj, "batch", json_integer(pt.batch));
    json_object_set_new(pj, "context", json_integer(pt.ctx));
    struct bench_batch bb;
    const int rc =
        bench_batch_create(e, pt.batch, pt.ctx, reserved, (int)o->page_size, &bb, err, sizeof err);
    json_object_set_new(pj, "kv_pool_bytes", json_integer((json_int_t)bb.kv_bytes));
    if (rc != PULSE_OK) {
        json_object_set_new(pj, "status", json_string("oom"));
        json_object_set_new(pj, "error", json_string(err));
        return EXIT_OOM;
    }
    struct batch *bt = bb.bt;
    const struct kv_cache *kv = bb.kv;
    double *ms = mem_alloc(MEM_HOST, sizeof(double) * (steps + attn_iters), "samples");
    struct gpu_activity *act = NULL; /* --cupti: the timed steps, not the warm-up */
    for (int i = 0; i < steps; i++) {
        if (i == o->warmup && o->cupti) {
            act = gpu_activity_start(1 << 20, err, sizeof err);
            if (!act) fprintf(stderr, "pulse bench: --cupti: %s\n", err);
        }
        double t = pulse_now();
        engine_step(e, bt, kv);
        be->sync(ctx);
        ms[i] = (pulse_now() - t) * 1e3;
    }
    if (act) json_object_set_new(pj, "gpu_activity", gpu_activity_stop(act, 16, 0));
    double *step_ms = ms + o->warmup, *attn_ms = ms + steps;
    /* back-to-back launches between synchronisations, so the host round trip of a sync does
     * not count against a kernel of a few microseconds */
    enum { ATTN_REPS = 10 };
    for (int i = 0; i < attn_iters; i++) {
        double t = pulse_now();
        for (int r = 0; r < ATTN_REPS; r++)
            engine_run_attention(e, bt, kv, 0);
        be->sync(ctx);
        attn_ms[i] = (pulse_now() - t) * 1e3 / ATTN_REPS;
    }
    int32_t toks[4096];
    batch_read_tokens(e, bt, toks);
    uint64_t h = pulse_fnv1a_ids(PULSE_FNV_INIT, toks, (size_t)pt.batch);
    /* breakdown: the weight GEMMs alone (every layer's four and the LM head), back to back */
    double gemm_best = INFINITY;
    for (int i = 0; i < 3; i++) {
        double t = pulse_now();
        for (int l = 0; l < m->n_layers; l++)
            engine_run_layer_gemms(e, bt, l);
        engine_run_lm_head(e, bt);
        be->sync(ctx);
        gemm_best = fmin(gemm_best, (pulse_now() - t) * 1e3);
    }
    struct dist_summary ds, da;
    metrics_summarize(step_ms, (int)o->iters, &ds);
    metrics_summarize(attn_ms, attn_iters, &da);
    /* bytes a step must read: the weights (all but the embedding table) and the KV of every
     * token attended, averaged over the timed steps' growing contexts */
    double mean_ctx = pt.ctx + o->warmup + (o->iters - 1) / 2.0 + 1;
    double w_bytes = (double)model_step_weight_bytes(m);
    double kv_bytes = (double)pt.batch * mean_ctx * (double)model_kv_bytes_per_token(m);
    double floor_ms = (w_bytes + kv_bytes) / (copy_gbs * 1e9) * 1e3;
    int attn_tokens = pt.ctx + steps + 1; /* layer 0's length after all steps */
    double attn_bytes = (double)pt.batch * attn_tokens * model_kv_bytes_per_token(m) / m->n_layers;
    double attn_gbs = attn_bytes / (da.median * 1e-3) / 1e9;
    json_object_set_new(pj, "status", json_string("ok"));
    results_set_real(pj, "ms_per_step_median", ds.median);
    results_set_real(pj, "ms_per_step_min", ds.min);
    results_set_real(pj, "ms_per_step_p90", ds.p90);
    json_object_set_new(pj, "ms_samples", samples_json(step_ms, (int)o->iters));
    results_set_real(pj, "weight_bytes", w_bytes);
    results_set_real(pj, "kv_bytes", kv_bytes);
    results_set_real(pj, "floor_ms", floor_ms);
    results_set_real(pj, "ratio_to_floor", ds.median / floor_ms);
    results_set_real(pj, "output_tokens_per_s", pt.batch / (ds.median * 1e-3));
    results_set_real(pj, "attn_ms_median", da.median);
    results_set_real(pj, "gemm_ms_per_step", gemm_best);
    results_set_real(pj, "gemm_GBps", w_bytes / (gemm_best * 1e-3) / 1e9);
    json_object_set_new(pj, "attn_ms_samples", samples_json(attn_ms, attn_iters));
    results_set_real(pj, "attn_kv_bytes", attn_bytes);
    results_set_real(pj, "attn_GBps", attn_gbs);
    results_set_real(pj, "attn_fraction_of_copy_bw", attn_gbs / copy_gbs);
    char hs[32];
    snprintf(hs, sizeof hs, "%016llx", (unsigned long long)h);
    json_object_set_new(pj, "last_tokens_fnv1a", json_string(hs));
    mem_free(MEM_HOST, ms, sizeof(double) * (steps + attn_iters));
    bench_batch_free(e, &bb);
    return 0;
}

/* --cupti's line under a point: per timed step, the kernels, the busy fraction, the idle time
 * and after which kernel it fell most, the three kernels of most time. */
static void print_activity(json_t *a, int steps)
{
    if (!a || steps < 1) return;
    const double busy = json_real_value(json_object_get(a, "busy_fraction"));
    const json_int_t kernels = json_integer_value(json_object_get(a, "kernels"));
    json_t *gaps = json_object_get(a, "idle_gaps");
    printf("  cupti: %.1f kernels/step, busy %.3f, idle %.3f ms/step", (double)kernels / steps,
           busy, json_real_value(json_object_get(gaps, "total_s")) * 1e3 / steps);
    json_t *after = json_array_get(json_object_get(gaps, "after"), 0);
    if (after) printf(" (most after %s)", json_string_value(json_object_get(after, "name")));
    size_t i;
    json_t *k;
    json_array_foreach(json_object_get(a, "top_kernels"), i, k)
    {
        if (i >= 3) break;
        printf("%s %s %.3f ms/step (%.0f)",
               i ? "," : "; top:", json_string_value(json_object_get(k, "name")),
               json_real_value(json_object_get(k, "total_s")) * 1e3 / steps,
               (double)json_integer_value(json_object_get(k, "count")) / steps);
    }
    printf("\n");
}

/* Offload steps at every point, against their floors (bandwidths measured once, here). */
static int offload_points(struct engine *e, const struct policy *pol, const struct bench_opts *o,
                          const struct point *pts, int np, json_t *res)
{
    const struct backend *be = engine_model(e)->be;
    const int dev = be->mem == MEM_DEVICE;
    const struct floor_bw bw = {
        be->copy_bandwidth(engine_ctx(e), (size_t)(dev ? 512 : 64) << 20, 10),
        be->h2d_bandwidth(engine_ctx(e), (size_t)(dev ? 256 : 64) << 20, 10)};
    results_set_real(res, "copy_bandwidth_GBps", bw.hbm_gbps);
    results_set_real(res, "h2d_peak_GBps", bw.h2d_gbps);
    json_t *arr = json_array();
    json_object_set_new(res, "points", arr);
    printf("%-6s %-7s %9s %9s %9s %9s %7s %8s %9s\n", "batch", "context", "ms/step", "hbm ms",
           "pcie ms", "floor ms", "ratio", "syncs", "recall MB");
    int code = 0;
    for (int i = 0; i < np; i++) {
        json_t *pj = json_pack("{s:i,s:i}", "batch", pts[i].batch, "context", pts[i].ctx);
        json_array_append_new(arr, pj);
        int rc =
            bench_offload_point(e, pol, &o->off, &o->rt, pts[i].batch, pts[i].ctx, (int)o->warmup,
                                (int)(o->warmup + o->iters), (int)o->page_size, o->seed, &bw, pj);
        if (rc) {
            printf("%-6d %-7d %10s\n", pts[i].batch, pts[i].ctx, rc == EXIT_OOM ? "oom" : "error");
            code = code ? code : rc;
            continue;
        }
        json_t *f = json_object_get(pj, "mean_step_floor");
        printf("%-6d %-7d %9.3f %9.3f %9.3f %9.3f %7.3f %8lld %9.2f\n", pts[i].batch, pts[i].ctx,
               json_real_value(json_object_get(pj, "ms_per_step_mean")),
               json_real_value(json_object_get(f, "hbm_floor_ms")),
               json_real_value(json_object_get(f, "pcie_floor_ms")),
               json_real_value(json_object_get(f, "floor_ms")),
               json_real_value(json_object_get(pj, "ratio_to_floor")),
               (long long)json_integer_value(json_object_get(pj, "host_syncs_in_steps")),
               json_real_value(json_object_get(f, "recall_bytes")) / 1e6);
    }
    printf("copy bandwidth %.1f GB/s (read + write), H2D peak %.1f GB/s\n", bw.hbm_gbps,
           bw.h2d_gbps);
    return code;
}

static int decode_step(int argc, char **argv)
{
    struct bench_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc > 0 ? 0 : EXIT_USAGE;
    struct point pts[MAX_POINTS];
    int np;
    if (parse_points(o.points, pts, &np)) return EXIT_USAGE;
    const struct model_config *m = cli_model("bench", o.model);
    if (!m) return EXIT_USAGE;
    const struct backend *be = cli_backend("bench", o.backend);
    if (!be) return EXIT_USAGE;
    if (o.cupti && be->mem != MEM_DEVICE) { /* "auto" resolved too: before any work */
        cli_error("bench", "--cupti: needs the cuda backend (CUPTI records what a GPU ran)");
        return EXIT_USAGE;
    }
    json_t *peer = NULL;
    if (o.peer && !(peer = load_peer(o.peer))) return EXIT_USAGE;
    /* a peer of another model is no comparison */
    const char *peer_model =
        peer ? json_string_value(json_object_get(json_object_get(peer, "config"), "model")) : NULL;
    if (peer && peer_model && strcmp(peer_model, m->name) != 0) {
        cli_error("bench", "--peer: %s measured %s, this run is %s: not comparable", o.peer,
                  peer_model, m->name);
        json_decref(peer);
        return EXIT_USAGE;
    }
    int max_b = 1, max_t = 1;
    for (int i = 0; i < np; i++) {
        max_b = PULSE_MAX(max_b, pts[i].batch);
        max_t = PULSE_MAX(max_t, pts[i].ctx + (int)(o.warmup + o.iters) + 1);
    }
    json_t *res = results_new("bench-decode-step");
    json_object_set_new(res, "config",
                        json_pack("{s:s,s:s,s:i,s:i,s:i,s:I,s:b}", "backend", be->name, "model",
                                  m->name, "iters", (int)o.iters, "warmup", (int)o.warmup,
                                  "page_size", (int)o.page_size, "seed", (json_int_t)o.seed,
                                  "cuda_graph", !o.no_graph && be->graph_begin != NULL));
    json_object_set_new(json_object_get(res, "config"), "options",
                        runtime_opts_json(&o.rt, BENCH_RT));
    char err[512];
    struct engine_params ep = {.cfg = m,
                               .be = be,
                               .seed = o.seed,
                               .max_batch = max_b,
                               .max_tokens = max_t,
                               .use_graph = !o.no_graph};
    runtime_opts_engine(&o.rt, &ep);
    struct engine *e = engine_create(&ep, err, sizeof err);
    int code = 0;
    if (!e) {
        cli_error("bench", "%s", err);
        json_object_set_new(res, "status", json_string("oom"));
        json_object_set_new(res, "error", json_string(err));
        code = EXIT_OOM;
        goto out;
    }
    be->describe(results_env(res));
    const struct policy *pol = policy_find(o.policy);
    json_object_set_new(json_object_get(res, "config"), "policy", json_string(pol->name));
    if (pol->ctx_kind == POLICY_CTX_OFFLOAD) {
        code = offload_points(e, pol, &o, pts, np, res);
        goto out;
    }
    size_t copy_bytes = be->mem == MEM_DEVICE ? (size_t)1 << 31 : (size_t)1 << 26;
    double copy_gbs = be->copy_bandwidth(engine_ctx(e), copy_bytes, 10);
    results_set_real(res, "copy_bandwidth_GBps", copy_gbs);
    json_t *arr = json_array();
    printf("%-6s %-7s %9s %9s %7s %9s %8s %9s %8s %8s %8s\n", "batch", "context", "ms/step",
           "floor ms", "ratio", "tok/s", "attn ms", "attn/copy", "gemm ms", "gemm/cp", "vs peer");
    for (int i = 0; i < np; i++) {
        json_t *pj = json_object();
        json_array_append_new(arr, pj);
        if (run_point(e, &o, m, pts[i], copy_gbs, pj) != 0) {
            printf("%-6d %-7d %10s\n", pts[i].batch, pts[i].ctx, "oom");
            code = EXIT_OOM;
            continue;
        }
        double step = json_real_value(json_object_get(pj, "ms_per_step_median"));
        json_t *pp = peer ? peer_point(peer, pts[i].batch, pts[i].ctx) : NULL;
        double peer_ms = pp ? json_number_value(json_object_get(pp, "ms_per_step_median")) : NAN;
        if (pp) {
            results_set_real(pj, "peer_ms_per_step", peer_ms);
            results_set_real(pj, "speedup_vs_peer", peer_ms / step);
        }
        printf("%-6d %-7d %9.3f %9.3f %7.3f %9.1f %8.4f %9.3f %8.3f %8.3f ", pts[i].batch,
               pts[i].ctx, step, json_real_value(json_object_get(pj, "floor_ms")),
               json_real_value(json_object_get(pj, "ratio_to_floor")),
               json_real_value(json_object_get(pj, "output_tokens_per_s")),
               json_real_value(json_object_get(pj, "attn_ms_median")),
               json_real_value(json_object_get(pj, "attn_fraction_of_copy_bw")),
               json_real_value(json_object_get(pj, "gemm_ms_per_step")),
               json_real_value(json_object_get(pj, "gemm_GBps")) / copy_gbs);
        if (pp)
            printf("%8.3f\n", peer_ms / step);
        else
            printf("%8s\n", "-"); /* no peer, or no timed point of the peer here */
        print_activity(json_object_get(pj, "gpu_activity"), (int)o.iters);
    }
    printf("copy bandwidth %.1f GB/s (read + write)\n", copy_gbs);
    char gline[320];
    json_object_set_new(res, "gemm", engine_gemm_json(e, gline, sizeof gline));
    printf("%s\n", gline);
    json_object_set_new(res, "points", arr);
    if (peer) json_object_set(res, "peer", peer);
out:
    engine_free(e);
    if (o.out && results_write(res, o.out, err, sizeof err) != PULSE_OK) {
        cli_error("bench", "--out: %s", err);
        code = code ? code : 1;
    }
    json_decref(res);
    json_decref(peer);
    return code;
}

int cmd_bench(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs("usage: pulse bench NAME [options]\n  decode-step   the vanilla decode step "
              "against the memory floor\n",
              argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : 0;
    }
    if (!strcmp(argv[1], "decode-step")) return decode_step(argc - 1, argv + 1);
    cli_error("bench", "unknown benchmark '%s' (known: decode-step)", argv[1]);
    return EXIT_USAGE;
}
