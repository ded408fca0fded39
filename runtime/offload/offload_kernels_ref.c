/* CPU reference of the device path's glue kernel (offload_kernels.h). */
#include "offload_kernels.h"

#include "common.h"

/* One list v of the layer (what one CUDA thread block does). */
static void build_list(const struct offload_build_args *a, int v)
{
    const int b = v / a->n_lists, k = v % a->n_lists, H1 = a->hot_slots + 1;
    const int32_t *own = a->own + ((size_t)a->slot[b] * a->n_sparse + a->sl) * H1;
    const int32_t *ids = a->host_ids + ((size_t)a->hslot[b] * a->n_sparse + a->sl) * a->max_blocks;
    const uint64_t koff = a->headwise ? (uint64_t)k * a->head_bytes : 0;
    struct recall_desc *d = a->desc + (size_t)v * a->ms;
    if (a->status[v] != PULSE_OK) {
        *a->refused += 1;
        for (int r = 0; r < a->ms; r++)
            d[r] = (struct recall_desc){0, 0, 0, 0};
        return;
    }
    const int nr = a->n_recalls[v];
    for (int r = 0; r < a->ms; r++) {
        const size_t i = (size_t)v * a->ms + r;
        if (r < nr)
            d[r] = (struct recall_desc){
                a->host_base + (uint64_t)ids[a->recall_block[i]] * a->page_bytes + koff,
                a->gpu_pool + (uint64_t)own[a->recall_slot[i]] * a->page_bytes + koff,
                a->chunk_bytes, 0};
        else
            d[r] = (struct recall_desc){0, 0, 0, 0};
    }
    int displaces = 0; /* a recall into a predicted block's slot (the gate) */
    for (int r = 0; a->spec_idx && r < nr; r++)
        displaces |= offload_sorted_has(a->spec_idx + (size_t)v * a->ms, a->spec_count[v],
                                        a->victim_block[(size_t)v * a->ms + r]);
    if (displaces) {
        *a->held += 1;
        *a->gate = 0;
    }
    const int cnt = a->sel_count[v], n = a->n_tok[b], nb = (n + a->ps - 1) / a->ps;
    int32_t *pages = a->att_pages + (size_t)v * a->ms;
    const int32_t *att = a->attend_slot + (size_t)v * a->ms;
    for (int j = 0; j < cnt - 1; j++)
        pages[j] = a->headwise ? own[att[j]] * a->nkv + k : own[att[j]];
    pages[cnt - 1] = a->headwise ? own[H1 - 1] * a->nkv + k : own[H1 - 1];
    for (int j = 0; a->att_host && j < cnt; j++) {
        const size_t i = (size_t)v * a->ms + j;
        const int32_t blk = a->sel_idx[i];
        const int miss =
            j < cnt - 1 && offload_sorted_has(a->recall_block + (size_t)v * a->ms, nr, blk);
        a->att_host[i] = !miss ? -1 : a->headwise ? ids[blk] * a->nkv + k : ids[blk];
    }
    a->att_len[v] = (cnt - 1) * a->ps + (n - (nb - 1) * a->ps);
    *a->att_tokens += (unsigned long long)a->att_len[v];
    if (a->tail_index[b] >= 0)
        a->tail_desc[(size_t)a->tail_index[b] * a->n_lists + k] = (struct recall_desc){
            a->gpu_pool + (uint64_t)own[H1 - 1] * a->page_bytes + koff,
            a->gpu_pool + (uint64_t)own[att[cnt - 1]] * a->page_bytes + koff, a->chunk_bytes, 0};
}

void offload_build_ref(const struct offload_build_args *a, void *stream)
{
    (void)stream;
    for (int v = 0; v < a->B * a->n_lists; v++)
        build_list(a, v);
}

void offload_plan_jobs_check(const struct hot_plan_params *p, const struct offload_plan_job *jobs,
                             int n)
{
    PULSE_CHECK(jobs && n >= 1 && n <= OFFLOAD_PLAN_MAX_JOBS,
                "offload_plan_build: 1 to OFFLOAD_PLAN_MAX_JOBS jobs");
    for (int i = 0; i < n; i++) {
        const struct hot_plan_in *in = &jobs[i].in;
        const struct hot_plan_out *out = &jobs[i].out;
        const struct offload_build_args *a = &jobs[i].build;
        PULSE_CHECK(a->status == out->status && a->n_recalls == out->n_recalls &&
                        a->recall_block == out->recall_block &&
                        a->recall_slot == out->recall_slot && a->attend_slot == out->attend_slot &&
                        a->sel_count == in->sel_count &&
                        (!a->spec_idx || a->victim_block == out->victim_block),
                    "offload_plan_build: a job's build reads another plan");
        PULSE_CHECK(a->B == in->batch && a->n_lists == in->n_lists && a->ms == in->max_sel &&
                        a->hot_slots == p->n_slots && a->max_blocks == p->max_blocks &&
                        (!a->att_host || a->sel_idx == in->sel_idx),
                    "offload_plan_build: a job's build and plan differ in shape");
        for (int j = 0; j < i; j++)
            PULSE_CHECK(out->status != jobs[j].out.status &&
                            out->attend_slot != jobs[j].out.attend_slot &&
                            a->desc != jobs[j].build.desc && a->att_len != jobs[j].build.att_len &&
                            a->att_pages != jobs[j].build.att_pages &&
                            a->tail_desc != jobs[j].build.tail_desc &&
                            (!a->att_host || a->att_host != jobs[j].build.att_host) &&
                            (!out->totals || out->totals != jobs[j].out.totals) &&
                            in->unit_base != jobs[j].in.unit_base,
                        "offload_plan_build: two jobs share an output or units");
    }
}

void offload_plan_build_ref(const struct hot_plan_params *p, const struct hot_plan_state *s,
                            const struct offload_plan_job *jobs, int n, void *stream)
{
    offload_plan_jobs_check(p, jobs, n);
    for (int i = 0; i < n; i++) {
        hot_plan_ref(p, s, &jobs[i].in, &jobs[i].out, stream);
        offload_build_ref(&jobs[i].build, stream);
    }
}
