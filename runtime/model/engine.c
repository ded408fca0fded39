#include "engine.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

#include "common.h"
#ifdef PULSE_HAVE_CUDA
#include "gemm_lt.h"
#endif
#include "kernels_cpu.h"
#include "numeric.h"
#include "trace.h"

/* graph slots per layer of a batch that replays its pieces: pre, post, the whole layer, post's
 * attention part and its MLP part */
enum { PIECES = 5 };

struct engine {
    struct engine_params p;
    const struct backend *be;
    struct kctx ctx;
    struct model model;
    /* scratch of one layer, carved from one backend allocation */
    void *scratch;
    size_t scratch_bytes;
    uint16_t *xn;  /* [B][hidden] normalised input of a GEMM */
    float *qkv;    /* [B][qkv_dim] */
    float *gu;     /* [B][2*ffn] */
    float *tmp;    /* [B][hidden] a projection before its post-norm (Gemma 3) */
    uint16_t *act; /* [B][ffn] */
    float *logits; /* [B][vocab] */
    int use_graph;
    int piece_graphs; /* batch_graph_pieces may turn them on (!engine_params.no_piece_graphs) */
    int capturing;    /* a whole step is being captured: its pieces are queued as they are */
    struct engine_stats st;
    struct gemm_lt *gemm_lt; /* engine_params.gemm's plan cache (cuda, not cublas); else NULL */
};

struct batch {
    int n, max_len;
    void *mem; /* one backend allocation */
    size_t mem_bytes;
    int32_t *d_tokens, *d_pos, *d_len, *d_req, *d_page_start; /* page_start: [layer][max_batch] */
    float *d_x;                                               /* [max_batch][hidden] residual */
    uint16_t *d_q;    /* [max_batch][nq*hd] rotated queries: pre-attention -> attention */
    uint16_t *d_attn; /* [max_batch][nq*hd] attention output: attention -> post-attention */
    int32_t *h_stage; /* host staging of the int arrays, same layout as the device block */
    size_t stage_bytes;
    int32_t *h_tokens[2]; /* [max_batch] each, pinned on cuda: a step's tokens come back
                             through one (batch_tokens_queue) */
    void *ev_tokens[2];   /* recorded after their copy; the reader waits on it */
    int n_tokens[2];      /* entries when queued */
    void *graph;          /* the captured step, valid for graph_kv and these entries */
    const struct kv_cache *graph_kv;
    /* batch_graph_pieces: engine_layer_pre (3 l), engine_layer_post (3 l + 1) and an unhooked
     * engine_run_layer (3 l + 2) of layer l as graphs, valid for piece_n entries appending to
     * piece_kv */
    void **piece_graph;
    int pieces, piece_n, piece_len;
    const struct kv_cache *piece_kv;
    int len_on_host; /* h_stage's len row equals d_len (set by batch_set, lost when a step ends) */
    struct engine_layer_hook hook; /* observer of this batch's layers; zeroed = none */
};

static size_t scratch_size(const struct model_config *c, int B)
{
    size_t sz = 0;
    size_t parts[] = {2 * (size_t)B * c->hidden, 4 * (size_t)B * model_qkv_dim(c),
                      8 * (size_t)B * c->ffn,    2 * (size_t)B * c->ffn,
                      4 * (size_t)B * c->vocab,  4 * (size_t)B * c->hidden};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(parts); i++)
        sz += mem_aligned(parts[i]);
    return sz;
}

/* Every GEMM a decode step can run, once at each batch size 1 .. max_batch, before any step:
 * cuBLAS loads a kernel library the first time a shape needs it (cuLibraryLoadData), and that
 * load waits for the device while holding a driver lock that every other thread's submissions
 * take. Inside a step whose compute stream waits on the device for a recall (offload.h,
 * offload_params.host_wait), the recall's thread could then never submit it: a deadlock (seen on
 * the H200, 2026-12-01, at the LM head's first run at batch 12). Outputs go to scratch. */
static int warm_gemms(struct engine *e)
{
    const struct model_config *c = e->p.cfg;
    const struct layer_weights *w = &e->model.layers[0];
    const int H = c->hidden, qd = c->n_heads * c->head_dim, B = e->p.max_batch;
    const size_t in_elems = (size_t)B * PULSE_MAX(PULSE_MAX(H, qd), c->ffn);
    uint16_t *in = mem_alloc(MEM_DEVICE, sizeof(uint16_t) * in_elems, "gemm warm-up input");
    float *out = mem_alloc(MEM_DEVICE, sizeof(float) * (size_t)B * H, "gemm warm-up output");
    if (!in || !out) {
        mem_free(MEM_DEVICE, in, sizeof(uint16_t) * in_elems);
        mem_free(MEM_DEVICE, out, sizeof(float) * (size_t)B * H);
        return PULSE_ERR_OOM;
    }
    const struct kctx *x = &e->ctx;
    e->be->memset(x, in, 0, sizeof(uint16_t) * in_elems);
    for (int b = 1; b <= B; b++) {
        e->be->gemm_bf16(x, in, w->wqkv, e->qkv, b, model_qkv_dim(c), H, 0.0f);
        for (int beta = 0; beta < 2; beta++) { /* accumulate into the residual, or not (Gemma) */
            e->be->gemm_bf16(x, in, w->wo, out, b, H, qd, (float)beta);
            e->be->gemm_bf16(x, in, w->wdown, out, b, H, c->ffn, (float)beta);
        }
        e->be->gemm_bf16(x, in, w->wgu, e->gu, b, 2 * c->ffn, H, 0.0f);
        e->be->gemm_bf16(x, in, e->model.lm_head, e->logits, b, c->vocab, H, 0.0f);
    }
    e->be->sync(x);
    mem_free(MEM_DEVICE, in, sizeof(uint16_t) * in_elems);
    mem_free(MEM_DEVICE, out, sizeof(float) * (size_t)B * H);
    return PULSE_OK;
}

/* The tuning fields in their ranges (engine.h); 0, or -1 with the reason in err. */
static int check_tuning(const struct engine_params *p, char *err, size_t errlen)
{
    const char *why = NULL;
    if (p->cpu_threads < 0 || p->cpu_threads > KERNELS_CPU_MAX_THREADS)
        why = "cpu_threads must be 0..64";
    else if (p->attn_blocks_per_sm < 0 || p->attn_blocks_per_sm > ATTN_BLOCKS_PER_SM_MAX)
        why = "attn_blocks_per_sm must be 0..16";
    else if (p->attn_min_tiles &&
             (p->attn_min_tiles < ATTN_MIN_TILES_LO || p->attn_min_tiles > ATTN_MIN_TILES_HI))
        why = "attn_min_tiles must be 0 or 4..4096";
    else if (p->gemm < ENGINE_GEMM_LT || p->gemm > ENGINE_GEMM_SKINNY)
        why = "gemm must be 0 (lt), 1 (lt-heuristic), 2 (cublas) or 3 (skinny)";
    else if (p->gemm_sm_reserve < 0)
        why = "gemm_sm_reserve must be >= 0";
    if (!why) return 0;
    snprintf(err, errlen, "engine: %s", why);
    return -1;
}

#ifdef PULSE_HAVE_CUDA
/* The device GEMMs' path and SM target (engine_params.gemm, gemm_sm_reserve): 0, or -1 with
 * the reason in err. The shapes are planned (timed) by warm_gemms, before any capture. */
static int gemm_setup(struct engine *e, char *err, size_t errlen)
{
    const struct engine_params *p = &e->p;
    if (p->gemm == ENGINE_GEMM_CUBLAS) {
        const int t = gemm_blas_set_sm_reserve(e->ctx.blas, p->gemm_sm_reserve);
        if (t < 0) {
            snprintf(err, errlen, "engine: gemm_sm_reserve %d must leave an SM (0..%d here)",
                     p->gemm_sm_reserve, e->ctx.num_sms - 1);
            return -1;
        }
        e->st.gemm_sm_target = t;
        return 0;
    }
    struct gemm_lt_params gp = {.sm_reserve = p->gemm_sm_reserve,
                                .no_tuning = p->gemm == ENGINE_GEMM_LT_HEURISTIC,
                                .no_skinny = p->gemm != ENGINE_GEMM_SKINNY,
                                .stream_timing = p->gemm_stream_timing};
    e->gemm_lt = gemm_lt_create(&gp, err, errlen);
    e->ctx.gemm_lt = e->gemm_lt;
    return e->gemm_lt ? 0 : -1;
}
#endif

struct engine *engine_create(const struct engine_params *p, char *err, size_t errlen)
{
    if (check_tuning(p, err, errlen)) return NULL;
    struct engine *e = mem_alloc(MEM_HOST, sizeof *e, "engine");
    if (!e) return NULL;
    memset(e, 0, sizeof *e);
    e->p = *p;
    e->be = p->be;
    const struct model_config *c = p->cfg;
    if (p->be->ctx_create(&e->ctx, 0) != PULSE_OK) {
        snprintf(err, errlen, "backend %s: no usable device", p->be->name);
        mem_free(MEM_HOST, e, sizeof *e);
        return NULL;
    }
    e->ctx.attn_blocks_per_sm = p->attn_blocks_per_sm;
    e->ctx.attn_min_tiles = p->attn_min_tiles;
    e->ctx.pdl = p->pdl;
    kernels_cpu_set_threads(p->cpu_threads ? p->cpu_threads : kernels_cpu_default_threads());
#ifdef PULSE_HAVE_CUDA
    if (p->be->mem == MEM_DEVICE) {
        size_t ws = attn_decode_workspace_bytes(p->max_batch, c->n_heads, c->head_dim,
                                                p->max_tokens, e->ctx.num_sms);
        e->ctx.workspace = mem_alloc(MEM_DEVICE, ws, "attention workspace");
        e->ctx.workspace_bytes = ws;
        if (!e->ctx.workspace) goto oom;
        if (gemm_setup(e, err, errlen)) {
            engine_free(e);
            return NULL;
        }
    }
#endif
    if (p->load_weights) {
        if (model_alloc(&e->model, c, p->be, &e->ctx) != PULSE_OK) goto oom;
        if (p->load_weights(&e->model, &e->ctx, p->load_user, err, errlen) != PULSE_OK) {
            engine_free(e);
            return NULL;
        }
    } else if (model_create(&e->model, c, p->be, &e->ctx, p->seed) != PULSE_OK) {
        goto oom;
    }
    e->scratch_bytes = scratch_size(c, p->max_batch);
    e->scratch = mem_alloc(p->be->mem, e->scratch_bytes, "layer scratch");
    if (!e->scratch) goto oom;
    char *cur = e->scratch;
    size_t B = (size_t)p->max_batch;
    e->xn = mem_carve(&cur, 2 * B * c->hidden);
    e->qkv = mem_carve(&cur, 4 * B * model_qkv_dim(c));
    e->gu = mem_carve(&cur, 8 * B * c->ffn);
    e->act = mem_carve(&cur, 2 * B * c->ffn);
    e->logits = mem_carve(&cur, 4 * B * c->vocab);
    e->tmp = mem_carve(&cur, 4 * B * c->hidden);
    e->use_graph = p->use_graph && p->be->graph_begin && !pulse_sync_each_launch();
    e->piece_graphs = !p->no_piece_graphs; /* off: the pieces launched one by one */
    if (p->be->mem == MEM_DEVICE && warm_gemms(e) != PULSE_OK) goto oom;
    p->be->sync(&e->ctx);
    return e;
oom:
    snprintf(err, errlen, "backend %s: out of memory for %s (weights %.2f GB)", p->be->name,
             c->name, model_weight_bytes(c) / 1e9);
    engine_free(e);
    return NULL;
}

void engine_free(struct engine *e)
{
    if (!e) return;
    if (e->ctx.stream || e->be->mem == MEM_HOST) e->be->sync(&e->ctx);
    mem_free(e->be->mem, e->scratch, e->scratch_bytes);
    model_free(&e->model);
    if (e->be->mem == MEM_DEVICE) {
        mem_free(MEM_DEVICE, e->ctx.workspace, e->ctx.workspace_bytes);
        e->ctx.workspace = NULL;
        e->ctx.workspace_bytes = 0;
    }
#ifdef PULSE_HAVE_CUDA
    gemm_lt_free(e->gemm_lt); /* the stream is synchronised above */
    e->ctx.gemm_lt = NULL;
#endif
    e->be->ctx_free(&e->ctx);
    mem_free(MEM_HOST, e, sizeof *e);
}

int engine_max_batch(const struct engine *e)
{
    return e->p.max_batch;
}

const struct kctx *engine_ctx(const struct engine *e)
{
    return &e->ctx;
}
const struct model *engine_model(const struct engine *e)
{
    return &e->model;
}

/* Int arrays of a batch in one block: tokens, pos, len, req, page_start[L][B]. */
static size_t batch_int_count(const struct engine *e)
{
    return (size_t)e->p.max_batch * (4 + e->p.cfg->n_layers);
}

/* Host memory the device copies into without the driver staging it: pinned on cuda. A copy
 * into pageable memory returns only once it has run, inside the driver, which then holds up
 * other threads' submissions (a recall the same stream waits for on the device would never
 * be queued). */
static enum mem_kind batch_token_kind(const struct engine *e)
{
    return e->be->mem == MEM_DEVICE ? MEM_PINNED : MEM_HOST;
}

struct batch *batch_create(struct engine *e)
{
    struct batch *bt = mem_alloc(MEM_HOST, sizeof *bt, "batch");
    if (!bt) return NULL;
    memset(bt, 0, sizeof *bt);
    size_t B = (size_t)e->p.max_batch;
    const size_t xb = sizeof(float) * B * e->p.cfg->hidden,
                 qb = sizeof(uint16_t) * B * e->p.cfg->n_heads * e->p.cfg->head_dim;
    bt->stage_bytes = sizeof(int32_t) * batch_int_count(e);
    bt->mem_bytes = mem_aligned(bt->stage_bytes) + mem_aligned(xb) + 2 * mem_aligned(qb);
    bt->mem = mem_alloc(e->be->mem, bt->mem_bytes, "batch");
    bt->h_stage = mem_alloc(MEM_HOST, bt->stage_bytes, "batch stage");
    bt->piece_graph =
        mem_alloc(MEM_HOST, sizeof(void *) * PIECES * (size_t)e->p.cfg->n_layers, "batch graphs");
    int ok = bt->mem && bt->h_stage && bt->piece_graph;
    if (bt->piece_graph)
        memset(bt->piece_graph, 0, sizeof(void *) * PIECES * (size_t)e->p.cfg->n_layers);
    for (int i = 0; i < 2; i++) {
        bt->h_tokens[i] = mem_alloc(batch_token_kind(e), sizeof(int32_t) * B, "batch tokens");
        bt->ev_tokens[i] = e->be->event_create();
        ok = ok && bt->h_tokens[i] && bt->ev_tokens[i];
    }
    if (!ok) {
        batch_free(e, bt);
        return NULL;
    }
    int32_t *ints = bt->mem;
    bt->d_tokens = ints;
    bt->d_pos = ints + B;
    bt->d_len = ints + 2 * B;
    bt->d_req = ints + 3 * B;
    bt->d_page_start = ints + 4 * B;
    char *cur = (char *)bt->mem + mem_aligned(bt->stage_bytes);
    bt->d_x = mem_carve(&cur, xb);
    bt->d_q = mem_carve(&cur, qb);
    bt->d_attn = mem_carve(&cur, qb);
    return bt;
}

struct batch *batch_view_create(struct engine *e)
{
    (void)e;
    struct batch *bt = mem_alloc(MEM_HOST, sizeof *bt, "batch view");
    if (bt) memset(bt, 0, sizeof *bt);
    return bt;
}

void batch_view_set(struct engine *e, struct batch *view, const struct batch *parent, int first,
                    int n)
{
    PULSE_CHECK(view->mem == NULL && parent->mem != NULL && first >= 0 && n >= 1 &&
                    first + n <= parent->n,
                "batch_view_set: a view of a batch's entries");
    const size_t f = (size_t)first, qd = (size_t)e->p.cfg->n_heads * e->p.cfg->head_dim;
    view->n = n;
    view->max_len = parent->max_len;
    view->d_tokens = parent->d_tokens + f;
    view->d_pos = parent->d_pos + f;
    view->d_len = parent->d_len + f;
    view->d_req = parent->d_req + f;
    view->d_page_start =
        parent->d_page_start + f; /* rows of max_batch per layer, as the parent's */
    view->d_x = parent->d_x + f * e->p.cfg->hidden;
    view->d_q = parent->d_q + f * qd;
    view->d_attn = parent->d_attn + f * qd;
}

static void pieces_drop(struct engine *e, struct batch *bt)
{
    for (int i = 0; bt->piece_graph && i < PIECES * e->p.cfg->n_layers; i++)
        engine_graph_drop(e, &bt->piece_graph[i]);
}

void batch_free(struct engine *e, struct batch *bt)
{
    if (!bt) return;
    engine_graph_drop(e, &bt->graph);
    pieces_drop(e, bt);
    mem_free(MEM_HOST, bt->piece_graph, sizeof(void *) * PIECES * (size_t)e->p.cfg->n_layers);
    mem_free(e->be->mem, bt->mem, bt->mem_bytes);
    mem_free(MEM_HOST, bt->h_stage, bt->stage_bytes);
    for (int i = 0; i < 2; i++) {
        mem_free(batch_token_kind(e), bt->h_tokens[i], sizeof(int32_t) * (size_t)e->p.max_batch);
        if (bt->ev_tokens[i]) e->be->event_destroy(bt->ev_tokens[i]);
    }
    mem_free(MEM_HOST, bt, sizeof *bt);
}

int batch_size(const struct batch *bt)
{
    return bt->n;
}

void batch_set(struct engine *e, struct batch *bt, const struct kv_cache *kv,
               const struct batch_entry *entries, int n)
{
    PULSE_CHECK(n >= 0 && n <= e->p.max_batch, "batch larger than max_batch");
    size_t B = (size_t)e->p.max_batch;
    int32_t *h = bt->h_stage;
    memset(h, 0, bt->stage_bytes);
    engine_graph_drop(e, &bt->graph); /* the captured step belongs to the old entries */
    bt->n = n;
    bt->max_len = 1;
    for (int b = 0; b < n; b++) {
        const struct batch_entry *en = &entries[b];
        PULSE_CHECK(en->pos >= 0 && en->pos < en->reserved, "entry position past its reservation");
        h[b] = en->token;
        h[B + b] = en->pos;
        h[2 * B + b] = en->pos + 1; /* tokens attended after this step's append */
        h[3 * B + b] = en->req_id;
        for (int l = 0; l < e->p.cfg->n_layers; l++)
            h[(4 + (size_t)l) * B + b] = kv_cache_row(kv, en->slot, l);
        bt->max_len = PULSE_MAX(bt->max_len, en->reserved);
    }
    e->be->upload(&e->ctx, bt->mem, h, bt->stage_bytes);
    bt->len_on_host = 1;
}

void batch_tokens_queue(struct engine *e, struct batch *bt, int i)
{
    PULSE_CHECK(i == 0 || i == 1, "batch_tokens_queue: buffer 0 or 1");
    bt->n_tokens[i] = bt->n;
    e->be->copy_async(&e->ctx, bt->h_tokens[i], bt->d_tokens, sizeof(int32_t) * (size_t)bt->n);
    e->be->event_record(&e->ctx, bt->ev_tokens[i]);
}

int batch_tokens_take(struct engine *e, struct batch *bt, int i, int32_t *out)
{
    PULSE_CHECK(i == 0 || i == 1, "batch_tokens_take: buffer 0 or 1");
    e->be->event_sync(bt->ev_tokens[i]);
    memcpy(out, bt->h_tokens[i], sizeof(int32_t) * (size_t)bt->n_tokens[i]);
    return bt->n_tokens[i];
}

void batch_read_tokens(struct engine *e, struct batch *bt, int32_t *out)
{
    batch_tokens_queue(e, bt, 0);
    batch_tokens_take(e, bt, 0, out);
}

void batch_read_logits(struct engine *e, struct batch *bt, float *out)
{
    e->be->download(&e->ctx, out, e->logits, sizeof(float) * (size_t)bt->n * e->p.cfg->vocab);
}

void batch_read_residual(struct engine *e, struct batch *bt, float *out)
{
    e->be->download(&e->ctx, out, bt->d_x, sizeof(float) * (size_t)bt->n * e->p.cfg->hidden);
}

int32_t engine_first_token(const struct engine *e, int req_id)
{
    return (int32_t)(pulse_hash64(e->p.seed ^ 0x70726f6d7074ull, (uint64_t)req_id) %
                     (uint64_t)e->p.cfg->vocab);
}

void engine_fill_prompt(struct engine *e, struct batch *bt, const struct kv_cache *kv)
{
    if (!bt->n) return;
    size_t B = (size_t)e->p.max_batch;
    for (int l = 0; l < e->p.cfg->n_layers; l++) {
        struct kv_view v = kv_cache_view(kv, bt->d_page_start + l * B);
        e->be->kv_fill_synthetic(&e->ctx, &v, bt->d_pos, bt->d_req, bt->n, l, e->p.seed,
                                 bt->max_len);
    }
}

void engine_run_embed(struct engine *e, struct batch *bt)
{
    e->be->embed(&e->ctx, bt->d_tokens, e->model.embed, bt->d_x, bt->n, e->p.cfg->hidden,
                 e->model.embed_scale);
}

void engine_run_attention(struct engine *e, struct batch *bt, const struct kv_cache *kv, int layer)
{
    const struct model_config *c = e->p.cfg;
    struct kv_view v = kv_cache_view(kv, bt->d_page_start + (size_t)layer * e->p.max_batch);
    v.window = model_layer_window(c, layer);
    e->be->attn_decode(&e->ctx, bt->d_q, &v, bt->d_len, bt->d_attn, bt->n, c->n_heads, bt->max_len,
                       1.0f / sqrtf((float)c->head_dim));
}

/* The host copy of the attended lengths (the batch's staging len row), for hooks: fetched at
 * most once per step (the lengths change only when a step ends). */
static const int32_t *host_lengths(struct engine *e, struct batch *bt)
{
    int32_t *len = bt->h_stage + 2 * (size_t)e->p.max_batch;
    if (!bt->len_on_host) e->be->download(&e->ctx, len, bt->d_len, sizeof(int32_t) * (size_t)bt->n);
    bt->len_on_host = 1;
    return len;
}

/* The graph slot of a piece (0 pre, 1 post, 2 the whole layer) of `layer` when the batch replays
 * its pieces; NULL to queue the piece as it is. The graphs hold the batch size, the longest
 * reservation (the attention's split plan) and the cache's pointers (everything else a piece
 * reads is device state: positions, page rows), so they are dropped when one changes. */
static void **piece_slot(struct engine *e, struct batch *bt, const struct kv_cache *kv, int piece,
                         int layer)
{
    if (!batch_graphs_on(e, bt)) return NULL;
    if (bt->piece_n != bt->n || bt->piece_len != bt->max_len || (kv && bt->piece_kv != kv)) {
        pieces_drop(e, bt);
        bt->piece_n = bt->n, bt->piece_len = bt->max_len;
        if (kv) bt->piece_kv = kv;
    }
    return &bt->piece_graph[PIECES * layer + piece];
}

void engine_graph_run(struct engine *e, void **slot, void (*body)(void *), void *arg)
{
    if (!slot) {
        body(arg);
        return;
    }
    if (!*slot) {
        e->be->graph_begin(&e->ctx);
        e->capturing = 1;
        body(arg);
        e->capturing = 0;
        *slot = e->be->graph_end(&e->ctx);
        e->st.graph_captures++;
    }
    e->be->graph_launch(&e->ctx, *slot);
    e->st.graph_launches++;
}

void engine_graph_drop(struct engine *e, void **slot)
{
    if (*slot) e->be->graph_destroy(*slot);
    *slot = NULL;
}

int batch_graphs_on(const struct engine *e, const struct batch *bt)
{
    return bt->pieces && e->use_graph && !e->capturing;
}

struct piece_call {
    struct engine *e;
    struct batch *bt;
    const struct kv_cache *kv;
    int layer;
    void (*body)(struct engine *, struct batch *, const struct kv_cache *, int);
};

static void piece_body(void *arg)
{
    const struct piece_call *p = arg;
    p->body(p->e, p->bt, p->kv, p->layer);
}

/* Runs body(e, bt, kv, layer) as the graph in slot g (captured the first time), or as it is
 * when g is NULL. */
static void piece_run(struct engine *e, struct batch *bt, const struct kv_cache *kv, int layer,
                      void **g,
                      void (*body)(struct engine *, struct batch *, const struct kv_cache *, int))
{
    struct piece_call p = {e, bt, kv, layer, body};
    engine_graph_run(e, g, piece_body, &p);
}

void batch_graph_pieces(struct engine *e, struct batch *bt, int on)
{
    on = on && e->piece_graphs;
    if (!on) pieces_drop(e, bt);
    bt->pieces = on;
}

static void layer_pre(struct engine *e, struct batch *bt, const struct kv_cache *kv, int layer)
{
    const struct model_config *c = e->p.cfg;
    const struct backend *be = e->be;
    const struct layer_weights *w = &e->model.layers[layer];
    const struct kctx *x = &e->ctx;
    int B = bt->n, H = c->hidden;
    struct kv_view v = kv_cache_view(kv, bt->d_page_start + (size_t)layer * e->p.max_batch);
    be->rmsnorm(x, bt->d_x, w->attn_norm, e->xn, B, H, c->norm_eps);
    be->gemm_bf16(x, e->xn, w->wqkv, e->qkv, B, model_qkv_dim(c), H, 0.0f);
    be->qk_norm_rope_append(x, e->qkv, w->q_norm, w->k_norm, bt->d_q, &v, bt->d_pos, B, c->n_heads,
                            w->rope_inv_freq, c->norm_eps);
}

void engine_layer_pre(struct engine *e, struct batch *bt, const struct kv_cache *kv, int layer)
{
    piece_run(e, bt, kv, layer, piece_slot(e, bt, kv, 0, layer), layer_pre);
}

/* x += the layer's attention output attn through its O GEMM (post-norm first on Gemma 3), for
 * the batch's B rows: post-attention's first part, on any residual. */
void engine_attn_add(struct engine *e, int B, int layer, const uint16_t *attn, float *x)
{
    const struct model_config *c = e->p.cfg;
    const struct backend *be = e->be;
    const struct layer_weights *w = &e->model.layers[layer];
    const struct kctx *k = &e->ctx;
    int H = c->hidden, qd = c->n_heads * c->head_dim;
    if (c->arch == MODEL_ARCH_GEMMA3) { /* post-norm, then the residual add */
        be->gemm_bf16(k, attn, w->wo, e->tmp, B, H, qd, 0.0f);
        be->rmsnorm_add(k, x, e->tmp, w->post_attn_norm, B, H, c->norm_eps);
    } else {
        be->gemm_bf16(k, attn, w->wo, x, B, H, qd, 1.0f);
    }
}

/* Post-attention, first part: the attention's output projection into the residual. */
static void layer_post_attn(struct engine *e, struct batch *bt, const struct kv_cache *kv,
                            int layer)
{
    (void)kv;
    engine_attn_add(e, bt->n, layer, bt->d_attn, bt->d_x);
}

/* Post-attention, second part: the MLP and its residual add. */
static void layer_post_mlp(struct engine *e, struct batch *bt, const struct kv_cache *kv, int layer)
{
    (void)kv;
    const struct model_config *c = e->p.cfg;
    const struct backend *be = e->be;
    const struct layer_weights *w = &e->model.layers[layer];
    const struct kctx *x = &e->ctx;
    int B = bt->n, H = c->hidden;
    const int gemma = c->arch == MODEL_ARCH_GEMMA3;
    be->rmsnorm(x, bt->d_x, w->mlp_norm, e->xn, B, H, c->norm_eps);
    be->gemm_bf16(x, e->xn, w->wgu, e->gu, B, 2 * c->ffn, H, 0.0f);
    (gemma ? be->gelu_mul : be->silu_mul)(x, e->gu, e->act, B, c->ffn);
    if (gemma) {
        be->gemm_bf16(x, e->act, w->wdown, e->tmp, B, H, c->ffn, 0.0f);
        be->rmsnorm_add(x, bt->d_x, e->tmp, w->post_mlp_norm, B, H, c->norm_eps);
    } else {
        be->gemm_bf16(x, e->act, w->wdown, bt->d_x, B, H, c->ffn, 1.0f);
    }
}

static void layer_post(struct engine *e, struct batch *bt, const struct kv_cache *kv, int layer)
{
    layer_post_attn(e, bt, kv, layer);
    layer_post_mlp(e, bt, kv, layer);
}

void engine_layer_post(struct engine *e, struct batch *bt, int layer)
{
    piece_run(e, bt, NULL, layer, piece_slot(e, bt, NULL, 1, layer), layer_post);
}

void engine_layer_post_attn(struct engine *e, struct batch *bt, int layer)
{
    piece_run(e, bt, NULL, layer, piece_slot(e, bt, NULL, 3, layer), layer_post_attn);
}

void engine_layer_post_mlp(struct engine *e, struct batch *bt, int layer)
{
    piece_run(e, bt, NULL, layer, piece_slot(e, bt, NULL, 4, layer), layer_post_mlp);
}

static int hook_set(const struct engine_layer_hook *h)
{
    return h && (h->after_attention || h->attend || h->before_layer || h->mid_layer);
}

/* pre-attention, attention, post-attention, without hooks */
static void layer_whole(struct engine *e, struct batch *bt, const struct kv_cache *kv, int layer)
{
    engine_layer_pre(e, bt, kv, layer);
    engine_run_attention(e, bt, kv, layer);
    engine_layer_post(e, bt, layer);
}

void engine_run_layer(struct engine *e, struct batch *bt, const struct kv_cache *kv, int layer)
{
    const struct engine_layer_hook *h = &bt->hook;
    TRACE_PUSH("layer");
    if (!hook_set(h)) { /* one graph when the batch replays its pieces */
        piece_run(e, bt, kv, layer, piece_slot(e, bt, kv, 2, layer), layer_whole);
        TRACE_POP();
        return;
    }
    struct kv_view v = kv_cache_view(kv, bt->d_page_start + (size_t)layer * e->p.max_batch);
    v.window = model_layer_window(e->p.cfg, layer);
    const int B = bt->n;
    if (h->before_layer) h->before_layer(h->user, layer, bt->d_x, bt->d_pos, B);
    engine_layer_pre(e, bt, kv, layer);
    if (!h->attend ||
        !h->attend(h->user, layer, bt->d_q, &v, bt->d_len, host_lengths(e, bt), bt->d_attn, B))
        engine_run_attention(e, bt, kv, layer);
    if (h->after_attention) h->after_attention(h->user, layer, bt->d_q, &v, host_lengths(e, bt), B);
    if (h->mid_layer) { /* post-attention in its two parts, the hook between them */
        engine_layer_post_attn(e, bt, layer);
        h->mid_layer(h->user, layer, bt->d_x, bt->d_pos, B);
        engine_layer_post_mlp(e, bt, layer);
    } else {
        engine_layer_post(e, bt, layer);
    }
    TRACE_POP();
}

void engine_run_layer_gemms(struct engine *e, struct batch *bt, int layer)
{
    const struct model_config *c = e->p.cfg;
    const struct layer_weights *w = &e->model.layers[layer];
    const struct kctx *x = &e->ctx;
    int B = bt->n, H = c->hidden;
    e->be->gemm_bf16(x, e->xn, w->wqkv, e->qkv, B, model_qkv_dim(c), H, 0.0f);
    e->be->gemm_bf16(x, bt->d_attn, w->wo, bt->d_x, B, H, c->n_heads * c->head_dim, 1.0f);
    e->be->gemm_bf16(x, e->xn, w->wgu, e->gu, B, 2 * c->ffn, H, 0.0f);
    e->be->gemm_bf16(x, e->act, w->wdown, bt->d_x, B, H, c->ffn, 1.0f);
}

void engine_run_lm_head(struct engine *e, struct batch *bt)
{
    const struct model_config *c = e->p.cfg;
    e->be->gemm_bf16(&e->ctx, e->xn, e->model.lm_head, e->logits, bt->n, c->vocab, c->hidden, 0.0f);
}

void engine_run_head(struct engine *e, struct batch *bt)
{
    const struct model_config *c = e->p.cfg;
    const struct kctx *x = &e->ctx;
    e->be->rmsnorm(x, bt->d_x, e->model.final_norm, e->xn, bt->n, c->hidden, c->norm_eps);
    e->be->gemm_bf16(x, e->xn, e->model.lm_head, e->logits, bt->n, c->vocab, c->hidden, 0.0f);
    e->be->argmax(x, e->logits, bt->d_tokens, bt->n, c->vocab);
    e->be->advance_pos(x, bt->d_pos, bt->n);
    e->be->advance_pos(x, bt->d_len, bt->n);
    bt->len_on_host = 0;
}

void engine_prefill(struct engine *e, struct batch *bt, const struct kv_cache *kv)
{
    if (!bt->n) return;
    const struct model_config *c = e->p.cfg;
    const struct kctx *x = &e->ctx;
    TRACE_PUSH("prefill");
    engine_run_embed(e, bt);
    for (int l = 0; l < c->n_layers; l++)
        engine_run_layer(e, bt, kv, l);
    const float *last = bt->d_x + (size_t)(bt->n - 1) * c->hidden;
    e->be->rmsnorm(x, last, e->model.final_norm, e->xn, 1, c->hidden, c->norm_eps);
    e->be->gemm_bf16(x, e->xn, e->model.lm_head, e->logits, 1, c->vocab, c->hidden, 0.0f);
    e->be->argmax(x, e->logits, bt->d_tokens, 1, c->vocab);
    TRACE_POP();
}

void engine_read_logits(struct engine *e, float *out, int rows)
{
    e->be->download(&e->ctx, out, e->logits, sizeof(float) * (size_t)rows * e->p.cfg->vocab);
}

static void step_body(struct engine *e, struct batch *bt, const struct kv_cache *kv)
{
    engine_run_embed(e, bt);
    for (int l = 0; l < e->p.cfg->n_layers; l++)
        engine_run_layer(e, bt, kv, l);
    engine_run_head(e, bt);
}

struct step_call {
    struct engine *e;
    struct batch *bt;
    const struct kv_cache *kv;
};

static void step_call_body(void *arg)
{
    const struct step_call *c = arg;
    step_body(c->e, c->bt, c->kv);
}

void engine_step(struct engine *e, struct batch *bt, const struct kv_cache *kv)
{
    if (!bt->n) return;
    TRACE_PUSH("step");
    e->st.steps++;
    if (!e->use_graph || hook_set(&bt->hook)) { /* a hook runs host code: no graph */
        step_body(e, bt, kv);
        TRACE_POP();
        return;
    }
    /* The step reads only device state (tokens, positions, page starts), so one capture per
     * batch composition replays every later step of it (the pieces inside it queued as they
     * are). */
    if (bt->graph_kv != kv) engine_graph_drop(e, &bt->graph);
    bt->graph_kv = kv;
    struct step_call c = {e, bt, kv};
    engine_graph_run(e, &bt->graph, step_call_body, &c);
    bt->len_on_host = 0; /* the replayed head advanced the lengths */
    TRACE_POP();
}

void engine_get_stats(const struct engine *e, struct engine_stats *out)
{
    *out = e->st;
#ifdef PULSE_HAVE_CUDA
    if (e->gemm_lt) {
        struct gemm_lt_stats g;
        gemm_lt_get_stats(e->gemm_lt, &g);
        out->gemm_sm_target = g.sm_target;
        out->gemm_lt_calls = g.calls;
        out->gemm_skinny_calls = g.skinny_calls;
        out->gemm_shapes = g.shapes;
        out->gemm_shapes_skinny = g.shapes_skinny;
        out->gemm_shapes_tuned = g.shapes_tuned;
        out->gemm_candidates_timed = g.candidates_timed;
        out->gemm_capture_fallbacks = g.capture_fallbacks;
        out->gemm_blas_fallbacks = g.blas_fallbacks;
        out->gemm_shapes_graph_timed = g.shapes_graph_timed;
        out->gemm_graph_timing_fallbacks = g.graph_timing_fallbacks;
        out->gemm_choice_hash = g.choice_hash;
    }
#endif
}

json_t *engine_gemm_json(const struct engine *e, char *buf, size_t len)
{
    static const char *const paths[] = {"lt", "lt-heuristic", "cublas", "skinny"};
    struct engine_stats s;
    engine_get_stats(e, &s);
    const char *path = e->be->mem == MEM_DEVICE ? paths[e->p.gemm] : "cpu";
    snprintf(buf, len,
             "gemm %s: SM target %d (reserve %d), %lld shapes planned (%lld on the suite's skinny "
             "kernel), %lld timed over %lld candidates (%lld in graphs, %lld on the stream after "
             "a failed capture), %lld first seen in a capture, %lld calls left to cublasGemmEx",
             path, s.gemm_sm_target, e->p.gemm_sm_reserve, (long long)s.gemm_shapes,
             (long long)s.gemm_shapes_skinny, (long long)s.gemm_shapes_tuned,
             (long long)s.gemm_candidates_timed, (long long)s.gemm_shapes_graph_timed,
             (long long)s.gemm_graph_timing_fallbacks, (long long)s.gemm_capture_fallbacks,
             (long long)s.gemm_blas_fallbacks);
    char choice[17];
    snprintf(choice, sizeof choice, "%016llx", (unsigned long long)s.gemm_choice_hash);
    return json_pack(
        "{s:s,s:i,s:i,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:s,s:I,s:I,s:s}", "path", path, "sm_reserve",
        e->p.gemm_sm_reserve, "sm_target", s.gemm_sm_target, "lt_calls",
        (json_int_t)s.gemm_lt_calls, "skinny_calls", (json_int_t)s.gemm_skinny_calls, "shapes",
        (json_int_t)s.gemm_shapes, "shapes_skinny", (json_int_t)s.gemm_shapes_skinny,
        "shapes_tuned", (json_int_t)s.gemm_shapes_tuned, "candidates_timed",
        (json_int_t)s.gemm_candidates_timed, "capture_fallbacks",
        (json_int_t)s.gemm_capture_fallbacks, "blas_fallbacks", (json_int_t)s.gemm_blas_fallbacks,
        "timing", e->p.gemm_stream_timing ? "stream" : "graph", "shapes_graph_timed",
        (json_int_t)s.gemm_shapes_graph_timed, "graph_timing_fallbacks",
        (json_int_t)s.gemm_graph_timing_fallbacks, "choice_hash", choice);
}

void batch_set_hook(struct batch *bt, const struct engine_layer_hook *hook)
{
    if (hook_set(hook))
        bt->hook = *hook;
    else
        memset(&bt->hook, 0, sizeof bt->hook);
}

uint16_t *batch_q(const struct batch *bt)
{
    return bt->d_q;
}

uint16_t *batch_attn_out(const struct batch *bt)
{
    return bt->d_attn;
}

const int32_t *batch_pos(const struct batch *bt)
{
    return bt->d_pos;
}

const int32_t *batch_len(const struct batch *bt)
{
    return bt->d_len;
}

const float *batch_residual(const struct batch *bt)
{
    return bt->d_x;
}

const int32_t *batch_page_starts(const struct engine *e, const struct batch *bt, int layer)
{
    return bt->d_page_start + (size_t)layer * e->p.max_batch;
}
