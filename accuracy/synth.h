/* Synthetic long-context tasks in the RULER style (NVIDIA/RULER scripts/data/synthetic), written
 * as LongBench records that accuracy/longbench.c loads and scores with the templates and metrics
 * of its synthetic tasks (passkey, niah_multikey, variable_tracking, kv_retrieval).
 *
 * Length: a sample is fitted to a target in tokens the way RULER does: the prompt the accuracy
 * driver builds (the task's template in longbench.c filled with context and input) plus the
 * task's generation budget (max_gen) must fit in target_tokens, with as much filler as fits (a
 * binary search over the number of filler units). Tokens are counted by a callback so that the
 * caller can pass the model's tokenizer; the default, synth_count_bytes4, is ceil(bytes / 4).
 *
 * What each task puts in the record (the needle forms are the ones longbench.c documents):
 *   passkey            filler + "The pass key is N. Remember it. N is the pass key." with N of
 *                      5 to 7 digits; input ""; answers [N].
 *   niah_multikey      filler + 4 needles "One of the special magic numbers for KEY is: V."
 *                      (KEY adjective-noun, V 7 digits, all distinct); one is queried, the others
 *                      are distractors; input KEY; answers [V].
 *   variable_tracking  filler + 2 chains of 4 hops, "VAR A = V." then "VAR B = VAR A." ... in
 *                      order (names 5 uppercase letters, V 5 digits, the chains' values differ);
 *                      input V of the queried chain; answers its 5 names (contains_all).
 *   kv_retrieval       no corpus text: the context is one JSON object {"uuid": "uuid", ...}
 *                      of random pairs; one queried pair among them; input its key; answers
 *                      [its value].
 * Filler is a run of consecutive corpus sentences (synth_corpus.h) from a seeded start,
 * wrapping round at the end of the corpus; a sentence that starts a paragraph starts a line.
 * Needles go between filler units at a depth in [0, 1]: the queried needle of passkey,
 * niah_multikey and kv_retrieval at the stratified depth (index + u) / n_samples, u uniform,
 * every other needle at a uniform depth (chains sorted so that they read in order). The
 * recorded depth is the needle's byte offset over the context length. A drawn value that the
 * filler happens to contain is drawn again, so every value and name occurs only in its needles.
 *
 * Randomness: pulse_hash64 streams keyed by (seed, task, target_tokens, sample index), so a
 * sample depends only on those, the corpus, n_samples and the token counter.
 *
 * Splits: seeds below SYNTH_TRAIN_SEED are the test split, the evaluation sets (pulse synth's
 * default, what pulse accuracy reads); seeds with that bit set are the train split, the data a
 * model the suite evaluates is trained on (synth_train.h). The seed mixing is a bijection of the
 * seed for a given task, length, sample and attempt, so there the two splits always draw from
 * different streams: a training sample can equal an evaluation sample only if two distinct
 * 64-bit streams agree on every draw (filler start, needle values, depths). */
#ifndef PULSE_SYNTH_H
#define PULSE_SYNTH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "accuracy/synth_corpus.h"

enum synth_task {
    SYNTH_PASSKEY = 0,
    SYNTH_NIAH_MULTIKEY,
    SYNTH_VARIABLE_TRACKING,
    SYNTH_KV_RETRIEVAL,
    SYNTH_TASK_COUNT
};

#define SYNTH_MAX_NEEDLES 16
#define SYNTH_TRAIN_SEED (1ull << 63) /* the train split's bit (above) */
#define SYNTH_MAX_ANSWERS 8

/* Counts the tokens of text[0..len); negative on failure (the generator returns
 * PULSE_ERR_INVALID). user is the caller's pointer. */
typedef long long (*synth_count_fn)(void *user, const char *text, size_t len);

/* The default counter: (len + 3) / 4, about one token per 4 bytes of English. */
long long synth_count_bytes4(void *user, const char *text, size_t len);

/* The task's name as longbench.c spells it ("passkey", ...); NULL when out of range. */
const char *synth_task_name(enum synth_task t);
/* The task named name, or -1. */
int synth_task_find(const char *name);
/* 1 when the task takes its filler from a corpus (all but kv_retrieval). */
int synth_task_needs_corpus(enum synth_task t);

struct synth_params {
    enum synth_task task;
    long long target_tokens; /* prompt + max_gen of the task fit in this many tokens */
    size_t n_samples;        /* samples in the set (stratifies depths); >= 1 */
    uint64_t seed;
    synth_count_fn count; /* NULL: synth_count_bytes4 */
    void *count_user;
    /* tokens the caller adds around the prompt (a chat template's turn markers), taken off the
     * budget with max_gen: the templated prompt and max_gen fit target_tokens */
    long long reserve_tokens;
};

/* One generated sample; every string is malloc'd and owned by the sample. */
struct synth_sample {
    char *input, *context;
    char *answers[SYNTH_MAX_ANSWERS];
    size_t n_answers;
    char id[49];                      /* 48 hex digits, like LongBench's _id */
    double depth;                     /* the queried needle (vt: its chain's first line) */
    double depths[SYNTH_MAX_NEEDLES]; /* every needle, in context order */
    size_t n_needles;
    long long tokens;    /* tokens of the prompt (without max_gen) under the counter */
    long long words;     /* LongBench's length: whitespace words of input, context, answers */
    size_t filler_units; /* filler sentences (kv_retrieval: distractor pairs) */
};

/* Generates sample index (< p->n_samples) into *out (synth_sample_release). corpus may be NULL
 * for kv_retrieval. PULSE_OK; PULSE_ERR_INVALID with the reason in err when the target is too
 * small for the task's template, needles and max_gen, or the counter failed; PULSE_ERR_NOMEM. */
int synth_sample_generate(const struct synth_corpus *corpus, const struct synth_params *p,
                          size_t index, struct synth_sample *out, char *err, size_t errlen);
/* Frees the sample's strings and zeroes it. */
void synth_sample_release(struct synth_sample *s);

/* The sample as one LongBench JSON line (no newline), malloc'd: input, context, answers,
 * length, all_classes (null), dataset, language ("en"), _id, then this suite's extra keys
 * (ignored by the loader): depth, depths, tokens, target_tokens. NULL when out of memory. */
char *synth_sample_to_json(const struct synth_sample *s, const struct synth_params *p);

/* Generates samples 0..p->n_samples-1 and writes them to f, one JSON line each. PULSE_OK, or a
 * status from synth_sample_generate, or PULSE_ERR_IO when writing failed; err says why. When
 * tokens is not NULL it receives the min, mean and max prompt tokens. */
int synth_write_jsonl(const struct synth_corpus *corpus, const struct synth_params *p, FILE *f,
                      double tokens[3], char *err, size_t errlen);

#endif
