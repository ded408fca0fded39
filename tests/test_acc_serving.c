/* pulse accuracy --check-serving and --serve-policies on a Llama-layout GQA checkpoint the test
 * writes (2 layers, 8 query heads on 2 KV heads of 16 dims, random bf16 weights, a byte-level
 * tokenizer.json) and a synthetic passkey set: every sample of the headwise, solohead, mean,
 * infinigen and infinigen-solohead runs, decoded again through the serving path (the offload
 * runtime with a real prefill into the host pool and the real query), gives the accuracy path's
 * tokens; at the run's small budget those tokens are not full attention's (so the equality is
 * the selection's); the serving
 * path moved recall bytes and made no host synchronisation inside a step; and every answer is in
 * the JSON as valid UTF-8 (a byte-level model ends mid character). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bytebuf.h"
#include "hf_tokenizer.h"
#include "numeric.h"
#include "testutil.h"

enum { H = 128, L = 2, NQ = 8, NKV = 2, HD = 16, FF = 256, V = 256 };

static uint16_t bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

struct tensor {
    char name[96];
    int rows, cols; /* cols 0: a vector of rows */
    float scale;    /* 0: ones (a norm) */
};

static int n_tensors;
static struct tensor T[4 + 9 * L];

static void add(const char *name, int rows, int cols, float scale)
{
    struct tensor *t = &T[n_tensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rows = rows, t->cols = cols, t->scale = scale;
}

static void write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    EXPECT(f != NULL);
    if (!f) return;
    EXPECT(fwrite(p, 1, n, f) == n);
    fclose(f);
}

/* config.json, tokenizer.json and model.safetensors into dir. */
static void write_checkpoint(const char *dir)
{
    char path[512], name[96];
    add("model.embed_tokens.weight", V, H, 0.5f);
    add("model.norm.weight", H, 0, 0);
    add("lm_head.weight", V, H, 0.2f);
    for (int l = 0; l < L; l++) {
        static const struct {
            const char *what;
            int rows, cols;
            float scale;
        } per[] = {{"input_layernorm", H, 0, 0},
                   {"post_attention_layernorm", H, 0, 0},
                   {"self_attn.q_proj", NQ * HD, H, 0.3f},
                   {"self_attn.k_proj", NKV * HD, H, 0.3f},
                   {"self_attn.v_proj", NKV * HD, H, 0.1f},
                   {"self_attn.o_proj", H, NQ * HD, 0.1f},
                   {"mlp.gate_proj", FF, H, 0.1f},
                   {"mlp.up_proj", FF, H, 0.1f},
                   {"mlp.down_proj", H, FF, 0.1f}};
        for (size_t i = 0; i < sizeof per / sizeof per[0]; i++) {
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, per[i].what);
            add(name, per[i].rows, per[i].cols, per[i].scale);
        }
    }
    struct buf hdr = {0}, data = {0};
    char tmp[256];
    put(&hdr, "{", 1);
    for (int i = 0; i < n_tensors; i++) {
        const struct tensor *t = &T[i];
        const size_t n = (size_t)t->rows * (t->cols ? t->cols : 1), off = data.n;
        for (size_t j = 0; j < n; j++) {
            /* normal(0, scale) by Box-Muller from two uniforms; a norm's weights are ones */
            const double u1 = (1.0 - pulse_uniform(77 + (uint64_t)i, 2 * j)) / 2, /* (0, 1] */
                u2 = (1.0 + pulse_uniform(77 + (uint64_t)i, 2 * j + 1)) / 2;
            const float v =
                t->scale ? t->scale * (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2))
                         : 1.0f;
            PUT(&data, uint16_t, bf16_of(v));
        }
        int k = t->cols
                    ? snprintf(tmp, sizeof tmp, "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[%d,%d],",
                               i ? "," : "", t->name, t->rows, t->cols)
                    : snprintf(tmp, sizeof tmp, "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[%d],",
                               i ? "," : "", t->name, t->rows);
        snprintf(tmp + k, sizeof tmp - (size_t)k, "\"data_offsets\":[%zu,%zu]}", off, data.n);
        put(&hdr, tmp, strlen(tmp));
    }
    put(&hdr, "}", 1);
    while (hdr.n % 8)
        put(&hdr, " ", 1);
    struct buf file = {0};
    PUT(&file, uint64_t, (uint64_t)hdr.n);
    put(&file, hdr.p, hdr.n);
    put(&file, data.p, data.n);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_file(path, file.p, file.n);
    free(hdr.p), free(data.p), free(file.p);
    snprintf(path, sizeof path, "%s/config.json", dir);
    snprintf(tmp, sizeof tmp,
             "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
             "\"hidden_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
             "\"num_key_value_heads\": %d, \"head_dim\": %d, \"intermediate_size\": %d, ",
             H, L, NQ, NKV, HD, FF);
    char cfg[512];
    snprintf(cfg, sizeof cfg,
             "%s\"vocab_size\": %d, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, "
             "\"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\", \"eos_token_id\": 0}",
             tmp, V);
    write_file(path, cfg, strlen(cfg));
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    EXPECT_EQ_INT(hf_write_byte_tokenizer(path), 0);
}

/* The served run of policy `pol` in result r at budget 128: every sample decodes the accuracy
 * path's tokens (full attention's for those pulseinfer's normal batch took); returns how many
 * the normal batch took, -1 when the entry is missing. */
static int served_normal(const json_t *r, const char *pol, const char *selection)
{
    if (!r) return -1; /* the run failed (already counted) */
    const json_t *served = json_object_get(r, "served"), *e;
    size_t i;
    json_array_foreach(served, i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "policy")), pol)) continue;
        EXPECT(!strcmp(json_string_value(json_object_get(e, "selection")), selection));
        EXPECT_EQ_INT(json_integer_value(json_object_get(e, "budget")), 128);
        const json_int_t n = json_integer_value(json_object_get(e, "samples")),
                         normal = json_integer_value(json_object_get(e, "normal"));
        EXPECT_EQ_INT(n, 4);
        EXPECT_EQ_INT(json_integer_value(json_object_get(e, "same_tokens")), n);
        EXPECT_EQ_INT(json_integer_value(json_object_get(e, "failed")), 0);
        EXPECT_EQ_INT(json_integer_value(json_object_get(e, "host_syncs")), 0);
        EXPECT_EQ_INT(normal + json_integer_value(json_object_get(e, "offloaded")), n);
        /* whatever was offloaded recalled; the normal batch recalls nothing */
        EXPECT((json_integer_value(json_object_get(e, "recall_bytes")) > 0) == (normal < n));
        const json_t *set = json_array_get(json_object_get(e, "sets"), 0);
        EXPECT_EQ_INT(json_integer_value(json_object_get(set, "samples")), n);
        EXPECT(json_object_get(set, "paired") != NULL);
        return (int)normal;
    }
    EXPECT(0 && "no served entry for the policy");
    return -1;
}

/* --serve-policies: the scored samples served together through pulse run's serving loop. With
 * pulseinfer's fixed admission below every request's length all are offloaded (SoloHead's
 * tokens), above it all go to the normal batch (full attention's; 2 at a time in its GPU
 * budget), and IOAA chooses; arkvale offloads every one (its mean-of-heads lists). Tokens equal the
 * accuracy path's in each case, and the flags without --serve-policies are refused. */
/* Each of n flag sets (after a passkey run's flags on dir, --calib-samples calib) is refused:
 * exit 2 with its message in one line. */
struct refusal {
    const char *flags, *msg;
};

static void expect_refused(const char *dir, const struct refusal *bad, size_t n, int calib)
{
    char cmd[1024];
    static char out[1 << 14];
    for (size_t i = 0; i < n; i++) {
        snprintf(cmd, sizeof cmd,
                 "accuracy --backend cpu --model %s --data %s --lengths 1024 --tasks passkey "
                 "--samples 1 --calib-samples %d %s",
                 dir, dir, calib, bad[i].flags);
        EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 2);
        EXPECT_STR_CONTAINS(out, bad[i].msg);
        int lines = 0;
        for (const char *c = out; *c; c++)
            lines += *c == '\n';
        EXPECT_EQ_INT(lines, 1);
    }
}

static void test_served(const char *dir)
{
    char cmd[1024];
    static char out[1 << 16];
    static const char *const adm[] = {"fixed:0", "fixed:1000000", "ioaa"};
    for (int a = 0; a < 3; a++) {
        snprintf(cmd, sizeof cmd,
                 "accuracy --backend cpu --model %s --data %s --lengths 1024 --tasks passkey "
                 "--samples 4 --calib-samples 1 --policies full,headwise,solohead%s --budgets 128 "
                 "--max-gen 8 --serve-policies pulseinfer%s --serve-batch 3 --serve-normal 2 "
                 "--serve-admission %s",
                 dir, dir, a == 2 ? ",mean" : "",
                 a == 2   ? ",arkvale"
                 : a == 0 ? ",pulseinfer-spec"
                          : "",
                 adm[a]);
        json_t *r = tu_run_pulse_json(cmd, out, sizeof out);
        const int normal = served_normal(r, "pulseinfer", "solohead");
        if (a == 0) EXPECT_EQ_INT(normal, 0);
        if (a == 0) { /* speculation with exact correction: SoloHead's tokens, every sample */
            EXPECT_EQ_INT(served_normal(r, "pulseinfer-spec", "solohead"), 0);
            const json_t *sp =
                json_object_get(json_array_get(json_object_get(r, "served"), 1), "speculation");
            const double hr = json_number_value(json_object_get(sp, "hit_rate"));
            EXPECT(json_integer_value(json_object_get(sp, "scored")) > 0 && hr >= 0 && hr <= 1);
            fprintf(stderr, "served: pulseinfer-spec's prediction held %.3f, %lld corrections\n",
                    hr, (long long)json_integer_value(json_object_get(sp, "corrections")));
        }
        if (a == 1) EXPECT_EQ_INT(normal, 4);
        /* IOAA's admission points are counted; a fixed admission makes no decision */
        const json_t *pi = json_array_get(json_object_get(r, "served"), 0);
        EXPECT(!strcmp(json_string_value(json_object_get(pi, "admission")), adm[a]));
        const json_int_t dec = json_integer_value(json_object_get(pi, "ioaa_decisions"));
        EXPECT(a == 2 ? dec > 0 : dec == 0);
        EXPECT(json_integer_value(json_object_get(pi, "steps")) > 0);
        if (a == 2) {
            EXPECT_EQ_INT(served_normal(r, "arkvale", "mean"), 0); /* its page lists */
            fprintf(stderr, "served: IOAA put %d of 4 samples in the normal batch\n", normal);
        }
        json_decref(r);
    }
    snprintf(cmd, sizeof cmd,
             "accuracy --backend cpu --model %s --data %s --lengths 1024 --tasks passkey "
             "--serve-batch 2",
             dir, dir);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "--serve-batch: only with --serve-policies");
    snprintf(cmd, sizeof cmd,
             "accuracy --backend cpu --model %s --data %s --lengths 1024 --tasks passkey "
             "--serve-policies vanilla",
             dir, dir);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "'vanilla' is not arkvale, pulseinfer or pulseinfer-spec");
    /* pulseinfer's own flags with arkvale alone; a bad admission; no run to compare with */
    static const struct refusal bad[] = {
        {"--serve-policies arkvale --serve-normal 2",
         "--serve-normal: for pulseinfer among --serve-policies"},
        {"--serve-policies pulseinfer --serve-admission fixed", "not ioaa or fixed:LEN"},
        {"--serve-policies pulseinfer --serve-admission fixed:-3", "fixed:LEN"},
        {"--serve-policies pulseinfer --policies full,headwise",
         "pulseinfer is compared with the solohead runs"},
    };
    expect_refused(dir, bad, sizeof bad / sizeof bad[0], 1);
}

/* The speculation entry of policy pol in result r, or NULL. */
static const json_t *spec_entry(const json_t *r, const char *pol)
{
    const json_t *sp;
    size_t i;
    json_array_foreach(json_object_get(r, "speculation"), i, sp)
    {
        if (!strcmp(json_string_value(json_object_get(sp, "policy")), pol)) return sp;
    }
    return NULL;
}

/* The prediction of pol (its pred string) for sample i of result r. */
static const char *pred_of(const json_t *r, size_t i, const char *pol)
{
    const json_t *run;
    size_t k;
    json_array_foreach(json_object_get(json_array_get(json_object_get(r, "samples"), i), "runs"), k,
                       run)
    {
        if (!strcmp(json_string_value(json_object_get(run, "policy")), pol))
            return json_string_value(json_object_get(run, "pred"));
    }
    return NULL;
}

/* --spec-margin 0.5 on the data of r0 (the same samples, selectors and budget at margin 0):
 * the infinigen runs' exact counts are r0's, their hits at least r0's per layer and pooled, the
 * hit rate strictly above r0's (which missed blocks), the prediction 1.5 times the exact
 * blocks (12 of 8 a list: ~60 candidates); the attention, hence every answer, is r0's; the
 * margin is in the JSON and the text. Bad margins are refused with a one-line reason. */
static void test_spec_margin(const char *dir, const json_t *r0)
{
    char cmd[1024];
    static char out[1 << 16];
    snprintf(cmd, sizeof cmd,
             "accuracy --backend cpu --model %s --data %s --lengths 1024 --tasks passkey "
             "--samples 3 --calib-samples 2 --policies full,infinigen,infinigen-solohead "
             "--budgets 128 --max-gen 8 --spec-margin 0.5",
             dir, dir);
    json_t *r = tu_run_pulse_json(cmd, out, sizeof out);
    EXPECT_STR_CONTAINS(out, "speculation margin 0.5");
    EXPECT_STR_CONTAINS(out, "speculation, infinigen 128, margin 0.5: hit rate ");
    EXPECT_STR_CONTAINS(out, "speculation, infinigen-solohead 128, margin 0.5: hit rate ");
    EXPECT_NEAR(json_real_value(json_object_get(json_object_get(r, "config"), "spec_margin")), 0.5,
                0);
    static const char *const pols[] = {"infinigen", "infinigen-solohead"};
    for (int p = 0; p < 2; p++) {
        const json_t *a = spec_entry(r0, pols[p]), *b = spec_entry(r, pols[p]);
        EXPECT(a && b);
        if (!a || !b) continue;
#define N(o, key) json_integer_value(json_object_get(o, key))
        const json_int_t e = N(a, "exact"), h0 = N(a, "hit"), h5 = N(b, "hit");
        EXPECT(e > 0 && h0 < e); /* margin 0 missed blocks: room to grow */
        EXPECT_EQ_INT(N(b, "exact"), e);
        EXPECT(h5 >= h0);
        EXPECT((double)h5 / (double)e > (double)h0 / (double)e);
        EXPECT_NEAR(json_real_value(json_object_get(a, "margin")), 0.0, 0);
        EXPECT_NEAR(json_real_value(json_object_get(b, "margin")), 0.5, 0);
        EXPECT_EQ_INT(N(a, "predicted"), e);
        EXPECT_EQ_INT(2 * N(b, "predicted"), 3 * e);
        /* per layer: the same exact blocks, hits never fewer */
        const json_t *la = json_object_get(a, "per_layer"), *lb = json_object_get(b, "per_layer");
        EXPECT_EQ_INT(json_array_size(la), json_array_size(lb));
        for (size_t l = 0; l < json_array_size(la) && l < json_array_size(lb); l++) {
            const json_t *x = json_array_get(la, l), *y = json_array_get(lb, l);
            EXPECT_EQ_INT(N(x, "layer"), N(y, "layer"));
            EXPECT_EQ_INT(N(x, "exact"), N(y, "exact"));
            EXPECT(N(y, "hit") >= N(x, "hit"));
        }
        /* the table's rate is the margin's too */
        const json_t *row;
        size_t ri;
        json_array_foreach(json_object_get(r, "table"), ri, row)
        {
            if (!strcmp(json_string_value(json_object_get(row, "policy")), pols[p]))
                EXPECT_NEAR(json_real_value(json_object_get(row, "speculation_hit_rate")),
                            (double)h5 / (double)e, 1e-8);
        }
        for (size_t i = 0; i < 3; i++) {
            const char *x = pred_of(r0, i, pols[p]), *y = pred_of(r, i, pols[p]);
            EXPECT(x && y && !strcmp(x, y));
        }
        fprintf(stderr, "spec-margin: %s hit rate %.3f at margin 0, %.3f at 0.5 (%lld blocks)\n",
                pols[p], (double)h0 / (double)e, (double)h5 / (double)e, (long long)e);
#undef N
    }
    json_decref(r);
    static const struct refusal bad[] = {
        {"--spec-margin abc", "--spec-margin: 'abc' is not a number in [0, 1] (decimal)"},
        {"--spec-margin 1.5", "--spec-margin: '1.5' is not a number in [0, 1] (decimal)"},
        {"--spec-margin -0.25", "--spec-margin: '-0.25' is not a number in [0, 1] (decimal)"},
        {"--spec-margin nan", "--spec-margin: 'nan' is not a number in [0, 1] (decimal)"},
        {"--spec-margin ''", "--spec-margin: '' is not a number in [0, 1] (decimal)"},
        {"--spec-margin 0.5 --policies full,headwise",
         "--spec-margin: only with infinigen or infinigen-solohead among --policies"},
        {"--spec-from sideways", "--spec-from: 'sideways' is not input, mid or hits"},
        {"--spec-from mid --policies full,headwise",
         "--spec-from: only with infinigen or infinigen-solohead among --policies"},
    };
    expect_refused(dir, bad, sizeof bad / sizeof bad[0], 0);
}

int main(void)
{
    char dir[] = "/tmp/pulse_acc_serving_XXXXXX", cmd[1024], path[600];
    static char out[1 << 16];
    if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
    write_checkpoint(dir);
    snprintf(cmd, sizeof cmd,
             "synth --task passkey --length 1024 --samples 5 --seed 3 --out-dir %s", dir);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
    snprintf(cmd, sizeof cmd,
             "accuracy --backend cpu --model %s --data %s --lengths 1024 --tasks passkey "
             "--samples 3 --calib-samples 2 --policies "
             "full,headwise,solohead,infinigen,mean,infinigen-solohead --budgets 128 "
             "--max-gen 8 --check-serving",
             dir, dir);
    json_t *r = tu_run_pulse_json(cmd, out, sizeof out);
    const json_t *serving = json_object_get(r, "serving");
    EXPECT_EQ_INT(json_array_size(serving), 5); /* every sparse policy but full, at 128 */
    for (size_t i = 0; i < json_array_size(serving); i++) {
        const json_t *s = json_array_get(serving, i);
        const json_int_t n = json_integer_value(json_object_get(s, "samples"));
        EXPECT_EQ_INT(n, 3);
        EXPECT_EQ_INT(json_integer_value(json_object_get(s, "same_tokens")), n);
        EXPECT(json_integer_value(json_object_get(s, "recall_bytes")) > 0);
        EXPECT_EQ_INT(json_integer_value(json_object_get(s, "host_syncs")), 0);
    }
    /* the infinigen runs' speculation hit rate against the exact query, in [0, 1]; the exact
     * policies have none */
    const json_t *row;
    size_t ri;
    int spec_rows = 0;
    json_array_foreach(json_object_get(r, "table"), ri, row)
    {
        const char *pol = json_string_value(json_object_get(row, "policy"));
        const json_t *hr = json_object_get(row, "speculation_hit_rate");
        if (pol && !strncmp(pol, "infinigen", 9)) {
            EXPECT(json_is_real(hr) && json_real_value(hr) >= 0 && json_real_value(hr) <= 1);
            spec_rows++;
        } else {
            EXPECT(json_is_null(hr));
        }
    }
    EXPECT_EQ_INT(spec_rows, 4); /* two policies, passkey and its average row */
    /* per layer: the layers sum to the run's totals, whose rate is the average row's (one
     * length, one task: the same samples) */
    const json_t *spec = json_object_get(r, "speculation"), *sp;
    size_t si;
    EXPECT_EQ_INT(json_array_size(spec), 2);
    json_array_foreach(spec, si, sp)
    {
        json_int_t e = 0, h = 0;
        const json_t *lay;
        size_t li;
        json_array_foreach(json_object_get(sp, "per_layer"), li, lay)
        {
            e += json_integer_value(json_object_get(lay, "exact"));
            h += json_integer_value(json_object_get(lay, "hit"));
        }
        EXPECT(e > 0);
        EXPECT_EQ_INT(e, json_integer_value(json_object_get(sp, "exact")));
        EXPECT_EQ_INT(h, json_integer_value(json_object_get(sp, "hit")));
        /* step to step: the layers' list-steps and counts sum to the run's; the misses are the
         * exact blocks the approximate lists lacked, at steps with a previous step; lists of
         * equal length miss as many blocks as they hold wrongly */
        static const char *const counts[] = {"steps",       "missed", "missed_again",
                                             "missed_held", "wrong",  "wrong_again"};
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
            json_int_t sum = 0;
            json_array_foreach(json_object_get(sp, "per_layer"), li, lay)
            {
                sum += json_integer_value(json_object_get(lay, counts[k]));
            }
            EXPECT_EQ_INT(sum, json_integer_value(json_object_get(sp, counts[k])));
        }
        json_t *both[] = {(json_t *)sp, NULL};
        json_array_foreach(json_object_get(sp, "per_layer"), li, lay)
        {
            both[1] = (json_t *)lay;
            for (int k = 0; k < 2; k++) {
                const json_t *o = both[k];
#define N(key) json_integer_value(json_object_get(o, key))
#define R(key) json_real_value(json_object_get(o, key))
                EXPECT(N("steps") > 0);
                EXPECT(N("missed") <= e - h && N("missed") > 0);
                EXPECT_EQ_INT(N("wrong"), N("missed"));
                EXPECT(N("missed_again") <= N("missed_held") && N("missed_held") <= N("missed"));
                EXPECT(N("wrong_again") <= N("wrong"));
                EXPECT_NEAR(R("miss_persistence"), (double)N("missed_again") / (double)N("missed"),
                            1e-8);
                EXPECT_NEAR(R("wrong_persistence"), (double)N("wrong_again") / (double)N("wrong"),
                            1e-8);
                EXPECT(R("churn_exact") >= 0 && R("churn_exact") <= 1);
                EXPECT(R("churn_approx") >= 0 && R("churn_approx") <= 1);
#undef N
#undef R
            }
        }
        const char *pol = json_string_value(json_object_get(sp, "policy"));
        json_array_foreach(json_object_get(r, "table"), ri, row)
        {
            if (strcmp(json_string_value(json_object_get(row, "task")), "average") || !pol ||
                strcmp(json_string_value(json_object_get(row, "policy")), pol))
                continue;
            EXPECT_NEAR(json_real_value(json_object_get(row, "speculation_hit_rate")),
                        (double)h / (double)e, 1e-8); /* JSON keeps 9 digits */
        }
    }
    test_spec_margin(dir, r);
    const json_t *samples = json_object_get(r, "samples");
    EXPECT_EQ_INT(json_array_size(samples), 3);
    int differ = 0, checked = 0;
    for (size_t i = 0; i < json_array_size(samples); i++) {
        const json_t *runs = json_object_get(json_array_get(samples, i), "runs");
        EXPECT_EQ_INT(json_array_size(runs), 6);
        const char *full = json_string_value(json_object_get(json_array_get(runs, 0), "pred"));
        for (size_t k = 1; k < json_array_size(runs); k++) {
            const json_t *run = json_array_get(runs, k);
            const char *pred = json_string_value(json_object_get(run, "pred"));
            EXPECT(json_is_true(json_object_get(run, "serving_same_tokens")));
            checked += json_is_true(json_object_get(run, "serving_same_tokens"));
            differ += full && pred && strcmp(full, pred) != 0;
        }
    }
    EXPECT_EQ_INT(checked, 15);
    EXPECT(differ > 0);
    fprintf(stderr,
            "check-serving: %d of 15 sparse samples decode the accuracy path's tokens, %d "
            "of them unlike full attention's\n",
            checked, differ);
    json_decref(r);
    test_served(dir);
    if (getenv("PULSE_TEST_KEEP")) { /* for a look at the checkpoint and the data */
        fprintf(stderr, "kept %s\n", dir);
        return tu_failures ? 1 : 0;
    }
    static const char *const files[] = {"model.safetensors", "config.json", "tokenizer.json",
                                        "passkey_1024.jsonl"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    EXPECT(rmdir(dir) == 0);
    printf("test_acc_serving: %d checks, %d failed\n", tu_checks, tu_failures);
    return tu_failures ? 1 : 0;
}
