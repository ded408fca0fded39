/* GGUF reader: the test writes its own GGUF files (metadata of every type, one tensor of each
 * dequantisable type) and checks every value. Quantised blocks come from a small quantiser
 * (Q4_0, Q5_0, Q5_1, Q8_0) or are packed by hand from chosen scales and quants (Q4_K, Q5_K,
 * Q6_K); the expected values are computed here from the chosen integers with the formulas of
 * the format (value = d * scale * q - dmin * min ...), never by the code under test. Then every
 * corrupt-input case, and every truncation of the file, must fail with a clear message. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accuracy/gguf.h"
#include "bytebuf.h"
#include "common.h"
#include "numeric.h"
#include "testutil.h"

/* ---- the GGUF writer (the byte buffer is tests/bytebuf.h) ---- */

static void patch_u32(struct buf *b, size_t at, uint32_t v)
{
    memcpy(b->p + at, &v, 4);
}
static void patch_u64(struct buf *b, size_t at, uint64_t v)
{
    memcpy(b->p + at, &v, 8);
}

static struct buf copy_of(const struct buf *b)
{
    struct buf c = {0};
    put(&c, b->p, b->n);
    return c;
}

#define MAXT 16

struct tdesc {
    const char *name;
    uint32_t type, n_dims;
    uint64_t ne[4];
    struct buf data;
    float *ref; /* expected values, n_elems of them (NULL: not dequantisable) */
    uint64_t n_elems;
};

/* Positions of fields in the written file, for the corruption cases. */
struct layout {
    size_t version_at, n_tensors_at, n_kv_at, first_key_at, astr_count_at, u8_type_at;
    size_t info_at[MAXT], ndims_at[MAXT], ne_at[MAXT], type_at[MAXT], offset_at[MAXT];
    size_t data_at;
};

/* Metadata of every type (and the tokenizer-like arrays). Returns the number of entries. */
static uint64_t write_meta(struct buf *b, struct layout *L)
{
    uint64_t n = 0;
    L->first_key_at = b->n;
    put_key(b, "general.architecture", GGUF_TYPE_STRING), put_str(b, "gemma3"), n++;
    L->u8_type_at = b->n + 8 + strlen("t.u8");
    put_key(b, "t.u8", GGUF_TYPE_UINT8), PUT(b, uint8_t, 200), n++;
    put_key(b, "t.i8", GGUF_TYPE_INT8), PUT(b, int8_t, -100), n++;
    put_key(b, "t.u16", GGUF_TYPE_UINT16), PUT(b, uint16_t, 60000), n++;
    put_key(b, "t.i16", GGUF_TYPE_INT16), PUT(b, int16_t, -30000), n++;
    put_key(b, "t.u32", GGUF_TYPE_UINT32), PUT(b, uint32_t, 4000000000u), n++;
    put_key(b, "t.i32", GGUF_TYPE_INT32), PUT(b, int32_t, -2000000000), n++;
    put_key(b, "t.f32", GGUF_TYPE_FLOAT32), PUT(b, float, 0.15625f), n++;
    put_key(b, "t.bool", GGUF_TYPE_BOOL), PUT(b, uint8_t, 1), n++;
    put_key(b, "t.str", GGUF_TYPE_STRING), put_str(b, "h\xc3\xa9llo"), n++;
    put_key(b, "t.u64", GGUF_TYPE_UINT64), PUT(b, uint64_t, (1ull << 63) + 5), n++;
    put_key(b, "t.i64", GGUF_TYPE_INT64), PUT(b, int64_t, -(1ll << 62)), n++;
    put_key(b, "t.f64", GGUF_TYPE_FLOAT64), PUT(b, double, 1e-300), n++;
    put_key(b, "t.empty_str", GGUF_TYPE_STRING), put_str(b, ""), n++;
    /* arrays of every fixed type: 3 elements each */
    static const uint32_t fixed[] = {GGUF_TYPE_UINT8,   GGUF_TYPE_INT8,   GGUF_TYPE_UINT16,
                                     GGUF_TYPE_INT16,   GGUF_TYPE_UINT32, GGUF_TYPE_INT32,
                                     GGUF_TYPE_FLOAT32, GGUF_TYPE_BOOL,   GGUF_TYPE_UINT64,
                                     GGUF_TYPE_INT64,   GGUF_TYPE_FLOAT64};
    for (size_t k = 0; k < PULSE_ARRAY_LEN(fixed); k++) {
        char key[32];
        snprintf(key, sizeof key, "a.%s", gguf_type_name(fixed[k]));
        put_key(b, key, GGUF_TYPE_ARRAY), PUT(b, uint32_t, fixed[k]), PUT(b, uint64_t, 3), n++;
        for (int i = 0; i < 3; i++) {
            int v = (i == 1) ? -7 : 5 * i + 1; /* 1, -7, 11 */
            switch (fixed[k]) {
            case GGUF_TYPE_UINT8:
                PUT(b, uint8_t, (uint8_t)(i == 1 ? 255 : v));
                break;
            case GGUF_TYPE_INT8:
                PUT(b, int8_t, (int8_t)v);
                break;
            case GGUF_TYPE_UINT16:
                PUT(b, uint16_t, (uint16_t)(i == 1 ? 65535 : v));
                break;
            case GGUF_TYPE_INT16:
                PUT(b, int16_t, (int16_t)v);
                break;
            case GGUF_TYPE_UINT32:
                PUT(b, uint32_t, i == 1 ? 4294967295u : (uint32_t)v);
                break;
            case GGUF_TYPE_INT32:
                PUT(b, int32_t, v);
                break;
            case GGUF_TYPE_FLOAT32:
                PUT(b, float, (float)v * 0.5f);
                break;
            case GGUF_TYPE_BOOL:
                PUT(b, uint8_t, (uint8_t)(i != 1));
                break;
            case GGUF_TYPE_UINT64:
                PUT(b, uint64_t, i == 1 ? UINT64_MAX : (uint64_t)v);
                break;
            case GGUF_TYPE_INT64:
                PUT(b, int64_t, (int64_t)v * 1000000000000ll);
                break;
            default:
                PUT(b, double, (double)v * 0.25);
                break;
            }
        }
    }
    put_key(b, "a.string", GGUF_TYPE_ARRAY), PUT(b, uint32_t, GGUF_TYPE_STRING), n++;
    L->astr_count_at = b->n;
    PUT(b, uint64_t, 4), put_str(b, "<pad>"), put_str(b, ""), put_str(b, "\xe2\x96\x81the"),
        put_str(b, "<0x0A>");
    put_key(b, "a.empty", GGUF_TYPE_ARRAY), PUT(b, uint32_t, GGUF_TYPE_UINT32), n++;
    PUT(b, uint64_t, 0);
    /* [["x", "yy"], [], ["zzz"]] */
    put_key(b, "a.nested", GGUF_TYPE_ARRAY), PUT(b, uint32_t, GGUF_TYPE_ARRAY), n++;
    PUT(b, uint64_t, 3);
    PUT(b, uint32_t, GGUF_TYPE_STRING), PUT(b, uint64_t, 2), put_str(b, "x"), put_str(b, "yy");
    PUT(b, uint32_t, GGUF_TYPE_STRING), PUT(b, uint64_t, 0);
    PUT(b, uint32_t, GGUF_TYPE_STRING), PUT(b, uint64_t, 1), put_str(b, "zzz");
    /* [[[ -3 ]], [[4, 5], []]]: three levels */
    put_key(b, "a.deep", GGUF_TYPE_ARRAY), PUT(b, uint32_t, GGUF_TYPE_ARRAY), n++;
    PUT(b, uint64_t, 2);
    PUT(b, uint32_t, GGUF_TYPE_ARRAY), PUT(b, uint64_t, 1);
    PUT(b, uint32_t, GGUF_TYPE_INT32), PUT(b, uint64_t, 1), PUT(b, int32_t, -3);
    PUT(b, uint32_t, GGUF_TYPE_ARRAY), PUT(b, uint64_t, 2);
    PUT(b, uint32_t, GGUF_TYPE_INT32), PUT(b, uint64_t, 2), PUT(b, int32_t, 4), PUT(b, int32_t, 5);
    PUT(b, uint32_t, GGUF_TYPE_INT32), PUT(b, uint64_t, 0);
    return n;
}

/* A whole file: header, metadata (general.alignment first unless alignment == 0), tensor
 * infos, padding, data; each tensor at the next aligned offset; no padding after the last. */
static void write_gguf(struct buf *b, uint32_t version, uint32_t alignment, const struct tdesc *t,
                       int nt, struct layout *L)
{
    uint64_t align = alignment ? alignment : 32, off = 0, offs[MAXT];
    memset(L, 0, sizeof *L);
    put(b, "GGUF", 4);
    L->version_at = b->n;
    PUT(b, uint32_t, version);
    L->n_tensors_at = b->n;
    PUT(b, uint64_t, (uint64_t)nt);
    L->n_kv_at = b->n;
    PUT(b, uint64_t, 0);
    uint64_t n_kv = 0;
    if (alignment)
        put_key(b, "general.alignment", GGUF_TYPE_UINT32), PUT(b, uint32_t, alignment), n_kv++;
    n_kv += write_meta(b, L);
    patch_u64(b, L->n_kv_at, n_kv);
    for (int i = 0; i < nt; i++) {
        off = (off + align - 1) / align * align;
        offs[i] = off;
        off += t[i].data.n;
        L->info_at[i] = b->n;
        put_str(b, t[i].name);
        L->ndims_at[i] = b->n;
        PUT(b, uint32_t, t[i].n_dims);
        L->ne_at[i] = b->n;
        for (uint32_t d = 0; d < t[i].n_dims; d++)
            PUT(b, uint64_t, t[i].ne[d]);
        L->type_at[i] = b->n;
        PUT(b, uint32_t, t[i].type);
        L->offset_at[i] = b->n;
        PUT(b, uint64_t, offs[i]);
    }
    while (b->n % align)
        PUT(b, uint8_t, 0);
    L->data_at = b->n;
    for (int i = 0; i < nt; i++) {
        while (b->n < L->data_at + offs[i])
            PUT(b, uint8_t, 0);
        put(b, t[i].data.p, t[i].data.n);
    }
}

/* ---- fp16 from its definition, and the test's own quantisers ---- */

static double half_value(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

/* The nearest half to x (|x| in the normal half range), ties to even. */
static uint16_t half_of(double x)
{
    uint16_t s = x < 0 ? 0x8000 : 0;
    int e;
    double f = frexp(fabs(x), &e); /* |x| = f 2^e, f in [0.5, 1) */
    int E = e + 14;
    long m = lrint((2 * f - 1) * 1024);
    if (m == 1024) m = 0, E++;
    if (E < 1 || E > 30) abort();
    return (uint16_t)(s | E << 10 | m);
}

static uint16_t half_pow2(int k)
{
    return (uint16_t)((k + 15) << 10);
}

static float input(uint64_t seed, uint64_t i)
{
    float scale = 0.1f + (float)(i / 32 % 5); /* each 32-block its own magnitude */
    return pulse_uniform(seed, i) * scale;
}

static double block_amax(const float *x, int n)
{
    double a = 0;
    for (int j = 0; j < n; j++)
        a = fmax(a, fabs(x[j]));
    return a;
}

static long clampl(long v, long lo, long hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* Q8_0: d = amax / 127 as fp16, q = round(x / d); value d * q. */
static void quant_q8_0(const float *x, uint64_t n, struct buf *out, float *ref)
{
    for (uint64_t b = 0; b < n; b += 32) {
        uint16_t h = half_of(block_amax(x + b, 32) / 127);
        double d = half_value(h);
        PUT(out, uint16_t, h);
        for (int j = 0; j < 32; j++) {
            long q = clampl(lrint(x[b + j] / d), -127, 127);
            PUT(out, int8_t, (int8_t)q);
            ref[b + j] = (float)(d * q);
        }
    }
}

/* Q4_0 (bits 4, offset 8) and Q5_0 (bits 5, offset 16): q + offset in [0, 2^bits); element j's
 * low 4 bits in byte j % 16 (low nibble for j < 16, high for j >= 16); for Q5_0 bit 4 of
 * element j is bit j of the u32 qh. Value d * q. */
static void quant_q40_q50(int bits, const float *x, uint64_t n, struct buf *out, float *ref)
{
    const long off = 1l << (bits - 1);
    for (uint64_t b = 0; b < n; b += 32) {
        uint16_t h = half_of(block_amax(x + b, 32) / (double)off);
        double d = half_value(h);
        uint8_t u[32], qs[16] = {0};
        uint32_t qh = 0;
        for (int j = 0; j < 32; j++) {
            long q = clampl(lrint(x[b + j] / d), -off, off - 1);
            u[j] = (uint8_t)(q + off);
            ref[b + j] = (float)(d * q);
            qs[j % 16] |= (uint8_t)((u[j] & 15) << (j < 16 ? 0 : 4));
            qh |= (uint32_t)((u[j] >> 4) & 1) << j;
        }
        PUT(out, uint16_t, h);
        if (bits == 5) PUT(out, uint32_t, qh);
        put(out, qs, 16);
    }
}

/* Q5_1: m = block min, d = (max - min) / 31, q = round((x - m) / d) in [0, 31]; value q d + m
 * (float arithmetic, as the format defines it). */
static void quant_q5_1(const float *x, uint64_t n, struct buf *out, float *ref)
{
    for (uint64_t b = 0; b < n; b += 32) {
        double lo = x[b], hi = x[b];
        for (int j = 1; j < 32; j++)
            lo = fmin(lo, x[b + j]), hi = fmax(hi, x[b + j]);
        uint16_t hd = half_of((hi - lo) / 31), hm = half_of(lo);
        float d = (float)half_value(hd), m = (float)half_value(hm);
        uint8_t qs[16] = {0};
        uint32_t qh = 0;
        for (int j = 0; j < 32; j++) {
            long q = clampl(lrint((x[b + j] - m) / d), 0, 31);
            ref[b + j] = (float)q * d + m;
            qs[j % 16] |= (uint8_t)((q & 15) << (j < 16 ? 0 : 4));
            qh |= (uint32_t)((q >> 4) & 1) << j;
        }
        PUT(out, uint16_t, hd), PUT(out, uint16_t, hm), PUT(out, uint32_t, qh);
        put(out, qs, 16);
    }
}

/* ---- hand-packed K-quant super-blocks ---- */

static int rnd(uint64_t seed, uint64_t i, int mod)
{
    return (int)(pulse_hash64(seed, i) % mod);
}

/* The 12 scale bytes of Q4_K/Q5_K: sub-blocks 0-3 keep their 6-bit scale and min in the low
 * bits of bytes 0-3 and 4-7; sub-blocks 4-7 keep the low 4 bits in bytes 8-11 (scale low
 * nibble, min high nibble) and the top 2 bits in bits 6-7 of bytes 0-3 (scale) and 4-7 (min). */
static void pack_scales_k4(const int sc[8], const int mn[8], uint8_t out[12])
{
    for (int j = 0; j < 4; j++) {
        out[j] = (uint8_t)((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
        out[j + 4] = (uint8_t)((mn[j] & 63) | (mn[j + 4] >> 4) << 6);
        out[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
    }
}

/* Q4_K (bits 4) or Q5_K (bits 5) super-blocks with d = 2^-4, dmin = 2^-6 and chosen 6-bit
 * scales/mins; element e of sub-block e / 32 has value d sc q - dmin mn. Quants: group g of
 * 64 elements reads bytes 32g..32g+31, elements 64g+l in low nibbles and 64g+32+l in high
 * nibbles; Q5_K's fifth bit of element 64g+l is bit 2g of qh[l], of 64g+32+l bit 2g+1. */
static void pack_q4k_q5k(int bits, uint64_t seed, int nblocks, struct buf *out, float *ref)
{
    static const int sc0[8] = {63, 1, 17, 40, 16, 33, 62, 47},
                     mn0[8] = {0, 63, 2, 29, 48, 15, 31, 59};
    for (int b = 0; b < nblocks; b++) {
        int sc[8], mn[8], q[256];
        uint8_t scales[12], qh[32] = {0}, qs[128] = {0};
        for (int j = 0; j < 8; j++)
            sc[j] = b == 0 ? sc0[j] : rnd(seed, 1000 + 16 * b + j, 64),
            mn[j] = b == 0 ? mn0[j] : rnd(seed, 2000 + 16 * b + j, 64);
        for (int e = 0; e < 256; e++) {
            q[e] = rnd(seed, 256 * b + e, 1 << bits);
            ref[256 * b + e] =
                (float)(ldexp(1, -4) * sc[e / 32] * q[e] - ldexp(1, -6) * mn[e / 32]);
        }
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++) {
                int lo = q[64 * g + l], hi = q[64 * g + 32 + l];
                qs[32 * g + l] = (uint8_t)((lo & 15) | (hi & 15) << 4);
                qh[l] |= (uint8_t)(((lo >> 4) & 1) << (2 * g) | ((hi >> 4) & 1) << (2 * g + 1));
            }
        pack_scales_k4(sc, mn, scales);
        PUT(out, uint16_t, half_pow2(-4)), PUT(out, uint16_t, half_pow2(-6));
        put(out, scales, 12);
        if (bits == 5) put(out, qh, 32);
        put(out, qs, 128);
    }
}

/* Q6_K with d = 2^-5 and signed 8-bit scales: element e has value d scales[e / 16] (q - 32).
 * Half h (128 elements) uses ql[64h..], qh[32h..]: for l < 32, element 128h+l is the low nibble
 * of ql[l] with qh[l] bits 0-1, 128h+32+l low nibble of ql[l+32] with bits 2-3, 128h+64+l the
 * high nibble of ql[l] with bits 4-5, 128h+96+l the high nibble of ql[l+32] with bits 6-7. */
static void pack_q6k(uint64_t seed, int nblocks, struct buf *out, float *ref)
{
    for (int b = 0; b < nblocks; b++) {
        int8_t sc[16];
        int q[256];
        uint8_t ql[128] = {0}, qh[64] = {0};
        for (int j = 0; j < 16; j++)
            sc[j] = (int8_t)(j == 0   ? -128
                             : j == 1 ? 127
                                      : rnd(seed, 3000 + 16 * b + j, 256) - 128);
        for (int e = 0; e < 256; e++) {
            q[e] = rnd(seed, 5000 + 256 * b + e, 64);
            ref[256 * b + e] = (float)(ldexp(1, -5) * sc[e / 16] * (q[e] - 32));
        }
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const int *v = q + 128 * h;
                ql[64 * h + l] = (uint8_t)((v[l] & 15) | (v[l + 64] & 15) << 4);
                ql[64 * h + l + 32] = (uint8_t)((v[l + 32] & 15) | (v[l + 96] & 15) << 4);
                qh[32 * h + l] = (uint8_t)((v[l] >> 4) | (v[l + 32] >> 4) << 2 |
                                           (v[l + 64] >> 4) << 4 | (v[l + 96] >> 4) << 6);
            }
        put(out, ql, 128), put(out, qh, 64), put(out, sc, 16);
        PUT(out, uint16_t, half_pow2(-5));
    }
}

/* ---- the tensors ---- */

static int n_tensors;
static struct tdesc T[MAXT];

static struct tdesc *add(const char *name, uint32_t type, uint32_t n_dims, uint64_t ne0,
                         uint64_t ne1)
{
    struct tdesc *t = &T[n_tensors++];
    t->name = name, t->type = type, t->n_dims = n_dims;
    t->ne[0] = ne0, t->ne[1] = ne1, t->ne[2] = t->ne[3] = 1;
    t->n_elems = ne0 * ne1;
    t->ref = calloc(t->n_elems + 1, sizeof(float));
    return t;
}

static void make_tensors(void)
{
    static const float f32v[6] = {1.5f, -2.25f, 3e-8f, 1e30f, -0.0f, 7.0f};
    static const uint16_t f16v[10] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x03ff,
                                      0x8400, 0x3555, 0x7c00, 0xfc00, 0x8000};
    static const uint16_t bf16v[4] = {0x3f80, 0xc040, 0x0001, 0xff80};
    struct tdesc *t = add("norm.weight", GGUF_TENSOR_F32, 2, 3, 2);
    for (int i = 0; i < 6; i++)
        t->ref[i] = f32v[i], PUT(&t->data, float, f32v[i]);
    t = add("f16.weight", GGUF_TENSOR_F16, 1, 10, 1);
    for (int i = 0; i < 10; i++)
        t->ref[i] = (float)half_value(f16v[i]), PUT(&t->data, uint16_t, f16v[i]);
    t = add("bf16.weight", GGUF_TENSOR_BF16, 1, 4, 1);
    for (int i = 0; i < 4; i++) {
        uint32_t u = (uint32_t)bf16v[i] << 16;
        memcpy(&t->ref[i], &u, 4);
        PUT(&t->data, uint16_t, bf16v[i]);
    }
    /* quantiser inputs */
    float *x = malloc(4352 * 2 * sizeof *x);
    for (int i = 0; i < 4352 * 2; i++)
        x[i] = input(7, (uint64_t)i);
    t = add("token_embd.weight", GGUF_TENSOR_Q8_0, 2, 4352, 2); /* > 4096: crosses a bf16 chunk */
    quant_q8_0(x, t->n_elems, &t->data, t->ref);
    t = add("blk.0.attn_q.weight", GGUF_TENSOR_Q5_0, 2, 64, 3);
    quant_q40_q50(5, x, t->n_elems, &t->data, t->ref);
    t = add("q4_0.weight", GGUF_TENSOR_Q4_0, 1, 64, 1);
    quant_q40_q50(4, x + 200, t->n_elems, &t->data, t->ref);
    t = add("q5_1.weight", GGUF_TENSOR_Q5_1, 2, 32, 2);
    quant_q5_1(x + 64, t->n_elems, &t->data, t->ref);
    free(x);
    t = add("blk.0.attn_output.weight", GGUF_TENSOR_Q4_K, 2, 256, 2);
    pack_q4k_q5k(4, 11, 2, &t->data, t->ref);
    t = add("q5_k.weight", GGUF_TENSOR_Q5_K, 2, 256, 2);
    pack_q4k_q5k(5, 12, 2, &t->data, t->ref);
    t = add("blk.0.ffn_down.weight", GGUF_TENSOR_Q6_K, 2, 512, 2);
    pack_q6k(13, 4, &t->data, t->ref);
    t = add("q2_k.weight", GGUF_TENSOR_Q2_K, 1, 256, 1); /* opens, cannot be dequantised */
    for (int i = 0; i < 84; i++)
        PUT(&t->data, uint8_t, (uint8_t)i);
    free(t->ref), t->ref = NULL;
}

/* ---- checks ---- */

static int same_float(float a, float b)
{
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return memcmp(&a, &b, 4) == 0; /* bit for bit: -0.0 is not 0.0 */
}

static void check_values(struct gguf_file *g)
{
    char err[512];
    EXPECT_EQ_INT(gguf_tensor_count(g), n_tensors);
    for (int i = 0; i < n_tensors; i++) {
        const struct tdesc *d = &T[i];
        const struct gguf_tensor *t = gguf_find_tensor(g, d->name);
        EXPECT(t != NULL && t == gguf_tensor_at(g, (uint64_t)i));
        if (!t) continue;
        EXPECT(strcmp(t->name, d->name) == 0);
        EXPECT_EQ_INT(t->type, d->type);
        EXPECT_EQ_INT(t->n_dims, d->n_dims);
        EXPECT_EQ_INT(t->ne[0], d->ne[0]);
        EXPECT_EQ_INT(t->ne[1], d->ne[1]);
        EXPECT_EQ_INT(t->n_elems, d->n_elems);
        EXPECT_EQ_INT(t->n_bytes, d->data.n);
        EXPECT(t->offset % gguf_alignment(g) == 0);
        EXPECT(memcmp(t->data, d->data.p, d->data.n) == 0);
        float *y = malloc((d->n_elems + 1) * sizeof *y);
        uint16_t *h = malloc((d->n_elems + 1) * sizeof *h);
        int rc = gguf_tensor_read_f32(g, t, y, d->n_elems, err, sizeof err);
        int rc16 = gguf_tensor_read_bf16(g, t, h, d->n_elems, err, sizeof err);
        if (!d->ref) {
            EXPECT_EQ_INT(rc, PULSE_ERR_INVALID);
            EXPECT_STR_CONTAINS(err, gguf_label(g));
            EXPECT_STR_CONTAINS(err, "'q2_k.weight'");
            EXPECT_STR_CONTAINS(err, "type Q2_K (10)");
            EXPECT_EQ_INT(rc16, PULSE_ERR_INVALID);
            free(y), free(h);
            continue;
        }
        EXPECT_EQ_INT(rc, PULSE_OK);
        EXPECT_EQ_INT(rc16, PULSE_OK);
        uint64_t bad = 0, bad16 = 0, first = 0;
        for (uint64_t e = 0; e < d->n_elems; e++) {
            if (!same_float(y[e], d->ref[e]) && !bad++) first = e;
            uint16_t want = d->type == GGUF_TENSOR_BF16
                                ? (uint16_t)(d->data.p[2 * e] | d->data.p[2 * e + 1] << 8)
                                : f32_to_bf16(d->ref[e]);
            bad16 += h[e] != want;
        }
        if (bad)
            fprintf(stderr, "%s: %llu wrong, first [%llu] %.9g vs %.9g\n", d->name,
                    (unsigned long long)bad, (unsigned long long)first, y[first], d->ref[first]);
        EXPECT_EQ_INT(bad, 0);
        EXPECT_EQ_INT(bad16, 0);
        /* the quantisers are near their inputs: a sanity check of the test itself */
        if (d->type == GGUF_TENSOR_Q8_0) {
            float x0 = input(7, 100), x1 = input(7, 4352 + 33);
            EXPECT_NEAR(y[100], x0, 0.04);
            EXPECT_NEAR(y[4352 + 33], x1, 0.04);
        }
        /* one row alone, then bad row ranges and a short destination */
        if (t->n_rows > 1) {
            uint64_t ne0 = t->ne[0];
            memset(y, 0, ne0 * sizeof *y);
            EXPECT_EQ_INT(gguf_tensor_read_rows_f32(g, t, t->n_rows - 1, 1, y, err, sizeof err),
                          PULSE_OK);
            EXPECT(memcmp(y, d->ref + (t->n_rows - 1) * ne0, ne0 * sizeof *y) == 0);
            EXPECT_EQ_INT(gguf_tensor_read_rows_f32(g, t, t->n_rows, 1, y, err, sizeof err),
                          PULSE_ERR_INVALID);
            EXPECT_STR_CONTAINS(err, "out of range");
            EXPECT_STR_CONTAINS(err, d->name);
        }
        EXPECT_EQ_INT(gguf_tensor_read_f32(g, t, y, d->n_elems - 1, err, sizeof err),
                      PULSE_ERR_INVALID);
        EXPECT_STR_CONTAINS(err, "destination holds");
        free(y), free(h);
    }
}

static void expect_int(struct gguf_file *g, const char *key, int64_t want)
{
    int64_t v = 0;
    char err[256];
    EXPECT_EQ_INT(gguf_get_int(g, key, &v, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(v, want);
}

static int str_is(struct gguf_str s, const char *want)
{
    return s.len == strlen(want) && memcmp(s.ptr, want, s.len) == 0;
}

static void check_meta(struct gguf_file *g, uint32_t alignment)
{
    char err[256];
    int64_t i64;
    double f;
    int b;
    struct gguf_str s;
    struct gguf_array a, a2, a3;
    EXPECT_EQ_INT(gguf_alignment(g), alignment ? alignment : 32);
    EXPECT_EQ_INT(gguf_data_offset(g) % gguf_alignment(g), 0);
    EXPECT_EQ_INT(gguf_kv_count(g), 29 + (alignment ? 1 : 0));
    EXPECT(strcmp(gguf_kv_key(g, alignment ? 1 : 0), "general.architecture") == 0);
    EXPECT(gguf_kv_key(g, 1000) == NULL && gguf_kv_value(g, 1000) == NULL);
    EXPECT(gguf_get_str(g, "general.architecture", &s, err, sizeof err) == PULSE_OK &&
           str_is(s, "gemma3"));
    expect_int(g, "t.u8", 200);
    expect_int(g, "t.i8", -100);
    expect_int(g, "t.u16", 60000);
    expect_int(g, "t.i16", -30000);
    expect_int(g, "t.u32", 4000000000ll);
    expect_int(g, "t.i32", -2000000000);
    expect_int(g, "t.i64", -(1ll << 62));
    expect_int(g, "t.bool", 1);
    EXPECT_EQ_INT(gguf_find_kv(g, "t.u8")->type, GGUF_TYPE_UINT8);
    EXPECT_EQ_INT(gguf_find_kv(g, "t.u64")->u, (1ull << 63) + 5);
    EXPECT_EQ_INT(gguf_get_int(g, "t.u64", &i64, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "'t.u64'");
    EXPECT_STR_CONTAINS(err, "does not fit int64");
    EXPECT(gguf_get_float(g, "t.u64", &f, err, sizeof err) == PULSE_OK &&
           f == 9223372036854775808.0);
    EXPECT(gguf_get_float(g, "t.f32", &f, err, sizeof err) == PULSE_OK && f == 0.15625);
    EXPECT(gguf_get_float(g, "t.f64", &f, err, sizeof err) == PULSE_OK && f == 1e-300);
    EXPECT(gguf_get_float(g, "t.i16", &f, err, sizeof err) == PULSE_OK && f == -30000.0);
    EXPECT(gguf_get_bool(g, "t.bool", &b, err, sizeof err) == PULSE_OK && b == 1);
    EXPECT(gguf_get_str(g, "t.str", &s, err, sizeof err) == PULSE_OK && str_is(s, "h\xc3\xa9llo"));
    EXPECT(gguf_get_str(g, "t.empty_str", &s, err, sizeof err) == PULSE_OK && s.len == 0);
    /* wrong types and absent keys name the file and the key */
    EXPECT_EQ_INT(gguf_get_int(g, "t.str", &i64, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, gguf_label(g));
    EXPECT_STR_CONTAINS(err, "'t.str' is string, expected an integer");
    EXPECT_EQ_INT(gguf_get_int(g, "t.f32", &i64, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_EQ_INT(gguf_get_bool(g, "t.u8", &b, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_EQ_INT(gguf_get_float(g, "t.str", &f, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_EQ_INT(gguf_get_str(g, "t.u8", &s, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_EQ_INT(gguf_get_array(g, "t.u8", &a, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "'t.u8' is uint8, expected array");
    EXPECT_EQ_INT(gguf_get_int(g, "no.such.key", &i64, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "metadata key 'no.such.key' not found");
    EXPECT(gguf_find_kv(g, "no.such.key") == NULL);
    /* arrays of every fixed type hold 1, -7, 11 (or the type's wrap of -7 / false) */
    static const char *const names[] = {"uint8",   "int8", "uint16", "int16", "uint32", "int32",
                                        "float32", "bool", "uint64", "int64", "float64"};
    for (size_t k = 0; k < PULSE_ARRAY_LEN(names); k++) {
        char key[32];
        snprintf(key, sizeof key, "a.%s", names[k]);
        EXPECT_EQ_INT(gguf_get_array(g, key, &a, err, sizeof err), PULSE_OK);
        EXPECT_EQ_INT(a.n, 3);
        EXPECT_EQ_INT(gguf_array_get_str(&a, 0, &s), PULSE_ERR_INVALID);
        EXPECT_EQ_INT(gguf_array_get_int(&a, 3, &i64), PULSE_ERR_INVALID);
        if (a.type == GGUF_TYPE_FLOAT32 || a.type == GGUF_TYPE_FLOAT64) {
            double scale = a.type == GGUF_TYPE_FLOAT32 ? 0.5 : 0.25;
            EXPECT(gguf_array_get_float(&a, 1, &f) == PULSE_OK && f == -7 * scale);
            EXPECT(gguf_array_get_float(&a, 2, &f) == PULSE_OK && f == 11 * scale);
            EXPECT_EQ_INT(gguf_array_get_int(&a, 0, &i64), PULSE_ERR_INVALID);
            continue;
        }
        int64_t mul = a.type == GGUF_TYPE_INT64 ? 1000000000000ll : 1;
        EXPECT(gguf_array_get_int(&a, 0, &i64) == PULSE_OK && i64 == mul);
        int r1 = gguf_array_get_int(&a, 1, &i64);
        switch (a.type) {
        case GGUF_TYPE_UINT8:
            EXPECT(r1 == PULSE_OK && i64 == 255);
            break;
        case GGUF_TYPE_UINT16:
            EXPECT(r1 == PULSE_OK && i64 == 65535);
            break;
        case GGUF_TYPE_UINT32:
            EXPECT(r1 == PULSE_OK && i64 == 4294967295ll);
            break;
        case GGUF_TYPE_BOOL:
            EXPECT(r1 == PULSE_OK && i64 == 0);
            break;
        case GGUF_TYPE_UINT64:
            EXPECT_EQ_INT(r1, PULSE_ERR_INVALID);
            EXPECT(gguf_array_get_float(&a, 1, &f) == PULSE_OK && f == 18446744073709551615.0);
            break;
        default:
            EXPECT(r1 == PULSE_OK && i64 == -7 * mul);
            break;
        }
        if (a.type != GGUF_TYPE_BOOL)
            EXPECT(gguf_array_get_int(&a, 2, &i64) == PULSE_OK && i64 == 11 * mul);
    }
    EXPECT_EQ_INT(gguf_get_array(g, "a.string", &a, err, sizeof err), PULSE_OK);
    EXPECT(a.type == GGUF_TYPE_STRING && a.n == 4);
    EXPECT(gguf_array_get_str(&a, 0, &s) == PULSE_OK && str_is(s, "<pad>"));
    EXPECT(gguf_array_get_str(&a, 1, &s) == PULSE_OK && s.len == 0);
    EXPECT(gguf_array_get_str(&a, 2, &s) == PULSE_OK && str_is(s, "\xe2\x96\x81the"));
    EXPECT(gguf_array_get_str(&a, 3, &s) == PULSE_OK && str_is(s, "<0x0A>"));
    EXPECT_EQ_INT(gguf_array_get_str(&a, 4, &s), PULSE_ERR_INVALID);
    EXPECT_EQ_INT(gguf_array_get_int(&a, 0, &i64), PULSE_ERR_INVALID);
    EXPECT(gguf_get_array(g, "a.empty", &a, err, sizeof err) == PULSE_OK && a.n == 0 &&
           a.type == GGUF_TYPE_UINT32);
    EXPECT_EQ_INT(gguf_array_get_int(&a, 0, &i64), PULSE_ERR_INVALID);
    EXPECT(gguf_get_array(g, "a.nested", &a, err, sizeof err) == PULSE_OK && a.n == 3 &&
           a.type == GGUF_TYPE_ARRAY);
    EXPECT(gguf_array_get_array(&a, 0, &a2) == PULSE_OK && a2.type == GGUF_TYPE_STRING &&
           a2.n == 2);
    EXPECT(gguf_array_get_str(&a2, 1, &s) == PULSE_OK && str_is(s, "yy"));
    EXPECT(gguf_array_get_array(&a, 1, &a2) == PULSE_OK && a2.n == 0);
    EXPECT(gguf_array_get_array(&a, 2, &a2) == PULSE_OK && a2.n == 1);
    EXPECT(gguf_array_get_str(&a2, 0, &s) == PULSE_OK && str_is(s, "zzz"));
    EXPECT_EQ_INT(gguf_array_get_array(&a, 3, &a2), PULSE_ERR_INVALID);
    EXPECT(gguf_get_array(g, "a.deep", &a, err, sizeof err) == PULSE_OK && a.n == 2);
    EXPECT(gguf_array_get_array(&a, 0, &a2) == PULSE_OK && a2.n == 1);
    EXPECT(gguf_array_get_array(&a2, 0, &a3) == PULSE_OK && a3.n == 1);
    EXPECT(gguf_array_get_int(&a3, 0, &i64) == PULSE_OK && i64 == -3);
    EXPECT(gguf_array_get_array(&a, 1, &a2) == PULSE_OK && a2.n == 2);
    EXPECT(gguf_array_get_array(&a2, 0, &a3) == PULSE_OK && a3.n == 2);
    EXPECT(gguf_array_get_int(&a3, 1, &i64) == PULSE_OK && i64 == 5);
    EXPECT(gguf_array_get_array(&a2, 1, &a3) == PULSE_OK && a3.n == 0 &&
           a3.type == GGUF_TYPE_INT32);
}

/* ---- the valid files ---- */

static void write_file(const struct buf *b, char *path)
{
    strcpy(path, "/tmp/pulse_gguf_XXXXXX");
    int fd = mkstemp(path);
    EXPECT(fd >= 0);
    if (fd < 0) return;
    EXPECT(write(fd, b->p, b->n) == (ssize_t)b->n);
    close(fd);
}

static void test_valid(struct buf *main_file, struct layout *L)
{
    char err[512], path[64];
    struct gguf_file *g = NULL;
    write_gguf(main_file, 3, 64, T, n_tensors, L);
    write_file(main_file, path);
    int rc = gguf_open(path, &g, err, sizeof err);
    if (rc) fprintf(stderr, "gguf_open: %s\n", err);
    EXPECT_EQ_INT(rc, PULSE_OK);
    if (g) {
        EXPECT(strcmp(gguf_label(g), path) == 0);
        EXPECT_EQ_INT(gguf_version(g), 3);
        check_meta(g, 64);
        check_values(g);
        EXPECT(gguf_find_tensor(g, "missing.weight") == NULL && gguf_tensor_at(g, 99) == NULL);
        gguf_free(g);
    }
    unlink(path);
    /* version 2, default alignment, from memory */
    struct buf b = {0};
    struct layout L2;
    write_gguf(&b, 2, 0, T, n_tensors, &L2);
    rc = gguf_open_memory(b.p, b.n, "v2.gguf", &g, err, sizeof err);
    if (rc) fprintf(stderr, "gguf_open_memory: %s\n", err);
    EXPECT_EQ_INT(rc, PULSE_OK);
    if (g) {
        EXPECT_EQ_INT(gguf_version(g), 2);
        check_meta(g, 0);
        check_values(g);
        gguf_free(g);
    }
    free(b.p);
    /* a file with no tensors and no metadata */
    b = (struct buf){0};
    put(&b, "GGUF", 4), PUT(&b, uint32_t, 3), PUT(&b, uint64_t, 0), PUT(&b, uint64_t, 0);
    EXPECT_EQ_INT(gguf_open_memory(b.p, b.n, "empty.gguf", &g, err, sizeof err), PULSE_OK);
    if (g) {
        EXPECT(gguf_tensor_count(g) == 0 && gguf_kv_count(g) == 0);
        gguf_free(g);
    }
    free(b.p);
    /* the raw-block entry point */
    float y[32];
    EXPECT_EQ_INT(gguf_dequantize_f32(GGUF_TENSOR_Q8_0, T[3].data.p, 32, y), PULSE_OK);
    EXPECT(memcmp(y, T[3].ref, sizeof y) == 0);
    EXPECT_EQ_INT(gguf_dequantize_f32(GGUF_TENSOR_Q8_0, T[3].data.p, 31, y), PULSE_ERR_INVALID);
    EXPECT_EQ_INT(gguf_dequantize_f32(GGUF_TENSOR_Q2_K, T[3].data.p, 256, y), PULSE_ERR_INVALID);
    EXPECT(strcmp(gguf_tensor_type_name(GGUF_TENSOR_Q6_K), "Q6_K") == 0);
    EXPECT(strcmp(gguf_tensor_type_name(5), "unknown") == 0);
    EXPECT_EQ_INT(gguf_tensor_type_block_bytes(GGUF_TENSOR_Q5_K), 176);
    EXPECT_EQ_INT(gguf_tensor_type_block_elems(GGUF_TENSOR_Q4_K), 256);
}

/* ---- corrupt inputs ---- */

/* Opens a (corrupt) image from memory and expects PULSE_ERR_INVALID with a message that names
 * the label and contains each of the needles. */
static void expect_fail(const struct buf *b, const char *label, const char *n1, const char *n2)
{
    char err[512] = "";
    struct gguf_file *g = (struct gguf_file *)1;
    int rc = gguf_open_memory(b->p, b->n, label, &g, err, sizeof err);
    EXPECT_EQ_INT(rc, PULSE_ERR_INVALID);
    EXPECT(g == NULL);
    if (rc == PULSE_OK) gguf_free(g);
    EXPECT_STR_CONTAINS(err, label);
    if (n1) EXPECT_STR_CONTAINS(err, n1);
    if (n2) EXPECT_STR_CONTAINS(err, n2);
}

static void test_patches(const struct buf *good, const struct layout *L)
{
    struct buf b;
#define CASE(label, patch, n1, n2)                                                                 \
    do {                                                                                           \
        b = copy_of(good);                                                                         \
        patch;                                                                                     \
        expect_fail(&b, label, n1, n2);                                                            \
        free(b.p);                                                                                 \
    } while (0)
    CASE("magic.gguf", b.p[0] ^= 0x20, "bad magic 67 47 55 46", "\"GGUF\"");
    CASE("v1.gguf", patch_u32(&b, L->version_at, 1), "version 1 is not supported", NULL);
    CASE("v4.gguf", patch_u32(&b, L->version_at, 4), "unsupported GGUF version 4", NULL);
    CASE("be.gguf", patch_u32(&b, L->version_at, 0x03000000u), "byte-swapped", "big-endian");
    CASE("nt.gguf", patch_u64(&b, L->n_tensors_at, 1ull << 40), "tensor count 1099511627776",
         "impossible");
    CASE("nt2.gguf", patch_u64(&b, L->n_tensors_at, UINT64_MAX), "tensor count", "impossible");
    CASE("nkv.gguf", patch_u64(&b, L->n_kv_at, 1ull << 60), "metadata count", "impossible");
    /* more entries than written: the parser runs into the tensor infos and fails cleanly */
    CASE("nkv2.gguf", patch_u64(&b, L->n_kv_at, 40), NULL, NULL);
    CASE("keylen.gguf", patch_u64(&b, L->first_key_at, 1ull << 40), "string length 1099511627776",
         "runs past the end");
    CASE("keylen2.gguf", patch_u64(&b, L->first_key_at, 0), "empty name", NULL);
    CASE("vtype.gguf", patch_u32(&b, L->u8_type_at, 13), "metadata key 't.u8'",
         "invalid value type 13");
    CASE("arr.gguf", patch_u64(&b, L->astr_count_at, 1ull << 61), "metadata key 'a.string'",
         "array of 2305843009213693952 string elements runs past the end");
    CASE("arr2.gguf", patch_u64(&b, L->astr_count_at, 1000), "metadata key 'a.string'", NULL);
    CASE("arrtype.gguf", patch_u32(&b, L->astr_count_at - 4, 77), "'a.string'",
         "invalid array element type 77");
    /* tensor infos: T[0] is 'norm.weight' F32 [3, 2], T[3] the Q8_0 [4352, 2] */
    CASE("ndims.gguf", patch_u32(&b, L->ndims_at[0], 5), "tensor 'norm.weight' has 5 dimensions",
         NULL);
    CASE("neg.gguf", patch_u64(&b, L->ne_at[0], 1ull << 63), "tensor 'norm.weight' dimension 0",
         "negative");
    CASE("ovf.gguf",
         (patch_u64(&b, L->ne_at[0], 1ull << 32), patch_u64(&b, L->ne_at[0] + 8, 1ull << 32)),
         "tensor 'norm.weight' shape [4294967296, 4294967296, 1, 1]", "2^63 or more elements");
    CASE("ovf2.gguf", (patch_u64(&b, L->ne_at[3], 1ull << 62), patch_u64(&b, L->ne_at[3] + 8, 3)),
         "tensor 'token_embd.weight'", "2^63 or more");
    CASE("bytes.gguf",
         (patch_u32(&b, L->type_at[0], 28), patch_u64(&b, L->ne_at[0], 1ull << 61),
          patch_u64(&b, L->ne_at[0] + 8, 2)),
         "tensor 'norm.weight' size in bytes overflows", NULL);
    CASE("type.gguf", patch_u32(&b, L->type_at[0], 99), "tensor 'norm.weight'",
         "unknown ggml type 99");
    CASE("type2.gguf", patch_u32(&b, L->type_at[0], 4), "unknown ggml type 4", NULL);
    CASE("blk.gguf", patch_u64(&b, L->ne_at[3], 4350), "tensor 'token_embd.weight' of type Q8_0",
         "ne[0] = 4350 is not a multiple of the block size 32");
    CASE("mis.gguf", patch_u64(&b, L->offset_at[1], 64 + 4), "tensor 'f16.weight'",
         "offset 68 is not a multiple of the alignment 64");
    CASE("past.gguf", patch_u64(&b, L->offset_at[n_tensors - 1], 1ull << 40),
         "tensor 'q2_k.weight'", "runs past the end of the file");
    CASE("past2.gguf", patch_u64(&b, L->offset_at[2], UINT64_MAX - 63), "tensor 'bf16.weight'",
         "runs past the end");
    CASE("overlap.gguf", patch_u64(&b, L->offset_at[2], 64),
         "tensors 'bf16.weight' and 'f16.weight' overlap", NULL);
    CASE("dupname.gguf", memcpy(b.p + L->info_at[2] + 8, "norm", 4),
         "duplicate tensor name 'norm.weight'", "tensors 0 and 2");
    CASE("nul.gguf", b.p[L->info_at[0] + 9] = 0, "tensor 0 name 'n?rm.weight' contains a NUL",
         NULL);
    CASE("emptyname.gguf", patch_u64(&b, L->info_at[0], 0), "tensor 0 has an empty name", NULL);
    CASE("longname.gguf", patch_u64(&b, L->info_at[0], 300), "tensor 0 name", "(max 255)");
#undef CASE
}

/* Files built for one fault each. */
static void test_built(void)
{
    struct buf b = {0};
    /* alignment: not a power of two, zero, wrong type */
    static const uint32_t bad_align[] = {48, 0, 3};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(bad_align); i++) {
        b.n = 0;
        put(&b, "GGUF", 4), PUT(&b, uint32_t, 3), PUT(&b, uint64_t, 0), PUT(&b, uint64_t, 1);
        put_key(&b, "general.alignment", GGUF_TYPE_UINT32), PUT(&b, uint32_t, bad_align[i]);
        expect_fail(&b, "align.gguf", "general.alignment", "is not a power of two");
    }
    b.n = 0;
    put(&b, "GGUF", 4), PUT(&b, uint32_t, 3), PUT(&b, uint64_t, 0), PUT(&b, uint64_t, 1);
    put_key(&b, "general.alignment", GGUF_TYPE_UINT64), PUT(&b, uint64_t, 32);
    expect_fail(&b, "align64.gguf", "'general.alignment' has type uint64, expected uint32", NULL);
    /* duplicate key, key with a NUL byte */
    b.n = 0;
    put(&b, "GGUF", 4), PUT(&b, uint32_t, 3), PUT(&b, uint64_t, 0), PUT(&b, uint64_t, 2);
    put_key(&b, "a.b", GGUF_TYPE_UINT8), PUT(&b, uint8_t, 1);
    put_key(&b, "a.b", GGUF_TYPE_UINT8), PUT(&b, uint8_t, 2);
    expect_fail(&b, "dupkey.gguf", "duplicate metadata key 'a.b'", "entries 0 and 1");
    b.n = 0;
    put(&b, "GGUF", 4), PUT(&b, uint32_t, 3), PUT(&b, uint64_t, 0), PUT(&b, uint64_t, 1);
    PUT(&b, uint64_t, 3), put(&b, "a\0b", 3), PUT(&b, uint32_t, GGUF_TYPE_UINT8),
        PUT(&b, uint8_t, 1);
    expect_fail(&b, "nulkey.gguf", "metadata entry 0 name 'a?b' contains a NUL byte", NULL);
    /* arrays nested past the limit */
    b.n = 0;
    put(&b, "GGUF", 4), PUT(&b, uint32_t, 3), PUT(&b, uint64_t, 0), PUT(&b, uint64_t, 1);
    put_key(&b, "deep", GGUF_TYPE_ARRAY);
    for (int d = 0; d < 12; d++)
        PUT(&b, uint32_t, GGUF_TYPE_ARRAY), PUT(&b, uint64_t, 1);
    PUT(&b, uint32_t, GGUF_TYPE_UINT8), PUT(&b, uint64_t, 1), PUT(&b, uint8_t, 1);
    expect_fail(&b, "deep.gguf", "metadata key 'deep'", "nested deeper than 8 levels");
    /* an unprintable key is quoted safely */
    b.n = 0;
    put(&b, "GGUF", 4), PUT(&b, uint32_t, 3), PUT(&b, uint64_t, 0), PUT(&b, uint64_t, 1);
    put_key(&b, "k\n\x01", 200), PUT(&b, uint8_t, 1);
    expect_fail(&b, "odd.gguf",
                "metadata key 'k?"
                "?'",
                "invalid value type 200");
    /* the data section would start past the end: one empty tensor, file cut after the infos */
    b.n = 0;
    put(&b, "GGUF", 4), PUT(&b, uint32_t, 3), PUT(&b, uint64_t, 1), PUT(&b, uint64_t, 0);
    put_str(&b, "e"), PUT(&b, uint32_t, 1), PUT(&b, uint64_t, 0), PUT(&b, uint32_t, 0),
        PUT(&b, uint64_t, 0);
    expect_fail(&b, "start.gguf", "data section would start at byte 64", "past the end");
    /* ... while an empty tensor inside a complete file is fine */
    while (b.n % 32)
        PUT(&b, uint8_t, 0);
    {
        char err[256];
        struct gguf_file *g = NULL;
        EXPECT_EQ_INT(gguf_open_memory(b.p, b.n, "e.gguf", &g, err, sizeof err), PULSE_OK);
        if (g) {
            const struct gguf_tensor *t = gguf_find_tensor(g, "e");
            float y[1];
            EXPECT(t && t->n_elems == 0 && t->n_rows == 0);
            EXPECT_EQ_INT(gguf_tensor_read_f32(g, t, y, 0, err, sizeof err), PULSE_OK);
            gguf_free(g);
        }
    }
    /* short files */
    b.n = 0;
    expect_fail(&b, "zero.gguf", "0 bytes is too short for a GGUF header", NULL);
    put(&b, "GGU", 3);
    expect_fail(&b, "three.gguf", "3 bytes is too short", NULL);
    free(b.p);
}

/* Every truncation of the valid file fails cleanly (from memory at every length, from a real
 * file at a sample of lengths). */
static void test_truncations(const struct buf *good)
{
    char err[512], path[64];
    int failed_ok = 0;
    for (size_t n = 0; n < good->n; n++) {
        struct gguf_file *g = NULL;
        uint8_t *p = malloc(n ? n : 1); /* an exact-size copy, so ASan sees any overread */
        if (n) memcpy(p, good->p, n);
        int rc = gguf_open_memory(p, n, "cut.gguf", &g, err, sizeof err);
        failed_ok += rc == PULSE_ERR_INVALID && g == NULL && strncmp(err, "cut.gguf: ", 10) == 0;
        if (rc == PULSE_OK) {
            fprintf(stderr, "truncation at %zu of %zu opened\n", n, good->n);
            gguf_free(g);
        }
        free(p);
    }
    EXPECT_EQ_INT(failed_ok, good->n);
    for (size_t n = 0; n < good->n; n += 997) {
        struct buf cut = {good->p, n, n};
        struct gguf_file *g = NULL;
        write_file(&cut, path);
        int rc = gguf_open(path, &g, err, sizeof err);
        EXPECT_EQ_INT(rc, PULSE_ERR_INVALID);
        EXPECT_STR_CONTAINS(err, path);
        if (g) gguf_free(g);
        unlink(path);
    }
    struct gguf_file *g = NULL;
    EXPECT_EQ_INT(gguf_open("/nonexistent/x.gguf", &g, err, sizeof err), PULSE_ERR_IO);
    EXPECT_STR_CONTAINS(err, "/nonexistent/x.gguf: cannot open");
    EXPECT_EQ_INT(gguf_open("/tmp", &g, err, sizeof err), PULSE_ERR_IO);
    EXPECT_STR_CONTAINS(err, "/tmp: not a regular file");
}

int main(void)
{
    struct buf good = {0};
    struct layout L;
    make_tensors();
    test_valid(&good, &L);
    test_patches(&good, &L);
    test_built();
    test_truncations(&good);
    free(good.p);
    for (int i = 0; i < n_tensors; i++)
        free(T[i].data.p), free(T[i].ref);
    return tu_finish("test_acc_gguf");
}
