/* Internal helpers shared by the files of the accuracy metrics (not part of metrics.h). */
#ifndef PULSE_ACC_METRICS_IMPL_H
#define PULSE_ACC_METRICS_IMPL_H

#include <stddef.h>
#include <stdint.h>

/* Decodes s into code points (invalid bytes -> U+FFFD); *n gets the count. The caller frees
 * the array. NULL when out of memory (a non-NULL array is returned for the empty string). */
uint32_t *acc_u8_to_cps(const char *s, size_t *n);

#endif
