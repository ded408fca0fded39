/* The GPU activity collector (runtime/results/gpu_activity.h) on the GPU: known work between start and
 * stop (H2D and D2H copies of known sizes, the zero-copy gather kernel a known number of times,
 * a memset) is found in the summary: the copies' bytes per direction, the kernel by name with
 * its count, a busy time no longer than the window, nothing dropped; work before start is not
 * counted, nor is work inside a span excluded as set-up; a known idle stretch is found after
 * the kernel before it. Exit 77 without a GPU. */
#include <cuda_runtime.h>
#include <string.h>

#include "backend.h"
#include "common.h"
#include "gpu_activity.h"
#include "recall.h"
#include "testutil.h"

#define BYTES ((size_t)16 << 20)
#define CHUNK ((size_t)64 << 10)
#define N_DESC 64
#define GATHERS 5

static int ok(cudaError_t e)
{
    return e == cudaSuccess;
}

static double num(json_t *o, const char *path1, const char *path2, const char *key)
{
    json_t *x = path1 ? json_object_get(o, path1) : o;
    if (path2) x = json_object_get(x, path2);
    return json_number_value(json_object_get(x, key));
}

int main(void)
{
    if (!backend_cuda_available()) return 77;
    char *h, *d, *hp;
    struct recall_desc *dd, hd[N_DESC];
    cudaStream_t st;
    EXPECT(ok(cudaHostAlloc((void **)&h, BYTES, cudaHostAllocMapped)));
    EXPECT(ok(cudaMalloc((void **)&d, BYTES)) && ok(cudaMalloc((void **)&dd, sizeof hd)));
    EXPECT(ok(cudaHostGetDevicePointer((void **)&hp, h, 0)) && ok(cudaStreamCreate(&st)));
    if (tu_failures) return tu_finish("test_gpu_activity_gpu");
    for (size_t i = 0; i < BYTES; i++)
        h[i] = (char)(i * 13 + 5);
    for (int i = 0; i < N_DESC; i++) /* chunk i from the pool's chunk (7 i mod 64) */
        hd[i] = (struct recall_desc){(uint64_t)(uintptr_t)(hp + (size_t)(7 * i % N_DESC) * CHUNK),
                                     (uint64_t)(uintptr_t)(d + (size_t)i * CHUNK), CHUNK, 0};
    /* before start: not counted */
    EXPECT(ok(cudaMemcpyAsync(d, h, BYTES, cudaMemcpyHostToDevice, st)));
    EXPECT(ok(cudaStreamSynchronize(st)));

    char err[256] = "";
    struct gpu_activity *a = gpu_activity_start(4096, err, sizeof err);
    if (!a) printf("  start: %s\n", err);
    EXPECT(a != NULL);
    struct gpu_activity *b = gpu_activity_start(4096, err, sizeof err);
    EXPECT(b == NULL); /* one collector at a time */
    EXPECT_STR_CONTAINS(err, "another collector");
    /* set-up inside the collection, excluded by its host span: not counted */
    const double x0 = pulse_now();
    EXPECT(ok(cudaMemcpyAsync(d, h, BYTES, cudaMemcpyHostToDevice, st)));
    EXPECT(ok(cudaStreamSynchronize(st)));
    gpu_activity_exclude_host(x0, pulse_now());
    EXPECT(ok(cudaMemcpyAsync(dd, hd, sizeof hd, cudaMemcpyHostToDevice, st)));
    EXPECT(ok(cudaMemcpyAsync(d, h, BYTES / 2, cudaMemcpyHostToDevice, st)));
    for (int k = 0; k < GATHERS; k++)
        recall_gather_cuda(dd, N_DESC, 16, 512, RECALL_ZC_INFLIGHT_KB, st);
    /* a known idle stretch after the last gather: the GPU waits on the host for 3 ms */
    EXPECT(ok(cudaStreamSynchronize(st)));
    const double i0 = pulse_now();
    while (pulse_now() - i0 < 3e-3) {
    }
    EXPECT(ok(cudaMemsetAsync(d + BYTES / 2, 1, 4096, st)));
    EXPECT(ok(cudaMemcpyAsync(h, d, BYTES / 4, cudaMemcpyDeviceToHost, st)));
    EXPECT(ok(cudaStreamSynchronize(st)));
    json_t *j = gpu_activity_stop(a, 10, 0.001);
    EXPECT(j != NULL);
    if (j) {
        char *txt = json_dumps(j, JSON_COMPACT);
        printf("  %s\n", txt);
        free(txt);
        EXPECT_EQ_INT((int)num(j, NULL, NULL, "kernels"), GATHERS);
        EXPECT_EQ_INT((int)num(j, "copies", "h2d", "count"), 2);
        EXPECT(num(j, "copies", "h2d", "bytes") == (double)(BYTES / 2 + sizeof hd));
        EXPECT(num(j, "copies", "d2h", "bytes") == (double)(BYTES / 4));
        EXPECT_EQ_INT((int)num(j, "copies", NULL, "memsets"), 1);
        const double busy = num(j, NULL, NULL, "kernel_busy_s"),
                     win = num(j, NULL, NULL, "window_s");
        EXPECT(busy > 0 && busy <= win);
        /* 5 gathers of 4 MB over PCIe: at least 5 x 4 MB / 64 GB/s of kernel time */
        EXPECT(busy >= GATHERS * (double)(N_DESC * CHUNK) / 64e9);
        EXPECT(num(j, NULL, NULL, "busy_fraction") > 0 && num(j, NULL, NULL, "busy_fraction") <= 1);
        EXPECT_EQ_INT((int)num(j, NULL, NULL, "records_excluded"), 1);
        EXPECT_EQ_INT((int)num(j, NULL, NULL, "excluded_spans"), 1);
        EXPECT_EQ_INT((int)num(j, NULL, NULL, "records_dropped_by_cupti"), 0);
        EXPECT_EQ_INT((int)num(j, NULL, NULL, "records_over_capacity"), 0);
        /* every kernel here is the gather: recall busy = all busy, no compute */
        EXPECT_NEAR(num(j, NULL, NULL, "recall_kernel_busy_s"), busy, 1e-9);
        EXPECT(num(j, NULL, NULL, "compute_kernel_busy_s") == 0);
        json_t *ot = json_object_get(j, "over_time");
        EXPECT(json_array_size(json_object_get(ot, "busy")) >= 1);
        EXPECT(json_array_size(json_object_get(ot, "busy")) ==
               json_array_size(json_object_get(ot, "t_s")));
        json_t *top = json_object_get(j, "top_kernels");
        EXPECT(json_array_size(top) == 1);
        json_t *k0 = json_array_get(top, 0);
        EXPECT(strcmp(json_string_value(json_object_get(k0, "name")), "gather_kernel<...>") == 0);
        EXPECT_EQ_INT((int)json_integer_value(json_object_get(k0, "count")), GATHERS);
        /* the idle stretch: at least 3 ms after the gather, in the largest size bin */
        json_t *g = json_object_get(j, "idle_gaps");
        EXPECT(num(g, NULL, NULL, "total_s") >= 3e-3 && num(g, NULL, NULL, "total_s") <= win);
        json_t *g0 = json_array_get(json_object_get(g, "after"), 0);
        EXPECT(g0 && !strcmp(json_string_value(json_object_get(g0, "name")), "gather_kernel<...>"));
        EXPECT(num(g0, NULL, NULL, "total_s") >= 3e-3);
        json_t *sz = json_object_get(g, "by_size");
        EXPECT_EQ_INT((int)json_array_size(sz), GPU_GAP_BINS);
        EXPECT(num(json_array_get(sz, GPU_GAP_BINS - 1), NULL, NULL, "count") >= 1);
        json_decref(j);
    }
    /* the gathered data: chunk i is the pool's chunk 7 i mod 64 */
    char *back = malloc(BYTES / 4);
    EXPECT(back && ok(cudaMemcpy(back, d, N_DESC * CHUNK, cudaMemcpyDeviceToHost)));
    int wrong = 0;
    for (int i = 0; back && i < N_DESC; i++)
        for (size_t x = 0; x < CHUNK; x += 4093) {
            size_t src = (size_t)(7 * i % N_DESC) * CHUNK + x;
            wrong += back[(size_t)i * CHUNK + x] != (char)(src * 13 + 5);
        }
    EXPECT_EQ_INT(wrong, 0);
    free(back);
    /* a second collector after the first stopped, with room for 16 records of each kind: 40
     * small copies before 5 kernels fill the copies' room only, every kernel is kept */
    a = gpu_activity_start(16, err, sizeof err);
    EXPECT(a != NULL);
    for (int i = 0; i < 40; i++)
        EXPECT(ok(cudaMemcpyAsync(d + 4096 * (size_t)i, h, 4096, cudaMemcpyHostToDevice, st)));
    for (int k = 0; k < GATHERS; k++)
        recall_gather_cuda(dd, N_DESC, 16, 512, RECALL_ZC_INFLIGHT_KB, st);
    EXPECT(ok(cudaStreamSynchronize(st)));
    json_t *c = gpu_activity_stop(a, 4, 0);
    EXPECT(c != NULL);
    if (c) {
        EXPECT_EQ_INT((int)num(c, NULL, NULL, "kernels"), GATHERS);
        EXPECT_EQ_INT((int)num(c, "copies", "h2d", "count"), 16);
        EXPECT_EQ_INT((int)num(c, NULL, NULL, "records_over_capacity"), 24);
        EXPECT_EQ_INT((int)num(c, NULL, NULL, "kernel_records_over_capacity"), 0);
        EXPECT(num(c, NULL, NULL, "busy_fraction") > 0);
        json_decref(c);
    }
    return tu_finish("test_gpu_activity_gpu");
}
