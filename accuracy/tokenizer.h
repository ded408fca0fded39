/* The SentencePiece BPE tokenizer a GGUF of tokenizer model "llama" describes (Gemma 3, Llama 2):
 * tokenizer.ggml.tokens / scores / token_type, the special ids and the add_bos / add_eos /
 * add_space_prefix flags. It encodes exactly as Google's sentencepiece library does with the
 * model the vocabulary came from, plus llama.cpp's parse_special step:
 *
 *   1. the raw text is cut at every control (and unknown) piece, leftmost and longest first,
 *      e.g. "<start_of_turn>"; each becomes its id;
 *   2. each remaining fragment gets U+2581 in front when add_space_prefix is set (only at the start
 *      of the text or after a control piece), and every ' ' becomes U+2581 ("\xe2\x96\x81");
 *   3. the escaped fragment is cut into symbols: a user-defined piece (leftmost, longest;
 * llama.cpp's converter writes their U+2581 as ' ', which is undone at load) becomes a frozen
 * symbol, anything else one UTF-8 character (a byte that starts no valid character is one symbol);
 *   4. adjacent pairs whose concatenation is a normal, user-defined or unused piece go into a
 *      max-heap by that piece's score (ties: leftmost first); the best is merged, stale entries are
 *      skipped, and the new neighbour pairs pushed, until the heap is empty;
 *   5. each symbol emits its id; an unused piece is split back into the merges that made it; a
 *      character not in the vocabulary emits one <0xNN> byte piece per byte (byte fallback), or
 *      the unknown id when the vocabulary lacks that byte piece (nothing when it has neither).
 *
 * Decoding maps U+2581 back to ' ', byte pieces to their raw byte, and control / unknown pieces to
 * their text or to nothing. decode(encode(x)) == x for every x that is valid UTF-8 when control
 * pieces are rendered (and add_space_prefix is off). Encoding is O(n log n) in the text length. */
#ifndef PULSE_TOKENIZER_H
#define PULSE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "accuracy/gguf.h"

/* tokenizer.ggml.token_type values (SentencePiece's piece types). */
enum tokenizer_token_type {
    TOKENIZER_NORMAL = 1,
    TOKENIZER_UNKNOWN = 2,
    TOKENIZER_CONTROL = 3,
    TOKENIZER_USER_DEFINED = 4,
    TOKENIZER_UNUSED = 5,
    TOKENIZER_BYTE = 6,
};

/* What the metadata says; ids are -1 where the file names none. */
struct tokenizer_info {
    int32_t n_vocab;
    int32_t bos_id, eos_id, unk_id, pad_id;
    int add_bos, add_eos, add_space_prefix; /* defaults when absent: 1, 0, 1 (llama.cpp's) */
};

struct tokenizer;

/* Builds the tokenizer from g's tokenizer.* metadata. Everything is copied: g may be freed
 * afterwards. PULSE_OK and *out (free with tokenizer_free); PULSE_ERR_INVALID with a reason naming
 * the file and the field (model neither "llama" nor "gpt2", arrays of the wrong type or length, a
 * token type out of 1..6, an id out of range, a byte piece not spelled <0xNN>); PULSE_ERR_NOMEM.
 * Model "gpt2" (Qwen, Llama 3) is the byte-level BPE of accuracy/bpe.h behind the same calls:
 * tokenizer.ggml.pre "qwen2" or "llama-bpe" picks the pattern, control and user-defined tokens are
 * special (TOKENIZER_CONTROL; every other token TOKENIZER_NORMAL), pieces are the tokens' bytes,
 * scores 0, and encode adds the BOS only where the file's add_bos_token says so. */
int tokenizer_load(const struct gguf_file *g, struct tokenizer **out, char *err, size_t errlen);
/* Builds the tokenizer from a Hugging Face tokenizer.json of a byte-level BPE (Qwen 1-3,
 * Llama 3): model.type "BPE" with its vocab in GPT-2's byte-level spelling (ids are ranks), a
 * Split pre-tokenizer whose regex is Qwen's or Llama 3's pattern (bpe.h), added_tokens as special
 * tokens, the BOS a TemplateProcessing post-processor puts first (add_bos then set), and the EOS
 * that tokenizer_config.json beside it names (eos_token). PULSE_OK and *out; PULSE_ERR_INVALID
 * with a reason naming the file and the field; PULSE_ERR_NOMEM. */
int tokenizer_load_json(const char *path, struct tokenizer **out, char *err, size_t errlen);
/* Frees everything; NULL is a no-op. */
void tokenizer_free(struct tokenizer *t);

/* Encodes len bytes of text (need not be NUL-terminated), prepending the BOS id when add_bos and
 * the file has one. Writes at most max ids and sets *n to the number the text needs: PULSE_OK,
 * or PULSE_ERR_NOMEM when that is more than max (the first max are written) or when scratch
 * memory (a few dozen bytes per input byte, freed before returning) cannot be allocated. */
int tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, int add_bos,
                     int32_t *ids, size_t max, size_t *n);

/* Decodes n ids into out (cap bytes, always NUL-terminated when cap > 0) and sets *len to the
 * bytes the text needs, without the NUL. Control and unknown pieces are written as their text
 * when render_special, else dropped. PULSE_OK; PULSE_ERR_NOMEM when cap <= *len (out holds a
 * truncated prefix); PULSE_ERR_INVALID when an id is outside [0, n_vocab). */
int tokenizer_decode(const struct tokenizer *t, const int32_t *ids, size_t n, int render_special,
                     char *out, size_t cap, size_t *len);

/* Vocabulary size, special ids and flags. */
void tokenizer_get_info(const struct tokenizer *t, struct tokenizer_info *out);
/* Piece of id as the tokenizer matches it (spaces spelled U+2581), NUL-terminated, owned by t;
 * *len (may be NULL) gets its length. NULL when id is out of range. */
const char *tokenizer_piece(const struct tokenizer *t, int32_t id, size_t *len);
/* Type (enum tokenizer_token_type) and score of id; 0 and 0.0f when out of range. */
int tokenizer_token_type(const struct tokenizer *t, int32_t id);
float tokenizer_score(const struct tokenizer *t, int32_t id);
/* Id of the piece spelled by len bytes (spaces as U+2581), or -1. */
int32_t tokenizer_find(const struct tokenizer *t, const char *piece, size_t len);

#endif
