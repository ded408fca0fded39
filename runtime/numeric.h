/* bf16 conversion and the counter-based random numbers that make weights and synthetic KV
 * identical on every backend (the same function runs on the host and in CUDA kernels). */
#ifndef PULSE_NUMERIC_H
#define PULSE_NUMERIC_H

#include <stdint.h>
#include <string.h>

#include "common.h"

PULSE_HD float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Round to nearest even; NaN stays a quiet NaN. */
PULSE_HD uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Rounds a float through bf16 and back: what a bf16 store then load gives. */
PULSE_HD float bf16_round(float f)
{
    return bf16_to_f32(f32_to_bf16(f));
}

/* splitmix64 finaliser over (seed, index): a stateless stream, any element computable alone. */
PULSE_HD uint64_t pulse_hash64(uint64_t seed, uint64_t idx)
{
    uint64_t z = seed + 0x9e3779b97f4a7c15ull * (idx + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1), exactly representable (24 random bits), identical on host and device. */
PULSE_HD float pulse_uniform(uint64_t seed, uint64_t idx)
{
    uint32_t r = (uint32_t)(pulse_hash64(seed, idx) >> 40);
    return (float)r * (1.0f / 8388608.0f) - 1.0f;
}

/* Derives a sub-seed for a named stream (tensor, request, layer) from a base seed. */
PULSE_HD uint64_t pulse_seed_mix(uint64_t seed, uint64_t a, uint64_t b)
{
    return pulse_hash64(pulse_hash64(seed, a), b);
}

/* FNV-1a over n token ids, continuing from h (start with PULSE_FNV_INIT): the fingerprint of a
 * run's tokens that result files carry. */
#define PULSE_FNV_INIT 1469598103934665603ull
/* bf16 values of x[0..n) that are NaN or infinite (the exponent's bits all set). */
static inline size_t bf16_count_nonfinite(const uint16_t *x, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += (x[i] & 0x7F80u) == 0x7F80u;
    return bad;
}

/* FNV-1a over n bytes from state h (PULSE_FNV_INIT to start). */
static inline uint64_t pulse_fnv1a_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static inline uint64_t pulse_fnv1a_ids(uint64_t h, const int32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)ids[i]) * 1099511628211ull;
    return h;
}

#endif
