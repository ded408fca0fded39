/* The decode step end to end on the CPU backend with the tiny model:
 * - golden: a fixed seed gives the exact checked-in token ids (tests/golden/tiny_seed1.txt;
 *   PULSE_GOLDEN_WRITE=1 rewrites it after a deliberate change of the numerics);
 * - a request decodes the same tokens alone as inside a batch with continuous batching;
 * - no allocation inside decode steps (the memory counters do not move);
 * - vanilla recalls nothing and never switches layers (its counters stay zero);
 * - a layer hook belongs to its batch: with a hooked and an unhooked batch interleaved layer by
 *   layer in one engine, the hook sees exactly its batch's layers and state, and both batches
 *   decode the tokens they decode alone; engine_step skips the CUDA graph only for the hooked
 *   batch (counted through a cpu backend with stand-in graph functions). */
#include <string.h>

#include "backend.h"
#include "baselines/registry.h"
#include "common.h"
#include "engine.h"
#include "mem.h"
#include "serve.h"
#include "testutil.h"
#include "workloads/workload.h"

#define GOLDEN "tests/golden/tiny_seed1.txt"
#define OUT_LEN 64

static struct engine *make_engine(int max_batch, int max_tokens)
{
    char err[256];
    struct engine_params p = {.cfg = model_config_find("tiny"),
                              .be = backend_find("cpu"),
                              .seed = 1,
                              .max_batch = max_batch,
                              .max_tokens = max_tokens,
                              .use_graph = 1 /* ignored on cpu */};
    struct engine *e = engine_create(&p, err, sizeof err);
    if (!e) fprintf(stderr, "engine: %s\n", err);
    return e;
}

static struct kv_cache *make_kv(struct engine *e, size_t budget, int slots, int max_tokens)
{
    const struct model_config *c = model_config_find("tiny");
    struct kv_cache_params kp = {c->n_layers, c->n_kv_heads, c->head_dim, 16,
                                 budget,      slots,         max_tokens};
    char err[256];
    struct kv_cache *kv = kv_cache_create(&kp, backend_find("cpu"), engine_ctx(e), err, sizeof err);
    if (!kv) fprintf(stderr, "kv: %s\n", err);
    return kv;
}

/* Serves `spec` and returns the workload with its tokens (caller frees). */
static int serve(const char *spec, int out_len, int max_batch, size_t budget, struct workload *w,
                 struct serve_counters *ctr)
{
    char err[256];
    if (workload_create(w, spec, out_len, 1, err, sizeof err) != 0) return -1;
    int max_tokens = workload_max_tokens(w);
    struct engine *e = make_engine(max_batch, max_tokens);
    struct kv_cache *kv = e ? make_kv(e, budget, max_batch, max_tokens) : NULL;
    double wall;
    int rc = kv ? serve_run(e, kv, policy_find("vanilla"), w->reqs, w->n, max_batch, ctr, &wall,
                            err, sizeof err)
                : -1;
    if (rc) fprintf(stderr, "serve: %s\n", err);
    char cerr[256];
    if (kv) EXPECT_EQ_INT(kv_cache_check(kv, cerr, sizeof cerr), 0);
    kv_cache_free(kv);
    engine_free(e);
    return rc;
}

static void test_golden(void)
{
    struct workload w;
    struct serve_counters ctr;
    int rc = serve("lengths:100,37,1", OUT_LEN, 8, 1u << 24, &w, &ctr);
    EXPECT_EQ_INT(rc, 0);
    if (rc) return;
    char path[1024];
    const char *src = getenv("PULSE_SRC");
    snprintf(path, sizeof path, "%s/%s", src ? src : ".", GOLDEN);
    if (getenv("PULSE_GOLDEN_WRITE")) {
        FILE *f = fopen(path, "w");
        for (int i = 0; f && i < w.n; i++)
            for (int t = 0; t < OUT_LEN; t++)
                fprintf(f, "%d%c", w.reqs[i].tokens[t], t + 1 == OUT_LEN ? '\n' : ' ');
        if (f) fclose(f);
        fprintf(stderr, "wrote %s\n", path);
    }
    FILE *f = fopen(path, "r");
    EXPECT(f != NULL);
    int mismatches = 0, read = 0;
    for (int i = 0; f && i < w.n; i++)
        for (int t = 0; t < OUT_LEN; t++) {
            int v;
            if (fscanf(f, "%d", &v) != 1) break;
            read++;
            if (v != w.reqs[i].tokens[t] && mismatches++ < 5)
                fprintf(stderr, "request %d token %d: got %d, golden %d\n", i, t,
                        w.reqs[i].tokens[t], v);
        }
    if (f) fclose(f);
    EXPECT_EQ_INT(read, 3 * OUT_LEN);
    EXPECT_EQ_INT(mismatches, 0);
    /* the run is not degenerate: tokens vary */
    int distinct = 0;
    for (int t = 1; t < OUT_LEN; t++)
        distinct += w.reqs[0].tokens[t] != w.reqs[0].tokens[0];
    EXPECT(distinct > OUT_LEN / 2);
    /* vanilla's switches: nothing recalled, no layer switches, no admission search */
    EXPECT_EQ_INT(ctr.recall_bytes, 0);
    EXPECT_EQ_INT(ctr.recall_chunks, 0);
    EXPECT_EQ_INT(ctr.layer_switches, 0);
    EXPECT_EQ_INT(ctr.ioaa_nodes, 0);
    EXPECT_EQ_INT(ctr.step_alloc_calls, 0);
    EXPECT_EQ_INT(ctr.tokens, 3 * OUT_LEN);
    EXPECT_EQ_INT(ctr.steps, OUT_LEN);
    workload_free(&w);
}

/* Continuous batching: with max_batch 2 the third request joins when the first finishes; each
 * request's tokens equal those of running it alone. */
static void test_batch_independence(void)
{
    struct workload all, one;
    struct serve_counters c1, c2;
    EXPECT_EQ_INT(serve("lengths:40,17,33", 12, 2, 1u << 24, &all, &c1), 0);
    EXPECT_EQ_INT(c1.peak_batch, 2);
    EXPECT(c1.batch_changes >= 2);
    /* request 0 alone (same id, so the same synthetic prompt KV) decodes the same tokens */
    EXPECT_EQ_INT(serve("lengths:40", 12, 1, 1u << 24, &one, &c2), 0);
    EXPECT(memcmp(one.reqs[0].tokens, all.reqs[0].tokens, 12 * sizeof(int32_t)) == 0);
    workload_free(&one);
    /* a budget that holds one request at a time serialises them (refusals counted) */
    struct workload ser;
    struct serve_counters c3;
    size_t one_req = (size_t)4 * 4 * (2 * 2 * 16 * 64 * 2); /* 4 layers x 4 pages x 8 KB */
    EXPECT_EQ_INT(serve("lengths:40,17,33", 12, 4, one_req, &ser, &c3), 0);
    EXPECT_EQ_INT(c3.peak_batch, 1);
    EXPECT(c3.admission_refusals > 0);
    for (int i = 0; i < 3; i++)
        EXPECT(memcmp(ser.reqs[i].tokens, all.reqs[i].tokens, 12 * sizeof(int32_t)) == 0);
    workload_free(&ser);
    workload_free(&all);
}

static void test_no_alloc_in_step(void)
{
    struct engine *e = make_engine(4, 200);
    struct kv_cache *kv = make_kv(e, 1u << 22, 4, 200);
    struct batch *bt = batch_create(e);
    struct batch_entry en[3];
    for (int i = 0; i < 3; i++) {
        int slot;
        EXPECT_EQ_INT(kv_cache_admit(kv, 150, &slot), 0);
        en[i] = (struct batch_entry){slot, i, 50 + 30 * i, 150, engine_first_token(e, i)};
    }
    batch_set(e, bt, kv, en, 3);
    engine_fill_prompt(e, bt, kv);
    struct mem_stats m0, m1;
    mem_get_stats(&m0);
    int32_t toks[3];
    for (int s = 0; s < 5; s++) {
        engine_step(e, bt, kv);
        batch_read_tokens(e, bt, toks);
    }
    mem_get_stats(&m1);
    for (int k = 0; k < MEM_KINDS; k++) {
        EXPECT_EQ_INT(m1.alloc_calls[k], m0.alloc_calls[k]);
        EXPECT_EQ_INT(m1.live_bytes[k], m0.live_bytes[k]);
    }
    EXPECT(m0.live_bytes[MEM_HOST] > 0); /* the counters do count */
    batch_free(e, bt);
    kv_cache_free(kv);
    engine_free(e);
    mem_get_stats(&m1);
    EXPECT_EQ_INT(m1.live_bytes[MEM_HOST], 0); /* everything freed */
}

/* ------------------------------------------------------------------ per-batch hooks */

#define HA 2      /* entries of the hooked batch */
#define HB 3      /* entries of the unhooked batch */
#define H_STEPS 6 /* decode steps */

static const int hook_pos_a[HA] = {60, 91}, hook_pos_b[HB] = {45, 120, 77};

/* What the hook saw: calls of each callback, and mismatches against the batch it belongs to
 * (its size, its state pointers, its host lengths, the order before -> attend -> after -> mid
 * of layer 0, 1, ... within each step; the residual a layer's mid_layer sees is neither its
 * input nor the next layer's: the attention's output is in it, the MLP's not yet). */
struct hook_log {
    const struct batch *bt;
    int n, L;
    int32_t want_len[HA]; /* attended lengths of this step's entries */
    int64_t calls[4];     /* before_layer, attend, after_attention, mid_layer */
    int64_t bad;
    uint64_t h_before, h_mid; /* the residual's hash at the last before_layer and mid_layer */
    int64_t same_mid;         /* mid_layer residuals equal to the layer's input or the next's */
};

static void log_call(struct hook_log *g, int kind, int layer, int batch)
{
    const int64_t seq = g->calls[0] + g->calls[1] + g->calls[2] + g->calls[3];
    g->bad += seq % 4 != kind || layer != (int)(seq / 4 % g->L) || batch != g->n;
    g->calls[kind]++;
}

/* FNV-1a over the batch's residual (cpu backend: host memory) */
static uint64_t residual_hash(const struct hook_log *g, const float *x)
{
    const unsigned char *b = (const unsigned char *)x;
    const size_t n = sizeof(float) * (size_t)g->n * model_config_find("tiny")->hidden;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static void log_lengths(struct hook_log *g, const int32_t *n_tokens_host)
{
    for (int i = 0; i < g->n; i++)
        g->bad += n_tokens_host[i] != g->want_len[i];
}

static void hook_before(void *user, int layer, const float *x, const int32_t *pos, int batch)
{
    struct hook_log *g = user;
    log_call(g, 0, layer, batch);
    g->bad += x != batch_residual(g->bt) || pos != batch_pos(g->bt);
    g->h_before = residual_hash(g, x);
    g->same_mid += layer > 0 && g->h_before == g->h_mid; /* the last MLP changed it */
}

static void hook_mid(void *user, int layer, const float *x, const int32_t *pos, int batch)
{
    struct hook_log *g = user;
    log_call(g, 3, layer, batch);
    g->bad += x != batch_residual(g->bt) || pos != batch_pos(g->bt);
    g->h_mid = residual_hash(g, x);
    g->same_mid += g->h_mid == g->h_before; /* the attention's output went in */
}

static int hook_attend(void *user, int layer, const uint16_t *q, const struct kv_view *kv,
                       const int32_t *n_tokens, const int32_t *n_tokens_host, uint16_t *out,
                       int batch)
{
    struct hook_log *g = user;
    log_call(g, 1, layer, batch);
    g->bad +=
        q != batch_q(g->bt) || out != batch_attn_out(g->bt) || n_tokens != batch_len(g->bt) || !kv;
    log_lengths(g, n_tokens_host);
    return 0; /* the engine's dense attention: the hook only observes */
}

static void hook_after(void *user, int layer, const uint16_t *q, const struct kv_view *kv,
                       const int32_t *n_tokens_host, int batch)
{
    struct hook_log *g = user;
    log_call(g, 2, layer, batch);
    g->bad += q != batch_q(g->bt) || !kv;
    log_lengths(g, n_tokens_host);
}

/* H_STEPS steps of batch A (hooked when `hooked`) and batch B in one engine and cache: A alone
 * (run_a), B alone (run_b), or both, their layers interleaved (A's layer first on even steps,
 * B's on odd ones; every third step two whole engine_steps, B's first). A is re-set from the
 * host halfway (batch_set keeps the hook). Tokens into ta [H_STEPS][HA], tb [H_STEPS][HB]. */
static void hook_run(int run_a, int run_b, int hooked, struct hook_log *g, int32_t *ta, int32_t *tb)
{
    struct engine *e = make_engine(HA + HB, 200);
    struct kv_cache *kv = make_kv(e, 1u << 24, HA + HB, 200);
    struct batch *a = batch_create(e), *b = batch_create(e);
    struct batch_entry ea[HA], eb[HB];
    for (int i = 0; i < HA + HB; i++) {
        int slot, pos = i < HA ? hook_pos_a[i] : hook_pos_b[i - HA];
        EXPECT_EQ_INT(kv_cache_admit(kv, pos + H_STEPS + 1, &slot), 0);
        struct batch_entry en = {slot, 10 + i, pos, pos + H_STEPS + 1,
                                 engine_first_token(e, 10 + i)};
        if (i < HA)
            ea[i] = en;
        else
            eb[i - HA] = en;
    }
    batch_set(e, a, kv, ea, HA);
    batch_set(e, b, kv, eb, HB);
    engine_fill_prompt(e, a, kv);
    engine_fill_prompt(e, b, kv);
    *g = (struct hook_log){.bt = a, .n = HA, .L = engine_model(e)->cfg->n_layers};
    struct engine_layer_hook h = {hook_after, hook_attend, hook_before, hook_mid, g};
    if (hooked) batch_set_hook(a, &h);
    for (int s = 0; s < H_STEPS; s++) {
        for (int i = 0; i < HA; i++)
            g->want_len[i] = ea[i].pos + 1;
        if (run_a && run_b && s % 3 != 2) {
            engine_run_embed(e, a);
            engine_run_embed(e, b);
            for (int l = 0; l < g->L; l++) {
                struct batch *first = s & 1 ? b : a, *second = s & 1 ? a : b;
                engine_run_layer(e, first, kv, l);
                engine_run_layer(e, second, kv, l);
            }
            engine_run_head(e, a);
            engine_run_head(e, b);
        } else {
            if (run_b) engine_step(e, b, kv);
            if (run_a) engine_step(e, a, kv);
        }
        if (run_a) batch_read_tokens(e, a, ta + s * HA);
        if (run_b) batch_read_tokens(e, b, tb + s * HB);
        for (int i = 0; i < HA; i++) {
            ea[i].pos++;
            ea[i].token = run_a ? ta[s * HA + i] : 0;
        }
        if (run_a && s == H_STEPS / 2) batch_set(e, a, kv, ea, HA);
    }
    batch_free(e, a);
    batch_free(e, b);
    kv_cache_free(kv);
    engine_free(e);
}

static void test_hook_per_batch(void)
{
    int32_t ta[H_STEPS * HA], tb[H_STEPS * HB], xa[H_STEPS * HA], xb[H_STEPS * HB];
    struct hook_log g;
    hook_run(1, 0, 0, &g, ta, NULL);
    EXPECT_EQ_INT(g.calls[0] + g.calls[1] + g.calls[2] + g.calls[3], 0);
    hook_run(0, 1, 0, &g, NULL, tb);
    hook_run(1, 1, 1, &g, xa, xb);
    const int64_t want = (int64_t)H_STEPS * g.L;
    fprintf(stderr,
            "hooked batch of %d beside an unhooked one of %d, %d steps of %d layers: hook calls "
            "%lld/%lld/%lld/%lld (want %lld each), %lld mismatches; unhooked batch %s, hooked "
            "%s\n",
            HA, HB, H_STEPS, g.L, (long long)g.calls[0], (long long)g.calls[1],
            (long long)g.calls[2], (long long)g.calls[3], (long long)want, (long long)g.bad,
            memcmp(tb, xb, sizeof tb) ? "DIFFERENT tokens" : "same tokens as alone",
            memcmp(ta, xa, sizeof ta) ? "DIFFERENT tokens" : "same tokens as alone");
    for (int k = 0; k < 4; k++)
        EXPECT_EQ_INT(g.calls[k], want);
    EXPECT_EQ_INT(g.bad, 0);
    EXPECT_EQ_INT(g.same_mid, 0);
    EXPECT(memcmp(tb, xb, sizeof tb) == 0);
    EXPECT(memcmp(ta, xa, sizeof ta) == 0);
    int differ = 0; /* the two batches decode different sequences: a swap would show */
    for (int s = 0; s < H_STEPS; s++)
        differ |= ta[s * HA] != tb[s * HB];
    EXPECT(differ);
}

/* Stand-in graph functions on the cpu backend: capture runs the step as usual (the cpu backend
 * executes at once), launch does nothing; only the engine's graph counters are meaningful. */
static int fake_graph;
static void fake_graph_begin(const struct kctx *c)
{
    (void)c;
}
static void *fake_graph_end(const struct kctx *c)
{
    (void)c;
    return &fake_graph;
}
static void fake_graph_launch(const struct kctx *c, void *graph)
{
    (void)c, (void)graph;
}
static void fake_graph_destroy(void *graph)
{
    (void)graph;
}

static void test_hook_graph_per_batch(void)
{
    if (pulse_sync_each_launch()) {
        fprintf(stderr, "PULSE_SYNC set: the engine uses no graphs, graph check skipped\n");
        return;
    }
    static struct backend be;
    be = *backend_find("cpu");
    be.graph_begin = fake_graph_begin;
    be.graph_end = fake_graph_end;
    be.graph_launch = fake_graph_launch;
    be.graph_destroy = fake_graph_destroy;
    char err[256];
    const struct model_config *c = model_config_find("tiny");
    struct engine_params p = {
        .cfg = c, .be = &be, .seed = 1, .max_batch = 2, .max_tokens = 100, .use_graph = 1};
    struct engine *e = engine_create(&p, err, sizeof err);
    struct kv_cache_params kp = {c->n_layers, c->n_kv_heads, c->head_dim, 16, 1u << 22, 2, 100};
    struct kv_cache *kv = kv_cache_create(&kp, &be, engine_ctx(e), err, sizeof err);
    struct batch *a = batch_create(e), *b = batch_create(e);
    struct batch_entry en[2];
    for (int i = 0; i < 2; i++) {
        int slot;
        EXPECT_EQ_INT(kv_cache_admit(kv, 50, &slot), 0);
        en[i] = (struct batch_entry){slot, i, 20, 50, engine_first_token(e, i)};
    }
    batch_set(e, a, kv, en, 1);
    batch_set(e, b, kv, en + 1, 1);
    engine_fill_prompt(e, a, kv);
    engine_fill_prompt(e, b, kv);
    struct hook_log g = {.bt = a, .n = 1, .L = c->n_layers};
    struct engine_layer_hook h = {hook_after, hook_attend, hook_before, hook_mid, &g};
    batch_set_hook(a, &h);
    struct engine_stats st;
    for (int s = 0; s < 3; s++) {
        g.want_len[0] = en[0].pos + 1 + s;
        engine_step(e, a, kv);
        engine_step(e, b, kv);
    }
    engine_get_stats(e, &st);
    EXPECT_EQ_INT(st.steps, 6);
    EXPECT_EQ_INT(st.graph_captures, 1); /* b's, once */
    EXPECT_EQ_INT(st.graph_launches, 3); /* b's steps only */
    EXPECT_EQ_INT(g.calls[2], 3 * c->n_layers);
    EXPECT_EQ_INT(g.bad, 0);
    struct engine_layer_hook none = {.user = &g}; /* no callback: removes the hook */
    batch_set_hook(a, &none);
    engine_step(e, a, kv);
    engine_get_stats(e, &st);
    EXPECT_EQ_INT(st.graph_captures, 2); /* a unhooked: its own graph */
    EXPECT_EQ_INT(st.graph_launches, 4);
    EXPECT_EQ_INT(g.calls[2], 3 * c->n_layers);
    batch_free(e, a);
    batch_free(e, b);
    kv_cache_free(kv);
    engine_free(e);
}

int main(void)
{
    test_golden();
    test_batch_independence();
    test_no_alloc_in_step();
    test_hook_per_batch();
    test_hook_graph_per_batch();
    return tu_finish("test_engine");
}
