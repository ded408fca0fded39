/* Stream memory operations of the CUDA driver (cuStreamWaitValue32 / cuStreamWriteValue32),
 * reached through the runtime's driver entry points so that nothing links libcuda directly
 * (CPU-only machines load the binaries without a driver). A stream waits on the device until
 * (int32_t)(*flag - value) >= 0; a write stores value into *flag when the stream reaches it.
 * flag: pinned host memory (cudaHostAlloc) or device memory. CUDA builds only. */
#ifndef PULSE_STREAM_VALUE_H
#define PULSE_STREAM_VALUE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Queue the wait / the write on `stream` (a cudaStream_t); abort with the driver's error. */
void pulse_cuda_wait_value(void *stream, const uint32_t *flag, uint32_t value);
/* PULSE_OK, or PULSE_ERR_IO when the driver refused the operation. */
int pulse_cuda_write_value(void *stream, uint32_t *flag, uint32_t value);

/* Streams for the decode step and the recall engines, from a process-wide pool: reused instead
 * of destroyed, so a process holds only as many streams as it uses at once and each keeps its
 * own hardware queue (of the 32 connections this module asks for), since a stream that waits on
 * the device holds up the queue it is mapped to. greatest: the highest priority (recall), else
 * the default one. Aborts on a CUDA error. */
void *pulse_cuda_stream_acquire(int greatest);
/* Synchronises the stream and returns it to the pool. */
void pulse_cuda_stream_release(void *stream);

#ifdef __cplusplus
}
#endif
#endif
