/* pulse run's offload options (run_offload.h). */
#include "run_offload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "hot_plan.h"
#include "ioaa_profile.h"
#include "mam.h"

const char run_offload_usage[] =
    "  offload policies (arkvale, infinigen and the engine-matched arkvale+solohead+gs|zc,\n"
    "  infinigen+solohead+gs|zc; the defaults below are each policy's own, pulse run --help\n"
    "  lists them):\n"
    "  --budget-tokens N  tokens selected per request and layer besides sink, window and tail\n"
    "                     (a multiple of --page-size; default 2048)\n"
    "  --selection S      headwise (a list per KV head), solohead (the selector head's list\n"
    "                     serves all) or mean (one list from the scores of every head)\n"
    "  --head-profile F   MAM profile (pulse profile-heads) giving SoloHead's selector heads\n"
    "                     (default: KV head 0 of every layer)\n"
    "  --recall-engine E  per-block, gather-scatter, zero-copy or batch (default per-block)\n"
    "  --recall-cap-gbps G  recall bandwidth cap (default none)\n"
    "  --recall-cap-fraction F  the cap as a fraction (0 to 1] of the single-copy H2D peak the\n"
    "                     run measures at start (PCIe bandwidth scaling)\n"
    "  --locality-profile F  per-layer churn profile JSON (default: the built-in profile); one\n"
    "                     of another model or other dense layers is mapped by depth (measured:\n"
    "                     workloads/profiles/churn_gemma3-270m.json, churn_gqa-tiny.json)\n"
    "  --prompt-kv K      locality (structured keys, default), synthetic (vanilla's KV) or\n"
    "                     prefill (deterministic prompt ids through a real prefill; also for\n"
    "                     vanilla)\n"
    "  --query Q          the sparse layers' selection query: locality (the locality model's\n"
    "                     streams, default) or real (the layer's own q, infinigen's the\n"
    "                     approximate query a layer ahead; needs --prompt-kv prefill)\n"
    "  --dense-layers N   leading layers kept whole on the GPU (default 2); a sliding-window\n"
    "                     layer keeps only its window on the GPU wherever it is, and only the\n"
    "                     other layers are offloaded (config.offload.layer_kinds)\n"
    "  --host-pool-gb G   pinned host KV pool (default: what the run holds at once, the smaller\n"
    "                     of every request and max-batch longest ones; at most 100 on cuda, 4 on\n"
    "                     cpu)\n"
    "  --hot-slots N|auto GPU blocks per request, layer (and head) (default: the selection's;\n"
    "                     arkvale: 128 pages, its benchmark's page budget); auto: the most\n"
    "                     with which the offload requests the run holds at once (the\n"
    "                     workload's, within the max batch and the host pool) fill the GPU KV\n"
    "                     budget at the longest length, never fewer than the default\n"
    "  --speculate        pulseinfer: speculation with exact correction (the next layer's\n"
    "                     blocks predicted from its approximate query and recalled while this\n"
    "                     layer runs; its exact selection recalls what the prediction missed)\n"
    "  --spec-predictor P the prediction's query where a layer is selected one ahead: approx\n"
    "                     (default: the approximate query; with --query locality the locality\n"
    "                     model's misprediction) or negated (it negated: a deliberately poor\n"
    "                     predictor, for checks)\n"
    "  --spec-from P      input (default), mid or hits: the prediction of layer l+1 made from\n"
    "                     layer l's input, its recall beside the whole layer; once l's\n"
    "                     attention output is in the residual, its recall beside l's MLP; or,\n"
    "                     where l was predicted itself, as soon as its prefetch has landed, from\n"
    "                     an attention over its predicted lists, before its correction lands\n"
    "                     (zero-copy, one lane; elsewhere from mid-layer) (pulseinfer\n"
    "                     --speculate)\n"
    "  --spec-correction C  early (default) or late: with --spec-from hits, a predicted layer's\n"
    "                     correction queued at its exact plan, waiting for the attention over\n"
    "                     the predicted lists only where it takes a predicted block's slot; or\n"
    "                     after that attention, always (for comparison)\n"
    "  --spec-margin F    the prediction selects F more of the budget's blocks by score (in\n"
    "                     [0, 1], default 0): a higher hit rate, fewer corrections, more\n"
    "                     bytes prefetched (pulseinfer --speculate)\n"
    "  --reuse R          resident (blocks kept on the GPU are not recalled again) or none\n"
    "                     (the whole selection recalled every step, InfiniGen's published\n"
    "                     transfer; host-planned engines); default resident, infinigen none\n"
    "  --calib-tokens N   context of the locality calibration (default: from the prompts)\n"
    "  --locality-anchor A  the locality queries' pull toward their first state, in [0, 16]\n"
    "                     (default 0: a free walk): each step keeps its angle (the churn), but\n"
    "                     leans back, so the blocks a request left are selected again, as a\n"
    "                     real model's are (what a hot cache larger than one selection saves)\n"
    "  --spec-overlap S   the approximate query of speculating policies (infinigen, pulseinfer's\n"
    "                     speculation): profile (default: per layer the overlap of its selection\n"
    "                     with the exact one measured on Gemma 3 270M at the run's prediction\n"
    "                     point, from the input or, for --spec-from mid and hits, from the\n"
    "                     predicted lists; mapped by depth), exact\n"
    "                     (the exact query), a number in [0, 1] (that overlap on every layer) or\n"
    "                     a speculation profile FILE.json (workloads/locality_spec.h); its\n"
    "                     mistakes persist over steps as measured (a version-1 FILE, e.g.\n"
    "                     tests/data/speculation_gemma3-270m_v1.json: fresh every step)\n"
    "  pulseinfer (defaults: --selection solohead, --recall-engine gather-scatter):\n"
    "  --no-irq           the offload batch's layers run without interruption (ablation)\n"
    "  --admission A      ioaa (default: the I/O-adaptive model) or fixed:LEN (offload every\n"
    "                     request longer than LEN prompt + output tokens)\n"
    "  --profile F        IOAA profile JSON (pulse profile; default: analytic, from the\n"
    "                     bandwidths measured at start)\n"
    "  --trace F          the schedule as a Chrome-trace / Perfetto timeline JSON (device\n"
    "                     times; plots/timeline.py draws it)\n"
    "  --max-waiting N    waiting requests one IOAA decision takes, the oldest first (default\n"
    "                     32; fewer when fewer batch slots are free)\n"
    "  --self-interleave M  on: with no normal batch, the offload batch runs as two halves\n"
    "                     whose layers interleave (each half's recall beside the other's\n"
    "                     compute); auto: IOAA's step model chooses per step; off (default).\n"
    "                     Host-planned engines, not with --speculate or --no-irq\n";

static const char *const flag_names[RUN_OFF_END - RUN_OFF_BUDGET] = {
    "--budget-tokens",   "--selection",       "--recall-engine",  "--locality-profile",
    "--head-profile",    "--host-pool-gb",    "--dense-layers",   "--prompt-kv",
    "--recall-cap-gbps", "--hot-slots",       "--calib-tokens",   "--no-irq",
    "--admission",       "--profile",         "--trace",          "--recall-cap-fraction",
    "--query",           "--reuse",           "--speculate",      "--spec-predictor",
    "--spec-overlap",    "--max-waiting",     "--spec-margin",    "--self-interleave",
    "--spec-from",       "--spec-correction", "--locality-anchor"};

static const char *flag_name(int code)
{
    return flag_names[code - RUN_OFF_BUDGET];
}

void run_offload_opts_init(struct run_offload_opts *oo)
{
    memset(oo, 0, sizeof *oo);
    oo->budget_tokens = 2048;
    oo->dense_layers = 2;
    oo->selection = NULL; /* the policy's default (policy.offload_selection), else headwise */
    oo->engine = NULL;    /* the policy's default (policy.offload_engine), else per-block */
    oo->prompt_kv = NULL; /* locality for offload policies, synthetic for vanilla */
}

static int one_of(const char *flag, const char *arg, const char *a, const char *b)
{
    if (!strcmp(arg, a) || !strcmp(arg, b)) return 0;
    cli_error("run", "%s: '%s' is not %s or %s", flag, arg, a, b);
    return -1;
}

int run_offload_flag(struct run_offload_opts *oo, int code, const char *arg)
{
    const char *f = flag_name(code);
    if (!oo->first_flag && code != RUN_OFF_PROMPT_KV) oo->first_flag = f; /* vanilla takes it */
    switch (code) {
    case RUN_OFF_BUDGET:
        oo->budget_set = 1;
        return cli_budget("run", f, arg, &oo->budget_tokens);
    case RUN_OFF_DENSE:
        return cli_int("run", f, arg, 0, LOC_MAX_LAYERS, &oo->dense_layers);
    case RUN_OFF_HOT:
        if (!strcmp(arg, "auto")) {
            oo->hot_slots_auto = 1, oo->hot_slots = 0;
            return 0;
        }
        oo->hot_slots_auto = 0;
        return cli_int("run", f, arg, 1, 1 << 20, &oo->hot_slots);
    case RUN_OFF_CALIB:
        return cli_int("run", f, arg, 1, 1 << 22, &oo->calib_tokens);
    case RUN_OFF_HOST_GB:
        return cli_double("run", f, arg, 1e-6, 1e6, &oo->host_pool_gb);
    case RUN_OFF_CAP:
        if (oo->cap_fraction > 0) {
            cli_error("run", "%s and --recall-cap-fraction: give one", f);
            return -1;
        }
        return cli_double("run", f, arg, 1e-3, 1e4, &oo->cap_gbps);
    case RUN_OFF_CAP_FRACTION:
        if (oo->cap_gbps > 0) {
            cli_error("run", "%s and --recall-cap-gbps: give one", f);
            return -1;
        }
        return cli_double("run", f, arg, 1e-3, 1.0, &oo->cap_fraction);
    case RUN_OFF_SELECTION:
        oo->selection = arg;
        if (offload_selection_find(arg) >= 0) return 0;
        cli_error("run", "%s: '%s' is not headwise, solohead or mean", f, arg);
        return -1;
    case RUN_OFF_REUSE:
        oo->reuse = arg;
        return one_of(f, arg, "resident", "none");
    case RUN_OFF_PROMPT_KV:
        oo->prompt_kv = arg;
        if (!strcmp(arg, "locality") || !strcmp(arg, "synthetic") || !strcmp(arg, "prefill"))
            return 0;
        cli_error("run", "%s: '%s' is not locality, synthetic or prefill", f, arg);
        return -1;
    case RUN_OFF_SPEC: {
        oo->spec = arg;
        double v;
        if (!strcmp(arg, "profile") || !strcmp(arg, "exact") || strchr(arg, '/') ||
            strstr(arg, ".json") || !cli_parse_double(arg, 0.0, 1.0, &v))
            return 0;
        cli_error("run", "%s: '%s' is not profile, exact, a number in [0, 1] or a FILE.json", f,
                  arg);
        return -1;
    }
    case RUN_OFF_QUERY:
        oo->query = arg;
        return one_of(f, arg, "locality", "real");
    case RUN_OFF_ENGINE:
        oo->engine = arg;
        if (recall_engine_find(arg) >= 0) return 0;
        cli_error("run",
                  "%s: unknown recall engine '%s' (known: per-block, gather-scatter, "
                  "zero-copy, batch)",
                  f, arg);
        return -1;
    case RUN_OFF_PROFILE:
        oo->profile = arg;
        return 0;
    case RUN_OFF_HEADS:
        oo->heads = arg;
        return 0;
    case RUN_OFF_SPECULATE:
        oo->speculate = 1;
        return 0;
    case RUN_OFF_SPEC_PREDICTOR:
        oo->spec_predictor = arg;
        return one_of(f, arg, "approx", "negated");
    case RUN_OFF_SPEC_FROM:
        oo->spec_from = arg;
        if (!strcmp(arg, "input") || !strcmp(arg, "mid") || !strcmp(arg, "hits")) return 0;
        cli_error("run", "%s: '%s' is not input, mid or hits", f, arg);
        return -1;
    case RUN_OFF_SPEC_CORRECTION:
        oo->spec_correction = arg;
        return one_of(f, arg, "early", "late");
    case RUN_OFF_ANCHOR:
        return cli_double("run", f, arg, 0.0, LOC_MAX_ANCHOR, &oo->anchor);
    case RUN_OFF_SPEC_MARGIN:
        oo->spec_margin_set = 1;
        return cli_double("run", f, arg, 0.0, 1.0, &oo->spec_margin);
    case RUN_OFF_NO_IRQ:
        if (!oo->two_batch_flag) oo->two_batch_flag = f;
        oo->no_irq = 1;
        return 0;
    case RUN_OFF_ADMISSION:
        if (!oo->two_batch_flag) oo->two_batch_flag = f;
        oo->admission = arg;
        long len;
        if (!strcmp(arg, "ioaa") ||
            (!strncmp(arg, "fixed:", 6) && !cli_parse_long(arg + 6, 0, (1L << 30) - 1, &len)))
            return 0;
        cli_error("run", "%s: '%s' is not ioaa or fixed:LEN (LEN >= 0 tokens)", f, arg);
        return -1;
    case RUN_OFF_IOAA_PROFILE:
        if (!oo->two_batch_flag) oo->two_batch_flag = f;
        oo->ioaa_profile = arg;
        return 0;
    case RUN_OFF_TRACE:
        if (!oo->two_batch_flag) oo->two_batch_flag = f;
        oo->trace = arg;
        return 0;
    case RUN_OFF_SELF_INTERLEAVE:
        if (!oo->two_batch_flag) oo->two_batch_flag = f;
        oo->self_interleave = arg;
        if (!strcmp(arg, "on") || !strcmp(arg, "auto") || !strcmp(arg, "off")) return 0;
        cli_error("run", "%s: '%s' is not on, auto or off", f, arg);
        return -1;
    case RUN_OFF_MAX_WAITING: {
        if (!oo->two_batch_flag) oo->two_batch_flag = f;
        long v;
        if (cli_parse_long(arg, 1, 4096, &v)) {
            cli_error("run", "%s: '%s' is not a count of requests in 1..4096", f, arg);
            return -1;
        }
        oo->max_waiting = (int)v;
        return 0;
    }
    }
    return -1;
}

/* --spec-overlap into the source's params (NULL: profile). 0, or -1 after a message. */
static int spec_option(struct run_offload *ro, const char *arg)
{
    struct locality_source_params *sp = &ro->src;
    char err[512];
    if (!arg || !strcmp(arg, "profile")) {
        sp->spec_mode = LOC_SPEC_PROFILE;
    } else if (!strcmp(arg, "exact")) {
        sp->spec_mode = LOC_SPEC_EXACT;
    } else if (!cli_parse_double(arg, 0.0, 1.0, &sp->spec_overlap)) {
        sp->spec_mode = LOC_SPEC_FIXED;
    } else if (locality_spec_profile_read(arg, &ro->spec_profile, err, sizeof err) == PULSE_OK) {
        sp->spec_mode = LOC_SPEC_PROFILE;
        sp->spec_profile = &ro->spec_profile;
    } else {
        cli_error("run", "--spec-overlap: %s", err);
        return -1;
    }
    return 0;
}

/* SoloHead's selectors from a MAM profile of model m. */
static int read_selectors(struct run_offload *ro, const char *path, const struct model_config *m)
{
    struct mam_profile mp;
    char err[512];
    if (mam_profile_read(path, m, &mp, err, sizeof err) != PULSE_OK) {
        cli_error("run", "--head-profile: %s", err);
        return -1;
    }
    int sel[LOC_MAX_LAYERS];
    mam_profile_selectors(&mp, 0, sel);
    for (int l = 0; l < m->n_layers; l++)
        ro->selector[l] = sel[l];
    mam_profile_free(&mp);
    ro->p.selector = ro->selector;
    return 0;
}

/* Host pool: the flag, else the most the run can hold at once, min(every request of the
 * workload, max_batch requests of the longest), within [one request, the cap]. Pinning runs at
 * a few GB/s, so a pool larger than the run needs costs seconds for nothing. */
static int host_pool(struct run_offload *ro, const struct run_offload_opts *oo,
                     const struct model_config *m, const struct backend *be,
                     const struct workload *w, const struct kv_cache_params *kp)
{
    const size_t one = offload_request_host_bytes(&ro->p, m, kp->page_size, kp->max_tokens);
    if (oo->host_pool_gb > 0) {
        ro->p.host_pool_bytes = (size_t)(oo->host_pool_gb * 1e9);
        if (one <= ro->p.host_pool_bytes) return 0;
        cli_error("run",
                  "--host-pool-gb: %g GB cannot hold even one request: the longest (%d tokens "
                  "of %s) needs %.4f GB",
                  oo->host_pool_gb, kp->max_tokens, m->name, one / 1e9);
        return -1;
    }
    const double cap = be->mem == MEM_DEVICE ? 100e9 : 4e9;
    double every = 0;
    for (int i = 0; i < w->n; i++)
        every += (double)offload_request_host_bytes(&ro->p, m, kp->page_size,
                                                    w->reqs[i].prompt_len + w->reqs[i].output_len);
    const double concurrent = (double)one * kp->max_requests;
    const double at_once = every < concurrent ? every : concurrent;
    ro->p.host_pool_bytes = (size_t)(at_once < cap ? at_once : cap > one ? cap : one);
    return 0;
}

/* --hot-slots auto: the hot cache grown into the GPU KV budget the offload requests leave. n =
 * the requests the run can offload at once (the workload's, within the max batch and what the
 * host pool holds at the longest length); the slots a list are the most with which n requests of
 * the longest length fit the budget (offload_request_kv_bytes: dense layers, window rings, hot
 * slots and tail pages), from the default (the selection's, or the policy's cache) up to the
 * longest request's blocks (zero-copy's device plan: at most HOT_PLAN_MAX_SLOTS). A budget that cannot hold n at the default keeps the default
 * (admission then holds fewer). Sets p->hot_slots and p->hot_slots_auto = n. */
static void hot_slots_fill(struct offload_params *p, const struct model_config *m,
                           const struct workload *w, const struct kv_cache_params *kp)
{
    const int ps = kp->page_size;
    const size_t one = offload_request_host_bytes(p, m, ps, kp->max_tokens);
    long n = PULSE_MIN((long)w->n, (long)kp->max_requests);
    n = PULSE_MAX(1L, PULSE_MIN(n, (long)(p->host_pool_bytes / one)));
    struct query_source_shape sh;
    offload_source_shape(p, m, ps, &sh); /* its hot_slots: the default */
    long lo = sh.hot_slots, hi = PULSE_CEIL_DIV(kp->max_tokens, ps);
    if (p->engine == RECALL_ZERO_COPY) hi = PULSE_MIN(hi, (long)HOT_PLAN_MAX_SLOTS); /* its plan */
    struct offload_params t = *p;
    while (lo < hi) { /* the most slots that fit; lo always fits or is the default */
        const long mid = lo + (hi - lo + 1) / 2;
        t.hot_slots = (int)mid;
        if ((double)n * (double)offload_request_kv_bytes(&t, m, kp, kp->max_tokens) <=
            (double)kp->budget_bytes)
            lo = mid;
        else
            hi = mid - 1;
    }
    p->hot_slots = (int)lo;
    p->hot_slots_auto = (int)n;
}

/* The IOAA profile at path, read once here so that a file pulseinfer cannot use is a usage
 * error before the work: readable, and made for this run's model, backend, recall engine and
 * layer count (a profile of another says so). 0, or -1 after a message. */
static int check_ioaa_profile(const char *path, const struct model_config *m,
                              const struct backend *be, enum recall_engine engine)
{
    struct ioaa_profile_data d;
    memset(&d, 0, sizeof d);
    char err[512];
    int bad = ioaa_profile_load(path, &d, err, sizeof err) != PULSE_OK;
    if (bad) {
        cli_error("run", "--profile: %s", err);
    } else {
        const struct {
            const char *what, *have, *want;
        } f[] = {{"model", d.info.model, m->name},
                 {"backend", d.info.backend, be->name},
                 {"recall engine", d.info.recall_engine, recall_engine_name(engine)}};
        for (size_t i = 0; i < PULSE_ARRAY_LEN(f) && !bad; i++)
            if ((bad = strcmp(f[i].have, f[i].want) != 0))
                cli_error("run", "--profile: %s: made for %s %s, this run's is %s", path,
                          f[i].what, f[i].have, f[i].want);
        if (!bad && (bad = d.prof.n_layers != m->n_layers))
            cli_error("run", "--profile: %s: made for %d layers, %s has %d", path,
                      d.prof.n_layers, m->name, m->n_layers);
    }
    ioaa_profile_data_free(&d);
    return bad ? -1 : 0;
}

/* The flags whose range depends on the model and the workload, named in the message; the
 * budget in *budget (the default rounded down to the block size), the hot slots in *hot (the
 * flag, else the policy's cache_pages when more than one step selects, else 0). */
static int check_flags(const struct run_offload_opts *oo, const struct model_config *m,
                       const struct kv_cache_params *kp, long cache_pages, long *budget, long *hot)
{
    const int ps = kp->page_size;
    *budget = oo->budget_set ? oo->budget_tokens : oo->budget_tokens / ps * ps;
    if (cli_budget_blocks("run", "--budget-tokens", *budget, ps, "--page-size")) return -1;
    if (oo->dense_layers >= m->n_layers) {
        cli_error("run", "--dense-layers: %ld leaves no sparse layer (%s has %d layers)",
                  oo->dense_layers, m->name, m->n_layers);
        return -1;
    }
    const long blocks = PULSE_CEIL_DIV(kp->max_tokens, ps);
    const long sel = PULSE_MIN(blocks, 1 + 2 + 1 + *budget / ps);
    /* the policy's cache when larger than the selection, within the longest request */
    *hot = oo->hot_slots ? oo->hot_slots : cache_pages > sel ? PULSE_MIN(cache_pages, blocks) : 0;
    if (oo->hot_slots && (oo->hot_slots < sel || oo->hot_slots > blocks)) {
        cli_error("run",
                  "--hot-slots: %ld is not in [%ld, %ld] (the blocks one step selects .. the "
                  "longest request's blocks)",
                  oo->hot_slots, sel, blocks);
        return -1;
    }
    return 0;
}

/* The params the flags and the workload give directly. */
static void fill_params(struct run_offload *ro, const struct run_offload_opts *oo,
                        const struct policy *pol, const struct workload *w, long budget, long hot)
{
    struct offload_params *p = &ro->p;
    p->budget_tokens = (int)budget;
    p->n_dense = (int)oo->dense_layers;
    p->hot_slots = (int)hot;
    ro->src.calib_tokens = (int)oo->calib_tokens;
    ro->src.anchor = oo->anchor;
    const char *sel = oo->selection            ? oo->selection
                      : pol->offload_selection ? pol->offload_selection
                                               : "headwise";
    const char *eng = oo->engine            ? oo->engine
                      : pol->offload_engine ? pol->offload_engine
                                            : "per-block";
    p->selection = offload_selection_find(sel);
    p->engine = (enum recall_engine)recall_engine_find(eng);
    const char *kv = oo->prompt_kv ? oo->prompt_kv : "locality";
    p->prompt_kv = !strcmp(kv, "synthetic") ? OFFLOAD_KV_SYNTHETIC
                   : !strcmp(kv, "prefill") ? OFFLOAD_KV_PREFILL
                                            : OFFLOAD_KV_LOCALITY;
    p->query = oo->query && !strcmp(oo->query, "real") ? OFFLOAD_QUERY_REAL : OFFLOAD_QUERY_LOCALITY;
    p->cap_gbps = oo->cap_gbps;
    p->schedule = oo->speculate ? pol->offload_spec_schedule : pol->offload_schedule;
    p->spec_predictor = oo->spec_predictor && !strcmp(oo->spec_predictor, "negated")
                            ? OFFLOAD_SPEC_NEGATED
                            : OFFLOAD_SPEC_APPROX;
    p->spec_margin = oo->spec_margin;
    p->spec_correct_early = !oo->spec_correction || !strcmp(oo->spec_correction, "early");
    p->spec_from = !oo->spec_from                   ? OFFLOAD_SPEC_FROM_INPUT
                   : !strcmp(oo->spec_from, "mid")  ? OFFLOAD_SPEC_FROM_MID
                   : !strcmp(oo->spec_from, "hits") ? OFFLOAD_SPEC_FROM_HITS
                                                    : OFFLOAD_SPEC_FROM_INPUT;
    ro->src.spec_from = p->spec_from == OFFLOAD_SPEC_FROM_MID    ? LOC_SPEC_FROM_MID
                        : p->spec_from == OFFLOAD_SPEC_FROM_HITS ? LOC_SPEC_FROM_HITS
                                                                 : LOC_SPEC_FROM_INPUT;
    p->refetch = oo->reuse ? !strcmp(oo->reuse, "none") : pol->offload_refetch;
    p->verify_steps = pulse_diag_switch(PULSE_DIAG_OFFLOAD_VERIFY);
    int64_t prompt = 0, out = 0;
    for (int i = 0; i < w->n; i++)
        prompt += w->reqs[i].prompt_len, out += w->reqs[i].output_len;
    ro->src.typical_tokens = w->n ? (int)(prompt / w->n) : 0;
    p->max_steps = out > 0 ? out : 1;
}

int run_offload_resolve(struct run_offload *ro, const struct run_offload_opts *oo,
                        const struct runtime_opts *rt, const struct policy *pol,
                        const struct model_config *m, const struct backend *be,
                        const struct workload *w, const struct kv_cache_params *kp, uint64_t seed)
{
    struct offload_params *p = &ro->p;
    long budget, hot;
    if (check_flags(oo, m, kp, pol->offload_cache_pages, &budget, &hot)) return -1;
    if (oo->speculate && !pol->offload_spec_schedule) {
        cli_error("run", "--speculate: %s has no speculation (pulseinfer has)", pol->name);
        return -1;
    }
    const struct offload_schedule *sched =
        oo->speculate ? pol->offload_spec_schedule : pol->offload_schedule;
    if (sched->prefetch && oo->reuse && !strcmp(oo->reuse, "none")) {
        cli_error("run", "--reuse none: not with --speculate (its exact selection reuses the "
                         "blocks the prefetch brought)");
        return -1;
    }
    if (oo->hot_slots_auto && (oo->reuse ? !strcmp(oo->reuse, "none") : pol->offload_refetch)) {
        cli_error("run", "--hot-slots auto: not with --reuse none (every step fetches its whole "
                         "selection: no cache to grow)");
        return -1;
    }
    if (oo->anchor > 0 && oo->query && !strcmp(oo->query, "real")) {
        cli_error("run", "--locality-anchor: only with the locality query (not --query real)");
        return -1;
    }
    if (oo->spec_margin_set && !sched->prefetch) {
        cli_error("run", "--spec-margin: only with a prediction beside the exact selection "
                         "(pulseinfer --speculate)");
        return -1;
    }
    if (oo->spec_from && !sched->prefetch) {
        cli_error("run", "--spec-from: only with a prediction beside the exact selection "
                         "(pulseinfer --speculate)");
        return -1;
    }
    if (oo->spec_predictor && !sched->lookahead) {
        cli_error("run", "--spec-predictor: only where a layer is selected one ahead (infinigen, "
                         "pulseinfer --speculate)");
        return -1;
    }
    offload_params_init(p, kp->max_requests, kp->max_tokens, seed);
    runtime_opts_offload(rt, p);
    memset(&ro->src, 0, sizeof ro->src);
    ro->src.model = m->name;
    fill_params(ro, oo, pol, w, budget, hot);
    if (p->spec_from == OFFLOAD_SPEC_FROM_HITS && p->engine != RECALL_ZERO_COPY) {
        cli_error("run", "--spec-from hits: only with --recall-engine zero-copy (the predicted "
                         "lists' pages are planned on the device)");
        return -1;
    }
    if (p->attend_recall == OFFLOAD_ATTEND_ON &&
        !(p->engine == RECALL_ZERO_COPY && p->cap_gbps == 0)) {
        cli_error("run", "--attend-recall on: only with --recall-engine zero-copy, uncapped (its "
                         "plan's host pieces are made on the device)");
        return -1;
    }
    if (oo->spec_correction && p->spec_from != OFFLOAD_SPEC_FROM_HITS) {
        cli_error("run", "--spec-correction: only with --spec-from hits (its correction may "
                         "go before the attention over the predicted lists)");
        return -1;
    }
    if (oo->self_interleave && strcmp(oo->self_interleave, "off")) { /* pulseinfer's checks */
        if (p->spec_from == OFFLOAD_SPEC_FROM_HITS) {
            cli_error("run", "--spec-from hits: not with --self-interleave %s (one lane)",
                      oo->self_interleave);
            return -1;
        }
        if (oo->no_irq) {
            cli_error("run", "--self-interleave: '%s' needs IRQ (not with --no-irq)",
                      oo->self_interleave);
            return -1;
        }
    }
    char err[512];
    if (oo->profile) {
        if (locality_profile_read(oo->profile, &ro->profile, err, sizeof err) != PULSE_OK) {
            cli_error("run", "--locality-profile: %s", err);
            return -1;
        }
        ro->src.profile = &ro->profile;
    }
    if (spec_option(ro, oo->spec)) return -1;
    if (oo->ioaa_profile && check_ioaa_profile(oo->ioaa_profile, m, be, p->engine)) return -1;
    if (oo->heads) {
        if (p->selection != OFFLOAD_SOLOHEAD) {
            cli_error("run", "--head-profile: only with --selection solohead");
            return -1;
        }
        if (read_selectors(ro, oo->heads, m)) return -1;
    }
    if (offload_params_check(p, m, kp, err, sizeof err) != PULSE_OK) {
        cli_error("run", "%s", err);
        return -1;
    }
    struct query_source_shape sh;
    offload_source_shape(p, m, kp->page_size, &sh);
    if (locality_profile_fits(ro->src.profile, &sh, err, sizeof err) < 0) {
        cli_error("run", "%s", err);
        return -1;
    }
    size_t need = offload_request_kv_bytes(p, m, kp, kp->max_tokens);
    if (need > kp->budget_bytes) {
        cli_error("run",
                  "--kv-budget-gb: %g GB cannot hold even one request: the longest (%d tokens "
                  "of %s) needs %.4f GB of GPU KV as an offload request",
                  kp->budget_bytes / 1e9, kp->max_tokens, m->name, need / 1e9);
        return -1;
    }
    if (host_pool(ro, oo, m, be, w, kp)) return -1;
    if (oo->hot_slots_auto) hot_slots_fill(p, m, w, kp);
    return 0;
}
