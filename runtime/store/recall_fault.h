/* A recall copy path that injects faults into another (tests, CI, and `pulse run` with
 * PULSE_RECALL_FAULT): its host-to-device copies (h2d, and each batch of them) fail as the spec
 * says, everything else is the wrapped path's. Specs:
 *   first:N   the first N copies fail, then the link works (a transient fault: the planner
 *             retries a failed recall up to three times)
 *   every:N   every Nth copy fails (a round of more than N copies fails on every attempt, so
 *             N above a round's copies gives intermittent faults; every:1 is a dead link)
 *   dead      every copy fails
 *   delay:US  every copy waits US microseconds (1 to 1e6) before it is issued, then succeeds (a
 *             slow or congested link: the recall lands late, and a device-side wait holds the
 *             step for it; the tokens are unchanged)
 * The zero-copy engine's gather kernel does not go through these copies. */
#ifndef PULSE_RECALL_FAULT_H
#define PULSE_RECALL_FAULT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "recall.h"

struct recall_fault {
    struct recall_copy_ops ops; /* pass &ops as the copy path */
    const struct recall_copy_ops *base;
    int every;     /* 1: every copy fails */
    int64_t first; /* the first copies that fail (first:N), else 0 */
    int64_t delay_us; /* delay:US, else 0 (then nothing fails) */
    _Atomic int64_t copies, injected;
};

/* Makes f wrap base per spec. PULSE_OK, or PULSE_ERR_INVALID with a one-line reason. */
int recall_fault_init(struct recall_fault *f, const struct recall_copy_ops *base, const char *spec,
                      char *err, size_t errlen);
/* The faults injected so far: failed copies, or delayed ones (delay:US). */
int64_t recall_fault_injected(const struct recall_fault *f);

#endif
