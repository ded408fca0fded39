/* A reader for Hugging Face safetensors checkpoints, and for the config.json beside them.
 *
 *   file    u64 little-endian header length N, N bytes of JSON, then the data section. The
 *           JSON maps each tensor name to {"dtype": "BF16", "shape": [..], "data_offsets":
 *           [begin, end]} (bytes relative to the data section) and may hold "__metadata__", an
 *           object of string values.
 *   model   a directory with model.safetensors, or with model.safetensors.index.json whose
 *           "weight_map" names the shard (model-0000k-of-0000n.safetensors) of every tensor.
 *
 * Every header is checked before anything is read: the header length against the file (and a
 * 100 MiB limit), each tensor's shape x dtype size against its byte range (with overflow
 * checks), each range against the data section, and ranges against each other (no overlap).
 * A failure gives a message naming the file and, where there is one, the tensor. Files are
 * mapped read-only; pointers handed out live until safetensors_free. Reading converts BF16,
 * F16 and F32 to fp32 or bf16; other dtypes are listed but give an error when read. */
#ifndef PULSE_SAFETENSORS_H
#define PULSE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

#define SAFETENSORS_MAX_DIMS 8
#define SAFETENSORS_MAX_HEADER (100u << 20) /* bytes of JSON header accepted */

enum safetensors_dtype {
    SAFETENSORS_OTHER = 0, /* a dtype this reader lists but cannot convert (I64, F8_E4M3, ...) */
    SAFETENSORS_F32,
    SAFETENSORS_F16,
    SAFETENSORS_BF16,
};

/* One tensor. `name`, `dtype_name` and `file` are owned by the handle; `data` points into the
 * mapped file; shape[0] is the outermost (slowest-varying) dimension, row-major. */
struct safetensors_tensor {
    const char *name;
    const char *dtype_name; /* as written: "BF16", "I64", ... */
    enum safetensors_dtype dtype;
    int n_dims;
    uint64_t shape[SAFETENSORS_MAX_DIMS];
    uint64_t n_elems, n_bytes;
    const uint8_t *data;
    const char *file; /* the path (or label) of the file holding it */
};

/* The fields of a Llama / Qwen3 config.json that shape or change the model, as written (each
 * type-checked; what they mean, and what is refused, is the loader's: model_load.h). */
struct safetensors_config {
    char model_type[32]; /* "llama", "qwen3", ... ("" when absent) */
    int hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads;
    int head_dim; /* default hidden_size / num_attention_heads */
    int intermediate_size, vocab_size;
    double rms_norm_eps;     /* default 1e-6 */
    double rope_theta;       /* default 10000; top level or inside the rope dict (not both) */
    int tie_word_embeddings; /* default: transformers' per model_type (true for gemma*, else
                                false as for llama and qwen3) */
    char hidden_act[32];     /* "" when absent */
    int attention_bias, mlp_bias, use_sliding_window; /* default false */
    int sliding_layers;           /* entries of "layer_types" other than "full_attention" */
    int quantized;                /* a "quantization_config" is present */
    double partial_rotary_factor; /* default 1 */
    /* RoPE scaling: the "rope_scaling" object or the newer "rope_parameters" (not both), its
     * type from "rope_type" or the older "type" (equal when both); each parameter 0 when
     * absent (a present one is > 0). */
    char rope_field[16]; /* "rope_scaling" or "rope_parameters" ("" when neither) */
    char rope_type[32];  /* "default" when there is none */
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_pos; /* original_max_position_embeddings */
    char rope_unknown[48];     /* the first other key of the object ("" when none) */
};

struct safetensors;

/* Opens a model directory (index + shards, or model.safetensors) or a single .safetensors
 * file. PULSE_OK and *out (free with safetensors_free); PULSE_ERR_IO when a file cannot be
 * opened, PULSE_ERR_INVALID when one is malformed, PULSE_ERR_NOMEM; a one-line reason naming
 * the file (and tensor) in err. */
int safetensors_open(const char *path, struct safetensors **out, char *err, size_t errlen);
/* Parses one safetensors image held in memory (borrowed: it must outlive the handle); `label`
 * names it in messages. Same returns as safetensors_open. */
int safetensors_open_memory(const void *buf, size_t len, const char *label,
                            struct safetensors **out, char *err, size_t errlen);
/* Unmaps every file and frees the handle. NULL is a no-op. */
void safetensors_free(struct safetensors *st);

/* Tensors, in file order then header order, and by name (NULL when absent). */
uint64_t safetensors_tensor_count(const struct safetensors *st);
const struct safetensors_tensor *safetensors_tensor_at(const struct safetensors *st, uint64_t i);
const struct safetensors_tensor *safetensors_find_tensor(const struct safetensors *st,
                                                         const char *name);
/* A "__metadata__" string of the first file that has `key`, or NULL. */
const char *safetensors_metadata(const struct safetensors *st, const char *key);

/* Converts the whole tensor into dst, which holds `cap` values (>= t->n_elems). PULSE_OK, or
 * PULSE_ERR_INVALID naming the file and tensor (dtype not BF16/F16/F32, cap too small).
 * fp32 -> bf16 rounds to nearest even; BF16 -> bf16 and -> fp32 are exact. */
int safetensors_read_f32(const struct safetensors *st, const struct safetensors_tensor *t,
                         float *dst, uint64_t cap, char *err, size_t errlen);
int safetensors_read_bf16(const struct safetensors *st, const struct safetensors_tensor *t,
                          uint16_t *dst, uint64_t cap, char *err, size_t errlen);

/* Reads config.json (path to the file, or to the directory holding it) into *cfg
 * (safetensors_config.c). PULSE_OK, or PULSE_ERR_IO / PULSE_ERR_INVALID with a reason naming the
 * file and the field. Fields come from "text_config" when the top level has no hidden_size
 * (multimodal configs). */
int safetensors_read_config(const char *path, struct safetensors_config *cfg, char *err,
                            size_t errlen);
/* The same from JSON text in memory (len bytes, no NUL needed); `label` names it. */
int safetensors_parse_config(const char *text, size_t len, const char *label,
                             struct safetensors_config *cfg, char *err, size_t errlen);

#endif
