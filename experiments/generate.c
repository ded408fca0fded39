/* pulse generate: greedy continuation of a prompt with a built-in model or real weights (a Hugging
 * Face checkpoint directory or a llama/qwen3/gemma3 GGUF). The prompt is prefilled in chunks
 * (engine_prefill: dense causal attention, K/V into the cache), then max-new-tokens tokens are
 * decoded. Prints the ids (and text when the model file carries a tokenizer) and can write JSON
 * with the last position's logits. --token-by-token runs the prompt through the decode step
 * one token at a time instead (what the prefill must equal). */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accuracy/sparse_attn.h"
#include "cli.h"
#include "common.h"
#include "results.h"
#include "session.h"

#define CMD "generate"
#define MAX_PROMPT (1 << 20)

static const char usage[] =
    "usage: pulse generate --model NAME|DIR|FILE.gguf (--prompt TEXT | --prompt-ids 1,2,3)\n"
    "                      [--max-new-tokens N] [--backend cpu|cuda|auto] [--policy P]\n"
    "                      [--budget-tokens N] [--selector H]\n"
    "                      [--seed S] [--out FILE.json] [--token-by-token]\n"
    "  Greedy continuation. --prompt needs a model file with a SentencePiece tokenizer in it.\n"
    "  --out writes the prompt and generated ids, the text, and the last position's logits.\n"
    "  --policy: vanilla (= full) or a sparse policy for the decoded tokens' global layers\n"
    "  (headwise, queryhead, solohead, solohead-q, reversed, reversed-q, infinigen, mean,\n"
    "  infinigen-solohead; accuracy/sparse_attn.h) with a budget of --budget-tokens (default\n"
    "  2048) besides 1 sink and 2 window blocks; solohead, reversed and infinigen-solohead use\n"
    "  KV head --selector (default 0) in every layer, solohead-q and reversed-q query head\n"
    "  --selector (pulse accuracy picks them per layer from a measured MAM profile).\n";

struct gen_opts {
    const char *model, *prompt, *prompt_ids, *backend, *policy, *out;
    long max_new, budget, selector;
    uint64_t seed;
    int token_by_token, sparse;
    struct runtime_opts rt; /* the engine's tuning (runtime_opts.h: RT_ENGINE) */
};

static int parse(int argc, char **argv, struct gen_opts *o)
{
    static const struct option own[] = {{"model", required_argument, 0, 'm'},
                                        {"prompt", required_argument, 0, 'p'},
                                        {"prompt-ids", required_argument, 0, 'i'},
                                        {"max-new-tokens", required_argument, 0, 'n'},
                                        {"backend", required_argument, 0, 'b'},
                                        {"policy", required_argument, 0, 'P'},
                                        {"seed", required_argument, 0, 's'},
                                        {"out", required_argument, 0, 'o'},
                                        {"token-by-token", no_argument, 0, 't'},
                                        {"budget-tokens", required_argument, 0, 'B'},
                                        {"selector", required_argument, 0, 'S'},
                                        {"help", no_argument, 0, 'h'},
                                        {0, 0, 0, 0}};
    *o = (struct gen_opts){
        .backend = "auto", .policy = "vanilla", .max_new = 16, .seed = 1, .budget = 2048};
    runtime_opts_init(&o->rt);
    struct option opts[48];
    PULSE_CHECK(runtime_opts_getopt(own, RT_ENGINE, opts, 48) == 0, CMD ": the options' table");
    int c;
    struct cli_seen seen = {0}; /* a flag with a value given twice is refused */
    opterr = 0;
    optind = 1;
    while ((c = cli_getopt(CMD, argc, argv, opts, &seen)) != -1) {
        if (runtime_opts_code(c)) {
            if (runtime_opts_flag(CMD, &o->rt, c, optarg)) return -1;
            continue;
        }
        switch (c) {
        case 'm':
            o->model = optarg;
            break;
        case 'p':
            o->prompt = optarg;
            break;
        case 'i':
            o->prompt_ids = optarg;
            break;
        case 'b':
            o->backend = optarg;
            break;
        case 'P':
            o->policy = optarg;
            break;
        case 'o':
            o->out = optarg;
            break;
        case 't':
            o->token_by_token = 1;
            break;
        case 'B':
            if (cli_budget(CMD, "--budget-tokens", optarg, &o->budget)) return -1;
            break;
        case 'S':
            if (cli_int(CMD, "--selector", optarg, 0, 1024, &o->selector)) return -1;
            break;
        case 'n':
            if (cli_int(CMD, "--max-new-tokens", optarg, 1, 1 << 20, &o->max_new)) return -1;
            break;
        case 's':
            if (cli_u64(CMD, "--seed", optarg, INT64_MAX, &o->seed)) return -1;
            break;
        case 'h':
            fputs(usage, stdout);
            runtime_opts_usage(stdout, RT_ENGINE, &o->rt);
            return 1;
        default:
            cli_unknown_flag(CMD, argc, argv);
            return -1;
        }
    }
    if (cli_no_extra_args(CMD, argc, argv)) return -1;
    static const char *const out_flag[] = {"--out"};
    if (cli_outputs(CMD, 1, out_flag, &o->out)) return -1;
    if (!o->model) {
        cli_error(CMD, "--model is required (a built-in name, a checkpoint directory or a .gguf)");
        return -1;
    }
    if (!o->prompt == !o->prompt_ids) {
        cli_error(CMD, "give exactly one of --prompt and --prompt-ids");
        return -1;
    }
    o->sparse = strcmp(o->policy, "vanilla") ? sparse_policy_find(o->policy) : SPARSE_FULL;
    if (o->sparse < 0) {
        cli_error(CMD, "--policy: '%s' is not available here (known: vanilla, %s)", o->policy,
                  sparse_policy_names());
        return -1;
    }
    if (cli_budget_blocks(CMD, "--budget-tokens", o->budget, 16, NULL)) return -1;
    return 0;
}

/* Parses "1,2,3" into ids (each in [0, vocab)); returns the count or -1 after an error. */
static long parse_ids(const char *s, int vocab, int32_t *ids, long max)
{
    long n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',') || v < 0 || v >= vocab || n >= max) {
            cli_error(CMD, "--prompt-ids: '%s' is not a list of token ids in [0, %d)", s, vocab);
            return -1;
        }
        ids[n++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (!n) cli_error(CMD, "--prompt-ids: empty list");
    return n ? n : -1;
}

/* The sparse policy of --policy on the decoded tokens (after the dense prefill). */
struct gen_sparse {
    struct sparse_attn *s;
    int32_t *selector;
    struct sparse_stats st;
};

static int sparse_start(struct session *ss, const struct gen_opts *o, struct gen_sparse *g,
                        char *err, size_t errlen)
{
    const struct model_config *m = ss->cfg;
    g->selector = mem_alloc(MEM_HOST, sizeof(int32_t) * m->n_layers, "selector");
    if (!g->selector) return PULSE_ERR_NOMEM;
    for (int l = 0; l < m->n_layers; l++)
        g->selector[l] = (int32_t)o->selector;
    g->s = sparse_attn_create(ss->e, ss->kv, 16, ss->max_tokens, 1.0, err, errlen);
    if (!g->s) return PULSE_ERR_NOMEM;
    struct sparse_params p = {o->sparse, (int)o->budget, 1, 2, g->selector, 0.0, SPARSE_SPEC_INPUT};
    int rc = sparse_attn_configure(g->s, &p, ss->slot, err, errlen);
    if (rc != PULSE_OK) return rc;
    struct engine_layer_hook h = sparse_attn_hook(g->s);
    batch_set_hook(ss->bt, &h);
    return PULSE_OK;
}

static void gen_sparse_free(struct gen_sparse *g, const struct model_config *m)
{
    sparse_attn_free(g->s);
    if (g->selector) mem_free(MEM_HOST, g->selector, sizeof(int32_t) * m->n_layers);
}

int cmd_generate(int argc, char **argv)
{
    struct gen_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc > 0 ? 0 : EXIT_USAGE;
    const struct backend *be = cli_backend(CMD, o.backend);
    if (!be) return EXIT_USAGE;
    char err[512] = "";
    struct session ss;
    if (session_config(&ss, o.model, err, sizeof err) != PULSE_OK) {
        cli_error(CMD, "--model: %s", err);
        return EXIT_USAGE;
    }
    const struct model_config *m = ss.cfg;
    if (model_config_check_backend(m, be->name, err, sizeof err) != PULSE_OK) {
        cli_error(CMD, "--model: %s", err);
        session_close(&ss);
        return EXIT_USAGE;
    }
    char tok_err[512] = ""; /* why there is no tokenizer, when loading one failed */
    if (session_tokenizer(&ss, tok_err, sizeof tok_err) != PULSE_OK) ss.tok = NULL;
    int32_t *ids = mem_alloc(MEM_HOST, sizeof(int32_t) * (MAX_PROMPT + o.max_new), "ids");
    struct gen_sparse sp = {0};
    long n_prompt = -1;
    int code = EXIT_USAGE;
    float *logits = NULL;
    json_t *res = NULL;
    if (o.prompt_ids) {
        n_prompt = parse_ids(o.prompt_ids, m->vocab, ids, MAX_PROMPT);
    } else if (!ss.tok && tok_err[0]) {
        cli_error(CMD, "--prompt: %s; use --prompt-ids", tok_err);
    } else if (!ss.tok) {
        cli_error(CMD, "--prompt: '%s' has no tokenizer this build reads; use --prompt-ids",
                  o.model);
    } else {
        size_t n = 0;
        if (tokenizer_encode(ss.tok, o.prompt, strlen(o.prompt), 1, ids, MAX_PROMPT, &n) ==
            PULSE_OK)
            n_prompt = (long)n;
        else
            cli_error(CMD, "--prompt: the text does not fit %d tokens", MAX_PROMPT);
    }
    if (n_prompt < 1) goto out;
    int total = (int)(n_prompt + o.max_new);
    code = 1;
    rc = session_start(&ss, be, o.seed, total, o.token_by_token ? 1 : (int)PULSE_MIN(n_prompt, 256),
                       &o.rt, err, sizeof err);
    logits = mem_alloc(MEM_HOST, sizeof(float) * m->vocab, "logits");
    if (rc != PULSE_OK || !logits) {
        cli_error(CMD, "%s", err[0] ? err : "out of memory");
        code = rc == PULSE_ERR_OOM || !logits ? EXIT_OOM : 1;
        goto out;
    }
    int32_t next = 0;
    if (o.token_by_token) /* each step appends its K/V and attends all before it */
        for (long t = 0; t < n_prompt; t++)
            next = session_decode(&ss, (int)t, ids[t]);
    else
        next = session_prefill(&ss, ids, (int)n_prompt);
    if (o.sparse != SPARSE_FULL && (rc = sparse_start(&ss, &o, &sp, err, sizeof err))) {
        cli_error(CMD, "%s", err);
        code = rc == PULSE_ERR_NOMEM ? EXIT_OOM : EXIT_USAGE;
        goto out;
    }
    for (long k = 0; k < o.max_new; k++) {
        if (k) next = session_decode(&ss, (int)(n_prompt + k - 1), ids[n_prompt + k - 1]);
        ids[n_prompt + k] = next;
    }
    if (sp.s) {
        sparse_attn_get_stats(sp.s, &sp.st);
        printf("sparse attention (%s, budget %ld): %lld global-layer steps sparse, %lld dense, "
               "%.3f of the context attended\n",
               o.policy, o.budget, (long long)sp.st.sparse_calls, (long long)sp.st.dense_calls,
               sp.st.context_tokens ? (double)sp.st.attended_tokens / sp.st.context_tokens : 1.0);
    }
    engine_read_logits(ss.e, logits, 1);
    long bad = 0;
    for (int v = 0; v < m->vocab; v++)
        bad += !isfinite(logits[v]);
    if (bad) { /* NaN/Inf weights or an overflow: the ids above them mean nothing */
        cli_error(CMD,
                  "%ld of the %d final logits are NaN or infinite (non-finite weights in "
                  "'%s' or an overflow); no result",
                  bad, m->vocab, o.model);
        code = 1;
        goto out;
    }
    printf("prompt ids:");
    for (long t = 0; t < n_prompt; t++)
        printf(" %d", ids[t]);
    printf("\ngenerated ids:");
    for (long k = 0; k < o.max_new; k++)
        printf(" %d", ids[n_prompt + k]);
    printf("\n");
    char *text = NULL;
    if (ss.tok) {
        size_t cap = (size_t)o.max_new * 64 + 1, len = 0;
        text = mem_alloc(MEM_HOST, cap, "text");
        if (text && tokenizer_decode(ss.tok, ids + n_prompt, (size_t)o.max_new, 0, text, cap,
                                     &len) == PULSE_OK)
            printf("text: %s\n", text);
    }
    code = 0;
    if (o.out) {
        res = results_new(CMD);
        be->describe(results_env(res));
        json_t *pj = json_array(), *gj = json_array(), *lj = json_array();
        for (long t = 0; t < n_prompt; t++)
            json_array_append_new(pj, json_integer(ids[t]));
        for (long k = 0; k < o.max_new; k++)
            json_array_append_new(gj, json_integer(ids[n_prompt + k]));
        /* the last step's logits: their argmax is the last generated id */
        for (int v = 0; v < m->vocab; v++)
            json_array_append_new(lj, json_real(logits[v]));
        json_object_set_new(res, "config",
                            json_pack("{s:s,s:s,s:b,s:I,s:i,s:s}", "model", o.model, "backend",
                                      be->name, "real_weights", ss.real, "seed", (json_int_t)o.seed,
                                      "max_new_tokens", (int)o.max_new, "prompt",
                                      o.token_by_token ? "token-by-token" : "prefill"));
        json_object_set_new(json_object_get(res, "config"), "options",
                            runtime_opts_json(&o.rt, RT_ENGINE));
        json_object_set_new(res, "prompt_ids", pj);
        json_object_set_new(res, "generated_ids", gj);
        json_object_set_new(res, "last_logits", lj);
        if (text) json_object_set_new(res, "text", json_string(text));
        if (results_write(res, o.out, err, sizeof err) != PULSE_OK) {
            cli_error(CMD, "--out: %s", err);
            code = 1;
        }
    }
    if (text) mem_free(MEM_HOST, text, (size_t)o.max_new * 64 + 1);
out:
    gen_sparse_free(&sp, m);
    json_decref(res);
    mem_free(MEM_HOST, logits, sizeof(float) * m->vocab);
    session_close(&ss);
    mem_free(MEM_HOST, ids, sizeof(int32_t) * (MAX_PROMPT + o.max_new));
    return code;
}
