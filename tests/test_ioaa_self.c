/* IOAA's self-interleaved step (ioaa.h's ioaa_self_period through ioaa_refit_self_step, the
 * model pulseinfer --self-interleave auto decides with) on synthetic profiles: the period of a
 * layer of two halves by hand, both directions of the choice against the unsplit step (a recall
 * comparable to the compute: interleave; a weight-bound sparse layer beside a small recall: do
 * not), odd batches split ceil / floor, a batch of one never split; with speculation the
 * prefetch and the corrections both on the link and each half's prefetch beside its own
 * compute; and the refit's factors scaling the halves' recall as they scale the unsplit one. */
#include <math.h>
#include <stdio.h>

#include "common.h"
#include "ioaa.h"
#include "ioaa_refit.h"
#include "testutil.h"

static const double TNB[] = {1, 4}, TNC[] = {100, 1000}, TN[] = {1, 3, 2, 5};
static const double TOB[] = {1, 4}, TRX[] = {100, 400};

/* L = 2 layers, r = 100 bytes per request and layer; t_O and t_R linear between their points;
 * speculation with prefetch and correction bytes per request and layer (0, 0: exact), the
 * recall at rate f beside compute */
static struct ioaa_refit *make(const double *to, const double *tr, double pf, double corr, double f)
{
    const struct ioaa_profile prof = {.n_layers = 2,
                                      .tn_nb = 2,
                                      .tn_nc = 2,
                                      .tn_b = TNB,
                                      .tn_c = TNC,
                                      .tn = TN,
                                      .to_n = 2,
                                      .to_b = TOB,
                                      .to = to,
                                      .tr_n = 2,
                                      .tr_bytes = TRX,
                                      .tr = tr,
                                      .recall_bytes = 100};
    const struct ioaa_refit_params p = {.base = &prof,
                                        .irq = 1,
                                        .enabled = 1,
                                        .prefetch_bytes = pf,
                                        .correction_bytes = corr,
                                        .beside = {.n = f > 0, .factor = {f}},
                                        .max_batch = 8};
    char err[256];
    struct ioaa_refit *r = ioaa_refit_create(&p, err, sizeof err);
    if (!r) fprintf(stderr, "ioaa_refit_create: %s\n", err);
    EXPECT(r != NULL);
    return r;
}

/* the period by hand: the link, the compute, each half's chain */
static void test_period(void)
{
    EXPECT_NEAR(ioaa_self_period(0, 2, 1.2, 0, 2, 1.2), 4.0, 1e-12);   /* the link binds */
    EXPECT_NEAR(ioaa_self_period(0, 1, 3, 0, 1, 3), 6.0, 1e-12);       /* the compute */
    EXPECT_NEAR(ioaa_self_period(0, 3, 2.5, 0, 0.2, 0.5), 5.5, 1e-12); /* half a's chain */
    /* a prefetch longer than its half's compute delays the chain; the link carries all four */
    EXPECT_NEAR(ioaa_self_period(2, 1, 1.5, 0.5, 0.5, 1), 4.0, 1e-12);
    EXPECT_NEAR(ioaa_self_period(1.5, 1, 3, 1.5, 1, 3), 6.0, 1e-12);
}

/* recall-bound: t_O(b) = 0.8 + 0.2 b, t_R(x) = x / 100 */
static void test_recall_bound(void)
{
    static const double to[] = {1, 1.6}, tr[] = {1, 4};
    struct ioaa_refit *r = make(to, tr, 0, 0, 0);
    if (!r) return;
    /* b_O = 4: unsplit 2 (1.6 + 4) = 11.2; halves of 2: t_R 2 each, t_O 1.2 each: the link
     * 4, the compute 2.4, each chain 3.2: P = 4, S = 8 */
    EXPECT_NEAR(ioaa_refit_step(r, 0, 0, 4, 1), 11.2, 1e-9);
    EXPECT_NEAR(ioaa_refit_self_step(r, 4, 1), 8.0, 1e-9);
    /* b_O = 3: halves 2 and 1: t_R 2 and 1, t_O 1.2 and 1: link 3, compute 2.2, chains 3.2
     * and 2: P = 3.2; unsplit 2 (1.4 + 3) = 8.8 */
    EXPECT_NEAR(ioaa_refit_self_step(r, 3, 1), 6.4, 1e-9);
    EXPECT_NEAR(ioaa_refit_step(r, 0, 0, 3, 1), 8.8, 1e-9);
    /* a batch of one is not split */
    EXPECT_NEAR(ioaa_refit_self_step(r, 1, 1), ioaa_refit_step(r, 0, 0, 1, 1), 1e-12);
    /* the refit's factor scales the halves' rounds: steps of b_O 4 measured at 2 (1.6 + 8)
     * (a recall twice the profile's) fit k_R = 2; halves' rounds 4 each: the link 8, P = 8 */
    for (int i = 0; i < 60; i++)
        ioaa_refit_observe(r, 0, 0, 4, 2 * (1.6 + 8));
    struct ioaa_refit_stats st;
    ioaa_refit_get_stats(r, &st);
    EXPECT_NEAR(st.k_recall, 2.0, 1e-3);
    EXPECT_NEAR(ioaa_refit_self_step(r, 4, 1), 16.0, 1e-2);
    EXPECT_NEAR(ioaa_refit_self_step(r, 4, 0), 8.0, 1e-9); /* factors 1 */
    printf("recall-bound profile: b_O 4 self %.2f against %.2f unsplit, b_O 3 %.2f against %.2f: "
           "interleaved; refitted k_R %.3f: self %.2f\n",
           8.0, 11.2, 6.4, 8.8, st.k_recall, ioaa_refit_self_step(r, 4, 1));
    ioaa_refit_free(r);
}

/* weight-bound: t_O(b) = 0.99 + 0.01 b (nearly all weights), t_R(x) = x / 10000 */
static void test_weight_bound(void)
{
    static const double to[] = {1, 1.03}, tr[] = {0.01, 0.04};
    struct ioaa_refit *r = make(to, tr, 0, 0, 0);
    if (!r) return;
    /* unsplit 2 (1.03 + 0.04) = 2.14; halves of 2: t_O 1.01 each (compute 2.02 a layer) */
    const double plain = ioaa_refit_step(r, 0, 0, 4, 1), self = ioaa_refit_self_step(r, 4, 1);
    EXPECT_NEAR(plain, 2.14, 1e-9);
    EXPECT_NEAR(self, 4.04, 1e-9);
    EXPECT(self > plain);
    printf("weight-bound profile: b_O 4 self %.2f against %.2f unsplit: not interleaved\n", self,
           plain);
    ioaa_refit_free(r);
}

/* speculation: prefetch 200 and corrections 50 bytes per request and layer, f = 0.5, the
 * recall-bound profile. b_O 4 unsplit: t_O 1.6, prefetch t_R(800) = 8 alone, at f while the
 * layer computes and alone after (ioaa_overlap): 8 - 0.5 1.6 = 7.2 past the layer, corrections
 * t_R(200) = 2: t_R' = 9.2, S = 2 (1.6 + 9.2) = 21.6. Halves of 2 (the other half computes
 * beside every round, so the link runs at f throughout): prefetch t_R(400) / f = 8 each,
 * corrections t_R(100) = 1 each, t_O 1.2: the link 18, the compute 2.4, each chain max(1.2, 8)
 * + 1 = 9: P = 18, S = 36 -- unsplit. With a link faster beside compute (f = 2): unsplit 8 -
 * 2 1.6 = 4.8 past the layer, t_R' = 6.8, S = 16.8; halves: prefetch 2 each, the link 6, chains
 * max(1.2, 2) + 1 = 3: P = 6, S = 12 -- split. */
static void test_speculation(void)
{
    static const double to[] = {1, 1.6}, tr[] = {1, 4};
    for (int k = 0; k < 2; k++) {
        const double f = k ? 2.0 : 0.5;
        struct ioaa_refit *r = make(to, tr, 200, 50, f);
        if (!r) return;
        const double plain = ioaa_refit_step(r, 0, 0, 4, 1), self = ioaa_refit_self_step(r, 4, 1);
        EXPECT_NEAR(plain, k ? 16.8 : 21.6, 1e-9);
        EXPECT_NEAR(self, k ? 12.0 : 36.0, 1e-9);
        EXPECT(k ? self < plain : self > plain); /* what auto chooses */
        printf("speculation, f %.1f: b_O 4 self %.2f against %.2f unsplit\n", f, self, plain);
        ioaa_refit_free(r);
    }
    /* comparable compute: t_O 4x (t_O(b) = 3.2 + 0.8 b), f = 1: unsplit t_O 6.4, prefetch
     * t_R(800) = 8, corrections 2: t_R' = max(2, 8 + 2 - 6.4) = 3.6, S = 2 (6.4 + 3.6) = 20;
     * halves: t_O 4.8, prefetch 4, corrections 1: link 10, compute 9.6, chains 5.8: P = 10,
     * S = 20 -- the link again; with corrections only (prefetch 0, corrections 250):
     * unsplit t_R' = max(10, 10 - 6.4) = 10, S = 32.8; halves: link 10, compute 9.6, chains
     * 4.8 + 5 = 9.8: P = 10, S = 20 */
    static const double to4[] = {4, 6.4};
    struct ioaa_refit *r = make(to4, tr, 0, 250, 1.0);
    if (!r) return;
    EXPECT_NEAR(ioaa_refit_step(r, 0, 0, 4, 1), 32.8, 1e-9);
    EXPECT_NEAR(ioaa_refit_self_step(r, 4, 1), 20.0, 1e-9);
    printf("speculation, corrections only beside comparable compute: b_O 4 self %.2f against "
           "%.2f unsplit: interleaved\n",
           ioaa_refit_self_step(r, 4, 1), ioaa_refit_step(r, 0, 0, 4, 1));
    ioaa_refit_free(r);
}

int main(void)
{
    test_period();
    test_recall_bound();
    test_weight_bound();
    test_speculation();
    return tu_finish("test_ioaa_self");
}
