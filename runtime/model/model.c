#include "model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "numeric.h"

/* Shapes from the models' published configs (config.json). */
/* one config per entry */
/* clang-format off */
#define ROPE_PLAIN {ROPE_DEFAULT, 0.0f, 0.0f, 0.0f, 0, NULL}
static const struct model_config configs[] = {
    {"qwen3-14b", 40, 5120, 40, 8, 128, 17408, 151936, 1, 1000000.0f, 1e-6f, 0, 0, 0, 0.0f,
     ROPE_PLAIN},
    {"qwen3-8b", 36, 4096, 32, 8, 128, 12288, 151936, 1, 1000000.0f, 1e-6f, 0, 0, 0, 0.0f,
     ROPE_PLAIN},
    {"llama-3.1-8b", 32, 4096, 32, 8, 128, 14336, 128256, 0, 500000.0f, 1e-5f, 0, 0, 0, 0.0f,
     {ROPE_LLAMA3, 8.0f, 1.0f, 4.0f, 8192, NULL}},
    {"gemma3-270m", 18, 640, 4, 1, 256, 2048, 262144, 1, 1000000.0f, 1e-6f, MODEL_ARCH_GEMMA3, 512,
     6, 10000.0f, ROPE_PLAIN},
    {"tiny", 4, 256, 4, 2, 64, 512, 1024, 1, 10000.0f, 1e-6f, 0, 0, 0, 0.0f, ROPE_PLAIN},
    /* the Gemma 3 layer structure at test size: layers 2 and 5 global, a 24-token window */
    {"tiny-gemma3", 6, 256, 4, 1, 128, 512, 1024, 1, 1000000.0f, 1e-6f, MODEL_ARCH_GEMMA3, 24, 3,
     10000.0f, ROPE_PLAIN},
};
#undef ROPE_PLAIN
/* clang-format on */

const struct model_config *model_config_find(const char *name)
{
    for (size_t i = 0; i < PULSE_ARRAY_LEN(configs); i++)
        if (strcmp(configs[i].name, name) == 0) return &configs[i];
    return NULL;
}

const struct model_config *model_config_at(int i)
{
    return (i >= 0 && (size_t)i < PULSE_ARRAY_LEN(configs)) ? &configs[i] : NULL;
}

const char *model_config_names(void)
{
    return "qwen3-14b, qwen3-8b, llama-3.1-8b, gemma3-270m, tiny, tiny-gemma3";
}

int model_layer_is_global(const struct model_config *c, int layer)
{
    return c->sliding_window <= 0 || c->sliding_pattern <= 0 ||
           (layer + 1) % c->sliding_pattern == 0;
}

int model_layer_window(const struct model_config *c, int layer)
{
    return model_layer_is_global(c, layer) ? 0 : c->sliding_window;
}

const char *model_rope_type_name(int type)
{
    static const char *const names[] = {"default", "linear", "llama3"};
    return type >= 0 && (size_t)type < PULSE_ARRAY_LEN(names) ? names[type] : "unknown";
}

/* Llama 3.1's rescaling of one inverse frequency (struct rope_scaling), in double. */
static double llama3_inv_freq(const struct rope_scaling *s, double f)
{
    const double old_len = s->original_max_pos, pi = 3.14159265358979323846;
    const double low_wavelen = old_len / s->low_freq_factor;
    const double high_wavelen = old_len / s->high_freq_factor;
    const double wavelen = 2.0 * pi / f;
    if (wavelen < high_wavelen) return f;
    if (wavelen > low_wavelen) return f / s->factor;
    const double smooth =
        (old_len / wavelen - s->low_freq_factor) / (s->high_freq_factor - s->low_freq_factor);
    return (1.0 - smooth) * f / s->factor + smooth * f;
}

void model_rope_inv_freq_plain(float theta, int head_dim, float *inv_freq)
{
    for (int i = 0; i < head_dim / 2; i++) /* the fp32 exponent, then powf */
        inv_freq[i] = powf(theta, -2.0f * (float)i / (float)head_dim);
}

/* The table of the global (global = 1) or the local layers. */
static void rope_table(const struct model_config *c, int global, float *inv_freq)
{
    const struct rope_scaling *s = &c->rope;
    model_rope_inv_freq_plain(global ? c->rope_theta : c->rope_theta_local, c->head_dim, inv_freq);
    for (int i = 0; global && i < c->head_dim / 2; i++) {
        float f = inv_freq[i];
        if (s->freq_factors) f /= s->freq_factors[i];
        if (s->type == ROPE_LINEAR) f /= s->factor;
        if (s->type == ROPE_LLAMA3) f = (float)llama3_inv_freq(s, (double)f);
        inv_freq[i] = f;
    }
}

void model_rope_inv_freq(const struct model_config *c, int layer, float *inv_freq)
{
    rope_table(c, model_layer_is_global(c, layer), inv_freq);
}

int model_n_global_layers(const struct model_config *c)
{
    int n = 0;
    for (int l = 0; l < c->n_layers; l++)
        n += model_layer_is_global(c, l);
    return n;
}

static int positive_finite(float x)
{
    return isfinite(x) && x > 0.0f;
}

static int rope_check(const struct model_config *c, const char *label, char *err, size_t errlen)
{
    const struct rope_scaling *s = &c->rope;
    int ok = s->type == ROPE_DEFAULT || (s->type == ROPE_LINEAR && positive_finite(s->factor)) ||
             (s->type == ROPE_LLAMA3 && positive_finite(s->factor) &&
              positive_finite(s->low_freq_factor) && positive_finite(s->high_freq_factor) &&
              s->high_freq_factor > s->low_freq_factor && s->original_max_pos >= 1);
    if (!ok) {
        snprintf(err, errlen,
                 "%s: RoPE scaling %s with factor %g, low_freq_factor %g, high_freq_factor %g, "
                 "original_max_position_embeddings %d: factors must be finite and > 0, high "
                 "above low, the length >= 1",
                 label, model_rope_type_name(s->type), (double)s->factor,
                 (double)s->low_freq_factor, (double)s->high_freq_factor, s->original_max_pos);
        return PULSE_ERR_INVALID;
    }
    for (int i = 0; s->freq_factors && i < c->head_dim / 2; i++)
        if (!positive_finite(s->freq_factors[i])) {
            snprintf(err, errlen, "%s: RoPE frequency factor %d is %g: must be finite and > 0",
                     label, i, (double)s->freq_factors[i]);
            return PULSE_ERR_INVALID;
        }
    return PULSE_OK;
}

int model_config_validate(const struct model_config *c, const char *label, char *err, size_t errlen)
{
    /* int fields compared one by one: no product is formed before its factors are bounded */
    if (c->n_layers < 1 || c->n_layers > MODEL_MAX_LAYERS || c->hidden < 1 ||
        c->hidden > MODEL_MAX_HIDDEN || c->n_heads < 1 || c->n_heads > MODEL_MAX_HEADS ||
        c->n_kv_heads < 1 || c->n_kv_heads > c->n_heads || c->head_dim < 2 ||
        c->head_dim > MODEL_MAX_HEAD_DIM || c->head_dim % 2 || c->n_heads % c->n_kv_heads ||
        c->ffn < 1 || c->ffn > MODEL_MAX_FFN || c->vocab < 1 || c->vocab > MODEL_MAX_VOCAB) {
        snprintf(err, errlen,
                 "%s: shape out of range (layers %d of 1..%d, hidden %d of 1..%d, heads %d/%d "
                 "of 1..%d with kv dividing heads, head_dim %d even in 2..%d, ffn %d of 1..%d, "
                 "vocab %d of 1..%d)",
                 label, c->n_layers, MODEL_MAX_LAYERS, c->hidden, MODEL_MAX_HIDDEN, c->n_heads,
                 c->n_kv_heads, MODEL_MAX_HEADS, c->head_dim, MODEL_MAX_HEAD_DIM, c->ffn,
                 MODEL_MAX_FFN, c->vocab, MODEL_MAX_VOCAB);
        return PULSE_ERR_INVALID;
    }
    if (!positive_finite(c->norm_eps) || !positive_finite(c->rope_theta) ||
        (c->sliding_window > 0 && !positive_finite(c->rope_theta_local))) {
        snprintf(err, errlen,
                 "%s: norm epsilon %g, RoPE base %g (local %g): each must be finite and > 0", label,
                 (double)c->norm_eps, (double)c->rope_theta, (double)c->rope_theta_local);
        return PULSE_ERR_INVALID;
    }
    if (rope_check(c, label, err, errlen) != PULSE_OK) return PULSE_ERR_INVALID;
    if (c->sliding_window < 0 || c->sliding_pattern < 0) {
        snprintf(err, errlen, "%s: sliding window %d, pattern %d: must be >= 0", label,
                 c->sliding_window, c->sliding_pattern);
        return PULSE_ERR_INVALID;
    }
    /* within these bounds: qkv width <= 3 * 1024 * 512 (int), weights < 2^50 elements; the
     * total must also fit size_t for the one allocation */
    uint64_t bytes = model_weight_bytes(c);
    if (bytes > (uint64_t)SIZE_MAX / 2) {
        snprintf(err, errlen, "%s: %llu weight bytes do not fit this machine's address space",
                 label, (unsigned long long)bytes);
        return PULSE_ERR_INVALID;
    }
    return PULSE_OK;
}

int model_config_check_backend(const struct model_config *c, const char *backend_name, char *err,
                               size_t errlen)
{
    if (strcmp(backend_name, "cuda") != 0) return PULSE_OK;
    int hd = c->head_dim, group = c->n_kv_heads > 0 ? c->n_heads / c->n_kv_heads : 0;
    if (hd != 64 && hd != 128 && hd != 256) {
        snprintf(err, errlen,
                 "%s: head_dim %d: the cuda backend's attention takes 64, 128 or 256 (the cpu "
                 "backend runs it)",
                 c->name, hd);
        return PULSE_ERR_INVALID;
    }
    if (group < 1 || group > 8) {
        snprintf(err, errlen,
                 "%s: %d query heads per KV head: the cuda backend's attention takes 1 to 8 "
                 "(the cpu backend runs it)",
                 c->name, group);
        return PULSE_ERR_INVALID;
    }
    return PULSE_OK;
}

static int tied(const struct model_config *c)
{
    return c->arch == MODEL_ARCH_GEMMA3;
}

int model_qkv_dim(const struct model_config *c)
{
    /* int64: a config not yet through model_config_validate must not overflow here */
    int64_t d = ((int64_t)c->n_heads + 2 * (int64_t)c->n_kv_heads) * c->head_dim;
    return d > INT32_MAX ? INT32_MAX : (int)d;
}

static uint64_t layer_params(const struct model_config *c)
{
    uint64_t h = (uint64_t)c->hidden, qd = (uint64_t)c->n_heads * c->head_dim;
    uint64_t p = h                                /* attn_norm */
                 + (uint64_t)model_qkv_dim(c) * h /* wqkv */
                 + h * qd                         /* wo */
                 + h                              /* mlp_norm */
                 + 3 * (uint64_t)c->ffn * h;      /* gate, up, down */
    if (c->qk_norm) p += 2 * (uint64_t)c->head_dim;
    if (c->arch == MODEL_ARCH_GEMMA3) p += 2 * h; /* post-norms */
    return p;
}

uint64_t model_param_count(const struct model_config *c)
{
    uint64_t vh = (uint64_t)c->vocab * c->hidden;
    return (uint64_t)c->n_layers * layer_params(c) + (tied(c) ? 1 : 2) * vh + (uint64_t)c->hidden;
}

uint64_t model_weight_bytes(const struct model_config *c)
{
    return 2 * model_param_count(c);
}

uint64_t model_step_weight_bytes(const struct model_config *c)
{
    /* a tied table is read whole by the head; an untied embedding only by a few rows */
    return tied(c) ? model_weight_bytes(c)
                   : model_weight_bytes(c) - 2 * (uint64_t)c->vocab * c->hidden;
}

uint64_t model_layer_weight_bytes(const struct model_config *c)
{
    return 2 * layer_params(c);
}

uint64_t model_mlp_weight_bytes(const struct model_config *c)
{
    return 2 * 3 * (uint64_t)c->ffn * c->hidden;
}

uint64_t model_kv_bytes_per_token(const struct model_config *c)
{
    return (uint64_t)c->n_layers * c->n_kv_heads * c->head_dim * 2 /* K,V */ * 2 /* bf16 */;
}

/* Carves `n` bf16 elements from the arena and fills them: linear weights uniform with unit
 * output variance (scale sqrt(3/fan_in)), norm weights around 1. */
struct carver {
    const struct backend *be;
    const struct kctx *ctx;
    uint16_t *next;
    uint64_t seed;
    uint64_t tensor;
    int fill; /* 0: leave the values to a loader */
};

static uint16_t *carve(struct carver *cv, size_t n, float scale, float offset)
{
    uint16_t *p = cv->next;
    cv->next += (n + 63) & ~(size_t)63; /* 128-byte alignment for vector loads */
    uint64_t seed = pulse_hash64(cv->seed, cv->tensor++);
    if (cv->fill) cv->be->fill_random_bf16(cv->ctx, p, n, seed, scale, offset);
    return p;
}

/* bf16-sized elements of the two fp32 RoPE tables (global, local), aligned like a carve */
static size_t rope_table_elems(const struct model_config *c)
{
    return ((size_t)2 * (size_t)c->head_dim + 63) & ~(size_t)63;
}

/* The RoPE tables at the arena's end (not seeded: they come from the config), and each layer's
 * pointer to its own. */
static void rope_tables(struct model *m, struct carver *cv, const struct kctx *ctx)
{
    const struct model_config *c = m->cfg;
    const int half = c->head_dim / 2;
    m->rope_inv_freq = (float *)cv->next;
    cv->next += rope_table_elems(c);
    float host[MODEL_MAX_HEAD_DIM];
    rope_table(c, 1, host);
    if (c->sliding_window > 0) /* a model without local layers has no local base */
        rope_table(c, 0, host + half);
    else
        memcpy(host + half, host, sizeof(float) * (size_t)half);
    m->be->upload(ctx, m->rope_inv_freq, host, sizeof(float) * (size_t)c->head_dim);
    for (int l = 0; l < c->n_layers; l++)
        m->layers[l].rope_inv_freq = m->rope_inv_freq + (model_layer_is_global(c, l) ? 0 : half);
}

static size_t arena_elems(const struct model_config *c)
{
    size_t total = 0, h = (size_t)c->hidden;
    size_t per_layer[] = {h, (size_t)model_qkv_dim(c) * h, (size_t)c->head_dim, (size_t)c->head_dim,
                          h * c->n_heads * c->head_dim, h, 2 * (size_t)c->ffn * h, h * c->ffn,
                          /* Gemma 3's post-norms: two carves, each aligned */
                          c->arch == MODEL_ARCH_GEMMA3 ? h : 0,
                          c->arch == MODEL_ARCH_GEMMA3 ? h : 0};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(per_layer); i++)
        total += (per_layer[i] + 63) & ~(size_t)63;
    total *= (size_t)c->n_layers;
    total +=
        (tied(c) ? 1 : 2) * (((size_t)c->vocab * h + 63) & ~(size_t)63) + ((h + 63) & ~(size_t)63);
    total += rope_table_elems(c);
    return total;
}

static int model_layout(struct model *m, const struct model_config *cfg, const struct backend *be,
                        const struct kctx *ctx, uint64_t seed, int fill)
{
    memset(m, 0, sizeof *m);
    m->cfg = cfg;
    m->be = be;
    m->bytes = arena_elems(cfg) * sizeof(uint16_t);
    m->base = mem_alloc(be->mem, m->bytes, "weights");
    if (!m->base) return PULSE_ERR_OOM;
    m->layers = mem_alloc(MEM_HOST, sizeof(struct layer_weights) * cfg->n_layers, "layer ptrs");
    if (!m->layers) {
        mem_free(be->mem, m->base, m->bytes);
        memset(m, 0, sizeof *m); /* model_free of it does nothing */
        return PULSE_ERR_OOM;
    }
    struct carver cv = {be, ctx, m->base, seed, 0, fill};
    float h = (float)cfg->hidden, qd = (float)cfg->n_heads * (float)cfg->head_dim;
    /* a tied table serves the head too: the head's scale, times sqrt(hidden) on the way in */
    m->embed =
        carve(&cv, (size_t)cfg->vocab * cfg->hidden, tied(cfg) ? sqrtf(3.0f / h) : 1.0f, 0.0f);
    for (int l = 0; l < cfg->n_layers; l++) {
        struct layer_weights *w = &m->layers[l];
        w->attn_norm = carve(&cv, cfg->hidden, 0.1f, 1.0f);
        w->wqkv = carve(&cv, (size_t)model_qkv_dim(cfg) * cfg->hidden, sqrtf(3.0f / h), 0.0f);
        uint16_t *qn = carve(&cv, cfg->head_dim, 0.1f, 1.0f);
        uint16_t *kn = carve(&cv, cfg->head_dim, 0.1f, 1.0f);
        w->q_norm = cfg->qk_norm ? qn : NULL;
        w->k_norm = cfg->qk_norm ? kn : NULL;
        w->wo =
            carve(&cv, (size_t)cfg->hidden * cfg->n_heads * cfg->head_dim, sqrtf(3.0f / qd), 0.0f);
        w->mlp_norm = carve(&cv, cfg->hidden, 0.1f, 1.0f);
        w->wgu = carve(&cv, 2 * (size_t)cfg->ffn * cfg->hidden, sqrtf(3.0f / h), 0.0f);
        w->wdown = carve(&cv, (size_t)cfg->hidden * cfg->ffn, sqrtf(3.0f / (float)cfg->ffn), 0.0f);
        if (cfg->arch == MODEL_ARCH_GEMMA3) {
            w->post_attn_norm = carve(&cv, cfg->hidden, 0.1f, 1.0f);
            w->post_mlp_norm = carve(&cv, cfg->hidden, 0.1f, 1.0f);
        }
    }
    m->final_norm = carve(&cv, cfg->hidden, 0.1f, 1.0f);
    if (tied(cfg)) {
        m->lm_head = m->embed;
        m->embed_scale = sqrtf(h);
    } else {
        m->lm_head = carve(&cv, (size_t)cfg->vocab * cfg->hidden, sqrtf(3.0f / h), 0.0f);
        m->embed_scale = 1.0f;
    }
    rope_tables(m, &cv, ctx);
    PULSE_CHECK((size_t)((char *)cv.next - (char *)m->base) == m->bytes, "arena size mismatch");
    return PULSE_OK;
}

int model_create(struct model *m, const struct model_config *cfg, const struct backend *be,
                 const struct kctx *ctx, uint64_t seed)
{
    return model_layout(m, cfg, be, ctx, seed, 1);
}

int model_alloc(struct model *m, const struct model_config *cfg, const struct backend *be,
                const struct kctx *ctx)
{
    return model_layout(m, cfg, be, ctx, 0, 0);
}

void model_free(struct model *m)
{
    if (!m->base) return;
    mem_free(m->be->mem, m->base, m->bytes);
    mem_free(MEM_HOST, m->layers, sizeof(struct layer_weights) * m->cfg->n_layers);
    memset(m, 0, sizeof *m);
}
