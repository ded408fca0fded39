/* The accuracy path on the CPU backend with the built-in tiny models (random weights):
 * - the chunked prefill gives bit-identical logits to feeding the prompt through the decode
 *   step one token at a time (llama layout and the Gemma 3 layout with local layers);
 * - the sliding window of Gemma 3's local layers changes the result once the context passes it;
 * - sparse attention (accuracy/sparse_attn.h) whose budget covers the context leaves every
 *   logit unchanged; with a small budget every policy attends fewer tokens than it sees and its
 *   lists are valid (ascending, forced blocks present);
 * - on one KV head (tiny-gemma3) and on GQA (tiny: 2 KV heads of 2 query heads), every policy
 *   of sparse_attn.h makes its lists at its granularity (per KV head, per query head, one);
 * - the MAM (accuracy/head_mass.h) over KV heads and over query heads is 1 when the budget
 *   covers the context and in (0, 1] otherwise; its selectors are the arg max / arg min. */
#include <math.h>
#include <string.h>

#include "accuracy/head_mass.h"
#include "accuracy/serve_path.h"
#include "accuracy/sparse_attn.h"
#include "backend.h"
#include "baselines/registry.h"
#include "engine.h"
#include "mem.h"
#include "numeric.h"
#include "testutil.h"

#define T_MAX 320

struct rig {
    const struct model_config *c;
    struct engine *e;
    struct kv_cache *kv;
    struct batch *bt;
    int slot;
};

static int rig_open(struct rig *r, const struct model_config *c, int chunk)
{
    char err[256];
    memset(r, 0, sizeof *r);
    r->c = c;
    /* seed 1: with seed 7 the random tiny-gemma3 decodes full attention's tokens at budget 32
     * on every prompt of test_serve_path, which could then not tell that the serving path's
     * equality with the accuracy path depends on the selection */
    struct engine_params p = {
        .cfg = c, .be = backend_find("cpu"), .seed = 1, .max_batch = chunk, .max_tokens = T_MAX};
    if (!(r->e = engine_create(&p, err, sizeof err))) return fprintf(stderr, "%s\n", err), -1;
    struct kv_cache_params kp = {c->n_layers, c->n_kv_heads, c->head_dim, 16, 0, 1, T_MAX};
    kp.budget_bytes = kv_cache_params_request_bytes(&kp, T_MAX);
    r->kv = kv_cache_create(&kp, backend_find("cpu"), engine_ctx(r->e), err, sizeof err);
    r->bt = batch_create(r->e);
    if (!r->kv || !r->bt || kv_cache_admit(r->kv, T_MAX, &r->slot) != PULSE_OK) return -1;
    return 0;
}

static void rig_close(struct rig *r)
{
    if (r->e) batch_free(r->e, r->bt);
    kv_cache_free(r->kv);
    engine_free(r->e);
}

static int32_t prompt_token(const struct model_config *c, int t)
{
    return (int32_t)(pulse_hash64(99, (uint64_t)t) % (uint64_t)c->vocab);
}

/* Prefill of n prompt tokens in chunks of the engine's batch; returns the next token. */
static int32_t prefill(struct rig *r, int n, int chunk)
{
    struct batch_entry en[64];
    int32_t tok[64];
    for (int c0 = 0; c0 < n; c0 += chunk) {
        int m = PULSE_MIN(chunk, n - c0);
        for (int i = 0; i < m; i++)
            en[i] = (struct batch_entry){r->slot, 0, c0 + i, T_MAX, prompt_token(r->c, c0 + i)};
        batch_set(r->e, r->bt, r->kv, en, m);
        engine_prefill(r->e, r->bt, r->kv);
    }
    batch_read_tokens(r->e, r->bt, tok);
    return tok[0];
}

static int32_t step(struct rig *r, int pos, int32_t token, float *logits)
{
    struct batch_entry en = {r->slot, 0, pos, T_MAX, token};
    batch_set(r->e, r->bt, r->kv, &en, 1);
    engine_step(r->e, r->bt, r->kv);
    int32_t next;
    batch_read_tokens(r->e, r->bt, &next);
    if (logits) engine_read_logits(r->e, logits, 1);
    return next;
}

/* Prefill (chunk 16) vs the prompt one token per decode step: the same logits, bit for bit. */
static void test_prefill_matches_steps(const char *model, int n)
{
    const struct model_config *c = model_config_find(model);
    struct rig a, b;
    EXPECT_EQ_INT(rig_open(&a, c, 16), 0);
    EXPECT_EQ_INT(rig_open(&b, c, 1), 0);
    float *la = malloc(sizeof(float) * c->vocab), *lb = malloc(sizeof(float) * c->vocab);
    int32_t ta = prefill(&a, n, 16);
    engine_read_logits(a.e, la, 1);
    int32_t tb = 0;
    for (int t = 0; t < n; t++)
        tb = step(&b, t, prompt_token(c, t), lb);
    EXPECT_EQ_INT(ta, tb);
    EXPECT(memcmp(la, lb, sizeof(float) * c->vocab) == 0);
    /* and the decode continues identically from either cache */
    for (int k = 0; k < 8; k++) {
        ta = step(&a, n + k, ta, la);
        tb = step(&b, n + k, tb, lb);
        EXPECT_EQ_INT(ta, tb);
    }
    EXPECT(memcmp(la, lb, sizeof(float) * c->vocab) == 0);
    fprintf(stderr, "%s: prefill of %d tokens == %d decode steps (logits bit-identical)\n", model,
            n, n);
    free(la);
    free(lb);
    rig_close(&a);
    rig_close(&b);
}

/* tiny-gemma3's local layers see 24 tokens: at 20 tokens the window changes nothing, at 100 the
 * logits must differ from the same model with every layer global. */
static void test_window_matters(void)
{
    struct model_config all = *model_config_find("tiny-gemma3");
    all.sliding_window = 1 << 20; /* local layers (same RoPE base) that see everything */
    for (int n = 20; n <= 100; n += 80) {
        struct rig a, b;
        EXPECT_EQ_INT(rig_open(&a, model_config_find("tiny-gemma3"), 16), 0);
        EXPECT_EQ_INT(rig_open(&b, &all, 16), 0);
        float *la = malloc(sizeof(float) * all.vocab), *lb = malloc(sizeof(float) * all.vocab);
        prefill(&a, n, 16);
        prefill(&b, n, 16);
        engine_read_logits(a.e, la, 1);
        engine_read_logits(b.e, lb, 1);
        int same = memcmp(la, lb, sizeof(float) * all.vocab) == 0;
        EXPECT_EQ_INT(same, n <= 24);
        free(la);
        free(lb);
        rig_close(&a);
        rig_close(&b);
    }
}

struct list_check {
    int lists, bad, sink, window;
};

static void check_list(void *user, int layer, int list, const int32_t *blocks, int count,
                       int n_tokens)
{
    struct list_check *lc = user;
    int nb = PULSE_CEIL_DIV(n_tokens, 16);
    (void)layer, (void)list;
    lc->lists++;
    for (int i = 1; i < count; i++)
        if (blocks[i] <= blocks[i - 1]) lc->bad++;
    if (blocks[0] != 0 || blocks[count - 1] != nb - 1) lc->bad++; /* sink and tail */
    for (int w = 1; w <= lc->window; w++) {                       /* the window before the tail */
        int found = 0;
        for (int i = 0; i < count; i++)
            found |= blocks[i] == nb - 1 - w;
        lc->bad += !found;
    }
}

/* Decodes 12 steps after a prompt of n tokens with the hook of policy p at `budget` (and the
 * speculation measured at `margin`); returns the stats, the logits of the last step in out and,
 * when layer_hit is not NULL, each layer's speculation hits in it. */
static int g_spec_from = SPARSE_SPEC_INPUT; /* run_policy_margin's sparse_params.spec_from */

static struct sparse_stats run_policy_margin(const char *model, int n, int policy, int budget,
                                             const int32_t *selector, double margin, float *out,
                                             struct list_check *lc, int64_t *layer_hit)
{
    const struct model_config *c = model_config_find(model);
    struct rig r;
    char err[256] = "";
    EXPECT_EQ_INT(rig_open(&r, c, 16), 0);
    struct sparse_attn *s = sparse_attn_create(r.e, r.kv, 16, T_MAX, 0.5, err, sizeof err);
    EXPECT(s != NULL);
    struct sparse_stats st = {0};
    if (!s) return st;
    struct sparse_params sp = {policy, budget, 1, 2, selector, margin, g_spec_from};
    EXPECT_EQ_INT(sparse_attn_configure(s, &sp, r.slot, err, sizeof err), PULSE_OK);
    if (lc) sparse_attn_set_list_observer(s, check_list, lc);
    int32_t tok = prefill(&r, n, 16);
    struct engine_layer_hook h = sparse_attn_hook(s);
    batch_set_hook(r.bt, policy == SPARSE_FULL ? NULL : &h);
    for (int k = 0; k < 12; k++)
        tok = step(&r, n + k, tok, out);
    batch_set_hook(r.bt, NULL);
    sparse_attn_get_stats(s, &st);
    for (int l = 0; layer_hit && l < c->n_layers; l++) {
        int64_t e;
        sparse_attn_layer_spec(s, l, &e, &layer_hit[l]);
    }
    sparse_attn_free(s);
    rig_close(&r);
    return st;
}

static struct sparse_stats run_policy(const char *model, int n, int policy, int budget,
                                      const int32_t *selector, float *out, struct list_check *lc)
{
    return run_policy_margin(model, n, policy, budget, selector, 0.0, out, lc, NULL);
}

/* The selector array of policy p on model c: KV head 1 (or 0 on one KV head), query head 1. */
static const int32_t *selector_for(int p, const struct model_config *c)
{
    static int32_t kv[16], qh[16];
    for (int l = 0; l < 16; l++) {
        kv[l] = c->n_kv_heads > 1 ? 1 : 0;
        qh[l] = 1;
    }
    int kind = sparse_policy_selector_kind(p);
    return kind == SPARSE_SEL_KV ? kv : kind == SPARSE_SEL_QUERY ? qh : NULL;
}

/* Every policy on one model: a covering budget leaves the logits exactly dense; a small one
 * attends less, with the policy's list count per layer and valid lists. */
static void sparse_on(const char *model)
{
    const struct model_config *c = model_config_find(model);
    float *dense = malloc(sizeof(float) * c->vocab), *l = malloc(sizeof(float) * c->vocab);
    run_policy(model, 200, SPARSE_FULL, 0, NULL, dense, NULL);
    int64_t attended[SPARSE_POLICY_COUNT] = {0};
    for (int p = SPARSE_FULL + 1; p < SPARSE_POLICY_COUNT; p++) {
        struct sparse_stats st = run_policy(model, 200, p, 256, selector_for(p, c), l, NULL);
        EXPECT_EQ_INT(st.sparse_calls, 0);
        EXPECT_EQ_INT(st.dense_calls, 12 * model_n_global_layers(c));
        EXPECT(memcmp(l, dense, sizeof(float) * c->vocab) == 0);
    }
    for (int p = SPARSE_FULL + 1; p < SPARSE_POLICY_COUNT; p++) {
        struct list_check lc = {0, 0, 1, 2};
        struct sparse_stats st = run_policy(model, 200, p, 32, selector_for(p, c), l, &lc);
        EXPECT_EQ_INT(sparse_policy_lists(p, c->n_heads, c->n_kv_heads),
                      p == SPARSE_HEADWISE || p == SPARSE_INFINIGEN ? c->n_kv_heads
                      : p == SPARSE_QUERYHEAD                       ? c->n_heads
                                                                    : 1);
        EXPECT_EQ_INT(st.sparse_calls, 12 * model_n_global_layers(c));
        EXPECT_EQ_INT(st.lists, st.sparse_calls * sparse_policy_lists(p, c->n_heads, c->n_kv_heads));
        EXPECT_EQ_INT(lc.lists, st.lists);
        EXPECT_EQ_INT(lc.bad, 0);
        /* sink 1 + window 2 + tail 1 + budget 2 blocks of 16 of ~13 blocks */
        EXPECT(st.attended_tokens < st.context_tokens / 2);
        EXPECT(st.attended_tokens > 0);
        /* infinigen: a global first layer has no previous layer to speculate from */
        EXPECT_EQ_INT(st.unspeculated,
                      sparse_policy_approx(p) && model_layer_is_global(c, 0) ? 12 : 0);
        /* a speculated list against the exact query's: each exact list picks its 2 blocks by
         * score (of ~9 candidates), and the hits are among them */
        const int64_t spec_lists = sparse_policy_approx(p)
                                       ? (st.sparse_calls - st.unspeculated) *
                                             sparse_policy_lists(p, c->n_heads, c->n_kv_heads)
                                       : 0;
        EXPECT_EQ_INT(st.spec_exact, 2 * spec_lists);
        EXPECT(st.spec_hit >= 0 && st.spec_hit <= st.spec_exact);
        EXPECT_EQ_INT(st.spec_predicted, st.spec_exact); /* no margin: lists of one budget */
        if (sparse_policy_approx(p))
            fprintf(stderr,
                    "%-6s %-18s: the approximate query's lists hold %lld of the exact "
                    "query's %lld blocks chosen by score\n",
                    model, sparse_policy_name(p), (long long)st.spec_hit, (long long)st.spec_exact);
        attended[p] = st.attended_tokens;
        fprintf(stderr, "%-6s %-10s budget 32: attended %.3f of the context, logit 0 %.5f vs dense %.5f\n",
                model, sparse_policy_name(p), (double)st.attended_tokens / (double)st.context_tokens,
                l[0], dense[0]);
    }
    /* every list of the same budget attends the same count of blocks */
    for (int p = SPARSE_FULL + 2; p < SPARSE_POLICY_COUNT; p++)
        EXPECT_EQ_INT(attended[p] / sparse_policy_lists(p, c->n_heads, c->n_kv_heads),
                      attended[SPARSE_HEADWISE] / c->n_kv_heads);
    free(dense);
    free(l);
}

/* With one KV head, solohead (KV head 0), mean and headwise make the same list from the same
 * summed scores, and infinigen-solohead infinigen's: identical logits, which differ from dense
 * ones at a small budget. */
static void sparse_twins(void)
{
    const struct model_config *c = model_config_find("tiny-gemma3");
    float *a = malloc(sizeof(float) * c->vocab), *b = malloc(sizeof(float) * c->vocab);
    run_policy("tiny-gemma3", 200, SPARSE_SOLOHEAD, 32, selector_for(SPARSE_SOLOHEAD, c), a, NULL);
    run_policy("tiny-gemma3", 200, SPARSE_HEADWISE, 32, NULL, b, NULL);
    EXPECT(memcmp(a, b, sizeof(float) * c->vocab) == 0);
    run_policy("tiny-gemma3", 200, SPARSE_MEAN, 32, NULL, a, NULL);
    EXPECT(memcmp(a, b, sizeof(float) * c->vocab) == 0);
    run_policy("tiny-gemma3", 200, SPARSE_INFINIGEN, 32, NULL, b, NULL);
    run_policy("tiny-gemma3", 200, SPARSE_INFINIGEN_SOLO, 32,
               selector_for(SPARSE_INFINIGEN_SOLO, c), a, NULL);
    EXPECT(memcmp(a, b, sizeof(float) * c->vocab) == 0);
    /* and a sparse run is not dense (the check above could not fail otherwise) */
    run_policy("tiny-gemma3", 200, SPARSE_FULL, 0, NULL, b, NULL);
    EXPECT(memcmp(a, b, sizeof(float) * c->vocab) != 0);
    free(a);
    free(b);
}

/* --spec-margin's measurement: the approximate query's list made again with ceil((1 + F) k)
 * blocks chosen by score holds every block of its budget-k list (one score order), so on the
 * same decode the exact counts are equal and the hits never fall, per layer and pooled; here
 * (2 of ~9 candidates per list, the approximate query of half the channels) they rise. The
 * prediction grows to ceil(1.5 * 2) = 3 blocks a list, the attention does not change (the
 * same logits, the same attended tokens), and a margin outside [0, 1] is refused. */
static void sparse_margin_on(const char *model)
{
    const struct model_config *c = model_config_find(model);
    float *a = malloc(sizeof(float) * c->vocab), *b = malloc(sizeof(float) * c->vocab);
    int64_t ha[64] = {0}, hb[64] = {0};
    static const int pols[] = {SPARSE_INFINIGEN, SPARSE_INFINIGEN_SOLO};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(pols); i++) {
        const int p = pols[i];
        const int32_t *sel = selector_for(p, c);
        struct sparse_stats s0 = run_policy_margin(model, 200, p, 32, sel, 0.0, a, NULL, ha),
                            s5 = run_policy_margin(model, 200, p, 32, sel, 0.5, b, NULL, hb),
                            s1 = run_policy_margin(model, 200, p, 32, sel, 1.0, NULL, NULL, NULL);
        EXPECT(s0.spec_exact > 0);
        EXPECT_EQ_INT(s5.spec_exact, s0.spec_exact);
        EXPECT_EQ_INT(s1.spec_exact, s0.spec_exact);
        EXPECT(s0.spec_hit < s0.spec_exact); /* room to grow */
        EXPECT(s5.spec_hit > s0.spec_hit);
        EXPECT(s1.spec_hit >= s5.spec_hit);
        for (int l = 0; l < c->n_layers; l++)
            EXPECT(hb[l] >= ha[l]);
        EXPECT_EQ_INT(s0.spec_predicted, s0.spec_exact);
        EXPECT_EQ_INT(2 * s5.spec_predicted, 3 * s0.spec_exact);
        EXPECT_EQ_INT(s1.spec_predicted, 2 * s0.spec_exact);
        EXPECT(memcmp(a, b, sizeof(float) * c->vocab) == 0);
        EXPECT_EQ_INT(s5.attended_tokens, s0.attended_tokens);
        EXPECT_EQ_INT(s5.lists, s0.lists);
        fprintf(stderr,
                "%-6s %-18s: hits %lld / %lld / %lld of %lld exact blocks at margin 0 / 0.5 / "
                "1\n",
                model, sparse_policy_name(p), (long long)s0.spec_hit, (long long)s5.spec_hit,
                (long long)s1.spec_hit, (long long)s0.spec_exact);
    }
    struct rig r;
    char err[256] = "";
    EXPECT_EQ_INT(rig_open(&r, c, 16), 0);
    struct sparse_attn *s = sparse_attn_create(r.e, r.kv, 16, T_MAX, 1.0, err, sizeof err);
    static const double bad[] = {-0.25, 1.5, NAN};
    for (size_t i = 0; s && i < PULSE_ARRAY_LEN(bad); i++) {
        struct sparse_params sp = {SPARSE_INFINIGEN, 32, 1, 2, NULL, bad[i], SPARSE_SPEC_INPUT};
        err[0] = 0;
        EXPECT_EQ_INT(sparse_attn_configure(s, &sp, r.slot, err, sizeof err), PULSE_ERR_INVALID);
        EXPECT_STR_CONTAINS(err, "not in [0, 1]");
    }
    sparse_attn_free(s);
    rig_close(&r);
    free(a);
    free(b);
}

/* --spec-from mid: the approximate query of layer l+1 made from layer l's residual after its
 * attention (engine_layer_hook.mid_layer) instead of its input. The same layers are speculated
 * and measured (hits within the exact blocks), the same number of lists made; a budget that
 * covers the context leaves the logits exactly dense from either point. --spec-from hits
 * (PulseInfer's speculation with exact correction): the logits exactly the exact policy's
 * (headwise for infinigen, solohead for infinigen-solohead, the same selector), the same lists
 * attended, the prediction measured and made from the predicted lists' attention; a point other
 * than input, mid or hits is refused. */
static void sparse_mid_on(const char *model)
{
    const struct model_config *c = model_config_find(model);
    float *dense = malloc(sizeof(float) * c->vocab), *a = malloc(sizeof(float) * c->vocab),
          *b = malloc(sizeof(float) * c->vocab);
    run_policy(model, 200, SPARSE_FULL, 0, NULL, dense, NULL);
    static const int pols[] = {SPARSE_INFINIGEN, SPARSE_INFINIGEN_SOLO};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(pols); i++) {
        const int p = pols[i];
        const int32_t *sel = selector_for(p, c);
        g_spec_from = SPARSE_SPEC_INPUT;
        const struct sparse_stats si = run_policy(model, 200, p, 32, sel, a, NULL);
        g_spec_from = SPARSE_SPEC_MID;
        const struct sparse_stats sm = run_policy(model, 200, p, 32, sel, b, NULL);
        EXPECT(sm.spec_exact > 0);
        EXPECT(sm.spec_hit >= 0 && sm.spec_hit <= sm.spec_exact);
        EXPECT_EQ_INT(sm.unspeculated, si.unspeculated);
        EXPECT_EQ_INT(sm.lists, si.lists);
        EXPECT_EQ_INT(sm.sparse_calls, si.sparse_calls);
        run_policy(model, 200, p, 256, sel, b, NULL); /* covering: dense */
        EXPECT(memcmp(b, dense, sizeof(float) * c->vocab) == 0);
        const int exact_pol = p == SPARSE_INFINIGEN ? SPARSE_HEADWISE : SPARSE_SOLOHEAD;
        g_spec_from = SPARSE_SPEC_INPUT;
        const struct sparse_stats se = run_policy(model, 200, exact_pol, 32, sel, a, NULL);
        g_spec_from = SPARSE_SPEC_HITS;
        const struct sparse_stats sh = run_policy(model, 200, p, 32, sel, b, NULL);
        EXPECT(memcmp(a, b, sizeof(float) * c->vocab) == 0);
        EXPECT_EQ_INT(sh.lists, se.lists);
        EXPECT_EQ_INT(sh.attended_tokens, se.attended_tokens);
        EXPECT(sh.spec_exact > 0 && sh.spec_hit <= sh.spec_exact);
        EXPECT(sh.spec_from_hits > 0);
        EXPECT_EQ_INT(sm.spec_from_hits + si.spec_from_hits, 0);
        fprintf(stderr,
                "%-11s %-18s: from the predicted lists (exact attention, %s's logits): hit rate "
                "%.3f, %lld predictions from them\n",
                model, sparse_policy_name(p), sparse_policy_name(exact_pol),
                sh.spec_exact ? (double)sh.spec_hit / sh.spec_exact : 0,
                (long long)sh.spec_from_hits);
        g_spec_from = SPARSE_SPEC_INPUT;
        fprintf(stderr, "%-11s %-18s: hit rate %.3f from the layer's input, %.3f from mid-layer\n",
                model, sparse_policy_name(p),
                si.spec_exact ? (double)si.spec_hit / si.spec_exact : 0,
                sm.spec_exact ? (double)sm.spec_hit / sm.spec_exact : 0);
    }
    struct rig r;
    char err[256] = "";
    EXPECT_EQ_INT(rig_open(&r, c, 16), 0);
    struct sparse_attn *s = sparse_attn_create(r.e, r.kv, 16, T_MAX, 1.0, err, sizeof err);
    struct sparse_params sp = {SPARSE_INFINIGEN, 32, 1, 2, NULL, 0.0, 3};
    if (s) {
        EXPECT_EQ_INT(sparse_attn_configure(s, &sp, r.slot, err, sizeof err), PULSE_ERR_INVALID);
        EXPECT_STR_CONTAINS(err, "speculation point");
    }
    sparse_attn_free(s);
    rig_close(&r);
    free(dense), free(a), free(b);
}

static void test_sparse(void)
{
    sparse_on("tiny-gemma3"); /* one KV head, 4 query heads, local and global layers */
    sparse_on("tiny");        /* GQA: 2 KV heads of 2 query heads each */
    sparse_twins();
    sparse_margin_on("tiny-gemma3");
    sparse_margin_on("tiny");
    sparse_mid_on("tiny-gemma3");
    sparse_mid_on("tiny");
    /* bad configurations: a budget off the block size, a missing or out-of-range selector */
    const struct model_config *c = model_config_find("tiny");
    struct rig r;
    char err[256] = "";
    EXPECT_EQ_INT(rig_open(&r, c, 16), 0);
    struct sparse_attn *s = sparse_attn_create(r.e, r.kv, 16, T_MAX, 1.0, err, sizeof err);
    int32_t sel[8] = {1, 1, 1, 1, 1, 1, 1, 1}, far[8] = {2, 2, 2, 2, 2, 2, 2, 2};
    struct sparse_params bad = {SPARSE_SOLOHEAD, 40, 1, 2, sel, 0.0, SPARSE_SPEC_INPUT};
    EXPECT(sparse_attn_configure(s, &bad, r.slot, err, sizeof err) != PULSE_OK);
    EXPECT_STR_CONTAINS(err, "multiple of the block size");
    struct sparse_params nosel = {SPARSE_SOLOHEAD_Q, 32, 1, 2, NULL, 0.0, SPARSE_SPEC_INPUT};
    EXPECT(sparse_attn_configure(s, &nosel, r.slot, err, sizeof err) != PULSE_OK);
    EXPECT_STR_CONTAINS(err, "selector");
    struct sparse_params kv2 = {SPARSE_REVERSED,  32, 1, 2, far, 0.0,
                                SPARSE_SPEC_INPUT}; /* tiny has KV heads 0, 1 */
    EXPECT(sparse_attn_configure(s, &kv2, r.slot, err, sizeof err) != PULSE_OK);
    EXPECT_STR_CONTAINS(err, "is not a KV head");
    struct sparse_params q2 = {SPARSE_SOLOHEAD_Q, 32, 1, 2, far, 0.0,
                               SPARSE_SPEC_INPUT}; /* query heads 0..3 */
    EXPECT_EQ_INT(sparse_attn_configure(s, &q2, r.slot, err, sizeof err), PULSE_OK);
    EXPECT(sparse_policy_find("quest") < 0); /* the old name of headwise is gone */
    EXPECT_EQ_INT(sparse_policy_find("solohead-q"), SPARSE_SOLOHEAD_Q);
    sparse_attn_free(s);
    rig_close(&r);
}

/* The MAM tables of both granularities on one model: 1 where the budget covers the context,
 * in (0, 1] otherwise, 0 on local layers; the selectors are the arg max / arg min. */
static void head_mass_on(const char *model)
{
    const struct model_config *c = model_config_find(model);
    for (int budget = 16; budget <= 512; budget += 496) {
        struct rig r;
        char err[256] = "";
        EXPECT_EQ_INT(rig_open(&r, c, 16), 0);
        struct head_mass *hm =
            head_mass_create(r.e, r.kv, 16, T_MAX, budget, 1, 2, err, sizeof err);
        EXPECT(hm != NULL);
        int n = 150;
        int32_t tok = prefill(&r, n, 16);
        struct engine_layer_hook h = head_mass_hook(hm);
        batch_set_hook(r.bt, &h);
        for (int k = 0; k < 6; k++)
            tok = step(&r, n + k, tok, NULL);
        batch_set_hook(r.bt, NULL);
        for (int qh = 0; qh < 2; qh++) {
            const int ns = qh ? c->n_heads : c->n_kv_heads;
            double mam[8 * 8];
            int64_t obs[8];
            int32_t best[8], worst[8];
            head_mass_table(hm, qh, mam, obs);
            head_mass_selectors(mam, c->n_layers, ns, 0, best);
            head_mass_selectors(mam, c->n_layers, ns, 1, worst);
            for (int l = 0; l < c->n_layers; l++) {
                EXPECT_EQ_INT(obs[l], model_layer_is_global(c, l) ? 6 : 0);
                for (int hh = 0; hh < ns; hh++) {
                    double v = mam[l * ns + hh];
                    if (!model_layer_is_global(c, l))
                        EXPECT(v == 0.0);
                    else if (budget >= n + 6)
                        EXPECT_NEAR(v, 1.0, 1e-9);
                    else
                        EXPECT(v > 0.0 && v <= 1.0 + 1e-9);
                    EXPECT(mam[l * ns + best[l]] >= v);
                    EXPECT(mam[l * ns + worst[l]] <= v);
                }
            }
            const int gl = c->n_layers - 1; /* global in both models */
            fprintf(stderr, "%s budget %d: %s MAM of layer %d =", model, budget,
                    qh ? "query-head" : "KV-head", gl);
            for (int hh = 0; hh < ns; hh++)
                fprintf(stderr, " %.3f", mam[gl * ns + hh]);
            fprintf(stderr, "\n");
        }
        head_mass_free(hm);
        rig_close(&r);
    }
}

/* ---- the serving path (accuracy/serve_path.h) against the accuracy path ---- */

static int never_stop(void *user, int32_t tok)
{
    (void)user, (void)tok;
    return 0;
}

static int stop_at(void *user, int32_t tok)
{
    return tok == *(const int32_t *)user;
}

/* The accuracy path's greedy tokens for the prompt of n tokens: the first from the prefill,
 * then k - 1 decode steps with policy p (budget 32, selector KV head 1, or 0 with one). */
static void accuracy_path_tokens(struct rig *r, int n, int p, int k, int32_t *out)
{
    char err[256];
    struct sparse_attn *s = sparse_attn_create(r->e, r->kv, 16, T_MAX, 1.0, err, sizeof err);
    static const int32_t sel_kv1[8] = {1, 1, 1, 1, 1, 1, 1, 1}, sel_kv0[8] = {0};
    const int32_t *sel = r->c->n_kv_heads > 1 ? sel_kv1 : sel_kv0;
    struct sparse_params sp = {p,
                               32,
                               1,
                               2,
                               sparse_policy_selector_kind(p) == SPARSE_SEL_KV ? sel : NULL,
                               0.0,
                               SPARSE_SPEC_INPUT};
    EXPECT_EQ_INT(sparse_attn_configure(s, &sp, r->slot, err, sizeof err), PULSE_OK);
    out[0] = prefill(r, n, 16); /* dense, as the driver's */
    struct engine_layer_hook h = sparse_attn_hook(s);
    batch_set_hook(r->bt, p == SPARSE_FULL ? NULL : &h);
    for (int i = 1; i < k; i++)
        out[i] = step(r, n + i - 1, out[i - 1], NULL);
    batch_set_hook(r->bt, NULL);
    sparse_attn_free(s);
}

/* On the GQA tiny model (no sliding window): the serving path's tokens are the accuracy path's
 * for headwise and SoloHead at a budget that leaves most blocks out, on two prompts one after
 * the other (the second admitted where the first was released); they differ from full
 * attention's; a stop token ends the answer there. */
/* On a sliding-window model the local layers keep their window on the GPU and only the global
 * ones are served offloaded. */
static void serve_path_on(const char *model)
{
    const struct model_config *c = model_config_find(model);
    static const int32_t sel_kv1[8] = {1, 1, 1, 1, 1, 1, 1, 1}, sel_kv0[8] = {0};
    const int32_t *sel = c->n_kv_heads > 1 ? sel_kv1 : sel_kv0;
    const struct {
        int sparse, selection;
        enum recall_engine engine;
    } cases[] = {{SPARSE_HEADWISE, OFFLOAD_HEADWISE, RECALL_PER_BLOCK},
                 {SPARSE_SOLOHEAD, OFFLOAD_SOLOHEAD, RECALL_GATHER_SCATTER},
                 {SPARSE_INFINIGEN, OFFLOAD_HEADWISE, RECALL_PER_BLOCK},
                 {SPARSE_MEAN, OFFLOAD_MEAN, RECALL_PER_BLOCK},
                 {SPARSE_INFINIGEN_SOLO, OFFLOAD_SOLOHEAD, RECALL_GATHER_SCATTER}};
    int32_t ids[T_MAX];
    for (int i = 0; i < T_MAX; i++)
        ids[i] = prompt_token(c, i);
    for (size_t ci = 0; ci < PULSE_ARRAY_LEN(cases); ci++) {
        struct rig r;
        char err[256] = "";
        EXPECT_EQ_INT(rig_open(&r, c, 16), 0);
        const char *pol = sparse_policy_approx(cases[ci].sparse) ? "infinigen" : "arkvale";
        struct serve_path_params sp = {cases[ci].selection,
                                       sel,
                                       32,
                                       1,
                                       2,
                                       cases[ci].engine,
                                       policy_find(pol)->offload_schedule,
                                       T_MAX,
                                       16,
                                       7};
        struct serve_path *s = serve_path_create(r.e, &sp, err, sizeof err);
        EXPECT(s != NULL);
        if (!s) {
            fprintf(stderr, "serve path: %s\n", err);
            rig_close(&r);
            continue;
        }
        int differ = 0;
        for (int n = 180; n <= 300; n += 40) { /* 4 prompts past the window and the budget */
            int32_t want[12], full[12], got[12];
            int k = 0;
            accuracy_path_tokens(&r, n, cases[ci].sparse, 12, want);
            accuracy_path_tokens(&r, n, SPARSE_FULL, 12, full);
            EXPECT_EQ_INT(serve_path_decode(s, ids, n, 12, never_stop, NULL, got, &k, err,
                                            sizeof err),
                          PULSE_OK);
            EXPECT_EQ_INT(k, 12);
            EXPECT(memcmp(got, want, sizeof want) == 0);
            differ += memcmp(full, want, sizeof want) != 0;
            /* a stop token: the answer ends before it (the same loop as the driver's) */
            int32_t stop = want[5];
            int first = 0;
            while (want[first] != stop)
                first++;
            EXPECT_EQ_INT(serve_path_decode(s, ids, n, 12, stop_at, &stop, got, &k, err,
                                            sizeof err),
                          PULSE_OK);
            EXPECT_EQ_INT(k, first);
            if (k != first) fprintf(stderr, "serve path: %s\n", err);
        }
        EXPECT(differ > 0);
        struct offload_stats st;
        serve_path_stats(s, &st);
        EXPECT(st.recall_bytes > 0);
        EXPECT_EQ_INT(st.host_syncs, 0);
        fprintf(stderr, "serve path %s %s: the accuracy path's tokens on 4 prompts, %d of 4 unlike "
                        "full attention's, %lld bytes recalled\n",
                model, sparse_policy_name(cases[ci].sparse), differ, (long long)st.recall_bytes);
        serve_path_free(s);
        rig_close(&r);
    }
}

static void test_serve_path(void)
{
    serve_path_on("tiny");
    serve_path_on("tiny-gemma3");
    /* a prefill chunk above the engine's batch (16) is refused at create, not in a step */
    const struct model_config *c = model_config_find("tiny");
    struct rig r;
    char err[256] = "";
    struct serve_path_params sp = {OFFLOAD_HEADWISE,
                                   NULL,
                                   32,
                                   1,
                                   2,
                                   RECALL_PER_BLOCK,
                                   policy_find("arkvale")->offload_schedule,
                                   T_MAX,
                                   16,
                                   7};
    EXPECT_EQ_INT(rig_open(&r, c, 16), 0);
    sp.prefill_chunk = 64;
    EXPECT(serve_path_create(r.e, &sp, err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "more than the engine's batch of 16");
    sp.prefill_chunk = 16, sp.schedule = NULL; /* no policy's schedule: refused at create */
    EXPECT(serve_path_create(r.e, &sp, err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "no layer schedule");
    rig_close(&r);
}

static void test_head_mass(void)
{
    head_mass_on("tiny-gemma3");
    head_mass_on("tiny");
}

int main(void)
{
    test_prefill_matches_steps("tiny", 70);
    test_prefill_matches_steps("tiny-gemma3", 70);
    test_window_matters();
    test_sparse();
    test_head_mass();
    test_serve_path();
    printf("test_accuracy: %d checks, %d failed\n", tu_checks, tu_failures);
    return tu_failures ? 1 : 0;
}
