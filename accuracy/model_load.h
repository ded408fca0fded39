/* Real weights into the runtime's model struct: Hugging Face checkpoints in the Llama / Qwen3
 * layout (config.json + one or more .safetensors; BF16, F16 or F32), converted to bf16 and laid
 * out as the engine expects (fused QKV and gate/up rows). */
#ifndef PULSE_MODEL_LOAD_H
#define PULSE_MODEL_LOAD_H

#include <stddef.h>

#include "model.h"

/* A config read from a checkpoint, with the storage its name and RoPE frequency factors point
 * into (keep it where it is while cfg is in use). */
struct loaded_config {
    struct model_config cfg;
    char name[128];
    float rope_freq_factors[MODEL_MAX_HEAD_DIM / 2]; /* GGUF rope_freqs.weight */
};

/* Reads dir/config.json (model_type llama or qwen3; qwen3 has QK-norm) and checks the
 * checkpoint's tensors against it, so that a model this runtime would run differently from
 * transformers is refused here, before any weight is read. Implemented: the shapes, rms_norm_eps,
 * rope_theta, RoPE scaling (rope_scaling or rope_parameters, type or rope_type: default, linear,
 * llama3, each with exactly its parameters), hidden_act silu, tie_word_embeddings (transformers'
 * default per model_type). Refused: other RoPE types or parameters, another hidden_act, a true
 * attention_bias or mlp_bias, sliding-window layers, a quantization_config, partial RoPE; any
 * tensor the layout does not take (biases, QK-norm in a llama checkpoint, layers past
 * num_hidden_layers, ...; old checkpoints' rotary_emb.inv_freq buffers are recomputed, as
 * transformers does), a dtype other than BF16, F16 and F32; an untied head without
 * lm_head.weight, a tied one beside an lm_head.weight of other values. PULSE_OK, or an error
 * status with a one-line reason naming the file and field or tensor. */
int model_config_from_hf(const char *dir, struct loaded_config *out, char *err, size_t errlen);

/* Loads the checkpoint in dir into m, which model_alloc laid out for cfg on m->be (ctx is the
 * backend's context), after the checks of model_config_from_hf against m's config. A tied head
 * takes the embedding. A tensor with NaN or infinite values is an error naming it. */
int model_load_hf(struct model *m, const char *dir, const struct kctx *ctx, char *err,
                  size_t errlen);

/* The same for a GGUF file of architecture llama, qwen3 or gemma3 (general.architecture):
 * config from its metadata, weights dequantised to bf16 (every type accuracy/gguf.h reads).
 * Every "<arch>." key must be one this loader implements, of its kind (integer, float, string,
 * bool: a float stored as an integer is refused, naming the key); block_count, context_length,
 * embedding_length, feed_forward_length, attention.head_count, attention.layer_norm_rms_epsilon
 * and rope.freq_base are required (gemma3: attention.sliding_window too); head_count_kv and
 * key_length default as in llama.cpp and are checked against the tensors; value_length and
 * rope.dimension_count must equal the key length; expert_count must be 0; vocab_size must
 * equal token_embd's rows. RoPE scaling: rope.scaling.type linear (llama.cpp's default) or none
 * with rope.scaling.factor (or the older rope.scale_linear); other types, and an attn_factor
 * other than 1, are refused; llama's rope_freqs.weight (llama3 scaling as per-pair divisors)
 * is read into the config. The tensors are checked as model_config_from_hf does: each one the
 * layout takes (norms F32, F16 or BF16) and no other (biases, QK-norm in llama, blocks past
 * block_count, a gemma3 output.weight). Without output.weight the head is token_embd
 * (llama.cpp's convention). llama-arch files store the Q and K rows permuted for interleaved
 * RoPE (llama.cpp's converter); the loader undoes that, since this runtime rotates halves.
 * gemma3: sliding window and pattern (default llama.cpp's every 6th layer global) and local
 * RoPE base (default 10000; rope.freq_base_swa) from the metadata, post-norms, tied head, its
 * norm weights already 1 + w, RoPE scaling on the global layers only; 62 layers (the 27B,
 * whose attention scale differs) refused. */
int model_config_from_gguf(const char *path, struct loaded_config *out, char *err, size_t errlen);
int model_load_gguf(struct model *m, const char *path, const struct kctx *ctx, char *err,
                    size_t errlen);

/* Either of the above by what path is: a GGUF file (by its magic, whatever its name), else a
 * checkpoint directory. */
int model_config_from_path(const char *path, struct loaded_config *out, char *err, size_t errlen);
/* 1 when path is a regular file that starts with the GGUF magic (whatever its name). */
int model_path_is_gguf(const char *path);
int model_load_path(struct model *m, const char *path, const struct kctx *ctx, char *err,
                    size_t errlen);

#endif
