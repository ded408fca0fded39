/* pulse accuracy: the accuracy of every selection policy on a real model (the paper's table 1).
 *
 * Data: LongBench files (--longbench DIR: DIR/<task>.jsonl, prompts truncated in the middle to
 * --max-length tokens as LongBench's pred.py does) or this suite's synthetic files (--data DIR:
 * DIR/<task>_<length>.jsonl as pulse synth writes them, one set per --lengths value).
 * Per sample: the task's prompt template, the model's tokenizer, a dense chunked prefill, then
 * greedy decoding once with full attention and once per (policy, budget) with the sparse
 * attention of accuracy/sparse_attn.h on the global layers (the prompt KV is reused: every run
 * decodes from the same prefilled cache). Scores are LongBench's metrics (accuracy/metrics.h).
 *
 * SoloHead's selectors come from the MAM profile (accuracy/head_mass.h) measured with full
 * attention on calibration samples: samples [--samples, --samples + --calib-samples) of each
 * task at the first length, disjoint from the evaluated ones. The per-task MAM tables are in
 * the result, side by side. SoloHead's selections at --mam-budget feed a churn meter
 * (workloads/locality.h); --churn-profile writes the measured locality profile that throughput
 * runs read. */
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accuracy/chat.h"
#include "accuracy/head_mass.h"
#include "accuracy/longbench.h"
#include "accuracy/metrics.h"
#include "accuracy/serve_batch.h"
#include "accuracy/serve_path.h"
#include "accuracy/sparse_attn.h"
#include "accuracy/stats.h"
#include "baselines/registry.h"
#include "cli.h"
#include "common.h"
#include "mem.h"
#include "results.h"
#include "select.h"
#include "session.h"
#include "workloads/locality.h"

#define CMD "accuracy"
#define MAX_LIST 16
#define MAX_RUNS (1 + MAX_LIST * MAX_LIST)
#define MAX_CACHES 4
#define ACC_STATS_SEED 0x5eedu /* the paired bootstrap's: the same table, the same intervals */

static const char usage[] =
    "usage: pulse accuracy --model FILE.gguf|DIR|NAME (--data DIR --lengths N,... |\n"
    "                      --longbench DIR [--max-length N]) --tasks T,... [options]\n"
    "  Scores full attention and sparse selection policies on LongBench-format tasks.\n"
    "  --data DIR          synthetic files DIR/<task>_<length>.jsonl (pulse synth)\n"
    "  --lengths N,...     lengths of the synthetic sets (with --data)\n"
    "  --longbench DIR     LongBench files DIR/<task>.jsonl\n"
    "  --max-length N      LongBench prompt limit in tokens (default 16384)\n"
    "  --tasks T,...       task names (accuracy/longbench.c)\n"
    "  --samples N         evaluated samples per task and length (default 10)\n"
    "  --calib-samples N   MAM calibration samples per task, after the evaluated ones at the\n"
    "                      first length (default 2)\n"
    "  --policies P,...    of full, headwise, queryhead, solohead, solohead-q, reversed,\n"
    "                      reversed-q, infinigen, mean, infinigen-solohead\n"
    "                      (accuracy/sparse_attn.h; default all of them but those identical\n"
    "                      to another on the model: with one KV head solohead, reversed and\n"
    "                      mean are headwise and infinigen-solohead is infinigen; with one\n"
    "                      query head per KV head the -q policies and queryhead are their\n"
    "                      KV-head twins)\n"
    "  --budgets N,...     token budgets of the sparse policies (default 512,1024,2048)\n"
    "  --mam-budget N      budget of the MAM profile and the churn meter (default 2048)\n"
    "  --cache-slots N,... up to 4 LRU hot caches (blocks a list) the churn meter's lists also\n"
    "                      pass: JSON cache.rows, their steady recall against none\n"
    "  --meter-steps N     the churn meter's run decodes at least N steps a sample: once its\n"
    "                      answer ends it goes on decoding (end of text and line ends fed\n"
    "                      back, the tokens discarded) so the meter and --cache-slots see\n"
    "                      N steps; scores read the answer only (the session then holds N\n"
    "                      new tokens where the tasks' are fewer; default: the answer's)\n"
    "  --sink N, --window N  forced blocks (default 1 and 2; blocks of 16 tokens)\n"
    "  --infinigen-frac F  hidden channels of the approximate query (default 1 = all)\n"
    "  --spec-margin F     F in [0, 1]: the infinigen runs' speculation hit rate counts the\n"
    "                      exact query's blocks in the approximate query's list made again\n"
    "                      with ceil((1 + F) * k) blocks chosen by score instead of the\n"
    "                      budget's k (pulse run --spec-margin's prediction); the attention\n"
    "                      and its lists do not change (default 0: the attended lists)\n"
    "  --spec-from P       input (default), mid or hits: where the infinigen runs make layer\n"
    "                      l+1's approximate query: from layer l's input (InfiniGen's), from\n"
    "                      its residual once its attention output is added, before its MLP;\n"
    "                      or hits, PulseInfer's speculation with exact correction (pulse run\n"
    "                      --spec-from hits): the runs attend over the exact lists (the\n"
    "                      exact policy's tokens) and a predicted layer l's input plus an\n"
    "                      attention over its predicted lists gives l+1's query (else\n"
    "                      mid-layer)\n"
    "  --max-gen N         cap on new tokens (default: the task's)\n"
    "  --prefill-chunk N   prompt tokens per prefill pass (default 256)\n"
    "  --backend B         cpu, cuda or auto (default)\n"
    "  --chat-template T   auto (default: the model's, gemma or chatml, from its tokenizer's\n"
    "                      control pieces), none, gemma or chatml; applied to the chat tasks\n"
    "                      (LongBench's pred.py: not trec, triviaqa, samsum, lsht, lcc,\n"
    "                      repobench-p)\n"
    "  --check-serving     also decode every sample of the headwise, solohead, reversed, mean,\n"
    "                      infinigen and infinigen-solohead (with --infinigen-frac 1 and\n"
    "                      --spec-from input) runs\n"
    "                      through the serving path (the offload runtime with a real prefill\n"
    "                      into the host pool and the real query; accuracy/serve_path.h) and\n"
    "                      count the samples whose tokens equal the accuracy path's (a\n"
    "                      sliding-window model's local layers keep their window on the\n"
    "                      GPU, its global layers are offloaded)\n"
    "  --serve-policies P,...  arkvale, pulseinfer, pulseinfer-spec (pulseinfer --speculate):\n"
    "                      after the evaluation, serve the scored samples together through\n"
    "                      pulse run's serving loop with each policy, at every budget of its\n"
    "                      selection's runs (arkvale: mean, pulseinfer and pulseinfer-spec:\n"
    "                      solohead; a real prefill into the host pool, the real\n"
    "                      query); its score per set and the samples whose tokens equal the\n"
    "                      accuracy path's (pulseinfer's normal batch: full attention's) are in\n"
    "                      \"served\" and printed\n"
    "  --serve-batch N     entries per running batch of those runs (default 4)\n"
    "  --serve-normal N    whole requests their GPU KV budget holds beside the offloaded\n"
    "                      ones, for pulseinfer's normal batch (default 1)\n"
    "  --serve-admission A pulseinfer's admission: ioaa (default, the analytic profile from\n"
    "                      the bandwidths measured in the process) or fixed:LEN\n"
    "  --out FILE.json     the result; --churn-profile FILE.json the measured churn profile\n"
    "  --time-limit S      start no sample after S seconds of evaluation; the result then\n"
    "                      covers the samples scored, status \"partial\" (SIGINT or SIGTERM\n"
    "                      stop the same way after the sample in progress, status\n"
    "                      \"interrupted\", exit 1). Samples are taken task by task in turn\n"
    "                      (sample 0 of every set, then sample 1, ...), so a stopped run\n"
    "                      stays balanced over its sets\n"
    "exit: 0 ok, 1 run failed, 2 bad usage, 3 out of memory\n";

struct acc_opts {
    const char *model, *backend, *data, *longbench, *out, *churn_out;
    int chat; /* enum chat_template, -1: auto (resolved at the session's start) */
    const char *tasks[MAX_LIST];
    int n_tasks;
    long lengths[MAX_LIST], budgets[MAX_LIST];
    int n_lengths, n_budgets;
    long cache_slots[MAX_CACHES]; /* --cache-slots: hot caches the churn meter's lists pass */
    int n_caches;
    int policies[MAX_LIST], n_policies;
    long samples, calib, max_length, max_gen, chunk, mam_budget, sink, window;
    long meter_steps; /* --meter-steps: 0 = the answer's */
    int max_length_set, check_serving;
    double frac, time_limit;            /* time_limit 0: none */
    double spec_margin;                 /* --spec-margin (sparse_params.spec_margin) */
    int spec_margin_set;
    int spec_from, spec_from_set;       /* --spec-from (sparse_params.spec_from) */
    const struct policy *serve_pols[3]; /* --serve-policies */
    int serve_spec[3];                  /* ... pulseinfer-spec: pulseinfer --speculate */
    int n_serve_pols;
    long serve_batch, serve_normal;
    const char *serve_admission; /* NULL: IOAA */
    const char *serve_flag;      /* the first --serve-* flag but --serve-policies given */
    const char *pulseinfer_flag; /* the first of --serve-normal, --serve-admission given */
    struct runtime_opts rt;      /* the engine's tuning (runtime_opts.h: RT_ENGINE) */
};

static int any_item(const char *item, int i, void *ctx)
{
    (void)item, (void)i, (void)ctx;
    return 0;
}

/* Splits a comma list into at most MAX_LIST items of buf (modified in place): the strict form
 * of every list flag (cli_list: no empty element, "1,,2", "1,2,", ",1"), each item once. */
static int split(const char *flag, char *buf, const char **items)
{
    int n;
    if (cli_list(CMD, flag, buf, MAX_LIST, &n, any_item, NULL)) return -1;
    char *tok = buf;
    for (int i = 0; i < n; i++) {
        char *comma = strchr(tok, ',');
        if (comma) *comma = 0;
        items[i] = tok;
        for (int k = 0; k < i; k++)
            if (!strcmp(items[k], tok)) {
                cli_error(CMD, "%s: '%s' is listed twice", flag, tok);
                return -1;
            }
        if (comma) tok = comma + 1;
    }
    return n;
}

static int int_list(const char *flag, const char *arg, long lo, long hi, long *out)
{
    char buf[1024];
    const char *items[MAX_LIST];
    snprintf(buf, sizeof buf, "%s", arg);
    int n = split(flag, buf, items);
    for (int i = 0; i < n; i++)
        if (cli_int(CMD, flag, items[i], lo, hi, &out[i])) return -1;
    return n;
}

static char g_tasks_buf[1024];

/* Whether the run of policy at budget is the churn meter's: SoloHead's lists at --mam-budget
 * (plan_runs gives the meter the first such run). */
static int meters(const struct acc_opts *o, int policy, long budget)
{
    return (policy == SPARSE_SOLOHEAD || policy == SPARSE_SOLOHEAD_Q) && budget == o->mam_budget;
}

/* The usage error of a flag that reads the churn meter's lists (--churn-profile, --meter-steps)
 * when no run is the meter's; -1 (0 when none of them is given). */
static int meter_missing(const struct acc_opts *o)
{
    if (!o->churn_out && !o->meter_steps) return 0;
    return cli_error(CMD,
                     "%s: needs solohead or solohead-q among the policies and --mam-budget %ld "
                     "among the budgets",
                     o->churn_out ? "--churn-profile" : "--meter-steps", o->mam_budget),
           -1;
}

static int parse(int argc, char **argv, struct acc_opts *o)
{
    static const struct option own[] = {{"model", required_argument, 0, 'm'},
                                        {"backend", required_argument, 0, 'b'},
                                        {"data", required_argument, 0, 'd'},
                                        {"longbench", required_argument, 0, 'L'},
                                        {"lengths", required_argument, 0, 'l'},
                                        {"max-length", required_argument, 0, 'M'},
                                        {"tasks", required_argument, 0, 't'},
                                        {"samples", required_argument, 0, 'n'},
                                        {"calib-samples", required_argument, 0, 'c'},
                                        {"policies", required_argument, 0, 'p'},
                                        {"budgets", required_argument, 0, 'B'},
                                        {"mam-budget", required_argument, 0, 'A'},
                                        {"sink", required_argument, 0, 's'},
                                        {"window", required_argument, 0, 'w'},
                                        {"infinigen-frac", required_argument, 0, 'f'},
                                        {"spec-margin", required_argument, 0, 'E'},
                                        {"spec-from", required_argument, 0, 'F'},
                                        {"max-gen", required_argument, 0, 'g'},
                                        {"prefill-chunk", required_argument, 0, 'C'},
                                        {"out", required_argument, 0, 'o'},
                                        {"churn-profile", required_argument, 0, 'P'},
                                        {"cache-slots", required_argument, 0, 'H'},
                                        {"meter-steps", required_argument, 0, 'G'},
                                        {"chat-template", required_argument, 0, 'T'},
                                        {"check-serving", no_argument, 0, 'S'},
                                        {"time-limit", required_argument, 0, 'X'},
                                        {"serve-policies", required_argument, 0, 'Q'},
                                        {"serve-batch", required_argument, 0, 'N'},
                                        {"serve-normal", required_argument, 0, 'O'},
                                        {"serve-admission", required_argument, 0, 'D'},
                                        {"help", no_argument, 0, 'h'},
                                        {0, 0, 0, 0}};
    *o = (struct acc_opts){.backend = "auto",
                           .chat = -1,
                           .samples = 10,
                           .calib = 2,
                           .max_length = 16384,
                           .chunk = 256,
                           .mam_budget = 2048,
                           .sink = 1,
                           .window = 2,
                           .frac = 1.0,
                           .n_budgets = 3,
                           .budgets = {512, 1024, 2048},
                           .n_policies = 0, /* 0: the model's default (default_policies) */
                           .serve_batch = 4,
                           .serve_normal = 1};
    runtime_opts_init(&o->rt);
    struct option opts[64];
    PULSE_CHECK(runtime_opts_getopt(own, RT_ENGINE, opts, 64) == 0, CMD ": the options' table");
    int c;
    struct cli_seen seen = {0}; /* a flag with a value given twice is refused */
    opterr = 0;
    optind = 1;
    while ((c = cli_getopt(CMD, argc, argv, opts, &seen)) != -1) {
        int bad = 0;
        if (runtime_opts_code(c)) {
            if (runtime_opts_flag(CMD, &o->rt, c, optarg)) return -1;
            continue;
        }
        switch (c) {
        case 'T':
            if (chat_template_parse(optarg, &o->chat)) {
                cli_error(CMD, "--chat-template: '%s' is not auto, none, gemma or chatml", optarg);
                return -1;
            }
            break;
        case 'm':
            o->model = optarg;
            break;
        case 'b':
            o->backend = optarg;
            break;
        case 'd':
            o->data = optarg;
            break;
        case 'L':
            o->longbench = optarg;
            break;
        case 'o':
            o->out = optarg;
            break;
        case 'P':
            o->churn_out = optarg;
            break;
        case 'H': {
            long v[MAX_LIST];
            const int n = int_list("--cache-slots", optarg, 1, 1 << 20, v);
            if (n > MAX_CACHES) {
                cli_error(CMD, "--cache-slots: %d sizes, at most %d", n, MAX_CACHES);
                bad = 1;
            } else if (!(bad = n < 0)) {
                memcpy(o->cache_slots, v, sizeof(long) * (size_t)n);
                o->n_caches = n;
            }
            break;
        }
        case 'l':
            bad = (o->n_lengths = int_list("--lengths", optarg, 64, 1 << 20, o->lengths)) < 0;
            break;
        case 'B':
            bad = (o->n_budgets = int_list("--budgets", optarg, 0, CLI_BUDGET_MAX, o->budgets)) < 0;
            break;
        case 'M':
            bad = cli_int(CMD, "--max-length", optarg, 64, 1 << 20, &o->max_length);
            o->max_length_set = 1;
            break;
        case 'n':
            bad = cli_int(CMD, "--samples", optarg, 1, 1 << 20, &o->samples);
            break;
        case 'S':
            o->check_serving = 1;
            break;
        case 'c':
            bad = cli_int(CMD, "--calib-samples", optarg, 0, 1 << 20, &o->calib);
            break;
        case 'A':
            bad = cli_budget(CMD, "--mam-budget", optarg, &o->mam_budget);
            break;
        case 's':
            bad = cli_int(CMD, "--sink", optarg, 0, 64, &o->sink);
            break;
        case 'w':
            bad = cli_int(CMD, "--window", optarg, 0, 64, &o->window);
            break;
        case 'g':
            bad = cli_int(CMD, "--max-gen", optarg, 1, 4096, &o->max_gen);
            break;
        case 'G':
            bad = cli_int(CMD, "--meter-steps", optarg, 1, 4096, &o->meter_steps);
            break;
        case 'C':
            bad = cli_int(CMD, "--prefill-chunk", optarg, 1, 4096, &o->chunk);
            break;
        case 'f':
            bad = cli_double(CMD, "--infinigen-frac", optarg, 1e-6, 1.0, &o->frac);
            break;
        case 'E':
            bad = cli_double(CMD, "--spec-margin", optarg, 0.0, 1.0, &o->spec_margin);
            o->spec_margin_set = 1;
            break;
        case 'F':
            if (!strcmp(optarg, "input") || !strcmp(optarg, "mid") || !strcmp(optarg, "hits")) {
                o->spec_from = !strcmp(optarg, "mid")    ? SPARSE_SPEC_MID
                               : !strcmp(optarg, "hits") ? SPARSE_SPEC_HITS
                                                         : SPARSE_SPEC_INPUT;
                o->spec_from_set = 1;
            } else {
                cli_error(CMD, "--spec-from: '%s' is not input, mid or hits", optarg);
                bad = 1;
            }
            break;
        case 'X':
            bad = cli_double(CMD, "--time-limit", optarg, 1e-3, 1e7, &o->time_limit);
            break;
        case 't':
            snprintf(g_tasks_buf, sizeof g_tasks_buf, "%s", optarg);
            bad = (o->n_tasks = split("--tasks", g_tasks_buf, o->tasks)) < 0;
            break;
        case 'p': {
            char buf[1024];
            const char *items[MAX_LIST];
            snprintf(buf, sizeof buf, "%s", optarg);
            int n = split("--policies", buf, items);
            bad = n < 0;
            for (int i = 0; i < n && !bad; i++)
                if ((o->policies[i] = sparse_policy_find(items[i])) < 0) {
                    cli_error(CMD, "--policies: '%s' is not a policy (%s)", items[i],
                              sparse_policy_names());
                    bad = 1;
                }
            o->n_policies = n;
            break;
        }
        case 'Q': {
            char buf[256];
            const char *items[MAX_LIST];
            snprintf(buf, sizeof buf, "%s", optarg);
            int n = split("--serve-policies", buf, items);
            bad = n < 0;
            for (int i = 0; i < n && !bad; i++) {
                const int spec = !strcmp(items[i], "pulseinfer-spec");
                const struct policy *pol = policy_find(spec ? "pulseinfer" : items[i]);
                if (!pol ||
                    (strcmp(items[i], "arkvale") && strcmp(items[i], "pulseinfer") && !spec) ||
                    o->n_serve_pols == 3) {
                    cli_error(CMD,
                              "--serve-policies: '%s' is not arkvale, pulseinfer or "
                              "pulseinfer-spec (each once)",
                              items[i]);
                    bad = 1;
                } else {
                    o->serve_spec[o->n_serve_pols] = spec;
                    o->serve_pols[o->n_serve_pols++] = pol;
                }
            }
            break;
        }
        case 'N':
            o->serve_flag = o->serve_flag ? o->serve_flag : "--serve-batch";
            bad = cli_int(CMD, "--serve-batch", optarg, 1, 64, &o->serve_batch);
            break;
        case 'O':
            o->serve_flag = o->serve_flag ? o->serve_flag : "--serve-normal";
            o->pulseinfer_flag = o->pulseinfer_flag ? o->pulseinfer_flag : "--serve-normal";
            bad = cli_int(CMD, "--serve-normal", optarg, 0, 64, &o->serve_normal);
            break;
        case 'D': {
            long len;
            o->serve_flag = o->serve_flag ? o->serve_flag : "--serve-admission";
            o->pulseinfer_flag = o->pulseinfer_flag ? o->pulseinfer_flag : "--serve-admission";
            if (strcmp(optarg, "ioaa") == 0) {
                o->serve_admission = NULL;
            } else if (strncmp(optarg, "fixed:", 6) == 0) {
                bad = cli_int(CMD, "--serve-admission fixed:LEN", optarg + 6, 0, 1 << 24, &len);
                o->serve_admission = optarg;
            } else {
                cli_error(CMD, "--serve-admission: '%s' is not ioaa or fixed:LEN", optarg);
                bad = 1;
            }
            break;
        }
        case 'h':
            fputs(usage, stdout);
            runtime_opts_usage(stdout, RT_ENGINE, &o->rt);
            return 1;
        default:
            cli_unknown_flag(CMD, argc, argv);
            return -1;
        }
        if (bad) return -1;
    }
    if (cli_no_extra_args(CMD, argc, argv)) return -1;
    static const char *const out_flags[] = {"--out", "--churn-profile"};
    const char *const outs[] = {o->out, o->churn_out};
    if (cli_outputs(CMD, 2, out_flags, outs)) return -1;
    if (!o->model) return cli_error(CMD, "--model is required"), -1;
    if (!o->data == !o->longbench)
        return cli_error(CMD, "give exactly one of --data and --longbench"), -1;
    if (o->data && !o->n_lengths) return cli_error(CMD, "--data needs --lengths"), -1;
    /* with the policies given, their runs are known before the model loads (the default
     * policies depend on it: main checks those after plan_runs) */
    int metered = o->n_policies == 0;
    for (int i = 0; i < o->n_policies; i++)
        for (int b = 0; b < o->n_budgets; b++)
            metered |= meters(o, o->policies[i], o->budgets[b]);
    if (!metered && meter_missing(o)) return -1;
    /* each data source has its own length flag: the other one would be ignored */
    if (o->data && o->max_length_set)
        return cli_error(CMD, "--max-length is for --longbench; --data sets its lengths with "
                              "--lengths"),
               -1;
    if (o->longbench && o->n_lengths)
        return cli_error(CMD, "--lengths is for --data; --longbench truncates to --max-length"), -1;
    if (!o->n_tasks) return cli_error(CMD, "--tasks is required"), -1;
    int approx = o->n_policies == 0; /* the default policies include infinigen */
    for (int i = 0; i < o->n_policies; i++)
        approx |= sparse_policy_approx(o->policies[i]);
    if (o->spec_margin_set && !approx)
        return cli_error(CMD, "--spec-margin: only with infinigen or infinigen-solohead among "
                              "--policies"),
               -1;
    if (o->spec_from_set && !approx)
        return cli_error(CMD, "--spec-from: only with infinigen or infinigen-solohead among "
                              "--policies"),
               -1;
    if (o->serve_flag && !o->n_serve_pols)
        return cli_error(CMD, "%s: only with --serve-policies", o->serve_flag), -1;
    int two_batch = 0; /* pulseinfer's normal batch and admission */
    for (int i = 0; i < o->n_serve_pols; i++)
        two_batch |= o->serve_pols[i]->n_batches > 1;
    if (o->pulseinfer_flag && !two_batch)
        return cli_error(CMD, "%s: for pulseinfer among --serve-policies", o->pulseinfer_flag), -1;
    for (int i = 0; i < o->n_tasks; i++)
        if (!longbench_task_find(o->tasks[i]))
            return cli_error(CMD, "--tasks: '%s' is not a LongBench or synthetic task",
                             o->tasks[i]),
                   -1;
    for (int i = 0; i < o->n_budgets; i++)
        if (cli_budget_blocks(CMD, "--budgets", o->budgets[i], 16, NULL)) return -1;
    if (cli_budget_blocks(CMD, "--mam-budget", o->mam_budget, 16, NULL)) return -1;
    const long selected = o->mam_budget / 16 + o->sink + o->window + 1; /* the meter's lists */
    for (int i = 0; i < o->n_caches; i++)
        if (o->cache_slots[i] < selected)
            return cli_error(CMD,
                             "--cache-slots: %ld is under the %ld blocks one step selects "
                             "(--mam-budget / 16 + sink + window + tail)",
                             o->cache_slots[i], selected),
                   -1;
    /* each length holds the prompt (at least one token) and the task's new tokens */
    long gen = 0;
    const char *gen_task = "";
    for (int i = 0; i < o->n_tasks; i++) {
        const struct longbench_task *t = longbench_task_find(o->tasks[i]);
        long g = o->max_gen ? PULSE_MIN(o->max_gen, (long)t->max_gen) : t->max_gen;
        if (g > gen) gen = g, gen_task = t->name;
    }
    int n_len = o->longbench ? 1 : o->n_lengths;
    for (int i = 0; i < n_len; i++) {
        long len = o->longbench ? o->max_length : o->lengths[i];
        if (len <= gen)
            return cli_error(CMD,
                             "%s: %ld tokens leave no room for a prompt: task %s generates up "
                             "to %ld new tokens (give a longer %s or a smaller --max-gen)",
                             o->longbench ? "--max-length" : "--lengths", len, gen_task, gen,
                             o->longbench ? "--max-length" : "length"),
                   -1;
    }
    return 0;
}

/* Why an evaluation ended early: --time-limit, or SIGINT / SIGTERM after the sample in
 * progress (the result written either way). */
enum acc_stop { ACC_DONE, ACC_TIME_LIMIT, ACC_SIGNALLED };
static volatile sig_atomic_t g_signalled;

static void on_stop_signal(int sig)
{
    (void)sig;
    g_signalled = 1;
}

static void stop_signals(int on)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on ? on_stop_signal : SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static const char *status_of(int stopped)
{
    return stopped == ACC_TIME_LIMIT ? "partial" : stopped == ACC_SIGNALLED ? "interrupted" : "ok";
}

/* One (policy, budget) decode of every sample; run 0 is full attention. */
struct run_def {
    int policy;
    long budget;
};

/* One task at one length: its samples, the sums per run, and every sample's score per run
 * (per_sample[r * cap + i], cap = --samples) for the intervals and the paired comparison. */
struct acc_set {
    const struct longbench_task *task;
    long length;
    struct longbench_set *set;
    double score[MAX_RUNS], attended[MAX_RUNS];
    /* infinigen runs: the exact query's blocks chosen by score and how many the approximate
     * query's lists held (sparse_stats.spec_exact, spec_hit), summed */
    int64_t spec_exact[MAX_RUNS], spec_hit[MAX_RUNS];
    double *per_sample;
    int n_scored;
};

/* --serve-policies: a scored sample kept for the serving runs after the evaluation: its prompt
 * and each run's tokens (gen[r * max_gen], k[r] of them). */
struct kept_sample {
    int set, pos; /* its set, and its place in the set's per_sample */
    size_t idx;
    int n, max_gen, stop_nl;
    int32_t *ids, *gen;
    int *k;
};

/* The MAM profile at one selector granularity (head_mass.h). */
struct acc_mam {
    int query_heads;    /* 0: KV heads (solohead, reversed); 1: query heads (the -q policies) */
    int n_sel;          /* heads per layer: n_kv_heads or n_heads */
    double *mam;        /* [n_tasks][n_layers][n_sel] */
    int64_t *obs;       /* [n_tasks][n_layers] */
    int32_t *sel, *rev; /* [n_layers] highest and lowest MAM head over the tasks' mean */
};

struct acc {
    struct acc_opts o;
    struct session s;
    const struct backend *be;
    struct sparse_attn *sp;
    struct run_def runs[MAX_RUNS];
    int n_runs, eos;
    struct acc_set *sets;
    int n_sets;
    int32_t *ids, *gen;
    struct acc_mam mam[2]; /* [0] KV heads, [1] query heads */
    struct locality_meter *meter;
    struct locality_meter *cache_meter[MAX_CACHES]; /* --cache-slots: the same lists, cached */
    /* --check-serving: per run its serving path (made at its first sample), samples checked
     * and those whose tokens equal the accuracy path's; the serving path's tokens */
    struct serve_path *serve[MAX_RUNS];
    int64_t serve_checked[MAX_RUNS], serve_same[MAX_RUNS];
    int32_t *gen2;
    struct kept_sample *kept; /* --serve-policies: [samples * n_sets] */
    int n_kept;
    json_t *served;         /* --serve-policies' results, after the evaluation */
    int meter_run;          /* run index whose selections the meter sees */
    char *text, *text_utf8; /* [text_cap], [3 * text_cap] */
    size_t text_cap;
    float *logits; /* [vocab]: the last step's, checked for NaN/Inf after every run */
    double t_prefill, t_decode;
    int stopped;          /* enum acc_stop: why the evaluation ended before its last sample */
    long scored, planned; /* samples scored over all sets, and asked for */
    int64_t prompt_tokens, gen_tokens;
    int32_t next;         /* decode(): the token that ended the answer, unfed; -1: max_gen */
    int64_t meter_tokens; /* --meter-steps: tokens decoded past the answers, for the meter */
    double t_meter;       /* ... and their time */
    /* the infinigen runs' speculation per layer, over every sample: [run][layer] exact blocks
     * chosen by score, then [run][layer] hits of the approximate lists (sparse_attn_layer_spec) */
    int64_t *spec_layer;
    /* [run] the blocks chosen by score of the lists the hits were looked up in (the
     * prediction's size; sparse_stats.spec_predicted) */
    int64_t spec_predicted[MAX_RUNS];
    int64_t spec_from_hits[MAX_RUNS]; /* sparse_stats.spec_from_hits, summed */
    /* and the step-to-step behaviour of their lists: [run][layer] (sparse_attn_layer_persist) */
    struct select_persist *persist;
};

/* Bytes of A->spec_layer. */
static size_t spec_layer_bytes(const struct acc *A)
{
    return 2 * sizeof(int64_t) * MAX_RUNS * (size_t)A->s.cfg->n_layers;
}

/* Bytes of A->persist. */
static size_t persist_bytes(const struct acc *A)
{
    return sizeof(struct select_persist) * MAX_RUNS * (size_t)A->s.cfg->n_layers;
}

static int max_gen_of(const struct acc *A, const struct longbench_task *t)
{
    return A->o.max_gen ? (int)PULSE_MIN(A->o.max_gen, t->max_gen) : t->max_gen;
}

static long count_nonfinite(const float *x, int n)
{
    long bad = 0;
    for (int i = 0; i < n; i++)
        bad += !isfinite(x[i]);
    return bad;
}

/* Tokenises the sample's prompt into A->ids, truncated in the middle to `limit` tokens. */
static int encode_prompt(struct acc *A, const struct longbench_task *t,
                         const struct longbench_sample *smp, int limit, char *err, size_t errlen)
{
    char *prompt = longbench_build_prompt(t, smp, A->o.chat, err, errlen);
    if (!prompt) return -1;
    size_t n = 0, cap = (size_t)A->s.max_tokens * 4;
    int32_t *all = mem_alloc(MEM_HOST, sizeof(int32_t) * cap, "prompt ids");
    int rc = all ? tokenizer_encode(A->s.tok, prompt, strlen(prompt), 1, all, cap, &n) : -1;
    if (rc == PULSE_ERR_NOMEM && n > cap) { /* a prompt longer than the guess: its own size */
        mem_free(MEM_HOST, all, sizeof(int32_t) * cap);
        cap = n;
        all = mem_alloc(MEM_HOST, sizeof(int32_t) * cap, "prompt ids");
        rc = all ? tokenizer_encode(A->s.tok, prompt, strlen(prompt), 1, all, cap, &n) : -1;
    }
    free(prompt);
    if (rc != PULSE_OK) {
        snprintf(err, errlen, "sample at line %zu: the prompt does not fit %zu tokens", smp->line,
                 cap);
        mem_free(MEM_HOST, all, sizeof(int32_t) * cap);
        return -1;
    }
    /* the limit and the new tokens fit the session (parse checks every length) */
    if (limit < 1 || limit > A->s.max_tokens || n < 1) {
        snprintf(err, errlen, "sample at line %zu: %zu prompt tokens, limit %d of %d", smp->line, n,
                 limit, A->s.max_tokens);
        mem_free(MEM_HOST, all, sizeof(int32_t) * cap);
        return -1;
    }
    int m = (int)PULSE_MIN(n, (size_t)limit), head = m / 2;
    memcpy(A->ids, all, sizeof(int32_t) * head);
    memcpy(A->ids + head, all + n - (m - head), sizeof(int32_t) * (m - head));
    mem_free(MEM_HOST, all, sizeof(int32_t) * cap);
    return m;
}

static int ends_line(const struct acc *A, int32_t id)
{
    size_t len;
    const char *p = tokenizer_piece(A->s.tok, id, &len);
    return p && memchr(p, '\n', len) != NULL;
}

/* Greedy decoding from the prefilled prompt of n tokens whose next token is first: the answer's
 * k tokens into A->gen (token j at position n + j), the token that ended it (not fed) into
 * A->next, or -1 when it filled max_gen (its last token not fed either). */
static int decode(struct acc *A, int n, int32_t first, int max_gen, int stop_nl)
{
    int k = 0;
    int32_t tok = first;
    double t0 = pulse_now();
    A->next = -1;
    while (k < max_gen) {
        if (tok == A->eos || (stop_nl && ends_line(A, tok))) {
            A->next = tok;
            break;
        }
        A->gen[k++] = tok;
        if (k == max_gen) break;
        tok = session_decode(&A->s, n + k - 1, tok);
    }
    A->t_decode += pulse_now() - t0;
    A->gen_tokens += k;
    return k;
}

/* --meter-steps: after decode()'s answer of k tokens, the decode steps (session_decode calls)
 * up to `steps` in all, greedy, whatever the tokens (end of text and line ends fed back like
 * any other), so that the run's list observer sees `steps` steps; the tokens are discarded.
 * n + steps must fit the session (setup sizes it). */
static void meter_extend(struct acc *A, int n, int k, int steps)
{
    /* the steps decode() made: every answer token fed but the last at max_gen */
    const int made = A->next < 0 ? k - 1 : k;
    int32_t tok = A->next < 0 ? A->gen[k - 1] : A->next;
    int pos = A->next < 0 ? n + k - 1 : n + k;
    double t0 = pulse_now();
    for (int j = made; j < steps; j++)
        tok = session_decode(&A->s, pos++, tok);
    A->t_meter += pulse_now() - t0;
    A->meter_tokens += steps > made ? steps - made : 0;
}

/* 1 when the engine's last logits are finite, else 0 with who made them (the policy, what) in
 * err. */
static int logits_finite(struct acc *A, const struct acc_set *st, size_t idx, const char *policy,
                         const char *what, char *err, size_t errlen)
{
    engine_read_logits(A->s.e, A->logits, 1);
    const long bad = count_nonfinite(A->logits, A->s.cfg->vocab);
    if (bad)
        snprintf(err, errlen,
                 "%s/%ld sample %zu, policy %s%s: %ld of the %d final logits are NaN or infinite "
                 "(non-finite weights or an overflow)",
                 st->task->name, st->length, idx, policy, what, bad, A->s.cfg->vocab);
    return !bad;
}

/* The answer's text: the tokens decoded, ill-formed UTF-8 (a byte-level model can end mid
 * character) replaced as Python's errors="replace" does, so the JSON can carry it. */
static const char *detok(struct acc *A, int k)
{
    size_t len = 0;
    if (tokenizer_decode(A->s.tok, A->gen, (size_t)k, 0, A->text, A->text_cap, &len) != PULSE_OK)
        A->text[0] = '\0';
    acc_utf8_replace(A->text, A->text_utf8, 3 * A->text_cap);
    return A->text_utf8;
}

static void meter_observe(void *user, int layer, int list, const int32_t *blocks, int count,
                          int n_tokens)
{
    struct acc *A = user;
    int32_t slot = 0, nt = n_tokens, cnt = count;
    (void)list;
    locality_meter_add(A->meter, layer, &slot, &nt, blocks, &cnt, 1);
    for (int k = 0; k < A->o.n_caches; k++)
        locality_meter_add(A->cache_meter[k], layer, &slot, &nt, blocks, &cnt, 1);
}

/* --cache-slots: what the churn meter's lists (SoloHead at --mam-budget) recall in steady steps
 * with no cache beyond the step before's selection (the meter's own: its new blocks) and through
 * each LRU hot cache of the sizes asked (blocks a list), summed over the sparse layers. */
static json_t *cache_json(const struct acc *A)
{
    if (A->meter_run < 0 || !A->o.n_caches) return json_null();
    json_t *rows = json_array();
    for (int k = -1; k < A->o.n_caches; k++) {
        const struct locality_meter *m = k < 0 ? A->meter : A->cache_meter[k];
        int64_t bytes = 0, steps = 0;
        for (int l = 0; l < A->s.cfg->n_layers; l++) {
            struct locality_layer_stats st;
            locality_meter_layer_stats(m, l, &st);
            bytes += st.recall_bytes_total;
            steps += st.steps;
        }
        const double chunk = (double)locality_meter_chunk_bytes(m);
        json_array_append_new(
            rows, json_pack("{s:o,s:I,s:I,s:f}", "hot_slots",
                            k < 0 ? json_null() : json_integer(A->o.cache_slots[k]), "layer_steps",
                            (json_int_t)steps, "recall_bytes", (json_int_t)bytes,
                            "recall_blocks_per_layer_step", steps ? bytes / chunk / steps : 0.0));
    }
    return json_pack("{s:I,s:o}", "budget_tokens", (json_int_t)A->o.mam_budget, "rows", rows);
}

static int configure(struct acc *A, const struct run_def *r, char *err, size_t errlen)
{
    const int kind = sparse_policy_selector_kind(r->policy);
    const struct acc_mam *am = &A->mam[kind == SPARSE_SEL_QUERY];
    struct sparse_params sp = {r->policy,
                               (int)r->budget,
                               (int)A->o.sink,
                               (int)A->o.window,
                               kind == SPARSE_SEL_NONE             ? NULL
                               : sparse_policy_reversed(r->policy) ? am->rev
                                                                   : am->sel,
                               A->o.spec_margin,
                               A->o.spec_from};
    int rc = sparse_attn_configure(A->sp, &sp, A->s.slot, err, errlen);
    if (rc != PULSE_OK) return rc;
    struct engine_layer_hook h = sparse_attn_hook(A->sp);
    batch_set_hook(A->s.bt, r->policy == SPARSE_FULL ? NULL : &h);
    return PULSE_OK;
}

/* The serving path's selection for policy p (enum offload_selection), or -1: the policies
 * whose lists the offload runtime makes (per KV head, one KV head's for every head, or one from
 * every head's scores; the infinigen ones one layer ahead from the approximate query). */
static int serving_twin(int p)
{
    return p == SPARSE_HEADWISE || p == SPARSE_INFINIGEN ? OFFLOAD_HEADWISE
           : p == SPARSE_SOLOHEAD || p == SPARSE_REVERSED || p == SPARSE_INFINIGEN_SOLO
               ? OFFLOAD_SOLOHEAD
           : p == SPARSE_MEAN ? OFFLOAD_MEAN
                              : -1;
}

struct stop_ctx {
    const struct acc *A;
    int stop_nl;
};

static int stop_token(void *user, int32_t tok)
{
    const struct stop_ctx *c = user;
    return tok == c->A->eos || (c->stop_nl && ends_line(c->A, tok));
}

/* --check-serving: run r's decode of the prompt (n tokens) again through its serving path;
 * 1 when its k tokens equal the accuracy path's (A->gen), 0 when not, < 0 (a status) on an
 * error. */
static int check_serving(struct acc *A, int r, int n, int max_gen, int stop_nl, int k, char *err,
                         size_t errlen)
{
    int rc;
    const struct run_def *rd = &A->runs[r];
    if (!A->serve[r]) {
        const struct acc_mam *am = &A->mam[0]; /* KV-head selectors */
        struct serve_path_params sp = {
            serving_twin(rd->policy),
            rd->policy == SPARSE_REVERSED ? am->rev : am->sel,
            (int)rd->budget,
            (int)A->o.sink,
            (int)A->o.window,
            RECALL_PER_BLOCK,
            policy_find(sparse_policy_approx(rd->policy) ? "infinigen" : "arkvale")
                ->offload_schedule,
            A->s.max_tokens,
            (int)A->o.chunk,
            1};
        char why[256] = "";
        if (!(A->serve[r] = serve_path_create(A->s.e, &sp, why, sizeof why))) {
            snprintf(err, errlen, "--check-serving: %s", why);
            return strstr(why, "out of memory") ? PULSE_ERR_NOMEM : PULSE_ERR_INVALID;
        }
    }
    const struct stop_ctx sc = {A, stop_nl};
    int k2 = 0;
    if ((rc = serve_path_decode(A->serve[r], A->ids, n, max_gen, stop_token, (void *)&sc, A->gen2,
                                &k2, err, errlen)) != PULSE_OK)
        return rc < 0 ? rc : PULSE_ERR_INVALID;
    const int same = k2 == k && !memcmp(A->gen2, A->gen, sizeof(int32_t) * (size_t)k);
    A->serve_checked[r]++;
    A->serve_same[r] += same;
    return same;
}

/* Keeps sample idx of set st (its prompt A->ids[0..n)) for the serving runs; NULL when out of
 * memory. */
static struct kept_sample *keep_sample(struct acc *A, const struct acc_set *st, size_t idx, int n,
                                       int max_gen)
{
    if (!A->kept) {
        const size_t cap = (size_t)A->o.samples * (size_t)A->n_sets;
        if (!(A->kept = mem_alloc(MEM_HOST, sizeof *A->kept * cap, "kept samples"))) return NULL;
        memset(A->kept, 0, sizeof *A->kept * cap);
    }
    struct kept_sample *kp = &A->kept[A->n_kept];
    kp->set = (int)(st - A->sets);
    kp->pos = st->n_scored;
    kp->idx = idx;
    kp->n = n, kp->max_gen = max_gen, kp->stop_nl = st->task->stop_at_newline;
    kp->ids = mem_alloc(MEM_HOST, sizeof(int32_t) * (size_t)n, "kept prompt");
    kp->gen = mem_alloc(MEM_HOST, sizeof(int32_t) * (size_t)A->n_runs * max_gen, "kept tokens");
    kp->k = mem_alloc(MEM_HOST, sizeof(int) * (size_t)A->n_runs, "kept lengths");
    if (!kp->ids || !kp->gen || !kp->k) return NULL; /* freed with the others (teardown) */
    memcpy(kp->ids, A->ids, sizeof(int32_t) * (size_t)n);
    A->n_kept++;
    return kp;
}

static void free_kept(struct acc *A)
{
    if (!A->kept) return;
    const size_t cap = (size_t)A->o.samples * (size_t)A->n_sets;
    for (size_t i = 0; i < cap; i++) {
        struct kept_sample *kp = &A->kept[i];
        mem_free(MEM_HOST, kp->ids, sizeof(int32_t) * (size_t)kp->n);
        mem_free(MEM_HOST, kp->gen, sizeof(int32_t) * (size_t)A->n_runs * kp->max_gen);
        mem_free(MEM_HOST, kp->k, sizeof(int) * (size_t)A->n_runs);
    }
    mem_free(MEM_HOST, A->kept, sizeof *A->kept * cap);
}

/* Every run of one sample; appends its record to recs. */
static int eval_sample(struct acc *A, struct acc_set *st, size_t idx, json_t *recs, char *err,
                       size_t errlen)
{
    const struct longbench_sample *smp = longbench_get(st->set, idx);
    int max_gen = max_gen_of(A, st->task);
    int limit = (int)(A->o.longbench ? A->o.max_length : st->length) - max_gen;
    int n = encode_prompt(A, st->task, smp, limit, err, errlen);
    if (n < 1) return PULSE_ERR_INVALID;
    struct kept_sample *kp = NULL;
    if (A->o.n_serve_pols && !(kp = keep_sample(A, st, idx, n, max_gen))) {
        snprintf(err, errlen, "out of host memory for the samples kept for --serve-policies");
        return PULSE_ERR_NOMEM;
    }
    double t0 = pulse_now();
    batch_set_hook(A->s.bt, NULL);
    int32_t first = session_prefill(&A->s, A->ids, n);
    A->t_prefill += pulse_now() - t0;
    A->prompt_tokens += n;
    json_t *rj = json_array();
    for (int r = 0; r < A->n_runs; r++) {
        int rc = configure(A, &A->runs[r], err, errlen);
        if (rc != PULSE_OK) {
            json_decref(rj);
            return rc;
        }
        if (r == A->meter_run) {
            locality_meter_reset(A->meter, 0);
            for (int k = 0; k < A->o.n_caches; k++)
                locality_meter_reset(A->cache_meter[k], 0);
        }
        sparse_attn_set_list_observer(A->sp, r == A->meter_run ? meter_observe : NULL, A);
        int k = decode(A, n, first, max_gen, st->task->stop_at_newline);
        if (kp) {
            memcpy(kp->gen + (size_t)r * max_gen, A->gen, sizeof(int32_t) * (size_t)k);
            kp->k[r] = k;
        }
        if (!logits_finite(A, st, idx, sparse_policy_name(A->runs[r].policy), "", err, errlen)) {
            json_decref(rj);
            return PULSE_ERR_INVALID;
        }
        const char *pred = detok(A, k);
        double score = longbench_score_sample(st->task, smp, pred);
        int served = -1; /* -1: not checked */
        /* (the infinigen runs' twin, pulse run's infinigen, predicts from the input at every
         * channel: with another --spec-from or --infinigen-frac they have none) */
        const int twin = serving_twin(A->runs[r].policy) >= 0 &&
                         (!sparse_policy_approx(A->runs[r].policy) ||
                          (A->o.frac == 1.0 && A->o.spec_from == SPARSE_SPEC_INPUT));
        if (A->o.check_serving && twin &&
            (served = check_serving(A, r, n, max_gen, st->task->stop_at_newline, k, err, errlen)) <
                0) {
            json_decref(rj);
            return served; /* the status */
        }
        struct sparse_stats ss;
        sparse_attn_get_stats(A->sp, &ss);
        double frac = ss.context_tokens ? (double)ss.attended_tokens / ss.context_tokens : 1.0;
        st->score[r] += score;
        st->attended[r] += frac;
        st->spec_exact[r] += ss.spec_exact;
        st->spec_hit[r] += ss.spec_hit;
        A->spec_predicted[r] += ss.spec_predicted;
        A->spec_from_hits[r] += ss.spec_from_hits;
        const int L = A->s.cfg->n_layers;
        for (int l = 0; ss.spec_exact && l < L; l++) {
            int64_t e, h;
            sparse_attn_layer_spec(A->sp, l, &e, &h);
            A->spec_layer[(size_t)r * L + l] += e;
            A->spec_layer[(size_t)(MAX_RUNS + r) * L + l] += h;
            struct select_persist p, *acc = &A->persist[(size_t)r * L + l];
            sparse_attn_layer_persist(A->sp, l, &p);
            acc->steps += p.steps;
            acc->churn_exact += p.churn_exact, acc->churn_approx += p.churn_approx;
            acc->missed += p.missed, acc->missed_again += p.missed_again;
            acc->missed_held += p.missed_held;
            acc->wrong += p.wrong, acc->wrong_again += p.wrong_again;
        }
        st->per_sample[(size_t)r * A->o.samples + st->n_scored] = score;
        json_t *run =
            json_pack("{s:s,s:I,s:s,s:f,s:i,s:f}", "policy", sparse_policy_name(A->runs[r].policy),
                      "budget", (json_int_t)A->runs[r].budget, "pred", pred, "score", score,
                      "new_tokens", k, "attended_fraction", frac);
        if (served >= 0) json_object_set_new(run, "serving_same_tokens", json_boolean(served));
        json_array_append_new(rj, run);
        /* after everything the run's score and counters read: the meter's steps only (checked
         * here, so that a later run that decodes nothing does not read their logits) */
        if (r == A->meter_run && A->o.meter_steps) {
            meter_extend(A, n, k, (int)A->o.meter_steps);
            if (!logits_finite(A, st, idx, sparse_policy_name(A->runs[r].policy),
                               " past its answer (--meter-steps)", err, errlen)) {
                json_decref(rj);
                return PULSE_ERR_INVALID;
            }
        }
    }
    batch_set_hook(A->s.bt, NULL);
    st->n_scored++;
    json_array_append_new(recs,
                          json_pack("{s:s,s:I,s:I,s:s,s:i,s:o}", "task", st->task->name, "length",
                                    (json_int_t)st->length, "index", (json_int_t)idx, "id", smp->id,
                                    "prompt_tokens", n, "runs", rj));
    printf("  %s/%ld #%zu (%d tokens):", st->task->name, st->length, idx, n);
    for (int r = 0; r < A->n_runs; r++)
        printf(" %.0f", 100.0 * json_real_value(json_object_get(json_array_get(rj, r), "score")));
    printf("\n");
    fflush(stdout);
    return PULSE_OK;
}

/* MAM of every task from full-attention decoding of its calibration samples, at both
 * granularities; selectors from the mean over tasks. */
static int calibrate(struct acc *A, char *err, size_t errlen)
{
    const struct model_config *c = A->s.cfg;
    struct head_mass *hm =
        head_mass_create(A->s.e, A->s.kv, 16, A->s.max_tokens, (int)A->o.mam_budget, (int)A->o.sink,
                         (int)A->o.window, err, errlen);
    if (!hm) return PULSE_ERR_NOMEM;
    const size_t LH = (size_t)c->n_layers * c->n_heads;
    double *mean = mem_alloc(MEM_HOST, sizeof(double) * LH, "mam mean");
    if (!mean) {
        head_mass_free(hm);
        return PULSE_ERR_NOMEM;
    }
    int rc = PULSE_OK;
    for (int t = 0; t < A->o.n_tasks && rc == PULSE_OK; t++) {
        struct acc_set *st = &A->sets[t * (A->o.longbench ? 1 : A->o.n_lengths)];
        head_mass_reset(hm);
        int max_gen = max_gen_of(A, st->task);
        int limit = (int)(A->o.longbench ? A->o.max_length : st->length) - max_gen;
        for (long i = A->o.samples; i < A->o.samples + A->o.calib; i++) {
            int n =
                encode_prompt(A, st->task, longbench_get(st->set, (size_t)i), limit, err, errlen);
            if (n < 1) {
                rc = PULSE_ERR_INVALID;
                break;
            }
            batch_set_hook(A->s.bt, NULL);
            int32_t first = session_prefill(&A->s, A->ids, n);
            struct engine_layer_hook h = head_mass_hook(hm);
            batch_set_hook(A->s.bt, &h);
            decode(A, n, first, max_gen, st->task->stop_at_newline);
            batch_set_hook(A->s.bt, NULL);
        }
        for (int k = 0; k < 2; k++) {
            struct acc_mam *am = &A->mam[k];
            const size_t L = (size_t)c->n_layers * am->n_sel;
            head_mass_table(hm, am->query_heads, am->mam + (size_t)t * L,
                            am->obs + (size_t)t * c->n_layers);
        }
    }
    for (int k = 0; k < 2; k++) {
        struct acc_mam *am = &A->mam[k];
        const size_t L = (size_t)c->n_layers * am->n_sel;
        memset(mean, 0, sizeof(double) * L);
        for (int t = 0; t < A->o.n_tasks; t++)
            for (size_t i = 0; i < L; i++)
                mean[i] += am->mam[(size_t)t * L + i] / A->o.n_tasks;
        head_mass_selectors(mean, c->n_layers, am->n_sel, 0, am->sel);
        head_mass_selectors(mean, c->n_layers, am->n_sel, 1, am->rev);
    }
    mem_free(MEM_HOST, mean, sizeof(double) * LH);
    head_mass_free(hm);
    return rc;
}

static size_t per_sample_bytes(const struct acc *A)
{
    return sizeof(double) * MAX_RUNS * (size_t)A->o.samples;
}

static int load_sets(struct acc *A, char *err, size_t errlen)
{
    const struct acc_opts *o = &A->o;
    int per = o->longbench ? 1 : o->n_lengths;
    A->n_sets = o->n_tasks * per;
    A->sets = mem_alloc(MEM_HOST, sizeof *A->sets * A->n_sets, "sets");
    if (!A->sets) return PULSE_ERR_NOMEM;
    memset(A->sets, 0, sizeof *A->sets * A->n_sets);
    struct longbench_load_params lp = {LONGBENCH_BAD_FAIL, NULL};
    for (int t = 0; t < o->n_tasks; t++)
        for (int l = 0; l < per; l++) {
            struct acc_set *st = &A->sets[t * per + l];
            char path[4096];
            st->task = longbench_task_find(o->tasks[t]);
            st->length = o->longbench ? o->max_length : o->lengths[l];
            if (o->longbench)
                snprintf(path, sizeof path, "%s/%s.jsonl", o->longbench, o->tasks[t]);
            else
                snprintf(path, sizeof path, "%s/%s_%ld.jsonl", o->data, o->tasks[t], o->lengths[l]);
            int rc = longbench_load_file(path, &lp, &st->set, err, errlen);
            if (rc != PULSE_OK) return rc;
            st->per_sample = mem_alloc(MEM_HOST, per_sample_bytes(A), "per-sample scores");
            if (!st->per_sample) return PULSE_ERR_NOMEM;
            size_t need = (size_t)o->samples + (l == 0 ? (size_t)o->calib : 0);
            if (longbench_count(st->set) < need) {
                snprintf(err, errlen, "%.400s: %zu samples, %zu needed (--samples%s)", path,
                         longbench_count(st->set), need, l == 0 ? " + --calib-samples" : "");
                return PULSE_ERR_INVALID;
            }
        }
    return PULSE_OK;
}

/* Every policy but those that coincide with another on model c (the usage text says which). */
static void default_policies(struct acc_opts *o, const struct model_config *c)
{
    o->n_policies = 0;
    for (int p = 0; p < SPARSE_POLICY_COUNT; p++) {
        const int kv_twin = p == SPARSE_SOLOHEAD || p == SPARSE_REVERSED || p == SPARSE_MEAN ||
                            p == SPARSE_INFINIGEN_SOLO;
        const int q_twin =
            p == SPARSE_SOLOHEAD_Q || p == SPARSE_REVERSED_Q || p == SPARSE_QUERYHEAD;
        if ((kv_twin && c->n_kv_heads == 1) || (q_twin && c->n_heads == c->n_kv_heads)) continue;
        o->policies[o->n_policies++] = p;
    }
}

static void plan_runs(struct acc *A)
{
    if (A->o.n_policies == 0) default_policies(&A->o, A->s.cfg);
    A->runs[0] = (struct run_def){SPARSE_FULL, 0};
    A->n_runs = 1;
    A->meter_run = -1;
    for (int p = 0; p < A->o.n_policies; p++) {
        if (A->o.policies[p] == SPARSE_FULL) continue;
        for (int b = 0; b < A->o.n_budgets; b++) {
            if (A->meter_run < 0 && meters(&A->o, A->o.policies[p], A->o.budgets[b]))
                A->meter_run = A->n_runs;
            A->runs[A->n_runs++] = (struct run_def){A->o.policies[p], A->o.budgets[b]};
        }
    }
}

/* Per pair of tasks, how stable head roles are across them: the mean over global layers of
 * the Spearman correlation of the heads' MAM, and the fraction of layers whose top head (the
 * SoloHead selector each task alone would pick) is the same. */
static json_t *mam_stability_json(const struct acc *A, const struct acc_mam *am)
{
    const struct model_config *c = A->s.cfg;
    const size_t L = (size_t)c->n_layers * am->n_sel;
    json_t *pairs = json_array();
    int32_t *sa = mem_alloc(MEM_HOST, sizeof(int32_t) * 2 * (size_t)c->n_layers, "selectors");
    if (!sa) return pairs;
    int32_t *sb = sa + c->n_layers;
    for (int a = 0; a < A->o.n_tasks; a++)
        for (int b = a + 1; b < A->o.n_tasks; b++) {
            const double *ma = am->mam + (size_t)a * L, *mb = am->mam + (size_t)b * L;
            head_mass_selectors(ma, c->n_layers, am->n_sel, 0, sa);
            head_mass_selectors(mb, c->n_layers, am->n_sel, 0, sb);
            double sum = 0;
            int n = 0, layers = 0, same = 0;
            for (int l = 0; l < c->n_layers; l++) {
                if (!model_layer_is_global(c, l)) continue;
                layers++;
                same += sa[l] == sb[l];
                const double rho =
                    acc_spearman(ma + (size_t)l * am->n_sel, mb + (size_t)l * am->n_sel, am->n_sel);
                if (!isnan(rho)) sum += rho, n++;
            }
            json_t *pj = json_pack("{s:s,s:s,s:i,s:i}", "a", A->o.tasks[a], "b", A->o.tasks[b],
                                   "layers", layers, "layers_with_rank", n);
            json_object_set_new(pj, "spearman_mean", n ? json_real(sum / n) : json_null());
            json_object_set_new(pj, "same_selector",
                                layers ? json_real((double)same / layers) : json_null());
            json_array_append_new(pairs, pj);
        }
    mem_free(MEM_HOST, sa, sizeof(int32_t) * 2 * (size_t)c->n_layers);
    return pairs;
}

/* One granularity's profile: per task the table over global layers, the selectors, and the
 * stability of head roles across tasks. */
static json_t *mam_json(const struct acc *A, const struct acc_mam *am)
{
    const struct model_config *c = A->s.cfg;
    const size_t L = (size_t)c->n_layers * am->n_sel;
    json_t *per = json_object(), *layers = json_array(), *sel = json_array(), *rev = json_array();
    for (int l = 0; l < c->n_layers; l++)
        if (model_layer_is_global(c, l)) {
            json_array_append_new(layers, json_integer(l));
            json_array_append_new(sel, json_integer(am->sel[l]));
            json_array_append_new(rev, json_integer(am->rev[l]));
        }
    for (int t = 0; t < A->o.n_tasks; t++) {
        json_t *rows = json_array(), *obs = json_array();
        for (int l = 0; l < c->n_layers; l++) {
            if (!model_layer_is_global(c, l)) continue;
            json_t *row = json_array();
            for (int h = 0; h < am->n_sel; h++)
                json_array_append_new(row, json_real(am->mam[t * L + (size_t)l * am->n_sel + h]));
            json_array_append_new(rows, row);
            json_array_append_new(obs, json_integer(am->obs[(size_t)t * c->n_layers + l]));
        }
        json_object_set_new(per, A->o.tasks[t],
                            json_pack("{s:o,s:o}", "mam", rows, "observations", obs));
    }
    json_t *mj =
        json_pack("{s:I,s:s,s:o,s:o,s:o,s:o}", "budget_tokens", (json_int_t)A->o.mam_budget,
                  "selector_kind", am->query_heads ? "query head" : "kv head", "global_layers",
                  layers, "per_task", per, "selector", sel, "selector_reversed", rev);
    json_object_set_new(mj, "stability", mam_stability_json(A, am)); /* pairs of tasks */
    return mj;
}

/* A row's statistics over n samples of run r against full attention's (accuracy/stats.h):
 * "interval_95" of the score (percent), and for a sparse run "paired": the mean difference
 * and the relative score with their 95% intervals, wins, losses, ties and the sign test. */
static void add_stats(json_t *row, const double *run, const double *full, int n, int r,
                      uint64_t seed)
{
    double lo, hi;
    acc_interval(run, n, &lo, &hi);
    json_object_set_new(row, "interval_95", json_pack("[f,f]", 100 * lo, 100 * hi));
    struct acc_paired pc;
    if (r == 0 || acc_paired_compare(run, full, n, 2000, seed, &pc) != PULSE_OK) return;
    json_t *p = json_pack("{s:i,s:i,s:i,s:f,s:[f,f],s:f}", "wins", pc.wins, "losses", pc.losses,
                          "ties", pc.ties, "mean_diff", 100 * pc.mean_diff, "diff_interval_95",
                          100 * pc.diff_lo, 100 * pc.diff_hi, "sign_test_p", pc.sign_p);
    json_object_set_new(p, "relative", isnan(pc.rel) ? json_null() : json_real(pc.rel));
    json_object_set_new(p, "relative_interval_95",
                        isnan(pc.rel_lo) ? json_null() : json_pack("[f,f]", pc.rel_lo, pc.rel_hi));
    json_object_set_new(p, "method",
                        json_string("paired bootstrap, 2000 resamples; exact sign "
                                    "test on wins against losses"));
    json_object_set_new(row, "paired", p);
}

/* An infinigen run's speculation hit rate into row: the share of the exact query's blocks
 * chosen by score that the approximate query's lists held (sparse_stats.spec_hit /
 * spec_exact); null for the other policies. */
static void add_spec(json_t *row, int64_t exact, int64_t hit)
{
    json_object_set_new(row, "speculation_hit_rate",
                        exact > 0 ? json_real((double)hit / (double)exact) : json_null());
}

static json_t *ratio_or_null(double num, double den)
{
    return den > 0 ? json_real(num / den) : json_null();
}

/* The step-to-step behaviour of speculated lists (select.h's select_persist) into o: the list-
 * steps, the mean churn of the exact and of the approximate lists (the locality meter's
 * definition), the misses and wrong blocks with their persistence. */
static void add_persist(json_t *o, const struct select_persist *p)
{
    json_object_set_new(o, "steps", json_integer(p->steps));
    json_object_set_new(o, "churn_exact", ratio_or_null(p->churn_exact, (double)p->steps));
    json_object_set_new(o, "churn_approx", ratio_or_null(p->churn_approx, (double)p->steps));
    json_object_set_new(o, "missed", json_integer(p->missed));
    json_object_set_new(o, "missed_again", json_integer(p->missed_again));
    json_object_set_new(o, "missed_held", json_integer(p->missed_held));
    json_object_set_new(o, "miss_persistence",
                        ratio_or_null((double)p->missed_again, (double)p->missed));
    json_object_set_new(o, "wrong", json_integer(p->wrong));
    json_object_set_new(o, "wrong_again", json_integer(p->wrong_again));
    json_object_set_new(o, "wrong_persistence",
                        ratio_or_null((double)p->wrong_again, (double)p->wrong));
}

/* The infinigen runs' speculation against the exact query, per run over every sample: the hit
 * rate, the --spec-margin it was measured at and the prediction's blocks chosen by score
 * ("predicted": the exact ones' count at margin 0), and per layer the exact query's blocks
 * chosen by score and the hits (the misprediction model's input, issue 34); per layer and run
 * the step-to-step behaviour of the attended lists (add_persist, whatever the margin). An
 * empty array without such runs. */
static json_t *speculation_json(const struct acc *A)
{
    json_t *arr = json_array();
    const int L = A->s.cfg->n_layers;
    for (int r = 1; A->spec_layer && r < A->n_runs; r++) {
        if (!sparse_policy_approx(A->runs[r].policy)) continue;
        int64_t te = 0, th = 0;
        struct select_persist tp = {0};
        json_t *layers = json_array();
        for (int l = 0; l < L; l++) {
            const int64_t e = A->spec_layer[(size_t)r * L + l],
                          h = A->spec_layer[(size_t)(MAX_RUNS + r) * L + l];
            const struct select_persist *p = &A->persist[(size_t)r * L + l];
            te += e, th += h;
            tp.steps += p->steps;
            tp.churn_exact += p->churn_exact, tp.churn_approx += p->churn_approx;
            tp.missed += p->missed, tp.missed_again += p->missed_again;
            tp.missed_held += p->missed_held;
            tp.wrong += p->wrong, tp.wrong_again += p->wrong_again;
            if (!e) continue;
            json_t *o = json_pack("{s:i,s:I,s:I,s:f}", "layer", l, "exact", (json_int_t)e, "hit",
                                  (json_int_t)h, "hit_rate", (double)h / (double)e);
            add_persist(o, p);
            json_array_append_new(layers, o);
        }
        json_t *o = json_pack(
            "{s:s,s:I,s:I,s:I,s:o}", "policy", sparse_policy_name(A->runs[r].policy), "budget",
            (json_int_t)A->runs[r].budget, "exact", (json_int_t)te, "hit", (json_int_t)th,
            "hit_rate", te ? json_real((double)th / (double)te) : json_null());
        json_object_set_new(o, "margin", json_real(A->o.spec_margin));
        json_object_set_new(o, "predicted", json_integer(A->spec_predicted[r]));
        json_object_set_new(o, "from_predicted_lists", json_integer(A->spec_from_hits[r]));
        add_persist(o, &tp);
        json_object_set_new(o, "per_layer", layers);
        json_array_append_new(arr, o);
    }
    return arr;
}

/* --spec-margin: the infinigen runs' hit rates at the margin, pooled and per speculated layer,
 * and the prediction's size against the exact lists' (printed only with a margin: at 0 the
 * output is what it was before the flag). */
static void print_speculation(const struct acc *A)
{
    const int L = A->s.cfg->n_layers;
    for (int r = 1; A->o.spec_margin > 0 && r < A->n_runs; r++) {
        if (!sparse_policy_approx(A->runs[r].policy)) continue;
        int64_t te = 0, th = 0;
        for (int l = 0; l < L; l++) {
            te += A->spec_layer[(size_t)r * L + l];
            th += A->spec_layer[(size_t)(MAX_RUNS + r) * L + l];
        }
        printf("speculation, %s %ld, margin %g: hit rate %.3f (%lld of %lld), predicted %.3fx "
               "the exact blocks;",
               sparse_policy_name(A->runs[r].policy), A->runs[r].budget, A->o.spec_margin,
               te ? (double)th / (double)te : 0.0, (long long)th, (long long)te,
               te ? (double)A->spec_predicted[r] / (double)te : 0.0);
        for (int l = 0; l < L; l++) {
            const int64_t e = A->spec_layer[(size_t)r * L + l],
                          h = A->spec_layer[(size_t)(MAX_RUNS + r) * L + l];
            if (e) printf(" layer %d %.3f", l, (double)h / (double)e);
        }
        printf("\n");
    }
}

/* Mean score per (task, length, run) and, per length and run, the mean over tasks; printed as
 * a table and returned as JSON, each row with its interval and paired comparison (add_stats;
 * an average row's over the pooled samples of its length). */
static json_t *table_json(const struct acc *A)
{
    const size_t cap = (size_t)A->o.samples;
    double *pool_r = mem_alloc(MEM_HOST, sizeof(double) * cap * (size_t)A->n_sets, "pooled"),
           *pool_f = mem_alloc(MEM_HOST, sizeof(double) * cap * (size_t)A->n_sets, "pooled");
    json_t *rows = json_array();
    int per = A->o.longbench ? 1 : A->o.n_lengths;
    printf("\n%-10s %6s", "policy", "budget");
    for (int i = 0; i < A->n_sets; i++)
        printf(" %8.8s/%-5ld", A->sets[i].task->name, A->sets[i].length);
    for (int l = 0; l < per; l++)
        printf(" %7s/%-5ld", "avg", A->sets[l].length);
    printf("\n");
    for (int r = 0; r < A->n_runs; r++) {
        printf("%-10s %6ld", sparse_policy_name(A->runs[r].policy), A->runs[r].budget);
        for (int i = 0; i < A->n_sets; i++) {
            const struct acc_set *st = &A->sets[i];
            double m = st->n_scored ? 100.0 * st->score[r] / st->n_scored : 0.0;
            double f = st->n_scored ? 100.0 * st->score[0] / st->n_scored : 0.0;
            printf(" %14.1f", m);
            json_t *row = json_pack(
                "{s:s,s:I,s:s,s:I,s:i,s:f,s:f,s:o,s:f}", "task", st->task->name, "length",
                (json_int_t)st->length, "policy", sparse_policy_name(A->runs[r].policy), "budget",
                (json_int_t)A->runs[r].budget, "samples", st->n_scored, "score", m, "full_score", f,
                "relative_to_full", f > 0 ? json_real(m / f) : json_null(), "attended_fraction",
                st->n_scored ? st->attended[r] / st->n_scored : 1.0);
            add_stats(row, st->per_sample + r * cap, st->per_sample, st->n_scored, r,
                      ACC_STATS_SEED + (uint64_t)i);
            add_spec(row, st->spec_exact[r], st->spec_hit[r]);
            json_array_append_new(rows, row);
        }
        for (int l = 0; l < per; l++) {
            double m = 0, f = 0;
            int pooled = 0;
            int64_t spec_exact = 0, spec_hit = 0;
            for (int t = 0; t < A->o.n_tasks; t++) {
                const struct acc_set *st = &A->sets[t * per + l];
                spec_exact += st->spec_exact[r], spec_hit += st->spec_hit[r];
                m += st->n_scored ? 100.0 * st->score[r] / st->n_scored / A->o.n_tasks : 0.0;
                f += st->n_scored ? 100.0 * st->score[0] / st->n_scored / A->o.n_tasks : 0.0;
                for (int i = 0; pool_r && pool_f && i < st->n_scored; i++, pooled++) {
                    pool_r[pooled] = st->per_sample[r * cap + (size_t)i];
                    pool_f[pooled] = st->per_sample[i];
                }
            }
            printf(" %7.1f (%3.0f%%)", m, f > 0 ? 100.0 * m / f : 0.0);
            json_t *row = json_pack(
                "{s:s,s:I,s:s,s:I,s:i,s:f,s:f,s:o}", "task", "average", "length",
                (json_int_t)A->sets[l].length, "policy", sparse_policy_name(A->runs[r].policy),
                "budget", (json_int_t)A->runs[r].budget, "samples", pooled, "score", m,
                "full_score", f, "relative_to_full", f > 0 ? json_real(m / f) : json_null());
            if (pooled)
                add_stats(row, pool_r, pool_f, pooled, r,
                          ACC_STATS_SEED + 1000003u * (uint64_t)(l + 1));
            add_spec(row, spec_exact, spec_hit);
            json_array_append_new(rows, row);
        }
        printf("\n");
    }
    mem_free(MEM_HOST, pool_r, sizeof(double) * cap * (size_t)A->n_sets);
    mem_free(MEM_HOST, pool_f, sizeof(double) * cap * (size_t)A->n_sets);
    return rows;
}

static json_t *config_json(const struct acc *A)
{
    const struct acc_opts *o = &A->o;
    json_t *tasks = json_array(), *lens = json_array(), *pols = json_array(), *buds = json_array();
    for (int i = 0; i < o->n_tasks; i++)
        json_array_append_new(tasks, json_string(o->tasks[i]));
    for (int i = 0; i < A->n_sets && i < (o->longbench ? 1 : o->n_lengths); i++)
        json_array_append_new(lens, json_integer(A->sets[i].length));
    for (int i = 0; i < o->n_policies; i++)
        json_array_append_new(pols, json_string(sparse_policy_name(o->policies[i])));
    for (int i = 0; i < o->n_budgets; i++)
        json_array_append_new(buds, json_integer(o->budgets[i]));
    json_t *cj = json_pack(
        "{s:s,s:s,s:s,s:s,s:o,s:o,s:o,s:o,s:I,s:I,s:i,s:I,s:I,s:I,s:f,s:I,s:I}", "model", o->model,
        "arch", A->s.cfg->arch == MODEL_ARCH_GEMMA3 ? "gemma3" : "llama", "backend", A->be->name,
        "data", o->data ? o->data : o->longbench, "tasks", tasks, "lengths", lens, "policies", pols,
        "budgets", buds, "samples", (json_int_t)o->samples, "calib_samples", (json_int_t)o->calib,
        "block_size", 16, "sink_blocks", (json_int_t)o->sink, "window_blocks",
        (json_int_t)o->window, "mam_budget", (json_int_t)o->mam_budget, "infinigen_frac", o->frac,
        "max_gen_cap", (json_int_t)o->max_gen, "prefill_chunk", (json_int_t)o->chunk);
    json_object_set_new(cj, "chat_template", json_string(chat_template_name(o->chat)));
    json_object_set_new(cj, "meter_steps", json_integer(o->meter_steps));
    json_object_set_new(cj, "spec_margin", json_real(o->spec_margin));
    json_object_set_new(cj, "spec_from",
                        json_string(o->spec_from == SPARSE_SPEC_HITS  ? "hits"
                                    : o->spec_from == SPARSE_SPEC_MID ? "mid"
                                                                      : "input"));
    json_object_set_new(cj, "options", runtime_opts_json(&o->rt, RT_ENGINE));
    return cj;
}

/* --check-serving: per checked run, its samples and those with the accuracy path's tokens, and
 * what its serving path recalled (printed too); null without the flag. */
static json_t *serving_json(const struct acc *A)
{
    if (!A->o.check_serving) return json_null();
    json_t *arr = json_array();
    for (int r = 0; r < A->n_runs; r++) {
        if (!A->serve[r]) continue;
        struct offload_stats st;
        serve_path_stats(A->serve[r], &st);
        json_array_append_new(arr, json_pack("{s:s,s:I,s:I,s:I,s:I,s:I}", "policy",
                                             sparse_policy_name(A->runs[r].policy), "budget",
                                             (json_int_t)A->runs[r].budget, "samples",
                                             (json_int_t)A->serve_checked[r], "same_tokens",
                                             (json_int_t)A->serve_same[r], "recall_bytes",
                                             (json_int_t)st.recall_bytes, "host_syncs",
                                             (json_int_t)st.host_syncs));
        printf("serving path, %s %ld: %lld of %lld samples decode the accuracy path's tokens "
               "(%lld bytes recalled)\n",
               sparse_policy_name(A->runs[r].policy), A->runs[r].budget,
               (long long)A->serve_same[r], (long long)A->serve_checked[r],
               (long long)st.recall_bytes);
    }
    return arr;
}

/* The answer's length in out[0..max_gen): up to the first token that ends it, as decode(). */
static int answer_len(const struct acc *A, const int32_t *out, int max_gen, int stop_nl)
{
    const struct stop_ctx sc = {A, stop_nl};
    int k = 0;
    while (k < max_gen && !stop_token((void *)&sc, out[k]))
        k++;
    return k;
}

/* One serving run of --serve-policies (policy pol at accuracy run r's selection and budget)
 * over the kept samples: scores, the samples with the accuracy path's tokens, JSON. */
static int serve_one(struct acc *A, const struct policy *pol, int spec, int r,
                     struct serve_batch_req *q, int32_t *out, int gen_cap, double *scores,
                     json_t *arr, char *err, size_t errlen)
{
    const char *name = spec ? "pulseinfer-spec" : pol->name;
    const int sel = serving_twin(A->runs[r].policy), two = pol->n_batches > 1;
    for (int j = 0; j < A->n_kept; j++)
        q[j] = (struct serve_batch_req){
            A->kept[j].ids, A->kept[j].n, A->kept[j].max_gen, out + (size_t)j * gen_cap, -1, NULL};
    const struct serve_batch_params bp = {pol,
                                          sel,
                                          sel == OFFLOAD_SOLOHEAD ? A->mam[0].sel : NULL,
                                          (int)A->runs[r].budget,
                                          (int)A->o.sink,
                                          (int)A->o.window,
                                          A->s.max_tokens,
                                          (int)A->o.chunk,
                                          (int)A->o.serve_batch,
                                          two ? (int)A->o.serve_normal : 0,
                                          two ? A->o.serve_admission : NULL,
                                          1,
                                          spec};
    struct serve_batch_stats bs;
    int rc = serve_batch_run(A->s.e, &bp, q, A->n_kept, &bs, err, errlen);
    if (rc != PULSE_OK) return rc;
    int same = 0, normal = 0;
    const size_t cap = (size_t)A->o.samples;
    for (int j = 0; j < A->n_kept; j++) {
        const struct kept_sample *kp = &A->kept[j];
        const struct acc_set *st = &A->sets[kp->set];
        /* pulseinfer's normal batch keeps every block: full attention's tokens */
        const int ref = two && q[j].batch == 0 ? 0 : r, kr = kp->k[ref];
        normal += two && q[j].batch == 0;
        const int32_t *o = q[j].out, *g = kp->gen + (size_t)ref * kp->max_gen;
        const int k = answer_len(A, o, kp->max_gen, kp->stop_nl);
        same += !q[j].error && k == kr && !memcmp(o, g, sizeof(int32_t) * (size_t)k);
        memcpy(A->gen, o, sizeof(int32_t) * (size_t)k);
        scores[j] = q[j].error ? 0.0
                               : longbench_score_sample(st->task, longbench_get(st->set, kp->idx),
                                                        detok(A, k));
    }
    json_t *sets = json_array();
    double *run = mem_alloc(MEM_HOST, sizeof(double) * 2 * cap, "served scores"), *full = run + cap;
    for (int i = 0; run && i < A->n_sets; i++) {
        const struct acc_set *st = &A->sets[i];
        int m = 0;
        for (int j = 0; j < A->n_kept; j++)
            if (A->kept[j].set == i) {
                run[m] = scores[j];
                full[m++] = st->per_sample[A->kept[j].pos];
            }
        double sr = 0, sf = 0;
        for (int j = 0; j < m; j++)
            sr += run[j], sf += full[j];
        json_t *row = json_pack("{s:s,s:I,s:i,s:f,s:f}", "task", st->task->name, "length",
                                (json_int_t)st->length, "samples", m, "score",
                                m ? 100 * sr / m : 0.0, "full_score", m ? 100 * sf / m : 0.0);
        if (m) add_stats(row, run, full, m, 1, ACC_STATS_SEED + (uint64_t)i);
        json_array_append_new(sets, row);
        printf(" %s/%ld %.1f (full %.1f)", st->task->name, st->length, m ? 100 * sr / m : 0.0,
               m ? 100 * sf / m : 0.0);
    }
    printf("\n");
    mem_free(MEM_HOST, run, sizeof(double) * 2 * cap);
    json_t *js = json_pack(
        "{s:s,s:s,s:I,s:i,s:i,s:i,s:i,s:I,s:I,s:I,s:I,s:I,s:I,s:f,s:s,s:I,s:I,s:o}", "policy", name,
        "selection", offload_selection_name(sel), "budget", (json_int_t)A->runs[r].budget,
        "samples", A->n_kept, "same_tokens", same, "normal", normal, "offloaded",
        A->n_kept - normal, "failed", (json_int_t)bs.ctr.requests_failed, "steps",
        (json_int_t)bs.ctr.steps, "recall_bytes", (json_int_t)bs.ctr.recall_bytes, "host_syncs",
        (json_int_t)bs.ctr.step_host_syncs, "layer_switches", (json_int_t)bs.ctr.layer_switches,
        "ioaa_decisions", (json_int_t)bs.ctr.ioaa_decisions, "wall_s", bs.wall_s, "admission",
        !two                   ? "-"
        : A->o.serve_admission ? A->o.serve_admission
                               : "ioaa",
        "max_batch", (json_int_t)A->o.serve_batch, "normal_requests",
        (json_int_t)bp.normal_requests, "sets", sets);
    json_object_set_new(js, "ioaa_nodes", json_integer(bs.ctr.ioaa_nodes));
    if (spec) { /* the prediction's hit rate and its corrections (it attends the exact lists) */
        json_t *sj = json_pack("{s:I,s:I,s:I}", "scored", (json_int_t)bs.ctr.spec_scored, "held",
                               (json_int_t)bs.ctr.spec_held, "corrections",
                               (json_int_t)bs.ctr.spec_corrections);
        results_set_real(sj, "hit_rate",
                         bs.ctr.spec_scored ? (double)bs.ctr.spec_held / (double)bs.ctr.spec_scored
                                            : NAN);
        json_object_set_new(js, "speculation", sj);
    }
    json_array_append_new(arr, js);
    printf("served, %s %s %ld: %d of %d samples decode the accuracy path's tokens (%d in the "
           "normal batch: full attention's; %d offloaded), %lld bytes recalled, %lld steps\n",
           name, offload_selection_name(sel), A->runs[r].budget, same, A->n_kept, normal,
           A->n_kept - normal, (long long)bs.ctr.recall_bytes, (long long)bs.ctr.steps);
    return PULSE_OK;
}

/* The accuracy path's policy whose runs a served policy is compared with: its own selection as
 * pulse run defaults it (arkvale: mean, infinigen: headwise, pulseinfer: solohead). */
static int served_selection(const struct policy *pol)
{
    const int sel = pol->offload_selection ? offload_selection_find(pol->offload_selection) : -1;
    return sel == OFFLOAD_SOLOHEAD ? SPARSE_SOLOHEAD
           : sel == OFFLOAD_MEAN   ? SPARSE_MEAN
                                   : SPARSE_HEADWISE;
}

/* --serve-policies: each policy over the kept samples at every budget of its selection's runs
 * (arkvale: headwise, pulseinfer: solohead; pulse run's defaults) into A->served. */
static int serve_policies(struct acc *A, char *err, size_t errlen)
{
    A->served = json_array();
    if (!A->n_kept) return PULSE_OK;
    int gen_cap = 0;
    for (int j = 0; j < A->n_kept; j++)
        gen_cap = PULSE_MAX(gen_cap, A->kept[j].max_gen);
    const size_t nk = (size_t)A->n_kept;
    struct serve_batch_req *q = mem_alloc(MEM_HOST, sizeof *q * nk, "served requests");
    int32_t *out = mem_alloc(MEM_HOST, sizeof(int32_t) * nk * gen_cap, "served tokens");
    double *scores = mem_alloc(MEM_HOST, sizeof(double) * nk, "served scores");
    int rc = q && out && scores ? PULSE_OK : PULSE_ERR_NOMEM;
    if (rc != PULSE_OK) snprintf(err, errlen, "out of host memory for --serve-policies");
    for (int p = 0; p < A->o.n_serve_pols && rc == PULSE_OK; p++) {
        const struct policy *pol = A->o.serve_pols[p];
        const int spec = A->o.serve_spec[p];
        for (int r = 1; r < A->n_runs && rc == PULSE_OK; r++)
            if (A->runs[r].policy == served_selection(pol)) {
                printf("served, %s %ld:", spec ? "pulseinfer-spec" : pol->name, A->runs[r].budget);
                rc = serve_one(A, pol, spec, r, q, out, gen_cap, scores, A->served, err, errlen);
            }
    }
    mem_free(MEM_HOST, q, sizeof *q * nk);
    mem_free(MEM_HOST, out, sizeof(int32_t) * nk * gen_cap);
    mem_free(MEM_HOST, scores, sizeof(double) * nk);
    return rc;
}

/* The result first (so that a failing profile loses nothing), then the churn profile. */
static int write_outputs(struct acc *A, json_t *recs, char *err, size_t errlen)
{
    json_t *table = table_json(A);
    json_t *serving = serving_json(A); /* printed here, with or without --out */
    print_speculation(A);
    if (A->stopped)
        printf("pulse accuracy: stopped after %ld of %ld samples (%s); the table covers "
               "those\n",
               A->scored, A->planned, A->stopped == ACC_TIME_LIMIT ? "--time-limit" : "signal");
    int rc = PULSE_OK;
    if (A->o.out) {
        json_t *res = results_new(CMD);
        A->be->describe(results_env(res));
        json_object_set_new(res, "config", config_json(A));
        json_object_set_new(res, "mam", mam_json(A, &A->mam[1]));    /* query heads */
        json_object_set_new(res, "mam_kv", mam_json(A, &A->mam[0])); /* KV heads */
        json_object_set_new(res, "serving", json_incref(serving));
        json_object_set_new(res, "served", A->served ? json_incref(A->served) : json_null());
        json_object_set_new(res, "table", json_incref(table));
        json_object_set_new(res, "speculation", speculation_json(A));
        json_object_set_new(res, "samples", json_incref(recs));
        json_object_set_new(
            res, "churn", A->meter_run >= 0 ? locality_meter_to_json(A->meter, NULL) : json_null());
        json_object_set_new(res, "cache", cache_json(A));
        json_object_set_new(res, "timing",
                            json_pack("{s:f,s:f,s:I,s:I,s:f,s:I}", "prefill_s", A->t_prefill,
                                      "decode_s", A->t_decode, "prompt_tokens",
                                      (json_int_t)A->prompt_tokens, "generated_tokens",
                                      (json_int_t)A->gen_tokens, "meter_decode_s", A->t_meter,
                                      "meter_tokens", (json_int_t)A->meter_tokens));
        json_object_set_new(res, "samples_scored", json_integer(A->scored));
        json_object_set_new(res, "samples_planned", json_integer(A->planned));
        json_object_set_new(res, "status", json_string(status_of(A->stopped)));
        rc = results_write(res, A->o.out, err, errlen);
        json_decref(res);
    }
    json_decref(table);
    json_decref(serving);
    if (rc != PULSE_OK || !A->o.churn_out) return rc;
    struct locality_profile prof;
    if (locality_meter_to_profile(A->meter, &prof, A->s.cfg->name, err, errlen) != PULSE_OK)
        return PULSE_ERR_INVALID; /* no selection was observed (a run stopped at once) */
    return locality_profile_write(&prof, A->o.churn_out, err, errlen) != PULSE_OK ? PULSE_ERR_IO
                                                                                  : PULSE_OK;
}

static int setup(struct acc *A, char *err, size_t errlen)
{
    const struct model_config *c = A->s.cfg;
    long longest = 0, gen = 0;
    for (int i = 0; i < A->n_sets; i++) {
        longest = PULSE_MAX(longest, A->sets[i].length);
        gen = PULSE_MAX(gen, max_gen_of(A, A->sets[i].task));
    }
    /* a prompt leaves its set's length less the task's new tokens; --meter-steps may decode
     * past them */
    int rc = session_start(&A->s, A->be, 1, (int)(longest + PULSE_MAX(gen, A->o.meter_steps)),
                           (int)A->o.chunk, &A->o.rt, err, errlen);
    if (rc != PULSE_OK) return rc;
    struct tokenizer_info ti;
    tokenizer_get_info(A->s.tok, &ti);
    A->eos = ti.eos_id;
    A->sp = sparse_attn_create(A->s.e, A->s.kv, 16, A->s.max_tokens, A->o.frac, err, errlen);
    if (!A->sp) return PULSE_ERR_NOMEM;
    if (!(A->spec_layer = mem_alloc(MEM_HOST, spec_layer_bytes(A), "speculation per layer")))
        return PULSE_ERR_NOMEM;
    memset(A->spec_layer, 0, spec_layer_bytes(A));
    if (!(A->persist = mem_alloc(MEM_HOST, persist_bytes(A), "speculation persistence")))
        return PULSE_ERR_NOMEM;
    memset(A->persist, 0, persist_bytes(A));
    A->ids = mem_alloc(MEM_HOST, sizeof(int32_t) * A->s.max_tokens, "ids");
    A->gen = mem_alloc(MEM_HOST, sizeof(int32_t) * (gen + 1), "gen");
    A->gen2 = mem_alloc(MEM_HOST, sizeof(int32_t) * (gen + 1), "serving gen");
    int mam_ok = 1;
    for (int k = 0; k < 2; k++) {
        struct acc_mam *am = &A->mam[k];
        am->query_heads = k;
        am->n_sel = k ? c->n_heads : c->n_kv_heads;
        const size_t L = (size_t)c->n_layers * am->n_sel;
        am->sel = mem_alloc(MEM_HOST, sizeof(int32_t) * c->n_layers, "mam sel");
        am->rev = mem_alloc(MEM_HOST, sizeof(int32_t) * c->n_layers, "mam rev");
        am->mam = mem_alloc(MEM_HOST, sizeof(double) * L * A->o.n_tasks, "mam");
        am->obs = mem_alloc(MEM_HOST, sizeof(int64_t) * c->n_layers * A->o.n_tasks, "mam obs");
        if (!am->sel || !am->rev || !am->mam || !am->obs) {
            mam_ok = 0;
            continue;
        }
        memset(am->sel, 0, sizeof(int32_t) * c->n_layers);
        memset(am->rev, 0, sizeof(int32_t) * c->n_layers);
        memset(am->mam, 0, sizeof(double) * L * A->o.n_tasks);
        memset(am->obs, 0, sizeof(int64_t) * c->n_layers * A->o.n_tasks);
    }
    A->text_cap = (size_t)gen * 64 + 1;
    A->text = mem_alloc(MEM_HOST, A->text_cap, "text");
    A->text_utf8 = mem_alloc(MEM_HOST, 3 * A->text_cap, "text utf-8");
    A->logits = mem_alloc(MEM_HOST, sizeof(float) * c->vocab, "logits");
    struct locality_meter_params mp = {{1, 1, c->head_dim, 16, (int)A->o.mam_budget / 16,
                                        (int)A->o.sink, (int)A->o.window,
                                        PULSE_CEIL_DIV(A->s.max_tokens, 16), 0},
                                       c->n_layers,
                                       1,
                                       1,
                                       NULL,
                                       0};
    A->meter = locality_meter_create(&mp, err, errlen);
    for (int k = 0; k < A->o.n_caches && A->meter; k++) {
        struct locality_meter_params cp = mp;
        cp.hot_slots = (int)A->o.cache_slots[k];
        if (!(A->cache_meter[k] = locality_meter_create(&cp, err, errlen)))
            return PULSE_ERR_INVALID;
    }
    if (!A->ids || !A->gen || !A->gen2 || !mam_ok || !A->text || !A->text_utf8 || !A->logits ||
        !A->meter)
        return PULSE_ERR_NOMEM;
    return PULSE_OK;
}

static void teardown(struct acc *A)
{
    const struct model_config *c = A->s.cfg;
    if (c) {
        long gen = (long)((A->text_cap - 1) / 64);
        mem_free(MEM_HOST, A->ids, sizeof(int32_t) * A->s.max_tokens);
        mem_free(MEM_HOST, A->gen, sizeof(int32_t) * (gen + 1));
        mem_free(MEM_HOST, A->gen2, sizeof(int32_t) * (gen + 1));
        for (int k = 0; k < 2; k++) {
            struct acc_mam *am = &A->mam[k];
            const size_t L = (size_t)c->n_layers * am->n_sel;
            mem_free(MEM_HOST, am->sel, sizeof(int32_t) * c->n_layers);
            mem_free(MEM_HOST, am->rev, sizeof(int32_t) * c->n_layers);
            mem_free(MEM_HOST, am->mam, sizeof(double) * L * A->o.n_tasks);
            mem_free(MEM_HOST, am->obs, sizeof(int64_t) * c->n_layers * A->o.n_tasks);
        }
        mem_free(MEM_HOST, A->text, A->text_cap);
        mem_free(MEM_HOST, A->text_utf8, 3 * A->text_cap);
        mem_free(MEM_HOST, A->logits, sizeof(float) * c->vocab);
    }
    locality_meter_free(A->meter);
    for (int k = 0; k < MAX_CACHES; k++)
        locality_meter_free(A->cache_meter[k]);
    for (int r = 0; r < MAX_RUNS; r++)
        serve_path_free(A->serve[r]);
    free_kept(A);
    json_decref(A->served);
    sparse_attn_free(A->sp);
    if (A->spec_layer) mem_free(MEM_HOST, A->spec_layer, spec_layer_bytes(A));
    if (A->persist) mem_free(MEM_HOST, A->persist, persist_bytes(A));
    for (int i = 0; i < A->n_sets; i++) {
        longbench_free(A->sets[i].set);
        mem_free(MEM_HOST, A->sets[i].per_sample, per_sample_bytes(A));
    }
    mem_free(MEM_HOST, A->sets, sizeof *A->sets * A->n_sets);
    session_close(&A->s);
}

static int exit_code(int rc)
{
    return rc == PULSE_OK ? 0 : rc == PULSE_ERR_OOM || rc == PULSE_ERR_NOMEM ? EXIT_OOM : 1;
}

int cmd_accuracy(int argc, char **argv)
{
    static struct acc A; /* large; one run per process */
    memset(&A, 0, sizeof A);
    int rc = parse(argc, argv, &A.o);
    if (rc) return rc > 0 ? 0 : EXIT_USAGE;
    if (!(A.be = cli_backend(CMD, A.o.backend))) return EXIT_USAGE;
    char err[1024] = "";
    const int configured = session_config(&A.s, A.o.model, err, sizeof err) == PULSE_OK;
    if (!configured || session_tokenizer(&A.s, err, sizeof err) != PULSE_OK || !A.s.tok) {
        cli_error(CMD, "--model: %s", err[0] ? err : "the model file carries no tokenizer");
        session_close(&A.s);
        return EXIT_USAGE;
    }
    if (model_config_check_backend(A.s.cfg, A.be->name, err, sizeof err) != PULSE_OK) {
        cli_error(CMD, "--model: %s", err);
        session_close(&A.s);
        return EXIT_USAGE;
    }
    if (A.o.chat < 0) A.o.chat = (int)chat_template_detect(A.s.tok); /* auto: the model's */
    if ((rc = load_sets(&A, err, sizeof err)) != PULSE_OK) {
        cli_error(CMD, "%s", err);
        teardown(&A);
        return rc == PULSE_ERR_NOMEM ? EXIT_OOM : EXIT_USAGE;
    }
    plan_runs(&A);
    if (A.meter_run < 0 && meter_missing(&A.o)) { /* found now, not after the whole run */
        teardown(&A);
        return EXIT_USAGE;
    }
    for (int p = 0; p < A.o.n_serve_pols; p++) { /* found now, not after the whole run */
        int runs = 0;
        for (int r = 1; r < A.n_runs; r++)
            runs += A.runs[r].policy == served_selection(A.o.serve_pols[p]);
        if (!runs) {
            cli_error(
                CMD, "--serve-policies: %s is compared with the %s runs: add %s to --policies",
                A.o.serve_pols[p]->name, sparse_policy_name(served_selection(A.o.serve_pols[p])),
                sparse_policy_name(served_selection(A.o.serve_pols[p])));
            teardown(&A);
            return EXIT_USAGE;
        }
    }
    json_t *recs = json_array();
    A.planned = A.o.samples * A.n_sets;
    if ((rc = setup(&A, err, sizeof err)) == PULSE_OK) {
        printf("pulse accuracy: %s on %s, %d runs per sample", A.s.cfg->name, A.be->name, A.n_runs);
        if (A.o.spec_margin > 0) printf(", speculation margin %g", A.o.spec_margin);
        if (A.o.spec_from == SPARSE_SPEC_MID) printf(", speculation from mid-layer");
        if (A.o.spec_from == SPARSE_SPEC_HITS)
            printf(", speculation from the predicted lists' attention, exact attention");
        printf("\n");
        g_signalled = 0;
        stop_signals(1);
        if (A.o.calib > 0) rc = calibrate(&A, err, sizeof err);
        const double t0 = pulse_now();
        /* sample k of every set in turn: a run stopped early stays balanced over its sets */
        for (long k = 0; k < A.o.samples && rc == PULSE_OK && !A.stopped; k++)
            for (int i = 0; i < A.n_sets && rc == PULSE_OK; i++) {
                if (g_signalled)
                    A.stopped = ACC_SIGNALLED;
                else if (A.o.time_limit > 0 && pulse_now() - t0 >= A.o.time_limit)
                    A.stopped = ACC_TIME_LIMIT;
                if (A.stopped) break;
                rc = eval_sample(&A, &A.sets[i], (size_t)k, recs, err, sizeof err);
                A.scored += rc == PULSE_OK;
            }
        stop_signals(0);
        if (rc == PULSE_OK && A.o.n_serve_pols) rc = serve_policies(&A, err, sizeof err);
    }
    if (rc == PULSE_OK) rc = write_outputs(&A, recs, err, sizeof err);
    if (rc != PULSE_OK) cli_error(CMD, "%s", err);
    json_decref(recs);
    teardown(&A);
    return rc == PULSE_OK && A.stopped == ACC_SIGNALLED ? 1 : exit_code(rc);
}
