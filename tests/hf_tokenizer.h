/* Tests that write a Hugging Face checkpoint directory: its tokenizer.json, a byte-level BPE of
 * the 256 bytes alone (GPT-2's byte spelling, ids = byte values, no merges) with the Qwen / Llama 3
 * pre-tokenizer pattern. */
#ifndef PULSE_TEST_HF_TOKENIZER_H
#define PULSE_TEST_HF_TOKENIZER_H

#include <stdio.h>

/* GPT-2's bytes that stand for themselves in its byte-level alphabet. */
static inline int hf_byte_printable(int b)
{
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* Writes the tokenizer to path; 0, or -1 when the file cannot be written. */
static inline int hf_write_byte_tokenizer(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs("{\"model\": {\"type\": \"BPE\", \"vocab\": {", f);
    for (int c = 0; c < 256; c++) { /* GPT-2's byte-level spelling of byte c */
        int cp = c, k = 0;
        if (!hf_byte_printable(c)) {
            for (int b = 0; b < c; b++)
                k += !hf_byte_printable(b);
            cp = 0x100 + k;
        }
        fprintf(f, "%s\"\\u%04x\": %d", c ? ", " : "", cp, c);
    }
    fputs("}}, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": "
          "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| "
          "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}}}",
          f);
    return fclose(f) == 0 ? 0 : -1;
}

#endif
