/* Model configs with the real shapes, and the bf16 weights of one model on one backend:
 * one allocation, named pointers carved from it, filled deterministically from a seed. */
#ifndef PULSE_MODEL_H
#define PULSE_MODEL_H

#include <stdint.h>

#include "backend.h"

struct model_config {
    const char *name;
    int n_layers, hidden, n_heads, n_kv_heads, head_dim, ffn, vocab;
    int qk_norm; /* per-head RMSNorm on q and k (Qwen3) */
    float rope_theta;
    float norm_eps;
};

/* The built-in config named `name`, or NULL. */
const struct model_config *model_config_find(const char *name);
/* The i-th built-in config (NULL past the end). */
const struct model_config *model_config_at(int i);
/* Names of the built-in configs, comma separated (for messages). */
const char *model_config_names(void);

/* Parameter count, total weight bytes (bf16), bytes a decode step reads from the weights (all
 * but the embedding table, of which it gathers a few rows), KV bytes per token (all layers). */
uint64_t model_param_count(const struct model_config *c);
uint64_t model_weight_bytes(const struct model_config *c);
uint64_t model_step_weight_bytes(const struct model_config *c);
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
};

struct model {
    const struct model_config *cfg;
    const struct backend *be;
    uint16_t *embed;              /* [vocab][hidden] */
    uint16_t *final_norm;         /* [hidden] */
    uint16_t *lm_head;            /* [vocab][hidden] */
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
