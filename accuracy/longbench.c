/* LongBench v1 records, tasks and prompts. Templates and generation lengths are copied from
 * THUDM/LongBench LongBench/config/dataset2prompt.json and dataset2maxlen.json (typos included:
 * narrativeqa's "asconcisely"), metrics from eval.py's dataset2metric, the chat and samsum
 * stop-token rules from pred.py. The Chinese tasks (multifieldqa_zh, dureader, vcsum, lsht,
 * passage_retrieval_zh) are left out with their jieba-based metrics.
 *
 * The synthetic tasks are this suite's own (RULER-style, NVIDIA/RULER scripts/data/synthetic):
 * their records use the LongBench format, and each prompt ends with an answer prefix, so it is a
 * plain completion prompt (no chat template). What a generator puts in a record:
 *   passkey            context: filler with "The pass key is N. Remember it. N is the pass key."
 *                      input: "" (unused); answers: ["N"]
 *   niah_multikey      context: haystack with needles "One of the special magic numbers for
 *                      KEY is: V."; input: the queried KEY; answers: [V]
 *   variable_tracking  context: noise with "VAR X = V", "VAR Y = VAR X", ...; input: V;
 *                      answers: every variable name in the chain (scored: fraction found)
 *   kv_retrieval       context: a JSON object of uuid -> uuid; input: the key; answers: [value]
 * Scoring is case-insensitive containment (RULER's string_match_part, and string_match_all for
 * variable_tracking). */
#include "accuracy/longbench.h"

#include "accuracy/chat.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* ---------------------------------------------------------------- tasks */

#define QA_PASSAGES                                                                                \
    "Answer the question based on the given passages. Only give me the answer and do not "         \
    "output any other words.\n\nThe following are given passages.\n{context}\n\nAnswer the "       \
    "question based on the given passages. Only give me the answer and do not output any "         \
    "other words.\n\nQuestion: {input}\nAnswer:"

#define QASPER_RULES                                                                               \
    "Answer the question as concisely as you can, using a single phrase or sentence if "           \
    "possible. If the question cannot be answered based on the information in the article, "       \
    "write \"unanswerable\". If the question is a yes/no question, answer \"yes\", \"no\", or "    \
    "\"unanswerable\". Do not provide any explanation."

static const struct longbench_task TASKS[] = {
    {"narrativeqa",
     "You are given a story, which can be either a novel or a movie script, and a question. "
     "Answer the question asconcisely as you can, using a single phrase if possible. Do not "
     "provide any explanation.\n\nStory: {context}\n\nNow, answer the question based on the "
     "story asconcisely as you can, using a single phrase if possible. Do not provide any "
     "explanation.\n\nQuestion: {input}\n\nAnswer:",
     128, ACC_METRIC_QA_F1, 1, 0, 0, 0, NULL},
    {"qasper",
     "You are given a scientific article and a question. " QASPER_RULES
     "\n\nArticle: {context}\n\n Answer the question based on the above article as concisely "
     "as you can, using a single phrase or sentence if possible. If the question cannot be "
     "answered based on the information in the article, write \"unanswerable\". If the "
     "question is a yes/no question, answer \"yes\", \"no\", or \"unanswerable\". Do not "
     "provide any explanation.\n\nQuestion: {input}\n\nAnswer:",
     128, ACC_METRIC_QA_F1, 1, 0, 0, 0, NULL},
    {"multifieldqa_en",
     "Read the following text and answer briefly.\n\n{context}\n\nNow, answer the following "
     "question based on the above text, only give me the answer and do not output any other "
     "words.\n\nQuestion: {input}\nAnswer:",
     64, ACC_METRIC_QA_F1, 1, 0, 0, 0, NULL},
    {"hotpotqa", QA_PASSAGES, 32, ACC_METRIC_QA_F1, 1, 0, 0, 0, NULL},
    {"2wikimqa", QA_PASSAGES, 32, ACC_METRIC_QA_F1, 1, 0, 0, 0, NULL},
    {"musique", QA_PASSAGES, 32, ACC_METRIC_QA_F1, 1, 0, 0, 0, NULL},
    {"gov_report",
     "You are given a report by a government agency. Write a one-page summary of the report."
     "\n\nReport:\n{context}\n\nNow, write a one-page summary of the report.\n\nSummary:",
     512, ACC_METRIC_ROUGE_L, 1, 0, 0, 0, NULL},
    {"qmsum",
     "You are given a meeting transcript and a query containing a question or instruction. "
     "Answer the query in one or more sentences.\n\nTranscript:\n{context}\n\nNow, answer the "
     "query based on the above meeting transcript in one or more sentences.\n\nQuery: {input}"
     "\nAnswer:",
     512, ACC_METRIC_ROUGE_L, 1, 0, 0, 0, NULL},
    {"multi_news",
     "You are given several news passages. Write a one-page summary of all news. \n\nNews:\n"
     "{context}\n\nNow, write a one-page summary of all the news.\n\nSummary:",
     512, ACC_METRIC_ROUGE_L, 1, 0, 0, 0, NULL},
    {"trec",
     "Please determine the type of the question below. Here are some examples of questions."
     "\n\n{context}\n{input}",
     64, ACC_METRIC_CLASSIFICATION, 0, 1, 0, 0, NULL},
    {"triviaqa",
     "Answer the question based on the given passage. Only give me the answer and do not "
     "output any other words. The following are some examples.\n\n{context}\n\n{input}",
     32, ACC_METRIC_QA_F1, 0, 1, 0, 0, NULL},
    {"samsum",
     "Summarize the dialogue into a few short sentences. The following are some examples."
     "\n\n{context}\n\n{input}",
     128, ACC_METRIC_ROUGE_L, 0, 1, 1, 0, NULL},
    {"passage_count",
     "There are some paragraphs below sourced from Wikipedia. Some of them may be duplicates. "
     "Please carefully read these paragraphs and determine how many unique paragraphs there "
     "are after removing duplicates. In other words, how many non-repeating paragraphs are "
     "there in total?\n\n{context}\n\nPlease enter the final count of unique paragraphs after "
     "removing duplicates. The output format should only contain the number, such as 1, 2, 3, "
     "and so on.\n\nThe final answer is: ",
     32, ACC_METRIC_COUNT, 1, 0, 0, 0, NULL},
    {"passage_retrieval_en",
     "Here are 30 paragraphs from Wikipedia, along with an abstract. Please determine which "
     "paragraph the abstract is from.\n\n{context}\n\nThe following is an abstract.\n\n{input}"
     "\n\nPlease enter the number of the paragraph that the abstract is from. The answer "
     "format must be like \"Paragraph 1\", \"Paragraph 2\", etc.\n\nThe answer is: ",
     32, ACC_METRIC_RETRIEVAL, 1, 0, 0, 0, NULL},
    {"lcc", "Please complete the code given below. \n{context}Next line of code:\n", 64,
     ACC_METRIC_CODE_SIM, 0, 0, 0, 0, NULL},
    {"repobench-p", "Please complete the code given below. \n{context}{input}Next line of code:\n",
     64, ACC_METRIC_CODE_SIM, 0, 0, 0, 0, NULL},
    /* synthetic */
    {"passkey",
     "There is an important piece of information hidden inside a lot of irrelevant text. Find "
     "it and memorize it. I will quiz you about the important information there.\n\n{context}"
     "\n\nWhat is the pass key?",
     32, ACC_METRIC_CONTAINS, 1, 0, 0, 1, " The pass key is"},
    {"niah_multikey",
     "Some special magic numbers are hidden within the following text. Make sure to memorize "
     "it. I will quiz you about the numbers afterwards.\n{context}\nWhat is the special magic "
     "number for {input} mentioned in the provided text?",
     128, ACC_METRIC_CONTAINS, 1, 0, 0, 1,
     " The special magic number for {input} mentioned in the provided text is"},
    {"variable_tracking",
     "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n"
     "{context}\nQuestion: Find all variables that are assigned the value {input} in the text "
     "above.",
     30, ACC_METRIC_CONTAINS_ALL, 1, 0, 0, 1,
     " Answer: According to the chain(s) of variable assignment in the text above, the "
     "variables assigned the value {input} are:"},
    {"kv_retrieval",
     "Extract the value corresponding to the specified key in the JSON object below.\n\nJSON "
     "data:\n{context}\n\nKey: \"{input}\"",
     64, ACC_METRIC_CONTAINS, 1, 0, 0, 1, "\nCorresponding value:"},
};

size_t longbench_task_count(void)
{
    return sizeof TASKS / sizeof TASKS[0];
}

const struct longbench_task *longbench_task_at(size_t i)
{
    return i < longbench_task_count() ? &TASKS[i] : NULL;
}

const struct longbench_task *longbench_task_find(const char *name)
{
    for (size_t i = 0; name && i < longbench_task_count(); i++)
        if (strcmp(TASKS[i].name, name) == 0) return &TASKS[i];
    return NULL;
}

/* ---------------------------------------------------------------- templates */

/* One pass of str.format: measures (out == NULL) or writes the result; its length or -1. */
static long long fill_pass(const char *t, const char *context, const char *input, char *out,
                           char *err, size_t errlen)
{
    size_t n = 0;
    for (size_t i = 0; t[i];) {
        const char *piece = t + i;
        size_t len = 1;
        if (t[i] == '{' && t[i + 1] == '{') {
            i += 2;
        } else if (t[i] == '}' && t[i + 1] == '}') {
            piece = "}", i += 2;
        } else if (t[i] == '}') {
            snprintf(err, errlen, "template: single '}' at offset %zu", i);
            return -1;
        } else if (t[i] == '{') {
            const char *close = strchr(t + i + 1, '}');
            if (!close) {
                snprintf(err, errlen, "template: '{' at offset %zu is not closed", i);
                return -1;
            }
            size_t nl = (size_t)(close - (t + i + 1));
            if (nl == 7 && memcmp(t + i + 1, "context", 7) == 0) {
                piece = context;
            } else if (nl == 5 && memcmp(t + i + 1, "input", 5) == 0) {
                piece = input;
            } else {
                snprintf(err, errlen,
                         "template: unknown placeholder {%.*s} at offset %zu "
                         "(expected {context} or {input})",
                         (int)(nl > 40 ? 40 : nl), t + i + 1, i);
                return -1;
            }
            len = strlen(piece);
            i += nl + 2;
        } else {
            i++;
        }
        if (len > (size_t)INT64_MAX - n) {
            snprintf(err, errlen, "template: the prompt is too long");
            return -1;
        }
        if (out) memcpy(out + n, piece, len);
        n += len;
    }
    if (out) out[n] = 0;
    return (long long)n;
}

char *longbench_fill_template(const char *tmpl, const char *context, const char *input, char *err,
                              size_t errlen)
{
    if (!tmpl) {
        snprintf(err, errlen, "template: none given");
        return NULL;
    }
    context = context ? context : "";
    input = input ? input : "";
    long long n = fill_pass(tmpl, context, input, NULL, err, errlen);
    if (n < 0) return NULL;
    char *out = malloc((size_t)n + 1);
    if (!out) {
        snprintf(err, errlen, "template: out of memory for a %lld-byte prompt", n);
        return NULL;
    }
    fill_pass(tmpl, context, input, out, err, errlen);
    return out;
}

char *longbench_fill_task(const struct longbench_task *task, const char *context, const char *input,
                          int chat, char *err, size_t errlen)
{
    char *p = longbench_fill_template(task->prompt, context, input, err, errlen);
    char *a = p && task->answer ? longbench_fill_template(task->answer, context, input, err, errlen)
                                : NULL;
    if (!p || (task->answer && !a)) {
        free(p);
        return NULL;
    }
    const enum chat_template c = task->chat ? (enum chat_template)chat : CHAT_NONE;
    char *q = c != CHAT_NONE ? chat_apply(c, p) : p;
    if (q != p) free(p);
    /* under a template the answer opens the model's turn: no blank before it */
    const char *ans = a ? a : "";
    while (c != CHAT_NONE && (*ans == ' ' || *ans == '\n'))
        ans++;
    const size_t lq = q ? strlen(q) : 0, la = strlen(ans);
    char *out = q ? malloc(lq + la + 1) : NULL;
    if (out) {
        memcpy(out, q, lq);
        memcpy(out + lq, ans, la + 1);
    } else {
        snprintf(err, errlen, "out of memory for a prompt");
    }
    free(q);
    free(a);
    return out;
}

char *longbench_build_prompt(const struct longbench_task *task, const struct longbench_sample *s,
                             int chat, char *err, size_t errlen)
{
    return longbench_fill_task(task, s->context, s->input, chat, err, errlen);
}

double longbench_score_sample(const struct longbench_task *task, const struct longbench_sample *s,
                              const char *pred)
{
    return acc_score_sample(task->metric, task->first_line_only, pred, s->answers, s->n_answers,
                            s->all_classes, s->n_classes);
}

/* ---------------------------------------------------------------- the set */

struct longbench_set {
    struct longbench_sample *v;
    json_t **roots; /* the parsed line of each sample: its strings live here */
    size_t n, cap;
    size_t n_bad;
    char first_bad[320];
};

void longbench_free(struct longbench_set *set)
{
    if (!set) return;
    for (size_t i = 0; i < set->n; i++) {
        free((void *)set->v[i].answers);
        free((void *)set->v[i].all_classes);
        json_decref(set->roots[i]);
    }
    free(set->v);
    free(set->roots);
    free(set);
}

size_t longbench_count(const struct longbench_set *set)
{
    return set ? set->n : 0;
}

const struct longbench_sample *longbench_get(const struct longbench_set *set, size_t i)
{
    return set && i < set->n ? &set->v[i] : NULL;
}

size_t longbench_bad_lines(const struct longbench_set *set)
{
    return set ? set->n_bad : 0;
}

const char *longbench_first_bad(const struct longbench_set *set)
{
    return set ? set->first_bad : "";
}

/* ---------------------------------------------------------------- records */

/* An optional string field: "" when missing or null; -1 (reason in why) on another type. */
static int get_string(json_t *root, const char *key, const char **out, char *why, size_t cap)
{
    json_t *v = json_object_get(root, key);
    *out = "";
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) {
        snprintf(why, cap, "\"%s\" is not a string", key);
        return -1;
    }
    *out = json_string_value(v);
    return 0;
}

/* An array of strings into a malloc'd pointer array (non-NULL even when empty). */
static int get_strings(json_t *v, const char *key, const char *const **out, size_t *n, char *why,
                       size_t cap)
{
    if (!json_is_array(v)) {
        snprintf(why, cap, "\"%s\" is not an array of strings", key);
        return -1;
    }
    size_t len = json_array_size(v);
    const char **a = malloc((len ? len : 1) * sizeof *a);
    if (!a) {
        snprintf(why, cap, "out of memory for \"%s\"", key);
        return PULSE_ERR_NOMEM;
    }
    for (size_t k = 0; k < len; k++) {
        json_t *e = json_array_get(v, k);
        if (!json_is_string(e)) {
            snprintf(why, cap, "\"%s\"[%zu] is not a string", key, k);
            free(a);
            return -1;
        }
        a[k] = json_string_value(e);
    }
    *out = a, *n = len;
    return 0;
}

/* Fills s from a parsed line; 0, -1 (malformed, reason in why) or PULSE_ERR_NOMEM. */
static int parse_record(json_t *root, struct longbench_sample *s, char *why, size_t cap)
{
    if (!json_is_object(root)) {
        snprintf(why, cap, "the line is not a JSON object");
        return -1;
    }
    json_t *ctx = json_object_get(root, "context"), *ans = json_object_get(root, "answers");
    if (!ctx || !json_is_string(ctx)) {
        snprintf(why, cap, ctx ? "\"context\" is not a string" : "\"context\" is missing");
        return -1;
    }
    if (!ans) {
        snprintf(why, cap, "\"answers\" is missing");
        return -1;
    }
    s->context = json_string_value(ctx);
    if (get_string(root, "input", &s->input, why, cap) ||
        get_string(root, "dataset", &s->dataset, why, cap) ||
        get_string(root, "_id", &s->id, why, cap))
        return -1;
    json_t *len = json_object_get(root, "length");
    s->length = -1;
    if (len && !json_is_null(len)) {
        if (!json_is_integer(len)) {
            snprintf(why, cap, "\"length\" is not an integer");
            return -1;
        }
        s->length = (long long)json_integer_value(len);
    }
    int rc = get_strings(ans, "answers", &s->answers, &s->n_answers, why, cap);
    if (rc) return rc;
    json_t *cls = json_object_get(root, "all_classes");
    if (cls && !json_is_null(cls)) {
        rc = get_strings(cls, "all_classes", &s->all_classes, &s->n_classes, why, cap);
        if (rc) {
            free((void *)s->answers);
            return rc;
        }
    }
    return 0;
}

static int set_push(struct longbench_set *set, const struct longbench_sample *s, json_t *root)
{
    if (set->n == set->cap) {
        size_t cap = set->cap ? 2 * set->cap : 64;
        struct longbench_sample *v = realloc(set->v, cap * sizeof *v);
        if (!v) return PULSE_ERR_NOMEM;
        set->v = v;
        json_t **r = realloc(set->roots, cap * sizeof *r);
        if (!r) return PULSE_ERR_NOMEM;
        set->roots = r, set->cap = cap;
    }
    set->v[set->n] = *s;
    set->roots[set->n] = root;
    set->n++;
    return PULSE_OK;
}

/* Parses one line; PULSE_OK (sample kept), 1 (malformed, reason in why) or PULSE_ERR_NOMEM. */
static int load_line(struct longbench_set *set, const char *p, size_t n, size_t line, char *why,
                     size_t cap)
{
    json_error_t je;
    json_t *root = json_loadb(p, n, 0, &je);
    if (!root) {
        snprintf(why, cap, "invalid JSON at column %d: %s", je.column, je.text);
        return 1;
    }
    struct longbench_sample s = {0};
    s.line = line;
    int rc = parse_record(root, &s, why, cap);
    if (rc == 0) {
        rc = set_push(set, &s, root);
        if (rc == PULSE_OK) return PULSE_OK;
        snprintf(why, cap, "out of memory after %zu samples", set->n);
        free((void *)s.all_classes);
        free((void *)s.answers);
    }
    json_decref(root);
    return rc == -1 ? 1 : PULSE_ERR_NOMEM;
}

static int is_blank(const char *p, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (p[k] != ' ' && p[k] != '\t' && p[k] != '\r') return 0;
    return 1;
}

int longbench_load_mem(const char *name, const char *buf, size_t len,
                       const struct longbench_load_params *params, struct longbench_set **out,
                       char *err, size_t errlen)
{
    static const struct longbench_load_params defaults = {LONGBENCH_BAD_FAIL, NULL};
    const struct longbench_load_params *pp = params ? params : &defaults;
    name = name ? name : "(memory)";
    *out = NULL;
    struct longbench_set *set = calloc(1, sizeof *set);
    if (!set) {
        snprintf(err, errlen, "%s: out of memory", name);
        return PULSE_ERR_NOMEM;
    }
    char why[256];
    size_t pos = 0, line = 0;
    while (pos < len) {
        const char *p = buf + pos, *nl = memchr(p, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - p) : len - pos;
        pos += n + (nl ? 1 : 0);
        line++;
        if (n && p[n - 1] == '\r') n--;
        if (is_blank(p, n)) continue;
        int rc = load_line(set, p, n, line, why, sizeof why);
        if (rc == PULSE_OK) continue;
        if (rc == PULSE_ERR_NOMEM || pp->on_bad != LONGBENCH_BAD_SKIP) {
            snprintf(err, errlen, "%s:%zu: %s", name, line, why);
            longbench_free(set);
            return rc == PULSE_ERR_NOMEM ? PULSE_ERR_NOMEM : PULSE_ERR_INVALID;
        }
        if (set->n_bad++ == 0)
            snprintf(set->first_bad, sizeof set->first_bad, "%s:%zu: %s", name, line, why);
        if (pp->log) fprintf(pp->log, "%s:%zu: %s (line skipped)\n", name, line, why);
    }
    *out = set;
    return PULSE_OK;
}

int longbench_load_file(const char *path, const struct longbench_load_params *params,
                        struct longbench_set **out, char *err, size_t errlen)
{
    *out = NULL;
    char *buf;
    size_t len;
    int rc = pulse_read_file(path, "JSONL file", &buf, &len, err, errlen);
    if (rc == PULSE_OK) rc = pulse_check_text(buf, len, path, err, errlen);
    if (rc == PULSE_OK) rc = longbench_load_mem(path, buf, len, params, out, err, errlen);
    free(buf);
    return rc;
}
