/* Two batches interleaved at layer boundaries decode each batch's own tokens (DESIGN.md
 * section 3: nothing in the layer code assumes one batch runs all its layers before another).
 * Batch A holds vanilla requests (the engine's pieces over their whole KV), batch B offload
 * requests (arkvale, SoloHead or head-wise, a budget small enough that every step recalls);
 * both share one engine, one KV cache and the engine's scratch. Each is run alone first; then
 * both together in several orders, B's layers split into their issue and finish pieces
 * (offload.h) so that A's layers run while one of B's recalls is in flight: A's layers then
 * B's, B's then A's, one of A's inside each of B's, seeded random merges that keep each
 * batch's own order, and an interruptible scheduler's order (A's layers while B's layer is not
 * ready). Every order gives every request the tokens it had alone. On the cpu backend (CI). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "baselines/registry.h"
#include "common.h"
#include "engine.h"
#include "kv_cache.h"
#include "numeric.h"
#include "offload.h"
#include "testsource.h"
#include "testutil.h"

#define NA 2     /* vanilla requests */
#define NB 2     /* offload requests */
#define STEPS 12 /* decode steps */
#define MAXB (NA + NB)

enum order { A_THEN_B, B_THEN_A, ALTERNATE, RANDOM, POLL, ORDERS };
static const char *const order_names[ORDERS] = {
    "A then B", "B then A", "A's layer inside each of B's", "random",
    "A's layers while B's recall is in flight (ready polled)"};

static const int prompt_a[NA] = {211, 90};
static const int prompt_b[NB] = {333, 178};

/* The offload batch's layer schedule: pulseinfer's (the IRQ this test stands for), unless a
 * test sets another. */
static const struct offload_schedule *rig_schedule;

struct rig {
    struct engine *e;
    struct kv_cache *kv;
    struct offload *o;
    struct query_source *qs;
    struct batch *a, *b;
    struct batch_entry ea[NA], eb[NB];
};

static int rig_create(struct rig *r, int selection)
{
    char err[512];
    memset(r, 0, sizeof *r);
    const int max_tokens = 333 + STEPS + 1;
    const struct model_config *m = model_config_find("tiny");
    struct engine_params ep = {.cfg = m,
                               .be = backend_find("cpu"),
                               .seed = 3,
                               .max_batch = MAXB,
                               .max_tokens = max_tokens};
    if (!(r->e = engine_create(&ep, err, sizeof err))) return fprintf(stderr, "%s\n", err), -1;
    struct kv_cache_params kp = {m->n_layers, m->n_kv_heads, m->head_dim, 16,
                                 64u << 20,   MAXB,          max_tokens};
    if (!(r->kv = kv_cache_create(&kp, ep.be, engine_ctx(r->e), err, sizeof err))) return -1;
    struct offload_params p;
    offload_params_init(&p, MAXB, max_tokens, 3);
    p.schedule = rig_schedule ? rig_schedule : policy_find("pulseinfer")->offload_schedule;
    p.budget_tokens = 64;
    p.selection = selection;
    const struct locality_source_params lp = {.typical_tokens = 250};
    if (!(r->qs = test_source(r->e, r->kv, &p, &lp))) return -1;
    if (offload_create(r->e, r->kv, &p, &r->o, err, sizeof err) != PULSE_OK)
        return fprintf(stderr, "offload: %s\n", err), -1;
    r->a = batch_create(r->e);
    r->b = batch_create(r->e);
    for (int i = 0; i < NA; i++) { /* vanilla: pages and synthetic prompt KV */
        int slot;
        EXPECT_EQ_INT(kv_cache_admit(r->kv, prompt_a[i] + STEPS + 1, &slot), PULSE_OK);
        r->ea[i] = (struct batch_entry){slot, 100 + i, prompt_a[i], prompt_a[i] + STEPS + 1,
                                        engine_first_token(r->e, 100 + i)};
    }
    batch_set(r->e, r->a, r->kv, r->ea, NA);
    engine_fill_prompt(r->e, r->a, r->kv);
    for (int i = 0; i < NB; i++) { /* offload: host pool, digests, hot slots */
        int slot;
        char why[256];
        EXPECT_EQ_INT(offload_admit(r->o, 200 + i, prompt_b[i], prompt_b[i] + STEPS + 1, &slot, why,
                                    sizeof why),
                      PULSE_OK);
        r->eb[i] = (struct batch_entry){slot, 200 + i, prompt_b[i], prompt_b[i] + STEPS + 1,
                                        offload_first_token(r->o, slot)};
    }
    batch_set(r->e, r->b, r->kv, r->eb, NB);
    return 0;
}

static void rig_free(struct rig *r)
{
    if (r->e) {
        batch_free(r->e, r->a);
        batch_free(r->e, r->b);
    }
    offload_free(r->o);
    query_source_free(r->qs);
    kv_cache_free(r->kv);
    engine_free(r->e);
}

/* The event sequence of one step: 0 = A's next layer, 1 = B's next piece (B's layer l is two
 * pieces: issue, then finish); L + 2 L entries. POLL is decided while running. */
static void schedule(enum order ord, int L, uint64_t seed, int *seq)
{
    int na = 0, nb = 0;
    for (int i = 0; i < 3 * L; i++) {
        int pick;
        if (ord == A_THEN_B)
            pick = na == L;
        else if (ord == B_THEN_A)
            pick = nb < 2 * L;
        else if (ord == ALTERNATE)
            pick = !(nb & 1) || na > nb / 2; /* issue, A, finish */
        else
            pick = (int)(pulse_hash64(seed, (uint64_t)i) & 1);
        if (na == L) pick = 1;
        if (nb == 2 * L) pick = 0;
        seq[i] = pick;
        pick ? nb++ : na++;
    }
}

/* One step of both batches in order `ord`; returns how many of A's layers ran while one of B's
 * layers was issued and not finished. */
static int both_step(struct rig *r, enum order ord, int L, uint64_t seed)
{
    int seq[3 * 64], la = 0, lb = 0, inside = 0;
    engine_run_embed(r->e, r->a);
    offload_step_begin(r->o, r->b, r->eb, NB);
    if (ord == POLL) { /* as an interruptible scheduler would */
        for (; lb < L; lb++) {
            offload_layer_issue(r->o, r->b, lb);
            while (!offload_layer_ready(r->o, lb) && la < L) {
                engine_run_layer(r->e, r->a, r->kv, la++);
                inside++;
            }
            offload_layer_finish(r->o, r->b, lb);
        }
    } else {
        schedule(ord, L, seed, seq);
        int piece = 0;
        for (int i = 0; i < 3 * L; i++) {
            if (!seq[i]) {
                inside += piece & 1;
                engine_run_layer(r->e, r->a, r->kv, la++);
            } else if (piece++ & 1) {
                offload_layer_finish(r->o, r->b, lb++);
            } else {
                offload_layer_issue(r->o, r->b, lb);
            }
        }
    }
    while (la < L)
        engine_run_layer(r->e, r->a, r->kv, la++);
    engine_run_head(r->e, r->a);
    EXPECT_EQ_INT(offload_step_end(r->o, r->b), PULSE_OK);
    return inside;
}

/* STEPS decode steps: A alone (run_a), B alone (run_b), or both in order `ord`; tokens into
 * ta [STEPS][NA] and tb [STEPS][NB]. Returns the offload's recalled bytes. */
static int64_t run(int selection, int run_a, int run_b, enum order ord, int32_t *ta, int32_t *tb)
{
    struct rig r;
    if (rig_create(&r, selection)) {
        tu_failures++;
        rig_free(&r);
        return -1;
    }
    const int L = engine_model(r.e)->cfg->n_layers;
    PULSE_CHECK(L <= 64, "test model too deep");
    int inside = 0;
    for (int s = 0; s < STEPS; s++) {
        if (run_a && run_b) {
            inside += both_step(&r, ord, L, 0x51 + (uint64_t)s);
        } else if (run_a) {
            engine_step(r.e, r.a, r.kv);
        } else {
            EXPECT_EQ_INT(offload_step(r.o, r.b, r.eb, NB), PULSE_OK);
        }
        if (run_a) batch_read_tokens(r.e, r.a, ta + s * NA);
        if (run_b) {
            batch_read_tokens(r.e, r.b, tb + s * NB);
            for (int i = 0; i < NB; i++) { /* the host view of B's entries moves with it */
                r.eb[i].pos++;
                r.eb[i].token = tb[s * NB + i];
            }
        }
    }
    if (run_a && run_b && (ord == ALTERNATE || ord == RANDOM))
        EXPECT(inside > 0); /* A's layers really ran inside B's */
    if (run_a && run_b)
        fprintf(stderr, "  %s: %d of A's layers ran between one of B's issue and finish\n",
                order_names[ord], inside);
    struct offload_stats st;
    offload_get_stats(r.o, &st);
    char err[256];
    EXPECT_EQ_INT(offload_check(r.o, err, sizeof err), 0);
    EXPECT_EQ_INT(st.host_syncs, 0);
    rig_free(&r);
    return st.recall_bytes;
}

static void test_orders(int selection)
{
    int32_t ta[STEPS * NA], tb[STEPS * NB], xa[STEPS * NA], xb[STEPS * NB];
    run(selection, 1, 0, A_THEN_B, ta, NULL);
    const int64_t alone = run(selection, 0, 1, A_THEN_B, NULL, tb);
    EXPECT(alone > 0); /* the offload batch recalls every step: the interleaving matters */
    int differ = 0;    /* the two batches' tokens are not the same sequence */
    for (int i = 0; i < STEPS; i++)
        differ |= ta[i * NA] != tb[i * NB];
    EXPECT(differ);
    for (int ord = 0; ord < ORDERS; ord++) {
        const int64_t both = run(selection, 1, 1, (enum order)ord, xa, xb);
        const int eq_a = !memcmp(ta, xa, sizeof ta), eq_b = !memcmp(tb, xb, sizeof tb);
        fprintf(stderr,
                "%s, %s: vanilla batch %s, offload batch %s, recall %lld bytes (%lld "
                "alone)\n",
                selection == OFFLOAD_SOLOHEAD ? "solohead" : "headwise", order_names[ord],
                eq_a ? "same tokens" : "DIFFERENT tokens",
                eq_b ? "same tokens" : "DIFFERENT tokens", (long long)both, (long long)alone);
        EXPECT(eq_a);
        EXPECT(eq_b);
        EXPECT_EQ_INT(both, alone);
    }
}

/* Schedules that break the primitives' rules (offload.h): each aborts in its first step, in a
 * child process, rather than attend a layer nobody selected or select from a query that does
 * not exist yet. */
static void no_pre(struct offload *o, struct batch *bt, int layer)
{
    if (offload_layer_sparse(o, layer)) offload_select(o, bt, layer);
}
static void no_select(struct offload *o, struct batch *bt, int layer)
{
    offload_pre(o, bt, layer);
}
static void two_ahead(struct offload *o, struct batch *bt, int layer)
{
    offload_pre(o, bt, layer);
    if (offload_layer_sparse(o, layer + 2)) offload_select(o, bt, layer + 2);
}
static void pre_twice(struct offload *o, struct batch *bt, int layer)
{
    offload_pre(o, bt, layer);
    offload_pre(o, bt, layer);
}

static void pre_select_prefetch(struct offload *o, struct batch *bt, int layer)
{
    offload_pre(o, bt, layer);
    if (offload_layer_sparse(o, layer)) offload_select(o, bt, layer);
    if (offload_layer_sparse(o, layer + 1)) offload_prefetch(o, bt, layer + 1);
}
static void prefetch_selected(struct offload *o, struct batch *bt, int layer)
{
    offload_pre(o, bt, layer);
    if (offload_layer_sparse(o, layer)) offload_select(o, bt, layer);
    if (offload_layer_sparse(o, layer + 1)) {
        offload_select(o, bt, layer + 1);
        offload_prefetch(o, bt, layer + 1);
    }
}
static void prefetch_two_ahead(struct offload *o, struct batch *bt, int layer)
{
    offload_pre(o, bt, layer);
    if (offload_layer_sparse(o, layer)) offload_select(o, bt, layer);
    if (offload_layer_sparse(o, layer + 2)) offload_prefetch(o, bt, layer + 2);
}

static void test_schedule_rules(void)
{
    static const struct offload_schedule bad[] = {
        {"no pre-attention", 0, no_pre, 0},
        {"no selection", 0, no_select, 0},
        {"two layers ahead", 1, two_ahead, 0},
        {"pre-attention twice", 0, pre_twice, 0},
        {"a prefetch in a schedule that does not prefetch", 1, pre_select_prefetch, 0},
        {"a layer selected and prefetched in one piece", 1, prefetch_selected, 1},
        {"a prefetch two layers ahead", 1, prefetch_two_ahead, 1}};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(bad); i++) {
        fflush(stderr);
        const pid_t pid = fork();
        if (pid == 0) {
            if (!freopen("/dev/null", "w", stderr)) _exit(3);
            rig_schedule = &bad[i];
            struct rig r;
            if (rig_create(&r, OFFLOAD_SOLOHEAD)) _exit(4);
            offload_step(r.o, r.b, r.eb, NB);
            _exit(0); /* not reached */
        }
        int st = 0;
        waitpid(pid, &st, 0);
        EXPECT(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
        fprintf(stderr, "schedule '%s': %s\n", bad[i].name,
                WIFSIGNALED(st) ? "refused (abort)" : "NOT refused");
    }
}

int main(void)
{
    test_schedule_rules();
    test_orders(OFFLOAD_SOLOHEAD);
    test_orders(OFFLOAD_HEADWISE);
    return tu_finish("test_interleave");
}
