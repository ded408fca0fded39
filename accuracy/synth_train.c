/* Training records (synth_train.h). */
#include "accuracy/synth_train.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "accuracy/chat.h"
#include "accuracy/longbench.h"
#include "common.h"
#include "numeric.h"

#define TEXT_STREAM 0x74657874ull /* "text": apart from the tasks' streams (task + 1) */

char *synth_train_completion(const struct synth_sample *s)
{
    size_t n = 3;
    for (size_t k = 0; k < s->n_answers; k++)
        n += strlen(s->answers[k]) + 2;
    char *c = malloc(n), *w = c;
    if (!c) return NULL;
    *w++ = ' ';
    for (size_t k = 0; k < s->n_answers; k++) {
        if (k) *w++ = ',', *w++ = ' ';
        memcpy(w, s->answers[k], strlen(s->answers[k]));
        w += strlen(s->answers[k]);
    }
    *w++ = '.';
    *w = 0;
    return c;
}

static const char *split_name(uint64_t seed)
{
    return seed & SYNTH_TRAIN_SEED ? "train" : "test";
}

/* The record's common head: task, split, seed, index, target_tokens, tokens. */
static json_t *record_head(const char *task, const struct synth_params *p, size_t index,
                           long long tokens)
{
    return json_pack("{s:s,s:s,s:I,s:I,s:I,s:I}", "task", task, "split", split_name(p->seed),
                     "seed", (json_int_t)(p->seed & ~SYNTH_TRAIN_SEED), "index", (json_int_t)index,
                     "target_tokens", (json_int_t)p->target_tokens, "tokens", (json_int_t)tokens);
}

static char *dump(json_t *o, char *err, size_t errlen)
{
    char *line = o ? json_dumps(o, JSON_REAL_PRECISION(6)) : NULL;
    json_decref(o);
    if (!line) snprintf(err, errlen, "out of memory writing a training record");
    return line;
}

char *synth_train_record(const struct synth_sample *s, const struct synth_params *p, size_t index,
                         int chat, char *err, size_t errlen)
{
    const struct longbench_task *lt = longbench_task_find(synth_task_name(p->task));
    PULSE_CHECK(lt != NULL, "longbench.c lacks a synthetic task");
    char *prompt = longbench_fill_task(lt, s->context, s->input, chat, err, errlen);
    char *completion = synth_train_completion(s);
    json_t *o = record_head(lt->name, p, index, s->tokens), *ans = json_array();
    int bad = !prompt || !completion || !o || !ans;
    for (size_t k = 0; !bad && k < s->n_answers; k++)
        bad |= json_array_append_new(ans, json_string(s->answers[k]));
    if (!bad) {
        bad |= json_object_set_new(o, "chat", json_string(chat_template_name(chat)));
        bad |= json_object_set_new(o, "prompt", json_string(prompt));
        bad |= json_object_set_new(o, "completion", json_string(completion));
        bad |= json_object_set(o, "answers", ans);
        bad |= json_object_set_new(o, "depth", json_real(round(s->depth * 1e4) / 1e4));
        bad |= json_object_set_new(o, "_id", json_string(s->id));
    }
    json_decref(ans);
    free(prompt);
    free(completion);
    if (bad) {
        json_decref(o);
        snprintf(err, errlen, "out of memory writing a training record");
        return NULL;
    }
    return dump(o, err, errlen);
}

/* ---------------------------------------------------------------- text */

/* Room for need bytes in *buf (*cap of them now); 0 or -1 when out of memory. */
static int reserve(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 4096;
    while (nc < need)
        nc *= 2;
    char *b = realloc(*buf, nc);
    if (!b) return -1;
    *buf = b, *cap = nc;
    return 0;
}

/* Sentences start, start + 1, ... (n of them, wrapping) joined as filler, into *buf. */
static int join(const struct synth_corpus *c, size_t start, size_t n, char **buf, size_t *cap,
                size_t *len)
{
    size_t at = 0;
    if (reserve(buf, cap, 1)) return PULSE_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        size_t sl = 0;
        int para = 0;
        const char *s = synth_corpus_sentence(c, (start + i) % synth_corpus_count(c), &sl, &para);
        PULSE_CHECK(s != NULL, "synth_train: a corpus sentence out of range");
        if (reserve(buf, cap, at + sl + 2)) return PULSE_ERR_NOMEM; /* separator, NUL */
        if (i) (*buf)[at++] = para ? '\n' : ' ';
        memcpy(*buf + at, s, sl);
        at += sl;
    }
    (*buf)[at] = 0;
    *len = at;
    return PULSE_OK;
}

static size_t gcd(size_t a, size_t b)
{
    while (b) {
        const size_t t = a % b;
        a = b, b = t;
    }
    return a;
}

/* One text being fitted: its sentences from `start`, the buffer, the counter. */
struct text_fit {
    const struct synth_corpus *c;
    const struct synth_params *p;
    size_t start;
    char *buf;
    size_t cap, len;
};

/* Tokens of the text of n sentences (left built in f->buf); negative on failure. */
static long long measure(struct text_fit *f, size_t n)
{
    if (join(f->c, f->start, n, &f->buf, &f->cap, &f->len) != PULSE_OK) return PULSE_ERR_NOMEM;
    synth_count_fn count = f->p->count ? f->p->count : synth_count_bytes4;
    const long long t = count(f->p->count_user, f->buf, f->len);
    return t < 0 ? PULSE_ERR_INVALID : t;
}

char *synth_text_record(const struct synth_corpus *corpus, const struct synth_params *p,
                        size_t index, long long *tokens, char *err, size_t errlen)
{
    const size_t nc = synth_corpus_count(corpus);
    if (!nc || p->target_tokens < 16) {
        snprintf(err, errlen, "text records need a corpus and a length of 16 tokens or more");
        return NULL;
    }
    const uint64_t stream = pulse_seed_mix(p->seed, TEXT_STREAM, (uint64_t)p->target_tokens);
    /* record i starts at first + i * stride (mod the corpus), the stride coprime with the
     * sentence count: the first nc records of a stream all start at different sentences */
    size_t stride = nc / 2 + 1;
    while (gcd(stride, nc) != 1)
        stride++;
    const size_t first = (size_t)(pulse_hash64(stream, 0) % nc);
    const size_t start = (first + (index % nc) * (stride % nc)) % nc; /* nc < 2^32: no overflow */
    struct text_fit f = {corpus, p, start, NULL, 0, 0};
    /* the most sentences (at least one, at most the corpus) whose text fits: doubling, then
     * bisection between lo (fits, or is the first sentence) and hi (does not fit) */
    size_t lo = 1, hi = 2;
    long long t_lo = measure(&f, 1), t = t_lo;
    while (t_lo >= 0 && t_lo <= p->target_tokens && lo < nc) {
        if (hi > nc) hi = nc;
        if ((t = measure(&f, hi)) < 0 || t > p->target_tokens) break;
        lo = hi, t_lo = t, hi *= 2;
    }
    if (hi > nc) hi = nc + 1;
    while (t >= 0 && hi - lo > 1) {
        const size_t mid = lo + (hi - lo) / 2;
        if ((t = measure(&f, mid)) >= 0 && t <= p->target_tokens)
            lo = mid, t_lo = t;
        else if (t >= 0)
            hi = mid;
    }
    json_t *o = NULL;
    if (t_lo >= 0 && t >= 0 && (t = measure(&f, lo)) >= 0)
        if ((o = record_head("text", p, index, t_lo)) &&
            json_object_set_new(o, "text", json_string(f.buf)))
            json_decref(o), o = NULL;
    free(f.buf);
    if (t_lo < 0 || t < 0) {
        snprintf(err, errlen,
                 t_lo == PULSE_ERR_NOMEM || t == PULSE_ERR_NOMEM
                     ? "out of memory building a text record"
                     : "the token counter failed");
        json_decref(o);
        return NULL;
    }
    *tokens = t_lo;
    return dump(o, err, errlen);
}
