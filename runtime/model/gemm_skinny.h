/* The suite's own GEMM for the decode step's skinny shapes (CUDA builds only): gemm_bf16_cuda's
 * product, out[m][n] (fp32) = a[m][k] . w[n][k]^T (bf16) + beta * out, for m <= 32 rows.
 *
 * The step's GEMMs at small batch are a stream of the weights: each weight byte is read once and
 * meets at most 32 rows of a. The kernel reads the weights with 16-byte streaming loads in an
 * order chosen for the load, not for the product (k is permuted inside each 32-wide chunk, a's
 * rows the same way, which a dot product does not see), and multiplies on the tensor cores
 * (mma m16n8k16, bf16 in, fp32 accumulate): a warp owns 16 * RT rows of w and one slice of k,
 * the block's KW warps split k and sum their partials in shared memory in a fixed order, so
 * the result does not depend on timing. Its first weight loads go out before the wait for the
 * kernel before it (programmatic dependent launch, pdl.cuh). Variants differ in RT (rows a warp
 * owns) and KW (warps a block splits k over); with --gemm skinny (and no SM reserve) gemm_lt
 * times them beside cuBLASLt's candidates per shape and keeps the fastest.
 *
 * A variant launches when m <= 32, k % 32 == 0, n % (16 * RT) == 0, a and w 16-byte aligned. */
#ifndef PULSE_GEMM_SKINNY_H
#define PULSE_GEMM_SKINNY_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GEMM_SKINNY_MAX_M 32
#define GEMM_SKINNY_VARIANTS 9

/* 1 when variant (0 .. GEMM_SKINNY_VARIANTS - 1) can run this product. */
int gemm_skinny_fits(int variant, int m, int n, int k, const void *a, const void *w);
/* "rt<RT>-kw<KW>" */
const char *gemm_skinny_name(int variant);
/* Queues the product on stream (a cudaStream_t), with programmatic dependent launch when pdl
 * (pdl.cuh: its first weight loads go out before the kernel before it has finished); the
 * caller checked gemm_skinny_fits. beta is 0 (out is not read) or not (out accumulates). */
void gemm_skinny_run(int variant, void *stream, int pdl, const uint16_t *a, const uint16_t *w,
                     float *out, int m, int n, int k, float beta);

#ifdef __cplusplus
}
#endif

#endif
