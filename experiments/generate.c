/* pulse generate: greedy continuation of a prompt with a built-in model or real weights (a Hugging
 * Face checkpoint directory or a llama/qwen3 GGUF). The prompt is processed token by token
 * through the decode step (causal, so exactly what a prefill computes; a batched prefill is
 * future work), then max-new-tokens tokens are decoded. Prints the ids (and text when the
 * model file carries a tokenizer) and can write JSON with the last position's logits. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accuracy/gguf.h"
#include "accuracy/model_load.h"
#include "accuracy/tokenizer.h"
#include "cli.h"
#include "common.h"
#include "engine.h"
#include "kv_cache.h"
#include "results.h"

#define CMD "generate"
#define MAX_PROMPT (1 << 20)

static const char usage[] =
    "usage: pulse generate --model NAME|DIR|FILE.gguf (--prompt TEXT | --prompt-ids 1,2,3)\n"
    "                      [--max-new-tokens N] [--backend cpu|cuda|auto] [--policy vanilla]\n"
    "                      [--seed S] [--out FILE.json]\n"
    "  Greedy continuation. --prompt needs a model file with a SentencePiece tokenizer in it.\n"
    "  --out writes the prompt and generated ids, the text, and the last position's logits.\n";

struct gen_opts {
    const char *model, *prompt, *prompt_ids, *backend, *policy, *out;
    long max_new;
    uint64_t seed;
};

static int parse(int argc, char **argv, struct gen_opts *o)
{
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"prompt", required_argument, 0, 'p'},
                                         {"prompt-ids", required_argument, 0, 'i'},
                                         {"max-new-tokens", required_argument, 0, 'n'},
                                         {"backend", required_argument, 0, 'b'},
                                         {"policy", required_argument, 0, 'P'},
                                         {"seed", required_argument, 0, 's'},
                                         {"out", required_argument, 0, 'o'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    *o = (struct gen_opts){.backend = "auto", .policy = "vanilla", .max_new = 16, .seed = 1};
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
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
        case 'n':
            if (cli_int(CMD, "--max-new-tokens", optarg, 1, 1 << 20, &o->max_new)) return -1;
            break;
        case 's':
            if (cli_u64(CMD, "--seed", optarg, INT64_MAX, &o->seed)) return -1;
            break;
        case 'h':
            fputs(usage, stdout);
            return 1;
        default:
            cli_unknown_flag(CMD, argc, argv);
            return -1;
        }
    }
    if (cli_no_extra_args(CMD, argc, argv)) return -1;
    if (!o->model) {
        cli_error(CMD, "--model is required (a built-in name, a checkpoint directory or a .gguf)");
        return -1;
    }
    if (!o->prompt == !o->prompt_ids) {
        cli_error(CMD, "give exactly one of --prompt and --prompt-ids");
        return -1;
    }
    if (strcmp(o->policy, "vanilla") != 0) {
        cli_error(CMD, "--policy: '%s' is not available here (known: vanilla)", o->policy);
        return -1;
    }
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

static int load_cb(struct model *m, const struct kctx *ctx, void *path, char *err, size_t len)
{
    return model_load_path(m, (const char *)path, ctx, err, len);
}

/* The tokenizer of a .gguf model, or NULL (with no error) when it has none. */
static struct tokenizer *open_tokenizer(const char *path, char *err, size_t errlen)
{
    size_t n = strlen(path);
    if (n < 5 || strcmp(path + n - 5, ".gguf") != 0) return NULL;
    struct gguf_file *g;
    struct tokenizer *t = NULL;
    if (gguf_open(path, &g, err, errlen) != PULSE_OK) return NULL;
    if (gguf_find_kv(g, "tokenizer.ggml.tokens") && tokenizer_load(g, &t, err, errlen) != PULSE_OK)
        t = NULL;
    gguf_free(g);
    return t;
}

int cmd_generate(int argc, char **argv)
{
    struct gen_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc > 0 ? 0 : EXIT_USAGE;
    const struct backend *be = cli_backend(CMD, o.backend);
    if (!be) return EXIT_USAGE;
    char err[512] = "";
    struct loaded_config lc;
    const struct model_config *m = model_config_find(o.model);
    int real = !m;
    if (real) {
        if (model_config_from_path(o.model, &lc, err, sizeof err) != PULSE_OK) {
            cli_error(CMD, "--model: '%s' is no built-in model (%s), and: %s", o.model,
                      model_config_names(), err);
            return EXIT_USAGE;
        }
        m = &lc.cfg;
    }
    struct tokenizer *tok = real ? open_tokenizer(o.model, err, sizeof err) : NULL;
    int32_t *ids = mem_alloc(MEM_HOST, sizeof(int32_t) * (MAX_PROMPT + o.max_new), "ids");
    long n_prompt = -1;
    int code = EXIT_USAGE;
    struct engine *e = NULL;
    struct kv_cache *kv = NULL;
    struct batch *bt = NULL;
    float *logits = NULL;
    json_t *res = NULL;
    if (o.prompt_ids) {
        n_prompt = parse_ids(o.prompt_ids, m->vocab, ids, MAX_PROMPT);
    } else if (!tok) {
        cli_error(CMD, "--prompt: '%s' has no tokenizer this build reads; use --prompt-ids",
                  o.model);
    } else {
        size_t n = 0;
        if (tokenizer_encode(tok, o.prompt, strlen(o.prompt), 1, ids, MAX_PROMPT, &n) == PULSE_OK)
            n_prompt = (long)n;
        else
            cli_error(CMD, "--prompt: the text does not fit %d tokens", MAX_PROMPT);
    }
    if (n_prompt < 1) goto out;
    int total = (int)(n_prompt + o.max_new);
    struct engine_params ep = {.cfg = m,
                               .be = be,
                               .seed = o.seed,
                               .max_batch = 1,
                               .max_tokens = total,
                               .use_graph = 0,
                               .load_weights = real ? load_cb : NULL,
                               .load_user = (void *)o.model};
    code = 1;
    if (!(e = engine_create(&ep, err, sizeof err))) {
        cli_error(CMD, "%s", err);
        goto out;
    }
    struct kv_cache_params kp = {m->n_layers, m->n_kv_heads, m->head_dim, 16, 0, 1, total};
    kp.budget_bytes = kv_cache_params_request_bytes(&kp, total);
    int slot;
    bt = batch_create(e);
    logits = mem_alloc(MEM_HOST, sizeof(float) * m->vocab, "logits");
    if (!(kv = kv_cache_create(&kp, be, engine_ctx(e), err, sizeof err)) || !bt || !logits ||
        kv_cache_admit(kv, total, &slot) != PULSE_OK) {
        cli_error(CMD, "out of memory for %d tokens of KV (%s)", total, err);
        code = EXIT_OOM;
        goto out;
    }
    /* the prompt, one token per step (each step appends its K/V and attends all before it);
     * the step after the last prompt token yields the first new token */
    for (long t = 0; t < n_prompt; t++) {
        struct batch_entry en = {slot, 0, (int)t, total, ids[t]};
        batch_set(e, bt, kv, &en, 1);
        engine_step(e, bt, kv);
    }
    for (long k = 0; k < o.max_new; k++) {
        if (k) engine_step(e, bt, kv); /* consumes the token the last step produced */
        batch_read_tokens(e, bt, &ids[n_prompt + k]);
        if (k == o.max_new - 1) batch_read_logits(e, bt, logits);
    }
    printf("prompt ids:");
    for (long t = 0; t < n_prompt; t++)
        printf(" %d", ids[t]);
    printf("\ngenerated ids:");
    for (long k = 0; k < o.max_new; k++)
        printf(" %d", ids[n_prompt + k]);
    printf("\n");
    char *text = NULL;
    if (tok) {
        size_t cap = (size_t)o.max_new * 64 + 1, len = 0;
        text = mem_alloc(MEM_HOST, cap, "text");
        if (text && tokenizer_decode(tok, ids + n_prompt, (size_t)o.max_new, 0, text, cap, &len) ==
                        PULSE_OK)
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
                            json_pack("{s:s,s:s,s:b,s:I,s:i}", "model", o.model, "backend",
                                      be->name, "real_weights", real, "seed", (json_int_t)o.seed,
                                      "max_new_tokens", (int)o.max_new));
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
    json_decref(res);
    mem_free(MEM_HOST, logits, sizeof(float) * m->vocab);
    if (e) batch_free(e, bt);
    kv_cache_free(kv);
    engine_free(e);
    tokenizer_free(tok);
    mem_free(MEM_HOST, ids, sizeof(int32_t) * (MAX_PROMPT + o.max_new));
    return code;
}
