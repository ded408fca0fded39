/* No silent wrong model from a real checkpoint (issue 36): every config field, metadata key or
 * tensor the loaders do not implement is refused with a one-line message naming it, at config
 * time (so the command line exits 2, as for other bad input); what they implement is accepted.
 * Each case is a small checkpoint built here.
 * - config.json: RoPE scaling types and their parameters (rope_scaling and rope_parameters,
 *   type and rope_type), hidden_act, attention_bias, mlp_bias, sliding windows, quantization,
 *   partial RoPE;
 * - safetensors: bias tensors, QK-norm tensors in a llama checkpoint, tensors past the layer
 *   count or of no known use, unconvertible dtypes, and the head's tying (tie_word_embeddings
 *   false with no lm_head, true with a different one; per-architecture defaults);
 * - GGUF: required keys, key types, metadata against tensors (block count both ways, head
 *   counts against shapes), norm tensor types, RoPE scaling keys and rope_freqs.weight. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accuracy/model_load.h"
#include "backend.h"
#include "ckpt.h"
#include "common.h"
#include "testutil.h"

static char DIR_[] = "/tmp/pulse_refuse_XXXXXX";
static char HF[320];

/* ---- Hugging Face checkpoints: 2 layers, hidden 32, 2 heads of 8, 1 KV head ---- */

enum { L = 2, H = 32, NH = 2, NKV = 1, HD = 8, FF = 32, V = 24 };

/* The layout of model_type `type` (qwen3: with QK-norm), head untied. */
static void hf_layout(struct ckpt *c, int qk_norm)
{
    char n[96];
    uint64_t seed = 1;
    ck_add(c, "model.embed_tokens.weight", V, H, seed++, 1.0f, 0.0f);
    for (int l = 0; l < L; l++) {
#define T(suffix, r, cols, sc, off)                                                                \
    (snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix), ck_add(c, n, r, cols, seed++, sc, off))
        T("input_layernorm.weight", H, 0, 0.1f, 1.0f);
        T("self_attn.q_proj.weight", NH * HD, H, 0.25f, 0.0f);
        T("self_attn.k_proj.weight", NKV * HD, H, 0.25f, 0.0f);
        T("self_attn.v_proj.weight", NKV * HD, H, 0.25f, 0.0f);
        if (qk_norm) {
            T("self_attn.q_norm.weight", HD, 0, 0.1f, 1.0f);
            T("self_attn.k_norm.weight", HD, 0, 0.1f, 1.0f);
        }
        T("self_attn.o_proj.weight", H, NH * HD, 0.25f, 0.0f);
        T("post_attention_layernorm.weight", H, 0, 0.1f, 1.0f);
        T("mlp.gate_proj.weight", FF, H, 0.25f, 0.0f);
        T("mlp.up_proj.weight", FF, H, 0.25f, 0.0f);
        T("mlp.down_proj.weight", H, FF, 0.18f, 0.0f);
#undef T
    }
    ck_add(c, "model.norm.weight", H, 0, seed++, 0.1f, 1.0f);
    ck_add(c, "lm_head.weight", V, H, seed++, 0.25f, 0.0f);
}

/* Writes c and a config.json of model_type `type` with `extra` fields (JSON members, may be ""). */
static void hf_write(const struct ckpt *c, const char *type, const char *extra)
{
    char cfg[2048], path[400];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\": \"%s\", \"hidden_size\": %d, \"num_hidden_layers\": %d, "
             "\"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d, "
             "\"intermediate_size\": %d, \"vocab_size\": %d, \"rms_norm_eps\": 1e-06%s%s}",
             type, H, L, NH, NKV, HD, FF, V, extra[0] ? ", " : "", extra);
    snprintf(path, sizeof path, "%s/config.json", HF);
    EXPECT_EQ_INT(ck_write_text(path, cfg), 0);
    EXPECT_EQ_INT(ck_write_safetensors(c, HF), 0);
}

/* The checkpoint at path as written must be refused with `want` in a one-line message. */
static void refused_at(const char *path, const char *want)
{
    struct loaded_config lc;
    char err[1024] = "";
    EXPECT(model_config_from_path(path, &lc, err, sizeof err) != PULSE_OK);
    EXPECT_STR_CONTAINS(err, want);
    EXPECT(strchr(err, '\n') == NULL);
}

/* The checkpoint at path as written must be accepted and load on the cpu backend. */
static void loads_at(const char *path, struct loaded_config *lc)
{
    char err[1024] = "";
    int rc = model_config_from_path(path, lc, err, sizeof err);
    EXPECT_EQ_INT(rc, PULSE_OK);
    if (rc) {
        fprintf(stderr, "  %s\n", err);
        return;
    }
    static const struct kctx ctx;
    struct model m;
    EXPECT_EQ_INT(model_alloc(&m, &lc->cfg, backend_find("cpu"), &ctx), PULSE_OK);
    rc = model_load_path(&m, path, &ctx, err, sizeof err);
    EXPECT_EQ_INT(rc, PULSE_OK);
    if (rc) fprintf(stderr, "  %s\n", err);
    model_free(&m);
}

static void expect_refused(const char *want)
{
    refused_at(HF, want);
}

static void expect_loads(struct loaded_config *lc)
{
    loads_at(HF, lc);
}

/* config.json fields: one refusal each, with the layout otherwise valid. */
static void test_hf_fields(void)
{
    static const struct {
        const char *extra, *want;
    } cases[] = {
        {"\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}",
         "rope_scaling rope_type 'yarn' is not implemented (default, linear and llama3 are)"},
        {"\"rope_parameters\": {\"type\": \"dynamic\", \"factor\": 2.0, \"rope_theta\": 1e4}",
         "rope_parameters rope_type 'dynamic' is not implemented"},
        {"\"rope_scaling\": {\"rope_type\": \"longrope\"}", "rope_type 'longrope'"},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
         "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 32}",
         "rope_scaling rope type llama3 needs \"low_freq_factor\""},
        {"\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0, \"low_freq_factor\": 1.0}",
         "rope_scaling has \"low_freq_factor\", which rope type linear does not use"},
        {"\"rope_scaling\": {\"type\": \"linear\"}", "rope type linear needs \"factor\""},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
         "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 32, "
         "\"attention_factor\": 1.0}",
         "rope_scaling.attention_factor is not implemented (rope type llama3)"},
        {"\"rope_scaling\": {\"type\": \"linear\", \"factor\": 0}",
         "\"rope_scaling.factor\" must be a positive number"},
        {"\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}, "
         "\"rope_parameters\": {\"rope_type\": \"default\"}",
         "both \"rope_scaling\" and \"rope_parameters\" are set: give one"},
        {"\"rope_scaling\": {\"type\": \"linear\", \"rope_type\": \"llama3\", \"factor\": 2.0}",
         "\"rope_scaling.rope_type\" 'llama3' and \"rope_scaling.type\" 'linear' differ"},
        {"\"rope_theta\": 10000.0, \"rope_parameters\": {\"rope_type\": \"default\", "
         "\"rope_theta\": 500000.0}",
         "\"rope_theta\" 10000 and \"rope_parameters.rope_theta\" 500000 differ"},
        {"\"rope_scaling\": [1]", "\"rope_scaling\" must be an object or null"},
        {"\"hidden_act\": \"gelu\"",
         "hidden_act 'gelu': the llama layers of this runtime run silu"},
        {"\"hidden_act\": 3", "\"hidden_act\" must be a string"},
        {"\"attention_bias\": true", "attention_bias true: attention biases are not implemented"},
        {"\"mlp_bias\": true", "mlp_bias true: MLP biases are not implemented"},
        {"\"mlp_bias\": 1", "\"mlp_bias\" must be true or false"},
        {"\"use_sliding_window\": true, \"sliding_window\": 4096",
         "use_sliding_window true: sliding-window layers are not implemented for llama"},
        {"\"layer_types\": [\"full_attention\", \"sliding_attention\"]", "layer_types: sliding"},
        {"\"quantization_config\": {\"quant_method\": \"fp8\"}",
         "quantization_config: quantized checkpoints are not loaded"},
        {"\"partial_rotary_factor\": 0.5", "partial_rotary_factor 0.5: partial RoPE"},
        {"\"tie_word_embeddings\": \"no\"", "\"tie_word_embeddings\" must be true or false"},
    };
    struct ckpt c = {0};
    hf_layout(&c, 0);
    for (size_t i = 0; i < PULSE_ARRAY_LEN(cases); i++) {
        hf_write(&c, "llama", cases[i].extra);
        expect_refused(cases[i].want);
    }
    /* what is implemented loads: Llama 3.1's scaling, linear by its older name, the newer
     * rope_parameters with the base inside, silu, false biases, full-attention layer types, an
     * old checkpoint's rotary buffers */
    struct loaded_config lc;
    hf_write(&c, "llama",
             "\"hidden_act\": \"silu\", \"attention_bias\": false, \"mlp_bias\": false, "
             "\"rope_theta\": 500000.0, \"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": "
             "1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192, "
             "\"rope_type\": \"llama3\"}, \"layer_types\": [\"full_attention\", "
             "\"full_attention\"], \"quantization_config\": null, \"rope_parameters\": null");
    expect_loads(&lc);
    const struct rope_scaling *r = &lc.cfg.rope;
    EXPECT(r->type == ROPE_LLAMA3 && r->factor == 8.0f && r->low_freq_factor == 1.0f &&
           r->high_freq_factor == 4.0f && r->original_max_pos == 8192 && !r->freq_factors);
    EXPECT_NEAR(lc.cfg.rope_theta, 500000.0, 0);
    hf_write(&c, "llama", "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 4.0}");
    expect_loads(&lc);
    EXPECT(lc.cfg.rope.type == ROPE_LINEAR && lc.cfg.rope.factor == 4.0f);
    ck_add(&c, "model.layers.1.self_attn.rotary_emb.inv_freq", HD / 2, 0, 99, 1.0f, 1.0f);
    hf_write(&c, "llama",
             "\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1000000.0}");
    expect_loads(&lc);
    EXPECT(lc.cfg.rope.type == ROPE_DEFAULT && lc.cfg.qk_norm == 0);
    EXPECT_NEAR(lc.cfg.rope_theta, 1e6, 0);
    ck_free(&c);
}

/* Tensors the layout does not take, dtypes, and the head's tying. */
static void test_hf_tensors(void)
{
    struct ckpt c = {0};
    char want[512];
    hf_layout(&c, 0);
    ck_add(&c, "model.layers.0.self_attn.q_proj.bias", NH * HD, 0, 7, 0.1f, 0.0f);
    hf_write(&c, "llama", "");
    expect_refused("tensor 'model.layers.0.self_attn.q_proj.bias': biases are not implemented");
    ck_free(&c);
    /* a llama checkpoint with QK-norm weights: refused, not QK-norm turned on */
    hf_layout(&c, 1);
    hf_write(&c, "llama", "");
    expect_refused("tensor 'model.layers.0.self_attn.q_norm.weight': QK-norm in a 'llama' "
                   "checkpoint (only qwen3 has it here)");
    struct loaded_config lc;
    hf_write(&c, "qwen3", "");
    expect_loads(&lc);
    EXPECT_EQ_INT(lc.cfg.qk_norm, 1);
    /* qwen3 without them: its QK-norm is part of the layout */
    ck_remove(&c, "model.layers.1.self_attn.k_norm.weight");
    hf_write(&c, "qwen3", "");
    expect_refused("tensor 'model.layers.1.self_attn.k_norm.weight' is missing");
    ck_free(&c);
    /* a third layer's tensor beside num_hidden_layers 2; a tensor of no known use */
    hf_layout(&c, 0);
    ck_add(&c, "model.layers.2.mlp.up_proj.weight", FF, H, 8, 0.1f, 0.0f);
    hf_write(&c, "llama", "");
    expect_refused("tensor 'model.layers.2.mlp.up_proj.weight': layer 2 is beyond "
                   "num_hidden_layers 2");
    ck_remove(&c, "model.layers.2.mlp.up_proj.weight");
    ck_add(&c, "model.vision_tower.weight", 4, 0, 9, 0.1f, 0.0f);
    hf_write(&c, "llama", "");
    expect_refused("tensor 'model.vision_tower.weight' is not part of the llama layout this "
                   "runtime loads");
    ck_remove(&c, "model.vision_tower.weight");
    snprintf(ck_find(&c, "model.layers.1.mlp.down_proj.weight")->dtype, 16, "I32");
    hf_write(&c, "llama", "");
    expect_refused("tensor 'model.layers.1.mlp.down_proj.weight' has dtype I32; this loader "
                   "reads BF16, F16 and F32");
    snprintf(ck_find(&c, "model.layers.1.mlp.down_proj.weight")->dtype, 16, "BF16");
    /* tying: untied without a head (false given, or llama's and qwen3's default false) */
    ck_remove(&c, "lm_head.weight");
    snprintf(want, sizeof want,
             "%s/config.json: tie_word_embeddings is false but the checkpoint "
             "has no lm_head.weight",
             HF);
    hf_write(&c, "llama", "\"tie_word_embeddings\": false");
    expect_refused(want);
    hf_write(&c, "llama", "");
    expect_refused(want);
    hf_write(&c, "qwen3", "");
    expect_refused(want);
    /* tied without a head: the embedding serves */
    hf_write(&c, "llama", "\"tie_word_embeddings\": true");
    expect_loads(&lc);
    /* tied with a head of other values: ambiguous, refused; with the same bytes: loads */
    struct ck_tensor *e = ck_find(&c, "model.embed_tokens.weight");
    ck_add(&c, "lm_head.weight", V, H, 77, 0.25f, 0.0f);
    hf_write(&c, "llama", "\"tie_word_embeddings\": true");
    expect_refused("tie_word_embeddings is true but lm_head.weight differs from "
                   "model.embed_tokens.weight (transformers would use the embedding)");
    e = ck_find(&c, "model.embed_tokens.weight");
    memcpy(ck_find(&c, "lm_head.weight")->data, e->data, sizeof(float) * V * H);
    hf_write(&c, "llama", "\"tie_word_embeddings\": true");
    expect_loads(&lc);
    ck_free(&c);
}

/* ---- GGUF files: the same layout under llama.cpp's names and keys ---- */

static char GG[360];

/* The tensors of `arch` (qwen3 and gemma3 with QK-norm, gemma3 with post-norms and no head). */
static void gg_layout(struct ckpt *c, const char *arch)
{
    hf_layout(c, strcmp(arch, "llama") != 0);
    for (int i = 0; i < c->n; i++) {
        char n[96];
        ck_gguf_name(c->t[i].name, n, sizeof n);
        snprintf(c->t[i].name, sizeof c->t[i].name, "%s", n);
    }
    if (!strcmp(arch, "gemma3")) {
        ck_remove(c, "output.weight");
        for (int l = 0; l < L; l++) {
            char n[96];
            snprintf(n, sizeof n, "blk.%d.post_attention_norm.weight", l);
            ck_add(c, n, H, 0, 50 + (uint64_t)l, 0.1f, 1.0f);
            snprintf(n, sizeof n, "blk.%d.post_ffw_norm.weight", l);
            ck_add(c, n, H, 0, 60 + (uint64_t)l, 0.1f, 1.0f);
        }
    }
}

static void gk_u32(struct ck_meta *m, const char *arch, const char *name, uint32_t v)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, name);
    ckm_u32(m, k, v);
}

static void gk_f32(struct ck_meta *m, const char *arch, const char *name, float v)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, name);
    ckm_f32(m, k, v);
}

/* The metadata a converter writes for the layout, but `skip` (a key after "<arch>."). */
static void gg_meta(struct ck_meta *m, const char *arch, const char *skip)
{
    ckm_str(m, "general.architecture", arch);
    static const char *const ints[] = {"block_count",          "context_length",
                                       "embedding_length",     "feed_forward_length",
                                       "attention.head_count", "attention.head_count_kv",
                                       "attention.key_length", "attention.sliding_window"};
    const uint32_t vals[] = {L, 4096, H, FF, NH, NKV, HD, 16};
    for (int i = 0; i < 8; i++)
        if ((i < 7 || !strcmp(arch, "gemma3")) && (!skip || strcmp(skip, ints[i])))
            gk_u32(m, arch, ints[i], vals[i]);
    if (!skip || strcmp(skip, "attention.layer_norm_rms_epsilon"))
        gk_f32(m, arch, "attention.layer_norm_rms_epsilon", 1e-6f);
    if (!skip || strcmp(skip, "rope.freq_base")) gk_f32(m, arch, "rope.freq_base", 10000.0f);
}

static void gg_write(const struct ckpt *c, struct ck_meta *m)
{
    EXPECT_EQ_INT(ck_write_gguf(c, m, GG, 0, 0), 0);
    free(m->b.p);
    *m = (struct ck_meta){0};
}

static void expect_gg_refused(const char *want)
{
    refused_at(GG, want);
}

static void expect_gg_loads(struct loaded_config *lc)
{
    loads_at(GG, lc);
}

/* Required keys, key types, keys this loader does not implement. */
static void test_gguf_keys(void)
{
    struct ckpt c = {0};
    struct ck_meta m = {0};
    char want[256];
    gg_layout(&c, "qwen3");
    static const char *const required[] = {
        "block_count",         "context_length",       "embedding_length",
        "feed_forward_length", "attention.head_count", "attention.layer_norm_rms_epsilon",
        "rope.freq_base"};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(required); i++) {
        gg_meta(&m, "qwen3", required[i]);
        gg_write(&c, &m);
        snprintf(want, sizeof want, "metadata key 'qwen3.%s' is missing (required", required[i]);
        expect_gg_refused(want);
    }
    /* a float key stored as an integer, an integer as a float, a per-layer array */
    gg_meta(&m, "qwen3", "rope.freq_base");
    gk_u32(&m, "qwen3", "rope.freq_base", 10000);
    gg_write(&c, &m);
    expect_gg_refused("metadata key 'qwen3.rope.freq_base' is uint32, expected a float (float32 "
                      "or float64)");
    gg_meta(&m, "qwen3", "attention.layer_norm_rms_epsilon");
    gk_u32(&m, "qwen3", "attention.layer_norm_rms_epsilon", 0);
    gg_write(&c, &m);
    expect_gg_refused("'qwen3.attention.layer_norm_rms_epsilon' is uint32, expected a float");
    gg_meta(&m, "qwen3", "block_count");
    gk_f32(&m, "qwen3", "block_count", 2.0f);
    gg_write(&c, &m);
    expect_gg_refused("metadata key 'qwen3.block_count' is float32, expected an integer");
    gg_meta(&m, "qwen3", "attention.head_count");
    const uint32_t per_layer[L] = {NH, NH};
    ckm_u32_array(&m, "qwen3.attention.head_count", per_layer, L);
    gg_write(&c, &m);
    expect_gg_refused("metadata key 'qwen3.attention.head_count' is array, expected an integer");
    /* keys that change the model and are not implemented */
    static const char *const unknown[] = {"final_logit_softcapping", "attention.sliding_window",
                                          "rope.scaling.yarn_log_multiplier",
                                          "attention.layer_norm_epsilon"};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(unknown); i++) {
        gg_meta(&m, "qwen3", NULL);
        gk_f32(&m, "qwen3", unknown[i], 30.0f);
        gg_write(&c, &m);
        snprintf(want, sizeof want, "metadata key 'qwen3.%s' is not implemented by this loader",
                 unknown[i]);
        expect_gg_refused(want);
    }
    /* values the layout cannot honour */
    static const struct {
        const char *key;
        uint32_t v;
        const char *want;
    } bad[] = {{"attention.value_length", 16,
                "value_length 16 and rope.dimension_count 8 must "
                "equal the key length 8"},
               {"rope.dimension_count", 4, "rope.dimension_count 4 must equal the key length"},
               {"expert_count", 8, "qwen3.expert_count 8: mixture-of-experts layers are not"},
               {"vocab_size", 30, "qwen3.vocab_size 30 but token_embd.weight has 24 rows"}};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(bad); i++) {
        gg_meta(&m, "qwen3", NULL);
        gk_u32(&m, "qwen3", bad[i].key, bad[i].v);
        gg_write(&c, &m);
        expect_gg_refused(bad[i].want);
    }
    gg_meta(&m, "qwen3", "context_length");
    gk_u32(&m, "qwen3", "context_length", 0);
    gg_write(&c, &m);
    expect_gg_refused("qwen3.context_length 0 must be >= 1");
    gg_meta(&m, "qwen3", NULL);
    ckm_u32(&m, "split.count", 2);
    gg_write(&c, &m);
    expect_gg_refused("split.count 2: split GGUF files are not loaded");
    /* what a converter writes for the layout loads, with the keys it may add */
    struct loaded_config lc;
    gg_meta(&m, "qwen3", NULL);
    gk_u32(&m, "qwen3", "attention.value_length", HD);
    gk_u32(&m, "qwen3", "rope.dimension_count", HD);
    gk_u32(&m, "qwen3", "vocab_size", V);
    ckm_bool(&m, "qwen3.rope.scaling.finetuned", 0);
    gg_write(&c, &m);
    expect_gg_loads(&lc);
    EXPECT(lc.cfg.qk_norm == 1 && lc.cfg.n_layers == L && lc.cfg.head_dim == HD);
    ck_free(&c);
    /* gemma3 requires its window */
    gg_layout(&c, "gemma3");
    gg_meta(&m, "gemma3", "attention.sliding_window");
    gg_write(&c, &m);
    expect_gg_refused("metadata key 'gemma3.attention.sliding_window' is missing (required");
    gg_meta(&m, "gemma3", NULL);
    gk_f32(&m, "gemma3", "final_logit_softcapping", 30.0f);
    gg_write(&c, &m);
    expect_gg_refused("metadata key 'gemma3.final_logit_softcapping' is not implemented");
    ck_free(&c);
}

/* Metadata against tensors: block count both ways, head counts against shapes, norm types,
 * tensors of no use (biases, QK-norm in llama, a gemma3 head). */
static void test_gguf_tensors(void)
{
    struct ckpt c = {0};
    struct ck_meta m = {0};
    gg_layout(&c, "qwen3");
    gg_meta(&m, "qwen3", "block_count");
    gk_u32(&m, "qwen3", "block_count", 1);
    gg_write(&c, &m);
    expect_gg_refused("tensor 'blk.1.attn_norm.weight': block 1 is beyond qwen3.block_count 1");
    gg_meta(&m, "qwen3", "block_count");
    gk_u32(&m, "qwen3", "block_count", 3);
    gg_write(&c, &m);
    expect_gg_refused("tensor 'blk.2.attn_norm.weight' is missing");
    gg_meta(&m, "qwen3", "attention.head_count");
    gk_u32(&m, "qwen3", "attention.head_count", 4);
    gg_write(&c, &m);
    expect_gg_refused("tensor 'blk.0.attn_q.weight' has ne [32, 16], the config wants [32, 32]");
    gg_meta(&m, "qwen3", "attention.head_count_kv");
    gk_u32(&m, "qwen3", "attention.head_count_kv", 2);
    gg_write(&c, &m);
    expect_gg_refused("tensor 'blk.0.attn_k.weight' has ne [32, 8], the config wants [32, 16]");
    /* norms: F32, F16 or BF16, not quantised; BF16 loads */
    ck_find(&c, "output_norm.weight")->gguf_type = 8; /* Q8_0 */
    gg_meta(&m, "qwen3", NULL);
    gg_write(&c, &m);
    expect_gg_refused("tensor 'output_norm.weight' has type Q8_0; a norm must be F32, F16 or BF16");
    ck_find(&c, "output_norm.weight")->gguf_type = 30;
    ck_find(&c, "blk.1.ffn_up.weight")->gguf_type = 8; /* a quantised matrix is fine */
    struct loaded_config lc;
    gg_meta(&m, "qwen3", NULL);
    gg_write(&c, &m);
    expect_gg_loads(&lc);
    /* qwen3 needs its QK-norm; a bias has no place */
    ck_remove(&c, "blk.0.attn_q_norm.weight");
    gg_meta(&m, "qwen3", NULL);
    gg_write(&c, &m);
    expect_gg_refused("tensor 'blk.0.attn_q_norm.weight' is missing");
    ck_add(&c, "blk.0.attn_q_norm.weight", HD, 0, 3, 0.1f, 1.0f);
    ck_add(&c, "blk.1.attn_v.bias", NKV * HD, 0, 4, 0.1f, 0.0f);
    gg_meta(&m, "qwen3", NULL);
    gg_write(&c, &m);
    expect_gg_refused("tensor 'blk.1.attn_v.bias': biases are not implemented");
    ck_free(&c);
    /* llama: QK-norm tensors refused, not turned on */
    gg_layout(&c, "qwen3");
    gg_meta(&m, "llama", NULL);
    gg_write(&c, &m);
    expect_gg_refused("tensor 'blk.0.attn_q_norm.weight': QK-norm in a 'llama' file (qwen3 and "
                      "gemma3 have it)");
    ck_free(&c);
    /* gemma3: the head is the embedding; a separate one is refused */
    gg_layout(&c, "gemma3");
    ck_add(&c, "output.weight", V, H, 5, 0.2f, 0.0f);
    gg_meta(&m, "gemma3", NULL);
    gg_write(&c, &m);
    expect_gg_refused("tensor 'output.weight': this runtime ties gemma3's head to "
                      "token_embd.weight");
    ck_free(&c);
}

/* RoPE scaling keys and rope_freqs.weight. */
static void test_gguf_rope(void)
{
    struct ckpt c = {0};
    struct ck_meta m = {0};
    struct loaded_config lc;
    gg_layout(&c, "llama");
    static const struct {
        const char *type;
        float factor, legacy, attn;
        const char *want;
    } bad[] = {{"yarn", 4.0f, 0, 1,
                "llama.rope.scaling.type 'yarn' is not implemented (none and "
                "linear are; llama3 scaling comes as rope_freqs.weight)"},
               {"longrope", 0, 0, 1, "rope.scaling.type 'longrope' is not implemented"},
               {"none", 4.0f, 0, 1,
                "llama.rope.scaling.type none with a factor of 4: "
                "contradictory"},
               {"linear", 4.0f, 2.0f, 1,
                "llama.rope.scaling.factor 4 and llama.rope.scale_linear "
                "2 differ"},
               {"linear", 4.0f, 0, 2.0f,
                "llama.rope.scaling.attn_factor 2: scaling the rotated q "
                "and k is not implemented"},
               {"linear", -4.0f, 0, 1, "RoPE scaling linear with factor -4"}};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(bad); i++) {
        gg_meta(&m, "llama", NULL);
        ckm_str(&m, "llama.rope.scaling.type", bad[i].type);
        if (bad[i].factor != 0) gk_f32(&m, "llama", "rope.scaling.factor", bad[i].factor);
        if (bad[i].legacy != 0) gk_f32(&m, "llama", "rope.scale_linear", bad[i].legacy);
        if (bad[i].attn != 1) gk_f32(&m, "llama", "rope.scaling.attn_factor", bad[i].attn);
        gg_write(&c, &m);
        expect_gg_refused(bad[i].want);
    }
    /* linear: by type and factor, by the older key alone, and with the type absent (llama.cpp's
     * default is linear); "none" without a factor is plain */
    gg_meta(&m, "llama", NULL);
    ckm_str(&m, "llama.rope.scaling.type", "linear");
    gk_f32(&m, "llama", "rope.scaling.factor", 4.0f);
    gk_u32(&m, "llama", "rope.scaling.original_context_length", 2048);
    gg_write(&c, &m);
    expect_gg_loads(&lc);
    EXPECT(lc.cfg.rope.type == ROPE_LINEAR && lc.cfg.rope.factor == 4.0f);
    gg_meta(&m, "llama", NULL);
    gk_f32(&m, "llama", "rope.scale_linear", 2.0f);
    gg_write(&c, &m);
    expect_gg_loads(&lc);
    EXPECT(lc.cfg.rope.type == ROPE_LINEAR && lc.cfg.rope.factor == 2.0f);
    gg_meta(&m, "llama", NULL);
    ckm_str(&m, "llama.rope.scaling.type", "none");
    gg_write(&c, &m);
    expect_gg_loads(&lc);
    EXPECT(lc.cfg.rope.type == ROPE_DEFAULT && lc.cfg.rope.freq_factors == NULL);
    /* rope_freqs.weight: llama3's per-pair divisors, read into the config */
    struct ck_tensor *rf = ck_add(&c, "rope_freqs.weight", HD / 2, 0, 0, 0.0f, 0.0f);
    const float ff[HD / 2] = {1.0f, 1.5f, 8.0f, 8.0f};
    memcpy(rf->data, ff, sizeof ff);
    gg_meta(&m, "llama", NULL);
    gg_write(&c, &m);
    expect_gg_loads(&lc);
    EXPECT(lc.cfg.rope.freq_factors == lc.rope_freq_factors &&
           !memcmp(lc.rope_freq_factors, ff, sizeof ff));
    float plain[HD / 2], got[HD / 2];
    model_rope_inv_freq_plain(10000.0f, HD, plain);
    model_rope_inv_freq(&lc.cfg, 1, got);
    for (int i = 0; i < HD / 2; i++)
        EXPECT_NEAR(got[i], plain[i] / ff[i], 0);
    rf->data[2] = NAN;
    gg_meta(&m, "llama", NULL);
    gg_write(&c, &m);
    expect_gg_refused("RoPE frequency factor 2 is nan: must be finite and > 0");
    ck_remove(&c, "rope_freqs.weight");
    ck_add(&c, "rope_freqs.weight", HD, 0, 0, 0.0f, 1.0f);
    gg_meta(&m, "llama", NULL);
    gg_write(&c, &m);
    expect_gg_refused("tensor 'rope_freqs.weight' has ne [8] of type F32; the config wants [4]");
    ck_free(&c);
    gg_layout(&c, "qwen3");
    ck_add(&c, "rope_freqs.weight", HD / 2, 0, 0, 0.0f, 1.0f);
    gg_meta(&m, "qwen3", NULL);
    gg_write(&c, &m);
    expect_gg_refused("tensor 'rope_freqs.weight': frequency factors are implemented for the "
                      "llama architecture only");
    ck_free(&c);
    /* gemma3: scaling on the global layers only; the local base and pattern from the file;
     * 62 layers (the 27B) refused */
    gg_layout(&c, "gemma3");
    gg_meta(&m, "gemma3", NULL);
    ckm_str(&m, "gemma3.rope.scaling.type", "linear");
    gk_f32(&m, "gemma3", "rope.scaling.factor", 8.0f);
    gk_f32(&m, "gemma3", "rope.freq_base_swa", 100.0f);
    gk_u32(&m, "gemma3", "attention.sliding_window_pattern", 2);
    gg_write(&c, &m);
    expect_gg_loads(&lc);
    EXPECT(lc.cfg.arch == MODEL_ARCH_GEMMA3 && lc.cfg.sliding_pattern == 2 &&
           lc.cfg.sliding_window == 16);
    EXPECT_NEAR(lc.cfg.rope_theta_local, 100.0, 0);
    float local[HD / 2];
    model_rope_inv_freq_plain(100.0f, HD, local);
    model_rope_inv_freq(&lc.cfg, 0, got); /* layer 0 of pattern 2: local */
    EXPECT(!memcmp(got, local, sizeof got));
    model_rope_inv_freq(&lc.cfg, 1, got);
    EXPECT_NEAR(got[3], plain[3] / 8.0f, 0);
    gg_meta(&m, "gemma3", "block_count");
    gk_u32(&m, "gemma3", "block_count", 62);
    gg_write(&c, &m);
    expect_gg_refused("gemma3 with 62 layers (27B) scales attention by 1/sqrt(hidden/heads)");
    ck_free(&c);
}

/* The command line exits 2 on a refused checkpoint, as on other bad input. */
static void test_hf_cli(void)
{
    struct ckpt c = {0};
    char args[1024], out[1 << 14];
    hf_layout(&c, 0);
    hf_write(&c, "llama", "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}");
    snprintf(args, sizeof args, "generate --model %s --backend cpu --prompt-ids 1,2", HF);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "rope_type 'yarn' is not implemented");
    ck_add(&c, "model.layers.1.mlp.down_proj.bias", H, 0, 5, 0.1f, 0.0f);
    hf_write(&c, "llama", "");
    snprintf(args, sizeof args,
             "run --weights %s --backend cpu --workload uniform:8:1 --output-len 2", HF);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "tensor 'model.layers.1.mlp.down_proj.bias': biases are not");
    ck_free(&c);
    struct ck_meta m = {0};
    gg_layout(&c, "qwen3");
    gg_meta(&m, "qwen3", "rope.freq_base");
    gg_write(&c, &m);
    snprintf(args, sizeof args, "generate --model %s --backend cpu --prompt-ids 1,2", GG);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "metadata key 'qwen3.rope.freq_base' is missing");
    ck_free(&c);
}

int main(void)
{
    if (!mkdtemp(DIR_)) return 1;
    snprintf(HF, sizeof HF, "%s/hf", DIR_);
    snprintf(GG, sizeof GG, "%s/m.gguf", DIR_);
    mkdir(HF, 0700);
    test_hf_fields();
    test_hf_tensors();
    test_gguf_keys();
    test_gguf_tensors();
    test_gguf_rope();
    test_hf_cli();
    unlink(GG);
    char p[400];
    snprintf(p, sizeof p, "%s/config.json", HF);
    unlink(p);
    snprintf(p, sizeof p, "%s/model.safetensors", HF);
    unlink(p);
    rmdir(HF);
    rmdir(DIR_);
    return tu_finish("test_model_refuse");
}
