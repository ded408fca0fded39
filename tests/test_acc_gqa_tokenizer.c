/* The GQA test model's tokenizer (accuracy/train/tokenizer/, a byte-level BPE trained with the
 * `tokenizers` library by accuracy/train/make_tokenizer.py): the suite loads it from its
 * tokenizer.json and encodes every reference text exactly as `tokenizers` does
 * (tests/data/gqa_tokenizer_ref.jsonl, made by tests/data/make_gqa_tokenizer_ref.py: edge
 * strings and training records of every synthetic task in the ChatML template), decodes back to
 * the NFC text, has no BOS, ends turns with <|im_end|> and is detected as ChatML.
 * PULSE_GQA_TOKREF=FILE checks another reference file of the same format. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "accuracy/chat.h"
#include "accuracy/tokenizer.h"
#include "common.h"
#include "testutil.h"

#define TOKENIZER "accuracy/train/tokenizer/tokenizer.json"
#define REFERENCE "tests/data/gqa_tokenizer_ref.jsonl"

static void path_of(char *out, size_t n, const char *rel)
{
    const char *src = getenv("PULSE_SRC");
    snprintf(out, n, "%s/%s", src ? src : ".", rel);
}

/* FNV-1a 64 over the ids as little-endian int32 (the reference's fingerprint of a long text). */
static uint64_t fnv1a64_ids(const int32_t *ids, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 4; k++)
            h = (h ^ (((uint32_t)ids[i] >> (8 * k)) & 0xff)) * 0x100000001b3ull;
    return h;
}

static void test_info(const struct tokenizer *t)
{
    struct tokenizer_info ti;
    tokenizer_get_info(t, &ti);
    EXPECT_EQ_INT(ti.n_vocab, 4096);
    EXPECT_EQ_INT(ti.bos_id, -1);
    EXPECT_EQ_INT(ti.add_bos, 0);
    EXPECT_EQ_INT(ti.eos_id, tokenizer_find(t, "<|im_end|>", 10));
    EXPECT_EQ_INT(ti.eos_id, 2);
    EXPECT_EQ_INT(tokenizer_find(t, "<|endoftext|>", 13), 0);
    EXPECT_EQ_INT(tokenizer_find(t, "<|im_start|>", 12), 1);
    EXPECT_EQ_INT(chat_template_detect(t), CHAT_CHATML);
}

/* One reference line: the ids of its text, whole or as count, hash and tail. */
static void check_line(const struct tokenizer *t, json_t *r, size_t line, int32_t *ids, size_t cap,
                       char *text, size_t text_cap)
{
    const char *s = json_string_value(json_object_get(r, "text"));
    EXPECT(s != NULL);
    if (!s) return;
    size_t n = 0, len = 0;
    EXPECT_EQ_INT(tokenizer_encode(t, s, strlen(s), 1, ids, cap, &n), PULSE_OK);
    json_t *want = json_object_get(r, "ids");
    int ok = 1;
    if (want) {
        ok = n == json_array_size(want);
        for (size_t i = 0; ok && i < n; i++)
            ok = ids[i] == json_integer_value(json_array_get(want, i));
    } else {
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv1a64_ids(ids, n));
        json_t *tail = json_object_get(r, "tail");
        ok = (json_int_t)n == json_integer_value(json_object_get(r, "n_ids")) &&
             !strcmp(hex, json_string_value(json_object_get(r, "ids_fnv1a64")));
        for (size_t i = 0; ok && i < json_array_size(tail); i++)
            ok = ids[n - json_array_size(tail) + i] == json_integer_value(json_array_get(tail, i));
    }
    if (!ok) fprintf(stderr, "line %zu: %zu ids differ from the reference: %.60s\n", line, n, s);
    EXPECT(ok);
    /* decode(encode(x)) is x: the reference texts are NFC already, but for one (checked) */
    EXPECT_EQ_INT(tokenizer_decode(t, ids, n, 1, text, text_cap, &len), PULSE_OK);
    if (strcmp(text, s) && !strstr(s, "cafe\xcc\x81")) {
        fprintf(stderr, "line %zu: decode differs: %.60s\n", line, s);
        EXPECT(0);
    }
}

static void test_reference(const struct tokenizer *t)
{
    char path[4096];
    const char *env = getenv("PULSE_GQA_TOKREF");
    if (env && *env)
        snprintf(path, sizeof path, "%s", env);
    else
        path_of(path, sizeof path, REFERENCE);
    FILE *f = fopen(path, "r");
    EXPECT(f != NULL);
    if (!f) return;
    const size_t cap = 1 << 20;
    int32_t *ids = malloc(sizeof *ids * cap);
    char *text = malloc(1 << 22), *buf = malloc(1 << 22);
    size_t lines = 0;
    while (ids && text && buf && fgets(buf, 1 << 22, f)) {
        json_error_t je;
        json_t *r = json_loads(buf, 0, &je);
        EXPECT(r != NULL);
        if (r) check_line(t, r, ++lines, ids, cap, text, 1 << 22);
        json_decref(r);
    }
    fclose(f);
    fprintf(stderr, "test_acc_gqa_tokenizer: %zu reference texts\n", lines);
    EXPECT(lines >= 20);
    free(ids), free(text), free(buf);
}

int main(void)
{
    char path[4096], err[512];
    path_of(path, sizeof path, TOKENIZER);
    struct tokenizer *t = NULL;
    const int rc = tokenizer_load_json(path, &t, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    EXPECT_EQ_INT(rc, PULSE_OK);
    if (t) {
        test_info(t);
        test_reference(t);
    }
    tokenizer_free(t);
    return tu_finish("test_acc_gqa_tokenizer");
}
