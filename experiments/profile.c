/* pulse profile: the IOAA model's inputs (DESIGN.md section 7; runtime/sched/ioaa_profile.h) measured
 * on a backend and written as a pulse-ioaa-profile/1 file:
 *   t_N(b, c)  one dense decode layer of b requests at context c: the engine's layers run one
 *              after another over a batch of synthetic requests (bench_batch.h), timed from the
 *              first layer's launch to the backend's sync after the last, over n_layers; the
 *              median of --reps after --warmup
 *   t_O(b)     one sparse layer of an offload batch of b. --offload-steps (the default on
 *              cuda): real offload steps of b requests at --offload-context tokens
 *              (bench_offload_point, the synchronous step of PULSE_PROFILE_POLICY: an
 *              offload batch's step as PulseInfer runs it, page and cache as PulseInfer's,
 *              resident blocks reused; with this command's --selection,
 *              --recall-engine, --budget-tokens and --locality-profile), their median step
 *              S_O(b) and their mean recall bytes per step B(b); r_b = B(b) / (b L) is the
 *              recall per request and layer over all L layers (dense ones recall nothing), as r
 *              is everywhere in the model, so b r_b L = B(b), and
 *                  t_O(b) = S_O(b) / L - t_R(b r_b)
 *              with t_R read from this run's table as ioaa.h reads it (running maximum, then
 *              interpolated): the model S = L (t_O(b) + t_R(b r_b)) gives S_O(b) back. A t_O
 *              that comes out <= 0 is the dense approximation below instead, listed in
 *              measurement.offload.clamped. --offload-approx (the default on cpu): the dense
 *              layer time at the selection budget's context (selection and the hot-cache work
 *              are not in it; the file's note says which)
 *   t_R(x)     one recall round of x bytes with the chosen engine: random chunks of a host pool
 *              (a head's piece of a block for headwise selection, a whole block for solohead)
 *              into random slots, wall time from submit to completion; passes over all sizes in
 *              turn, at least 21 (more with --reps), new chunks each round, the median per
 *              size, timed again (three times at most) while a size's median is over twice a
 *              larger size's (a stall); two chunks of every size are read back and compared
 *   r          recall bytes per offload request and layer: --recall-bytes; else with
 *              --offload-steps r_b at the largest measured b; else budget x the mean churn over
 *              all layers of the locality profile (dense layers recall nothing) x one layer's
 *              KV bytes per token. measurement.recall_bytes has the one used and the others
 * A t_N point whose KV does not fit (the backend refuses it, or over --max-kv-gb) is not
 * measured: it is extended linearly in c from the last two measured contexts of its row (never
 * below the last), and listed in measurement.normal.extrapolated; t_O likewise in b. Beside
 * each measured median the record has its samples and its analytic floor (bytes over the copy
 * and H2D bandwidths measured in the same run). --analytic writes the analytic profile instead.
 * The file is read back with ioaa_profile_load and checked with ioaa_create before the command
 * returns: what it writes is what `pulse run` can read. */
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
#include "host_pool.h"
#include "ioaa.h"
#include "ioaa_profile.h"
#include "metrics.h"
#include "offload.h"
#include "recall.h"
#include "results.h"
#include "runtime_opts.h"
#include "workloads/locality.h"

#define CMD "profile"
/* the runtime options pulse profile takes (its engine, recall rounds and offload steps) */
#define PROFILE_RT (RT_RECALL | RT_PIN | RT_ENGINE | RT_OFFLOAD)
#define MAX_GRID 32
#define MAX_REPS 100

static const char usage[] =
    "usage: pulse profile --model NAME [options]\n"
    "  Measures the IOAA model's tables on a backend and writes them as a profile (schema\n"
    "  pulse-ioaa-profile/1, read by pulse run): t_N(b, c), one dense layer of b requests at\n"
    "  context c; t_O(b), one sparse layer of b offload requests; t_R(x), one recall round of\n"
    "  x bytes; r, recall bytes per offload request and layer; on a device, a round's rate\n"
    "  beside the layers per round size and the layers' slowdown beside the rounds.\n"
    "  --model NAME        built-in model config (pulse models)\n"
    "  --backend B         cpu, cuda or auto (default auto)\n"
    "  --recall-engine E   per-block, gather-scatter, zero-copy or batch (default per-block)\n"
    "  --selection S       headwise (a recall chunk is one head's piece of a block, default) or\n"
    "                      solohead (a whole block)\n"
    "  --batches LIST      t_N and t_O batch sizes (default cpu 1,2,4; cuda 1,2,4,...,64)\n"
    "  --contexts LIST     t_N contexts in tokens (default cpu 256,1024,4096; cuda\n"
    "                      1024,2048,...,131072)\n"
    "  --recall-sizes LIST t_R round sizes, K/M/G suffixes, rounded up to whole chunks\n"
    "                      (default cpu 64K,256K,1M; cuda 64K,256K,...,64M)\n"
    "  --budget-tokens N   selected tokens per offload request and layer: the offload steps'\n"
    "                      budget (a multiple of --page-size), --offload-approx's context, the\n"
    "                      churn estimate's budget (default 2048)\n"
    "  --recall-bytes N    r itself (default: what the offload steps recalled per request and\n"
    "                      layer at the largest batch; with --offload-approx budget x mean churn\n"
    "                      x KV bytes per token and layer)\n"
    "  --locality-profile F  the churn profile behind r and the offload steps (default: the\n"
    "                      built-in one; another model's is mapped by depth)\n"
    "  --reps N            timed repetitions per point, median kept (default cpu 3, cuda 5;\n"
    "                      t_R: at least 21 passes over its sizes)\n"
    "  --warmup N          untimed repetitions first (default 1)\n"
    "  --page-size N       tokens per KV block (default 16)\n"
    "  --max-kv-gb G       t_N points whose KV exceeds G are extrapolated, not measured (default\n"
    "                      cpu 4; cuda: what the device refuses)\n"
    "  --offload-steps     t_O(b) from real offload steps (policy arkvale, this command's\n"
    "                      --selection, --recall-engine, --budget-tokens, --locality-profile):\n"
    "                      median step / n_layers - t_R(the step's recall bytes / n_layers)\n"
    "                      (default on cuda)\n"
    "  --offload-approx    t_O(b) = the dense layer time at --budget-tokens (default on cpu)\n"
    "  --offload-context N the offload steps' prompt tokens, above the budget plus 4 blocks\n"
    "                      (default: the largest such --contexts value up to 16384 on cuda,\n"
    "                      1024 on cpu, else the smallest)\n"
    "  --bytes-contexts LIST  the recall per offload request and layer of real offload steps\n"
    "                      (this command's --selection, --recall-engine, --budget-tokens,\n"
    "                      --locality-profile) of 2 requests at each context, into\n"
    "                      recall.by_context: pulse run's IOAA takes its bytes at a decision's\n"
    "                      context from it when the run's schedule is the one measured\n"
    "                      (default: none)\n"
    "  --speculate         those steps with speculation (pulseinfer --speculate's schedule):\n"
    "                      the prefetch and what follows the selection apart\n"
    "  --spec-margin M, --spec-from P  its margin and point (pulse run's flags)\n"
    "  --analytic          write the analytic profile (bytes over the copy and H2D bandwidths\n"
    "                      measured here) instead of measuring the tables\n"
    "  --seed S            weights, synthetic KV, chunk placement (default 1)\n"
    "  --out FILE          the profile (default: none, the tables are printed only)\n";

struct opts {
    const char *backend, *model, *engine, *selection, *locality, *out;
    long batches[MAX_GRID], contexts[MAX_GRID];
    size_t sizes[MAX_GRID];
    int n_batches, n_contexts, n_sizes;
    long budget, reps, warmup, page_size;
    double recall_bytes, max_kv_gb; /* < 0: not given */
    int analytic;
    int offload_steps; /* 1 --offload-steps, 0 --offload-approx, -1 the backend's default */
    long offload_ctx;  /* 0: the default */
    long bytes_ctx[MAX_GRID]; /* --bytes-contexts */
    int n_bytes_ctx;
    struct run_offload_opts spec; /* --speculate, --spec-margin, --spec-from */
    uint64_t seed;
    struct runtime_opts rt; /* the runtime's tuning (runtime_opts.h; PROFILE_RT) */
};

/* ---- parsing ---- */

static int each_batch(const char *t, int i, void *c)
{
    return cli_int(CMD, "--batches", t, 1, 4096, &((long *)c)[i]);
}
static int each_context(const char *t, int i, void *c)
{
    return cli_int(CMD, "--contexts", t, 1, 1 << 22, &((long *)c)[i]);
}
static int each_bytes_context(const char *t, int i, void *c)
{
    return cli_int(CMD, "--bytes-contexts", t, 1, 1 << 22, &((long *)c)[i]);
}
static int each_size(const char *t, int i, void *c)
{
    if (!cli_parse_size(t, &((size_t *)c)[i]) && ((size_t *)c)[i] <= ((size_t)1 << 34)) return 0;
    cli_error(CMD, "--recall-sizes: '%s' is not a size in bytes (e.g. 64K, 1M; at most 16G)", t);
    return -1;
}

/* -1 after a message when the list is not strictly increasing. */
static int increasing(const char *flag, const long *v, int n)
{
    for (int i = 1; i < n; i++)
        if (v[i] <= v[i - 1])
            return cli_error(CMD, "%s: must be strictly increasing: %ld after %ld", flag, v[i],
                             v[i - 1]),
                   -1;
    return 0;
}

/* Fills what the flags left unset with the backend's defaults. */
static void defaults(struct opts *o, int dev)
{
    if (!o->n_batches)
        for (long b = 1; b <= (dev ? 64 : 4); b *= 2)
            o->batches[o->n_batches++] = b;
    if (!o->n_contexts)
        for (long c = dev ? 1024 : 256; c <= (dev ? 131072 : 4096); c *= dev ? 2 : 4)
            o->contexts[o->n_contexts++] = c;
    if (!o->n_sizes)
        for (size_t x = 64 << 10; x <= (dev ? (size_t)64 << 20 : (size_t)1 << 20); x *= 4)
            o->sizes[o->n_sizes++] = x;
    if (o->reps < 0) o->reps = dev ? 5 : 3;
    if (o->max_kv_gb < 0 && !dev) o->max_kv_gb = 4;
}

static int parse(int argc, char **argv, struct opts *o)
{
    enum {
        O_BACKEND = 256,
        O_MODEL,
        O_ENGINE,
        O_SELECTION,
        O_BATCHES,
        O_CONTEXTS,
        O_SIZES,
        O_BUDGET,
        O_RBYTES,
        O_LOCALITY,
        O_REPS,
        O_WARMUP,
        O_PAGE,
        O_MAXKV,
        O_ANALYTIC,
        O_OFF_STEPS,
        O_OFF_APPROX,
        O_OFF_CTX,
        O_BYTES_CTX,
        O_SEED,
        O_OUT,
        O_HELP
    };
    static const struct option own[] = {{"backend", 1, 0, O_BACKEND},
                                        {"model", 1, 0, O_MODEL},
                                        {"recall-engine", 1, 0, O_ENGINE},
                                        {"selection", 1, 0, O_SELECTION},
                                        {"batches", 1, 0, O_BATCHES},
                                        {"contexts", 1, 0, O_CONTEXTS},
                                        {"recall-sizes", 1, 0, O_SIZES},
                                        {"budget-tokens", 1, 0, O_BUDGET},
                                        {"recall-bytes", 1, 0, O_RBYTES},
                                        {"locality-profile", 1, 0, O_LOCALITY},
                                        {"reps", 1, 0, O_REPS},
                                        {"warmup", 1, 0, O_WARMUP},
                                        {"page-size", 1, 0, O_PAGE},
                                        {"max-kv-gb", 1, 0, O_MAXKV},
                                        {"analytic", 0, 0, O_ANALYTIC},
                                        {"offload-steps", 0, 0, O_OFF_STEPS},
                                        {"offload-approx", 0, 0, O_OFF_APPROX},
                                        {"offload-context", 1, 0, O_OFF_CTX},
                                        {"bytes-contexts", 1, 0, O_BYTES_CTX},
                                        {"speculate", 0, 0, RUN_OFF_SPECULATE},
                                        {"spec-margin", 1, 0, RUN_OFF_SPEC_MARGIN},
                                        {"spec-from", 1, 0, RUN_OFF_SPEC_FROM},
                                        {"seed", 1, 0, O_SEED},
                                        {"out", 1, 0, O_OUT},
                                        {"help", 0, 0, O_HELP},
                                        {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->backend = "auto", o->engine = "per-block", o->selection = "headwise";
    o->budget = 2048, o->reps = -1, o->warmup = 1, o->page_size = 16, o->seed = 1;
    o->recall_bytes = o->max_kv_gb = -1;
    o->offload_steps = -1;
    runtime_opts_init(&o->rt);
    run_offload_opts_init(&o->spec);
    struct option opts[64];
    PULSE_CHECK(runtime_opts_getopt(own, PROFILE_RT, opts, 64) == 0, CMD ": the options' table");
    int c, bad = 0;
    opterr = 0;
    optind = 1;
    struct cli_seen seen = {0};
    while (!bad && (c = cli_getopt(CMD, argc, argv, opts, &seen)) != -1) {
        switch (c) {
        case O_BACKEND:
            o->backend = optarg;
            break;
        case O_MODEL:
            o->model = optarg;
            break;
        case O_ENGINE:
            o->engine = optarg;
            if (recall_engine_find(optarg) < 0)
                bad = (cli_error(CMD,
                                 "--recall-engine: unknown engine '%s' (known: per-block, "
                                 "gather-scatter, zero-copy, batch)",
                                 optarg),
                       -1);
            break;
        case O_SELECTION:
            o->selection = optarg;
            if (strcmp(optarg, "headwise") && strcmp(optarg, "solohead"))
                bad = (cli_error(CMD, "--selection: '%s' is not headwise or solohead", optarg), -1);
            break;
        case O_BATCHES:
            bad =
                cli_list(CMD, "--batches", optarg, MAX_GRID, &o->n_batches, each_batch, o->batches);
            break;
        case O_CONTEXTS:
            bad = cli_list(CMD, "--contexts", optarg, MAX_GRID, &o->n_contexts, each_context,
                           o->contexts);
            break;
        case O_SIZES:
            bad =
                cli_list(CMD, "--recall-sizes", optarg, MAX_GRID, &o->n_sizes, each_size, o->sizes);
            break;
        case O_BUDGET:
            bad = cli_budget(CMD, "--budget-tokens", optarg, &o->budget);
            break;
        case O_RBYTES:
            bad = cli_double(CMD, "--recall-bytes", optarg, 0, 1e12, &o->recall_bytes);
            break;
        case O_LOCALITY:
            o->locality = optarg;
            break;
        case O_REPS:
            bad = cli_int(CMD, "--reps", optarg, 1, MAX_REPS, &o->reps);
            break;
        case O_WARMUP:
            bad = cli_int(CMD, "--warmup", optarg, 0, 100, &o->warmup);
            break;
        case O_PAGE:
            bad = cli_int(CMD, "--page-size", optarg, 1, 4096, &o->page_size);
            break;
        case O_MAXKV:
            bad = cli_double(CMD, "--max-kv-gb", optarg, 1e-6, 1e6, &o->max_kv_gb);
            break;
        case O_ANALYTIC:
            o->analytic = 1;
            break;
        case O_OFF_STEPS:
        case O_OFF_APPROX:
            if (o->offload_steps == (c == O_OFF_APPROX))
                bad =
                    (cli_error(CMD, "--offload-steps and --offload-approx: one or the other"), -1);
            o->offload_steps = c == O_OFF_STEPS;
            break;
        case O_OFF_CTX:
            bad = cli_int(CMD, "--offload-context", optarg, 1, 1 << 22, &o->offload_ctx);
            break;
        case O_BYTES_CTX:
            bad = cli_list(CMD, "--bytes-contexts", optarg, IOAA_BYCTX_MAX_POINTS, &o->n_bytes_ctx,
                           each_bytes_context, o->bytes_ctx);
            break;
        case RUN_OFF_SPECULATE:
            o->spec.speculate = 1;
            break;
        case RUN_OFF_SPEC_MARGIN:
            o->spec.spec_margin_set = 1;
            bad = cli_double(CMD, "--spec-margin", optarg, 0.0, 1.0, &o->spec.spec_margin);
            break;
        case RUN_OFF_SPEC_FROM:
            o->spec.spec_from = optarg;
            if (strcmp(optarg, "input") && strcmp(optarg, "mid") && strcmp(optarg, "hits"))
                bad = (cli_error(CMD, "--spec-from: '%s' is not input, mid or hits", optarg), -1);
            break;
        case O_SEED:
            bad = cli_u64(CMD, "--seed", optarg, INT64_MAX, &o->seed);
            break;
        case O_OUT:
            o->out = optarg;
            break;
        case O_HELP:
            fputs(usage, stdout);
            runtime_opts_usage(stdout, PROFILE_RT, &o->rt);
            return 1;
        default:
            if (runtime_opts_code(c)) {
                bad = runtime_opts_flag(CMD, &o->rt, c, optarg);
                break;
            }
            cli_unknown_flag(CMD, argc, argv);
            return -1;
        }
    }
    if (bad || cli_no_extra_args(CMD, argc, argv)) return -1;
    static const char *const out_flag[] = {"--out"};
    if (cli_outputs(CMD, 1, out_flag, &o->out)) return -1;
    if (!o->model) return cli_error(CMD, "--model: required (known: %s)", model_config_names()), -1;
    if (increasing("--batches", o->batches, o->n_batches) ||
        increasing("--contexts", o->contexts, o->n_contexts) ||
        increasing("--bytes-contexts", o->bytes_ctx, o->n_bytes_ctx))
        return -1;
    if (!o->spec.speculate && (o->spec.spec_margin_set || o->spec.spec_from))
        return cli_error(CMD, "%s: only with --speculate",
                         o->spec.spec_from ? "--spec-from" : "--spec-margin"),
               -1;
    if (o->spec.speculate && !o->n_bytes_ctx)
        return cli_error(CMD, "--speculate: only with --bytes-contexts (the steps it is for)"), -1;
    if (o->analytic && o->n_bytes_ctx)
        return cli_error(CMD, "--bytes-contexts: not with --analytic (nothing is measured)"), -1;
    if (o->analytic && (o->offload_steps == 1 || o->offload_ctx))
        return cli_error(CMD, "%s: not with --analytic (nothing is measured)",
                         o->offload_ctx ? "--offload-context" : "--offload-steps"),
               -1;
    return 0;
}

/* The offload steps' defaults once the backend is known: --offload-steps on cuda, and its
 * context, the largest t_N context up to 16384 tokens on cuda and 1024 on cpu (else the
 * smallest) among those above the selection (budget, sink, window and tail blocks: at most that
 * every block is selected and nothing is offloaded); -1 after a message when the offload flags
 * do not go together. */
static int offload_defaults(struct opts *o, int dev)
{
    if (o->offload_steps < 0) o->offload_steps = dev && !o->analytic;
    if (o->recall_bytes >= 0 && o->locality && !o->offload_steps)
        return cli_error(CMD, "--locality-profile: not with --recall-bytes (r is given) unless "
                              "the offload steps use it (--offload-steps)"),
               -1;
    if (o->n_bytes_ctx) {
        if (cli_budget_blocks(CMD, "--budget-tokens", o->budget, o->page_size, "--page-size"))
            return -1;
        struct offload_params p;
        offload_params_init(&p, 1, 1, o->seed);
        const long sel = o->budget + (p.sink + p.window + 1) * o->page_size;
        if (o->bytes_ctx[0] <= sel)
            return cli_error(CMD,
                             "--bytes-contexts: %ld tokens are not above the %ld the steps select "
                             "(--budget-tokens, sink, window and tail blocks): nothing would be "
                             "recalled",
                             o->bytes_ctx[0], sel),
                   -1;
    }
    if (!o->offload_steps) {
        if (o->offload_ctx)
            return cli_error(CMD, "--offload-context: only with --offload-steps (the default on "
                                  "cuda)"),
                   -1;
        return 0;
    }
    if (cli_budget_blocks(CMD, "--budget-tokens", o->budget, o->page_size, "--page-size"))
        return -1;
    struct offload_params p;
    offload_params_init(&p, 1, 1, o->seed);
    const long sel = o->budget + (p.sink + p.window + 1) * o->page_size;
    if (o->offload_ctx && o->offload_ctx <= sel)
        return cli_error(CMD,
                         "--offload-context: %ld tokens are not above the %ld the steps select "
                         "(--budget-tokens, sink, window and tail blocks): nothing would be "
                         "offloaded",
                         o->offload_ctx, sel),
               -1;
    if (o->offload_ctx) return 0;
    for (int j = 0; j < o->n_contexts; j++) /* contexts increase */
        if (o->contexts[j] > sel && (!o->offload_ctx || o->contexts[j] <= (dev ? 16384 : 1024)))
            o->offload_ctx = o->contexts[j];
    if (!o->offload_ctx)
        return cli_error(CMD,
                         "--offload-context: no --contexts value is above the %ld tokens the "
                         "steps select (--budget-tokens, sink, window and tail blocks): give one",
                         sel),
               -1;
    return 0;
}

/* ---- r ---- */

/* r from the flags: --recall-bytes, or budget x the locality profile's mean churn over all
 * layers (a dense layer's 0) x one layer's KV bytes per token. How, into cfg. -1 after a
 * message. */
static int churn_bytes(const struct opts *o, const struct model_config *m, json_t *cfg, double *r);
static int recall_bytes(const struct opts *o, const struct model_config *m, json_t *cfg, double *r)
{
    if (o->recall_bytes < 0) return churn_bytes(o, m, cfg, r);
    *r = o->recall_bytes;
    json_object_set_new(cfg, "recall_bytes_from", json_string("--recall-bytes"));
    return 0;
}

/* The churn estimate of r (recall_bytes's without --recall-bytes): also what pulse run's query
 * source gives IOAA at this budget (pulseinfer's source_recall_bytes), which recall.by_context
 * records to be matched. */
static int churn_bytes(const struct opts *o, const struct model_config *m, json_t *cfg, double *r)
{
    char err[512];
    struct locality_profile *lp = mem_alloc(MEM_HOST, sizeof *lp, "locality profile");
    PULSE_CHECK(lp != NULL, "profile: host memory");
    struct locality_default_params dp; /* dense where arkvale does not select */
    locality_default_params_init(&dp, m->n_layers, o->seed);
    struct offload_params op;
    offload_params_init(&op, 1, 1, o->seed);
    for (int l = 0; l < m->n_layers && l < LOC_MAX_LAYERS; l++)
        dp.dense[l] = offload_layer_kind(&op, m, l) != OFFLOAD_LAYER_SPARSE;
    int rc, mapped = 0;
    if (o->locality) {
        rc = locality_profile_read(o->locality, lp, err, sizeof err);
        /* another model's, or other dense layers: by depth */
        if (rc == PULSE_OK && !locality_profile_matches(lp, m->n_layers, dp.dense)) {
            struct locality_profile *mp = mem_alloc(MEM_HOST, sizeof *mp, "locality profile");
            PULSE_CHECK(mp != NULL, "profile: host memory");
            rc = locality_profile_map_depth(lp, m->n_layers, dp.dense, mp, err, sizeof err);
            *lp = *mp;
            mem_free(MEM_HOST, mp, sizeof *mp);
            mapped = 1;
        }
    } else {
        rc = locality_profile_default(lp, &dp, err, sizeof err);
    }
    if (rc != PULSE_OK) {
        cli_error(CMD, "--locality-profile: %s", err);
        mem_free(MEM_HOST, lp, sizeof *lp);
        return -1;
    }
    double churn = 0;
    for (int l = 0; l < m->n_layers; l++)
        churn += lp->dense[l] ? 0 : locality_profile_mean(lp, l);
    churn /= m->n_layers;
    const double tok = (double)model_kv_bytes_per_token(m) / m->n_layers;
    *r = (double)o->budget * churn * tok;
    json_object_set_new(cfg, "recall_bytes_from",
                        json_pack("{s:s, s:s, s:f, s:I, s:f}", "locality_profile",
                                  o->locality ? o->locality : "default", "profile_mapping",
                                  mapped ? "depth" : "layer", "mean_churn", churn, "budget_tokens",
                                  (json_int_t)o->budget, "kv_bytes_per_token_layer", tok));
    mem_free(MEM_HOST, lp, sizeof *lp);
    return 0;
}

/* ---- the tables ---- */

static json_t *reals(const double *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_real(v[i]));
    return a;
}

static double median(const double *v, int n)
{
    struct dist_summary d;
    metrics_summarize(v, n, &d);
    return d.median;
}

/* One dense layer of b requests at context c: seconds per layer into s[reps], the median in
 * *t. PULSE_OK, or PULSE_ERR_NOMEM when the point's KV is over the limit or refused. */
static int layer_point(struct engine *e, const struct opts *o, int b, int c, double *s, double *t)
{
    const struct model_config *m = engine_model(e)->cfg;
    const struct backend *be = engine_model(e)->be;
    const struct kctx *ctx = engine_ctx(e);
    const int ps = (int)o->page_size;
    if (o->max_kv_gb > 0 && bench_batch_kv_bytes(m, b, c + 1, ps) > o->max_kv_gb * 1e9)
        return PULSE_ERR_NOMEM;
    struct bench_batch bb;
    char err[256];
    if (bench_batch_create(e, b, c, c + 1, ps, &bb, err, sizeof err) != PULSE_OK)
        return PULSE_ERR_NOMEM;
    /* every repetition restarts the residual stream at the embedding (outside the clock), so
     * the layers see the same inputs; the appended token's K/V lands at position c each time */
    for (int i = -(int)o->warmup; i < o->reps; i++) {
        engine_run_embed(e, bb.bt);
        be->sync(ctx);
        const double t0 = pulse_now();
        for (int l = 0; l < m->n_layers; l++)
            engine_run_layer(e, bb.bt, bb.kv, l);
        be->sync(ctx);
        if (i >= 0) s[i] = (pulse_now() - t0) / m->n_layers;
    }
    bench_batch_free(e, &bb);
    *t = median(s, (int)o->reps);
    return PULSE_OK;
}

/* y[m..n) from the line through the last two measured points (x[m-2], y[m-2]) and
 * (x[m-1], y[m-1]), never below y[m-1]. -1 when fewer than two were measured. */
static int extend(const double *x, double *y, int n, int m)
{
    if (m >= n) return 0;
    if (m < 2) return -1;
    const double slope = (y[m - 1] - y[m - 2]) / (x[m - 1] - x[m - 2]);
    for (int i = m; i < n; i++)
        y[i] = fmax(y[m - 1], y[m - 1] + slope * (x[i] - x[m - 1]));
    return 0;
}

/* The t_N grid and the t_O table into d; samples, floors and extrapolated points into meas.
 * 0, or EXIT_OOM after a message when a row or the t_O table has too few measured points. */
static int measure_layers(struct engine *e, const struct opts *o,
                          const struct ioaa_analytic_params *ap, struct ioaa_profile_data *d,
                          json_t *meas)
{
    const int nb = o->n_batches, nc = o->n_contexts, R = (int)o->reps;
    double s[MAX_REPS];
    json_t *nm = json_pack("{s:[], s:[], s:[]}", "samples_s", "floor_s", "extrapolated");
    json_object_set_new(meas, "normal", nm);
    for (int i = 0; i < nb; i++) {
        json_t *srow = json_array(), *frow = json_array();
        json_array_append_new(json_object_get(nm, "samples_s"), srow);
        json_array_append_new(json_object_get(nm, "floor_s"), frow);
        int m = 0; /* measured contexts: a prefix (the KV grows with c) */
        for (int j = 0; j < nc; j++) {
            double *t = &d->tn[(size_t)i * nc + j];
            int ok = m == j &&
                     layer_point(e, o, (int)o->batches[i], (int)o->contexts[j], s, t) == PULSE_OK;
            m += ok;
            json_array_append_new(srow, ok ? reals(s, R) : json_null());
            json_array_append_new(frow,
                                  json_real(ioaa_analytic_t_normal(ap, d->tn_b[i], d->tn_c[j])));
            if (!ok)
                json_array_append_new(json_object_get(nm, "extrapolated"),
                                      json_pack("{s:I,s:I}", "batch", (json_int_t)o->batches[i],
                                                "context", (json_int_t)o->contexts[j]));
        }
        if (extend(d->tn_c, d->tn + (size_t)i * nc, nc, m)) {
            cli_error(CMD,
                      "t_N at batch %ld: the KV of context %ld does not fit (the backend refused "
                      "it or --max-kv-gb), and fewer than two contexts were measured to "
                      "extrapolate from: use smaller --batches or --contexts",
                      o->batches[i], o->contexts[m]);
            return EXIT_OOM;
        }
    }
    json_t *of = json_pack("{s:s, s:[], s:[], s:[], s:I}", "method", "dense-approx", "samples_s",
                           "floor_s", "extrapolated", "context", (json_int_t)o->budget);
    json_object_set_new(meas, "offload", of);
    int m = 0;
    for (int i = 0; i < nb; i++) {
        int ok = m == i &&
                 layer_point(e, o, (int)o->batches[i], (int)o->budget, s, &d->to[i]) == PULSE_OK;
        m += ok;
        json_array_append_new(json_object_get(of, "samples_s"), ok ? reals(s, R) : json_null());
        json_array_append_new(json_object_get(of, "floor_s"),
                              json_real(ioaa_analytic_t_offload(ap, d->to_b[i])));
        if (!ok)
            json_array_append_new(json_object_get(of, "extrapolated"),
                                  json_integer((json_int_t)o->batches[i]));
    }
    if (extend(d->to_b, d->to, nb, m)) {
        cli_error(CMD,
                  "t_O: a batch of %ld at the budget's %ld tokens does not fit, and fewer than "
                  "two batches were measured: use smaller --batches or --budget-tokens",
                  o->batches[m], o->budget);
        return EXIT_OOM;
    }
    return 0;
}

/* The recall rounds' fixture: a host pool of chunks, a destination region on the backend and
 * the engine, sized for the largest round. */
struct recall_rig {
    const struct backend *be;
    const struct kctx *ctx;
    struct host_pool *pool;
    char *h_pool, *d_dst, *h_check;
    size_t chunk, dst_bytes;
    int max_items;
    uint32_t *perm; /* [pool chunks] */
    size_t n_src;
    struct recall_item *items;
    struct recall *r;
    uint64_t rng;
};

static uint64_t rnd(struct recall_rig *g)
{
    g->rng ^= g->rng << 13;
    g->rng ^= g->rng >> 7;
    g->rng ^= g->rng << 17;
    return g->rng;
}

static void rig_free(struct recall_rig *g)
{
    recall_free(g->r);
    host_pool_free(g->pool);
    mem_free(g->be->mem, g->d_dst, g->dst_bytes);
    mem_free(MEM_HOST, g->h_check, g->chunk);
    mem_free(MEM_HOST, g->perm, sizeof *g->perm * g->n_src);
    mem_free(MEM_HOST, g->items, sizeof *g->items * (size_t)g->max_items);
}

static int rig_create(struct recall_rig *g, const struct opts *o, const struct model_config *m,
                      const struct backend *be, const struct kctx *ctx, char *err, size_t errlen)
{
    memset(g, 0, sizeof *g);
    g->be = be, g->ctx = ctx, g->rng = o->seed * 0x9E3779B97F4A7C15ull | 1;
    const int ps = (int)o->page_size;
    const size_t block = (size_t)m->n_kv_heads * 2 * ps * m->head_dim * 2;
    g->chunk = strcmp(o->selection, "solohead") ? block / m->n_kv_heads : block;
    size_t max_bytes = 0;
    for (int i = 0; i < o->n_sizes; i++)
        max_bytes = PULSE_MAX(max_bytes, o->sizes[i]);
    g->max_items = (int)PULSE_CEIL_DIV(max_bytes, g->chunk);
    g->dst_bytes = (size_t)g->max_items * g->chunk;
    /* a quarter more source chunks than the largest round, so the picks stay random */
    const struct host_pool_params hp = {.n_layers = 1,
                                        .n_kv_heads = m->n_kv_heads,
                                        .head_dim = m->head_dim,
                                        .page_size = ps,
                                        .elem_bytes = 2,
                                        .pool_bytes = g->dst_bytes + g->dst_bytes / 4 + block,
                                        .max_requests = 1,
                                        .max_tokens = ps,
                                        .pinned = be->mem == MEM_DEVICE};
    if (!(g->pool = host_pool_create_ex(&hp, &o->rt.offload.pin, err, errlen))) return EXIT_OOM;
    PULSE_CHECK(host_pool_block_bytes(g->pool) == block, "profile: the pool's block size");
    g->h_pool = host_pool_base(g->pool);
    g->n_src = host_pool_bytes(g->pool) / g->chunk;
    g->perm = mem_alloc(MEM_HOST, sizeof *g->perm * g->n_src, "profile perm");
    g->items = mem_alloc(MEM_HOST, sizeof *g->items * (size_t)g->max_items, "profile items");
    g->h_check = mem_alloc(MEM_HOST, g->chunk, "profile check");
    g->d_dst = mem_alloc(be->mem, g->dst_bytes, "profile recall slots");
    if (!g->perm || !g->items || !g->h_check || !g->d_dst) {
        snprintf(err, errlen, "cannot allocate %zu bytes of %s memory for the recall slots",
                 g->dst_bytes, mem_kind_name(be->mem));
        return EXIT_OOM;
    }
    /* position-unique words, so a chunk that lands in the wrong slot is caught */
    uint64_t *w = (uint64_t *)g->h_pool;
    for (size_t i = 0, n = host_pool_bytes(g->pool) / 8; i < n; i++)
        w[i] = (i + 1) * 0x9E3779B97F4A7C15ull ^ o->seed;
    struct recall_params rp = o->rt.offload.recall; /* recall_params_init's, and the flags' */
    rp.engine = (enum recall_engine)recall_engine_find(o->engine);
    rp.max_items = g->max_items;
    rp.host_base = g->h_pool;
    rp.host_bytes = host_pool_bytes(g->pool);
    rp.ops = recall_copy_ops_for(be);
    if (!(g->r = recall_create(&rp, err, errlen))) return 1;
    return 0;
}

/* n distinct random source chunks into n distinct random slots of the destination. */
static void rig_pick(struct recall_rig *g, int n)
{
    for (int side = 0; side < 2; side++) {
        const size_t slots = side ? (size_t)g->max_items : g->n_src;
        for (size_t i = 0; i < slots; i++)
            g->perm[i] = (uint32_t)i;
        for (int i = 0; i < n; i++) {
            const size_t j = i + rnd(g) % (slots - i);
            const uint32_t t = g->perm[i];
            g->perm[i] = g->perm[j], g->perm[j] = t;
            if (side)
                g->items[i].dst = g->d_dst + (size_t)g->perm[i] * g->chunk;
            else
                g->items[i].src = g->h_pool + (size_t)g->perm[i] * g->chunk;
            g->items[i].bytes = g->chunk;
        }
    }
}

/* Round sizes (whole chunks) into d's t_R grid; -1 after a message when two coincide. */
static int recall_grid(const struct opts *o, size_t chunk, struct ioaa_profile_data *d)
{
    for (int i = 0; i < o->n_sizes; i++) {
        d->tr_bytes[i] = (double)(PULSE_CEIL_DIV(o->sizes[i], chunk) * chunk);
        if (i > 0 && !(d->tr_bytes[i] > d->tr_bytes[i - 1]))
            return cli_error(CMD,
                             "--recall-sizes: must be strictly increasing in whole %zu-byte "
                             "chunks: %zu after %zu gives %.0f bytes again",
                             chunk, o->sizes[i], o->sizes[i - 1], d->tr_bytes[i]),
                   -1;
    }
    return 0;
}

/* t_R's rounds are cheap (microseconds to a few milliseconds), so they are timed over more
 * passes than --reps asks: a host-side stall of some milliseconds (s15: every round of the
 * two smallest sizes at 1.07 ms, against 0.04 ms in every other run, for about 10 ms) then
 * falls on a minority of every size's samples, and the median drops it. */
#define RECALL_MIN_PASSES 21

/* One timing of the t_R table: --warmup untimed passes over every size in turn, then R timed,
 * each round on newly picked chunks, seconds into s[size * R + pass]; in the last pass two
 * chunks of every size are read back and compared. 0, or 1 after a message (a failed recall, a
 * chunk that landed wrong). */
static int time_rounds(struct recall_rig *g, const struct opts *o, const double *bytes, int ns,
                       int R, double *s)
{
    for (int k = -(int)o->warmup; k < R; k++)
        for (int i = 0; i < ns; i++) {
            const int n = (int)(bytes[i] / g->chunk);
            rig_pick(g, n);
            int64_t ticket;
            const double t0 = pulse_now();
            int st = recall_submit(g->r, g->items, n, &ticket);
            if (st == PULSE_OK) st = recall_wait(g->r, ticket);
            if (st != PULSE_OK)
                return cli_error(CMD, "a recall of %d chunks failed (status %d)", n, st), 1;
            if (k < 0) continue;
            s[i * R + k] = pulse_now() - t0;
            for (int e = 0; e < 2 && k == R - 1; e++) {
                const struct recall_item *it = &g->items[e ? n - 1 : 0];
                g->be->download(g->ctx, g->h_check, it->dst, it->bytes);
                if (memcmp(g->h_check, it->src, it->bytes))
                    return cli_error(CMD, "a recall of %d chunks: chunk %d landed wrong", n,
                                     e ? n - 1 : 0),
                           1;
            }
        }
    return 0;
}

/* A round this many times slower than a larger one's is a stall (ioaa_profile_inverted); the
 * table is timed again, RECALL_ATTEMPTS times in all, and the last kept with a warning. */
#define RECALL_STALL_FACTOR 2.0
#define RECALL_ATTEMPTS 3

/* The t_R table into d (its grid set); samples, floors and attempts into meas: passes over
 * every size in turn (max(--reps, RECALL_MIN_PASSES) timed), so a stall of the machine is
 * spread over the sizes instead of landing on one, the median per size; timed again while a
 * size is slower than twice a larger one's. 0, or 1 after a message. */
static int measure_recalls(struct recall_rig *g, const struct opts *o,
                           const struct ioaa_analytic_params *ap, struct ioaa_profile_data *d,
                           json_t *meas)
{
    const int R = (int)PULSE_MAX(o->reps, RECALL_MIN_PASSES), ns = o->n_sizes;
    double *s = mem_alloc(MEM_HOST, sizeof *s * (size_t)(R * ns), "profile recall samples");
    if (!s) return cli_error(CMD, "cannot allocate the recall samples"), 1;
    int bad = 0, attempt = 0, a = 0, b = 0, inverted = 1;
    while (!bad && inverted && attempt < RECALL_ATTEMPTS) {
        attempt++;
        bad = time_rounds(g, o, d->tr_bytes, ns, R, s);
        for (int i = 0; i < ns && !bad; i++)
            d->tr[i] = median(s + i * R, R);
        inverted = !bad && ioaa_profile_inverted(d->tr, ns, RECALL_STALL_FACTOR, &a, &b);
        if (inverted)
            fprintf(stderr,
                    "pulse profile: a recall round of %.0f bytes took %.4f ms, over %.0fx the "
                    "%.4f ms of %.0f bytes: a stall; %s\n",
                    d->tr_bytes[a], d->tr[a] * 1e3, RECALL_STALL_FACTOR, d->tr[b] * 1e3,
                    d->tr_bytes[b],
                    attempt < RECALL_ATTEMPTS ? "timing the rounds again" : "kept as measured");
    }
    if (!bad) {
        json_t *rc = json_pack("{s:[], s:[], s:I, s:i, s:i, s:b}", "samples_s", "floor_s",
                               "chunk_bytes", (json_int_t)g->chunk, "passes", R, "attempts",
                               attempt, "stall_kept", inverted);
        for (int i = 0; i < ns; i++) {
            json_array_append_new(json_object_get(rc, "samples_s"), reals(s + i * R, R));
            json_array_append_new(json_object_get(rc, "floor_s"),
                                  json_real(ioaa_analytic_t_recall(ap, d->tr_bytes[i])));
        }
        json_object_set_new(meas, "recall", rc);
    }
    mem_free(MEM_HOST, s, sizeof *s * (size_t)(R * ns));
    return bad;
}

/* The recall and the compute beside each other (recall.beside_compute, .compute_beside), on a
 * device backend, with the engine's layers of an offload batch (the largest --batches that fits
 * at the budget's context, all L layers queued on the compute stream at once, far longer than a
 * round) as a prefetch runs beside the offload batch's layer:
 *   the rate: a round of each table size from 256 KB up, timed from submit to completion while
 *   the layers run; each size's factor is the median round alone (the table's) over the median
 *   beside, so a round's fixed costs beside compute (its blocks waiting for SMs) show at the
 *   sizes they weigh on;
 *   the compute: the L layers' time (device events) alone and with rounds of each of those sizes
 *   up to 16 MB queued back to back beside them, two in flight, until the layers end; per size
 *   the ratio of the medians (a small round's gather holds fewer SMs), a table when there are
 *   two sizes or more, the compute's one factor (prof.compute_beside) the largest.
 * Not measured on a host backend, whose layers run on the calling thread (the reader's defaults
 * apply); 0, or 1 after a message. */
#define BESIDE_MIN_BYTES 262144.0

static int beside_round(struct recall_rig *g, int n, int64_t *ticket)
{
    rig_pick(g, n);
    return recall_submit(g->r, g->items, n, ticket);
}

static int measure_beside(struct engine *e, struct recall_rig *g, const struct opts *o,
                          struct ioaa_profile_data *d, json_t *meas)
{
    const struct backend *be = engine_model(e)->be;
    if (be->mem != MEM_DEVICE) {
        json_object_set_new(meas, "recall_beside",
                            json_string("not measured: the host backend's layers run on the "
                                        "calling thread"));
        return 0;
    }
    int k = 0, k0 = -1;
    for (int i = 0; i < d->prof.tr_n; i++) {
        if (i > 0 && d->tr_bytes[i] <= 16e6) k = i;
        if (k0 < 0 && d->tr_bytes[i] >= BESIDE_MIN_BYTES) k0 = i;
    }
    if (k0 < 0) k0 = d->prof.tr_n - 1;
    k0 = PULSE_MAX(k0, d->prof.tr_n - IOAA_BESIDE_MAX_POINTS);
    const int R = (int)PULSE_MAX(o->reps, 11), L = engine_model(e)->cfg->n_layers;
    const int b = (int)o->batches[o->n_batches - 1];
    struct bench_batch bb;
    char err[256];
    int bb_rc = PULSE_ERR_NOMEM, made = 0;
    for (int i = o->n_batches - 1; i >= 0 && bb_rc != PULSE_OK; i--) { /* the largest that fits */
        made = (int)o->batches[i];
        bb_rc = bench_batch_create(e, made, (int)o->budget, (int)o->budget + 1, (int)o->page_size,
                                   &bb, err, sizeof err);
    }
    if (bb_rc != PULSE_OK) {
        cli_error(CMD, "the recall beside compute: no batch of %d at %ld tokens fits", b,
                  o->budget);
        return 1;
    }
    const int ns = d->prof.tr_n - k0, nk = PULSE_MAX(1, k - k0 + 1); /* compute: k0 .. k */
    const size_t n_samples = (size_t)R * (size_t)(ns + 1 + nk);
    double *s = mem_alloc(MEM_HOST, sizeof *s * n_samples, "profile beside samples");
    void *ev[2] = {be->event_create_timed(), be->event_create_timed()};
    int bad = !s || !ev[0] || !ev[1];
    if (bad) cli_error(CMD, "the recall beside compute: cannot allocate its samples or events");
    /* the rounds of each size beside the layers */
    for (int r = -(int)o->warmup; r < R && !bad; r++)
        for (int i = 0; i < ns && !bad; i++) {
            const int n = (int)(d->tr_bytes[k0 + i] / g->chunk);
            engine_run_embed(e, bb.bt);
            for (int l = 0; l < L; l++) /* queued on the compute stream, not waited for */
                engine_run_layer(e, bb.bt, bb.kv, l);
            int64_t ticket;
            const double t0 = pulse_now();
            int st = beside_round(g, n, &ticket);
            if (st == PULSE_OK) st = recall_wait(g->r, ticket);
            const double t = pulse_now() - t0;
            be->sync(engine_ctx(e));
            if (st != PULSE_OK) {
                cli_error(CMD, "a recall beside compute failed (status %d)", st);
                bad = 1;
            }
            if (r >= 0) s[i * R + r] = t;
        }
    /* the layers alone (side 0), then beside rounds of each size back to back (two in flight)
     * until they end (side 1 + j: size k0 + j, or k alone when it is below k0) */
    double *c = s ? s + (size_t)ns * R : NULL;
    int rounds[IOAA_BESIDE_MAX_POINTS] = {0};
    for (int r = -(int)o->warmup; r < R && !bad; r++)
        for (int side = 0; side < 1 + nk && !bad; side++) {
            be->event_record(engine_ctx(e), ev[0]);
            engine_run_embed(e, bb.bt);
            for (int l = 0; l < L; l++)
                engine_run_layer(e, bb.bt, bb.kv, l);
            be->event_record(engine_ctx(e), ev[1]);
            int64_t t[2] = {-1, -1};
            int st = PULSE_OK, q = 0;
            const int kk = nk > 1 ? k0 + side - 1 : k, n = (int)(d->tr_bytes[kk] / g->chunk);
            if (side) st = beside_round(g, n, &t[0]);
            while (side && st == PULSE_OK && !be->event_query(ev[1])) {
                st = beside_round(g, n, &t[!q]);
                if (st == PULSE_OK) st = recall_wait(g->r, t[q]);
                t[q] = -1, q = !q;
                rounds[side - 1] += r >= 0;
            }
            for (int h = 0; h < 2 && st == PULSE_OK; h++)
                if (t[h] >= 0) st = recall_wait(g->r, t[h]);
            be->sync(engine_ctx(e));
            if (st != PULSE_OK) {
                cli_error(CMD, "a recall beside compute failed (status %d)", st);
                bad = 1;
            }
            if (r >= 0) c[side * R + r] = be->event_elapsed_s(ev[0], ev[1]);
        }
    bench_batch_free(e, &bb);
    for (int i = 0; i < 2; i++)
        if (ev[i]) be->event_destroy(ev[i]);
    if (!bad) {
        struct ioaa_beside *bs = &d->info.beside;
        json_t *rj = json_pack("{s:[], s:[], s:[], s:[], s:i, s:i}", "bytes", "alone_s", "beside_s",
                               "factor", "layers", L, "batch", made);
        for (int i = 0; i < ns; i++) {
            const double beside = median(s + i * R, R), alone = d->tr[k0 + i];
            bs->bytes[i] = d->tr_bytes[k0 + i];
            bs->factor[i] = PULSE_MIN(IOAA_PROFILE_BESIDE_MAX, alone / beside);
            json_array_append_new(json_object_get(rj, "bytes"), json_real(bs->bytes[i]));
            json_array_append_new(json_object_get(rj, "alone_s"), json_real(alone));
            json_array_append_new(json_object_get(rj, "beside_s"), json_real(beside));
            json_array_append_new(json_object_get(rj, "factor"), json_real(bs->factor[i]));
        }
        bs->n = ns;
        const double ca = median(c, R);
        json_t *cj = json_pack("{s:o, s:[], s:[], s:[], s:[], s:[]}", "alone_s", reals(c, R),
                               "beside_s", "round_bytes", "rounds", "ratio", "factor");
        d->prof.compute_beside = 1;
        bs->slow_n = nk > 1 ? nk : 0;
        for (int j = 0; j < nk; j++) {
            const double cb = median(c + (size_t)(1 + j) * R, R);
            const double f = PULSE_MIN(IOAA_PROFILE_COMPUTE_MAX, PULSE_MAX(1.0, cb / ca));
            const double x = d->tr_bytes[nk > 1 ? k0 + j : k];
            if (nk > 1) bs->slow_bytes[j] = x, bs->slow[j] = f;
            d->prof.compute_beside = PULSE_MAX(d->prof.compute_beside, f);
            json_array_append_new(json_object_get(cj, "beside_s"),
                                  reals(c + (size_t)(1 + j) * R, R));
            json_array_append_new(json_object_get(cj, "round_bytes"), json_real(x));
            json_array_append_new(json_object_get(cj, "rounds"), json_integer(rounds[j]));
            json_array_append_new(json_object_get(cj, "ratio"), json_real(cb / ca));
            json_array_append_new(json_object_get(cj, "factor"), json_real(f));
        }
        json_object_set_new(rj, "compute", cj);
        json_object_set_new(meas, "recall_beside", rj);
    }
    mem_free(MEM_HOST, s, sizeof *s * n_samples);
    return bad;
}

/* ---- t_O from offload steps ---- */

static json_t *real_or_null(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

/* t_R as ioaa.h will read it: d's table under the reader's running maximum (into tr[tr_n]), in
 * a model whose single t_N and t_O points are never read. NULL after a message. */
static struct ioaa *recall_model(const struct ioaa_profile_data *d, double *tr)
{
    static const double one = 1;
    for (int i = 0; i < d->prof.tr_n; i++)
        tr[i] = i ? fmax(tr[i - 1], d->tr[i]) : d->tr[i];
    const struct ioaa_params ip = {.profile = {.n_layers = 1,
                                               .tn_nb = 1,
                                               .tn_nc = 1,
                                               .tn_b = &one,
                                               .tn_c = &one,
                                               .tn = &one,
                                               .to_n = 1,
                                               .to_b = &one,
                                               .to = &one,
                                               .tr_n = d->prof.tr_n,
                                               .tr_bytes = d->tr_bytes,
                                               .tr = tr}};
    char err[256];
    struct ioaa *a = ioaa_create(&ip, err, sizeof err);
    if (!a) cli_error(CMD, "the t_R table: %s", err);
    return a;
}

/* Untimed offload steps first: at least one, the cold step that recalls every selected block. */
static int offload_warmup(const struct opts *o)
{
    return (int)PULSE_MAX(1, o->warmup);
}

/* The policy whose synchronous step t_O measures: the engine-matched ArkVale (select, recall,
 * wait, attend; page size, cache and reuse as PulseInfer's), its selection and engine this
 * command's. */
#define PULSE_PROFILE_POLICY "arkvale+solohead+gs"

/* Real offload steps of b requests at --offload-context (bench_offload_point's record into
 * pj): the median step in *s_o (seconds) and the mean recall bytes per step in *bytes.
 * PULSE_OK; PULSE_ERR_NOMEM when the batch does not fit (over pulse run's default host pool
 * cap, 100 GB on cuda and 4 GB on cpu, or refused by the backend); 1 after a message. */
static int offload_point(struct engine *e, const struct opts *o, const struct run_offload_opts *oo,
                         const struct floor_bw *bw, int b, json_t *pj, double *s_o, double *bytes)
{
    const struct model_config *m = engine_model(e)->cfg;
    const int dev = engine_model(e)->be->mem == MEM_DEVICE;
    const int ctx = (int)o->offload_ctx, warm = offload_warmup(o), steps = warm + (int)o->reps;
    struct offload_params p;
    offload_params_init(&p, b, ctx + steps + 1, o->seed);
    p.n_dense = (int)oo->dense_layers;
    const double host =
        (double)b * (double)offload_request_host_bytes(&p, m, (int)o->page_size, ctx + steps + 1);
    if (host > (dev ? 100e9 : 4e9)) {
        json_object_set_new(pj, "status", json_string("over the host pool cap"));
        results_set_real(pj, "host_pool_bytes_needed", host);
        return PULSE_ERR_NOMEM;
    }
    const int rc = bench_offload_point(e, policy_find(PULSE_PROFILE_POLICY), oo, &o->rt, b, ctx,
                                       warm, steps, (int)o->page_size, o->seed, bw, pj);
    if (rc == EXIT_OOM) return PULSE_ERR_NOMEM;
    if (rc) {
        const char *why = json_string_value(json_object_get(pj, "error"));
        cli_error(CMD, "the offload steps of %d requests at %d tokens failed%s%s", b, ctx,
                  why && *why ? ": " : "", why && *why ? why : "");
        return 1;
    }
    *s_o = json_real_value(json_object_get(pj, "ms_per_step_median")) * 1e-3;
    *bytes =
        json_real_value(json_object_get(json_object_get(pj, "mean_step_floor"), "recall_bytes"));
    return PULSE_OK;
}

/* measurement.offload's per-batch arrays under --offload-steps (null where not measured). */
enum {
    OF_STEP_S,   /* S_O(b), the median step, seconds */
    OF_BYTES,    /* B(b), the mean recall bytes per step */
    OF_R,        /* r_b = B / (b L) */
    OF_R_SPARSE, /* B / (b sparse layers): what one sparse layer recalls per request */
    OF_T_R,      /* t_R(B / L) */
    OF_DERIVED,  /* S_O / L - t_R(B / L), before the clamp */
    OF_FLOOR,    /* the analytic t_O floor */
    OF_CLAMPED,  /* batches whose derived t_O is <= 0 (the dense approximation kept) */
    OF_EXTRAP,   /* batches not run (over the host pool, refused): extrapolated */
    OF_POINTS,   /* bench_offload_point's records (its offload config once, beside them) */
    OF_N
};
static const char *const of_keys[OF_N] = {"step_median_s",
                                          "recall_bytes_per_step",
                                          "recall_bytes_per_request_layer",
                                          "recall_bytes_per_request_sparse_layer",
                                          "t_recall_s",
                                          "derived_s",
                                          "floor_s",
                                          "clamped",
                                          "extrapolated",
                                          "points"};

/* measurement.offload under --offload-steps, its arrays in arr[OF_N], the approximation's
 * record (meas.offload until now) under dense_approx; caller owns the reference. */
static json_t *offload_record(const struct opts *o, int L, int n_sparse, json_t *meas, json_t **arr)
{
    json_t *of =
        json_pack("{s:s, s:s, s:I, s:i, s:i, s:i, s:i, s:O}", "method", "offload-steps", "policy",
                  PULSE_PROFILE_POLICY, "context", (json_int_t)o->offload_ctx, "warmup_steps",
                  offload_warmup(o), "timed_steps", (int)o->reps, "n_layers", L, "sparse_layers",
                  n_sparse, "dense_approx", json_object_get(meas, "offload"));
    for (int k = 0; k < OF_N; k++)
        json_object_set_new(of, of_keys[k], arr[k] = json_array());
    json_object_set(meas, "offload", of);
    return of;
}

/* --offload-steps: t_O(b) = S_O(b) / L - t_R(B(b) / L) into d over the dense approximation
 * that d->to holds (kept where the difference is <= 0: "clamped"); the steps' record into
 * meas.offload; r_b at the largest measured b into *r. 0; EXIT_OOM after a message when fewer
 * than two batches fit to extrapolate from; 1 after a message on a failure. */
static int measure_offload(struct engine *e, const struct opts *o,
                           const struct ioaa_analytic_params *ap, struct ioaa_profile_data *d,
                           json_t *meas, double *r)
{
    const int nb = o->n_batches, L = engine_model(e)->cfg->n_layers;
    double tr[MAX_GRID];
    struct ioaa *a = recall_model(d, tr);
    if (!a) return 1;
    struct run_offload_opts oo;
    run_offload_opts_init(&oo);
    oo.budget_tokens = o->budget, oo.budget_set = 1;
    oo.selection = o->selection, oo.engine = o->engine, oo.profile = o->locality;
    struct offload_params op;
    offload_params_init(&op, 1, 1, o->seed);
    op.n_dense = (int)oo.dense_layers;
    const int n_sparse = offload_sparse_layers(&op, engine_model(e)->cfg);
    json_t *arr[OF_N], *of = offload_record(o, L, n_sparse, meas, arr);
    printf("offload steps (arkvale, %ld tokens, %s, %s):\n", o->offload_ctx, o->selection,
           o->engine);
    int m = 0, code = 0; /* measured batches: a prefix */
    for (int i = 0; i < nb && !code; i++) {
        const int b = (int)o->batches[i];
        json_t *pj = json_pack("{s:i}", "batch", b);
        double s_o = NAN, bytes = NAN, t_rec = NAN, t = NAN;
        const int rc =
            m == i ? offload_point(e, o, &oo, &ap->bw, b, pj, &s_o, &bytes) : PULSE_ERR_NOMEM;
        code = rc == 1;
        if (rc == PULSE_OK) {
            t_rec = ioaa_t_recall(a, bytes / L); /* b r_b = B / L */
            t = s_o / L - t_rec;
            if (t > 0)
                d->to[i] = t;
            else /* the dense approximation stays */
                json_array_append_new(arr[OF_CLAMPED], json_integer(b));
            *r = bytes / ((double)b * L);
            printf("  b=%d  S_O %.4f ms  recall %.0f bytes/step  t_R %.4f ms  t_O %.4f ms%s\n", b,
                   s_o * 1e3, bytes, t_rec * 1e3, d->to[i] * 1e3, t > 0 ? "" : " (clamped)");
            m++;
        } else if (rc == PULSE_ERR_NOMEM) {
            json_array_append_new(arr[OF_EXTRAP], json_integer(b));
        }
        const double v[OF_FLOOR + 1] = {s_o,
                                        bytes,
                                        bytes / ((double)b * L),
                                        bytes / ((double)b * n_sparse),
                                        t_rec,
                                        t,
                                        ioaa_analytic_t_offload(ap, d->to_b[i])};
        for (int k = 0; k <= OF_FLOOR; k++)
            json_array_append_new(arr[k], real_or_null(v[k]));
        json_t *cfg = json_object_get(pj, "offload"); /* the last measured batch's */
        if (cfg) json_object_set(of, "offload", cfg);
        json_object_del(pj, "offload");
        json_array_append_new(arr[OF_POINTS], pj);
    }
    ioaa_free(a);
    if (!code && extend(d->to_b, d->to, nb, m)) {
        cli_error(CMD,
                  "t_O: offload steps of %ld requests at %ld tokens do not fit, and fewer than "
                  "two batches were measured: use smaller --batches or --offload-context, or "
                  "--offload-approx",
                  o->batches[m], o->offload_ctx);
        code = EXIT_OOM;
    }
    json_decref(of);
    return code;
}

/* --bytes-contexts: the recall per request and layer (all L layers, as r) of real offload steps
 * of BYTES_BATCH requests at each context, with the schedule the flags name (exact at layer:
 * PULSE_PROFILE_POLICY's; --speculate: pulseinfer's, at its margin and point), the timed steps'
 * only (the first steps recall whole selections), into d->info.by_context and meas.by_context.
 * 0; an exit code after a message. */
#define BYTES_BATCH 2
#define BYTES_MIN_TIMED 8
static int measure_bytes(struct engine *e, const struct opts *o, const struct floor_bw *bw,
                         struct ioaa_profile_data *d, json_t *meas)
{
    if (!o->n_bytes_ctx) return 0;
    double source = 0;
    json_t *scratch = json_object();
    const int bad = churn_bytes(o, engine_model(e)->cfg, scratch, &source);
    json_decref(scratch);
    if (bad) return EXIT_USAGE;
    struct run_offload_opts oo = o->spec;
    oo.budget_tokens = o->budget, oo.budget_set = 1;
    oo.selection = o->selection, oo.engine = o->engine, oo.profile = o->locality;
    const struct policy *pol = policy_find(oo.speculate ? "pulseinfer" : PULSE_PROFILE_POLICY);
    const int L = engine_model(e)->cfg->n_layers, b = BYTES_BATCH, warm = offload_warmup(o) + 1;
    const int steps = warm + (int)PULSE_MAX(o->reps, BYTES_MIN_TIMED);
    struct ioaa_bytes_by_context *bc = &d->info.by_context;
    memset(bc, 0, sizeof *bc);
    bc->speculate = oo.speculate;
    bc->source_bytes = source;
    bc->spec_margin = oo.spec_margin;
    snprintf(bc->spec_from, sizeof bc->spec_from, "%s", oo.spec_from ? oo.spec_from : "input");
    json_t *points = json_array();
    json_object_set_new(meas, "by_context",
                        json_pack("{s:s, s:i, s:i, s:i, s:o}", "policy", pol->name, "batch", b,
                                  "warmup_steps", warm, "timed_steps", steps - warm, "points",
                                  points));
    printf("recall by context (%s%s, %d requests):\n", pol->name,
           oo.speculate ? " --speculate" : "", b);
    for (int i = 0; i < o->n_bytes_ctx; i++) {
        const int c = (int)o->bytes_ctx[i];
        json_t *pj = json_pack("{s:i, s:i}", "batch", b, "context", c);
        json_array_append_new(points, pj);
        const int rc = bench_offload_point(e, pol, &oo, &o->rt, b, c, warm, steps,
                                           (int)o->page_size, o->seed, bw, pj);
        if (rc) {
            const char *why = json_string_value(json_object_get(pj, "error"));
            cli_error(CMD, "--bytes-contexts: the offload steps of %d requests at %d tokens %s%s%s",
                      b, c, rc == EXIT_OOM ? "do not fit" : "failed", why && *why ? ": " : "",
                      why && *why ? why : "");
            return rc == EXIT_OOM ? EXIT_OOM : 1;
        }
        json_object_del(pj, "offload");
        const json_t *tr = json_object_get(pj, "timed_recall");
        const double per = (double)(steps - warm) * b * L;
        const double all = (double)json_integer_value(json_object_get(tr, "bytes")) / per;
        const double pre = (double)json_integer_value(json_object_get(tr, "prefetch_bytes")) / per;
        bc->context[i] = c;
        bc->bytes[i] = all;
        bc->prefetch[i] = oo.speculate ? pre : 0;
        bc->after[i] = oo.speculate ? all - pre : 0;
        printf("  %6d tokens  %.0f bytes per request and layer", c, all);
        if (oo.speculate) printf(" (prefetch %.0f, after the selection %.0f)", pre, all - pre);
        printf("\n");
    }
    bc->n = o->n_bytes_ctx;
    return 0;
}

/* ---- output ---- */

static void print_tables(const struct ioaa_profile_data *d, const struct opts *o)
{
    const struct ioaa_profile *p = &d->prof;
    printf("t_N: ms per dense layer (%s, %s)\n%8s", d->info.model, d->info.backend, "batch");
    for (int j = 0; j < p->tn_nc; j++)
        printf(" %9.0f", p->tn_c[j]);
    printf("  <- context\n");
    for (int i = 0; i < p->tn_nb; i++) {
        printf("%8.0f", p->tn_b[i]);
        for (int j = 0; j < p->tn_nc; j++)
            printf(" %9.4f", p->tn[(size_t)i * p->tn_nc + j] * 1e3);
        printf("\n");
    }
    if (o->offload_steps)
        printf("t_O: ms per sparse layer (offload steps at %ld tokens):", o->offload_ctx);
    else
        printf("t_O: ms per sparse layer (dense at %ld tokens):", o->budget);
    for (int i = 0; i < p->to_n; i++)
        printf(" b=%.0f %.4f", p->to_b[i], p->to[i] * 1e3);
    printf("\nt_R: ms per recall round (%s):", d->info.recall_engine);
    for (int i = 0; i < p->tr_n; i++)
        printf(" %.0fK %.4f", p->tr_bytes[i] / 1024, p->tr[i] * 1e3);
    printf("\nr = %.0f bytes per offload request and layer\n", p->recall_bytes);
}

/* Reads the profile in res as pulse run would and checks that it passes ioaa_create; the
 * values the reader's running maximum raises go into meas. 0, or 1 after a message. */
static int check_profile(const json_t *res, json_t *meas)
{
    struct ioaa_profile_data back = {0};
    char err[512];
    struct ioaa *a = NULL;
    int rc = ioaa_profile_from_json(res, "profile", &back, err, sizeof err);
    if (rc == PULSE_OK) {
        const struct ioaa_params ip = {.profile = back.prof, .max_waiting = 1, .irq = 1};
        if (!(a = ioaa_create(&ip, err, sizeof err))) rc = PULSE_ERR_INVALID;
    }
    if (rc == PULSE_OK) {
        json_object_set_new(meas, "raised_by_reader", json_integer(back.raised));
        if (back.raised)
            printf("%d noisy table values are raised to the running maximum when read\n",
                   back.raised);
    } else {
        cli_error(CMD, "the profile does not pass the reader: %s", err);
    }
    ioaa_free(a);
    ioaa_profile_data_free(&back);
    return rc == PULSE_OK ? 0 : 1;
}

/* Writes res to path and loads it back with ioaa_profile_load. 0, or 1 after a message. */
static int write_profile(const json_t *res, const char *path)
{
    char err[512];
    struct ioaa_profile_data back = {0};
    int rc = results_write_exact(res, path, err, sizeof err);
    if (rc == PULSE_OK) rc = ioaa_profile_load(path, &back, err, sizeof err);
    ioaa_profile_data_free(&back);
    if (rc != PULSE_OK) cli_error(CMD, "--out: %s", err);
    return rc == PULSE_OK ? 0 : 1;
}

/* ---- the command ---- */

/* The bandwidths of the analytic floor, measured on be, into ap and res's measurement. */
static void measure_bw(const struct backend *be, const struct kctx *ctx,
                       struct ioaa_analytic_params *ap, json_t *res)
{
    const int dev = be->mem == MEM_DEVICE;
    ap->bw = (struct floor_bw){be->copy_bandwidth(ctx, (size_t)(dev ? 512 : 64) << 20, 10),
                               be->h2d_bandwidth(ctx, (size_t)(dev ? 256 : 64) << 20, 10)};
    json_t *meas = json_object_get(res, "measurement");
    results_set_real(meas, "copy_bandwidth_GBps", ap->bw.hbm_gbps);
    results_set_real(meas, "h2d_peak_GBps", ap->bw.h2d_gbps);
}

/* --analytic: the bandwidths, then the analytic profile into d. 0, or 1 after a message. */
static int analytic(const struct backend *be, struct ioaa_analytic_params *ap,
                    struct ioaa_profile_data *d, json_t *res)
{
    char err[512];
    struct kctx ctx;
    memset(&ctx, 0, sizeof ctx);
    if (be->ctx_create(&ctx, 0) != PULSE_OK)
        return cli_error(CMD, "backend %s: no usable device", be->name), 1;
    be->describe(results_env(res));
    measure_bw(be, &ctx, ap, res);
    be->ctx_free(&ctx);
    if (ioaa_profile_analytic(ap, d, err, sizeof err)) return cli_error(CMD, "%s", err), 1;
    return 0;
}

/* r's record: the one used and where from (config.recall_bytes_from, when the steps gave it),
 * the churn estimate and the steps' value beside it (null when not made). */
static void record_recall_bytes(const struct opts *o, double churn, double steps, json_t *cfg,
                                json_t *meas)
{
    const char *from = o->recall_bytes >= 0 ? "--recall-bytes"
                       : o->offload_steps   ? "offload steps"
                                            : "locality churn";
    json_t *rb = json_pack("{s:s}", "from", from);
    results_set_real(rb, "used",
                     o->recall_bytes >= 0 ? o->recall_bytes
                     : o->offload_steps   ? steps
                                          : churn);
    results_set_real(rb, "churn_estimate", o->recall_bytes >= 0 ? NAN : churn);
    results_set_real(rb, "offload_steps", steps);
    json_object_set_new(meas, "recall_bytes", rb);
    if (o->recall_bytes < 0 && o->offload_steps) {
        json_object_set(rb, "churn_estimate_from", json_object_get(cfg, "recall_bytes_from"));
        json_object_set_new(cfg, "recall_bytes_from", json_string("offload steps"));
    }
}

/* The measured profile's info: names, source, and a note on how each table was made. */
static void describe(const struct opts *o, const struct model_config *m, const struct backend *be,
                     size_t chunk, struct ioaa_profile_info *in)
{
    snprintf(in->model, sizeof in->model, "%s", m->name);
    snprintf(in->backend, sizeof in->backend, "%s", be->name);
    snprintf(in->recall_engine, sizeof in->recall_engine, "%s", o->engine);
    snprintf(in->source, sizeof in->source, "measured");
    char t_o[320];
    if (o->offload_steps)
        snprintf(t_o, sizeof t_o,
                 "t_O(b) = S_O(b) / L - t_R(B(b) / L), S_O the median step and B the mean recall "
                 "bytes per step of real offload steps (arkvale, %s, budget %ld) of b requests "
                 "at %ld tokens (<= 0: the dense approximation, measurement.offload.clamped); "
                 "r = %s",
                 o->selection, o->budget, o->offload_ctx,
                 o->recall_bytes < 0 ? "B / (b L) at the largest b" : "--recall-bytes");
    else
        snprintf(t_o, sizeof t_o,
                 "t_O is approximated by the dense layer time at the selection budget's context "
                 "(%ld tokens), without selection and hot-cache work",
                 o->budget);
    snprintf(in->note, sizeof in->note,
             "measured: t_N is the dense layer time (all layers over n_layers, median); %s; t_R "
             "is submit to completion of one recall round of %s chunks of %zu bytes",
             t_o, o->selection, chunk);
}

/* The measured profile into d: the engine's layers, then the recall rounds. 0, or an exit
 * code after a message. */
static int measure(const struct opts *o, const struct model_config *m, const struct backend *be,
                   struct ioaa_analytic_params *ap, struct ioaa_profile_data *d, json_t *res)
{
    char err[512];
    if (ioaa_profile_data_alloc(d, o->n_batches, o->n_contexts, o->n_batches, o->n_sizes, err,
                                sizeof err))
        return cli_error(CMD, "%s", err), 1;
    for (int i = 0; i < o->n_batches; i++)
        d->tn_b[i] = d->to_b[i] = (double)o->batches[i];
    for (int j = 0; j < o->n_contexts; j++)
        d->tn_c[j] = (double)o->contexts[j];
    long max_c = o->budget;
    for (int j = 0; j < o->n_contexts; j++)
        max_c = PULSE_MAX(max_c, o->contexts[j]);
    if (o->offload_steps) /* bench_offload_point's context plus its steps */
        max_c = PULSE_MAX(max_c, o->offload_ctx + offload_warmup(o) + o->reps);
    if (o->n_bytes_ctx) /* measure_bytes's */
        max_c = PULSE_MAX(max_c, o->bytes_ctx[o->n_bytes_ctx - 1] + offload_warmup(o) + 1 +
                                     PULSE_MAX(o->reps, BYTES_MIN_TIMED));
    struct engine_params ep = {.cfg = m,
                               .be = be,
                               .seed = o->seed,
                               .max_batch = (int)PULSE_MAX(o->batches[o->n_batches - 1],
                                                           o->n_bytes_ctx ? BYTES_BATCH : 1),
                               .max_tokens = (int)max_c + 1};
    runtime_opts_engine(&o->rt, &ep);
    struct engine *e = engine_create(&ep, err, sizeof err);
    if (!e) return cli_error(CMD, "%s", err), EXIT_OOM;
    be->describe(results_env(res));
    measure_bw(be, engine_ctx(e), ap, res);
    json_t *meas = json_object_get(res, "measurement");
    const double t0 = pulse_now();
    int code = measure_layers(e, o, ap, d, meas);
    struct recall_rig g;
    memset(&g, 0, sizeof g);
    g.be = be;
    if (!code && (code = rig_create(&g, o, m, be, engine_ctx(e), err, sizeof err)))
        cli_error(CMD, "the recall rounds: %s", err);
    if (!code && recall_grid(o, g.chunk, d)) code = EXIT_USAGE;
    if (!code) code = measure_recalls(&g, o, ap, d, meas);
    if (!code) code = measure_beside(e, &g, o, d, meas);
    double r_steps = NAN;
    if (!code && o->offload_steps) code = measure_offload(e, o, ap, d, meas, &r_steps);
    if (!code) code = measure_bytes(e, o, &ap->bw, d, meas);
    results_set_real(meas, "seconds", pulse_now() - t0);
    d->prof.n_layers = m->n_layers;
    d->prof.recall_bytes = o->recall_bytes < 0 && o->offload_steps ? r_steps : ap->recall_bytes;
    record_recall_bytes(o, ap->recall_bytes, r_steps, json_object_get(res, "config"), meas);
    describe(o, m, be, g.chunk, &d->info);
    rig_free(&g);
    engine_free(e);
    return code;
}

int cmd_profile(int argc, char **argv)
{
    struct opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc > 0 ? 0 : EXIT_USAGE;
    const struct model_config *m = cli_model(CMD, o.model);
    const struct backend *be = m ? cli_backend(CMD, o.backend) : NULL;
    if (!be) return EXIT_USAGE;
    defaults(&o, be->mem == MEM_DEVICE);
    if (offload_defaults(&o, be->mem == MEM_DEVICE)) return EXIT_USAGE;
    json_t *res = results_new("profile");
    json_t *cfg = json_pack(
        "{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:b}", "backend", be->name, "model", m->name,
        "recall_engine", o.engine, "selection", o.selection, "budget_tokens", (json_int_t)o.budget,
        "reps", (json_int_t)o.reps, "warmup", (json_int_t)o.warmup, "page_size",
        (json_int_t)o.page_size, "seed", (json_int_t)o.seed, "analytic", o.analytic);
    json_object_set_new(res, "config", cfg);
    json_object_set_new(cfg, "options", runtime_opts_json(&o.rt, PROFILE_RT));
    results_set_real(cfg, "max_kv_gb", o.max_kv_gb > 0 ? o.max_kv_gb : NAN);
    json_object_set_new(cfg, "t_offload",
                        json_string(o.analytic        ? "analytic"
                                    : o.offload_steps ? "offload-steps"
                                                      : "dense-approx"));
    json_object_set_new(cfg, "offload_context",
                        o.offload_steps ? json_integer(o.offload_ctx) : json_null());
    json_object_set_new(res, "measurement", json_object());
    struct ioaa_analytic_params ap = {
        .cfg = m, .budget_tokens = (int)o.budget, .backend = be->name, .recall_engine = o.engine};
    struct ioaa_profile_data d = {0};
    int code = recall_bytes(&o, m, cfg, &ap.recall_bytes) ? EXIT_USAGE : 0;
    if (!code) code = o.analytic ? analytic(be, &ap, &d, res) : measure(&o, m, be, &ap, &d, res);
    if (!code) {
        /* one date: the result's */
        snprintf(d.info.date, sizeof d.info.date, "%s",
                 json_string_value(json_object_get(res, "date")));
        json_t *pj = ioaa_profile_to_json(&d.prof, &d.info);
        json_object_update(res, pj);
        json_decref(pj);
        print_tables(&d, &o);
        code = check_profile(res, json_object_get(res, "measurement"));
        if (!code && o.out) code = write_profile(res, o.out);
    }
    ioaa_profile_data_free(&d);
    json_decref(res);
    return code;
}
