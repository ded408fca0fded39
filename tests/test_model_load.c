/* Real weights into the model struct: the tiny model's seeded weights are written as a
 * Hugging Face Qwen3-layout checkpoint (config.json + model.safetensors, BF16 with a few F32
 * tensors), loaded back through model_load_hf, and must decode exactly the golden tokens of the
 * built-in tiny model. Missing tensors, wrong shapes and unsupported layouts are clear errors. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "accuracy/model_load.h"
#include "backend.h"
#include "baselines/registry.h"
#include "bytebuf.h"
#include "engine.h"
#include "numeric.h"
#include "serve.h"
#include "testutil.h"
#include "workloads/workload.h"

#define OUT_LEN 64

struct tensor_out {
    char name[128];
    const uint16_t *data;
    size_t rows, cols; /* cols 0: 1-D */
    int as_f32;
};

static int n_out;
static struct tensor_out outs[64];
static int no_qk_norm; /* the writers leave out the q_norm / k_norm tensors (a llama layout) */

static int skipped(const char *name, const char *skip)
{
    return (skip && !strcmp(skip, name)) ||
           (no_qk_norm && (strstr(name, ".q_norm.") || strstr(name, ".k_norm.")));
}

static void add(const char *name, const uint16_t *data, size_t rows, size_t cols, int as_f32)
{
    struct tensor_out *t = &outs[n_out++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->data = data, t->rows = rows, t->cols = cols, t->as_f32 = as_f32;
}

/* Writes dir/model.safetensors from outs[] (skipping `skip`), and dir/config.json. */
static void write_checkpoint(const char *dir, const char *model_type, int hidden, const char *skip)
{
    json_t *hdr = json_object();
    size_t off = 0;
    for (int i = 0; i < n_out; i++) {
        struct tensor_out *t = &outs[i];
        if (skipped(t->name, skip)) continue;
        size_t n = t->rows * (t->cols ? t->cols : 1), bytes = n * (t->as_f32 ? 4 : 2);
        json_t *shape = t->cols ? json_pack("[I,I]", (json_int_t)t->rows, (json_int_t)t->cols)
                                : json_pack("[I]", (json_int_t)t->rows);
        json_object_set_new(hdr, t->name,
                            json_pack("{s:s,s:o,s:[I,I]}", "dtype", t->as_f32 ? "F32" : "BF16",
                                      "shape", shape, "data_offsets", (json_int_t)off,
                                      (json_int_t)(off + bytes)));
        off += bytes;
    }
    char *text = json_dumps(hdr, JSON_COMPACT);
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    uint64_t hl = strlen(text);
    fwrite(&hl, 8, 1, f);
    fwrite(text, 1, hl, f);
    for (int i = 0; i < n_out; i++) {
        struct tensor_out *t = &outs[i];
        if (skipped(t->name, skip)) continue;
        size_t n = t->rows * (t->cols ? t->cols : 1);
        if (t->as_f32)
            for (size_t k = 0; k < n; k++) {
                float v = bf16_to_f32(t->data[k]);
                fwrite(&v, 4, 1, f);
            }
        else
            fwrite(t->data, 2, n, f);
    }
    fclose(f);
    free(text);
    json_decref(hdr);
    snprintf(path, sizeof path, "%s/config.json", dir);
    f = fopen(path, "w");
    fprintf(f,
            "{\"model_type\": \"%s\", \"hidden_size\": %d, \"num_hidden_layers\": 4, "
            "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 64, "
            "\"intermediate_size\": 512, \"vocab_size\": 1024, \"rms_norm_eps\": 1e-06, "
            "\"rope_theta\": 10000.0, \"tie_word_embeddings\": false}\n",
            model_type, hidden);
    fclose(f);
}

/* Lists the tiny model's weights under their Hugging Face names (the fused QKV and gate/up
 * split back into their projections). */
static void list_tensors(const struct model *m)
{
    const struct model_config *c = m->cfg;
    size_t H = c->hidden, hd = c->head_dim, qd = c->n_heads * hd, kvd = c->n_kv_heads * hd,
           F = c->ffn;
    char name[128];
    n_out = 0;
    add("model.embed_tokens.weight", m->embed, c->vocab, H, 0);
    for (int l = 0; l < c->n_layers; l++) {
        const struct layer_weights *w = &m->layers[l];
#define NAME(s) (snprintf(name, sizeof name, "model.layers.%d.%s", l, s), name)
        add(NAME("input_layernorm.weight"), w->attn_norm, H, 0, l == 1);
        add(NAME("self_attn.q_proj.weight"), w->wqkv, qd, H, 0);
        add(NAME("self_attn.k_proj.weight"), w->wqkv + qd * H, kvd, H, 0);
        add(NAME("self_attn.v_proj.weight"), w->wqkv + (qd + kvd) * H, kvd, H, l == 2);
        add(NAME("self_attn.q_norm.weight"), w->q_norm, hd, 0, 0);
        add(NAME("self_attn.k_norm.weight"), w->k_norm, hd, 0, 1);
        add(NAME("self_attn.o_proj.weight"), w->wo, H, qd, 0);
        add(NAME("post_attention_layernorm.weight"), w->mlp_norm, H, 0, 0);
        add(NAME("mlp.gate_proj.weight"), w->wgu, F, H, 0);
        add(NAME("mlp.up_proj.weight"), w->wgu + F * H, F, H, 0);
        add(NAME("mlp.down_proj.weight"), w->wdown, H, F, 0);
#undef NAME
    }
    add("model.norm.weight", m->final_norm, H, 0, 0);
    add("lm_head.weight", m->lm_head, c->vocab, H, 0);
}

static int load_cb(struct model *m, const struct kctx *ctx, void *user, char *err, size_t len)
{
    return model_load_path(m, (const char *)user, ctx, err, len);
}

/* ---- the same weights as a GGUF (BF16 tensors), llama.cpp's names and layout ---- */

static void gguf_kv_u32(struct buf *b, const char *arch, const char *key, uint32_t v)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    put_key(b, k, 4 /* UINT32 */);
    PUT(b, uint32_t, v);
}

static void gguf_kv_f32(struct buf *b, const char *arch, const char *key, float v)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    put_key(b, k, 6 /* FLOAT32 */);
    PUT(b, float, v);
}

/* The GGUF name of an HF tensor name ("model.layers.3.mlp.up_proj.weight" -> "blk.3.ffn_up..."). */
static void gguf_name(const char *hf, char *out, size_t len)
{
    static const char *map[][2] = {
        {"input_layernorm", "attn_norm"},    {"self_attn.q_proj", "attn_q"},
        {"self_attn.k_proj", "attn_k"},      {"self_attn.v_proj", "attn_v"},
        {"self_attn.q_norm", "attn_q_norm"}, {"self_attn.k_norm", "attn_k_norm"},
        {"self_attn.o_proj", "attn_output"}, {"post_attention_layernorm", "ffn_norm"},
        {"mlp.gate_proj", "ffn_gate"},       {"mlp.up_proj", "ffn_up"},
        {"mlp.down_proj", "ffn_down"}};
    int l;
    char rest[96];
    if (!strcmp(hf, "model.embed_tokens.weight"))
        snprintf(out, len, "token_embd.weight");
    else if (!strcmp(hf, "model.norm.weight"))
        snprintf(out, len, "output_norm.weight");
    else if (!strcmp(hf, "lm_head.weight"))
        snprintf(out, len, "output.weight");
    else if (sscanf(hf, "model.layers.%d.%95s", &l, rest) == 2) {
        for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
            size_t n = strlen(map[i][0]);
            if (!strncmp(rest, map[i][0], n) && !strcmp(rest + n, ".weight")) {
                snprintf(out, len, "blk.%d.%s.weight", l, map[i][1]);
                return;
            }
        }
    }
}

/* Writes outs[] as a GGUF of `arch`; llama permutes the Q and K rows as llama.cpp's converter
 * does (row h*hd + p*hd/2 + i of a head goes to h*hd + 2i + p). */
static void write_gguf(const char *path, const char *arch)
{
    struct buf b = {0};
    int permute = !strcmp(arch, "llama"), n = 0;
    for (int i = 0; i < n_out; i++)
        n += !skipped(outs[i].name, NULL);
    put(&b, "GGUF", 4);
    PUT(&b, uint32_t, 3);
    PUT(&b, uint64_t, (uint64_t)n);
    PUT(&b, uint64_t, 10);
    put_key(&b, "general.architecture", 8 /* STRING */);
    put_str(&b, arch);
    gguf_kv_u32(&b, arch, "block_count", 4);
    gguf_kv_u32(&b, arch, "embedding_length", 256);
    gguf_kv_u32(&b, arch, "feed_forward_length", 512);
    gguf_kv_u32(&b, arch, "attention.head_count", 4);
    gguf_kv_u32(&b, arch, "attention.head_count_kv", 2);
    gguf_kv_u32(&b, arch, "attention.key_length", 64);
    gguf_kv_u32(&b, arch, "context_length", 4096);
    gguf_kv_f32(&b, arch, "attention.layer_norm_rms_epsilon", 1e-6f);
    gguf_kv_f32(&b, arch, "rope.freq_base", 10000.0f);
    uint64_t off = 0;
    for (int i = 0; i < n_out; i++) {
        char name[128];
        if (skipped(outs[i].name, NULL)) continue;
        gguf_name(outs[i].name, name, sizeof name);
        put_str(&b, name);
        PUT(&b, uint32_t, outs[i].cols ? 2 : 1);
        PUT(&b, uint64_t, outs[i].cols ? outs[i].cols : outs[i].rows);
        if (outs[i].cols) PUT(&b, uint64_t, outs[i].rows);
        PUT(&b, uint32_t, 30 /* BF16 */);
        PUT(&b, uint64_t, off);
        size_t bytes = 2 * outs[i].rows * (outs[i].cols ? outs[i].cols : 1);
        off += (bytes + 31) & ~(size_t)31;
    }
    while (b.n % 32)
        PUT(&b, uint8_t, 0);
    for (int i = 0; i < n_out; i++) {
        const struct tensor_out *t = &outs[i];
        if (skipped(t->name, NULL)) continue;
        size_t cols = t->cols ? t->cols : 1, bytes = 2 * t->rows * cols;
        int heads = strstr(t->name, "q_proj") ? 4 : strstr(t->name, "k_proj") ? 2 : 0;
        if (permute && heads) {
            size_t hd = t->rows / heads;
            for (size_t r = 0; r < t->rows; r++) { /* GGUF row r = h*hd + 2i + p */
                size_t h = r / hd, i = (r % hd) / 2, p = r % 2;
                put(&b, t->data + (h * hd + p * hd / 2 + i) * cols, 2 * cols);
            }
        } else {
            put(&b, t->data, bytes);
        }
        while (b.n % 32)
            PUT(&b, uint8_t, 0);
    }
    FILE *f = fopen(path, "wb");
    fwrite(b.p, 1, b.n, f);
    fclose(f);
    free(b.p);
}

static void test_round_trip(const char *dir)
{
    char err[512];
    struct loaded_config lc;
    EXPECT_EQ_INT(model_config_from_path(dir, &lc, err, sizeof err), PULSE_OK);
    const struct model_config *t = model_config_find("tiny");
    EXPECT(lc.cfg.n_layers == t->n_layers && lc.cfg.hidden == t->hidden &&
           lc.cfg.n_heads == t->n_heads && lc.cfg.n_kv_heads == t->n_kv_heads &&
           lc.cfg.head_dim == t->head_dim && lc.cfg.ffn == t->ffn && lc.cfg.vocab == t->vocab);
    EXPECT_EQ_INT(lc.cfg.qk_norm, 1); /* detected from the q_norm tensor */
    EXPECT_NEAR(lc.cfg.rope_theta, 10000.0, 0);
    /* the loaded model decodes exactly the built-in tiny model's golden tokens */
    struct workload w;
    EXPECT_EQ_INT(workload_create(&w, "lengths:100,37,1", OUT_LEN, 1, err, sizeof err), 0);
    struct engine_params p = {.cfg = &lc.cfg,
                              .be = backend_find("cpu"),
                              .seed = 1,
                              .max_batch = 8,
                              .max_tokens = workload_max_tokens(&w),
                              .load_weights = load_cb,
                              .load_user = (void *)dir};
    struct engine *e = engine_create(&p, err, sizeof err);
    EXPECT(e != NULL);
    if (!e) {
        fprintf(stderr, "engine: %s\n", err);
        workload_free(&w);
        return;
    }
    struct kv_cache_params kp = {t->n_layers, t->n_kv_heads,          t->head_dim, 16, 1u << 24,
                                 8,           workload_max_tokens(&w)};
    struct kv_cache *kv = kv_cache_create(&kp, backend_find("cpu"), engine_ctx(e), err, sizeof err);
    struct serve_counters ctr;
    double wall;
    EXPECT_EQ_INT(
        serve_run(e, kv, policy_find("vanilla"), w.reqs, w.n, 8, &ctr, &wall, err, sizeof err), 0);
    char path[1024];
    const char *src = getenv("PULSE_SRC");
    snprintf(path, sizeof path, "%s/tests/golden/tiny_seed1.txt", src ? src : ".");
    FILE *f = fopen(path, "r");
    EXPECT(f != NULL);
    int mismatches = 0, read = 0;
    for (int i = 0; f && i < w.n; i++)
        for (int k = 0; k < OUT_LEN; k++) {
            int v;
            if (fscanf(f, "%d", &v) != 1) break;
            read++;
            mismatches += v != w.reqs[i].tokens[k];
        }
    if (f) fclose(f);
    EXPECT_EQ_INT(read, 3 * OUT_LEN);
    EXPECT_EQ_INT(mismatches, 0);
    kv_cache_free(kv);
    engine_free(e);
    workload_free(&w);
}

/* The weights without QK-norm as a llama checkpoint and as a llama GGUF (Q/K rows permuted as
 * llama.cpp's converter does): both decode the same tokens, so the loader undoes the
 * permutation; QK-norm tensors in a llama GGUF are refused, not loaded. */
static void test_llama_gguf(const char *dir)
{
    char gpath[600], args[1024], hf_out[4096], gguf_out[4096];
    no_qk_norm = 1;
    write_checkpoint(dir, "llama", 256, NULL);
    snprintf(gpath, sizeof gpath, "%s/tiny-llama.gguf", dir);
    write_gguf(gpath, "llama");
    no_qk_norm = 0;
    snprintf(args, sizeof args,
             "generate --model %s --backend cpu --prompt-ids 5,6,7 "
             "--max-new-tokens 12",
             dir);
    EXPECT_EQ_INT(tu_run_pulse(args, hf_out, sizeof hf_out), 0);
    snprintf(args, sizeof args,
             "generate --model %s --backend cpu --prompt-ids 5,6,7 "
             "--max-new-tokens 12",
             gpath);
    EXPECT_EQ_INT(tu_run_pulse(args, gguf_out, sizeof gguf_out), 0);
    EXPECT_STR_CONTAINS(hf_out, "generated ids: ");
    EXPECT(!strcmp(hf_out, gguf_out));
    write_gguf(gpath, "llama"); /* with the q_norm / k_norm tensors */
    struct loaded_config lc;
    char err[512] = "";
    EXPECT(model_config_from_path(gpath, &lc, err, sizeof err) != PULSE_OK);
    EXPECT_STR_CONTAINS(err, "tensor 'blk.0.attn_q_norm.weight': QK-norm in a 'llama' file");
    unlink(gpath);
    write_checkpoint(dir, "qwen3", 256, NULL);
}

/* Loads dir with the tiny config, expecting failure with `want` in the message. */
static void expect_load_error(const char *dir, const char *want)
{
    char err[512] = "";
    struct model m;
    static const struct kctx ctx;
    int rc = model_alloc(&m, model_config_find("tiny"), backend_find("cpu"), &ctx);
    EXPECT_EQ_INT(rc, PULSE_OK);
    EXPECT(model_load_hf(&m, dir, &ctx, err, sizeof err) != PULSE_OK);
    EXPECT_STR_CONTAINS(err, want);
    model_free(&m);
}

int main(void)
{
    char dir[] = "/tmp/pulse_ckpt_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    struct model m;
    static const struct kctx ctx;
    EXPECT_EQ_INT(model_create(&m, model_config_find("tiny"), backend_find("cpu"), &ctx, 1), 0);
    list_tensors(&m);
    write_checkpoint(dir, "qwen3", 256, NULL);
    test_round_trip(dir);

    /* the same weights as a qwen3 GGUF, as stored */
    char gpath[600];
    snprintf(gpath, sizeof gpath, "%s/tiny-qwen3.gguf", dir);
    write_gguf(gpath, "qwen3");
    test_round_trip(gpath);
    unlink(gpath);
    test_llama_gguf(dir);
    snprintf(gpath, sizeof gpath, "%s/tiny-gemma3.gguf", dir);
    write_gguf(gpath, "gemma3");
    {
        struct loaded_config lg;
        char e2[512] = "";
        EXPECT(model_config_from_path(gpath, &lg, e2, sizeof e2) != PULSE_OK);
        EXPECT_STR_CONTAINS(e2, "sliding_window");
        unlink(gpath);
    }

    /* the command line serves with the checkpoint: the same golden tokens */
    char args[1024], out[1 << 16];
    snprintf(args, sizeof args,
             "run --backend cpu --weights %s --workload lengths:100,37,1 --output-len 64 "
             "--print-tokens",
             dir);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 0);
    EXPECT_STR_CONTAINS(out, "request 0: 310 691 10 629 419 158 675 812 609 193");
    EXPECT_STR_CONTAINS(out, "request 2: 355 89 241 407 197 928 241 289 307 889");

    /* generate: the prompt runs through the decode step token by token; the real-weight model
     * continues exactly as the built-in one, prompt processing agrees with decoding (the
     * prompt extended by the first new token continues with the rest), and the JSON's last
     * logits pick the last token */
    char ref[1 << 12], json_path[600];
    EXPECT_EQ_INT(tu_run_pulse("generate --model tiny --backend cpu --prompt-ids 5,6,7 "
                               "--max-new-tokens 8",
                               ref, sizeof ref),
                  0);
    EXPECT_STR_CONTAINS(ref, "generated ids: ");
    snprintf(json_path, sizeof json_path, "%s/gen.json", dir);
    snprintf(args, sizeof args,
             "generate --model %s --backend cpu --prompt-ids 5,6,7 --max-new-tokens 8 --out %s",
             dir, json_path);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 0);
    EXPECT(!strcmp(out, ref));
    int g[8] = {0};
    const char *gp = strstr(ref, "generated ids:");
    EXPECT(gp && sscanf(gp, "generated ids: %d %d %d %d %d %d %d %d", &g[0], &g[1], &g[2], &g[3],
                        &g[4], &g[5], &g[6], &g[7]) == 8);
    snprintf(args, sizeof args,
             "generate --model tiny --backend cpu --prompt-ids 5,6,7,%d --max-new-tokens 7", g[0]);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 0);
    char want[256];
    snprintf(want, sizeof want, "generated ids: %d %d %d %d %d %d %d\n", g[1], g[2], g[3], g[4],
             g[5], g[6], g[7]);
    EXPECT_STR_CONTAINS(out, want);
    json_error_t je;
    json_t *gj = json_load_file(json_path, 0, &je);
    EXPECT(gj != NULL);
    if (gj) {
        json_t *lg = json_object_get(gj, "last_logits");
        size_t best = 0, i;
        json_t *v;
        json_array_foreach(lg, i, v) if (json_real_value(v) >
                                         json_real_value(json_array_get(lg, best))) best = i;
        EXPECT_EQ_INT(json_array_size(lg), 1024);
        EXPECT_EQ_INT((long)best, g[7]);
        EXPECT_EQ_INT(json_array_size(json_object_get(gj, "prompt_ids")), 3);
        json_decref(gj);
    }
    unlink(json_path);

    write_checkpoint(dir, "qwen3", 256, "model.layers.2.mlp.up_proj.weight");
    expect_load_error(dir, "tensor 'model.layers.2.mlp.up_proj.weight' is missing");
    /* the checkpoint's shapes do not match a config with hidden 320 */
    write_checkpoint(dir, "qwen3", 256, NULL);
    struct model_config wide = *model_config_find("tiny");
    wide.hidden = 320;
    struct model mw;
    EXPECT_EQ_INT(model_alloc(&mw, &wide, backend_find("cpu"), &ctx), PULSE_OK);
    char err[512] = "";
    EXPECT(model_load_hf(&mw, dir, &ctx, err, sizeof err) != PULSE_OK);
    EXPECT_STR_CONTAINS(err, "tensor 'model.embed_tokens.weight' has shape [1024, 256], the "
                             "config wants [1024, 320]");
    model_free(&mw);
    struct loaded_config lc;
    write_checkpoint(dir, "gemma3", 256, NULL);
    EXPECT(model_config_from_hf(dir, &lc, err, sizeof err) != PULSE_OK);
    EXPECT_STR_CONTAINS(err, "model_type 'gemma3': only the llama and qwen3 layouts");

    model_free(&m);
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    rmdir(dir);
    return tu_finish("test_model_load");
}
