/* The SentencePiece BPE tokenizer on a tiny hand-made vocabulary, written as a GGUF image in
 * memory: merges by score (ties to the leftmost pair), merges undone for unused pieces, byte
 * fallback, user-defined and control pieces matched whole, the space prefix, decode, a
 * naive O(n^2) BPE as a cross-check on random strings, buffers too small, and bad metadata.
 * Needs no model file; tests/test_acc_tokenizer_gemma3.c checks the real Gemma 3 vocabulary. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "accuracy/gguf.h"
#include "accuracy/tokenizer.h"
#include "bytebuf.h"
#include "common.h"
#include "testutil.h"

/* ---- the tiny vocabulary ---- */

enum { N_HEAD = 8, BYTE0 = 8, N_VOCAB_MAX = 300 };

struct piece {
    const char *s;
    float score;
    int type;
};

static const struct piece head[N_HEAD] = {
    {"<pad>", -1000, 3}, {"<eos>", -1000, 3},           {"<bos>", -1000, 3},
    {"<unk>", -1000, 2}, {"<start_of_turn>", -1000, 3}, {"\n", -1000, 4},
    {"  ", -1000, 4}, /* llama.cpp's spelling */
    {"<b>", -1000, 4},
};

#define SP "\xe2\x96\x81"
static const struct piece tail[] = {
    {SP, -100, 1},      {"a", -100, 1},     {"b", -100, 1},   {"c", -100, 1},    {"d", -100, 1},
    {"e", -100, 1},     {"o", -100, 1},     {"h", -100, 1},   {"ab", -1, 1},     {"bc", -0.5f, 1},
    {"abc", -3, 1},     {"aa", -1, 1},      {"aaa", -2, 1},   {"cd", -0.1f, 5},  {"cde", -0.2f, 1},
    {SP "a", -1.5f, 1}, {SP "b", -1.2f, 1}, {"ce", -2.5f, 1}, {"bce", -0.7f, 1},
};
/* ids of the tail pieces */
enum {
    I_SP = 264,
    I_A,
    I_B,
    I_C,
    I_D,
    I_E,
    I_O,
    I_H,
    I_AB,
    I_BC,
    I_ABC,
    I_AA,
    I_AAA,
    I_CD,
    I_CDE,
    I_SPA,
    I_SPB,
    I_CE,
    I_BCE,
    N_VOCAB
};

/* What to break in the image (0: nothing). */
enum fault { OK_VOCAB, BAD_MODEL, BAD_TYPE_LEN, BAD_BYTE_PIECE, BAD_BOS, NO_TOKENS, BAD_TYPE };

static struct buf make_vocab(int add_space_prefix, enum fault f)
{
    struct buf b = {0};
    char bytes[256][8];
    const char *tok[N_VOCAB_MAX];
    float score[N_VOCAB_MAX];
    int32_t type[N_VOCAB_MAX];
    int n = 0;
    for (int i = 0; i < N_HEAD; i++, n++)
        tok[n] = head[i].s, score[n] = head[i].score, type[n] = head[i].type;
    for (int v = 0; v < 256; v++, n++) {
        snprintf(bytes[v], sizeof bytes[v], "<0x%02X>", v);
        tok[n] = bytes[v], score[n] = 0, type[n] = 6;
    }
    for (size_t i = 0; i < PULSE_ARRAY_LEN(tail); i++, n++)
        tok[n] = tail[i].s, score[n] = tail[i].score, type[n] = tail[i].type;
    if (f == BAD_BYTE_PIECE) tok[BYTE0 + 7] = "<0xZ7>";
    if (f == BAD_TYPE) type[I_H] = 9;

    uint64_t n_kv = f == NO_TOKENS ? 7 : 8;
    put(&b, "GGUF", 4);
    PUT(&b, uint32_t, 3);
    PUT(&b, uint64_t, 0);
    PUT(&b, uint64_t, n_kv);
    put_key(&b, "tokenizer.ggml.model", 8);
    put_str(&b, f == BAD_MODEL ? "rwkv" : "llama");
    if (f != NO_TOKENS) {
        put_key(&b, "tokenizer.ggml.tokens", 9);
        PUT(&b, uint32_t, 8);
        PUT(&b, uint64_t, (uint64_t)n);
        for (int i = 0; i < n; i++)
            put_str(&b, tok[i]);
    }
    put_key(&b, "tokenizer.ggml.scores", 9);
    PUT(&b, uint32_t, 6);
    PUT(&b, uint64_t, (uint64_t)n);
    put(&b, score, sizeof(float) * (size_t)n);
    put_key(&b, "tokenizer.ggml.token_type", 9);
    PUT(&b, uint32_t, 5);
    int nt = f == BAD_TYPE_LEN ? n - 1 : n;
    PUT(&b, uint64_t, (uint64_t)nt);
    put(&b, type, sizeof(int32_t) * (size_t)nt);
    put_key(&b, "tokenizer.ggml.bos_token_id", 4);
    PUT(&b, uint32_t, f == BAD_BOS ? (uint32_t)n : 2);
    put_key(&b, "tokenizer.ggml.eos_token_id", 4);
    PUT(&b, uint32_t, 1);
    put_key(&b, "tokenizer.ggml.unknown_token_id", 4);
    PUT(&b, uint32_t, 3);
    put_key(&b, "tokenizer.ggml.add_space_prefix", 7);
    PUT(&b, uint8_t, (uint8_t)add_space_prefix);
    return b;
}

static struct tokenizer *open_vocab(struct buf *b, struct gguf_file **g, int add_space_prefix)
{
    char err[256];
    struct tokenizer *t = NULL;
    *b = make_vocab(add_space_prefix, OK_VOCAB);
    if (gguf_open_memory(b->p, b->n, "tiny.gguf", g, err, sizeof err) ||
        tokenizer_load(*g, &t, err, sizeof err)) {
        fprintf(stderr, "tiny vocabulary: %s\n", err);
        exit(1);
    }
    return t;
}

/* Encodes text and expects exactly the n ids in want. */
static void expect_ids(const struct tokenizer *t, const char *text, int add_bos,
                       const int32_t *want, size_t n)
{
    int32_t got[64];
    size_t ng = 0;
    int rc = tokenizer_encode(t, text, strlen(text), add_bos, got, 64, &ng);
    int same = rc == PULSE_OK && ng == n && (n == 0 || memcmp(got, want, n * sizeof *got) == 0);
    EXPECT(same);
    if (!same) {
        fprintf(stderr, "  \"%s\": got", text);
        for (size_t i = 0; i < ng && i < 64; i++)
            fprintf(stderr, " %d", got[i]);
        fprintf(stderr, ", want");
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, " %d", want[i]);
        fprintf(stderr, "\n");
    }
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__}), PULSE_ARRAY_LEN(((const int32_t[]){__VA_ARGS__}))
#define NO_IDS ((const int32_t *)NULL), 0

static void test_merges(const struct tokenizer *t)
{
    expect_ids(t, "ab", 0, IDS(I_AB));
    expect_ids(t, "abc", 0, IDS(I_ABC));           /* bc (-0.5) before ab (-1), then abc */
    expect_ids(t, "aaa", 0, IDS(I_AAA));           /* tie: leftmost aa first, then aaa */
    expect_ids(t, "aaaa", 0, IDS(I_AA, I_AA));     /* aa+a (-2) loses to a+a (-1) */
    expect_ids(t, "abce", 0, IDS(I_A, I_BCE));     /* bc, then bce (-0.7) beats ab (-1) */
    expect_ids(t, "cde", 0, IDS(I_CDE));           /* through the unused piece cd */
    expect_ids(t, "abcd", 0, IDS(I_AB, I_C, I_D)); /* cd is unused: split back into c, d */
    expect_ids(t, " a b", 0, IDS(I_SPA, I_SPB));
    expect_ids(t, "", 0, NO_IDS);
    expect_ids(t, "", 1, IDS(2));
    expect_ids(t, "ab", 1, IDS(2, I_AB));
}

static void test_fallback_and_specials(const struct tokenizer *t)
{
    expect_ids(t, "a\xc3\xa9", 0, IDS(I_A, BYTE0 + 0xC3, BYTE0 + 0xA9)); /* e-acute */
    expect_ids(t,
               "\xff"
               "a",
               0, IDS(BYTE0 + 0xFF, I_A));         /* not UTF-8 */
    expect_ids(t, "a  b", 0, IDS(I_A, 6, I_B));    /* user-defined */
    expect_ids(t, "a   b", 0, IDS(I_A, 6, I_SPB)); /* leftmost, longest */
    expect_ids(t, SP " a", 0, IDS(6, I_A));        /* a literal U+2581 is a space too */
    expect_ids(t, "<start_of_turn>ab\n<b>x", 0, IDS(4, I_AB, 5, 7, BYTE0 + 'x'));
    expect_ids(t, "<bos><eos><unk>", 0, IDS(2, 1, 3));
    expect_ids(t, "<bos", 0, IDS(BYTE0 + '<', I_B, I_O, BYTE0 + 's'));
    expect_ids(t, "<<bos>", 0, IDS(BYTE0 + '<', 2));
}

static void test_space_prefix(void)
{
    struct buf b;
    struct gguf_file *g;
    struct tokenizer *t = open_vocab(&b, &g, 1);
    expect_ids(t, "ab", 0, IDS(I_SP, I_AB));
    expect_ids(t, "<bos>ab", 0, IDS(2, I_SP, I_AB));
    expect_ids(t, "a", 1, IDS(2, I_SPA));
    char out[32];
    size_t len;
    EXPECT_EQ_INT(tokenizer_decode(t, IDS(2, I_SP, I_AB, I_SPB), 0, out, sizeof out, &len),
                  PULSE_OK);
    EXPECT(strcmp(out, "ab b") == 0); /* the prefix SentencePiece added is dropped */
    tokenizer_free(t);
    gguf_free(g);
    free(b.p);
}

static void test_decode(const struct tokenizer *t)
{
    char out[64];
    size_t len = 0;
    const int32_t ids[] = {2, I_AB, 6, BYTE0 + 0xC3, BYTE0 + 0xA9, 5, I_SPB, 4};
    EXPECT_EQ_INT(tokenizer_decode(t, ids, PULSE_ARRAY_LEN(ids), 0, out, sizeof out, &len),
                  PULSE_OK);
    EXPECT(strcmp(out, "ab  \xc3\xa9\n b") == 0);
    EXPECT_EQ_INT(len, 9);
    EXPECT_EQ_INT(tokenizer_decode(t, ids, PULSE_ARRAY_LEN(ids), 1, out, sizeof out, &len),
                  PULSE_OK);
    EXPECT(strcmp(out, "<bos>ab  \xc3\xa9\n b<start_of_turn>") == 0);
    /* too small: a NUL-terminated prefix and the length needed */
    EXPECT_EQ_INT(tokenizer_decode(t, ids, PULSE_ARRAY_LEN(ids), 0, out, 4, &len), PULSE_ERR_NOMEM);
    EXPECT_EQ_INT(len, 9);
    EXPECT(strcmp(out, "ab ") == 0);
    const int32_t bad[] = {I_A, N_VOCAB};
    EXPECT_EQ_INT(tokenizer_decode(t, bad, 2, 0, out, sizeof out, &len), PULSE_ERR_INVALID);
    /* encode into too few ids */
    int32_t few[2];
    size_t n = 0;
    EXPECT_EQ_INT(tokenizer_encode(t, "ab ab ab", 8, 0, few, 2, &n), PULSE_ERR_NOMEM);
    EXPECT_EQ_INT(n, 5); /* ab, U+2581, ab, U+2581, ab: the ab merges win over U+2581 a */
    EXPECT_EQ_INT(few[0], I_AB);
    /* lookups */
    struct tokenizer_info info;
    tokenizer_get_info(t, &info);
    EXPECT_EQ_INT(info.n_vocab, N_VOCAB);
    EXPECT_EQ_INT(info.bos_id, 2);
    EXPECT_EQ_INT(info.eos_id, 1);
    EXPECT_EQ_INT(info.unk_id, 3);
    EXPECT_EQ_INT(info.pad_id, -1);
    EXPECT_EQ_INT(info.add_bos, 1);
    EXPECT_EQ_INT(info.add_space_prefix, 0);
    EXPECT_EQ_INT(tokenizer_find(t, SP SP, 6), 6); /* "  " is matched as U+2581 U+2581 */
    EXPECT_EQ_INT(tokenizer_find(t, "bce", 3), I_BCE);
    EXPECT_EQ_INT(tokenizer_find(t, "zz", 2), -1);
    EXPECT_EQ_INT(tokenizer_token_type(t, I_CD), TOKENIZER_UNUSED);
    EXPECT_EQ_INT(tokenizer_token_type(t, BYTE0), TOKENIZER_BYTE);
    EXPECT_NEAR(tokenizer_score(t, I_BC), -0.5, 0);
    EXPECT(strcmp(tokenizer_piece(t, I_BCE, &len), "bce") == 0 && len == 3);
    EXPECT(tokenizer_piece(t, -1, NULL) == NULL);
}

/* ---- a naive BPE: repeatedly merge the best adjacent pair, scanning every pair each time ---- */

static size_t naive_bpe(const struct tokenizer *t, const char *esc, size_t m, int32_t *ids)
{
    size_t start[128], len[128], ns = 0;
    for (size_t i = 0; i < m;) { /* the alphabet here is ASCII plus U+2581 */
        size_t l = (uint8_t)esc[i] < 0x80 ? 1 : 3;
        start[ns] = i, len[ns++] = l, i += l;
    }
    for (;;) {
        size_t best = SIZE_MAX;
        float bs = 0;
        for (size_t k = 0; k + 1 < ns; k++) {
            int32_t id = tokenizer_find(t, esc + start[k], len[k] + len[k + 1]);
            if (id < 0) continue;
            if (best == SIZE_MAX || tokenizer_score(t, id) > bs)
                best = k, bs = tokenizer_score(t, id);
        }
        if (best == SIZE_MAX) break;
        len[best] += len[best + 1];
        memmove(start + best + 1, start + best + 2, (ns - best - 2) * sizeof *start);
        memmove(len + best + 1, len + best + 2, (ns - best - 2) * sizeof *len);
        ns--;
    }
    for (size_t k = 0; k < ns; k++)
        ids[k] = tokenizer_find(t, esc + start[k], len[k]);
    return ns;
}

static void test_random(const struct tokenizer *t)
{
    static const char *const frag[] = {"a", "b", "c", "e", " ", "a", "b"};
    static const char *const frag2[] = {"a", "b",  "c",        "d",     "e",
                                        " ", "\n", "\xc3\xa9", "<bos>", "<start_of_turn>",
                                        "x", "  ", SP,         "<",     "<b>"};
    uint64_t s = 0x9e3779b97f4a7c15ull;
    int naive_ok = 0, round_ok = 0;
    for (int it = 0; it < 400; it++) {
        char text[512], esc[512], out[1024];
        size_t tl = 0, el = 0, nl = 0, n = 0, len = 0;
        int32_t ids[512], ref[128];
        int nf = 1 + it % 24;
        for (int k = 0; k < nf; k++) { /* letters and spaces only: no user-defined pieces */
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            const char *f = frag[(s >> 33) % PULSE_ARRAY_LEN(frag)];
            if (f[0] == ' ' && tl && text[tl - 1] == ' ') continue; /* "  " is user-defined */
            text[tl++] = f[0];
            if (f[0] == ' ')
                memcpy(esc + el, SP, 3), el += 3;
            else
                esc[el++] = f[0];
        }
        nl = naive_bpe(t, esc, el, ref);
        int rc = tokenizer_encode(t, text, tl, 0, ids, 512, &n);
        naive_ok += rc == PULSE_OK && n == nl && memcmp(ids, ref, n * sizeof *ids) == 0;
        tl = 0;
        for (int k = 0; k < nf; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            const char *f = frag2[(s >> 33) % PULSE_ARRAY_LEN(frag2)];
            memcpy(text + tl, f, strlen(f)), tl += strlen(f);
        }
        text[tl] = 0;
        rc = tokenizer_encode(t, text, tl, 0, ids, 512, &n);
        if (rc == PULSE_OK && tokenizer_decode(t, ids, n, 1, out, sizeof out, &len) == PULSE_OK) {
            /* U+2581 in the input comes back as a space */
            char want[512];
            size_t w = 0;
            for (size_t i = 0; i < tl;)
                if (i + 3 <= tl && memcmp(text + i, SP, 3) == 0)
                    want[w++] = ' ', i += 3;
                else
                    want[w++] = text[i++];
            round_ok += len == w && memcmp(out, want, w) == 0;
        }
    }
    EXPECT_EQ_INT(naive_ok, 400);
    EXPECT_EQ_INT(round_ok, 400);
}

static void expect_load_error(enum fault f, const char *needle)
{
    char err[256] = "";
    struct buf b = make_vocab(0, f);
    struct gguf_file *g = NULL;
    struct tokenizer *t = NULL;
    EXPECT_EQ_INT(gguf_open_memory(b.p, b.n, "bad.gguf", &g, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(tokenizer_load(g, &t, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT(t == NULL);
    EXPECT_STR_CONTAINS(err, needle);
    EXPECT_STR_CONTAINS(err, "bad.gguf");
    gguf_free(g);
    free(b.p);
}

int main(void)
{
    struct buf b;
    struct gguf_file *g;
    struct tokenizer *t = open_vocab(&b, &g, 0);
    gguf_free(g); /* the tokenizer keeps its own copy */
    free(b.p);
    test_merges(t);
    test_fallback_and_specials(t);
    test_decode(t);
    test_random(t);
    tokenizer_free(t);
    test_space_prefix();
    expect_load_error(BAD_MODEL, "tokenizer.ggml.model");
    expect_load_error(BAD_TYPE_LEN, "tokenizer.ggml.token_type");
    expect_load_error(BAD_BYTE_PIECE, "<0xNN>");
    expect_load_error(BAD_BOS, "tokenizer.ggml.bos_token_id");
    expect_load_error(NO_TOKENS, "tokenizer.ggml.tokens");
    expect_load_error(BAD_TYPE, "tokenizer.ggml.token_type[271]");
    return tu_finish("test_acc_tokenizer");
}
