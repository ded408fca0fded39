/* Internal helpers shared by the files of the accuracy metrics (not part of metrics.h). */
#ifndef PULSE_ACC_METRICS_IMPL_H
#define PULSE_ACC_METRICS_IMPL_H

#include <stddef.h>
#include <stdint.h>

/* Decodes s into code points (invalid bytes -> U+FFFD); *n gets the count. The caller frees
 * the array. NULL when out of memory (a non-NULL array is returned for the empty string). */
uint32_t *acc_u8_to_cps(const char *s, size_t *n);

/* The metrics' character classes of one code point, as Python's: re's \w and \d of a str
 * pattern, str.isspace(); and str.lower() of a one-character string into out (room for 8
 * bytes, NUL-terminated; the final-sigma rule needs context, so U+03A3 alone is sigma).
 * Exposed for tests. */
int acc_cp_is_word(uint32_t c);
int acc_cp_is_digit(uint32_t c);
int acc_cp_is_space(uint32_t c);
void acc_cp_lower(uint32_t c, char out[8]);

#endif
