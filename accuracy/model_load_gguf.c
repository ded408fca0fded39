/* GGUF (llama / qwen3 / gemma3 architectures) into the model struct (model_load.h). The
 * metadata is read against a schema: every "<arch>." key must be one this loader implements
 * (or knows to leave alone), of its type, and the required ones present; the tensors are then
 * checked against the config (each one the layout takes, shaped and typed as it wants, and no
 * other), all before any weight is read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accuracy/gguf.h"
#include "common.h"
#include "mem.h"
#include "model_load.h"
#include "numeric.h"

#define REFUSE(...) (snprintf(err, errlen, __VA_ARGS__), PULSE_ERR_INVALID)

enum { A_LLAMA = 1, A_QWEN3 = 2, A_GEMMA3 = 4, A_ALL = 7 };
enum { K_INT, K_FLOAT, K_STR, K_BOOL };

/* The keys under "<arch>." this loader reads, for the architectures in `archs`; `required`:
 * those where it must be present (no default stands in for it). */
static const struct gkey {
    const char *name;
    int kind, archs, required;
} GKEYS[] = {
    {"block_count", K_INT, A_ALL, A_ALL},
    {"context_length", K_INT, A_ALL, A_ALL},
    {"embedding_length", K_INT, A_ALL, A_ALL},
    {"feed_forward_length", K_INT, A_ALL, A_ALL},
    {"attention.head_count", K_INT, A_ALL, A_ALL},
    {"attention.head_count_kv", K_INT, A_ALL, 0}, /* default head_count */
    {"attention.key_length", K_INT, A_ALL, 0},    /* default embedding / heads */
    {"attention.value_length", K_INT, A_ALL, 0},  /* must equal key_length */
    {"attention.layer_norm_rms_epsilon", K_FLOAT, A_ALL, A_ALL},
    {"rope.freq_base", K_FLOAT, A_ALL, A_ALL},
    {"rope.dimension_count", K_INT, A_ALL, 0}, /* must equal key_length */
    {"rope.scaling.type", K_STR, A_ALL, 0},    /* none or linear */
    {"rope.scaling.factor", K_FLOAT, A_ALL, 0},
    {"rope.scale_linear", K_FLOAT, A_ALL, 0},                  /* the factor's older name */
    {"rope.scaling.attn_factor", K_FLOAT, A_ALL, 0},           /* must be 1 */
    {"rope.scaling.original_context_length", K_INT, A_ALL, 0}, /* used by yarn only */
    {"rope.scaling.finetuned", K_BOOL, A_ALL, 0},              /* a note, no effect */
    {"vocab_size", K_INT, A_ALL, 0},                           /* must equal token_embd's rows */
    {"expert_count", K_INT, A_ALL, 0},                         /* must be 0 */
    {"expert_used_count", K_INT, A_ALL, 0},
    {"attention.sliding_window", K_INT, A_GEMMA3, A_GEMMA3},
    {"attention.sliding_window_pattern", K_INT, A_GEMMA3, 0}, /* default 6 (llama.cpp's) */
    {"rope.freq_base_swa", K_FLOAT, A_GEMMA3, 0},             /* default 10000 (llama.cpp's) */
};

static const char *const KIND_NAMES[] = {"an integer", "a float (float32 or float64)", "a string",
                                         "a bool"};

static int kind_of(uint32_t t)
{
    if (t <= GGUF_TYPE_INT32 || t == GGUF_TYPE_UINT64 || t == GGUF_TYPE_INT64) return K_INT;
    if (t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64) return K_FLOAT;
    if (t == GGUF_TYPE_STRING) return K_STR;
    if (t == GGUF_TYPE_BOOL) return K_BOOL;
    return -1;
}

/* general.architecture into buf (NUL-terminated) and its bit; PULSE_OK or an error in err. */
static int read_arch(const struct gguf_file *g, char *buf, size_t len, int *bit, char *err,
                     size_t errlen)
{
    struct gguf_str s;
    int rc = gguf_get_str(g, "general.architecture", &s, err, errlen);
    if (rc != PULSE_OK) return rc;
    snprintf(buf, len, "%.*s", (int)(s.len < len ? s.len : len - 1), s.ptr);
    *bit = !strcmp(buf, "llama")    ? A_LLAMA
           : !strcmp(buf, "qwen3")  ? A_QWEN3
           : !strcmp(buf, "gemma3") ? A_GEMMA3
                                    : 0;
    if (!*bit)
        return REFUSE("%s: architecture '%s': only llama, qwen3 and gemma3 load into this "
                      "runtime",
                      gguf_label(g), buf);
    return PULSE_OK;
}

/* Every "<arch>." key known and of its kind, every required one present, no split file. */
static int check_keys(const struct gguf_file *g, const char *arch, int bit, char *err,
                      size_t errlen)
{
    const char *label = gguf_label(g);
    const size_t alen = strlen(arch);
    const struct gguf_value *split = gguf_find_kv(g, "split.count");
    if (split && kind_of(split->type) == K_INT && split->u > 1)
        return REFUSE("%s: split.count %llu: split GGUF files are not loaded (merge them first)",
                      label, (unsigned long long)split->u);
    for (uint64_t i = 0; i < gguf_kv_count(g); i++) {
        const char *key = gguf_kv_key(g, i);
        if (strncmp(key, arch, alen) != 0 || key[alen] != '.') continue;
        const struct gkey *k = NULL;
        for (size_t j = 0; j < PULSE_ARRAY_LEN(GKEYS) && !k; j++)
            if ((GKEYS[j].archs & bit) && !strcmp(key + alen + 1, GKEYS[j].name)) k = &GKEYS[j];
        if (!k)
            return REFUSE("%s: metadata key '%s' is not implemented by this loader", label, key);
        const uint32_t type = gguf_kv_value(g, i)->type;
        if (kind_of(type) != k->kind)
            return REFUSE("%s: metadata key '%s' is %s, expected %s", label, key,
                          gguf_type_name(type), KIND_NAMES[k->kind]);
    }
    for (size_t j = 0; j < PULSE_ARRAY_LEN(GKEYS); j++) {
        char key[128];
        snprintf(key, sizeof key, "%s.%s", arch, GKEYS[j].name);
        if ((GKEYS[j].required & bit) && !gguf_find_kv(g, key))
            return REFUSE("%s: metadata key '%s' is missing (required: no default stands in)",
                          label, key);
    }
    return PULSE_OK;
}

/* The value of "<arch>.<name>" (checked by check_keys), or def when absent. */
static int key_int(const struct gguf_file *g, const char *arch, const char *name, int64_t def,
                   int64_t *out, char *err, size_t errlen)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, name);
    *out = def;
    return gguf_find_kv(g, k) ? gguf_get_int(g, k, out, err, errlen) : PULSE_OK;
}

static int key_float(const struct gguf_file *g, const char *arch, const char *name, double def,
                     double *out, char *err, size_t errlen)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, name);
    *out = def;
    return gguf_find_kv(g, k) ? gguf_get_float(g, k, out, err, errlen) : PULSE_OK;
}

/* RoPE scaling keys, as llama.cpp reads them: the type defaults to linear, the factor (or its
 * older name) to none; attn_factor scales q and k, which is refused unless 1; llama3's scaling
 * comes as the rope_freqs.weight tensor (read by the caller). */
static int gguf_rope(const struct gguf_file *g, const char *arch, struct rope_scaling *r, char *err,
                     size_t errlen)
{
    const char *label = gguf_label(g);
    char k[128], type[32] = "linear";
    snprintf(k, sizeof k, "%s.rope.scaling.type", arch);
    const struct gguf_value *tv = gguf_find_kv(g, k);
    if (tv) snprintf(type, sizeof type, "%.*s", (int)(tv->s.len < 31 ? tv->s.len : 31), tv->s.ptr);
    double f1, f2, attn;
    int rc;
    if ((rc = key_float(g, arch, "rope.scaling.factor", 0.0, &f1, err, errlen)) ||
        (rc = key_float(g, arch, "rope.scale_linear", 0.0, &f2, err, errlen)) ||
        (rc = key_float(g, arch, "rope.scaling.attn_factor", 1.0, &attn, err, errlen)))
        return rc;
    if (f1 != 0.0 && f2 != 0.0 && f1 != f2)
        return REFUSE("%s: %s.rope.scaling.factor %g and %s.rope.scale_linear %g differ", label,
                      arch, f1, arch, f2);
    const double factor = f1 != 0.0 ? f1 : f2; /* 0: none given */
    if (attn != 1.0)
        return REFUSE("%s: %s.rope.scaling.attn_factor %g: scaling the rotated q and k is not "
                      "implemented",
                      label, arch, attn);
    *r = (struct rope_scaling){ROPE_DEFAULT, 0.0f, 0.0f, 0.0f, 0, NULL};
    if (!strcmp(type, "linear")) {
        if (factor != 0.0 && factor != 1.0) r->type = ROPE_LINEAR, r->factor = (float)factor;
        return PULSE_OK;
    }
    if (!strcmp(type, "none")) {
        if (factor != 0.0 && factor != 1.0)
            return REFUSE("%s: %s.rope.scaling.type none with a factor of %g: contradictory", label,
                          arch, factor);
        return PULSE_OK;
    }
    return REFUSE("%s: %s.rope.scaling.type '%s' is not implemented (none and linear are; llama3 "
                  "scaling comes as rope_freqs.weight)",
                  label, arch, type);
}

/* rope_freqs.weight (llama: llama3-style per-pair divisors of the inverse frequencies) into
 * out's storage; none is fine. */
static int gguf_rope_freqs(const struct gguf_file *g, int bit, struct loaded_config *out, char *err,
                           size_t errlen)
{
    const struct gguf_tensor *t = gguf_find_tensor(g, "rope_freqs.weight");
    const int half = out->cfg.head_dim / 2;
    if (!t || bit != A_LLAMA) return PULSE_OK; /* another architecture's: refused as unused */
    if (t->n_dims != 1 || t->ne[0] != (uint64_t)half ||
        (t->type != GGUF_TENSOR_F32 && t->type != GGUF_TENSOR_F16 && t->type != GGUF_TENSOR_BF16))
        return REFUSE("%s: tensor 'rope_freqs.weight' has ne [%llu] of type %s; the config wants "
                      "[%d] of F32, F16 or BF16",
                      gguf_label(g), (unsigned long long)t->ne[0], gguf_tensor_type_name(t->type),
                      half);
    int rc = gguf_tensor_read_f32(g, t, out->rope_freq_factors, (uint64_t)half, err, errlen);
    if (rc == PULSE_OK) out->cfg.rope.freq_factors = out->rope_freq_factors;
    return rc;
}

/* Walks every tensor the layout takes (gload): with m == NULL it checks each (present, its ne
 * as the config wants, a type the reader dequantises, norms F32, F16 or BF16) and records it in
 * used[]; with m it loads each. */
struct gjob {
    const struct gguf_file *g;
    const struct kctx *ctx;
    const struct backend *be; /* NULL: check only */
    uint16_t *stage, *perm;   /* host staging; perm: un-permuted rows */
    size_t cap;
    int unpermute_qk; /* llama arch */
    const struct gguf_tensor **used;
    size_t n_used;
    char *err;
    size_t errlen;
};

/* Loads tensor `name` ([rows][cols] in row-major, GGUF ne = {cols, rows}; cols 0: 1-D of rows)
 * into dst. heads > 0 undoes llama.cpp's Q/K row permutation for that many heads. */
static int gload(struct gjob *j, const char *name, uint64_t rows, uint64_t cols, uint16_t *dst,
                 int heads)
{
    char *err = j->err;
    size_t errlen = j->errlen;
    const char *label = gguf_label(j->g);
    const struct gguf_tensor *t = gguf_find_tensor(j->g, name);
    if (!t) return REFUSE("%s: tensor '%s' is missing", label, name);
    int ok = cols == 0 ? (t->n_dims == 1 && t->ne[0] == rows)
                       : (t->n_dims == 2 && t->ne[0] == cols && t->ne[1] == rows);
    if (!ok)
        return REFUSE(
            "%s: tensor '%s' has ne [%llu, %llu], the config wants [%llu, %llu]", label, name,
            (unsigned long long)t->ne[0], t->n_dims > 1 ? (unsigned long long)t->ne[1] : 1ull,
            (unsigned long long)(cols ? cols : rows), (unsigned long long)(cols ? rows : 1));
    if (!gguf_tensor_type_supported(t->type))
        return REFUSE("%s: tensor '%s' has type %s, which this loader does not dequantise", label,
                      name, gguf_tensor_type_name(t->type));
    if (cols == 0 && t->type != GGUF_TENSOR_F32 && t->type != GGUF_TENSOR_F16 &&
        t->type != GGUF_TENSOR_BF16)
        return REFUSE("%s: tensor '%s' has type %s; a norm must be F32, F16 or BF16", label, name,
                      gguf_tensor_type_name(t->type));
    if (!j->be) {
        j->used[j->n_used++] = t;
        return PULSE_OK;
    }
    int rc = gguf_tensor_read_bf16(j->g, t, j->stage, j->cap, err, errlen);
    if (rc != PULSE_OK) return rc;
    const size_t bad = bf16_count_nonfinite(j->stage, t->n_elems);
    if (bad) return REFUSE("%s: tensor '%s' has %zu NaN or infinite values", label, name, bad);
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

/* dst + off of a destination, NULL when checking */
#define AT(p, off) ((p) ? (p) + (off) : NULL)

static int gwalk(struct gjob *j, const struct model_config *c, struct model *m)
{
    uint64_t H = (uint64_t)c->hidden, hd = (uint64_t)c->head_dim, F = (uint64_t)c->ffn;
    uint64_t qd = (uint64_t)c->n_heads * hd, kvd = (uint64_t)c->n_kv_heads * hd;
    const struct layer_weights none = {0};
    char name[96];
    int rc;
#define GLOAD(rows, cols, dst, heads, ...)                                                         \
    do {                                                                                           \
        snprintf(name, sizeof name, __VA_ARGS__);                                                  \
        if ((rc = gload(j, name, (rows), (cols), (dst), (heads))) != PULSE_OK) return rc;          \
    } while (0)
    GLOAD(c->vocab, H, m ? m->embed : NULL, 0, "token_embd.weight");
    for (int l = 0; l < c->n_layers; l++) {
        const struct layer_weights *w = m ? &m->layers[l] : &none;
        GLOAD(H, 0, w->attn_norm, 0, "blk.%d.attn_norm.weight", l);
        GLOAD(qd, H, w->wqkv, c->n_heads, "blk.%d.attn_q.weight", l);
        GLOAD(kvd, H, AT(w->wqkv, qd * H), c->n_kv_heads, "blk.%d.attn_k.weight", l);
        GLOAD(kvd, H, AT(w->wqkv, (qd + kvd) * H), 0, "blk.%d.attn_v.weight", l);
        if (c->qk_norm) {
            GLOAD(hd, 0, w->q_norm, 0, "blk.%d.attn_q_norm.weight", l);
            GLOAD(hd, 0, w->k_norm, 0, "blk.%d.attn_k_norm.weight", l);
        }
        GLOAD(H, qd, w->wo, 0, "blk.%d.attn_output.weight", l);
        GLOAD(H, 0, w->mlp_norm, 0, "blk.%d.ffn_norm.weight", l);
        GLOAD(F, H, w->wgu, 0, "blk.%d.ffn_gate.weight", l);
        GLOAD(F, H, AT(w->wgu, F * H), 0, "blk.%d.ffn_up.weight", l);
        GLOAD(H, F, w->wdown, 0, "blk.%d.ffn_down.weight", l);
        if (c->arch == MODEL_ARCH_GEMMA3) { /* norms stored as 1 + w by the converter */
            GLOAD(H, 0, w->post_attn_norm, 0, "blk.%d.post_attention_norm.weight", l);
            GLOAD(H, 0, w->post_mlp_norm, 0, "blk.%d.post_ffw_norm.weight", l);
        }
    }
    GLOAD(H, 0, m ? m->final_norm : NULL, 0, "output_norm.weight");
    if (c->arch == MODEL_ARCH_GEMMA3) /* tied in the layout: the embedding is the head */
        ;
    else if (gguf_find_tensor(j->g, "output.weight"))
        GLOAD(c->vocab, H, m ? m->lm_head : NULL, 0, "output.weight");
    else /* no head: llama.cpp's convention is the embedding */
        GLOAD(c->vocab, H, m ? m->lm_head : NULL, 0, "token_embd.weight");
#undef GLOAD
    return PULSE_OK;
}

static int ptr_cmp(const void *a, const void *b)
{
    const void *x = *(const void *const *)a, *y = *(const void *const *)b;
    return x < y ? -1 : x > y;
}

/* Why a tensor the layout does not take is in the file (a one-line refusal). */
static int refuse_unused(const struct gguf_file *g, const struct gguf_tensor *t, const char *arch,
                         int layers, char *err, size_t errlen)
{
    const char *label = gguf_label(g), *n = t->name;
    const size_t len = strlen(n);
    int l = -1, at = 0;
    sscanf(n, "blk.%d.%n", &l, &at);
    if (len > 5 && !strcmp(n + len - 5, ".bias"))
        return REFUSE("%s: tensor '%s': biases are not implemented", label, n);
    if (at > 0 && (l < 0 || l >= layers))
        return REFUSE("%s: tensor '%s': block %d is beyond %s.block_count %d", label, n, l, arch,
                      layers);
    if (strstr(n, "attn_q_norm") || strstr(n, "attn_k_norm"))
        return REFUSE("%s: tensor '%s': QK-norm in a '%s' file (qwen3 and gemma3 have it)", label,
                      n, arch);
    if (!strcmp(n, "output.weight"))
        return REFUSE("%s: tensor 'output.weight': this runtime ties gemma3's head to "
                      "token_embd.weight, so a separate head is not loaded",
                      label);
    if (!strcmp(n, "rope_freqs.weight"))
        return REFUSE("%s: tensor 'rope_freqs.weight': frequency factors are implemented for the "
                      "llama architecture only",
                      label);
    return REFUSE("%s: tensor '%s' is not part of the %s layout this runtime loads", label, n,
                  arch);
}

/* Checks the file's tensors against c: each one the layout takes (gwalk), and no other (the
 * llama architecture's rope_freqs.weight is the config's, model_config_from_gguf). */
static int gcheck(const struct gguf_file *g, const struct model_config *c, const char *arch,
                  int bit, char *err, size_t errlen)
{
    const uint64_t n = gguf_tensor_count(g);
    struct gjob j = {g, NULL, NULL, NULL, NULL, 0, 0, NULL, 0, err, errlen};
    j.used = malloc(sizeof *j.used * (size_t)(n + 2));
    if (!j.used)
        return REFUSE("%s: out of memory listing %llu tensors", gguf_label(g),
                      (unsigned long long)n);
    int rc = gwalk(&j, c, NULL);
    if (rc == PULSE_OK) {
        const struct gguf_tensor *rf = gguf_find_tensor(g, "rope_freqs.weight");
        if (rf && bit == A_LLAMA) j.used[j.n_used++] = rf;
        qsort(j.used, j.n_used, sizeof *j.used, ptr_cmp);
        for (uint64_t i = 0; i < n && rc == PULSE_OK; i++) {
            const struct gguf_tensor *t = gguf_tensor_at(g, i);
            if (!bsearch(&t, j.used, j.n_used, sizeof *j.used, ptr_cmp))
                rc = refuse_unused(g, t, arch, c->n_layers, err, errlen);
        }
    }
    free(j.used);
    return rc;
}

/* The metadata's shapes and constants into out->cfg (everything but the tensor checks). */
static int gguf_config(const struct gguf_file *g, const char *arch, int bit,
                       struct loaded_config *out, char *err, size_t errlen)
{
    const char *path = gguf_label(g);
    int64_t layers, hidden, ffn, heads, kv_heads, hd, vlen, rope_dim, ctx_len, experts, vocab_key;
    double eps, theta;
    int rc;
    if ((rc = check_keys(g, arch, bit, err, errlen)) ||
        (rc = key_int(g, arch, "block_count", 0, &layers, err, errlen)) ||
        (rc = key_int(g, arch, "embedding_length", 0, &hidden, err, errlen)) ||
        (rc = key_int(g, arch, "feed_forward_length", 0, &ffn, err, errlen)) ||
        (rc = key_int(g, arch, "attention.head_count", 0, &heads, err, errlen)) ||
        (rc = key_int(g, arch, "attention.head_count_kv", heads, &kv_heads, err, errlen)) ||
        (rc = key_int(g, arch, "attention.key_length", heads > 0 ? hidden / heads : 0, &hd, err,
                      errlen)) ||
        (rc = key_int(g, arch, "attention.value_length", hd, &vlen, err, errlen)) ||
        (rc = key_int(g, arch, "rope.dimension_count", hd, &rope_dim, err, errlen)) ||
        (rc = key_int(g, arch, "context_length", 0, &ctx_len, err, errlen)) ||
        (rc = key_int(g, arch, "expert_count", 0, &experts, err, errlen)) ||
        (rc = key_int(g, arch, "vocab_size", -1, &vocab_key, err, errlen)) ||
        (rc = key_float(g, arch, "attention.layer_norm_rms_epsilon", 0, &eps, err, errlen)) ||
        (rc = key_float(g, arch, "rope.freq_base", 0, &theta, err, errlen)))
        return rc;
    const struct gguf_tensor *emb = gguf_find_tensor(g, "token_embd.weight");
    if (!emb || emb->n_dims != 2)
        return REFUSE("%s: tensor 'token_embd.weight' is missing or not 2-D", path);
    /* each within int before the config holds it; model_config_validate checks the rest */
    if (layers < 1 || hidden < 1 || ffn < 1 || heads < 1 || kv_heads < 1 || hd < 1 ||
        layers > MODEL_MAX_LAYERS || hidden > MODEL_MAX_HIDDEN || ffn > MODEL_MAX_FFN ||
        heads > MODEL_MAX_HEADS || kv_heads > MODEL_MAX_HEADS || hd > MODEL_MAX_HEAD_DIM ||
        emb->ne[1] < 1 || emb->ne[1] > MODEL_MAX_VOCAB)
        return REFUSE("%s: shape metadata out of range (layers %lld, hidden %lld, heads %lld/%lld, "
                      "head_dim %lld, ffn %lld, vocab %llu)",
                      path, (long long)layers, (long long)hidden, (long long)heads,
                      (long long)kv_heads, (long long)hd, (long long)ffn,
                      (unsigned long long)emb->ne[1]);
    if (vlen != hd || rope_dim != hd)
        return REFUSE("%s: %s.attention.value_length %lld and rope.dimension_count %lld must equal "
                      "the key length %lld (partial RoPE and other value widths are not "
                      "implemented)",
                      path, arch, (long long)vlen, (long long)rope_dim, (long long)hd);
    if (ctx_len < 1)
        return REFUSE("%s: %s.context_length %lld must be >= 1", path, arch, (long long)ctx_len);
    if (experts != 0)
        return REFUSE("%s: %s.expert_count %lld: mixture-of-experts layers are not implemented",
                      path, arch, (long long)experts);
    if (vocab_key >= 0 && (uint64_t)vocab_key != emb->ne[1])
        return REFUSE("%s: %s.vocab_size %lld but token_embd.weight has %llu rows", path, arch,
                      (long long)vocab_key, (unsigned long long)emb->ne[1]);
    /* the tokenizer's ids index the embedding: a vocabulary larger than its rows would read
     * past the table */
    const struct gguf_value *tv = gguf_find_kv(g, "tokenizer.ggml.tokens");
    if (tv && tv->type == GGUF_TYPE_ARRAY && tv->a.n > emb->ne[1])
        return REFUSE("%s: the tokenizer has %llu tokens but token_embd.weight only %llu rows",
                      path, (unsigned long long)tv->a.n, (unsigned long long)emb->ne[1]);
    memset(out, 0, sizeof *out);
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
    c->qk_norm = bit != A_LLAMA; /* qwen3 and gemma3 have QK-norm, llama none */
    c->rope_theta = (float)theta;
    c->norm_eps = (float)eps;
    return PULSE_OK;
}

/* gemma3: the sliding window and its pattern (llama.cpp's every 6th layer global unless the
 * file says), the local RoPE base (10000 unless the file says); its 27B (62 layers, as
 * llama.cpp tells it) scales attention by 1/sqrt(hidden/heads), which this runtime does not. */
static int gguf_gemma3(const struct gguf_file *g, struct model_config *c, char *err, size_t errlen)
{
    const char *path = gguf_label(g);
    int64_t window, pattern;
    double local_base;
    int rc;
    if ((rc = key_int(g, "gemma3", "attention.sliding_window", 0, &window, err, errlen)) ||
        (rc = key_int(g, "gemma3", "attention.sliding_window_pattern", 6, &pattern, err, errlen)) ||
        (rc = key_float(g, "gemma3", "rope.freq_base_swa", 10000.0, &local_base, err, errlen)))
        return rc;
    if (window < 1 || window > 1 << 20)
        return REFUSE("%s: gemma3.attention.sliding_window %lld out of range", path,
                      (long long)window);
    if (pattern < 1 || pattern > MODEL_MAX_LAYERS)
        return REFUSE("%s: gemma3.attention.sliding_window_pattern %lld out of range", path,
                      (long long)pattern);
    if (c->n_layers == 62)
        return REFUSE("%s: gemma3 with 62 layers (27B) scales attention by 1/sqrt(hidden/heads), "
                      "which this runtime does not implement",
                      path);
    c->arch = MODEL_ARCH_GEMMA3;
    c->sliding_window = (int)window;
    c->sliding_pattern = (int)pattern;
    c->rope_theta_local = (float)local_base;
    return PULSE_OK;
}

int model_config_from_gguf(const char *path, struct loaded_config *out, char *err, size_t errlen)
{
    struct gguf_file *g;
    int rc = gguf_open(path, &g, err, errlen), bit;
    if (rc != PULSE_OK) return rc;
    char arch[32];
    memset(out, 0, sizeof *out);
    if ((rc = read_arch(g, arch, sizeof arch, &bit, err, errlen)) ||
        (rc = gguf_config(g, arch, bit, out, err, errlen)) ||
        (bit == A_GEMMA3 && (rc = gguf_gemma3(g, &out->cfg, err, errlen))) ||
        (rc = gguf_rope(g, arch, &out->cfg.rope, err, errlen)) ||
        (rc = gguf_rope_freqs(g, bit, out, err, errlen)) ||
        (rc = model_config_validate(&out->cfg, path, err, errlen)))
        goto out;
    rc = gcheck(g, &out->cfg, arch, bit, err, errlen);
out:
    gguf_free(g);
    return rc;
}

int model_load_gguf(struct model *m, const char *path, const struct kctx *ctx, char *err,
                    size_t errlen)
{
    const struct model_config *c = m->cfg;
    struct gguf_file *g;
    int rc = gguf_open(path, &g, err, errlen), bit;
    if (rc != PULSE_OK) return rc;
    char arch[32];
    if ((rc = read_arch(g, arch, sizeof arch, &bit, err, errlen)) != PULSE_OK ||
        (rc = gcheck(g, c, arch, bit, err, errlen)) != PULSE_OK) {
        gguf_free(g);
        return rc;
    }
    if ((bit == A_GEMMA3) != (c->arch == MODEL_ARCH_GEMMA3)) {
        snprintf(err, errlen, "%s: architecture '%s' does not match the config's", path, arch);
        gguf_free(g);
        return PULSE_ERR_INVALID;
    }
    uint64_t H = (uint64_t)c->hidden, hd = (uint64_t)c->head_dim, F = (uint64_t)c->ffn;
    uint64_t qd = (uint64_t)c->n_heads * hd;
    size_t cap = (size_t)PULSE_MAX((uint64_t)c->vocab * H, PULSE_MAX(F * H, qd * H));
    struct gjob j = {g, ctx, m->be, NULL, NULL, cap, bit == A_LLAMA, NULL, 0, err, errlen};
    j.stage = mem_alloc(MEM_HOST, cap * sizeof(uint16_t), "gguf staging");
    j.perm = mem_alloc(MEM_HOST, qd * H * sizeof(uint16_t), "gguf unpermute");
    if (!j.stage || !j.perm) {
        snprintf(err, errlen, "%s: out of host memory for staging", path);
        rc = PULSE_ERR_NOMEM;
    } else {
        rc = gwalk(&j, c, m);
    }
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

int model_config_from_path(const char *path, struct loaded_config *out, char *err, size_t errlen)
{
    return model_path_is_gguf(path) ? model_config_from_gguf(path, out, err, errlen)
                                    : model_config_from_hf(path, out, err, errlen);
}

int model_load_path(struct model *m, const char *path, const struct kctx *ctx, char *err,
                    size_t errlen)
{
    return model_path_is_gguf(path) ? model_load_gguf(m, path, ctx, err, errlen)
                                    : model_load_hf(m, path, ctx, err, errlen);
}
