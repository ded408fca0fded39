/* LongBench metrics (accuracy/metrics.c) against values computed by hand; each case states its
 * arithmetic. The same values come out of LongBench/metrics.py with rouge 1.0.1, fuzzywuzzy
 * (pure-Python difflib path) and CPython 3.11. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "accuracy/metrics.h"
#include "accuracy/metrics_impl.h"
#include "testutil.h"

#define TOL 1e-12

static void expect_norm(const char *in, const char *want, int line)
{
    char *got = acc_normalize_answer(in);
    tu_checks++;
    if (!got || strcmp(got, want) != 0) {
        tu_failures++;
        fprintf(stderr, "%s:%d: normalize_answer(\"%s\") = \"%s\", want \"%s\"\n", __FILE__, line,
                in, got ? got : "(null)", want);
    }
    free(got);
}
#define EXPECT_NORM(in, want) expect_norm(in, want, __LINE__)

static void test_normalize(void)
{
    /* lower -> "the cat's  hat!"; punctuation -> "the cats  hat"; "the" -> " "; spaces */
    EXPECT_NORM("The Cat's  hat!", "cats hat");
    /* "an apple a day" -> " apple   day" */
    EXPECT_NORM("An apple, a day.", "apple day");
    /* articles only as whole words */
    EXPECT_NORM("theater anthem", "theater anthem");
    /* punctuation goes first: "a-the" -> "athe", no longer an article */
    EXPECT_NORM("A-the", "athe");
    /* curly quotes are not string.punctuation but are non-word: \b on both sides of "the" */
    EXPECT_NORM("\xe2\x80\x9cthe\xe2\x80\x9d answer", "\xe2\x80\x9c \xe2\x80\x9d answer");
    /* Latin-1 uppercase lowers: "ÉMILE" -> "émile" */
    EXPECT_NORM("\xc3\x89MILE the Great", "\xc3\xa9mile great");
    /* U+0130 lowers to "i" + U+0307 (Python's full mapping) */
    EXPECT_NORM("\xc4\xb0stanbul", "i\xcc\x87stanbul");
    /* Cyrillic: "МОСКВА" -> "москва" */
    EXPECT_NORM("\xd0\x9c\xd0\x9e\xd0\xa1\xd0\x9a\xd0\x92\xd0\x90",
                "\xd0\xbc\xd0\xbe\xd1\x81\xd0\xba\xd0\xb2\xd0\xb0");
    EXPECT_NORM("", "");
    /* punctuation only */
    EXPECT_NORM("?!...", "");
    /* NBSP is whitespace for split() and a \b: "the" goes, then the spaces collapse */
    EXPECT_NORM("the\xc2\xa0"
                "cat",
                "cat");
    /* '²' is alphanumeric in Python: no boundary after "a" */
    EXPECT_NORM("a\xc2\xb2", "a\xc2\xb2");
    /* ill-formed bytes decode as Python's errors='replace' does: one U+FFFD per maximal
     * subpart (a truncated E2 82 is one, a surrogate ED A0 80 three), not a word character,
     * so an article after one goes (expected values from Python 3.11) */
    EXPECT_NORM("\xff the \xfe", "\xef\xbf\xbd \xef\xbf\xbd");
    EXPECT_NORM("\xffthe", "\xef\xbf\xbd");
    EXPECT_NORM("\xe2\x82the", "\xef\xbf\xbd");
    EXPECT_NORM("\xf0\x9f\x98 a x", "\xef\xbf\xbd x");
    EXPECT_NORM("\xed\xa0\x80" "an", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    /* final sigma: at a word's end after a cased letter (through the case-ignorable '.') it is
     * U+03C2, elsewhere U+03C3 ("ΟΔΟΣ ΣΑ Σ Α.Σ".lower() in Python; '.' then goes as
     * punctuation) */
    EXPECT_NORM("\xce\x9f\xce\x94\xce\x9f\xce\xa3 \xce\xa3\xce\x91 \xce\xa3 \xce\x91.\xce\xa3",
                "\xce\xbf\xce\xb4\xce\xbf\xcf\x82 \xcf\x83\xce\xb1 \xcf\x83 \xce\xb1\xcf\x82");
    /* U+3000 (ideographic space) separates words */
    EXPECT_NORM("x\xe3\x80\x80y", "x y");
}

static void test_qa_f1(void)
{
    /* "cat sat on mat" vs "cat on mat": overlap 3, P = 3/4, R = 1, F1 = 1.5 / 1.75 */
    EXPECT_NEAR(acc_qa_f1_score("The cat sat on the mat", "a cat on a mat"), 1.5 / 1.75, TOL);
    /* multiset overlap min(3, 1) = 1: P = 1/3, R = 1/2, F1 = (1/3) / (5/6) = 0.4 */
    EXPECT_NEAR(acc_qa_f1_score("paris paris paris", "paris london"), 0.4, TOL);
    /* case folding beyond ASCII */
    EXPECT_NEAR(acc_qa_f1_score("\xc3\x89mile", "\xc3\xa9mile"), 1.0, TOL);
    /* empty prediction, empty gold, punctuation only: no common token -> 0 */
    EXPECT_NEAR(acc_qa_f1_score("", "paris"), 0.0, 0);
    EXPECT_NEAR(acc_qa_f1_score("paris", ""), 0.0, 0);
    EXPECT_NEAR(acc_qa_f1_score("", ""), 0.0, 0);
    EXPECT_NEAR(acc_qa_f1_score("!!!", "!!!"), 0.0, 0);
    /* the articles vanish: "the" vs "a" -> both empty -> 0 */
    EXPECT_NEAR(acc_qa_f1_score("the", "a"), 0.0, 0);
}

static double f_lcs(double llcs, double m, double n)
{
    double r = llcs / m, p = llcs / n;
    return 2.0 * ((p * r) / (p + r + 1e-8));
}

/* "zz w0 w1 ... w{k-1}" */
static char *zz_words(int k)
{
    char *s = malloc((size_t)k * 8 + 8);
    if (!s) return NULL;
    size_t n = (size_t)sprintf(s, "zz");
    for (int i = 0; i < k; i++)
        n += (size_t)sprintf(s + n, " w%d", i);
    return s;
}

static void test_rouge(void)
{
    /* hyp sentences "the cat sat on the mat" | "it was happy"; ref "a cat sat on a mat" |
     * "the cat was happy". Distinct words: m = 8 (ref), n = 8 (hyp). Union of LCS words:
     * ref1 x hyp1 -> cat sat on mat; ref2 x hyp1 -> the cat (+the); ref2 x hyp2 -> was happy
     * -> 7 words. R = P = 7/8, F = 2 * (49/64) / (7/4 + 1e-8) = 0.874999995 */
    EXPECT_NEAR(acc_rouge_score("the cat sat on the mat. it was happy",
                                "a cat sat on a mat. the cat was happy"),
                f_lcs(7, 8, 8), TOL);
    EXPECT_NEAR(f_lcs(7, 8, 8), 0.874999995, 1e-15);
    /* identical: R = P = 1 -> 2 / (2 + 1e-8) = 0.999999995 */
    EXPECT_NEAR(acc_rouge_score("a b c", "a b c"), 0.999999995, 1e-15);
    /* exclusive mode: word sets, so "a a a" vs "a" is perfect */
    EXPECT_NEAR(acc_rouge_score("a a a", "a"), 0.999999995, 1e-15);
    /* rouge raises on a text with no sentence ("" or only dots) -> 0 */
    EXPECT_NEAR(acc_rouge_score("", "a"), 0.0, 0);
    EXPECT_NEAR(acc_rouge_score("...", "a"), 0.0, 0);
    EXPECT_NEAR(acc_rouge_score("a", ""), 0.0, 0);
    /* case-sensitive and no punctuation stripping beyond '.' */
    EXPECT_NEAR(acc_rouge_score("Cat", "cat"), 0.0, 0);
    EXPECT_NEAR(acc_rouge_score("cat,", "cat"), 0.0, 0);
    /* "a. ." -> sentences "a" and "" (a blank piece is one empty word): n = 2, m = 1,
     * LCS union {a}: R = 1, P = 1/2, F = 2 * 0.5 / (1.5 + 1e-8) */
    EXPECT_NEAR(acc_rouge_score("a. .", "a"), f_lcs(1, 1, 2), TOL);
    /* the backtrack of ref "zz" against "zz w0 .. w988" walks left 990 times, then one
     * diagonal step: 991 calls of _recon fit Python's recursion limit; F with m = 1, n = 990 */
    char *ok = zz_words(989), *over = zz_words(990);
    EXPECT(ok && over);
    if (ok && over) {
        EXPECT_NEAR(acc_rouge_score(ok, "zz"), f_lcs(1, 1, 990), TOL);
        /* one word more: 992 calls -> RecursionError in LongBench -> 0 */
        EXPECT_NEAR(acc_rouge_score(over, "zz"), 0.0, 0);
        /* with the match at the end the backtrack is one step: no recursion problem */
        EXPECT_NEAR(acc_rouge_score(over + 3, "w989"), f_lcs(1, 1, 990), TOL);
    }
    free(ok);
    free(over);
    /* invalid UTF-8 is only bytes here: equal words still match */
    EXPECT_NEAR(acc_rouge_score("\xff\xfe x", "\xff\xfe x"), 0.999999995, 1e-15);
}

static void test_classification(void)
{
    const char *trec[] = {"human", "location", "numeric"};
    /* matches [location]; gold among them -> 1/1 */
    EXPECT_NEAR(acc_classification_score("It is a location", "location", trec, 3), 1.0, 0);
    /* matches [human, location]; "human" is not part of "location" -> stays -> 1/2 */
    EXPECT_NEAR(acc_classification_score("human or location", "location", trec, 3), 0.5, 0);
    /* gold not predicted -> 0 */
    EXPECT_NEAR(acc_classification_score("numeric", "location", trec, 3), 0.0, 0);
    EXPECT_NEAR(acc_classification_score("", "location", trec, 3), 0.0, 0);
    EXPECT_NEAR(acc_classification_score("location", "location", trec, 0), 0.0, 0);
    /* Python's remove-while-iterating: matches [cat, at, c, the cat]; index 0 "cat" is a strict
     * substring of gold -> removed -> [at, c, the cat]; index 1 is now "c" -> removed ->
     * [at, the cat]; index 2 ends the loop. "at" survives: 1/2 (not 1) */
    const char *cls[] = {"cat", "at", "c", "the cat"};
    EXPECT_NEAR(acc_classification_score("the cat", "the cat", cls, 4), 0.5, 0);
    /* the empty class occurs in every prediction: matches ["", location]; "" is a strict
     * substring of gold -> removed -> [location] -> 1 */
    const char *with_empty[] = {"", "location"};
    EXPECT_NEAR(acc_classification_score("location", "location", with_empty, 2), 1.0, 0);
}

static void test_numbers(void)
{
    /* runs [12] -> 1/1 */
    EXPECT_NEAR(acc_retrieval_score("Paragraph 12", "Paragraph 12"), 1.0, 0);
    /* runs [3, 12, 7] -> 1/3 */
    EXPECT_NEAR(acc_retrieval_score("Paragraph 3 or Paragraph 12, not 7", "Paragraph 12"), 1.0 / 3,
                TOL);
    /* string comparison: "012" != "12" */
    EXPECT_NEAR(acc_retrieval_score("012", "Paragraph 12"), 0.0, 0);
    EXPECT_NEAR(acc_retrieval_score("none", "Paragraph 12"), 0.0, 0);
    EXPECT_NEAR(acc_retrieval_score("", "Paragraph 12"), 0.0, 0);
    /* gold without "Paragraph N" (LongBench raises IndexError) -> 0 */
    EXPECT_NEAR(acc_retrieval_score("3", "Para 3"), 0.0, 0);
    /* the first "Paragraph N" of gold counts: "Paragraph Paragraph 7" -> 7 */
    EXPECT_NEAR(acc_retrieval_score("7", "Paragraph Paragraph 7"), 1.0, 0);
    /* \d is Unicode: fullwidth "１２" is one run, not equal to "12" -> 0/1 */
    EXPECT_NEAR(acc_retrieval_score("Paragraph \xef\xbc\x91\xef\xbc\x92", "Paragraph 12"), 0.0, 0);
    /* Arabic-Indic three is a run of its own: runs [٣, 3] -> 1/2 */
    EXPECT_NEAR(acc_retrieval_score("\xd9\xa3 3", "Paragraph 3"), 0.5, 0);
    /* runs [5, 10] -> 1/2 */
    EXPECT_NEAR(acc_count_score("There are 5 unique paragraphs out of 10", "5"), 0.5, 0);
    EXPECT_NEAR(acc_count_score("", "5"), 0.0, 0);
    EXPECT_NEAR(acc_count_score("5", ""), 0.0, 0);
}

static void test_sequence_matcher(void)
{
    /* one block "bcd": 2 * 3 / 8 */
    EXPECT_NEAR(acc_sequence_ratio("abcd", "bcde"), 0.75, 0);
    EXPECT_NEAR(acc_sequence_ratio("", ""), 1.0, 0);
    EXPECT_NEAR(acc_sequence_ratio("", "abc"), 0.0, 0);
    /* code points, not bytes: "caf" matches, T = 4 + 4 -> 0.75 (bytes would give 6/9) */
    EXPECT_NEAR(acc_sequence_ratio("caf\xc3\xa9", "cafe"), 0.75, 0);
    /* blocks "ab" then "c" after it? a = "abxcd", b = "abcd": longest "ab" (0,0,2); right part
     * "xcd" vs "cd" -> "cd": M = 4, T = 9 */
    EXPECT_NEAR(acc_sequence_ratio("abxcd", "abcd"), 8.0 / 9, TOL);
    /* autojunk: len(b) = 200 >= 200, 'x' occurs 198 > 200 // 100 + 1 = 3 times -> popular,
     * so only "ab" can seed a match: M = 2, ratio 4/207 (without autojunk "xxxxx": 10/207) */
    char b[201];
    memcpy(b, "ab", 2);
    memset(b + 2, 'x', 198);
    b[200] = 0;
    EXPECT_NEAR(acc_sequence_ratio("xxxxxab", b), 4.0 / 207, TOL);
    /* fuzz.ratio: 100 * 4/207 = 1.93 -> 2 */
    EXPECT_EQ_INT(acc_fuzz_ratio("xxxxxab", b), 2);
    /* 199 characters: no autojunk; longest "xxxxx" (0,2,5), nothing right of it matches
     * ("ab" vs x's): M = 5, ratio 10/206 */
    b[199] = 0;
    EXPECT_NEAR(acc_sequence_ratio("xxxxxab", b), 10.0 / 206, TOL);

    /* fuzz.ratio: 100 * 0.75 = 75 */
    EXPECT_EQ_INT(acc_fuzz_ratio("abcd", "bcde"), 75);
    /* equal strings (even empty) give 100 before the empty check */
    EXPECT_EQ_INT(acc_fuzz_ratio("", ""), 100);
    EXPECT_EQ_INT(acc_fuzz_ratio("", "a"), 0);
    EXPECT_EQ_INT(acc_fuzz_ratio("a", ""), 0);
    /* round half to even: M = 1, T = 16 -> 12.5 -> 12; M = 3 -> 37.5 -> 38 */
    EXPECT_EQ_INT(acc_fuzz_ratio("abbbbbbb", "accccccc"), 12);
    EXPECT_EQ_INT(acc_fuzz_ratio("abcxxxxx", "abcyyyyy"), 38);
}

static void test_code_sim(void)
{
    /* leading newlines and the comment line skipped; "x = foo(a, b)" (13) vs "x = foo(a,b)"
     * (12): blocks "x = foo(a," and "b)" -> M = 12, 24/25 -> 96 -> 0.96 */
    EXPECT_NEAR(acc_code_sim_score("\n\n# comment\nx = foo(a, b)\nmore", "x = foo(a,b)"), 0.96,
                TOL);
    /* lines "```python", "// x", "" -> the empty last line: fuzz("", "x") = 0 */
    EXPECT_NEAR(acc_code_sim_score("```python\n// x\n", "x"), 0.0, 0);
    /* ... and fuzz("", "") = 100 -> 1 */
    EXPECT_NEAR(acc_code_sim_score("```python\n// x\n", ""), 1.0, 0);
    /* the only line has '#': no line qualifies -> "" */
    EXPECT_NEAR(acc_code_sim_score("a # b", "a # b"), 0.0, 0);
    EXPECT_NEAR(acc_code_sim_score("", ""), 1.0, 0);
    EXPECT_NEAR(acc_code_sim_score("", "x"), 0.0, 0);
    /* a single '/' is fine: "a/b" vs "a/b" -> 1 */
    EXPECT_NEAR(acc_code_sim_score("a/b\n", "a/b"), 1.0, 0);
}

static void test_synthetic(void)
{
    EXPECT_NEAR(acc_contains_score("The pass key is 71432.", "71432"), 1.0, 0);
    EXPECT_NEAR(acc_contains_score("The pass key is 7143.", "71432"), 0.0, 0);
    /* case-insensitive, as RULER: "ABC" in "xabcx" */
    EXPECT_NEAR(acc_contains_score("xabcx", "ABC"), 1.0, 0);
    EXPECT_NEAR(acc_contains_score("\xc3\x89mile", "\xc3\xa9mile"), 1.0, 0);
    EXPECT_NEAR(acc_contains_score("", "x"), 0.0, 0);
    /* "" is in every string */
    EXPECT_NEAR(acc_contains_score("abc", ""), 1.0, 0);
    /* exact match after stripping whitespace (NBSP included) */
    EXPECT_NEAR(acc_exact_match_score("  42\n", "42"), 1.0, 0);
    EXPECT_NEAR(acc_exact_match_score("\xc2\xa0"
                                      "42\xe3\x80\x80",
                                      "42"),
                1.0, 0);
    EXPECT_NEAR(acc_exact_match_score("42.", "42"), 0.0, 0);
    EXPECT_NEAR(acc_exact_match_score("", ""), 1.0, 0);
    EXPECT_NEAR(acc_exact_match_score(" \xe3\x80", "\xe3\x80"), 1.0, 0); /* truncated char kept */
}

static void test_driver(void)
{
    const char *classes[] = {"human", "location"};
    const char *gold_loc[] = {"location"};
    /* first line after leading newlines: "location" -> matches [location] -> 1 */
    EXPECT_NEAR(acc_score_sample(ACC_METRIC_CLASSIFICATION, 1, "\n\nlocation\nhuman", gold_loc, 1,
                                 classes, 2),
                1.0, 0);
    /* whole prediction: matches [human, location] -> 1/2 */
    EXPECT_NEAR(acc_score_sample(ACC_METRIC_CLASSIFICATION, 0, "\n\nlocation\nhuman", gold_loc, 1,
                                 classes, 2),
                0.5, 0);
    /* max over answers: F1("paris", "paris") = 1, F1("paris", "city of paris") = 0.5 -> 1 */
    const char *answers[] = {"the city of Paris", "Paris"};
    EXPECT_NEAR(acc_score_sample(ACC_METRIC_QA_F1, 0, "Paris", answers, 2, NULL, 0), 1.0, 0);
    EXPECT_NEAR(acc_score_sample(ACC_METRIC_QA_F1, 0, "Paris", answers, 1, NULL, 0), 0.5, TOL);
    /* no answers -> 0 */
    EXPECT_NEAR(acc_score_sample(ACC_METRIC_QA_F1, 0, "Paris", answers, 0, NULL, 0), 0.0, 0);
    /* CONTAINS_ALL: 2 of 3 answers occur */
    const char *vars[] = {"AAAAA", "BBBBB", "CCCCC"};
    EXPECT_NEAR(acc_score_sample(ACC_METRIC_CONTAINS_ALL, 0, "aaaaa and BBBBB", vars, 3, NULL, 0),
                2.0 / 3, TOL);
    EXPECT_NEAR(acc_score_sample(ACC_METRIC_CONTAINS, 0, "aaaaa and BBBBB", vars, 3, NULL, 0), 1.0,
                0);
    /* first line of an empty prediction is "" */
    EXPECT_NEAR(acc_score_sample(ACC_METRIC_QA_F1, 1, "", answers, 2, NULL, 0), 0.0, 0);

    /* task score: 100 * 1.5 / 3 = 50 */
    double s3[] = {1.0, 0.0, 0.5};
    EXPECT_NEAR(acc_score_task(s3, 3), 50.0, 0);
    /* 100 / 3 = 33.333... -> 33.33 */
    double t3[] = {1.0, 0.0, 0.0};
    EXPECT_NEAR(acc_score_task(t3, 3), 33.33, 0);
    EXPECT(isnan(acc_score_task(s3, 0)));
    /* ties round to even like Python's round(x, 2): 97 of 800 -> 12.125 -> 12.12;
     * 99 of 800 -> 12.375 -> 12.38 */
    double *v = calloc(800, sizeof *v);
    EXPECT(v != NULL);
    if (v) {
        for (int i = 0; i < 97; i++)
            v[i] = 1.0;
        EXPECT_NEAR(acc_score_task(v, 800), 12.12, 0);
        v[97] = v[98] = 1.0;
        EXPECT_NEAR(acc_score_task(v, 800), 12.38, 0);
    }
    free(v);

    EXPECT_EQ_INT(acc_length_bucket(-1), 0);
    EXPECT_EQ_INT(acc_length_bucket(3999), 0);
    EXPECT_EQ_INT(acc_length_bucket(4000), 1);
    EXPECT_EQ_INT(acc_length_bucket(7999), 1);
    EXPECT_EQ_INT(acc_length_bucket(8000), 2);
    EXPECT(strcmp(acc_metric_name(ACC_METRIC_ROUGE_L), "rouge_score") == 0);
    EXPECT(strcmp(acc_metric_name(ACC_METRIC_CODE_SIM), "code_sim_score") == 0);
    EXPECT(acc_metric_name(ACC_METRIC_COUNT_OF_KINDS) == NULL);
}

/* Any bytes in, a score in [0, 1] out, for every metric. */
static void test_any_bytes(void)
{
    const char *odd[] = {
        "",         "\xff",     "\xc3",           "\xe2\x80",         "\xf0\x9f\x98",
        "\x80\x80", "....",     ". . .",          "\xed\xa0\x80",     "\xf4\x90\x80\x80",
        "\n\n\n",   "# // ` #", "Paragraph \xff", "\xc0\xaf the a an"};
    const char *cls[] = {"\xff", "", "a"};
    size_t n = sizeof odd / sizeof odd[0];
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < n; j++) {
            for (int m = 0; m < ACC_METRIC_COUNT_OF_KINDS; m++) {
                double s = acc_metric_score((enum acc_metric)m, odd[i], odd[j], cls, 3);
                if (!(s >= 0.0 && s <= 1.0)) bad++;
            }
            int r = acc_fuzz_ratio(odd[i], odd[j]);
            if (r < 0 || r > 100) bad++;
        }
    }
    EXPECT_EQ_INT(bad, 0);
}

/* UTF-8 of code point x into out (room for 4); returns its length. */
static size_t utf8_of(unsigned long x, char *out)
{
    if (x < 0x80) {
        out[0] = (char)x;
        return 1;
    }
    if (x < 0x800) {
        out[0] = (char)(0xC0 | (x >> 6));
        out[1] = (char)(0x80 | (x & 0x3F));
        return 2;
    }
    if (x < 0x10000) {
        out[0] = (char)(0xE0 | (x >> 12));
        out[1] = (char)(0x80 | ((x >> 6) & 0x3F));
        out[2] = (char)(0x80 | (x & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (x >> 18));
    out[1] = (char)(0x80 | ((x >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((x >> 6) & 0x3F));
    out[3] = (char)(0x80 | (x & 0x3F));
    return 4;
}

/* Every code point that CPython 3.11 assigns (Unicode 14) against what it says of it
 * (tests/data/python_unicode.txt, made by scripts/make_unicode_ref.py): \w, \d, isspace()
 * and lower(), with no difference. */
#define N_CP 0x110000
static void test_unicode_reference(void)
{
    FILE *f = fopen("tests/data/python_unicode.txt", "r");
    EXPECT(f != NULL);
    if (!f) return;
    unsigned char *cls = calloc(N_CP, 1); /* bits: assigned, word, digit, space */
    char(*low)[12] = calloc(N_CP, sizeof *low); /* "" where lower() is the code point itself */
    EXPECT(cls && low);
    char line[256], kind[16];
    int lines = 0;
    while (cls && low && fgets(line, sizeof line, f)) {
        unsigned lo, hi;
        if (line[0] == '#' || sscanf(line, "%15s %x %x", kind, &lo, &hi) < 2 || lo >= N_CP)
            continue;
        lines++;
        if (!strcmp(kind, "lower")) { /* lower CP L1 [L2 ...] */
            char *p = strchr(strchr(line, ' ') + 1, ' '), *end;
            size_t w = 0;
            for (unsigned long x; p && w + 4 < sizeof low[0]; p = end) {
                x = strtoul(p, &end, 16);
                if (end == p) break;
                w += utf8_of(x, low[lo] + w);
            }
            low[lo][w] = 0;
            continue;
        }
        const int bit = !strcmp(kind, "assigned") ? 1
                        : !strcmp(kind, "word")   ? 2
                        : !strcmp(kind, "digit")  ? 4
                        : !strcmp(kind, "space")  ? 8
                                                  : 0;
        for (unsigned c = lo; bit && c <= hi && c < N_CP; c++)
            cls[c] |= (unsigned char)bit;
    }
    fclose(f);
    EXPECT(lines > 2000);
    static const char *const what[4] = {"\\w", "\\d", "isspace", "lower"};
    long checked = 0, bad[4] = {0};
    for (unsigned c = 0; cls && low && c < N_CP; c++) {
        if (!(cls[c] & 1) || (c >= 0xD800 && c <= 0xDFFF) || c == 0x3A3) continue;
        checked++;
        char got[8], want[12];
        acc_cp_lower(c, got);
        if (low[c][0])
            memcpy(want, low[c], sizeof want);
        else
            want[utf8_of(c, want)] = 0;
        const int diff[4] = {acc_cp_is_word(c) != !!(cls[c] & 2),
                             acc_cp_is_digit(c) != !!(cls[c] & 4),
                             acc_cp_is_space(c) != !!(cls[c] & 8), strcmp(got, want) != 0};
        for (int k = 0; k < 4; k++)
            if (diff[k] && bad[k]++ < 5) fprintf(stderr, "U+%04X: %s differs\n", c, what[k]);
    }
    fprintf(stderr,
            "unicode: %ld code points against CPython: %ld differ in \\w, %ld in \\d, %ld in "
            "isspace, %ld in lower\n",
            checked, bad[0], bad[1], bad[2], bad[3]);
    EXPECT(checked > 140000);
    for (int k = 0; k < 4; k++)
        EXPECT_EQ_INT(bad[k], 0);
    free(cls);
    free(low);
}

/* acc_utf8_replace: ill-formed UTF-8 as Python's errors="replace" reads it. */
static void test_utf8_replace(void)
{
    static const struct {
        const char *in, *want;
    } cases[] = {{"plain", "plain"},
                 {"caf\xc3\xa9", "caf\xc3\xa9"},          /* valid two-byte character */
                 {"a\xff" "b", "a\xef\xbf\xbd" "b"},      /* a byte no character starts */
                 {"\xe2\x82", "\xef\xbf\xbd"},            /* one maximal truncated prefix */
                 {"\xe2\x82x", "\xef\xbf\xbdx"},
                 {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"}}; /* overlong: two */
    char out[64];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = acc_utf8_replace(cases[i].in, out, sizeof out);
        EXPECT_EQ_INT((long long)n, (long long)strlen(cases[i].want));
        EXPECT(strcmp(out, cases[i].want) == 0);
    }
    /* a small buffer cuts at a character boundary, never inside U+FFFD */
    EXPECT_EQ_INT((long long)acc_utf8_replace("ab\xff", out, 5), 2);
    EXPECT(strcmp(out, "ab") == 0);
}

int main(void)
{
    test_utf8_replace();
    test_unicode_reference();
    test_normalize();
    test_qa_f1();
    test_rouge();
    test_classification();
    test_numbers();
    test_sequence_matcher();
    test_code_sim();
    test_synthetic();
    test_driver();
    test_any_bytes();
    return tu_finish("test_acc_metrics");
}
