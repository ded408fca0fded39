/* The tiny model on CUDA against the CPU reference, same seed and prompts:
 * 1. teacher-forced: both backends consume the CPU's tokens for 64 steps; the normalised logit
 *    error stays small and the greedy tokens agree at every step except where the CPU's top two
 *    logits are a near-tie (gap under TIE_GAP), which the bf16 roundings of the two backends may
 *    legitimately order differently; such steps are counted and printed;
 * 2. free-running with continuous batching (with and without CUDA graphs): the tokens agree
 *    up to the first near-tie, the CUDA step allocates nothing, and the device page tables pass
 *    kv_cache_check. Exit 77 without a GPU. */
#include <math.h>
#include <string.h>

#include "backend.h"
#include "common.h"
#include "engine.h"
#include "mem.h"
#include "serve.h"
#include "testutil.h"
#include "workloads/workload.h"

#define OUT_LEN 64
#define TIE_GAP 2e-3f /* logits of the tiny model spread over ~N(0, 1) */

struct side {
    struct engine *e;
    struct kv_cache *kv;
    struct batch *bt;
};

static int side_open(struct side *s, const char *be_name, int n, const int *prompt, int graph)
{
    char err[256];
    const struct model_config *c = model_config_find("tiny");
    const struct backend *be = backend_find(be_name);
    struct engine_params p = {c, be, 1, n, 512, graph};
    s->e = engine_create(&p, err, sizeof err);
    if (!s->e) return -1;
    struct kv_cache_params kp = {c->n_layers, c->n_kv_heads, c->head_dim, 16, 1u << 24, n, 512};
    s->kv = kv_cache_create(&kp, be, engine_ctx(s->e), err, sizeof err);
    s->bt = batch_create(s->e);
    struct batch_entry en[8];
    for (int b = 0; b < n; b++) {
        int slot;
        if (kv_cache_admit(s->kv, prompt[b] + OUT_LEN, &slot) != PULSE_OK) return -1;
        en[b] = (struct batch_entry){slot, b, prompt[b], prompt[b] + OUT_LEN,
                                     engine_first_token(s->e, b)};
    }
    batch_set(s->e, s->bt, s->kv, en, n);
    engine_fill_prompt(s->e, s->bt, s->kv);
    return 0;
}

static void side_close(struct side *s)
{
    batch_free(s->e, s->bt);
    kv_cache_free(s->kv);
    engine_free(s->e);
}

static int argmax_row(const float *v, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

static double norm_err(const float *g, const float *c, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (double)(g[i] - c[i]) * (g[i] - c[i]);
        den += (double)c[i] * c[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

/* One step, layer by layer: the residual streams of the two backends after the embedding and
 * after every layer agree to fp32 rounding plus a few bf16 rounding flips. */
static void test_layerwise(void)
{
    enum { N = 3 };
    const int prompt[N] = {100, 37, 1};
    const struct model_config *c = model_config_find("tiny");
    struct side cpu, gpu;
    EXPECT_EQ_INT(side_open(&cpu, "cpu", N, prompt, 0), 0);
    EXPECT_EQ_INT(side_open(&gpu, "cuda", N, prompt, 0), 0);
    static float xc[N * 256], xg[N * 256];
    engine_run_embed(cpu.e, cpu.bt);
    engine_run_embed(gpu.e, gpu.bt);
    for (int l = 0; l <= c->n_layers; l++) {
        if (l > 0) {
            engine_run_layer(cpu.e, cpu.bt, cpu.kv, l - 1);
            engine_run_layer(gpu.e, gpu.bt, gpu.kv, l - 1);
        }
        batch_read_residual(cpu.e, cpu.bt, xc);
        batch_read_residual(gpu.e, gpu.bt, xg);
        double err = norm_err(xg, xc, (size_t)N * c->hidden);
        fprintf(stderr, "residual after %s %d: normalised error %.3e\n", l ? "layer" : "embed",
                l - 1, err);
        EXPECT(err < 1e-4);
    }
    side_close(&cpu);
    side_close(&gpu);
}

/* Every layer of step 0 op by op, each op of both backends fed the CPU's inputs (uploaded to
 * the GPU), so a discrepancy is pinned on one op of one layer. */
static void test_ops_by_layer(void)
{
    enum { N = 3 };
    const int prompt[N] = {100, 37, 1};
    const struct model_config *c = model_config_find("tiny");
    struct side cpu, gpu;
    EXPECT_EQ_INT(side_open(&cpu, "cpu", N, prompt, 0), 0);
    EXPECT_EQ_INT(side_open(&gpu, "cuda", N, prompt, 0), 0);
    const struct backend *bc = backend_find("cpu"), *bg = backend_find("cuda");
    const struct kctx *kc = engine_ctx(cpu.e), *kg = engine_ctx(gpu.e);
    const struct layer_weights *wc, *wg;
    const int H = c->hidden, QKV = model_qkv_dim(c), QD = c->n_heads * c->head_dim, F = c->ffn;
    size_t bytes = sizeof(float) * N * (H + QKV + 2 * F) + 2 * N * (H + 2 * QD + F);
    char *hc = malloc(bytes), *hg = malloc(bytes), *dg = mem_alloc(MEM_DEVICE, bytes, "ops");
    /* one block per backend: x, qkv, gu (fp32) then xn, q, attn, act (bf16) */
#define CARVE(base)                                                                                float *x_##base = (float *)base, *qkv_##base = x_##base + N * H,                                    *gu_##base = qkv_##base + N * QKV;                                                       uint16_t *xn_##base = (uint16_t *)(gu_##base + N * 2 * F), *q_##base = xn_##base + N * H,               *at_##base = q_##base + N * QD, *act_##base = at_##base + N * QD;
    CARVE(hc)
    CARVE(dg)
    (void)hg;
    int32_t tok[N], pos[N], len[N], ps[N];
    for (int b = 0; b < N; b++) {
        tok[b] = engine_first_token(cpu.e, b);
        pos[b] = prompt[b];
        len[b] = prompt[b] + 1;
    }
    int32_t *d_i = mem_alloc(MEM_DEVICE, sizeof(int32_t) * 4 * N, "ints");
    int32_t h_i[4 * N];
    float *back = malloc(bytes);
    double worst[2] = {0, 0}; /* fp32 normalised error, bf16 mismatch fraction */
    /* compares the GPU buffer with the CPU one, then makes the GPU's equal to the CPU's */
#define CMP(name, hp, dp, nbytes, isf)                                                             do {                                                                                               bg->download(kg, back, dp, nbytes);                                                            double e_ = 0;                                                                                 if (isf)                                                                                           e_ = norm_err(back, (const float *)(hp), (nbytes) / 4);                                    else {                                                                                             size_t n_ = (nbytes) / 2, diff_ = 0;                                                           for (size_t i_ = 0; i_ < n_; i_++) diff_ += ((uint16_t *)back)[i_] != ((const uint16_t *)(hp))[i_];             e_ = (double)diff_ / n_;                                                                   }                                                                                              fprintf(stderr, "layer 0 op %-14s %s %.3e\n", name, isf ? "normalised error" : "bf16 mismatch fraction", e_);         EXPECT(e_ < (isf ? 1e-5 : 1e-2));                                                              bg->upload(kg, dp, hp, nbytes);                                                            } while (0)
    bc->embed(kc, tok, engine_model(cpu.e)->embed, x_hc, N, H);
    for (int l = 0; l < c->n_layers; l++) {
    wc = &engine_model(cpu.e)->layers[l];
    wg = &engine_model(gpu.e)->layers[l];
    for (int b = 0; b < N; b++) ps[b] = kv_cache_row(cpu.kv, b, l);
    memcpy(h_i, tok, sizeof tok), memcpy(h_i + N, pos, sizeof pos);
    memcpy(h_i + 2 * N, len, sizeof len), memcpy(h_i + 3 * N, ps, sizeof ps);
    bg->upload(kg, d_i, h_i, sizeof h_i);
    struct kv_view vc = kv_cache_view(cpu.kv, h_i + 3 * N), vg = kv_cache_view(gpu.kv, d_i + 3 * N);
    bg->upload(kg, x_dg, x_hc, sizeof(float) * N * H);
    bc->rmsnorm(kc, x_hc, wc->attn_norm, xn_hc, N, H, c->norm_eps);
    bg->rmsnorm(kg, x_dg, wg->attn_norm, xn_dg, N, H, c->norm_eps);
    CMP("rmsnorm", xn_hc, xn_dg, 2 * N * H, 0);
    bc->gemm_bf16(kc, xn_hc, wc->wqkv, qkv_hc, N, QKV, H, 0);
    bg->gemm_bf16(kg, xn_dg, wg->wqkv, qkv_dg, N, QKV, H, 0);
    CMP("qkv gemm", qkv_hc, qkv_dg, sizeof(float) * N * QKV, 1);
    bc->qk_norm_rope_append(kc, qkv_hc, wc->q_norm, wc->k_norm, q_hc, &vc, pos, N, c->n_heads,
                            c->rope_theta, c->norm_eps);
    bg->qk_norm_rope_append(kg, qkv_dg, wg->q_norm, wg->k_norm, q_dg, &vg, d_i + N, N,
                            c->n_heads, c->rope_theta, c->norm_eps);
    CMP("qk_norm_rope", q_hc, q_dg, 2 * N * QD, 0);
    bc->attn_decode(kc, q_hc, &vc, len, at_hc, N, c->n_heads, 512, 1.0f / sqrtf((float)c->head_dim));
    bg->attn_decode(kg, q_dg, &vg, d_i + 2 * N, at_dg, N, c->n_heads, 512,
                    1.0f / sqrtf((float)c->head_dim));
    CMP("attention", at_hc, at_dg, 2 * N * QD, 0);
    bc->gemm_bf16(kc, at_hc, wc->wo, x_hc, N, H, QD, 1);
    bg->gemm_bf16(kg, at_dg, wg->wo, x_dg, N, H, QD, 1);
    CMP("o gemm+res", x_hc, x_dg, sizeof(float) * N * H, 1);
    bc->rmsnorm(kc, x_hc, wc->mlp_norm, xn_hc, N, H, c->norm_eps);
    bg->rmsnorm(kg, x_dg, wg->mlp_norm, xn_dg, N, H, c->norm_eps);
    CMP("mlp rmsnorm", xn_hc, xn_dg, 2 * N * H, 0);
    bc->gemm_bf16(kc, xn_hc, wc->wgu, gu_hc, N, 2 * F, H, 0);
    bg->gemm_bf16(kg, xn_dg, wg->wgu, gu_dg, N, 2 * F, H, 0);
    CMP("gate/up gemm", gu_hc, gu_dg, sizeof(float) * N * 2 * F, 1);
    bc->silu_mul(kc, gu_hc, act_hc, N, F);
    bg->silu_mul(kg, gu_dg, act_dg, N, F);
    CMP("silu_mul", act_hc, act_dg, 2 * N * F, 0);
    bc->gemm_bf16(kc, act_hc, wc->wdown, x_hc, N, H, F, 1);
    bg->gemm_bf16(kg, act_dg, wg->wdown, x_dg, N, H, F, 1);
    CMP("down gemm+res", x_hc, x_dg, sizeof(float) * N * H, 1);
    }
    fprintf(stderr, "ops of every layer: worst normalised error %.3e, worst bf16 mismatch %.3e\n",
            worst[0], worst[1]);
#undef CMP
#undef CARVE
    free(back);
    free(hc);
    free(hg);
    mem_free(MEM_DEVICE, dg, bytes);
    mem_free(MEM_DEVICE, d_i, sizeof(int32_t) * 4 * N);
    side_close(&cpu);
    side_close(&gpu);
}

static void test_teacher_forced(void)
{
    enum { N = 3 };
    const int prompt[N] = {100, 37, 1};
    const int V = model_config_find("tiny")->vocab;
    struct side cpu, gpu;
    EXPECT_EQ_INT(side_open(&cpu, "cpu", N, prompt, 0), 0);
    EXPECT_EQ_INT(side_open(&gpu, "cuda", N, prompt, 0), 0);
    static float lc[N * 1024], lg[N * 1024];
    struct batch_entry en[N];
    for (int b = 0; b < N; b++)
        en[b] = (struct batch_entry){b, b, prompt[b], prompt[b] + OUT_LEN,
                                     engine_first_token(cpu.e, b)};
    double worst = 0.0;
    int agree = 0, ties = 0, hard = 0;
    for (int t = 0; t < OUT_LEN; t++) {
        engine_step(cpu.e, cpu.bt, cpu.kv);
        engine_step(gpu.e, gpu.bt, gpu.kv);
        batch_read_logits(cpu.e, cpu.bt, lc);
        batch_read_logits(gpu.e, gpu.bt, lg);
        for (int b = 0; b < N; b++) {
            const float *c = lc + (size_t)b * V, *g = lg + (size_t)b * V;
            double err = norm_err(g, c, (size_t)V);
            if (t == 0 || t == 1 || t == 8 || t == OUT_LEN - 1)
                fprintf(stderr, "step %d entry %d: normalised logit error %.3e\n", t, b, err);
            worst = fmax(worst, err);
            int tc = argmax_row(c, V), tg = argmax_row(g, V);
            if (tc == tg) {
                agree++;
            } else if (c[tc] - c[tg] < TIE_GAP) {
                ties++;
                fprintf(stderr, "step %d entry %d: near-tie %d vs %d, cpu gap %.2e\n", t, b, tc,
                        tg, c[tc] - c[tg]);
            } else {
                hard++;
                fprintf(stderr, "step %d entry %d: cpu %d, gpu %d, cpu gap %.3e\n", t, b, tc, tg,
                        c[tc] - c[tg]);
            }
            en[b].pos++;
            en[b].token = tc; /* both sides consume the CPU's token */
        }
        if (t + 1 < OUT_LEN) {
            batch_set(cpu.e, cpu.bt, cpu.kv, en, N);
            batch_set(gpu.e, gpu.bt, gpu.kv, en, N);
        }
    }
    fprintf(stderr, "teacher-forced: %d of %d tokens agree, %d near-ties, %d disagreements, "
                    "worst normalised logit error %.3e\n",
            agree, N * OUT_LEN, ties, hard, worst);
    EXPECT_EQ_INT(hard, 0);
    EXPECT(ties <= 2);
    EXPECT(worst < 1e-2);
    side_close(&cpu);
    side_close(&gpu);
}

static int serve_on(const char *be_name, const char *spec, int max_batch, int graph,
                    struct workload *w, struct serve_counters *ctr)
{
    char err[256];
    const struct model_config *c = model_config_find("tiny");
    const struct backend *be = backend_find(be_name);
    if (workload_create(w, spec, OUT_LEN, 1, err, sizeof err) != 0) return -1;
    int max_tokens = workload_max_tokens(w);
    struct engine_params p = {c, be, 1, max_batch, max_tokens, graph};
    struct engine *e = engine_create(&p, err, sizeof err);
    if (!e) {
        fprintf(stderr, "%s: %s\n", be_name, err);
        return -1;
    }
    struct kv_cache_params kp = {c->n_layers, c->n_kv_heads, c->head_dim, 16, 1u << 24, max_batch,
                                 max_tokens};
    struct kv_cache *kv = kv_cache_create(&kp, be, engine_ctx(e), err, sizeof err);
    double wall;
    int rc = serve_run(e, kv, policy_find("vanilla"), w->reqs, w->n, max_batch, ctr, &wall, err,
                       sizeof err);
    if (rc) fprintf(stderr, "%s: %s\n", be_name, err);
    EXPECT_EQ_INT(kv_cache_check(kv, err, sizeof err), 0);
    kv_cache_free(kv);
    engine_free(e);
    return rc;
}

static void test_free_running(void)
{
    const char *specs[] = {"lengths:100,37,1", "lengths:300,17,64,5,250"};
    int batches[] = {8, 2}, graphs[] = {1, 0};
    for (int s = 0; s < 2; s++) {
        struct workload wc, wg;
        struct serve_counters cc, cg;
        EXPECT_EQ_INT(serve_on("cpu", specs[s], batches[s], 0, &wc, &cc), 0);
        EXPECT_EQ_INT(serve_on("cuda", specs[s], batches[s], graphs[s], &wg, &cg), 0);
        int same = 0, prefix_total = 0;
        for (int i = 0; i < wc.n; i++) {
            int t = 0;
            while (t < OUT_LEN && wc.reqs[i].tokens[t] == wg.reqs[i].tokens[t]) t++;
            same += t == OUT_LEN;
            prefix_total += t;
        }
        fprintf(stderr, "free-running %s (graph %d): %d of %d requests identical for all %d "
                        "tokens; %d of %d tokens before the first divergence\n",
                specs[s], graphs[s], same, wc.n, OUT_LEN, prefix_total, wc.n * OUT_LEN);
        /* a divergence can only start at a near-tie (asserted above); most requests match */
        EXPECT(2 * same >= wc.n);
        EXPECT_EQ_INT(cg.step_alloc_calls, 0);
        EXPECT_EQ_INT(cg.steps, cc.steps);
        workload_free(&wc);
        workload_free(&wg);
    }
}

int main(void)
{
    if (!backend_cuda_available()) {
        fprintf(stderr, "test_decode_gpu: no GPU, skipped\n");
        return 77;
    }
    test_ops_by_layer();
    test_layerwise();
    test_teacher_forced();
    test_free_running();
    return tu_finish("test_decode_gpu");
}
