/* The real model (Gemma 3 270M Q4_K_M, scripts/setup-model.sh) on the CPU backend, through the
 * command line; skipped (exit 77) when the model is not installed.
 * - golden: the greedy completion of a short fixed prompt equals the checked-in ids
 *   (tests/golden/gemma3_270m_q4km.txt; PULSE_GOLDEN_WRITE=1 rewrites it after a deliberate
 *   change of the numerics);
 * - passkey: a ~1K-token passkey prompt (the classic repeated filler, the key in its last
 *   quarter) is answered with full attention, and `pulse accuracy` runs every policy on it, writing
 * the table, the MAM table of the task and the churn of SoloHead's selections. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#define GOLDEN "tests/golden/gemma3_270m_q4km.txt"
#define PROMPT "The capital of France is"

static char out[1 << 18];
static char model[4096];

static void test_golden(void)
{
    char args[8192], path[4096];
    snprintf(args, sizeof args,
             "generate --model %s --prompt '" PROMPT "' --max-new-tokens 8 --backend cpu", model);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 0);
    const char *ids = strstr(out, "generated ids:");
    EXPECT(ids != NULL);
    if (!ids) return;
    char got[512];
    snprintf(got, sizeof got, "%.*s", (int)strcspn(ids, "\n"), ids);
    const char *src = getenv("PULSE_SRC");
    snprintf(path, sizeof path, "%s/%s", src ? src : ".", GOLDEN);
    if (getenv("PULSE_GOLDEN_WRITE")) {
        FILE *f = fopen(path, "w");
        EXPECT(f != NULL);
        if (f) fprintf(f, "prompt: " PROMPT "\n%s\n", got), fclose(f);
        return;
    }
    FILE *f = fopen(path, "r");
    EXPECT(f != NULL);
    if (!f) return;
    char line[512], want[512] = "";
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "generated ids:", 14))
            snprintf(want, sizeof want, "%.*s", (int)strcspn(line, "\n"), line);
    fclose(f);
    EXPECT_STR_CONTAINS(got, want);
    EXPECT(strlen(want) > 20);
    fprintf(stderr, "golden completion: %s\n", got);
}

/* Passkey records in the LongBench format: the key between `before` and `after` repeats of the
 * filler (record 0: 68121, evaluated; record 1: 40397, the MAM calibration sample). */
static void write_passkey(const char *path, int before, int after, int records)
{
    static const char filler[] = "The grass is green. The sky is blue. The sun is yellow. Here we "
                                 "go. There and back again. ";
    FILE *f = fopen(path, "w");
    EXPECT(f != NULL);
    if (!f) return;
    for (int r = 0; r < records; r++) {
        const char *key = r == 0 ? "68121" : "40397";
        fputs("{\"input\": \"\", \"context\": \"", f);
        for (int i = 0; i < before; i++)
            fputs(filler, f);
        fprintf(f, "The pass key is %s. Remember it. %s is the pass key. ", key, key);
        for (int i = 0; i < after; i++)
            fputs(filler, f);
        fprintf(f,
                "\", \"answers\": [\"%s\"], \"length\": 0, \"all_classes\": null, "
                "\"dataset\": \"passkey\", \"_id\": \"t%d\"}\n",
                key, r);
    }
    fclose(f);
}

/* A temporary directory holding a passkey set of `records` ~1000-token records (the key in the
 * last quarter: this 270M model finds it there; nearer the start it often does not, with full
 * attention too) and the paths of a result and a churn profile in it. */
struct passkey_dir {
    char dir[64], path[256], res[256], prof[256];
};

static void passkey_dir_make(struct passkey_dir *d, int records)
{
    snprintf(d->dir, sizeof d->dir, "/tmp/pulse_gemma_XXXXXX");
    EXPECT(mkdtemp(d->dir) != NULL);
    snprintf(d->path, sizeof d->path, "%s/passkey_1024.jsonl", d->dir);
    snprintf(d->res, sizeof d->res, "%s/acc.json", d->dir);
    snprintf(d->prof, sizeof d->prof, "%s/churn.json", d->dir);
    write_passkey(d->path, 33, 11, records);
}

static void passkey_dir_remove(const struct passkey_dir *d)
{
    unlink(d->path), unlink(d->res), unlink(d->prof), rmdir(d->dir);
}

/* The served check (--serve-policies pulseinfer) in result r: its one sample decoded the accuracy
 * path's tokens, offloaded or in the normal batch. */
static void check_served(json_t *r, int offloaded)
{
    json_t *sv = json_array_get(json_object_get(r, "served"), 0);
    EXPECT(!strcmp(json_string_value(json_object_get(sv, "policy")), "pulseinfer"));
    EXPECT_EQ_INT(json_integer_value(json_object_get(sv, "samples")), 1);
    EXPECT_EQ_INT(json_integer_value(json_object_get(sv, "same_tokens")), 1);
    EXPECT_EQ_INT(json_integer_value(json_object_get(sv, "offloaded")), offloaded);
    EXPECT((json_integer_value(json_object_get(sv, "recall_bytes")) > 0) == offloaded);
}

/* With pulseinfer served too (--serve-policies): fixed:0 offloads the sample (SoloHead's tokens;
 * global layers from the host pool, local ones in their window on the GPU). */
static void test_passkey(void)
{
    char args[8192];
    struct passkey_dir d;
    passkey_dir_make(&d, 2);
    snprintf(args, sizeof args,
             "accuracy --model %s --backend cpu --data %s --lengths 1024 --tasks passkey "
             "--samples 1 --calib-samples 1 --budgets 256 --mam-budget 256 --max-gen 8 "
             "--policies full,solohead,reversed,headwise,infinigen --out %s --churn-profile %s "
             "--serve-policies pulseinfer --serve-admission fixed:0",
             model, d.dir, d.res, d.prof);
    int rc = tu_run_pulse(args, out, sizeof out);
    EXPECT_EQ_INT(rc, 0);
    if (rc) fprintf(stderr, "%s\n", out);
    json_error_t je;
    json_t *r = json_load_file(d.res, 0, &je);
    EXPECT(r != NULL);
    if (r) {
        /* auto found Gemma's turn markers: the passkey prompt is in its chat template */
        EXPECT(!strcmp(
            json_string_value(json_object_get(json_object_get(r, "config"), "chat_template")),
            "gemma"));
        check_served(r, 1);
        json_t *s0 = json_array_get(json_object_get(r, "samples"), 0);
        json_t *runs = json_object_get(s0, "runs");
        EXPECT_EQ_INT(json_array_size(runs), 5);
        json_t *full = json_array_get(runs, 0);
        EXPECT_STR_CONTAINS(json_string_value(json_object_get(full, "pred")), "68121");
        EXPECT_NEAR(json_real_value(json_object_get(full, "score")), 1.0, 0);
        int tokens = (int)json_integer_value(json_object_get(s0, "prompt_tokens"));
        EXPECT(tokens > 800 && tokens <= 1024 - 8);
        fprintf(stderr, "passkey at %d tokens, full attention: %s\n", tokens,
                json_string_value(json_object_get(full, "pred")));
        for (size_t i = 1; i < json_array_size(runs); i++) { /* sparse runs attend less */
            double f =
                json_real_value(json_object_get(json_array_get(runs, i), "attended_fraction"));
            EXPECT(f > 0.2 && f < 0.6);
        }
        /* every row has its interval around its score; a sparse row its paired comparison
         * against full attention on the same sample */
        json_t *row, *table = json_object_get(r, "table");
        size_t k;
        int paired = 0;
        EXPECT(json_array_size(table) == 10); /* 5 runs x (the task, the average) */
        json_array_foreach(table, k, row)
        {
            json_t *iv = json_object_get(row, "interval_95");
            const double sc = json_number_value(json_object_get(row, "score"));
            EXPECT(json_array_size(iv) == 2);
            EXPECT(json_number_value(json_array_get(iv, 0)) <= sc + 1e-9 &&
                   sc <= json_number_value(json_array_get(iv, 1)) + 1e-9);
            json_t *pc = json_object_get(row, "paired");
            const int sparse = strcmp(json_string_value(json_object_get(row, "policy")), "full");
            EXPECT(sparse ? pc != NULL : pc == NULL);
            if (!pc) continue;
            paired++;
            EXPECT_EQ_INT((int)(json_integer_value(json_object_get(pc, "wins")) +
                                json_integer_value(json_object_get(pc, "losses")) +
                                json_integer_value(json_object_get(pc, "ties"))),
                          (int)json_integer_value(json_object_get(row, "samples")));
        }
        EXPECT_EQ_INT(paired, 8);
        json_t *mam =
            json_object_get(json_object_get(json_object_get(r, "mam"), "per_task"), "passkey");
        json_t *rows = json_object_get(mam, "mam");
        EXPECT_EQ_INT(json_array_size(rows), 3); /* global layers 5, 11, 17 */
        for (size_t l = 0; l < json_array_size(rows); l++)
            for (size_t h = 0; h < 4; h++) {
                double v = json_real_value(json_array_get(json_array_get(rows, l), h));
                EXPECT(v > 0.1 && v <= 1.0);
            }
        json_t *layers = json_object_get(json_object_get(r, "churn"), "layers");
        EXPECT_EQ_INT(json_array_size(layers), 18);
        for (size_t l = 0; l < json_array_size(layers); l++) {
            json_int_t n = json_integer_value(
                json_object_get(json_object_get(json_array_get(layers, l), "churn"), "samples"));
            EXPECT(l % 6 == 5 ? n > 0 : n == 0);
        }
        json_decref(r);
    }
    json_t *p = json_load_file(d.prof, 0, &je);
    EXPECT(p != NULL);
    EXPECT_STR_CONTAINS(json_string_value(json_object_get(p, "source")), "measured");
    json_decref(p);
    passkey_dir_remove(&d);
}

/* pulseinfer's fixed admission above the sample's length keeps it whole in the normal batch:
 * full attention's tokens, nothing recalled. */
static void test_served_normal(void)
{
    char args[8192];
    struct passkey_dir d;
    passkey_dir_make(&d, 2);
    snprintf(args, sizeof args,
             "accuracy --model %s --backend cpu --data %s --lengths 1024 --tasks passkey "
             "--samples 1 --calib-samples 1 --budgets 256 --mam-budget 256 --max-gen 8 "
             "--policies full,solohead --out %s --serve-policies pulseinfer "
             "--serve-admission fixed:100000",
             model, d.dir, d.res);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 0);
    json_error_t je;
    json_t *r = json_load_file(d.res, 0, &je);
    EXPECT(r != NULL);
    if (r) check_served(r, 0);
    json_decref(r);
    passkey_dir_remove(&d);
}

/* --time-limit ends the evaluation after the sample in progress: the result is written with
 * the samples scored (status "partial"), the exit is 0. --churn-profile without a SoloHead run
 * at --mam-budget is refused before any work (it used to be found after the whole run, losing
 * its result). */
static void test_time_limit(void)
{
    char args[8192];
    struct passkey_dir d;
    passkey_dir_make(&d, 2);
    snprintf(args, sizeof args,
             "accuracy --model %s --backend cpu --data %s --lengths 1024 --tasks passkey "
             "--samples 2 --calib-samples 0 --budgets 256 --max-gen 8 --policies full,headwise "
             "--time-limit 0.001 --out %s",
             model, d.dir, d.res);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 0);
    EXPECT_STR_CONTAINS(out, "stopped after 1 of 2 samples (--time-limit)");
    json_error_t je;
    json_t *r = json_load_file(d.res, 0, &je);
    EXPECT(r != NULL);
    if (r) {
        EXPECT(!strcmp(json_string_value(json_object_get(r, "status")), "partial"));
        EXPECT_EQ_INT(json_integer_value(json_object_get(r, "samples_scored")), 1);
        EXPECT_EQ_INT(json_integer_value(json_object_get(r, "samples_planned")), 2);
        EXPECT_EQ_INT(json_array_size(json_object_get(r, "samples")), 1);
        json_t *row = json_array_get(json_object_get(r, "table"), 0);
        EXPECT_EQ_INT(json_integer_value(json_object_get(row, "samples")), 1);
        json_decref(r);
    }
    unlink(d.res);
    snprintf(args, sizeof args,
             "accuracy --model %s --backend cpu --data %s --lengths 1024 --tasks passkey "
             "--samples 1 --calib-samples 0 --budgets 256 --policies full,headwise --out %s "
             "--churn-profile %s",
             model, d.dir, d.res, d.prof);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "--churn-profile: needs solohead or solohead-q");
    EXPECT(access(d.res, F_OK) != 0 && access(d.prof, F_OK) != 0);
    passkey_dir_remove(&d);
}

/* --longbench DIR reads DIR/<task>.jsonl and truncates a long prompt in the middle to
 * --max-length minus the task's new tokens, keeping its start and its end (the question). */
static void test_longbench_truncation(void)
{
    char dir[] = "/tmp/pulse_gemma_lb_XXXXXX", path[256], res[256], args[8192];
    EXPECT(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/passkey.jsonl", dir);
    snprintf(res, sizeof res, "%s/acc.json", dir);
    write_passkey(path, 40, 30, 1); /* ~1500 tokens */
    snprintf(args, sizeof args,
             "accuracy --model %s --backend cpu --longbench %s --max-length 520 --tasks passkey "
             "--samples 1 --calib-samples 0 --policies full --max-gen 4 --out %s",
             model, dir, res);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 0);
    json_error_t je;
    json_t *r = json_load_file(res, 0, &je);
    EXPECT(r != NULL);
    if (r) {
        json_t *s0 = json_array_get(json_object_get(r, "samples"), 0);
        EXPECT_EQ_INT(json_integer_value(json_object_get(s0, "prompt_tokens")), 520 - 4);
        json_decref(r);
    }
    unlink(path), unlink(res), rmdir(dir);
    /* a missing set names its file; too few samples for --samples + --calib-samples */
    snprintf(args, sizeof args,
             "accuracy --model %s --backend cpu --data %s --lengths 2048 --tasks passkey", model,
             dir);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "passkey_2048.jsonl");
}

/* pulse synth --tokenizer fits each prompt plus the task's new tokens (passkey: 32) into the
 * length in the model's own tokens, as the accuracy driver will count them. */
static void test_synth_tokenizer(void)
{
    char dir[] = "/tmp/pulse_gemma_syn_XXXXXX", path[256], args[8192];
    EXPECT(mkdtemp(dir) != NULL);
    snprintf(args, sizeof args,
             "synth --task passkey --length 1024 --samples 3 --seed 5 --out-dir %s --tokenizer %s",
             dir, model);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 0);
    snprintf(path, sizeof path, "%s/passkey_1024.jsonl", dir);
    FILE *f = fopen(path, "r");
    EXPECT(f != NULL);
    char line[1 << 16];
    int n = 0;
    while (f && fgets(line, sizeof line, f)) {
        json_error_t je;
        json_t *r = json_loads(line, 0, &je);
        json_int_t t = json_integer_value(json_object_get(r, "tokens"));
        EXPECT(t > 900 && t <= 1024 - 32);
        json_decref(r);
        n++;
    }
    EXPECT_EQ_INT(n, 3);
    if (f) fclose(f);
    unlink(path), rmdir(dir);
}

int main(void)
{
    if (tu_gemma_path("test_acc_gemma3", model, sizeof model) != 0) return 77;
    test_golden();
    test_passkey();
    test_served_normal();
    test_time_limit();
    test_longbench_truncation();
    test_synth_tokenizer();
    return tu_finish("test_acc_gemma3");
}
