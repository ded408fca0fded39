/* Byte-level BPE, the tokenizer of Qwen (1 to 3) and Llama 3: the text NFC-normalised (Qwen's
 * normaliser; Llama 3 has none), split at special tokens, pre-tokenized by the model's pattern, each piece's UTF-8 bytes merged
 * pair by pair, lowest rank first (tiktoken's byte_pair_merge), into token ids. Loaded from a
 * tiktoken rank file ("BASE64 RANK" lines: qwen.tiktoken) with the special tokens given.
 *
 * The pre-tokenizer is the pattern family both models use, matched by hand over utf8proc's
 * character classes:
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 *   \s*[\r\n]+|\s+(?!\S)|\s+
 * with D = 1 (Qwen) or 3 (Llama 3); \s is Unicode's White_Space. */
#ifndef PULSE_ACC_BPE_H
#define PULSE_ACC_BPE_H

#include <stddef.h>
#include <stdint.h>

enum bpe_pattern { BPE_PATTERN_QWEN = 1, BPE_PATTERN_LLAMA3 = 3 }; /* the digit run's length */

struct bpe_special {
    const char *text;
    int32_t id;
};

struct bpe;

/* One token of a vocabulary: its bytes, and its id (which is its rank). */
struct bpe_token {
    const unsigned char *bytes;
    size_t len;
    int32_t id;
};

/* Builds from n tokens (every single byte among them) and the n_sp special tokens; label
 * names the source in messages. 0, or -1 with a one-line reason in err (a token or id given
 * twice, an id out of range, a byte that is no token, out of memory). */
int bpe_create(const char *label, const struct bpe_token *toks, size_t n, enum bpe_pattern pat,
               const struct bpe_special *sp, int n_sp, struct bpe **out, char *err,
               size_t errlen);

/* A token spelled in GPT-2's byte-level alphabet (bytes_to_unicode: the printable bytes
 * '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF are themselves, the other bytes U+0100 + k in
 * byte order) back into its bytes (out: room for n). The byte count, or -1 when a character
 * is no byte's. */
long bpe_bytelevel_decode(const char *s, size_t n, unsigned char *out);

/* The token's bytes (NUL-terminated, owned by b; *len its length), its special token's text,
 * or NULL when id is no token; *special (may be NULL) is 1 for a special token. */
const char *bpe_token_text(const struct bpe *b, int32_t id, size_t *len, int *special);
/* The id of the token (or special token) spelled by s[0..n), or -1. */
int32_t bpe_find(const struct bpe *b, const char *s, size_t n);
/* One past the largest id. */
int32_t bpe_n_ids(const struct bpe *b);

/* Loads the ranks of path and the n special tokens (recognised anywhere in the text). 0, or -1
 * with a one-line reason in err (unreadable file, a malformed line with its number, a rank or
 * special id used twice). */
int bpe_load_tiktoken(const char *path, enum bpe_pattern pat, const struct bpe_special *sp,
                      int n, struct bpe **out, char *err, size_t errlen);
void bpe_free(struct bpe *b);

/* Token ids of text[0..len) into ids (room for cap); *n gets the count, which may exceed cap
 * (then only cap were written). 0, or -1 when out of memory. */
int bpe_encode(const struct bpe *b, const char *text, size_t len, int32_t *ids, size_t cap,
               size_t *n);
/* The bytes of ids[0..n) into out (room for cap, NUL-terminated when it fits); *len gets the
 * byte count. 0, or -1 for an id that is no token. */
int bpe_decode(const struct bpe *b, const int32_t *ids, size_t n, char *out, size_t cap,
               size_t *len);
/* Tokens: ranks plus special tokens. */
int bpe_n_tokens(const struct bpe *b);

/* The pre-tokenizer alone: the byte length of the piece that starts text[0..len) (len >= 1).
 * Exposed for tests. */
size_t bpe_piece_len(enum bpe_pattern pat, const unsigned char *text, size_t len);

#endif
