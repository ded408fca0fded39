/* Real prefill as the prompt KV source (prefill.h, OFFLOAD_KV_PREFILL; pulse run --prompt-kv
 * prefill) on the CPU backend with the tiny model:
 * - with a budget covering the context, arkvale (head-wise and SoloHead) and infinigen decode
 *   exactly vanilla's tokens when all of them prefill the same prompts, while a one-block budget
 *   and vanilla's synthetic prompt KV give other tokens; no step allocates;
 * - after an offload admission the host pool holds, byte for byte, the pages engine_prefill
 *   writes for the same prompt into a plain cache (every sparse layer), the dense layers' GPU
 *   pages and the tail page hold them too, and the first token is the prefill's;
 * - a bad --prompt-kv is a one-line usage error. */
#include <string.h>

#include "backend.h"
#include "baselines/registry.h"
#include "common.h"
#include "engine.h"
#include "kv_cache.h"
#include "offload.h"
#include "prefill.h"
#include "serve.h"
#include "testsource.h"
#include "testutil.h"
#include "workloads/workload.h"

#define SPEC "lengths:100,37,1,70"
#define MAX_BATCH 2

struct rig {
    const struct model_config *m;
    struct engine *e;
    struct kv_cache *kv;
    int max_tokens, page_size;
};

static int rig_init_model(struct rig *r, const char *model, int max_tokens, int page_size)
{
    char err[256];
    r->m = model_config_find(model);
    r->max_tokens = max_tokens, r->page_size = page_size;
    struct engine_params ep = {.cfg = r->m,
                               .be = backend_find("cpu"),
                               .seed = 1,
                               .max_batch = MAX_BATCH,
                               .max_tokens = max_tokens};
    struct kv_cache_params kp = {r->m->n_layers, r->m->n_kv_heads, r->m->head_dim, page_size,
                                 64u << 20,      MAX_BATCH,        max_tokens};
    r->e = engine_create(&ep, err, sizeof err);
    r->kv = r->e ? kv_cache_create(&kp, ep.be, engine_ctx(r->e), err, sizeof err) : NULL;
    if (!r->kv) fprintf(stderr, "rig: %s\n", err);
    return r->kv ? 0 : -1;
}

static int rig_init(struct rig *r, int max_tokens, int page_size)
{
    return rig_init_model(r, "tiny", max_tokens, page_size);
}

static void rig_free(struct rig *r)
{
    kv_cache_free(r->kv);
    engine_free(r->e);
}

static struct offload_params params(const struct rig *r, const char *policy, int selection,
                                    int budget)
{
    struct offload_params p;
    offload_params_init(&p, MAX_BATCH, r->max_tokens, 1);
    p.prompt_kv = OFFLOAD_KV_PREFILL;
    p.budget_tokens = budget;
    p.selection = selection;
    p.schedule = policy_find(policy)->offload_schedule;
    p.verify_steps = 1;
    return p;
}

/* Serves SPEC with `policy` (prefill: vanilla prefills too); tokens into w, counters into c. */
static int serve(const char *policy, int selection, int budget, int prefill, struct workload *w,
                 struct serve_counters *c)
{
    char err[512];
    struct rig r;
    int rc = -1;
    if (workload_create(w, SPEC, 12, 1, err, sizeof err) != 0) return -1;
    if (rig_init(&r, workload_max_tokens(w), 16)) goto out;
    const struct policy *pol = policy_find(policy);
    void *ctx = NULL;
    struct offload_params p = params(&r, policy, selection, budget);
    const struct policy_ctx_params cp = {
        .eng = r.e, .kv = r.kv, .seed = 1, .max_batch = MAX_BATCH, .prefill = prefill, .offload = &p};
    if ((!pol->needs_ctx || test_source(r.e, r.kv, &p, NULL)) &&
        pol->ctx_create(&cp, &ctx, err, sizeof err))
        fprintf(stderr, "%s: %s\n", policy, err);
    double wall;
    if (ctx || !prefill)
        rc = serve_run_policy(r.e, r.kv, pol, ctx, w->reqs, w->n, MAX_BATCH, c, &wall, err,
                              sizeof err);
    if (rc) fprintf(stderr, "serve %s: %s\n", policy, err);
    if (pol->needs_ctx && ctx && offload_check(ctx, err, sizeof err)) {
        fprintf(stderr, "check: %s\n", err);
        rc = -1;
    }
    pol->ctx_free(ctx);
    query_source_free(p.source);
    rig_free(&r);
out:
    return rc;
}

static int same_tokens(const struct workload *a, const struct workload *b)
{
    return a->n == b->n && a->output_len == b->output_len &&
           !memcmp(a->token_store, b->token_store, sizeof(int32_t) * a->n * a->output_len);
}

static void test_equals_vanilla(void)
{
    struct workload v, s, a;
    struct serve_counters c;
    EXPECT_EQ_INT(serve("vanilla", 0, 0, 1, &v, &c), 0);
    EXPECT_EQ_INT(c.step_alloc_calls, 0);
    EXPECT_EQ_INT(serve("vanilla", 0, 0, 0, &s, &c), 0); /* synthetic prompt KV: other tokens */
    EXPECT(!same_tokens(&v, &s));
    workload_free(&s);
    const struct {
        const char *policy;
        int selection, budget, equal;
    } cases[] = {{"arkvale", OFFLOAD_HEADWISE, 512, 1},
                 {"arkvale", OFFLOAD_SOLOHEAD, 512, 1},
                 {"infinigen", OFFLOAD_HEADWISE, 512, 1},
                 {"arkvale", OFFLOAD_HEADWISE, 16, 0}}; /* one block: not all selected */
    for (size_t i = 0; i < PULSE_ARRAY_LEN(cases); i++) {
        EXPECT_EQ_INT(serve(cases[i].policy, cases[i].selection, cases[i].budget, 1, &a, &c), 0);
        EXPECT_EQ_INT(same_tokens(&v, &a), cases[i].equal);
        EXPECT(c.recall_bytes > 0);
        EXPECT_EQ_INT(c.step_alloc_calls, 0);
        if (same_tokens(&v, &a) != cases[i].equal)
            fprintf(stderr, "case %zu (%s, sel %d, budget %d)\n", i, cases[i].policy,
                    cases[i].selection, cases[i].budget);
        workload_free(&a);
    }
    workload_free(&v);
}

/* Page `page` of pool `pool` (backend memory of kv's backend) into out. */
static void get_page(const struct rig *r, const struct kv_cache *kv, int32_t page, char *out)
{
    const size_t pb = kv_cache_page_bytes(kv);
    const char *pool = (const char *)kv_cache_view(kv, NULL).pool;
    backend_find("cpu")->download(engine_ctx(r->e), out, pool + (size_t)page * pb, pb);
}

static int nonzero(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 1;
    return 0;
}

/* Admits one request of prompt_len tokens with OFFLOAD_KV_PREFILL beside a plain cache slot
 * prefilled with the same prompt, and compares their bytes: a dense layer's GPU pages, a
 * window layer's ring (the blocks it keeps), a sparse layer's host blocks and tail page. */
static void host_pool_case(const char *model, int prompt_len, int page_size)
{
    char err[256], why[256];
    struct rig r;
    const int n_tokens = prompt_len + 20, req = 7;
    if (rig_init_model(&r, model, n_tokens, page_size)) return;
    struct kv_cache_params kp = {
        r.m->n_layers, r.m->n_kv_heads, r.m->head_dim, page_size, 8u << 20, 1, n_tokens};
    const struct backend *be = backend_find("cpu");
    struct kv_cache *ref = kv_cache_create(&kp, be, engine_ctx(r.e), err, sizeof err);
    struct prefill *pf = prefill_create(r.e, 1, MAX_BATCH);
    struct offload_params p = params(&r, "arkvale", OFFLOAD_HEADWISE, 512);
    struct offload *o = NULL;
    int slot, rs;
    EXPECT(ref && pf);
    test_source(r.e, r.kv, &p, NULL);
    EXPECT_EQ_INT(offload_create(r.e, r.kv, &p, &o, err, sizeof err), 0);
    if (!o || !ref || !pf) goto out;
    EXPECT_EQ_INT(offload_admit(o, req, prompt_len, n_tokens, &slot, why, sizeof why), 0);
    EXPECT_EQ_INT(kv_cache_admit(ref, n_tokens, &rs), 0);
    struct kv_cache_stats ks;
    kv_cache_get_stats(ref, &ks);
    be->memset(engine_ctx(r.e), kv_cache_view(ref, NULL).pool, 0, ks.n_pages * ks.page_bytes);
    EXPECT_EQ_INT(offload_first_token(o, slot),
                  prefill_run(pf, ref, rs, req, prompt_len, n_tokens));
    static char a[1 << 20], b[1 << 20];
    const size_t pb = kv_cache_page_bytes(ref);
    EXPECT(pb <= sizeof a);
    const int nb = (int)PULSE_CEIL_DIV(prompt_len, page_size);
    int diffs = 0, zero = 0, ring_blocks = 0;
    for (int l = 0; l < r.m->n_layers; l++) {
        int n_ref, n_own;
        const int kind = offload_kind(o, l);
        const int32_t *rp = kv_cache_owned_pages(ref, rs, l, &n_ref);
        const int32_t *own = kv_cache_owned_pages(r.kv, slot, l, &n_own);
        const int32_t *row = kv_cache_host_page_ids(r.kv) + kv_cache_row(r.kv, slot, l);
        /* a window layer keeps its last n_own blocks, block i on its row's page */
        const int lo = kind == OFFLOAD_LAYER_WINDOW && nb > n_own ? nb - n_own : 0;
        for (int i = lo; i < nb; i++) {
            get_page(&r, ref, rp[i], a);
            zero += !nonzero(a, pb);
            if (kind != OFFLOAD_LAYER_SPARSE) /* the request's own GPU pages */
                get_page(&r, r.kv, row[i], b);
            else
                memcpy(b, offload_host_block(o, slot, l, i), pb);
            diffs += memcmp(a, b, pb) != 0;
            ring_blocks += kind == OFFLOAD_LAYER_WINDOW;
        }
        if (kind == OFFLOAD_LAYER_WINDOW) EXPECT(n_own < nb); /* the cases wrap the ring */
        if (kind == OFFLOAD_LAYER_SPARSE && prompt_len % page_size) { /* the partial last block: the tail */
            get_page(&r, r.kv, own[n_own - 1], b);
            get_page(&r, ref, rp[nb - 1], a);
            diffs += memcmp(a, b, pb) != 0;
        }
    }
    EXPECT_EQ_INT(diffs, 0);
    EXPECT_EQ_INT(zero, 0); /* real keys and values, not zeros */
    EXPECT(ring_blocks > 0 || r.m->sliding_window == 0);
    EXPECT_EQ_INT(offload_check(o, err, sizeof err), 0);
    if (diffs)
        fprintf(stderr, "host pool case: %s, prompt %d, page size %d\n", model, prompt_len, page_size);
out:
    offload_free(o);
    query_source_free(p.source);
    prefill_free(pf);
    kv_cache_free(ref);
    rig_free(&r);
}

static void test_host_pool_bytes(void)
{
    host_pool_case("tiny", 100, 16); /* a partial last block */
    host_pool_case("tiny", 64, 16);  /* whole blocks */
    host_pool_case("tiny", 37, 1);   /* one-token pages */
    /* window layers (a 24-token window): rings of 3 pages of 16, and of 25 one-token pages */
    host_pool_case("tiny-gemma3", 100, 16);
    host_pool_case("tiny-gemma3", 37, 1);
}

/* CPU prefill speed of the tiny model (chunks of 64), printed for the record. */
static void test_prefill_speed(void)
{
    char err[256];
    const int n = 1024;
    const struct model_config *m = model_config_find("tiny");
    struct engine_params ep = {
        .cfg = m, .be = backend_find("cpu"), .seed = 1, .max_batch = 64, .max_tokens = n + 1};
    struct kv_cache_params kp = {m->n_layers, m->n_kv_heads, m->head_dim, 16, 8u << 20, 1, n + 1};
    struct engine *e = engine_create(&ep, err, sizeof err);
    struct kv_cache *kv = e ? kv_cache_create(&kp, ep.be, engine_ctx(e), err, sizeof err) : NULL;
    struct prefill *pf = e ? prefill_create(e, 1, 64) : NULL;
    int slot;
    EXPECT(kv && pf);
    if (kv && pf && kv_cache_admit(kv, n + 1, &slot) == PULSE_OK) {
        double t0 = pulse_now();
        int32_t t = prefill_run(pf, kv, slot, 0, n, n + 1);
        fprintf(stderr, "tiny prefill: %d tokens in %.1f ms (chunks of 64; next token %d)\n", n,
                1e3 * (pulse_now() - t0), t);
        EXPECT(t >= 0 && t < m->vocab);
    }
    prefill_free(pf);
    kv_cache_free(kv);
    engine_free(e);
}

static void test_cli(void)
{
    char out[4096];
    const char *base = "run --backend cpu --workload uniform:64:1 --output-len 4";
    const struct {
        const char *args, *message;
    } bad[] = {
        {"--policy arkvale --prompt-kv bogus",
         "--prompt-kv: 'bogus' is not locality, synthetic or"},
        {"--policy vanilla --prompt-kv prefil", "--prompt-kv: 'prefil' is not locality"},
        {"--policy vanilla --prompt-kv locality", "--prompt-kv locality: only for offload"},
    };
    char args[512];
    for (size_t i = 0; i < PULSE_ARRAY_LEN(bad); i++) {
        snprintf(args, sizeof args, "%s %s", base, bad[i].args);
        EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 2);
        EXPECT_STR_CONTAINS(out, bad[i].message);
        EXPECT(strchr(out, '\n') == strrchr(out, '\n')); /* one line */
    }
    snprintf(args, sizeof args, "%s --policy vanilla --prompt-kv prefill", base);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 0);
    snprintf(args, sizeof args, "%s --policy infinigen --prompt-kv prefill --budget-tokens 64",
             base);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 0);
}

int main(void)
{
    test_equals_vanilla();
    test_host_pool_bytes();
    test_prefill_speed();
    test_cli();
    return tu_finish("test_prefill");
}
