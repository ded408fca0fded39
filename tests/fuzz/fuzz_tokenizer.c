/* libFuzzer harness for the tokenizer. Input byte 0 picks the mode:
 *   even: the rest is text, encoded with a fixed small vocabulary (merges, an unused piece,
 *         user-defined and control pieces, byte fallback); decoding with the control pieces
 *         rendered must give the text back (U+2581 reads as a space), every id must be in range,
 *         and a too-small id buffer must report the same count;
 *   odd:  the rest is a GGUF image; when it opens and tokenizer_load accepts it, a fixed text is
 *         encoded and decoded; when load fails, the message must name the input.
 * Sources are compiled in to carry the coverage instrumentation (see fuzz_gguf.c). Build: cmake
 * -DPULSE_FUZZ=ON -DCMAKE_C_COMPILER=clang; run: ./fuzz_tokenizer -max_total_time=30 [corpus]. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accuracy/gguf.c"
#include "accuracy/gguf_quant.c"
#include "accuracy/tokenizer.c"

struct wbuf {
    uint8_t *p;
    size_t n, cap;
};

static void wput(struct wbuf *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void wstr(struct wbuf *b, const char *s)
{
    uint64_t n = strlen(s);
    wput(b, &n, 8);
    wput(b, s, n);
}

static void wkey(struct wbuf *b, const char *key, uint32_t type)
{
    wstr(b, key);
    wput(b, &type, 4);
}

#define U2581 "\xe2\x96\x81"

static struct tokenizer *small_vocab(void)
{
    static const char *const text[] = {"<pad>",    "<eos>", "<bos>",  "<unk>", "<start_of_turn>",
                                       "\n",       "  ",    "<b>",    U2581,   "a",
                                       "b",        "c",     "d",      "ab",    "bc",
                                       "abc",      "aa",    "cd",     "cde",   U2581 "a",
                                       "\xc3\xa9", "e",     U2581 "b"};
    static const int32_t type[] = {3, 3, 3, 2, 3, 4, 4, 4, 1, 1, 1, 1,
                                   1, 1, 1, 1, 1, 5, 1, 1, 1, 1, 1};
    static const float score[] = {0,  0,  0,     0,  0,  0,     0,     0,     -9, -9, -9,   -9,
                                  -9, -1, -0.5f, -3, -1, -0.1f, -0.2f, -1.5f, -9, -9, -1.2f};
    enum { NP = sizeof text / sizeof text[0], N = NP + 256 };
    char bytes[256][8];
    struct wbuf b = {0};
    uint32_t u32;
    uint64_t u64;
    wput(&b, "GGUF", 4);
    u32 = 3, wput(&b, &u32, 4);
    u64 = 0, wput(&b, &u64, 8);
    u64 = 5, wput(&b, &u64, 8);
    wkey(&b, "tokenizer.ggml.model", 8);
    wstr(&b, "llama");
    wkey(&b, "tokenizer.ggml.tokens", 9);
    u32 = 8, wput(&b, &u32, 4);
    u64 = N, wput(&b, &u64, 8);
    for (int i = 0; i < NP; i++)
        wstr(&b, text[i]);
    for (int v = 0; v < 256; v++) {
        snprintf(bytes[v], sizeof bytes[v], "<0x%02X>", v);
        wstr(&b, bytes[v]);
    }
    wkey(&b, "tokenizer.ggml.scores", 9);
    u32 = 6, wput(&b, &u32, 4);
    u64 = N, wput(&b, &u64, 8);
    wput(&b, score, sizeof score);
    for (int v = 0; v < 256; v++)
        wput(&b, &(float){0}, 4);
    wkey(&b, "tokenizer.ggml.token_type", 9);
    u32 = 5, wput(&b, &u32, 4);
    u64 = N, wput(&b, &u64, 8);
    wput(&b, type, sizeof type);
    for (int v = 0; v < 256; v++)
        wput(&b, &(int32_t){6}, 4);
    wkey(&b, "tokenizer.ggml.add_space_prefix", 7);
    wput(&b, &(uint8_t){0}, 1);
    char err[256];
    struct gguf_file *g = NULL;
    struct tokenizer *t = NULL;
    if (gguf_open_memory(b.p, b.n, "small.gguf", &g, err, sizeof err) ||
        tokenizer_load(g, &t, err, sizeof err)) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err);
        abort();
    }
    gguf_free(g);
    free(b.p);
    return t;
}

static void fuzz_text(const char *text, size_t len)
{
    static struct tokenizer *t;
    if (!t) t = small_vocab(); /* kept for the whole run */
    int32_t *ids = malloc((len + 1) * sizeof *ids);
    char *out = malloc(3 * len + 16), *want = malloc(len + 1);
    size_t n = 0, n2 = 0, dl = 0, wl = 0;
    struct tokenizer_info info;
    if (!ids || !out || !want) abort();
    tokenizer_get_info(t, &info);
    if (tokenizer_encode(t, text, len, 0, ids, len + 1, &n) != PULSE_OK || n > len) abort();
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= info.n_vocab) abort();
    if (n && (tokenizer_encode(t, text, len, 0, ids, n - 1, &n2) != PULSE_ERR_NOMEM || n2 != n))
        abort();
    tokenizer_encode(t, text, len, 0, ids, len + 1, &n);
    if (tokenizer_decode(t, ids, n, 1, out, 3 * len + 16, &dl) != PULSE_OK) abort();
    for (size_t i = 0; i < len;)
        if (i + 3 <= len && memcmp(text + i, U2581, 3) == 0)
            want[wl++] = ' ', i += 3;
        else
            want[wl++] = text[i++];
    if (dl != wl || memcmp(out, want, wl) != 0) abort();
    free(ids);
    free(out);
    free(want);
}

static void fuzz_vocab(const uint8_t *data, size_t size)
{
    struct gguf_file *g = NULL;
    struct tokenizer *t = NULL;
    char err[512] = "";
    if (gguf_open_memory(data, size, "fuzz.gguf", &g, err, sizeof err) != PULSE_OK) return;
    if (tokenizer_load(g, &t, err, sizeof err) != PULSE_OK) {
        if (t || strncmp(err, "fuzz.gguf: ", 11) != 0) abort();
    } else {
        static const char sample[] = "<bos>Hello  w\xc3\xb6rld \xf0\x9f\x99\x82\n\xff";
        int32_t ids[3 * sizeof sample];
        char out[8 * sizeof sample];
        size_t n = 0, len = 0;
        if (tokenizer_encode(t, sample, sizeof sample - 1, 1, ids, PULSE_ARRAY_LEN(ids), &n))
            abort();
        tokenizer_decode(t, ids, n, 1, out, sizeof out, &len);
    }
    tokenizer_free(t);
    gguf_free(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    if (data[0] & 1)
        fuzz_vocab(data + 1, size - 1);
    else
        fuzz_text((const char *)data + 1, size - 1);
    return 0;
}
