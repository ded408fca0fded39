/* The CUDA and cuBLAS members of the check macro family (common.h): on failure they print the
 * statement, file:line and the error's name and description, then abort. Usable from C and CUDA.
 *
 * CUDA_CHECK_LAUNCH(stream) goes after every kernel launch: it checks cudaGetLastError and, when
 * PULSE_SYNC=1 (pulse_sync_each_launch), synchronises the stream so a faulting kernel is named
 * at its own launch site (skipped while the stream is being captured into a CUDA graph, where
 * synchronising is illegal). */
#ifndef PULSE_CUDA_CHECK_H
#define PULSE_CUDA_CHECK_H

#include <stdio.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "common.h"

#define CUDA_CHECK(stmt)                                                                           \
    do {                                                                                           \
        cudaError_t e_ = (stmt);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            char d_[256];                                                                          \
            snprintf(d_, sizeof d_, "%s (%s)", cudaGetErrorName(e_), cudaGetErrorString(e_));      \
            pulse_die(__FILE__, __LINE__, #stmt, d_);                                              \
        }                                                                                          \
    } while (0)

#define CUBLAS_CHECK(stmt)                                                                         \
    do {                                                                                           \
        cublasStatus_t s_ = (stmt);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            char d_[256];                                                                          \
            snprintf(d_, sizeof d_, "%s (%s)", cublasGetStatusName(s_),                            \
                     cublasGetStatusString(s_));                                                   \
            pulse_die(__FILE__, __LINE__, #stmt, d_);                                              \
        }                                                                                          \
    } while (0)

#define CUDA_CHECK_LAUNCH(stream)                                                                  \
    do {                                                                                           \
        CUDA_CHECK(cudaGetLastError());                                                            \
        if (pulse_sync_each_launch()) {                                                            \
            enum cudaStreamCaptureStatus cs_ = cudaStreamCaptureStatusNone;                        \
            CUDA_CHECK(cudaStreamIsCapturing((stream), &cs_));                                     \
            if (cs_ == cudaStreamCaptureStatusNone) CUDA_CHECK(cudaStreamSynchronize(stream));     \
        }                                                                                          \
    } while (0)

#endif
