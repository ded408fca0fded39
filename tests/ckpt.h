/* Small model files for the loader tests: a list of named tensors (fp32 values) written as a
 * Hugging Face model.safetensors (F32 or BF16, or another dtype name over F32's bytes) or as a
 * GGUF with the metadata the test sets (F32 or BF16 tensors; Q8_0 for type checks).
 * Values come from a seed: uniform in [offset - scale, offset + scale). Aborts when memory runs
 * out (tests only). */
#ifndef PULSE_TEST_CKPT_H
#define PULSE_TEST_CKPT_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bytebuf.h"
#include "numeric.h"

#define CK_MAX 256

struct ck_tensor {
    char name[96];
    uint64_t rows, cols; /* row-major [rows][cols]; cols 0: 1-D of rows */
    char dtype[16];      /* safetensors: "F32", "BF16", or a name written with F32's bytes */
    uint32_t gguf_type;  /* GGUF: 0 F32, 30 BF16, 8 Q8_0 */
    float *data;
};

struct ckpt {
    struct ck_tensor t[CK_MAX];
    int n;
};

static inline uint64_t ck_elems(const struct ck_tensor *t)
{
    return t->rows * (t->cols ? t->cols : 1);
}

static inline struct ck_tensor *ck_add_data(struct ckpt *c, const char *name, uint64_t rows,
                                            uint64_t cols, const float *src)
{
    if (c->n == CK_MAX) abort();
    struct ck_tensor *t = &c->t[c->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rows = rows, t->cols = cols;
    strcpy(t->dtype, "F32");
    t->data = malloc(sizeof(float) * ck_elems(t) + 1);
    if (!t->data) abort();
    if (src) memcpy(t->data, src, sizeof(float) * ck_elems(t));
    return t;
}

static inline struct ck_tensor *ck_add(struct ckpt *c, const char *name, uint64_t rows,
                                       uint64_t cols, uint64_t seed, float scale, float offset)
{
    struct ck_tensor *t = ck_add_data(c, name, rows, cols, NULL);
    for (uint64_t i = 0; i < ck_elems(t); i++)
        t->data[i] = offset + scale * pulse_uniform(seed, i);
    return t;
}

static inline struct ck_tensor *ck_find(struct ckpt *c, const char *name)
{
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->t[i].name, name)) return &c->t[i];
    return NULL;
}

static inline void ck_remove(struct ckpt *c, const char *name)
{
    struct ck_tensor *t = ck_find(c, name);
    if (!t) return;
    free(t->data);
    memmove(t, t + 1, sizeof *t * (size_t)(c->n - 1 - (t - c->t)));
    c->n--;
}

static inline void ck_free(struct ckpt *c)
{
    for (int i = 0; i < c->n; i++)
        free(c->t[i].data);
    c->n = 0;
}

static inline int ck_write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

/* dir/model.safetensors from the tensors (safetensors order: shape [rows, cols]). */
static inline int ck_write_safetensors(const struct ckpt *c, const char *dir)
{
    json_t *hdr = json_object();
    size_t off = 0;
    for (int i = 0; i < c->n; i++) {
        const struct ck_tensor *t = &c->t[i];
        size_t bytes = ck_elems(t) * (strcmp(t->dtype, "BF16") ? 4 : 2);
        json_t *shape = t->cols ? json_pack("[I,I]", (json_int_t)t->rows, (json_int_t)t->cols)
                                : json_pack("[I]", (json_int_t)t->rows);
        json_object_set_new(hdr, t->name,
                            json_pack("{s:s,s:o,s:[I,I]}", "dtype", t->dtype, "shape", shape,
                                      "data_offsets", (json_int_t)off, (json_int_t)(off + bytes)));
        off += bytes;
    }
    char *text = json_dumps(hdr, JSON_COMPACT), path[600];
    json_decref(hdr);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    if (!f || !text) abort();
    uint64_t hl = strlen(text);
    fwrite(&hl, 8, 1, f);
    fwrite(text, 1, hl, f);
    free(text);
    for (int i = 0; i < c->n; i++) {
        const struct ck_tensor *t = &c->t[i];
        for (uint64_t k = 0; k < ck_elems(t); k++) {
            if (strcmp(t->dtype, "BF16")) {
                fwrite(&t->data[k], 4, 1, f);
            } else {
                uint16_t b = f32_to_bf16(t->data[k]);
                fwrite(&b, 2, 1, f);
            }
        }
    }
    return fclose(f);
}

/* GGUF metadata, appended in order (the architecture key first, as a converter writes it). */
struct ck_meta {
    struct buf b;
    uint64_t n;
};

static inline void ckm_str(struct ck_meta *m, const char *key, const char *v)
{
    put_key(&m->b, key, 8), put_str(&m->b, v), m->n++;
}
static inline void ckm_u32(struct ck_meta *m, const char *key, uint32_t v)
{
    put_key(&m->b, key, 4), PUT(&m->b, uint32_t, v), m->n++;
}
static inline void ckm_f32(struct ck_meta *m, const char *key, float v)
{
    put_key(&m->b, key, 6), PUT(&m->b, float, v), m->n++;
}
static inline void ckm_bool(struct ck_meta *m, const char *key, int v)
{
    put_key(&m->b, key, 7), PUT(&m->b, uint8_t, (uint8_t)v), m->n++;
}
/* An array of n uint32 values (per-layer counts). */
static inline void ckm_u32_array(struct ck_meta *m, const char *key, const uint32_t *v, int n)
{
    put_key(&m->b, key, 9), PUT(&m->b, uint32_t, 4), PUT(&m->b, uint64_t, (uint64_t)n);
    put(&m->b, v, sizeof(uint32_t) * (size_t)n), m->n++;
}

/* GGUF name of a Hugging Face tensor name (llama.cpp's), or the name itself when it has none. */
static inline void ck_gguf_name(const char *hf, char *out, size_t len)
{
    static const char *const map[][2] = {
        {"input_layernorm", "attn_norm"},    {"self_attn.q_proj", "attn_q"},
        {"self_attn.k_proj", "attn_k"},      {"self_attn.v_proj", "attn_v"},
        {"self_attn.q_norm", "attn_q_norm"}, {"self_attn.k_norm", "attn_k_norm"},
        {"self_attn.o_proj", "attn_output"}, {"post_attention_layernorm", "ffn_norm"},
        {"mlp.gate_proj", "ffn_gate"},       {"mlp.up_proj", "ffn_up"},
        {"mlp.down_proj", "ffn_down"}};
    int l, at = 0;
    snprintf(out, len, "%s", hf);
    if (!strcmp(hf, "model.embed_tokens.weight")) snprintf(out, len, "token_embd.weight");
    if (!strcmp(hf, "model.norm.weight")) snprintf(out, len, "output_norm.weight");
    if (!strcmp(hf, "lm_head.weight")) snprintf(out, len, "output.weight");
    if (sscanf(hf, "model.layers.%d.%n", &l, &at) == 1 && at > 0)
        for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
            size_t n = strlen(map[i][0]);
            if (!strncmp(hf + at, map[i][0], n) && !strcmp(hf + at + n, ".weight"))
                snprintf(out, len, "blk.%d.%s.weight", l, map[i][1]);
        }
}

/* Writes the tensors (named as they are: call ck_gguf_name first where needed) as a GGUF v3
 * at path. q_heads / k_heads > 0: the rows of tensors named *attn_q.weight / *attn_k.weight are
 * permuted as llama.cpp's converter does for the llama architecture (row h*hd + p*hd/2 + i of
 * a head goes to h*hd + 2i + p). */
static inline int ck_write_gguf(const struct ckpt *c, const struct ck_meta *m, const char *path,
                                int q_heads, int k_heads)
{
    struct buf b = {0};
    put(&b, "GGUF", 4);
    PUT(&b, uint32_t, 3);
    PUT(&b, uint64_t, (uint64_t)c->n);
    PUT(&b, uint64_t, m->n);
    put(&b, m->b.p, m->b.n);
    uint64_t off = 0;
    for (int i = 0; i < c->n; i++) {
        const struct ck_tensor *t = &c->t[i];
        const uint64_t ne0 = t->cols ? t->cols : t->rows, el = ck_elems(t);
        put_str(&b, t->name);
        PUT(&b, uint32_t, t->cols ? 2 : 1);
        PUT(&b, uint64_t, ne0);
        if (t->cols) PUT(&b, uint64_t, t->rows);
        PUT(&b, uint32_t, t->gguf_type);
        PUT(&b, uint64_t, off);
        uint64_t bytes = t->gguf_type == 8 ? el / 32 * 34 : el * (t->gguf_type ? 2 : 4);
        off += (bytes + 31) & ~(uint64_t)31;
    }
    while (b.n % 32)
        PUT(&b, uint8_t, 0);
    for (int i = 0; i < c->n; i++) {
        const struct ck_tensor *t = &c->t[i];
        const size_t nl = strlen(t->name);
        int heads = 0;
        if (nl >= 13 && !strcmp(t->name + nl - 13, "attn_q.weight")) heads = q_heads;
        if (nl >= 13 && !strcmp(t->name + nl - 13, "attn_k.weight")) heads = k_heads;
        /* GGUF rows: ne[0] elements each (a 1-D tensor is one row) */
        const uint64_t cols = t->cols ? t->cols : t->rows, rows = t->cols ? t->rows : 1;
        const uint64_t hd = heads ? t->rows / (uint64_t)heads : 0;
        for (uint64_t r = 0; r < rows; r++) {
            uint64_t src = r; /* the row written at r */
            if (heads) src = r / hd * hd + (r % 2) * (hd / 2) + (r % hd) / 2;
            const float *row = t->data + src * cols;
            for (uint64_t k = 0; k < cols; k += t->gguf_type == 8 ? 32 : 1) {
                if (t->gguf_type == 0) PUT(&b, float, row[k]);
                if (t->gguf_type == 30) PUT(&b, uint16_t, f32_to_bf16(row[k]));
                if (t->gguf_type == 8) { /* scale 1/64 (fp16 0x2400), every value truncated */
                    PUT(&b, uint16_t, 0x2400);
                    for (int q = 0; q < 32; q++)
                        PUT(&b, int8_t, (int8_t)(row[k + (uint64_t)q] * 64.0f));
                }
            }
        }
        while (b.n % 32)
            PUT(&b, uint8_t, 0);
    }
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    fwrite(b.p, 1, b.n, f);
    free(b.p);
    return fclose(f);
}

#endif
