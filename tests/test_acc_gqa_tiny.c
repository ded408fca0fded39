/* The GQA test model (models/gqa-tiny/: a Qwen3 checkpoint with 8 query heads over 4 KV heads,
 * trained by scripts/gpu-train.sh) on the CPU backend, through the command line; skipped (exit
 * 77) while the checkpoint is not there. PULSE_GQA_TINY=DIR tests another export.
 * - shape: the suite reads its config (GQA 8/4, head dim 64, QK-norm, RoPE base 1e6);
 * - reference: for each prompt of DIR/reference.json (transformers' Qwen3ForCausalLM in float32,
 *   greedy), the suite's tokenizer gives transformers' prompt ids, and `pulse generate` its
 *   greedy tokens, compared up to the first step whose reference margin (top logit minus the
 *   second) is under MARGIN: a nearer tie may go either way between the suite's numerics (bf16
 *   GEMM inputs, float32 accumulation) and float32 throughout;
 * - accuracy: `pulse accuracy` on passkey samples of 1024 tokens (this repository's README as
 *   the filler, so the same on every machine): the ChatML template is detected, full attention
 *   finds the key, and SoloHead (one KV head's list for all four) runs beside headwise; its
 *   lists' recall through hot caches of three sizes (--cache-slots) falls as the cache grows;
 *   with --meter-steps the meter sees that many steps a sample and every answer and score is
 *   the same. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accuracy/model_load.h"
#include "accuracy/tokenizer.h"
#include "common.h"
#include "testutil.h"

#define MARGIN 0.5

static char model[2048], src[1024];
static const char *backend = "cpu"; /* PULSE_GQA_BACKEND */
static char out[1 << 18];

/* `$PULSE_BIN args` for a command line of any length (prompt ids); its exit code, output in out. */
static int run_long(const char *args)
{
    const char *bin = getenv("PULSE_BIN");
    size_t n = strlen(args) + strlen(bin ? bin : "./build/pulse") + 16;
    char *cmd = malloc(n);
    snprintf(cmd, n, "%s %s 2>&1", bin ? bin : "./build/pulse", args);
    FILE *p = popen(cmd, "r");
    size_t got = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[got] = 0;
    int st = p ? pclose(p) : -1;
    free(cmd);
    return (st != -1 && WIFEXITED(st)) ? WEXITSTATUS(st) : -1;
}

static void test_shape(void)
{
    struct loaded_config lc;
    char err[512];
    EXPECT_EQ_INT(model_config_from_path(model, &lc, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(lc.cfg.n_heads, 8);
    EXPECT_EQ_INT(lc.cfg.n_kv_heads, 4);
    EXPECT_EQ_INT(lc.cfg.head_dim, 64);
    EXPECT_EQ_INT(lc.cfg.qk_norm, 1);
    EXPECT_NEAR(lc.cfg.rope_theta, 1e6, 0);
    EXPECT_EQ_INT(lc.cfg.vocab, 4096);
}

/* One reference prompt: the ids, then the greedy tokens; the steps compared are returned. */
static int check_prompt(const struct tokenizer *t, json_t *p, const char *tmp)
{
    const char *name = json_string_value(json_object_get(p, "name"));
    const char *text = json_string_value(json_object_get(p, "text"));
    json_t *pid = json_object_get(p, "prompt_ids"), *gen = json_object_get(p, "generated_ids");
    json_t *mar = json_object_get(p, "margins");
    EXPECT(text && json_array_size(pid) > 0 && json_array_size(gen) == json_array_size(mar));
    if (!text || !json_array_size(pid)) return 0;
    const size_t n = json_array_size(pid);
    int32_t *ids = malloc(sizeof *ids * (n + 64));
    size_t got = 0;
    EXPECT_EQ_INT(tokenizer_encode(t, text, strlen(text), 1, ids, n + 64, &got), PULSE_OK);
    int same = got == n;
    for (size_t i = 0; same && i < n; i++)
        same = ids[i] == json_integer_value(json_array_get(pid, i));
    if (!same) fprintf(stderr, "%s: the suite's %zu prompt ids differ from %zu\n", name, got, n);
    EXPECT(same);
    size_t cap = n * 8 + 512, at = 0;
    char *args = malloc(cap);
    at += (size_t)snprintf(args, cap,
                           "generate --model %s --backend %s --max-new-tokens %zu "
                           "--out %s --prompt-ids ",
                           model, backend, json_array_size(gen), tmp);
    for (size_t i = 0; i < n; i++)
        at += (size_t)snprintf(args + at, cap - at, "%s%lld", i ? "," : "",
                               (long long)json_integer_value(json_array_get(pid, i)));
    const int rc = run_long(args);
    EXPECT_EQ_INT(rc, 0);
    if (rc) fprintf(stderr, "%s\n", out);
    json_error_t je;
    json_t *r = rc ? NULL : json_load_file(tmp, 0, &je);
    json_t *mine = json_object_get(r, "generated_ids");
    int compared = 0, differ = -1;
    for (size_t k = 0; k < json_array_size(gen); k++) {
        if (json_real_value(json_array_get(mar, k)) < MARGIN) break;
        if (json_integer_value(json_array_get(mine, k)) !=
            json_integer_value(json_array_get(gen, k))) {
            differ = (int)k;
            break;
        }
        compared++;
    }
    fprintf(stderr, "%-18s %5zu prompt tokens: %d of %zu greedy tokens compared%s (%s)\n", name, n,
            compared, json_array_size(gen), differ >= 0 ? ", then one DIFFERS" : ", all equal",
            json_string_value(json_object_get(r, "text"))
                ? json_string_value(json_object_get(r, "text"))
                : "");
    EXPECT_EQ_INT(differ, -1);
    json_decref(r);
    free(args);
    free(ids);
    return compared;
}

static void test_reference(void)
{
    char path[4096], err[512], tmp[] = "/tmp/pulse_gqa_gen_XXXXXX";
    snprintf(path, sizeof path, "%s/reference.json", model);
    json_error_t je;
    json_t *ref = json_load_file(path, 0, &je);
    EXPECT(ref != NULL);
    snprintf(path, sizeof path, "%s/tokenizer.json", model);
    struct tokenizer *t = NULL;
    EXPECT_EQ_INT(tokenizer_load_json(path, &t, err, sizeof err), PULSE_OK);
    const int fd = mkstemp(tmp);
    if (fd >= 0) close(fd);
    int compared = 0;
    json_t *p;
    size_t i;
    json_array_foreach(json_object_get(ref, "prompts"), i, p) if (t) compared +=
        check_prompt(t, p, tmp);
    EXPECT(compared >= 12); /* the retrieval answers are far from ties */
    unlink(tmp);
    tokenizer_free(t);
    json_decref(ref);
}

/* --cache-slots' rows of result r: recall bytes and layer-steps of the meter's own row and of
 * the 20, 32 and 64-slot caches. */
static void cache_rows(json_t *r, int64_t rb[4], int64_t steps[4])
{
    json_t *cache = json_object_get(r, "cache"), *rows = json_object_get(cache, "rows");
    EXPECT_EQ_INT(json_integer_value(json_object_get(cache, "budget_tokens")), 256);
    EXPECT_EQ_INT(json_array_size(rows), 4);
    for (size_t i = 0; i < 4; i++) {
        json_t *row_i = json_array_get(rows, i);
        rb[i] = json_integer_value(json_object_get(row_i, "recall_bytes"));
        steps[i] = json_integer_value(json_object_get(row_i, "layer_steps"));
        EXPECT(i == 0 ? json_is_null(json_object_get(row_i, "hot_slots"))
                      : json_integer_value(json_object_get(row_i, "hot_slots")) == (i == 1   ? 20
                                                                                    : i == 2 ? 32
                                                                                             : 64));
    }
    fprintf(stderr, "cache: recall bytes %lld (none), %lld (20), %lld (32), %lld (64)\n",
            (long long)rb[0], (long long)rb[1], (long long)rb[2], (long long)rb[3]);
    /* LRU is a stack algorithm: a larger cache never recalls more; the whole context (64)
     * recalls only blocks never selected before */
    EXPECT(steps[0] > 0 && steps[1] == steps[0] && steps[3] == steps[0]);
    EXPECT(rb[1] > 0 && rb[2] <= rb[1] && rb[3] <= rb[2] && rb[3] < rb[1]);
}

/* `pulse accuracy` on the passkey set in dir (3 samples at 1K, budget 256, full, headwise and
 * SoloHead, hot caches of 20, 32 and 64 blocks) with the extra flags, into dir/name; its
 * result, or NULL (the output printed). */
static json_t *accuracy(const char *dir, const char *extra, const char *name)
{
    char args[8192], res[512];
    snprintf(res, sizeof res, "%s/%s", dir, name);
    snprintf(args, sizeof args,
             "accuracy --model %s --backend %s --data %s --lengths 1024 --tasks passkey "
             "--samples 3 --calib-samples 1 --budgets 256 --mam-budget 256 "
             "--policies full,headwise,solohead --cache-slots 20,32,64 %s --out %s",
             model, backend, dir, extra, res);
    const int rc = run_long(args);
    EXPECT_EQ_INT(rc, 0);
    if (rc) fprintf(stderr, "%s\n", out);
    json_error_t je;
    json_t *r = json_load_file(res, 0, &je);
    EXPECT(r != NULL);
    return r;
}

static void test_accuracy(void)
{
    char dir[] = "/tmp/pulse_gqa_acc_XXXXXX", args[8192];
    EXPECT(mkdtemp(dir) != NULL);
    snprintf(args, sizeof args,
             "synth --task passkey --length 1024 --samples 4 --seed 1 --tokenizer %s --corpus "
             "%s/README.md --out-dir %s",
             model, src, dir);
    EXPECT_EQ_INT(run_long(args), 0);
    json_t *r = accuracy(dir, "", "acc.json");
    if (!r) return;
    json_t *cfg = json_object_get(r, "config");
    EXPECT_STR_EQ(json_string_value(json_object_get(cfg, "backend")), backend);
    const char *chat = json_string_value(json_object_get(cfg, "chat_template"));
    EXPECT(chat && !strcmp(chat, "chatml"));
    double full = -1;
    json_t *row;
    size_t k;
    json_array_foreach(json_object_get(r, "table"), k, row)
    {
        const char *pol = json_string_value(json_object_get(row, "policy"));
        const char *task = json_string_value(json_object_get(row, "task"));
        const double sc = json_number_value(json_object_get(row, "score"));
        fprintf(stderr, "accuracy: %-9s %-8s %.3f\n", pol ? pol : "?", task ? task : "?", sc);
        if (pol && task && !strcmp(pol, "full") && !strcmp(task, "passkey")) full = sc;
    }
    EXPECT(full >= 60); /* percent: passkey at 1K, the trained model answers (3 samples) */
    json_t *kv = json_object_get(json_object_get(r, "mam_kv"), "per_task");
    json_t *mam_kv = json_object_get(json_object_get(kv, "passkey"), "mam");
    EXPECT_EQ_INT(json_array_size(mam_kv), 6); /* every layer, 4 KV heads each */
    EXPECT_EQ_INT(json_array_size(json_array_get(mam_kv, 0)), 4);
    /* --cache-slots: the churn meter's SoloHead lists (16 budget blocks, 20 selected with the
     * forced ones) through LRU caches of 20, 32 and 64 blocks (64: the whole 1K context) */
    int64_t rb[4] = {0}, steps[4] = {0}, rb_m[4] = {0}, steps_m[4] = {0};
    cache_rows(r, rb, steps);
    /* --meter-steps 40: the same run, the meter's run decoding on past each answer (about 9
     * tokens) to 40 steps, past passkey's 32 new tokens (the session grows): 39 steady steps a
     * layer and sample (the first is cold), 6 layers, 3 samples; the answers, scores and
     * new-token counts of every run unchanged */
    json_t *m = accuracy(dir, "--meter-steps 40", "acc_m.json");
    if (m) {
        EXPECT_EQ_INT(
            json_integer_value(json_object_get(json_object_get(m, "config"), "meter_steps")), 40);
        cache_rows(m, rb_m, steps_m);
        EXPECT_EQ_INT(steps_m[0], 3 * 6 * 39);
        EXPECT(steps[0] < steps_m[0]);
        const int64_t extra =
            json_integer_value(json_object_get(json_object_get(m, "timing"), "meter_tokens"));
        EXPECT(extra > 0 && extra <= 3 * 40);
        json_t *sa = json_object_get(r, "samples"), *sb = json_object_get(m, "samples");
        EXPECT_EQ_INT(json_array_size(sa), 3);
        EXPECT_EQ_INT(json_array_size(sb), 3);
        int runs = 0;
        for (size_t i = 0; i < json_array_size(sa) && i < json_array_size(sb); i++) {
            json_t *ra = json_object_get(json_array_get(sa, i), "runs");
            json_t *rm = json_object_get(json_array_get(sb, i), "runs");
            EXPECT_EQ_INT(json_array_size(ra), json_array_size(rm));
            for (size_t j = 0; j < json_array_size(ra) && j < json_array_size(rm); j++) {
                json_t *x = json_array_get(ra, j), *y = json_array_get(rm, j);
                const char *px = json_string_value(json_object_get(x, "pred"));
                const char *py = json_string_value(json_object_get(y, "pred"));
                EXPECT(px && py && !strcmp(px, py));
                EXPECT_NEAR(json_number_value(json_object_get(x, "score")),
                            json_number_value(json_object_get(y, "score")), 0);
                EXPECT_EQ_INT(json_integer_value(json_object_get(x, "new_tokens")),
                              json_integer_value(json_object_get(y, "new_tokens")));
                runs++;
            }
        }
        EXPECT_EQ_INT(runs, 3 * 3);
        json_decref(m);
    }
    /* answers cut at 4 tokens (the last one unfed): the meter's run made 3 steps of each and
     * decodes 7 more to 10: 9 steady steps a layer and sample */
    json_t *c = accuracy(dir, "--max-gen 4 --meter-steps 10", "acc_c.json");
    if (c) {
        int64_t rb_c[4] = {0}, steps_c[4] = {0};
        cache_rows(c, rb_c, steps_c);
        EXPECT_EQ_INT(steps_c[0], 3 * 6 * 9);
        EXPECT_EQ_INT(
            json_integer_value(json_object_get(json_object_get(c, "timing"), "meter_tokens")),
            3 * 7);
        json_decref(c);
    }
    json_decref(r);
    snprintf(args, sizeof args, "rm -rf %s", dir);
    EXPECT_EQ_INT(system(args), 0);
}

int main(void)
{
    const char *env = getenv("PULSE_GQA_TINY"), *s = getenv("PULSE_SRC");
    const char *b = getenv("PULSE_GQA_BACKEND");
    if (b && *b) backend = b;
    snprintf(src, sizeof src, "%s", s ? s : ".");
    if (env && *env)
        snprintf(model, sizeof model, "%s", env);
    else
        snprintf(model, sizeof model, "%s/models/gqa-tiny", src);
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/model.safetensors", model);
    int have = stat(path, &st) == 0;
    snprintf(path, sizeof path, "%s/reference.json", model);
    have &= stat(path, &st) == 0;
    if (!have) {
        fprintf(stderr,
                "test_acc_gqa_tiny: %s holds no model.safetensors and reference.json (made by "
                "scripts/gpu-train.sh on the GPU machine; or set PULSE_GQA_TINY): skipped\n",
                model);
        return 77;
    }
    test_shape();
    test_reference();
    test_accuracy();
    return tu_finish("test_acc_gqa_tiny");
}
