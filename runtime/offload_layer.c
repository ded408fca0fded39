/* One decode step under the offload runtime (offload.h): the attend hook does, per sparse
 * layer and synchronously (ArkVale), digest update, selection on the locality query, hot-cache
 * lookup, recall of the misses, wait, attention over the selected blocks, tail flush. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "offload_impl.h"

#define RECALL_ATTEMPTS 3

/* ------------------------------------------------------------------ addressing */

static struct digest_view digest_view_of(const struct offload *o, int sl)
{
    struct kv_view dv = kv_cache_view(o->dg, NULL);
    struct digest_view d = {dv.pool, dv.page_ids, o->d_step + (size_t)o->max_batch * (1 + sl),
                            o->dig_heads, o->hd};
    return d;
}

/* ------------------------------------------------------------------ selection */

/* The next step's locality queries of the batch at a sparse layer, made while the GPU still
 * works (the stream of a slot is a pure function of its request, layer and step, so when it is
 * made does not change it). */
static void prefetch_q(struct offload *o, int layer)
{
    const int sl = offload_sl(o, layer);
    const size_t per = (size_t)o->nq * o->hd;
    for (int b = 0; b < o->n; b++) {
        const int u = o->h_slot[b] * o->n_sparse + sl;
        locality_step_q(o->L, layer, o->h_slot + b, 1, o->q_next + (size_t)u * per);
        o->q_ready[u] = 1;
    }
}

/* This step's queries of a layer: made in advance, or now. */
static void take_q(struct offload *o, int layer)
{
    const int sl = offload_sl(o, layer);
    const size_t per = (size_t)o->nq * o->hd;
    for (int b = 0; b < o->n; b++) {
        const int u = o->h_slot[b] * o->n_sparse + sl;
        if (o->q_ready[u])
            memcpy(o->h_q + b * per, o->q_next + (size_t)u * per, per * sizeof(uint16_t));
        else
            locality_step_q(o->L, layer, o->h_slot + b, 1, o->h_q + b * per);
        o->q_ready[u] = 0;
    }
}

/* The layer's locality queries, selection on the backend, lists read back into h_sel (counts
 * right after the B entries' lists) and fed to the meter. */
static void select_lists(struct offload *o, int layer, const struct digest_view *dv,
                         const int32_t *n_dev, const int32_t *n_host, int B)
{
    const size_t lists = (size_t)B * o->n_lists;
    take_q(o, layer);
    o->be->upload(o->ctx, o->d_q, o->h_q, sizeof(uint16_t) * B * o->nq * o->hd);
    o->fn.select_blocks(o->ctx, &o->cfg, o->d_q, dv, n_dev, o->d_scores, o->d_sel,
                        o->d_sel + lists * o->ms, B, o->sel_head[layer]);
    o->be->download(o->ctx, o->h_sel, o->d_sel, sizeof(int32_t) * lists * (o->ms + 1));
    int rc = locality_meter_add(o->meter, layer, o->h_slot, n_host, o->h_sel,
                                o->h_sel + lists * o->ms, B);
    PULSE_CHECK(rc == PULSE_OK, "offload: the locality meter refused a selection");
}

/* ------------------------------------------------------------------ plan */

static void count_access(struct offload_layer_stats *ls, const struct hot_cache_result *r)
{
    ls->hits += r->n_hits;
    ls->misses += r->n_recalls;
    ls->fresh += r->fresh_block >= 0;
    ls->evictions += r->fresh_victim >= 0;
    for (int i = 0; i < r->n_recalls; i++)
        ls->evictions += r->victim_block[i] >= 0;
}

/* Hot-cache access of list k of entry b (n tokens, nb blocks): appends its recall items,
 * writes its page list (the tail read from the tail page T) and attended length into the
 * layer's plan buffers (by parity, so a plan made one layer ahead survives the current one). */
static int plan_list(struct offload *o, int layer, int b, int k, int n, int tail_new, int n_items)
{
    const int B = o->n, sl = offload_sl(o, layer), slot = o->h_slot[b], v = b * o->n_lists + k;
    const int nb = (int)PULSE_CEIL_DIV(n, o->ps),
              cnt = o->h_sel[(size_t)B * o->n_lists * o->ms + v];
    const int32_t *sel = o->h_sel + (size_t)v * o->ms;
    struct hot_cache_result *r = &o->res;
    int rc = hot_cache_access(o->hc, offload_unit(o, slot, sl, k), sel, cnt, nb, tail_new, r);
    PULSE_CHECK(rc == PULSE_OK && cnt >= 1 && sel[cnt - 1] == nb - 1,
                "offload: the hot cache refused a selection (or it lacks the tail)");
    count_access(&o->ls[layer], r);
    int n_own;
    const int32_t *own = kv_cache_owned_pages(o->kv, slot, layer, &n_own);
    for (int i = 0; i < r->n_recalls; i++)
        o->items[n_items++] = (struct recall_item){
            offload_host_chunk(o, o->hp_slot[slot], sl, r->recall_block[i], k),
            offload_gpu_piece(o, own[r->recall_slot[i]], k), offload_chunk_bytes(o)};
    int32_t *len = o->h_att_buf[layer & 1];
    int32_t *pages = len + (size_t)B * o->n_lists + (size_t)v * o->ms;
    for (int i = 0; i < cnt - 1; i++)
        pages[i] = offload_att_page(o, own[r->attend_slot[i]], k);
    pages[cnt - 1] = offload_att_page(o, own[n_own - 1], k);
    len[v] = (cnt - 1) * o->ps + (n - (nb - 1) * o->ps);
    o->tail_buf[layer & 1][v] = r->attend_slot[cnt - 1];
    return n_items;
}

/* Every list of the batch; returns the number of recall items. The tail is new when the
 * entry has more blocks than at its last step (as the meter defines it). */
static int plan(struct offload *o, int layer, const int32_t *n_host)
{
    const int sl = offload_sl(o, layer);
    int n_items = 0;
    for (int b = 0; b < o->n; b++) {
        const int nb = (int)PULSE_CEIL_DIV(n_host[b], o->ps);
        int32_t *last = &o->last_nb[o->h_slot[b] * o->n_sparse + sl];
        const int tail_new = *last > 0 && nb > *last;
        *last = nb;
        for (int k = 0; k < o->n_lists; k++)
            n_items = plan_list(o, layer, b, k, n_host[b], tail_new, n_items);
        o->ls[layer].selections++;
    }
    return n_items;
}

/* ------------------------------------------------------------------ recall, attention */

static int64_t submit(struct offload *o, int n_items)
{
    int64_t ticket;
    int rc = recall_submit(o->rc, o->items, n_items, &ticket);
    PULSE_CHECK(rc == PULSE_OK, "offload: recall_submit refused a round");
    return ticket;
}

/* Selection, hot-cache plan and recall submission of a sparse layer, without waiting. */
static void issue(struct offload *o, int layer, const int32_t *n_dev, const int32_t *n_host)
{
    const struct digest_view dv = digest_view_of(o, offload_sl(o, layer));
    select_lists(o, layer, &dv, n_dev, n_host, o->n);
    o->pend_layer = layer;
    o->pend_items = plan(o, layer, n_host);
    if (o->pend_items > 0) o->pend_ticket = submit(o, o->pend_items);
}

/* Waits for the layer's issued recall; a failed round is resubmitted (synchronously). */
static void complete(struct offload *o, int layer)
{
    struct offload_layer_stats *ls = &o->ls[layer];
    const int n_items = o->pend_items;
    o->pend_layer = -1;
    if (n_items == 0) return;
    for (int attempt = 0; attempt < RECALL_ATTEMPTS; attempt++) {
        const int64_t ticket = attempt ? submit(o, n_items) : o->pend_ticket;
        const double t0 = pulse_now();
        const int stalled = recall_query(o->rc, ticket) == 0;
        const int rc = recall_wait(o->rc, ticket);
        ls->recall_wait_s += pulse_now() - t0;
        ls->recalls++;
        ls->stalls += stalled;
        if (rc == PULSE_OK) {
            const int64_t bytes = (int64_t)n_items * (int64_t)offload_chunk_bytes(o);
            ls->recall_bytes += bytes;
            ls->recall_chunks += n_items;
            o->step_bytes += bytes;
            return;
        }
        o->st.recall_failures++;
    }
    if (o->status == PULSE_OK) o->status = PULSE_ERR_IO;
}

/* Attention with the model's q over the planned pages: one entry per (entry, list), each
 * with nq / n_lists query heads (head-wise: entry (b, h) holds query heads h*G .. h*G+G-1,
 * the same memory as q's [b][nq][hd]). */
static void attend(struct offload *o, int layer, const uint16_t *q, uint16_t *out)
{
    const int nv = o->n * o->n_lists;
    o->be->upload(o->ctx, o->d_att, o->h_att_buf[layer & 1],
                  sizeof(int32_t) * (size_t)nv * (1 + o->ms));
    struct kv_view v = {(uint16_t *)o->gpu_pool,
                        o->d_att + nv,
                        o->d_att_start,
                        o->ps,
                        o->nkv / o->n_lists,
                        o->hd,
                        0};
    o->be->attn_decode(o->ctx, q, &v, o->d_att, out, nv, o->nq / o->n_lists, o->att_max_tokens,
                       1.0f / sqrtf((float)o->hd));
}

/* Entries whose tail block filled this step: T into the tail's slot (device to device: the
 * backend's upload is cudaMemcpyDefault on cuda, memcpy on cpu) and into the host pool. */
static void flush_tails(struct offload *o, int layer, const int32_t *n_host)
{
    const int sl = offload_sl(o, layer);
    for (int b = 0; b < o->n; b++) {
        if (n_host[b] % o->ps) continue;
        const int slot = o->h_slot[b];
        int n_own;
        const int32_t *own = kv_cache_owned_pages(o->kv, slot, layer, &n_own);
        const int32_t tail = own[n_own - 1];
        for (int k = 0; k < o->n_lists; k++)
            o->be->upload(o->ctx,
                          offload_gpu_piece(o, own[o->tail_buf[layer & 1][b * o->n_lists + k]], k),
                          offload_gpu_piece(o, tail, k), offload_chunk_bytes(o));
        o->be->download(o->ctx, host_pool_block(o->hp, o->hp_slot[slot], sl, n_host[b] / o->ps - 1),
                        o->gpu_pool + (size_t)tail * o->page_bytes, o->page_bytes);
        o->ls[layer].tail_flushes++;
    }
}

static int hook_attend(void *user, int layer, const uint16_t *q, const struct kv_view *kv,
                       const int32_t *n_dev, const int32_t *n_host, uint16_t *out, int batch)
{
    struct offload *o = user;
    PULSE_CHECK(batch == o->n, "offload: the hook's batch is not the step's");
    const int ahead = o->p.lookahead;
    if (layer < o->n_dense) { /* dense: the engine's attention over the whole KV */
        if (ahead && layer + 1 == o->n_dense) issue(o, layer + 1, n_dev, n_host);
        return 0;
    }
    if (layer > o->n_dense) prefetch_q(o, layer - 1); /* while the GPU runs layer - 1's MLP */
    const struct digest_view dv = digest_view_of(o, offload_sl(o, layer));
    o->fn.digest_update(o->ctx, kv, &dv, o->d_step, batch, o->sel_head[layer]);
    if (o->pend_layer != layer) issue(o, layer, n_dev, n_host); /* ArkVale, or the first */
    complete(o, layer);
    attend(o, layer, q, out);
    flush_tails(o, layer, n_host);
    if (ahead && layer + 1 < o->n_layers) issue(o, layer + 1, n_dev, n_host);
    return 1;
}

struct engine_layer_hook offload_hook(struct offload *o)
{
    struct engine_layer_hook h = {.attend = hook_attend, .user = o};
    return h;
}

/* ------------------------------------------------------------------ the step */

int offload_step(struct offload *o, struct batch *bt, const struct batch_entry *en, int n)
{
    PULSE_CHECK(n >= 1 && n <= o->max_batch, "offload_step: batch size out of range");
    const size_t MB = (size_t)o->max_batch;
    o->n = n;
    int max_len = 1; /* the split plan of the CUDA attention: the engine's (batch_set's) bound */
    for (int b = 0; b < n; b++) {
        const int slot = en[b].slot;
        max_len = PULSE_MAX(max_len, en[b].reserved);
        PULSE_CHECK(slot >= 0 && slot < o->max_batch && o->hp_slot[slot] >= 0,
                    "offload_step: an entry is not an offload request");
        o->h_slot[b] = slot;
        o->h_step[b] = en[b].pos;
        for (int sl = 0; sl < o->n_sparse; sl++)
            o->h_step[MB * (1 + sl) + b] = kv_cache_row(o->dg, o->dg_slot[slot], sl);
    }
    o->att_max_tokens = PULSE_MIN(o->ms * o->ps, max_len);
    o->be->upload(o->ctx, o->d_step, o->h_step, sizeof(int32_t) * MB * (1 + o->n_sparse));
    o->step_bytes = 0;
    o->pend_layer = -1;
    const struct engine_layer_hook h = offload_hook(o);
    engine_set_hook(o->eng, &h);
    engine_step(o->eng, bt, o->kv);
    engine_set_hook(o->eng, NULL);
    prefetch_q(o, o->n_layers - 1); /* while the GPU runs the head */
    if (o->st.steps < o->p.max_steps) o->series[o->st.steps] = o->step_bytes;
    o->st.steps++;
    char why[256];
    if (o->p.verify_steps && o->status == PULSE_OK && offload_verify(o, why, sizeof why)) {
        fprintf(stderr, "offload: step %lld: %s\n", (long long)o->st.steps, why);
        o->status = PULSE_ERR_INVALID;
    }
    return o->status;
}
