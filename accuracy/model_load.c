#include "model_load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accuracy/safetensors.h"
#include "common.h"
#include "mem.h"
#include "numeric.h"

#define REFUSE(...) (snprintf(err, errlen, __VA_ARGS__), PULSE_ERR_INVALID)

/* The RoPE scaling of config.json: a type this runtime implements with exactly its parameters
 * (transformers' names; each type takes the ones its formula uses, all of them required). */
static int hf_rope(const struct safetensors_config *sc, const char *label, struct rope_scaling *r,
                   char *err, size_t errlen)
{
    int type = -1;
    for (int t = ROPE_DEFAULT; t <= ROPE_LLAMA3; t++)
        if (!strcmp(sc->rope_type, model_rope_type_name(t))) type = t;
    if (type < 0)
        return REFUSE("%s: %s rope_type '%s' is not implemented (default, linear and llama3 are)",
                      label, sc->rope_field, sc->rope_type);
    if (sc->rope_unknown[0])
        return REFUSE("%s: %s.%s is not implemented (rope type %s)", label, sc->rope_field,
                      sc->rope_unknown, sc->rope_type);
    const unsigned lin = 1u << ROPE_LINEAR, l3 = 1u << ROPE_LLAMA3;
    const struct {
        const char *name;
        double v;
        unsigned types; /* the types whose formula uses it */
    } params[] = {{"factor", sc->rope_factor, lin | l3},
                  {"low_freq_factor", sc->rope_low_freq_factor, l3},
                  {"high_freq_factor", sc->rope_high_freq_factor, l3},
                  {"original_max_position_embeddings", sc->rope_original_max_pos, l3}};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(params); i++) {
        const int used = (params[i].types >> type) & 1, given = params[i].v > 0;
        if (used != given)
            return REFUSE(used ? "%s: %s rope type %s needs \"%s\""
                               : "%s: %s has \"%s\", which rope type %s does not use",
                          label, sc->rope_field, used ? sc->rope_type : params[i].name,
                          used ? params[i].name : sc->rope_type);
    }
    *r = (struct rope_scaling){type,
                               (float)sc->rope_factor,
                               (float)sc->rope_low_freq_factor,
                               (float)sc->rope_high_freq_factor,
                               sc->rope_original_max_pos,
                               NULL};
    return PULSE_OK;
}

/* The fields of config.json this runtime does not implement, each refused by name. */
static int hf_refuse_unimplemented(const struct safetensors_config *sc, const char *label,
                                   char *err, size_t errlen)
{
    if (sc->hidden_act[0] && strcmp(sc->hidden_act, "silu"))
        return REFUSE("%s: hidden_act '%s': the %s layers of this runtime run silu", label,
                      sc->hidden_act, sc->model_type);
    if (sc->attention_bias)
        return REFUSE("%s: attention_bias true: attention biases are not implemented", label);
    if (sc->mlp_bias) return REFUSE("%s: mlp_bias true: MLP biases are not implemented", label);
    if (sc->use_sliding_window || sc->sliding_layers)
        return REFUSE("%s: %s: sliding-window layers are not implemented for %s", label,
                      sc->use_sliding_window ? "use_sliding_window true" : "layer_types",
                      sc->model_type);
    if (sc->quantized)
        return REFUSE("%s: quantization_config: quantized checkpoints are not loaded (BF16, F16 "
                      "and F32 weights are)",
                      label);
    if (sc->partial_rotary_factor != 1.0)
        return REFUSE("%s: partial_rotary_factor %g: partial RoPE is not implemented", label,
                      sc->partial_rotary_factor);
    return PULSE_OK;
}

/* Walks every tensor the layout takes: with m == NULL it checks each (present, shaped as c
 * wants, a dtype the reader converts) and records it in used[]; with m it loads each into m. */
struct load_job {
    const struct safetensors *st;
    const struct kctx *ctx;
    const struct backend *be; /* NULL: check only */
    uint16_t *stage;          /* host staging of the largest tensor */
    size_t stage_elems;
    const struct safetensors_tensor **used; /* check: the tensors taken, n_used of them */
    size_t n_used;
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
        char has[96] = "[", want[48];
        for (int d = 0; d < t->n_dims && strlen(has) < 64; d++)
            snprintf(has + strlen(has), sizeof has - strlen(has), "%s%llu", d ? ", " : "",
                     (unsigned long long)t->shape[d]);
        if (cols)
            snprintf(want, sizeof want, "[%llu, %llu]", (unsigned long long)rows,
                     (unsigned long long)cols);
        else
            snprintf(want, sizeof want, "[%llu]", (unsigned long long)rows);
        snprintf(j->err, j->errlen, "%s: tensor '%s' has shape %s], the config wants %s", t->file,
                 name, has, want);
        return PULSE_ERR_INVALID;
    }
    if (t->dtype == SAFETENSORS_OTHER) {
        snprintf(j->err, j->errlen,
                 "%s: tensor '%s' has dtype %s; this loader reads BF16, F16 "
                 "and F32",
                 t->file, name, t->dtype_name);
        return PULSE_ERR_INVALID;
    }
    if (!j->be) {
        j->used[j->n_used++] = t;
        return PULSE_OK;
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

/* dst + off of a destination, NULL when checking */
#define AT(p, off) ((p) ? (p) + (off) : NULL)

static int walk(struct load_job *j, const struct model_config *c, struct model *m,
                int head_is_embed)
{
    uint64_t H = (uint64_t)c->hidden, hd = (uint64_t)c->head_dim, F = (uint64_t)c->ffn;
    uint64_t qd = (uint64_t)c->n_heads * hd, kvd = (uint64_t)c->n_kv_heads * hd;
    const struct layer_weights none = {0};
    char name[160];
    int rc;
#define LOAD(rows, cols, dst, ...)                                                                 \
    do {                                                                                           \
        snprintf(name, sizeof name, __VA_ARGS__);                                                  \
        if ((rc = load_tensor(j, name, (rows), (cols), (dst))) != PULSE_OK) return rc;             \
    } while (0)
    LOAD(c->vocab, H, m ? m->embed : NULL, "model.embed_tokens.weight");
    for (int l = 0; l < c->n_layers; l++) {
        const struct layer_weights *w = m ? &m->layers[l] : &none;
        const char *p = "model.layers";
        LOAD(H, 0, w->attn_norm, "%s.%d.input_layernorm.weight", p, l);
        LOAD(qd, H, w->wqkv, "%s.%d.self_attn.q_proj.weight", p, l);
        LOAD(kvd, H, AT(w->wqkv, qd * H), "%s.%d.self_attn.k_proj.weight", p, l);
        LOAD(kvd, H, AT(w->wqkv, (qd + kvd) * H), "%s.%d.self_attn.v_proj.weight", p, l);
        if (c->qk_norm) {
            LOAD(hd, 0, w->q_norm, "%s.%d.self_attn.q_norm.weight", p, l);
            LOAD(hd, 0, w->k_norm, "%s.%d.self_attn.k_norm.weight", p, l);
        }
        LOAD(H, qd, w->wo, "%s.%d.self_attn.o_proj.weight", p, l);
        LOAD(H, 0, w->mlp_norm, "%s.%d.post_attention_layernorm.weight", p, l);
        LOAD(F, H, w->wgu, "%s.%d.mlp.gate_proj.weight", p, l);
        LOAD(F, H, AT(w->wgu, F * H), "%s.%d.mlp.up_proj.weight", p, l);
        LOAD(H, F, w->wdown, "%s.%d.mlp.down_proj.weight", p, l);
    }
    LOAD(H, 0, m ? m->final_norm : NULL, "model.norm.weight");
    LOAD(c->vocab, H, m ? m->lm_head : NULL,
         head_is_embed ? "model.embed_tokens.weight" : "lm_head.weight");
#undef LOAD
    return PULSE_OK;
}

/* Why a tensor the layout does not take is in the checkpoint (a one-line refusal). */
static int refuse_unused(const struct safetensors_tensor *t, const struct model_config *c,
                         const char *model_type, char *err, size_t errlen)
{
    const size_t n = strlen(t->name);
    int l = -1, at = 0;
    sscanf(t->name, "model.layers.%d.%n", &l, &at);
    if (n > 5 && !strcmp(t->name + n - 5, ".bias"))
        return REFUSE("%s: tensor '%s': biases are not implemented", t->file, t->name);
    if (strstr(t->name, "self_attn.q_norm") || strstr(t->name, "self_attn.k_norm"))
        return REFUSE("%s: tensor '%s': QK-norm in a '%s' checkpoint (only qwen3 has it here)",
                      t->file, t->name, model_type);
    if (at > 0 && (l < 0 || l >= c->n_layers))
        return REFUSE("%s: tensor '%s': layer %d is beyond num_hidden_layers %d", t->file, t->name,
                      l, c->n_layers);
    return REFUSE("%s: tensor '%s' is not part of the %s layout this runtime loads", t->file,
                  t->name, model_type);
}

static int ptr_cmp(const void *a, const void *b)
{
    const void *x = *(const void *const *)a, *y = *(const void *const *)b;
    return x < y ? -1 : x > y;
}

/* The head: the embedding when tied (an lm_head.weight beside it must hold the same bytes:
 * transformers would ignore it, so a different one is ambiguous and refused), lm_head.weight
 * when untied (its absence refused: transformers would leave the head untrained). */
static int hf_head(const struct safetensors *st, int tie, const char *label, int *head_is_embed,
                   char *err, size_t errlen)
{
    const struct safetensors_tensor *lm = safetensors_find_tensor(st, "lm_head.weight"),
                                    *emb = safetensors_find_tensor(st, "model.embed_tokens.weight");
    *head_is_embed = tie;
    if (!tie && !lm)
        return REFUSE("%s: tie_word_embeddings is false but the checkpoint has no lm_head.weight",
                      label);
    if (tie && lm &&
        !(emb && lm->dtype == emb->dtype && lm->n_dims == emb->n_dims &&
          lm->n_bytes == emb->n_bytes && !memcmp(lm->shape, emb->shape, sizeof lm->shape) &&
          !memcmp(lm->data, emb->data, (size_t)lm->n_bytes)))
        return REFUSE("%s: tie_word_embeddings is true but lm_head.weight differs from "
                      "model.embed_tokens.weight (transformers would use the embedding): refused "
                      "as ambiguous",
                      label);
    return PULSE_OK;
}

/* Checks the checkpoint against c: the head (hf_head), every tensor the layout takes, and no
 * tensor beside them but the rotary inverse frequencies old checkpoints stored (recomputed from
 * the config, as transformers does). */
static int hf_check(const struct safetensors *st, const struct model_config *c,
                    const struct safetensors_config *sc, const char *label, int *head_is_embed,
                    char *err, size_t errlen)
{
    int rc = hf_head(st, sc->tie_word_embeddings, label, head_is_embed, err, errlen);
    if (rc != PULSE_OK) return rc;
    const uint64_t n = safetensors_tensor_count(st);
    struct load_job j = {st, NULL, NULL, NULL, 0, NULL, 0, err, errlen};
    j.used = malloc(sizeof *j.used * (size_t)(n + 2));
    if (!j.used)
        return REFUSE("%s: out of memory listing %llu tensors", label, (unsigned long long)n);
    if ((rc = walk(&j, c, NULL, *head_is_embed)) == PULSE_OK) {
        const struct safetensors_tensor *lm = safetensors_find_tensor(st, "lm_head.weight");
        if (lm && *head_is_embed) j.used[j.n_used++] = lm; /* the same bytes (hf_head) */
        qsort(j.used, j.n_used, sizeof *j.used, ptr_cmp);
        for (uint64_t i = 0; i < n && rc == PULSE_OK; i++) {
            const struct safetensors_tensor *t = safetensors_tensor_at(st, i);
            int l, at = 0;
            if (bsearch(&t, j.used, j.n_used, sizeof *j.used, ptr_cmp)) continue;
            if (sscanf(t->name, "model.layers.%d.self_attn.rotary_emb.inv_freq%n", &l, &at) == 1 &&
                at > 0 && !t->name[at])
                continue;
            rc = refuse_unused(t, c, sc->model_type, err, errlen);
        }
    }
    free(j.used);
    return rc;
}

/* config.json into sc and c (everything but the tensors); label names config.json. */
static int hf_config(const char *dir, struct safetensors_config *sc, struct loaded_config *out,
                     char *label, size_t label_len, char *err, size_t errlen)
{
    snprintf(label, label_len, "%s/config.json", dir);
    int rc = safetensors_read_config(dir, sc, err, errlen);
    if (rc != PULSE_OK) return rc;
    if (strcmp(sc->model_type, "llama") != 0 && strcmp(sc->model_type, "qwen3") != 0)
        return REFUSE("%s/config.json: model_type '%s': only the llama and qwen3 layouts load "
                      "into this runtime",
                      dir, sc->model_type);
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", dir);
    struct model_config *c = &out->cfg;
    c->name = out->name;
    c->n_layers = sc->num_hidden_layers;
    c->hidden = sc->hidden_size;
    c->n_heads = sc->num_attention_heads;
    c->n_kv_heads = sc->num_key_value_heads;
    c->head_dim = sc->head_dim;
    c->ffn = sc->intermediate_size;
    c->vocab = sc->vocab_size;
    c->qk_norm = !strcmp(sc->model_type, "qwen3"); /* Qwen3 has QK-norm, Llama has none */
    c->rope_theta = (float)sc->rope_theta;
    c->norm_eps = (float)sc->rms_norm_eps;
    if ((rc = hf_refuse_unimplemented(sc, label, err, errlen)) != PULSE_OK ||
        (rc = hf_rope(sc, label, &c->rope, err, errlen)) != PULSE_OK)
        return rc;
    return model_config_validate(c, label, err, errlen);
}

int model_config_from_hf(const char *dir, struct loaded_config *out, char *err, size_t errlen)
{
    struct safetensors_config sc;
    char label[600];
    int rc = hf_config(dir, &sc, out, label, sizeof label, err, errlen), head_is_embed;
    if (rc != PULSE_OK) return rc;
    struct safetensors *st;
    if ((rc = safetensors_open(dir, &st, err, errlen)) != PULSE_OK) return rc;
    rc = hf_check(st, &out->cfg, &sc, label, &head_is_embed, err, errlen);
    safetensors_free(st);
    return rc;
}

int model_load_hf(struct model *m, const char *dir, const struct kctx *ctx, char *err,
                  size_t errlen)
{
    const struct model_config *c = m->cfg;
    struct safetensors_config sc;
    struct loaded_config again; /* the head's tying comes from config.json */
    char label[600];
    int rc = hf_config(dir, &sc, &again, label, sizeof label, err, errlen), head_is_embed;
    if (rc != PULSE_OK) return rc;
    struct safetensors *st;
    if ((rc = safetensors_open(dir, &st, err, errlen)) != PULSE_OK) return rc;
    if ((rc = hf_check(st, c, &sc, label, &head_is_embed, err, errlen)) != PULSE_OK) {
        safetensors_free(st);
        return rc;
    }
    uint64_t H = (uint64_t)c->hidden, F = (uint64_t)c->ffn;
    uint64_t qd = (uint64_t)c->n_heads * (uint64_t)c->head_dim;
    size_t biggest = (size_t)PULSE_MAX((uint64_t)c->vocab * H, PULSE_MAX(F * H, qd * H));
    struct load_job j = {st, ctx, m->be, NULL, biggest, NULL, 0, err, errlen};
    j.stage = mem_alloc(MEM_HOST, biggest * sizeof(uint16_t), "load staging");
    if (!j.stage) {
        snprintf(err, errlen, "%s: out of host memory for a %zu-element tensor", dir, biggest);
        safetensors_free(st);
        return PULSE_ERR_NOMEM;
    }
    rc = walk(&j, c, m, head_is_embed);
    mem_free(MEM_HOST, j.stage, biggest * sizeof(uint16_t));
    safetensors_free(st);
    return rc;
}
