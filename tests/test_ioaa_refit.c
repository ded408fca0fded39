/* IOAA's online refit (runtime/sched/ioaa_refit.h) on synthetic profiles: the prediction
 * converges to the measured step (15 ms predicted, 18 ms measured: within 5% after 8 steps,
 * never above it), stays still under noisy steps, does nothing when off, refits the
 * speculation's terms (prefetch-bound and t_O-bound) with the decision's rewritten table giving
 * the refit model's step, turns IOAA's admission toward fewer offloaded requests when the
 * recall is slower than profiled, and fits the self-interleaved step's own factor from self
 * steps alone (the plain factors untouched, and the reverse); takes the bytes a decision's
 * context gives (ioaa_refit_set_bytes) into its model and the decision's table. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "ioaa.h"
#include "ioaa_profile.h"
#include "ioaa_refit.h"
#include "testutil.h"

/* L = 10; t_N(b, c) = 0.2 ms + b 0.05 ms (any c); t_O(b) = 0.3 ms + b 0.02 ms; t_R(x) = x / 1e10
 * (10 GB/s); r = 1e6 bytes (0.1 ms a request). Arrays static: the refit copies them. */
static const double TN_B[2] = {1, 64}, TN_C[1] = {4096}, TN[2] = {0.25e-3, 3.4e-3};
static const double TO_B[2] = {1, 64}, TO[2] = {0.32e-3, 1.58e-3};
static const double TR_X[2] = {1e3, 1e9}, TR[2] = {1e-7, 1e-1};

static struct ioaa_profile profile(double r)
{
    return (struct ioaa_profile){10, 2, 1, TN_B, TN_C, TN, 2, TO_B, TO, 2, TR_X, TR, r, 0};
}

static struct ioaa_refit *make_g(const struct ioaa_profile *p, int enabled, double P, double C,
                                 double g)
{
    char err[256];
    struct ioaa_profile pg = *p;
    pg.compute_beside = g;
    const struct ioaa_refit_params rp = {.base = &pg,
                                         .irq = 1,
                                         .enabled = enabled,
                                         .prefetch_bytes = P,
                                         .correction_bytes = C,
                                         .beside = {.n = 1, .factor = {0.5}},
                                         .max_batch = 64};
    struct ioaa_refit *r = ioaa_refit_create(&rp, err, sizeof err);
    if (!r) fprintf(stderr, "ioaa_refit_create: %s\n", err);
    EXPECT(r != NULL);
    return r;
}

static struct ioaa_refit *make(const struct ioaa_profile *p, int enabled, double P, double C)
{
    return make_g(p, enabled, P, C, 0);
}

/* The decision's profile: profile(r)'s tables (copied into d, zeroed first) with the
 * speculation (P, C) folded as pulseinfer folds it (beside factor 0.5, window 1, 64 batches). */
static void folded(struct ioaa_profile_data *d, double r, double P, double C)
{
    char err[256];
    memset(d, 0, sizeof *d);
    EXPECT_EQ_INT(ioaa_profile_data_alloc(d, 2, 1, 2, 2, err, sizeof err), PULSE_OK);
    memcpy(d->tn_b, TN_B, sizeof TN_B), memcpy(d->tn_c, TN_C, sizeof TN_C);
    memcpy(d->tn, TN, sizeof TN), memcpy(d->to_b, TO_B, sizeof TO_B);
    memcpy(d->to, TO, sizeof TO), memcpy(d->tr_bytes, TR_X, sizeof TR_X);
    memcpy(d->tr, TR, sizeof TR);
    d->prof.n_layers = 10, d->prof.recall_bytes = r;
    d->info.beside = (struct ioaa_beside){.n = 1, .factor = {0.5}};
    EXPECT_EQ_INT(ioaa_profile_data_speculate(d, P, C, 1, 64, err, sizeof err), PULSE_OK);
}

/* A fake profile predicting 15 ms where steps take 18: the offload batch of 10 alone,
 * S = L (t_O + t_R) = 10 (0.5 + 1.0) ms. */
static void test_converges(void)
{
    const struct ioaa_profile p = profile(1e6);
    struct ioaa_refit *r = make(&p, 1, 0, 0);
    if (!r) return;
    const double before = ioaa_refit_step(r, 0, 0, 10, 0);
    EXPECT_NEAR(before, 15e-3, 1e-9);
    double last = before;
    int within = -1;
    for (int i = 0; i < 40; i++) {
        EXPECT_EQ_INT(ioaa_refit_observe(r, 0, 0, 10, 18e-3), 1);
        const double now = ioaa_refit_step(r, 0, 0, 10, 1);
        EXPECT(now >= last - 1e-12);  /* toward the measured step, monotonically */
        EXPECT(now <= 18e-3 + 1e-12); /* never past it */
        if (within < 0 && fabs(now / 18e-3 - 1) <= 0.05) within = i + 1;
        last = now;
    }
    EXPECT(within > 0 && within <= 8);
    EXPECT_NEAR(last, 18e-3, 1e-6);
    EXPECT_NEAR(ioaa_refit_step(r, 0, 0, 10, 0), before, 0); /* the profile's own, unchanged */
    struct ioaa_refit_stats st;
    ioaa_refit_get_stats(r, &st);
    EXPECT_EQ_INT(st.refits, 40);
    EXPECT_NEAR(st.k_recall, 1.3, 1e-3); /* t_R 1.3 ms against the profile's 1.0 */
    EXPECT_NEAR(st.k_correction, 1, 0);
    /* a composition of another size: the factor carries over (t_R of 6 requests 0.6 ms) */
    EXPECT_NEAR(ioaa_refit_step(r, 0, 0, 6, 1), 10 * (0.42e-3 + 1.3 * 0.6e-3), 1e-6);
    ioaa_refit_free(r);
}

/* Steps at 18 ms +- 5% (uniform, deterministic): after the first 20 the prediction stays
 * within 5% of 18 ms, and moves much less than the steps do (no oscillation). */
static void test_noisy(void)
{
    const struct ioaa_profile p = profile(1e6);
    struct ioaa_refit *r = make(&p, 1, 0, 0);
    if (!r) return;
    uint64_t s = 12345;
    double sum = 0, sum2 = 0, msum = 0, msum2 = 0, worst = 0;
    int n = 0;
    for (int i = 0; i < 400; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const double u = (double)(s >> 11) / 9007199254740992.0 * 2 - 1;
        const double m = 18e-3 * (1 + 0.05 * u);
        ioaa_refit_observe(r, 0, 0, 10, m);
        const double pr = ioaa_refit_step(r, 0, 0, 10, 1);
        if (i < 20) continue;
        worst = fmax(worst, fabs(pr / 18e-3 - 1));
        sum += pr, sum2 += pr * pr, msum += m, msum2 += m * m, n++;
    }
    const double sd = sqrt(sum2 / n - (sum / n) * (sum / n));
    const double msd = sqrt(msum2 / n - (msum / n) * (msum / n));
    EXPECT(worst < 0.05);
    EXPECT(sd < 0.5 * msd);
    EXPECT_NEAR(sum / n, 18e-3, 0.01 * 18e-3);
    ioaa_refit_free(r);
}

/* The self-interleaved step's factor: plain steps fit k_R (the self model uses it), then self
 * steps 1.2x the self model fit k_S to 1.2 without moving k_R or the plain prediction; plain
 * steps after leave k_S; a batch that cannot split, or the refit off, observes nothing. */
static void test_self(void)
{
    const struct ioaa_profile p = profile(1e6);
    struct ioaa_refit *r = make(&p, 1, 0, 0);
    if (!r) return;
    const double self0 = ioaa_refit_self_step(r, 10, 0);
    EXPECT(self0 > 0);
    EXPECT_NEAR(ioaa_refit_self_step(r, 10, 1), self0, 0); /* every factor 1 */
    for (int i = 0; i < 40; i++)
        ioaa_refit_observe(r, 0, 0, 10, 18e-3);
    const double plain = ioaa_refit_step(r, 0, 0, 10, 1);
    const double self_kr = ioaa_refit_self_step(r, 10, 1); /* k_R's, k_S still 1 */
    EXPECT(self_kr > self0); /* the slower recall reaches the self model too */
    struct ioaa_refit_stats st0;
    ioaa_refit_get_stats(r, &st0);
    EXPECT_NEAR(st0.k_self, 1, 0);
    EXPECT_EQ_INT(st0.self_refits, 0);
    const double m = 1.2 * self_kr;
    for (int i = 0; i < 40; i++)
        EXPECT_EQ_INT(ioaa_refit_observe_self(r, 10, m), 1);
    struct ioaa_refit_stats st;
    ioaa_refit_get_stats(r, &st);
    EXPECT_EQ_INT(st.self_refits, 40);
    EXPECT_EQ_INT(st.refits, st0.refits); /* the plain factors saw no self step */
    EXPECT_NEAR(st.k_recall, st0.k_recall, 0);
    EXPECT_NEAR(st.k_self, 1.2, 1e-3);
    EXPECT_NEAR(ioaa_refit_self_step(r, 10, 1), m, 1e-3 * m);
    EXPECT_NEAR(ioaa_refit_self_step(r, 10, 0), self0, 0); /* the profile's own */
    EXPECT_NEAR(ioaa_refit_step(r, 0, 0, 10, 1), plain, 0);
    /* another size: k_S carries over as a factor of the self model */
    const double self6 = ioaa_refit_self_step(r, 6, 1);
    EXPECT(self6 > 0 && self6 < m);
    ioaa_refit_observe(r, 0, 0, 10, 18e-3); /* a plain step leaves k_S */
    ioaa_refit_get_stats(r, &st);
    EXPECT_NEAR(st.k_self, 1.2, 1e-3);
    EXPECT_EQ_INT(ioaa_refit_observe_self(r, 1, m), 0); /* nothing to split */
    EXPECT_EQ_INT(ioaa_refit_observe_self(r, 10, 0), 0);
    ioaa_refit_free(r);
    r = make(&p, 0, 0, 0);
    if (!r) return;
    EXPECT_EQ_INT(ioaa_refit_observe_self(r, 10, 2 * self0), 0); /* off */
    EXPECT_NEAR(ioaa_refit_self_step(r, 10, 1), self0, 0);
    ioaa_refit_free(r);
}

/* Off: nothing observed, factors 1, the refitted step the profile's, no table written. */
static void test_off(void)
{
    char err[256];
    const struct ioaa_profile p = profile(1e6);
    struct ioaa_refit *r = make(&p, 0, 0, 0);
    if (!r) return;
    for (int i = 0; i < 10; i++)
        EXPECT_EQ_INT(ioaa_refit_observe(r, 0, 0, 10, 18e-3), 0);
    struct ioaa_refit_stats st;
    ioaa_refit_get_stats(r, &st);
    EXPECT_EQ_INT(st.refits, 0);
    EXPECT_NEAR(st.k_recall, 1, 0);
    EXPECT_NEAR(ioaa_refit_step(r, 0, 0, 10, 1), 15e-3, 1e-9);
    const struct ioaa_params ip = {.profile = p, .max_waiting = 4, .irq = 1};
    struct ioaa *a = ioaa_create(&ip, err, sizeof err);
    EXPECT_EQ_INT(ioaa_refit_apply(r, a, err, sizeof err), 0);
    ioaa_free(a);
    ioaa_refit_free(r);
}

/* Uninformative steps: with both batches and IRQ, a step at or under t_N + t_O where the model
 * hid the recall says nothing about it; a step that the compute terms alone exceed neither. */
static void test_uninformative(void)
{
    const struct ioaa_profile p = profile(1e6);
    struct ioaa_refit *r = make(&p, 1, 0, 0);
    if (!r) return;
    /* 4 normal (t_N 0.4 ms), 2 offloaded (t_O 0.34, t_R 0.2: hidden): S = 7.4 ms */
    EXPECT_NEAR(ioaa_refit_step(r, 4, 4 * 4096, 2, 1), 7.4e-3, 1e-9);
    EXPECT_EQ_INT(ioaa_refit_observe(r, 4, 4 * 4096, 2, 7.0e-3), 0);
    EXPECT_EQ_INT(ioaa_refit_observe(r, 0, 0, 10, 4e-3), 0);       /* under L t_O = 5 ms */
    EXPECT_EQ_INT(ioaa_refit_observe(r, 4, 4 * 4096, 0, 9e-3), 0); /* nothing offloaded */
    struct ioaa_refit_stats st;
    ioaa_refit_get_stats(r, &st);
    EXPECT_EQ_INT(st.refits, 0);
    EXPECT_EQ_INT(st.uninformative, 2);
    /* exposed beyond t_N: 4 normal, 8 offloaded (t_R 0.8 > t_N 0.4) measured 14 ms: X* = 1.4 -
     * 0.46 = 0.94 ms, k* = 0.94 / 0.8 */
    EXPECT_EQ_INT(ioaa_refit_observe(r, 4, 4 * 4096, 8, 14e-3), 1);
    ioaa_refit_get_stats(r, &st);
    EXPECT_NEAR(st.k_recall, 0.8 + 0.2 * (0.94 / 0.8), 1e-9);
    ioaa_refit_free(r);
}

/* A refit of 9 offloaded requests with prefetch P and corrections C bytes a request and layer
 * and the compute g times as long beside the recall: the profile's step `before`, then 60 steps
 * measured at `measured`; the factors it ends with, its step then the measured one. */
static struct ioaa_refit_stats fit9(const struct ioaa_profile *p, double P, double C, double g,
                                    double before, double measured)
{
    struct ioaa_refit_stats st;
    memset(&st, 0, sizeof st);
    struct ioaa_refit *r = make_g(p, 1, P, C, g);
    if (!r) return st;
    EXPECT_NEAR(ioaa_refit_step(r, 0, 0, 9, 0), before, 1e-8);
    for (int i = 0; i < 60; i++)
        ioaa_refit_observe(r, 0, 0, 9, measured);
    ioaa_refit_get_stats(r, &st);
    EXPECT_NEAR(ioaa_refit_step(r, 0, 0, 9, 1), measured, 1e-6);
    ioaa_refit_free(r);
    return st;
}

/* Speculation: P = 1.6e6, C = 0.3e6 bytes a request and layer, f = 0.5. At 9 offloaded alone:
 * t_O 0.48 ms, t_R(P) = 1.44 ms alone, of which f t_O = 0.24 beside the layer and 1.2 after
 * (binds), t_R(C) 0.27 ms: S = 10 (0.48 + 1.2 + 0.27) = 19.5 ms. Measured 25.5: k_R converges
 * to (2.07 - 0.27 + 0.24) / 1.44; the decision's rewritten table gives the refit model's step.
 * Then t_O-bound (P small): the corrections' factor moves instead. With the compute 1.5x beside
 * the recall (g): the prefetch-bound step is 10 (1.44 + 1.5 0.48 (1 - 0.5) + 0.27) = 20.7 ms and
 * 26.7 measured fits the same k_R; a hidden prefetch without corrections costs the layer's
 * slowdown, 0.36 (1 - 1 / 1.5) = 0.12 ms (S = 6.0 ms), and 6.6 measured fits k_R = 1.5. */
static void test_speculation(void)
{
    char err[256];
    const struct ioaa_profile p = profile(1e6);
    struct ioaa_refit *r = make(&p, 1, 1.6e6, 0.3e6);
    if (!r) return;
    EXPECT_NEAR(ioaa_refit_step(r, 0, 0, 9, 0), 19.5e-3, 1e-8);
    for (int i = 0; i < 60; i++)
        ioaa_refit_observe(r, 0, 0, 9, 25.5e-3);
    struct ioaa_refit_stats st;
    ioaa_refit_get_stats(r, &st);
    EXPECT_NEAR(st.k_recall, (2.07 - 0.27 + 0.24) / 1.44, 1e-4);
    EXPECT_NEAR(st.k_correction, 1, 0);
    EXPECT_NEAR(ioaa_refit_step(r, 0, 0, 9, 1), 25.5e-3, 1e-6);
    /* the decision's model: the profile folded as pulseinfer folds it, then rewritten */
    struct ioaa_profile_data d;
    folded(&d, 1e6, 1.6e6, 0.3e6);
    const struct ioaa_params ip = {.profile = d.prof, .max_waiting = 4, .irq = 1};
    struct ioaa *a = ioaa_create(&ip, err, sizeof err);
    EXPECT(a != NULL);
    if (a) {
        EXPECT_NEAR(ioaa_step_time(a, 0, 0, 9, NULL), 19.5e-3, 1e-8); /* the fold's, unrefitted */
        EXPECT_EQ_INT(ioaa_refit_apply(r, a, err, sizeof err), 1);
        EXPECT_EQ_INT(ioaa_refit_apply(r, a, err, sizeof err), 0); /* nothing moved since */
        for (int bo = 1; bo <= 33; bo += 4)
            EXPECT_NEAR(ioaa_step_time(a, 0, 0, bo, NULL), ioaa_refit_step(r, 0, 0, bo, 1), 1e-9);
        ioaa_free(a);
    }
    ioaa_profile_data_free(&d);
    ioaa_refit_free(r);
    /* t_O-bound: P = 0.2e6 (t_R(P) = 0.18 ms at 9, under f t_O = 0.24), C = 0.3e6 (0.27 ms): S
     * = 7.5 ms; measured 9.5: k_C -> (0.95 - 0.48) / 0.27 */
    st = fit9(&p, 0.2e6, 0.3e6, 0, 7.5e-3, 9.5e-3);
    EXPECT_NEAR(st.k_correction, 0.47 / 0.27, 1e-4);
    EXPECT_NEAR(st.k_recall, 1, 0);
    st = fit9(&p, 1.6e6, 0.3e6, 1.5, 20.7e-3, 26.7e-3);
    EXPECT_NEAR(st.k_recall, (2.19 - 0.27 + 0.48 - 0.36) / 1.44, 1e-4);
    EXPECT_NEAR(st.k_correction, 1, 0);
    st = fit9(&p, 0.2e6, 0, 1.5, 6.0e-3, 6.6e-3);
    EXPECT_NEAR(st.k_recall, 1.5, 1e-4);
}

/* Admission: 12 waiting requests of 4096 tokens; the GPU fits 4 whole, the host pool every
 * one. With the profile's recall IOAA offloads beside the 4 normal; with steps measured as a
 * recall 4x the profile's, the refit's table makes it offload fewer. */
static int decide(struct ioaa *a, int *n_normal)
{
    char err[256];
    struct ioaa_request w[12];
    enum ioaa_assign as[12];
    for (int i = 0; i < 12; i++)
        w[i] = (struct ioaa_request){4096, 4096, 100, 1, 10};
    const struct ioaa_state st = {.free_gpu_bytes = 400 + 12, .free_host_bytes = 1000};
    struct ioaa_decision d;
    EXPECT_EQ_INT(ioaa_decide(a, &st, w, 12, as, &d, err, sizeof err), PULSE_OK);
    *n_normal = d.n_normal;
    return d.n_offload;
}

static void test_admission(void)
{
    char err[256];
    const struct ioaa_profile p = profile(0.5e6); /* 0.05 ms a request */
    const struct ioaa_params ip = {.profile = p, .max_waiting = 12, .irq = 1};
    struct ioaa *a = ioaa_create(&ip, err, sizeof err);
    struct ioaa_refit *r = make(&p, 1, 0, 0);
    if (!a || !r) {
        ioaa_free(a);
        ioaa_refit_free(r);
        return;
    }
    int nn0, nn1;
    const int off0 = decide(a, &nn0);
    EXPECT(off0 >= 4);
    EXPECT_EQ_INT(nn0, 4);
    /* the runs' steps: 4 normal + off0 offloaded with a recall 4x the profile's */
    const double L = 10, tn = 0.4e-3, to = 0.3e-3 + 0.02e-3 * off0, tr = 4 * off0 * 0.05e-3;
    const double measured = L * (tn + to + fmax(0, tr - tn));
    for (int i = 0; i < 40; i++)
        ioaa_refit_observe(r, 4, 4 * 4096, off0, measured);
    EXPECT_NEAR(ioaa_refit_step(r, 4, 4 * 4096, off0, 1), measured, 1e-3 * measured);
    EXPECT_EQ_INT(ioaa_refit_apply(r, a, err, sizeof err), 1);
    EXPECT_NEAR(ioaa_step_time(a, 4, 4 * 4096, off0, NULL), measured, 1e-3 * measured);
    const int off1 = decide(a, &nn1);
    EXPECT(off1 < off0);
    EXPECT_EQ_INT(nn1, 4);
    /* the refit off: the same decision as the profile's */
    struct ioaa_refit *r0 = make(&p, 0, 0, 0);
    struct ioaa *a0 = ioaa_create(&ip, err, sizeof err);
    if (r0 && a0) {
        for (int i = 0; i < 40; i++)
            ioaa_refit_observe(r0, 4, 4 * 4096, off0, measured);
        EXPECT_EQ_INT(ioaa_refit_apply(r0, a0, err, sizeof err), 0);
        EXPECT_EQ_INT(decide(a0, &nn1), off0);
    }
    ioaa_free(a0);
    ioaa_refit_free(r0);
    ioaa_free(a);
    ioaa_refit_free(r);
}

/* The bytes by context (ioaa_refit_set_bytes): exact at layer, r 4x the profile's makes the
 * decision's table a round of b requests at 4 r (its grid and r unchanged), the model's step
 * that of a profile of 4 r, and IOAA offload fewer; back at the profile's r, the profile's
 * decision again. With speculation the step and the rewritten table are those of a refit made
 * with the new P and C. Bytes of the other kind, or negative, are refused. */
static void test_bytes(void)
{
    char err[256];
    const struct ioaa_profile p = profile(0.5e6), p4 = profile(2e6);
    const struct ioaa_params ip = {.profile = p, .max_waiting = 12, .irq = 1};
    struct ioaa *a = ioaa_create(&ip, err, sizeof err);
    struct ioaa_refit *r = make(&p, 1, 0, 0), *r4 = make(&p4, 1, 0, 0);
    if (!a || !r || !r4) goto out;
    int nn;
    const int off0 = decide(a, &nn);
    EXPECT_EQ_INT(ioaa_refit_apply(r, a, err, sizeof err), 0); /* nothing moved yet */
    EXPECT_EQ_INT(ioaa_refit_set_bytes(r, 2e6, 0, 0, err, sizeof err), PULSE_OK);
    for (int bo = 1; bo <= 12; bo += 3) /* the model's step at once */
        EXPECT_NEAR(ioaa_refit_step(r, 4, 4 * 4096, bo, 1), ioaa_refit_step(r4, 4, 4 * 4096, bo, 1),
                    1e-12);
    EXPECT_EQ_INT(ioaa_refit_apply(r, a, err, sizeof err), 1); /* the table at the next apply */
    EXPECT_EQ_INT(ioaa_refit_apply(r, a, err, sizeof err), 0);
    for (int bo = 1; bo <= 12; bo += 3) /* t_R linear on the grid: the same step */
        EXPECT_NEAR(ioaa_step_time(a, 4, 4 * 4096, bo, NULL),
                    ioaa_refit_step(r4, 4, 4 * 4096, bo, 1), 1e-9);
    int nn1;
    const int off1 = decide(a, &nn1);
    EXPECT(off1 < off0);
    EXPECT_EQ_INT(ioaa_refit_set_bytes(r, 0.5e6, 0, 0, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(ioaa_refit_apply(r, a, err, sizeof err), 1);
    EXPECT_EQ_INT(decide(a, &nn1), off0);
    /* the other kind of bytes, or bad ones */
    EXPECT_EQ_INT(ioaa_refit_set_bytes(r, 1e6, 1e5, 0, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "no prefetch or correction");
    EXPECT_EQ_INT(ioaa_refit_set_bytes(r, -1, 0, 0, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_NEAR(ioaa_refit_step(r, 4, 4 * 4096, 5, 1), ioaa_refit_step(r, 4, 4 * 4096, 5, 0), 0);
    /* speculation: set to (P, C) is a refit made with them */
    struct ioaa_refit *s = make(&p, 1, 1.6e6, 0.3e6), *s2 = make(&p, 1, 0.4e6, 0.9e6);
    struct ioaa_profile_data d;
    folded(&d, 0.5e6, 1.6e6, 0.3e6);
    const struct ioaa_params sp = {.profile = d.prof, .max_waiting = 4, .irq = 1};
    struct ioaa *as = ioaa_create(&sp, err, sizeof err);
    if (s && s2 && as) {
        EXPECT_EQ_INT(ioaa_refit_set_bytes(s, 0, 0.4e6, 0.9e6, err, sizeof err), PULSE_OK);
        EXPECT_EQ_INT(ioaa_refit_apply(s, as, err, sizeof err), 1);
        for (int bo = 1; bo <= 33; bo += 4) {
            EXPECT_NEAR(ioaa_refit_step(s, 2, 8192, bo, 1), ioaa_refit_step(s2, 2, 8192, bo, 1),
                        1e-15);
            EXPECT_NEAR(ioaa_step_time(as, 0, 0, bo, NULL), ioaa_refit_step(s2, 0, 0, bo, 1), 1e-9);
        }
        EXPECT_EQ_INT(ioaa_refit_set_bytes(s, 1e6, 0, 0, err, sizeof err), PULSE_ERR_INVALID);
        EXPECT_STR_CONTAINS(err, "some prefetch or correction");
    }
    ioaa_free(as);
    ioaa_profile_data_free(&d);
    ioaa_refit_free(s);
    ioaa_refit_free(s2);
out:
    ioaa_free(a);
    ioaa_refit_free(r);
    ioaa_refit_free(r4);
}

/* The compute's slowdown per round size (the beside's slow table): the refit's step at each
 * offload batch is that of a refit whose one g is the table at the batch's prefetch round
 * (b P), and a step measured so leaves the factors where they were. */
static void test_slow_table(void)
{
    char err[256];
    const struct ioaa_profile p = profile(1e6);
    struct ioaa_profile pg = p;
    pg.compute_beside = 1.6;
    struct ioaa_refit_params rp = {.base = &pg,
                                   .irq = 1,
                                   .enabled = 1,
                                   .prefetch_bytes = 1.6e6,
                                   .correction_bytes = 0.3e6,
                                   .beside = {.n = 1,
                                              .factor = {0.5},
                                              .slow_n = 2,
                                              .slow_bytes = {1e6, 33e6},
                                              .slow = {1.1, 1.6}},
                                   .max_batch = 64};
    struct ioaa_refit *r = ioaa_refit_create(&rp, err, sizeof err);
    EXPECT(r != NULL);
    for (int bo = 1; r && bo <= 25; bo += 4) {
        const double x = bo * 1.6e6, g = fmin(1.6, 1.1 + 0.5 * (x - 1e6) / 32e6);
        struct ioaa_refit *s = make_g(&p, 1, 1.6e6, 0.3e6, g);
        if (!s) continue;
        EXPECT_NEAR(ioaa_refit_step(r, 0, 0, bo, 1), ioaa_refit_step(s, 0, 0, bo, 1), 1e-15);
        const double m = ioaa_refit_step(s, 0, 0, bo, 1);
        ioaa_refit_observe(r, 0, 0, bo, m);
        ioaa_refit_free(s);
    }
    struct ioaa_refit_stats st;
    if (r) ioaa_refit_get_stats(r, &st);
    EXPECT_NEAR(r ? st.k_recall : 0, 1, 1e-9);
    EXPECT_NEAR(r ? st.k_correction : 0, 1, 1e-9);
    ioaa_refit_free(r);
    rp.beside.slow[0] = 0.9; /* refused as the reader refuses it */
    EXPECT(ioaa_refit_create(&rp, err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "compute_beside: factor 0 is 0.9");
}

/* Bad input: one-line reasons. */
static void test_rejects(void)
{
    char err[256];
    const struct ioaa_profile p = profile(1e6);
    struct ioaa_refit_params rp = {.base = &p, .enabled = 1, .alpha = 1.5};
    EXPECT(ioaa_refit_create(&rp, err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "alpha 1.5");
    rp.alpha = 0, rp.prefetch_bytes = 1e6, rp.max_batch = 8;
    rp.beside = (struct ioaa_beside){.n = 1, .factor = {0}};
    EXPECT(ioaa_refit_create(&rp, err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "beside: factor 0 is 0");
    struct ioaa_profile pg = p;
    pg.compute_beside = 0.5;
    rp.beside = (struct ioaa_beside){.n = 1, .factor = {0.5}}, rp.base = &pg;
    EXPECT(ioaa_refit_create(&rp, err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "compute_beside is 0.5");
    rp.base = &p;
    rp.base = NULL;
    EXPECT(ioaa_refit_create(&rp, err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "no profile");
    const struct ioaa_params ip = {.profile = p, .max_waiting = 1};
    struct ioaa *a = ioaa_create(&ip, err, sizeof err);
    const double bad[2] = {2e-3, 1e-3};
    EXPECT_EQ_INT(ioaa_set_recall(a, bad, 2, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "tr[1]");
    EXPECT_EQ_INT(ioaa_set_recall(a, bad, 1, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "expected 2");
    ioaa_free(a);
}

int main(void)
{
    test_converges();
    test_noisy();
    test_off();
    test_uninformative();
    test_speculation();
    test_admission();
    test_self();
    test_bytes();
    test_slow_table();
    test_rejects();
    return tu_finish("test_ioaa_refit");
}
