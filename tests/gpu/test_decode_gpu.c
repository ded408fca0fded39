/* The tiny model on CUDA against the CPU reference, same seed and prompts:
 * 1. teacher-forced: both backends consume the CPU's tokens for 64 steps; the normalised logit
 *    error stays small and the greedy tokens agree at every step except where the CPU's top two
 *    logits are a near-tie (gap under TIE_GAP), which the bf16 roundings of the two backends may
 *    legitimately order differently; such steps are counted and printed;
 * 2. free-running with continuous batching (with and without CUDA graphs): how long the
 *    sequences stay identical is reported; the CUDA step allocates nothing, and the device page
 *    tables pass kv_cache_check;
 * 3. layer by layer and op by op, every op of every layer agrees to fp32 rounding when fed the
 *    same inputs. Exit 77 without a GPU. */
#include <math.h>
#include <string.h>

#include "backend.h"
#include "baselines/registry.h"
#include "common.h"
#include "engine.h"
#include "mem.h"
#include "serve.h"
#include "testutil.h"
#include "workloads/workload.h"

#define OUT_LEN 64
/* The tiny model's logits spread over ~N(0, 1); the two backends' logits differ by a few 1e-3
 * (normalised), the floor of bf16 rounding flips; a step whose CPU top-two gap is under
 * TIE_GAP (about 4 sigma of that noise) may be ordered differently. */
#define TIE_GAP 2e-2f

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
    struct engine_params p = {
        .cfg = c, .be = be, .seed = 1, .max_batch = n, .max_tokens = 512, .use_graph = graph};
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
 * after every layer agree to fp32 rounding plus the bf16 rounding flips that fp32 differences
 * trigger (each flips one element by 2^-8, and the random tiny model carries them on). */
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
        /* fp32 rounding only until the first bf16 rounding flip; after that the flips grow to
         * a floor of a few 1e-3 (measured the same with the CPU reference under 1e-6 relative
         * noise on its GEMM outputs: 1e-6, 1.3e-4, 1.4e-3, 2.0e-3 after layers 0..3) */
        EXPECT(err < (l <= 1 ? 1e-5 : 1e-2));
    }
    side_close(&cpu);
    side_close(&gpu);
}

/* Compares n elements of a GPU buffer with the CPU's (fp32: normalised error; bf16: fraction
 * of differing values), then makes the GPU's equal to the CPU's, so the next op of both
 * backends starts from the same input. Returns the error. */
static double cmp_sync(const struct kctx *kg, const void *h, void *d, size_t n, int is_f32,
                       void *scratch)
{
    const struct backend *bg = backend_find("cuda");
    size_t bytes = n * (is_f32 ? 4 : 2);
    bg->download(kg, scratch, d, bytes);
    double e = 0;
    if (is_f32) {
        e = norm_err(scratch, h, n);
    } else {
        size_t diff = 0;
        for (size_t i = 0; i < n; i++)
            diff += ((uint16_t *)scratch)[i] != ((const uint16_t *)h)[i];
        e = (double)diff / (double)n;
    }
    bg->upload(kg, d, h, bytes);
    return e;
}

/* Buffers of one layer's intermediate values on one backend. */
struct layer_bufs {
    float *x, *qkv, *gu;
    uint16_t *xn, *q, *at, *act;
};

static void carve_bufs(struct layer_bufs *L, char *base, int n, const struct model_config *c)
{
    int H = c->hidden, QKV = model_qkv_dim(c), QD = c->n_heads * c->head_dim, F = c->ffn;
    L->x = (float *)base;
    L->qkv = L->x + n * H;
    L->gu = L->qkv + n * QKV;
    L->xn = (uint16_t *)(L->gu + n * 2 * F);
    L->q = L->xn + n * H;
    L->at = L->q + n * QD;
    L->act = L->at + n * QD;
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
    const int H = c->hidden, QKV = model_qkv_dim(c), QD = c->n_heads * c->head_dim, F = c->ffn;
    const float scale = 1.0f / sqrtf((float)c->head_dim);
    size_t bytes = sizeof(float) * N * (H + QKV + 2 * F) + 2 * N * (H + 2 * QD + F);
    char *hmem = malloc(bytes), *scratch = malloc(bytes),
         *dmem = mem_alloc(MEM_DEVICE, bytes, "ops");
    struct layer_bufs h, d;
    carve_bufs(&h, hmem, N, c);
    carve_bufs(&d, dmem, N, c);
    int32_t hi[4 * N], *di = mem_alloc(MEM_DEVICE, sizeof hi, "ints"); /* tok, pos, len, start */
    for (int b = 0; b < N; b++) {
        hi[b] = engine_first_token(cpu.e, b);
        hi[N + b] = prompt[b];
        hi[2 * N + b] = prompt[b] + 1;
    }
    double worst[2] = {0, 0}; /* bf16 mismatch fraction, fp32 normalised error */
    const char *where = "";
    int wl = -1;
    bc->embed(kc, hi, engine_model(cpu.e)->embed, h.x, N, H, engine_model(cpu.e)->embed_scale);
    for (int l = 0; l < c->n_layers; l++) {
        const struct layer_weights *wc = &engine_model(cpu.e)->layers[l];
        const struct layer_weights *wg = &engine_model(gpu.e)->layers[l];
        for (int b = 0; b < N; b++)
            hi[3 * N + b] = kv_cache_row(cpu.kv, b, l);
        bg->upload(kg, di, hi, sizeof hi);
        bg->upload(kg, d.x, h.x, sizeof(float) * N * H);
        struct kv_view vc = kv_cache_view(cpu.kv, hi + 3 * N),
                       vg = kv_cache_view(gpu.kv, di + 3 * N);
        double e[9];
        bc->rmsnorm(kc, h.x, wc->attn_norm, h.xn, N, H, c->norm_eps);
        bg->rmsnorm(kg, d.x, wg->attn_norm, d.xn, N, H, c->norm_eps);
        e[0] = cmp_sync(kg, h.xn, d.xn, (size_t)N * H, 0, scratch);
        bc->gemm_bf16(kc, h.xn, wc->wqkv, h.qkv, N, QKV, H, 0);
        bg->gemm_bf16(kg, d.xn, wg->wqkv, d.qkv, N, QKV, H, 0);
        e[1] = cmp_sync(kg, h.qkv, d.qkv, (size_t)N * QKV, 1, scratch);
        bc->qk_norm_rope_append(kc, h.qkv, wc->q_norm, wc->k_norm, h.q, &vc, hi + N, N, c->n_heads,
                                wc->rope_inv_freq, c->norm_eps);
        bg->qk_norm_rope_append(kg, d.qkv, wg->q_norm, wg->k_norm, d.q, &vg, di + N, N, c->n_heads,
                                wg->rope_inv_freq, c->norm_eps);
        e[2] = cmp_sync(kg, h.q, d.q, (size_t)N * QD, 0, scratch);
        bc->attn_decode(kc, h.q, &vc, hi + 2 * N, h.at, N, c->n_heads, 512, scale);
        bg->attn_decode(kg, d.q, &vg, di + 2 * N, d.at, N, c->n_heads, 512, scale);
        e[3] = cmp_sync(kg, h.at, d.at, (size_t)N * QD, 0, scratch);
        bc->gemm_bf16(kc, h.at, wc->wo, h.x, N, H, QD, 1);
        bg->gemm_bf16(kg, d.at, wg->wo, d.x, N, H, QD, 1);
        e[4] = cmp_sync(kg, h.x, d.x, (size_t)N * H, 1, scratch);
        bc->rmsnorm(kc, h.x, wc->mlp_norm, h.xn, N, H, c->norm_eps);
        bg->rmsnorm(kg, d.x, wg->mlp_norm, d.xn, N, H, c->norm_eps);
        e[5] = cmp_sync(kg, h.xn, d.xn, (size_t)N * H, 0, scratch);
        bc->gemm_bf16(kc, h.xn, wc->wgu, h.gu, N, 2 * F, H, 0);
        bg->gemm_bf16(kg, d.xn, wg->wgu, d.gu, N, 2 * F, H, 0);
        e[6] = cmp_sync(kg, h.gu, d.gu, (size_t)N * 2 * F, 1, scratch);
        bc->silu_mul(kc, h.gu, h.act, N, F);
        bg->silu_mul(kg, d.gu, d.act, N, F);
        e[7] = cmp_sync(kg, h.act, d.act, (size_t)N * F, 0, scratch);
        bc->gemm_bf16(kc, h.act, wc->wdown, h.x, N, H, F, 1);
        bg->gemm_bf16(kg, d.act, wg->wdown, d.x, N, H, F, 1);
        e[8] = cmp_sync(kg, h.x, d.x, (size_t)N * H, 1, scratch);
        static const char *names[9] = {"rmsnorm",      "qkv gemm", "qk_norm_rope",
                                       "attention",    "o gemm",   "mlp rmsnorm",
                                       "gate/up gemm", "silu_mul", "down gemm"};
        static const int is_f32[9] = {0, 1, 0, 0, 1, 0, 1, 0, 1};
        for (int i = 0; i < 9; i++) {
            EXPECT(e[i] < (is_f32[i] ? 1e-5 : 1e-2));
            if (e[i] > worst[is_f32[i]]) {
                worst[is_f32[i]] = e[i];
                if (is_f32[i]) where = names[i], wl = l;
            }
        }
    }
    fprintf(stderr,
            "ops of every layer, same inputs: worst fp32 normalised error %.3e (layer %d "
            "%s), worst fraction of differing bf16 values %.3e\n",
            worst[1], wl, where, worst[0]);
    free(hmem);
    free(scratch);
    mem_free(MEM_DEVICE, dmem, bytes);
    mem_free(MEM_DEVICE, di, sizeof hi);
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
    const int steps = tu_quick() ? 8 : OUT_LEN;
    for (int t = 0; t < steps; t++) {
        engine_step(cpu.e, cpu.bt, cpu.kv);
        engine_step(gpu.e, gpu.bt, gpu.kv);
        batch_read_logits(cpu.e, cpu.bt, lc);
        batch_read_logits(gpu.e, gpu.bt, lg);
        for (int b = 0; b < N; b++) {
            const float *c = lc + (size_t)b * V, *g = lg + (size_t)b * V;
            double err = norm_err(g, c, (size_t)V);
            if (t == 0 || t == 1 || t == 8 || t == steps - 1)
                fprintf(stderr, "step %d entry %d: normalised logit error %.3e\n", t, b, err);
            worst = fmax(worst, err);
            int tc = argmax_row(c, V), tg = argmax_row(g, V);
            if (tc == tg) {
                agree++;
            } else if (c[tc] - c[tg] < TIE_GAP) {
                ties++;
                fprintf(stderr, "step %d entry %d: near-tie %d vs %d, cpu gap %.2e\n", t, b, tc, tg,
                        c[tc] - c[tg]);
            } else {
                hard++;
                fprintf(stderr, "step %d entry %d: cpu %d, gpu %d, cpu gap %.3e\n", t, b, tc, tg,
                        c[tc] - c[tg]);
            }
            en[b].pos++;
            en[b].token = tc; /* both sides consume the CPU's token */
        }
        if (t + 1 < steps) {
            batch_set(cpu.e, cpu.bt, cpu.kv, en, N);
            batch_set(gpu.e, gpu.bt, gpu.kv, en, N);
        }
    }
    fprintf(stderr,
            "teacher-forced: %d of %d tokens agree, %d near-ties, %d disagreements, "
            "worst normalised logit error %.3e\n",
            agree, N * steps, ties, hard, worst);
    EXPECT_EQ_INT(hard, 0);
    EXPECT(ties <= N * OUT_LEN / 20);
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
    struct engine_params p = {.cfg = c,
                              .be = be,
                              .seed = 1,
                              .max_batch = max_batch,
                              .max_tokens = max_tokens,
                              .use_graph = graph};
    struct engine *e = engine_create(&p, err, sizeof err);
    if (!e) {
        fprintf(stderr, "%s: %s\n", be_name, err);
        return -1;
    }
    struct kv_cache_params kp = {c->n_layers, c->n_kv_heads, c->head_dim, 16,
                                 1u << 24,    max_batch,     max_tokens};
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
            while (t < OUT_LEN && wc.reqs[i].tokens[t] == wg.reqs[i].tokens[t])
                t++;
            same += t == OUT_LEN;
            prefix_total += t;
        }
        fprintf(stderr,
                "free-running %s (graph %d): %d of %d requests identical for all %d "
                "tokens; %d of %d tokens before the first divergence\n",
                specs[s], graphs[s], same, wc.n, OUT_LEN, prefix_total, wc.n * OUT_LEN);
        /* free-running sequences part at the first near-tie (teacher-forced test above); the
         * numbers are reported, the step counts and allocation must match */
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
    if (!tu_quick()) test_free_running(); /* (quick: the serving loop runs in the offload test) */
    return tu_finish("test_decode_gpu");
}
