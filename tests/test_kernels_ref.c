/* The CPU references on hand-checkable cases: bf16 rounding, RMSNorm, GEMM, RoPE, paged GQA
 * attention, SiLU-mul, argmax, synthetic KV, random fill. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"
#include "model.h"
#include "numeric.h"
#include "testutil.h"

static const struct kctx C0;

static void test_bf16(void)
{
    EXPECT_EQ_INT(f32_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ_INT(f32_to_bf16(-2.0f), 0xc000);
    /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even gives 1 */
    EXPECT_EQ_INT(f32_to_bf16(1.0f + 1.0f / 256), 0x3f80);
    /* 1 + 3*2^-8 is halfway between 1+2^-7 (odd mantissa) and 1+2^-6: rounds up to even */
    EXPECT_EQ_INT(f32_to_bf16(1.0f + 3.0f / 256), 0x3f82);
    EXPECT(isnan(bf16_to_f32(f32_to_bf16(NAN))));
    EXPECT(isinf(bf16_to_f32(f32_to_bf16(INFINITY))));
    EXPECT_NEAR(bf16_to_f32(0x4049), 3.140625, 0); /* pi in bf16 */
}

static void test_rmsnorm(void)
{
    /* x = 1,2,3,4: mean square 7.5, so out = x / sqrt(7.5) * w */
    float x[8] = {1, 2, 3, 4, -2, -2, -2, -2};
    uint16_t w[4], out[8];
    for (int i = 0; i < 4; i++)
        w[i] = f32_to_bf16(i == 3 ? 0.5f : 1.0f);
    rmsnorm_ref(&C0, x, w, out, 2, 4, 0.0f);
    double r = sqrt(7.5);
    EXPECT_NEAR(bf16_to_f32(out[0]), 1 / r, 1 / r / 128);
    EXPECT_NEAR(bf16_to_f32(out[2]), 3 / r, 3 / r / 128);
    EXPECT_NEAR(bf16_to_f32(out[3]), 4 / r * 0.5, 2 / r / 128);
    /* second row: all -2, mean square 4: -1 each (the last scaled by 0.5) */
    EXPECT_NEAR(bf16_to_f32(out[4]), -1.0, 0);
    EXPECT_NEAR(bf16_to_f32(out[7]), -0.5, 0);
}

static void test_gemm(void)
{
    /* a = [[1,2],[3,4]], w = [[1,0],[0,1],[1,1]]: out = [[1,2,3],[3,4,7]] */
    float av[] = {1, 2, 3, 4}, wv[] = {1, 0, 0, 1, 1, 1};
    uint16_t a[4], w[6];
    for (int i = 0; i < 4; i++)
        a[i] = f32_to_bf16(av[i]);
    for (int i = 0; i < 6; i++)
        w[i] = f32_to_bf16(wv[i]);
    float out[6] = {10, 10, 10, 10, 10, 10};
    gemm_bf16_ref(&C0, a, w, out, 2, 3, 2, 0.0f);
    float want[] = {1, 2, 3, 3, 4, 7};
    for (int i = 0; i < 6; i++)
        EXPECT_NEAR(out[i], want[i], 0);
    gemm_bf16_ref(&C0, a, w, out, 2, 3, 2, 1.0f); /* residual add */
    for (int i = 0; i < 6; i++)
        EXPECT_NEAR(out[i], 2 * want[i], 0);
}

/* A paged view over `pool` with pages listed in page_ids. */
static struct kv_view view(uint16_t *pool, const int32_t *ids, const int32_t *start, int ps,
                           int nkv, int hd)
{
    struct kv_view v = {pool, ids, start, ps, nkv, hd, 0, 0, NULL, NULL};
    return v;
}

static void test_rope_append(void)
{
    /* nq=1, nkv=1, hd=4, no norms. q = [1,0,0,0] at pos 1: pair (0,2) angle 1, pair (1,3)
     * angle theta^(-1/2) = 0.01 for theta 10000. */
    float qkv[12] = {1, 0, 0, 0, /* k */ 0, 1, 0, 0, /* v */ 5, 6, 7, 8};
    uint16_t q[4], pool[2 * 2 * 2 * 4]; /* 2 pages of page_size 2, 1 head */
    for (size_t i = 0; i < PULSE_ARRAY_LEN(pool); i++)
        pool[i] = 0x7fc0; /* NaN marker */
    int32_t ids[2] = {1, 0}, start[1] = {0}, pos[1] = {1};
    struct kv_view v = view(pool, ids, start, 2, 1, 4);
    float inv_freq[2];
    model_rope_inv_freq_plain(10000.0f, 4, inv_freq);
    qk_norm_rope_append_ref(&C0, qkv, NULL, NULL, q, &v, pos, 1, 1, inv_freq, 1e-6f);
    EXPECT_NEAR(bf16_to_f32(q[0]), cos(1.0), 1.0 / 128);
    EXPECT_NEAR(bf16_to_f32(q[2]), sin(1.0), 1.0 / 128);
    EXPECT_NEAR(bf16_to_f32(q[1]), 0, 0);
    /* token 1 lives in page ids[0] = 1 at offset 1; page elems = 1*2*2*4 = 16 */
    uint16_t *k = pool + 16 + 1 * 4, *vv = pool + 16 + (2 + 1) * 4;
    EXPECT_NEAR(bf16_to_f32(k[1]), cos(0.01), 1.0 / 128);
    EXPECT_NEAR(bf16_to_f32(k[3]), sin(0.01), 1.0 / 128);
    EXPECT_NEAR(bf16_to_f32(vv[0]), 5, 0);
    EXPECT_NEAR(bf16_to_f32(vv[3]), 8, 0);
    EXPECT_EQ_INT(pool[0], 0x7fc0);  /* page 0 untouched */
    EXPECT_EQ_INT(pool[16], 0x7fc0); /* token 0 of page 1 untouched */
    /* QK-norm with unit weights: k = [0,3,0,4] normalises to rms 2.5 -> [0,1.2,0,1.6] at pos 0 */
    float qkv2[12] = {0, 0, 2, 0, 0, 3, 0, 4, 1, 1, 1, 1};
    uint16_t ones[4];
    for (int i = 0; i < 4; i++)
        ones[i] = f32_to_bf16(1.0f);
    int32_t pos0[1] = {0};
    qk_norm_rope_append_ref(&C0, qkv2, ones, ones, q, &v, pos0, 1, 1, inv_freq, 0.0f);
    uint16_t *k0 = pool + 16; /* token 0 -> page 1 offset 0 */
    EXPECT_NEAR(bf16_to_f32(k0[1]), 1.2, 1.2 / 128);
    EXPECT_NEAR(bf16_to_f32(k0[3]), 1.6, 1.6 / 128);
    EXPECT_NEAR(bf16_to_f32(q[2]), 2.0, 0); /* [0,0,2,0]: rms 1 */
}

/* The RoPE tables (model_rope_inv_freq): linear and llama3 scaling of the global layers, GGUF
 * frequency factors, plain local layers, the ranges model_config_validate refuses, and each
 * layer's table in a laid-out model. Hand values: head_dim 16, base 10000, llama3 with factor 8,
 * low 1, high 4 and an original length of 32: pair 0 (wavelength 2 pi < 32/4) is kept, pair 1
 * (wavelength 19.87) is smoothed with s = (32/19.87 - 1)/3 = 0.2035 to 0.09584, pairs 2.. (above
 * 32) are divided by 8. */
static void test_rope_tables(void)
{
    struct model_config c = *model_config_find("tiny");
    c.head_dim = 16, c.rope_theta = 10000.0f;
    float plain[8], got[8];
    model_rope_inv_freq_plain(10000.0f, 16, plain);
    EXPECT_NEAR(plain[0], 1.0, 0);
    EXPECT_NEAR(plain[2], 0.1, 1e-8);
    model_rope_inv_freq(&c, 0, got);
    EXPECT(memcmp(got, plain, sizeof got) == 0);
    c.rope = (struct rope_scaling){ROPE_LINEAR, 4.0f, 0, 0, 0, NULL};
    model_rope_inv_freq(&c, 1, got);
    for (int i = 0; i < 8; i++)
        EXPECT_NEAR(got[i], plain[i] / 4.0f, 0);
    c.rope = (struct rope_scaling){ROPE_LLAMA3, 8.0f, 1.0f, 4.0f, 32, NULL};
    model_rope_inv_freq(&c, 3, got);
    EXPECT_NEAR(got[0], plain[0], 0);
    EXPECT_NEAR(got[1], 0.0958400, 1e-6);
    for (int i = 2; i < 8; i++)
        EXPECT_NEAR(got[i], plain[i] / 8.0f, 0);
    char err[512] = "";
    EXPECT_EQ_INT(model_config_validate(&c, "cfg", err, sizeof err), PULSE_OK);
    const float factors[8] = {1, 2, 4, 8, 8, 8, 8, 8};
    c.rope = (struct rope_scaling){ROPE_DEFAULT, 0, 0, 0, 0, factors};
    model_rope_inv_freq(&c, 0, got);
    for (int i = 0; i < 8; i++)
        EXPECT_NEAR(got[i], plain[i] / factors[i], 0);
    /* local layers (layer 0 of 2 with pattern 2) rotate plainly with their own base */
    c.sliding_window = 8, c.sliding_pattern = 2, c.rope_theta_local = 100.0f;
    c.rope = (struct rope_scaling){ROPE_LINEAR, 4.0f, 0, 0, 0, NULL};
    float local[8];
    model_rope_inv_freq_plain(100.0f, 16, local);
    model_rope_inv_freq(&c, 0, got);
    EXPECT(memcmp(got, local, sizeof got) == 0);
    model_rope_inv_freq(&c, 1, got);
    EXPECT_NEAR(got[5], plain[5] / 4.0f, 0);
    /* refused ranges, each a one-line message naming the label */
    static const struct rope_scaling bad[] = {
        {ROPE_LINEAR, 0.0f, 0, 0, 0, NULL},        {ROPE_LINEAR, NAN, 0, 0, 0, NULL},
        {ROPE_LLAMA3, 8.0f, 4.0f, 4.0f, 32, NULL}, {ROPE_LLAMA3, 8.0f, 1.0f, 4.0f, 0, NULL},
        {ROPE_LLAMA3, 8.0f, 0.0f, 4.0f, 32, NULL}, {7, 1.0f, 0, 0, 0, NULL}};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(bad); i++) {
        c.rope = bad[i];
        err[0] = 0;
        EXPECT_EQ_INT(model_config_validate(&c, "cfg", err, sizeof err), PULSE_ERR_INVALID);
        EXPECT_STR_CONTAINS(err, "cfg: RoPE scaling ");
    }
    const float nan_factors[8] = {1, 1, 1, NAN, 1, 1, 1, 1};
    c.rope = (struct rope_scaling){ROPE_DEFAULT, 0, 0, 0, 0, nan_factors};
    EXPECT_EQ_INT(model_config_validate(&c, "cfg", err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "cfg: RoPE frequency factor 3 is nan");
    /* a laid-out model: each layer points at its kind's table */
    const struct model_config *g = model_config_find("tiny-gemma3");
    struct model m;
    EXPECT_EQ_INT(model_create(&m, g, backend_find("cpu"), &C0, 1), PULSE_OK);
    float want[64];
    for (int l = 0; l < g->n_layers; l++) {
        model_rope_inv_freq(g, l, want);
        EXPECT(memcmp(m.layers[l].rope_inv_freq, want, sizeof(float) * 64) == 0);
    }
    EXPECT(m.layers[0].rope_inv_freq != m.layers[2].rope_inv_freq); /* local vs global */
    model_free(&m);
}

static void test_attention(void)
{
    /* nq=2, nkv=1 (both q heads read head 0), hd=2, page_size 1, 2 tokens in pages 3 and 1.
     * q0 = [1,0], keys [0,0] and [1,0]: scores 0, 1 (scale 1) -> p = [1,e]/(1+e).
     * q1 = [0,0]: uniform -> mean of V. V = [2,4] and [6,8]. */
    uint16_t pool[4 * 2 * 2];
    for (size_t i = 0; i < PULSE_ARRAY_LEN(pool); i++)
        pool[i] = 0xffc0; /* NaN everywhere else */
    int32_t ids[2] = {3, 1}, start[1] = {0}, n[1] = {2};
    float kv0[2][2] = {{0, 0}, {2, 4}}, kv1[2][2] = {{1, 0}, {6, 8}};
    for (int d = 0; d < 2; d++) {
        pool[3 * 4 + d] = f32_to_bf16(kv0[0][d]);
        pool[3 * 4 + 2 + d] = f32_to_bf16(kv0[1][d]);
        pool[1 * 4 + d] = f32_to_bf16(kv1[0][d]);
        pool[1 * 4 + 2 + d] = f32_to_bf16(kv1[1][d]);
    }
    uint16_t q[4] = {f32_to_bf16(1), 0, 0, 0}, out[4];
    struct kv_view v = view(pool, ids, start, 1, 1, 2);
    attn_decode_ref(&C0, q, &v, n, out, 1, 2, 2, 1.0f);
    double e = exp(1.0), p0 = 1 / (1 + e), p1 = e / (1 + e);
    EXPECT_NEAR(bf16_to_f32(out[0]), 2 * p0 + 6 * p1, 0.05);
    EXPECT_NEAR(bf16_to_f32(out[1]), 4 * p0 + 8 * p1, 0.05);
    EXPECT_NEAR(bf16_to_f32(out[2]), 4, 0);
    EXPECT_NEAR(bf16_to_f32(out[3]), 6, 0);
    /* one token: output is its V whatever the query */
    n[0] = 1;
    attn_decode_ref(&C0, q, &v, n, out, 1, 2, 2, 1.0f);
    EXPECT_NEAR(bf16_to_f32(out[0]), 2, 0);
    EXPECT_NEAR(bf16_to_f32(out[3]), 4, 0);
    /* a sliding window of 1 over 2 tokens: only the last token, whatever the query */
    n[0] = 2;
    v.window = 1;
    attn_decode_ref(&C0, q, &v, n, out, 1, 2, 2, 1.0f);
    EXPECT_NEAR(bf16_to_f32(out[0]), 6, 0);
    EXPECT_NEAR(bf16_to_f32(out[1]), 8, 0);
    EXPECT_NEAR(bf16_to_f32(out[2]), 6, 0);
    v.window = 2; /* a window as long as the context changes nothing */
    attn_decode_ref(&C0, q, &v, n, out, 1, 2, 2, 1.0f);
    EXPECT_NEAR(bf16_to_f32(out[2]), 4, 0);
}

/* Gemma 3's pieces: tanh-GELU gating, the fused post-norm + residual add, embedding scale. */
static void test_gemma_kernels(void)
{
    float gu[4] = {1, -2, 3, 0.5f}; /* ffn 2: gates 1, -2; ups 3, 0.5 */
    uint16_t out[2];
    gelu_mul_ref(&C0, gu, out, 1, 2);
    /* gelu_tanh(1) = 0.841192, gelu_tanh(-2) = -0.045402 */
    EXPECT_NEAR(bf16_to_f32(out[0]), 0.841192 * 3, 2.6 / 128);
    EXPECT_NEAR(bf16_to_f32(out[1]), -0.045402 * 0.5, 0.023 / 128);
    /* x += y / rms(y) * w: y = [3, 4] has rms sqrt(12.5) */
    float x[2] = {1, -1}, y[2] = {3, 4};
    uint16_t w[2] = {f32_to_bf16(2.0f), f32_to_bf16(0.5f)};
    rmsnorm_add_ref(&C0, x, y, w, 1, 2, 0.0f);
    EXPECT_NEAR(x[0], 1 + 3 / sqrt(12.5) * 2, 1e-6);
    EXPECT_NEAR(x[1], -1 + 4 / sqrt(12.5) * 0.5, 1e-6);
    uint16_t table[4] = {f32_to_bf16(1.5f), f32_to_bf16(-2.0f), f32_to_bf16(0.25f),
                         f32_to_bf16(4.0f)};
    int32_t tok[1] = {1};
    float e[2];
    embed_ref(&C0, tok, table, e, 1, 2, 25.298221f);
    EXPECT_NEAR(e[0], 0.25 * 25.298221, 1e-5);
    EXPECT_NEAR(e[1], 4.0 * 25.298221, 1e-4);
}

static void test_silu_argmax(void)
{
    float gu[4] = {0, 1, 3, 2}; /* ffn 2: gates 0,1; ups 3,2 */
    uint16_t out[2];
    silu_mul_ref(&C0, gu, out, 1, 2);
    EXPECT_NEAR(bf16_to_f32(out[0]), 0, 0);
    EXPECT_NEAR(bf16_to_f32(out[1]), 2 / (1 + exp(-1.0)), 0.01);
    float lg[8] = {1, 5, 5, 2, NAN, -1, -3, -1};
    int32_t idx[2];
    argmax_ref(&C0, lg, idx, 2, 4);
    EXPECT_EQ_INT(idx[0], 1); /* tie between 1 and 2 goes to 1 */
    EXPECT_EQ_INT(idx[1], 1); /* NaN never wins; tie -1/-1 goes to the lower index */
}

static void test_synthetic_fill(void)
{
    /* nkv=2, hd=4, page_size 3, 5 tokens over pages {2,0}: element e of token t equals
     * pulse_uniform(mix(seed, req, layer), t*16 + e). */
    enum { PS = 3, NKV = 2, HD = 4, PE = NKV * 2 * PS * HD };
    uint16_t pool[3 * PE];
    memset(pool, 0xab, sizeof pool);
    int32_t ids[2] = {2, 0}, start[1] = {0}, n[1] = {5}, req[1] = {7};
    struct kv_view v = view(pool, ids, start, PS, NKV, HD);
    kv_fill_synthetic_ref(&C0, &v, n, req, 1, 3, 42, 6);
    uint64_t s = pulse_seed_mix(42, 7, 3);
    /* token 4, head 1, V, dim 2: page ids[1]=0, offset 1 */
    uint16_t got = pool[0 * PE + ((1 * 2 + 1) * PS + 1) * HD + 2];
    EXPECT_EQ_INT(got, f32_to_bf16(pulse_uniform(s, 4 * 16 + (1 * 2 + 1) * 4 + 2)));
    got = pool[2 * PE + ((0 * 2 + 0) * PS + 0) * HD + 0];
    EXPECT_EQ_INT(got, f32_to_bf16(pulse_uniform(s, 0)));
    /* token slot 5 (page 0 offset 2) and page 1 are untouched */
    EXPECT_EQ_INT(pool[0 * PE + ((0 * 2 + 0) * PS + 2) * HD], 0xabab);
    EXPECT_EQ_INT(pool[1 * PE + 5], 0xabab);
}

static void test_fill_random(void)
{
    uint16_t a[1000], b[1000];
    fill_random_bf16_ref(&C0, a, 1000, 5, 0.5f, 1.0f);
    fill_random_bf16_ref(&C0, b, 1000, 5, 0.5f, 1.0f);
    EXPECT(memcmp(a, b, sizeof a) == 0);
    double lo = 9, hi = -9, sum = 0;
    for (int i = 0; i < 1000; i++) {
        double x = bf16_to_f32(a[i]);
        lo = x < lo ? x : lo;
        hi = x > hi ? x : hi;
        sum += x;
    }
    EXPECT(lo >= 0.5 && hi <= 1.5 && hi - lo > 0.9);
    EXPECT_NEAR(sum / 1000, 1.0, 0.05);
    fill_random_bf16_ref(&C0, b, 1000, 6, 0.5f, 1.0f);
    EXPECT(memcmp(a, b, sizeof a) != 0);
    int32_t pos[3] = {0, 5, -1};
    advance_pos_ref(&C0, pos, 2);
    EXPECT(pos[0] == 1 && pos[1] == 6 && pos[2] == -1);
}

int main(void)
{
    test_bf16();
    test_rmsnorm();
    test_gemm();
    test_rope_append();
    test_rope_tables();
    test_attention();
    test_silu_argmax();
    test_gemma_kernels();
    test_synthetic_fill();
    test_fill_random();
    return tu_finish("test_kernels_ref");
}
