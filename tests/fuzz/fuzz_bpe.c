/* libFuzzer harness for the byte-level BPE (accuracy/bpe.h). The first byte chooses:
 * - even: the rest is a tiktoken rank file, loaded from a temporary file; a refusal must name
 *   the file, a load must then encode and decode a fixed text;
 * - odd: the rest is text for a fixed vocabulary (every byte, a few merges, two special
 *   tokens), under Qwen's pattern or Llama 3's (the second byte's low bit): encoding never
 *   fails, decoding its ids re-encodes to the same ids, and ASCII text decodes to itself.
 * Build: cmake -DPULSE_FUZZ=ON -DCMAKE_C_COMPILER=clang; run: ./fuzz_bpe -max_total_time=30. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accuracy/bpe.h"

static struct bpe *g_vocab[2];

/* Every byte as a token (ranks 0..255), then merges, written as a rank file at path. */
static void write_vocab(const char *path)
{
    static const char *const merges[] = {"he", "ll", "hell", "hello", " w", "or", " wor",
                                         "ld", " world", "12", "123", "\xe4\xbd", "  "};
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    FILE *f = fopen(path, "w");
    if (!f) abort();
    int rank = 0;
    for (int c = 0; c < 256; c++)
        fprintf(f, "%c%c== %d\n", b64[c >> 2], b64[(c & 3) << 4], rank++);
    for (size_t m = 0; m < sizeof merges / sizeof merges[0]; m++) {
        const unsigned char *s = (const unsigned char *)merges[m];
        const size_t n = strlen(merges[m]);
        char enc[64];
        size_t w = 0;
        for (size_t i = 0; i < n; i += 3) {
            const uint32_t x = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) |
                               (i + 2 < n ? s[i + 2] : 0);
            enc[w++] = b64[x >> 18 & 63];
            enc[w++] = b64[x >> 12 & 63];
            enc[w++] = i + 1 < n ? b64[x >> 6 & 63] : '=';
            enc[w++] = i + 2 < n ? b64[x & 63] : '=';
        }
        enc[w] = 0;
        fprintf(f, "%s %d\n", enc, rank++);
    }
    fclose(f);
}

static const struct bpe_special specials[] = {{"<|a|>", 1000}, {"<|ab|>", 1001}};

static void load_vocab(void)
{
    if (g_vocab[0]) return;
    char path[] = "/tmp/fuzz_bpe_vocab_XXXXXX", err[256];
    const int fd = mkstemp(path);
    if (fd < 0) abort();
    close(fd);
    write_vocab(path);
    for (int i = 0; i < 2; i++)
        if (bpe_load_tiktoken(path, i ? BPE_PATTERN_LLAMA3 : BPE_PATTERN_QWEN, specials, 2,
                              &g_vocab[i], err, sizeof err))
            abort();
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    if (!(data[0] & 1)) { /* a rank file */
        char path[] = "/tmp/fuzz_bpe_XXXXXX", err[512] = "";
        const int fd = mkstemp(path);
        if (fd < 0) abort();
        if (write(fd, data + 1, size - 1) != (ssize_t)(size - 1)) abort();
        close(fd);
        struct bpe *b = NULL;
        const int rc = bpe_load_tiktoken(path, BPE_PATTERN_QWEN, specials, 2, &b, err, sizeof err);
        unlink(path);
        if (rc) {
            if (b || (!strstr(err, "fuzz_bpe_") && !strstr(err, "special token"))) abort();
            return 0;
        }
        int32_t ids[64];
        size_t n = 0, len = 0;
        char out[256];
        if (bpe_encode(b, "hello world 123", 15, ids, 64, &n) || n > 64 ||
            bpe_decode(b, ids, n, out, sizeof out, &len) || len != 15 ||
            memcmp(out, "hello world 123", 15))
            abort();
        bpe_free(b);
        return 0;
    }
    load_vocab();
    const struct bpe *b = g_vocab[data[1] & 1];
    const char *text = (const char *)data + 2;
    const size_t len = size - 2;
    size_t cap = 4 * len + 16, n = 0, n2 = 0, bl = 0;
    int32_t *ids = malloc(sizeof *ids * cap), *ids2 = malloc(sizeof *ids2 * cap);
    char *back = malloc(4 * len + 16);
    if (!ids || !ids2 || !back) abort();
    if (bpe_encode(b, text, len, ids, cap, &n) || n > cap) abort();
    if (bpe_decode(b, ids, n, back, 4 * len + 16, &bl)) abort();
    if (bpe_encode(b, back, bl, ids2, cap, &n2) || n2 != n || memcmp(ids, ids2, n * sizeof *ids))
        abort();
    int ascii = 1;
    for (size_t i = 0; i < len; i++)
        ascii &= data[2 + i] < 0x80;
    if (ascii && (bl != len || memcmp(back, text, len))) abort();
    free(ids), free(ids2), free(back);
    return 0;
}
