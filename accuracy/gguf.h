/* A GGUF reader (versions 2 and 3, little-endian): header, metadata of every GGUF type (arrays
 * nested to any depth up to GGUF_MAX_DEPTH), tensor infos, and dequantisation to fp32 or bf16.
 *
 *   file    magic "GGUF", u32 version, u64 tensor_count, u64 kv_count, kv_count metadata
 *           entries (string key, u32 type, value), tensor_count infos (string name, u32 n_dims,
 *           u64 ne[n_dims], u32 ggml type, u64 offset), zero padding to general.alignment
 *           (u32, default 32), then the data section; a tensor's bytes start at
 *           data_start + offset, a multiple of the alignment.
 *   string  u64 length + bytes, no NUL.
 *   array   u32 element type, u64 count, elements (strings length-prefixed; a nested array is
 *           again u32 type + u64 count + elements).
 *
 * The handle maps (or borrows) the whole file; every pointer it hands out (names, strings,
 * array data, tensor data) points into that mapping or into the handle and lives until
 * gguf_free. Every count, length and offset is checked against the bytes that remain, so a
 * corrupt file gives a message naming the file (and the key or tensor), never a crash and
 * never an allocation larger than a small multiple of the file size. */
#ifndef PULSE_GGUF_H
#define PULSE_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 255 /* longest tensor name accepted, bytes */
#define GGUF_MAX_DEPTH 8  /* deepest array nesting accepted */

/* Metadata value types, numbered as in the file. */
enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
};

/* Tensor types (ggml_type ids) the reader knows the block size of. Only F32, F16, BF16, Q4_0,
 * Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K can be dequantised; the others open but give an error
 * when read. */
enum gguf_tensor_type {
    GGUF_TENSOR_F32 = 0,
    GGUF_TENSOR_F16 = 1,
    GGUF_TENSOR_Q4_0 = 2,
    GGUF_TENSOR_Q4_1 = 3,
    GGUF_TENSOR_Q5_0 = 6,
    GGUF_TENSOR_Q5_1 = 7,
    GGUF_TENSOR_Q8_0 = 8,
    GGUF_TENSOR_Q8_1 = 9,
    GGUF_TENSOR_Q2_K = 10,
    GGUF_TENSOR_Q3_K = 11,
    GGUF_TENSOR_Q4_K = 12,
    GGUF_TENSOR_Q5_K = 13,
    GGUF_TENSOR_Q6_K = 14,
    GGUF_TENSOR_Q8_K = 15,
    GGUF_TENSOR_BF16 = 30,
};

/* A GGUF string: NOT NUL-terminated; ptr points into the file. */
struct gguf_str {
    const char *ptr;
    uint64_t len;
};

/* An array value. Fixed-size elements are packed little-endian at `data` (unaligned; read them
 * with the gguf_array_get_* helpers); string elements are `strs[n]`; nested arrays `arrs[n]`. */
struct gguf_array {
    enum gguf_type type; /* element type */
    uint64_t n;
    const void *data;
    const struct gguf_str *strs;
    const struct gguf_array *arrs;
};

/* A metadata value: the member that matches `type` is set (u for unsigned, i for signed
 * integers, f for FLOAT32/FLOAT64 widened to double, b for BOOL, s, a). */
struct gguf_value {
    enum gguf_type type;
    union {
        uint64_t u;
        int64_t i;
        double f;
        int b;
        struct gguf_str s;
        struct gguf_array a;
    };
};

/* A tensor info; `name` is NUL-terminated and owned by the handle, `data` points into the
 * file. ne[0] is the contiguous dimension (one row = ne[0] elements); unused dims are 1. */
struct gguf_tensor {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    uint32_t type;    /* enum gguf_tensor_type value (ggml_type id) */
    uint64_t offset;  /* bytes from the start of the data section */
    uint64_t n_elems; /* ne[0] * ne[1] * ne[2] * ne[3] */
    uint64_t n_rows;  /* n_elems / ne[0] (0 for an empty tensor) */
    uint64_t n_bytes; /* bytes of data */
    const uint8_t *data;
};

struct gguf_file;

/* Maps the file at `path` read-only and parses it. PULSE_OK and *out (free with gguf_free);
 * PULSE_ERR_IO when the file cannot be opened or mapped, PULSE_ERR_INVALID when it is not a
 * valid GGUF file, PULSE_ERR_NOMEM when memory runs out; a one-line reason naming the file in
 * err either way. */
int gguf_open(const char *path, struct gguf_file **out, char *err, size_t errlen);
/* Parses a GGUF image held in memory. The buffer is borrowed and must outlive the handle;
 * `label` names it in messages (copied). Same returns as gguf_open. */
int gguf_open_memory(const void *buf, size_t len, const char *label, struct gguf_file **out,
                     char *err, size_t errlen);
/* Unmaps the file and frees everything the handle owns. NULL is a no-op. */
void gguf_free(struct gguf_file *g);

/* The label (path) messages use; the version; the alignment in bytes; the data section's
 * offset in the file, in bytes. */
const char *gguf_label(const struct gguf_file *g);
uint32_t gguf_version(const struct gguf_file *g);
uint64_t gguf_alignment(const struct gguf_file *g);
uint64_t gguf_data_offset(const struct gguf_file *g);

/* Metadata entries in file order: count, i-th key (NUL-terminated), i-th value. */
uint64_t gguf_kv_count(const struct gguf_file *g);
const char *gguf_kv_key(const struct gguf_file *g, uint64_t i);
const struct gguf_value *gguf_kv_value(const struct gguf_file *g, uint64_t i);
/* The value of `key`, or NULL when absent. */
const struct gguf_value *gguf_find_kv(const struct gguf_file *g, const char *key);

/* Typed getters: PULSE_OK and *out, or PULSE_ERR_INVALID with a reason (key absent, wrong
 * type, out of range) in err. get_int accepts every integer type and BOOL (an UINT64 above
 * INT64_MAX is out of range); get_float accepts FLOAT32, FLOAT64 and integers; get_str gives a
 * view into the file (not NUL-terminated); get_array a view owned by the handle. */
int gguf_get_int(const struct gguf_file *g, const char *key, int64_t *out, char *err,
                 size_t errlen);
int gguf_get_float(const struct gguf_file *g, const char *key, double *out, char *err,
                   size_t errlen);
int gguf_get_bool(const struct gguf_file *g, const char *key, int *out, char *err, size_t errlen);
int gguf_get_str(const struct gguf_file *g, const char *key, struct gguf_str *out, char *err,
                 size_t errlen);
int gguf_get_array(const struct gguf_file *g, const char *key, struct gguf_array *out, char *err,
                   size_t errlen);

/* Element i of an array: PULSE_OK, or PULSE_ERR_INVALID when i >= a->n or the element type
 * does not convert (same rules as the typed getters above). */
int gguf_array_get_int(const struct gguf_array *a, uint64_t i, int64_t *out);
int gguf_array_get_float(const struct gguf_array *a, uint64_t i, double *out);
int gguf_array_get_str(const struct gguf_array *a, uint64_t i, struct gguf_str *out);
int gguf_array_get_array(const struct gguf_array *a, uint64_t i, struct gguf_array *out);

/* Tensors in file order, and by name (NULL when absent). */
uint64_t gguf_tensor_count(const struct gguf_file *g);
const struct gguf_tensor *gguf_tensor_at(const struct gguf_file *g, uint64_t i);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *g, const char *name);

/* Dequantises rows [row0, row0 + n_rows) of t (row = ne[0] elements) into dst, which holds
 * n_rows * ne[0] values. PULSE_OK, or PULSE_ERR_INVALID naming the file and tensor when the type
 * cannot be dequantised or the rows are out of range. bf16 rounds each fp32 value to nearest
 * even (BF16 tensors are copied exactly). */
int gguf_tensor_read_rows_f32(const struct gguf_file *g, const struct gguf_tensor *t, uint64_t row0,
                              uint64_t n_rows, float *dst, char *err, size_t errlen);
int gguf_tensor_read_rows_bf16(const struct gguf_file *g, const struct gguf_tensor *t,
                               uint64_t row0, uint64_t n_rows, uint16_t *dst, char *err,
                               size_t errlen);
/* The whole tensor: dst holds `cap` values, which must be >= t->n_elems. */
int gguf_tensor_read_f32(const struct gguf_file *g, const struct gguf_tensor *t, float *dst,
                         uint64_t cap, char *err, size_t errlen);
int gguf_tensor_read_bf16(const struct gguf_file *g, const struct gguf_tensor *t, uint16_t *dst,
                          uint64_t cap, char *err, size_t errlen);

/* Dequantises n_elems values of raw blocks of `type` from src to dst (n_elems a multiple of the
 * block size). PULSE_OK or PULSE_ERR_INVALID (type not dequantisable, bad n_elems). */
int gguf_dequantize_f32(uint32_t type, const void *src, uint64_t n_elems, float *dst);

/* Name of a tensor type ("Q4_K"; "unknown" for ids the reader does not know); elements per
 * block and bytes per block (0 for unknown ids); whether it can be dequantised. */
const char *gguf_tensor_type_name(uint32_t type);
uint32_t gguf_tensor_type_block_elems(uint32_t type);
uint32_t gguf_tensor_type_block_bytes(uint32_t type);
int gguf_tensor_type_supported(uint32_t type);
/* Name of a metadata value type ("uint32", "array"; "invalid" past the end). */
const char *gguf_type_name(uint32_t type);

#endif
