/* Hostile model files (issue 13): each is built here, small, and must be refused with a one-line
 * message naming what is wrong, or run correctly; never a crash, an abort or an "ok" result.
 * - a GGUF whose tokenizer has more tokens than its embedding has rows;
 * - a gemma3 GGUF whose hidden size is not a multiple of 64 (runs);
 * - head dims the cuda attention does not take (model_config_check_backend);
 * - absurd head counts in config.json (sizes that overflow int);
 * - NaN, negative or zero norm epsilon / RoPE base, in GGUF metadata and in config.json;
 * - NaN in the weights: the loaders refuse the tensor (generate and pulse run fail with its name
 *   instead of printing ids); a GGUF is known by its magic whatever its file name; a missing
 *   tensor is refused before the run (exit 2), a NaN while loading (status "error");
 * - pulse accuracy with a length limit at or below the task's new tokens: usage error;
 * - a FIFO where a model file is expected (a GGUF, a checkpoint's model.safetensors, the
 *   tiktoken ranks): refused at once, never waiting for a writer (an alarm fails the test if a
 *   loader blocks). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accuracy/bpe.h"
#include "accuracy/gguf.h"
#include "accuracy/model_load.h"
#include "accuracy/safetensors.h"
#include "backend.h"
#include "bytebuf.h"
#include "common.h"
#include "testutil.h"

static char DIR_[] = "/tmp/pulse_hostile_XXXXXX";
static char out[1 << 16];

/* A small model's GGUF: F32 tensors in llama.cpp's names. */
struct gspec {
    const char *arch;
    int layers, hidden, heads, kv_heads, head_dim, ffn, vocab;
    float eps, theta;
    int tokens;    /* tokenizer.ggml.tokens entries (0: none) */
    int nan_at;    /* 1: a NaN in output_norm.weight */
    int no_window; /* gemma3 without attention.sliding_window */
    int no_norm;   /* 1: output_norm.weight left out */
};

static struct gspec base_spec(void)
{
    return (struct gspec){"qwen3", 1, 64, 2, 1, 32, 64, 32, 1e-6f, 10000.0f, 0, 0, 0, 0};
}

struct gt {
    char name[64];
    uint64_t ne0, ne1; /* ne1 0: 1-D */
    int norm;
};

static void kv_u32(struct buf *b, const char *arch, const char *key, uint32_t v)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    put_key(b, k, 4 /* UINT32 */);
    PUT(b, uint32_t, v);
}

static void kv_f32(struct buf *b, const char *arch, const char *key, float v)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    put_key(b, k, 6 /* FLOAT32 */);
    PUT(b, float, v);
}

static void write_gguf(const char *path, const struct gspec *s)
{
    struct gt t[32];
    int n = 0, gemma = !strcmp(s->arch, "gemma3");
    uint64_t H = (uint64_t)s->hidden, qd = (uint64_t)s->heads * s->head_dim,
             kvd = (uint64_t)s->kv_heads * s->head_dim, F = (uint64_t)s->ffn;
#define T(nm, a, b_, nrm)                                                                          \
    (snprintf(t[n].name, sizeof t[n].name, "%s", nm), t[n].ne0 = (a), t[n].ne1 = (b_),             \
     t[n++].norm = (nrm))
    T("token_embd.weight", H, (uint64_t)s->vocab, 0);
    for (int l = 0; l < s->layers; l++) {
        char nm[64];
#define TL(suffix, a, b_, nrm) (snprintf(nm, sizeof nm, "blk.%d." suffix, l), T(nm, a, b_, nrm))
        TL("attn_norm.weight", H, 0, 1);
        TL("attn_q.weight", H, qd, 0);
        TL("attn_k.weight", H, kvd, 0);
        TL("attn_v.weight", H, kvd, 0);
        if (strcmp(s->arch, "llama")) { /* qwen3 and gemma3 have QK-norm */
            TL("attn_q_norm.weight", (uint64_t)s->head_dim, 0, 1);
            TL("attn_k_norm.weight", (uint64_t)s->head_dim, 0, 1);
        }
        TL("attn_output.weight", qd, H, 0);
        TL("ffn_norm.weight", H, 0, 1);
        TL("ffn_gate.weight", H, F, 0);
        TL("ffn_up.weight", H, F, 0);
        TL("ffn_down.weight", F, H, 0);
        if (gemma) {
            TL("post_attention_norm.weight", H, 0, 1);
            TL("post_ffw_norm.weight", H, 0, 1);
        }
#undef TL
    }
    if (!s->no_norm) T("output_norm.weight", H, 0, 2);
#undef T
    struct buf b = {0};
    int n_kv = 10 + (gemma && !s->no_window) + (s->tokens > 0);
    put(&b, "GGUF", 4);
    PUT(&b, uint32_t, 3);
    PUT(&b, uint64_t, (uint64_t)n);
    PUT(&b, uint64_t, (uint64_t)n_kv);
    put_key(&b, "general.architecture", 8 /* STRING */);
    put_str(&b, s->arch);
    kv_u32(&b, s->arch, "block_count", (uint32_t)s->layers);
    kv_u32(&b, s->arch, "embedding_length", (uint32_t)s->hidden);
    kv_u32(&b, s->arch, "feed_forward_length", (uint32_t)s->ffn);
    kv_u32(&b, s->arch, "attention.head_count", (uint32_t)s->heads);
    kv_u32(&b, s->arch, "attention.head_count_kv", (uint32_t)s->kv_heads);
    kv_u32(&b, s->arch, "attention.key_length", (uint32_t)s->head_dim);
    kv_u32(&b, s->arch, "context_length", 4096);
    kv_f32(&b, s->arch, "attention.layer_norm_rms_epsilon", s->eps);
    kv_f32(&b, s->arch, "rope.freq_base", s->theta);
    if (gemma && !s->no_window) kv_u32(&b, s->arch, "attention.sliding_window", 16);
    if (s->tokens > 0) {
        put_key(&b, "tokenizer.ggml.tokens", 9 /* ARRAY */);
        PUT(&b, uint32_t, 8 /* STRING */);
        PUT(&b, uint64_t, (uint64_t)s->tokens);
        for (int i = 0; i < s->tokens; i++) {
            char tok[16];
            snprintf(tok, sizeof tok, "t%d", i);
            put_str(&b, tok);
        }
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        put_str(&b, t[i].name);
        PUT(&b, uint32_t, t[i].ne1 ? 2 : 1);
        PUT(&b, uint64_t, t[i].ne0);
        if (t[i].ne1) PUT(&b, uint64_t, t[i].ne1);
        PUT(&b, uint32_t, 0 /* F32 */);
        PUT(&b, uint64_t, off);
        off += (4 * t[i].ne0 * (t[i].ne1 ? t[i].ne1 : 1) + 31) & ~(uint64_t)31;
    }
    while (b.n % 32)
        PUT(&b, uint8_t, 0);
    for (int i = 0; i < n; i++) {
        uint64_t cnt = t[i].ne0 * (t[i].ne1 ? t[i].ne1 : 1);
        float scale = 1.0f / sqrtf((float)t[i].ne0);
        for (uint64_t e = 0; e < cnt; e++) {
            float v = t[i].norm
                          ? 1.0f
                          : scale *
                                (float)((int)((e * 2654435761u + (uint64_t)i * 97) % 201) - 100) /
                                100.0f;
            if (t[i].norm == 2 && s->nan_at && e == 3) v = NAN;
            PUT(&b, float, v);
        }
        while (b.n % 32)
            PUT(&b, uint8_t, 0);
    }
    FILE *f = fopen(path, "wb");
    EXPECT(f != NULL);
    if (f) fwrite(b.p, 1, b.n, f), fclose(f);
    free(b.p);
}

static void gpath(char *p, size_t n, const char *name)
{
    snprintf(p, n, "%s/%s.gguf", DIR_, name);
}

/* The config of spec s must fail with `want` in the message (one line). */
static void expect_config_error(const struct gspec *s, const char *name, const char *want)
{
    char p[256], err[512] = "";
    struct loaded_config lc;
    gpath(p, sizeof p, name);
    write_gguf(p, s);
    EXPECT(model_config_from_path(p, &lc, err, sizeof err) != PULSE_OK);
    EXPECT_STR_CONTAINS(err, want);
    EXPECT(strchr(err, '\n') == NULL);
    unlink(p);
}

static void test_valid_and_vocab(void)
{
    char p[256], args[600], err[512] = "";
    struct gspec s = base_spec();
    s.tokens = 32;
    gpath(p, sizeof p, "ok");
    write_gguf(p, &s);
    struct loaded_config lc;
    EXPECT_EQ_INT(model_config_from_path(p, &lc, err, sizeof err), PULSE_OK);
    snprintf(args, sizeof args,
             "generate --model %s --backend cpu --prompt-ids 1,2,3 "
             "--max-new-tokens 4",
             p);
    int rc = tu_run_pulse(args, out, sizeof out);
    EXPECT_EQ_INT(rc, 0);
    if (rc) fprintf(stderr, "%s\n", out);
    unlink(p);
    /* 40 tokenizer ids index a 32-row embedding */
    s.tokens = 40;
    expect_config_error(&s, "vocab", "the tokenizer has 40 tokens but token_embd.weight only 32");
}

/* gemma3 with hidden 80: the two post-norms are carved each aligned; the model runs. */
static void test_gemma3_odd_hidden(void)
{
    char p[256], args[600];
    struct gspec s = base_spec();
    s.arch = "gemma3";
    s.hidden = 80;
    gpath(p, sizeof p, "gemma80");
    write_gguf(p, &s);
    snprintf(args, sizeof args,
             "generate --model %s --backend cpu --prompt-ids 1,2,3 "
             "--max-new-tokens 4",
             p);
    int rc = tu_run_pulse(args, out, sizeof out);
    EXPECT_EQ_INT(rc, 0);
    if (rc) fprintf(stderr, "%s\n", out);
    EXPECT_STR_CONTAINS(out, "generated ids:");
    unlink(p);
}

static void test_backend_head_dims(void)
{
    struct model_config c = *model_config_find("tiny");
    char err[256] = "";
    int ok_dims[] = {64, 128, 256}, bad_dims[] = {16, 32, 96, 512};
    for (int i = 0; i < 3; i++) {
        c.head_dim = ok_dims[i];
        EXPECT_EQ_INT(model_config_check_backend(&c, "cuda", err, sizeof err), PULSE_OK);
    }
    for (int i = 0; i < 4; i++) {
        c.head_dim = bad_dims[i];
        err[0] = '\0';
        EXPECT_EQ_INT(model_config_check_backend(&c, "cuda", err, sizeof err), PULSE_ERR_INVALID);
        EXPECT_STR_CONTAINS(err, "the cuda backend's attention takes 64, 128 or 256");
        EXPECT_EQ_INT(model_config_check_backend(&c, "cpu", err, sizeof err), PULSE_OK);
    }
    c.head_dim = 64, c.n_heads = 32, c.n_kv_heads = 2; /* 16 query heads per KV head */
    EXPECT_EQ_INT(model_config_check_backend(&c, "cuda", err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "16 query heads per KV head");
    /* every built-in config runs on cuda */
    for (int i = 0; model_config_at(i); i++)
        EXPECT_EQ_INT(model_config_check_backend(model_config_at(i), "cuda", err, sizeof err),
                      PULSE_OK);
}

/* config.json beside a one-tensor model.safetensors. */
static void write_hf(const char *dir, const char *config)
{
    char p[256];
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "w");
    if (f) fputs(config, f), fclose(f);
    const char *hdr = "{\"model.embed_tokens.weight\":{\"dtype\":\"F32\",\"shape\":[1],"
                      "\"data_offsets\":[0,4]}}";
    struct buf b = {0};
    uint64_t n = strlen(hdr), pad = (8 - n % 8) % 8, total = n + pad;
    put(&b, &total, 8);
    put(&b, hdr, n);
    for (uint64_t i = 0; i < pad; i++)
        put(&b, " ", 1);
    PUT(&b, float, 1.0f);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    f = fopen(p, "wb");
    if (f) fwrite(b.p, 1, b.n, f), fclose(f);
    free(b.p);
}

static void expect_hf_error(const char *fields, const char *want)
{
    char dir[300], cfg[1024], err[512] = "";
    snprintf(dir, sizeof dir, "%s/hf", DIR_);
    mkdir(dir, 0700);
    snprintf(cfg, sizeof cfg,
             "{\"model_type\": \"qwen3\", \"num_hidden_layers\": 1, \"intermediate_size\": 64, "
             "\"vocab_size\": 32, %s}",
             fields);
    write_hf(dir, cfg);
    struct loaded_config lc;
    EXPECT(model_config_from_path(dir, &lc, err, sizeof err) != PULSE_OK);
    EXPECT_STR_CONTAINS(err, want);
    EXPECT(strchr(err, '\n') == NULL);
}

static void test_absurd_shapes(void)
{
    /* 2^24 heads of 128: n_heads * head_dim overflows int */
    expect_hf_error("\"hidden_size\": 4096, \"num_attention_heads\": 16777216, "
                    "\"num_key_value_heads\": 16777216, \"head_dim\": 128",
                    "shape out of range");
    expect_hf_error("\"hidden_size\": 2147483647, \"num_attention_heads\": 1, \"head_dim\": 64",
                    "shape out of range");
    /* a valid config for contrast: refused only for its one-tensor checkpoint */
    char dir[300], err[512] = "";
    snprintf(dir, sizeof dir, "%s/hf", DIR_);
    write_hf(dir,
             "{\"model_type\": \"qwen3\", \"num_hidden_layers\": 1, \"intermediate_size\": 64, "
             "\"vocab_size\": 32, \"hidden_size\": 64, \"num_attention_heads\": 2, "
             "\"tie_word_embeddings\": true}");
    struct loaded_config lc;
    EXPECT(model_config_from_path(dir, &lc, err, sizeof err) != PULSE_OK);
    EXPECT_STR_CONTAINS(err, "tensor 'model.embed_tokens.weight' has shape [1], the config wants "
                             "[32, 64]");
    struct model_config c = *model_config_find("tiny");
    c.n_heads = 1 << 30, c.n_kv_heads = 1 << 30;
    EXPECT_EQ_INT(model_config_validate(&c, "x", err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "x: shape out of range");
}

static void test_eps_theta(void)
{
    const float bad[] = {NAN, -1.0f, 0.0f, INFINITY};
    for (int i = 0; i < 4; i++) {
        struct gspec s = base_spec();
        s.eps = bad[i];
        expect_config_error(&s, "eps", "each must be finite and > 0");
        s = base_spec();
        s.theta = bad[i];
        expect_config_error(&s, "theta", "each must be finite and > 0");
    }
    /* the same function for config.json: 1e-50 is > 0 as a double but 0 as the float used */
    expect_hf_error("\"hidden_size\": 64, \"num_attention_heads\": 2, \"rms_norm_eps\": 1e-50",
                    "each must be finite and > 0");
    expect_hf_error("\"hidden_size\": 64, \"num_attention_heads\": 2, \"rope_theta\": 1e300",
                    "each must be finite and > 0");
}

static void test_nan_weights(void)
{
    char p[256], args[600];
    struct gspec s = base_spec();
    s.nan_at = 1;
    gpath(p, sizeof p, "nan");
    write_gguf(p, &s);
    snprintf(args, sizeof args,
             "generate --model %s --backend cpu --prompt-ids 1,2,3 "
             "--max-new-tokens 2 --out %s/nan.json",
             p, DIR_);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 1);
    EXPECT_STR_CONTAINS(out, "tensor 'output_norm.weight' has 1 NaN or infinite values");
    char j[300];
    snprintf(j, sizeof j, "%s/nan.json", DIR_);
    EXPECT(access(j, F_OK) != 0); /* no result written */
    /* pulse run refuses the weights too (status "error", not a run of token 0) */
    snprintf(
        args, sizeof args,
        "run --weights %s --backend cpu --workload uniform:8:1 --output-len 2 --out %s/nan.json", p,
        DIR_);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 1);
    EXPECT_STR_CONTAINS(out, "has 1 NaN or infinite values");
    /* a GGUF is known by its magic, not its name: the same file as .bin is read as GGUF */
    char bin[300];
    snprintf(bin, sizeof bin, "%s/model.bin", DIR_);
    EXPECT_EQ_INT(rename(p, bin), 0);
    snprintf(args, sizeof args,
             "run --weights %s --backend cpu --workload uniform:8:1 --output-len 2", bin);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 1);
    EXPECT_STR_CONTAINS(out, "has 1 NaN or infinite values");
    unlink(bin);
    unlink(p);
}

/* A file whose metadata and tensors disagree (a missing tensor) is refused before the run, as
 * bad input (exit 2, no result); a weight the loader refuses while loading (NaN) is an error of
 * the run, not out of memory (status "error"). */
static void test_load_failure_status(void)
{
    char p[256], args[1024], j[300];
    struct gspec s = base_spec();
    s.no_norm = 1;
    gpath(p, sizeof p, "nonorm");
    write_gguf(p, &s);
    snprintf(j, sizeof j, "%s/nonorm.json", DIR_);
    snprintf(args, sizeof args,
             "run --weights %s --backend cpu --workload uniform:8:1 --output-len 2 --out %s", p, j);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "tensor 'output_norm.weight' is missing");
    EXPECT(access(j, F_OK) != 0);
    unlink(p);
    s = base_spec();
    s.nan_at = 1;
    gpath(p, sizeof p, "nan2");
    write_gguf(p, &s);
    snprintf(args, sizeof args,
             "run --weights %s --backend cpu --workload uniform:8:1 --output-len 2 --out %s", p, j);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 1);
    EXPECT_STR_CONTAINS(out, "tensor 'output_norm.weight' has 1 NaN or infinite values");
    json_error_t je;
    json_t *r = json_load_file(j, 0, &je);
    EXPECT(r != NULL);
    if (r) EXPECT(!strcmp(json_string_value(json_object_get(r, "status")), "error"));
    json_decref(r);
    unlink(j);
    unlink(p);
}

static void test_accuracy_limits(void)
{
    /* gov_report generates up to 512 new tokens: a 512-token limit leaves no prompt */
    EXPECT_EQ_INT(tu_run_pulse("accuracy --model none.gguf --longbench /nonexistent "
                               "--max-length 512 --tasks gov_report",
                               out, sizeof out),
                  2);
    EXPECT_STR_CONTAINS(out, "--max-length: 512 tokens leave no room for a prompt");
    EXPECT_EQ_INT(tu_run_pulse("accuracy --model none.gguf --longbench /nonexistent "
                               "--max-length 64 --tasks passkey,gov_report",
                               out, sizeof out),
                  2);
    EXPECT_STR_CONTAINS(out, "--max-length: 64 tokens");
    EXPECT_EQ_INT(tu_run_pulse("accuracy --model none.gguf --data /nonexistent --lengths 1024,64 "
                               "--tasks gov_report --max-gen 64",
                               out, sizeof out),
                  2);
    EXPECT_STR_CONTAINS(out, "--lengths: 64 tokens leave no room");
    /* --max-gen below the length passes this check (and fails later on the missing model) */
    EXPECT_EQ_INT(tu_run_pulse("accuracy --model none.gguf --longbench /nonexistent "
                               "--max-length 64 --tasks gov_report --max-gen 16",
                               out, sizeof out),
                  2);
    EXPECT_STR_CONTAINS(out, "--model");
}

static void test_fifo_inputs(void)
{
    char fifo[300], dir[300], args[700], err[512] = "";
    snprintf(fifo, sizeof fifo, "%s/fifo", DIR_);
    EXPECT_EQ_INT(mkfifo(fifo, 0600), 0);
    alarm(60); /* a loader that waits for a writer fails here, not forever */
    struct gguf_file *g = NULL;
    EXPECT(gguf_open(fifo, &g, err, sizeof err) != PULSE_OK && g == NULL);
    EXPECT_STR_CONTAINS(err, "not a regular file");
    struct safetensors *st = NULL;
    err[0] = 0;
    EXPECT(safetensors_open(fifo, &st, err, sizeof err) != PULSE_OK && st == NULL);
    EXPECT_STR_CONTAINS(err, "not a regular file");
    struct bpe *b = NULL;
    err[0] = 0;
    EXPECT(bpe_load_tiktoken(fifo, BPE_PATTERN_QWEN, NULL, 0, &b, err, sizeof err) != 0);
    EXPECT_STR_CONTAINS(err, "is not a regular file");
    EXPECT_EQ_INT(model_path_is_gguf(fifo), 0);
    /* a checkpoint whose model.safetensors is a FIFO, through the command line */
    snprintf(dir, sizeof dir, "%s/hf", DIR_);
    mkdir(dir, 0700);
    write_hf(dir, "{\"model_type\": \"qwen3\", \"num_hidden_layers\": 1, \"intermediate_size\": "
                  "64, \"vocab_size\": 32, \"hidden_size\": 64, \"num_attention_heads\": 2}");
    char st_path[330];
    snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
    unlink(st_path);
    EXPECT_EQ_INT(mkfifo(st_path, 0600), 0);
    snprintf(args, sizeof args, "generate --model %s --backend cpu --prompt-ids 1 --max-new-tokens 1",
             dir);
    EXPECT(tu_run_pulse(args, out, sizeof out) != 0);
    EXPECT_STR_CONTAINS(out, "not a regular file");
    snprintf(args, sizeof args, "generate --model %s --backend cpu --prompt-ids 1", fifo);
    EXPECT(tu_run_pulse(args, out, sizeof out) != 0);
    alarm(0);
    unlink(st_path);
    unlink(fifo);
}

int main(void)
{
    if (!mkdtemp(DIR_)) return 1;
    test_valid_and_vocab();
    test_gemma3_odd_hidden();
    test_backend_head_dims();
    test_absurd_shapes();
    test_eps_theta();
    test_nan_weights();
    test_load_failure_status();
    test_accuracy_limits();
    test_fifo_inputs();
    char p[300];
    snprintf(p, sizeof p, "%s/hf/config.json", DIR_);
    unlink(p);
    snprintf(p, sizeof p, "%s/hf/model.safetensors", DIR_);
    unlink(p);
    snprintf(p, sizeof p, "%s/hf", DIR_);
    rmdir(p);
    rmdir(DIR_);
    return tu_finish("test_model_hostile");
}
