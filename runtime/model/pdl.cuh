/* Programmatic dependent launch (sm_90) for the decode step's kernels.
 *
 * A kernel launched with programmatic stream serialization may start before the kernel before
 * it in its stream has finished: once every block of that one has passed pdl_trigger (or
 * exited). It must then call pdl_wait before it reads what the earlier kernel writes or writes
 * what it reads: pdl_wait returns when the earlier grid has completed and its memory is
 * visible. Launched without the attribute, both are no-ops. Every kernel of the step calls
 * pdl_wait before its first access to activations, so what moves ahead is only the launch and
 * what depends on nothing written in the step (the skinny GEMM's first weight loads); inside a
 * captured graph the edge becomes a programmatic one.
 *
 * kctx.pdl (engine_params.no_pdl, --pdl) chooses the launch; pulse_launch is the one place
 * that launches with it. */
#ifndef PULSE_PDL_CUH
#define PULSE_PDL_CUH

#include <cuda_runtime.h>

#include "cuda_check.h"

__device__ __forceinline__ void pdl_wait()
{
    asm volatile("griddepcontrol.wait;" ::: "memory");
}

__device__ __forceinline__ void pdl_trigger()
{
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/* kernel<<<grid, block, smem, st>>>(args...), with programmatic stream serialization when pdl */
template <typename... P, typename... A>
void pulse_launch(int pdl, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                  cudaStream_t st, A... args)
{
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<P>(args)...));
}

#endif
