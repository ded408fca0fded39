/* Accuracy metrics of LongBench v1 (THUDM/LongBench, LongBench/metrics.py and eval.py) and the
 * string-match scores of the suite's synthetic RULER-style tasks.
 *
 * The module prefix is acc_ because runtime/results/metrics.h already owns metrics_ (latency summaries);
 * include this header as "accuracy/metrics.h".
 *
 * Every function takes NUL-terminated UTF-8 (any bytes are accepted: an invalid byte counts as
 * one U+FFFD character where characters are counted, and is kept as it is elsewhere) and returns
 * a score in [0, 1], or a negative value when an allocation failed. None keeps state between
 * calls. How each follows Python (whose str functions work on Unicode code points) is described
 * above its definition in metrics.c; the Chinese variants (qa_f1_zh, rouge_zh, retrieval_zh: jieba
 * segmentation) are not implemented. */
#ifndef PULSE_ACC_METRICS_H
#define PULSE_ACC_METRICS_H

#include <stddef.h>

enum acc_metric {
    ACC_METRIC_QA_F1 = 0,      /* qa_f1_score */
    ACC_METRIC_ROUGE_L,        /* rouge_score (ROUGE-L F of pltrdy/rouge 1.0.1) */
    ACC_METRIC_CLASSIFICATION, /* classification_score (needs all_classes) */
    ACC_METRIC_RETRIEVAL,      /* retrieval_score ("Paragraph N") */
    ACC_METRIC_COUNT,          /* count_score */
    ACC_METRIC_CODE_SIM,       /* code_sim_score (fuzzywuzzy ratio / 100) */
    ACC_METRIC_CONTAINS,       /* 1 if the answer occurs in the prediction (RULER part) */
    ACC_METRIC_CONTAINS_ALL,   /* fraction of the answers that occur (RULER string_match_all) */
    ACC_METRIC_EXACT_MATCH,    /* 1 if the whitespace-stripped prediction equals the answer */
    ACC_METRIC_COUNT_OF_KINDS
};

/* The metric's LongBench name ("qa_f1_score", ...); static storage. NULL when out of range. */
const char *acc_metric_name(enum acc_metric m);

/* normalize_answer: lowercase, drop ASCII punctuation, replace the words a/an/the by a space,
 * collapse whitespace. Returns a malloc'd string the caller frees; NULL when out of memory. */
char *acc_normalize_answer(const char *s);

/* Token F1 of the normalised texts (multiset overlap); 0 when nothing overlaps. */
double acc_qa_f1_score(const char *pred, const char *gold);

/* ROUGE-L F-measure as the `rouge` package computes it (sentences split on '.', words on
 * spaces, exclusive mode: distinct words, union-LCS). 0 where rouge raises (a text with no
 * sentence; a sentence pair whose LCS backtrack exceeds Python's recursion limit). */
double acc_rouge_score(const char *pred, const char *gold);

/* classification_score: classes[0..n_classes) found in pred, minus those that are strict
 * substrings of gold (with Python's skip-after-remove iteration); 1/len if gold is among them. */
double acc_classification_score(const char *pred, const char *gold, const char *const *classes,
                                size_t n_classes);

/* retrieval_score: the number N of the first "Paragraph N" in gold against every digit run of
 * pred; (#runs equal to N) / (#runs), 0 without runs or when gold has no "Paragraph N". */
double acc_retrieval_score(const char *pred, const char *gold);

/* count_score: (#digit runs of pred equal to gold) / (#digit runs), 0 without runs. */
double acc_count_score(const char *pred, const char *gold);

/* difflib.SequenceMatcher(None, a, b).ratio() over code points (autojunk on, as default):
 * 2*M/T, 1.0 when both are empty. */
double acc_sequence_ratio(const char *a, const char *b);

/* fuzzywuzzy fuzz.ratio (pure-Python path): 100 if equal, 0 if either is empty, else
 * round-half-even(100 * acc_sequence_ratio(s1, s2)). Negative when out of memory. */
int acc_fuzz_ratio(const char *s1, const char *s2);

/* code_sim_score: the first line of pred (after leading newlines) containing none of '`', '#',
 * "//" ("" if none), then fuzz.ratio(line, gold) / 100. */
double acc_code_sim_score(const char *pred, const char *gold);

/* 1 if answer occurs in pred, comparing lowercase (as RULER: r.lower() in pred.lower()). */
double acc_contains_score(const char *pred, const char *answer);

/* 1 if pred with Python-whitespace stripped from both ends equals answer byte for byte. */
double acc_exact_match_score(const char *pred, const char *answer);

/* One metric on one (prediction, answer) pair; classes are used by CLASSIFICATION only.
 * CONTAINS_ALL scores like CONTAINS here (the "all" is taken in acc_score_sample). */
double acc_metric_score(enum acc_metric m, const char *pred, const char *answer,
                        const char *const *classes, size_t n_classes);

/* One sample as eval.py scores it: when first_line_only (trec, triviaqa, samsum, lsht) pred is
 * cut to its first line after leading newlines; then the max over answers of the metric,
 * starting from 0 (0 without answers). CONTAINS_ALL gives the fraction of answers found. */
double acc_score_sample(enum acc_metric m, int first_line_only, const char *pred,
                        const char *const *answers, size_t n_answers, const char *const *classes,
                        size_t n_classes);

/* The task score of eval.py's scorer: round(100 * sum(scores) / n, 2), summed in order and
 * rounded half-even on the exact binary value, as Python's round does. NAN when n == 0. */
double acc_score_task(const double *scores, size_t n);

/* LongBench-E length bucket of a record's `length` field: 0 for < 4000 ("0-4k"), 1 for
 * 4000..7999 ("4-8k"), 2 for >= 8000 ("8k+"). */
int acc_length_bucket(long long length);

/* s with every maximal ill-formed subsequence replaced by U+FFFD, as Python's
 * bytes.decode("utf-8", errors="replace") reads it, into out (NUL-terminated; at most cap - 1
 * bytes, cut at a character boundary). Returns the bytes written; 0 with out = "" when out of
 * memory. A text for JSON, which must be valid UTF-8. */
size_t acc_utf8_replace(const char *s, char *out, size_t cap);

#endif
