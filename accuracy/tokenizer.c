/* SentencePiece BPE tokenizer over a GGUF vocabulary; see tokenizer.h for the algorithm. A
 * GGUF of model "gpt2" gets the byte-level BPE of accuracy/bpe.h behind the same calls. */
#include "accuracy/tokenizer.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "accuracy/bpe.h"
#include "common.h"

#define SPACE_ESC "\xe2\x96\x81" /* U+2581, what ' ' becomes */

/* Every prefix of a set of pieces, hashed (a trie in a hash table): matching walks the text one
 * byte at a time while the prefix is in the table and keeps the longest full piece seen. */
struct prefix {
    const char *p; /* into the arena; NULL: empty slot */
    uint32_t len;
    int32_t id; /* the piece this prefix completes, or -1 */
};

struct matcher {
    uint8_t first[256];
    struct prefix *tab;
    uint64_t mask;
};

struct tokenizer {
    struct tokenizer_info info;
    char *arena;   /* every piece, NUL-terminated, in matching spelling */
    uint64_t *off; /* piece i starts at arena + off[i] */
    uint32_t *len; /* and has len[i] bytes */
    float *score;  /* per piece */
    uint8_t *type; /* per piece, enum tokenizer_token_type */
    int32_t *slot; /* open-addressing hash piece -> id; -1 empty */
    uint64_t mask; /* slots - 1 */
    int32_t byte_id[256];
    struct matcher ctl; /* control and unknown pieces, matched in the raw text */
    struct matcher ud;  /* user-defined pieces, matched in the escaped text */
    struct bpe *bpe;    /* model "gpt2": the byte-level BPE does everything; the rest unused */
};

static void fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!err || !errlen) return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

#define FNV_INIT 1469598103934665603ull
#define FNV_STEP(h, c) (((h) ^ (uint8_t)(c)) * 1099511628211ull)
#define FNV_FINISH(h) ((h) ^ ((h) >> 29))

static uint64_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = FNV_INIT; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = FNV_STEP(h, p[i]);
    return FNV_FINISH(h);
}

int32_t tokenizer_find(const struct tokenizer *t, const char *piece, size_t n)
{
    if (t->bpe) return bpe_find(t->bpe, piece, n);
    for (uint64_t i = hash_bytes(piece, n) & t->mask;; i = (i + 1) & t->mask) {
        int32_t id = t->slot[i];
        if (id < 0) return -1;
        if (t->len[id] == n && memcmp(t->arena + t->off[id], piece, n) == 0) return id;
    }
}

/* Inserts id unless its piece is already there (the first id of a duplicate piece wins). */
static void hash_insert(struct tokenizer *t, int32_t id)
{
    const char *p = t->arena + t->off[id];
    for (uint64_t i = hash_bytes(p, t->len[id]) & t->mask;; i = (i + 1) & t->mask) {
        int32_t o = t->slot[i];
        if (o < 0) {
            t->slot[i] = id;
            return;
        }
        if (t->len[o] == t->len[id] && memcmp(t->arena + t->off[o], p, t->len[id]) == 0) return;
    }
}

/* ---- loading ---- */

/* Reads an optional integer key into *out (left as is when absent); an id must be in range. */
static int get_opt_int(const struct gguf_file *g, const char *key, int64_t lo, int64_t hi,
                       int64_t *out, char *err, size_t errlen)
{
    int64_t v;
    if (!gguf_find_kv(g, key)) return PULSE_OK;
    if (gguf_get_int(g, key, &v, err, errlen)) return PULSE_ERR_INVALID;
    if (v < lo || v > hi) {
        fail(err, errlen, "%s: %s = %lld is out of range [%lld, %lld]", gguf_label(g), key,
             (long long)v, (long long)lo, (long long)hi);
        return PULSE_ERR_INVALID;
    }
    *out = v;
    return PULSE_OK;
}

static int read_info(const struct gguf_file *g, struct tokenizer_info *info, char *err,
                     size_t errlen)
{
    static const char *const keys[4] = {
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"};
    static const char *const flags[3] = {"tokenizer.ggml.add_bos_token",
                                         "tokenizer.ggml.add_eos_token",
                                         "tokenizer.ggml.add_space_prefix"};
    int32_t *ids[4] = {&info->bos_id, &info->eos_id, &info->unk_id, &info->pad_id};
    int *fl[3] = {&info->add_bos, &info->add_eos, &info->add_space_prefix};
    int64_t dflt[3] = {1, 0, 1};
    for (int i = 0; i < 4; i++) {
        int64_t v = -1;
        if (get_opt_int(g, keys[i], 0, info->n_vocab - 1, &v, err, errlen))
            return PULSE_ERR_INVALID;
        *ids[i] = (int32_t)v;
    }
    for (int i = 0; i < 3; i++) {
        if (get_opt_int(g, flags[i], 0, 1, &dflt[i], err, errlen)) return PULSE_ERR_INVALID;
        *fl[i] = (int)dflt[i];
    }
    return PULSE_OK;
}

/* Bytes piece i takes in matching spelling: user-defined pieces get ' ' back as U+2581. */
static size_t spelled_len(struct gguf_str s, int type)
{
    size_t n = s.len;
    if (type == TOKENIZER_USER_DEFINED)
        for (uint64_t k = 0; k < s.len; k++)
            n += s.ptr[k] == ' ' ? 2 : 0;
    return n;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                  : -1;
}

/* The byte a piece spelled <0xNN> stands for, or -1. */
static int parse_byte_piece(const char *p, size_t n)
{
    if (n != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>') return -1;
    int hi = hex_digit(p[3]), lo = hex_digit(p[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/* The slot of prefix (p, n) with hash h: the one holding it, or the empty one it would take. */
static struct prefix *prefix_slot(const struct matcher *m, const char *p, uint32_t n, uint64_t h)
{
    for (uint64_t i = h & m->mask;; i = (i + 1) & m->mask) {
        struct prefix *e = &m->tab[i];
        if (!e->p || (e->len == n && memcmp(e->p, p, n) == 0)) return e;
    }
}

static int matcher_build(struct matcher *m, const struct tokenizer *t, int want_a, int want_b)
{
    uint64_t total = 0, slots = 16;
    for (int32_t i = 0; i < t->info.n_vocab; i++)
        if (t->type[i] == want_a || t->type[i] == want_b) total += t->len[i];
    while (slots < 2 * total)
        slots *= 2;
    m->tab = calloc(slots, sizeof *m->tab);
    if (!m->tab) return PULSE_ERR_NOMEM;
    m->mask = slots - 1;
    for (int32_t i = 0; i < t->info.n_vocab; i++) {
        if ((t->type[i] != want_a && t->type[i] != want_b) || t->len[i] == 0) continue;
        if (tokenizer_find(t, t->arena + t->off[i], t->len[i]) != i) continue; /* duplicate */
        const char *p = t->arena + t->off[i];
        uint64_t h = FNV_INIT;
        m->first[(uint8_t)p[0]] = 1;
        for (uint32_t l = 1; l <= t->len[i]; l++) {
            h = FNV_STEP(h, p[l - 1]);
            struct prefix *e = prefix_slot(m, p, l, FNV_FINISH(h));
            if (!e->p) *e = (struct prefix){p, l, -1};
            if (l == t->len[i]) e->id = i;
        }
    }
    return PULSE_OK;
}

/* Copies the pieces, types and scores into t (arrays already allocated). */
static int load_pieces(struct tokenizer *t, const struct gguf_file *g, const struct gguf_array *tok,
                       const struct gguf_array *sc, const struct gguf_array *ty, char *err,
                       size_t errlen)
{
    const char *name = gguf_label(g);
    size_t total = 0;
    for (int32_t i = 0; i < t->info.n_vocab; i++) {
        int64_t v = TOKENIZER_NORMAL;
        double s = 0.0;
        if (ty && (gguf_array_get_int(ty, (uint64_t)i, &v) || v < 1 || v > 6)) {
            fail(err, errlen, "%s: tokenizer.ggml.token_type[%d] is not a type in 1..6", name, i);
            return PULSE_ERR_INVALID;
        }
        if (sc && gguf_array_get_float(sc, (uint64_t)i, &s)) {
            fail(err, errlen, "%s: tokenizer.ggml.scores[%d] is not a number", name, i);
            return PULSE_ERR_INVALID;
        }
        t->type[i] = (uint8_t)v;
        t->score[i] = (float)s;
        size_t n = spelled_len(tok->strs[i], (int)v);
        if (n > UINT32_MAX / 2) {
            fail(err, errlen, "%s: tokenizer.ggml.tokens[%d] is too long", name, i);
            return PULSE_ERR_INVALID;
        }
        t->off[i] = total;
        t->len[i] = (uint32_t)n;
        total += n + 1;
    }
    t->arena = malloc(total ? total : 1);
    if (!t->arena) return PULSE_ERR_NOMEM;
    for (int32_t i = 0; i < t->info.n_vocab; i++) {
        struct gguf_str s = tok->strs[i];
        char *d = t->arena + t->off[i];
        for (uint64_t k = 0; k < s.len; k++) {
            if (s.ptr[k] == ' ' && t->type[i] == TOKENIZER_USER_DEFINED) {
                memcpy(d, SPACE_ESC, 3);
                d += 3;
            } else {
                *d++ = s.ptr[k];
            }
        }
        *d = 0;
        if (t->type[i] == TOKENIZER_BYTE) {
            int b = parse_byte_piece(t->arena + t->off[i], t->len[i]);
            if (b < 0) {
                fail(err, errlen, "%s: tokenizer.ggml.tokens[%d] has type byte but is not <0xNN>",
                     name, i);
                return PULSE_ERR_INVALID;
            }
            if (t->byte_id[b] < 0) t->byte_id[b] = i;
        }
    }
    return PULSE_OK;
}

/* Fetches an optional per-token array and checks its type and length. */
static int get_per_token(const struct gguf_file *g, const char *key, int64_t n, int numeric_only,
                         struct gguf_array *a, int *present, char *err, size_t errlen)
{
    *present = gguf_find_kv(g, key) != NULL;
    if (!*present) return PULSE_OK;
    if (gguf_get_array(g, key, a, err, errlen)) return PULSE_ERR_INVALID;
    if ((int64_t)a->n != n ||
        (numeric_only && (a->type == GGUF_TYPE_STRING || a->type == GGUF_TYPE_ARRAY))) {
        fail(err, errlen, "%s: %s has %llu elements of type %s, expected %lld numbers",
             gguf_label(g), key, (unsigned long long)a->n, gguf_type_name(a->type), (long long)n);
        return PULSE_ERR_INVALID;
    }
    return PULSE_OK;
}

/* Model "gpt2": the byte-level BPE (bpe.h) of Qwen (tokenizer.ggml.pre "qwen2") and Llama 3
 * ("llama-bpe"): tokens in GPT-2's byte-level spelling, their ids their ranks (as in every
 * vocabulary converted from tiktoken); control and user-defined tokens are special tokens,
 * matched anywhere in the text. */
static int load_gpt2(const struct gguf_file *g, const struct gguf_array *tok, struct tokenizer *t,
                     char *err, size_t errlen)
{
    const char *name = gguf_label(g);
    struct gguf_str pre;
    struct gguf_array ty;
    int has_ty;
    if (gguf_get_str(g, "tokenizer.ggml.pre", &pre, err, errlen)) return PULSE_ERR_INVALID;
    enum bpe_pattern pat;
    if (pre.len == 5 && !memcmp(pre.ptr, "qwen2", 5)) {
        pat = BPE_PATTERN_QWEN;
    } else if ((pre.len == 9 && !memcmp(pre.ptr, "llama-bpe", 9)) ||
               (pre.len == 6 && !memcmp(pre.ptr, "llama3", 6))) {
        pat = BPE_PATTERN_LLAMA3;
    } else {
        fail(err, errlen,
             "%s: tokenizer.ggml.pre is \"%.*s\"; the byte-level BPE reads \"qwen2\" and "
             "\"llama-bpe\"",
             name, (int)PULSE_MIN(pre.len, 64), pre.ptr);
        return PULSE_ERR_INVALID;
    }
    if (get_per_token(g, "tokenizer.ggml.token_type", (int64_t)tok->n, 1, &ty, &has_ty, err,
                      errlen))
        return PULSE_ERR_INVALID;
    t->info.n_vocab = (int32_t)tok->n;
    int rc = read_info(g, &t->info, err, errlen);
    if (rc != PULSE_OK) return rc;
    if (!gguf_find_kv(g, "tokenizer.ggml.add_bos_token")) t->info.add_bos = 0;
    t->info.add_space_prefix = 0;
    size_t bytes = 0;
    for (uint64_t i = 0; i < tok->n; i++)
        bytes += tok->strs[i].len + 1;
    struct bpe_token *toks = malloc(sizeof *toks * tok->n);
    struct bpe_special *sp = malloc(sizeof *sp * tok->n);
    char *arena = malloc(bytes ? bytes : 1);
    rc = PULSE_ERR_NOMEM;
    if (!toks || !sp || !arena) {
        fail(err, errlen, "%s: out of memory building the tokenizer", name);
        goto out;
    }
    size_t nt = 0, at = 0;
    int nsp = 0;
    rc = PULSE_ERR_INVALID;
    for (uint64_t i = 0; i < tok->n; i++) {
        const struct gguf_str s = tok->strs[i];
        int64_t type = TOKENIZER_NORMAL;
        if (has_ty && gguf_array_get_int(&ty, i, &type)) {
            fail(err, errlen, "%s: tokenizer.ggml.token_type[%llu] is not a number", name,
                 (unsigned long long)i);
            goto out;
        }
        char *d = arena + at;
        if (type == TOKENIZER_CONTROL || type == TOKENIZER_USER_DEFINED) { /* as written */
            memcpy(d, s.ptr, s.len);
            d[s.len] = 0;
            sp[nsp++] = (struct bpe_special){d, (int32_t)i};
            at += s.len + 1;
            continue;
        }
        const long nb = bpe_bytelevel_decode(s.ptr, s.len, (unsigned char *)d);
        if (nb <= 0) {
            fail(err, errlen,
                 "%s: tokenizer.ggml.tokens[%llu] is not in GPT-2's byte-level spelling", name,
                 (unsigned long long)i);
            goto out;
        }
        toks[nt++] = (struct bpe_token){(const unsigned char *)d, (size_t)nb, (int32_t)i};
        at += (size_t)nb;
    }
    rc = bpe_create(name, toks, nt, pat, sp, nsp, &t->bpe, err, errlen) ? PULSE_ERR_INVALID
                                                                          : PULSE_OK;
out:
    free(toks);
    free(sp);
    free(arena);
    return rc;
}

int tokenizer_load(const struct gguf_file *g, struct tokenizer **out, char *err, size_t errlen)
{
    struct gguf_str model;
    struct gguf_array tok, sc, ty;
    int has_sc, has_ty, rc;
    const char *name = gguf_label(g);
    *out = NULL;
    if (gguf_get_str(g, "tokenizer.ggml.model", &model, err, errlen)) return PULSE_ERR_INVALID;
    const int gpt2 = model.len == 4 && memcmp(model.ptr, "gpt2", 4) == 0;
    if (!gpt2 && (model.len != 5 || memcmp(model.ptr, "llama", 5) != 0)) {
        fail(err, errlen,
             "%s: tokenizer.ggml.model is \"%.*s\": \"llama\" (SentencePiece) and \"gpt2\" "
             "(byte-level BPE) are supported",
             name, (int)PULSE_MIN(model.len, 64), model.ptr);
        return PULSE_ERR_INVALID;
    }
    if (gguf_get_array(g, "tokenizer.ggml.tokens", &tok, err, errlen)) return PULSE_ERR_INVALID;
    if (tok.type != GGUF_TYPE_STRING || tok.n == 0 || tok.n > INT32_MAX / 4) {
        fail(err, errlen,
             "%s: tokenizer.ggml.tokens must be a non-empty array of strings (has "
             "%llu of type %s)",
             name, (unsigned long long)tok.n, gguf_type_name(tok.type));
        return PULSE_ERR_INVALID;
    }
    if (gpt2) {
        struct tokenizer *t = calloc(1, sizeof *t);
        if (!t) return PULSE_ERR_NOMEM;
        rc = load_gpt2(g, &tok, t, err, errlen);
        if (rc != PULSE_OK) {
            tokenizer_free(t);
            return rc;
        }
        *out = t;
        return PULSE_OK;
    }
    if (get_per_token(g, "tokenizer.ggml.scores", (int64_t)tok.n, 1, &sc, &has_sc, err, errlen) ||
        get_per_token(g, "tokenizer.ggml.token_type", (int64_t)tok.n, 1, &ty, &has_ty, err, errlen))
        return PULSE_ERR_INVALID;

    struct tokenizer *t = calloc(1, sizeof *t);
    if (!t) return PULSE_ERR_NOMEM;
    t->info.n_vocab = (int32_t)tok.n;
    size_t n = tok.n, slots = 16;
    while (slots < 2 * n)
        slots *= 2;
    t->mask = slots - 1;
    t->off = malloc(n * sizeof *t->off);
    t->len = malloc(n * sizeof *t->len);
    t->score = malloc(n * sizeof *t->score);
    t->type = malloc(n);
    t->slot = malloc(slots * sizeof *t->slot);
    rc = PULSE_ERR_NOMEM;
    if (!t->off || !t->len || !t->score || !t->type || !t->slot) goto fail_nomem;
    memset(t->slot, 0xff, slots * sizeof *t->slot);
    memset(t->byte_id, 0xff, sizeof t->byte_id);
    rc = read_info(g, &t->info, err, errlen);
    if (rc == PULSE_OK)
        rc = load_pieces(t, g, &tok, has_sc ? &sc : NULL, has_ty ? &ty : NULL, err, errlen);
    if (rc != PULSE_OK) goto fail;
    for (int32_t i = 0; i < t->info.n_vocab; i++)
        hash_insert(t, i);
    rc = matcher_build(&t->ctl, t, TOKENIZER_CONTROL, TOKENIZER_UNKNOWN);
    if (rc == PULSE_OK) rc = matcher_build(&t->ud, t, TOKENIZER_USER_DEFINED, 0);
    if (rc != PULSE_OK) goto fail_nomem;
    *out = t;
    return PULSE_OK;
fail_nomem:
    fail(err, errlen, "%s: out of memory building the tokenizer", name);
fail:
    tokenizer_free(t);
    return rc;
}

/* Qwen's and Llama 3's pre-tokenizer regexes as tokenizer.json writes them. */
static const char QWEN_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char LLAMA3_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* The pattern of a pre_tokenizer (a Split, or a Sequence holding one): 0 when none is known. */
static int json_pattern(json_t *pt)
{
    if (!json_is_object(pt)) return 0;
    const char *type = json_string_value(json_object_get(pt, "type"));
    if (type && !strcmp(type, "Sequence")) {
        json_t *v;
        size_t i;
        json_array_foreach(json_object_get(pt, "pretokenizers"), i, v)
        {
            const int p = json_pattern(v);
            if (p) return p;
        }
        return 0;
    }
    if (!type || strcmp(type, "Split")) return 0;
    const char *re = json_string_value(json_object_get(json_object_get(pt, "pattern"), "Regex"));
    return !re                         ? 0
           : !strcmp(re, QWEN_REGEX)   ? BPE_PATTERN_QWEN
           : !strcmp(re, LLAMA3_REGEX) ? BPE_PATTERN_LLAMA3
                                       : 0;
}

/* The special token a TemplateProcessing post-processor (or one inside a Sequence) puts before
 * a single text, NULL if none. */
static const char *json_bos(json_t *pp)
{
    if (!json_is_object(pp)) return NULL;
    const char *type = json_string_value(json_object_get(pp, "type"));
    if (type && !strcmp(type, "Sequence")) {
        json_t *v;
        size_t i;
        json_array_foreach(json_object_get(pp, "processors"), i, v)
        {
            const char *b = json_bos(v);
            if (b) return b;
        }
        return NULL;
    }
    if (!type || strcmp(type, "TemplateProcessing")) return NULL;
    json_t *first = json_array_get(json_object_get(pp, "single"), 0);
    return json_string_value(json_object_get(json_object_get(first, "SpecialToken"), "id"));
}

/* eos_token of the tokenizer_config.json beside path (a string or {"content": ...}), or NULL;
 * *cfg holds the parsed file (the caller frees it). */
static const char *config_eos(const char *path, json_t **cfg)
{
    char p[4096];
    const char *slash = strrchr(path, '/');
    const int dir = slash ? (int)(slash - path) : 0;
    *cfg = NULL;
    if (snprintf(p, sizeof p, "%.*s%stokenizer_config.json", dir, path, slash ? "/" : "") >=
        (int)sizeof p)
        return NULL;
    json_error_t je;
    if (!(*cfg = json_load_file(p, 0, &je))) return NULL;
    json_t *e = json_object_get(*cfg, "eos_token");
    return json_is_string(e) ? json_string_value(e)
                             : json_string_value(json_object_get(e, "content"));
}

int tokenizer_load_json(const char *path, struct tokenizer **out, char *err, size_t errlen)
{
    *out = NULL;
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je), *cfg = NULL;
    if (!root) {
        fail(err, errlen, "%s: %s (line %d)", path, je.text, je.line);
        return PULSE_ERR_INVALID;
    }
    int rc = PULSE_ERR_INVALID;
    struct tokenizer *t = calloc(1, sizeof *t);
    json_t *model = json_object_get(root, "model"), *vocab = json_object_get(model, "vocab");
    json_t *added = json_object_get(root, "added_tokens");
    const char *mtype = json_string_value(json_object_get(model, "type"));
    const int pat = json_pattern(json_object_get(root, "pre_tokenizer"));
    struct bpe_token *toks = NULL;
    struct bpe_special *sp = NULL;
    unsigned char *bytes = NULL;
    if (!t) {
        rc = PULSE_ERR_NOMEM;
        goto out;
    }
    if (!mtype || strcmp(mtype, "BPE") || !json_is_object(vocab) || !json_object_size(vocab)) {
        fail(err, errlen, "%s: model is not a byte-level BPE with a vocab (model.type \"%s\")",
             path, mtype ? mtype : "?");
        goto out;
    }
    if (!pat) {
        fail(err, errlen,
             "%s: pre_tokenizer: no Split with Qwen's or Llama 3's pattern (the byte-level BPE "
             "reads those two)",
             path);
        goto out;
    }
    const size_t nv = json_object_size(vocab), na = json_array_size(added);
    size_t total = 0, nt = 0;
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) total += strlen(key);
    toks = malloc(sizeof *toks * nv);
    sp = malloc(sizeof *sp * (na ? na : 1));
    bytes = malloc(total + 1);
    if (!toks || !sp || !bytes) {
        rc = PULSE_ERR_NOMEM;
        fail(err, errlen, "%s: out of memory building the tokenizer", path);
        goto out;
    }
    size_t at = 0;
    json_object_foreach(vocab, key, v)
    {
        const json_int_t id = json_integer_value(v);
        const long nb = bpe_bytelevel_decode(key, strlen(key), bytes + at);
        if (!json_is_integer(v) || id < 0 || id >= INT32_MAX || nb <= 0) {
            fail(err, errlen, "%s: model.vocab[\"%.40s\"]: not a byte-level token with an id",
                 path, key);
            goto out;
        }
        toks[nt++] = (struct bpe_token){bytes + at, (size_t)nb, (int32_t)id};
        at += (size_t)nb;
    }
    int nsp = 0;
    int32_t max_id = -1;
    for (size_t i = 0; i < nv; i++)
        max_id = PULSE_MAX(max_id, toks[i].id);
    for (size_t i = 0; i < na; i++) {
        json_t *a = json_array_get(added, i);
        const char *c = json_string_value(json_object_get(a, "content"));
        const json_int_t id = json_integer_value(json_object_get(a, "id"));
        if (!c || !*c || id < 0 || id >= INT32_MAX) {
            fail(err, errlen, "%s: added_tokens[%zu]: no content or id", path, i);
            goto out;
        }
        sp[nsp++] = (struct bpe_special){c, (int32_t)id};
        max_id = PULSE_MAX(max_id, (int32_t)id);
    }
    /* an added token the vocab also holds is matched whole, as a special token only */
    uint8_t *added_id = calloc((size_t)max_id + 1, 1);
    if (!added_id) {
        rc = PULSE_ERR_NOMEM;
        goto out;
    }
    for (int i = 0; i < nsp; i++)
        added_id[sp[i].id] = 1;
    for (size_t k = 0; k < nt;)
        if (added_id[toks[k].id])
            toks[k] = toks[--nt];
        else
            k++;
    free(added_id);
    if (bpe_create(path, toks, nt, (enum bpe_pattern)pat, sp, nsp, &t->bpe, err, errlen))
        goto out;
    t->info = (struct tokenizer_info){max_id + 1, -1, -1, -1, -1, 0, 0, 0};
    const char *bos = json_bos(json_object_get(root, "post_processor"));
    if (bos && (t->info.bos_id = bpe_find(t->bpe, bos, strlen(bos))) >= 0) t->info.add_bos = 1;
    const char *eos = config_eos(path, &cfg);
    if (eos) t->info.eos_id = bpe_find(t->bpe, eos, strlen(eos));
    rc = PULSE_OK;
    *out = t;
    t = NULL;
out:
    tokenizer_free(t);
    free(toks);
    free(sp);
    free(bytes);
    json_decref(cfg);
    json_decref(root);
    return rc;
}

void tokenizer_free(struct tokenizer *t)
{
    if (!t) return;
    free(t->arena);
    free(t->off);
    free(t->len);
    free(t->score);
    free(t->type);
    free(t->slot);
    free(t->ctl.tab);
    free(t->ud.tab);
    bpe_free(t->bpe);
    free(t);
}

/* ---- encoding ---- */

struct sym {
    uint32_t start, len; /* span in the escaped fragment; len 0 once merged away */
    int32_t prev, next;
    int32_t node; /* merge-tree node, for splitting unused pieces back */
    int frozen;   /* a user-defined piece: never merged */
};

struct node {
    uint32_t start, len;
    int32_t left, right; /* children; -1 for a character */
    int32_t id;
};

struct cand {
    float score;
    uint32_t left, size;
    int32_t id;
};

struct enc {
    const struct tokenizer *t;
    char *esc; /* escaped fragment */
    struct sym *sym;
    struct node *node;
    struct cand *heap;
    size_t n_heap, n_node;
    int32_t *ids;
    size_t max, n; /* capacity and ids needed so far */
};

static void emit(struct enc *e, int32_t id)
{
    if (e->n < e->max) e->ids[e->n] = id;
    e->n++;
}

static int mergeable(int type)
{
    return type == TOKENIZER_NORMAL || type == TOKENIZER_USER_DEFINED || type == TOKENIZER_UNUSED;
}

/* a ranks above b: higher score, then the leftmost pair. */
static int cand_before(const struct cand *a, const struct cand *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(struct enc *e, struct cand c)
{
    size_t i = e->n_heap++;
    while (i > 0 && cand_before(&c, &e->heap[(i - 1) / 2])) {
        e->heap[i] = e->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    e->heap[i] = c;
}

static struct cand heap_pop(struct enc *e)
{
    struct cand top = e->heap[0], last = e->heap[--e->n_heap];
    size_t i = 0, n = e->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_before(&e->heap[c + 1], &e->heap[c])) c++;
        if (!cand_before(&e->heap[c], &last)) break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (n) e->heap[i] = last;
    return top;
}

static void try_pair(struct enc *e, int32_t l, int32_t r)
{
    if (l < 0 || r < 0 || e->sym[l].frozen || e->sym[r].frozen) return;
    uint32_t size = e->sym[l].len + e->sym[r].len;
    int32_t id = tokenizer_find(e->t, e->esc + e->sym[l].start, size);
    if (id < 0 || !mergeable(e->t->type[id])) return;
    heap_push(e, (struct cand){e->t->score[id], (uint32_t)l, size, id});
}

/* Bytes of the UTF-8 character at p (at most n); 1 for a byte that starts no valid one. */
static uint32_t utf8_char_len(const unsigned char *p, size_t n)
{
    uint32_t k = p[0] < 0x80         ? 1
                 : (p[0] >> 5) == 6  ? 2
                 : (p[0] >> 4) == 14 ? 3
                 : (p[0] >> 3) == 30 ? 4
                                     : 1;
    if (k > n) return 1;
    for (uint32_t i = 1; i < k; i++)
        if ((p[i] & 0xc0) != 0x80) return 1;
    return k;
}

/* Id of the longest piece of matcher m that starts at p (n bytes left), or -1; *len its length. */
static int32_t match_at(const struct matcher *m, const char *p, size_t n, uint32_t *len)
{
    int32_t best = -1;
    uint64_t h = FNV_INIT;
    if (!m->first[(uint8_t)p[0]]) return -1;
    for (uint32_t l = 1; l <= n; l++) {
        h = FNV_STEP(h, p[l - 1]);
        const struct prefix *e = prefix_slot(m, p, l, FNV_FINISH(h));
        if (!e->p) break;
        if (e->id >= 0) best = e->id, *len = l;
    }
    return best;
}

static void emit_node(struct enc *e, int32_t ni)
{
    const struct node *nd = &e->node[ni];
    if (nd->id >= 0 && e->t->type[nd->id] != TOKENIZER_UNUSED) {
        emit(e, nd->id);
    } else if (nd->left >= 0) { /* an unused piece: the pieces it was merged from */
        emit_node(e, nd->left);
        emit_node(e, nd->right);
    } else { /* byte fallback */
        for (uint32_t k = 0; k < nd->len; k++) {
            int32_t b = e->t->byte_id[(uint8_t)e->esc[nd->start + k]];
            if (b < 0) b = e->t->info.unk_id;
            if (b >= 0) emit(e, b); /* neither: the byte is dropped */
        }
    }
}

/* Encodes one escaped fragment of m bytes held in e->esc. */
static void encode_fragment(struct enc *e, uint32_t m)
{
    const struct tokenizer *t = e->t;
    int32_t ns = 0;
    e->n_heap = e->n_node = 0;
    for (uint32_t i = 0; i < m;) {
        uint32_t len = 0;
        int32_t id = match_at(&t->ud, e->esc + i, m - i, &len);
        int frozen = id >= 0;
        if (!frozen) {
            len = utf8_char_len((const unsigned char *)e->esc + i, m - i);
            id = tokenizer_find(t, e->esc + i, len);
            if (id >= 0 && !mergeable(t->type[id])) id = -1;
        }
        e->node[e->n_node] = (struct node){i, len, -1, -1, id};
        e->sym[ns] = (struct sym){i, len, ns - 1, -1, (int32_t)e->n_node++, frozen};
        if (ns > 0) e->sym[ns - 1].next = ns;
        ns++;
        i += len;
    }
    for (int32_t s = 0; s + 1 < ns; s++)
        try_pair(e, s, s + 1);
    while (e->n_heap) {
        struct cand c = heap_pop(e);
        struct sym *l = &e->sym[c.left];
        if (l->len == 0 || l->next < 0 || l->len + e->sym[l->next].len != c.size) continue;
        struct sym *r = &e->sym[l->next];
        e->node[e->n_node] = (struct node){l->start, c.size, l->node, r->node, c.id};
        l->node = (int32_t)e->n_node++;
        l->len = c.size;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) e->sym[r->next].prev = (int32_t)c.left;
        try_pair(e, l->prev, (int32_t)c.left);
        try_pair(e, (int32_t)c.left, l->next);
    }
    for (int32_t s = ns ? 0 : -1; s >= 0; s = e->sym[s].next)
        emit_node(e, e->sym[s].node);
}

/* Escapes raw[0..n) into e->esc (U+2581 prefix when prefix) and encodes it. */
static void encode_raw(struct enc *e, const char *raw, size_t n, int prefix)
{
    uint32_t m = 0;
    if (prefix) {
        memcpy(e->esc, SPACE_ESC, 3);
        m = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (raw[i] == ' ') {
            memcpy(e->esc + m, SPACE_ESC, 3);
            m += 3;
        } else {
            e->esc[m++] = raw[i];
        }
    }
    if (m) encode_fragment(e, m);
}

int tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, int add_bos,
                     int32_t *ids, size_t max, size_t *n)
{
    if (t->bpe) { /* the BOS only where the file asks for one (Qwen's does not) */
        const int bos = add_bos && t->info.add_bos && t->info.bos_id >= 0;
        if (bos && max) ids[0] = t->info.bos_id;
        size_t m = 0;
        if (bpe_encode(t->bpe, text, len, ids + (bos && max), max - (bos && max), &m))
            return PULSE_ERR_NOMEM;
        *n = m + (size_t)bos;
        return *n <= max ? PULSE_OK : PULSE_ERR_NOMEM;
    }
    struct enc e = {.t = t, .ids = ids, .max = max};
    size_t chars = len + 1; /* symbols of one fragment, the prefix included */
    if (len > UINT32_MAX / 4) return PULSE_ERR_NOMEM;
    e.esc = malloc(3 * len + 3);
    e.sym = malloc(chars * sizeof *e.sym);
    e.node = malloc(2 * chars * sizeof *e.node);
    e.heap = malloc(3 * chars * sizeof *e.heap); /* n - 1 pairs + 2 per merge */
    if (!e.esc || !e.sym || !e.node || !e.heap) {
        free(e.esc);
        free(e.sym);
        free(e.node);
        free(e.heap);
        return PULSE_ERR_NOMEM;
    }
    if (add_bos && t->info.bos_id >= 0) emit(&e, t->info.bos_id);
    size_t from = 0; /* every fragment starts the text or follows a control piece */
    for (size_t i = 0; i < len;) {
        uint32_t l = 0;
        int32_t id = match_at(&t->ctl, text + i, len - i, &l);
        if (id < 0) {
            i++;
            continue;
        }
        if (i > from) encode_raw(&e, text + from, i - from, t->info.add_space_prefix);
        emit(&e, id);
        i += l;
        from = i;
    }
    if (len > from) encode_raw(&e, text + from, len - from, t->info.add_space_prefix);
    free(e.esc);
    free(e.sym);
    free(e.node);
    free(e.heap);
    *n = e.n;
    return e.n <= max ? PULSE_OK : PULSE_ERR_NOMEM;
}

/* ---- decoding and lookups ---- */

static void out_bytes(char *out, size_t cap, size_t *at, const char *p, size_t n)
{
    if (*at < cap) memcpy(out + *at, p, PULSE_MIN(n, cap - *at));
    *at += n;
}

/* tokenizer_decode of the byte-level BPE: the tokens' bytes. */
static int decode_bpe(const struct tokenizer *t, const int32_t *ids, size_t n, int render_special,
                      char *out, size_t cap, size_t *len)
{
    size_t at = 0;
    int rc = PULSE_OK;
    for (size_t i = 0; i < n && rc == PULSE_OK; i++) {
        size_t pl;
        int special;
        const char *p = bpe_token_text(t->bpe, ids[i], &pl, &special);
        if (!p)
            rc = PULSE_ERR_INVALID;
        else if (!special || render_special)
            out_bytes(out, cap, &at, p, pl);
    }
    if (cap) out[PULSE_MIN(at, cap - 1)] = 0;
    *len = at;
    return rc != PULSE_OK ? rc : at < cap ? PULSE_OK : PULSE_ERR_NOMEM;
}

int tokenizer_decode(const struct tokenizer *t, const int32_t *ids, size_t n, int render_special,
                     char *out, size_t cap, size_t *len)
{
    if (t->bpe) return decode_bpe(t, ids, n, render_special, out, cap, len);
    size_t at = 0;
    int first_text = 1;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->info.n_vocab) {
            if (cap) out[PULSE_MIN(at, cap - 1)] = 0;
            *len = at;
            return PULSE_ERR_INVALID;
        }
        const char *p = t->arena + t->off[id];
        uint32_t pl = t->len[id];
        int ty = t->type[id];
        if (ty == TOKENIZER_CONTROL || ty == TOKENIZER_UNKNOWN) {
            if (render_special) out_bytes(out, cap, &at, p, pl);
            continue;
        }
        if (ty == TOKENIZER_BYTE) {
            char b = (char)parse_byte_piece(p, pl);
            out_bytes(out, cap, &at, &b, 1);
            first_text = 0;
            continue;
        }
        for (uint32_t k = 0; k < pl;) {
            if (k + 3 <= pl && memcmp(p + k, SPACE_ESC, 3) == 0) {
                /* SentencePiece drops the dummy prefix it added */
                if (!(first_text && k == 0 && t->info.add_space_prefix))
                    out_bytes(out, cap, &at, " ", 1);
                k += 3;
            } else {
                out_bytes(out, cap, &at, p + k, 1);
                k++;
            }
        }
        first_text = 0;
    }
    if (cap) out[PULSE_MIN(at, cap - 1)] = 0;
    *len = at;
    return at < cap ? PULSE_OK : PULSE_ERR_NOMEM;
}

void tokenizer_get_info(const struct tokenizer *t, struct tokenizer_info *out)
{
    *out = t->info;
}

const char *tokenizer_piece(const struct tokenizer *t, int32_t id, size_t *len)
{
    if (t->bpe) return bpe_token_text(t->bpe, id, len, NULL);
    if (id < 0 || id >= t->info.n_vocab) return NULL;
    if (len) *len = t->len[id];
    return t->arena + t->off[id];
}

int tokenizer_token_type(const struct tokenizer *t, int32_t id)
{
    if (t->bpe) {
        int special;
        return !bpe_token_text(t->bpe, id, NULL, &special) ? 0
               : special                                   ? TOKENIZER_CONTROL
                                                           : TOKENIZER_NORMAL;
    }
    return id < 0 || id >= t->info.n_vocab ? 0 : t->type[id];
}

float tokenizer_score(const struct tokenizer *t, int32_t id)
{
    return t->bpe || id < 0 || id >= t->info.n_vocab ? 0.0f : t->score[id];
}
