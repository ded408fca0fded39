#include "model_load.h"

#include <stdio.h>
#include <string.h>

#include "accuracy/safetensors.h"
#include "common.h"
#include "mem.h"
#include "numeric.h"

int model_config_from_hf(const char *dir, struct loaded_config *out, char *err, size_t errlen)
{
    struct safetensors_config sc;
    int rc = safetensors_read_config(dir, &sc, err, errlen);
    if (rc != PULSE_OK) return rc;
    if (strcmp(sc.model_type, "llama") != 0 && strcmp(sc.model_type, "qwen3") != 0) {
        snprintf(err, errlen,
                 "%s/config.json: model_type '%s': only the llama and qwen3 layouts "
                 "load into this runtime",
                 dir, sc.model_type);
        return PULSE_ERR_INVALID;
    }
    struct safetensors *st;
    if ((rc = safetensors_open(dir, &st, err, errlen)) != PULSE_OK) return rc;
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", dir);
    struct model_config *c = &out->cfg;
    c->name = out->name;
    c->n_layers = sc.num_hidden_layers;
    c->hidden = sc.hidden_size;
    c->n_heads = sc.num_attention_heads;
    c->n_kv_heads = sc.num_key_value_heads;
    c->head_dim = sc.head_dim;
    c->ffn = sc.intermediate_size;
    c->vocab = sc.vocab_size;
    c->qk_norm = safetensors_find_tensor(st, "model.layers.0.self_attn.q_norm.weight") != NULL;
    c->rope_theta = (float)sc.rope_theta;
    c->norm_eps = (float)sc.rms_norm_eps;
    safetensors_free(st);
    char label[600];
    snprintf(label, sizeof label, "%s/config.json", dir);
    return model_config_validate(c, label, err, errlen);
}

/* One destination: a tensor name, its expected shape, and where its rows go. */
struct load_job {
    const struct safetensors *st;
    const struct kctx *ctx;
    const struct backend *be;
    uint16_t *stage; /* host staging of the largest tensor */
    size_t stage_elems;
    char *err;
    size_t errlen;
};

static int load_tensor(struct load_job *j, const char *name, uint64_t rows, uint64_t cols,
                       uint16_t *dst)
{
    const struct safetensors_tensor *t = safetensors_find_tensor(j->st, name);
    if (!t) {
        snprintf(j->err, j->errlen, "tensor '%s' is missing from the checkpoint", name);
        return PULSE_ERR_INVALID;
    }
    int shape_ok = cols == 0 ? (t->n_dims == 1 && t->shape[0] == rows)
                             : (t->n_dims == 2 && t->shape[0] == rows && t->shape[1] == cols);
    if (!shape_ok) {
        snprintf(j->err, j->errlen,
                 "%s: tensor '%s' has shape [%llu%s%llu], the config wants [%llu%s%llu]", t->file,
                 name, (unsigned long long)t->shape[0], t->n_dims > 1 ? ", " : "",
                 t->n_dims > 1 ? (unsigned long long)t->shape[1] : 0ull, (unsigned long long)rows,
                 cols ? ", " : "", (unsigned long long)cols);
        return PULSE_ERR_INVALID;
    }
    int rc = safetensors_read_bf16(j->st, t, j->stage, j->stage_elems, j->err, j->errlen);
    if (rc != PULSE_OK) return rc;
    const size_t bad = bf16_count_nonfinite(j->stage, t->n_elems);
    if (bad) {
        snprintf(j->err, j->errlen, "%s: tensor '%s' has %zu NaN or infinite values", t->file, name,
                 bad);
        return PULSE_ERR_INVALID;
    }
    j->be->upload(j->ctx, dst, j->stage, t->n_elems * sizeof(uint16_t));
    return PULSE_OK;
}

int model_load_hf(struct model *m, const char *dir, const struct kctx *ctx, char *err,
                  size_t errlen)
{
    const struct model_config *c = m->cfg;
    struct safetensors *st;
    int rc = safetensors_open(dir, &st, err, errlen);
    if (rc != PULSE_OK) return rc;
    uint64_t H = (uint64_t)c->hidden, hd = (uint64_t)c->head_dim, F = (uint64_t)c->ffn;
    uint64_t qd = (uint64_t)c->n_heads * hd, kvd = (uint64_t)c->n_kv_heads * hd;
    size_t biggest = (size_t)PULSE_MAX((uint64_t)c->vocab * H, PULSE_MAX(F * H, qd * H));
    struct load_job j = {st, ctx, m->be, NULL, biggest, err, errlen};
    j.stage = mem_alloc(MEM_HOST, biggest * sizeof(uint16_t), "load staging");
    if (!j.stage) {
        snprintf(err, errlen, "%s: out of host memory for a %zu-element tensor", dir, biggest);
        safetensors_free(st);
        return PULSE_ERR_NOMEM;
    }
    char name[160];
#define LOAD(rows, cols, dst, ...)                                                                 \
    do {                                                                                           \
        snprintf(name, sizeof name, __VA_ARGS__);                                                  \
        if ((rc = load_tensor(&j, name, (rows), (cols), (dst))) != PULSE_OK) goto out;             \
    } while (0)
    LOAD(c->vocab, H, m->embed, "model.embed_tokens.weight");
    for (int l = 0; l < c->n_layers; l++) {
        struct layer_weights *w = &m->layers[l];
        const char *p = "model.layers";
        LOAD(H, 0, w->attn_norm, "%s.%d.input_layernorm.weight", p, l);
        LOAD(qd, H, w->wqkv, "%s.%d.self_attn.q_proj.weight", p, l);
        LOAD(kvd, H, w->wqkv + qd * H, "%s.%d.self_attn.k_proj.weight", p, l);
        LOAD(kvd, H, w->wqkv + (qd + kvd) * H, "%s.%d.self_attn.v_proj.weight", p, l);
        if (c->qk_norm) {
            LOAD(hd, 0, w->q_norm, "%s.%d.self_attn.q_norm.weight", p, l);
            LOAD(hd, 0, w->k_norm, "%s.%d.self_attn.k_norm.weight", p, l);
        }
        LOAD(H, qd, w->wo, "%s.%d.self_attn.o_proj.weight", p, l);
        LOAD(H, 0, w->mlp_norm, "%s.%d.post_attention_layernorm.weight", p, l);
        LOAD(F, H, w->wgu, "%s.%d.mlp.gate_proj.weight", p, l);
        LOAD(F, H, w->wgu + F * H, "%s.%d.mlp.up_proj.weight", p, l);
        LOAD(H, F, w->wdown, "%s.%d.mlp.down_proj.weight", p, l);
    }
    LOAD(H, 0, m->final_norm, "model.norm.weight");
    if (safetensors_find_tensor(st, "lm_head.weight"))
        LOAD(c->vocab, H, m->lm_head, "lm_head.weight");
    else /* tied embeddings */
        LOAD(c->vocab, H, m->lm_head, "model.embed_tokens.weight");
#undef LOAD
out:
    mem_free(MEM_HOST, j.stage, biggest * sizeof(uint16_t));
    safetensors_free(st);
    return rc;
}
