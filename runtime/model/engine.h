/* The decode step. An engine owns the model weights, the execution context and the scratch of
 * one layer; a batch owns what must survive between layers (its residual stream, tokens,
 * positions, per-layer page starts). The step is driven one layer of one batch at a time, so a
 * scheduler can interleave batches at layer boundaries; engine_step is the loop over layers.
 * Nothing here allocates after create. */
#ifndef PULSE_ENGINE_H
#define PULSE_ENGINE_H

#include "kv_cache.h"
#include "model.h"

struct engine_params {
    const struct model_config *cfg;
    const struct backend *be;
    uint64_t seed;  /* weights and synthetic prompt KV */
    int max_batch;  /* entries per batch */
    int max_tokens; /* longest request (prompt + output) */
    int use_graph;  /* CUDA graphs: engine_step replays each batch's step as one, a batch with
                       batch_graph_pieces replays its layer pieces (cuda only; ignored on cpu) */
    /* Tuning; 0 is each one's default (nothing is read from the environment: a run's come
     * from its command line, experiments/runtime_opts.h): */
    int no_piece_graphs;    /* 1: batch_graph_pieces never turns the piece graphs on (the
                               device path's kernels launched one by one, for comparisons) */
    int cpu_threads;        /* the cpu kernels' thread pool (kernels_cpu.h), which also runs
                               the offload runtime's host work on cuda: process-wide, set by
                               engine_create; 1..64, 0 = kernels_cpu_default_threads() */
    int attn_blocks_per_sm; /* the CUDA attention's split plan (kernels.h): blocks per SM,
                               1..ATTN_BLOCKS_PER_SM_MAX (0: the most) */
    int attn_min_tiles;     /* least tiles a split, ATTN_MIN_TILES_LO..ATTN_MIN_TILES_HI (0:
                               ATTN_MIN_TILES) */
    int gemm;               /* the device GEMMs (enum engine_gemm): cuBLASLt with each shape's
                               algorithm timed at warm-up (0), its heuristic's first, or
                               cublasGemmEx; cuda only */
    int gemm_sm_reserve;    /* SMs the GEMMs leave to other kernels (the zero-copy gather): their
                               SM count target is the device's less this; 0: all SMs; cuda only */
    int pdl;                /* 1: the step's kernels launch with programmatic dependent launch
                               (kctx.pdl; 0: plain stream order); cuda only */
    int gemm_stream_timing; /* 1: cuBLASLt's candidates timed as stream launches; 0: each in
                               a captured graph, as the step runs them (gemm_lt.h); cuda only */
    /* Real weights: when set, the model is laid out with model_alloc and this fills it (e.g.
     * model_load_hf); it returns PULSE_OK or an error with a reason in err. NULL: random
     * weights from seed. */
    int (*load_weights)(struct model *m, const struct kctx *ctx, void *user, char *err,
                        size_t errlen);
    void *load_user;
};

/* engine_params.gemm */
enum engine_gemm {
    ENGINE_GEMM_LT = 0,           /* cuBLASLt's candidates, timed */
    ENGINE_GEMM_LT_HEURISTIC = 1, /* cuBLASLt's heuristic first, untimed */
    ENGINE_GEMM_CUBLAS = 2,       /* cublasGemmEx */
    ENGINE_GEMM_SKINNY = 3        /* cuBLASLt's candidates and the suite's skinny kernel, timed */
};

struct engine_stats {
    /* graphs captured and replayed: whole steps (engine_step) and layer pieces
     * (batch_graph_pieces) alike, one each */
    int64_t steps, graph_captures, graph_launches;
    /* the device GEMMs: the SM count target (0: all SMs; cuBLASLt's or cuBLAS's), and the
     * cuBLASLt plan cache's counters (gemm_lt.h; 0 on cublas and on the cpu): products run
     * through cuBLASLt and through the suite's skinny kernel, shapes planned, of them those that
     * kept a skinny variant, shapes whose candidates were timed, candidates timed, shapes first
     * seen inside a graph capture (untimed), calls left to cublasGemmEx; of the timed shapes,
     * those timed inside captured graphs and those timed on the stream because a capture
     * failed */
    int gemm_sm_target;
    int64_t gemm_lt_calls, gemm_skinny_calls, gemm_shapes, gemm_shapes_skinny, gemm_shapes_tuned,
        gemm_candidates_timed, gemm_capture_fallbacks, gemm_blas_fallbacks, gemm_shapes_graph_timed,
        gemm_graph_timing_fallbacks;
    uint64_t gemm_choice_hash; /* gemm_lt_stats.choice_hash: what cuBLASLt's plans chose */
};

/* One request in a batch: its cache slot, id (seeds its synthetic KV), tokens already in the
 * cache, its reserved length, and the token the next step consumes. */
struct batch_entry {
    int slot, req_id;
    int pos, reserved;
    int32_t token;
};

struct engine;
struct batch;

/* An optional observer of one batch's layers (the MAM head profiler, mam.h; sparse attention,
 * sparse_attn.h), set on that batch with batch_set_hook. It fires in engine_run_layer of its
 * batch only (engine_step, engine_prefill), never for another batch interleaved in the same
 * engine, nor in layers a policy drives piece by piece (offload.h). Its callbacks run on the
 * host between the layer's launches, with backend pointers into the batch's state; the caller
 * owns `user` and keeps it alive while the hook is set. A hook may synchronise (that waits for
 * everything queued on the engine's stream, other batches' work included) and copy: on cuda
 * the engine fetches n_tokens_host with a synchronous copy, and engine_step replays no CUDA
 * graph for a hooked batch (unhooked batches keep theirs). It must not allocate, nor change the
 * batch. A host round trip per layer: for profiling and accuracy runs only. */
struct engine_layer_hook {
    /* Right after the layer's attention is queued, with the rotated queries q
     * [batch][nq][head_dim], the layer's KV view (the step's token already appended) and the
     * attended lengths n_tokens_host [batch] on the host. */
    void (*after_attention)(void *user, int layer, const uint16_t *q, const struct kv_view *kv,
                            const int32_t *n_tokens_host, int batch);
    /* Sparse attention (accuracy runs): called in place of the layer's dense attention with the
     * rotated queries, the layer's view (its window set for a local layer), the attended
     * lengths on the backend (n_tokens) and on the host; returns 1 when it wrote the attention
     * output `out` (bf16 [batch][nq][head_dim], backend memory) itself, 0 to let the engine run
     * dense attention. It may synchronise and use the backend's kernels. */
    int (*attend)(void *user, int layer, const uint16_t *q, const struct kv_view *kv,
                  const int32_t *n_tokens, const int32_t *n_tokens_host, uint16_t *out, int batch);
    /* Called at the start of every layer with its input residual x (fp32 [batch][hidden],
     * backend memory) and the positions (InfiniGen-style speculation reads layer l's input). */
    void (*before_layer)(void *user, int layer, const float *x, const int32_t *pos, int batch);
    /* Called once the layer's attention output is in the residual x (after the output
     * projection and, on Gemma 3, its post-norm), before the MLP: a later point than
     * before_layer from which to predict the next layer's query, only the MLP's update
     * missing. */
    void (*mid_layer)(void *user, int layer, const float *x, const int32_t *pos, int batch);
    void *user;
};

/* Creates the context, allocates and fills the weights and scratch. NULL with a reason in err
 * (no device, out of memory). */
struct engine *engine_create(const struct engine_params *p, char *err, size_t errlen);
void engine_free(struct engine *e);
const struct kctx *engine_ctx(const struct engine *e);
/* Entries per batch (engine_params.max_batch). */
int engine_max_batch(const struct engine *e);
const struct model *engine_model(const struct engine *e);

/* A batch with room for max_batch entries. NULL when the backend refuses the memory. */
struct batch *batch_create(struct engine *e);
void batch_free(struct engine *e, struct batch *bt);
/* Sets the batch's entries (n <= max_batch) and uploads them; page starts come from kv. */
void batch_set(struct engine *e, struct batch *bt, const struct kv_cache *kv,
               const struct batch_entry *entries, int n);
/* Sets (copies) the batch's layer hook, kept across batch_set until replaced; NULL, or a hook
 * with no callback, removes it. */
void batch_set_hook(struct batch *bt, const struct engine_layer_hook *hook);
int batch_size(const struct batch *bt);
/* A view of a batch's entries [first, first + n) (a self-interleaving scheduler runs the two
 * halves of a batch piece by piece, in the batch's own memory, so the batch's embedding, head
 * and tokens hold both): create makes the handle once (no backend memory; batch_free frees it),
 * set points it at the parent's entries (no allocation; valid until the parent's next
 * batch_set). For the layer pieces (engine_layer_pre, engine_run_attention, engine_layer_post,
 * batch_q and the other accessors) only: no step, head, hook or graphs of its own. */
struct batch *batch_view_create(struct engine *e);
void batch_view_set(struct engine *e, struct batch *view, const struct batch *parent, int first,
                    int n);
/* Waits for the step and copies the tokens it produced (n entries) into out. */
void batch_read_tokens(struct engine *e, struct batch *bt, int32_t *out);
/* The same in two halves, so the next step can be queued in between: queue the copy of the
 * tokens of the step queued last into host buffer i (0 or 1); take waits for buffer i's copy,
 * copies its tokens into out and returns how many (the entries when queued). */
void batch_tokens_queue(struct engine *e, struct batch *bt, int i);
int batch_tokens_take(struct engine *e, struct batch *bt, int i, int32_t *out);

/* Waits for the step and copies its logits ([n][vocab] fp32) into out (tests, diagnostics). */
void batch_read_logits(struct engine *e, struct batch *bt, float *out);

/* Waits and copies the batch's residual stream ([n][hidden] fp32) into out (tests). */
void batch_read_residual(struct engine *e, struct batch *bt, float *out);

/* Writes the synthetic prompt KV of the batch's entries (tokens [0, pos)) in every layer. */
void engine_fill_prompt(struct engine *e, struct batch *bt, const struct kv_cache *kv);

/* The pieces of a step, queued on the context's stream (asynchronous on cuda). */
void engine_run_embed(struct engine *e, struct batch *bt);
/* One layer: engine_layer_pre, the attention (the batch hook's, or engine_run_attention), then
 * engine_layer_post; the batch's hook, when set, is called around them. */
void engine_run_layer(struct engine *e, struct batch *bt, const struct kv_cache *kv, int layer);
/* The three pieces of a layer for one batch, which a policy may drive itself (an offload layer
 * puts its own attention between them). Each reads and writes only the batch's state and the
 * engine's scratch inside the piece, so pieces of different batches may interleave at piece
 * boundaries. pre: RMSNorm, QKV GEMM, QK-norm, RoPE into batch_q, K/V appended to the token's
 * page of `kv`. attention: dense paged attention over the layer's view into batch_attn_out (the
 * benchmark also times it alone). post: O GEMM, residual, RMSNorm, gate/up GEMM, activation,
 * down GEMM, residual. */
void engine_layer_pre(struct engine *e, struct batch *bt, const struct kv_cache *kv, int layer);
void engine_run_attention(struct engine *e, struct batch *bt, const struct kv_cache *kv, int layer);
void engine_layer_post(struct engine *e, struct batch *bt, int layer);
/* engine_layer_post in its two parts, for a policy that acts between them: the O GEMM and its
 * residual (post-norm and add on Gemma 3), then the MLP and its residual. */
void engine_layer_post_attn(struct engine *e, struct batch *bt, int layer);
void engine_layer_post_mlp(struct engine *e, struct batch *bt, int layer);
/* x += attn (an attention output of `batch` rows, laid out as batch_attn_out's) as the layer's
 * post-attention adds its own (engine_layer_post_attn): on a copy of a residual, the residual
 * another attention of the layer would give (a prediction's). x: [batch][hidden] floats on the
 * backend, on the engine's stream. */
void engine_attn_add(struct engine *e, int batch, int layer, const uint16_t *attn, float *x);
/* On (on != 0): this batch's engine_layer_pre, engine_layer_post and unhooked engine_run_layer
 * replay CUDA graphs, one per piece and layer, each captured at its first use and kept while the
 * batch's size, longest reservation and cache stay the same (cuda with use_graph; on cpu, or
 * inside engine_step's own capture, the pieces are queued as they are). For policies that drive
 * layers piece by piece with their own attention between (offload.h): a kernel launched one by
 * one pays for its launch's fetch from host memory, which a zero-copy gather on the link beside
 * it slows down (dev/zc_interference: 3.7 us a small kernel alone, 7.9 beside a gather, 2.1 in a
 * graph either way, H200 2026-12-02). Off (or engine_params.no_piece_graphs, for experiments:
 * then they are never on): the graphs are freed. Counted in engine_stats'
 * graph_captures and graph_launches. */
void batch_graph_pieces(struct engine *e, struct batch *bt, int on);
/* 1 when this batch's pieces replay as graphs now (batch_graph_pieces on, cuda with use_graph,
 * not inside a capture): a policy may then capture larger parts of its layers around them. */
int batch_graphs_on(const struct engine *e, const struct batch *bt);
/* Runs body(arg), which queues work on the engine's stream, as the CUDA graph in *slot:
 * captured the first time (the layer pieces queued inside are captured with it, not replayed
 * from their own graphs), replayed after; as it is when slot is NULL. Everything body queues
 * must be the same at every replay (pointers, sizes): the caller drops the graph
 * (engine_graph_drop) when they change. Event records inside body that other streams or the
 * host wait for must be the backend's event_record_external. Counted in engine_stats'
 * graph_captures and graph_launches. */
void engine_graph_run(struct engine *e, void **slot, void (*body)(void *), void *arg);
void engine_graph_drop(struct engine *e, void **slot);
/* The batch's device state (backend memory, valid while it lives): rotated queries and the
 * attention output bf16 [max_batch][nq][head_dim], positions and attended lengths [max_batch]
 * (lengths = positions + 1 during a step), the residual stream fp32 [max_batch][hidden]. */
uint16_t *batch_q(const struct batch *bt);
uint16_t *batch_attn_out(const struct batch *bt);
const int32_t *batch_pos(const struct batch *bt);
const int32_t *batch_len(const struct batch *bt);
const float *batch_residual(const struct batch *bt);
/* The batch's page starts of one layer ([max_batch], backend memory): kv_cache_view's. */
const int32_t *batch_page_starts(const struct engine *e, const struct batch *bt, int layer);
/* The four GEMMs of one layer alone, and the LM head GEMM (benchmark breakdown; they clobber
 * the batch's residual stream and logits, so call them after reading what a step produced). */
void engine_run_layer_gemms(struct engine *e, struct batch *bt, int layer);
void engine_run_lm_head(struct engine *e, struct batch *bt);
/* Final norm, LM head, argmax into the batch's tokens, positions advanced by one. */
void engine_run_head(struct engine *e, struct batch *bt);
/* Prefill: the batch's entries are consecutive tokens of prompts (entry i at position pos_i,
 * attending its first pos_i + 1 tokens, so entries of one request see each other causally).
 * Runs the embedding and every layer for all entries (their K and V land in the cache), then
 * the head for the LAST entry only: its logits are logits row 0 (engine_read_logits) and its
 * greedy token is token 0 (batch_read_tokens). Positions are not advanced. */
void engine_prefill(struct engine *e, struct batch *bt, const struct kv_cache *kv);
/* Waits and copies the first `rows` rows of the logits ([rows][vocab] fp32) into out. */
void engine_read_logits(struct engine *e, float *out, int rows);
/* embed + every layer + head; replayed as the batch's CUDA graph when use_graph is on and
 * the batch has no hook. */
void engine_step(struct engine *e, struct batch *bt, const struct kv_cache *kv);

void engine_get_stats(const struct engine *e, struct engine_stats *out);
/* The GEMMs' path and counters as {"path": "lt"|"lt-heuristic"|"cublas"|"skinny"|"cpu",
 * "sm_reserve", "sm_target", "lt_calls", "skinny_calls", "shapes", "shapes_skinny",
 * "shapes_tuned", "candidates_timed", "capture_fallbacks", "blas_fallbacks",
 * "timing": "graph"|"stream", "shapes_graph_timed", "graph_timing_fallbacks",
 * "choice_hash": 16 hex digits (gemm_lt_stats.choice_hash; zeros where no plan was made)} (a new
 * reference), and the same as one line into buf. */
struct json_t *engine_gemm_json(const struct engine *e, char *buf, size_t len);

/* The first token a request's decode consumes (its synthetic last prompt token). */
int32_t engine_first_token(const struct engine *e, int req_id);

#endif
