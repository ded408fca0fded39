/* IOAA's self-interleaved step (ioaa.h, ioaa_self_step_time and ioaa_choose_self) on synthetic
 * profiles: the period of a layer of two halves by hand, both directions of the choice (a
 * recall comparable to the compute: interleave; a weight-bound sparse layer beside a small
 * recall: do not), odd batches split ceil / floor, and a batch of one never split. */
#include <math.h>
#include <stdio.h>

#include "common.h"
#include "ioaa.h"
#include "testutil.h"

static const double TNB[] = {1, 4}, TNC[] = {100, 1000}, TN[] = {1, 3, 2, 5};
static const double TOB[] = {1, 4}, TRX[] = {100, 400};

/* L = 2 layers, r = 100 bytes per request and layer; t_O and t_R linear between their points */
static struct ioaa *make(const double *to, const double *tr)
{
    struct ioaa_params p = {0};
    p.profile = (struct ioaa_profile){.n_layers = 2,
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
    p.max_waiting = 4;
    p.irq = 1;
    char err[256];
    struct ioaa *a = ioaa_create(&p, err, sizeof err);
    if (!a) fprintf(stderr, "ioaa_create: %s\n", err);
    EXPECT(a != NULL);
    return a;
}

/* recall-bound: t_O(b) = 0.8 + 0.2 b, t_R(x) = x / 100 */
static void test_recall_bound(void)
{
    static const double to[] = {1, 1.6}, tr[] = {1, 4};
    struct ioaa *a = make(to, tr);
    if (!a) return;
    double self, plain;
    /* b_O = 4: unsplit 2 (1.6 + 4) = 11.2; halves of 2: t_R 2 each, t_O 1.2 each: the link
     * 4, the compute 2.4, each chain 3.2: P = 4, S = 8 */
    EXPECT_EQ_INT(ioaa_choose_self(a, 4, &self, &plain), 1);
    EXPECT_NEAR(plain, 11.2, 1e-9);
    EXPECT_NEAR(self, 8.0, 1e-9);
    EXPECT_NEAR(ioaa_step_time(a, 0, 0, 4, NULL), plain, 1e-12);
    /* b_O = 3: halves 2 and 1: t_R 2 and 1, t_O 1.2 and 1: link 3, compute 2.2, chains 3.2
     * and 2: P = 3.2; unsplit 2 (1.4 + 3) = 8.8 */
    EXPECT_EQ_INT(ioaa_choose_self(a, 3, &self, &plain), 1);
    EXPECT_NEAR(self, 6.4, 1e-9);
    EXPECT_NEAR(plain, 8.8, 1e-9);
    /* a batch of one is not split */
    EXPECT_EQ_INT(ioaa_choose_self(a, 1, &self, &plain), 0);
    EXPECT_NEAR(self, plain, 1e-12);
    printf("recall-bound profile: b_O 4 self %.2f against %.2f unsplit, b_O 3 %.2f: "
           "interleaved\n",
           8.0, 11.2, 6.4);
    ioaa_free(a);
}

/* weight-bound: t_O(b) = 0.99 + 0.01 b (nearly all weights), t_R(x) = x / 10000 */
static void test_weight_bound(void)
{
    static const double to[] = {1, 1.03}, tr[] = {0.01, 0.04};
    struct ioaa *a = make(to, tr);
    if (!a) return;
    double self, plain;
    /* unsplit 2 (1.03 + 0.04) = 2.14; halves of 2: t_O 1.01 each (compute 2.02 a layer) */
    EXPECT_EQ_INT(ioaa_choose_self(a, 4, &self, &plain), 0);
    EXPECT_NEAR(plain, 2.14, 1e-9);
    EXPECT_NEAR(self, 4.04, 1e-9);
    EXPECT(self > plain);
    printf("weight-bound profile: b_O 4 self %.2f against %.2f unsplit: not interleaved\n", self,
           plain);
    ioaa_free(a);
}

int main(void)
{
    test_recall_bound();
    test_weight_bound();
    return tu_finish("test_ioaa_self");
}
