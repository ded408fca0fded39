/* The accuracy table's statistics (accuracy/stats.h) on hand-computed cases: Wilson intervals,
 * the normal interval of a continuous score, the exact sign test, and the paired bootstrap
 * (identical runs, a run that loses on every sample, determinism from the seed). */
#include <math.h>

#include "accuracy/stats.h"
#include "common.h"
#include "testutil.h"

static void test_wilson(void)
{
    double lo, hi;
    acc_wilson(8, 10, 1.96, &lo, &hi); /* the textbook case: [0.490, 0.943] */
    EXPECT_NEAR(lo, 0.4902, 5e-4);
    EXPECT_NEAR(hi, 0.9433, 5e-4);
    acc_wilson(0, 10, 1.96, &lo, &hi); /* none: [0, 0.278] */
    EXPECT_NEAR(lo, 0.0, 1e-12);
    EXPECT_NEAR(hi, 0.2775, 5e-4);
    acc_wilson(100, 100, 1.96, &lo, &hi); /* all: [0.963, 1] */
    EXPECT_NEAR(lo, 0.9630, 5e-4);
    EXPECT_NEAR(hi, 1.0, 1e-12);
    acc_wilson(0, 0, 1.96, &lo, &hi);
    EXPECT(lo == 0 && hi == 1);
    /* binary scores take Wilson's; continuous ones the normal interval of the mean */
    const double b[] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0};
    acc_interval(b, 10, &lo, &hi);
    EXPECT_NEAR(lo, 0.4902, 5e-4);
    const double c[] = {0.2, 0.4, 0.6, 0.8}; /* mean 0.5, s = 0.2582, se 0.1291 */
    acc_interval(c, 4, &lo, &hi);
    EXPECT_NEAR(lo, 0.5 - 1.96 * 0.129099, 1e-5);
    EXPECT_NEAR(hi, 0.5 + 1.96 * 0.129099, 1e-5);
}

static void test_sign(void)
{
    EXPECT_NEAR(acc_sign_test(5, 0), 0.0625, 1e-12); /* 2 * 0.5^5 */
    EXPECT_NEAR(acc_sign_test(0, 5), 0.0625, 1e-12);
    EXPECT_NEAR(acc_sign_test(3, 3), 1.0, 1e-12);
    EXPECT_NEAR(acc_sign_test(0, 0), 1.0, 1e-12);
    /* 10 vs 2: 2 * (1 + 12 + 66) / 4096 = 0.03857 */
    EXPECT_NEAR(acc_sign_test(10, 2), 2.0 * 79 / 4096, 1e-12);
    EXPECT(acc_sign_test(400, 300) < 1e-3); /* large counts through lgamma */
}

static void test_paired(void)
{
    enum { N = 40 };
    double full[N], same[N], worse[N];
    for (int i = 0; i < N; i++) {
        full[i] = (i % 4) != 0; /* 30 of 40 right */
        same[i] = full[i];
        worse[i] = i % 4 == 1 ? 0 : full[i]; /* loses 10 of the 30 */
    }
    struct acc_paired p, q;
    EXPECT_EQ_INT(acc_paired_compare(same, full, N, 1000, 7, &p), PULSE_OK);
    EXPECT(p.wins == 0 && p.losses == 0 && p.ties == N);
    EXPECT(p.mean_diff == 0 && p.diff_lo == 0 && p.diff_hi == 0);
    EXPECT(p.rel == 1 && p.rel_lo == 1 && p.rel_hi == 1 && p.sign_p == 1);
    EXPECT_EQ_INT(acc_paired_compare(worse, full, N, 1000, 7, &p), PULSE_OK);
    EXPECT(p.wins == 0 && p.losses == 10 && p.ties == 30);
    EXPECT_NEAR(p.mean_diff, -0.25, 1e-12);
    EXPECT_NEAR(p.rel, 20.0 / 30.0, 1e-12);
    EXPECT(p.diff_hi < 0 && p.diff_lo < p.mean_diff && p.mean_diff < p.diff_hi);
    EXPECT(p.rel_lo < p.rel && p.rel < p.rel_hi && p.rel_hi < 1);
    EXPECT_NEAR(p.sign_p, 2 * pow(0.5, 10), 1e-12);
    /* the same seed, the same interval; another seed, close */
    EXPECT_EQ_INT(acc_paired_compare(worse, full, N, 1000, 7, &q), PULSE_OK);
    EXPECT(q.diff_lo == p.diff_lo && q.rel_hi == p.rel_hi);
    EXPECT_EQ_INT(acc_paired_compare(worse, full, N, 1000, 8, &q), PULSE_OK);
    EXPECT_NEAR(q.diff_lo, p.diff_lo, 0.05);
    /* a full score of 0 leaves the ratio undefined */
    const double z[3] = {0, 0, 0}, o[3] = {1, 0, 1};
    EXPECT_EQ_INT(acc_paired_compare(o, z, 3, 200, 1, &p), PULSE_OK);
    EXPECT(isnan(p.rel) && isnan(p.rel_lo));
    EXPECT_EQ_INT(acc_paired_compare(o, z, 0, 200, 1, &p), PULSE_ERR_INVALID);
    EXPECT_EQ_INT(acc_paired_compare(o, z, 3, 10, 1, &p), PULSE_ERR_INVALID);
}

static void test_spearman(void)
{
    const double a[] = {1, 2, 3, 4, 5}, up[] = {10, 20, 30, 40, 50}, down[] = {5, 4, 3, 2, 1};
    EXPECT_NEAR(acc_spearman(a, up, 5), 1.0, 1e-12);
    EXPECT_NEAR(acc_spearman(a, down, 5), -1.0, 1e-12);
    /* one swap of neighbours in 5: 1 - 6 * 2 / (5 * 24) = 0.9 */
    const double sw[] = {1, 3, 2, 4, 5};
    EXPECT_NEAR(acc_spearman(a, sw, 5), 0.9, 1e-12);
    /* ties take the average rank: ranks of {1, 2, 2, 3} are 1, 2.5, 2.5, 4 */
    const double t[] = {1, 2, 2, 3}, u[] = {1, 2, 3, 4};
    EXPECT_NEAR(acc_spearman(t, u, 4), 4.5 / sqrt(4.5 * 5.0), 1e-12);
    const double c[] = {7, 7, 7};
    EXPECT(isnan(acc_spearman(c, a, 3)));
    EXPECT(isnan(acc_spearman(a, a, 1)));
}

int main(void)
{
    test_spearman();
    test_wilson();
    test_sign();
    test_paired();
    return tu_finish("test_acc_stats");
}
