/* pulse profile-heads: the MAM head profile of a model (DESIGN.md section 5, mam.h). Runs real
 * decode steps (random weights, synthetic prompt KV as pulse bench does) with a probe on every
 * layer, and writes the per-(layer, KV head) MAM table that SoloHead reads its selectors from. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "engine.h"
#include "kv_cache.h"
#include "mam.h"
#include "runtime_opts.h"
#include "select.h"

static const char usage[] =
    "usage: pulse profile-heads --model NAME --out FILE.json [options]\n"
    "  Runs calibration decode steps and writes, for each layer and KV head, the mean fraction\n"
    "  of the exact attention mass of all the layer's query heads that the head's top-k blocks\n"
    "  (Quest scores, sink, window and tail always in) cover: its MAM. SoloHead takes the\n"
    "  highest-MAM head per layer (selector), reversed SoloHead the lowest.\n"
    "  --model NAME         built-in model config (see pulse models)\n"
    "  --backend B          cpu, cuda or auto (default auto)\n"
    "  --prompt-len N       synthetic prompt tokens per entry (default 4096)\n"
    "  --steps N            calibration decode steps (default 16)\n"
    "  --batch N            entries decoded together (default 1)\n"
    "  --budget-tokens N    top-k budget besides sink, window and tail (default 2048; a\n"
    "                       multiple of the block size)\n"
    "  --block-size N       tokens per KV block (default 16)\n"
    "  --sink N, --window N forced leading / pre-tail blocks (default 1, 2)\n"
    "  --seed S             weights and synthetic KV (default 1)\n"
    "  --out FILE           the profile JSON (required)\n"
    "exit: 0 ok, 1 run failed, 2 bad usage, 3 out of memory\n";

struct prof_opts {
    const char *backend, *model, *out;
    long prompt, steps, batch, budget_tokens, block_size, sink, window;
    uint64_t seed;
    struct runtime_opts rt; /* the engine's tuning (runtime_opts.h: RT_ENGINE) */
};

static int parse(int argc, char **argv, struct prof_opts *o)
{
    static const struct option own[] = {{"model", required_argument, 0, 'm'},
                                        {"backend", required_argument, 0, 'b'},
                                        {"prompt-len", required_argument, 0, 'p'},
                                        {"steps", required_argument, 0, 'n'},
                                        {"batch", required_argument, 0, 'B'},
                                        {"budget-tokens", required_argument, 0, 'k'},
                                        {"block-size", required_argument, 0, 'P'},
                                        {"sink", required_argument, 0, 'S'},
                                        {"window", required_argument, 0, 'W'},
                                        {"seed", required_argument, 0, 's'},
                                        {"out", required_argument, 0, 'o'},
                                        {"help", no_argument, 0, 'h'},
                                        {0, 0, 0, 0}};
    *o = (struct prof_opts){.backend = "auto",
                            .prompt = 4096,
                            .steps = 16,
                            .batch = 1,
                            .budget_tokens = 2048,
                            .block_size = 16,
                            .sink = 1,
                            .window = 2,
                            .seed = 1};
    runtime_opts_init(&o->rt);
    const char *C = "profile-heads";
    struct option opts[48];
    PULSE_CHECK(runtime_opts_getopt(own, RT_ENGINE, opts, 48) == 0, "profile-heads: options");
    int c;
    opterr = 0;
    optind = 1;
    struct cli_seen seen = {0};
    while ((c = cli_getopt(C, argc, argv, opts, &seen)) != -1) {
        int bad = 0;
        if (runtime_opts_code(c)) {
            if (runtime_opts_flag(C, &o->rt, c, optarg)) return -1;
            continue;
        }
        switch (c) {
        case 'm':
            o->model = optarg;
            break;
        case 'b':
            o->backend = optarg;
            break;
        case 'o':
            o->out = optarg;
            break;
        case 'p':
            bad = cli_int(C, "--prompt-len", optarg, 1, 1 << 20, &o->prompt);
            break;
        case 'n':
            bad = cli_int(C, "--steps", optarg, 1, 100000, &o->steps);
            break;
        case 'B':
            bad = cli_int(C, "--batch", optarg, 1, 4096, &o->batch);
            break;
        case 'k':
            bad = cli_budget(C, "--budget-tokens", optarg, &o->budget_tokens);
            break;
        case 'P':
            bad = cli_int(C, "--block-size", optarg, 1, 4096, &o->block_size);
            break;
        case 'S':
            bad = cli_int(C, "--sink", optarg, 0, 1 << 20, &o->sink);
            break;
        case 'W':
            bad = cli_int(C, "--window", optarg, 0, 1 << 20, &o->window);
            break;
        case 's':
            bad = cli_u64(C, "--seed", optarg, INT64_MAX, &o->seed);
            break;
        case 'h':
            fputs(usage, stdout);
            runtime_opts_usage(stdout, RT_ENGINE, &o->rt);
            return 1;
        default:
            cli_unknown_flag(C, argc, argv);
            return -1;
        }
        if (bad) return -1;
    }
    if (cli_no_extra_args(C, argc, argv)) return -1;
    static const char *const out_flag[] = {"--out"};
    if (cli_outputs(C, 1, out_flag, &o->out)) return -1;
    if (!o->model) {
        cli_error(C, "--model: required (known: %s)", model_config_names());
        return -1;
    }
    if (!o->out) {
        cli_error(C, "--out: required (the profile JSON to write)");
        return -1;
    }
    if (cli_budget_blocks(C, "--budget-tokens", o->budget_tokens, o->block_size, "--block-size"))
        return -1;
    long max_tokens = o->prompt + o->steps + 1;
    if (PULSE_CEIL_DIV(max_tokens, o->block_size) > SELECT_MAX_BLOCKS) {
        cli_error(C, "--prompt-len: %ld tokens plus %ld steps exceed %d blocks of %ld tokens",
                  o->prompt, o->steps, SELECT_MAX_BLOCKS, o->block_size);
        return -1;
    }
    return 0;
}

static void print_table(const struct mam_profile *pr)
{
    int hi[pr->n_layers], lo[pr->n_layers];
    mam_profile_selectors(pr, 0, hi);
    mam_profile_selectors(pr, 1, lo);
    printf("%-6s %8s %9s %8s %9s %9s\n", "layer", "selector", "MAM", "lowest", "MAM", "mean");
    for (int l = 0; l < pr->n_layers; l++) {
        const double *row = pr->mam + (size_t)l * pr->n_kv_heads;
        double mean = 0.0;
        for (int h = 0; h < pr->n_kv_heads; h++)
            mean += row[h] / pr->n_kv_heads;
        printf("%-6d %8d %9.5f %8d %9.5f %9.5f\n", l, hi[l], row[hi[l]], lo[l], row[lo[l]], mean);
    }
}

/* Decodes o->steps steps of o->batch entries with the probe on every layer. */
static int calibrate(struct engine *e, const struct prof_opts *o, const struct model_config *m,
                     struct mam_acc *acc, struct mam_probe **probe, char *err, size_t errlen)
{
    const struct backend *be = engine_model(e)->be;
    const struct kctx *ctx = engine_ctx(e);
    int reserved = (int)(o->prompt + o->steps + 1);
    struct kv_cache_params kp = {m->n_layers, m->n_kv_heads, m->head_dim, (int)o->block_size,
                                 0,           (int)o->batch, reserved};
    kp.budget_bytes = (size_t)o->batch * kv_cache_params_request_bytes(&kp, reserved);
    struct kv_cache *kv = kv_cache_create(&kp, be, ctx, err, errlen);
    if (!kv) return EXIT_OOM;
    int code = 0;
    struct batch *bt = batch_create(e);
    struct batch_entry *en = mem_alloc(MEM_HOST, sizeof *en * (size_t)o->batch, "entries");
    if (!bt || !en) snprintf(err, errlen, "out of memory for the batch");
    if (!bt || !en || !(*probe = mam_probe_create(acc, be, ctx, 0, err, errlen))) {
        code = EXIT_OOM;
        goto out;
    }
    for (int b = 0; b < o->batch; b++) {
        int slot;
        PULSE_CHECK(kv_cache_admit(kv, reserved, &slot) == PULSE_OK, "profile admission");
        en[b] = (struct batch_entry){slot, b, (int)o->prompt, reserved, engine_first_token(e, b)};
    }
    batch_set(e, bt, kv, en, (int)o->batch);
    engine_fill_prompt(e, bt, kv);
    struct engine_layer_hook hook = mam_probe_hook(*probe);
    batch_set_hook(bt, &hook);
    for (int s = 0; s < o->steps; s++)
        engine_step(e, bt, kv);
    be->sync(ctx);
    batch_set_hook(bt, NULL);
out:
    mem_free(MEM_HOST, en, sizeof *en * (size_t)o->batch);
    batch_free(e, bt);
    kv_cache_free(kv);
    return code;
}

int cmd_profile_heads(int argc, char **argv)
{
    const char *C = "profile-heads";
    struct prof_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc > 0 ? 0 : EXIT_USAGE;
    const struct model_config *m = cli_model(C, o.model);
    if (!m) return EXIT_USAGE;
    const struct backend *be = cli_backend(C, o.backend);
    if (!be) return EXIT_USAGE;
    char err[512];
    int max_tokens = (int)(o.prompt + o.steps + 1);
    struct mam_params mp = {m->n_layers, m->n_heads, m->n_kv_heads, m->head_dim, (int)o.block_size,
                            (int)(o.budget_tokens / o.block_size), (int)o.sink, (int)o.window,
                            (int)o.batch, max_tokens, 0.0f,
                            /* one KV head (Gemma 3): a list per query head */
                            m->n_kv_heads == 1, m->sliding_window > 0 ? m->sliding_pattern : 0};
    struct mam_acc *acc = mam_acc_create(&mp, err, sizeof err);
    if (!acc) { /* the shape was checked in parse: what is left is host memory */
        cli_error(C, "%s", err);
        return EXIT_OOM;
    }
    struct engine_params ep = {.cfg = m,
                               .be = be,
                               .seed = o.seed,
                               .max_batch = (int)o.batch,
                               .max_tokens = max_tokens,
                               .use_graph = 0};
    runtime_opts_engine(&o.rt, &ep);
    struct engine *e = engine_create(&ep, err, sizeof err);
    struct mam_probe *probe = NULL;
    struct mam_profile pr = {0};
    double t0 = pulse_now();
    int code = e ? calibrate(e, &o, m, acc, &probe, err, sizeof err) : EXIT_OOM;
    if (code) {
        cli_error(C, "%s", err);
        goto out;
    }
    double secs = pulse_now() - t0;
    if (mam_acc_finalize(acc, &pr, err, sizeof err) != PULSE_OK) {
        cli_error(C, "%s", err);
        code = 1;
        goto out;
    }
    snprintf(pr.meta.model, sizeof pr.meta.model, "%s", m->name);
    snprintf(pr.meta.backend, sizeof pr.meta.backend, "%s", be->name);
    pr.meta.steps = (int)o.steps;
    pr.meta.prompt = (int)o.prompt;
    pr.meta.batch = (int)o.batch;
    pr.meta.seed = o.seed;
    printf("%s %s: MAM over %ld steps x %ld entries x %d query heads, prompt %ld, budget %ld "
           "tokens (%ld-token blocks, sink %ld, window %ld); %.2f s, %.1f MB staged\n",
           be->name, m->name, o.steps, o.batch, m->n_heads, o.prompt, o.budget_tokens, o.block_size,
           o.sink, o.window, secs, mam_probe_staged_bytes(probe) / 1e6);
    print_table(&pr);
    if (mam_profile_write(&pr, o.out, err, sizeof err) != PULSE_OK) {
        cli_error(C, "--out: %s", err);
        code = 1;
    }
out:
    mam_profile_free(&pr);
    mam_probe_free(probe);
    engine_free(e);
    mam_acc_free(acc);
    return code;
}
