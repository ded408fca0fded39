/* Model configs with the real shapes, and the bf16 weights of one model on one backend:
 * one allocation, named pointers carved from it, filled deterministically from a seed. */
#ifndef PULSE_MODEL_H
#define PULSE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* Architectures. LLAMA covers Llama and Qwen3 (pre-norm, SwiGLU, one RoPE base, untied head).
 * GEMMA3: the embedding is scaled by sqrt(hidden); attention and MLP outputs get a post-norm
 * before the residual add; GeGLU with tanh-GELU; the head is tied to the embedding; layers are
 * local (sliding window, RoPE base rope_theta_local) except every sliding_pattern-th, which is
 * global (rope_theta, the whole context). */
enum model_arch { MODEL_ARCH_LLAMA = 0, MODEL_ARCH_GEMMA3 = 1 };

/* RoPE frequency scaling of the global layers (Hugging Face rope_scaling / rope_parameters,
 * GGUF rope.scaling.* and rope_freqs.weight); local layers rotate with plain frequencies. The
 * inverse frequency of rotary pair i is inv_freq[i] = theta^(-2i/head_dim) (powf of the fp32
 * exponent), divided by freq_factors[i] when there are some, then:
 *   DEFAULT  kept;
 *   LINEAR   divided by factor (positions divided by factor);
 *   LLAMA3   Llama 3.1's rescaling: wavelength w = 2 pi / inv_freq; w < original_max_pos /
 *            high_freq_factor kept, w > original_max_pos / low_freq_factor divided by factor,
 *            between them (1 - s) inv_freq / factor + s inv_freq with
 *            s = (original_max_pos / w - low_freq_factor) / (high_freq_factor - low_freq_factor).
 * model_rope_inv_freq is the one place that computes it; every backend's kernels read its
 * table. */
enum rope_type { ROPE_DEFAULT = 0, ROPE_LINEAR = 1, ROPE_LLAMA3 = 2 };

struct rope_scaling {
    int type;                  /* enum rope_type */
    float factor;              /* LINEAR, LLAMA3: finite, > 0 */
    float low_freq_factor;     /* LLAMA3: > 0 */
    float high_freq_factor;    /* LLAMA3: > low_freq_factor */
    int original_max_pos;      /* LLAMA3: original_max_position_embeddings, >= 1 */
    const float *freq_factors; /* [head_dim/2] finite, > 0 (GGUF rope_freqs.weight); NULL: none.
                                  Points into the loaded config that holds it (model_load.h) */
};

struct model_config {
    const char *name;
    int n_layers, hidden, n_heads, n_kv_heads, head_dim, ffn, vocab;
    int qk_norm; /* per-head RMSNorm on q and k (Qwen3, Gemma 3) */
    float rope_theta;
    float norm_eps;
    int arch;               /* enum model_arch */
    int sliding_window;     /* tokens a local layer attends, its own included (0: no local) */
    int sliding_pattern;    /* layer l is global when (l + 1) % sliding_pattern == 0 */
    float rope_theta_local; /* RoPE base of local layers */
    struct rope_scaling rope; /* of the global layers */
};

/* Whether layer l attends the whole context (every layer of a model without local layers). */
int model_layer_is_global(const struct model_config *c, int layer);
/* Tokens layer l attends at most (0: all). */
int model_layer_window(const struct model_config *c, int layer);
/* The inverse frequencies of layer l's rotary pairs into inv_freq[head_dim/2]: from rope_theta
 * and the scaling on a global layer, from rope_theta_local on a local one (struct rope_scaling). */
void model_rope_inv_freq(const struct model_config *c, int layer, float *inv_freq);
/* The plain table theta^(-2i/head_dim) of the kernels' tests (and of DEFAULT). */
void model_rope_inv_freq_plain(float theta, int head_dim, float *inv_freq);
/* Name of a rope type ("default", "linear", "llama3"). */
const char *model_rope_type_name(int type);
/* Number of global layers. */
int model_n_global_layers(const struct model_config *c);

/* The built-in config named `name`, or NULL. */
const struct model_config *model_config_find(const char *name);
/* The i-th built-in config (NULL past the end). */
const struct model_config *model_config_at(int i);
/* Names of the built-in configs, comma separated (for messages). */
const char *model_config_names(void);

/* Whether c describes a model this runtime can lay out and run: every count >= 1, head_dim even,
 * n_heads a multiple of n_kv_heads, norm_eps and the RoPE bases finite and > 0, the RoPE scaling
 * within the ranges of struct rope_scaling, and the shapes
 * within MODEL_MAX_* (so that every size below fits 64-bit and the int widths used by the
 * kernels). PULSE_OK, or PULSE_ERR_INVALID with a one-line reason starting with `label` (the
 * file the config came from) in err. Both loaders (accuracy/model_load.h) call it. */
#define MODEL_MAX_LAYERS 1024
#define MODEL_MAX_HIDDEN 65536
#define MODEL_MAX_HEADS 1024
#define MODEL_MAX_HEAD_DIM 512
#define MODEL_MAX_FFN (1 << 20)
#define MODEL_MAX_VOCAB (1 << 22)
int model_config_validate(const struct model_config *c, const char *label, char *err,
                          size_t errlen);
/* Whether backend `backend_name` ("cpu", "cuda") runs c's attention: cuda's decode kernel takes
 * head_dim 64, 128 or 256 and at most 8 query heads per KV head; cpu takes any valid config.
 * PULSE_OK, or PULSE_ERR_INVALID with a one-line reason naming the backend. Callers check it
 * before creating an engine, so that a model the loader accepted never aborts in a kernel. */
int model_config_check_backend(const struct model_config *c, const char *backend_name, char *err,
                               size_t errlen);

/* Parameter count, total weight bytes (bf16), bytes a decode step reads from the weights (all
 * but the embedding table, of which it gathers a few rows), KV bytes per token (all layers). */
uint64_t model_param_count(const struct model_config *c);
uint64_t model_weight_bytes(const struct model_config *c);
uint64_t model_step_weight_bytes(const struct model_config *c);
/* Weight bytes of one decoder layer (every layer has the same shapes): model_step_weight_bytes
 * is n_layers of these plus the head and the final norm. */
uint64_t model_layer_weight_bytes(const struct model_config *c);
/* Of them, the MLP's (gate, up, down; its norm left out). */
uint64_t model_mlp_weight_bytes(const struct model_config *c);
uint64_t model_kv_bytes_per_token(const struct model_config *c);
/* Width of the fused QKV projection: (n_heads + 2 n_kv_heads) * head_dim. */
int model_qkv_dim(const struct model_config *c);

struct layer_weights {
    uint16_t *attn_norm; /* [hidden] */
    uint16_t *wqkv;      /* [qkv_dim][hidden] */
    uint16_t *q_norm;    /* [head_dim], NULL without QK-norm */
    uint16_t *k_norm;    /* [head_dim], NULL without QK-norm */
    uint16_t *wo;        /* [hidden][n_heads*head_dim] */
    uint16_t *mlp_norm;  /* [hidden] */
    uint16_t *wgu;       /* [2*ffn][hidden]: gate rows then up rows */
    uint16_t *wdown;     /* [hidden][ffn] */
    uint16_t *post_attn_norm; /* [hidden] Gemma 3 post-norms; NULL for llama */
    uint16_t *post_mlp_norm;  /* [hidden] */
    const float *rope_inv_freq; /* [head_dim/2] fp32: model_rope_inv_freq of this layer (one of
                                   the model's tables) */
};

struct model {
    const struct model_config *cfg;
    const struct backend *be;
    uint16_t *embed;              /* [vocab][hidden] */
    uint16_t *final_norm;         /* [hidden] */
    uint16_t *lm_head;            /* [vocab][hidden]; == embed when the head is tied (Gemma 3) */
    float embed_scale;            /* the embedding rows are multiplied by it (1, or sqrt(hidden)) */
    struct layer_weights *layers; /* host array of n_layers pointer sets */
    float *rope_inv_freq;         /* [2][head_dim/2]: the global, then the local layers' table */
    void *base;                   /* the one backend allocation */
    size_t bytes;
};

/* Allocates the weights on `be` and fills them from `seed` (same values on every backend).
 * Returns PULSE_OK, or PULSE_ERR_OOM when the backend refuses the allocation. */
int model_create(struct model *m, const struct model_config *cfg, const struct backend *be,
                 const struct kctx *ctx, uint64_t seed);
/* Allocates and lays out the weights like model_create but leaves their values to a loader
 * (accuracy/model_load.h). Both fill the RoPE tables from cfg (an upload on ctx). */
int model_alloc(struct model *m, const struct model_config *cfg, const struct backend *be,
                const struct kctx *ctx);
void model_free(struct model *m);

#endif
