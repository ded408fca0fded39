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

/* Streams for the decode step and the recall engines, from a process-wide pool.
 *
 * A stream that waits on the device (pulse_cuda_wait_value) holds up the hardware work queue
 * it is mapped to; the driver maps streams onto CUDA_DEVICE_MAX_CONNECTIONS queues round robin
 * in creation order, so a recall stream that shared the compute stream's queue would wait
 * behind the very wait it is to release (measured on the H200: a process creating an engine
 * and a recall engine per run hung on its third). So this module raises the connections to 32
 * before CUDA starts (unless the environment sets them), and streams are reused instead of
 * destroyed: a process holds only as many streams as it uses at once, each on its own queue.
 * greatest: the highest priority (recall), else the default one. Aborts on a CUDA error. */
void *pulse_cuda_stream_acquire(int greatest);
/* Synchronises the stream and returns it to the pool. */
void pulse_cuda_stream_release(void *stream);

#ifdef __cplusplus
}
#endif
#endif
