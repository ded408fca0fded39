/* The GPU activity summary's arithmetic (runtime/gpu_activity.h): the union of intervals and the
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
    EXPECT(gpu_activity_stop(NULL, 10) == NULL);
}

int main(void)
{
    test_union();
    test_names();
    test_refusals();
    return tu_finish("test_gpu_activity");
}
