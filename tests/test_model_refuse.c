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

/* ---- Hugging Face checkpoints: 2 layers, hidden 16, 2 heads of 8, 1 KV head ---- */

enum { L = 2, H = 16, NH = 2, NKV = 1, HD = 8, FF = 32, V = 24 };

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

/* The checkpoint as written must be refused with `want` in a one-line message. */
static void expect_refused(const char *want)
{
    struct loaded_config lc;
    char err[1024] = "";
    EXPECT(model_config_from_path(HF, &lc, err, sizeof err) != PULSE_OK);
    EXPECT_STR_CONTAINS(err, want);
    EXPECT(strchr(err, '\n') == NULL);
}

/* The checkpoint as written must be accepted and load on the cpu backend. */
static void expect_loads(struct loaded_config *lc)
{
    char err[1024] = "";
    int rc = model_config_from_path(HF, lc, err, sizeof err);
    EXPECT_EQ_INT(rc, PULSE_OK);
    if (rc) {
        fprintf(stderr, "  %s\n", err);
        return;
    }
    static const struct kctx ctx;
    struct model m;
    EXPECT_EQ_INT(model_alloc(&m, &lc->cfg, backend_find("cpu"), &ctx), PULSE_OK);
    rc = model_load_path(&m, HF, &ctx, err, sizeof err);
    EXPECT_EQ_INT(rc, PULSE_OK);
    if (rc) fprintf(stderr, "  %s\n", err);
    model_free(&m);
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
}

int main(void)
{
    if (!mkdtemp(DIR_)) return 1;
    snprintf(HF, sizeof HF, "%s/hf", DIR_);
    mkdir(HF, 0700);
    test_hf_fields();
    test_hf_tensors();
    test_hf_cli();
    char p[400];
    snprintf(p, sizeof p, "%s/config.json", HF);
    unlink(p);
    snprintf(p, sizeof p, "%s/model.safetensors", HF);
    unlink(p);
    rmdir(HF);
    rmdir(DIR_);
    return tu_finish("test_model_refuse");
}
