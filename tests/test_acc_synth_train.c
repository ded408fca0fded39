/* Training records (accuracy/synth_train.h, `pulse synth --format train`): the records' format
 * (prompt as pulse accuracy builds it, completion, answers, split), text records, determinism,
 * the train split's disjointness from the test split (the evaluation sets), the test split
 * unchanged by the train format, token counts under a tokenizer.json, and the flags' refusals.
 * Uses the repository's README.md as its corpus (the same on every machine). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accuracy/chat.h"
#include "accuracy/longbench.h"
#include "accuracy/synth.h"
#include "accuracy/synth_train.h"
#include "accuracy/tokenizer.h"
#include "common.h"
#include "testutil.h"

static char src[1024], corpus_path[1100], out_dir[64];
static char out[1 << 16];

static int run(const char *args)
{
    return tu_run_pulse(args, out, sizeof out);
}

static struct synth_corpus *load_corpus(void)
{
    const char *paths[] = {corpus_path};
    struct synth_corpus *c = NULL;
    char err[512];
    int rc = synth_corpus_load(paths, 1, &c, err, sizeof err);
    if (rc) fprintf(stderr, "corpus: %s\n", err);
    EXPECT_EQ_INT(rc, PULSE_OK);
    return c;
}

/* The records of one file, NULL-terminated (at most 64), or NULL. */
static json_t **read_records(const char *name)
{
    char path[256], line[1 << 17];
    snprintf(path, sizeof path, "%s/%s", out_dir, name);
    FILE *f = fopen(path, "r");
    EXPECT(f != NULL);
    if (!f) return NULL;
    json_t **v = calloc(65, sizeof *v);
    for (int n = 0; n < 64 && fgets(line, sizeof line, f); n++) {
        json_error_t je;
        v[n] = json_loads(line, 0, &je);
        EXPECT(json_is_object(v[n]));
    }
    fclose(f);
    return v;
}

static void free_records(json_t **v)
{
    for (int i = 0; v && v[i]; i++)
        json_decref(v[i]);
    free(v);
}

static const char *str(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static long long num(json_t *o, const char *k)
{
    return json_integer_value(json_object_get(o, k));
}

/* Each task record equals the sample the API generates with the train split's seed, its prompt
 * built by longbench_fill_task in ChatML, its completion the answers. */
static void test_task_records(const struct synth_corpus *c)
{
    char args[3072];
    snprintf(args, sizeof args,
             "synth --format train --split train --chat chatml --task all --text 3 --length 1024 "
             "--length 2048 --samples 4 --seed 5 --corpus %s --out-dir %s",
             corpus_path, out_dir);
    EXPECT_EQ_INT(run(args), 0);
    for (int t = 0; t < SYNTH_TASK_COUNT; t++) {
        char name[64];
        snprintf(name, sizeof name, "%s_2048.jsonl", synth_task_name(t));
        json_t **v = read_records(name);
        const struct longbench_task *lt = longbench_task_find(synth_task_name(t));
        int n = 0;
        for (; v && v[n]; n++) {
            json_t *r = v[n];
            EXPECT_STR_EQ(str(r, "task"), synth_task_name(t));
            EXPECT_STR_EQ(str(r, "split"), "train");
            EXPECT_STR_EQ(str(r, "chat"), "chatml");
            EXPECT_EQ_INT(num(r, "seed"), 5);
            EXPECT_EQ_INT(num(r, "index"), n);
            EXPECT_EQ_INT(num(r, "target_tokens"), 2048);
            EXPECT(num(r, "tokens") <= 2048 - lt->max_gen && num(r, "tokens") > 1700);
            /* the CLI keeps ChatML's turn markers out of the budget */
            char *markers = chat_apply(CHAT_CHATML, "");
            struct synth_params p = {t,
                                     2048,
                                     4,
                                     5 | SYNTH_TRAIN_SEED,
                                     NULL,
                                     NULL,
                                     synth_count_bytes4(NULL, markers, strlen(markers))};
            free(markers);
            EXPECT(p.reserve_tokens >= 8);
            struct synth_sample s;
            char err[256];
            EXPECT_EQ_INT(synth_sample_generate(c, &p, (size_t)n, &s, err, sizeof err), PULSE_OK);
            char *prompt =
                longbench_fill_task(lt, s.context, s.input, CHAT_CHATML, err, sizeof err);
            char *completion = synth_train_completion(&s);
            EXPECT(prompt && !strcmp(str(r, "prompt"), prompt));
            EXPECT(completion && !strcmp(str(r, "completion"), completion));
            EXPECT(!strncmp(str(r, "prompt"), "<|im_start|>user\n", 17));
            EXPECT_STR_EQ(str(r, "_id"), s.id);
            json_t *ans = json_object_get(r, "answers");
            EXPECT_EQ_INT(json_array_size(ans), s.n_answers);
            /* " A, B, C." from the answers */
            char want[512] = " ";
            for (size_t k = 0; k < s.n_answers; k++) {
                EXPECT_STR_EQ(json_string_value(json_array_get(ans, k)), s.answers[k]);
                strcat(want, s.answers[k]);
                strcat(want, k + 1 < s.n_answers ? ", " : ".");
            }
            EXPECT_STR_EQ(str(r, "completion"), want);
            free(prompt), free(completion);
            synth_sample_release(&s);
        }
        EXPECT_EQ_INT(n, 4);
        free_records(v);
    }
    json_t **v = read_records("text_1024.jsonl");
    int n = 0;
    for (; v && v[n]; n++) {
        const char *text = str(v[n], "text");
        EXPECT_STR_EQ(str(v[n], "task"), "text");
        EXPECT_STR_EQ(str(v[n], "split"), "train");
        EXPECT(num(v[n], "tokens") <= 1024 && num(v[n], "tokens") > 900);
        EXPECT_EQ_INT(num(v[n], "tokens"), (long long)(strlen(text) + 3) / 4); /* bytes / 4 */
        /* consecutive corpus sentences: the first one is a sentence of the corpus */
        size_t sl;
        int para, found = 0;
        for (size_t i = 0; i < synth_corpus_count(c) && !found; i++) {
            const char *s = synth_corpus_sentence(c, i, &sl, &para);
            found = !strncmp(text, s, sl);
        }
        EXPECT(found);
        if (n) EXPECT(strcmp(text, str(v[n - 1], "text")) != 0);
    }
    EXPECT_EQ_INT(n, 3);
    free_records(v);
}

/* The same command writes the same bytes; another seed other records. */
static void test_determinism(void)
{
    char args[3072], a[256], b[256];
    for (int k = 0; k < 3; k++) {
        snprintf(args, sizeof args,
                 "synth --format train --split train --task niah_multikey --text 2 --length 1024 "
                 "--samples 3 --seed %d --corpus %s --out-dir %s/d%d",
                 k < 2 ? 9 : 10, corpus_path, out_dir, k);
        EXPECT_EQ_INT(run(args), 0);
    }
    const char *files[] = {"niah_multikey_1024.jsonl", "text_1024.jsonl"};
    for (int f = 0; f < 2; f++) {
        char *x[3];
        for (int k = 0; k < 3; k++) {
            snprintf(a, sizeof a, "%s/d%d/%s", out_dir, k, files[f]);
            FILE *fp = fopen(a, "r");
            x[k] = calloc(1, 1 << 18);
            if (fp) {
                EXPECT(fread(x[k], 1, (1 << 18) - 1, fp) > 0);
                fclose(fp);
            }
            unlink(a);
        }
        EXPECT(x[0][0] && !strcmp(x[0], x[1]));
        EXPECT(strcmp(x[0], x[2]) != 0);
        for (int k = 0; k < 3; k++)
            free(x[k]);
    }
    for (int k = 0; k < 3; k++) {
        snprintf(b, sizeof b, "%s/d%d", out_dir, k);
        rmdir(b);
    }
}

/* No sample of the train split equals one of the test split, over seeds 1-4 (every task, two
 * lengths, 8 samples): contexts differ and no queried answer is shared. */
static void test_disjoint(const struct synth_corpus *c)
{
    enum { SEEDS = 4, N = 8 };
    static char *ctx[2][SEEDS * N], *ans[2][SEEDS * N];
    size_t same_ctx = 0, same_ans = 0, made = 0;
    for (int t = 0; t < SYNTH_TASK_COUNT; t++)
        for (int len = 1024; len <= 2048; len *= 2) {
            for (int split = 0; split < 2; split++)
                for (int sd = 0; sd < SEEDS; sd++)
                    for (int i = 0; i < N; i++) {
                        const uint64_t seed = (uint64_t)(sd + 1) | (split ? SYNTH_TRAIN_SEED : 0);
                        struct synth_params p = {t, len, N, seed, NULL, NULL, 0};
                        struct synth_sample s;
                        char err[256];
                        EXPECT_EQ_INT(synth_sample_generate(c, &p, (size_t)i, &s, err, sizeof err),
                                      PULSE_OK);
                        ctx[split][sd * N + i] = strdup(s.context ? s.context : "");
                        ans[split][sd * N + i] = strdup(s.n_answers ? s.answers[0] : "");
                        synth_sample_release(&s);
                        made++;
                    }
            for (int a = 0; a < SEEDS * N; a++)
                for (int b = 0; b < SEEDS * N; b++) {
                    same_ctx += !strcmp(ctx[0][a], ctx[1][b]);
                    same_ans += !strcmp(ans[0][a], ans[1][b]);
                }
            for (int split = 0; split < 2; split++)
                for (int a = 0; a < SEEDS * N; a++)
                    free(ctx[split][a]), free(ans[split][a]);
        }
    EXPECT_EQ_INT(made, 2 * SYNTH_TASK_COUNT * 2 * SEEDS * N);
    EXPECT_EQ_INT(same_ctx, 0);
    EXPECT_EQ_INT(same_ans, 0);
}

/* The test split in the train format holds the evaluation set's samples (pulse synth's default
 * LongBench records), its prompts as pulse accuracy builds them. */
static void test_test_split(void)
{
    char args[3072], err[256];
    snprintf(args, sizeof args,
             "synth --task passkey --length 1024 --samples 3 --seed 2 --corpus %s --out-dir %s",
             corpus_path, out_dir);
    EXPECT_EQ_INT(run(args), 0);
    char path[256];
    snprintf(path, sizeof path, "%s/passkey_1024.jsonl", out_dir);
    struct longbench_set *set = NULL;
    EXPECT_EQ_INT(longbench_load_file(path, NULL, &set, err, sizeof err), PULSE_OK);
    snprintf(args, sizeof args,
             "synth --format train --split test --task passkey --length 1024 --samples 3 --seed 2 "
             "--corpus %s --out-dir %s",
             corpus_path, out_dir);
    EXPECT_EQ_INT(run(args), 0);
    json_t **v = read_records("passkey_1024.jsonl");
    const struct longbench_task *lt = longbench_task_find("passkey");
    for (size_t i = 0; set && v && i < 3; i++) {
        EXPECT(v[i] != NULL);
        if (!v[i]) break;
        char *prompt =
            longbench_build_prompt(lt, longbench_get(set, i), CHAT_NONE, err, sizeof err);
        EXPECT(prompt && !strcmp(prompt, str(v[i], "prompt")));
        EXPECT_STR_EQ(str(v[i], "split"), "test");
        EXPECT_STR_EQ(str(v[i], "chat"), "none");
        EXPECT_STR_EQ(str(v[i], "_id"), longbench_get(set, i)->id);
        free(prompt);
    }
    free_records(v);
    longbench_free(set);
    unlink(path);
}

/* --tokenizer with the GQA model's tokenizer.json: records' tokens are its count of the prompt
 * without a chat template, and the prompt in ChatML plus the completion fits the length. */
static void test_tokenizer_counts(void)
{
    char args[3072], tok_path[1200], err[256];
    snprintf(tok_path, sizeof tok_path, "%s/accuracy/train/tokenizer/tokenizer.json", src);
    struct tokenizer *t = NULL;
    EXPECT_EQ_INT(tokenizer_load_json(tok_path, &t, err, sizeof err), PULSE_OK);
    if (!t) return;
    snprintf(args, sizeof args,
             "synth --format train --split train --chat chatml --task variable_tracking "
             "--task kv_retrieval --length 1024 --samples 2 --seed 3 --tokenizer %s/accuracy/"
             "train/tokenizer --corpus %s --out-dir %s",
             src, corpus_path, out_dir);
    EXPECT_EQ_INT(run(args), 0);
    const char *files[] = {"variable_tracking_1024.jsonl", "kv_retrieval_1024.jsonl"};
    static int32_t ids[1 << 14];
    for (int f = 0; f < 2; f++) {
        json_t **v = read_records(files[f]);
        for (int i = 0; v && v[i]; i++) {
            const struct longbench_task *lt = longbench_task_find(str(v[i], "task"));
            size_t n = 0, m = 0;
            /* the counted prompt: the one without a chat template */
            json_t *r = v[i];
            char *plain = longbench_fill_task(lt, "", "", CHAT_NONE, err, sizeof err);
            EXPECT(plain != NULL);
            free(plain);
            const char *p = str(r, "prompt"), *cpl = str(r, "completion");
            EXPECT_EQ_INT(tokenizer_encode(t, p, strlen(p), 1, ids, 1 << 14, &n), PULSE_OK);
            EXPECT_EQ_INT(tokenizer_encode(t, cpl, strlen(cpl), 1, ids, 1 << 14, &m), PULSE_OK);
            EXPECT(num(r, "tokens") <= 1024 - lt->max_gen);
            EXPECT((long long)n > num(r, "tokens") && (long long)n < num(r, "tokens") + 16);
            EXPECT(n + m + 1 <= 1024); /* ChatML prompt, completion and end of turn */
        }
        free_records(v);
    }
    tokenizer_free(t);
}

static void test_cli(void)
{
    char args[3072];
    struct {
        const char *args, *msg;
    } bad[] = {
        {"--task passkey --length 1024 --split dev", "--split: 'dev' is not test or train"},
        {"--task passkey --length 1024 --format csv", "--format: 'csv' is not longbench or train"},
        {"--task passkey --length 1024 --format train --chat llama", "--chat: 'llama'"},
        {"--task passkey --length 1024 --chat chatml", "--chat: only with --format train"},
        {"--task passkey --length 1024 --text 2", "--text: only with --format train"},
        {"--task passkey --length 1024 --format train --text 0", "--text: '0'"},
        {"--task passkey --length 1024 --seed 9223372036854775808",
         "--seed: '9223372036854775808'"},
        {"--length 1024 --format train", "--task: required"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "synth %s --corpus %s --out-dir %s/cli", bad[i].args,
                 corpus_path, out_dir);
        int code = run(args);
        if (code != 2 || !strstr(out, bad[i].msg)) fprintf(stderr, "'%s': %d %s", args, code, out);
        EXPECT_EQ_INT(code, 2);
        EXPECT_STR_CONTAINS(out, bad[i].msg);
    }
    /* text records alone need no task */
    snprintf(args, sizeof args,
             "synth --format train --text 1 --length 512 --corpus %s --out-dir %s", corpus_path,
             out_dir);
    EXPECT_EQ_INT(run(args), 0);
    EXPECT_STR_CONTAINS(out, "text_512.jsonl: 1 records");
}

int main(void)
{
    const char *s = getenv("PULSE_SRC");
    snprintf(src, sizeof src, "%s", s ? s : ".");
    snprintf(corpus_path, sizeof corpus_path, "%s/README.md", src);
    strcpy(out_dir, "/tmp/pulse_synth_train_XXXXXX");
    if (!mkdtemp(out_dir)) return 1;
    struct synth_corpus *c = load_corpus();
    if (c) {
        test_task_records(c);
        test_disjoint(c);
    }
    test_determinism();
    test_test_split();
    test_tokenizer_counts();
    test_cli();
    synth_corpus_free(c);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", out_dir);
    EXPECT_EQ_INT(system(cmd), 0);
    return tu_finish("test_acc_synth_train");
}
