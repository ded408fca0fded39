/* pulse reproduce: every experiment of the paper's evaluation as a pulse sweep grid, run in this
 * process at one scale, one result per point under OUT/<experiment>/points/, and a summary per
 * experiment (OUT/<experiment>/<experiment>.json) that the figure scripts in plots/ read.
 * Resumable: points whose file is an ok result of the same command line are skipped (pulse
 * sweep's rule), and the summaries are rebuilt from the points.
 *
 * Experiments (the paper's figures in brackets):
 *   e2e        throughput [17], TPOT [18] and batch sizes [22] per system against input length,
 *              on an 80 GB card (45 GB of GPU KV)
 *   ratio      the same systems at the paper's 1 : 8 GPU : host memory ratio, 64K prompts
 *   long       the same systems at 128K prompts with 24 GB of GPU KV (one request's KV)
 *   util       GPU busy over time per system from CUPTI [20, 21] (separate runs: --cupti)
 *   ablation   pulseinfer's mechanisms added one at a time [23]
 *   admission  IOAA against fixed offload thresholds on a ServeGen-like and a Mooncake-like
 *              workload with bursty arrivals, and on a drifting one [24]
 *   capacity   throughput against the GPU KV budget [25]
 *   bandwidth  TPOT against the PCIe bandwidth, capped to fractions of the peak [26]
 *   recall     the recall engines' bandwidth against chunk size and count [8] (pulse
 *              recall-bench, not a sweep)
 * The accuracy table [table 1] comes from pulse accuracy (README).
 *
 * Scales: tiny (the CPU backend and the tiny model: seconds; what the tests run), quick (the
 * GPU, qwen3-14b, fewer points and tokens: minutes), full (the paper's points). */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "baselines/registry.h"
#include "cli.h"
#include "common.h"
#include "host_pool.h"
#include "results.h"
#include "runtime_opts.h"

#define CMD "reproduce"
#define MAX_POINTS 256

static const char usage[] =
    "usage: pulse reproduce [--tiny | --quick | --full | --large-host] [--only LIST]\n"
    "                       [--out-dir DIR] [--kv-budget-gb G] [--host-pool-gb G]\n"
    "                       [--repeat N] [--shard I/N] [--dry-run] [--list]\n"
    "  Runs the paper's experiments as sweeps (one result per point, resumable) and writes a\n"
    "  summary per experiment for plots/figures.py.\n"
    "  --tiny / --quick / --full  scale (default --quick): tiny is the cpu backend and the tiny\n"
    "                     model (seconds), quick the GPU at fewer points (minutes), full the\n"
    "                     paper's points\n"
    "  --large-host       the comparison for a host of 400 GB or more: e2e and util at full\n"
    "                     scale with the whole H200 as GPU KV (110 GB), a 400 GB host pool,\n"
    "                     16K x 128, 32K x 64, 64K x 32 and the Mooncake-like trace\n"
    "  --kv-budget-gb G   the GPU KV budget of the experiments run at the scale's one budget\n"
    "                     (e2e, util, ablation, admission, bandwidth; ratio, long and\n"
    "                     capacity keep theirs)\n"
    "  --host-pool-gb G   every offload point's host pool (default: sized to its run; the\n"
    "                     ratio and long experiments' 96 GB too)\n"
    "  --only LIST        experiments, comma separated (default all, --large-host e2e,util;\n"
    "                     see --list)\n"
    "  --out-dir DIR      default results (--large-host: results/large-host)\n"
    "  --repeat N         every point N times with seeds 1..N (weights, prompt KV, workload,\n"
    "                     arrivals), for the figures' ranges (default 1)\n"
    "  --dry-run          print every point's command line, run nothing\n"
    "  --shard I/N        only every N-th point of each experiment from the I-th (0 <= I < N),\n"
    "                     fig. 8 in shard 0: N machines or GPUs share one --out-dir (a Slurm\n"
    "                     array); each measures the IOAA profiles it lacks (written whole);\n"
    "                     run once more without --shard after them to rebuild every summary\n"
    "                     from all the points (every point done, nothing runs again)\n"
    "  Before the experiments that run pulseinfer, pulse profile measures IOAA's tables once\n"
    "  per recall engine pulseinfer runs with (DIR/profile/ioaa_ENGINE.json, kept: a rerun\n"
    "  reuses them), and every pulseinfer point reads its engine's (--profile).\n"
    "  --list             the experiments and the figures each gives\n"
    "  The runtime's options (pulse run --help: --zc-blocks N, --gs-threads N, --pin alloc, ...)\n"
    "  pass to every point, and those pulse profile and recall-bench take to theirs (each\n"
    "  point's config.options records them; a kept profile or recall result is not remade)\n";
static const char usage_exit[] = "exit: 0 every point ok, 1 a point failed, 2 bad usage\n";

enum scale { TINY, QUICK, FULL, LARGE_HOST, SCALES };
static const char *const scale_names[SCALES] = {"tiny", "quick", "full", "large-host"};

/* What differs between scales. */
struct scale_cfg {
    const char *backend, *model;
    int out_len;            /* output tokens per request */
    double kv_gb;           /* the 80 GB card's GPU KV */
    const char *lengths[5]; /* e2e workloads, NULL-ended */
    const char *mid;        /* the one workload of capacity, bandwidth, util */
    /* the ablation's: lengths spread around the threshold of its fixed admission, so that the
     * two batches, IRQ and IOAA each have both kinds of request to work on */
    const char *ablation_wl, *ablation_fixed;
    /* the 1 : 8 point's workload, its GPU KV and host pool (the 96 GB pool holds 9 of the
     * qwen3-14b 64K requests' sparse layers: 18 are two whole rounds, where 16 would end on a
     * round of 7) */
    const char *ratio_wl;
    double ratio_kv_gb, ratio_pool_gb;
    /* the long-prompt point: its workload, GPU KV, host pool and output tokens (the 24 GB GPU
     * KV holds one qwen3-14b 128K request; 96 GB of pool the sparse layers of four) */
    const char *long_wl;
    double long_kv_gb, long_pool_gb;
    int long_out_len;
    double capacity_gb[4]; /* 0-ended */
    /* admission: the ServeGen-like and Mooncake-like workloads, and their arrivals (NULL: a
     * trace's own, the sample traces of workloads/traces/, read from the repository root) */
    const char *sg_wl, *mc_wl, *sg_arrival, *mc_arrival;
    const char *drift_wl, *drift_arrival; /* the ServeGen shape drifting over the run */
    const char *fixed[4];                 /* admission thresholds, NULL-ended */
    const char *offload_args; /* extra flags of every offload variant ("--budget-tokens 64") */
    const char *profile_args; /* pulse profile's flags for the IOAA profiles */
    const char *recall_args;  /* pulse recall-bench's flags */
    double host_pool_gb;      /* > 0: every offload point's host pool (--host-pool-gb) */
    const char *experiments;  /* the experiments run unless --only says (NULL: all) */
    int util_all;             /* util measures every system of the comparison, not three */
};

static const struct scale_cfg scales[SCALES] = {
    [TINY] = {.backend = "cpu",
              .model = "tiny",
              .out_len = 4,
              .kv_gb = 0.25,
              .lengths = {"uniform:256:6", "uniform:512:4", NULL},
              .mid = "random:200:700:6",
              .ablation_wl = "random:200:700:6",
              .ablation_fixed = "fixed:450",
              .ratio_wl = "uniform:600:6",
              .ratio_kv_gb = 0.002,
              .ratio_pool_gb = 0.05,
              .long_wl = "uniform:1536:3",
              .long_kv_gb = 0.004,
              .long_pool_gb = 0.05,
              .long_out_len = 4,
              .capacity_gb = {0.002, 0.004, 0.25, 0},
              .sg_wl = "servegen:300:8",
              .mc_wl = "lognormal:300:1.074:8",
              .sg_arrival = "gamma:200:2",
              .mc_arrival = "poisson:200",
              .drift_wl = "drift:150:600:8",
              .drift_arrival = "gamma:200:2",
              .fixed = {"fixed:256", "fixed:512", NULL},
              .offload_args = "--budget-tokens 64",
              .profile_args = "--backend cpu --model tiny --budget-tokens 64",
              .recall_args =
                  "--backend cpu --quick --no-interference --sizes 8K --counts 64 --caps 0.8"},
    [QUICK] = {.backend = "cuda",
               .model = "qwen3-14b",
               .out_len = 32,
               .kv_gb = 45,
               .lengths = {"uniform:16384:32", "uniform:32768:24", NULL},
               .mid = "uniform:32768:24",
               .ablation_wl = "random:8192:57344:24",
               .ablation_fixed = "fixed:32768",
               .ratio_wl = "uniform:65536:18",
               .ratio_kv_gb = 12,
               .ratio_pool_gb = 96,
               .long_wl = "uniform:131072:8",
               .long_kv_gb = 24,
               .long_pool_gb = 96,
               .long_out_len = 16,
               .capacity_gb = {12, 24, 45, 0},
               .sg_wl = "trace:workloads/traces/servegen_32k_gamma.jsonl",
               .mc_wl = "trace:workloads/traces/mooncake_like_24k_poisson.jsonl",
               .drift_wl = "drift:8192:49152:24",
               .drift_arrival = "gamma:4:2",
               .fixed = {"fixed:16384", "fixed:32768", NULL},
               .profile_args = "--backend cuda --model qwen3-14b --batches 1,4,16 "
                               "--contexts 4096,16384,65536",
               .recall_args = "--quick"},
    [FULL] = {.backend = "cuda",
              .model = "qwen3-14b",
              .out_len = 128,
              .kv_gb = 45,
              .lengths = {"uniform:16384:32", "uniform:32768:24", "uniform:65536:12", NULL},
              .mid = "uniform:32768:24",
              .ablation_wl = "random:8192:57344:48",
              .ablation_fixed = "fixed:32768",
              .ratio_wl = "uniform:65536:18",
              .ratio_kv_gb = 12,
              .ratio_pool_gb = 96,
              .long_wl = "uniform:131072:8",
              .long_kv_gb = 24,
              .long_pool_gb = 96,
              .long_out_len = 64,
              .capacity_gb = {12, 24, 36, 45},
              .sg_wl = "trace:workloads/traces/servegen_32k_gamma.jsonl",
              .mc_wl = "trace:workloads/traces/mooncake_like_24k_poisson.jsonl",
              .drift_wl = "drift:8192:49152:48",
              .drift_arrival = "gamma:4:2",
              .fixed = {"fixed:16384", "fixed:32768", "fixed:65536", NULL},
              .profile_args = "--backend cuda --model qwen3-14b",
              .recall_args = ""},
};

/* The comparison on a host of 400 GB or more: the full scale with the whole H200 as GPU KV
 * (141 GB less the 29.5 GB of weights and the workspaces), a 400 GB host pool for every offload
 * point, as many requests of each length as fill about 330 GB of KV (160 KB a token) and the
 * Mooncake-like trace; throughput, TPOT and batch sizes (e2e) and GPU busy of every system
 * (util) unless --only says more. */
static struct scale_cfg large_host_scale(void)
{
    struct scale_cfg c = scales[FULL];
    const char *const lengths[] = {"uniform:16384:128", "uniform:32768:64", "uniform:65536:32",
                                   "trace:workloads/traces/mooncake_like_24k_poisson.jsonl", NULL};
    _Static_assert(sizeof lengths == sizeof c.lengths, "large_host_scale: the e2e lengths");
    memcpy(c.lengths, lengths, sizeof lengths);
    c.mid = "uniform:65536:32";
    c.kv_gb = c.capacity_gb[3] = 110;
    c.host_pool_gb = 400;
    c.experiments = "e2e,util";
    c.util_all = 1;
    return c;
}

struct experiment {
    const char *name, *figures, *what;
    json_t *(*grid)(const struct scale_cfg *s, const char *dir); /* NULL: recall-bench */
};

/* ------------------------------------------------------------------ grids */

/* The runtime's options given to reproduce (runtime_opts.h): passed on to every point, and to
 * the profile and recall-bench runs those of their groups. */
static struct {
    int code;
    const char *arg;
} g_rt[64];
static int g_n_rt;

/* " --NAME VALUE" of each option given of `groups` appended to buf (n bytes); -1 when they do
 * not fit. */
static int rt_append(char *buf, size_t n, int groups)
{
    for (int i = 0; i < g_n_rt; i++) {
        if (!(runtime_opts_group(g_rt[i].code) & groups)) continue;
        const size_t at = strlen(buf);
        if (snprintf(buf + at, n - at, " --%s %s", runtime_opts_name(g_rt[i].code), g_rt[i].arg) >=
            (int)(n - at))
            return -1;
    }
    return 0;
}

/* The IOAA profiles' folder (OUT/profile), set before the grids are made. */
static char g_profile_dir[4096];

/* The IOAA profile of recall engine eng (pulseinfer's default engine when NULL). */
static void profile_path(const char *eng, char *out, size_t n)
{
    snprintf(out, n, "%s/ioaa_%s.json", g_profile_dir,
             eng ? eng : policy_find("pulseinfer")->offload_engine);
}

/* A variant {"name": name, "--policy": policy, flags...}: extra is "--flag value ..." pairs
 * (a flag followed by another flag, or last, is a switch), offload policies also get the
 * scale's offload_args, pulseinfer the IOAA profile of its recall engine. */
static json_t *variant(const struct scale_cfg *s, const char *name, const char *policy,
                       const char *extra)
{
    json_t *v = json_pack("{s:s,s:s}", "name", name, "--policy", policy);
    char buf[512];
    snprintf(buf, sizeof buf, "%s %s",
             strcmp(policy, "vanilla") && s->offload_args ? s->offload_args : "",
             extra ? extra : "");
    char *save = NULL, *tok = strtok_r(buf, " ", &save), *next;
    while (tok) {
        next = strtok_r(NULL, " ", &save);
        if (next && strncmp(next, "--", 2)) {
            json_object_set_new(v, tok, json_string(next));
            tok = strtok_r(NULL, " ", &save);
        } else {
            json_object_set_new(v, tok, json_true());
            tok = next;
        }
    }
    if (s->host_pool_gb > 0 && strcmp(policy, "vanilla"))
        json_object_set_new(v, "--host-pool-gb", json_real(s->host_pool_gb));
    if (!strcmp(policy, "pulseinfer")) {
        char path[4200];
        profile_path(json_string_value(json_object_get(v, "--recall-engine")), path, sizeof path);
        json_object_set_new(v, "--profile", json_string(path));
    }
    return v;
}

/* Runs the pulse command line in buf (split at spaces, in place) with cmd, in this process;
 * returns cmd's exit code. */
static int run_in_process(char *buf, int (*cmd)(int, char **))
{
    char *av[64], *save = NULL;
    int ac = 0;
    for (char *t = strtok_r(buf, " ", &save); t && ac < 63; t = strtok_r(NULL, " ", &save))
        av[ac++] = t;
    av[ac] = NULL;
    optind = 1;
    return cmd(ac, av);
}

/* pulse profile into OUT/profile/ioaa_ENGINE.json for each engine pulseinfer runs with here
 * (its default and zero-copy), unless written. Returns how many failed. */
static int make_profiles(const struct scale_cfg *s, int dry)
{
    const char *const eng[] = {policy_find("pulseinfer")->offload_engine, "zero-copy"};
    int failed = 0;
    if (!dry && pulse_mkdirs(g_profile_dir) != PULSE_OK) {
        cli_error(CMD, "%s: cannot make it", g_profile_dir);
        return 1;
    }
    for (int i = 0; i < 2; i++) {
        char path[4200], buf[8704];
        profile_path(eng[i], path, sizeof path);
        if (snprintf(buf, sizeof buf, "profile %s --selection %s --recall-engine %s --out %s",
                     s->profile_args, policy_find("pulseinfer")->offload_selection, eng[i],
                     path) >= (int)sizeof buf ||
            rt_append(buf, sizeof buf, RT_RECALL | RT_PIN | RT_ENGINE | RT_OFFLOAD))
            return failed + 1;
        if (dry) {
            printf("pulse %s\n", buf);
            continue;
        }
        struct stat st;
        if (stat(path, &st) == 0) continue;
        fprintf(stderr, "pulse reproduce: IOAA profile: %s\n", path);
        if (run_in_process(buf, cmd_profile) != 0) {
            cli_error(CMD, "%s: pulse profile failed", path);
            failed++;
        }
    }
    return failed;
}

static json_t *base(const struct scale_cfg *s, double kv_gb)
{
    return json_pack("{s:s,s:s,s:i,s:f}", "--backend", s->backend, "--model", s->model,
                     "--output-len", s->out_len, "--kv-budget-gb", kv_gb);
}

static json_t *grid_of(const char *dir, json_t *b, json_t *variants, json_t *axes)
{
    json_t *g = json_pack("{s:s,s:o,s:o}", "out_dir", dir, "base", b, "variants", variants);
    if (axes) json_object_set_new(g, "axes", axes);
    return g;
}

/* The engine-matched tier (DESIGN section 11): each baseline's schedule with PulseInfer's
 * selection and each of its engines (the policies of that name). */
static const char *const engine_matched[] = {"arkvale+solohead+gs", "arkvale+solohead+zc",
                                             "infinigen+solohead+gs", "infinigen+solohead+zc"};

/* The systems of the paper's comparison in both tiers: vanilla; ArkVale and InfiniGen as their
 * code builds them (the published tier: `arkvale`, `infinigen`); the engine-matched tier; and
 * PulseInfer (its defaults: SoloHead, gather-scatter; and the zero-copy engine), each also with
 * speculation with exact correction (--speculate; zero-copy's corrections recalled in the
 * attention, --attend-recall's default), zero-copy's also with a margin (--spec-margin 0.25) and
 * predicting from the predicted lists (--spec-from hits, its corrections gathered). `extra`: flags
 * of every offload system (the ratio point's host pool), or NULL. */
static json_t *systems(const struct scale_cfg *s, const char *extra)
{
    char zc[160];
    snprintf(zc, sizeof zc, "--recall-engine zero-copy %s", extra ? extra : "");
    json_t *v = json_pack("[o,o,o]", variant(s, "vanilla", "vanilla", NULL),
                          variant(s, "arkvale", "arkvale", extra),
                          variant(s, "infinigen", "infinigen", extra));
    for (size_t i = 0; i < PULSE_ARRAY_LEN(engine_matched); i++)
        json_array_append_new(v, variant(s, engine_matched[i], engine_matched[i], extra));
    json_array_append_new(v, variant(s, "pulseinfer", "pulseinfer", extra));
    json_array_append_new(v, variant(s, "pulseinfer-zc", "pulseinfer", zc));
    char spec[192], spec_zc[192];
    snprintf(spec, sizeof spec, "--speculate %s", extra ? extra : "");
    snprintf(spec_zc, sizeof spec_zc, "--speculate %s", zc);
    json_array_append_new(v, variant(s, "pulseinfer-spec", "pulseinfer", spec));
    json_array_append_new(v, variant(s, "pulseinfer-spec-zc", "pulseinfer", spec_zc));
    /* and with a quarter more blocks prefetched by score (--spec-margin 0.25): fewer
     * corrections where the link has room (PulseInfer's fastest at the HBM-bound 1 : 8 point) */
    char margin[224];
    snprintf(margin, sizeof margin, "--spec-margin 0.25 %s", spec_zc);
    json_array_append_new(v, variant(s, "pulseinfer-spec-m25-zc", "pulseinfer", margin));
    /* and the prediction from a predicted layer's attention over its predicted lists (zero-copy
     * only): the speculation that leads the engine-matched InfiniGen at the link-bound point */
    char hits[224];
    snprintf(hits, sizeof hits, "--spec-from hits %s", spec_zc);
    json_array_append_new(v, variant(s, "pulseinfer-spec-hits-zc", "pulseinfer", hits));
    return v;
}

static json_t *lengths_axis(const struct scale_cfg *s)
{
    json_t *a = json_array();
    for (int i = 0; s->lengths[i]; i++)
        json_array_append_new(a, json_string(s->lengths[i]));
    return json_pack("{s:o}", "--workload", a);
}

static json_t *g_e2e(const struct scale_cfg *s, const char *dir)
{
    return grid_of(dir, base(s, s->kv_gb), systems(s, NULL), lengths_axis(s));
}

static json_t *g_ratio(const struct scale_cfg *s, const char *dir)
{
    char pool[64];
    snprintf(pool, sizeof pool, "--host-pool-gb %g", s->ratio_pool_gb);
    json_t *b = base(s, s->ratio_kv_gb);
    json_object_set_new(b, "--workload", json_string(s->ratio_wl));
    return grid_of(dir, b, systems(s, pool), NULL);
}

/* The same systems at 128K prompts: fewer, longer requests than the 1 : 8 point, each one
 * filling the GPU KV budget alone. */
static json_t *g_long(const struct scale_cfg *s, const char *dir)
{
    char pool[64];
    snprintf(pool, sizeof pool, "--host-pool-gb %g", s->long_pool_gb);
    json_t *b = base(s, s->long_kv_gb);
    json_object_set_new(b, "--workload", json_string(s->long_wl));
    json_object_set_new(b, "--output-len", json_integer(s->long_out_len));
    return grid_of(dir, b, systems(s, pool), NULL);
}

static json_t *g_util(const struct scale_cfg *s, const char *dir)
{
    json_t *b = base(s, s->kv_gb);
    json_object_set_new(b, "--workload", json_string(s->mid));
    if (strcmp(s->backend, "cpu")) json_object_set_new(b, "--cupti", json_true());
    if (s->util_all) return grid_of(dir, b, systems(s, NULL), NULL);
    json_t *v = json_pack("[o,o,o,o]", variant(s, "vanilla", "vanilla", NULL),
                          variant(s, "infinigen", "infinigen", NULL),
                          variant(s, "infinigen+solohead+zc", "infinigen+solohead+zc", NULL),
                          variant(s, "pulseinfer-zc", "pulseinfer", "--recall-engine zero-copy"));
    return grid_of(dir, b, v, NULL);
}

/* Mechanisms added one at a time from vanilla and ArkVale as published: SoloHead's lists (with
 * its 16-token blocks and a cache the size of the selection, still one copy per block), the
 * gather-scatter engine (= arkvale+solohead+gs), two batches (fixed admission, the offload
 * batch's layers uninterrupted), IRQ, IOAA, speculation with exact correction,
 * self-interleaving, and both; beside them
 * InfiniGen as published, the rest of the engine-matched tier and PulseInfer with zero-copy, so the
 * scheduler's share is read off against the same selection and engine. */
static json_t *g_ablation(const struct scale_cfg *s, const char *dir)
{
    json_t *b = base(s, s->kv_gb);
    json_object_set_new(b, "--workload", json_string(s->ablation_wl));
    char fixed[160], irq[160];
    snprintf(fixed, sizeof fixed, "--no-irq --admission %s", s->ablation_fixed);
    snprintf(irq, sizeof irq, "--admission %s", s->ablation_fixed);
    json_t *v =
        json_pack("[o,o,o,o,o,o,o,o]", variant(s, "0-vanilla", "vanilla", NULL),
                  variant(s, "1-arkvale", "arkvale", NULL),
                  variant(s, "2+solohead", "arkvale+solohead+gs", "--recall-engine per-block"),
                  variant(s, "3+gather-scatter", "arkvale+solohead+gs", NULL),
                  variant(s, "4+two-batches", "pulseinfer", fixed),
                  variant(s, "5+irq", "pulseinfer", irq), variant(s, "6+ioaa", "pulseinfer", NULL),
                  variant(s, "6+ioaa-zc", "pulseinfer", "--recall-engine zero-copy"));
    /* beyond the paper: speculation with exact correction (the exact tokens; speculation
     * without correction is InfiniGen's schedule, the infinigen+solohead rows) */
    json_array_append_new(v, variant(s, "7+speculation", "pulseinfer", "--speculate"));
    json_array_append_new(
        v, variant(s, "7+speculation-zc", "pulseinfer", "--speculate --recall-engine zero-copy"));
    /* the prediction made later, nearer the exact query: from mid-layer (its recall beside the
     * MLP), and from a predicted layer's attention over its predicted lists (beside the whole
     * next layer; the device path) */
    json_array_append_new(v, variant(s, "7+speculation-mid-zc", "pulseinfer",
                                     "--speculate --spec-from mid --recall-engine zero-copy"));
    json_array_append_new(v, variant(s, "7+speculation-hits-zc", "pulseinfer",
                                     "--speculate --spec-from hits --recall-engine zero-copy"));
    /* beside speculation, on 6+ioaa: self-interleaving (with no normal batch the offload
     * batch's two halves interleave their layers; the exact tokens), then both (each half
     * predicts its own next layer) */
    json_array_append_new(v,
                          variant(s, "7+self-interleaving", "pulseinfer", "--self-interleave on"));
    json_array_append_new(v, variant(s, "7+self-interleaving-zc", "pulseinfer",
                                     "--self-interleave on --recall-engine zero-copy"));
    json_array_append_new(v, variant(s, "8+speculation+self-interleaving", "pulseinfer",
                                     "--speculate --self-interleave on"));
    json_array_append_new(v, variant(s, "8+speculation+self-interleaving-zc", "pulseinfer",
                                     "--speculate --self-interleave on --recall-engine zero-copy"));
    json_array_append_new(v, variant(s, "infinigen", "infinigen", NULL));
    for (size_t i = 1; i < PULSE_ARRAY_LEN(engine_matched); i++)
        json_array_append_new(v, variant(s, engine_matched[i], engine_matched[i], NULL));
    return grid_of(dir, b, v, NULL);
}

static json_t *g_admission(const struct scale_cfg *s, const char *dir)
{
    json_t *b = base(s, s->kv_gb);
    char sg[256], mc[256];
    snprintf(sg, sizeof sg, "--workload %s%s%s", s->sg_wl, s->sg_arrival ? " --arrival " : "",
             s->sg_arrival ? s->sg_arrival : "");
    snprintf(mc, sizeof mc, "--workload %s%s%s", s->mc_wl, s->mc_arrival ? " --arrival " : "",
             s->mc_arrival ? s->mc_arrival : "");
    char dr[256];
    snprintf(dr, sizeof dr, "--workload %s --arrival %s", s->drift_wl, s->drift_arrival);
    json_t *v =
        json_pack("[o,o,o]", variant(s, "servegen", "pulseinfer", sg),
                  variant(s, "mooncake", "pulseinfer", mc), variant(s, "drift", "pulseinfer", dr));
    json_t *adm = json_pack("[s]", "ioaa");
    for (int i = 0; s->fixed[i]; i++)
        json_array_append_new(adm, json_string(s->fixed[i]));
    return grid_of(dir, b, v, json_pack("{s:o}", "--admission", adm));
}

static json_t *g_capacity(const struct scale_cfg *s, const char *dir)
{
    json_t *b = json_pack("{s:s,s:s,s:i,s:s}", "--backend", s->backend, "--model", s->model,
                          "--output-len", s->out_len, "--workload", s->mid);
    json_t *gb = json_array();
    for (int i = 0; i < 4 && s->capacity_gb[i] > 0; i++)
        json_array_append_new(gb, json_real(s->capacity_gb[i]));
    json_t *v = json_pack("[o,o]", variant(s, "vanilla", "vanilla", NULL),
                          variant(s, "pulseinfer-zc", "pulseinfer", "--recall-engine zero-copy"));
    return grid_of(dir, b, v, json_pack("{s:o}", "--kv-budget-gb", gb));
}

static json_t *g_bandwidth(const struct scale_cfg *s, const char *dir)
{
    json_t *b = base(s, s->kv_gb);
    json_object_set_new(b, "--workload", json_string(s->mid));
    /* InfiniGen as published (gather, re-fetch), and its engine-matched tier: a zero-copy
     * capped runs host-planned, its gathers paced by the engine */
    json_t *v = json_pack("[o,o,o,o,o]", variant(s, "pulseinfer", "pulseinfer", NULL),
                          variant(s, "pulseinfer-zc", "pulseinfer", "--recall-engine zero-copy"),
                          variant(s, "infinigen", "infinigen", NULL),
                          variant(s, "infinigen+solohead+gs", "infinigen+solohead+gs", NULL),
                          variant(s, "infinigen+solohead+zc", "infinigen+solohead+zc", NULL));
    return grid_of(dir, b, v,
                   json_pack("{s:[f,f,f,f]}", "--recall-cap-fraction", 0.4, 0.6, 0.8, 1.0));
}

static const struct experiment experiments[] = {
    {"e2e", "17,18,22", "throughput, TPOT and batch sizes against input length", g_e2e},
    {"ratio", "17", "the systems at the 1 : 8 GPU : host memory ratio", g_ratio},
    {"long", "17", "the systems at 128K prompts, one request's KV on the GPU", g_long},
    {"util", "20,21", "GPU busy over time (CUPTI)", g_util},
    {"ablation", "23", "mechanisms added one at a time", g_ablation},
    {"admission", "24", "IOAA against fixed thresholds on two workloads", g_admission},
    {"capacity", "25", "throughput against the GPU KV budget", g_capacity},
    {"bandwidth", "26", "TPOT against the PCIe bandwidth (recall cap)", g_bandwidth},
    {"recall", "8", "recall engines: bandwidth against chunk size and count", NULL},
};
#define N_EXP (sizeof experiments / sizeof experiments[0])

/* ------------------------------------------------------------------ summaries */

/* A point's result without what the figures do not read (the per-request list and the
 * per-step series). */
static json_t *point_entry(const char *name, const char *path)
{
    json_error_t je;
    json_t *r = json_load_file(path, 0, &je);
    json_t *e = json_pack("{s:s,s:s}", "name", name, "file", path);
    if (!r) {
        json_object_set_new(e, "status", json_string("missing"));
        return e;
    }
    json_object_del(r, "requests");
    json_t *st = json_object_get(json_object_get(r, "metrics"), "step");
    if (st) json_object_del(st, "per_step");
    json_object_set_new(e, "status", json_incref(json_object_get(r, "status")));
    json_object_set_new(e, "result", r);
    return e;
}

/* Adds point result r's provenance to the summary's: its commit (7 hex digits, "-dirty" when
 * built from changed sources) to `commits` once, its date to the range [first, last]. A run
 * resumed from points written by another build shows there as several commits. */
static void note_provenance(json_t *r, json_t *commits, json_t *dates)
{
    json_t *tool = json_object_get(r, "tool");
    const char *c = json_string_value(json_object_get(tool, "git_commit"));
    const char *d = json_string_value(json_object_get(r, "date"));
    if (c) {
        char shortc[32];
        snprintf(shortc, sizeof shortc, "%.7s%s", c,
                 json_is_true(json_object_get(tool, "git_dirty")) ? "-dirty" : "");
        size_t i;
        json_t *have;
        int seen = 0;
        json_array_foreach(commits, i, have) seen |= !strcmp(json_string_value(have), shortc);
        if (!seen) json_array_append_new(commits, json_string(shortc));
    }
    if (d) {
        const char *first = json_string_value(json_array_get(dates, 0));
        const char *last = json_string_value(json_array_get(dates, 1));
        if (!first || strcmp(d, first) < 0) json_array_set_new(dates, 0, json_string(d));
        if (!last || strcmp(d, last) > 0) json_array_set_new(dates, 1, json_string(d));
    }
}

/* The variant of point `name` (its name's first part up to ','). */
static void variant_of(const char *name, char *out, size_t n)
{
    const char *c = strchr(name, ',');
    snprintf(out, n, "%.*s", c ? (int)(c - name) : (int)strlen(name), name);
}

static int write_summary(const struct experiment *x, enum scale sc, long repeat, json_t *g,
                         const char *dir, const char *exp_dir)
{
    static char names[MAX_POINTS][160];
    const int n = sweep_point_names(g, x->name, names, MAX_POINTS);
    if (n < 0) return -1;
    json_t *res = results_new("reproduce");
    results_env(res);
    json_t *pts = json_array(), *commits = json_array();
    json_t *dates = json_pack("[n,n]");
    for (int i = 0; i < n; i++) {
        char path[4096], var[64];
        if (snprintf(path, sizeof path, "%s/%s.json", dir, names[i]) >= (int)sizeof path) {
            json_decref(res);
            json_decref(pts);
            json_decref(commits);
            json_decref(dates);
            return -1;
        }
        json_t *e = point_entry(names[i], path);
        json_t *r = json_object_get(e, "result");
        if (r) note_provenance(r, commits, dates);
        variant_of(names[i], var, sizeof var);
        json_object_set_new(e, "variant", json_string(var));
        json_array_append_new(pts, e);
    }
    json_object_set_new(res, "name", json_string(x->name));
    json_object_set_new(res, "figures", json_string(x->figures));
    json_object_set_new(res, "what", json_string(x->what));
    json_object_set_new(res, "scale", json_string(scale_names[sc]));
    json_object_set_new(res, "repeat", json_integer(repeat)); /* runs of each point (seeds) */
    json_object_set_new(res, "grid", json_incref(g));
    json_object_set_new(res, "points", pts);
    /* the builds and dates of the points (a resumed run may join several) */
    json_object_set_new(res, "point_commits", commits);
    json_object_set_new(res, "point_dates", dates);
    json_object_set_new(res, "status", json_string("ok"));
    char path[4096], err[256];
    int rc = PULSE_ERR_INVALID;
    if (snprintf(path, sizeof path, "%s/%s.json", exp_dir, x->name) < (int)sizeof path)
        rc = results_write(res, path, err, sizeof err);
    else
        snprintf(err, sizeof err, "%.200s...: too long a path", exp_dir);
    if (rc != PULSE_OK) cli_error(CMD, "%s", err);
    json_decref(res);
    return rc == PULSE_OK ? 0 : -1;
}

/* recall: pulse recall-bench into DIR/recall/recall.json, unless written. */
static int run_recall(const struct scale_cfg *s, const char *exp_dir, int dry)
{
    char path[4096], buf[4608];
    if (snprintf(path, sizeof path, "%s/recall.json", exp_dir) >= (int)sizeof path ||
        snprintf(buf, sizeof buf, "recall-bench %s --out %s", s->recall_args, path) >=
            (int)sizeof buf ||
        rt_append(buf, sizeof buf, RT_RECALL | RT_PIN))
        return 1;
    if (dry) return printf("pulse %s\n", buf), 0;
    struct stat st;
    if (stat(path, &st) == 0) return 0;
    fprintf(stderr, "pulse reproduce: recall: %s\n", path);
    return run_in_process(buf, cmd_recall_bench) ? 1 : 0;
}

/* ------------------------------------------------------------------ the command */

static int pick(const char *list, int *on)
{
    char buf[256];
    if (strlen(list) >= sizeof buf) return cli_error(CMD, "--only: too long a list"), -1;
    strcpy(buf, list);
    memset(on, 0, sizeof(int) * N_EXP);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        size_t k = 0;
        while (k < N_EXP && strcmp(experiments[k].name, t))
            k++;
        if (k == N_EXP) {
            cli_error(CMD, "--only: unknown experiment '%s' (see --list)", t);
            return -1;
        }
        on[k] = 1;
    }
    return 0;
}

int cmd_reproduce(int argc, char **argv)
{
    static const struct option own[] = {{"tiny", no_argument, 0, 't'},
                                        {"quick", no_argument, 0, 'q'},
                                        {"full", no_argument, 0, 'f'},
                                        {"only", required_argument, 0, 'o'},
                                        {"out-dir", required_argument, 0, 'd'},
                                        {"repeat", required_argument, 0, 'r'},
                                        {"dry-run", no_argument, 0, 'n'},
                                        {"list", no_argument, 0, 'l'},
                                        {"large-host", no_argument, 0, 'L'},
                                        {"kv-budget-gb", required_argument, 0, 'g'},
                                        {"host-pool-gb", required_argument, 0, 'p'},
                                        {"shard", required_argument, 0, 's'},
                                        {"help", no_argument, 0, 'h'},
                                        {0, 0, 0, 0}};
    int sc = -1, dry = 0, list = 0, on[N_EXP], c, only = 0, out_given = 0;
    long repeat = 1;
    double kv_gb = 0, pool_gb = 0;
    struct sweep_shard shard = {0, 1};
    for (size_t k = 0; k < N_EXP; k++)
        on[k] = 1;
    const char *out = "results";
    struct option opts[64];
    PULSE_CHECK(runtime_opts_getopt(own, RT_ALL, opts, 64) == 0, CMD ": the options' table");
    struct runtime_opts rt; /* the options' checks (pulse run takes them all) */
    runtime_opts_init(&rt);
    g_n_rt = 0;
    opterr = 0;
    optind = 1;
    struct cli_seen seen = {0};
    while ((c = cli_getopt(CMD, argc, argv, opts, &seen)) != -1) {
        if (runtime_opts_code(c)) {
            if (runtime_opts_flag(CMD, &rt, c, optarg)) return EXIT_USAGE;
            g_rt[g_n_rt].code = c, g_rt[g_n_rt++].arg = optarg;
            continue;
        }
        switch (c) {
        case 't':
        case 'q':
        case 'f':
        case 'L':
            if (sc >= 0)
                return cli_error(CMD, "give one of --tiny, --quick, --full, --large-host"),
                       EXIT_USAGE;
            sc = c == 't' ? TINY : c == 'q' ? QUICK : c == 'f' ? FULL : LARGE_HOST;
            break;
        case 'o':
            if (pick(optarg, on)) return EXIT_USAGE;
            only = 1;
            break;
        case 'g':
            if (cli_double(CMD, "--kv-budget-gb", optarg, 1e-3, 1e4, &kv_gb)) return EXIT_USAGE;
            break;
        case 'p':
            if (cli_double(CMD, "--host-pool-gb", optarg, 1e-3, 1e5, &pool_gb)) return EXIT_USAGE;
            break;
        case 'd':
            out = optarg;
            out_given = 1;
            break;
        case 'r':
            if (cli_int(CMD, "--repeat", optarg, 1, 20, &repeat)) return EXIT_USAGE;
            break;
        case 'n':
            dry = 1;
            break;
        case 's':
            if (cli_shard(CMD, optarg, &shard)) return EXIT_USAGE;
            break;
        case 'l':
            list = 1;
            break;
        case 'h':
            fputs(usage, stdout);
            runtime_opts_usage(stdout, RT_ALL, &rt);
            return fputs(usage_exit, stdout), 0;
        default:
            return cli_unknown_flag(CMD, argc, argv), EXIT_USAGE;
        }
    }
    if (cli_no_extra_args(CMD, argc, argv)) return EXIT_USAGE;
    if (list) {
        for (size_t k = 0; k < N_EXP; k++)
            printf("%-10s fig. %-9s %s\n", experiments[k].name, experiments[k].figures,
                   experiments[k].what);
        return 0;
    }
    if (sc < 0) sc = QUICK;
    /* the scale, with the GPU KV budget and host pool the flags give */
    struct scale_cfg cfg = sc == LARGE_HOST ? large_host_scale() : scales[sc]; /* (full-based) */
    if (kv_gb > 0) cfg.kv_gb = kv_gb;
    if (pool_gb > 0) cfg.host_pool_gb = pool_gb;
    const struct scale_cfg *s = &cfg;
    if (!only && s->experiments && pick(s->experiments, on)) return EXIT_USAGE;
    /* (its util points are named as the other scales' are: a folder of its own) */
    if (sc == LARGE_HOST && !out_given) out = "results/large-host";
    const char *traces[] = {s->sg_wl, s->mc_wl};
    for (int i = 0; i < 2; i++) { /* the sample traces are read from the repository root */
        struct stat st;
        if (!strncmp(traces[i], "trace:", 6) && stat(traces[i] + 6, &st) != 0)
            return cli_error(CMD, "%s: not found: run pulse reproduce from the repository root",
                             traces[i] + 6),
                   EXIT_USAGE;
    }
    int failed = 0;
    if (!*out) return cli_error(CMD, "--out-dir: an empty path"), EXIT_USAGE;
    if (snprintf(g_profile_dir, sizeof g_profile_dir, "%s/profile", out) >=
        (int)sizeof g_profile_dir)
        return cli_error(CMD, "--out-dir: too long a path"), EXIT_USAGE;
    int pulseinfer_runs = 0; /* every experiment but recall runs pulseinfer */
    for (size_t k = 0; k < N_EXP; k++)
        pulseinfer_runs |= on[k] && experiments[k].grid != NULL;
    if (pulseinfer_runs && make_profiles(s, dry)) {
        cli_error(CMD, "no IOAA profile: the pulseinfer points would have none");
        return 1;
    }
    host_pool_keep(1); /* one pinned host pool, reused by every point that fits in it */
    for (size_t k = 0; k < N_EXP; k++) {
        if (!on[k]) continue;
        const struct experiment *x = &experiments[k];
        char exp_dir[4096], dir[4096];
        if (snprintf(exp_dir, sizeof exp_dir, "%s/%s", out, x->name) >= (int)sizeof exp_dir ||
            snprintf(dir, sizeof dir, "%s/points", exp_dir) >= (int)sizeof dir) {
            cli_error(CMD, "--out-dir: too long a path");
            host_pool_keep(0);
            return EXIT_USAGE;
        }
        if (!dry && pulse_mkdirs(exp_dir) != PULSE_OK) {
            cli_error(CMD, "%s: cannot make it", exp_dir);
            host_pool_keep(0);
            return EXIT_USAGE;
        }
        if (!dry)
            fprintf(stderr, "pulse reproduce: %s (fig. %s), %s scale\n", x->name, x->figures,
                    scale_names[sc]);
        const double t_exp = pulse_now();
        if (!x->grid) {
            if (shard.index != 0) continue; /* recall-bench is one run: shard 0's */
            failed += run_recall(s, exp_dir, dry);
            if (!dry)
                fprintf(stderr, "pulse reproduce: %s: %.1f s\n", x->name, pulse_now() - t_exp);
            continue;
        }
        json_t *g = x->grid(s, dir);
        for (int i = 0; i < g_n_rt; i++) { /* pulse run takes every runtime option */
            char flag[64];
            snprintf(flag, sizeof flag, "--%s", runtime_opts_name(g_rt[i].code));
            json_object_set_new(json_object_get(g, "base"), flag, json_string(g_rt[i].arg));
        }
        if (repeat > 1) { /* a seed axis: the last, so a point's repetitions sit together */
            json_t *axes = json_object_get(g, "axes"), *seeds = json_array();
            for (long k = 1; k <= repeat; k++)
                json_array_append_new(seeds, json_integer(k));
            if (!axes) json_object_set_new(g, "axes", axes = json_object());
            json_object_set_new(axes, "--seed", seeds);
        }
        const int rc = sweep_run(g, x->name, dry, shard);
        if (rc == EXIT_USAGE) {
            json_decref(g);
            host_pool_keep(0);
            return EXIT_USAGE;
        }
        failed += rc != 0;
        if (!dry && write_summary(x, (enum scale)sc, repeat, g, dir, exp_dir)) failed++;
        if (!dry) fprintf(stderr, "pulse reproduce: %s: %.1f s\n", x->name, pulse_now() - t_exp);
        json_decref(g);
    }
    host_pool_keep(0);
    if (!dry)
        fprintf(stderr, "pulse reproduce: done%s; plots/figures.py %s draws the figures\n",
                failed ? " (some points failed: see their status)" : "", out);
    return failed ? 1 : 0;
}
