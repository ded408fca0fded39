/* The offload runtime's private state (offload.c: create, admission, prompt KV; offload_layer.c:
 * the per-layer select / recall / attend; offload_json.c: counters). Not the interface. */
#ifndef PULSE_OFFLOAD_IMPL_H
#define PULSE_OFFLOAD_IMPL_H

#include "host_pool.h"
#include "hot_cache.h"
#include "offload.h"
#include "select.h"
#include "workloads/locality.h"

/* The selection kernels of the backend (the _ref or the _cuda ones of select.h). */
struct offload_sel_fns {
    void (*digest_update)(const struct kctx *, const struct kv_view *, const struct digest_view *,
                          const int32_t *, int, int);
    void (*select_blocks)(const struct kctx *, const struct select_cfg *, const uint16_t *,
                          const struct digest_view *, const int32_t *, float *, int32_t *,
                          int32_t *, int, int);
};

struct offload {
    struct offload_params p;
    struct engine *eng;
    const struct backend *be;
    const struct kctx *ctx;
    const struct model_config *mc;
    struct offload_sel_fns fn;
    struct kv_cache *kv;       /* the engine's cache (not owned) */
    struct kv_cache_params kp; /* its shape (budget and slots aside) */
    struct kv_cache *dg; /* digest store: one-token pages of dig_heads x [min, max] x head_dim */
    struct host_pool *hp;
    struct recall *rc;
    struct hot_cache *hc;
    struct locality *L;
    struct locality_meter *meter;
    struct locality_profile *prof; /* owned copy */
    struct kv_cache *pf_kv;        /* OFFLOAD_KV_PREFILL: staging cache of one request */
    struct prefill *pf;            /* its prefill (own batch) */
    int pf_slot;                   /* the staging slot during an admission */
    struct select_cfg cfg;         /* max_blocks = the cache's row width */
    int n_layers, n_dense, n_sparse, n_lists, ms, hot_slots, dig_heads, all_selected, headwise;
    int nq, nkv, hd, ps, G, max_blocks, max_batch, max_items;
    int att_max_tokens; /* bounds every attended length of the step (min(ms * ps, max reserved)) */
    size_t page_bytes, head_bytes, dpage_bytes; /* GPU page, one head's piece, digest page */
    char *gpu_pool;                             /* the cache's page pool (backend memory) */
    int32_t sel_head[LOC_MAX_LAYERS]; /* SELECT_HEADWISE, or the layer's SoloHead KV head */

    /* per cache slot */
    int32_t *hp_slot, *dg_slot, *req_id; /* [max_batch]; -1 when the slot is not ours */
    int32_t *first_tok;                  /* [max_batch] offload_first_token */
    int32_t *last_nb;                    /* [max_batch][n_sparse] blocks at the last step */

    /* the step's batch (host), and what the layers of a step share */
    int n;
    int32_t *h_slot;      /* [max_batch] cache slot of entry b */
    int32_t *h_step;      /* [max_batch] pos, then [n_sparse][max_batch] digest row starts */
    int32_t *d_step;      /* backend copy */
    int32_t *tail_buf[2]; /* [V] hot-cache slot of the tail of virtual entry v, by layer parity */
    int pend_layer;       /* the layer whose plan and recall were issued, -1 = none */
    int pend_items;       /* its recall items (in items) */
    int64_t pend_ticket;
    int64_t step_bytes; /* recall bytes of the step so far */

    /* selection and attention buffers: V = max_batch * n_lists virtual entries */
    uint16_t *h_q, *d_q;   /* [max_batch][nq][hd] selection queries */
    uint16_t *q_next;      /* [max_batch][n_sparse][nq][hd] the next step's, made in advance */
    uint8_t *q_ready;      /* [max_batch][n_sparse] q_next holds the slot's next query */
    float *d_scores;       /* [max_batch][n_lists][max_blocks] */
    int32_t *h_sel;        /* [max_batch][n_lists][ms] lists, then [max_batch][n_lists] counts */
    int32_t *d_sel;        /* backend copy */
    int32_t *h_att_buf[2]; /* by layer parity: [V] attended tokens, then [V][ms] page ids */
    int32_t *d_att;        /* backend copy of the layer being attended */
    int32_t *d_att_start;  /* [V] v * ms (constant) */
    struct recall_item *items;
    struct hot_cache_result res;

    /* admission scratch (host) */
    int32_t *ids, *ident; /* [max_blocks] host block ids; 0, 1, 2, ... */
    uint16_t *stage_kv;   /* [max_blocks] GPU pages of one layer */
    uint16_t *stage_dg;   /* [max_blocks] digest pages of one layer */
    char *check_page;     /* one GPU page read back by offload_verify */

    /* counters */
    struct offload_layer_stats *ls; /* [n_layers] */
    struct offload_stats st;
    int64_t *series; /* [max_steps] recall bytes per step */
    int status;      /* first failure of a step */

    void *hmem, *dmem;
    size_t hmem_bytes, dmem_bytes;
};

/* The engine hook of a step (offload_layer.c). */
struct engine_layer_hook offload_hook(struct offload *o);

/* Sparse layer index of a layer >= n_dense. */
static inline int offload_sl(const struct offload *o, int layer)
{
    return layer - o->n_dense;
}

/* The hot-cache unit of (cache slot, sparse layer, list). */
static inline int offload_unit(const struct offload *o, int slot, int sl, int list)
{
    return (slot * o->n_sparse + sl) * o->n_lists + list;
}

/* Bytes of one recalled chunk: one KV head of a block (head-wise) or the whole block. */
static inline size_t offload_chunk_bytes(const struct offload *o)
{
    return o->headwise ? o->head_bytes : o->page_bytes;
}

/* GPU memory of list k's piece of page `page`: head k of it (head-wise) or all of it. */
static inline char *offload_gpu_piece(const struct offload *o, int32_t page, int k)
{
    char *p = o->gpu_pool + (size_t)page * o->page_bytes;
    return o->headwise ? p + (size_t)k * o->head_bytes : p;
}

/* Its id in the attention's view: head-wise views have one KV head per page, so head k of
 * page p is page p * nkv + k (kernels.h: a head's K and V are contiguous inside a page). */
static inline int32_t offload_att_page(const struct offload *o, int32_t page, int k)
{
    return o->headwise ? page * o->nkv + k : page;
}

static inline const void *offload_host_chunk(const struct offload *o, int hslot, int sl, int block,
                                             int k)
{
    return o->headwise ? host_pool_head(o->hp, hslot, sl, block, k)
                       : host_pool_block(o->hp, hslot, sl, block);
}

#endif
