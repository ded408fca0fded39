/* Synthetic long-context tasks (accuracy/synth.h, synth_corpus.h, pulse synth): corpus cleaning,
 * determinism, needles and answers, length fitting, depths, LongBench round trip and scoring,
 * error paths. Uses its own corpus in a temp dir; /usr/share/doc only as a smoke test. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "accuracy/chat.h"
#include "accuracy/longbench.h"
#include "accuracy/synth.h"
#include "common.h"
#include "testutil.h"

static char dir[64], empty_dir[64], out_dir[64];
static char out[1 << 16];

static void write_file(const char *d, const char *name, const char *data, size_t n)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", d, name);
    FILE *f = fopen(path, "wb");
    EXPECT(f != NULL);
    if (!f) return;
    fwrite(data, 1, n, f);
    fclose(f);
}

/* 512 distinct sentences, five to a paragraph, lines wrapped at 60 columns, plus junk. */
static void make_corpus(void)
{
    static const char *subj[] = {"The old miller",    "A quiet student", "The river pilot",
                                 "Our neighbour",     "The night nurse", "A travelling painter",
                                 "The village baker", "My grandmother"};
    static const char *verb[] = {"carried", "painted", "repaired", "described",
                                 "admired", "forgot",  "sold",     "found"};
    static const char *obj[] = {"a wooden chair near the window",
                                "the broken lantern",
                                "an old map of the valley",
                                "the green umbrella",
                                "a basket of ripe pears",
                                "the letter from the harbour",
                                "a small brass bell",
                                "the heavy winter coat"};
    size_t cap = 1 << 17, n = 0, col = 0;
    char *t = malloc(cap);
    n += (size_t)snprintf(t, cap, "A STORY OF THINGS\n=================\n\n");
    for (int i = 0; i < 512; i++) {
        char s[160];
        snprintf(s, sizeof s, "%s %s %s before the evening train arrived.", subj[i % 8],
                 verb[(i / 8) % 8], obj[i / 64]);
        for (char *w = strtok(s, " "); w; w = strtok(NULL, " ")) {
            if (col + strlen(w) > 60) t[n++] = '\n', col = 0;
            n += (size_t)snprintf(t + n, cap - n, "%s%s", col ? " " : "", w);
            col += strlen(w) + 1;
        }
        if (i % 5 == 4) n += (size_t)snprintf(t + n, cap - n, "\n\n-=-=-=-=-=-=-=-=-\n\n"), col = 0;
    }
    n += (size_t)snprintf(t + n, cap - n,
                          "\n\nThe same sentence appears twice in this file on purpose. "
                          "The same sentence appears twice in this file on purpose.\n"
                          "Use <b>bold</b> markup in a sentence like this one here.\n");
    write_file(dir, "a_story.txt", t, n);
    free(t);
    const char cr[] = "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
                      "Files: *\nCopyright: 2020 Someone\nLicense: MIT\n Permission is hereby "
                      "granted, free of charge, to any person\n obtaining a copy of this "
                      "software.\n .\n THE SOFTWARE IS PROVIDED AS IS, WITHOUT WARRANTY OF ANY "
                      "KIND WHATSOEVER.\n";
    write_file(dir, "copyright", cr, sizeof cr - 1);
    const char prose[] = "This compressed file holds sentences that must never be read.\n";
    write_file(dir, "notes.gz", prose, sizeof prose - 1);
    write_file(dir, "page.html", prose, sizeof prose - 1);
    const char bin[] = "ELF\0\0\0binary data with a sentence That is hidden in it.\n";
    write_file(dir, "data", bin, sizeof bin - 1);
    write_file(empty_dir, "data", bin, sizeof bin - 1);
    write_file(empty_dir, "notes.gz", prose, sizeof prose - 1);
    const char symbols[] = "------------\n| a | b |\n#### ** ####\n";
    write_file(empty_dir, "table.txt", symbols, sizeof symbols - 1);
}

static struct synth_corpus *load_corpus(void)
{
    const char *paths[] = {dir};
    struct synth_corpus *c = NULL;
    char err[512];
    int rc = synth_corpus_load(paths, 1, &c, err, sizeof err);
    if (rc) fprintf(stderr, "corpus: %s\n", err);
    EXPECT_EQ_INT(rc, PULSE_OK);
    return c;
}

static void test_corpus(const struct synth_corpus *c)
{
    struct synth_corpus_stats st;
    synth_corpus_stats(c, &st);
    EXPECT_EQ_INT(st.files_seen, 5);
    EXPECT_EQ_INT(st.files_compressed, 1);
    EXPECT_EQ_INT(st.files_other, 1);
    EXPECT_EQ_INT(st.files_binary, 1);
    EXPECT_EQ_INT(st.files_used, 2);
    EXPECT(st.duplicates >= 1);
    /* 512 story sentences, the duplicate once, 2 license sentences */
    EXPECT_EQ_INT(synth_corpus_count(c), 515);
    int wrapped = 0, paras = 0, license = 0;
    for (size_t i = 0; i < synth_corpus_count(c); i++) {
        size_t len;
        int para;
        const char *s = synth_corpus_sentence(c, i, &len, &para);
        EXPECT(len >= 24 && len <= 320 && strlen(s) == len);
        EXPECT(!strstr(s, "  ") && !strchr(s, '\n') && !strchr(s, '<') && !strchr(s, '='));
        EXPECT(!strstr(s, "compressed") && !strstr(s, "hidden") && !strstr(s, "STORY"));
        wrapped += strcmp(s, "A travelling painter sold the broken lantern before the evening "
                             "train arrived.") == 0;
        license += strcmp(s, "Permission is hereby granted, free of charge, to any person "
                             "obtaining a copy of this software.") == 0;
        paras += para;
    }
    EXPECT_EQ_INT(wrapped, 1);
    EXPECT_EQ_INT(license, 1);
    EXPECT(paras >= 100 && paras <= 110);
}

static void test_corpus_errors(void)
{
    const char *paths[] = {empty_dir};
    struct synth_corpus *c = (struct synth_corpus *)1;
    char err[512];
    EXPECT_EQ_INT(synth_corpus_load(paths, 1, &c, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT(c == NULL);
    EXPECT_STR_CONTAINS(err, "no usable plain text");
    const char *missing[] = {"/nonexistent/pulse/corpus"};
    EXPECT_EQ_INT(synth_corpus_load(missing, 1, &c, err, sizeof err), PULSE_ERR_IO);
    EXPECT_STR_CONTAINS(err, "/nonexistent/pulse/corpus: cannot open");
    EXPECT_EQ_INT(synth_corpus_from_text("t", "---\n***\n", 8, &c, err, sizeof err),
                  PULSE_ERR_INVALID);
}

/* The JSON lines of n samples. */
static char **lines_of(const struct synth_corpus *c, struct synth_params p)
{
    char **v = calloc(p.n_samples, sizeof *v), err[256];
    for (size_t i = 0; i < p.n_samples; i++) {
        struct synth_sample s;
        int rc = synth_sample_generate(c, &p, i, &s, err, sizeof err);
        if (rc) fprintf(stderr, "generate: %s\n", err);
        EXPECT_EQ_INT(rc, PULSE_OK);
        if (rc == PULSE_OK) v[i] = synth_sample_to_json(&s, &p);
        synth_sample_release(&s);
    }
    return v;
}

static void free_lines(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static void test_determinism(const struct synth_corpus *c)
{
    for (int t = 0; t < SYNTH_TASK_COUNT; t++) {
        struct synth_params p = {(enum synth_task)t, 2048, 6, 42, NULL, NULL, 0};
        char **a = lines_of(c, p), **b = lines_of(c, p);
        p.seed = 43;
        char **d = lines_of(c, p);
        for (size_t i = 0; i < p.n_samples; i++) {
            EXPECT(a[i] && b[i] && strcmp(a[i], b[i]) == 0);
            EXPECT(a[i] && d[i] && strcmp(a[i], d[i]) != 0);
            if (i) EXPECT(a[i] && a[i - 1] && strcmp(a[i], a[i - 1]) != 0);
        }
        free_lines(a, p.n_samples), free_lines(b, p.n_samples), free_lines(d, p.n_samples);
    }
}

static size_t occ(const char *hay, const char *s)
{
    size_t n = 0;
    for (const char *q = strstr(hay, s); q; q = strstr(q + 1, s))
        n++;
    return n;
}

/* Needle checks on a loaded record; fills wrong[] with a prediction that must not score 1. */
static void check_needles(int t, const struct longbench_sample *s, char *wrong, size_t cap)
{
    const char *ctx = s->context, *a0 = s->answers[0];
    char buf[256];
    snprintf(wrong, cap, "no idea");
    if (t == SYNTH_PASSKEY) {
        EXPECT_EQ_INT(s->n_answers, 1);
        EXPECT(strlen(a0) >= 5 && strlen(a0) <= 7 && a0[0] != '0');
        snprintf(buf, sizeof buf, "The pass key is %s. Remember it. %s is the pass key.", a0, a0);
        EXPECT_EQ_INT(occ(ctx, buf), 1);
        EXPECT_EQ_INT(occ(ctx, a0), 2);
        snprintf(wrong, cap, "%d", atoi(a0) + 1);
    } else if (t == SYNTH_NIAH_MULTIKEY) {
        EXPECT_EQ_INT(s->n_answers, 1);
        snprintf(buf, sizeof buf, "One of the special magic numbers for %s is: %s.", s->input, a0);
        EXPECT_EQ_INT(occ(ctx, buf), 1);
        EXPECT_EQ_INT(occ(ctx, "One of the special magic numbers for "), 4);
        EXPECT_EQ_INT(occ(ctx, a0), 1);
        const char *q = ctx; /* a distractor value: different from the answer */
        while ((q = strstr(q, "numbers for ")) && strncmp(strstr(q, ": ") + 2, a0, 7) == 0)
            q++;
        EXPECT(q != NULL);
        if (q) snprintf(wrong, cap, "%.7s", strstr(q, ": ") + 2);
        EXPECT(strcmp(wrong, a0) != 0 && strlen(wrong) == 7);
    } else if (t == SYNTH_VARIABLE_TRACKING) {
        EXPECT_EQ_INT(s->n_answers, 5);
        snprintf(buf, sizeof buf, "VAR %s = %s.", a0, s->input);
        EXPECT_EQ_INT(occ(ctx, buf), 1);
        for (size_t h = 1; h < s->n_answers; h++) {
            snprintf(buf, sizeof buf, "VAR %s = VAR %s.", s->answers[h], s->answers[h - 1]);
            EXPECT_EQ_INT(occ(ctx, buf), 1);
        }
        EXPECT_EQ_INT(occ(ctx, "VAR "), 18); /* 2 chains: 5 + 4 references each */
        EXPECT_EQ_INT(occ(ctx, s->input), 1);
        /* the other chain's head: a different value, different names */
        const char *q = ctx;
        while ((q = strstr(q, "VAR ")) && (q[10] != '=' || q[12] == 'V' || !strncmp(q + 4, a0, 5)))
            q++;
        EXPECT(q != NULL);
        if (q) {
            EXPECT(strncmp(q + 12, s->input, 5) != 0);
            for (size_t h = 0; h < s->n_answers; h++)
                EXPECT(strncmp(q + 4, s->answers[h], 5));
            snprintf(wrong, cap, "%.5s %s %s", q + 4, s->answers[0], s->answers[1]);
        }
    } else {
        json_error_t je;
        json_t *o = json_loads(ctx, 0, &je);
        EXPECT(json_is_object(o) && json_object_size(o) > 10);
        EXPECT(o && strcmp(json_string_value(json_object_get(o, s->input)), a0) == 0);
        EXPECT_EQ_INT(occ(ctx, a0), 1);
        EXPECT(strlen(s->input) == 36 && strlen(a0) == 36 && s->input[14] == '4');
        const char *k;
        json_t *v;
        json_object_foreach(o, k, v) if (strcmp(k, s->input))
        {
            snprintf(wrong, cap, "%s", json_string_value(v));
            break;
        }
        json_decref(o);
    }
}

/* Python's len(s.split()) for ASCII text. */
static long long split_words(const char *s)
{
    long long n = 0;
    for (size_t i = 0; s[i]; i++)
        n += !strchr(" \t\n\r\v\f", s[i]) && (i == 0 || strchr(" \t\n\r\v\f", s[i - 1]));
    return n;
}

/* Writes n samples, loads them back through longbench.c and checks each record. */
static void test_round_trip(const struct synth_corpus *c, int t, long long target, size_t n)
{
    struct synth_params p = {(enum synth_task)t, target, n, 7, NULL, NULL, 0};
    char path[128], err[512];
    snprintf(path, sizeof path, "%s/%s_%lld.jsonl", out_dir, synth_task_name(t), target);
    FILE *f = fopen(path, "w");
    double tok[3] = {0};
    int rc = synth_write_jsonl(c, &p, f, tok, err, sizeof err);
    fclose(f);
    if (rc) fprintf(stderr, "write: %s\n", err);
    EXPECT_EQ_INT(rc, PULSE_OK);
    struct longbench_set *set = NULL;
    EXPECT_EQ_INT(longbench_load_file(path, NULL, &set, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(longbench_count(set), n);
    const struct longbench_task *task = longbench_task_find(synth_task_name(t));
    double lo = 1, hi = 0;
    int bins[5] = {0};
    for (size_t i = 0; i < longbench_count(set); i++) {
        const struct longbench_sample *s = longbench_get(set, i);
        EXPECT(!strcmp(s->dataset, synth_task_name(t)) && s->all_classes == NULL);
        long long words = split_words(s->input) + split_words(s->context);
        for (size_t k = 0; k < s->n_answers; k++)
            words += split_words(s->answers[k]);
        EXPECT(strlen(s->id) == 48 && s->length == words);
        for (size_t k = 0; k < s->n_answers; k++)
            EXPECT(strstr(s->context, s->answers[k]));
        char wrong[256], gold[512] = "";
        check_needles(t, s, wrong, sizeof wrong);
        for (size_t k = 0; k < s->n_answers; k++)
            strcat(strcat(gold, k ? ", " : " "), s->answers[k]);
        EXPECT_NEAR(longbench_score_sample(task, s, gold), 1.0, 0);
        EXPECT(longbench_score_sample(task, s, wrong) < 1.0);
        EXPECT_NEAR(longbench_score_sample(task, s, ""), 0.0, 0);
        /* the length under the default counter: prompt + max_gen fits, within 3% */
        char *prompt = longbench_build_prompt(task, s, CHAT_NONE, err, sizeof err);
        long long tokens = synth_count_bytes4(NULL, prompt, strlen(prompt));
        free(prompt);
        EXPECT(tokens + task->max_gen <= target);
        EXPECT(tokens + task->max_gen >= target - target * 3 / 100);
        /* the recorded depth: where the queried needle starts */
        json_error_t je;
        json_t *line = NULL;
        FILE *g = fopen(path, "r");
        char *buf = NULL;
        size_t cap = 0;
        for (size_t k = 0; k <= i; k++)
            if (getline(&buf, &cap, g) < 0) break;
        fclose(g);
        line = json_loads(buf, 0, &je);
        free(buf);
        double d = json_real_value(json_object_get(line, "depth"));
        EXPECT_EQ_INT(json_integer_value(json_object_get(line, "tokens")), tokens);
        EXPECT(json_array_size(json_object_get(line, "depths")) == (t == SYNTH_NIAH_MULTIKEY ? 4u
                                                                    : t == SYNTH_VARIABLE_TRACKING
                                                                        ? 10u
                                                                        : 1u));
        json_decref(line);
        EXPECT(d >= 0 && d <= 1);
        lo = d < lo ? d : lo, hi = d > hi ? d : hi;
        bins[d >= 1 ? 4 : (int)(d * 5)]++;
    }
    if (t != SYNTH_VARIABLE_TRACKING) { /* stratified: every fifth of the context is hit */
        EXPECT(lo < 0.1 && hi > 0.9);
        for (int b = 0; b < 5; b++)
            EXPECT(bins[b] > 0);
    } else {
        EXPECT(hi - lo > 0.3);
    }
    fprintf(stderr, "%s %lld: tokens min %.0f mean %.1f max %.0f, depth %.3f..%.3f\n",
            synth_task_name(t), target, tok[0], tok[1], tok[2], lo, hi);
    longbench_free(set);
}

/* A counter of whitespace words: the callback is what the length is fitted to. */
static long long count_words(void *user, const char *text, size_t len)
{
    (*(int *)user)++;
    long long n = 0;
    for (size_t i = 0; i < len; i++)
        n += text[i] != ' ' && text[i] != '\n' &&
             (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\n');
    return n;
}

static long long count_nothing(void *user, const char *text, size_t len)
{
    (void)user, (void)text, (void)len;
    return 1;
}

static long long count_fails(void *user, const char *text, size_t len)
{
    (void)user, (void)text, (void)len;
    return -1;
}

static void test_counter_and_limits(const struct synth_corpus *c)
{
    int calls = 0;
    struct synth_params p = {SYNTH_PASSKEY, 3000, 4, 1, count_words, &calls, 0};
    struct synth_sample s;
    char err[256];
    EXPECT_EQ_INT(synth_sample_generate(c, &p, 2, &s, err, sizeof err), PULSE_OK);
    EXPECT(calls > 5);
    EXPECT(s.tokens <= 3000 - 32 && s.tokens >= 3000 - 32 - 40);
    EXPECT(s.filler_units > 200);
    synth_sample_release(&s);
    p = (struct synth_params){SYNTH_PASSKEY, 4096, 1, 1, count_nothing, NULL, 0};
    EXPECT_EQ_INT(synth_sample_generate(c, &p, 0, &s, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "over 32 bytes a token");
    p.count = count_fails;
    EXPECT_EQ_INT(synth_sample_generate(c, &p, 0, &s, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "the token counter failed");
    p = (struct synth_params){SYNTH_NIAH_MULTIKEY, 256, 1, 1, NULL, NULL, 0};
    EXPECT_EQ_INT(synth_sample_generate(c, &p, 0, &s, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "too small for niah_multikey");
    p = (struct synth_params){SYNTH_KV_RETRIEVAL, 256, 1, 1, NULL, NULL, 0};
    EXPECT_EQ_INT(synth_sample_generate(NULL, &p, 0, &s, err, sizeof err), PULSE_OK);
    EXPECT(s.filler_units >= 1);
    synth_sample_release(&s);
    p.task = SYNTH_PASSKEY;
    EXPECT_EQ_INT(synth_sample_generate(NULL, &p, 0, &s, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_EQ_INT(synth_task_find("kv_retrieval"), SYNTH_KV_RETRIEVAL);
    EXPECT_EQ_INT(synth_task_find("passkeys"), -1);
}

/* ---------------------------------------------------------------- CLI */

static int run(const char *args)
{
    const char *bin = getenv("PULSE_BIN");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", bin ? bin : "./build/pulse", args);
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    int st = p ? pclose(p) : -1;
    return (st != -1 && WIFEXITED(st)) ? WEXITSTATUS(st) : -1;
}

static void test_cli(void)
{
    char args[1024];
    struct {
        const char *args, *msg;
    } bad[] = {
        {"--task bogus --length 4096", "--task: unknown task 'bogus'"},
        {"--task passkey --length 100", "--length: '100' is not an integer in [256"},
        {"--task passkey --length 4k", "--length: '4k' is not an integer"},
        {"--length 4096", "--task: required"},
        {"--task all", "--length: required"},
        {"--task passkey --length 4096 --samples 0", "--samples: '0'"},
        {"--task passkey --length 4096 --bogus", "unknown or incomplete option '--bogus'"},
        {"--task passkey --length 4096 --corpus /nonexistent/pulse", "cannot open"},
        {"--task passkey --length 4096 --corpus EMPTY", "no usable plain text"},
        {"--task niah_multikey --length 256 --corpus DIR", "too small for niah_multikey"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char a[512];
        snprintf(a, sizeof a, "%s", bad[i].args);
        char *e = strstr(a, "EMPTY"), *d = strstr(a, "DIR");
        if (e) snprintf(e, sizeof a - (size_t)(e - a), "%s", empty_dir);
        if (d) snprintf(d, sizeof a - (size_t)(d - a), "%s", dir);
        snprintf(args, sizeof args, "synth %s --out-dir %s/cli", a, out_dir);
        int code = run(args);
        if (code != 2 || !strstr(out, bad[i].msg)) fprintf(stderr, "'%s': %d %s", args, code, out);
        EXPECT_EQ_INT(code, 2);
        EXPECT_STR_CONTAINS(out, bad[i].msg);
        if (!d) { /* usage errors are one line */
            char *nl = strchr(out, '\n');
            EXPECT(nl == NULL || nl[1] == 0);
        }
    }
    EXPECT_EQ_INT(run("synth --help"), 0);
    EXPECT_STR_CONTAINS(out, "usage: pulse synth");
    snprintf(args, sizeof args,
             "synth --task passkey --task kv_retrieval --length 1024 --length 512 --samples 3 "
             "--seed 5 --corpus %s --out-dir %s/cli",
             dir, out_dir);
    EXPECT_EQ_INT(run(args), 0);
    EXPECT_STR_CONTAINS(out, "corpus: 5 files seen, 2 used");
    const char *names[] = {"passkey_1024", "passkey_512", "kv_retrieval_1024", "kv_retrieval_512"};
    for (int i = 0; i < 4; i++) {
        char path[256], err[256];
        snprintf(path, sizeof path, "%s/cli/%s.jsonl", out_dir, names[i]);
        struct longbench_set *set = NULL;
        EXPECT_EQ_INT(longbench_load_file(path, NULL, &set, err, sizeof err), PULSE_OK);
        EXPECT_EQ_INT(longbench_count(set), 3);
        longbench_free(set);
        unlink(path);
    }
    snprintf(args, sizeof args, "%s/cli", out_dir);
    rmdir(args);
}

/* The Debian documents, when this machine has them. */
static void test_system_docs(void)
{
    struct stat st;
    if (stat("/usr/share/doc", &st) != 0) {
        fprintf(stderr, "test_acc_synth: no /usr/share/doc, system corpus smoke test skipped\n");
        return;
    }
    size_t n;
    const char *const *paths = synth_corpus_default_paths(&n);
    struct synth_corpus *c = NULL;
    char err[512];
    int rc = synth_corpus_load(paths, 1, &c, err, sizeof err);
    if (rc != PULSE_OK) {
        fprintf(stderr, "test_acc_synth: system corpus skipped: %s\n", err);
        return;
    }
    struct synth_corpus_stats cs;
    synth_corpus_stats(c, &cs);
    fprintf(stderr, "system corpus: %zu files, %zu used, %zu sentences\n", cs.files_seen,
            cs.files_used, cs.sentences);
    struct synth_params p = {SYNTH_PASSKEY, 4096, 1, 3, NULL, NULL, 0};
    struct synth_sample s;
    EXPECT_EQ_INT(synth_sample_generate(c, &p, 0, &s, err, sizeof err), PULSE_OK);
    EXPECT(s.context && strstr(s.context, s.answers[0]));
    EXPECT(s.tokens <= 4096 - 32 && s.tokens > 3900);
    synth_sample_release(&s);
    synth_corpus_free(c);
}

static void rm_dir(const char *d)
{
    const char *names[] = {"a_story.txt", "copyright", "notes.gz",
                           "page.html",   "data",      "table.txt"};
    char path[256];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", d, names[i]);
        unlink(path);
    }
    rmdir(d);
}

int main(void)
{
    strcpy(dir, "/tmp/pulse_synth_XXXXXX");
    strcpy(empty_dir, "/tmp/pulse_synth_empty_XXXXXX");
    strcpy(out_dir, "/tmp/pulse_synth_out_XXXXXX");
    if (!mkdtemp(dir) || !mkdtemp(empty_dir) || !mkdtemp(out_dir)) {
        fprintf(stderr, "test_acc_synth: cannot create temp dirs\n");
        return 1;
    }
    make_corpus();
    struct synth_corpus *c = load_corpus();
    if (c) {
        test_corpus(c);
        test_determinism(c);
        for (int t = 0; t < SYNTH_TASK_COUNT; t++) {
            test_round_trip(c, t, 4096, 20);
            test_round_trip(c, t, 1024, 10);
        }
        test_counter_and_limits(c);
        synth_corpus_free(c);
    }
    test_corpus_errors();
    test_cli();
    test_system_docs();
    char path[160];
    for (int t = 0; t < SYNTH_TASK_COUNT; t++)
        for (int l = 0; l < 2; l++) {
            snprintf(path, sizeof path, "%s/%s_%d.jsonl", out_dir, synth_task_name(t),
                     l ? 1024 : 4096);
            unlink(path);
        }
    rmdir(out_dir);
    rm_dir(dir);
    rm_dir(empty_dir);
    return tu_finish("test_acc_synth");
}
