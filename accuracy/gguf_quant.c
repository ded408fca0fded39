/* GGUF tensor types and dequantisation (see gguf.h): the block table, the per-type decoders and
 * the tensor read functions. Layouts follow ggml src/ggml-common.h; the arithmetic repeats
 * ggml-quants.c's dequantize_row_* in the same order, so values match ggml bit for bit. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "gguf.h"
#include "numeric.h"

#define QK_K 256

struct type_info {
    const char *name;
    uint32_t blck, bytes;
    int supported;
};

/* ggml_type ids -> block elements and bytes (ggml-common.h static_asserts). */
static const struct type_info TYPES[] = {
    [0] = {"F32", 1, 4, 1},          [1] = {"F16", 1, 2, 1},
    [2] = {"Q4_0", 32, 18, 1},       [3] = {"Q4_1", 32, 20, 0},
    [6] = {"Q5_0", 32, 22, 1},       [7] = {"Q5_1", 32, 24, 1},
    [8] = {"Q8_0", 32, 34, 1},       [9] = {"Q8_1", 32, 36, 0},
    [10] = {"Q2_K", QK_K, 84, 0},    [11] = {"Q3_K", QK_K, 110, 0},
    [12] = {"Q4_K", QK_K, 144, 1},   [13] = {"Q5_K", QK_K, 176, 1},
    [14] = {"Q6_K", QK_K, 210, 1},   [15] = {"Q8_K", QK_K, 292, 0},
    [16] = {"IQ2_XXS", QK_K, 66, 0}, [17] = {"IQ2_XS", QK_K, 74, 0},
    [18] = {"IQ3_XXS", QK_K, 98, 0}, [19] = {"IQ1_S", QK_K, 50, 0},
    [20] = {"IQ4_NL", 32, 18, 0},    [21] = {"IQ3_S", QK_K, 110, 0},
    [22] = {"IQ2_S", QK_K, 82, 0},   [23] = {"IQ4_XS", QK_K, 136, 0},
    [24] = {"I8", 1, 1, 0},          [25] = {"I16", 1, 2, 0},
    [26] = {"I32", 1, 4, 0},         [27] = {"I64", 1, 8, 0},
    [28] = {"F64", 1, 8, 0},         [29] = {"IQ1_M", QK_K, 56, 0},
    [30] = {"BF16", 1, 2, 1},        [34] = {"TQ1_0", QK_K, 54, 0},
    [35] = {"TQ2_0", QK_K, 66, 0},   [39] = {"MXFP4", 32, 17, 0},
    [40] = {"NVFP4", 64, 36, 0},     [41] = {"Q1_0", 128, 18, 0},
    [42] = {"Q2_0", 64, 18, 0},
};

static int known_type(uint32_t t)
{
    return t < PULSE_ARRAY_LEN(TYPES) && TYPES[t].blck;
}
const char *gguf_tensor_type_name(uint32_t t)
{
    return known_type(t) ? TYPES[t].name : "unknown";
}
uint32_t gguf_tensor_type_block_elems(uint32_t t)
{
    return known_type(t) ? TYPES[t].blck : 0;
}
uint32_t gguf_tensor_type_block_bytes(uint32_t t)
{
    return known_type(t) ? TYPES[t].bytes : 0;
}
int gguf_tensor_type_supported(uint32_t t)
{
    return known_type(t) && TYPES[t].supported;
}

/* IEEE half -> float, exact for every input (subnormals, infinities, NaN payloads). */
static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 0x1f) {
        u = sign | 0x7f800000u | (m << 13);
    } else if (e) {
        u = sign | ((e + 112) << 23) | (m << 13);
    } else {
        float f = (float)m * 5.9604644775390625e-8f; /* m * 2^-24, exact */
        memcpy(&u, &f, 4);
        u |= sign;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float half_at(const uint8_t *p)
{
    return f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

/* The Q4_K/Q5_K 6-bit scale and min of sub-block j from the 12 packed bytes. */
static void scale_min_k4(int j, const uint8_t *q, int *sc, int *mn)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

static void deq_block(uint32_t type, const uint8_t *b, float *y)
{
    switch (type) {
    case GGUF_TENSOR_Q4_0: {
        const float d = half_at(b);
        for (int j = 0; j < 16; j++) {
            y[j] = ((b[2 + j] & 0xf) - 8) * d;
            y[j + 16] = ((b[2 + j] >> 4) - 8) * d;
        }
    } break;
    case GGUF_TENSOR_Q5_0:
    case GGUF_TENSOR_Q5_1: {
        const int q51 = type == GGUF_TENSOR_Q5_1;
        const float d = half_at(b), m = q51 ? half_at(b + 2) : 0.0f;
        const uint8_t *qs = b + (q51 ? 8 : 6);
        uint32_t qh;
        memcpy(&qh, b + (q51 ? 4 : 2), 4);
        for (int j = 0; j < 16; j++) {
            int x0 = (qs[j] & 0xf) | (((qh >> j) << 4) & 0x10);
            int x1 = (qs[j] >> 4) | ((qh >> (j + 12)) & 0x10);
            y[j] = q51 ? x0 * d + m : (x0 - 16) * d;
            y[j + 16] = q51 ? x1 * d + m : (x1 - 16) * d;
        }
    } break;
    case GGUF_TENSOR_Q8_0: {
        const float d = half_at(b);
        for (int j = 0; j < 32; j++)
            y[j] = (int8_t)b[2 + j] * d;
    } break;
    case GGUF_TENSOR_Q4_K:
    case GGUF_TENSOR_Q5_K: {
        const int q5 = type == GGUF_TENSOR_Q5_K;
        const float d = half_at(b), dmin = half_at(b + 2);
        const uint8_t *sc = b + 4, *qh = b + 16, *ql = b + (q5 ? 48 : 16);
        for (int g = 0; g < 4; g++, ql += 32, y += 64) {
            int s1, m1, s2, m2;
            scale_min_k4(2 * g, sc, &s1, &m1);
            scale_min_k4(2 * g + 1, sc, &s2, &m2);
            const float d1 = d * s1, n1 = dmin * m1, d2 = d * s2, n2 = dmin * m2;
            for (int l = 0; l < 32; l++) {
                int h1 = q5 && (qh[l] >> (2 * g) & 1) ? 16 : 0;
                int h2 = q5 && (qh[l] >> (2 * g + 1) & 1) ? 16 : 0;
                y[l] = d1 * ((ql[l] & 0xf) + h1) - n1;
                y[l + 32] = d2 * ((ql[l] >> 4) + h2) - n2;
            }
        }
    } break;
    case GGUF_TENSOR_Q6_K: {
        const float d = half_at(b + 208);
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        for (int h = 0; h < 2; h++, ql += 64, qh += 32, sc += 8, y += 128) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    } break;
    default:
        break;
    }
}

int gguf_dequantize_f32(uint32_t type, const void *src, uint64_t n_elems, float *dst)
{
    if (!gguf_tensor_type_supported(type) || n_elems % TYPES[type].blck) return PULSE_ERR_INVALID;
    const uint8_t *p = src;
    if (n_elems == 0) return PULSE_OK;
    if (type == GGUF_TENSOR_F32) {
        memcpy(dst, p, (size_t)n_elems * 4);
    } else if (type == GGUF_TENSOR_F16 || type == GGUF_TENSOR_BF16) {
        for (uint64_t i = 0; i < n_elems; i++) {
            uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
            dst[i] = type == GGUF_TENSOR_F16 ? f16_to_f32(h) : bf16_to_f32(h);
        }
    } else {
        const uint64_t blck = TYPES[type].blck, bytes = TYPES[type].bytes;
        for (uint64_t i = 0; i < n_elems / blck; i++)
            deq_block(type, p + i * bytes, dst + i * blck);
    }
    return PULSE_OK;
}

/* "label: tensor '<name>' ..." into err; the name is cut at 64 bytes. */
static int tensor_err(const struct gguf_file *g, const struct gguf_tensor *t, char *err,
                      size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        char name[68];
        size_t k = 0;
        for (; t->name[k] && k < 64; k++)
            name[k] = (t->name[k] >= 32 && t->name[k] < 127) ? t->name[k] : '?';
        name[k] = 0;
        int n = snprintf(err, errlen, "%s: tensor '%s%s'", gguf_label(g), name,
                         t->name[k] ? "..." : "");
        if (n >= 0 && (size_t)n < errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return PULSE_ERR_INVALID;
}

/* Checks that rows [row0, row0 + n_rows) of t can be read; the byte range they cover. */
static int check_rows(const struct gguf_file *g, const struct gguf_tensor *t, uint64_t row0,
                      uint64_t n_rows, const uint8_t **src, char *err, size_t errlen)
{
    if (!gguf_tensor_type_supported(t->type))
        return tensor_err(g, t, err, errlen,
                          " has type %s (%" PRIu32 "), which this reader cannot dequantize "
                          "(supported: F32, F16, BF16, Q4_0, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)",
                          gguf_tensor_type_name(t->type), t->type);
    if (row0 > t->n_rows || n_rows > t->n_rows - row0)
        return tensor_err(g, t, err, errlen,
                          ": rows [%" PRIu64 ", +%" PRIu64 ") out of range (%" PRIu64 " rows)",
                          row0, n_rows, t->n_rows);
    uint64_t row_bytes = t->ne[0] / TYPES[t->type].blck * TYPES[t->type].bytes;
    *src = t->data ? t->data + row0 * row_bytes : NULL;
    return PULSE_OK;
}

int gguf_tensor_read_rows_f32(const struct gguf_file *g, const struct gguf_tensor *t, uint64_t row0,
                              uint64_t n_rows, float *dst, char *err, size_t errlen)
{
    const uint8_t *src = NULL;
    int rc = check_rows(g, t, row0, n_rows, &src, err, errlen);
    if (rc || n_rows == 0 || t->ne[0] == 0) return rc;
    return gguf_dequantize_f32(t->type, src, n_rows * t->ne[0], dst);
}

int gguf_tensor_read_rows_bf16(const struct gguf_file *g, const struct gguf_tensor *t,
                               uint64_t row0, uint64_t n_rows, uint16_t *dst, char *err,
                               size_t errlen)
{
    enum { CHUNK = 4096 }; /* a multiple of every block size */
    float tmp[CHUNK];
    const uint8_t *src = NULL;
    int rc = check_rows(g, t, row0, n_rows, &src, err, errlen);
    if (rc || n_rows == 0 || t->ne[0] == 0) return rc;
    uint64_t n = n_rows * t->ne[0];
    if (t->type == GGUF_TENSOR_BF16) {
        memcpy(dst, src, (size_t)n * 2);
        return PULSE_OK;
    }
    const uint64_t blck = TYPES[t->type].blck, bytes = TYPES[t->type].bytes;
    for (uint64_t i = 0; i < n; i += CHUNK) {
        uint64_t m = n - i < CHUNK ? n - i : CHUNK;
        gguf_dequantize_f32(t->type, src + i / blck * bytes, m, tmp);
        for (uint64_t j = 0; j < m; j++)
            dst[i + j] = f32_to_bf16(tmp[j]);
    }
    return PULSE_OK;
}

static int check_cap(const struct gguf_file *g, const struct gguf_tensor *t, uint64_t cap,
                     char *err, size_t errlen)
{
    if (cap >= t->n_elems) return PULSE_OK;
    return tensor_err(g, t, err, errlen,
                      " has %" PRIu64 " elements but the destination holds %" PRIu64, t->n_elems,
                      cap);
}

int gguf_tensor_read_f32(const struct gguf_file *g, const struct gguf_tensor *t, float *dst,
                         uint64_t cap, char *err, size_t errlen)
{
    int rc = check_cap(g, t, cap, err, errlen);
    return rc ? rc : gguf_tensor_read_rows_f32(g, t, 0, t->n_rows, dst, err, errlen);
}

int gguf_tensor_read_bf16(const struct gguf_file *g, const struct gguf_tensor *t, uint16_t *dst,
                          uint64_t cap, char *err, size_t errlen)
{
    int rc = check_cap(g, t, cap, err, errlen);
    return rc ? rc : gguf_tensor_read_rows_bf16(g, t, 0, t->n_rows, dst, err, errlen);
}
