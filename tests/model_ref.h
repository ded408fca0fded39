/* The real-checkpoint check, on one backend (tests/test_model_reference.c on cpu,
 * tests/gpu/test_model_reference_gpu.c on cuda): a tiny Llama checkpoint with random weights
 * (tests/data/llama3_tiny: BF16 safetensors, config.json with Llama 3.1's rope_scaling at an
 * original length of 32) and the greedy tokens and logits that an independent float64 numpy
 * forward pass in transformers' Llama semantics gives (tests/data/llama3_tiny_ref.json, written
 * by tests/data/make_llama_ref.py). Loaded through the suite's loader and decoded by its engine
 * (a prefill of the 20-token prompt, then decode steps), each RoPE case must give exactly the
 * reference's 8 greedy tokens, and logits within REF_TOL standard deviations of the reference's
 * at the kept steps:
 *   - llama3: the committed checkpoint; also prompt token by token (decode steps only, cpu);
 *   - linear and default: the same weights beside a config.json with that rope_scaling;
 *   - llama3 as a llama-architecture GGUF (Q/K rows permuted as llama.cpp's converter does, the
 *     scaling as rope_freqs.weight factors that the script computed as llama.cpp's converter
 *     does, no rope_scaling keys).
 * The data itself shows the scaling matters: llama3's reference logits are many tolerances away
 * from default RoPE's, so a loader that ignored rope_scaling fails here. */
#ifndef PULSE_TEST_MODEL_REF_H
#define PULSE_TEST_MODEL_REF_H

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accuracy/model_load.h"
#include "accuracy/safetensors.h"
#include "backend.h"
#include "ckpt.h"
#include "engine.h"
#include "kv_cache.h"
#include "testutil.h"

#define REF_TOL 0.08 /* logits: max |ours - reference| over the reference's standard deviation */
#define REF_MAX_NEW 16
#define REF_MAX_PROMPT 64

struct mref {
    json_t *root;
    int32_t prompt[REF_MAX_PROMPT];
    int n_prompt, n_new, vocab;
    char dir[PATH_MAX], tmp[64];
    double worst; /* largest logit error seen, in standard deviations */
};

/* out = a/b (a path that does not fit aborts: tests only) */
static void mref_path(char *out, size_t len, const char *a, const char *b)
{
    if (snprintf(out, len, "%s/%s", a, b) >= (int)len) abort();
}

static int mref_load_cb(struct model *m, const struct kctx *ctx, void *path, char *err, size_t len)
{
    return model_load_path(m, (const char *)path, ctx, err, len);
}

/* Greedy decode of the prompt plus n_new tokens of the model at path on backend be: the prompt
 * prefilled in one chunk (or decoded token by token), tokens[n_new], logits[n_new][vocab] of
 * each generated step. */
static int mref_decode(const struct mref *r, const char *path, const struct backend *be,
                       int by_token, int32_t *tokens, float *logits)
{
    char err[1024] = "";
    struct loaded_config lc;
    int rc = model_config_from_path(path, &lc, err, sizeof err);
    if (rc == PULSE_OK) rc = model_config_check_backend(&lc.cfg, be->name, err, sizeof err);
    if (rc != PULSE_OK) {
        fprintf(stderr, "  %s: %s\n", path, err);
        return rc;
    }
    const struct model_config *c = &lc.cfg;
    const int total = r->n_prompt + r->n_new, chunk = by_token ? 1 : r->n_prompt;
    struct engine_params ep = {.cfg = c,
                               .be = be,
                               .seed = 1,
                               .max_batch = chunk,
                               .max_tokens = total,
                               .load_weights = mref_load_cb,
                               .load_user = (void *)path};
    struct engine *e = engine_create(&ep, err, sizeof err);
    struct kv_cache_params kp = {c->n_layers, c->n_kv_heads, c->head_dim, 16, 0, 1, total};
    kp.budget_bytes = kv_cache_params_request_bytes(&kp, total);
    struct kv_cache *kv = e ? kv_cache_create(&kp, be, engine_ctx(e), err, sizeof err) : NULL;
    struct batch *bt = kv ? batch_create(e) : NULL;
    int slot = -1;
    if (!bt || kv_cache_admit(kv, total, &slot) != PULSE_OK) {
        fprintf(stderr, "  %s: engine: %s\n", path, err);
        rc = PULSE_ERR_INVALID;
        goto out;
    }
    struct batch_entry en[REF_MAX_PROMPT];
    int32_t next[REF_MAX_PROMPT]; /* batch_read_tokens: one per entry of the batch */
    if (by_token) {
        for (int i = 0; i < r->n_prompt; i++) {
            en[0] = (struct batch_entry){slot, 0, i, total, r->prompt[i]};
            batch_set(e, bt, kv, en, 1);
            engine_step(e, bt, kv);
        }
        batch_read_logits(e, bt, logits);
    } else {
        for (int i = 0; i < r->n_prompt; i++)
            en[i] = (struct batch_entry){slot, 0, i, total, r->prompt[i]};
        batch_set(e, bt, kv, en, r->n_prompt);
        engine_prefill(e, bt, kv);
        engine_read_logits(e, logits, 1);
    }
    batch_read_tokens(e, bt, next); /* after the prefill, entry 0's is the next token */
    tokens[0] = next[0];
    for (int k = 1; k < r->n_new; k++) {
        en[0] = (struct batch_entry){slot, 0, r->n_prompt + k - 1, total, tokens[k - 1]};
        batch_set(e, bt, kv, en, 1);
        engine_step(e, bt, kv);
        batch_read_logits(e, bt, logits + (size_t)k * (size_t)r->vocab);
        batch_read_tokens(e, bt, next);
        tokens[k] = next[0];
    }
out:
    if (bt) batch_free(e, bt);
    kv_cache_free(kv);
    engine_free(e);
    return rc;
}

/* max |a - b| / sd(b) over n values */
static double mref_err(const float *a, const json_t *b, int n)
{
    double mean = 0, var = 0, worst = 0;
    for (int i = 0; i < n; i++)
        mean += json_number_value(json_array_get(b, (size_t)i)) / n;
    for (int i = 0; i < n; i++) {
        double v = json_number_value(json_array_get(b, (size_t)i));
        var += (v - mean) * (v - mean) / n;
        worst = fmax(worst, fabs(a[i] - v));
    }
    return worst / sqrt(var);
}

/* The model at path must give case `name`'s tokens and logits. */
static void mref_expect(struct mref *r, const char *name, const char *path,
                        const struct backend *be, int by_token)
{
    const json_t *cs = json_object_get(json_object_get(r->root, "cases"), name);
    const json_t *want = json_object_get(cs, "tokens"), *lg = json_object_get(cs, "logits");
    const json_t *steps = json_object_get(r->root, "logit_steps");
    int32_t got[REF_MAX_NEW];
    float *logits = calloc((size_t)r->n_new * (size_t)r->vocab, sizeof(float));
    int rc = mref_decode(r, path, be, by_token, got, logits);
    EXPECT_EQ_INT(rc, PULSE_OK);
    int same = rc == PULSE_OK;
    for (int k = 0; same && k < r->n_new; k++)
        same = got[k] == json_integer_value(json_array_get(want, (size_t)k));
    EXPECT(same);
    double worst = 0;
    for (size_t i = 0; rc == PULSE_OK && i < json_array_size(steps); i++) {
        int k = (int)json_integer_value(json_array_get(steps, i));
        worst = fmax(worst, mref_err(logits + (size_t)k * (size_t)r->vocab, json_array_get(lg, i),
                                     r->vocab));
    }
    EXPECT(worst <= REF_TOL);
    r->worst = fmax(r->worst, worst);
    printf("%s %s%s%s: tokens %s, logits within %.4f sd of the reference\n", be->name, name,
           strstr(path, ".gguf") ? " (gguf)" : "", by_token ? " (token by token)" : "",
           same ? "equal" : "DIFFER", worst);
    if (!same) {
        fprintf(stderr, "  got:");
        for (int k = 0; k < r->n_new; k++)
            fprintf(stderr, " %d", got[k]);
        fprintf(stderr, "\n");
    }
    free(logits);
}

/* dir/config.json: the committed one with rope_scaling replaced; dir/model.safetensors: a link
 * to the committed weights. */
static void mref_variant(const struct mref *r, const char *name, char *dir, size_t len)
{
    char path[PATH_MAX + 32], target[PATH_MAX + 32];
    mref_path(dir, len, r->tmp, name);
    EXPECT(mkdir(dir, 0700) == 0);
    mref_path(path, sizeof path, r->dir, "config.json");
    json_error_t je;
    json_t *cfg = json_load_file(path, 0, &je);
    EXPECT(cfg != NULL);
    const json_t *cs = json_object_get(json_object_get(r->root, "cases"), name);
    json_object_set(cfg, "rope_scaling", json_object_get(cs, "rope_scaling"));
    mref_path(path, sizeof path, dir, "config.json");
    EXPECT_EQ_INT(json_dump_file(cfg, path, JSON_INDENT(2)), 0);
    json_decref(cfg);
    mref_path(target, sizeof target, r->dir, "model.safetensors");
    mref_path(path, sizeof path, dir, "model.safetensors");
    EXPECT_EQ_INT(symlink(target, path), 0);
}

/* The committed checkpoint as a llama GGUF with the llama3 scaling as rope_freqs.weight. */
static void mref_gguf(const struct mref *r, const char *path)
{
    char err[512] = "", name[96];
    struct loaded_config lc;
    struct safetensors *st = NULL;
    EXPECT_EQ_INT(model_config_from_path(r->dir, &lc, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(safetensors_open(r->dir, &st, err, sizeof err), PULSE_OK);
    if (!st) return;
    const struct model_config *c = &lc.cfg;
    struct ckpt ck = {0};
    for (uint64_t i = 0; i < safetensors_tensor_count(st); i++) {
        const struct safetensors_tensor *t = safetensors_tensor_at(st, i);
        ck_gguf_name(t->name, name, sizeof name);
        struct ck_tensor *o =
            ck_add_data(&ck, name, t->shape[0], t->n_dims > 1 ? t->shape[1] : 0, NULL);
        o->gguf_type = 30; /* BF16: the weights as they are */
        EXPECT_EQ_INT(safetensors_read_f32(st, t, o->data, ck_elems(o), err, sizeof err), 0);
    }
    safetensors_free(st);
    const json_t *rf = json_object_get(r->root, "rope_freqs_llama3");
    struct ck_tensor *f = ck_add_data(&ck, "rope_freqs.weight", json_array_size(rf), 0, NULL);
    for (size_t i = 0; i < json_array_size(rf); i++)
        f->data[i] = (float)json_number_value(json_array_get(rf, i));
    struct ck_meta m = {0};
    ckm_str(&m, "general.architecture", "llama");
    ckm_u32(&m, "llama.block_count", (uint32_t)c->n_layers);
    ckm_u32(&m, "llama.context_length", 256);
    ckm_u32(&m, "llama.embedding_length", (uint32_t)c->hidden);
    ckm_u32(&m, "llama.feed_forward_length", (uint32_t)c->ffn);
    ckm_u32(&m, "llama.attention.head_count", (uint32_t)c->n_heads);
    ckm_u32(&m, "llama.attention.head_count_kv", (uint32_t)c->n_kv_heads);
    ckm_u32(&m, "llama.attention.key_length", (uint32_t)c->head_dim);
    ckm_u32(&m, "llama.attention.value_length", (uint32_t)c->head_dim);
    ckm_u32(&m, "llama.rope.dimension_count", (uint32_t)c->head_dim);
    ckm_u32(&m, "llama.vocab_size", (uint32_t)c->vocab);
    ckm_f32(&m, "llama.attention.layer_norm_rms_epsilon", c->norm_eps);
    ckm_f32(&m, "llama.rope.freq_base", c->rope_theta);
    EXPECT_EQ_INT(ck_write_gguf(&ck, &m, path, c->n_heads, c->n_kv_heads), 0);
    free(m.b.p);
    ck_free(&ck);
}

/* Runs every case on backend `backend`; returns the test's exit code. */
static int mref_run(const char *test, const char *backend)
{
    static struct mref r;
    const char *src = getenv("PULSE_SRC");
    char path[PATH_MAX + 64], dir[PATH_MAX + 64];
    mref_path(path, sizeof path, src ? src : ".", "tests/data/llama3_tiny_ref.json");
    json_error_t je;
    r.root = json_load_file(path, 0, &je);
    if (!r.root || !realpath(src ? src : ".", dir)) {
        fprintf(stderr, "%s: %s: %s\n", test, path, je.text);
        return 1;
    }
    mref_path(r.dir, sizeof r.dir, dir, "tests/data/llama3_tiny");
    const json_t *p = json_object_get(r.root, "prompt");
    r.n_prompt = (int)json_array_size(p);
    r.n_new = (int)json_integer_value(json_object_get(r.root, "max_new_tokens"));
    EXPECT(r.n_prompt >= 1 && r.n_prompt <= REF_MAX_PROMPT && r.n_new >= 1 &&
           r.n_new <= REF_MAX_NEW);
    for (int i = 0; i < r.n_prompt; i++)
        r.prompt[i] = (int32_t)json_integer_value(json_array_get(p, (size_t)i));
    /* the committed config is read as Llama 3.1's scaling */
    struct loaded_config lc;
    char err[512] = "";
    EXPECT_EQ_INT(model_config_from_path(r.dir, &lc, err, sizeof err), PULSE_OK);
    EXPECT(lc.cfg.rope.type == ROPE_LLAMA3 && lc.cfg.rope.factor == 8.0f &&
           lc.cfg.rope.original_max_pos == 32 && lc.cfg.qk_norm == 0);
    r.vocab = lc.cfg.vocab;
    /* the scaling matters: llama3's logits are far from default RoPE's */
    const json_t *cases = json_object_get(r.root, "cases");
    float d[1024];
    const json_t *dl =
        json_array_get(json_object_get(json_object_get(cases, "default"), "logits"), 0);
    for (int i = 0; i < r.vocab && i < 1024; i++)
        d[i] = (float)json_number_value(json_array_get(dl, (size_t)i));
    const json_t *l3 =
        json_array_get(json_object_get(json_object_get(cases, "llama3"), "logits"), 0);
    EXPECT(r.vocab <= 1024 && mref_err(d, l3, r.vocab) > 10 * REF_TOL);
    snprintf(r.tmp, sizeof r.tmp, "/tmp/pulse_mref_XXXXXX");
    EXPECT(mkdtemp(r.tmp) != NULL);
    const struct backend *be = backend_find(backend);
    mref_expect(&r, "llama3", r.dir, be, 0);
    if (be->mem == MEM_HOST) mref_expect(&r, "llama3", r.dir, be, 1);
    static const char *const variants[] = {"linear", "default"};
    for (int i = 0; i < 2; i++) {
        mref_variant(&r, variants[i], dir, sizeof dir);
        mref_expect(&r, variants[i], dir, be, 0);
        mref_path(path, sizeof path, dir, "model.safetensors");
        unlink(path);
        mref_path(path, sizeof path, dir, "config.json");
        unlink(path);
        rmdir(dir);
    }
    mref_path(path, sizeof path, r.tmp, "llama3.gguf");
    mref_gguf(&r, path);
    mref_expect(&r, "llama3", path, be, 0);
    unlink(path);
    rmdir(r.tmp);
    printf("largest logit error: %.4f of the reference's sd (tolerance %.2f)\n", r.worst, REF_TOL);
    json_decref(r.root);
    fflush(stdout);
    return tu_finish(test);
}

#endif
