/* LongBench v1 metrics, written from LongBench/metrics.py, LongBench/eval.py, pltrdy/rouge 1.0.1
 * (rouge/rouge.py, rouge/rouge_score.py), seatgeek/fuzzywuzzy (fuzz.py, utils.py) and CPython's
 * difflib.SequenceMatcher. Python applies these to str (code points); this file works on UTF-8
 * bytes and decodes where the difference shows, with utf8proc's Unicode tables:
 * - text is decoded as Python's bytes.decode('utf-8', 'replace') does: every ill-formed
 *   subsequence (its maximal subpart) is one U+FFFD;
 * - whitespace (str.split()) is str.isspace(): bidirectional class B, S or WS, or Zs;
 * - lower() is the simple lowercase mapping, U+0130's full one ("i" U+0307) and the final-sigma
 *   rule, as CPython's str.lower();
 * - \w is a letter, a number or '_' (str.isalnum()), \d a decimal digit (Nd).
 * utf8proc's tables are of Unicode 15, Python 3.11's of Unicode 14: the characters added in 15
 * are unassigned (no case, not alphanumeric) in Python 3.11. No allocation failure crashes: the
 * metric returns a negative value. */
#include "accuracy/metrics.h"
#include "accuracy/metrics_impl.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>


/* Length of the maximal subpart of an ill-formed sequence at s[0..n) (n >= 1): the lead byte
 * and the continuation bytes after it that a well-formed sequence could have (Unicode's Table
 * 3-7), which Python's errors='replace' turns into one U+FFFD. */
static size_t maximal_subpart(const unsigned char *s, size_t n)
{
    const unsigned c = s[0];
    unsigned lo = 0x80, hi = 0xBF;
    size_t want;
    if (c >= 0xC2 && c <= 0xDF)
        want = 1;
    else if (c >= 0xE0 && c <= 0xEF)
        want = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
        want = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else
        return 1;
    size_t k = 1;
    while (k <= want && k < n && s[k] >= lo && s[k] <= hi)
        k++, lo = 0x80, hi = 0xBF;
    return k;
}

/* Decodes the character at s[0..n), n >= 1, as Python's bytes.decode('utf-8', 'replace') does;
 * returns its length: an ill-formed sequence is U+FFFD over its maximal subpart. */
static size_t u8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    utf8proc_int32_t c = -1;
    const utf8proc_ssize_t len = utf8proc_iterate(s, (utf8proc_ssize_t)n, &c);
    if (len > 0 && c >= 0) {
        *cp = (uint32_t)c;
        return (size_t)len;
    }
    *cp = 0xFFFD;
    return maximal_subpart(s, n);
}

static size_t u8_encode(uint32_t c, unsigned char *out)
{
    return (size_t)utf8proc_encode_char((utf8proc_int32_t)c, out);
}

/* Python's str.isspace() (which str.split() splits on): bidirectional class B, S or WS, or
 * category Zs. */
static int is_py_space(uint32_t c)
{
    const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)c);
    return p->bidi_class == UTF8PROC_BIDI_CLASS_B || p->bidi_class == UTF8PROC_BIDI_CLASS_S ||
           p->bidi_class == UTF8PROC_BIDI_CLASS_WS || p->category == UTF8PROC_CATEGORY_ZS;
}

/* Byte length of the whitespace character at s[0..n), 0 if it is not one. */
static size_t space_len(const char *s, size_t n)
{
    uint32_t cp;
    size_t len = u8_decode((const unsigned char *)s, n, &cp);
    return is_py_space(cp) ? len : 0;
}

/* string.punctuation */
static int is_ascii_punct(unsigned c)
{
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
           (c >= 123 && c <= 126);
}

/* A character \w matches (Python 3 str patterns: str.isalnum(), letters and numbers, or '_'). */
static int is_word_cp(uint32_t c)
{
    if (c == '_') return 1;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
        return 1;
    default:
        return 0;
    }
}

/* \d of a Python 3 str pattern: Unicode's decimal digits (Nd). */
static int is_digit_cp(uint32_t c)
{
    return utf8proc_category((utf8proc_int32_t)c) == UTF8PROC_CATEGORY_ND;
}

/* Python's cased and case-ignorable characters (unicodeobject.c's final-sigma context): a
 * letter with a case mapping or a titlecase letter; marks, format characters, modifiers and the
 * word-internal punctuation of Unicode's Word_Break MidLetter, MidNumLet and Single_Quote. */
static int is_cased(uint32_t c)
{
    const utf8proc_int32_t x = (utf8proc_int32_t)c;
    return utf8proc_category(x) == UTF8PROC_CATEGORY_LT || utf8proc_tolower(x) != x ||
           utf8proc_toupper(x) != x;
}

static int is_case_ignorable(uint32_t c)
{
    switch (c) {
    case 0x27: case 0x2E: case 0x3A: case 0xB7: case 0x387: case 0x55F: case 0x5F4:
    case 0x2018: case 0x2019: case 0x2024: case 0x2027: case 0xFE13: case 0xFE52: case 0xFE55:
    case 0xFF07: case 0xFF0E: case 0xFF1A:
        return 1;
    default:
        break;
    }
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_SK:
        return 1;
    default:
        return 0;
    }
}

/* Python's str.lower() of v[i] within v[0..n): the simple lowercase mapping, U+0130 to "i"
 * U+0307 (its full mapping; *two gets U+0307), and capital sigma to final sigma after a cased
 * letter when no cased letter follows (case-ignorable characters skipped both ways). */
static uint32_t lower_at(const uint32_t *v, size_t n, size_t i, uint32_t *two)
{
    const uint32_t c = v[i];
    *two = 0;
    if (c == 0x130) {
        *two = 0x307;
        return 'i';
    }
    if (c == 0x3A3) {
        size_t j = i;
        while (j > 0 && is_case_ignorable(v[j - 1]))
            j--;
        int final = j > 0 && is_cased(v[j - 1]);
        if (final) {
            size_t k = i + 1;
            while (k < n && is_case_ignorable(v[k]))
                k++;
            final = k == n || !is_cased(v[k]);
        }
        return final ? 0x3C2 : 0x3C3;
    }
    return (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
}

/* A lowercased copy (str.lower() of s decoded with errors='replace', re-encoded); NULL when
 * out of memory. */
static char *lower_dup(const char *s)
{
    size_t n;
    uint32_t *v = acc_u8_to_cps(s, &n);
    /* a code point takes at most 4 bytes, and is never less than a third of its source's
     * (an ill-formed byte becomes U+FFFD's 3); U+0130's 2 bytes become 3 */
    unsigned char *out = v ? malloc(3 * strlen(s) + 1) : NULL;
    if (!out) {
        free(v);
        return NULL;
    }
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t two;
        w += u8_encode(lower_at(v, n, i, &two), out + w);
        if (two) w += u8_encode(two, out + w);
    }
    out[w] = 0;
    free(v);
    return (char *)out;
}

/* A copy of s as Python decodes it with errors='replace' (every ill-formed subsequence one
 * U+FFFD), re-encoded; NULL when out of memory. */
static char *valid_dup(const char *s)
{
    const size_t n = strlen(s);
    unsigned char *out = malloc(3 * n + 1);
    if (!out) return NULL;
    size_t i = 0, w = 0;
    while (i < n) {
        uint32_t cp;
        const size_t len = u8_decode((const unsigned char *)s + i, n - i, &cp);
        if (cp == 0xFFFD)
            w += u8_encode(cp, out + w);
        else
            memcpy(out + w, s + i, len), w += len;
        i += len;
    }
    out[w] = 0;
    return (char *)out;
}

int acc_cp_is_word(uint32_t c)
{
    return is_word_cp(c);
}

int acc_cp_is_digit(uint32_t c)
{
    return is_digit_cp(c);
}

int acc_cp_is_space(uint32_t c)
{
    return is_py_space(c);
}

void acc_cp_lower(uint32_t c, char out[8])
{
    uint32_t two;
    size_t w = u8_encode(lower_at(&c, 1, 0, &two), (unsigned char *)out);
    if (two) w += u8_encode(two, (unsigned char *)out + w);
    out[w] = 0;
}

uint32_t *acc_u8_to_cps(const char *s, size_t *n)
{
    size_t len = strlen(s), k = 0, i = 0;
    uint32_t *v = malloc((len + 1) * sizeof *v);
    if (!v) return NULL;
    while (i < len) {
        uint32_t cp;
        i += u8_decode((const unsigned char *)s + i, len - i, &cp);
        v[k++] = cp;
    }
    *n = k;
    return v;
}

/* ---------------------------------------------------------------- words */

struct span {
    const char *p;
    size_t n;
};

struct spans {
    struct span *v;
    size_t n, cap;
};

static int spans_push(struct spans *s, const char *p, size_t n)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        struct span *v = realloc(s->v, cap * sizeof *v);
        if (!v) return -1;
        s->v = v, s->cap = cap;
    }
    s->v[s->n].p = p, s->v[s->n].n = n;
    s->n++;
    return 0;
}

/* Appends the words of s[0..n) as Python's str.split() finds them. */
static int split_words(const char *s, size_t n, struct spans *out)
{
    size_t i = 0;
    while (i < n) {
        size_t sp = space_len(s + i, n - i);
        if (sp) {
            i += sp;
            continue;
        }
        size_t start = i;
        while (i < n && !space_len(s + i, n - i)) {
            uint32_t cp;
            i += u8_decode((const unsigned char *)s + i, n - i, &cp);
        }
        if (spans_push(out, s + start, i - start)) return -1;
    }
    return 0;
}

static int span_cmp(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    size_t m = x->n < y->n ? x->n : y->n;
    int c = m ? memcmp(x->p, y->p, m) : 0;
    if (c) return c;
    return (x->n > y->n) - (x->n < y->n);
}

/* ---------------------------------------------------------------- normalize_answer, qa_f1 */

/* Whether the character that ends at s[p] (exclusive) is a word character; 0 at p == 0. */
static int word_before(const unsigned char *s, size_t p)
{
    if (p == 0) return 0;
    size_t st = p - 1;
    while (st > 0 && p - st < 4 && (s[st] & 0xC0) == 0x80)
        st--;
    uint32_t cp;
    size_t len = u8_decode(s + st, p - st, &cp);
    if (st + len != p) return 1; /* a stray continuation byte */
    return is_word_cp(cp);
}

/* Whether the character at s[0..n) is a word character; 0 at the end. */
static int word_at(const unsigned char *s, size_t n)
{
    if (n == 0) return 0;
    uint32_t cp;
    u8_decode(s, n, &cp);
    return is_word_cp(cp);
}

/* re.sub(r"\b(a|an|the)\b", " ", s) from s[0..n) into out (room for n + 1). */
static size_t remove_articles(const unsigned char *s, size_t n, unsigned char *out)
{
    size_t i = 0, w = 0;
    while (i < n) {
        size_t m = 0;
        if ((s[i] == 'a' || s[i] == 't') && !word_before(s, i)) {
            if (s[i] == 'a') {
                if (!word_at(s + i + 1, n - i - 1))
                    m = 1;
                else if (s[i + 1] == 'n' && !word_at(s + i + 2, n - i - 2))
                    m = 2;
            } else if (s[i + 1] == 'h' && s[i + 2] == 'e' && !word_at(s + i + 3, n - i - 3)) {
                m = 3;
            }
        }
        if (m) {
            out[w++] = ' ';
            i += m;
            continue;
        }
        uint32_t cp;
        size_t len = u8_decode(s + i, n - i, &cp);
        memcpy(out + w, s + i, len);
        w += len, i += len;
    }
    out[w] = 0;
    return w;
}

char *acc_normalize_answer(const char *s)
{
    char *low = lower_dup(s);
    if (!low) return NULL;
    size_t n = 0;
    for (size_t r = 0; low[r]; r++) /* remove_punc */
        if (!is_ascii_punct((unsigned char)low[r])) low[n++] = low[r];
    low[n] = 0;
    char *art = malloc(n + 1);
    struct spans words = {0};
    if (!art) goto fail;
    n = remove_articles((const unsigned char *)low, n, (unsigned char *)art);
    if (split_words(art, n, &words)) goto fail;
    size_t w = 0; /* white_space_fix, in place: words only move left */
    for (size_t k = 0; k < words.n; k++) {
        if (k) art[w++] = ' ';
        memmove(art + w, words.v[k].p, words.v[k].n);
        w += words.v[k].n;
    }
    art[w] = 0;
    free(words.v);
    free(low);
    return art;
fail:
    free(words.v);
    free(art);
    free(low);
    return NULL;
}

/* metrics.f1_score over two token lists (sorted here). */
static double token_f1(struct spans *pred, struct spans *gold)
{
    if (pred->n == 0 || gold->n == 0) return 0.0; /* no overlap (and qsort wants a base) */
    qsort(pred->v, pred->n, sizeof *pred->v, span_cmp);
    qsort(gold->v, gold->n, sizeof *gold->v, span_cmp);
    size_t i = 0, j = 0, same = 0;
    while (i < pred->n && j < gold->n) {
        int c = span_cmp(&pred->v[i], &gold->v[j]);
        if (c == 0)
            same++, i++, j++;
        else if (c < 0)
            i++;
        else
            j++;
    }
    if (same == 0) return 0.0;
    double precision = 1.0 * (double)same / (double)pred->n;
    double recall = 1.0 * (double)same / (double)gold->n;
    return (2 * precision * recall) / (precision + recall);
}

double acc_qa_f1_score(const char *pred, const char *gold)
{
    double score = -1.0;
    char *np = acc_normalize_answer(pred), *ng = acc_normalize_answer(gold);
    struct spans tp = {0}, tg = {0};
    if (np && ng && !split_words(np, strlen(np), &tp) && !split_words(ng, strlen(ng), &tg))
        score = token_f1(&tp, &tg);
    free(tp.v);
    free(tg.v);
    free(np);
    free(ng);
    return score;
}

/* ---------------------------------------------------------------- ROUGE-L (pltrdy/rouge) */

/* rouge_score._recon recurses once per backtrack step; from eval.py's scorer the 992nd nested
 * call overflows Python's default recursion limit (1000; measured on CPython 3.11), the bare
 * except in LongBench's rouge_score turns the RecursionError into a score of 0. */
#define ROUGE_MAX_RECON_CALLS 991
#define ROUGE_BAND (ROUGE_MAX_RECON_CALLS + 1)

/* A text as Rouge._get_scores prepares it: split on '.', pieces of length 0 dropped, words of
 * each piece by str.split() (a blank piece is one empty word, as " ".join([]).split(" ")). */
struct rtext {
    struct spans words;
    size_t *start; /* sentence k is words[start[k] .. start[k + 1]) */
    size_t ns, cap;
};

static int rtext_build(const char *s, struct rtext *t)
{
    const char *p = s;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        if (n > 0) {
            if (t->ns + 2 > t->cap) {
                size_t cap = t->cap ? 2 * t->cap : 16;
                size_t *v = realloc(t->start, cap * sizeof *v);
                if (!v) return -1;
                t->start = v, t->cap = cap;
            }
            t->start[t->ns++] = t->words.n;
            size_t before = t->words.n;
            if (split_words(p, n, &t->words)) return -1;
            if (t->words.n == before && spans_push(&t->words, p, 0)) return -1;
            t->start[t->ns] = t->words.n;
        }
        if (!dot) return 0;
        p = dot + 1;
    }
}

struct word_ref {
    struct span w;
    size_t idx;
};

static int word_ref_cmp(const void *a, const void *b)
{
    return span_cmp(&((const struct word_ref *)a)->w, &((const struct word_ref *)b)->w);
}

/* Gives every word of both texts an id (equal strings, equal ids); ids[0..nr) are the
 * reference's words, then the hypothesis's. Returns the number of distinct words or -1. */
static long intern_words(const struct spans *ref, const struct spans *hyp, uint32_t *ids)
{
    size_t n = ref->n + hyp->n;
    struct word_ref *v = malloc(n * sizeof *v);
    if (!v) return -1;
    for (size_t k = 0; k < n; k++) {
        v[k].w = k < ref->n ? ref->v[k] : hyp->v[k - ref->n];
        v[k].idx = k;
    }
    qsort(v, n, sizeof *v, word_ref_cmp);
    uint32_t id = 0;
    for (size_t k = 0; k < n; k++) {
        if (k && span_cmp(&v[k - 1].w, &v[k].w) != 0) id++;
        ids[v[k].idx] = id;
    }
    free(v);
    return (long)id + 1;
}

struct lcs_work {
    uint16_t *prev, *cur; /* one DP row each, max hypothesis sentence + 1 */
    uint16_t *band;       /* the last ROUGE_BAND rows and columns of the DP table */
};

/* rouge_score._recon_lcs(x, y): the DP table of x (reference words) against y (hypothesis
 * words), then the backtrack from (nx, ny); words of each matched pair go into the union.
 * Only the corner the backtrack can reach before the recursion limit is kept. Returns 0, or 1
 * when the backtrack needs more than ROUGE_MAX_RECON_CALLS calls (rouge would raise). */
static int recon_lcs(const uint32_t *x, size_t nx, const uint32_t *y, size_t ny,
                     struct lcs_work *wk, unsigned char *in_union, size_t *llcs)
{
    size_t lo = nx < ny ? nx : ny;
    if (lo + 1 > ROUGE_MAX_RECON_CALLS) return 1; /* at least lo steps plus the final call */
    size_t r0 = nx >= ROUGE_BAND ? nx - (ROUGE_BAND - 1) : 0;
    size_t c0 = ny >= ROUGE_BAND ? ny - (ROUGE_BAND - 1) : 0;
    size_t cols = ny - c0 + 1;
#define BAND(i, j) wk->band[((i)-r0) * cols + ((j)-c0)]
    memset(wk->prev, 0, (ny + 1) * sizeof *wk->prev); /* values <= lo < 991 fit in 16 bits */
    if (r0 == 0) memset(&BAND(0, c0), 0, cols * sizeof *wk->band);
    for (size_t i = 1; i <= nx; i++) {
        uint16_t *prev = wk->prev, *cur = wk->cur;
        cur[0] = 0;
        for (size_t j = 1; j <= ny; j++) {
            if (x[i - 1] == y[j - 1])
                cur[j] = (uint16_t)(prev[j - 1] + 1);
            else
                cur[j] = prev[j] > cur[j - 1] ? prev[j] : cur[j - 1];
        }
        if (i >= r0) memcpy(&BAND(i, c0), cur + c0, cols * sizeof *cur);
        wk->prev = cur, wk->cur = prev;
    }
    size_t i = nx, j = ny, calls = 0;
    for (;;) {
        if (++calls > ROUGE_MAX_RECON_CALLS) return 1;
        if (i == 0 || j == 0) break;
        if (x[i - 1] == y[j - 1]) {
            if (!in_union[x[i - 1]]) in_union[x[i - 1]] = 1, (*llcs)++;
            i--, j--;
        } else if (BAND(i - 1, j) > BAND(i, j - 1)) {
            i--;
        } else {
            j--;
        }
    }
#undef BAND
    return 0;
}

static size_t count_distinct(const uint32_t *ids, size_t n, unsigned char *seen, size_t n_ids)
{
    memset(seen, 0, n_ids);
    size_t d = 0;
    for (size_t k = 0; k < n; k++)
        if (!seen[ids[k]]) seen[ids[k]] = 1, d++;
    return d;
}

static size_t max_sentence(const struct rtext *t)
{
    size_t m = 0;
    for (size_t k = 0; k < t->ns; k++)
        if (t->start[k + 1] - t->start[k] > m) m = t->start[k + 1] - t->start[k];
    return m;
}

/* Rouge().get_scores([pred], [gold], avg=True)["rouge-l"]["f"] (rouge_l_summary_level), of
 * valid UTF-8. */
static double rouge_valid(const char *pred, const char *gold)
{
    double score = -1.0;
    struct rtext hyp = {0}, ref = {0};
    uint32_t *ids = NULL;
    unsigned char *flags = NULL;
    struct lcs_work wk = {0};
    if (rtext_build(pred, &hyp) || rtext_build(gold, &ref)) goto out;
    if (hyp.ns == 0 || ref.ns == 0) { /* "Hypothesis is empty." -> except: return 0.0 */
        score = 0.0;
        goto out;
    }
    size_t nr = ref.words.n, nh = hyp.words.n;
    ids = malloc((nr + nh) * sizeof *ids);
    if (!ids) goto out;
    long n_ids = intern_words(&ref.words, &hyp.words, ids);
    if (n_ids < 0 || !(flags = malloc((size_t)n_ids))) goto out;
    size_t m = count_distinct(ids, nr, flags, (size_t)n_ids);
    size_t n = count_distinct(ids + nr, nh, flags, (size_t)n_ids);
    size_t mr = max_sentence(&ref), mh = max_sentence(&hyp);
    size_t br = mr + 1 < ROUGE_BAND ? mr + 1 : ROUGE_BAND,
           bh = mh + 1 < ROUGE_BAND ? mh + 1 : ROUGE_BAND;
    wk.prev = malloc((mh + 1) * sizeof *wk.prev);
    wk.cur = malloc((mh + 1) * sizeof *wk.cur);
    wk.band = malloc(br * bh * sizeof *wk.band);
    if (!wk.prev || !wk.cur || !wk.band) goto out;
    memset(flags, 0, (size_t)n_ids); /* now: the LCS union */
    size_t llcs = 0;
    for (size_t r = 0; r < ref.ns; r++) {
        for (size_t h = 0; h < hyp.ns; h++) {
            const uint32_t *x = ids + ref.start[r], *y = ids + nr + hyp.start[h];
            size_t nx = ref.start[r + 1] - ref.start[r], ny = hyp.start[h + 1] - hyp.start[h];
            if (recon_lcs(x, nx, y, ny, &wk, flags, &llcs)) {
                score = 0.0; /* RecursionError -> except: return 0.0 */
                goto out;
            }
        }
    }
    double r_lcs = (double)llcs / (double)m, p_lcs = (double)llcs / (double)n;
    score = 2.0 * ((p_lcs * r_lcs) / (p_lcs + r_lcs + 1e-8));
out:
    free(wk.prev);
    free(wk.cur);
    free(wk.band);
    free(flags);
    free(ids);
    free(hyp.words.v);
    free(hyp.start);
    free(ref.words.v);
    free(ref.start);
    return score;
}

/* fn of pred and gold as Python decodes them (valid_dup); -1 when out of memory. */
static double on_valid(const char *pred, const char *gold,
                       double (*fn)(const char *, const char *))
{
    char *p = valid_dup(pred), *g = valid_dup(gold);
    const double score = p && g ? fn(p, g) : -1.0;
    free(p);
    free(g);
    return score;
}

double acc_rouge_score(const char *pred, const char *gold)
{
    return on_valid(pred, gold, rouge_valid);
}

/* ---------------------------------------------------------------- classification, numbers */

static double classification_valid(const char *pred, const char *gold,
                                   const char *const *classes, size_t n_classes)
{
    if (n_classes == 0) return 0.0;
    const char **list = malloc(n_classes * sizeof *list);
    if (!list) return -1.0;
    size_t len = 0;
    for (size_t k = 0; k < n_classes; k++)
        if (classes[k] && strstr(pred, classes[k])) list[len++] = classes[k];
    /* for match_term in em_match_list: ... em_match_list.remove(match_term): remove() drops
     * the first equal element and the list iterator's index moves on regardless */
    for (size_t it = 0; it < len; it++) {
        const char *term = list[it];
        if (strstr(gold, term) && strcmp(term, gold) != 0) {
            size_t f = 0;
            while (strcmp(list[f], term) != 0)
                f++;
            memmove(list + f, list + f + 1, (len - f - 1) * sizeof *list);
            len--;
        }
    }
    double score = 0.0;
    for (size_t k = 0; k < len; k++)
        if (strcmp(list[k], gold) == 0) score = 1.0 / (double)len;
    free(list);
    return score;
}

double acc_classification_score(const char *pred, const char *gold, const char *const *classes,
                                size_t n_classes)
{
    char *p = valid_dup(pred), *g = valid_dup(gold);
    const double score = p && g ? classification_valid(p, g, classes, n_classes) : -1.0;
    free(p);
    free(g);
    return score;
}

/* The next maximal run of \d in s starting at or after *pos; 0 when there is none. */
static int next_digit_run(const char *s, size_t n, size_t *pos, struct span *run)
{
    size_t i = *pos;
    int in = 0;
    size_t start = 0;
    while (i < n) {
        uint32_t cp;
        size_t len = u8_decode((const unsigned char *)s + i, n - i, &cp);
        int d = is_digit_cp(cp);
        if (d && !in) in = 1, start = i;
        if (!d && in) break;
        i += len;
    }
    if (!in) return 0;
    run->p = s + start, run->n = i - start;
    *pos = i;
    return 1;
}

/* (#digit runs of pred equal to want) / (#digit runs), 0 without runs. */
static double digit_run_score(const char *pred, const char *want, size_t want_n)
{
    size_t n = strlen(pred), pos = 0, runs = 0, right = 0;
    struct span run;
    while (next_digit_run(pred, n, &pos, &run)) {
        runs++;
        if (run.n == want_n && memcmp(run.p, want, want_n) == 0) right++;
    }
    return runs == 0 ? 0.0 : (double)right / (double)runs;
}

double acc_retrieval_score(const char *pred, const char *gold)
{
    /* re.findall(r'Paragraph (\d+)', gold)[0]; LongBench raises IndexError without one */
    static const char key[] = "Paragraph ";
    size_t n = strlen(gold);
    for (const char *p = strstr(gold, key); p; p = strstr(p + 1, key)) {
        size_t pos = (size_t)(p - gold) + sizeof key - 1, at = pos;
        struct span run;
        if (next_digit_run(gold, n, &pos, &run) && run.p == gold + at)
            return digit_run_score(pred, run.p, run.n);
    }
    return 0.0;
}

double acc_count_score(const char *pred, const char *gold)
{
    return digit_run_score(pred, gold, strlen(gold));
}

/* ---------------------------------------------------------------- synthetic tasks */

double acc_contains_score(const char *pred, const char *answer)
{
    char *lp = lower_dup(pred), *la = lower_dup(answer);
    double score = (lp && la) ? (strstr(lp, la) ? 1.0 : 0.0) : -1.0;
    free(lp);
    free(la);
    return score;
}

static double exact_match_valid(const char *pred, const char *answer)
{
    size_t n = strlen(pred), lo = 0, sp;
    while (lo < n && (sp = space_len(pred + lo, n - lo)))
        lo += sp;
    size_t hi = n; /* back off whole trailing whitespace characters */
    while (hi > lo) {
        size_t st = hi - 1;
        while (st > lo && hi - st < 4 && ((unsigned char)pred[st] & 0xC0) == 0x80)
            st--;
        sp = space_len(pred + st, hi - st);
        if (!sp || st + sp != hi) break;
        hi = st;
    }
    return (hi - lo == strlen(answer) && memcmp(pred + lo, answer, hi - lo) == 0) ? 1.0 : 0.0;
}

double acc_exact_match_score(const char *pred, const char *answer)
{
    return on_valid(pred, answer, exact_match_valid);
}

/* ---------------------------------------------------------------- driver */

const char *acc_metric_name(enum acc_metric m)
{
    static const char *const names[ACC_METRIC_COUNT_OF_KINDS] = {
        "qa_f1_score",    "rouge_score", "classification_score", "retrieval_score", "count_score",
        "code_sim_score", "contains",    "contains_all",         "exact_match",
    };
    return ((unsigned)m < ACC_METRIC_COUNT_OF_KINDS) ? names[m] : NULL;
}

double acc_metric_score(enum acc_metric m, const char *pred, const char *answer,
                        const char *const *classes, size_t n_classes)
{
    switch (m) {
    case ACC_METRIC_QA_F1:
        return acc_qa_f1_score(pred, answer);
    case ACC_METRIC_ROUGE_L:
        return acc_rouge_score(pred, answer);
    case ACC_METRIC_CLASSIFICATION:
        return acc_classification_score(pred, answer, classes, n_classes);
    case ACC_METRIC_RETRIEVAL:
        return acc_retrieval_score(pred, answer);
    case ACC_METRIC_COUNT:
        return acc_count_score(pred, answer);
    case ACC_METRIC_CODE_SIM:
        return acc_code_sim_score(pred, answer);
    case ACC_METRIC_CONTAINS:
    case ACC_METRIC_CONTAINS_ALL:
        return acc_contains_score(pred, answer);
    case ACC_METRIC_EXACT_MATCH:
        return acc_exact_match_score(pred, answer);
    default:
        return -1.0;
    }
}

double acc_score_sample(enum acc_metric m, int first_line_only, const char *pred,
                        const char *const *answers, size_t n_answers, const char *const *classes,
                        size_t n_classes)
{
    char *cut = NULL;
    if (first_line_only) { /* prediction.lstrip('\n').split('\n')[0] */
        while (*pred == '\n')
            pred++;
        const char *nl = strchr(pred, '\n');
        size_t n = nl ? (size_t)(nl - pred) : strlen(pred);
        if (!(cut = malloc(n + 1))) return -1.0;
        memcpy(cut, pred, n);
        cut[n] = 0;
        pred = cut;
    }
    double score = 0.0;
    size_t found = 0;
    for (size_t k = 0; k < n_answers; k++) {
        double s = acc_metric_score(m, pred, answers[k], classes, n_classes);
        if (s < 0) {
            score = -1.0;
            goto out;
        }
        if (s > score) score = s; /* score = max(score, metric(...)) */
        if (s > 0) found++;
    }
    if (m == ACC_METRIC_CONTAINS_ALL) score = n_answers ? (double)found / (double)n_answers : 0.0;
out:
    free(cut);
    return score;
}

double acc_score_task(const double *scores, size_t n)
{
    if (n == 0) return NAN;
    double total = 0.0;
    for (size_t k = 0; k < n; k++)
        total += scores[k];
    double v = 100 * total / (double)n;
    char buf[512]; /* round(v, 2): correctly rounded decimal, ties to even, as printf does */
    snprintf(buf, sizeof buf, "%.2f", v);
    return strtod(buf, NULL);
}

int acc_length_bucket(long long length)
{
    return length < 4000 ? 0 : length < 8000 ? 1 : 2;
}

size_t acc_utf8_replace(const char *s, char *out, size_t cap)
{
    size_t n = 0, len = 0;
    if (cap == 0) return 0;
    out[0] = '\0';
    uint32_t *cp = acc_u8_to_cps(s, &n);
    if (!cp) return 0;
    for (size_t i = 0; i < n; i++) {
        utf8proc_uint8_t enc[4];
        const utf8proc_ssize_t k = utf8proc_encode_char((utf8proc_int32_t)cp[i], enc);
        if (k <= 0 || len + (size_t)k >= cap) break;
        memcpy(out + len, enc, (size_t)k);
        len += (size_t)k;
    }
    out[len] = '\0';
    free(cp);
    return len;
}
