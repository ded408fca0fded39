/* The offload runtime (offload.h): params, create and free, admission with the prompt's KV and
 * digests, release, checks. The per-layer work is in offload_layer.c, counters in
 * offload_json.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "mem.h"
#include "model.h"
#include "offload_impl.h"
#include "prefill.h"
#include "progress.h"

static const int32_t k_zero = 0;

/* ------------------------------------------------------------------ params */

void offload_params_init(struct offload_params *p, int max_batch, int max_tokens, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    p->budget_tokens = 2048;
    p->sink = 1;
    p->window = 2;
    p->n_dense = 2;
    p->selection = OFFLOAD_HEADWISE;
    p->engine = RECALL_PER_BLOCK;
    p->prompt_kv = OFFLOAD_KV_LOCALITY;
    p->seed = seed;
    p->max_batch = max_batch;
    p->max_tokens = max_tokens;
    p->max_steps = 1 << 16;
    recall_params_init(&p->recall, p->engine, 1);
    mem_pin_params_default(&p->pin);
    p->layer_graphs = 1;
    p->spec_correct_early = 1;
    p->select_joint = 1;
    p->plan_fused = 1;
    p->attend_recall = OFFLOAD_ATTEND_CORRECTIONS;
}

/* A prefetch's budget (blocks chosen by score): the exact one's with spec_margin more. */
static int spec_budget(const struct offload_params *p, int budget)
{
    if (!p->schedule || !p->schedule->prefetch) return budget;
    return select_widened_budget(budget, p->spec_margin);
}

static struct select_cfg cfg_of(const struct offload_params *p, const struct model_config *m,
                                int ps)
{
    struct select_cfg c = {m->n_heads,
                           m->n_kv_heads,
                           m->head_dim,
                           ps,
                           p->budget_tokens / ps,
                           p->sink,
                           p->window,
                           (int)PULSE_CEIL_DIV(p->max_tokens, ps),
                           0};
    struct select_cfg wide = c; /* a prediction's lists, in the same layout */
    wide.budget = spec_budget(p, c.budget);
    c.list_stride = select_max_selected(&wide);
    return c;
}

/* Blocks one step selects at most (select_max_selected from the params alone). */
static int max_selected(const struct offload_params *p, int ps)
{
    long long want = (long long)p->sink + p->window + 1 + p->budget_tokens / ps;
    long long mb = PULSE_CEIL_DIV((long long)p->max_tokens, ps);
    return (int)(want < mb ? want : mb);
}

/* The hot slots of a unit: the params', or the blocks one step selects; with a prefetching
 * schedule a quarter more (OFFLOAD_SPEC_RESERVE), so that the blocks a prediction brings
 * displace older ones rather than the last exact selection's that it missed (which the
 * correction would recall again). Measured on the CPU (pulse run --model tiny --policy
 * pulseinfer --speculate --workload uniform:1024:6 --output-len 32 --budget-tokens 64
 * --admission fixed:0, the prediction's hit rate 0.91): 8 slots (the selection) recalled 311
 * chunks by prefetch and 143 by correction, 10 slots 185 and 40, exact-at-layer 256
 * (test_pulseinfer asserts the reserve halves the corrections at least). A speculation margin
 * adds the blocks it predicts beyond the budget. */
static int hot_slots_of(const struct offload_params *p, int ps)
{
    if (p->hot_slots) return p->hot_slots;
    const int sel = max_selected(p, ps);
    if (!p->schedule || !p->schedule->prefetch) return sel;
    const long long mb = PULSE_CEIL_DIV((long long)p->max_tokens, ps);
    const long long want = sel + (long long)ceil(OFFLOAD_SPEC_RESERVE * sel) +
                           (spec_budget(p, p->budget_tokens / ps) - p->budget_tokens / ps);
    return (int)(want < mb ? want : mb);
}

int offload_layer_kind(const struct offload_params *p, const struct model_config *m, int layer)
{
    return model_layer_window(m, layer) > 0 ? OFFLOAD_LAYER_WINDOW
           : layer < p->n_dense             ? OFFLOAD_LAYER_DENSE
                                            : OFFLOAD_LAYER_SPARSE;
}

int offload_sparse_layers(const struct offload_params *p, const struct model_config *m)
{
    int n = 0;
    for (int l = 0; l < m->n_layers; l++)
        n += offload_layer_kind(p, m, l) == OFFLOAD_LAYER_SPARSE;
    return n;
}

/* An offload admission's map of every layer: a dense layer's blocks in order, a window layer's
 * last ceil(window / ps) + 1 blocks in a ring (the window's tokens [n - window, n) span at most
 * that many blocks, and the block an append starts reuses the page of one wholly outside it),
 * a sparse layer's hot slots and tail page. */
static void layer_maps(const struct offload_params *p, const struct model_config *m, int ps,
                       struct kv_layer_map *maps)
{
    const int row = (int)PULSE_CEIL_DIV(p->max_tokens, ps);
    for (int l = 0; l < m->n_layers; l++) {
        const int kind = offload_layer_kind(p, m, l);
        const int ring = (int)PULSE_CEIL_DIV(model_layer_window(m, l), ps) + 1;
        maps[l] = kind == OFFLOAD_LAYER_DENSE    ? (struct kv_layer_map){KV_MAP_ALL, 0}
                  : kind == OFFLOAD_LAYER_WINDOW ? (struct kv_layer_map){KV_MAP_RING, PULSE_MIN(ring, row)}
                                                 : (struct kv_layer_map){KV_MAP_TAIL, hot_slots_of(p, ps) + 1};
    }
}

#define BAD(...)                                                                                   \
    do {                                                                                           \
        snprintf(err, errlen, __VA_ARGS__);                                                        \
        return PULSE_ERR_INVALID;                                                                  \
    } while (0)

#define OOM_BAD(...)                                                                               \
    do {                                                                                           \
        snprintf(err, errlen, __VA_ARGS__);                                                        \
        return PULSE_ERR_OOM;                                                                      \
    } while (0)

int offload_params_check(const struct offload_params *p, const struct model_config *m,
                         const struct kv_cache_params *kp, char *err, size_t errlen)
{
    const int ps = kp->page_size;
    if (p->max_batch < 1 || p->max_tokens < 1)
        BAD("offload: max_batch and max_tokens must be >= 1");
    if (p->budget_tokens < 0 || p->budget_tokens % ps)
        BAD("budget tokens: %d is not a non-negative multiple of the block size %d",
            p->budget_tokens, ps);
    if (p->sink < 0 || p->window < 0) BAD("offload: sink and window must be >= 0 blocks");
    if (m->n_layers > OFFLOAD_MAX_LAYERS)
        BAD("offload: model %s has %d layers, at most %d are supported", m->name, m->n_layers,
            OFFLOAD_MAX_LAYERS);
    if (p->n_dense < 0 || p->n_dense >= m->n_layers)
        BAD("dense layers: %d is not in [0, %d) (%s has %d layers)", p->n_dense, m->n_layers,
            m->name, m->n_layers);
    if (offload_sparse_layers(p, m) == 0)
        BAD("model %s has no layer to offload: its layers past the %d dense ones are all "
            "sliding-window layers",
            m->name, p->n_dense);
    if (!offload_selection_name(p->selection)) BAD("offload: unknown selection %d", p->selection);
    for (int l = 0; p->selection == OFFLOAD_SOLOHEAD && p->selector && l < m->n_layers; l++)
        if (p->selector[l] < 0 || p->selector[l] >= m->n_kv_heads)
            BAD("selector of layer %d is %d, not a KV head of %s (0..%d)", l, p->selector[l],
                m->name, m->n_kv_heads - 1);
    if ((unsigned)p->engine >= RECALL_ENGINES) BAD("offload: unknown recall engine %d", p->engine);
    if (p->refetch && p->engine == RECALL_ZERO_COPY && p->cap_gbps == 0)
        BAD("reuse none (re-fetching the whole selection every step) needs a host-planned "
            "engine: per-block, gather-scatter or batch, or a capped zero-copy");
    if (p->prompt_kv != OFFLOAD_KV_LOCALITY && p->prompt_kv != OFFLOAD_KV_SYNTHETIC &&
        p->prompt_kv != OFFLOAD_KV_PREFILL)
        BAD("offload: unknown prompt KV source %d", p->prompt_kv);
    if (p->prefill_chunk < 0) BAD("offload: prefill chunk %d must be >= 0", p->prefill_chunk);
    if (p->query != OFFLOAD_QUERY_LOCALITY && p->query != OFFLOAD_QUERY_REAL)
        BAD("offload: unknown query source %d", p->query);
    if (p->query == OFFLOAD_QUERY_REAL && p->prompt_kv != OFFLOAD_KV_PREFILL)
        BAD("the real query selects over a real prompt's keys: it needs --prompt-kv prefill");
    if (!(p->cap_gbps >= 0)) BAD("recall cap: %g GB/s must be >= 0", p->cap_gbps);
    struct select_cfg c = cfg_of(p, m, ps);
    char why[160];
    if (select_cfg_check(&c, why, sizeof why)) BAD("offload: %s", why);
    c.budget = spec_budget(p, c.budget); /* a prediction's lists are as long with a margin */
    const int ms = select_max_selected(&c);
    if (p->hot_slots && (p->hot_slots < ms || p->hot_slots > c.max_blocks))
        BAD("hot slots: %d is not in [%d, %d] (the blocks one step selects .. the longest "
            "request's blocks)",
            p->hot_slots, ms, c.max_blocks);
    if (kp->n_layers != m->n_layers || kp->n_kv_heads != m->n_kv_heads ||
        kp->head_dim != m->head_dim)
        BAD("offload: the KV cache's shape is not the model's");
    return PULSE_OK;
}

static const char *const selection_names[] = {"headwise", "solohead", "mean"};

const char *offload_selection_name(int selection)
{
    return selection >= 0 && selection < (int)PULSE_ARRAY_LEN(selection_names)
               ? selection_names[selection]
               : NULL;
}

const char *offload_spec_from_name(int spec_from)
{
    return spec_from == OFFLOAD_SPEC_FROM_HITS  ? "hits"
           : spec_from == OFFLOAD_SPEC_FROM_MID ? "mid"
                                                : "input";
}

int offload_selection_find(const char *name)
{
    for (int i = 0; name && i < (int)PULSE_ARRAY_LEN(selection_names); i++)
        if (!strcmp(name, selection_names[i])) return i;
    return -1;
}

void offload_source_shape(const struct offload_params *p, const struct model_config *m,
                          int page_size, struct query_source_shape *out)
{
    memset(out, 0, sizeof *out);
    out->sel = cfg_of(p, m, page_size);
    out->n_layers = m->n_layers, out->n_slots = p->max_batch;
    for (int l = 0; l < m->n_layers && l < QUERY_SOURCE_MAX_LAYERS; l++)
        out->dense[l] = offload_layer_kind(p, m, l) != OFFLOAD_LAYER_SPARSE;
    out->one_list = p->selection != OFFLOAD_HEADWISE;
    out->selection = offload_selection_name(p->selection);
    out->hot_slots = hot_slots_of(p, page_size);
    out->speculates = p->schedule && p->schedule->lookahead;
    out->seed = p->seed;
}

size_t offload_request_kv_bytes(const struct offload_params *p, const struct model_config *m,
                                const struct kv_cache_params *kp, int n_tokens)
{
    size_t page = (size_t)kp->n_kv_heads * 2 * kp->page_size * kp->head_dim * sizeof(uint16_t);
    struct kv_layer_map maps[OFFLOAD_MAX_LAYERS];
    PULSE_CHECK(m->n_layers <= OFFLOAD_MAX_LAYERS && kp->n_layers == m->n_layers,
                "offload_request_kv_bytes: the cache is not the model's");
    layer_maps(p, m, kp->page_size, maps);
    return (size_t)kv_cache_params_mapped_pages(kp, n_tokens, maps) * page;
}

size_t offload_request_host_bytes(const struct offload_params *p, const struct model_config *m,
                                  int page_size, int n_tokens)
{
    size_t block = (size_t)m->n_kv_heads * 2 * page_size * m->head_dim * sizeof(uint16_t);
    return (size_t)offload_sparse_layers(p, m) * PULSE_CEIL_DIV((size_t)n_tokens, page_size) * block;
}

/* ------------------------------------------------------------------ buffers */

struct carve {
    char *base;
    size_t off;
};

static void *take(struct carve *c, size_t n)
{
    void *p = c->base ? c->base + c->off : NULL;
    c->off += mem_aligned(n);
    return p;
}

/* Carves the host buffers from base (NULL: only sizes them); returns the bytes. */
/* Lanes a step may run in (offload_params.lanes 2: two, else one). */
static int n_lanes(const struct offload *o)
{
    return o->p.lanes == 2 ? 2 : 1;
}

static size_t host_layout(struct offload *o, char *base)
{
    struct carve c = {base, 0};
    const size_t B = (size_t)o->max_batch, MB = (size_t)o->max_blocks;
    o->step.q_next = take(&c, 2 * B * o->n_sparse * o->nq * o->hd);
    o->step.q_spec_next = o->spec_q_up ? take(&c, 2 * B * o->n_sparse * o->nq * o->hd) : NULL;
    o->step.q_ready = take(&c, B * o->n_sparse);
    for (int p = 0; p < 2; p++) {
        o->step.ss[p].slot = take(&c, 4 * B);
        o->step.ss[p].n_tok = take(&c, 4 * B);
    }
    for (int i = 0; i < n_lanes(o); i++) {
        o->step.lanes[i].ev_sel = take(&c, sizeof(void *) * 2 * (size_t)o->n_sparse);
        o->step.lanes[i].ev_selected = take(&c, sizeof(void *) * (size_t)o->n_sparse);
    }
    for (int i = 0; i < n_lanes(o); i++) {
        struct offload_lane *L = &o->step.lanes[i];
        if (o->overlap) {
            L->ev_built = take(&c, sizeof(void *) * (size_t)o->n_sparse);
            L->ev_gathered = take(&c, sizeof(void *) * (size_t)o->n_sparse);
        }
        if (!o->spec) continue;
        L->ev_spec_sel = take(&c, sizeof(void *) * 2 * (size_t)o->n_sparse);
        L->ev_spec_selected = take(&c, sizeof(void *) * (size_t)o->n_sparse);
        L->ev_spec_built = take(&c, sizeof(void *) * (size_t)o->n_sparse);
        if (o->overlap) L->ev_spec_gathered = take(&c, sizeof(void *) * (size_t)o->n_sparse);
    }
    o->plan.pl_spec_step = take(&c, 8 * 2 * (size_t)o->n_sparse);
    o->plan.items = take(&c, sizeof(struct recall_item) * (size_t)o->max_items);
    o->step.lgraph = take(&c, sizeof(void *) * OFFLOAD_LGRAPH_SETS * OFFLOAD_LGRAPH_PIECES *
                                  (size_t)o->n_layers);
    o->step.lg_fused =
        take(&c, sizeof(int) * OFFLOAD_LGRAPH_SETS * OFFLOAD_LGRAPH_PIECES * (size_t)o->n_layers);
    int32_t *r = take(&c, 4 * 6 * (size_t)o->ms);
    o->plan.res = (struct hot_cache_result){
        r, r + o->ms, r + 2 * o->ms, r + 3 * o->ms, r + 4 * o->ms, r + 5 * o->ms, 0, 0, -1, -1, -1};
    o->store.ids = take(&c, 4 * MB);
    o->store.ident = take(&c, 4 * MB);
    o->store.stage_kv = take(&c, MB * o->page_bytes);
    o->store.stage_dg = take(&c, MB * o->dpage_bytes);
    o->store.check_page = take(&c, o->page_bytes);
    o->store.hp_slot = take(&c, 4 * B);
    o->store.dg_slot = take(&c, 4 * B);
    o->store.req_id = take(&c, 4 * B);
    o->store.first_tok = take(&c, 4 * B);
    o->store.last_nb = take(&c, 4 * B * o->n_sparse);
    o->ls = take(&c, sizeof(struct offload_layer_stats) * (size_t)o->n_layers);
    o->series = take(&c, 8 * (size_t)o->p.max_steps);
    o->plan.prev_totals = take(&c, 8 * 2 * (size_t)o->n_sparse * OFFLOAD_TOTALS);
    o->store.h_hp = o->device_plan ? take(&c, o->store.hp_bytes) : NULL;
    return c.off;
}

/* Carves what the device reads or writes asynchronously from pinned memory (the step upload,
 * the lists, the control blocks, the flags). */
static size_t pin_layout(struct offload *o, char *base)
{
    struct carve c = {base, 0};
    const size_t V = (size_t)o->max_batch * o->n_lists, S = (size_t)o->n_sparse;
    o->sel_ints = mem_aligned(4 * V * (o->ms + 1)) / 4;
    o->ctl_ints = mem_aligned(4 * offload_ctl_desc_off(o) + sizeof(struct recall_desc) * V) / 4;
    for (int p = 0; p < 2; p++)
        o->step.h_up[p] = take(&c, offload_up_bytes(o));
    for (int i = 0; i < n_lanes(o); i++) {
        o->step.lanes[i].h_sel = take(&c, 4 * 2 * S * o->sel_ints);
        o->step.lanes[i].h_ctl = take(&c, 4 * 2 * S * o->ctl_ints);
        o->step.lanes[i].flags = take(&c, 4 * S);
    }
    for (int i = 0; o->spec && i < n_lanes(o); i++)
        o->step.lanes[i].h_sel_spec = take(&c, 4 * 2 * S * o->sel_ints);
    for (int p = 0; p < 2; p++)
        o->step.h_totals[p] = take(&c, 8 * 2 * S * OFFLOAD_TOTALS);
    return c.off;
}

/* A layer's hot-cache plan scratch (hot_plan_out but its totals) for V lists of VM entries. */
static void carve_plan_out(struct carve *c, struct hot_plan_out *po, size_t V, size_t VM)
{
    po->status = take(c, 4 * V), po->n_hits = take(c, 4 * V), po->n_recalls = take(c, 4 * V);
    po->recall_block = take(c, 4 * VM), po->recall_slot = take(c, 4 * VM);
    po->victim_block = take(c, 4 * VM), po->attend_slot = take(c, 4 * VM);
    po->fresh_block = take(c, 4 * V), po->fresh_slot = take(c, 4 * V);
    po->fresh_victim = take(c, 4 * V);
}

static size_t dev_layout(struct offload *o, char *base)
{
    struct carve c = {base, 0};
    const size_t V = (size_t)o->max_batch * o->n_lists;
    o->step.d_up = take(&c, offload_up_bytes(o));
    o->step.d_q = (uint16_t *)(o->step.d_up ? o->step.d_up + offload_up_ints(o) : NULL);
    o->step.d_scores = take(&c, 4 * V * o->max_blocks);
    if (o->fork || o->joint) o->step.d_scores_ahead = take(&c, 4 * V * o->max_blocks);
    for (int i = 0; i < n_lanes(o); i++)
        o->step.lanes[i].d_sel = take(&c, 4 * (size_t)o->n_sparse * V * (o->ms + 1));
    for (int i = 0; o->spec && i < n_lanes(o); i++)
        o->step.lanes[i].d_sel_spec = take(&c, 4 * (size_t)o->n_sparse * V * (o->ms + 1));
    o->step.d_zero = take(&c, 4 * (size_t)o->max_batch);
    for (int i = 0; i < 2 * n_lanes(o); i++)
        o->step.lanes[i / 2].d_ctl[i % 2] = take(&c, 4 * o->ctl_ints);
    o->step.d_att_start = take(&c, 4 * V);
    if (o->device_plan) {
        const size_t VM = V * o->ms, S = (size_t)o->n_sparse;
        o->store.d_hp = take(&c, o->store.hp_bytes);
        carve_plan_out(&c, &o->step.po, V, VM);
        if (o->fork || (o->joint && o->fused)) carve_plan_out(&c, &o->step.po_fork, V, VM);
        o->step.d_totals = take(&c, 8 * 2 * S * OFFLOAD_TOTALS); /* the predictions' after */
        for (int i = 0; i < 2 * n_lanes(o); i++)
            o->step.lanes[i / 2].d_desc[i % 2] = take(&c, sizeof(struct recall_desc) * VM);
        for (int i = 0; i < 2 * n_lanes(o) && o->spec; i++)
            o->step.lanes[i / 2].d_desc_spec[i % 2] = take(&c, sizeof(struct recall_desc) * VM);
        o->step.d_ctl_spec = o->spec ? take(&c, 4 * o->ctl_ints) : NULL;
        if (o->p.spec_from == OFFLOAD_SPEC_FROM_HITS) {
            o->step.d_hits_attn = take(&c, 2 * (size_t)o->max_batch * o->nq * o->hd);
            o->step.d_hits_x = take(&c, 4 * (size_t)o->max_batch * o->mc->hidden);
            o->step.d_gate = take(&c, 4 * S);
        }
        o->store.d_own = take(&c, 4 * (size_t)o->max_batch * S * (o->hot_slots + 1));
        o->store.d_hids = take(&c, 4 * (size_t)o->max_batch * S * o->max_blocks);
    }
    return c.off;
}

static int alloc_host(struct offload *o)
{
    o->hmem_bytes = host_layout(o, NULL);
    o->hmem = mem_alloc(MEM_HOST, o->hmem_bytes, "offload host buffers");
    if (!o->hmem) return PULSE_ERR_OOM;
    memset(o->hmem, 0, o->hmem_bytes);
    host_layout(o, o->hmem);
    for (int i = 0; i < o->max_blocks; i++)
        o->store.ident[i] = i;
    for (int s = 0; s < o->max_batch; s++)
        o->store.hp_slot[s] = o->store.dg_slot[s] = o->store.req_id[s] = -1;
    return PULSE_OK;
}

/* Pinned where the backend is a device (host memory on the cpu). */
static enum mem_kind pin_kind(const struct offload *o)
{
    return o->be->mem == MEM_DEVICE ? MEM_PINNED : MEM_HOST;
}

static int alloc_dev(struct offload *o)
{
    o->pin_bytes = pin_layout(o, NULL);
    o->pin = mem_alloc(pin_kind(o), o->pin_bytes, "offload pinned buffers");
    if (!o->pin) return PULSE_ERR_OOM;
    memset(o->pin, 0, o->pin_bytes);
    pin_layout(o, o->pin);
    o->dmem_bytes = dev_layout(o, NULL);
    o->dmem = mem_alloc(o->be->mem, o->dmem_bytes, "offload buffers");
    if (!o->dmem) return PULSE_ERR_OOM;
    /* zeroed once: the lists' download copies whole lists, of which the selection writes the
     * chosen entries (compute-sanitizer's initcheck reads the rest as uninitialized) */
    o->be->memset(o->ctx, o->dmem, 0, o->dmem_bytes);
    dev_layout(o, o->dmem);
    const int V = o->max_batch * o->n_lists;
    int32_t *start = o->step.lanes[0].h_ctl; /* staging, before any step */
    for (int v = 0; v < V; v++)
        start[v] = v * o->ms;
    o->be->upload(o->ctx, o->step.d_att_start, start, sizeof(int32_t) * (size_t)V);
    if (o->device_plan) {
        hot_plan_state_carve(&o->store.hpp, o->store.d_hp, &o->store.hps);
        o->fn.hot_plan_init(&o->store.hpp, &o->store.hps, o->ctx->stream);
        o->be->memset(o->ctx, o->step.d_totals, 0, 8 * 2 * (size_t)o->n_sparse * OFFLOAD_TOTALS);
        if (o->step.d_gate) /* open */
            o->be->memset(o->ctx, o->step.d_gate, OFFLOAD_GATE_BYTE, 4 * (size_t)o->n_sparse);
        void *dev = NULL;
        const struct recall_copy_ops *ops = recall_copy_ops_for(o->be);
        if (ops->map_host(ops, host_pool_base(o->store.hp), &dev) != PULSE_OK) return PULSE_ERR_OOM;
        o->store.host_dev = (uint64_t)(uintptr_t)dev;
        o->be->sync(o->ctx);
    }
    for (int p = 0; p < 2; p++) {
        o->step.ev_up[p] = o->be->event_create();
        o->step.ev_end[p] = o->be->event_create();
    }
    for (int k = 0; k < n_lanes(o); k++) {
        struct offload_lane *L = &o->step.lanes[k];
        for (int i = 0; i < 2 * o->n_sparse; i++)
            if (!(L->ev_sel[i] = o->be->event_create())) return PULSE_ERR_OOM;
        for (int i = 0; i < o->n_sparse; i++)
            if (!(L->ev_selected[i] = o->be->event_create())) return PULSE_ERR_OOM;
        for (int i = 0; o->spec && i < 2 * o->n_sparse; i++)
            if (!(L->ev_spec_sel[i] = o->be->event_create())) return PULSE_ERR_OOM;
        for (int i = 0; o->spec && i < o->n_sparse; i++)
            if (!(L->ev_spec_selected[i] = o->be->event_create()) ||
                !(L->ev_spec_built[i] = o->be->event_create()))
                return PULSE_ERR_OOM;
        for (int i = 0; o->overlap && i < o->n_sparse; i++)
            if (!(L->ev_built[i] = o->be->event_create()) ||
                !(L->ev_gathered[i] = o->be->event_create()) ||
                (o->spec && !(L->ev_spec_gathered[i] = o->be->event_create())))
                return PULSE_ERR_OOM;
    }
    offload_lane_reset(o);
    o->step.ev_lists = o->be->event_create();
    if (o->be->ctx_create_urgent(&o->step.sctx) != PULSE_OK) return PULSE_ERR_OOM;
    if (o->overlap && o->be->ctx_create_urgent(&o->step.gctx) != PULSE_OK) return PULSE_ERR_OOM;
    if (o->cstream && o->be->ctx_create_urgent(&o->step.cctx) != PULSE_OK) return PULSE_ERR_OOM;
    /* the prediction's stream at the compute stream's priority (s37, an H100, pulseinfer at 32K
     * x 24: 618 tok/s, and 629 at the greatest priority, against 681 and 676 inline) */
    if (o->fork &&
        (o->be->ctx_create(&o->step.pctx, 0) != PULSE_OK ||
         !(o->step.ev_fork = o->be->event_create()) || !(o->step.ev_join = o->be->event_create())))
        return PULSE_ERR_OOM;
    return offload_planner_start(o);
}

/* ------------------------------------------------------------------ create */

static const struct offload_sel_fns fns_ref = {
    hot_plan_ref,       hot_plan_reset_ref,     hot_plan_init_ref,
    offload_build_ref,  offload_plan_build_ref, recall_gather_ref,
    recall_scatter_ref, digest_update_ref,      select_blocks_multi_ref,
    select_approx_q_ref};
#ifdef PULSE_HAVE_CUDA
static const struct offload_sel_fns fns_cuda = {
    hot_plan_cuda,       hot_plan_reset_cuda,     hot_plan_init_cuda,
    offload_build_cuda,  offload_plan_build_cuda, recall_gather_cuda,
    recall_scatter_cuda, digest_update_cuda,      select_blocks_multi_cuda,
    select_approx_q_cuda};
#endif

/* Shapes, sizes and the selector head of every layer. */
static void set_shape(struct offload *o, const struct model_config *m, int ps)
{
    const struct offload_params *p = &o->p;
    o->mc = m;
    o->n_layers = m->n_layers, o->n_dense = p->n_dense, o->n_sparse = 0;
    o->n_full = o->n_window = 0;
    for (int l = 0; l < m->n_layers; l++) {
        o->kind[l] = (uint8_t)offload_layer_kind(p, m, l);
        o->sl_of[l] = -1;
        if (o->kind[l] == OFFLOAD_LAYER_SPARSE)
            o->sl_of[l] = (int16_t)o->n_sparse, o->layer_of[o->n_sparse++] = (int16_t)l;
        else if (o->kind[l] == OFFLOAD_LAYER_WINDOW)
            o->windows[o->n_window++] = model_layer_window(m, l);
        else
            o->n_full++;
    }
    layer_maps(p, m, ps, o->store.maps);
    o->nq = m->n_heads, o->nkv = m->n_kv_heads, o->hd = m->head_dim, o->ps = ps;
    o->G = o->nq / o->nkv;
    o->cfg = cfg_of(p, m, ps);
    o->max_blocks = o->cfg.max_blocks, o->max_batch = p->max_batch;
    o->cfg_spec = o->cfg;
    o->cfg_spec.budget = spec_budget(p, o->cfg.budget);
    o->ms = select_list_stride(&o->cfg);
    o->hot_slots = hot_slots_of(p, ps);
    o->headwise = p->selection == OFFLOAD_HEADWISE;
    o->n_lists = o->headwise ? o->nkv : 1;
    o->dig_heads = p->selection == OFFLOAD_SOLOHEAD ? 1 : o->nkv;
    o->all_selected = p->sink + p->window + 1 + o->cfg.budget >= o->max_blocks;
    o->max_items = o->max_batch * o->n_lists * o->ms;
    o->head_bytes = (size_t)2 * ps * o->hd * sizeof(uint16_t);
    o->page_bytes = o->head_bytes * o->nkv;
    o->dpage_bytes = (size_t)o->dig_heads * 2 * o->hd * sizeof(uint16_t);
    /* zero-copy plans on the device, unless capped: the cap is the engine's pacing (recall.h),
     * which the device-driven gather does not go through, so a capped zero-copy runs
     * host-planned, its gathers paced by the engine */
    o->device_plan = p->engine == RECALL_ZERO_COPY && p->cap_gbps == 0;
    /* selecting ahead, the next layer's gather overlaps this layer's MLP on its own stream */
    o->overlap = o->device_plan && (p->device_overlap || p->schedule->lookahead);
    o->spec = p->schedule->prefetch;
    o->fork = p->predict_fork && o->overlap && p->schedule->lookahead &&
              p->spec_from == OFFLOAD_SPEC_FROM_INPUT;
    o->joint = p->select_joint && p->schedule->lookahead;
    o->fused = p->plan_fused && o->device_plan;
    o->cstream =
        p->correct_stream && o->overlap && o->spec && p->spec_from == OFFLOAD_SPEC_FROM_INPUT;
    /* the locality query's approximate one, when it is not the step's own */
    o->spec_q_up = p->query != OFFLOAD_QUERY_REAL && p->schedule->lookahead &&
                   ((p->source && p->source->spec_q) || p->spec_predictor == OFFLOAD_SPEC_NEGATED);
    o->layer_graphs = p->layer_graphs != 0; /* 0: the device path's layers as pieces */
    o->store.hpp = (struct hot_plan_params){o->max_batch * o->n_sparse * o->n_lists, o->hot_slots,
                                            p->sink, p->window, o->max_blocks};
    o->store.hp_bytes = o->device_plan ? hot_plan_state_bytes(&o->store.hpp) : 0;
    for (int l = 0; l < m->n_layers; l++)
        o->sel_head[l] = o->headwise                    ? SELECT_HEADWISE
                         : p->selection == OFFLOAD_MEAN ? SELECT_MEAN
                         : p->selector                  ? p->selector[l]
                                                        : 0;
    o->fn = fns_ref;
#ifdef PULSE_HAVE_CUDA
    if (o->be->mem == MEM_DEVICE) o->fn = fns_cuda;
#endif
}

static int same_shape(const struct query_source_shape *a, const struct query_source_shape *b)
{
    const struct select_cfg *x = &a->sel, *y = &b->sel;
    return x->n_heads == y->n_heads && x->n_kv_heads == y->n_kv_heads &&
           x->head_dim == y->head_dim && x->block_size == y->block_size && x->budget == y->budget &&
           x->sink == y->sink && x->window == y->window && x->max_blocks == y->max_blocks &&
           a->n_layers == b->n_layers && !memcmp(a->dense, b->dense, sizeof a->dense) &&
           a->n_slots == b->n_slots && a->one_list == b->one_list && a->hot_slots == b->hot_slots &&
           a->speculates == b->speculates && a->seed == b->seed;
}

/* The params' query source, which must have been made for this runtime's shape. */
static int take_source(struct offload *o, char *err, size_t errlen)
{
    struct query_source_shape want;
    offload_source_shape(&o->p, o->mc, o->ps, &want);
    if (!o->p.source && o->p.query == OFFLOAD_QUERY_REAL) { /* the layers' own q: no source */
        offload_prefetch_warm(o);
        return PULSE_OK;
    }
    if (!o->p.source) BAD("offload: no query source (offload_params.source)");
    if (!same_shape(&o->p.source->shape, &want))
        BAD("offload: the query source was made for another shape (offload_source_shape)");
    o->qs = o->p.source;
    o->st.calibration_s = o->qs->setup_s;
    offload_prefetch_warm(o);
    return PULSE_OK;
}

static int make_pools(struct offload *o, char *err, size_t errlen)
{
    char why[256];
    size_t host = o->p.host_pool_bytes;
    if (!host)
        host =
            (size_t)o->max_batch * offload_request_host_bytes(&o->p, o->mc, o->ps, o->p.max_tokens);
    struct host_pool_params hpp = {o->n_sparse,
                                   o->nkv,
                                   o->hd,
                                   o->ps,
                                   2,
                                   host,
                                   o->max_batch,
                                   o->p.max_tokens,
                                   o->be->mem == MEM_DEVICE};
    if (!(o->store.hp = host_pool_create_ex(&hpp, &o->p.pin, why, sizeof why))) OOM_BAD("%s", why);
    struct host_pool_stats hs;
    host_pool_get_stats(o->store.hp, &hs);
    o->st.pin_s = hs.pin_seconds;
    struct kv_cache_params dp = {
        o->n_sparse,  o->dig_heads, o->hd, 1, (size_t)hs.n_blocks * o->dpage_bytes,
        o->max_batch, o->max_blocks};
    if (!(o->store.dg = kv_cache_create(&dp, o->be, o->ctx, why, sizeof why)))
        OOM_BAD("digest store: %s", why);
    /* zeroed once: the selection scores every block a request has, and a block's digest row is
     * written by the digest update of its first token's step, which comes after that layer's
     * selection (initcheck saw the read); a zero digest scores 0 */
    struct kv_cache_stats ds;
    kv_cache_get_stats(o->store.dg, &ds);
    o->be->memset(o->ctx, kv_cache_view(o->store.dg, NULL).pool, 0,
                  (size_t)(ds.n_pages * ds.page_bytes));
    struct hot_cache_params hcp = {o->max_batch * o->n_sparse * o->n_lists, o->hot_slots, o->p.sink,
                                   o->p.window};
    if (!(o->store.hc = hot_cache_create(&hcp, why, sizeof why))) OOM_BAD("%s", why);
    struct recall_params rp = o->p.recall; /* the tuning; the rest is the runtime's own */
    rp.engine = o->p.engine;
    rp.max_items = o->max_items;
    rp.cap_gbps = o->p.cap_gbps;
    rp.ops = o->p.recall_ops ? o->p.recall_ops : recall_copy_ops_for(o->be);
    const char *fault = pulse_diag_text(PULSE_DIAG_RECALL_FAULT); /* recall_fault.h */
    if (fault) {
        if (recall_fault_init(&o->store.fault, rp.ops, fault, why, sizeof why) != PULSE_OK)
            BAD("PULSE_RECALL_FAULT: %s", why);
        rp.ops = &o->store.fault.ops;
        o->store.faulty = 1;
    }
    rp.host_base = host_pool_base(o->store.hp);
    rp.host_bytes = host_pool_bytes(o->store.hp);
    if (!(o->store.rc = recall_create(&rp, why, sizeof why))) OOM_BAD("recall engine: %s", why);
    return PULSE_OK;
}

/* OFFLOAD_KV_PREFILL: full-length pages of every layer for one request, and the prefill. */
static int make_prefill(struct offload *o, char *err, size_t errlen)
{
    char why[256];
    if (o->p.prompt_kv != OFFLOAD_KV_PREFILL) return PULSE_OK;
    struct kv_cache_params sp = {o->n_layers, o->nkv, o->hd, o->ps, 0, 1, o->p.max_tokens};
    sp.budget_bytes = kv_cache_params_request_bytes(&sp, o->p.max_tokens);
    if (!(o->store.pf_kv = kv_cache_create(&sp, o->be, o->ctx, why, sizeof why)))
        OOM_BAD("prefill staging pages: %s", why);
    const int chunk = o->p.prefill_chunk ? o->p.prefill_chunk : o->max_batch;
    if (chunk > engine_max_batch(o->eng))
        BAD("offload: a prefill chunk of %d tokens is more than the engine's batch of %d", chunk,
            engine_max_batch(o->eng));
    if (!(o->store.pf = prefill_create(o->eng, o->p.seed, chunk)))
        OOM_BAD("prefill: out of memory for its batch");
    return PULSE_OK;
}

/* The real query one layer ahead: the approximate query's output and workspace; with the
 * negated predictor, every layer's input norm weight negated (RMSNorm, the projection, QK-norm
 * and RoPE are odd in it, so the approximate query comes out negated). */
static int make_approx_q(struct offload *o, char *err, size_t errlen)
{
    if (o->p.query != OFFLOAD_QUERY_REAL || !o->p.schedule->lookahead) return PULSE_OK;
    const size_t qb = mem_aligned(sizeof(uint16_t) * (size_t)o->max_batch * o->nq * o->hd);
    const int neg = o->p.spec_predictor == OFFLOAD_SPEC_NEGATED;
    const size_t H = (size_t)o->mc->hidden, nb = neg ? mem_aligned(2 * H * o->n_layers) : 0;
    o->aq_bytes =
        qb + nb + select_approx_q_workspace_bytes(o->max_batch, o->mc->hidden, o->nq, o->hd);
    if (!(o->aq_mem = mem_alloc(o->be->mem, o->aq_bytes, "approximate query")))
        OOM_BAD("the approximate query: out of memory for %zu bytes", o->aq_bytes);
    o->step.d_aq = o->aq_mem;
    o->step.aq_ws = (char *)o->aq_mem + qb + nb;
    if (!neg) return PULSE_OK;
    o->d_negnorm = (uint16_t *)((char *)o->aq_mem + qb);
    uint16_t *w = o->store.stage_kv; /* host scratch of max_blocks pages, before any admission */
    PULSE_CHECK(2 * H <= (size_t)o->max_blocks * o->page_bytes,
                "offload: no host scratch for a norm weight");
    for (int l = 0; l < o->n_layers; l++) {
        o->be->download(o->ctx, w, engine_model(o->eng)->layers[l].attn_norm, 2 * H);
        for (size_t i = 0; i < H; i++)
            w[i] ^= 0x8000; /* bf16's sign */
        o->be->upload(o->ctx, o->d_negnorm + (size_t)l * H, w, 2 * H);
    }
    return PULSE_OK;
}

/* The admission's arguments in d_fill (one upload per admission): */
enum {
    FILL_NTOK = 0, /* the prompt's tokens */
    FILL_REQ = 1,  /* the request id */
    FILL_ZERO = 2, /* 0: the staging view's page_start */
    FILL_ARGS = 3  /* then per layer: its page-table row (dense: the cache's, sparse: the digest
                      store's) */
};

/* Whether prompt KV is generated on the device: a device backend, prompt KV the runtime makes
 * (not a real prefill), unless offload_params.prompt_kv_host asks for the host path (the
 * reference; for comparisons and timing). */
static int device_fill_wanted(const struct offload *o)
{
    const int host = o->p.prompt_kv_host;
    const int source_fills =
        o->p.prompt_kv != OFFLOAD_KV_LOCALITY || (o->qs && o->qs->device_init != NULL);
    return o->be->mem == MEM_DEVICE && o->p.prompt_kv != OFFLOAD_KV_PREFILL && source_fills &&
           !host;
}

/* Device staging of one sparse layer's pages and the admission's arguments. */
static int make_device_fill(struct offload *o, char *err, size_t errlen)
{
    if (!device_fill_wanted(o)) return PULSE_OK;
#ifdef PULSE_HAVE_CUDA
    char why[256];
    if (o->p.prompt_kv == OFFLOAD_KV_LOCALITY &&
        o->qs->device_init(o->qs->user, why, sizeof why) != PULSE_OK)
        OOM_BAD("%s", why);
    const size_t stage = (size_t)o->max_blocks * o->page_bytes;
    const size_t args = sizeof(int32_t) * ((size_t)FILL_ARGS + o->n_layers + o->max_blocks);
    o->store.fmem_bytes = mem_aligned(stage) + args;
    if (!(o->store.fmem = mem_alloc(MEM_DEVICE, o->store.fmem_bytes, "offload prompt staging")))
        OOM_BAD("offload: out of device memory for the prompt staging (%.3f GB)", stage / 1e9);
    char *m = o->store.fmem;
    o->store.d_stage = mem_carve(&m, stage);
    o->store.d_fill = (int32_t *)m;
    o->be->upload(o->ctx, o->store.d_fill + FILL_ARGS + o->n_layers, o->store.ident,
                  sizeof(int32_t) * (size_t)o->max_blocks);
    return PULSE_OK;
#else
    (void)err, (void)errlen;
    return PULSE_OK;
#endif
}

int offload_create(struct engine *e, struct kv_cache *kv, const struct offload_params *p,
                   struct offload **out, char *err, size_t errlen)
{
    const struct model_config *m = engine_model(e)->cfg;
    struct kv_view view = kv_cache_view(kv, NULL);
    struct kv_cache_stats ks;
    kv_cache_get_stats(kv, &ks);
    struct kv_cache_params kp = {m->n_layers, view.n_kv_heads, view.head_dim, view.page_size,
                                 0,           ks.max_requests, p->max_tokens};
    *out = NULL;
    int rc = offload_params_check(p, m, &kp, err, errlen);
    if (rc != PULSE_OK) return rc;
    if (!p->schedule || !p->schedule->layer || (unsigned)p->schedule->lookahead > 1)
        BAD("offload: no layer schedule (a policy's: struct offload_schedule)");
    if (p->schedule->prefetch && (!p->schedule->lookahead || p->refetch))
        BAD("offload: a prefetching schedule selects one layer ahead and reuses resident blocks");
    if (!(p->spec_margin >= 0.0 && p->spec_margin <= 1.0))
        BAD("offload: speculation margin %g is not in [0, 1]", p->spec_margin);
    if (p->spec_margin > 0 && !(p->schedule && p->schedule->prefetch))
        BAD("offload: a speculation margin needs a prefetching schedule");
    if ((unsigned)p->spec_predictor > OFFLOAD_SPEC_NEGATED)
        BAD("offload: unknown speculation predictor %d", p->spec_predictor);
    if ((unsigned)p->spec_from > OFFLOAD_SPEC_FROM_HITS)
        BAD("offload: unknown speculation point %d", p->spec_from);
    if (p->spec_from != OFFLOAD_SPEC_FROM_INPUT && !(p->schedule && p->schedule->prefetch))
        BAD("offload: a speculation point needs a prefetching schedule");
    if (p->spec_from == OFFLOAD_SPEC_FROM_HITS &&
        !(p->engine == RECALL_ZERO_COPY && p->cap_gbps == 0 && p->lanes != 2))
        BAD("offload: speculation from the predicted lists' attention needs the device path "
            "(zero-copy, uncapped) in one lane");
    if (p->spec_correct_early != 0 && p->spec_correct_early != 1)
        BAD("offload: spec_correct_early %d is not 0 or 1", p->spec_correct_early);
    if (p->predict_fork != 0 && p->predict_fork != 1)
        BAD("offload: predict_fork %d is not 0 or 1", p->predict_fork);
    if (p->correct_stream != 0 && p->correct_stream != 1)
        BAD("offload: correct_stream %d is not 0 or 1", p->correct_stream);
    if (p->select_joint != 0 && p->select_joint != 1)
        BAD("offload: select_joint %d is not 0 or 1", p->select_joint);
    if (p->plan_fused != 0 && p->plan_fused != 1)
        BAD("offload: plan_fused %d is not 0 or 1", p->plan_fused);
    if (p->lanes < 0 || p->lanes > 2) BAD("offload: lanes %d is not 0, 1 or 2", p->lanes);
    if (p->attend_recall < OFFLOAD_ATTEND_OFF || p->attend_recall > OFFLOAD_ATTEND_CORRECTIONS)
        BAD("offload: attend_recall %d is not 0, 1 or 2", p->attend_recall);
    if (p->attend_recall == OFFLOAD_ATTEND_ON &&
        !(p->engine == RECALL_ZERO_COPY && p->cap_gbps == 0))
        BAD("offload: an attention that recalls needs the device path (zero-copy, uncapped)");
    if (ks.max_requests != p->max_batch)
        BAD("offload: the KV cache has %d request slots, max_batch is %d", ks.max_requests,
            p->max_batch);
    struct offload *o = mem_alloc(MEM_HOST, sizeof *o, "offload");
    if (!o) goto oom;
    memset(o, 0, sizeof *o);
    o->p = *p;
    o->eng = e, o->store.kv = kv, o->store.kp = kp, o->be = engine_model(e)->be,
    o->ctx = engine_ctx(e);
    o->store.gpu_pool = (char *)view.pool;
    o->step.next_layer = -1;
    for (int l = 0; l < OFFLOAD_MAX_LAYERS; l++)
        o->step.sel_step[l] = o->step.spec_step[l] = o->step.piece_pf[l] =
            o->step.early_corr_step[l] = -1;
    set_shape(o, m, view.page_size);
    char why[256];
    /* an attention that recalls reads whole 16-token tiles, and numbers the host pool's KV heads
     * in 32 bits (below) */
    const int tiles = o->be->mem != MEM_DEVICE || o->ps % 16 == 0;
    /* in effect: the device plan's layers selected at their own layer (every one of an
     * exact-at-layer schedule's, a prefetching schedule's exact selections; none of a lookahead
     * schedule's), with on; a prefetching schedule's predicted from the input, with corrections */
    const int own_layer = o->device_plan && (o->spec || !p->schedule->lookahead);
    o->att_recall = own_layer && (p->attend_recall == OFFLOAD_ATTEND_ON ||
                                  (p->attend_recall == OFFLOAD_ATTEND_CORRECTIONS && o->spec &&
                                   p->spec_from == OFFLOAD_SPEC_FROM_INPUT && tiles));
    if (p->attend_recall == OFFLOAD_ATTEND_ON && !tiles) {
        snprintf(err, errlen,
                 "offload: an attention that recalls reads whole 16-token tiles; the page size "
                 "%d is not a multiple of 16",
                 o->ps);
        offload_free(o);
        return PULSE_ERR_INVALID;
    }
    if (o->device_plan && hot_plan_params_check(&o->store.hpp, why, sizeof why)) {
        snprintf(err, errlen, "offload: zero-copy's device hot cache: %s", why);
        offload_free(o);
        return PULSE_ERR_INVALID;
    }
    if (alloc_host(o) != PULSE_OK) goto oom;
    for (int i = 0; i < 2 * o->n_sparse; i++)
        o->plan.pl_spec_step[i] = -1;
    if ((rc = take_source(o, err, errlen)) != PULSE_OK ||
        (rc = make_pools(o, err, errlen)) != PULSE_OK ||
        (rc = make_prefill(o, err, errlen)) != PULSE_OK ||
        (rc = make_approx_q(o, err, errlen)) != PULSE_OK ||
        (rc = make_device_fill(o, err, errlen)) != PULSE_OK) {
        offload_free(o);
        return rc;
    }
    const int heads_fit = host_pool_bytes(o->store.hp) / o->head_bytes <= INT32_MAX;
    if (!heads_fit) o->att_recall = 0; /* corrections' fallback; on is refused below */
    /* the corrections recalled in the attention (att_recall now final): none is gathered, on
     * any stream */
    if (o->att_recall) o->cstream = 0;
    if (p->attend_recall == OFFLOAD_ATTEND_ON && !heads_fit) {
        snprintf(err, errlen,
                 "offload: an attention that recalls numbers the host pool's KV heads in 32 "
                 "bits; %zu bytes hold more",
                 host_pool_bytes(o->store.hp));
        offload_free(o);
        return PULSE_ERR_INVALID;
    }
    if (alloc_dev(o) != PULSE_OK) goto oom;
    *out = o;
    return PULSE_OK;
oom:
    snprintf(err, errlen, "offload: out of memory for its buffers");
    offload_free(o);
    return PULSE_ERR_OOM;
}

void offload_free(struct offload *o)
{
    if (!o) return;
    offload_layer_graphs_drop(o);
    prefill_free(o->store.pf);
    kv_cache_free(o->store.pf_kv);
    mem_free(o->be->mem, o->aq_mem, o->aq_bytes);
    offload_planner_stop(o);
    recall_free(o->store.rc);
    hot_cache_free(o->store.hc);
    kv_cache_free(o->store.dg);
    host_pool_free(o->store.hp);
    for (int p = 0; p < 2 && o->step.lanes[0].ev_sel; p++) {
        if (o->step.ev_up[p]) o->be->event_destroy(o->step.ev_up[p]);
        if (o->step.ev_end[p]) o->be->event_destroy(o->step.ev_end[p]);
    }
    for (int k = 0; k < 2; k++) {
        const struct offload_lane *L = &o->step.lanes[k];
        for (int i = 0; i < 2 * o->n_sparse && L->ev_sel; i++)
            if (L->ev_sel[i]) o->be->event_destroy(L->ev_sel[i]);
        for (int i = 0; i < o->n_sparse && L->ev_selected; i++)
            if (L->ev_selected[i]) o->be->event_destroy(L->ev_selected[i]);
        for (int i = 0; i < 2 * o->n_sparse && L->ev_spec_sel; i++)
            if (L->ev_spec_sel[i]) o->be->event_destroy(L->ev_spec_sel[i]);
        for (int i = 0; i < o->n_sparse && L->ev_spec_selected; i++) {
            if (L->ev_spec_selected[i]) o->be->event_destroy(L->ev_spec_selected[i]);
            if (L->ev_spec_built[i]) o->be->event_destroy(L->ev_spec_built[i]);
        }
        for (int i = 0; i < o->n_sparse && L->ev_built; i++) {
            if (L->ev_built[i]) o->be->event_destroy(L->ev_built[i]);
            if (L->ev_gathered[i]) o->be->event_destroy(L->ev_gathered[i]);
            if (L->ev_spec_gathered && L->ev_spec_gathered[i])
                o->be->event_destroy(L->ev_spec_gathered[i]);
        }
    }
    if (o->step.ev_lists) o->be->event_destroy(o->step.ev_lists);
    if (o->step.gctx.stream || o->step.gctx.blas) o->be->ctx_free(&o->step.gctx);
    if (o->step.pctx.stream || o->step.pctx.blas) o->be->ctx_free(&o->step.pctx);
    if (o->step.cctx.stream || o->step.cctx.blas) o->be->ctx_free(&o->step.cctx);
    if (o->step.ev_fork) o->be->event_destroy(o->step.ev_fork);
    if (o->step.ev_join) o->be->event_destroy(o->step.ev_join);
    if (o->step.sctx.stream || o->step.sctx.blas) o->be->ctx_free(&o->step.sctx);
    if (o->pin) mem_free(pin_kind(o), o->pin, o->pin_bytes);
    if (o->store.fmem) mem_free(MEM_DEVICE, o->store.fmem, o->store.fmem_bytes);
    if (o->dmem) mem_free(o->be->mem, o->dmem, o->dmem_bytes);
    mem_free(MEM_HOST, o->hmem, o->hmem_bytes);
    mem_free(MEM_HOST, o, sizeof *o);
}

/* ------------------------------------------------------------------ admission */

static struct kv_view host_view(const struct offload *o, void *pool, const int32_t *ids)
{
    struct kv_view v = {pool, ids, &k_zero, o->ps, o->nkv, o->hd, 0, 0, NULL, NULL};
    return v;
}

/* Copies the prefill's pages of `layer` holding tokens [0, n) into host view v (one download
 * per run of pages consecutive on both sides that stays inside one registered piece of the host
 * pool: CUDA refuses a copy whose host range spans two registrations). */
static void copy_prefill(struct offload *o, const struct kv_view *v, int n, int layer)
{
    int n_own;
    const int32_t *src = kv_cache_owned_pages(o->store.pf_kv, o->store.pf_slot, layer, &n_own);
    const char *pool = (const char *)kv_cache_view(o->store.pf_kv, NULL).pool;
    const int nb = (int)PULSE_CEIL_DIV(n, o->ps);
    const int32_t *dst = v->page_ids;
    struct host_pool_stats hps;
    host_pool_get_stats(o->store.hp, &hps);
    const int64_t per_piece = v->pool == host_pool_base(o->store.hp) && hps.pin_piece_bytes
                                  ? (int64_t)(hps.pin_piece_bytes / o->page_bytes)
                                  : INT64_MAX;
    for (int i = 0; i < nb;) {
        int j = i + 1;
        while (j < nb && src[j] == src[j - 1] + 1 && dst[j] == dst[j - 1] + 1 &&
               dst[j] / per_piece == dst[i] / per_piece)
            j++;
        o->be->download(o->ctx, (char *)v->pool + (size_t)dst[i] * o->page_bytes,
                        pool + (size_t)src[i] * o->page_bytes, (size_t)(j - i) * o->page_bytes);
        i = j;
    }
}

/* Writes tokens [0, n) of (req, layer) into the host view v: the source's keys, synthetic, or
 * the prefill's. */
static void fill_view(struct offload *o, const struct kv_view *v, int n, int req, int layer)
{
    if (o->p.prompt_kv == OFFLOAD_KV_PREFILL)
        copy_prefill(o, v, n, layer);
    else if (o->p.prompt_kv == OFFLOAD_KV_LOCALITY)
        o->qs->fill_kv(o->qs->user, v, n, req, layer);
    else
        kv_fill_synthetic_ref(NULL, v, &n, &req, 1, layer, o->p.seed, o->p.max_tokens);
}

/* Copies staged pages [0, n) to backend pages ids[i] of pool, one copy per run of ids. */
static void upload_pages(const struct offload *o, char *pool, size_t bytes, const int32_t *ids,
                         int n, const void *stage)
{
    for (int i = 0; i < n;) {
        int j = i + 1;
        while (j < n && ids[j] == ids[j - 1] + 1)
            j++;
        o->be->upload(o->ctx, pool + (size_t)ids[i] * bytes, (const char *)stage + i * bytes,
                      (size_t)(j - i) * bytes);
        i = j;
    }
}

/* The first of a prompt's nb blocks that (slot, layer)'s pages keep: 0 when it owns a page per
 * block, else the ring's first (a window layer keeps its last n_own blocks, kv_cache.h). */
static int first_kept_block(const struct offload *o, int slot, int layer, int nb)
{
    int n_own;
    kv_cache_owned_pages(o->store.kv, slot, layer, &n_own);
    return nb > n_own ? nb - n_own : 0;
}

/* A dense or window layer's prompt, staged in token order, into the blocks its row keeps. */
static void write_dense_layer(struct offload *o, int slot, int req, int layer, int prompt_len)
{
    struct kv_view v = host_view(o, o->store.stage_kv, o->store.ident);
    fill_view(o, &v, prompt_len, req, layer);
    const int nb = (int)PULSE_CEIL_DIV(prompt_len, o->ps), lo = first_kept_block(o, slot, layer, nb);
    const int32_t *row =
        kv_cache_host_page_ids(o->store.kv) + kv_cache_row(o->store.kv, slot, layer);
    upload_pages(o, o->store.gpu_pool, o->page_bytes, row + lo, nb - lo,
                 (const char *)o->store.stage_kv + (size_t)lo * o->page_bytes);
}

/* Blocks of a prompt of prompt_len tokens in a reservation of n_tokens that admission writes:
 * the prompt's and the tail's (the block holding token prompt_len: zeroed past the prompt). Later
 * blocks are written by the tail flush when they fill, before anything reads them. */
static int admitted_blocks(const struct offload *o, int prompt_len, int n_tokens)
{
    return PULSE_MIN((int)PULSE_CEIL_DIV(n_tokens, o->ps), prompt_len / o->ps + 1);
}

/* The prompt into the host pool (its tail block zeroed past the prompt first), its digests into
 * the digest store, its last block into the tail page. */
static void write_sparse_layer(struct offload *o, int slot, int req, int layer, int prompt_len,
                               int n_tokens)
{
    const int sl = offload_sl(o, layer), hs = o->store.hp_slot[slot];
    const int nb = admitted_blocks(o, prompt_len, n_tokens), first = prompt_len / o->ps;
    for (int i = 0; i < nb; i++)
        o->store.ids[i] = (int32_t)host_pool_block_id(o->store.hp, hs, sl, i);
    for (int i = first; i < nb; i++)
        memset(host_pool_block(o->store.hp, hs, sl, i), 0, o->page_bytes);
    struct kv_view v = host_view(o, host_pool_base(o->store.hp), o->store.ids);
    fill_view(o, &v, prompt_len, req, layer);
    const struct digest_view dv = {o->store.stage_dg, o->store.ident, &k_zero, o->dig_heads, o->hd};
    digest_build_ref(NULL, &v, &dv, &prompt_len, 1, o->sel_head[layer], o->p.max_tokens);
    const int32_t *drow =
        kv_cache_host_page_ids(o->store.dg) + kv_cache_row(o->store.dg, o->store.dg_slot[slot], sl);
    upload_pages(o, (char *)kv_cache_view(o->store.dg, NULL).pool, o->dpage_bytes, drow,
                 (int)PULSE_CEIL_DIV(prompt_len, o->ps), o->store.stage_dg);
    int n_own;
    const int32_t *own = kv_cache_owned_pages(o->store.kv, slot, layer, &n_own);
    if (first < nb)
        o->be->upload(o->ctx, o->store.gpu_pool + (size_t)own[n_own - 1] * o->page_bytes,
                      host_pool_block(o->store.hp, hs, sl, first), o->page_bytes);
}

#ifdef PULSE_HAVE_CUDA
/* The device path of the prompt KV (cuda, the source's or synthetic): the same bytes as the host
 * path above (bit for bit for synthetic KV; the source's as its fill_kv_device says), generated
 * by kernels instead of written by the CPU. Dense layers are generated straight into the
 * request's GPU pages; a sparse layer into the device staging (its pages in
 * token order), its digests built from there into the digest store, its pages copied to the
 * host pool with one D2H copy per run of consecutive host blocks inside one registered piece of
 * the pool (PCIe speed on pinned memory) and its tail block into the tail page. Everything is
 * queued on the context's stream; the admission waits once at its end. */

/* The admission's arguments (one upload) and the zeroed staging pages past the prompt. */
static void begin_device_fill(struct offload *o, int slot, int req, int prompt_len, int n_tokens)
{
    int32_t a[FILL_ARGS + OFFLOAD_MAX_LAYERS];
    a[FILL_NTOK] = prompt_len, a[FILL_REQ] = req, a[FILL_ZERO] = 0;
    for (int l = 0; l < o->n_layers; l++)
        a[FILL_ARGS + l] =
            !offload_is_sparse(o, l)
                ? kv_cache_row(o->store.kv, slot, l)
                : kv_cache_row(o->store.dg, o->store.dg_slot[slot], offload_sl(o, l));
    o->be->upload(o->ctx, o->store.d_fill, a, sizeof(int32_t) * (size_t)(FILL_ARGS + o->n_layers));
    const int nb = admitted_blocks(o, prompt_len, n_tokens), first = prompt_len / o->ps;
    if (first < nb) /* the tail's rows past the prompt stay zero for every layer */
        o->be->memset(o->ctx, (char *)o->store.d_stage + (size_t)first * o->page_bytes, 0,
                      (size_t)(nb - first) * o->page_bytes);
}

/* Tokens [0, n) of (req, layer) into the device view v. */
static void fill_device(struct offload *o, const struct kv_view *v, int n, int req, int layer)
{
    if (o->p.prompt_kv == OFFLOAD_KV_LOCALITY)
        o->qs->fill_kv_device(o->qs->user, o->ctx, v, n, req, layer);
    else
        kv_fill_synthetic_cuda(o->ctx, v, o->store.d_fill + FILL_NTOK, o->store.d_fill + FILL_REQ,
                               1, layer, o->p.seed, n);
}

/* The device staging: max_blocks pages in token order. */
static struct kv_view staging_view(const struct offload *o)
{
    return (struct kv_view){o->store.d_stage,
                            o->store.d_fill + FILL_ARGS + o->n_layers,
                            o->store.d_fill + FILL_ZERO,
                            o->ps,
                            o->nkv,
                            o->hd,
                            0,
                            0,
                            NULL,
                            NULL};
}

/* A dense layer's prompt straight into its pages; a window layer longer than its ring into the
 * staging, then the blocks the ring keeps into their pages (generated through the ring, later
 * blocks would race earlier ones for the same page). */
static void write_dense_layer_dev(struct offload *o, int slot, int req, int layer, int prompt_len)
{
    const int nb = (int)PULSE_CEIL_DIV(prompt_len, o->ps), lo = first_kept_block(o, slot, layer, nb);
    if (lo == 0) { /* a page per block (a ring no longer than its pages is one too) */
        struct kv_view v = kv_cache_view(o->store.kv, o->store.d_fill + FILL_ARGS + layer);
        fill_device(o, &v, prompt_len, req, layer);
        return;
    }
    const struct kv_view sv = staging_view(o);
    fill_device(o, &sv, prompt_len, req, layer);
    const int32_t *row =
        kv_cache_host_page_ids(o->store.kv) + kv_cache_row(o->store.kv, slot, layer);
    for (int i = lo; i < nb; i++)
        o->be->copy_async(o->ctx, o->store.gpu_pool + (size_t)row[i] * o->page_bytes,
                          (const char *)o->store.d_stage + (size_t)i * o->page_bytes,
                          o->page_bytes);
}

static void write_sparse_layer_dev(struct offload *o, int slot, int req, int layer, int prompt_len,
                                   int n_tokens)
{
    const int sl = offload_sl(o, layer), hs = o->store.hp_slot[slot];
    const int nb = admitted_blocks(o, prompt_len, n_tokens), first = prompt_len / o->ps;
    const char *stage = (const char *)o->store.d_stage;
    const struct kv_view sv = staging_view(o);
    if (prompt_len > 0) {
        fill_device(o, &sv, prompt_len, req, layer);
        const struct kv_view dg = kv_cache_view(o->store.dg, o->store.d_fill + FILL_ARGS + layer);
        const struct digest_view dv = {dg.pool, dg.page_ids, dg.page_start, o->dig_heads, o->hd};
        digest_build_cuda(o->ctx, &sv, &dv, o->store.d_fill + FILL_NTOK, 1, o->sel_head[layer],
                          prompt_len);
    }
    struct host_pool_stats hps; /* a copy must not cross a registered piece of the pool */
    host_pool_get_stats(o->store.hp, &hps);
    const int64_t per_piece =
        hps.pin_piece_bytes ? (int64_t)(hps.pin_piece_bytes / o->page_bytes) : INT64_MAX;
    for (int i = 0; i < nb;) {
        const int64_t id = host_pool_block_id(o->store.hp, hs, sl, i);
        int j = i + 1;
        while (j < nb && host_pool_block_id(o->store.hp, hs, sl, j) == id + (j - i) &&
               (id + (j - i)) / per_piece == id / per_piece)
            j++;
        o->be->copy_async(o->ctx, host_pool_block_at(o->store.hp, id),
                          stage + (size_t)i * o->page_bytes, (size_t)(j - i) * o->page_bytes);
        i = j;
    }
    int n_own;
    const int32_t *own = kv_cache_owned_pages(o->store.kv, slot, layer, &n_own);
    if (first < nb)
        o->be->copy_async(o->ctx, o->store.gpu_pool + (size_t)own[n_own - 1] * o->page_bytes,
                          stage + (size_t)first * o->page_bytes, o->page_bytes);
}
#endif

/* The prompt KV of one layer: on the device when the device fill is set up, else the host
 * path (the reference). */
static void write_layer(struct offload *o, int slot, int req, int layer, int prompt_len,
                        int n_tokens)
{
#ifdef PULSE_HAVE_CUDA
    if (o->store.fmem) {
        if (offload_is_sparse(o, layer))
            write_sparse_layer_dev(o, slot, req, layer, prompt_len, n_tokens);
        else if (prompt_len > 0)
            write_dense_layer_dev(o, slot, req, layer, prompt_len);
        return;
    }
#endif
    if (offload_is_sparse(o, layer))
        write_sparse_layer(o, slot, req, layer, prompt_len, n_tokens);
    else if (prompt_len > 0)
        write_dense_layer(o, slot, req, layer, prompt_len);
}

/* New query streams, meter lists and hot-cache units for the request in `slot`. */
static void reset_slot(struct offload *o, int slot)
{
    if (o->qs) o->qs->meter_reset(o->qs->user, slot);
    if (o->device_plan)
        o->fn.hot_plan_reset(&o->store.hpp, &o->store.hps, offload_unit(o, slot, 0, 0),
                             o->n_sparse * o->n_lists, o->ctx->stream);
    for (int sl = 0; sl < o->n_sparse; sl++) {
        o->store.last_nb[slot * o->n_sparse + sl] = 0;
        o->step.q_ready[slot * o->n_sparse + sl] = 0;
        for (int k = 0; k < o->n_lists; k++)
            hot_cache_reset(o->store.hc, offload_unit(o, slot, sl, k));
    }
}

/* The device path's tables of the request in `slot`: its owned GPU pages and host block ids of
 * every sparse layer (admission, outside any step). */
static void upload_tables(struct offload *o, int slot)
{
    const int H1 = o->hot_slots + 1, hs = o->store.hp_slot[slot];
    for (int sl = 0; sl < o->n_sparse; sl++) {
        int n_own;
        const int32_t *own = kv_cache_owned_pages(o->store.kv, slot, o->layer_of[sl], &n_own);
        PULSE_CHECK(n_own == H1, "offload: an offload request owns hot_slots + 1 pages a layer");
        o->be->upload(o->ctx, o->store.d_own + ((size_t)slot * o->n_sparse + sl) * H1, own,
                      sizeof(int32_t) * (size_t)H1);
        for (int i = 0; i < o->max_blocks; i++)
            o->store.ids[i] = (int32_t)host_pool_block_id(o->store.hp, hs, sl, i);
        o->be->upload(o->ctx, o->store.d_hids + ((size_t)hs * o->n_sparse + sl) * o->max_blocks,
                      o->store.ids, sizeof(int32_t) * (size_t)o->max_blocks);
    }
}

/* Reserves GPU pages, host blocks and digest pages; undoes what it took on failure. */
static int reserve(struct offload *o, int n_tokens, int *slot, char *why, size_t whylen)
{
    const int nb = (int)PULSE_CEIL_DIV(n_tokens, o->ps);
    int ks, hs, ds, rc = kv_cache_admit_mapped(o->store.kv, n_tokens, o->store.maps, &ks);
    if (rc != PULSE_OK) {
        o->st.refusals_gpu += rc == PULSE_ERR_NOMEM;
        snprintf(why, whylen, "its %.4f GB of GPU KV pages %s the KV budget",
                 offload_request_kv_bytes(&o->p, o->mc, &o->store.kp, n_tokens) / 1e9,
                 rc == PULSE_ERR_NOMEM ? "do not fit now in" : "can never fit");
        return rc;
    }
    if ((rc = host_pool_reserve(o->store.hp, n_tokens, &hs)) != PULSE_OK) {
        kv_cache_release(o->store.kv, ks);
        o->st.refusals_host += rc == PULSE_ERR_NOMEM;
        snprintf(why, whylen, "its %.4f GB of KV %s the host pool",
                 offload_request_host_bytes(&o->p, o->mc, o->ps, n_tokens) / 1e9,
                 rc == PULSE_ERR_NOMEM ? "do not fit now in" : "can never fit");
        return rc;
    }
    if ((rc = kv_cache_admit(o->store.dg, nb, &ds)) != PULSE_OK) {
        host_pool_release(o->store.hp, hs);
        kv_cache_release(o->store.kv, ks);
        o->st.refusals_digest += rc == PULSE_ERR_NOMEM;
        snprintf(why, whylen, "its digests %s the digest store",
                 rc == PULSE_ERR_NOMEM ? "do not fit now in" : "can never fit");
        return rc;
    }
    PULSE_CHECK(ks < o->max_batch, "offload: cache slot past max_batch");
    o->store.hp_slot[ks] = hs, o->store.dg_slot[ks] = ds;
    *slot = ks;
    return PULSE_OK;
}

/* The prompt through engine_prefill into a zeroed staging slot (left in o->store.pf_slot); returns
 * the greedy next token. */
static int32_t run_prefill(struct offload *o, int req_id, int prompt_len)
{
    PULSE_CHECK(kv_cache_admit(o->store.pf_kv, o->p.max_tokens, &o->store.pf_slot) == PULSE_OK,
                "offload: the prefill staging slot is taken");
    struct kv_cache_stats st;
    kv_cache_get_stats(o->store.pf_kv, &st);
    o->be->memset(o->ctx, kv_cache_view(o->store.pf_kv, NULL).pool, 0,
                  (size_t)(st.n_pages * st.page_bytes));
    /* reserved max_tokens, as a session's prefill (the accuracy path's): the same attention
     * bounds in every chunk */
    return prefill_run(o->store.pf, o->store.pf_kv, o->store.pf_slot, req_id, prompt_len,
                       o->p.max_tokens);
}

int offload_admit(struct offload *o, int req_id, int prompt_len, int n_tokens, int *slot, char *why,
                  size_t whylen)
{
    if (req_id < 0 || prompt_len < 0 || prompt_len >= n_tokens) {
        snprintf(why, whylen, "offload: bad request (id %d, %d of %d tokens)", req_id, prompt_len,
                 n_tokens);
        return PULSE_ERR_INVALID;
    }
    offload_quiesce(o); /* the planner's last jobs touch the hot cache and the meter */
    int ks, rc = reserve(o, n_tokens, &ks, why, whylen);
    if (rc != PULSE_OK) return rc;
    double t0 = pulse_now();
    o->store.req_id[ks] = req_id;
    o->store.first_tok[ks] = engine_first_token(o->eng, req_id);
    if (o->qs) o->qs->start(o->qs->user, ks, req_id);
    if (o->store.pf) o->store.first_tok[ks] = run_prefill(o, req_id, prompt_len);
    char label[64];
    snprintf(label, sizeof label, "prompt KV (request %d, %d tokens)", req_id, prompt_len);
    struct progress pg;
    progress_begin(&pg, label, "layers", o->n_layers);
#ifdef PULSE_HAVE_CUDA
    if (o->store.fmem) begin_device_fill(o, ks, req_id, prompt_len, n_tokens);
#endif
    for (int l = 0; l < o->n_layers; l++) {
        write_layer(o, ks, req_id, l, prompt_len, n_tokens);
        progress_update(&pg, l + 1);
    }
    if (o->store.fmem) o->be->sync(o->ctx); /* the host pool holds the prompt before any recall */
    progress_end(&pg, o->n_layers);
    if (o->store.pf) kv_cache_release(o->store.pf_kv, o->store.pf_slot);
    reset_slot(o, ks);
    if (o->device_plan) upload_tables(o, ks);
    o->st.prompt_fill_s += pulse_now() - t0;
    o->st.admitted++;
    *slot = ks;
    return PULSE_OK;
}

int offload_admit_normal(struct offload *o, int req_id, int prompt_len, int n_tokens, int *slot,
                         int32_t *first_token, char *why, size_t whylen)
{
    if (req_id < 0 || prompt_len < 0 || prompt_len >= n_tokens) {
        snprintf(why, whylen, "offload: bad request (id %d, %d of %d tokens)", req_id, prompt_len,
                 n_tokens);
        return PULSE_ERR_INVALID;
    }
    offload_quiesce(o);
    int ks, rc = kv_cache_admit(o->store.kv, n_tokens, &ks);
    if (rc != PULSE_OK) {
        snprintf(why, whylen, "its %.4f GB of GPU KV %s the KV budget",
                 kv_cache_request_bytes(o->store.kv, n_tokens) / 1e9,
                 rc == PULSE_ERR_NOMEM ? "do not fit now in" : "can never fit");
        return rc;
    }
    const double t0 = pulse_now();
    *first_token = engine_first_token(o->eng, req_id);
    if (o->store.pf) *first_token = run_prefill(o, req_id, prompt_len);
    if (prompt_len > 0) {
#ifdef PULSE_HAVE_CUDA
        if (o->store.fmem) { /* every layer as a dense one, generated into the request's pages */
            int32_t a[FILL_ARGS + OFFLOAD_MAX_LAYERS];
            a[FILL_NTOK] = prompt_len, a[FILL_REQ] = req_id, a[FILL_ZERO] = 0;
            for (int l = 0; l < o->n_layers; l++)
                a[FILL_ARGS + l] = kv_cache_row(o->store.kv, ks, l);
            o->be->upload(o->ctx, o->store.d_fill, a,
                          sizeof(int32_t) * (size_t)(FILL_ARGS + o->n_layers));
            for (int l = 0; l < o->n_layers; l++)
                write_dense_layer_dev(o, ks, req_id, l, prompt_len);
            o->be->sync(o->ctx);
        } else
#endif
            for (int l = 0; l < o->n_layers; l++)
                write_dense_layer(o, ks, req_id, l, prompt_len);
    }
    if (o->store.pf) kv_cache_release(o->store.pf_kv, o->store.pf_slot);
    o->st.prompt_fill_s += pulse_now() - t0;
    *slot = ks;
    return PULSE_OK;
}

int32_t offload_first_token(const struct offload *o, int slot)
{
    PULSE_CHECK(slot >= 0 && slot < o->max_batch && o->store.hp_slot[slot] >= 0,
                "offload_first_token: the slot holds no offload request");
    return o->store.first_tok[slot];
}

const void *offload_host_block(const struct offload *o, int slot, int layer, int block)
{
    PULSE_CHECK(slot >= 0 && slot < o->max_batch && o->store.hp_slot[slot] >= 0 && layer >= 0 &&
                    layer < o->n_layers && offload_is_sparse(o, layer),
                "offload_host_block: not a sparse layer of an admitted request");
    return host_pool_block(o->store.hp, o->store.hp_slot[slot], offload_sl(o, layer), block);
}

const char *offload_clear_failure(struct offload *o)
{
    offload_quiesce(o);
    o->be->sync(o->ctx);
    return atomic_exchange(&o->status, PULSE_OK) == PULSE_OK
               ? NULL
               : "its recall failed on every attempt (I/O error); the request was ended";
}

int offload_set_prompts(struct offload *o, prefill_token_fn fn, void *user)
{
    if (!o->store.pf) return PULSE_ERR_INVALID;
    prefill_set_prompts(o->store.pf, fn, user);
    return PULSE_OK;
}

void offload_release(struct offload *o, int slot)
{
    PULSE_CHECK(slot >= 0 && slot < o->max_batch && o->store.hp_slot[slot] >= 0,
                "offload_release: the slot holds no offload request");
    offload_quiesce(o);
    host_pool_release(o->store.hp, o->store.hp_slot[slot]);
    kv_cache_release(o->store.dg, o->store.dg_slot[slot]);
    reset_slot(o, slot);
    o->store.hp_slot[slot] = o->store.dg_slot[slot] = o->store.req_id[slot] = -1;
}

/* The block in slot s of unit u: the host hot cache's, or the device one's (mirrored). */
static int slot_block(const struct offload *o, const struct hot_plan_state *mirror, int u, int s)
{
    return mirror ? mirror->slot_block[(size_t)u * o->hot_slots + s]
                  : hot_cache_slot_block(o->store.hc, u, s);
}

/* The resident blocks of one unit against their host copies (the tail, nb - 1, is skipped:
 * its data lives in the tail page until it fills). */
static int verify_unit(const struct offload *o, const struct hot_plan_state *mirror, int slot,
                       int sl, int k, char *err, size_t errlen)
{
    const int nb = o->store.last_nb[slot * o->n_sparse + sl], unit = offload_unit(o, slot, sl, k);
    int n_own;
    const int32_t *own = kv_cache_owned_pages(o->store.kv, slot, o->layer_of[sl], &n_own);
    const size_t bytes = offload_chunk_bytes(o);
    for (int s = 0; s < o->hot_slots; s++) {
        const int blk = slot_block(o, mirror, unit, s);
        if (blk < 0 || blk == nb - 1) continue;
        o->be->download(o->ctx, o->store.check_page, offload_gpu_piece(o, own[s], k), bytes);
        if (memcmp(o->store.check_page, offload_host_chunk(o, o->store.hp_slot[slot], sl, blk, k),
                   bytes))
            BAD("slot %d layer %d list %d: hot slot %d holds block %d unlike its host copy", slot,
                o->layer_of[sl], k, s, blk);
    }
    return PULSE_OK;
}

int offload_verify(const struct offload *o, char *err, size_t errlen)
{
    char why[256];
    offload_quiesce(o);
    o->be->sync(o->ctx);
    struct hot_plan_state mirror, *m = NULL;
    if (o->device_plan) { /* the device hot cache, downloaded into its host mirror */
        o->be->download(o->ctx, o->store.h_hp, o->store.d_hp, o->store.hp_bytes);
        hot_plan_state_carve(&o->store.hpp, o->store.h_hp, &mirror);
        m = &mirror;
        if (hot_plan_check(&o->store.hpp, m, why, sizeof why)) BAD("device hot cache: %s", why);
    } else if (hot_cache_check(o->store.hc, why, sizeof why)) {
        BAD("hot cache: %s", why);
    }
    for (int s = 0; s < o->max_batch; s++)
        for (int sl = 0; sl < o->n_sparse && o->store.hp_slot[s] >= 0; sl++)
            for (int k = 0; k < o->n_lists; k++)
                if (verify_unit(o, m, s, sl, k, err, errlen) != PULSE_OK) return PULSE_ERR_INVALID;
    return PULSE_OK;
}

int offload_check(const struct offload *o, char *err, size_t errlen)
{
    char why[256];
    if (host_pool_check(o->store.hp, why, sizeof why)) BAD("host pool: %s", why);
    if (kv_cache_check(o->store.dg, why, sizeof why)) BAD("digest store: %s", why);
    if (kv_cache_check(o->store.kv, why, sizeof why)) BAD("KV cache: %s", why);
    for (int s = 0; s < o->max_batch; s++)
        for (int l = 0; l < o->n_layers && o->store.hp_slot[s] >= 0; l++) {
            /* a sparse layer's hot slots and tail, a window layer's whole ring */
            int n;
            kv_cache_owned_pages(o->store.kv, s, l, &n);
            const int blocks = (int)PULSE_CEIL_DIV(kv_cache_slot_tokens(o->store.kv, s), o->ps);
            const int want = o->kind[l] == OFFLOAD_LAYER_SPARSE ? o->hot_slots + 1
                             : o->kind[l] == OFFLOAD_LAYER_WINDOW
                                 ? PULSE_MIN(o->store.maps[l].pages, blocks)
                                 : blocks;
            if (n != want) BAD("slot %d layer %d owns %d GPU pages, not %d", s, l, n, want);
        }
    return offload_verify(o, err, errlen);
}
