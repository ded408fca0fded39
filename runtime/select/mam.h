/* The MAM head profile (DESIGN.md section 5), which picks SoloHead's selector head per layer.
 *
 * Definition. For KV head h of layer l, MAM(l, h) is the mean, over calibration decode steps,
 *   batch entries and ALL query heads j of layer l, of the fraction of query head j's exact
 *   attention probability (softmax of scale * q_j . k over every token of the entry, j reading
 *   its own KV head j / G) that falls in the blocks KV head h's Quest selection picks: the
 *   head-wise digest scores of h (summed over h's own G query heads), the forced sink, window
 *   and tail blocks, and the `budget` best other blocks (select.h, the CPU references). SoloHead
 *   takes the head of highest MAM per layer; "reversed" SoloHead the lowest; ties go to the
 *   lower head.
 *
 * Three parts:
 *   accumulator (struct mam_acc, opaque, host): fed one (layer, batch) observation at a time with
 *     the layer's rotated q and a kv_view over host memory; builds digests, scores and top-k and
 *     the exact attention mass in buffers sized at create (no allocation per observation).
 *   probe (struct mam_probe, opaque): the engine_layer_hook that feeds an accumulator from real
 *     decode steps; where the backend's memory is not host memory it copies q, the page starts
 *     and ids and the entries' pages of the layer into host staging allocated at create.
 *   profile (struct mam_profile, plain data): the finished table, its JSON file, the selectors.
 *
 * Profile JSON (written with full double precision, so it round-trips exactly):
 *   {"schema_version": 1, "tool": {...}, "experiment": "profile-heads", "model": NAME,
 *    "config": {"budget_tokens", "block_size", "sink", "window", "steps", "prompt", "batch",
 *               "seed", "backend"},
 *    "mam": [[MAM of KV head 0, 1, ...] per layer], "selector": [argmax per layer],
 *    "selector_reversed": [argmin per layer]}
 *   sink and window count blocks, budget_tokens = budget blocks * block_size, prompt and steps
 *   count tokens and decode steps. A reader checks every field and that the selectors agree
 *   with the table. */
#ifndef PULSE_MAM_H
#define PULSE_MAM_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "engine.h"
#include "kernels.h"
#include "model.h"

/* The shape of the accumulator (plain data). */
struct mam_params {
    int n_layers, n_heads, n_kv_heads, head_dim; /* n_heads % n_kv_heads == 0, n_kv_heads <= 64 */
    int block_size;                              /* tokens per block: the KV page size */
    int budget, sink, window;                    /* blocks, as in struct select_cfg */
    int max_batch, max_tokens;                   /* bound every observation */
    float scale; /* softmax scale of q . k; 0 means 1/sqrt(head_dim), the engine's */
    /* 0: the selectors are the KV heads (the definition above). 1: every QUERY head h is a
     * selector, its list made from its own q alone against its KV head's digests (one list
     * per query head); the table is [n_layers][n_heads]. For models with one KV head (Gemma 3
     * 270M), where SoloHead's single list must come from one query head. */
    int query_selectors;
    /* > 0: the model's local (sliding-window) layers, every layer l with (l + 1) %
     * sliding_pattern != 0 (model.h), never select blocks: they may go unobserved, their rows
     * 0 (SoloHead's selector there is moot). 0: every layer must be observed. */
    int sliding_pattern;
};

/* What was measured (plain data, owned by the caller). */
struct mam_profile_meta {
    char model[64];
    char backend[16];
    int budget_tokens, block_size, sink, window; /* sink, window in blocks */
    int steps, prompt, batch;                    /* calibration decode steps, prompt tokens */
    uint64_t seed;
};

struct mam_profile {
    struct mam_profile_meta meta;
    int n_layers, n_kv_heads;
    double *mam; /* [n_layers][n_kv_heads] in [0, 1]; owned, released by mam_profile_free */
};

struct mam_acc;
struct mam_probe;

/* ------------------------------------------------------------------ accumulator */

/* Allocates the accumulator and all its scratch (host). NULL with a one-line reason naming the
 * field in err when the params are invalid (e.g. max_tokens / block_size above
 * SELECT_MAX_BLOCKS) or memory is refused. */
struct mam_acc *mam_acc_create(const struct mam_params *p, char *err, size_t errlen);
void mam_acc_free(struct mam_acc *a);

/* Adds one observation of layer `layer`: q bf16 [batch][n_heads][head_dim] (host), kv a view of
 * that layer's paged KV over host memory (page_size == block_size, the params' heads and
 * head_dim), n_tokens [batch] host, 1 <= n_tokens[b] <= max_tokens, batch <= max_batch. Adds
 * one coverage term per (entry, query head) to every KV head of the layer. Aborts on a broken
 * precondition (programming error). No allocation. */
void mam_acc_add_layer(struct mam_acc *a, int layer, const uint16_t *q, const struct kv_view *kv,
                       const int32_t *n_tokens, int batch);

/* Coverage terms summed so far for (layer, any head): steps * entries * n_heads. */
int64_t mam_acc_terms(const struct mam_acc *a, int layer);
/* Selectors per layer: n_kv_heads, or n_heads with query_selectors. */
int mam_acc_selectors(const struct mam_acc *a);
/* The means so far, [n_layers][mam_acc_selectors()] (0 for a layer without observations). */
void mam_acc_table(const struct mam_acc *a, double *out);
/* Forgets every observation. */
void mam_acc_reset(struct mam_acc *a);

/* The means so far into out (allocated here; free with mam_profile_free). meta gets the
 * selection shape (budget_tokens, block_size, sink, window); the caller fills the rest.
 * PULSE_OK; PULSE_ERR_INVALID with a reason when a layer has no observation; PULSE_ERR_OOM. */
int mam_acc_finalize(const struct mam_acc *a, struct mam_profile *out, char *err, size_t errlen);

/* ------------------------------------------------------------------ probe (engine hook) */

/* A probe feeding `acc` from an engine on backend `be` (its context ctx). Staging (q, page ids
 * and the pages of max_batch entries of max_tokens, one layer) is allocated here when the
 * backend's memory is not host memory, or always when `stage` is set (so the device path can be
 * tested on the CPU). acc must outlive the probe. NULL with a reason when memory is refused. */
struct mam_probe *mam_probe_create(struct mam_acc *acc, const struct backend *be,
                                   const struct kctx *ctx, int stage, char *err, size_t errlen);
void mam_probe_free(struct mam_probe *p);
/* The hook to pass to batch_set_hook (user = p). Layers whose view has a sliding window
 * (kv->window > 0: local layers, never selected) are not observed. */
struct engine_layer_hook mam_probe_hook(struct mam_probe *p);
/* Feeds a second accumulator the same observations (one staging for both granularities):
 * `also` must have p's accumulator's params but for query_selectors, and outlive the probe.
 * PULSE_OK, or PULSE_ERR_INVALID with a reason when the shapes differ. */
int mam_probe_also_feed(struct mam_probe *p, struct mam_acc *also, char *err, size_t errlen);
/* Bytes copied into staging so far (0 when the probe reads backend memory directly). */
int64_t mam_probe_staged_bytes(const struct mam_probe *p);

/* ------------------------------------------------------------------ profile */

/* A zeroed profile of n_layers x n_kv_heads. PULSE_OK or PULSE_ERR_OOM / PULSE_ERR_INVALID. */
int mam_profile_init(struct mam_profile *p, int n_layers, int n_kv_heads);
/* Releases p->mam (NULL-safe) and zeroes p. */
void mam_profile_free(struct mam_profile *p);

/* out[l] = the KV head of highest MAM of layer l (reversed: lowest); ties to the lower head. */
void mam_profile_selectors(const struct mam_profile *p, int reversed, int *out_per_layer);

/* Writes p as JSON to path (temporary file, then rename). PULSE_OK or PULSE_ERR_IO / _INVALID
 * with a reason naming the file in err. */
int mam_profile_write(const struct mam_profile *p, const char *path, char *err, size_t errlen);

/* Reads and validates a profile. When `expect` is not NULL, its layer and KV-head counts must
 * match the table's. PULSE_OK, or PULSE_ERR_IO (missing, a directory, not a regular file, not
 * JSON: results_read_json) / PULSE_ERR_INVALID (a missing or bad field, or a shape mismatch)
 * with "FILE: FIELD: what was expected" in err; out is then left zeroed. */
int mam_profile_read(const char *path, const struct model_config *expect, struct mam_profile *out,
                     char *err, size_t errlen);

#endif
