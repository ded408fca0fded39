/* IOAA (runtime/sched/ioaa.h): the model on hand-computed cases, the pruned search against the
 * exhaustive one on random instances, nodes visited with 30 long-tailed waiting requests, and
 * the messages of bad params. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "ioaa.h"
#include "testutil.h"

/* xorshift64*, seeded */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng_u64(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}
static double rng_unif(void)
{
    return (rng_u64() >> 11) * (1.0 / 9007199254740992.0);
}
static int rng_int(int lo, int hi)
{
    return lo + (int)(rng_u64() % (uint64_t)(hi - lo + 1));
}
static double rng_normal(void)
{
    double u = rng_unif() + 1e-300, v = rng_unif();
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

/* The hand profile: t_N on b {1, 4} x c {100, 1000} = {1, 3; 2, 5}, t_O(b) = b + 1 on {1, 5},
 * t_R(x) = x / 100 on {100, 1100}; L = 2, r = 300. */
static const double H_TNB[] = {1, 4}, H_TNC[] = {100, 1000}, H_TN[] = {1, 3, 2, 5};
static const double H_TOB[] = {1, 5}, H_TO[] = {2, 6}, H_TRX[] = {100, 1100}, H_TR[] = {1, 11};

static struct ioaa_params hand_params(int irq)
{
    struct ioaa_params p = {0};
    p.profile = (struct ioaa_profile){.n_layers = 2,
                                      .tn_nb = 2,
                                      .tn_nc = 2,
                                      .tn_b = H_TNB,
                                      .tn_c = H_TNC,
                                      .tn = H_TN,
                                      .to_n = 2,
                                      .to_b = H_TOB,
                                      .to = H_TO,
                                      .tr_n = 2,
                                      .tr_bytes = H_TRX,
                                      .tr = H_TR,
                                      .recall_bytes = 300};
    p.max_waiting = 8;
    p.irq = irq;
    return p;
}

static void test_model(void)
{
    char err[256];
    struct ioaa_params p = hand_params(1);
    struct ioaa *a = ioaa_create(&p, err, sizeof err);
    EXPECT(a != NULL);
    if (!a) return;
    /* tables */
    EXPECT_NEAR(ioaa_t_normal(a, 1, 100), 1, 1e-12);
    EXPECT_NEAR(ioaa_t_normal(a, 2.5, 550), 2.75, 1e-12);      /* rows 1.5 and 4, halfway */
    EXPECT_NEAR(ioaa_t_normal(a, 8, 100), 2 + 4.0 / 3, 1e-12); /* extrapolated in b */
    EXPECT_NEAR(ioaa_t_normal(a, 1, 5000), 3, 1e-12);          /* c clamped */
    EXPECT_NEAR(ioaa_t_normal(a, 1, 10), 1, 1e-12);
    EXPECT_NEAR(ioaa_t_offload(a, 9), 10, 1e-12);
    EXPECT_NEAR(ioaa_t_offload(a, 0.5), 2, 1e-12);
    EXPECT_NEAR(ioaa_t_recall(a, 600), 6, 1e-12);
    EXPECT_NEAR(ioaa_t_recall(a, 50), 1, 1e-12);
    EXPECT_NEAR(ioaa_t_recall(a, 0), 0, 0);
    EXPECT_NEAR(ioaa_t_recall(a, 2100), 21, 1e-12);
    int d = -1;
    /* b_N 1 at c 100 (t_N 1), b_O 2: t_O 3, t_R(600) 6: d 6, S = 2 (1 + 3 + 5) = 18 */
    EXPECT_NEAR(ioaa_step_time(a, 1, 100, 2, &d), 18, 1e-12);
    EXPECT_EQ_INT(d, 6);
    /* b_N 4 at c 1000 (t_N 5), b_O 1: t_R(300) 3 hides: d 1, S = 2 (5 + 2) = 14 */
    EXPECT_NEAR(ioaa_step_time(a, 4, 4000, 1, &d), 14, 1e-12);
    EXPECT_EQ_INT(d, 1);
    /* b_N 2 at c 550 (t_N 2.75... row b 2: 4/3 at c 100, 11/3 at 1000 -> 2.5), b_O 1: d 2 */
    EXPECT_NEAR(ioaa_step_time(a, 2, 1100, 1, &d), 2 * (2.5 + 2 + 0.5), 1e-12);
    EXPECT_EQ_INT(d, 2);
    /* no normal batch: S = L (t_O + t_R) = 2 (2 + 3) = 10; d 0 */
    EXPECT_NEAR(ioaa_step_time(a, 0, 0, 1, &d), 10, 1e-12);
    EXPECT_EQ_INT(d, 0);
    /* no offload batch: S = L t_N = 2 */
    EXPECT_NEAR(ioaa_step_time(a, 1, 100, 0, &d), 2, 1e-12);
    EXPECT_EQ_INT(d, 0);
    EXPECT_NEAR(ioaa_step_time(a, 0, 0, 0, &d), 0, 0);
    ioaa_free(a);

    /* irq off: the batches one after the other, S = 2 (1 + 3 + 6) = 20 */
    p = hand_params(0);
    a = ioaa_create(&p, err, sizeof err);
    EXPECT(a != NULL);
    if (!a) return;
    EXPECT_NEAR(ioaa_step_time(a, 1, 100, 2, &d), 20, 1e-12);
    EXPECT_EQ_INT(d, 6);
    EXPECT_NEAR(ioaa_step_time(a, 4, 4000, 1, &d), 2 * (5 + 2 + 3), 1e-12);
    ioaa_free(a);
}

/* Hand decisions (r = 100): a short request (GPU 100 whole, 10 offloaded) and a long one (900,
 * 90), the GPU budget 200, the host 1000. */
static void test_hand_decision(void)
{
    char err[256];
    struct ioaa_params p = hand_params(1);
    p.profile.recall_bytes = 100; /* t_R(b_O 100) */
    struct ioaa *a = ioaa_create(&p, err, sizeof err);
    EXPECT(a != NULL);
    if (!a) return;
    struct ioaa_request w[2] = {
        {.length = 900, .context = 900, .gpu_normal = 900, .gpu_offload = 90, .host_offload = 900},
        {.length = 100, .context = 100, .gpu_normal = 100, .gpu_offload = 10, .host_offload = 100},
    };
    struct ioaa_state st = {.free_gpu_bytes = 200, .free_host_bytes = 1000};
    enum ioaa_assign as[2];
    struct ioaa_decision dec;
    EXPECT_EQ_INT(ioaa_decide(a, &st, w, 2, as, &dec, err, sizeof err), PULSE_OK);
    /* candidates: {} 0; {N} 1 / 2; {O} 1 / (2 (2 + 1)); {N, O} 2 / (2 (1 + 2 + 0)) = 1 / 3;
     * {O, O} 2 / (2 (3 + 2)): the best is the short one alone, normal */
    EXPECT_EQ_INT(as[1], IOAA_NORMAL);
    EXPECT_EQ_INT(as[0], IOAA_WAIT);
    EXPECT_NEAR(dec.throughput, 0.5, 1e-12);
    EXPECT_NEAR(dec.step_s, 2, 1e-12);
    /* one running normal request at context 1000: {} 1 / 6; {N} b_N 2 at c 550 (t_N 2.5): 2 / 5;
     * {O} 2 / (2 (3 + 2)); {N, O} 3 / (2 (2.5 + 2)) = 1 / 3; {O, O} 3 / (2 (3 + 3)): {N} */
    st.normal_count = 1;
    st.normal_ctx_sum = 1000;
    EXPECT_EQ_INT(ioaa_decide(a, &st, w, 2, as, &dec, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(as[1], IOAA_NORMAL);
    EXPECT_EQ_INT(as[0], IOAA_WAIT);
    EXPECT_NEAR(dec.throughput, 0.4, 1e-12);
    EXPECT_NEAR(dec.step_s, 5, 1e-12);
    /* GPU budget 50: the short one fits only offloaded (0.2 against 1 / 6 waiting) */
    st.free_gpu_bytes = 50;
    EXPECT_EQ_INT(ioaa_decide(a, &st, w, 2, as, &dec, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(as[1], IOAA_OFFLOAD);
    EXPECT_EQ_INT(as[0], IOAA_WAIT);
    EXPECT_NEAR(dec.throughput, 0.2, 1e-12);
    EXPECT_EQ_INT(dec.overlap_depth, 1);
    EXPECT_EQ_INT(dec.gpu_bytes, 10);
    EXPECT_EQ_INT(dec.host_bytes, 100);
    EXPECT(dec.nodes_visited >= 1);
    ioaa_free(a);
}

/* n nondecreasing random values starting near lo, times > 0 */
static void rand_table(double *x, double *y, int n, double x0, double dx, double y0, double dy)
{
    double xv = x0, yv = y0;
    for (int i = 0; i < n; i++) {
        x[i] = xv;
        y[i] = yv;
        xv += dx * (0.2 + rng_unif());
        yv += rng_int(0, 4) == 0 ? 0 : dy * rng_unif();
    }
}

struct rand_profile {
    double tnb[4], tnc[4], tn[16], tob[4], to[4], trx[4], tr[4];
};

static struct ioaa_params rand_params(struct rand_profile *rp, int max_waiting)
{
    struct ioaa_params p = {0};
    int nb = rng_int(1, 4), nc = rng_int(1, 4), no = rng_int(1, 4), nr = rng_int(1, 4);
    double x = 1;
    for (int i = 0; i < nb; i++, x += 1 + rng_int(0, 5))
        rp->tnb[i] = x;
    x = 100;
    for (int j = 0; j < nc; j++, x += 500 * (0.2 + rng_unif()))
        rp->tnc[j] = x;
    double base = 0.5 + rng_unif(), sb = rng_unif(), sc = rng_unif();
    for (int i = 0; i < nb; i++) /* nondecreasing along both axes: a sum of nondecreasing */
        for (int j = 0; j < nc; j++)
            rp->tn[i * nc + j] = base + sb * i * (1 + 0.1 * j) + sc * j + 0.05 * i * j;
    rand_table(rp->tob, rp->to, no, 1, 4, 0.2 + rng_unif(), 1.5);
    rand_table(rp->trx, rp->tr, nr, 1000 * rng_unif(), 3000, 3 * rng_unif(), 4);
    p.profile = (struct ioaa_profile){.n_layers = rng_int(1, 40),
                                      .tn_nb = nb,
                                      .tn_nc = nc,
                                      .tn_b = rp->tnb,
                                      .tn_c = rp->tnc,
                                      .tn = rp->tn,
                                      .to_n = no,
                                      .to_b = rp->tob,
                                      .to = rp->to,
                                      .tr_n = nr,
                                      .tr_bytes = rp->trx,
                                      .tr = rp->tr,
                                      .recall_bytes = rng_int(0, 5) == 0 ? 0 : 2000 * rng_unif()};
    p.max_waiting = max_waiting;
    p.irq = rng_int(0, 1);
    return p;
}

static void rand_request(struct ioaa_request *r, int tie_lengths)
{
    r->length = tie_lengths ? 100 * rng_int(1, 6) : rng_int(10, 2000);
    r->context = r->length - rng_int(0, (int)(r->length / 2));
    r->gpu_normal = r->length * (90 + rng_int(0, 20));
    r->gpu_offload = r->gpu_normal / rng_int(3, 20) + rng_int(0, 50);
    r->host_offload = r->gpu_normal + rng_int(0, 100);
}

/* The assignment fits memory and keeps the monotonicity and prefix rules. */
static void check_rules(const struct ioaa_state *st, const struct ioaa_request *w, int n,
                        const enum ioaa_assign *as, const struct ioaa_decision *dec)
{
    int64_t gpu = 0, host = 0;
    int nn = 0, no = 0;
    for (int i = 0; i < n; i++) {
        if (as[i] == IOAA_NORMAL) {
            gpu += w[i].gpu_normal;
            nn++;
        } else if (as[i] == IOAA_OFFLOAD) {
            gpu += w[i].gpu_offload;
            host += w[i].host_offload;
            no++;
        } else {
            EXPECT_EQ_INT(as[i], IOAA_WAIT);
        }
        for (int j = 0; j < n; j++) {
            if (as[i] == IOAA_NORMAL && as[j] == IOAA_OFFLOAD) EXPECT(w[i].length <= w[j].length);
            if (as[i] != IOAA_WAIT && as[j] == IOAA_WAIT) EXPECT(w[i].length <= w[j].length);
        }
    }
    EXPECT(gpu <= st->free_gpu_bytes);
    EXPECT(host <= st->free_host_bytes);
    EXPECT_EQ_INT(gpu, dec->gpu_bytes);
    EXPECT_EQ_INT(host, dec->host_bytes);
    EXPECT_EQ_INT(nn, dec->n_normal);
    EXPECT_EQ_INT(no, dec->n_offload);
}

static void test_random_against_exhaustive(void)
{
    char err[256];
    enum { N = 12, INSTANCES = 400 };
    double nodes_pruned = 0, nodes_unbounded = 0, nodes_exh = 0;
    int mismatches = 0;
    for (int inst = 0; inst < INSTANCES; inst++) {
        struct rand_profile rp;
        struct ioaa_params p = rand_params(&rp, N);
        struct ioaa *a = ioaa_create(&p, err, sizeof err);
        p.no_bound = 1;
        struct ioaa *u = ioaa_create(&p, err, sizeof err);
        EXPECT(a && u);
        if (!a || !u) {
            fprintf(stderr, "instance %d: %s\n", inst, err);
            ioaa_free(a);
            ioaa_free(u);
            continue;
        }
        int n = inst < 40 ? inst % (N + 1) : rng_int(0, inst % 4 == 0 ? N : 9);
        struct ioaa_request w[N];
        for (int i = 0; i < n; i++)
            rand_request(&w[i], inst % 3 == 0);
        struct ioaa_state st = {0};
        st.normal_count = rng_int(0, 1) ? rng_int(1, 6) : 0;
        st.normal_ctx_sum = st.normal_count * (int64_t)rng_int(50, 3000);
        st.offload_count = rng_int(0, 1) ? rng_int(1, 6) : 0;
        st.free_gpu_bytes = (int64_t)(rng_unif() * 100 * 2000 * (1 + n / 2));
        st.free_host_bytes = (int64_t)(rng_unif() * 100 * 2000 * (1 + n));
        enum ioaa_assign ap[N], au[N], ae[N];
        struct ioaa_decision dp, du, de;
        EXPECT_EQ_INT(ioaa_decide(a, &st, w, n, ap, &dp, err, sizeof err), PULSE_OK);
        EXPECT_EQ_INT(ioaa_decide(u, &st, w, n, au, &du, err, sizeof err), PULSE_OK);
        EXPECT_EQ_INT(ioaa_decide_exhaustive(a, &st, w, n, ae, &de, err, sizeof err), PULSE_OK);
        EXPECT(dp.throughput == de.throughput);
        EXPECT(du.throughput == de.throughput);
        int same = 1;
        for (int i = 0; i < n; i++)
            same &= ap[i] == ae[i] && au[i] == ae[i];
        if (!same) mismatches++;
        EXPECT(same);
        check_rules(&st, w, n, ap, &dp);
        check_rules(&st, w, n, ae, &de);
        EXPECT(isfinite(dp.throughput) && dp.throughput >= 0);
        EXPECT(dp.nodes_visited >= 1 && dp.nodes_visited <= du.nodes_visited);
        nodes_pruned += dp.nodes_visited;
        nodes_unbounded += du.nodes_visited;
        nodes_exh += de.nodes_visited;
        ioaa_free(a);
        ioaa_free(u);
    }
    fprintf(stderr,
            "random instances (%d, up to %d waiting): mean nodes pruned %.2f, without the bound "
            "%.2f, exhaustive %.1f; %d assignment mismatches\n",
            INSTANCES, N, nodes_pruned / INSTANCES, nodes_unbounded / INSTANCES,
            nodes_exh / INSTANCES, mismatches);
    EXPECT(nodes_pruned < nodes_unbounded);
    EXPECT(nodes_unbounded < nodes_exh);
}

/* A serving loop over an 8B-like model (32 layers, 128 KiB of KV per token): 30 waiting
 * requests of lognormal lengths (median 2000 tokens, sigma 1.2), admitted into 40 GB of GPU KV
 * and a 200 GB host pool; after each decision one running request finishes and arrivals refill
 * the queue to 30. Prints the mean nodes per decision and the bounds' cost. */
enum { SIM_WAIT = 30, SIM_RUN = 4096 };
struct sim_req {
    struct ioaa_request r;
    enum ioaa_assign mode;
};

static void sim_request(struct ioaa_request *r)
{
    double len = exp(log(2000.0) + 1.2 * rng_normal());
    len = fmin(fmax(len, 64), 131072);
    const int64_t tok_layer = 4096, layers = 32;
    r->length = r->context = (int64_t)len;
    r->gpu_normal = r->length * tok_layer * layers;
    int64_t hot = PULSE_MIN(r->length, 2048 + 64); /* hot slots and tail, sparse layers */
    r->gpu_offload = r->length * tok_layer * 2 + hot * tok_layer * 30 + r->length / 16 * 512 * 30;
    r->host_offload = r->gpu_normal;
}

static void test_nodes_long_tail(void)
{
    static const double tnb[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
    static const double tnc[] = {256, 1024, 4096, 16384, 65536, 131072};
    static const double tob[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
    static const double trx[] = {4096, 1 << 20, 16 << 20, 256 << 20, 1024.0 * (1 << 20)};
    double tn[9 * 6], to[9], tr[5];
    const double hbm = 4e12, pcie = 25e9, wlayer = 8e9 / 32 / hbm;
    for (int i = 0; i < 9; i++) {
        for (int j = 0; j < 6; j++)
            tn[i * 6 + j] = wlayer + 2e-6 * tnb[i] + tnb[i] * tnc[j] * 4096 / hbm;
        to[i] = wlayer + tob[i] * (5e-6 + 2048.0 * 4096 / hbm);
    }
    for (int i = 0; i < 5; i++)
        tr[i] = 1e-5 + trx[i] / pcie;
    struct ioaa_params p = {0};
    p.profile = (struct ioaa_profile){.n_layers = 32,
                                      .tn_nb = 9,
                                      .tn_nc = 6,
                                      .tn_b = tnb,
                                      .tn_c = tnc,
                                      .tn = tn,
                                      .to_n = 9,
                                      .to_b = tob,
                                      .to = to,
                                      .tr_n = 5,
                                      .tr_bytes = trx,
                                      .tr = tr,
                                      .recall_bytes = 2048 * 0.1 * 4096};
    p.max_waiting = SIM_WAIT;
    p.irq = 1;
    char err[256];
    struct ioaa *a = ioaa_create(&p, err, sizeof err);
    EXPECT(a != NULL);
    if (!a) return;
    static struct sim_req run[SIM_RUN];
    int nrun = 0;
    struct ioaa_request w[SIM_WAIT];
    for (int i = 0; i < SIM_WAIT; i++)
        sim_request(&w[i]);
    const int64_t gpu_total = 40000000000ll, host_total = 200000000000ll;
    rng_state = 0x1234567ull;
    double nodes = 0, admitted = 0, evals = 0;
    int64_t max_nodes = 0;
    enum { DECISIONS = 3000 };
    for (int dcs = 0; dcs < DECISIONS; dcs++) {
        struct ioaa_state st = {0};
        int64_t gpu = 0, host = 0;
        for (int i = 0; i < nrun; i++) {
            if (run[i].mode == IOAA_NORMAL) {
                st.normal_count++;
                st.normal_ctx_sum += run[i].r.context;
                gpu += run[i].r.gpu_normal;
            } else {
                st.offload_count++;
                gpu += run[i].r.gpu_offload;
                host += run[i].r.host_offload;
            }
        }
        st.free_gpu_bytes = gpu_total - gpu;
        st.free_host_bytes = host_total - host;
        enum ioaa_assign as[SIM_WAIT];
        struct ioaa_decision dec;
        EXPECT_EQ_INT(ioaa_decide(a, &st, w, SIM_WAIT, as, &dec, err, sizeof err), PULSE_OK);
        check_rules(&st, w, SIM_WAIT, as, &dec);
        nodes += dec.nodes_visited;
        evals += dec.bound_evaluations;
        max_nodes = PULSE_MAX(max_nodes, dec.nodes_visited);
        admitted += dec.n_normal + dec.n_offload;
        for (int i = 0; i < SIM_WAIT; i++) {
            if (as[i] == IOAA_WAIT || nrun == SIM_RUN) continue;
            run[nrun].r = w[i];
            run[nrun++].mode = as[i];
            sim_request(&w[i]); /* an arrival takes the slot */
        }
        if (nrun > 0) { /* one finishes */
            int f = rng_int(0, nrun - 1);
            run[f] = run[nrun - 1];
            nrun--;
        }
    }
    double mean = nodes / DECISIONS;
    fprintf(stderr,
            "long-tailed serving loop: %d decisions, %d waiting: mean nodes per decision %.2f "
            "(max %lld, the bounds' step evaluations %.1f), mean admitted %.2f\n",
            DECISIONS, SIM_WAIT, mean, (long long)max_nodes, evals / DECISIONS,
            admitted / DECISIONS);
    EXPECT(isfinite(mean) && mean >= 1);
    /* the bound is exact for the descendants it covers: the search enters little more than
     * the path to the best */
    EXPECT(mean <= 1 + admitted / DECISIONS + 2);
    ioaa_free(a);
}

static void test_bad_params(void)
{
    char err[256];
    struct ioaa_params p = hand_params(1);
    double bad_b[] = {1, 1};
    p.profile.tn_b = bad_b;
    EXPECT(ioaa_create(&p, err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "tn_b");
    EXPECT_STR_CONTAINS(err, "strictly increasing");

    p = hand_params(1);
    double bad_to[] = {3, 2};
    p.profile.to = bad_to;
    EXPECT(ioaa_create(&p, err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "t_O must be nondecreasing");

    p = hand_params(1);
    double bad_tn[] = {1, 3, 0.5, 5}; /* decreasing along b at c 100 */
    p.profile.tn = bad_tn;
    EXPECT(ioaa_create(&p, err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "t_N along the batch grid must be nondecreasing");

    p = hand_params(1);
    double zero_tn[] = {0, 3, 2, 5};
    p.profile.tn = zero_tn;
    EXPECT(ioaa_create(&p, err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "expected a finite time > 0");

    p = hand_params(1);
    p.profile.tr_n = 0;
    EXPECT(ioaa_create(&p, err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "tr_bytes");

    p = hand_params(1);
    p.profile.n_layers = 0;
    EXPECT(ioaa_create(&p, err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "n_layers");

    p = hand_params(1);
    p.profile.recall_bytes = -1;
    EXPECT(ioaa_create(&p, err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "recall_bytes");

    p = hand_params(1);
    p.max_waiting = 20;
    struct ioaa *a = ioaa_create(&p, err, sizeof err);
    EXPECT(a != NULL);
    if (!a) return;
    struct ioaa_request w[21] = {{0}};
    struct ioaa_state st = {.free_gpu_bytes = 10, .free_host_bytes = 10};
    enum ioaa_assign as[21];
    struct ioaa_decision dec;
    EXPECT_EQ_INT(ioaa_decide(a, &st, w, 21, as, &dec, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "expected 0..20");
    EXPECT_EQ_INT(ioaa_decide_exhaustive(a, &st, w, 15, as, &dec, err, sizeof err),
                  PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "expected 0..14");
    w[2].gpu_offload = -5;
    EXPECT_EQ_INT(ioaa_decide(a, &st, w, 3, as, &dec, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "waiting request 2");
    st.free_gpu_bytes = -1;
    EXPECT_EQ_INT(ioaa_decide(a, &st, w, 0, as, &dec, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "free budgets");
    /* nothing waiting: a decision of the running batches alone */
    st.free_gpu_bytes = 0;
    EXPECT_EQ_INT(ioaa_decide(a, &st, w, 0, as, &dec, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(dec.nodes_visited, 1);
    EXPECT_NEAR(dec.throughput, 0, 0);
    ioaa_free(a);
}

int main(void)
{
    test_model();
    test_hand_decision();
    test_random_against_exhaustive();
    test_nodes_long_tail();
    test_bad_params();
    return tu_finish("test_ioaa");
}
