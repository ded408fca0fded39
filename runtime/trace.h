/* NVTX ranges through macros that compile to nothing without NVTX, so instrumentation stays
 * out of the measured path when off. Ranges name layers, batches and recalls. */
#ifndef PULSE_TRACE_H
#define PULSE_TRACE_H

#if defined(PULSE_HAVE_NVTX)
#include <nvtx3/nvToolsExt.h>
#define TRACE_PUSH(name) nvtxRangePushA(name)
#define TRACE_POP() nvtxRangePop()
#else
#define TRACE_PUSH(name) ((void)0)
#define TRACE_POP() ((void)0)
#endif

#endif
