/* pulse recall-bench, the cost of zero-copy to compute beside it: a GEMM-bound kernel (cuBLAS
 * bf16 8192^3), an attention-bound one (attn_decode, 16 requests x 32768 tokens = 2 GiB of
 * paged KV) and decode-shaped GEMMs (m = 18 against qwen3-14b's FFN weights, 18x17408x5120 then
 * 18x5120x17408 accumulating, back to back: 357 MB of weights read, HBM-bound) through
 * cublasGemmEx and through cuBLASLt (gemm_lt.h) leaving 0, 8 and 16 SMs free, run alone, then
 * with zero-copy recalls (64 KB x 512) kept two deep on their own high-priority stream, for each
 * zero-copy grid size; reported: compute slowdown, zero-copy GB/s alone and beside (and the
 * decode GEMMs' weight-read GB/s). CUDA builds only (a "skipped" note elsewhere). */
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "recall_bench.h"
#include "results.h"
#ifdef PULSE_HAVE_CUDA
#include "gemm_lt.h"
#endif

#ifdef PULSE_HAVE_CUDA

#define DEC_M 18
#define DEC_N 17408 /* qwen3-14b's ffn */
#define DEC_K 5120  /* and hidden */

struct compute {
    uint16_t *a, *w, *kv, *q, *out;
    float *c;
    int32_t *ids, *start, *ntok;
    size_t n_a, n_kv, n_q;
    int gemm_n, batch, nq, tokens;
    /* the decode GEMMs: dec_a [DEC_M][DEC_N] bf16, dec_w1 [DEC_N][DEC_K], dec_w2 [DEC_K][DEC_N],
     * dec_out [DEC_M][DEC_N] fp32, run on dctx (b->ctx with or without a gemm_lt) */
    uint16_t *dec_a, *dec_w1, *dec_w2;
    float *dec_out;
    struct kctx dctx;
};

#define GEMM_N 8192
#define ATT_BATCH 16
#define ATT_TOKENS 32768 /* 16 x 32768 tokens x 8 heads x 128 x K,V x 2 B = 2 GiB */

static int compute_setup(struct bench *b, struct compute *c)
{
    const struct backend *be = b->be;
    memset(c, 0, sizeof *c);
    c->gemm_n = GEMM_N;
    c->batch = ATT_BATCH;
    c->nq = 40;
    c->tokens = ATT_TOKENS;
    c->n_a = (size_t)GEMM_N * GEMM_N;
    c->n_kv = (size_t)ATT_BATCH * ATT_TOKENS * 8 * 2 * 128;
    c->n_q = (size_t)ATT_BATCH * c->nq * 128;
    int pages = ATT_BATCH * ATT_TOKENS / 16;
    c->a = mem_alloc(be->mem, c->n_a * 2, "gemm a");
    c->w = mem_alloc(be->mem, c->n_a * 2, "gemm w");
    c->c = mem_alloc(be->mem, c->n_a * 4, "gemm c");
    c->kv = mem_alloc(be->mem, c->n_kv * 2, "attn kv");
    c->q = mem_alloc(be->mem, c->n_q * 2, "attn q");
    c->out = mem_alloc(be->mem, c->n_q * 2, "attn out");
    c->ids = mem_alloc(be->mem, (size_t)pages * 4, "attn ids");
    c->start = mem_alloc(be->mem, ATT_BATCH * 4, "attn start");
    c->ntok = mem_alloc(be->mem, ATT_BATCH * 4, "attn ntok");
    c->dec_a = mem_alloc(be->mem, (size_t)DEC_M * DEC_N * 2, "decode gemm a");
    c->dec_w1 = mem_alloc(be->mem, (size_t)DEC_N * DEC_K * 2, "decode gemm w1");
    c->dec_w2 = mem_alloc(be->mem, (size_t)DEC_N * DEC_K * 2, "decode gemm w2");
    c->dec_out = mem_alloc(be->mem, (size_t)DEC_M * DEC_N * 4, "decode gemm out");
    size_t ws = attn_decode_workspace_bytes(ATT_BATCH, c->nq, 128, ATT_TOKENS, b->ctx.num_sms);
    b->ctx.workspace = mem_alloc(be->mem, ws, "attn workspace");
    b->ctx.workspace_bytes = ws;
    int32_t *h = mem_alloc(MEM_HOST, (size_t)pages * 4, "ids");
    if (!c->a || !c->w || !c->c || !c->kv || !c->q || !c->out || !c->ids || !c->start || !c->ntok ||
        !b->ctx.workspace || !h || !c->dec_a || !c->dec_w1 || !c->dec_w2 || !c->dec_out) {
        mem_free(MEM_HOST, h, (size_t)pages * 4);
        return -1;
    }
    for (int i = 0; i < pages; i++)
        h[i] = i;
    be->upload(&b->ctx, c->ids, h, (size_t)pages * 4);
    int32_t st[ATT_BATCH], nt[ATT_BATCH];
    for (int i = 0; i < ATT_BATCH; i++)
        st[i] = i * (ATT_TOKENS / 16), nt[i] = ATT_TOKENS;
    be->upload(&b->ctx, c->start, st, sizeof st);
    be->upload(&b->ctx, c->ntok, nt, sizeof nt);
    mem_free(MEM_HOST, h, (size_t)pages * 4);
    be->fill_random_bf16(&b->ctx, c->a, c->n_a, 11, 1.0f, 0.0f);
    be->fill_random_bf16(&b->ctx, c->w, c->n_a, 12, 1.0f, 0.0f);
    be->fill_random_bf16(&b->ctx, c->kv, c->n_kv, 13, 1.0f, 0.0f);
    be->fill_random_bf16(&b->ctx, c->q, c->n_q, 14, 1.0f, 0.0f);
    be->fill_random_bf16(&b->ctx, c->dec_a, (size_t)DEC_M * DEC_N, 15, 1.0f, 0.0f);
    be->fill_random_bf16(&b->ctx, c->dec_w1, (size_t)DEC_N * DEC_K, 16, 0.05f, 0.0f);
    be->fill_random_bf16(&b->ctx, c->dec_w2, (size_t)DEC_N * DEC_K, 17, 0.05f, 0.0f);
    be->memset(&b->ctx, c->dec_out, 0, (size_t)DEC_M * DEC_N * 4);
    c->dctx = b->ctx;
    be->sync(&b->ctx);
    return 0;
}

static void compute_free(struct bench *b, struct compute *c)
{
    const struct backend *be = b->be;
    mem_free(be->mem, c->a, c->n_a * 2);
    mem_free(be->mem, c->w, c->n_a * 2);
    mem_free(be->mem, c->c, c->n_a * 4);
    mem_free(be->mem, c->kv, c->n_kv * 2);
    mem_free(be->mem, c->q, c->n_q * 2);
    mem_free(be->mem, c->out, c->n_q * 2);
    mem_free(be->mem, c->ids, (size_t)ATT_BATCH * ATT_TOKENS / 16 * 4);
    mem_free(be->mem, c->start, ATT_BATCH * 4);
    mem_free(be->mem, c->ntok, ATT_BATCH * 4);
    mem_free(be->mem, c->dec_a, (size_t)DEC_M * DEC_N * 2);
    mem_free(be->mem, c->dec_w1, (size_t)DEC_N * DEC_K * 2);
    mem_free(be->mem, c->dec_w2, (size_t)DEC_N * DEC_K * 2);
    mem_free(be->mem, c->dec_out, (size_t)DEC_M * DEC_N * 4);
    mem_free(be->mem, b->ctx.workspace, b->ctx.workspace_bytes);
    b->ctx.workspace = NULL;
    b->ctx.workspace_bytes = 0;
}

/* Queues `iters` runs of kernel `which` (0 GEMM, 1 attention, 2 the decode GEMMs on c->dctx)
 * between e0 and e1. */
static void compute_launch(struct bench *b, struct compute *c, int which, int iters, void *e0,
                           void *e1)
{
    const struct recall_copy_ops *o = b->ops;
    struct kv_view v = {c->kv, c->ids, c->start, 16, 8, 128, 0, 0, NULL, NULL};
    PULSE_CHECK(!o->event_record(o, e0, b->ctx.stream), "compute start event");
    for (int i = 0; i < iters; i++) {
        if (which == 0) {
            b->be->gemm_bf16(&b->ctx, c->a, c->w, c->c, c->gemm_n, c->gemm_n, c->gemm_n, 0.0f);
        } else if (which == 2) { /* the FFN's up then down shape, the second accumulating */
            b->be->gemm_bf16(&c->dctx, c->dec_a, c->dec_w1, c->dec_out, DEC_M, DEC_N, DEC_K, 0.0f);
            b->be->gemm_bf16(&c->dctx, c->dec_a, c->dec_w2, c->dec_out, DEC_M, DEC_K, DEC_N, 1.0f);
        } else
            b->be->attn_decode(&b->ctx, c->q, &v, c->ntok, c->out, c->batch, c->nq, c->tokens,
                               0.088f);
    }
    PULSE_CHECK(!o->event_record(o, e1, b->ctx.stream), "compute end event");
}

static double compute_ms(struct bench *b, void *e0, void *e1)
{
    float ms = 0;
    PULSE_CHECK(!b->ops->event_sync(b->ops, e1) && !b->ops->event_elapsed_ms(b->ops, e0, e1, &ms),
                "compute timing");
    return ms;
}

/* Compute with zero-copy recalls kept two deep beside it; returns the compute ms and the
 * zero-copy rate over the recalls that started while it ran. */
static double beside(struct bench *b, struct compute *c, struct recall *r, int which, int iters,
                     void *e0, void *e1, double *zc_gbs)
{
    const size_t rb = ZC_CHUNK * ZC_COUNT;
    int64_t t[2];
    double bytes = 0;
    compute_launch(b, c, which, iters, e0, e1);
    double t0 = pulse_now();
    PULSE_CHECK(!recall_submit(r, b->items, ZC_COUNT, &t[0]) &&
                    !recall_submit(r, b->items, ZC_COUNT, &t[1]),
                "zero-copy submit");
    for (int k = 0;; k++) {
        PULSE_CHECK(recall_wait(r, t[k % 2]) == PULSE_OK, "zero-copy recall");
        bytes += (double)rb;
        if (b->ops->event_query(b->ops, e1) != 0) {
            PULSE_CHECK(recall_wait(r, t[(k + 1) % 2]) == PULSE_OK, "zero-copy recall");
            bytes += (double)rb;
            break;
        }
        PULSE_CHECK(!recall_submit(r, b->items, ZC_COUNT, &t[k % 2]), "zero-copy submit");
    }
    *zc_gbs = bytes / (pulse_now() - t0) / 1e9;
    return compute_ms(b, e0, e1);
}

/* One kernel alone, then beside zero-copy at each grid of the run: its JSON object (with the
 * samples) appended to ks, a text row per grid. bytes: what one run reads (0: not reported). */
static json_t *kernel_rows(struct bench *b, struct compute *c, int w, const char *name, int iters,
                           double bytes, void *e0, void *e1, json_t *ks)
{
    const struct opts *o = &b->o;
    const int reps = (int)o->reps;
    double alone[MAX_REPS], with[MAX_REPS], zs[MAX_REPS], za[MAX_REPS];
    compute_launch(b, c, w, 1, e0, e1); /* warm-up (cuBLAS heuristics, cuBLASLt's timing, clocks) */
    compute_ms(b, e0, e1);
    for (int r = 0; r < reps; r++) {
        compute_launch(b, c, w, iters, e0, e1);
        alone[r] = compute_ms(b, e0, e1);
    }
    double a_med = recall_bench_median(alone, reps);
    json_t *kj = json_pack("{s:s,s:i,s:o,s:f}", "kernel", name, "iters", iters, "alone_ms_samples",
                           recall_bench_samples(alone, reps), "alone_ms", a_med);
    if (bytes > 0) results_set_real(kj, "alone_GBps", bytes * iters / (a_med * 1e-3) / 1e9);
    json_t *gs = json_array();
    for (int g = 0; g < o->n_grids; g++) {
        char err[256];
        struct recall *r = recall_bench_engine(b, RECALL_ZERO_COPY, ZC_COUNT, 0, (int)o->grids[g],
                                               err, sizeof err);
        PULSE_CHECK(r != NULL, err);
        PULSE_CHECK(!recall_bench_time(b, r, ZC_COUNT, za), "zero-copy alone");
        for (int k = 0; k < reps; k++)
            za[k] = (double)(ZC_CHUNK * ZC_COUNT) / za[k] / 1e9;
        for (int r2 = 0; r2 < reps; r2++)
            with[r2] = beside(b, c, r, w, iters, e0, e1, &zs[r2]);
        double w_med = recall_bench_median(with, reps), zb = recall_bench_median(zs, reps),
               zal = recall_bench_median(za, reps);
        json_array_append_new(
            gs,
            json_pack("{s:I,s:o,s:f,s:f,s:f,s:o,s:f,s:f,s:f}", "zc_blocks", (json_int_t)o->grids[g],
                      "beside_ms_samples", recall_bench_samples(with, reps), "beside_ms", w_med,
                      "slowdown", w_med / a_med, "zc_GBps_alone", zal, "zc_GBps_beside_samples",
                      recall_bench_samples(zs, reps), "zc_GBps_beside", zb, "zc_beside_vs_alone",
                      zb / zal, "zc_fraction_of_peak_beside", zb / b->peak));
        printf("  %-42s %3ld %9.3f %9.3f %7.3f %8.2f %8.2f\n", name, o->grids[g], a_med, w_med,
               w_med / a_med, zal, zb);
        recall_free(r);
    }
    json_object_set_new(kj, "grids", gs);
    json_array_append_new(ks, kj);
    return kj;
}

/* The decode GEMMs through cublasGemmEx, cuBLASLt's candidates alone, then cuBLASLt's beside the
 * suite's skinny kernel (--gemm skinny) leaving 0, 8 and 16 SMs free. */
static void decode_rows(struct bench *b, struct compute *c, void *e0, void *e1, json_t *ks)
{
    static const struct {
        int reserve, skinny; /* reserve -1: cublasGemmEx */
    } rows[] = {{-1, 0}, {0, 0}, {0, 1}, {8, 1}, {16, 1}};
    const double bytes = 2.0 * DEC_N * DEC_K * 2; /* the two weights, read once a run */
    const int iters = b->o.quick ? 20 : 50;
    char err[256];
    struct gemm_lt *lts[2];
    for (int s = 0; s < 2; s++) {
        struct gemm_lt_params gp = {.sm_reserve = 0, .no_tuning = 0, .no_skinny = !s};
        lts[s] = gemm_lt_create(&gp, err, sizeof err);
        PULSE_CHECK(lts[s] != NULL, err);
    }
    for (size_t i = 0; i < PULSE_ARRAY_LEN(rows); i++) {
        const int rv = rows[i].reserve;
        struct gemm_lt *lt = lts[rows[i].skinny];
        if (rv >= c->dctx.num_sms) continue;
        c->dctx.gemm_lt = rv < 0 ? NULL : lt;
        if (rv >= 0) PULSE_CHECK(gemm_lt_set_sm_reserve(lt, rv) == 0, "decode gemm sm reserve");
        const char *path = rv < 0 ? "cublas" : rows[i].skinny ? "skinny" : "lt";
        char name[64];
        if (rv < 0)
            snprintf(name, sizeof name, "decode gemm m=%d cublas", DEC_M);
        else
            snprintf(name, sizeof name, "decode gemm m=%d %s, %d SMs free", DEC_M, path, rv);
        json_t *kj = kernel_rows(b, c, 2, name, iters, bytes, e0, e1, ks);
        struct gemm_lt_stats st;
        gemm_lt_get_stats(lt, &st);
        json_object_set_new(
            kj, "decode_gemm",
            json_pack("{s:s,s:i,s:i,s:i,s:i,s:i,s:I,s:I,s:I,s:I}", "path", path, "m", DEC_M, "n",
                      DEC_N, "k", DEC_K, "sm_reserve", rv < 0 ? 0 : rv, "sm_target",
                      rv < 0 ? 0 : st.sm_target, "lt_shapes_tuned", (json_int_t)st.shapes_tuned,
                      "lt_candidates_timed", (json_int_t)st.candidates_timed, "skinny_calls",
                      (json_int_t)st.skinny_calls, "shapes_skinny", (json_int_t)st.shapes_skinny));
        printf("  %-42s weights read at %.1f GB/s alone\n", "",
               json_real_value(json_object_get(kj, "alone_GBps")));
    }
    b->be->sync(&b->ctx);
    c->dctx.gemm_lt = NULL;
    for (int s = 0; s < 2; s++)
        gemm_lt_free(lts[s]);
}

void recall_bench_interference(struct bench *b, json_t *res)
{
    const struct opts *o = &b->o;
    if (o->no_interf || b->be->mem != MEM_DEVICE) {
        json_object_set_new(
            res, "interference",
            json_pack("{s:s}", "skipped",
                      o->no_interf ? "--no-interference" : "needs the cuda backend"));
        return;
    }
    struct compute c;
    if (compute_setup(b, &c)) {
        compute_free(b, &c);
        json_object_set_new(res, "interference", json_pack("{s:s}", "status", "oom"));
        return;
    }
    void *e0, *e1;
    PULSE_CHECK(!b->ops->event_create(b->ops, &e0) && !b->ops->event_create(b->ops, &e1), "events");
    static const char *names[2] = {"gemm_bf16 8192x8192x8192",
                                   "attn_decode 16 x 32768 tokens, 2 GiB KV"};
    const int iters[2] = {o->quick ? 5 : 10, o->quick ? 10 : 30};
    recall_bench_pick(b, ZC_CHUNK, ZC_COUNT);
    json_t *ks = json_array();
    printf("zero-copy (%zu B x %d) beside compute: kernel, blocks, alone ms, beside ms, "
           "slowdown, zc GB/s alone, zc GB/s beside\n",
           ZC_CHUNK, ZC_COUNT);
    for (int w = 0; w < 2; w++)
        kernel_rows(b, &c, w, names[w], iters[w], 0, e0, e1, ks);
    decode_rows(b, &c, e0, e1, ks);
    json_object_set_new(res, "interference",
                        json_pack("{s:I,s:i,s:I,s:o}", "zc_chunk_bytes", (json_int_t)ZC_CHUNK,
                                  "zc_chunks", ZC_COUNT, "zc_threads", (json_int_t)o->zc_threads,
                                  "kernels", ks));
    b->ops->event_destroy(b->ops, e0);
    b->ops->event_destroy(b->ops, e1);
    compute_free(b, &c);
}

#else
void recall_bench_interference(struct bench *b, json_t *res)
{
    json_object_set_new(res, "interference",
                        json_pack("{s:s}", "skipped",
                                  b->o.no_interf ? "--no-interference" : "needs the cuda backend"));
}
#endif
