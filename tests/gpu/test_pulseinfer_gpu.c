/* pulseinfer (baselines/pulseinfer.c) on CUDA with the tiny model: with a budget covering the
 * context, on vanilla's prompt KV, every request decodes exactly vanilla's tokens on CUDA in two
 * arrival orders of mixed lengths (the first with CUDA graphs, as pulse run, the second without:
 * --no-graph), with requests split between the normal and the offload batch
 * (fixed:200), all offloaded (fixed:0) and IOAA admission; with IRQ and without; head-wise and
 * SoloHead; gather-scatter and zero-copy (whose gather runs on its own stream beside the normal
 * batch). Runs without the per-step verification make no host synchronisation inside a step;
 * one run with it checks every resident block against its host copy. PULSE_GPU_TEST_CASES
 * runs some of the cases (0-6 the first order's, 7-13 the second's; vanilla's runs always).
 * Exit 77 without a GPU. */
#include "pi_serve.h"

int main(void)
{
    if (!backend_cuda_available()) {
        fprintf(stderr, "test_pulseinfer_gpu: no usable GPU: skipped\n");
        return 77;
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* each case's line out before a tool could end the run */
    /* quick (under a compute-sanitizer tool, whose racecheck grows past the machine's 128 GB
     * of host memory on the full test): one order of four shorter requests, fewer tokens,
     * every case once */
    static const char *const specs[] = {"lengths:300,170,90,260,40,200",
                                        "lengths:40,260,90,300,200,170"};
    const char *const quick_spec = "lengths:300,90,260,40";
    const int quick = tu_quick(), out_len = quick ? 6 : 12;
    for (int k = 0; k < (quick ? 1 : 2); k++) {
        const char *spec = quick ? quick_spec : specs[k];
        struct pi_cfg v = {.backend = "cuda",
                           .policy = "vanilla",
                           .spec = spec,
                           .out_len = out_len,
                           .max_batch = 4,
                           .no_graph = k == 1};
        struct pi_out van;
        serve(&v, &van);
        EXPECT_EQ_INT(van.rc, 0);
        /* fixed:200 offloads the requests longer than 200 tokens, prompt and output */
        int longer = 0;
        for (int i = 0; i < van.w.n; i++)
            longer += van.w.reqs[i].prompt_len + out_len > 200;
        EXPECT(longer > 0 && longer < van.w.n); /* both batches have requests */
        struct {
            const char *admission;
            int no_irq, selection, zero_copy, verify;
        } cases[] = {
            {"fixed:200", 0, OFFLOAD_SOLOHEAD, 0, 0}, {"fixed:200", 1, OFFLOAD_SOLOHEAD, 0, 0},
            {"fixed:200", 0, OFFLOAD_HEADWISE, 0, 1}, {"fixed:200", 0, OFFLOAD_SOLOHEAD, 1, 0},
            {"fixed:200", 0, OFFLOAD_HEADWISE, 1, 1}, {"fixed:0", 0, OFFLOAD_SOLOHEAD, 0, 0},
            {"ioaa", 0, OFFLOAD_SOLOHEAD, 0, 0}};
        for (size_t i = 0; i < PULSE_ARRAY_LEN(cases); i++) {
            /* (numbered over both orders: PULSE_GPU_TEST_CASES) */
            if (!tu_case_on((long)(k * PULSE_ARRAY_LEN(cases) + i))) continue;
            struct pi_cfg c = {.backend = "cuda",
                               .policy = "pulseinfer",
                               .spec = spec,
                               .admission = cases[i].admission,
                               .out_len = out_len,
                               .max_batch = 4,
                               .no_graph = k == 1,
                               .no_irq = cases[i].no_irq,
                               .selection = cases[i].selection,
                               .budget_tokens = 512, /* every block selected */
                               .prompt_kv = OFFLOAD_KV_SYNTHETIC,
                               .zero_copy = cases[i].zero_copy,
                               .no_verify = !cases[i].verify};
            struct pi_out r;
            serve(&c, &r);
            EXPECT_EQ_INT(r.rc, 0);
            const int same = same_tokens(&van.w, &r.w);
            EXPECT(same);
            EXPECT_EQ_INT(r.ctr.admitted_normal + r.ctr.admitted_offload, van.w.n);
            if (!strcmp(cases[i].admission, "fixed:200"))
                EXPECT_EQ_INT(r.ctr.admitted_offload, longer);
            if (!strcmp(cases[i].admission, "fixed:0")) EXPECT_EQ_INT(r.ctr.admitted_normal, 0);
            if (r.ctr.admitted_offload) EXPECT(r.ctr.recall_bytes > 0);
            printf(
                "cuda %s%s, %s%s%s, %s%s: %lld normal + %lld offloaded, %lld host syncs in steps, "
                "tokens %s vanilla's\n",
                spec, k == 1 ? " (no graphs)" : "", cases[i].admission,
                cases[i].no_irq ? " --no-irq" : "",
                cases[i].zero_copy ? " zero-copy" : " gather-scatter",
                cases[i].selection == OFFLOAD_SOLOHEAD ? "solohead" : "headwise",
                cases[i].verify ? " verified" : "", (long long)r.ctr.admitted_normal,
                (long long)r.ctr.admitted_offload, (long long)r.ctr.step_host_syncs,
                same ? "equal" : "DIFFER from");
            workload_free(&r.w);
        }
        workload_free(&van.w);
    }
    return tu_finish("test_pulseinfer_gpu");
}
