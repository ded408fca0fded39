/* Byte-level BPE (bpe.h): a rank table keyed by token bytes (open addressing, FNV-1a), the
 * hand-matched pre-tokenizer over utf8proc's classes, tiktoken's pair merge. */
#include "accuracy/bpe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "numeric.h"

#define NO_RANK INT32_MAX

struct entry {
    uint32_t off, len; /* the token's bytes in pool; len 0: a free slot */
    int32_t rank;
};

struct bpe {
    enum bpe_pattern pat;
    char *pool; /* every token's bytes */
    size_t pool_len;
    struct entry *tab; /* ranks by bytes: open addressing, cap a power of two */
    size_t cap;
    int32_t *by_id_off, *by_id_len; /* [n_ids] the bytes of id (len -1: no token) */
    int32_t n_ids;
    struct bpe_special *sp; /* text owned */
    size_t *sp_len;
    int n_sp;
    unsigned char sp_first[256]; /* 1 where a special token starts with that byte */
};

/* ------------------------------------------------------------------ the rank table */

static size_t slot_of(const struct bpe *b, const char *p, size_t n)
{
    size_t i = (size_t)pulse_fnv1a_bytes(PULSE_FNV_INIT, p, n) & (b->cap - 1);
    while (b->tab[i].len &&
           (b->tab[i].len != n || memcmp(b->pool + b->tab[i].off, p, n) != 0))
        i = (i + 1) & (b->cap - 1);
    return i;
}

static int32_t rank_of(const struct bpe *b, const unsigned char *p, size_t n)
{
    const struct entry *e = &b->tab[slot_of(b, (const char *)p, n)];
    return e->len ? e->rank : NO_RANK;
}

/* ------------------------------------------------------------------ loading */

static int b64_val(int c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Standard base64 of s[0..n) (padded) into out; returns the byte count, -1 if malformed. */
static long b64_decode(const char *s, size_t n, unsigned char *out)
{
    if (n == 0 || n % 4) return -1;
    long w = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            if (s[i + k] == '=' && i + 4 == n && k >= 2) {
                v[k] = 0, pad++;
            } else if ((v[k] = b64_val((unsigned char)s[i + k])) < 0 || pad) {
                return -1;
            }
        }
        const uint32_t x = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 |
                           (uint32_t)v[3];
        out[w++] = (unsigned char)(x >> 16);
        if (pad < 2) out[w++] = (unsigned char)(x >> 8);
        if (pad < 1) out[w++] = (unsigned char)x;
    }
    return w;
}

void bpe_free(struct bpe *b)
{
    if (!b) return;
    for (int i = 0; i < b->n_sp; i++)
        free((char *)b->sp[i].text);
    free(b->sp);
    free(b->sp_len);
    free(b->pool);
    free(b->tab);
    free(b->by_id_off);
    free(b->by_id_len);
    free(b);
}

/* An empty table for up to n tokens of pool_bytes bytes in all (a NUL after each), ids below
 * n_ids, n_sp special tokens; NULL when out of memory. */
static struct bpe *bpe_alloc(enum bpe_pattern pat, size_t n, size_t pool_bytes, int32_t n_ids,
                             int n_sp)
{
    struct bpe *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->pat = pat;
    b->cap = 16;
    while (b->cap < 2 * n)
        b->cap <<= 1;
    b->n_ids = n_ids;
    b->tab = calloc(b->cap, sizeof *b->tab);
    b->pool = malloc(pool_bytes + n + 1);
    b->by_id_off = malloc(sizeof(int32_t) * (size_t)(n_ids > 0 ? n_ids : 1));
    b->by_id_len = malloc(sizeof(int32_t) * (size_t)(n_ids > 0 ? n_ids : 1));
    b->sp = calloc((size_t)(n_sp > 0 ? n_sp : 1), sizeof *b->sp);
    b->sp_len = calloc((size_t)(n_sp > 0 ? n_sp : 1), sizeof *b->sp_len);
    if (!b->tab || !b->pool || !b->by_id_off || !b->by_id_len || !b->sp || !b->sp_len) {
        bpe_free(b);
        return NULL;
    }
    for (int32_t i = 0; i < n_ids; i++)
        b->by_id_len[i] = -1;
    return b;
}

/* Adds token p[0..n) as id (below n_ids); -1 when the bytes or the id are taken. */
static int add_token(struct bpe *b, const unsigned char *p, size_t n, int32_t id)
{
    const size_t s = slot_of(b, (const char *)p, n);
    if (n == 0 || b->tab[s].len || b->by_id_len[id] != -1) return -1;
    memcpy(b->pool + b->pool_len, p, n);
    b->pool[b->pool_len + n] = 0;
    b->tab[s] = (struct entry){(uint32_t)b->pool_len, (uint32_t)n, id};
    b->by_id_off[id] = (int32_t)b->pool_len, b->by_id_len[id] = (int32_t)n;
    b->pool_len += n + 1;
    return 0;
}

/* The special tokens, then the check that every byte is a token. */
static int finish(struct bpe *b, const char *label, const struct bpe_special *sp, int n,
                  char *err, size_t errlen)
{
    for (int i = 0; i < n; i++) {
        const size_t len = sp[i].text ? strlen(sp[i].text) : 0;
        if (sp[i].id < 0 || sp[i].id >= b->n_ids || len == 0 ||
            !(b->sp[i].text = malloc(len + 1))) {
            snprintf(err, errlen, "%s: special token %d: empty, its id out of range, or out of "
                     "memory", label, i);
            return -1;
        }
        memcpy((char *)b->sp[i].text, sp[i].text, len + 1);
        b->sp[i].id = sp[i].id;
        b->sp_len[i] = len;
        b->sp_first[(unsigned char)sp[i].text[0]] = 1;
        b->n_sp = i + 1;
        if (b->by_id_len[sp[i].id] != -1) {
            snprintf(err, errlen, "%s: special token %s: id %d is taken", label, sp[i].text,
                     sp[i].id);
            return -1;
        }
        b->by_id_len[sp[i].id] = -2 - i; /* a special token's: -2 - its index */
    }
    for (int c = 0; c < 256; c++) { /* byte-level: every byte must be a token */
        const unsigned char one = (unsigned char)c;
        if (rank_of(b, &one, 1) == NO_RANK) {
            snprintf(err, errlen, "%s: byte 0x%02x is no token (not a byte-level BPE)", label, c);
            return -1;
        }
    }
    return 0;
}

int bpe_create(const char *label, const struct bpe_token *toks, size_t n, enum bpe_pattern pat,
               const struct bpe_special *sp, int n_sp, struct bpe **out, char *err,
               size_t errlen)
{
    *out = NULL;
    size_t bytes = 0;
    int32_t n_ids = 0;
    for (size_t i = 0; i < n; i++) {
        if (toks[i].id < 0 || toks[i].id == INT32_MAX)
            return snprintf(err, errlen, "%s: token %zu: id %d out of range", label, i,
                            toks[i].id),
                   -1;
        bytes += toks[i].len;
        if (toks[i].id >= n_ids) n_ids = toks[i].id + 1;
    }
    for (int i = 0; i < n_sp; i++)
        if (sp[i].id >= n_ids && sp[i].id < INT32_MAX) n_ids = sp[i].id + 1;
    struct bpe *b = bpe_alloc(pat, n, bytes, n_ids, n_sp);
    if (!b) return snprintf(err, errlen, "%s: out of memory", label), -1;
    for (size_t i = 0; i < n; i++)
        if (add_token(b, toks[i].bytes, toks[i].len, toks[i].id)) {
            snprintf(err, errlen, "%s: token %zu (id %d): empty, or its bytes or id given twice",
                     label, i, toks[i].id);
            bpe_free(b);
            return -1;
        }
    if (finish(b, label, sp, n_sp, err, errlen)) {
        bpe_free(b);
        return -1;
    }
    *out = b;
    return 0;
}

int bpe_load_tiktoken(const char *path, enum bpe_pattern pat, const struct bpe_special *sp,
                      int n, struct bpe **out, char *err, size_t errlen)
{
    *out = NULL;
    if (pulse_check_regular(path, "tiktoken file", err, errlen) != PULSE_OK) return -1;
    FILE *f = fopen(path, "rb");
    if (!f) return snprintf(err, errlen, "%s: cannot open it", path), -1;
    fseek(f, 0, SEEK_END);
    const long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = size > 0 ? malloc((size_t)size + 1) : NULL;
    if (!text || fread(text, 1, (size_t)size, f) != (size_t)size) {
        fclose(f);
        free(text);
        return snprintf(err, errlen, "%s: cannot read it", path), -1;
    }
    fclose(f);
    text[size] = 0;
    size_t lines = 1;
    for (long i = 0; i < size; i++)
        lines += text[i] == '\n';
    int32_t n_ids = (int32_t)lines;
    for (int i = 0; i < n; i++)
        if (sp[i].id >= n_ids && sp[i].id < INT32_MAX) n_ids = sp[i].id + 1;
    /* decoded bytes are shorter than their base64 */
    struct bpe *b = bpe_alloc(pat, lines, (size_t)size, n_ids, n);
    unsigned char *tok = malloc((size_t)size + 1);
    int rc = -1;
    if (!b || !tok) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto out;
    }
    size_t line = 0;
    for (char *p = text, *nl; p < text + size; p = nl + 1) {
        line++;
        nl = strchr(p, '\n');
        if (!nl) nl = text + size;
        if (nl == p) continue;
        char *sp1 = memchr(p, ' ', (size_t)(nl - p)), *end = NULL;
        const long rank = sp1 ? strtol(sp1 + 1, &end, 10) : -1;
        const long nb = sp1 ? b64_decode(p, (size_t)(sp1 - p), tok) : -1;
        if (!sp1 || nb <= 0 || end == sp1 + 1 || (end != nl && *end != '\r') || rank < 0 ||
            rank >= n_ids) {
            snprintf(err, errlen, "%s:%zu: not a 'BASE64 RANK' line (rank below %d)", path, line,
                     n_ids);
            goto out;
        }
        if (add_token(b, tok, (size_t)nb, (int32_t)rank)) {
            snprintf(err, errlen, "%s:%zu: a token or rank given twice", path, line);
            goto out;
        }
    }
    if (finish(b, path, sp, n, err, errlen)) goto out;
    rc = 0;
    *out = b;
out:
    free(text);
    free(tok);
    if (rc) bpe_free(b);
    return rc;
}

int bpe_n_tokens(const struct bpe *b)
{
    int n = 0;
    for (int32_t i = 0; i < b->n_ids; i++)
        n += b->by_id_len[i] != -1;
    return n;
}

int32_t bpe_n_ids(const struct bpe *b)
{
    return b->n_ids;
}

const char *bpe_token_text(const struct bpe *b, int32_t id, size_t *len, int *special)
{
    if (id < 0 || id >= b->n_ids || b->by_id_len[id] == -1) return NULL;
    const int32_t l = b->by_id_len[id];
    if (special) *special = l < -1;
    if (l >= 0) {
        if (len) *len = (size_t)l;
        return b->pool + b->by_id_off[id];
    }
    if (len) *len = b->sp_len[-2 - l];
    return b->sp[-2 - l].text;
}

int32_t bpe_find(const struct bpe *b, const char *s, size_t n)
{
    for (int i = 0; i < b->n_sp; i++)
        if (b->sp_len[i] == n && !memcmp(b->sp[i].text, s, n)) return b->sp[i].id;
    const int32_t r = n ? rank_of(b, (const unsigned char *)s, n) : NO_RANK;
    return r == NO_RANK ? -1 : r;
}

/* GPT-2's printable bytes, which its byte-level alphabet spells as themselves. */
static int printable_byte(int c)
{
    return (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
}

long bpe_bytelevel_decode(const char *s, size_t n, unsigned char *out)
{
    long w = 0;
    size_t i = 0;
    while (i < n) {
        utf8proc_int32_t c = -1;
        const utf8proc_ssize_t l =
            utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &c);
        if (l <= 0 || c < 0) return -1;
        i += (size_t)l;
        if (c < 0x100 && printable_byte(c)) {
            out[w++] = (unsigned char)c;
            continue;
        }
        /* U+0100 + k is the k-th byte, in order, of those not printable */
        if (c < 0x100 || c >= 0x100 + 68) return -1;
        int k = c - 0x100, byte = 0;
        while (printable_byte(byte) || k-- > 0)
            byte++;
        out[w++] = (unsigned char)byte;
    }
    return w;
}

/* ------------------------------------------------------------------ the pre-tokenizer */

/* The character at s[0..n): its code point (an ill-formed byte is U+FFFD, of length 1) and
 * length. */
static size_t cp_at(const unsigned char *s, size_t n, int32_t *cp)
{
    utf8proc_int32_t c = -1;
    const utf8proc_ssize_t len = utf8proc_iterate(s, (utf8proc_ssize_t)n, &c);
    if (len > 0 && c >= 0) return *cp = c, (size_t)len;
    return *cp = 0xFFFD, 1;
}

static int is_letter(int32_t c)
{
    const utf8proc_category_t k = utf8proc_category(c);
    return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
}

static int is_number(int32_t c)
{
    const utf8proc_category_t k = utf8proc_category(c);
    return k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO;
}

/* Unicode's White_Space (the pattern's \s). */
static int is_ws(int32_t c)
{
    if (c >= 0x1C && c <= 0x1F) return 0;
    const utf8proc_property_t *p = utf8proc_get_property(c);
    return p->bidi_class == UTF8PROC_BIDI_CLASS_B || p->bidi_class == UTF8PROC_BIDI_CLASS_S ||
           p->bidi_class == UTF8PROC_BIDI_CLASS_WS || p->category == UTF8PROC_CATEGORY_ZS;
}

static int is_crlf(int32_t c)
{
    return c == '\r' || c == '\n';
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d) at s: its length, 0 if none. */
static size_t contraction(const unsigned char *s, size_t n)
{
    if (n < 2 || s[0] != '\'') return 0;
    int32_t c;
    const size_t l1 = cp_at(s + 1, n - 1, &c);
    const int32_t low = c == 0x17F ? 's' : c < 128 ? (c | 0x20) : 0; /* U+017F folds to s */
    if (low == 's' || low == 't' || low == 'm' || low == 'd') return 1 + l1;
    if (n >= 3 && (low == 'r' || low == 'v' || low == 'l')) {
        const int32_t next = s[1 + l1] | 0x20, want = low == 'l' ? 'l' : 'e';
        if (s[1 + l1] < 128 && next == want) return 2 + l1;
    }
    return 0;
}

size_t bpe_piece_len(enum bpe_pattern pat, const unsigned char *s, size_t n)
{
    size_t k = contraction(s, n);
    if (k) return k;
    int32_t c0, c1;
    const size_t l0 = cp_at(s, n, &c0);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    size_t i = 0;
    if (!is_crlf(c0) && !is_letter(c0) && !is_number(c0) && l0 < n) {
        cp_at(s + l0, n - l0, &c1);
        if (is_letter(c1)) i = l0;
    }
    if (i || is_letter(c0)) {
        int32_t c;
        size_t l;
        while (i < n && (l = cp_at(s + i, n - i, &c)) && is_letter(c))
            i += l;
        return i;
    }
    /* \p{N}{1,D} */
    if (is_number(c0)) {
        i = l0;
        int32_t c;
        size_t l;
        for (int d = 1; d < (int)pat && i < n && (l = cp_at(s + i, n - i, &c)) && is_number(c); d++)
            i += l;
        return i;
    }
    /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
    i = c0 == ' ' ? l0 : 0;
    {
        size_t j = i, l;
        int32_t c;
        while (j < n && (l = cp_at(s + j, n - j, &c)) && !is_ws(c) && !is_letter(c) &&
               !is_number(c))
            j += l;
        if (j > i) {
            while (j < n && (s[j] == '\r' || s[j] == '\n'))
                j++;
            return j;
        }
    }
    /* the whitespace run W from here: \s*[\r\n]+ ends after W's last CR or LF; else
     * \s+(?!\S) is W, less its last character when a non-space follows (if W has two or
     * more); else \s+ */
    size_t w = 0, last_crlf = 0, last_start = 0, count = 0;
    {
        size_t l;
        int32_t c;
        while (w < n && (l = cp_at(s + w, n - w, &c)) && is_ws(c)) {
            last_start = w;
            w += l;
            count++;
            if (is_crlf(c)) last_crlf = w;
        }
    }
    if (last_crlf) return last_crlf;
    if (w == n || count == 1) return w ? w : l0;
    return last_start;
}

/* ------------------------------------------------------------------ encoding */

struct out {
    int32_t *ids;
    size_t cap, n;
};

static void put(struct out *o, int32_t id)
{
    if (o->n < o->cap) o->ids[o->n] = id;
    o->n++;
}

/* tiktoken's byte_pair_merge of one piece: bounds start as every byte; the adjacent pair
 * whose joined bytes have the lowest rank merges, until no pair is a token. pos and rk are
 * scratch of n + 1. */
static void merge_piece(const struct bpe *b, const unsigned char *p, size_t n, size_t *pos,
                        int32_t *rk, struct out *o)
{
    const int32_t whole = rank_of(b, p, n);
    if (whole != NO_RANK) {
        put(o, whole);
        return;
    }
    size_t m = n + 1; /* bounds */
    for (size_t i = 0; i < m; i++)
        pos[i] = i;
    for (size_t i = 0; i + 2 < m; i++)
        rk[i] = rank_of(b, p + pos[i], pos[i + 2] - pos[i]);
    if (m >= 2) rk[m - 2] = NO_RANK;
    while (m > 2) {
        size_t best = 0;
        for (size_t i = 1; i + 2 < m; i++)
            if (rk[i] < rk[best]) best = i;
        if (rk[best] == NO_RANK) break;
        memmove(pos + best + 1, pos + best + 2, (m - best - 2) * sizeof *pos);
        memmove(rk + best + 1, rk + best + 2, (m - best - 2) * sizeof *rk);
        m--;
        rk[best] = best + 2 < m ? rank_of(b, p + pos[best], pos[best + 2] - pos[best]) : NO_RANK;
        if (best > 0)
            rk[best - 1] = rank_of(b, p + pos[best - 1], pos[best + 1] - pos[best - 1]);
    }
    for (size_t i = 0; i + 1 < m; i++)
        put(o, rank_of(b, p + pos[i], pos[i + 1] - pos[i]));
}

/* The special token that starts s[0..n) (the longest), -1 if none; *len its bytes. */
static int special_at(const struct bpe *b, const char *s, size_t n, size_t *len)
{
    int best = -1;
    *len = 0;
    if (!b->sp_first[(unsigned char)s[0]]) return -1;
    for (int i = 0; i < b->n_sp; i++) {
        const size_t l = b->sp_len[i];
        if (l <= n && l > *len && !memcmp(s, b->sp[i].text, l)) best = i, *len = l;
    }
    return best;
}

int bpe_encode(const struct bpe *b, const char *text, size_t len, int32_t *ids, size_t cap,
               size_t *n)
{
    /* Qwen's normaliser, NFC, first (Llama 3 has none); text that is not UTF-8 is taken as
     * it is */
    utf8proc_uint8_t *nfc = NULL;
    const utf8proc_ssize_t r =
        b->pat == BPE_PATTERN_QWEN
            ? utf8proc_map((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)len, &nfc,
                           UTF8PROC_STABLE | UTF8PROC_COMPOSE)
            : -1;
    const unsigned char *s = r >= 0 ? nfc : (const unsigned char *)text;
    const size_t m = r >= 0 ? (size_t)r : len;
    size_t *pos = malloc((m + 1) * sizeof *pos);
    int32_t *rk = malloc((m + 1) * sizeof *rk);
    struct out o = {ids, cap, 0};
    if (!pos || !rk) {
        free(pos), free(rk), free(nfc);
        return -1;
    }
    size_t i = 0;
    while (i < m) {
        size_t sl;
        const int k = special_at(b, (const char *)s + i, m - i, &sl);
        if (k >= 0) {
            put(&o, b->sp[k].id);
            i += sl;
            continue;
        }
        /* the ordinary text up to the next special token, piece by piece */
        size_t end = i + 1;
        while (end < m && special_at(b, (const char *)s + end, m - end, &sl) < 0)
            end++;
        while (i < end) {
            const size_t pl = bpe_piece_len(b->pat, s + i, end - i);
            merge_piece(b, s + i, pl, pos, rk, &o);
            i += pl;
        }
    }
    *n = o.n;
    free(pos), free(rk), free(nfc);
    return 0;
}

int bpe_decode(const struct bpe *b, const int32_t *ids, size_t n, char *out, size_t cap,
               size_t *len)
{
    size_t w = 0;
    for (size_t k = 0; k < n; k++) {
        if (ids[k] < 0 || ids[k] >= b->n_ids || b->by_id_len[ids[k]] == -1) return -1;
        const int32_t l = b->by_id_len[ids[k]];
        const char *p = l >= 0 ? b->pool + b->by_id_off[ids[k]] : b->sp[-2 - l].text;
        const size_t bytes = l >= 0 ? (size_t)l : b->sp_len[-2 - l];
        if (w + bytes < cap) memcpy(out + w, p, bytes);
        w += bytes;
    }
    if (w < cap) out[w] = 0;
    *len = w;
    return 0;
}
