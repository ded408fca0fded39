/* The synthetic task generator (synth.h): needles, length fitting, LongBench records. */
#include "accuracy/synth.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "accuracy/chat.h"
#include "accuracy/longbench.h"
#include "common.h"
#include "numeric.h"

#define MAX_ATTEMPTS 32
#define NIAH_KEYS 4
#define VT_CHAINS 2
#define VT_HOPS 4
#define MAX_UNITS ((size_t)1 << 28)

static const char *const TASK_NAMES[SYNTH_TASK_COUNT] = {"passkey", "niah_multikey",
                                                         "variable_tracking", "kv_retrieval"};

/* Key words of niah_multikey (RULER draws adjective-noun keys from the wonderwords lists). */
static const char *const ADJ[] = {
    "abundant", "agreeable", "ancient", "bitter",   "brave",    "bright", "calm",    "careful",
    "cheerful", "clever",    "crooked", "curious",  "damp",     "eager",  "elegant", "faint",
    "fancy",    "fierce",    "gentle",  "gigantic", "glossy",   "grumpy", "hollow",  "humble",
    "icy",      "jolly",     "kind",    "lazy",     "lively",   "lucky",  "massive", "mellow",
    "modern",   "narrow",    "nervous", "noisy",    "obedient", "old",    "plain",   "polite",
    "proud",    "quaint",    "quiet",   "rapid",    "rustic",   "scary",  "shiny",   "silent",
    "sleepy",   "smooth",    "sour",    "spicy",    "steep",    "sturdy", "swift",   "tame",
    "tender",   "tidy",      "vast",    "wary",     "wicked",   "witty",  "young",   "zealous"};
static const char *const NOUN[] = {
    "anchor",   "apple",  "badge",   "basket",  "beacon",   "blanket", "bottle",  "bridge",
    "candle",   "canyon", "carpet",  "castle",  "cherry",   "cobweb",  "compass", "cradle",
    "dragon",   "drum",   "feather", "forest",  "fountain", "garden",  "glacier", "hammer",
    "harbor",   "helmet", "island",  "jacket",  "kettle",   "ladder",  "lantern", "magnet",
    "meadow",   "mirror", "needle",  "orchid",  "palace",   "parrot",  "pebble",  "pepper",
    "pillow",   "planet", "pocket",  "puzzle",  "rabbit",   "ribbon",  "saddle",  "shovel",
    "spider",   "statue", "teapot",  "thunder", "tiger",    "tractor", "trumpet", "tunnel",
    "umbrella", "valley", "violin",  "wagon",   "walnut",   "whistle", "window",  "zebra"};

struct rng {
    uint64_t seed, ctr;
};

static uint64_t rng_next(struct rng *r)
{
    return pulse_hash64(r->seed, r->ctr++);
}

static double rng_unit(struct rng *r) /* [0, 1) */
{
    return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

static uint64_t rng_below(struct rng *r, uint64_t n)
{
    return rng_next(r) % n;
}

struct needle {
    char text[128];
    double depth;
    int order; /* generation order: breaks depth ties so that chains keep their order */
    int query; /* the needle whose depth is the sample's depth */
};

/* One sample being generated. */
struct gen {
    const struct synth_corpus *corpus;
    enum synth_task task;
    const struct longbench_task *lt;
    size_t start;     /* first filler sentence */
    uint64_t kv_seed; /* distractor pairs of kv_retrieval */
    struct needle nd[SYNTH_MAX_NEEDLES];
    size_t n_nd;
    char input[64];
    char answers[SYNTH_MAX_ANSWERS][64];
    size_t n_answers;
    char values[SYNTH_MAX_NEEDLES][64]; /* strings that must occur exactly counts[k] times */
    int counts[SYNTH_MAX_NEEDLES];
    size_t n_values;
    char *buf; /* the context */
    size_t len, cap;
    size_t offs[SYNTH_MAX_NEEDLES];
    int nomem;
};

long long synth_count_bytes4(void *user, const char *text, size_t len)
{
    (void)user, (void)text;
    return (long long)((len + 3) / 4);
}

const char *synth_task_name(enum synth_task t)
{
    return (unsigned)t < SYNTH_TASK_COUNT ? TASK_NAMES[t] : NULL;
}

int synth_task_find(const char *name)
{
    for (int t = 0; name && t < SYNTH_TASK_COUNT; t++)
        if (strcmp(TASK_NAMES[t], name) == 0) return t;
    return -1;
}

int synth_task_needs_corpus(enum synth_task t)
{
    return t != SYNTH_KV_RETRIEVAL;
}

/* ---------------------------------------------------------------- needles */

/* Copies src into dst[cap]; the generator's strings are short, so overflowing is a bug. */
static void copy(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    PULSE_CHECK(n < cap, "synth: a generated string overflows its buffer");
    memcpy(dst, src, n + 1);
}

static void add_needle(struct gen *g, double depth, int query, const char *fmt, const char *a,
                       const char *b)
{
    struct needle *n = &g->nd[g->n_nd];
    int w = snprintf(n->text, sizeof n->text, fmt, a, b);
    PULSE_CHECK(w > 0 && (size_t)w < sizeof n->text, "synth: a needle overflows its buffer");
    n->depth = depth, n->order = (int)g->n_nd, n->query = query;
    g->n_nd++;
}

static void add_value(struct gen *g, const char *v, int count)
{
    copy(g->values[g->n_values], sizeof g->values[0], v);
    g->counts[g->n_values++] = count;
}

static void uuid(struct rng *r, char out[37])
{
    uint64_t a = rng_next(r), b = rng_next(r);
    a = (a & ~0xf000ull) | 0x4000ull;                        /* version 4 */
    b = (b & 0x3fffffffffffffffull) | 0x8000000000000000ull; /* RFC 4122 variant */
    snprintf(out, 37, "%08llx-%04llx-%04llx-%04llx-%012llx", (unsigned long long)(a >> 32),
             (unsigned long long)((a >> 16) & 0xffff), (unsigned long long)(a & 0xffff),
             (unsigned long long)(b >> 48), (unsigned long long)(b & 0xffffffffffffull));
}

static void make_passkey(struct gen *g, struct rng *r, double qdepth)
{
    int digits = 5 + (int)rng_below(r, 3);
    unsigned long long lo = 1;
    for (int k = 1; k < digits; k++)
        lo *= 10;
    char v[24];
    snprintf(v, sizeof v, "%llu", lo + (unsigned long long)rng_below(r, 9 * lo));
    add_needle(g, qdepth, 1, "The pass key is %s. Remember it. %s is the pass key.", v, v);
    copy(g->answers[g->n_answers++], sizeof g->answers[0], v);
    add_value(g, v, 2);
}

static void make_niah(struct gen *g, struct rng *r, double qdepth)
{
    char keys[NIAH_KEYS][40], vals[NIAH_KEYS][16];
    size_t q = rng_below(r, NIAH_KEYS);
    for (size_t k = 0; k < NIAH_KEYS; k++) {
        int dup;
        do {
            snprintf(keys[k], sizeof keys[k], "%s-%s", ADJ[rng_below(r, PULSE_ARRAY_LEN(ADJ))],
                     NOUN[rng_below(r, PULSE_ARRAY_LEN(NOUN))]);
            snprintf(vals[k], sizeof vals[k], "%llu",
                     (unsigned long long)(1000000 + rng_below(r, 9000000)));
            dup = 0;
            for (size_t j = 0; j < k; j++)
                dup |= !strcmp(keys[j], keys[k]) || !strcmp(vals[j], vals[k]);
        } while (dup);
        double d = k == q ? qdepth : rng_unit(r);
        add_needle(g, d, k == q, "One of the special magic numbers for %s is: %s.", keys[k],
                   vals[k]);
        add_value(g, vals[k], 1);
        add_value(g, keys[k], 1);
    }
    copy(g->input, sizeof g->input, keys[q]);
    copy(g->answers[g->n_answers++], sizeof g->answers[0], vals[q]);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void make_vt(struct gen *g, struct rng *r)
{
    char names[VT_CHAINS][VT_HOPS + 1][8], vals[VT_CHAINS][8];
    for (int c = 0; c < VT_CHAINS; c++) {
        int dup;
        do {
            snprintf(vals[c], sizeof vals[c], "%llu",
                     (unsigned long long)(10000 + rng_below(r, 90000)));
            dup = c > 0 && !strcmp(vals[c], vals[0]);
        } while (dup);
        for (int h = 0; h <= VT_HOPS; h++) {
            do {
                for (int k = 0; k < 5; k++)
                    names[c][h][k] = (char)('A' + rng_below(r, 26));
                names[c][h][5] = 0;
                dup = 0;
                for (int cc = 0; cc <= c; cc++)
                    for (int hh = 0; hh < (cc == c ? h : VT_HOPS + 1); hh++)
                        dup |= !strcmp(names[cc][hh], names[c][h]);
            } while (dup);
        }
        double d[VT_HOPS + 1];
        for (int h = 0; h <= VT_HOPS; h++)
            d[h] = rng_unit(r);
        qsort(d, VT_HOPS + 1, sizeof d[0], cmp_double);
        add_needle(g, d[0], c == 0, "VAR %s = %s.", names[c][0], vals[c]);
        for (int h = 1; h <= VT_HOPS; h++)
            add_needle(g, d[h], 0, "VAR %s = VAR %s.", names[c][h], names[c][h - 1]);
        add_value(g, vals[c], 1);
        for (int h = 0; h <= VT_HOPS; h++)
            add_value(g, names[c][h], h < VT_HOPS ? 2 : 1);
    }
    copy(g->input, sizeof g->input, vals[0]);
    for (int h = 0; h <= VT_HOPS; h++)
        copy(g->answers[g->n_answers++], sizeof g->answers[0], names[0][h]);
}

static void make_kv(struct gen *g, struct rng *r, double qdepth)
{
    char k[37], v[37];
    uuid(r, k);
    uuid(r, v);
    add_needle(g, qdepth, 1, "\"%s\": \"%s\"", k, v);
    copy(g->input, sizeof g->input, k);
    copy(g->answers[g->n_answers++], sizeof g->answers[0], v);
    add_value(g, k, 1);
    add_value(g, v, 1);
    g->kv_seed = rng_next(r);
}

/* Orders the needles by depth (ties: generation order); insertion sort over a few items. */
static void sort_needles(struct gen *g)
{
    for (size_t i = 1; i < g->n_nd; i++) {
        struct needle x = g->nd[i];
        size_t j = i;
        while (j > 0 && (g->nd[j - 1].depth > x.depth ||
                         (g->nd[j - 1].depth == x.depth && g->nd[j - 1].order > x.order))) {
            g->nd[j] = g->nd[j - 1];
            j--;
        }
        g->nd[j] = x;
    }
}

/* ---------------------------------------------------------------- the context */

static void put(struct gen *g, const char *s, size_t n)
{
    if (g->len + n + 1 > g->cap) {
        size_t cap = g->cap ? g->cap : 4096;
        while (cap < g->len + n + 1)
            cap *= 2;
        char *b = realloc(g->buf, cap);
        if (!b) {
            g->nomem = 1;
            return;
        }
        g->buf = b, g->cap = cap;
    }
    memcpy(g->buf + g->len, s, n);
    g->len += n;
    g->buf[g->len] = 0;
}

/* Filler unit i: a corpus sentence or a distractor pair. */
static const char *unit(struct gen *g, size_t i, char tmp[128], size_t *len, int *para)
{
    if (g->task == SYNTH_KV_RETRIEVAL) {
        struct rng r = {pulse_hash64(g->kv_seed, i), 0};
        char k[37], v[37];
        uuid(&r, k);
        uuid(&r, v);
        *len = (size_t)snprintf(tmp, 128, "\"%s\": \"%s\"", k, v);
        *para = 0;
        return tmp;
    }
    size_t n = synth_corpus_count(g->corpus);
    return synth_corpus_sentence(g->corpus, (g->start + i) % n, len, para);
}

/* Builds the context with n filler units and the needles at their depths. */
static void build(struct gen *g, size_t n)
{
    int kv = g->task == SYNTH_KV_RETRIEVAL;
    size_t k = 0, items = 0;
    g->len = 0;
    if (kv) put(g, "{", 1);
    for (size_t s = 0; s <= n; s++) {
        while (k < g->n_nd &&
               (size_t)fmin(floor(g->nd[k].depth * (double)n + 0.5), (double)n) == s) {
            if (items++) put(g, kv ? ", " : " ", kv ? 2 : 1);
            g->offs[k] = g->len;
            put(g, g->nd[k].text, strlen(g->nd[k].text));
            k++;
        }
        if (s == n) break;
        char tmp[128];
        size_t len;
        int para;
        const char *u = unit(g, s, tmp, &len, &para);
        if (items++) put(g, kv ? ", " : para ? "\n" : " ", kv ? 2 : 1);
        put(g, u, len);
    }
    if (kv) put(g, "}", 1);
}

/* Tokens of the prompt with n filler units; negative on failure (reason in err). */
static long long prompt_tokens(struct gen *g, const struct synth_params *p, size_t n, char *err,
                               size_t errlen)
{
    build(g, n);
    if (g->nomem) {
        snprintf(err, errlen, "out of memory building a %zu-byte context", g->len);
        return PULSE_ERR_NOMEM;
    }
    char *prompt = longbench_fill_task(g->lt, g->buf, g->input, CHAT_NONE, err, errlen);
    if (!prompt) return PULSE_ERR_NOMEM;
    synth_count_fn count = p->count ? p->count : synth_count_bytes4;
    long long t = count(p->count_user, prompt, strlen(prompt));
    free(prompt);
    if (t < 0) {
        snprintf(err, errlen, "the token counter failed (%lld)", t);
        return PULSE_ERR_INVALID;
    }
    return t;
}

/* The largest filler count whose prompt fits the budget; the context is left built with it. */
static long long fit(struct gen *g, const struct synth_params *p, size_t *units, char *err,
                     size_t errlen)
{
    long long budget = p->target_tokens - g->lt->max_gen - p->reserve_tokens;
    long long t = prompt_tokens(g, p, 0, err, errlen);
    if (t < 0) return t;
    if (t > budget) {
        snprintf(err, errlen,
                 "length %lld is too small for %s: its template and needles take %lld tokens, "
                 "it generates up to %d and the chat template takes %lld",
                 p->target_tokens, TASK_NAMES[g->task], t, g->lt->max_gen, p->reserve_tokens);
        return PULSE_ERR_INVALID;
    }
    size_t lo = 0, hi = 1; /* prompt(lo) fits, prompt(hi) does not */
    for (;;) {
        if ((t = prompt_tokens(g, p, hi, err, errlen)) < 0) return t;
        if (t > budget) break;
        if (g->len / 32 > (size_t)p->target_tokens) { /* a counter that never grows */
            snprintf(err, errlen,
                     "the token counter gives %lld tokens for %zu bytes: over 32 bytes a token", t,
                     g->len);
            return PULSE_ERR_INVALID;
        }
        lo = hi;
        if (hi >= MAX_UNITS) break;
        hi *= 2;
    }
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if ((t = prompt_tokens(g, p, mid, err, errlen)) < 0) return t;
        if (t <= budget)
            lo = mid;
        else
            hi = mid;
    }
    *units = lo;
    return prompt_tokens(g, p, lo, err, errlen);
}

static size_t occurrences(const char *hay, const char *s)
{
    size_t n = 0, sl = strlen(s);
    for (const char *q = strstr(hay, s); q; q = strstr(q + sl, s))
        n++;
    return n;
}

static long long count_words(const char *s)
{
    long long n = 0;
    int in = 0;
    for (; *s; s++) {
        int sp = *s == ' ' || (*s >= '\t' && *s <= '\r');
        n += !sp && !in;
        in = !sp;
    }
    return n;
}

/* ---------------------------------------------------------------- samples */

void synth_sample_release(struct synth_sample *s)
{
    free(s->input);
    free(s->context);
    for (size_t k = 0; k < s->n_answers; k++)
        free(s->answers[k]);
    memset(s, 0, sizeof *s);
}

/* One attempt: draws needles, fits the length; 1 when a value collided with the filler. */
static int attempt(struct gen *g, const struct synth_params *p, size_t index, uint64_t seed,
                   size_t *units, long long *tokens, char *err, size_t errlen)
{
    struct rng r = {seed, 0};
    double qdepth = ((double)index + rng_unit(&r)) / (double)p->n_samples;
    size_t nc = synth_corpus_count(g->corpus);
    g->start = nc ? (size_t)rng_below(&r, nc) : 0;
    g->n_nd = g->n_answers = g->n_values = 0;
    g->input[0] = 0;
    switch (g->task) {
    case SYNTH_PASSKEY:
        make_passkey(g, &r, qdepth);
        break;
    case SYNTH_NIAH_MULTIKEY:
        make_niah(g, &r, qdepth);
        break;
    case SYNTH_VARIABLE_TRACKING:
        make_vt(g, &r);
        break;
    default:
        make_kv(g, &r, qdepth);
        break;
    }
    sort_needles(g);
    long long t = fit(g, p, units, err, errlen);
    if (t < 0) return (int)t;
    *tokens = t;
    for (size_t k = 0; k < g->n_values; k++)
        if (occurrences(g->buf, g->values[k]) != (size_t)g->counts[k]) return 1;
    return 0;
}

static int fill_sample(struct gen *g, uint64_t seed, size_t units, long long tokens,
                       struct synth_sample *out)
{
    memset(out, 0, sizeof *out);
    out->input = strdup(g->input);
    out->context = malloc(g->len + 1);
    if (!out->input || !out->context) goto nomem;
    memcpy(out->context, g->buf, g->len + 1);
    out->words = count_words(out->input) + count_words(out->context);
    for (size_t k = 0; k < g->n_answers; k++) {
        if (!(out->answers[k] = strdup(g->answers[k]))) goto nomem;
        out->n_answers = k + 1;
        out->words += count_words(g->answers[k]);
    }
    for (size_t k = 0; k < g->n_nd; k++) {
        out->depths[k] = g->len ? (double)g->offs[k] / (double)g->len : 0.0;
        if (g->nd[k].query) out->depth = out->depths[k];
    }
    out->n_needles = g->n_nd;
    for (int k = 0; k < 3; k++)
        snprintf(out->id + 16 * k, 17, "%016llx",
                 (unsigned long long)pulse_hash64(seed, 1000 + (uint64_t)k));
    out->tokens = tokens;
    out->filler_units = units;
    return PULSE_OK;
nomem:
    synth_sample_release(out);
    return PULSE_ERR_NOMEM;
}

int synth_sample_generate(const struct synth_corpus *corpus, const struct synth_params *p,
                          size_t index, struct synth_sample *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if ((unsigned)p->task >= SYNTH_TASK_COUNT || p->n_samples == 0 || index >= p->n_samples ||
        (synth_task_needs_corpus(p->task) && synth_corpus_count(corpus) == 0)) {
        snprintf(err, errlen, "synth: bad parameters (task %d, sample %zu of %zu, corpus %s)",
                 (int)p->task, index, p->n_samples, corpus ? "given" : "missing");
        return PULSE_ERR_INVALID;
    }
    struct gen g = {.corpus = synth_task_needs_corpus(p->task) ? corpus : NULL,
                    .task = p->task,
                    .lt = longbench_task_find(TASK_NAMES[p->task])};
    PULSE_CHECK(g.lt != NULL, "longbench.c lacks a synthetic task");
    uint64_t base = pulse_seed_mix(p->seed, (uint64_t)p->task + 1, (uint64_t)p->target_tokens);
    int rc = 1;
    size_t units = 0;
    long long tokens = 0;
    uint64_t seed = 0;
    for (uint64_t a = 0; a < MAX_ATTEMPTS && rc == 1; a++) {
        seed = pulse_seed_mix(base, index, a);
        rc = attempt(&g, p, index, seed, &units, &tokens, err, errlen);
    }
    if (rc == 1) {
        snprintf(err, errlen, "%s sample %zu: every drawn value also occurs in the filler",
                 TASK_NAMES[p->task], index);
        rc = PULSE_ERR_INVALID;
    }
    if (rc == PULSE_OK) rc = fill_sample(&g, seed, units, tokens, out);
    if (rc == PULSE_ERR_NOMEM && !g.nomem) snprintf(err, errlen, "out of memory");
    free(g.buf);
    return rc;
}

/* ---------------------------------------------------------------- records */

static double round4(double x)
{
    return round(x * 1e4) / 1e4;
}

char *synth_sample_to_json(const struct synth_sample *s, const struct synth_params *p)
{
    json_t *o = json_object(), *ans = json_array(), *dep = json_array();
    int bad = !o || !ans || !dep;
    for (size_t k = 0; !bad && k < s->n_answers; k++)
        bad |= json_array_append_new(ans, json_string(s->answers[k]));
    for (size_t k = 0; !bad && k < s->n_needles; k++)
        bad |= json_array_append_new(dep, json_real(round4(s->depths[k])));
    char *line = NULL;
    if (!bad) {
        bad |= json_object_set_new(o, "input", json_string(s->input));
        bad |= json_object_set_new(o, "context", json_string(s->context));
        bad |= json_object_set(o, "answers", ans);
        bad |= json_object_set_new(o, "length", json_integer(s->words));
        bad |= json_object_set_new(o, "all_classes", json_null());
        bad |= json_object_set_new(o, "dataset", json_string(TASK_NAMES[p->task]));
        bad |= json_object_set_new(o, "language", json_string("en"));
        bad |= json_object_set_new(o, "_id", json_string(s->id));
        bad |= json_object_set_new(o, "depth", json_real(round4(s->depth)));
        bad |= json_object_set(o, "depths", dep);
        bad |= json_object_set_new(o, "tokens", json_integer(s->tokens));
        bad |= json_object_set_new(o, "target_tokens", json_integer(p->target_tokens));
    }
    if (!bad) line = json_dumps(o, JSON_REAL_PRECISION(6));
    json_decref(ans);
    json_decref(dep);
    json_decref(o);
    return line;
}

int synth_write_jsonl(const struct synth_corpus *corpus, const struct synth_params *p, FILE *f,
                      double tokens[3], char *err, size_t errlen)
{
    double lo = INFINITY, hi = -INFINITY, sum = 0;
    if (tokens) tokens[0] = tokens[1] = tokens[2] = 0;
    for (size_t i = 0; i < p->n_samples; i++) {
        struct synth_sample s;
        int rc = synth_sample_generate(corpus, p, i, &s, err, errlen);
        if (rc != PULSE_OK) return rc;
        char *line = synth_sample_to_json(&s, p);
        lo = fmin(lo, (double)s.tokens), hi = fmax(hi, (double)s.tokens);
        sum += (double)s.tokens;
        synth_sample_release(&s);
        if (!line) {
            snprintf(err, errlen, "out of memory writing sample %zu", i);
            return PULSE_ERR_NOMEM;
        }
        int bad = fputs(line, f) < 0 || fputc('\n', f) == EOF;
        free(line);
        if (bad) {
            snprintf(err, errlen, "write failed at sample %zu", i);
            return PULSE_ERR_IO;
        }
    }
    if (tokens && p->n_samples)
        tokens[0] = lo, tokens[1] = sum / (double)p->n_samples, tokens[2] = hi;
    return PULSE_OK;
}
