/* Block selection for sparse KV offloading: Quest digests, block scores, top-k with the forced
 * blocks, and the InfiniGen-style approximate query of the next layer.
 *
 * Like kernels.h, every kernel exists twice with one signature: `name_ref` (plain C on host
 * pointers, written for clarity) and `name_cuda` (device pointers, queued on ctx->stream, never
 * allocates or synchronises, so it can be captured into a CUDA graph).
 *
 * Digest store (Quest). For each block (KV page) of one layer there is one digest page of
 *   page_elems = n_heads * 2 * head_dim bf16, laid out [digest head][0=min,1=max][dim]:
 *   the channel-wise min and max of the keys of the block's tokens. Head-wise selection keeps
 *   every KV head (n_heads = n_kv_heads, digest head j = KV head j); SoloHead keeps only the
 *   layer's selector head h* (n_heads = 1, digest head 0 = KV head h*). Digest pages are
 *   addressed like KV pages: the digest of block i of entry b is page page_ids[page_start[b] + i]
 *   (the caller may reuse the KV page ids, with a digest pool as large as the KV pool, or keep
 *   its own table: digests of offloaded blocks stay on the GPU while their KV does not).
 *   Min/max are exact (keys are bf16); -0 is stored as +0 so that every backend and every
 *   reduction order stores the same bits. Keys must be finite.
 *
 * Selector head. Every kernel takes `sel_head`: SELECT_HEADWISE (-1) for head-wise selection
 *   (one score row and one block list per KV head), SELECT_MEAN (-2) for ArkVale's page list
 *   (digests of every KV head, one score row and one list per entry from the scores of all
 *   query heads), or the layer's SoloHead selector KV head h* (0 <= h* < n_kv_heads; the caller
 *   holds the per-layer array and passes selector[layer]): one score row and one block list per
 *   entry, serving every head. n_lists = n_kv_heads (head-wise) or 1; digest heads =
 *   n_kv_heads (head-wise, mean) or 1 (SoloHead).
 *
 * Scores. Block score for query head g: sum_c max(q_gc * min_c, q_gc * max_c), an upper bound
 *   of q_g . k over the block's keys; a KV head's score sums the scores of its G = nq / nkv
 *   query heads (g = h*G .. h*G+G-1); SELECT_MEAN's list sums every KV head's score (ArkVale
 *   averages them: the same order, one division less). fp32, [batch][n_lists][max_blocks]; only
 * blocks < ceil(n_tokens[b] / block_size) are written. CPU and GPU sum in different orders, so they
 *   agree to fp32 rounding in general and exactly on integer-valued inputs (the tests).
 *
 * Top-k. For an entry of nb = ceil(n_tokens / block_size) blocks the forced blocks are the sink
 *   [0, sink), the window [nb-1-window, nb-1) and the tail nb-1 (clipped to [0, nb)); the others
 *   are candidates, of which the `budget` highest-scoring are selected (all when budget >= the
 *   number of candidates). Order: a larger score key wins (select_score_key: NaN below
 *   everything, -0 == +0), equal keys go to the lower block index, so the result is a pure
 *   function of the scores and CPU and GPU agree exactly. Output: per (entry, list) the selected
 *   block indices ascending in sel_idx[(b * n_lists + l) * max_sel + j] for
 *   j < sel_count[b * n_lists + l], max_sel = select_list_stride() (a CSR-like layout with a
 *   fixed stride); slots past the count are not written.
 *
 * Approximate query (InfiniGen-style, layer l+1 from layer l's input x): xn = RMSNorm with
 *   layer l+1's attn_norm over all hidden channels, keep only `channels` (top fraction by the
 *   column L2 norm of W_q, chosen offline), q = W_q[:, channels] . xn[channels], then the real
 *   path's per-head QK-norm and RoPE at pos[b]. With every channel it is bit-identical (CPU) to
 *   rmsnorm_ref + gemm_bf16_ref + qk_norm_rope_append_ref on the same x. */
#ifndef PULSE_SELECT_H
#define PULSE_SELECT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common.h"
#include "kernels.h"

#define SELECT_HEADWISE (-1)
#define SELECT_MEAN (-2)
#define SELECT_MAX_BLOCKS 32768 /* blocks per entry (512K tokens at 16); 8192 = 128K is tested */
#define SELECT_MAX_HEAD_DIM 512

/* The selection shape of one model and policy (plain data; the same for every layer). */
struct select_cfg {
    int n_heads;    /* query heads nq; n_heads % n_kv_heads == 0 */
    int n_kv_heads; /* KV heads (<= 64) */
    int head_dim;   /* <= SELECT_MAX_HEAD_DIM */
    int block_size; /* tokens per block, the KV page_size */
    int budget;     /* k: blocks chosen by score besides the forced ones, >= 0 (default 128) */
    int sink;       /* leading blocks always selected, >= 0 (default 1) */
    int window;     /* blocks before the tail always selected, >= 0 (default 2) */
    int max_blocks; /* stride of a score row; >= every entry's block count, <= SELECT_MAX_BLOCKS */
    int list_stride; /* stride of sel_idx when larger than select_max_selected (0: that): lists
                        of two budgets in one layout (a prediction's wider lists beside the
                        exact ones) */
};

struct digest_view {
    uint16_t *pool;            /* digest pages (bf16), page_elems = n_heads * 2 * head_dim */
    const int32_t *page_ids;   /* digest page id array */
    const int32_t *page_start; /* [batch] offset of entry b's first digest page id */
    int n_heads;               /* digest heads per page: n_kv_heads (head-wise) or 1 (SoloHead) */
    int head_dim;
};

/* What a selection implies for recall, counted on the host from the output of select_topk
 * (select_stats_add). A chunk is a maximal run of consecutive KV heads of one block that were
 * all selected: the host pool keeps a block's heads contiguous, so a chunk is one copy, and a
 * chunk of n_kv_heads heads is a token-wise block. SoloHead never issues a smaller chunk. */
struct select_stats {
    int64_t entries;     /* (entry, step) selections counted */
    int64_t lists;       /* block lists produced: entries * n_lists */
    int64_t distinct;    /* distinct lists per entry, summed (1 per entry for SoloHead) */
    int64_t blocks;      /* (block, list) pairs selected */
    int64_t head_blocks; /* (block, KV head) pairs selected: what must be resident */
    int64_t chunks;      /* chunks, as defined above */
    int min_chunk_heads; /* smallest chunk in KV heads; 0 until a chunk is counted */
    int max_chunk_heads;
};

/* ------------------------------------------------------------------ shared definitions */

/* The order of scores: larger key = better. NaN maps to 0 (below every number); -0 and +0
 * map to one key; otherwise the key is monotone in the float value. */
PULSE_HD uint32_t select_score_key(float s)
{
    uint32_t u;
    memcpy(&u, &s, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0u;
    if ((u & 0x7fffffffu) == 0u) return 0x80000000u;
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* One channel's term of a block score: max(q * min, q * max). */
PULSE_HD float select_digest_term(float q, float mn, float mx)
{
    float a = q * mn, b = q * mx;
    return a > b ? a : b;
}

/* -0 stored as +0 (digest canonical form). */
PULSE_HD float select_canon_zero(float v)
{
    return v == 0.0f ? 0.0f : v;
}

/* Candidates of an nb-block entry are [*c0, *c1); every other block in [0, nb) is forced. */
PULSE_HD void select_candidates(int nb, int sink, int window, int *c0, int *c1)
{
    int lo = sink < nb ? sink : nb;
    int hi = nb - 1 - window;
    *c0 = lo;
    *c1 = hi > lo ? hi : lo;
}

/* The KV heads list l of sel_head scores, [*k0, *k1): head-wise l's own, SoloHead's selector,
 * every head for SELECT_MEAN. Digest head of KV head k: k when the digests keep every head
 * (head-wise, mean), else 0 (select_digest_head). */
PULSE_HD void select_list_heads(int sel_head, int l, int n_kv_heads, int *k0, int *k1)
{
    *k0 = sel_head == SELECT_HEADWISE ? l : sel_head == SELECT_MEAN ? 0 : sel_head;
    *k1 = sel_head == SELECT_MEAN ? n_kv_heads : *k0 + 1;
}
PULSE_HD int select_digest_head(int sel_head, int k)
{
    return sel_head < 0 ? k : 0;
}

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ host helpers */

/* Digest heads a page keeps for sel_head: n_kv_heads (head-wise, mean) or 1 (SoloHead). */
int select_digest_heads(int n_kv_heads, int sel_head);
/* Aborts (PULSE_CHECK) unless sel_head is SELECT_HEADWISE, SELECT_MEAN or a KV head of
 * n_kv_heads, and dv (when not NULL) keeps select_digest_heads of them at head_dim. */
void select_check_heads(int n_kv_heads, int head_dim, const struct digest_view *dv, int sel_head);

/* 0 when cfg is usable, else -1 with a one-line reason naming the field in err. */
int select_cfg_check(const struct select_cfg *cfg, char *err, size_t errlen);
/* Lists per entry: n_kv_heads for SELECT_HEADWISE, 1 for a SoloHead selector. */
int select_n_lists(const struct select_cfg *cfg, int sel_head);
/* Blocks one list holds at most: min(max_blocks, sink + window + 1 + budget). */
int select_max_selected(const struct select_cfg *cfg);
/* A prediction's budget with a margin f in [0, 1] over a budget of k blocks chosen by score:
 * ceil((1 + f) k), the product's rounding forgiven (1.3 x 10 is 13.000000000000002): what
 * pulse run --spec-margin prefetches and pulse accuracy --spec-margin measures. */
int select_widened_budget(int k, double f);
/* Row stride of sel_idx: select_max_selected, or list_stride when larger. */
int select_list_stride(const struct select_cfg *cfg);
/* The attended-token bound a selection's attention runs with (attn_decode's max_tokens, which
 * sets the CUDA split plan): min(select_max_selected * block_size, reserved), reserved being
 * the entries' longest reservation. The serving path and the accuracy path both pass it, so
 * the same lists of one KV head give bit-identical attention on either (Gemma 3's layout). Not
 * covered: the accuracy path's dense attention where the budget covers the context (the
 * engine's bound), and head-wise lists of several KV heads (attended one head at a time there,
 * as one batch in the serving path), whose split plans can differ at long reservations. */
int select_attend_bound(const struct select_cfg *cfg, int reserved);
/* Bytes of the fp32 score workspace for `batch` entries: batch * n_lists * max_blocks * 4. */
size_t select_scores_bytes(const struct select_cfg *cfg, int batch, int sel_head);
/* Blocks selected for an entry of n_tokens (>= 1): forced + min(budget, candidates). */
int select_count_for(const struct select_cfg *cfg, int n_tokens);
/* Of the blocks list `exact` (n_exact, ascending, of an nb-block entry) chose by score (its
 * forced blocks left out: select_candidates), how many the list `spec` (n_spec, ascending) also
 * holds; *scored gets their number. The speculation's hit rate (a speculated list made from an
 * approximate query against the exact query's) is the sum of the first over the sum of the
 * second. Host. */
int select_overlap(int nb, int sink, int window, const int32_t *exact, int n_exact,
                   const int32_t *spec, int n_spec, int *scored);
/* Step-to-step behaviour of a speculated list (DESIGN.md section 7, mechanism 5), summed over
 * list-steps that have a previous step. With E_t the exact query's list and A_t the approximate
 * query's (same cfg, so the same forced blocks), at step t of one list:
 *   churn of a list = |B_t \ S_{t-1}| / |B_t|, B_t its blocks chosen by score, S_{t-1} all of
 *     its previous step's (the locality meter's definition, locality_count_new), for E and A;
 *   missed M_t = E_t \ A_t (the exact blocks the approximate list lacks, all chosen by score);
 *     missed_again = |M_t & M_{t-1}|, missed_held = |M_t & (A_{t-1} | E_{t-1})| (resident
 *     after a step that recalled both lists);
 *   wrong W_t = A_t \ E_t; wrong_again = |W_t & W_{t-1}|.
 * Persistence of the misses = missed_again / missed, of the wrong blocks = wrong_again / wrong. */
struct select_persist {
    int64_t steps;                    /* list-steps counted (both budget parts non-empty) */
    double churn_exact, churn_approx; /* sums of the per-step churns (mean: / steps) */
    int64_t missed, missed_again, missed_held;
    int64_t wrong, wrong_again;
};
/* Adds step t of one list of an nb-block entry (every list ascending; *_prev: step t-1's, of
 * the same list, nb - 1 or nb blocks) to acc. A step whose lists have no block chosen by score
 * adds nothing. Host; no allocation. */
void select_persist_add(int nb, int sink, int window, const int32_t *exact, int n_exact,
                        const int32_t *approx, int n_approx, const int32_t *exact_prev,
                        int n_exact_prev, const int32_t *approx_prev, int n_approx_prev,
                        struct select_persist *acc);
/* Adds one step's selection (host copies of sel_idx / sel_count, as written by select_topk with
 * the same cfg and sel_head) to st. st starts zeroed. No allocation. */
void select_stats_add(const struct select_cfg *cfg, int sel_head, const int32_t *sel_idx,
                      const int32_t *sel_count, int batch, struct select_stats *st);

/* ------------------------------------------------------------------ digests */

/* Builds the digests of every block of tokens [0, n_tokens[b]) of each entry from the K of the
 * paged KV (one layer); a partial tail block covers only its tokens. sel_head picks the heads
 * (dv->n_heads must be n_kv_heads for SELECT_HEADWISE, 1 otherwise); dv->head_dim ==
 * kv->head_dim. max_tokens bounds every n_tokens (sizes the CUDA grid). Digest pages of blocks
 * past an entry's tokens are not touched. */
void digest_build_ref(const struct kctx *c, const struct kv_view *kv, const struct digest_view *dv,
                      const int32_t *n_tokens, int batch, int sel_head, int max_tokens);
void digest_build_cuda(const struct kctx *c, const struct kv_view *kv, const struct digest_view *dv,
                       const int32_t *n_tokens, int batch, int sel_head, int max_tokens);

/* Folds the key of token pos[b] (already appended to the KV, e.g. by qk_norm_rope_append) into
 * its block's digest; when pos[b] is a block's first token the digest is initialised from it.
 * Applied for pos = 0, 1, ..., n-1 it leaves exactly what digest_build gives for n tokens. */
void digest_update_ref(const struct kctx *c, const struct kv_view *kv, const struct digest_view *dv,
                       const int32_t *pos, int batch, int sel_head);
void digest_update_cuda(const struct kctx *c, const struct kv_view *kv,
                        const struct digest_view *dv, const int32_t *pos, int batch, int sel_head);

/* ------------------------------------------------------------------ scores and top-k */

/* scores[(b * n_lists + l) * max_blocks + i] for blocks i < ceil(n_tokens[b] / block_size)
 * (n_tokens[b] >= 1, its block count <= max_blocks). q: bf16 [batch][n_heads][head_dim], the
 * real (or approximate) query after QK-norm and RoPE. dv as for digest_build. */
void select_score_ref(const struct kctx *c, const struct select_cfg *cfg, const uint16_t *q,
                      const struct digest_view *dv, const int32_t *n_tokens, float *scores,
                      int batch, int sel_head);
void select_score_cuda(const struct kctx *c, const struct select_cfg *cfg, const uint16_t *q,
                       const struct digest_view *dv, const int32_t *n_tokens, float *scores,
                       int batch, int sel_head);

/* The forced blocks plus the top `budget` candidates by score (order in the header comment),
 * ascending, into sel_idx [batch][n_lists][max_sel] and sel_count [batch][n_lists]. Reads score
 * rows as select_score writes them; 1 <= ceil(n_tokens[b] / block_size) <= max_blocks (the CUDA
 * kernel traps otherwise). The CUDA kernel keeps max_blocks keys in shared memory (32 KB at
 * 8192 blocks; above 12288 blocks it raises the kernel's dynamic shared-memory limit once). */
void select_topk_ref(const struct kctx *c, const struct select_cfg *cfg, const float *scores,
                     const int32_t *n_tokens, int32_t *sel_idx, int32_t *sel_count, int batch,
                     int sel_head);
void select_topk_cuda(const struct kctx *c, const struct select_cfg *cfg, const float *scores,
                      const int32_t *n_tokens, int32_t *sel_idx, int32_t *sel_count, int batch,
                      int sel_head);

/* select_score then select_topk; `scores` is the caller's workspace of select_scores_bytes(). */
void select_blocks_ref(const struct kctx *c, const struct select_cfg *cfg, const uint16_t *q,
                       const struct digest_view *dv, const int32_t *n_tokens, float *scores,
                       int32_t *sel_idx, int32_t *sel_count, int batch, int sel_head);
void select_blocks_cuda(const struct kctx *c, const struct select_cfg *cfg, const uint16_t *q,
                        const struct digest_view *dv, const int32_t *n_tokens, float *scores,
                        int32_t *sel_idx, int32_t *sel_count, int batch, int sel_head);

/* Several selections over the same entries in one launch of each kernel: job j is
 * select_blocks(cfg, q, dv, n_tokens, scores, sel_idx, sel_count, batch, sel_head) with its own
 * query, digests, budget, outputs and selector head. The jobs' cfgs agree but for budget and
 * list_stride, and their sel_heads are of one kind (every one SELECT_HEADWISE, every one
 * SELECT_MEAN, or each a SoloHead selector head), so that every job has the same lists per
 * entry and scored heads. The CUDA path scores every job's blocks in one grid and ranks every
 * job's lists in one more: two selections of a layer's piece (PulseInfer's exact selection and
 * its prediction of the next layer), both latency-bound at the serving shapes, then cost about
 * one's latency. Bit-identical to select_blocks run job by job. */
#define SELECT_MAX_JOBS 2
struct select_job {
    const struct select_cfg *cfg;
    const uint16_t *q;
    const struct digest_view *dv;
    float *scores; /* select_scores_bytes(cfg, batch, sel_head) of the job's own */
    int32_t *sel_idx, *sel_count;
    int sel_head;
};
/* Aborts (PULSE_CHECK) unless 1 <= n_jobs <= SELECT_MAX_JOBS, the jobs agree as above, their
 * digest pools are alike in 8-byte alignment, and no two share an output buffer. */
void select_jobs_check(const struct select_job *jobs, int n_jobs);
void select_blocks_multi_ref(const struct kctx *c, const struct select_job *jobs, int n_jobs,
                             const int32_t *n_tokens, int batch);
void select_blocks_multi_cuda(const struct kctx *c, const struct select_job *jobs, int n_jobs,
                              const int32_t *n_tokens, int batch);

/* ------------------------------------------------------------------ approximate query */

/* Layer l+1's weights for the approximate query (host pointers for _ref, device for _cuda). */
struct approx_q_weights {
    const uint16_t *attn_norm; /* [hidden] layer l+1's input RMSNorm weight */
    const uint16_t *wq;        /* [n_heads*head_dim][n_channels]: the partial weight (W_q's
                                  columns at `channels`, select_partial_weight_build); with every
                                  channel, simply the first n_heads*head_dim rows of wqkv */
    const uint16_t *q_norm;    /* [head_dim] QK-norm weight, NULL without QK-norm */
    const int32_t *channels;   /* [n_channels] ascending hidden channels; NULL = all of them */
    int n_channels;            /* 1..hidden; == hidden when channels is NULL */
};

/* Picks the n_keep = ceil(frac * hidden) (clamped to [1, hidden]) hidden channels with the
 * largest importance = L2 norm of W_q's column (over its q_rows = n_heads*head_dim rows; wq is
 * row-major [q_rows][hidden], e.g. wqkv), ties to the lower channel; writes them ascending into
 * out [hidden] and returns n_keep. Host memory, run offline once per layer; allocates scratch.
 * Returns -1 when frac is not in (0, 1] or allocation fails. */
int select_channels_build(const uint16_t *wq, int q_rows, int hidden, double frac, int32_t *out);

/* Gathers W_q's columns `channels` into out [q_rows][n_channels] (host, offline). */
void select_partial_weight_build(const uint16_t *wq, int q_rows, int hidden,
                                 const int32_t *channels, int n_channels, uint16_t *out);

/* xn[b][j] = bf16(x[b][ch_j] * inv_b * w[ch_j]) with inv_b = 1/sqrt(mean over all hidden of
 * x[b]^2 + eps): RMSNorm over the full row, then only the kept channels (ch_j = j when
 * channels is NULL, i.e. exactly rmsnorm). x fp32 [batch][hidden], xn bf16 [batch][n_channels]. */
void select_norm_gather_ref(const struct kctx *c, const float *x, const uint16_t *w,
                            const int32_t *channels, int n_channels, uint16_t *xn, int batch,
                            int hidden, float eps);
void select_norm_gather_cuda(const struct kctx *c, const float *x, const uint16_t *w,
                             const int32_t *channels, int n_channels, uint16_t *xn, int batch,
                             int hidden, float eps);

/* Bytes of the approximate query's workspace: xn bf16 [batch][n_channels] (rounded up to 256)
 * then q fp32 [batch][n_heads*head_dim]. */
size_t select_approx_q_workspace_bytes(int batch, int n_channels, int n_heads, int head_dim);

/* q_out bf16 [batch][n_heads][head_dim] = the approximate query of layer l+1 from x (fp32
 * [batch][hidden], layer l's input) at positions pos[b]. Composition: select_norm_gather, then
 * gemm_bf16 (cuBLAS on the CUDA path: c->blas required) into the fp32 part of `workspace`, then
 * qk_norm_rope_append with a KV view of zero KV heads (so the q path is the real path's own
 * code and nothing is appended). workspace: select_approx_q_workspace_bytes() on the kernel's
 * side (host for _ref, device for _cuda). */
void select_approx_q_ref(const struct kctx *c, const struct approx_q_weights *w, const float *x,
                         const int32_t *pos, void *workspace, uint16_t *q_out, int batch,
                         int hidden, int n_heads, int head_dim, const float *inv_freq, float eps);
void select_approx_q_cuda(const struct kctx *c, const struct approx_q_weights *w, const float *x,
                          const int32_t *pos, void *workspace, uint16_t *q_out, int batch,
                          int hidden, int n_heads, int head_dim, const float *inv_freq, float eps);

#ifdef __cplusplus
}
#endif
#endif
