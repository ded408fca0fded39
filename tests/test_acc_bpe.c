/* Byte-level BPE (accuracy/bpe.h) on Qwen's real ranks (models/qwen.tiktoken, from
 * scripts/setup-vocab.sh; skipped when it is not there) against the ids tiktoken gives
 * (tests/data/qwen_bpe_ref.txt, scripts/make_bpe_ref.py): ASCII, contractions, digit runs,
 * whitespace runs, CJK, Cyrillic, Greek, Arabic, Devanagari, emoji with joiners, NFD input,
 * special tokens, code, a long input; with Qwen's pattern and Llama 3's. Decoding gives the
 * (NFC) text back; ill-formed bytes round-trip; a malformed rank file is refused with its line.
 * The same ranks as a GGUF vocabulary of model "gpt2" (tokens in GPT-2's byte-level spelling,
 * control tokens, tokenizer.ggml.pre qwen2 or llama-bpe) through accuracy/tokenizer.h: the same
 * ids, no BOS where add_bos_token is unset, the chatml template detected from its markers. And
 * as a Hugging Face tokenizer.json (with tokenizer_config.json's eos_token): the same ids, and
 * with a TemplateProcessing post-processor its BOS first. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accuracy/bpe.h"
#include "accuracy/chat.h"
#include "accuracy/gguf.h"
#include "accuracy/tokenizer.h"
#include "bytebuf.h"
#include "common.h"
#include "testutil.h"

#define RANKS "models/qwen.tiktoken"

static struct bpe_special specials[208];
static char special_text[208][24];

static void make_specials(void)
{
    const char *first[3] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    for (int i = 0; i < 208; i++) {
        if (i < 3)
            snprintf(special_text[i], sizeof special_text[i], "%s", first[i]);
        else
            snprintf(special_text[i], sizeof special_text[i], "<|extra_%d|>", i - 3);
        specials[i] = (struct bpe_special){special_text[i], 151643 + i};
    }
}

static size_t unhex(const char *h, size_t n, char *out)
{
    size_t w = 0;
    for (size_t i = 0; i + 1 < n; i += 2) {
        unsigned v;
        sscanf(h + i, "%2x", &v);
        out[w++] = (char)v;
    }
    out[w] = 0;
    return w;
}

static void test_refusals(void)
{
    char err[256], path[] = "/tmp/pulse_bpe_XXXXXX";
    struct bpe *b = NULL;
    EXPECT(bpe_load_tiktoken("/nonexistent/ranks", BPE_PATTERN_QWEN, NULL, 0, &b, err,
                             sizeof err) == -1 &&
           b == NULL);
    EXPECT_STR_CONTAINS(err, "cannot open");
    int fd = mkstemp(path);
    EXPECT(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "IQ== 0\nIg== 1\nnot base64! 2\n");
    fclose(f);
    EXPECT(bpe_load_tiktoken(path, BPE_PATTERN_QWEN, NULL, 0, &b, err, sizeof err) == -1);
    EXPECT_STR_CONTAINS(err, ":3: not a 'BASE64 RANK' line");
    f = fopen(path, "w");
    fprintf(f, "IQ== 0\nIQ== 1\n"); /* one token twice */
    fclose(f);
    EXPECT(bpe_load_tiktoken(path, BPE_PATTERN_QWEN, NULL, 0, &b, err, sizeof err) == -1);
    EXPECT_STR_CONTAINS(err, ":2: a token or rank given twice");
    f = fopen(path, "w");
    fprintf(f, "IQ== 0\nIg== 1\n"); /* not every byte */
    fclose(f);
    EXPECT(bpe_load_tiktoken(path, BPE_PATTERN_QWEN, NULL, 0, &b, err, sizeof err) == -1);
    EXPECT_STR_CONTAINS(err, "is no token (not a byte-level BPE)");
    unlink(path);
}

/* The pieces of hand cases (their byte lengths in order). */
static void expect_pieces(enum bpe_pattern p, const char *s, const size_t *want, int n, int line)
{
    size_t i = 0, len = strlen(s);
    int k = 0, ok = 1;
    while (i < len) {
        const size_t l = bpe_piece_len(p, (const unsigned char *)s + i, len - i);
        ok &= k < n && l == want[k];
        i += l, k++;
    }
    tu_checks++;
    if (!ok || k != n) {
        tu_failures++;
        fprintf(stderr, "%s:%d: pieces of \"%s\" differ\n", __FILE__, line, s);
    }
}

static void test_pieces(void)
{
    /* "  hello": a space alone, then " hello" (\s+(?!\S) leaves the last space) */
    expect_pieces(BPE_PATTERN_QWEN, "  hello", (const size_t[]){1, 6}, 2, __LINE__);
    /* "it's 123": "it" "'s" " " "1" "2" "3"; Llama 3 keeps "123" */
    expect_pieces(BPE_PATTERN_QWEN, "it's 123", (const size_t[]){2, 2, 1, 1, 1, 1}, 6, __LINE__);
    expect_pieces(BPE_PATTERN_LLAMA3, "it's 1234", (const size_t[]){2, 2, 1, 3, 1}, 5, __LINE__);
    /* "a \n\n b": "a", " \n\n" (ends after the last line break), " b" */
    expect_pieces(BPE_PATTERN_QWEN, "a \n\n b", (const size_t[]){1, 3, 2}, 3, __LINE__);
    /* "x!!\n": "x", "!!\n" (punctuation takes the line breaks after it); trailing spaces */
    expect_pieces(BPE_PATTERN_QWEN, "x!!\n  ", (const size_t[]){1, 3, 2}, 3, __LINE__);
}

/* GPT-2's byte-level spelling of n bytes into out (room for 2 n + 1). */
static void bytelevel(const unsigned char *p, size_t n, char *out)
{
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        const int c = p[i];
        int cp = c;
        if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF))) {
            int k = 0; /* the k-th non-printable byte becomes U+0100 + k */
            for (int b = 0; b < c; b++)
                k += !((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
                       (b >= 0xAE && b <= 0xFF));
            cp = 0x100 + k;
        }
        if (cp < 0x80) {
            out[w++] = (char)cp;
        } else {
            out[w++] = (char)(0xC0 | (cp >> 6));
            out[w++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    out[w] = 0;
}

/* The ranks of b (ids 0 .. n_ids-1) and the special tokens as a GGUF vocabulary in memory. */
static struct buf gguf_of(const struct bpe *b, const char *pre)
{
    struct buf g = {0};
    const int32_t n = bpe_n_ids(b);
    put(&g, "GGUF", 4);
    PUT(&g, uint32_t, 3);
    PUT(&g, uint64_t, 0);
    PUT(&g, uint64_t, 5);
    put_key(&g, "tokenizer.ggml.model", 8);
    put_str(&g, "gpt2");
    put_key(&g, "tokenizer.ggml.pre", 8);
    put_str(&g, pre);
    put_key(&g, "tokenizer.ggml.tokens", 9);
    PUT(&g, uint32_t, 8);
    PUT(&g, uint64_t, (uint64_t)n);
    char spelled[512];
    int32_t *type = malloc(sizeof *type * (size_t)n);
    for (int32_t id = 0; id < n; id++) {
        size_t len;
        int special;
        const char *p = bpe_token_text(b, id, &len, &special);
        if (special)
            put_str(&g, p);
        else
            bytelevel((const unsigned char *)p, len, spelled), put_str(&g, spelled);
        type[id] = special ? TOKENIZER_CONTROL : TOKENIZER_NORMAL;
    }
    put_key(&g, "tokenizer.ggml.token_type", 9);
    PUT(&g, uint32_t, 5);
    PUT(&g, uint64_t, (uint64_t)n);
    put(&g, type, sizeof(int32_t) * (size_t)n);
    free(type);
    put_key(&g, "tokenizer.ggml.bos_token_id", 4);
    PUT(&g, uint32_t, 151643);
    return g;
}

/* b as a tokenizer.json (Qwen's regex, or Llama 3's with a BOS template) in dir, and a
 * tokenizer_config.json naming <|im_end|> as the EOS; returns the tokenizer.json's path. */
static void write_json(const struct bpe *b, const char *dir, int llama, char *path, size_t n)
{
    static const char *const re[2] = {
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
        "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
        "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    json_t *vocab = json_object(), *added = json_array();
    char spelled[512];
    for (int32_t id = 0; id < bpe_n_ids(b); id++) {
        size_t len;
        int special;
        const char *p = bpe_token_text(b, id, &len, &special);
        if (!p) continue;
        if (special) {
            json_array_append_new(added, json_pack("{s:i,s:s,s:b}", "id", id, "content", p,
                                                   "special", 1));
            continue;
        }
        bytelevel((const unsigned char *)p, len, spelled);
        json_object_set_new(vocab, spelled, json_integer(id));
    }
    json_t *pre = json_pack(
        "{s:s,s:[{s:s,s:{s:s},s:s,s:b},{s:s,s:b}]}", "type", "Sequence", "pretokenizers", "type",
        "Split", "pattern", "Regex", re[llama], "behavior", "Isolated", "invert", 0, "type",
        "ByteLevel", "add_prefix_space", 0);
    json_t *post = llama ? json_pack("{s:s,s:[{s:{s:s,s:i}},{s:{s:s,s:i}}]}", "type",
                                     "TemplateProcessing", "single", "SpecialToken", "id",
                                     "<|endoftext|>", "type_id", 0, "Sequence", "id", "A",
                                     "type_id", 0)
                         : json_pack("{s:s}", "type", "ByteLevel");
    json_t *root = json_pack("{s:s,s:o,s:o,s:o,s:{s:s,s:o,s:[]}}", "version", "1.0",
                             "added_tokens", added, "pre_tokenizer", pre, "post_processor", post,
                             "model", "type", "BPE", "vocab", vocab, "merges");
    snprintf(path, n, "%s/tokenizer.json", dir);
    EXPECT(json_dump_file(root, path, JSON_COMPACT) == 0);
    json_decref(root);
    char cfg[512];
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    json_t *c = json_pack("{s:s}", "eos_token", "<|im_end|>");
    EXPECT(json_dump_file(c, cfg, 0) == 0);
    json_decref(c);
}

int main(void)
{
    test_refusals();
    test_pieces();
    if (access(RANKS, R_OK) != 0) {
        fprintf(stderr, "test_acc_bpe: %s not there (scripts/setup-vocab.sh): skipped\n", RANKS);
        tu_finish("test_acc_bpe");
        return 77;
    }
    make_specials();
    char err[256];
    struct bpe *b[2] = {NULL, NULL};
    EXPECT(bpe_load_tiktoken(RANKS, BPE_PATTERN_QWEN, specials, 208, &b[0], err, sizeof err) == 0);
    EXPECT(bpe_load_tiktoken(RANKS, BPE_PATTERN_LLAMA3, specials, 208, &b[1], err, sizeof err) ==
           0);
    if (!b[0] || !b[1]) {
        fprintf(stderr, "%s\n", err);
        return tu_finish("test_acc_bpe");
    }
    EXPECT_EQ_INT(bpe_n_tokens(b[0]), 151643 + 208);
    /* the same vocabulary read from GGUFs of model gpt2, one per pattern */
    struct buf img[2] = {gguf_of(b[0], "qwen2"), gguf_of(b[0], "llama-bpe")};
    struct gguf_file *gf[2] = {NULL, NULL};
    struct tokenizer *tk[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        EXPECT(gguf_open_memory(img[i].p, img[i].n, "qwen-gpt2.gguf", &gf[i], err, sizeof err) ==
                   PULSE_OK &&
               tokenizer_load(gf[i], &tk[i], err, sizeof err) == PULSE_OK);
        if (!tk[i]) fprintf(stderr, "gpt2 vocabulary: %s\n", err);
    }
    if (tk[0]) {
        struct tokenizer_info ti;
        tokenizer_get_info(tk[0], &ti);
        EXPECT_EQ_INT(ti.n_vocab, 151643 + 208);
        EXPECT_EQ_INT(ti.bos_id, 151643);
        EXPECT_EQ_INT(ti.add_bos, 0);
        EXPECT_EQ_INT(tokenizer_find(tk[0], "<|im_start|>", 12), 151644);
        EXPECT_EQ_INT(tokenizer_token_type(tk[0], 151644), TOKENIZER_CONTROL);
        EXPECT_EQ_INT(tokenizer_token_type(tk[0], 9707), TOKENIZER_NORMAL);
        EXPECT_EQ_INT((int)chat_template_detect(tk[0]), (int)CHAT_CHATML);
    }
    {   /* a pre-tokenizer it does not know is refused by name */
        struct buf bad = gguf_of(b[0], "gpt-4o");
        struct gguf_file *g = NULL;
        struct tokenizer *t = NULL;
        EXPECT(gguf_open_memory(bad.p, bad.n, "other.gguf", &g, err, sizeof err) == PULSE_OK);
        EXPECT(g && tokenizer_load(g, &t, err, sizeof err) == PULSE_ERR_INVALID && !t);
        EXPECT_STR_CONTAINS(err, "tokenizer.ggml.pre is \"gpt-4o\"");
        gguf_free(g);
        free(bad.p);
    }
    /* and from tokenizer.json files: Qwen's (no BOS), a Llama-3-like one (BOS first) */
    struct tokenizer *tj[2] = {NULL, NULL};
    char jdir[2][64] = {"/tmp/pulse_tokjson_XXXXXX", "/tmp/pulse_tokjson_XXXXXX"}, jpath[2][128];
    for (int i = 0; i < 2; i++) {
        EXPECT(mkdtemp(jdir[i]) != NULL);
        write_json(b[0], jdir[i], i, jpath[i], sizeof jpath[i]);
        EXPECT(tokenizer_load_json(jpath[i], &tj[i], err, sizeof err) == PULSE_OK);
        if (!tj[i]) fprintf(stderr, "tokenizer.json: %s\n", err);
    }
    if (tj[0] && tj[1]) {
        struct tokenizer_info q, l;
        tokenizer_get_info(tj[0], &q);
        tokenizer_get_info(tj[1], &l);
        EXPECT(q.add_bos == 0 && q.bos_id == -1 && q.eos_id == 151645);
        EXPECT(l.add_bos == 1 && l.bos_id == 151643 && l.eos_id == 151645);
        EXPECT_EQ_INT((int)chat_template_detect(tj[0]), (int)CHAT_CHATML);
    }
    {   /* a tokenizer.json with another pre-tokenizer, or not JSON, is refused by name */
        char bad[160];
        snprintf(bad, sizeof bad, "%s/bad.json", jdir[0]);
        FILE *bf = fopen(bad, "w");
        fprintf(bf, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}, "
                    "\"pre_tokenizer\": {\"type\": \"Whitespace\"}}");
        fclose(bf);
        struct tokenizer *t = NULL;
        EXPECT(tokenizer_load_json(bad, &t, err, sizeof err) == PULSE_ERR_INVALID && !t);
        EXPECT_STR_CONTAINS(err, "pre_tokenizer: no Split with Qwen's or Llama 3's pattern");
        bf = fopen(bad, "w");
        fprintf(bf, "{\"model\": ");
        fclose(bf);
        EXPECT(tokenizer_load_json(bad, &t, err, sizeof err) == PULSE_ERR_INVALID && !t);
        EXPECT_STR_CONTAINS(err, "bad.json");
        unlink(bad);
    }
    size_t gguf_same = 0, json_same = 0;
    FILE *f = fopen("tests/data/qwen_bpe_ref.txt", "r");
    EXPECT(f != NULL);
    size_t cap = 1 << 20, lines = 0, same = 0, tokens = 0;
    char *line = malloc(cap), *text = malloc(cap), *back = malloc(cap), *ref_back = malloc(cap);
    int32_t *ids = malloc(sizeof(int32_t) * cap), *ref = malloc(sizeof(int32_t) * cap);
    while (f && line && text && back && ref_back && ids && ref && fgets(line, (int)cap, f)) {
        if (line[0] == '#') continue;
        char *sp1 = strchr(line, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
        if (!sp2) continue;
        const int which = !strncmp(line, "llama3", 6);
        const size_t len = unhex(sp1 + 1, (size_t)(sp2 - sp1 - 1), text);
        size_t nref = 0;
        for (char *p = sp2 + 1, *end;; p = end) {
            const long v = strtol(p, &end, 10);
            if (end == p) break;
            ref[nref++] = (int32_t)v;
        }
        size_t n = 0, bl = 0, rl = 0;
        EXPECT(bpe_encode(b[which], text, len, ids, cap, &n) == 0);
        int eq = n == nref && !memcmp(ids, ref, n * sizeof *ids);
        if (!eq) {
            fprintf(stderr, "%s \"%.60s\": %zu ids, tiktoken %zu; first difference at",
                    which ? "llama3" : "qwen", text, n, nref);
            size_t k = 0;
            while (k < n && k < nref && ids[k] == ref[k])
                k++;
            fprintf(stderr, " %zu (%d vs %d)\n", k, k < n ? ids[k] : -1, k < nref ? ref[k] : -1);
        }
        /* decoding gives the text tiktoken's ids decode to (the NFC text) */
        EXPECT(bpe_decode(b[which], ids, n, back, cap, &bl) == 0);
        EXPECT(bpe_decode(b[which], ref, nref, ref_back, cap, &rl) == 0);
        EXPECT(bl == rl && !memcmp(back, ref_back, bl));
        if (tk[which]) { /* through the tokenizer: add_bos asked, none added */
            size_t nt = 0, tl = 0;
            const int rc = tokenizer_encode(tk[which], text, len, 1, ids, cap, &nt);
            gguf_same += rc == PULSE_OK && nt == nref && !memcmp(ids, ref, nt * sizeof *ids);
            EXPECT(tokenizer_decode(tk[which], ref, nref, 1, back, cap, &tl) == PULSE_OK);
            EXPECT(tl == rl && !memcmp(back, ref_back, tl));
        }
        if (tj[which]) { /* the Llama-3-like one puts its BOS first */
            size_t nt = 0;
            const int rc = tokenizer_encode(tj[which], text, len, 1, ids, cap, &nt);
            json_same += rc == PULSE_OK && nt == nref + (size_t)which &&
                         (!which || ids[0] == 151643) &&
                         !memcmp(ids + which, ref, nref * sizeof *ids);
        }
        same += eq;
        lines++;
        tokens += n;
    }
    if (f) fclose(f);
    fprintf(stderr, "qwen.tiktoken: %zu of %zu texts encode to tiktoken's ids (%zu tokens)\n",
            same, lines, tokens);
    EXPECT(lines >= 40);
    EXPECT_EQ_INT((long long)same, (long long)lines);
    fprintf(stderr, "as a gpt2 GGUF through the tokenizer: %zu of %zu; as tokenizer.json: %zu\n",
            gguf_same, lines, json_same);
    EXPECT_EQ_INT((long long)gguf_same, (long long)lines);
    EXPECT_EQ_INT((long long)json_same, (long long)lines);
    for (int i = 0; i < 2; i++) {
        tokenizer_free(tj[i]);
        char p[160];
        snprintf(p, sizeof p, "%s/tokenizer_config.json", jdir[i]);
        unlink(p);
        unlink(jpath[i]);
        rmdir(jdir[i]);
    }
    for (int i = 0; i < 2; i++) {
        tokenizer_free(tk[i]);
        gguf_free(gf[i]);
        free(img[i].p);
    }
    /* ill-formed bytes: encoded byte by byte (every byte is a token), decoded back exactly */
    const char bad[] = "ok \xff\xfe \xe2\x82 end";
    size_t n = 0, bl = 0;
    EXPECT(bpe_encode(b[0], bad, sizeof bad - 1, ids, cap, &n) == 0 && n > 0);
    EXPECT(bpe_decode(b[0], ids, n, back, cap, &bl) == 0);
    EXPECT(bl == sizeof bad - 1 && !memcmp(back, bad, bl));
    const int32_t no_token[] = {151643 + 208};
    EXPECT(bpe_decode(b[0], no_token, 1, back, cap, &bl) == -1);
    free(line), free(text), free(back), free(ref_back), free(ids), free(ref);
    bpe_free(b[0]);
    bpe_free(b[1]);
    return tu_finish("test_acc_bpe");
}
