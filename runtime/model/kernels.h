/* The decode-step kernels. Every kernel exists twice with one signature: `name_ref` (plain C,
 * written for clarity, runs on host pointers) and `name_cuda` (runs on device pointers, on
 * ctx->stream). The table-driven test compares the pairs on random inputs.
 *
 * Dtypes: weights, normalised activations, q and the KV cache are bf16 (uint16_t bit patterns);
 * the residual stream, GEMM outputs and logits are fp32. A reference rounds to bf16 exactly where
 * the CUDA kernel stores bf16, so both backends agree up to fp32 summation order.
 *
 * Paged KV layout (one page = one block of `page_size` tokens of one layer):
 *   page p starts at pool + p * page_elems, page_elems = n_kv_heads * 2 * page_size * head_dim,
 *   inside it [kv_head][0=K,1=V][token][dim]. So the K and V of one head of one block are one
 *   contiguous piece (8 KB at 16 tokens x 128 dims), and the whole page is one contiguous block.
 * A batch's view of one layer: for batch entry b, its pages are page_ids[page_start[b] + i],
 * i = 0 .. ceil(n_tokens/page_size)-1, in token order. CSR is the special case
 * page_start[b] = indptr[b]; a padded block table is page_start[b] = b * row_stride. */
#ifndef PULSE_KERNELS_H
#define PULSE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Execution context. CPU references ignore it except `workspace` (never required by refs). */
struct kctx {
    void *stream;    /* cudaStream_t for CUDA kernels; NULL for the CPU */
    void *blas;      /* cublasHandle_t for CUDA gemm; NULL for the CPU */
    void *workspace; /* device scratch owned by the engine (attention split partials) */
    size_t workspace_bytes;
    int num_sms;          /* multiprocessors, to size split-K grids; 0 on the CPU */
    void *blas_workspace; /* fixed cuBLAS workspace (so no GEMM allocates); NULL on the CPU */
    size_t blas_workspace_bytes;
    /* the CUDA attention's split plan (0: the defaults below; engine_params sets them) */
    int attn_blocks_per_sm; /* split target, 1..ATTN_BLOCKS_PER_SM_MAX blocks per SM */
    int attn_min_tiles;     /* least 16-token tiles a split, ATTN_MIN_TILES_LO..4096 */
    void *gemm_lt; /* struct gemm_lt (gemm_lt.h): gemm_bf16_cuda through cuBLASLt, a plan per
                      shape; NULL: cublasGemmEx on `blas` */
    int pdl;       /* 1: the decode step's own kernels launch with programmatic dependent launch
                      (pdl.cuh), each one's launch hidden behind the kernel before it */
};

/* The CUDA attention's split plan: about ATTN_BLOCKS_PER_SM_MAX blocks per SM in the grid (a
 * kctx may ask for fewer), each split of at least ATTN_MIN_TILES tiles (the default; a kctx may
 * ask for any number from ATTN_MIN_TILES_LO, which the workspace bound assumes, to 4096). */
#define ATTN_BLOCKS_PER_SM_MAX 16
#define ATTN_MIN_TILES 16
#define ATTN_MIN_TILES_LO 4
#define ATTN_MIN_TILES_HI 4096

struct kv_view {
    uint16_t *pool;            /* base of the page pool (bf16) */
    const int32_t *page_ids;   /* page id array */
    const int32_t *page_start; /* [batch] offset of entry b's first page id in page_ids */
    int page_size;             /* tokens per page (>= 1) */
    int n_kv_heads;
    int head_dim;
    int window; /* > 0: attention of an entry with n tokens reads only tokens [n - window, n)
                   (a sliding-window layer); 0: all n tokens. Appends ignore it. */
    size_t page_stride; /* elements from one page to the next; 0: page_elems of the layout
                           above. A view of one KV head of a wider cache sets pool to that
                           head's offset, n_kv_heads 1 and the cache's page_elems here. */
    /* Attention that recalls (attn_decode only; NULL: none): host_ids, laid out as page_ids,
     * holds for each page either -1 or the index of a piece of host memory (base host, the
     * device-readable address of a pinned pool; piece i at host + i * page_elems, laid out as a
     * page) that the attention reads instead of the page and copies into it, so the page holds
     * it afterwards. Every page with a host piece is a whole page of its entry (not its last);
     * window must be 0, page_size a multiple of 16 on cuda. */
    const uint16_t *host;
    const int32_t *host_ids;
};

/* The elements from one page of kv to the next (every kernel addresses pages with it). */
static inline size_t kv_page_elems(const struct kv_view *kv)
{
    return kv->page_stride ? kv->page_stride
                           : (size_t)kv->n_kv_heads * 2 * kv->page_size * kv->head_dim;
}

/* dst[i] = bf16(offset + scale * pulse_uniform(seed, i)) for i < n. */
void fill_random_bf16_ref(const struct kctx *c, uint16_t *dst, size_t n, uint64_t seed, float scale,
                          float offset);
void fill_random_bf16_cuda(const struct kctx *c, uint16_t *dst, size_t n, uint64_t seed,
                           float scale, float offset);

/* x[b][j] = table[tokens[b]][j] * scale, fp32. tokens must be in [0, vocab). */
void embed_ref(const struct kctx *c, const int32_t *tokens, const uint16_t *table, float *x,
               int batch, int hidden, float scale);
void embed_cuda(const struct kctx *c, const int32_t *tokens, const uint16_t *table, float *x,
                int batch, int hidden, float scale);

/* out[r] = bf16(x[r] / sqrt(mean(x[r]^2) + eps) * w), rows x dim, fp32 statistics. */
void rmsnorm_ref(const struct kctx *c, const float *x, const uint16_t *w, uint16_t *out, int rows,
                 int dim, float eps);
void rmsnorm_cuda(const struct kctx *c, const float *x, const uint16_t *w, uint16_t *out, int rows,
                  int dim, float eps);

/* x[r] += y[r] / sqrt(mean(y[r]^2) + eps) * w, fp32 throughout: a post-norm (Gemma 3) fused
 * with the residual add. y: fp32 rows x dim (a GEMM output). */
void rmsnorm_add_ref(const struct kctx *c, float *x, const float *y, const uint16_t *w, int rows,
                     int dim, float eps);
void rmsnorm_add_cuda(const struct kctx *c, float *x, const float *y, const uint16_t *w, int rows,
                      int dim, float eps);

/* out[m][n] = sum_k a[m][k] * w[n][k] + beta * out[m][n]; a is m x k, w is n x k (row-major,
 * the PyTorch Linear layout), out fp32 m x n. beta is 0 or 1 (1 fuses a residual add). */
void gemm_bf16_ref(const struct kctx *c, const uint16_t *a, const uint16_t *w, float *out, int m,
                   int n, int k, float beta);
void gemm_bf16_cuda(const struct kctx *c, const uint16_t *a, const uint16_t *w, float *out, int m,
                    int n, int k, float beta);

/* qkv: fp32 [batch][(nq + 2*nkv) * hd], laid out q heads, then k heads, then v heads.
 * For each entry b at position pos[b]: q and k heads get per-head RMSNorm with q_norm / k_norm
 * (skipped when the pointer is NULL), then rotary embedding (rotate-half pairs (i, i+hd/2),
 * angle (float)pos * inv_freq[i]; inv_freq fp32 [hd/2] in the kernel's memory, the layer's
 * table of model_rope_inv_freq); q is stored bf16 in q_out [batch][nq*hd]; k and v are stored
 * bf16 into the cache page holding token pos[b] (page index pos/page_size of entry b's pages). */
void qk_norm_rope_append_ref(const struct kctx *c, const float *qkv, const uint16_t *q_norm,
                             const uint16_t *k_norm, uint16_t *q_out, const struct kv_view *kv,
                             const int32_t *pos, int batch, int nq, const float *inv_freq,
                             float eps);
void qk_norm_rope_append_cuda(const struct kctx *c, const float *qkv, const uint16_t *q_norm,
                              const uint16_t *k_norm, uint16_t *q_out, const struct kv_view *kv,
                              const int32_t *pos, int batch, int nq, const float *inv_freq,
                              float eps);

/* Decode attention over paged KV, GQA (query head h reads KV head h / (nq/nkv)).
 * q: bf16 [batch][nq][hd]; entry b attends its first n_tokens[b] tokens (>= 1), or only the
 * last kv->window of them when kv->window > 0;
 * out: bf16 [batch][nq][hd] = softmax(scale * q.K^T) V, fp32 softmax and accumulation.
 * The CUDA kernel splits long contexts across thread blocks and merges the partials
 * (flash-decoding); ctx->workspace must hold attn_decode_workspace_bytes(). */
void attn_decode_ref(const struct kctx *c, const uint16_t *q, const struct kv_view *kv,
                     const int32_t *n_tokens, uint16_t *out, int batch, int nq, int max_tokens,
                     float scale);
void attn_decode_cuda(const struct kctx *c, const uint16_t *q, const struct kv_view *kv,
                      const int32_t *n_tokens, uint16_t *out, int batch, int nq, int max_tokens,
                      float scale);
/* The host side of an attention that recalls (kv->host_ids set): every host piece of the
 * batch's pages copied into its page, as attn_decode_cuda leaves them (the CPU attentions run it
 * first, then read the pages). */
void kv_host_fill(const struct kv_view *kv, const int32_t *n_tokens, int batch);
/* Device workspace the CUDA attention needs for this shape (max_tokens bounds every n_tokens). */
size_t attn_decode_workspace_bytes(int batch, int nq, int head_dim, int max_tokens, int num_sms);

/* gu: fp32 [rows][2*ffn] = [gate | up]; out[r][i] = bf16(silu(gate) * up). */
void silu_mul_ref(const struct kctx *c, const float *gu, uint16_t *out, int rows, int ffn);
void silu_mul_cuda(const struct kctx *c, const float *gu, uint16_t *out, int rows, int ffn);

/* GeGLU: out[r][i] = bf16(gelu_tanh(gate) * up), gelu_tanh(g) = 0.5 g (1 + tanh(0.7978845608
 * (g + 0.044715 g^3))), same layout as silu_mul. */
void gelu_mul_ref(const struct kctx *c, const float *gu, uint16_t *out, int rows, int ffn);
void gelu_mul_cuda(const struct kctx *c, const float *gu, uint16_t *out, int rows, int ffn);

/* out[r] = index of the largest logits[r][*]; ties go to the lowest index; NaN never wins. */
void argmax_ref(const struct kctx *c, const float *logits, int32_t *out, int rows, int vocab);
void argmax_cuda(const struct kctx *c, const float *logits, int32_t *out, int rows, int vocab);

/* Synthetic prompt KV, as it would arrive from a prefill instance: for entry b, every token
 * t < n_tokens[b] of its pages gets K and V element e (index within [kv_head][kv][dim]) equal to
 * bf16(pulse_uniform(pulse_seed_mix(seed, req_ids[b], layer), t * elems_per_token + e)),
 * elems_per_token = n_kv_heads * 2 * head_dim. Pages past n_tokens are left untouched. */
void kv_fill_synthetic_ref(const struct kctx *c, const struct kv_view *kv, const int32_t *n_tokens,
                           const int32_t *req_ids, int batch, int layer, uint64_t seed,
                           int max_tokens);
void kv_fill_synthetic_cuda(const struct kctx *c, const struct kv_view *kv, const int32_t *n_tokens,
                            const int32_t *req_ids, int batch, int layer, uint64_t seed,
                            int max_tokens);

/* pos[b] += 1 for b < batch (ends a decode step on the device, so a step needs no host work). */
void advance_pos_ref(const struct kctx *c, int32_t *pos, int batch);
void advance_pos_cuda(const struct kctx *c, int32_t *pos, int batch);

#ifdef __cplusplus
}
#endif
#endif
