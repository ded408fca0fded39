#include "session.h"

#include <string.h>
#include <sys/stat.h>

#include "accuracy/gguf.h"
#include "common.h"
#include "mem.h"

int session_config(struct session *s, const char *model, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->model = model;
    s->cfg = model_config_find(model);
    if (s->cfg) return PULSE_OK;
    char why[512] = "";
    if (model_config_from_path(model, &s->lc, why, sizeof why) != PULSE_OK) {
        snprintf(err, errlen, "'%s' is no built-in model (%s), and: %s", model,
                 model_config_names(), why);
        return PULSE_ERR_INVALID;
    }
    s->cfg = &s->lc.cfg;
    s->real = 1;
    return PULSE_OK;
}

/* The tokenizer's ids must index the model's embedding. */
static int check_vocab(struct session *s, char *err, size_t errlen)
{
    struct tokenizer_info ti;
    tokenizer_get_info(s->tok, &ti);
    if (ti.n_vocab <= s->cfg->vocab) return PULSE_OK;
    snprintf(err, errlen, "%s: the tokenizer has %d tokens, more than the model's vocabulary (%d)",
             s->model, ti.n_vocab, s->cfg->vocab);
    tokenizer_free(s->tok);
    s->tok = NULL;
    return PULSE_ERR_INVALID;
}

int session_tokenizer(struct session *s, char *err, size_t errlen)
{
    if (!s->real) return PULSE_OK;
    int rc = PULSE_OK;
    if (!model_path_is_gguf(s->model)) { /* a Hugging Face checkpoint: its tokenizer.json */
        char p[4096];
        struct stat st;
        if (snprintf(p, sizeof p, "%s/tokenizer.json", s->model) >= (int)sizeof p ||
            stat(p, &st) != 0)
            return PULSE_OK;
        rc = tokenizer_load_json(p, &s->tok, err, errlen);
    } else {
        struct gguf_file *g;
        rc = gguf_open(s->model, &g, err, errlen);
        if (rc != PULSE_OK) return rc;
        if (gguf_find_kv(g, "tokenizer.ggml.tokens")) rc = tokenizer_load(g, &s->tok, err, errlen);
        gguf_free(g);
    }
    return rc == PULSE_OK && s->tok ? check_vocab(s, err, errlen) : rc;
}

static int load_cb(struct model *m, const struct kctx *ctx, void *path, char *err, size_t len)
{
    return model_load_path(m, (const char *)path, ctx, err, len);
}

int session_start(struct session *s, const struct backend *be, uint64_t seed, int max_tokens,
                  int chunk, const struct runtime_opts *rt, char *err, size_t errlen)
{
    const struct model_config *m = s->cfg;
    s->max_tokens = max_tokens;
    s->chunk = chunk;
    struct engine_params ep = {.cfg = m,
                               .be = be,
                               .seed = seed,
                               .max_batch = chunk,
                               .max_tokens = max_tokens,
                               .use_graph = 0,
                               .load_weights = s->real ? load_cb : NULL,
                               .load_user = (void *)s->model};
    if (rt) runtime_opts_engine(rt, &ep);
    if (!(s->e = engine_create(&ep, err, errlen))) return PULSE_ERR_INVALID;
    struct kv_cache_params kp = {m->n_layers, m->n_kv_heads, m->head_dim, 16, 0, 1, max_tokens};
    kp.budget_bytes = kv_cache_params_request_bytes(&kp, max_tokens);
    s->bt = batch_create(s->e);
    s->entries = mem_alloc(MEM_HOST, sizeof *s->entries * chunk, "prefill entries");
    s->tokbuf = mem_alloc(MEM_HOST, sizeof *s->tokbuf * chunk, "prefill tokens");
    if (!s->tokbuf || !(s->kv = kv_cache_create(&kp, be, engine_ctx(s->e), err, errlen)) ||
        !s->bt || !s->entries || kv_cache_admit(s->kv, max_tokens, &s->slot) != PULSE_OK) {
        snprintf(err, errlen, "out of memory for %d tokens of KV", max_tokens);
        return PULSE_ERR_OOM;
    }
    return PULSE_OK;
}

void session_close(struct session *s)
{
    if (s->e) batch_free(s->e, s->bt);
    mem_free(MEM_HOST, s->entries, sizeof *s->entries * s->chunk);
    mem_free(MEM_HOST, s->tokbuf, sizeof *s->tokbuf * s->chunk);
    kv_cache_free(s->kv);
    engine_free(s->e);
    tokenizer_free(s->tok);
    memset(s, 0, sizeof *s);
}

int32_t session_prefill(struct session *s, const int32_t *ids, int n)
{
    PULSE_CHECK(n >= 1 && n <= s->max_tokens, "prefill longer than the session's reservation");
    int32_t next = 0;
    for (int c0 = 0; c0 < n; c0 += s->chunk) {
        int m = PULSE_MIN(s->chunk, n - c0);
        for (int i = 0; i < m; i++)
            s->entries[i] = (struct batch_entry){s->slot, 0, c0 + i, s->max_tokens, ids[c0 + i]};
        batch_set(s->e, s->bt, s->kv, s->entries, m);
        engine_prefill(s->e, s->bt, s->kv);
    }
    batch_read_tokens(s->e, s->bt, s->tokbuf); /* token 0: after the last prompt token */
    next = s->tokbuf[0];
    return next;
}

int32_t session_decode(struct session *s, int pos, int32_t token)
{
    PULSE_CHECK(pos >= 0 && pos < s->max_tokens, "decode past the session's reservation");
    struct batch_entry en = {s->slot, 0, pos, s->max_tokens, token};
    batch_set(s->e, s->bt, s->kv, &en, 1);
    engine_step(s->e, s->bt, s->kv);
    int32_t next;
    batch_read_tokens(s->e, s->bt, &next);
    return next;
}
