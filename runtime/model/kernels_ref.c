/* CPU references of the decode-step kernels (kernels.h): plain loops written for clarity.
 * They round to bf16 exactly where the CUDA kernels store bf16. */
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "numeric.h"

void fill_random_bf16_ref(const struct kctx *c, uint16_t *dst, size_t n, uint64_t seed, float scale,
                          float offset)
{
    (void)c;
    for (size_t i = 0; i < n; i++)
        dst[i] = f32_to_bf16(offset + scale * pulse_uniform(seed, i));
}

void embed_ref(const struct kctx *c, const int32_t *tokens, const uint16_t *table, float *x,
               int batch, int hidden, float scale)
{
    (void)c;
    for (int b = 0; b < batch; b++)
        for (int j = 0; j < hidden; j++)
            x[(size_t)b * hidden + j] = bf16_to_f32(table[(size_t)tokens[b] * hidden + j]) * scale;
}

/* 1 / sqrt(mean(v^2) + eps), the statistic every RMSNorm here shares. */
static float rms_inv(const float *v, int n, float eps)
{
    float ss = 0.0f;
    for (int i = 0; i < n; i++)
        ss += v[i] * v[i];
    return 1.0f / sqrtf(ss / (float)n + eps);
}

void rmsnorm_ref(const struct kctx *c, const float *x, const uint16_t *w, uint16_t *out, int rows,
                 int dim, float eps)
{
    (void)c;
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * dim;
        float inv = rms_inv(xr, dim, eps);
        for (int j = 0; j < dim; j++)
            out[(size_t)r * dim + j] = f32_to_bf16(xr[j] * inv * bf16_to_f32(w[j]));
    }
}

void rmsnorm_add_ref(const struct kctx *c, float *x, const float *y, const uint16_t *w, int rows,
                     int dim, float eps)
{
    (void)c;
    for (int r = 0; r < rows; r++) {
        const float *yr = y + (size_t)r * dim;
        float inv = rms_inv(yr, dim, eps);
        for (int j = 0; j < dim; j++)
            x[(size_t)r * dim + j] += yr[j] * inv * bf16_to_f32(w[j]);
    }
}

void gemm_bf16_ref(const struct kctx *c, const uint16_t *a, const uint16_t *w, float *out, int m,
                   int n, int k, float beta)
{
    (void)c;
    for (int i = 0; i < m; i++) {
        const uint16_t *ar = a + (size_t)i * k;
        for (int j = 0; j < n; j++) {
            const uint16_t *wr = w + (size_t)j * k;
            float acc = 0.0f;
            for (int t = 0; t < k; t++)
                acc += bf16_to_f32(ar[t]) * bf16_to_f32(wr[t]);
            float *o = out + (size_t)i * n + j;
            *o = beta != 0.0f ? acc + beta * *o : acc;
        }
    }
}

/* Element e of token t's K (kv=0) or V (kv=1) for head h in a paged view. */
static uint16_t *kv_elem(const struct kv_view *kv, int b, int t, int h, int which)
{
    int page = kv->page_ids[kv->page_start[b] + t / kv->page_size];
    size_t page_elems = kv_page_elems(kv);
    return kv->pool + (size_t)page * page_elems +
           (((size_t)h * 2 + which) * kv->page_size + t % kv->page_size) * kv->head_dim;
}

/* Per-head RMSNorm (when w != NULL) then rotate-half RoPE at position pos, in place. */
static void norm_rope_head(float *v, int hd, const uint16_t *w, int pos, const float *inv_freq,
                           float eps)
{
    if (w) {
        float inv = rms_inv(v, hd, eps);
        for (int d = 0; d < hd; d++)
            v[d] = v[d] * inv * bf16_to_f32(w[d]);
    }
    int half = hd / 2;
    for (int i = 0; i < half; i++) {
        float ang = (float)pos * inv_freq[i];
        float cs = cosf(ang), sn = sinf(ang);
        float x0 = v[i], x1 = v[i + half];
        v[i] = x0 * cs - x1 * sn;
        v[i + half] = x1 * cs + x0 * sn;
    }
}

void qk_norm_rope_append_ref(const struct kctx *c, const float *qkv, const uint16_t *q_norm,
                             const uint16_t *k_norm, uint16_t *q_out, const struct kv_view *kv,
                             const int32_t *pos, int batch, int nq, const float *inv_freq,
                             float eps)
{
    (void)c;
    int hd = kv->head_dim, nkv = kv->n_kv_heads;
    size_t row = (size_t)(nq + 2 * nkv) * hd;
    float v[512];
    PULSE_CHECK(hd <= 512 && hd % 2 == 0, "head_dim must be even and <= 512");
    for (int b = 0; b < batch; b++) {
        const float *r = qkv + (size_t)b * row;
        for (int h = 0; h < nq; h++) {
            memcpy(v, r + (size_t)h * hd, sizeof(float) * hd);
            norm_rope_head(v, hd, q_norm, pos[b], inv_freq, eps);
            for (int d = 0; d < hd; d++)
                q_out[((size_t)b * nq + h) * hd + d] = f32_to_bf16(v[d]);
        }
        for (int h = 0; h < nkv; h++) {
            memcpy(v, r + (size_t)(nq + h) * hd, sizeof(float) * hd);
            norm_rope_head(v, hd, k_norm, pos[b], inv_freq, eps);
            uint16_t *k = kv_elem(kv, b, pos[b], h, 0);
            uint16_t *vv = kv_elem(kv, b, pos[b], h, 1);
            const float *vsrc = r + (size_t)(nq + nkv + h) * hd;
            for (int d = 0; d < hd; d++) {
                k[d] = f32_to_bf16(v[d]);
                vv[d] = f32_to_bf16(vsrc[d]);
            }
        }
    }
}

void kv_host_fill(const struct kv_view *kv, const int32_t *n_tokens, int batch)
{
    if (!kv->host_ids) return;
    PULSE_CHECK(kv->host && kv->window == 0,
                "kv_host_fill: host pieces need a host base, no window");
    const size_t pe = kv_page_elems(kv);
    for (int b = 0; b < batch; b++)
        for (int j = 0; j < (n_tokens[b] + kv->page_size - 1) / kv->page_size; j++) {
            const int32_t h = kv->host_ids[kv->page_start[b] + j];
            if (h >= 0)
                memcpy(kv->pool + (size_t)kv->page_ids[kv->page_start[b] + j] * pe,
                       kv->host + (size_t)h * pe, pe * sizeof(uint16_t));
        }
}

void attn_decode_ref(const struct kctx *c, const uint16_t *q, const struct kv_view *kv,
                     const int32_t *n_tokens, uint16_t *out, int batch, int nq, int max_tokens,
                     float scale)
{
    (void)c;
    (void)max_tokens;
    kv_host_fill(kv, n_tokens, batch);
    int hd = kv->head_dim, group = nq / kv->n_kv_heads;
    for (int b = 0; b < batch; b++) {
        int n = n_tokens[b], t0 = kv->window > 0 && n > kv->window ? n - kv->window : 0;
        for (int h = 0; h < nq; h++) {
            const uint16_t *qh = q + ((size_t)b * nq + h) * hd;
            int kvh = h / group;
            float m = -INFINITY, l = 0.0f, acc[512] = {0};
            /* two passes: max, then exp-sum and weighted V (clear rather than fast) */
            for (int t = t0; t < n; t++) {
                const uint16_t *k = kv_elem(kv, b, t, kvh, 0);
                float s = 0.0f;
                for (int d = 0; d < hd; d++)
                    s += bf16_to_f32(qh[d]) * bf16_to_f32(k[d]);
                m = fmaxf(m, s * scale);
            }
            for (int t = t0; t < n; t++) {
                const uint16_t *k = kv_elem(kv, b, t, kvh, 0);
                const uint16_t *v = kv_elem(kv, b, t, kvh, 1);
                float s = 0.0f;
                for (int d = 0; d < hd; d++)
                    s += bf16_to_f32(qh[d]) * bf16_to_f32(k[d]);
                float p = expf(s * scale - m);
                l += p;
                for (int d = 0; d < hd; d++)
                    acc[d] += p * bf16_to_f32(v[d]);
            }
            for (int d = 0; d < hd; d++)
                out[((size_t)b * nq + h) * hd + d] = f32_to_bf16(acc[d] / l);
        }
    }
}

void silu_mul_ref(const struct kctx *c, const float *gu, uint16_t *out, int rows, int ffn)
{
    (void)c;
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < ffn; i++) {
            float g = gu[(size_t)r * 2 * ffn + i], u = gu[(size_t)r * 2 * ffn + ffn + i];
            out[(size_t)r * ffn + i] = f32_to_bf16(g / (1.0f + expf(-g)) * u);
        }
}

void gelu_mul_ref(const struct kctx *c, const float *gu, uint16_t *out, int rows, int ffn)
{
    (void)c;
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < ffn; i++) {
            float g = gu[(size_t)r * 2 * ffn + i], u = gu[(size_t)r * 2 * ffn + ffn + i];
            float t = tanhf(0.7978845608f * (g + 0.044715f * g * g * g));
            out[(size_t)r * ffn + i] = f32_to_bf16(0.5f * g * (1.0f + t) * u);
        }
}

void argmax_ref(const struct kctx *c, const float *logits, int32_t *out, int rows, int vocab)
{
    (void)c;
    for (int r = 0; r < rows; r++) {
        const float *lr = logits + (size_t)r * vocab;
        int best = -1;
        for (int i = 0; i < vocab; i++)
            if (!isnan(lr[i]) && (best < 0 || lr[i] > lr[best])) best = i;
        out[r] = best < 0 ? 0 : best;
    }
}

void kv_fill_synthetic_ref(const struct kctx *c, const struct kv_view *kv, const int32_t *n_tokens,
                           const int32_t *req_ids, int batch, int layer, uint64_t seed,
                           int max_tokens)
{
    (void)c;
    (void)max_tokens;
    int hd = kv->head_dim, nkv = kv->n_kv_heads;
    uint64_t per_token = (uint64_t)nkv * 2 * hd;
    for (int b = 0; b < batch; b++) {
        uint64_t s = pulse_seed_mix(seed, (uint64_t)req_ids[b], (uint64_t)layer);
        for (int t = 0; t < n_tokens[b]; t++)
            for (int h = 0; h < nkv; h++)
                for (int which = 0; which < 2; which++) {
                    uint16_t *dst = kv_elem(kv, b, t, h, which);
                    uint64_t e0 = (uint64_t)t * per_token + ((uint64_t)h * 2 + which) * hd;
                    for (int d = 0; d < hd; d++)
                        dst[d] = f32_to_bf16(pulse_uniform(s, e0 + d));
                }
    }
}

void advance_pos_ref(const struct kctx *c, int32_t *pos, int batch)
{
    (void)c;
    for (int b = 0; b < batch; b++)
        pos[b] += 1;
}
