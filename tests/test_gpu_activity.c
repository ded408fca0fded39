/* The GPU activity summary's arithmetic (runtime/results/gpu_activity.h): the union of intervals and the
 * window on hand-computed cases, kernel names from mangled symbols; and where no GPU is, the
 * collector and `pulse run --cupti` refuse with a reason. The collector itself is tested on the
 * GPU (tests/gpu/test_gpu_activity_gpu.c). */
#include <string.h>

#include "backend.h"
#include "gpu_activity.h"
#include "testutil.h"

static void test_union(void)
{
    uint64_t a, b;
    EXPECT(gpu_interval_union(NULL, 0, &a, &b) == 0 && a == 0 && b == 0);
    /* [10,20) [15,30) [40,50) [45,47) [0,5): 5 + 20 + 10 = 35 over [0, 50) */
    struct gpu_interval iv[] = {{40, 50}, {10, 20}, {45, 47}, {15, 30}, {0, 5}};
    EXPECT(gpu_interval_union(iv, 5, &a, &b) == 35);
    EXPECT(a == 0 && b == 50);
    EXPECT(iv[0].start == 0 && iv[4].start == 45); /* sorted by start */
    /* nested inside one long interval, and touching ends: [0,100) [10,20) [100,110) = 110 */
    struct gpu_interval n[] = {{10, 20}, {100, 110}, {0, 100}};
    EXPECT(gpu_interval_union(n, 3, NULL, &b) == 110 && b == 110);
    /* the latest end is not the last-starting interval's */
    struct gpu_interval l[] = {{0, 1000}, {5, 6}};
    EXPECT(gpu_interval_union(l, 2, &a, &b) == 1000 && b == 1000);
}

static void test_merge_cover(void)
{
    /* [0,5) [10,30) [40,50) after merging; covered inside [3, 45): 2 + 20 + 5 = 27 */
    struct gpu_interval iv[] = {{40, 50}, {10, 20}, {45, 47}, {15, 30}, {0, 5}, {20, 25}};
    const size_t m = gpu_interval_merge(iv, 6);
    EXPECT(m == 3);
    EXPECT(iv[0].start == 0 && iv[0].end == 5 && iv[1].start == 10 && iv[1].end == 30);
    EXPECT(iv[2].start == 40 && iv[2].end == 50);
    EXPECT(gpu_interval_cover(iv, m, 3, 45) == 27);
    EXPECT(gpu_interval_cover(iv, m, 0, UINT64_MAX) == 35);
    EXPECT(gpu_interval_cover(iv, m, 30, 40) == 0); /* a gap */
    EXPECT(gpu_interval_cover(iv, m, 12, 14) == 2); /* inside one */
    EXPECT(gpu_interval_cover(iv, 0, 0, 100) == 0);
    EXPECT(gpu_interval_merge(iv, 0) == 0);
    struct gpu_interval touch[] = {{5, 10}, {0, 5}}; /* touching ends merge */
    EXPECT(gpu_interval_merge(touch, 2) == 1 && touch[0].end == 10);
    EXPECT(gpu_kernel_is_recall("_ZN50_GLOBAL__N__d86783ce_17_recall_kernels_cu_a9349cad13gather_"
                                "kernelILi16EEEvPK11recall_descPKii"));
    EXPECT(gpu_kernel_is_recall("_ZN12_GLOBAL__N_114scatter_kernelEPK11recall_desci"));
    EXPECT(!gpu_kernel_is_recall("nvjet_sm90_tss_384x16_64x4_4x1_v_bz_TNT"));
    EXPECT(!gpu_kernel_is_recall("_ZN12_GLOBAL__N_114rmsnorm_kernelEv"));
}

static void test_gaps(void)
{
    uint64_t ns[4] = {0}, hist_ns[GPU_GAP_BINS] = {0};
    int64_t cnt[4] = {0}, hist_n[GPU_GAP_BINS] = {0};
    EXPECT(gpu_gaps(NULL, 0, NULL, 0, 4, ns, cnt, hist_ns, hist_n) == 0);
    /* times in ns: label 0 [0,1000), label 1 [500,4000) ends last; gap 4000..7000 (3 us)
     * after label 1; label 2 [7000,8000) and label 0 [7500,7600) nested: the gap after it
     * 8000..108000 (100 us) is label 2's, not the nested one's; label 3 [108000,109000), then
     * label 5 (not attributed) and a gap of 1 us after label 3 */
    struct gpu_labeled iv[] = {{7500, 7600, 0},    {0, 1000, 0},        {108000, 109000, 3},
                               {500, 4000, 1},     {110000, 110500, 5}, {7000, 8000, 2},
                               {111500, 112000, 5}};
    const uint64_t t = gpu_gaps(iv, 7, NULL, 0, 4, ns, cnt, hist_ns, hist_n);
    EXPECT(t == 3000 + 100000 + 1000 + 1000);
    EXPECT(ns[1] == 3000 && cnt[1] == 1);
    EXPECT(ns[2] == 100000 && cnt[2] == 1);
    EXPECT(ns[0] == 0 && cnt[0] == 0);
    EXPECT(ns[3] == 1000 && cnt[3] == 1); /* the gap after label 5 is nobody's */
    EXPECT(iv[0].start == 0);             /* sorted by start */
    /* the histogram: 1 us, 1 us (< 2 us), 3 us (< 5), 100 us (< 200) */
    EXPECT(hist_n[0] == 2 && hist_ns[0] == 2000);
    EXPECT(hist_n[1] == 1 && hist_ns[1] == 3000);
    EXPECT(hist_n[4] == 1 && hist_ns[4] == 100000);
    EXPECT(hist_n[2] + hist_n[3] + hist_n[5] == 0);
    /* an excluded span inside the 100 us gap leaves 40 us of it; one covering a gap drops it */
    struct gpu_labeled jv[] = {{0, 1000, 0}, {101000, 102000, 1}, {103000, 104000, 2}};
    struct gpu_interval ex[] = {{20000, 80000}, {102000, 103000}};
    uint64_t ns2[4] = {0}, h2[GPU_GAP_BINS] = {0};
    int64_t c2[4] = {0}, hn2[GPU_GAP_BINS] = {0};
    EXPECT(gpu_gaps(jv, 3, ex, 2, 4, ns2, c2, h2, hn2) == 40000);
    EXPECT(ns2[0] == 40000 && c2[0] == 1 && ns2[1] == 0 && c2[1] == 0);
    EXPECT(hn2[3] == 1 && h2[3] == 40000); /* 40 us: below 50 */
}

static void test_names(void)
{
    char s[64];
    EXPECT(strcmp(gpu_kernel_short_name("_ZN12_GLOBAL__N_113gather_kernelILi16EEEvPK11recall_"
                                        "descPKii",
                                        s, sizeof s),
                  "gather_kernel<...>") == 0);
    EXPECT(strcmp(gpu_kernel_short_name("_ZN50_GLOBAL__N__d86783ce_17_recall_kernels_cu_a9349ca"
                                        "d13gather_kernelILi8EEEvPK11recall_descPKii",
                                        s, sizeof s),
                  "gather_kernel<...>") == 0); /* nvcc's anonymous namespace */
    EXPECT(strcmp(gpu_kernel_short_name("_ZL14scatter_kernelPK11recall_desci", s, sizeof s),
                  "scatter_kernel") == 0);
    EXPECT(strcmp(gpu_kernel_short_name("_ZN5pulse4attn6decodeEPKfi", s, sizeof s),
                  "pulse::attn::decode") == 0);
    EXPECT(strcmp(gpu_kernel_short_name("_Z10rms_kernelPfPKfi", s, sizeof s), "rms_kernel") == 0);
    EXPECT(strcmp(gpu_kernel_short_name("sm90_xmma_gemm_bf16bf16", s, sizeof s),
                  "sm90_xmma_gemm_bf16bf16") == 0);
    EXPECT(strcmp(gpu_kernel_short_name("_Zbad", s, sizeof s), "_Zbad") == 0); /* unread form */
    EXPECT(strcmp(gpu_kernel_short_name("_ZN99short", s, sizeof s), "_ZN99short") == 0);
    char t[8]; /* truncated, still terminated */
    gpu_kernel_short_name("a_very_long_kernel_name", t, sizeof t);
    EXPECT(strcmp(t, "a_very_") == 0);
}

static void test_refusals(void)
{
    char out[4096];
    int rc = tu_run_pulse("run --backend cpu --cupti --workload uniform:32:2 --output-len 2", out,
                          sizeof out);
    EXPECT_EQ_INT(rc, 2);
    EXPECT_STR_CONTAINS(out, "--cupti: needs the cuda backend");
    if (backend_cuda_available()) return; /* the collector works there: the GPU test covers it */
    char err[256] = "";
    EXPECT(gpu_activity_start(1024, err, sizeof err) == NULL);
    EXPECT(err[0] != 0);
    EXPECT(gpu_activity_stop(NULL, 10, 0) == NULL);
}

int main(void)
{
    test_union();
    test_gaps();
    test_merge_cover();
    test_names();
    test_refusals();
    return tu_finish("test_gpu_activity");
}
