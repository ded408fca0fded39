/* The decode GEMMs through cuBLASLt (CUDA builds only): gemm_bf16_cuda's product, out[m][n]
 * (fp32) = a[m][k] . w[n][k]^T (bf16) + beta * out, with an algorithm chosen per shape.
 *
 * A plan is kept per (m, n, k, beta != 0, SM count target, the three pointers' alignment, the
 * workspace's size). The first time a shape is seen outside a stream capture, cuBLASLt's
 * heuristic proposes up to GEMM_LT_CANDIDATES algorithms within the context's cuBLAS workspace
 * (kctx.blas_workspace), each is run once to warm up, then timed with events (GEMM_LT_ROUNDS
 * rounds of GEMM_LT_ITERS runs, the least kept) and the fastest is kept for good. The runs are
 * timed as the step runs them: GEMM_LT_ITERS back to back captured in a CUDA graph on the
 * module's own stream (ordered after the caller's), the graph launched, so a candidate that
 * zeroes its output first (a split-K reduction) pays the memset node's gap before its kernel as
 * it does inside the step's graphs; a shape whose capture or instantiation fails is timed on
 * the stream instead, counted (stream_timing: every shape on the stream). Timing writes
 * the real output only when beta is 0 (the real product overwrites it after); a beta != 0 shape
 * is timed on the module's own scratch output, so a residual it accumulates into is never
 * touched twice. A shape first seen inside a capture (no timing, no synchronisation possible)
 * takes the heuristic's first algorithm, counted. A shape the heuristic has no algorithm for is
 * left to cublasGemmEx (gemm_lt_run returns -1), counted.
 *
 * The SM count target (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET) is the device's SMs less
 * sm_reserve, so a kernel beside the GEMMs (the zero-copy gather) keeps some SMs; 0: all SMs.
 * The suite's own skinny kernel (gemm_skinny.h) joins the timing unless no_skinny or an SM
 * reserve is set (it has no SM count target): each of its
 * variants that fits the shape is timed beside cuBLASLt's candidates, and a plan may keep one
 * (it is then run for every later call of the shape, counted in skinny_calls). A shape cuBLASLt
 * has no algorithm for may still get the suite's kernel when timing is allowed.
 *
 * One handle serves one thread at a time (the engine's compute thread). */
#ifndef PULSE_GEMM_LT_H
#define PULSE_GEMM_LT_H

#include <stdint.h>

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GEMM_LT_CANDIDATES 8
#define GEMM_LT_ITERS 3
#define GEMM_LT_ROUNDS 2
#define GEMM_LT_MAX_PLANS 4096 /* a full cache plans each new shape per call, counted */

struct gemm_lt_params {
    int sm_reserve; /* SMs the GEMMs leave free: 0 .. SMs - 1 */
    int no_tuning;  /* 1: every shape takes the heuristic's first algorithm (no timing) */
    int no_skinny;  /* 1: cuBLASLt's candidates only (the suite's skinny kernel not timed) */
    int stream_timing; /* 1: candidates timed as stream launches, not inside a captured graph */
};

struct gemm_lt_stats {
    int num_sms, sm_target;    /* the device's SMs; the target (0: all of them) */
    int64_t calls;             /* products run through cuBLASLt */
    int64_t skinny_calls;      /* products run by the suite's skinny kernel */
    int64_t shapes_skinny;     /* plans that kept a skinny variant (fastest when timed) */
    int64_t shapes;            /* plans made */
    int64_t shapes_tuned;      /* plans whose candidates were timed (more than one) */
    int64_t candidates_timed;  /* algorithms timed over them (cuBLASLt's and skinny variants) */
    int64_t shapes_graph_timed;     /* of shapes_tuned, those whose candidates ran in graphs */
    int64_t graph_timing_fallbacks; /* shapes timed on the stream: a capture or instantiation
                                       failed */
    int64_t capture_fallbacks; /* shapes first seen inside a capture: the heuristic's first */
    int64_t blas_fallbacks;    /* calls left to cublasGemmEx (no cuBLASLt algorithm) */
    int64_t cache_full;        /* calls planned afresh because the cache was full */
    /* what the plans chose, whatever order they were made in: the sum over plans of a 64-bit
     * hash of the plan's shape key and its choice (cuBLASLt's algorithm id, tile, stages,
     * split-K count, reduction scheme, swizzle and custom option; or the skinny variant; or
     * none). Two runs whose GEMMs may round differently (other algorithms for one shape) show
     * other values; 0 before any plan */
    uint64_t choice_hash;
    size_t scratch_bytes;      /* the scratch output of beta != 0 timing (device) */
};

/* A handle on the current device; NULL with a reason in err (sm_reserve out of range, no
 * device). */
struct gemm_lt *gemm_lt_create(const struct gemm_lt_params *p, char *err, size_t errlen);
/* Waits for nothing: the caller has synchronised the streams it used. NULL is a no-op. */
void gemm_lt_free(struct gemm_lt *g);
/* Changes the SM reserve (0 .. SMs - 1; plans are kept per target): 0, or -1 when out of
 * range. Not inside a capture of a GEMM that should use the old one. */
int gemm_lt_set_sm_reserve(struct gemm_lt *g, int sm_reserve);
/* The product on c's stream with c's cuBLAS workspace (blas_workspace may be NULL: no
 * workspace). 0 when queued, -1 when cuBLASLt has no algorithm for the shape (nothing queued:
 * the caller runs cublasGemmEx). m, n, k >= 1; a, w bf16 and out fp32 device pointers. */
int gemm_lt_run(struct gemm_lt *g, const struct kctx *c, const uint16_t *a, const uint16_t *w,
                float *out, int m, int n, int k, float beta);
void gemm_lt_get_stats(const struct gemm_lt *g, struct gemm_lt_stats *out);
/* The same SM reserve on a cuBLAS handle (cublasSetSmCountTarget), for the cublasGemmEx path:
 * the target set, 0 for all SMs, or -1 when sm_reserve is out of range for the device. */
int gemm_blas_set_sm_reserve(void *blas, int sm_reserve);

#ifdef __cplusplus
}
#endif

#endif
