/* GGUF (llama / qwen3 / gemma3 architectures) into the model struct (model_load.h). */
#include <stdio.h>
#include <string.h>

#include "accuracy/gguf.h"
#include "common.h"
#include "mem.h"
#include "model_load.h"
#include "numeric.h"

/* general.architecture into buf (NUL-terminated); PULSE_OK or an error in err. */
static int read_arch(const struct gguf_file *g, char *buf, size_t len, char *err, size_t errlen)
{
    struct gguf_str s;
    int rc = gguf_get_str(g, "general.architecture", &s, err, errlen);
    if (rc != PULSE_OK) return rc;
    snprintf(buf, len, "%.*s", (int)(s.len < len ? s.len : len - 1), s.ptr);
    if (strcmp(buf, "llama") != 0 && strcmp(buf, "qwen3") != 0 && strcmp(buf, "gemma3") != 0) {
        snprintf(err, errlen,
                 "%s: architecture '%s': only llama, qwen3 and gemma3 load into this "
                 "runtime",
                 gguf_label(g), buf);
        return PULSE_ERR_INVALID;
    }
    return PULSE_OK;
}

static int get_int_key(const struct gguf_file *g, const char *arch, const char *key, int64_t *out,
                       char *err, size_t errlen)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    return gguf_get_int(g, k, out, err, errlen);
}

int model_config_from_gguf(const char *path, struct loaded_config *out, char *err, size_t errlen)
{
    struct gguf_file *g;
    int rc = gguf_open(path, &g, err, errlen);
    if (rc != PULSE_OK) return rc;
    char arch[32], k[128];
    int64_t layers, hidden, ffn, heads, kv_heads, hd;
    double eps = 1e-6, theta = 10000.0;
    memset(out, 0, sizeof *out);
    if ((rc = read_arch(g, arch, sizeof arch, err, errlen)) != PULSE_OK ||
        (rc = get_int_key(g, arch, "block_count", &layers, err, errlen)) != PULSE_OK ||
        (rc = get_int_key(g, arch, "embedding_length", &hidden, err, errlen)) != PULSE_OK ||
        (rc = get_int_key(g, arch, "feed_forward_length", &ffn, err, errlen)) != PULSE_OK ||
        (rc = get_int_key(g, arch, "attention.head_count", &heads, err, errlen)) != PULSE_OK ||
        (rc = get_int_key(g, arch, "attention.head_count_kv", &kv_heads, err, errlen)) != PULSE_OK)
        goto out;
    if (get_int_key(g, arch, "attention.key_length", &hd, err, errlen) != PULSE_OK)
        hd = heads > 0 ? hidden / heads : 0;
    snprintf(k, sizeof k, "%s.attention.layer_norm_rms_epsilon", arch);
    if (gguf_find_kv(g, k) && (rc = gguf_get_float(g, k, &eps, err, errlen)) != PULSE_OK) goto out;
    snprintf(k, sizeof k, "%s.rope.freq_base", arch);
    if (gguf_find_kv(g, k) && (rc = gguf_get_float(g, k, &theta, err, errlen)) != PULSE_OK)
        goto out;
    const struct gguf_tensor *emb = gguf_find_tensor(g, "token_embd.weight");
    if (!emb || emb->n_dims != 2) {
        snprintf(err, errlen, "%s: tensor 'token_embd.weight' is missing or not 2-D", path);
        rc = PULSE_ERR_INVALID;
        goto out;
    }
    /* each within int before the config holds it; model_config_validate checks the rest */
    if (layers < 1 || hidden < 1 || ffn < 1 || heads < 1 || kv_heads < 1 || hd < 1 ||
        layers > MODEL_MAX_LAYERS || hidden > MODEL_MAX_HIDDEN || ffn > MODEL_MAX_FFN ||
        heads > MODEL_MAX_HEADS || kv_heads > MODEL_MAX_HEADS || hd > MODEL_MAX_HEAD_DIM ||
        emb->ne[1] < 1 || emb->ne[1] > MODEL_MAX_VOCAB) {
        snprintf(err, errlen,
                 "%s: shape metadata out of range (layers %lld, hidden %lld, "
                 "heads %lld/%lld, head_dim %lld, ffn %lld, vocab %llu)",
                 path, (long long)layers, (long long)hidden, (long long)heads, (long long)kv_heads,
                 (long long)hd, (long long)ffn, (unsigned long long)emb->ne[1]);
        rc = PULSE_ERR_INVALID;
        goto out;
    }
    /* the tokenizer's ids index the embedding: a vocabulary larger than its rows would read
     * past the table */
    const struct gguf_value *tv = gguf_find_kv(g, "tokenizer.ggml.tokens");
    if (tv && tv->type == GGUF_TYPE_ARRAY && tv->a.n > emb->ne[1]) {
        snprintf(err, errlen,
                 "%s: the tokenizer has %llu tokens but token_embd.weight only %llu rows", path,
                 (unsigned long long)tv->a.n, (unsigned long long)emb->ne[1]);
        rc = PULSE_ERR_INVALID;
        goto out;
    }
    snprintf(out->name, sizeof out->name, "%s", path);
    struct model_config *c = &out->cfg;
    c->name = out->name;
    c->n_layers = (int)layers;
    c->hidden = (int)hidden;
    c->n_heads = (int)heads;
    c->n_kv_heads = (int)kv_heads;
    c->head_dim = (int)hd;
    c->ffn = (int)ffn;
    c->vocab = (int)emb->ne[1];
    c->qk_norm = gguf_find_tensor(g, "blk.0.attn_q_norm.weight") != NULL;
    c->rope_theta = (float)theta;
    c->norm_eps = (float)eps;
    if (!strcmp(arch, "gemma3")) {
        /* llama.cpp's gemma3: every 6th layer global, local RoPE base 10000 (not in the file) */
        int64_t window = 0;
        if ((rc = get_int_key(g, arch, "attention.sliding_window", &window, err, errlen)) !=
            PULSE_OK)
            goto out;
        if (window < 1 || window > 1 << 20) {
            snprintf(err, errlen, "%s: gemma3.attention.sliding_window %lld out of range", path,
                     (long long)window);
            rc = PULSE_ERR_INVALID;
            goto out;
        }
        c->arch = MODEL_ARCH_GEMMA3;
        c->sliding_window = (int)window;
        c->sliding_pattern = 6;
        c->rope_theta_local = 10000.0f;
    }
    rc = model_config_validate(c, path, err, errlen);
out:
    gguf_free(g);
    return rc;
}

struct gjob {
    const struct gguf_file *g;
    const struct kctx *ctx;
    const struct backend *be;
    uint16_t *stage, *perm; /* host staging; perm: un-permuted rows */
    size_t cap;
    int unpermute_qk; /* llama arch */
    char *err;
    size_t errlen;
};

/* Loads tensor `name` ([rows][cols] in row-major, GGUF ne = {cols, rows}; cols 0: 1-D of rows)
 * into dst. heads > 0 undoes llama.cpp's Q/K row permutation for that many heads. */
static int gload(struct gjob *j, const char *name, uint64_t rows, uint64_t cols, uint16_t *dst,
                 int heads)
{
    const struct gguf_tensor *t = gguf_find_tensor(j->g, name);
    if (!t) {
        snprintf(j->err, j->errlen, "%s: tensor '%s' is missing", gguf_label(j->g), name);
        return PULSE_ERR_INVALID;
    }
    int ok = cols == 0 ? (t->n_dims == 1 && t->ne[0] == rows)
                       : (t->n_dims == 2 && t->ne[0] == cols && t->ne[1] == rows);
    if (!ok) {
        snprintf(j->err, j->errlen,
                 "%s: tensor '%s' has ne [%llu, %llu], the config wants "
                 "[%llu, %llu]",
                 gguf_label(j->g), name, (unsigned long long)t->ne[0],
                 t->n_dims > 1 ? (unsigned long long)t->ne[1] : 1ull,
                 (unsigned long long)(cols ? cols : rows), (unsigned long long)(cols ? rows : 1));
        return PULSE_ERR_INVALID;
    }
    int rc = gguf_tensor_read_bf16(j->g, t, j->stage, j->cap, j->err, j->errlen);
    if (rc != PULSE_OK) return rc;
    const size_t bad = bf16_count_nonfinite(j->stage, t->n_elems);
    if (bad) {
        snprintf(j->err, j->errlen, "%s: tensor '%s' has %zu NaN or infinite values",
                 gguf_label(j->g), name, bad);
        return PULSE_ERR_INVALID;
    }
    const uint16_t *src = j->stage;
    if (heads > 0 && j->unpermute_qk) {
        /* GGUF row h*hd + 2i + p holds HF row h*hd + p*hd/2 + i */
        uint64_t hd = rows / (uint64_t)heads;
        for (uint64_t h = 0; h < (uint64_t)heads; h++)
            for (uint64_t i = 0; i < hd / 2; i++)
                for (uint64_t p = 0; p < 2; p++)
                    memcpy(j->perm + (h * hd + p * hd / 2 + i) * cols,
                           j->stage + (h * hd + 2 * i + p) * cols, cols * sizeof(uint16_t));
        src = j->perm;
    }
    j->be->upload(j->ctx, dst, src, t->n_elems * sizeof(uint16_t));
    return PULSE_OK;
}

int model_load_gguf(struct model *m, const char *path, const struct kctx *ctx, char *err,
                    size_t errlen)
{
    const struct model_config *c = m->cfg;
    struct gguf_file *g;
    int rc = gguf_open(path, &g, err, errlen);
    if (rc != PULSE_OK) return rc;
    char arch[32];
    if ((rc = read_arch(g, arch, sizeof arch, err, errlen)) != PULSE_OK ||
        (!strcmp(arch, "gemma3") != (c->arch == MODEL_ARCH_GEMMA3))) {
        if (rc == PULSE_OK) {
            snprintf(err, errlen, "%s: architecture '%s' does not match the config's", path, arch);
            rc = PULSE_ERR_INVALID;
        }
        gguf_free(g);
        return rc;
    }
    uint64_t H = (uint64_t)c->hidden, hd = (uint64_t)c->head_dim, F = (uint64_t)c->ffn;
    uint64_t qd = (uint64_t)c->n_heads * hd, kvd = (uint64_t)c->n_kv_heads * hd;
    size_t cap = (size_t)PULSE_MAX((uint64_t)c->vocab * H, PULSE_MAX(F * H, qd * H));
    struct gjob j = {g, ctx, m->be, NULL, NULL, cap, !strcmp(arch, "llama"), err, errlen};

    j.stage = mem_alloc(MEM_HOST, cap * sizeof(uint16_t), "gguf staging");
    j.perm = mem_alloc(MEM_HOST, qd * H * sizeof(uint16_t), "gguf unpermute");
    if (!j.stage || !j.perm) {
        snprintf(err, errlen, "%s: out of host memory for staging", path);
        rc = PULSE_ERR_NOMEM;
        goto out;
    }
    char name[96];
#define GLOAD(rows, cols, dst, heads, ...)                                                         \
    do {                                                                                           \
        snprintf(name, sizeof name, __VA_ARGS__);                                                  \
        if ((rc = gload(&j, name, (rows), (cols), (dst), (heads))) != PULSE_OK) goto out;          \
    } while (0)
    GLOAD(c->vocab, H, m->embed, 0, "token_embd.weight");
    for (int l = 0; l < c->n_layers; l++) {
        struct layer_weights *w = &m->layers[l];
        GLOAD(H, 0, w->attn_norm, 0, "blk.%d.attn_norm.weight", l);
        GLOAD(qd, H, w->wqkv, c->n_heads, "blk.%d.attn_q.weight", l);
        GLOAD(kvd, H, w->wqkv + qd * H, c->n_kv_heads, "blk.%d.attn_k.weight", l);
        GLOAD(kvd, H, w->wqkv + (qd + kvd) * H, 0, "blk.%d.attn_v.weight", l);
        if (c->qk_norm) {
            GLOAD(hd, 0, w->q_norm, 0, "blk.%d.attn_q_norm.weight", l);
            GLOAD(hd, 0, w->k_norm, 0, "blk.%d.attn_k_norm.weight", l);
        }
        GLOAD(H, qd, w->wo, 0, "blk.%d.attn_output.weight", l);
        GLOAD(H, 0, w->mlp_norm, 0, "blk.%d.ffn_norm.weight", l);
        GLOAD(F, H, w->wgu, 0, "blk.%d.ffn_gate.weight", l);
        GLOAD(F, H, w->wgu + F * H, 0, "blk.%d.ffn_up.weight", l);
        GLOAD(H, F, w->wdown, 0, "blk.%d.ffn_down.weight", l);
        if (c->arch == MODEL_ARCH_GEMMA3) { /* norms stored as 1 + w by the converter */
            GLOAD(H, 0, w->post_attn_norm, 0, "blk.%d.post_attention_norm.weight", l);
            GLOAD(H, 0, w->post_mlp_norm, 0, "blk.%d.post_ffw_norm.weight", l);
        }
    }
    GLOAD(H, 0, m->final_norm, 0, "output_norm.weight");
    if (m->lm_head == m->embed) /* tied in the layout (gemma3) */
        ;
    else if (gguf_find_tensor(g, "output.weight"))
        GLOAD(c->vocab, H, m->lm_head, 0, "output.weight");
    else /* tied embeddings */
        GLOAD(c->vocab, H, m->lm_head, 0, "token_embd.weight");
#undef GLOAD
out:
    mem_free(MEM_HOST, j.perm, qd * H * sizeof(uint16_t));
    mem_free(MEM_HOST, j.stage, cap * sizeof(uint16_t));
    gguf_free(g);
    return rc;
}

int model_path_is_gguf(const char *path)
{
    /* by its magic, whatever the name; a directory (a checkpoint) or an unreadable path is not */
    if (pulse_check_regular(path, "GGUF file", NULL, 0) != PULSE_OK) return 0;
    FILE *f = fopen(path, "rb");
    char magic[4] = {0};
    const int ok = f && fread(magic, 1, 4, f) == 4 && !memcmp(magic, "GGUF", 4);
    if (f) fclose(f);
    return ok;
}

static int is_gguf(const char *path)
{
    return model_path_is_gguf(path);
}

int model_config_from_path(const char *path, struct loaded_config *out, char *err, size_t errlen)
{
    return is_gguf(path) ? model_config_from_gguf(path, out, err, errlen)
                         : model_config_from_hf(path, out, err, errlen);
}

int model_load_path(struct model *m, const char *path, const struct kctx *ctx, char *err,
                    size_t errlen)
{
    return is_gguf(path) ? model_load_gguf(m, path, ctx, err, errlen)
                         : model_load_hf(m, path, ctx, err, errlen);
}
