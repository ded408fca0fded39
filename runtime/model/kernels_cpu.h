/* Fast CPU kernels for the `cpu` backend: the GEMM and decode attention of kernels.h, vectorised
 * and spread over a persistent thread pool, bit-identical to gemm_bf16_ref / attn_decode_ref
 * (every output sums its terms in the reference's order; the file is built without FMA
 * contraction). Same signatures and semantics as the references; host pointers.
 *
 * Threads: the online CPU count capped at 16 (kernels_cpu_default_threads), until
 * kernels_cpu_set_threads sets another (engine_create: engine_params.cpu_threads; 1 runs inline).
 * The pool starts on the first call and lives until the process exits (idle workers poll for
 * ~25 us after a call, then sleep); calls from several threads are serialised; a child of fork
 * starts its own. Per-thread scratch (attention scores) grows on first use and is then reused: no
 * allocation per call. */
#ifndef PULSE_KERNELS_CPU_H
#define PULSE_KERNELS_CPU_H

#include "kernels.h"

void gemm_bf16_cpu(const struct kctx *c, const uint16_t *a, const uint16_t *w, float *out, int m,
                   int n, int k, float beta);
void attn_decode_cpu(const struct kctx *c, const uint16_t *q, const struct kv_view *kv,
                     const int32_t *n_tokens, uint16_t *out, int batch, int nq, int max_tokens,
                     float scale);

/* Runs fn(arg, id, nth) for id = 0 .. nth-1 on the same pool (id 0 on the caller) and waits
 * for all; nth is capped by the pool's threads (kernels_cpu_set_threads), so a call may get fewer
 * than it asked for: fn must split its work by the nth it is given. For host work that is not
 * a kernel (the offload runtime's next-step queries). Serialised with the kernels. */
void kernels_cpu_parallel(int nth, void (*fn)(void *arg, int id, int nth), void *arg);

/* Sets the number of threads later calls use (clamped to 1..KERNELS_CPU_MAX_THREADS; engine_create,
 * tests and benchmarks). Returns the previous number. The default: the online CPUs, at most 16. */
#define KERNELS_CPU_MAX_THREADS 64
int kernels_cpu_set_threads(int n);
int kernels_cpu_default_threads(void);

#endif
