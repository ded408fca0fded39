/* safetensors reader: the test writes a tiny Llama-layout model directory (config.json, two
 * shards, the index) and checks every tensor's dtype, shape and values as fp32 and bf16 (the
 * expected bf16 of hand-picked fp32 bit patterns is worked out by hand: ties to even, overflow
 * to infinity). Then config.json defaults and errors, single-file models, and every corrupt
 * input: each must fail with a message naming the file and, where there is one, the tensor. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accuracy/safetensors.h"
#include "bytebuf.h"
#include "hf_tokenizer.h"
#include "common.h"
#include "numeric.h"
#include "testutil.h"

/* ---- building files ---- */

static void put_s(struct buf *b, const char *s)
{
    put(b, s, strlen(s));
}

/* An image from a raw header (padded with spaces to a multiple of 8, as the Python writer
 * does) and data_len bytes of data (a byte pattern). */
static struct buf from_header(const char *hdr, size_t data_len)
{
    struct buf b = {0};
    uint64_t n = strlen(hdr), pad = (8 - n % 8) % 8, total = n + pad;
    put(&b, &total, 8);
    put_s(&b, hdr);
    for (uint64_t i = 0; i < pad; i++)
        put_s(&b, " ");
    for (size_t i = 0; i < data_len; i++)
        put(&b, &(uint8_t){(uint8_t)(i * 7 + 1)}, 1);
    return b;
}

struct ts {
    const char *name, *dtype;
    int nd;
    uint64_t shape[4];
    struct buf data;
};

/* A valid image: tensors back to back in the given order, then nothing. */
static struct buf build(const struct ts *t, int n, const char *meta)
{
    struct buf h = {0};
    char tmp[512];
    uint64_t off = 0;
    put_s(&h, "{");
    if (meta) put_s(&h, "\"__metadata__\":"), put_s(&h, meta), put_s(&h, ",");
    for (int i = 0; i < n; i++) {
        int o = snprintf(tmp, sizeof tmp, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "",
                         t[i].name, t[i].dtype);
        for (int d = 0; d < t[i].nd; d++)
            o += snprintf(tmp + o, sizeof tmp - (size_t)o, "%s%llu", d ? "," : "",
                          (unsigned long long)t[i].shape[d]);
        snprintf(tmp + o, sizeof tmp - (size_t)o, "],\"data_offsets\":[%llu,%llu]}",
                 (unsigned long long)off, (unsigned long long)(off + t[i].data.n));
        put_s(&h, tmp);
        off += t[i].data.n;
    }
    put_s(&h, "}");
    put(&h, "", 1);
    struct buf b = from_header((const char *)h.p, 0);
    for (int i = 0; i < n; i++)
        put(&b, t[i].data.p, t[i].data.n);
    free(h.p);
    return b;
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    EXPECT(f != NULL);
    if (!f) return;
    EXPECT(fwrite(p, 1, n, f) == n);
    fclose(f);
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    write_bytes(path, text, strlen(text));
}

/* ---- the tiny Llama model: hidden 8, 2 heads of 4, 1 KV head, FFN 16, vocab 12 ---- */

enum { H = 8, FFN = 16, VOCAB = 12, KV = 4 };

static double half_value(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

/* Hand-picked fp32 bit patterns and their bf16 by hand: 1.0; 1 + 2^-8 and 1 + 3 * 2^-8 are
 * ties that go to the even neighbour (0x3f80, 0x3f82); -2.5 exact; FLT_MAX overflows to
 * infinity; the subnormal 0x00018000 is a tie rounding up to even 0x0002; +-0. */
static const uint32_t NORM_BITS[H] = {0x3f800000, 0x3f808000, 0x3f818000, 0xc0200000,
                                      0x7f7fffff, 0x00018000, 0x00000000, 0x80000000};
static const uint16_t NORM_BF16[H] = {0x3f80, 0x3f80, 0x3f82, 0xc020,
                                      0x7f80, 0x0002, 0x0000, 0x8000};

struct model_tensor {
    struct ts ts;
    int shard;          /* 1 or 2 */
    float *ref;         /* expected fp32 */
    uint16_t *ref_bf16; /* expected bf16 (NULL: not readable) */
    uint64_t n;
};

static struct model_tensor M[16];
static int n_model;

static struct model_tensor *add(const char *name, const char *dtype, int shard, uint64_t d0,
                                uint64_t d1)
{
    struct model_tensor *m = &M[n_model++];
    m->ts.name = name, m->ts.dtype = dtype, m->shard = shard;
    m->ts.nd = d1 ? 2 : 1;
    m->ts.shape[0] = d0, m->ts.shape[1] = d1;
    m->n = d1 ? d0 * d1 : d0;
    m->ref = calloc(m->n + 1, sizeof(float));
    m->ref_bf16 = calloc(m->n + 1, sizeof(uint16_t));
    uint64_t seed = (uint64_t)n_model * 977;
    for (uint64_t i = 0; i < m->n; i++) {
        float u = pulse_uniform(seed, i);
        if (!strcmp(dtype, "BF16")) {
            /* bf16 bits taken from the top of u's bits: the value is exactly bits << 16 */
            uint32_t bits;
            memcpy(&bits, &u, 4);
            uint16_t h = (uint16_t)(bits >> 16);
            uint32_t w = (uint32_t)h << 16;
            memcpy(&m->ref[i], &w, 4);
            m->ref_bf16[i] = h;
            put(&m->ts.data, &h, 2);
        } else if (!strcmp(dtype, "F16")) {
            /* a random half with exponent field 5..24 (normal, no inf/NaN) */
            uint16_t h = (uint16_t)((pulse_hash64(seed, i) & 0x83ff) |
                                    (5 + pulse_hash64(seed, i + 99) % 20) << 10);
            m->ref[i] = (float)half_value(h);
            m->ref_bf16[i] = f32_to_bf16(m->ref[i]); /* fp32 -> bf16 is tested separately */
            put(&m->ts.data, &h, 2);
        } else if (!strcmp(dtype, "F32")) {
            uint32_t bits;
            if (d1 == 0 && d0 == H && !strcmp(name, "model.layers.0.input_layernorm.weight")) {
                bits = NORM_BITS[i];
                m->ref_bf16[i] = NORM_BF16[i];
            } else {
                memcpy(&bits, &u, 4);
                m->ref_bf16[i] = f32_to_bf16(u);
            }
            memcpy(&m->ref[i], &bits, 4);
            put(&m->ts.data, &bits, 4);
        } else { /* I64 */
            int64_t v = (int64_t)i - 2;
            put(&m->ts.data, &v, 8);
            free(m->ref_bf16), m->ref_bf16 = NULL;
        }
    }
    return m;
}

static void make_model(void)
{
    add("model.embed_tokens.weight", "BF16", 1, VOCAB, H);
    add("model.layers.0.input_layernorm.weight", "F32", 1, H, 0);
    add("model.layers.0.self_attn.q_proj.weight", "F16", 1, H, H);
    add("model.layers.0.self_attn.k_proj.weight", "BF16", 1, KV, H);
    add("model.layers.0.self_attn.v_proj.weight", "BF16", 2, KV, H);
    add("model.layers.0.self_attn.o_proj.weight", "BF16", 2, H, H);
    add("model.layers.0.post_attention_layernorm.weight", "F32", 2, H, 0);
    add("model.layers.0.mlp.gate_proj.weight", "BF16", 2, FFN, H);
    add("model.layers.0.mlp.up_proj.weight", "F32", 2, FFN, H);
    add("model.layers.0.mlp.down_proj.weight", "BF16", 2, H, FFN);
    add("model.norm.weight", "F32", 2, H, 0);
    add("lm_head.weight", "BF16", 2, VOCAB, H);
    add("extra.position_ids", "I64", 2, 4, 0);
    struct model_tensor *e = add("extra.empty", "F32", 2, 0, H);
    e->ts.shape[0] = 0, e->n = 0;
}

static const char *LLAMA_CONFIG =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 8,"
    " \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"num_key_value_heads\": 1,"
    " \"intermediate_size\": 16, \"vocab_size\": 12, \"rms_norm_eps\": 1e-05,"
    " \"rope_theta\": 500000.0, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\"}";

static int skip_extra; /* write_model leaves out the "extra." tensors (a loadable checkpoint) */

static int written(int i)
{
    return !skip_extra || strncmp(M[i].ts.name, "extra.", 6) != 0;
}

/* Writes the shards, the index and config.json into dir; returns shard 1's image. */
static struct buf write_model(const char *dir)
{
    struct ts s1[16], s2[16];
    int n1 = 0, n2 = 0;
    for (int i = 0; i < n_model; i++) {
        if (!written(i)) continue;
        if (M[i].shard == 1)
            s1[n1++] = M[i].ts;
        else
            s2[n2++] = M[i].ts;
    }
    struct buf b1 = build(s1, n1, "{\"format\":\"pt\"}"), b2 = build(s2, n2, NULL);
    char path[512];
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
    write_bytes(path, b1.p, b1.n);
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    write_bytes(path, b2.p, b2.n);
    free(b2.p);
    struct buf idx = {0};
    char line[256];
    snprintf(line, sizeof line, "{\"metadata\": {\"total_size\": %zu}, \"weight_map\": {",
             b1.n + b2.n);
    put_s(&idx, line);
    for (int i = 0; i < n_model; i++) {
        if (!written(i)) continue;
        snprintf(line, sizeof line, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"",
                 i ? ", " : "", M[i].ts.name, M[i].shard);
        put_s(&idx, line);
    }
    put_s(&idx, "}}");
    put(&idx, "", 1);
    write_text(dir, "model.safetensors.index.json", (const char *)idx.p);
    free(idx.p);
    write_text(dir, "config.json", LLAMA_CONFIG);
    return b1;
}

static void check_model(struct safetensors *st)
{
    char err[512];
    EXPECT_EQ_INT(safetensors_tensor_count(st), n_model);
    for (int i = 0; i < n_model; i++) {
        const struct model_tensor *m = &M[i];
        const struct safetensors_tensor *t = safetensors_find_tensor(st, m->ts.name);
        EXPECT(t != NULL);
        if (!t) continue;
        EXPECT(strcmp(t->dtype_name, m->ts.dtype) == 0);
        EXPECT_EQ_INT(t->n_dims, m->ts.nd);
        EXPECT_EQ_INT(t->shape[0], m->ts.shape[0]);
        EXPECT_EQ_INT(t->n_elems, m->n);
        EXPECT_EQ_INT(t->n_bytes, m->ts.data.n);
        char shard[64];
        snprintf(shard, sizeof shard, "/model-0000%d-of-00002.safetensors", m->shard);
        EXPECT_STR_CONTAINS(t->file, shard);
        float *y = malloc((m->n + 1) * sizeof *y);
        uint16_t *h = malloc((m->n + 1) * sizeof *h);
        int rc = safetensors_read_f32(st, t, y, m->n, err, sizeof err);
        int rc16 = safetensors_read_bf16(st, t, h, m->n, err, sizeof err);
        if (!m->ref_bf16) {
            EXPECT_EQ_INT(rc, PULSE_ERR_INVALID);
            EXPECT_EQ_INT(rc16, PULSE_ERR_INVALID);
            EXPECT_STR_CONTAINS(err, "model-00002-of-00002.safetensors: tensor "
                                     "'extra.position_ids' has dtype I64");
        } else {
            EXPECT_EQ_INT(rc, PULSE_OK);
            EXPECT_EQ_INT(rc16, PULSE_OK);
            EXPECT(m->n == 0 || memcmp(y, m->ref, m->n * sizeof *y) == 0);
            EXPECT(m->n == 0 || memcmp(h, m->ref_bf16, m->n * sizeof *h) == 0);
            if (m->n) {
                EXPECT_EQ_INT(safetensors_read_f32(st, t, y, m->n - 1, err, sizeof err),
                              PULSE_ERR_INVALID);
                EXPECT_STR_CONTAINS(err, "destination holds");
                EXPECT_STR_CONTAINS(err, m->ts.name);
            }
        }
        free(y), free(h);
    }
    EXPECT(safetensors_find_tensor(st, "model.missing") == NULL);
    EXPECT(safetensors_tensor_at(st, 1000) == NULL);
    EXPECT(safetensors_metadata(st, "format") && !strcmp(safetensors_metadata(st, "format"), "pt"));
    EXPECT(safetensors_metadata(st, "nope") == NULL);
}

/* ---- the valid model ---- */

static char DIR_[64];

static void test_model(struct buf *shard1)
{
    char err[512], path[600];
    struct safetensors *st = NULL;
    *shard1 = write_model(DIR_);
    int rc = safetensors_open(DIR_, &st, err, sizeof err);
    if (rc) fprintf(stderr, "open: %s\n", err);
    EXPECT_EQ_INT(rc, PULSE_OK);
    if (st) {
        check_model(st);
        /* shards in order, header order within each */
        EXPECT(strcmp(safetensors_tensor_at(st, 0)->name, "model.embed_tokens.weight") == 0);
        EXPECT(strcmp(safetensors_tensor_at(st, 4)->name,
                      "model.layers.0.self_attn.v_proj.weight") == 0);
        safetensors_free(st);
    }
    /* the index file itself as the path */
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", DIR_);
    EXPECT_EQ_INT(safetensors_open(path, &st, err, sizeof err), PULSE_OK);
    if (st) {
        EXPECT_EQ_INT(safetensors_tensor_count(st), n_model);
        safetensors_free(st);
    }
    /* one shard on its own, from a file and from memory */
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", DIR_);
    EXPECT_EQ_INT(safetensors_open(path, &st, err, sizeof err), PULSE_OK);
    if (st) {
        EXPECT_EQ_INT(safetensors_tensor_count(st), 4);
        safetensors_free(st);
    }
    EXPECT_EQ_INT(safetensors_open_memory(shard1->p, shard1->n, "s1", &st, err, sizeof err),
                  PULSE_OK);
    if (st) {
        const struct safetensors_tensor *t = safetensors_find_tensor(st, "model.layers.0."
                                                                         "input_layernorm.weight");
        uint16_t h[H];
        EXPECT(t && strcmp(t->file, "s1") == 0);
        EXPECT(t && safetensors_read_bf16(st, t, h, H, err, sizeof err) == PULSE_OK &&
               memcmp(h, NORM_BF16, sizeof h) == 0);
        safetensors_free(st);
    }
    /* config.json */
    struct safetensors_config c;
    rc = safetensors_read_config(DIR_, &c, err, sizeof err);
    if (rc) fprintf(stderr, "config: %s\n", err);
    EXPECT_EQ_INT(rc, PULSE_OK);
    EXPECT(strcmp(c.model_type, "llama") == 0);
    EXPECT(c.hidden_size == H && c.num_hidden_layers == 1 && c.num_attention_heads == 2);
    EXPECT(c.num_key_value_heads == 1 && c.head_dim == 4 && c.intermediate_size == FFN);
    EXPECT(c.vocab_size == VOCAB && c.rms_norm_eps == 1e-5 && c.rope_theta == 500000.0);
    EXPECT_EQ_INT(c.tie_word_embeddings, 0);
}

/* A directory with a single model.safetensors. */
static void test_single(const struct buf *shard1)
{
    char dir[64], path[600], err[512];
    struct safetensors *st = NULL;
    strcpy(dir, "/tmp/pulse_st1_XXXXXX");
    EXPECT(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_bytes(path, shard1->p, shard1->n);
    EXPECT_EQ_INT(safetensors_open(dir, &st, err, sizeof err), PULSE_OK);
    if (st) {
        EXPECT_EQ_INT(safetensors_tensor_count(st), 4);
        safetensors_free(st);
    }
    unlink(path);
    /* an empty directory */
    EXPECT_EQ_INT(safetensors_open(dir, &st, err, sizeof err), PULSE_ERR_IO);
    EXPECT_STR_CONTAINS(err, dir);
    EXPECT_STR_CONTAINS(err, "no model.safetensors or model.safetensors.index.json");
    EXPECT_EQ_INT(safetensors_read_config(dir, &(struct safetensors_config){0}, err, sizeof err),
                  PULSE_ERR_IO);
    EXPECT_STR_CONTAINS(err, "config.json: cannot open");
    rmdir(dir);
    EXPECT_EQ_INT(safetensors_open("/nonexistent/m", &st, err, sizeof err), PULSE_ERR_IO);
    EXPECT_STR_CONTAINS(err, "/nonexistent/m: cannot open");
}

/* ---- config.json defaults and errors ---- */

static int parse_cfg(const char *text, struct safetensors_config *c, char *err, size_t n)
{
    return safetensors_parse_config(text, strlen(text), "cfg.json", c, err, n);
}

static void test_config(void)
{
    char err[512];
    struct safetensors_config c;
    /* Qwen3-14B: head_dim given and not hidden / heads */
    EXPECT_EQ_INT(
        parse_cfg("{\"model_type\":\"qwen3\",\"hidden_size\":5120,\"num_hidden_layers\":40,"
                  "\"num_attention_heads\":40,\"num_key_value_heads\":8,\"head_dim\":128,"
                  "\"intermediate_size\":17408,\"vocab_size\":151936,\"rms_norm_eps\":1e-06,"
                  "\"rope_theta\":1000000,\"tie_word_embeddings\":false}",
                  &c, err, sizeof err),
        PULSE_OK);
    EXPECT(!strcmp(c.model_type, "qwen3") && c.head_dim == 128 && c.num_key_value_heads == 8);
    EXPECT(c.rope_theta == 1e6 && c.rms_norm_eps == 1e-6 && c.vocab_size == 151936);
    /* defaults: head_dim, KV heads, eps, theta, tie; head_dim null counts as absent */
    EXPECT_EQ_INT(parse_cfg("{\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
                            "\"intermediate_size\":128,\"vocab_size\":100,\"head_dim\":null}",
                            &c, err, sizeof err),
                  PULSE_OK);
    EXPECT(c.head_dim == 16 && c.num_key_value_heads == 4 && c.rms_norm_eps == 1e-6);
    EXPECT(c.rope_theta == 10000.0 && c.tie_word_embeddings == 0 && c.model_type[0] == 0);
    /* rope_parameters (newer transformers), text_config (multimodal), tie true */
    EXPECT_EQ_INT(parse_cfg("{\"model_type\":\"gemma3\",\"tie_word_embeddings\":true,"
                            "\"text_config\":{\"hidden_size\":640,\"num_hidden_layers\":18,"
                            "\"num_attention_heads\":4,\"num_key_value_heads\":1,\"head_dim\":256,"
                            "\"intermediate_size\":2048,\"vocab_size\":262144,"
                            "\"rope_parameters\":{\"rope_theta\":1000000.0}}}",
                            &c, err, sizeof err),
                  PULSE_OK);
    EXPECT(c.hidden_size == 640 && c.head_dim == 256 && c.rope_theta == 1e6);
    EXPECT(c.tie_word_embeddings == 1 && !strcmp(c.model_type, "gemma3"));
    static const struct {
        const char *json, *want;
    } bad[] = {
        {"{\"num_hidden_layers\":1}", "missing \"hidden_size\""},
        {"{\"hidden_size\":\"8\"}", "\"hidden_size\" must be an integer"},
        {"{\"hidden_size\":8.5}", "\"hidden_size\" must be an integer"},
        {"{\"hidden_size\":0}", "\"hidden_size\" = 0 is out of range"},
        {"{\"hidden_size\":4294967296}", "\"hidden_size\" = 4294967296 is out of range"},
        {"{\"hidden_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":2,"
         "\"intermediate_size\":16}",
         "missing \"vocab_size\""},
        {"{\"hidden_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":4,"
         "\"num_key_value_heads\":3,\"intermediate_size\":16,\"vocab_size\":9}",
         "num_attention_heads 4 is not a multiple of num_key_value_heads 3"},
        {"{\"hidden_size\":10,\"num_hidden_layers\":1,\"num_attention_heads\":4,"
         "\"intermediate_size\":16,\"vocab_size\":9}",
         "hidden_size 10 is not a multiple"},
        {"{\"hidden_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":2,"
         "\"intermediate_size\":16,\"vocab_size\":9,\"rms_norm_eps\":\"x\"}",
         "\"rms_norm_eps\" must be a positive number"},
        {"{\"hidden_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":2,"
         "\"intermediate_size\":16,\"vocab_size\":9,\"rope_theta\":-1}",
         "\"rope_theta\" must be a positive number"},
        {"{\"hidden_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":2,"
         "\"intermediate_size\":16,\"vocab_size\":9,\"tie_word_embeddings\":1}",
         "\"tie_word_embeddings\" must be true or false"},
        {"{\"model_type\":7}", "\"model_type\" must be a string"},
        {"{\"model_type\":\"a-very-long-model-type-name-over-32\"}", "\"model_type\" is too long"},
        {"[1, 2]", "config is not a JSON object"},
        {"{\"hidden_size\": 8,", "bad JSON"},
        {"{\"a\":1,\"a\":2}", "duplicate object key"},
        {"", "bad JSON"},
    };
    for (size_t i = 0; i < PULSE_ARRAY_LEN(bad); i++) {
        err[0] = 0;
        EXPECT_EQ_INT(parse_cfg(bad[i].json, &c, err, sizeof err), PULSE_ERR_INVALID);
        EXPECT_STR_CONTAINS(err, "cfg.json: ");
        EXPECT_STR_CONTAINS(err, bad[i].want);
    }
}

/* ---- corrupt single files ---- */

static void expect_fail(const struct buf *b, const char *label, const char *n1, const char *n2)
{
    char err[512] = "";
    struct safetensors *st = (struct safetensors *)1;
    /* an exact-size copy, so ASan sees any read past the end */
    uint8_t *p = malloc(b->n ? b->n : 1);
    if (b->n) memcpy(p, b->p, b->n);
    int rc = safetensors_open_memory(p, b->n, label, &st, err, sizeof err);
    EXPECT_EQ_INT(rc, PULSE_ERR_INVALID);
    EXPECT(st == NULL);
    if (rc == PULSE_OK) safetensors_free(st);
    EXPECT_STR_CONTAINS(err, label);
    if (n1) EXPECT_STR_CONTAINS(err, n1);
    if (n2) EXPECT_STR_CONTAINS(err, n2);
    free(p);
}

static void header_case(const char *label, const char *hdr, size_t data_len, const char *n1,
                        const char *n2)
{
    struct buf b = from_header(hdr, data_len);
    expect_fail(&b, label, n1, n2);
    free(b.p);
}

static void test_corrupt(void)
{
    struct buf b = {0};
    expect_fail(&b, "empty.st", "0 bytes is too short", NULL);
    put_s(&b, "1234567");
    expect_fail(&b, "seven.st", "7 bytes is too short", NULL);
    free(b.p);
    b = from_header("{}", 0);
    b.p[0] = 9; /* header length 9 + 8 > 16 bytes */
    expect_fail(&b, "hlen.st", "header length 9 runs past the end of the file (16 bytes)", NULL);
    uint64_t huge = 1ull << 40;
    memcpy(b.p, &huge, 8);
    expect_fail(&b, "hlen2.st", "header length 1099511627776 exceeds", NULL);
    huge = UINT64_MAX;
    memcpy(b.p, &huge, 8);
    expect_fail(&b, "hlen3.st", "header length 18446744073709551615 exceeds", NULL);
    free(b.p);
    /* an empty header object is a valid file with no tensors */
    b = from_header("{}", 0);
    {
        char err[256];
        struct safetensors *st = NULL;
        EXPECT_EQ_INT(safetensors_open_memory(b.p, b.n, "e.st", &st, err, sizeof err), PULSE_OK);
        if (st) {
            EXPECT_EQ_INT(safetensors_tensor_count(st), 0);
            safetensors_free(st);
        }
    }
    free(b.p);
#define T1(x) "{\"t\":{" x "}}"
    header_case("json.st", "{\"t\": {\"dtype\": ", 0, "bad JSON header", "line 1");
    header_case("arr.st", "[1, 2, 3]", 0, "JSON header is not an object", NULL);
    header_case("dup.st", "{\"t\":{},\"t\":{}}", 0, "bad JSON header", "duplicate object key");
    header_case("entry.st", "{\"t\": 5}", 0, "tensor 't': header entry is not an object", NULL);
    header_case("nodt.st", T1("\"shape\":[1],\"data_offsets\":[0,4]"), 4,
                "tensor 't': \"dtype\" is missing", NULL);
    header_case("dt.st", T1("\"dtype\":\"Q9\",\"shape\":[1],\"data_offsets\":[0,4]"), 4,
                "tensor 't': unknown dtype \"Q9\"", NULL);
    header_case("noshape.st", T1("\"dtype\":\"F32\",\"data_offsets\":[0,4]"), 4,
                "tensor 't': \"shape\" is missing", NULL);
    header_case("negshape.st", T1("\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]"), 4,
                "tensor 't': shape must be an array of non-negative integers", NULL);
    header_case("fshape.st", T1("\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]"), 4,
                "shape must be an array of non-negative integers", NULL);
    header_case("dims.st",
                T1("\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]"), 4,
                "tensor 't': shape has 9 dimensions (max 8)", NULL);
    header_case("ovf.st",
                T1("\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]"), 4,
                "tensor 't': shape [4294967296, 4294967296] of F32 overflows 64 bits", NULL);
    header_case("ovf2.st",
                T1("\"dtype\":\"BF16\",\"shape\":[4611686018427387904,2],\"data_offsets\":[0,4]"),
                4, "overflows 64 bits", NULL);
    header_case("offs.st", T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]"), 4,
                "tensor 't': \"data_offsets\" must be [begin, end]", NULL);
    header_case("offs2.st", T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]"), 4,
                "\"data_offsets\" must be [begin, end]", NULL);
    header_case("offs3.st", T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]"), 4,
                "\"data_offsets\" must be [begin, end]", NULL);
    header_case("offs4.st", T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":\"0,4\""), 4,
                "\"data_offsets\" must be [begin, end]", NULL);
    header_case("range.st", T1("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]"), 4,
                "tensor 't': data_offsets [0, 8) run past the end of the data section (4 bytes)",
                NULL);
    header_case("big.st",
                T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[9223372036854775807,"
                   "9223372036854775807]"),
                4, "run past the end of the data section", NULL);
    header_case("toobig.st",
                T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999]"), 4,
                "bad JSON header", NULL);
    header_case("size.st", T1("\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,4]"), 8,
                "tensor 't': shape [3] of BF16 needs 6 bytes but data_offsets [0, 4) hold 4", NULL);
    header_case("overlap.st",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                12, "tensors 'a' and 'b' overlap", NULL);
    header_case("meta.st", "{\"__metadata__\":{\"format\":1}}", 0,
                "\"__metadata__\" value of 'format' is not a string", NULL);
    header_case("meta2.st", "{\"__metadata__\":[1]}", 0, "\"__metadata__\" is not an object", NULL);
    header_case("ctl.st", "{\"a\\nb\": 5}", 0, "tensor 'a?b': header entry is not an object", NULL);
#undef T1
    /* the range check counts from the data section: the header's own bytes are not data */
    b = from_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 0);
    expect_fail(&b, "nodata.st", "run past the end of the data section (0 bytes)", NULL);
    free(b.p);
}

/* Every truncation of a valid shard fails cleanly. */
static void test_truncations(const struct buf *good)
{
    int ok = 0;
    for (size_t n = 0; n < good->n; n++) {
        char err[512] = "";
        struct safetensors *st = NULL;
        uint8_t *p = malloc(n ? n : 1);
        if (n) memcpy(p, good->p, n);
        int rc = safetensors_open_memory(p, n, "cut.st", &st, err, sizeof err);
        ok += rc == PULSE_ERR_INVALID && st == NULL && strncmp(err, "cut.st: ", 8) == 0;
        if (rc == PULSE_OK) fprintf(stderr, "truncation at %zu opened\n", n), safetensors_free(st);
        free(p);
    }
    EXPECT_EQ_INT(ok, good->n);
}

/* ---- broken model directories ---- */

static void expect_dir_fail(const char *dir, int code, const char *n1, const char *n2)
{
    char err[512] = "";
    struct safetensors *st = NULL;
    int rc = safetensors_open(dir, &st, err, sizeof err);
    EXPECT_EQ_INT(rc, code);
    EXPECT(st == NULL);
    if (rc == PULSE_OK) safetensors_free(st);
    if (n1) EXPECT_STR_CONTAINS(err, n1);
    if (n2) EXPECT_STR_CONTAINS(err, n2);
}

static void test_bad_dirs(void)
{
    const char *S1 = "model-00001-of-00002.safetensors", *S2 = "model-00002-of-00002.safetensors";
    char idx[4096], path[600];
#define INDEX(...)                                                                                 \
    (snprintf(idx, sizeof idx, __VA_ARGS__), write_text(DIR_, "model.safetensors.index.json", idx))
    INDEX(
        "{\"weight_map\": {\"model.embed_tokens.weight\": \"%s\", \"x\": \"model-9.safetensors\"}}",
        S1);
    expect_dir_fail(DIR_, PULSE_ERR_IO, "/model-9.safetensors: cannot open", NULL);
    INDEX("{\"metadata\": {}}");
    expect_dir_fail(DIR_, PULSE_ERR_INVALID, "model.safetensors.index.json: no \"weight_map\"",
                    NULL);
    INDEX("{\"weight_map\": {}}");
    expect_dir_fail(DIR_, PULSE_ERR_INVALID, "no \"weight_map\" object with at least one", NULL);
    INDEX("{\"weight_map\": {\"a\": 3}}");
    expect_dir_fail(DIR_, PULSE_ERR_INVALID, "weight_map entry of tensor 'a' is not a string",
                    NULL);
    INDEX("{\"weight_map\": {\"a\": \"../%s\"}}", S1);
    expect_dir_fail(DIR_, PULSE_ERR_INVALID, "names shard '../model-00001-of-00002.safetensors'",
                    "not a plain file name");
    INDEX("{\"weight_map\": {\"a\": \"..\"}}");
    expect_dir_fail(DIR_, PULSE_ERR_INVALID, "not a plain file name", NULL);
    INDEX("{\"weight_map\": {\"model.missing\": \"%s\"}}", S1);
    expect_dir_fail(DIR_, PULSE_ERR_INVALID,
                    "tensor 'model.missing' is listed for shard "
                    "model-00001-of-00002.safetensors, which does not "
                    "hold it",
                    NULL);
    INDEX("{\"weight_map\": {\"lm_head.weight\": \"%s\", \"model.norm.weight\": \"%s\"}}", S1, S2);
    expect_dir_fail(DIR_, PULSE_ERR_INVALID,
                    "tensor 'lm_head.weight' is listed for shard "
                    "model-00001-of-00002.safetensors but is in",
                    S2);
    INDEX("{\"weight_map\": {\"a\": \"%s\"", S1);
    expect_dir_fail(DIR_, PULSE_ERR_INVALID, "model.safetensors.index.json: bad JSON", NULL);
    /* the same tensor in two shards */
    snprintf(path, sizeof path, "%s/%s", DIR_, S2);
    struct ts one = {"model.embed_tokens.weight", "F32", 1, {1}, {0}};
    put(&one.data, &(float){1.0f}, 4);
    struct buf dup = build(&one, 1, NULL);
    write_bytes(path, dup.p, dup.n);
    INDEX("{\"weight_map\": {\"model.embed_tokens.weight\": \"%s\", \"b\": \"%s\"}}", S1, S2);
    expect_dir_fail(DIR_, PULSE_ERR_INVALID,
                    "model-00002-of-00002.safetensors: tensor "
                    "'model.embed_tokens.weight' is also in",
                    S1);
    free(dup.p), free(one.data.p);
    /* a truncated shard is named in the message */
    struct buf cut = {0};
    put(&cut, "\x10\0\0\0\0\0\0\0{", 9);
    write_bytes(path, cut.p, cut.n);
    INDEX("{\"weight_map\": {\"model.embed_tokens.weight\": \"%s\", \"b\": \"%s\"}}", S1, S2);
    expect_dir_fail(DIR_, PULSE_ERR_INVALID, "model-00002-of-00002.safetensors: header length 16",
                    "runs past the end");
    free(cut.p);
#undef INDEX
}

static void remove_dir(void)
{
    static const char *const files[] = {"config.json", "model.safetensors.index.json",
                                        "model-00001-of-00002.safetensors",
                                        "model-00002-of-00002.safetensors"};
    char path[600];
    for (size_t i = 0; i < PULSE_ARRAY_LEN(files); i++) {
        snprintf(path, sizeof path, "%s/%s", DIR_, files[i]);
        unlink(path);
    }
    EXPECT(rmdir(DIR_) == 0);
}

/* The checkpoint directory's tokenizer.json is read: one of 256 byte tokens (a byte-level BPE)
 * is more than this model's 12-token vocabulary, and pulse generate --prompt says so. Before
 * that, the reader's extra tensors (no part of the llama layout) are refused. */
static void test_tokenizer_json(void)
{
    char dir[] = "/tmp/pulse_st_tok_XXXXXX", path[512], out[4096], cmd[1024];
    EXPECT(mkdtemp(dir) != NULL);
    struct buf b1 = write_model(dir);
    free(b1.p);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    EXPECT_EQ_INT(hf_write_byte_tokenizer(path), 0);
    snprintf(cmd, sizeof cmd, "generate --backend cpu --model %s --prompt hi --max-new-tokens 1",
             dir);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "tensor 'extra.position_ids' is not part of the llama layout");
    skip_extra = 1;
    b1 = write_model(dir);
    free(b1.p);
    skip_extra = 0;
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "the tokenizer has 256 tokens, more than the model's vocabulary (12)");
    static const char *const files[] = {"tokenizer.json", "config.json",
                                        "model.safetensors.index.json",
                                        "model-00001-of-00002.safetensors",
                                        "model-00002-of-00002.safetensors"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    EXPECT(rmdir(dir) == 0);
}

int main(void)
{
    struct buf shard1 = {0};
    strcpy(DIR_, "/tmp/pulse_st_XXXXXX");
    if (!mkdtemp(DIR_)) {
        perror("mkdtemp");
        return 1;
    }
    make_model();
    test_model(&shard1);
    test_single(&shard1);
    test_config();
    test_corrupt();
    test_truncations(&shard1);
    test_bad_dirs();
    test_tokenizer_json();
    remove_dir();
    free(shard1.p);
    for (int i = 0; i < n_model; i++)
        free(M[i].ts.data.p), free(M[i].ref), free(M[i].ref_bf16);
    return tu_finish("test_acc_safetensors");
}
