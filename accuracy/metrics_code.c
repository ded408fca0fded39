/* The code-similarity metric of LongBench (metrics.py code_sim_score): fuzzywuzzy's ratio over
 * CPython's difflib.SequenceMatcher (pure-Python path, autojunk on), on code points. Split from
 * metrics.c; the public functions are declared in accuracy/metrics.h. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "accuracy/metrics.h"
#include "accuracy/metrics_impl.h"

/* ---------------------------------------------------------------- difflib.SequenceMatcher */

struct seqm {
    const uint32_t *a, *b;
    size_t la, lb;
    size_t *b_idx;       /* b2j: indices of b grouped by value, ascending within a group */
    size_t *a_lo, *a_hi; /* b2j[a[i]] is b_idx[a_lo[i] .. a_hi[i]) (empty: junk-free miss) */
    uint32_t *len[2];    /* j2len / newj2len: value at j, valid when gen[.][j] is current */
    size_t *gen[2];
    size_t g;
};

struct val_idx {
    uint32_t v;
    size_t i;
};

static int val_idx_cmp(const void *a, const void *b)
{
    const struct val_idx *x = a, *y = b;
    if (x->v != y->v) return x->v < y->v ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* __chain_b with isjunk None and autojunk on: b2j, minus "popular" elements (more than
 * len(b) // 100 + 1 occurrences) when len(b) >= 200. */
static int seqm_init(struct seqm *m)
{
    size_t lb = m->lb, la = m->la;
    struct val_idx *v = malloc((lb + 1) * sizeof *v);
    m->b_idx = malloc((lb + 1) * sizeof *m->b_idx);
    m->a_lo = malloc((la + 1) * sizeof *m->a_lo);
    m->a_hi = malloc((la + 1) * sizeof *m->a_hi);
    for (int k = 0; k < 2; k++) {
        m->len[k] = malloc((lb + 1) * sizeof *m->len[k]);
        m->gen[k] = calloc(lb + 1, sizeof *m->gen[k]);
    }
    if (!v || !m->b_idx || !m->a_lo || !m->a_hi || !m->len[0] || !m->len[1] || !m->gen[0] ||
        !m->gen[1]) {
        free(v);
        return -1;
    }
    for (size_t k = 0; k < lb; k++)
        v[k].v = m->b[k], v[k].i = k;
    qsort(v, lb, sizeof *v, val_idx_cmp);
    for (size_t k = 0; k < lb; k++)
        m->b_idx[k] = v[k].i;
    size_t ntest = lb / 100 + 1;
    for (size_t i = 0; i < la; i++) {
        size_t lo = 0, hi = lb; /* first element >= a[i] */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (v[mid].v < m->a[i])
                lo = mid + 1;
            else
                hi = mid;
        }
        size_t end = lo;
        while (end < lb && v[end].v == m->a[i])
            end++;
        if (lb >= 200 && end - lo > ntest) end = lo; /* popular: deleted from b2j */
        m->a_lo[i] = lo, m->a_hi[i] = end;
    }
    free(v);
    m->g = 1;
    return 0;
}

static void seqm_free(struct seqm *m)
{
    free(m->b_idx);
    free(m->a_lo);
    free(m->a_hi);
    for (int k = 0; k < 2; k++)
        free(m->len[k]), free(m->gen[k]);
}

/* find_longest_match(alo, ahi, blo, bhi); no junk, so only the non-junk extension applies. */
static void seqm_longest(struct seqm *m, size_t alo, size_t ahi, size_t blo, size_t bhi, size_t *bi,
                         size_t *bj, size_t *bk)
{
    const uint32_t *a = m->a, *b = m->b;
    size_t besti = alo, bestj = blo, bestsize = 0;
    m->g += 2; /* nothing from an earlier call is current */
    for (size_t i = alo; i < ahi; i++) {
        size_t g = ++m->g, cur = g & 1, old = cur ^ 1;
        for (size_t t = m->a_lo[i]; t < m->a_hi[i]; t++) {
            size_t j = m->b_idx[t];
            if (j < blo) continue;
            if (j >= bhi) break;
            size_t k = 1;
            if (j > 0 && m->gen[old][j - 1] == g - 1) k = (size_t)m->len[old][j - 1] + 1;
            m->len[cur][j] = (uint32_t)k, m->gen[cur][j] = g;
            if (k > bestsize) besti = i - k + 1, bestj = j - k + 1, bestsize = k;
        }
    }
    while (besti > alo && bestj > blo && a[besti - 1] == b[bestj - 1])
        besti--, bestj--, bestsize++;
    while (besti + bestsize < ahi && bestj + bestsize < bhi &&
           a[besti + bestsize] == b[bestj + bestsize])
        bestsize++;
    *bi = besti, *bj = bestj, *bk = bestsize;
}

/* Sum of the sizes of get_matching_blocks() (a work list instead of recursion); -1 on OOM. */
static long seqm_matches(struct seqm *m)
{
    size_t cap = 64, top = 0, total = 0;
    size_t(*q)[4] = malloc(cap * sizeof *q);
    if (!q) return -1;
    q[top][0] = 0, q[top][1] = m->la, q[top][2] = 0, q[top][3] = m->lb, top++;
    while (top) {
        top--;
        size_t alo = q[top][0], ahi = q[top][1], blo = q[top][2], bhi = q[top][3], i, j, k;
        seqm_longest(m, alo, ahi, blo, bhi, &i, &j, &k);
        if (!k) continue;
        total += k;
        if (top + 2 > cap) {
            size_t(*nq)[4] = realloc(q, 2 * cap * sizeof *q);
            if (!nq) {
                free(q);
                return -1;
            }
            q = nq, cap *= 2;
        }
        if (alo < i && blo < j)
            q[top][0] = alo, q[top][1] = i, q[top][2] = blo, q[top][3] = j, top++;
        if (i + k < ahi && j + k < bhi)
            q[top][0] = i + k, q[top][1] = ahi, q[top][2] = j + k, q[top][3] = bhi, top++;
    }
    free(q);
    return (long)total;
}

/* 2 * matches and la + lb of SequenceMatcher(None, a, b); -1 on OOM. */
static int seq_counts(const char *sa, const char *sb, size_t *matches, size_t *total)
{
    struct seqm m = {0};
    uint32_t *a = acc_u8_to_cps(sa, &m.la), *b = acc_u8_to_cps(sb, &m.lb);
    int rc = -1;
    if (a && b) {
        m.a = a, m.b = b;
        long k = seqm_init(&m) ? -1 : seqm_matches(&m);
        if (k >= 0) *matches = (size_t)k, *total = m.la + m.lb, rc = 0;
        seqm_free(&m);
    }
    free(a);
    free(b);
    return rc;
}

double acc_sequence_ratio(const char *a, const char *b)
{
    size_t mt = 0, t = 0;
    if (seq_counts(a, b, &mt, &t)) return -1.0;
    return t ? 2.0 * (double)mt / (double)t : 1.0; /* difflib._calculate_ratio */
}

/* Python's round(v) for 0 <= v < 2^52: nearest integer, ties to even. */
static double round_half_even(double v)
{
    double f = floor(v), d = v - f;
    if (d > 0.5 || (d == 0.5 && fmod(f, 2.0) != 0.0)) return f + 1.0;
    return f;
}

int acc_fuzz_ratio(const char *s1, const char *s2)
{
    if (strcmp(s1, s2) == 0) return 100; /* check_for_equivalence runs before ... */
    if (!*s1 || !*s2) return 0;          /* ... check_empty_string */
    double r = acc_sequence_ratio(s1, s2);
    if (r < 0) return -1;
    return (int)round_half_even(100 * r); /* utils.intr(100 * m.ratio()) */
}

double acc_code_sim_score(const char *pred, const char *gold)
{
    const char *p = pred;
    while (*p == '\n')
        p++;
    const char *line = p, *end;
    for (;;) { /* every line of split('\n'); the part after a final '\n' is the empty line */
        end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        int bad = memchr(line, '`', n) || memchr(line, '#', n);
        for (size_t k = 0; !bad && k + 1 < n; k++)
            bad = line[k] == '/' && line[k + 1] == '/';
        if (!bad) break;
        if (!end) {
            line = end = NULL; /* no line qualifies: prediction = "" */
            break;
        }
        line = end + 1;
    }
    size_t n = line ? (end ? (size_t)(end - line) : strlen(line)) : 0;
    char *cut = malloc(n + 1);
    if (!cut) return -1.0;
    if (n) memcpy(cut, line, n);
    cut[n] = 0;
    int r = acc_fuzz_ratio(cut, gold);
    free(cut);
    return r < 0 ? -1.0 : (double)r / 100;
}
