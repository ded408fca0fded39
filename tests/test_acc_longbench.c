/* LongBench JSONL loading (accuracy/longbench.c): fields, missing and null fields, malformed
 * lines in fail and skip modes (reported with name and line), CRLF, no trailing newline, a
 * line over 1 MB, files written with mkstemp; the task table, template filling and scoring. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accuracy/chat.h"
#include "accuracy/longbench.h"
#include "common.h"
#include "testutil.h"

static const struct longbench_load_params SKIP = {LONGBENCH_BAD_SKIP, NULL};

/* Writes data to a fresh temporary file; its path goes into path (>= 32 bytes). */
static int write_temp(char *path, const char *data, size_t len)
{
    strcpy(path, "/tmp/pulse_acc_lb_XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0) return -1;
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, data + off, len - off);
        if (w <= 0) break;
        off += (size_t)w;
    }
    close(fd);
    return off == len ? 0 : -1;
}

static struct longbench_set *load_str(const char *s, const struct longbench_load_params *p, int *rc,
                                      char *err, size_t errlen)
{
    struct longbench_set *set = NULL;
    *rc = longbench_load_mem("mem.jsonl", s, strlen(s), p, &set, err, errlen);
    return set;
}

static void test_fields(void)
{
    /* two records, CRLF on the first, no newline after the second, a blank line between */
    const char *data =
        "{\"input\": \"Who?\", \"context\": \"Ctx \\u00e9\", \"answers\": [\"A\", \"B\"], "
        "\"length\": 4321, \"all_classes\": null, \"dataset\": \"qasper\", \"language\": "
        "\"en\", \"_id\": \"abc\"}\r\n"
        "  \r\n"
        "{\"context\": \"only\", \"answers\": [], \"all_classes\": [\"x\", \"y\"]}";
    char err[256] = "";
    int rc;
    struct longbench_set *set = load_str(data, NULL, &rc, err, sizeof err);
    EXPECT_EQ_INT(rc, PULSE_OK);
    EXPECT_EQ_INT(longbench_count(set), 2);
    EXPECT_EQ_INT(longbench_bad_lines(set), 0);
    const struct longbench_sample *a = longbench_get(set, 0), *b = longbench_get(set, 1);
    EXPECT(a && b);
    if (a && b) {
        EXPECT(strcmp(a->input, "Who?") == 0);
        EXPECT(strcmp(a->context, "Ctx \xc3\xa9") == 0); /* \u00e9 decoded to UTF-8 */
        EXPECT_EQ_INT(a->n_answers, 2);
        EXPECT(strcmp(a->answers[1], "B") == 0);
        EXPECT_EQ_INT(a->length, 4321);
        EXPECT(a->all_classes == NULL);
        EXPECT(strcmp(a->dataset, "qasper") == 0 && strcmp(a->id, "abc") == 0);
        EXPECT_EQ_INT(a->line, 1);
        /* missing input, length, dataset, _id: defaults; [] answers allowed */
        EXPECT(strcmp(b->input, "") == 0 && strcmp(b->dataset, "") == 0);
        EXPECT(strcmp(b->id, "") == 0);
        EXPECT_EQ_INT(b->length, -1);
        EXPECT_EQ_INT(b->n_answers, 0);
        EXPECT(b->all_classes != NULL && b->n_classes == 2);
        EXPECT(b->all_classes && strcmp(b->all_classes[1], "y") == 0);
        EXPECT_EQ_INT(b->line, 3);
    }
    EXPECT(longbench_get(set, 2) == NULL);
    longbench_free(set);

    /* null optional fields and an empty all_classes array (present, zero classes) */
    set = load_str("{\"context\": \"c\", \"answers\": [\"a\"], \"input\": null, \"length\": null,"
                   " \"all_classes\": []}\n",
                   NULL, &rc, err, sizeof err);
    EXPECT_EQ_INT(rc, PULSE_OK);
    a = longbench_get(set, 0);
    EXPECT(a != NULL);
    if (a) {
        EXPECT(strcmp(a->input, "") == 0);
        EXPECT_EQ_INT(a->length, -1);
        EXPECT(a->all_classes != NULL && a->n_classes == 0);
    }
    longbench_free(set);

    /* empty input and blank-only input: zero samples, no error */
    set = load_str("", NULL, &rc, err, sizeof err);
    EXPECT_EQ_INT(rc, PULSE_OK);
    EXPECT_EQ_INT(longbench_count(set), 0);
    longbench_free(set);
    set = load_str("\n\r\n \t \n", NULL, &rc, err, sizeof err);
    EXPECT_EQ_INT(rc, PULSE_OK);
    EXPECT_EQ_INT(longbench_count(set), 0);
    longbench_free(set);
}

/* Lines 2..9 are malformed, each for its own reason; 1 and 10 are good. */
static const char *MIXED =
    "{\"context\": \"c1\", \"answers\": [\"a1\"]}\n"
    "{\"context\": \"c\", \"answers\": [\"a\"]\n"                /* 2: unterminated object */
    "[1, 2]\n"                                                   /* 3: not an object */
    "{\"answers\": [\"a\"]}\n"                                   /* 4: context missing */
    "{\"context\": \"c\", \"answers\": \"a\"}\n"                 /* 5: answers not an array */
    "{\"context\": \"c\", \"answers\": [1]}\n"                   /* 6: answers[0] not a string */
    "{\"context\": \"c\", \"answers\": [], \"length\": \"9\"}\n" /* 7: length not an integer */
    "{\"context\": \"c\\u0000\", \"answers\": []}\n"             /* 8: NUL in a string */
    "{\"context\": \"c\", \"answers\": []} trailing\n"           /* 9: text after the object */
    "{\"context\": \"c10\", \"answers\": [\"a10\"], \"all_classes\": null}";

static void test_malformed(void)
{
    char err[256] = "";
    int rc;
    /* fail mode (the default): the first bad line stops the load, named by file and line */
    struct longbench_set *set = load_str(MIXED, NULL, &rc, err, sizeof err);
    EXPECT_EQ_INT(rc, PULSE_ERR_INVALID);
    EXPECT(set == NULL);
    EXPECT_STR_CONTAINS(err, "mem.jsonl:2: invalid JSON");

    /* skip mode: 8 bad lines counted, the good ones kept with their line numbers */
    char *log = NULL;
    size_t log_len = 0;
    FILE *logf = open_memstream(&log, &log_len);
    EXPECT(logf != NULL);
    struct longbench_load_params p = {LONGBENCH_BAD_SKIP, logf};
    set = load_str(MIXED, &p, &rc, err, sizeof err);
    if (logf) fclose(logf);
    EXPECT_EQ_INT(rc, PULSE_OK);
    EXPECT_EQ_INT(longbench_count(set), 2);
    EXPECT_EQ_INT(longbench_bad_lines(set), 8);
    EXPECT_STR_CONTAINS(longbench_first_bad(set), "mem.jsonl:2:");
    const struct longbench_sample *last = longbench_get(set, 1);
    EXPECT(last && last->line == 10 && strcmp(last->context, "c10") == 0);
    EXPECT_STR_CONTAINS(log, "mem.jsonl:3: the line is not a JSON object");
    EXPECT_STR_CONTAINS(log, "mem.jsonl:4: \"context\" is missing");
    EXPECT_STR_CONTAINS(log, "mem.jsonl:5: \"answers\" is not an array of strings");
    EXPECT_STR_CONTAINS(log, "mem.jsonl:6: \"answers\"[0] is not a string");
    EXPECT_STR_CONTAINS(log, "mem.jsonl:7: \"length\" is not an integer");
    EXPECT_STR_CONTAINS(log, "mem.jsonl:8: invalid JSON");
    EXPECT_STR_CONTAINS(log, "mem.jsonl:9: invalid JSON");
    free(log);
    longbench_free(set);

    /* invalid UTF-8 and a raw NUL byte inside a line: malformed, not a crash */
    const char bytes[] = "{\"context\": \"\xff\", \"answers\": []}\n"
                         "{\"context\": \"a\0b\", \"answers\": []}\n"
                         "{\"context\": \"ok\", \"answers\": []}\n";
    set = NULL;
    rc = longbench_load_mem("bytes", bytes, sizeof bytes - 1, &SKIP, &set, err, sizeof err);
    EXPECT_EQ_INT(rc, PULSE_OK);
    EXPECT_EQ_INT(longbench_count(set), 1);
    EXPECT_EQ_INT(longbench_bad_lines(set), 2);
    EXPECT_STR_CONTAINS(longbench_first_bad(set), "bytes:1:");
    longbench_free(set);
}

static void test_files(void)
{
    char path[64], err[512] = "";
    struct longbench_set *set = NULL;
    /* a 1.5 MB context with a needle near the end, then a short line without a newline */
    size_t big = 1536 * 1024;
    char *data = malloc(big + 256);
    EXPECT(data != NULL);
    if (!data) return;
    size_t n = (size_t)sprintf(data, "{\"context\": \"");
    memset(data + n, 'x', big);
    memcpy(data + n + big - 10, "NEEDLE", 6);
    n += big;
    n += (size_t)sprintf(data + n, "\", \"answers\": [\"NEEDLE\"], \"length\": 1}\n"
                                   "{\"context\": \"tail\", \"answers\": [\"t\"]}");
    EXPECT_EQ_INT(write_temp(path, data, n), 0);
    int rc = longbench_load_file(path, NULL, &set, err, sizeof err);
    EXPECT_EQ_INT(rc, PULSE_OK);
    EXPECT_EQ_INT(longbench_count(set), 2);
    const struct longbench_sample *s = longbench_get(set, 0);
    EXPECT(s && strlen(s->context) == big && strstr(s->context, "NEEDLE") != NULL);
    s = longbench_get(set, 1);
    EXPECT(s && strcmp(s->context, "tail") == 0 && s->line == 2);
    longbench_free(set);
    unlink(path);

    /* the file name and line in a file's error */
    const char *bad = "{\"context\": \"c\", \"answers\": []}\n{oops}\n";
    EXPECT_EQ_INT(write_temp(path, bad, strlen(bad)), 0);
    set = NULL;
    rc = longbench_load_file(path, NULL, &set, err, sizeof err);
    EXPECT_EQ_INT(rc, PULSE_ERR_INVALID);
    EXPECT(set == NULL);
    char want[96];
    snprintf(want, sizeof want, "%s:2: invalid JSON", path);
    EXPECT_STR_CONTAINS(err, want);
    unlink(path);

    /* a missing file */
    rc = longbench_load_file(path, NULL, &set, err, sizeof err);
    EXPECT_EQ_INT(rc, PULSE_ERR_IO);
    EXPECT_STR_CONTAINS(err, path);
    EXPECT_STR_CONTAINS(err, "cannot open");
    /* a device (endless) or a FIFO (blocking) is refused before it is opened */
    rc = longbench_load_file("/dev/zero", NULL, &set, err, sizeof err);
    EXPECT_EQ_INT(rc, PULSE_ERR_IO);
    EXPECT_STR_CONTAINS(err, "/dev/zero: is not a regular file (a FIFO or a device)");
    char fifo[] = "/tmp/pulse_lb_fifo_XXXXXX";
    int fd = mkstemp(fifo);
    if (fd >= 0) close(fd), unlink(fifo);
    EXPECT_EQ_INT(mkfifo(fifo, 0600), 0);
    rc = longbench_load_file(fifo, NULL, &set, err, sizeof err);
    EXPECT_EQ_INT(rc, PULSE_ERR_IO);
    EXPECT_STR_CONTAINS(err, "is not a regular file");
    unlink(fifo);
    free(data);
}

static void test_tasks(void)
{
    /* 16 LongBench English/code tasks + 4 synthetic */
    EXPECT_EQ_INT(longbench_task_count(), 20);
    EXPECT(longbench_task_at(20) == NULL);
    const struct longbench_task *t = longbench_task_find("qasper");
    EXPECT(t && t->max_gen == 128 && t->metric == ACC_METRIC_QA_F1 && t->chat);
    t = longbench_task_find("samsum");
    EXPECT(t && t->max_gen == 128 && t->metric == ACC_METRIC_ROUGE_L && !t->chat);
    EXPECT(t && t->first_line_only && t->stop_at_newline);
    t = longbench_task_find("trec");
    EXPECT(t && t->max_gen == 64 && t->metric == ACC_METRIC_CLASSIFICATION && t->first_line_only);
    t = longbench_task_find("gov_report");
    EXPECT(t && t->max_gen == 512 && !t->first_line_only);
    t = longbench_task_find("passage_retrieval_en");
    EXPECT(t && t->max_gen == 32 && t->metric == ACC_METRIC_RETRIEVAL);
    t = longbench_task_find("repobench-p");
    EXPECT(t && t->metric == ACC_METRIC_CODE_SIM && !t->chat);
    t = longbench_task_find("variable_tracking");
    EXPECT(t && t->synthetic && t->metric == ACC_METRIC_CONTAINS_ALL);
    t = longbench_task_find("passkey");
    EXPECT(t && t->synthetic && t->metric == ACC_METRIC_CONTAINS);
    EXPECT(longbench_task_find("lsht") == NULL); /* Chinese tasks left out */
    EXPECT(longbench_task_find("QASPER") == NULL);
    EXPECT(longbench_task_find(NULL) == NULL);
    /* every template fills and keeps the context */
    char err[256];
    int ok = 0;
    for (size_t i = 0; i < longbench_task_count(); i++) {
        char *p =
            longbench_fill_template(longbench_task_at(i)->prompt, "<CTX>", "<IN>", err, sizeof err);
        ok += p && strstr(p, "<CTX>") != NULL;
        free(p);
    }
    EXPECT_EQ_INT(ok, 20);
}

static void expect_fill(const char *tmpl, const char *ctx, const char *in, const char *want,
                        int line)
{
    char err[256] = "";
    char *got = longbench_fill_template(tmpl, ctx, in, err, sizeof err);
    tu_checks++;
    if (!got || strcmp(got, want) != 0) {
        tu_failures++;
        fprintf(stderr, "%s:%d: fill(\"%s\") = \"%s\" (%s), want \"%s\"\n", __FILE__, line, tmpl,
                got ? got : "(null)", err, want);
    }
    free(got);
}

static void test_templates(void)
{
    /* lcc: "Please complete the code given below. \n{context}Next line of code:\n" */
    expect_fill(longbench_task_find("lcc")->prompt, "def f():\n    ", "",
                "Please complete the code given below. \ndef f():\n    Next line of code:\n",
                __LINE__);
    expect_fill(longbench_task_find("repobench-p")->prompt, "A", "B",
                "Please complete the code given below. \nABNext line of code:\n", __LINE__);
    /* trec: "...questions.\n\n{context}\n{input}" */
    expect_fill(longbench_task_find("trec")->prompt, "C", "I",
                "Please determine the type of the question below. Here are some examples of "
                "questions.\n\nC\nI",
                __LINE__);
    /* escaped braces; a placeholder repeated; values are not re-expanded; NULL -> "" */
    expect_fill("{{x}} {context}/{input}/{input}", "{input}", "I", "{x} {input}/I/I", __LINE__);
    expect_fill("{context}|{input}", NULL, NULL, "|", __LINE__);
    expect_fill("", "c", "i", "", __LINE__);
    /* errors name the problem */
    char err[256] = "";
    EXPECT(longbench_fill_template("a {foo} b", "c", "i", err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "unknown placeholder {foo}");
    EXPECT(longbench_fill_template("a } b", "c", "i", err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "single '}'");
    EXPECT(longbench_fill_template("a {context", "c", "i", err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "not closed");
}

static void test_scoring(void)
{
    const char *data =
        "{\"input\": \"What is X?\", \"context\": \"doc\", \"answers\": [\"location\"], "
        "\"all_classes\": [\"human\", \"location\"]}\n"
        "{\"input\": \"Q\", \"context\": \"doc\", \"answers\": [\"yes\", \"unanswerable\"]}\n";
    char err[256] = "";
    int rc;
    struct longbench_set *set = load_str(data, NULL, &rc, err, sizeof err);
    EXPECT_EQ_INT(rc, PULSE_OK);
    const struct longbench_sample *a = longbench_get(set, 0), *b = longbench_get(set, 1);
    EXPECT(a && b);
    if (!a || !b) {
        longbench_free(set);
        return;
    }
    /* trec cuts to the first line: "location" -> matches [location] -> 1 */
    EXPECT_NEAR(longbench_score_sample(longbench_task_find("trec"), a, "\nlocation\nhuman"), 1.0,
                0);
    /* qasper: "Yes." normalises to "yes" -> F1 1 with the first answer */
    EXPECT_NEAR(longbench_score_sample(longbench_task_find("qasper"), b, "Yes."), 1.0, 0);
    char *prompt = longbench_build_prompt(longbench_task_find("multifieldqa_en"), b, CHAT_NONE, err,
                                          sizeof err);
    EXPECT_STR_CONTAINS(prompt, "\n\ndoc\n\n");
    EXPECT_STR_CONTAINS(prompt, "Question: Q\nAnswer:");
    free(prompt);
    longbench_free(set);
    longbench_free(NULL);
}

/* The synthetic tasks' prompts: without a template the question and the answer's opening run
 * on (the completion text); under one the question ends the user turn and the answer opens the
 * model's; a non-chat task (trec) is never wrapped; the template names parse. */
static void test_chat(void)
{
    char err[256];
    const struct longbench_task *pk = longbench_task_find("passkey"),
                                *tr = longbench_task_find("trec");
    char *plain = longbench_fill_task(pk, "CTX", "", CHAT_NONE, err, sizeof err);
    EXPECT(plain && strstr(plain, "CTX\n\nWhat is the pass key? The pass key is") != NULL);
    char *g = longbench_fill_task(pk, "CTX", "", CHAT_GEMMA, err, sizeof err);
    EXPECT(g && !strncmp(g, "<start_of_turn>user\nThere is an important", 40));
    EXPECT(g && strstr(g, "What is the pass key?<end_of_turn>\n<start_of_turn>model\nThe pass "
                          "key is") != NULL);
    char *q = longbench_fill_task(pk, "CTX", "", CHAT_CHATML, err, sizeof err);
    EXPECT(q && strstr(q, "<|im_end|>\n<|im_start|>assistant\nThe pass key is") != NULL);
    const struct longbench_task *kv = longbench_task_find("kv_retrieval");
    char *k = longbench_fill_task(kv, "{}", "K1", CHAT_GEMMA, err, sizeof err);
    EXPECT(k && strstr(k, "Key: \"K1\"<end_of_turn>\n<start_of_turn>model\nCorresponding value:"));
    char *t1 = longbench_fill_task(tr, "C", "I", CHAT_NONE, err, sizeof err),
         *t2 = longbench_fill_task(tr, "C", "I", CHAT_GEMMA, err, sizeof err);
    EXPECT(t1 && t2 && !strcmp(t1, t2));
    free(plain), free(g), free(q), free(k), free(t1), free(t2);
    int c;
    EXPECT(chat_template_parse("auto", &c) == 0 && c == -1);
    EXPECT(chat_template_parse("gemma", &c) == 0 && c == CHAT_GEMMA);
    EXPECT(chat_template_parse("chatml", &c) == 0 && c == CHAT_CHATML);
    EXPECT(chat_template_parse("none", &c) == 0 && c == CHAT_NONE);
    EXPECT(chat_template_parse("llama", &c) == -1);
    EXPECT(!strcmp(chat_template_name(CHAT_GEMMA), "gemma"));
}

int main(void)
{
    test_chat();
    test_fields();
    test_malformed();
    test_files();
    test_tasks();
    test_templates();
    test_scoring();
    return tu_finish("test_acc_longbench");
}
