/* The MAM head profile (mam.h), on the CPU:
 * - a hand-built layer (2 KV heads, known keys) gives the hand-computed MAM: one head's top-k
 *   covers all the mass of both query heads, the other's a known fraction;
 * - random paged layers (GQA, awkward lengths, scrambled pages) agree with a brute-force
 *   computation; budget >= context gives exactly 1 everywhere; MAM is in [0, 1] and never
 *   falls when the budget grows;
 * - selectors are argmax / argmin, ties to the lower head; the JSON round-trips exactly;
 *   corrupt or mismatched profiles give a message naming the file and the field;
 * - the engine hook: direct and staged probes agree bit for bit, the hook allocates nothing
 *   inside steps and does not change the tokens;
 * - `pulse profile-heads` end to end writes the same table, and bad flags exit 2. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "engine.h"
#include "mam.h"
#include "mem.h"
#include "numeric.h"
#include "select.h"
#include "testutil.h"

/* ------------------------------------------------------------------ a host paged layer */

struct layer {
    int batch, nq, nkv, hd, ps, max_pages;
    int32_t n[8];
    uint16_t *pool, *q;
    int32_t *ids, *start;
    struct kv_view v;
};

static uint16_t *elem(struct layer *L, int b, int t, int h, int which)
{
    int page = L->ids[L->start[b] + t / L->ps];
    size_t pe = (size_t)L->nkv * 2 * L->ps * L->hd;
    return L->pool + page * pe + (((size_t)h * 2 + which) * L->ps + t % L->ps) * L->hd;
}

static int gcd(int a, int b)
{
    return b ? gcd(b, a % b) : a;
}

/* Pages of entry b are b * max_pages + i, stored in a scrambled order of the pool. */
static void layer_init(struct layer *L, int batch, int nq, int nkv, int hd, int ps,
                       const int32_t *n, int max_tokens)
{
    memset(L, 0, sizeof *L);
    L->batch = batch, L->nq = nq, L->nkv = nkv, L->hd = hd, L->ps = ps;
    L->max_pages = PULSE_CEIL_DIV(max_tokens, ps);
    int np = batch * L->max_pages;
    memcpy(L->n, n, sizeof(int32_t) * batch);
    L->pool = calloc((size_t)np * nkv * 2 * ps * hd, 2);
    L->q = calloc((size_t)batch * nq * hd, 2);
    L->ids = calloc(np, 4);
    L->start = calloc(batch, 4);
    int k = 7; /* a multiplier coprime to np makes i -> (k i + 3) mod np a permutation */
    while (gcd(k, np) != 1)
        k += 2;
    for (int i = 0; i < np; i++)
        L->ids[i] = (int32_t)(((int64_t)i * k + 3) % np);
    for (int b = 0; b < batch; b++)
        L->start[b] = b * L->max_pages;
    L->v = (struct kv_view){L->pool, L->ids, L->start, ps, nkv, hd, 0, 0, NULL, NULL};
}

static void layer_random(struct layer *L, uint64_t seed)
{
    for (int b = 0; b < L->batch; b++) {
        for (int t = 0; t < L->n[b]; t++)
            for (int h = 0; h < L->nkv; h++)
                for (int w = 0; w < 2; w++)
                    for (int d = 0; d < L->hd; d++)
                        elem(L, b, t, h, w)[d] = f32_to_bf16(
                            2.0f *
                            pulse_uniform(seed,
                                          ((((uint64_t)b * 4096 + t) * 64 + h) * 2 + w) * 512 + d));
        for (int i = 0; i < L->nq * L->hd; i++)
            L->q[(size_t)b * L->nq * L->hd + i] =
                f32_to_bf16(3.0f * pulse_uniform(seed + 1, (uint64_t)b * 99991 + i));
    }
}

static void layer_free(struct layer *L)
{
    free(L->pool), free(L->q), free(L->ids), free(L->start);
}

static struct mam_acc *acc_for(const struct layer *L, int n_layers, int budget, int sink,
                               int window, int max_tokens, float scale)
{
    struct mam_params p = {n_layers, L->nq,    L->nkv,     L->hd, L->ps, budget, sink,
                           window,   L->batch, max_tokens, scale, 0,     0};
    char err[256];
    struct mam_acc *a = mam_acc_create(&p, err, sizeof err);
    if (!a) fprintf(stderr, "mam_acc_create: %s\n", err);
    return a;
}

static int finalize(struct mam_acc *a, struct mam_profile *pr)
{
    char err[256];
    int rc = mam_acc_finalize(a, pr, err, sizeof err);
    if (rc) fprintf(stderr, "finalize: %s\n", err);
    return rc;
}

/* ------------------------------------------------------------------ hand-built case */

/* One entry of 8 tokens in 4 blocks of 2, scale 1, sink 0, window 0 (tail block 3 forced),
 * budget 2 of the candidates {0, 1, 2}; head dim 2, one query head per KV head.
 *   KV head 0 keys: block 1 = (64, 0) x2, all else 0; q0 = (1, 0).
 *     scores [0, 64, 0, 0] -> top-2 = {1, 0} (0 beats 2 on the tie) -> selects {0, 1, 3}.
 *     query head 0's logits: 64 on block 1, 0 elsewhere: its mass is in block 1 (e^-64 off).
 *   KV head 1 keys: block 0 = (1, 1) x2, block 1 = 0, block 2 = (64, -128), (-128, 64),
 *     block 3 = 0; q1 = (1, 1). Block 2's digest bound is 128 but its logits are -64:
 *     scores [2, 0, 128, 0] -> selects {0, 2, 3}. Query head 1's weights per block:
 *     2e^2, 2, 2e^-64, 2.
 * Head 0 covers all mass of both query heads: MAM 1. Head 1 covers ~0 of query head 0 and
 * (2e^2 + 2) / (2e^2 + 4) of query head 1: MAM = (e^2 + 1) / (e^2 + 2) / 2. */
static void test_hand_case(void)
{
    int32_t n = 8;
    struct layer L;
    layer_init(&L, 1, 2, 2, 2, 2, &n, 8);
    float k0[8][2] = {{0, 0}, {0, 0}, {64, 0}, {64, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}};
    float k1[8][2] = {{1, 1}, {1, 1}, {0, 0}, {0, 0}, {64, -128}, {-128, 64}, {0, 0}, {0, 0}};
    for (int t = 0; t < 8; t++)
        for (int d = 0; d < 2; d++) {
            elem(&L, 0, t, 0, 0)[d] = f32_to_bf16(k0[t][d]);
            elem(&L, 0, t, 1, 0)[d] = f32_to_bf16(k1[t][d]);
            elem(&L, 0, t, 0, 1)[d] = elem(&L, 0, t, 1, 1)[d] = f32_to_bf16(0.5f); /* V unused */
        }
    float q[4] = {1, 0, 1, 1};
    for (int i = 0; i < 4; i++)
        L.q[i] = f32_to_bf16(q[i]);
    struct mam_acc *a = acc_for(&L, 1, 2, 0, 0, 8, 1.0f);
    EXPECT(a != NULL);
    if (!a) return;
    mam_acc_add_layer(a, 0, L.q, &L.v, L.n, 1);
    EXPECT_EQ_INT(mam_acc_terms(a, 0), 2);
    struct mam_profile pr;
    EXPECT_EQ_INT(finalize(a, &pr), 0);
    double e2 = exp(2.0);
    EXPECT_NEAR(pr.mam[0], 1.0, 1e-12);
    EXPECT_NEAR(pr.mam[1], (e2 + 1) / (e2 + 2) / 2, 1e-12);
    int sel, rev;
    mam_profile_selectors(&pr, 0, &sel);
    mam_profile_selectors(&pr, 1, &rev);
    EXPECT_EQ_INT(sel, 0);
    EXPECT_EQ_INT(rev, 1);
    /* a second identical step leaves the means unchanged */
    mam_acc_add_layer(a, 0, L.q, &L.v, L.n, 1);
    struct mam_profile pr2;
    EXPECT_EQ_INT(finalize(a, &pr2), 0);
    EXPECT_NEAR(pr2.mam[1], pr.mam[1], 1e-15);
    mam_profile_free(&pr2);
    mam_profile_free(&pr);
    mam_acc_free(a);
    layer_free(&L);
}

/* ------------------------------------------------------------------ random layers */

/* MAM of one observation, computed directly: selection from the select.h references, the
 * attention from plain double softmax over the flat token order. */
static void brute_force(struct layer *L, int budget, int sink, int window, int max_tokens,
                        double *out /* [nkv] */)
{
    int MB = PULSE_CEIL_DIV(max_tokens, L->ps);
    struct select_cfg cfg = {L->nq, L->nkv, L->hd, L->ps, budget, sink, window, MB, 0};
    int ms = select_max_selected(&cfg), G = L->nq / L->nkv;
    uint16_t *dig = calloc((size_t)L->batch * L->max_pages * L->nkv * 2 * L->hd, 2);
    float *scores = malloc(select_scores_bytes(&cfg, L->batch, SELECT_HEADWISE));
    int32_t *idx = malloc(sizeof(int32_t) * L->batch * L->nkv * ms);
    int32_t *cnt = malloc(sizeof(int32_t) * L->batch * L->nkv);
    struct digest_view dv = {dig, L->ids, L->start, L->nkv, L->hd};
    struct kctx c = {0};
    digest_build_ref(&c, &L->v, &dv, L->n, L->batch, SELECT_HEADWISE, max_tokens);
    select_blocks_ref(&c, &cfg, L->q, &dv, L->n, scores, idx, cnt, L->batch, SELECT_HEADWISE);
    double scale = 1.0 / sqrt((double)L->hd), *p = malloc(sizeof(double) * max_tokens);
    for (int h = 0; h < L->nkv; h++)
        out[h] = 0;
    for (int b = 0; b < L->batch; b++)
        for (int j = 0; j < L->nq; j++) {
            double m = -1e300, z = 0;
            for (int t = 0; t < L->n[b]; t++) {
                double s = 0;
                for (int d = 0; d < L->hd; d++)
                    s += (double)bf16_to_f32(L->q[((size_t)b * L->nq + j) * L->hd + d]) *
                         bf16_to_f32(elem(L, b, t, j / G, 0)[d]);
                p[t] = s * scale;
                if (p[t] > m) m = p[t];
            }
            for (int t = 0; t < L->n[b]; t++)
                z += p[t] = exp(p[t] - m);
            for (int h = 0; h < L->nkv; h++) {
                const int32_t *sel = idx + ((size_t)b * L->nkv + h) * ms;
                double c2 = 0;
                for (int s = 0; s < cnt[b * L->nkv + h]; s++)
                    for (int t = sel[s] * L->ps; t < L->n[b] && t < (sel[s] + 1) * L->ps; t++)
                        c2 += p[t];
                out[h] += c2 / z / (L->batch * L->nq);
            }
        }
    free(dig), free(scores), free(idx), free(cnt), free(p);
}

static void test_random_layers(void)
{
    struct shape {
        int batch, nq, nkv, hd, ps, budget, sink, window;
        int32_t n[4];
    } shapes[] = {
        {3, 8, 2, 16, 8, 2, 1, 2, {97, 1, 50}},     /* GQA 4, partial tails, a one-token entry */
        {2, 4, 4, 8, 1, 5, 1, 2, {23, 40}},         /* one-token pages */
        {4, 6, 3, 32, 5, 3, 0, 0, {17, 33, 5, 64}}, /* no sink, no window */
    };
    for (size_t si = 0; si < PULSE_ARRAY_LEN(shapes); si++) {
        struct shape *s = &shapes[si];
        int max_tokens = 100;
        struct layer L;
        layer_init(&L, s->batch, s->nq, s->nkv, s->hd, s->ps, s->n, max_tokens);
        layer_random(&L, 11 + si);
        /* against brute force, 2 layers of different data */
        struct mam_acc *a = acc_for(&L, 2, s->budget, s->sink, s->window, max_tokens, 0.0f);
        mam_acc_add_layer(a, 0, L.q, &L.v, L.n, L.batch);
        double want0[64], want1[64];
        brute_force(&L, s->budget, s->sink, s->window, max_tokens, want0);
        layer_random(&L, 101 + si);
        mam_acc_add_layer(a, 1, L.q, &L.v, L.n, L.batch);
        brute_force(&L, s->budget, s->sink, s->window, max_tokens, want1);
        EXPECT_EQ_INT(mam_acc_terms(a, 1), s->batch * s->nq);
        struct mam_profile pr;
        EXPECT_EQ_INT(finalize(a, &pr), 0);
        int distinct = 0;
        for (int h = 0; h < s->nkv; h++) {
            EXPECT_NEAR(pr.mam[h], want0[h], 1e-6);
            EXPECT_NEAR(pr.mam[s->nkv + h], want1[h], 1e-6);
            distinct += pr.mam[h] != pr.mam[0];
        }
        EXPECT(distinct > 0); /* heads differ: the test is not degenerate */
        mam_profile_free(&pr);
        mam_acc_free(a);
        /* budget >= context: every head covers everything, exactly */
        a = acc_for(&L, 1, 1000, s->sink, s->window, max_tokens, 0.0f);
        mam_acc_add_layer(a, 0, L.q, &L.v, L.n, L.batch);
        EXPECT_EQ_INT(finalize(a, &pr), 0);
        for (int h = 0; h < s->nkv; h++)
            EXPECT(pr.mam[h] == 1.0);
        mam_profile_free(&pr);
        mam_acc_free(a);
        /* in [0, 1] and never lower with a larger budget (top-k sets are nested) */
        double prev[64] = {0};
        for (int k = 0; k <= 8; k++) {
            a = acc_for(&L, 1, k, s->sink, s->window, max_tokens, 0.0f);
            mam_acc_add_layer(a, 0, L.q, &L.v, L.n, L.batch);
            EXPECT_EQ_INT(finalize(a, &pr), 0);
            for (int h = 0; h < s->nkv; h++) {
                EXPECT(pr.mam[h] > 0.0 && pr.mam[h] <= 1.0);
                EXPECT(pr.mam[h] >= prev[h]);
                prev[h] = pr.mam[h];
            }
            mam_profile_free(&pr);
            mam_acc_free(a);
        }
        layer_free(&L);
    }
}

static void test_bad_params(void)
{
    char err[256];
    struct mam_params p = {4, 4, 2, 64, 16, 8, 1, 2, 1, 100, 0.0f, 0, 0};
    p.n_heads = 3;
    EXPECT(mam_acc_create(&p, err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "n_heads");
    p.n_heads = 4, p.max_tokens = 16 * SELECT_MAX_BLOCKS + 1;
    EXPECT(mam_acc_create(&p, err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "SELECT_MAX_BLOCKS");
    p.max_tokens = 100;
    struct mam_acc *a = mam_acc_create(&p, err, sizeof err);
    struct mam_profile pr;
    EXPECT_EQ_INT(mam_acc_finalize(a, &pr, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "layer 0 has no observation");
    mam_acc_free(a);
}

/* ------------------------------------------------------------------ profile: selectors, JSON */

static void test_selectors(void)
{
    struct mam_profile pr;
    EXPECT_EQ_INT(mam_profile_init(&pr, 4, 3), 0);
    double v[4][3] = {{0.5, 0.5, 0.2}, {0.1, 0.3, 0.3}, {0.7, 0.7, 0.7}, {0.2, 0.9, 0.0}};
    memcpy(pr.mam, v, sizeof v);
    int hi[4], lo[4];
    mam_profile_selectors(&pr, 0, hi);
    mam_profile_selectors(&pr, 1, lo);
    int want_hi[4] = {0, 1, 0, 1}, want_lo[4] = {2, 0, 0, 2};
    for (int l = 0; l < 4; l++) {
        EXPECT_EQ_INT(hi[l], want_hi[l]);
        EXPECT_EQ_INT(lo[l], want_lo[l]);
    }
    mam_profile_free(&pr);
    EXPECT(pr.mam == NULL);
}

static void tmp_path(char *path, size_t n, const char *tag)
{
    snprintf(path, n, "/tmp/pulse_mam_%s_%d.json", tag, (int)getpid());
}

static void test_json_roundtrip(void)
{
    struct mam_profile pr, back;
    EXPECT_EQ_INT(mam_profile_init(&pr, 4, 2), 0); /* the tiny model's shape */
    for (int i = 0; i < 8; i++)
        pr.mam[i] = (i % 3 == 0 ? 1.0 / 3.0 : 0.1 * i) + 1e-17 * i;
    pr.mam[5] = 0.0, pr.mam[6] = 1.0;
    pr.meta = (struct mam_profile_meta){"tiny", "cpu", 2048, 16, 1, 2, 16, 4096, 3, 42};
    char path[256], err[512];
    tmp_path(path, sizeof path, "rt");
    EXPECT_EQ_INT(mam_profile_write(&pr, path, err, sizeof err), 0);
    EXPECT_EQ_INT(mam_profile_read(path, model_config_find("tiny"), &back, err, sizeof err), 0);
    EXPECT_EQ_INT(back.n_layers, 4);
    EXPECT_EQ_INT(back.n_kv_heads, 2);
    if (back.mam) EXPECT(memcmp(back.mam, pr.mam, sizeof(double) * 8) == 0); /* bit-exact */
    EXPECT(memcmp(&back.meta, &pr.meta, sizeof pr.meta) == 0);
    /* the file carries the selectors and the provenance of a result file */
    json_error_t je;
    json_t *r = json_load_file(path, 0, &je);
    EXPECT(json_is_object(json_object_get(r, "tool")));
    EXPECT(!strcmp(json_string_value(json_object_get(r, "model")), "tiny"));
    EXPECT_EQ_INT(json_array_size(json_object_get(r, "selector")), 4);
    json_t *rev = json_object_get(r, "selector_reversed");
    EXPECT_EQ_INT(json_integer_value(json_array_get(rev, 2)), 1);
    json_decref(r);
    mam_profile_free(&back);
    /* the write is atomic: an unwritable place fails cleanly */
    EXPECT_EQ_INT(mam_profile_write(&pr, "/nonexistent/dir/p.json", err, sizeof err), PULSE_ERR_IO);
    EXPECT_STR_CONTAINS(err, "/nonexistent/dir/p.json: cannot write");
    mam_profile_free(&pr);
    unlink(path);
}

/* A valid 2-layer x 2-head profile with pieces replaceable for the corrupt cases. */
static void write_profile(const char *path, const char *schema, const char *cfg, const char *mam,
                          const char *sel, const char *rev)
{
    FILE *f = fopen(path, "w");
    fprintf(f,
            "{\"schema_version\": %s, \"tool\": {}, \"model\": \"m\", \"config\": %s, "
            "\"mam\": %s, \"selector\": %s, \"selector_reversed\": %s}",
            schema, cfg, mam, sel, rev);
    fclose(f);
}

static void test_corrupt_profiles(void)
{
    const char *CFG = "{\"budget_tokens\": 32, \"block_size\": 16, \"sink\": 1, \"window\": 2, "
                      "\"steps\": 4, \"prompt\": 100}";
    const char *MAM = "[[0.5, 0.25], [0.125, 0.75]]", *SEL = "[0, 1]", *REV = "[1, 0]";
    struct {
        const char *schema, *cfg, *mam, *sel, *rev, *msg;
    } cases[] = {
        {"1", CFG, MAM, SEL, REV, NULL}, /* the valid one */
        {"2", CFG, MAM, SEL, REV, "schema_version: expected 1"},
        {"\"1\"", CFG, MAM, SEL, REV, "schema_version: expected 1"},
        {"1", "[]", MAM, SEL, REV, "config: expected an object"},
        {"1", "{\"block_size\": 16}", MAM, SEL, REV, "config.budget_tokens: expected an integer"},
        {"1",
         "{\"budget_tokens\": 32, \"block_size\": 0, \"sink\": 1, \"window\": 2, "
         "\"steps\": 4, \"prompt\": 100}",
         MAM, SEL, REV, "config.block_size: expected an integer in [1,"},
        {"1",
         "{\"budget_tokens\": 32, \"block_size\": 16, \"sink\": -1, \"window\": 2, "
         "\"steps\": 4, \"prompt\": 100}",
         MAM, SEL, REV, "config.sink"},
        {"1", CFG, "[]", SEL, REV, "mam: expected a non-empty array"},
        {"1", CFG, "{}", SEL, REV, "mam: expected a non-empty array"},
        {"1", CFG, "[[]]", SEL, REV, "mam[0]: expected an array of 1..64"},
        {"1", CFG, "[[0.5, 0.25], [0.1]]", SEL, REV, "mam[1]: expected an array of 2 values"},
        {"1", CFG, "[[0.5, 1.5], [0.125, 0.75]]", SEL, REV, "mam[0][1]: expected a number in [0,"},
        {"1", CFG, "[[0.5, -0.1], [0.125, 0.75]]", SEL, REV, "mam[0][1]: expected a number"},
        {"1", CFG, "[[0.5, 0.25], [\"x\", 0.75]]", SEL, REV, "mam[1][0]: expected a number"},
        {"1", CFG, MAM, "[0]", REV, "selector: expected an array of 2 head indices"},
        {"1", CFG, MAM, "[0, 0]", REV, "selector[1]: expected 1, the highest-MAM head"},
        {"1", CFG, MAM, SEL, "[1, 1]", "selector_reversed[1]: expected 0, the lowest-MAM head"},
        {"1", CFG, MAM, SEL, "null", "selector_reversed: expected an array"},
    };
    char path[256], err[512];
    tmp_path(path, sizeof path, "bad");
    for (size_t i = 0; i < PULSE_ARRAY_LEN(cases); i++) {
        write_profile(path, cases[i].schema, cases[i].cfg, cases[i].mam, cases[i].sel,
                      cases[i].rev);
        struct mam_profile pr;
        err[0] = 0;
        int rc = mam_profile_read(path, NULL, &pr, err, sizeof err);
        if (!cases[i].msg) {
            EXPECT_EQ_INT(rc, 0);
            EXPECT_EQ_INT(pr.n_layers, 2);
            EXPECT(!strcmp(pr.meta.model, "m") && pr.meta.prompt == 100);
            mam_profile_free(&pr);
            continue;
        }
        if (rc != PULSE_ERR_INVALID) fprintf(stderr, "corrupt case %zu: rc %d\n", i, rc);
        EXPECT_EQ_INT(rc, PULSE_ERR_INVALID);
        EXPECT_STR_CONTAINS(err, path);
        EXPECT_STR_CONTAINS(err, cases[i].msg);
        EXPECT(pr.mam == NULL && pr.n_layers == 0);
    }
    /* not JSON, not an object, no model, no file */
    struct {
        const char *text, *msg;
        int rc; /* a file that is not JSON is unreadable (IO); bad content is INVALID */
    } raw[] = {{"{\"mam\": [", "not JSON: line 1", PULSE_ERR_IO},
               {"[1, 2]", "expected a JSON object at the top", PULSE_ERR_INVALID},
               {"{\"schema_version\": 1}", "model: expected a model name", PULSE_ERR_INVALID},
               {"", "not JSON", PULSE_ERR_IO}};
    struct mam_profile pr;
    for (size_t i = 0; i < PULSE_ARRAY_LEN(raw); i++) {
        FILE *f = fopen(path, "w");
        fputs(raw[i].text, f);
        fclose(f);
        EXPECT_EQ_INT(mam_profile_read(path, NULL, &pr, err, sizeof err), raw[i].rc);
        EXPECT_STR_CONTAINS(err, path);
        EXPECT_STR_CONTAINS(err, raw[i].msg);
    }
    /* a valid profile of another shape than the model */
    write_profile(path, "1", CFG, MAM, SEL, REV);
    EXPECT_EQ_INT(mam_profile_read(path, model_config_find("tiny"), &pr, err, sizeof err),
                  PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "has 2 layers x 2 KV heads but model tiny has 4 x 2");
    EXPECT_EQ_INT(mam_profile_read(path, model_config_find("qwen3-14b"), &pr, err, sizeof err),
                  PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "model qwen3-14b has 40 x 8");
    unlink(path);
    EXPECT_EQ_INT(mam_profile_read(path, NULL, &pr, err, sizeof err), PULSE_ERR_IO);
    EXPECT_STR_CONTAINS(err, "cannot open");
    /* a directory, or a FIFO, is refused before reading (results_read_json) */
    EXPECT_EQ_INT(mam_profile_read("/tmp", NULL, &pr, err, sizeof err), PULSE_ERR_IO);
    EXPECT_STR_CONTAINS(err, "/tmp: is a directory, not a JSON file");
    EXPECT_EQ_INT(mam_profile_read("/dev/zero", NULL, &pr, err, sizeof err), PULSE_ERR_IO);
    EXPECT_STR_CONTAINS(err, "is not a regular file");
}

/* ------------------------------------------------------------------ the engine hook */

struct run_cfg {
    int prompt, steps, batch, budget_tokens, stage, hook;
    uint64_t seed;
};

/* What `pulse profile-heads` does, in process: tiny model on the CPU backend. Fills pr (when
 * hooked) and the last tokens; checks the step allocates nothing. */
static void run_profile(const struct run_cfg *rc, struct mam_profile *pr, int32_t *tokens,
                        int64_t *staged)
{
    const struct model_config *m = model_config_find("tiny");
    const struct backend *be = backend_find("cpu");
    int reserved = rc->prompt + rc->steps + 1;
    char err[256];
    struct engine_params ep = {.cfg = m,
                               .be = be,
                               .seed = rc->seed,
                               .max_batch = rc->batch,
                               .max_tokens = reserved,
                               .use_graph = 0};
    struct engine *e = engine_create(&ep, err, sizeof err);
    struct kv_cache_params kp = {m->n_layers, m->n_kv_heads, m->head_dim, 16,
                                 1u << 24,    rc->batch,     reserved};
    struct kv_cache *kv = kv_cache_create(&kp, be, engine_ctx(e), err, sizeof err);
    struct batch *bt = batch_create(e);
    struct batch_entry en[8];
    for (int b = 0; b < rc->batch; b++) {
        int slot;
        EXPECT_EQ_INT(kv_cache_admit(kv, reserved, &slot), 0);
        en[b] = (struct batch_entry){slot, b, rc->prompt, reserved, engine_first_token(e, b)};
    }
    batch_set(e, bt, kv, en, rc->batch);
    engine_fill_prompt(e, bt, kv);
    struct mam_params mp = {
        m->n_layers, m->n_heads, m->n_kv_heads, m->head_dim, 16, rc->budget_tokens / 16, 1, 2,
        rc->batch,   reserved,   0.0f,          0,           0};
    struct mam_acc *acc = mam_acc_create(&mp, err, sizeof err);
    struct mam_probe *probe = mam_probe_create(acc, be, engine_ctx(e), rc->stage, err, sizeof err);
    struct engine_layer_hook hook = mam_probe_hook(probe);
    if (rc->hook) batch_set_hook(bt, &hook);
    struct mem_stats m0, m1;
    mem_get_stats(&m0);
    for (int s = 0; s < rc->steps; s++)
        engine_step(e, bt, kv);
    batch_read_tokens(e, bt, tokens);
    mem_get_stats(&m1);
    for (int k = 0; k < MEM_KINDS; k++) {
        EXPECT_EQ_INT(m1.alloc_calls[k], m0.alloc_calls[k]);
        EXPECT_EQ_INT(m1.live_bytes[k], m0.live_bytes[k]);
    }
    *staged = mam_probe_staged_bytes(probe);
    if (rc->hook) {
        for (int l = 0; l < m->n_layers; l++)
            EXPECT_EQ_INT(mam_acc_terms(acc, l), (int64_t)rc->steps * rc->batch * m->n_heads);
        EXPECT_EQ_INT(finalize(acc, pr), 0);
    }
    batch_set_hook(bt, NULL);
    mam_probe_free(probe);
    mam_acc_free(acc);
    batch_free(e, bt);
    kv_cache_free(kv);
    engine_free(e);
}

static void test_engine_hook(void)
{
    struct run_cfg direct = {150, 3, 3, 32, 0, 1, 7}, staged = direct, none = direct;
    staged.stage = 1;
    none.hook = 0;
    struct mam_profile a, b;
    int32_t ta[8], tb[8], tn[8];
    int64_t sa, sb, sn;
    run_profile(&direct, &a, ta, &sa);
    run_profile(&staged, &b, tb, &sb);
    run_profile(&none, NULL, tn, &sn);
    EXPECT_EQ_INT(sa, 0);
    EXPECT(sb > 0);
    EXPECT(a.mam && b.mam && memcmp(a.mam, b.mam, sizeof(double) * 8) == 0);
    EXPECT(memcmp(ta, tn, sizeof(int32_t) * 3) == 0); /* the hook does not change the step */
    EXPECT(memcmp(tb, tn, sizeof(int32_t) * 3) == 0);
    for (int i = 0; i < 8; i++)
        EXPECT(a.mam[i] > 0.0 && a.mam[i] <= 1.0);
    mam_profile_free(&a);
    mam_profile_free(&b);
}

/* ------------------------------------------------------------------ the command line */

static char out[1 << 16];

static int run_cli(const char *args)
{
    return tu_run_pulse(args, out, sizeof out);
}

static void test_cli(void)
{
    char path[256], args[1024], err[512];
    tmp_path(path, sizeof path, "cli");
    snprintf(args, sizeof args,
             "profile-heads --model tiny --backend cpu --prompt-len 150 --steps 3 --batch 3 "
             "--budget-tokens 32 --seed 7 --out %s",
             path);
    EXPECT_EQ_INT(run_cli(args), 0);
    EXPECT_STR_CONTAINS(out, "selector");
    struct mam_profile pr, want;
    EXPECT_EQ_INT(mam_profile_read(path, model_config_find("tiny"), &pr, err, sizeof err), 0);
    struct run_cfg rc = {150, 3, 3, 32, 0, 1, 7};
    int32_t toks[8];
    int64_t staged;
    run_profile(&rc, &want, toks, &staged);
    if (pr.mam && want.mam) /* the command computes exactly what the library does */
        EXPECT(memcmp(pr.mam, want.mam, sizeof(double) * 8) == 0);
    EXPECT(!strcmp(pr.meta.model, "tiny") && !strcmp(pr.meta.backend, "cpu"));
    EXPECT_EQ_INT(pr.meta.steps, 3);
    EXPECT_EQ_INT(pr.meta.prompt, 150);
    EXPECT_EQ_INT(pr.meta.batch, 3);
    EXPECT_EQ_INT(pr.meta.budget_tokens, 32);
    EXPECT_EQ_INT(pr.meta.block_size, 16);
    EXPECT_EQ_INT(pr.meta.sink, 1);
    EXPECT_EQ_INT(pr.meta.window, 2);
    EXPECT_EQ_INT(pr.meta.seed, 7);
    mam_profile_free(&pr);
    mam_profile_free(&want);
    unlink(path);
    /* Gemma 3 (one KV head, local layers): a selector per query head, the local layers (every
     * layer but each third) unobserved with rows of 0, the global ones measured */
    snprintf(args, sizeof args,
             "profile-heads --model tiny-gemma3 --backend cpu --prompt-len 256 --steps 2 "
             "--budget-tokens 64 --out %s",
             path);
    EXPECT_EQ_INT(run_cli(args), 0);
    EXPECT_EQ_INT(mam_profile_read(path, NULL, &pr, err, sizeof err), 0);
    const struct model_config *g3 = model_config_find("tiny-gemma3");
    EXPECT_EQ_INT(pr.n_layers, g3->n_layers);
    EXPECT_EQ_INT(pr.n_kv_heads, g3->n_heads);
    for (int l = 0; pr.mam && l < pr.n_layers; l++) {
        double row = 0;
        for (int h = 0; h < pr.n_kv_heads; h++)
            row += pr.mam[(size_t)l * pr.n_kv_heads + h];
        if ((l + 1) % g3->sliding_pattern)
            EXPECT(row == 0.0);
        else
            EXPECT(row > 0.0);
    }
    mam_profile_free(&pr);
    unlink(path);

    struct {
        const char *args, *msg;
        int code;
    } bad[] = {
        {"profile-heads --bogus", "unknown or incomplete option '--bogus'", 2},
        {"profile-heads --out /tmp/x.json", "--model: required", 2},
        {"profile-heads --model tiny", "--out: required", 2},
        {"profile-heads --model gpt-9 --out /tmp/x.json", "--model: unknown model 'gpt-9'", 2},
        {"profile-heads --model tiny --backend tpu --out /tmp/x.json", "--backend: unknown", 2},
        {"profile-heads --model tiny --steps 0 --out /tmp/x.json", "--steps: '0' is not", 2},
        {"profile-heads --model tiny --batch x --out /tmp/x.json", "--batch: 'x' is not", 2},
        {"profile-heads --model tiny --prompt-len -5 --out /tmp/x.json", "--prompt-len: '-5'", 2},
        {"profile-heads --model tiny --budget-tokens 100 --out /tmp/x.json",
         "--budget-tokens: 100 is not a multiple of the block size 16 (--block-size)", 2},
        {"profile-heads --model tiny --prompt-len 600000 --block-size 1 --out /tmp/x.json",
         "exceed 32768 blocks", 2},
        {"profile-heads --model tiny --out /tmp/x.json extra", "unexpected argument 'extra'", 2},
        {"profile-heads --model tiny --backend cpu --prompt-len 20 --steps 1 --budget-tokens 16 "
         "--out /nonexistent/dir/p.json",
         "--out: /nonexistent/dir/p.json: cannot write", 2}, /* checked before the work */
    };
    for (size_t i = 0; i < PULSE_ARRAY_LEN(bad); i++) {
        int code = run_cli(bad[i].args);
        if (code != bad[i].code || !strstr(out, bad[i].msg))
            fprintf(stderr, "case '%s': exit %d, output: %s", bad[i].args, code, out);
        EXPECT_EQ_INT(code, bad[i].code);
        EXPECT_STR_CONTAINS(out, bad[i].msg);
        char *nl = strchr(out, '\n');
        if (bad[i].code == 2) EXPECT(nl == NULL || nl[1] == 0); /* one line */
    }
    EXPECT_EQ_INT(run_cli("profile-heads --help"), 0);
    EXPECT_STR_CONTAINS(out, "usage: pulse profile-heads");
    EXPECT_EQ_INT(run_cli("--help"), 0);
    EXPECT_STR_CONTAINS(out, "profile-heads");
}

int main(void)
{
    test_hand_case();
    test_random_layers();
    test_bad_params();
    test_selectors();
    test_json_roundtrip();
    test_corrupt_profiles();
    test_engine_hook();
    test_cli();
    struct mem_stats ms; /* everything the module allocated went back */
    mem_get_stats(&ms);
    for (int k = 0; k < MEM_KINDS; k++)
        EXPECT_EQ_INT(ms.live_bytes[k], 0);
    return tu_finish("test_mam");
}
