/* Does compute-sanitizer's initcheck see what cuBLAS writes? A bf16 x bf16 -> fp32 GEMM of the
 * decode step's shape (m rows, like a decode batch) into a fresh cudaMalloc buffer, then a
 * download of it; beside it the same buffer size written by a plain kernel. Run as
 *   compute-sanitizer --tool initcheck ./initcheck_cublas
 * Errors only on the GEMM's buffer mean initcheck does not track cuBLAS's stores (so its reports
 * on buffers a GEMM wrote are not the suite's); errors on both would mean the probe is wrong.
 * A second GEMM's output is then marked initialized through NVTX's memory API, as
 * gemm_bf16_cuda does; under --nvtx yes its download must report nothing:
 *   compute-sanitizer --tool initcheck --nvtx yes ./initcheck_cublas */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExtMemCudaRt.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                           \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

__global__ void fill_bf16(__nv_bfloat16 *p, size_t n, float s)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += gridDim.x * (size_t)blockDim.x)
        p[i] = __float2bfloat16(s * (float)((i * 2654435761u) % 17) - 8.0f * s);
}

__global__ void fill_f32(float *p, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += gridDim.x * (size_t)blockDim.x)
        p[i] = (float)i;
}

int main(int argc, char **argv)
{
    const int m = argc > 1 ? atoi(argv[1]) : 4, n = argc > 2 ? atoi(argv[2]) : 1536,
              k = argc > 3 ? atoi(argv[3]) : 1024;
    __nv_bfloat16 *a, *w;
    float *out, *plain, *marked;
    CK(cudaMalloc(&a, sizeof *a * m * k));
    CK(cudaMalloc(&w, sizeof *w * n * k));
    CK(cudaMalloc(&out, sizeof *out * m * n));
    CK(cudaMalloc(&plain, sizeof *plain * m * n));
    CK(cudaMalloc(&marked, sizeof *marked * m * n));
    fill_bf16<<<64, 256>>>(a, (size_t)m * k, 0.01f);
    fill_bf16<<<64, 256>>>(w, (size_t)n * k, 0.02f);
    fill_f32<<<64, 256>>>(plain, (size_t)m * n);
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 1;
    const float alpha = 1.0f, beta = 0.0f;
    if (cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w, CUDA_R_16BF, k, a, CUDA_R_16BF,
                     k, &beta, out, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
        return 1;
    if (cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w, CUDA_R_16BF, k, a, CUDA_R_16BF,
                     k, &beta, marked, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
        return 1;
    nvtxDomainHandle_t dom = nvtxDomainCreateA("initcheck_cublas");
    nvtxMemVirtualRangeDesc_t range;
    range.size = sizeof *marked * m * n;
    range.ptr = marked;
    nvtxMemMarkInitializedBatch_t batch;
    batch.extCompatID = NVTX_EXT_COMPATID_MEM;
    batch.structSize = sizeof batch;
    batch.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
    batch.regionDescCount = 1;
    batch.regionDescElementSize = sizeof range;
    batch.regionDescElements = &range;
    nvtxMemCudaMarkInitialized(dom, 0, 0, &batch);
    float *h_out = (float *)malloc(sizeof *h_out * m * n);
    fprintf(stderr, "-- download of the plain kernel's buffer\n");
    CK(cudaMemcpy(h_out, plain, sizeof *h_out * m * n, cudaMemcpyDeviceToHost));
    fprintf(stderr, "-- download of the GEMM's buffer (m=%d n=%d k=%d)\n", m, n, k);
    CK(cudaMemcpy(h_out, out, sizeof *h_out * m * n, cudaMemcpyDeviceToHost));
    fprintf(stderr, "-- download of the marked GEMM's buffer\n");
    CK(cudaMemcpy(h_out, marked, sizeof *h_out * m * n, cudaMemcpyDeviceToHost));
    double s = 0;
    for (int i = 0; i < m * n; i++) s += h_out[i];
    printf("checksum %.6g\n", s);
    cublasDestroy(h);
    return 0;
}
