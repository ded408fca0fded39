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
};

/* Whether layer l attends the whole context (every layer of a model without local layers). */
int model_layer_is_global(const struct model_config *c, int layer);
/* Tokens layer l attends at most (0: all), and its RoPE base. */
int model_layer_window(const struct model_config *c, int layer);
float model_layer_rope_theta(const struct model_config *c, int layer);
/* Number of global layers. */
int model_n_global_layers(const struct model_config *c);

/* The built-in config named `name`, or NULL. */
const struct model_config *model_config_find(const char *name);
/* The i-th built-in config (NULL past the end). */
const struct model_config *model_config_at(int i);
/* Names of the built-in configs, comma separated (for messages). */
const char *model_config_names(void);

/* Whether c describes a model this runtime can lay out and run: every count >= 1, head_dim even,
 * n_heads a multiple of n_kv_heads, norm_eps and the RoPE bases finite and > 0, and the shapes
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
};

struct model {
    const struct model_config *cfg;
    const struct backend *be;
    uint16_t *embed;              /* [vocab][hidden] */
    uint16_t *final_norm;         /* [hidden] */
    uint16_t *lm_head;            /* [vocab][hidden]; == embed when the head is tied (Gemma 3) */
    float embed_scale;            /* the embedding rows are multiplied by it (1, or sqrt(hidden)) */
    struct layer_weights *layers; /* host array of n_layers pointer sets */
    void *base;                   /* the one backend allocation */
    size_t bytes;
};

/* Allocates the weights on `be` and fills them from `seed` (same values on every backend).
 * Returns PULSE_OK, or PULSE_ERR_OOM when the backend refuses the allocation. */
int model_create(struct model *m, const struct model_config *cfg, const struct backend *be,
                 const struct kctx *ctx, uint64_t seed);
/* Allocates and lays out the weights like model_create but leaves their values to a loader
 * (accuracy/model_load.h). */
int model_alloc(struct model *m, const struct model_config *cfg, const struct backend *be);
void model_free(struct model *m);

#endif
