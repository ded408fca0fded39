/* The tokenizer on the real Gemma 3 270M vocabulary against reference ids from SentencePiece
 * (tests/data/tokenizer_gemma3_ref.jsonl, made by tests/data/make_tokenizer_ref.py): every string
 * must encode to exactly the reference ids and decode back to itself, and a ~16K-token text must
 * match the reference count and id hash (its encode time is printed). The model comes from
 * PULSE_GEMMA_GGUF, else $PULSE_SRC/models/gemma3-270m-q4_k_m.gguf (scripts/setup-model.sh);
 * without it the test is skipped (exit 77). tests/test_acc_tokenizer.c needs no model. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "accuracy/chat.h"
#include "accuracy/gguf.h"
#include "accuracy/tokenizer.h"
#include "common.h"
#include "testutil.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t fnv1a64_ids(const int32_t *ids, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 4; k++)
            h = (h ^ (((uint32_t)ids[i] >> (8 * k)) & 0xff)) * 0x100000001b3ull;
    return h;
}

/* One {"text", "ids"} record: exact ids, BOS when asked, and decode(encode(x)) == x. */
static int check_record(const struct tokenizer *t, json_t *rec, int line)
{
    json_t *jt = json_object_get(rec, "text"), *ji = json_object_get(rec, "ids");
    if (!json_is_string(jt) || !json_is_array(ji)) {
        fprintf(stderr, "tokenizer_gemma3_ref.jsonl:%d: expected \"text\" and \"ids\"\n", line);
        tu_failures++;
        return 0;
    }
    const char *text = json_string_value(jt);
    size_t tl = json_string_length(jt), nref = json_array_size(ji), n = 0, len = 0;
    int32_t *ids = malloc((tl + 2) * sizeof *ids);
    char *out = malloc(4 * tl + 64);
    if (!ids || !out) abort();
    int ok = tokenizer_encode(t, text, tl, 0, ids, tl + 2, &n) == PULSE_OK && n == nref;
    for (size_t i = 0; ok && i < n; i++)
        ok = ids[i] == json_integer_value(json_array_get(ji, i));
    EXPECT(ok);
    if (!ok) {
        fprintf(stderr, "  line %d \"%.60s\": got", line, text);
        for (size_t i = 0; i < n && i < 40; i++)
            fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    /* SentencePiece reads a U+2581 in the text as a space, so it decodes to one */
    char *want = malloc(tl + 1);
    size_t wl = 0;
    if (!want) abort();
    for (size_t i = 0; i < tl;)
        if (i + 3 <= tl && memcmp(text + i, "\xe2\x96\x81", 3) == 0)
            want[wl++] = ' ', i += 3;
        else
            want[wl++] = text[i++];
    int rt = tokenizer_decode(t, ids, n, 1, out, 4 * tl + 64, &len) == PULSE_OK && len == wl &&
             memcmp(out, want, wl) == 0;
    free(want);
    EXPECT(rt);
    if (!rt) fprintf(stderr, "  line %d: decode gives \"%.60s\"\n", line, out);
    size_t nb = 0;
    EXPECT(tokenizer_encode(t, text, tl, 1, ids, tl + 2, &nb) == PULSE_OK && nb == n + 1 &&
           ids[0] == 2);
    free(ids);
    free(out);
    return ok && rt;
}

/* The long record: the paragraph repeated, joined by sep; count and hash of the ids. */
static void check_long(const struct tokenizer *t, json_t *rec)
{
    const char *para = json_string_value(json_object_get(rec, "repeat_text"));
    const char *sep = json_string_value(json_object_get(rec, "sep"));
    int rep = (int)json_integer_value(json_object_get(rec, "repeat"));
    size_t want_n = (size_t)json_integer_value(json_object_get(rec, "n_ids"));
    const char *want_h = json_string_value(json_object_get(rec, "ids_fnv1a64"));
    if (!para || !sep || !want_h || rep <= 0) {
        fprintf(stderr, "tokenizer_gemma3_ref.jsonl: bad long record\n");
        tu_failures++;
        return;
    }
    size_t pl = strlen(para), sl = strlen(sep), tl = 0;
    char *text = malloc((size_t)rep * (pl + sl) + 1);
    int32_t *ids = malloc((size_t)rep * (pl + sl) * sizeof *ids);
    if (!text || !ids) abort();
    for (int r = 0; r < rep; r++) {
        if (r) memcpy(text + tl, sep, sl), tl += sl;
        memcpy(text + tl, para, pl), tl += pl;
    }
    size_t n = 0;
    double best = 1e9;
    for (int it = 0; it < 3; it++) {
        double t0 = now_s();
        EXPECT_EQ_INT(tokenizer_encode(t, text, tl, 0, ids, (size_t)rep * (pl + sl), &n), PULSE_OK);
        double dt = now_s() - t0;
        best = dt < best ? dt : best;
    }
    char h[32];
    snprintf(h, sizeof h, "%016llx", (unsigned long long)fnv1a64_ids(ids, n));
    EXPECT_EQ_INT(n, want_n);
    EXPECT(strcmp(h, want_h) == 0);
    fprintf(stderr, "long text: %zu bytes -> %zu tokens in %.2f ms (best of 3), ids hash %s\n", tl,
            n, 1e3 * best, h);
    EXPECT(best < 5.0); /* generous: sanitizer builds included */
    free(text);
    free(ids);
}

int main(void)
{
    char path[4096], err[512];
    const char *src = getenv("PULSE_SRC");
    if (tu_gemma_path("test_acc_tokenizer_gemma3", path, sizeof path) != 0) return 77;
    char ref[4096];
    snprintf(ref, sizeof ref, "%s/tests/data/tokenizer_gemma3_ref.jsonl", src ? src : ".");
    FILE *f = fopen(ref, "r");
    if (!f) {
        fprintf(stderr, "test_acc_tokenizer_gemma3: cannot open %s\n", ref);
        return 1;
    }
    struct gguf_file *g = NULL;
    struct tokenizer *t = NULL;
    double t0 = now_s();
    if (gguf_open(path, &g, err, sizeof err) || tokenizer_load(g, &t, err, sizeof err)) {
        fprintf(stderr, "test_acc_tokenizer_gemma3: %s\n", err);
        fclose(f);
        gguf_free(g);
        return 1;
    }
    fprintf(stderr, "loaded %s in %.0f ms\n", path, 1e3 * (now_s() - t0));
    gguf_free(g);
    struct tokenizer_info info;
    tokenizer_get_info(t, &info);
    EXPECT_EQ_INT(info.n_vocab, 262144);
    EXPECT_EQ_INT(info.bos_id, 2);
    EXPECT_EQ_INT(info.eos_id, 1);
    EXPECT_EQ_INT(info.unk_id, 3);
    EXPECT_EQ_INT(info.pad_id, 0);
    EXPECT_EQ_INT(info.add_bos, 1);
    EXPECT_EQ_INT(info.add_space_prefix, 0);
    EXPECT_EQ_INT(tokenizer_find(t, "<start_of_turn>", 15), 105);
    EXPECT_EQ_INT(tokenizer_find(t, "<0x00>", 6), 238);
    /* the chat template: detected from the control pieces; its markers become one id each */
    EXPECT_EQ_INT(chat_template_detect(t), CHAT_GEMMA);
    char *chat = chat_apply(CHAT_GEMMA, "hi");
    int32_t ids[32];
    size_t n = 0;
    EXPECT(chat && tokenizer_encode(t, chat, strlen(chat), 1, ids, 32, &n) == PULSE_OK);
    free(chat);
    /* <bos> <start_of_turn> user \n hi <end_of_turn> \n <start_of_turn> model \n */
    EXPECT_EQ_INT((int)n, 10);
    EXPECT(n == 10 && ids[0] == 2 && ids[1] == 105 && ids[7] == 105 &&
           ids[5] == tokenizer_find(t, "<end_of_turn>", 13));

    char line[1 << 16];
    int ln = 0, n_rec = 0, n_pass = 0;
    while (fgets(line, sizeof line, f)) {
        json_error_t je;
        ln++;
        json_t *rec = json_loads(line, 0, &je);
        if (!rec) {
            fprintf(stderr, "%s:%d: %s\n", ref, ln, je.text);
            tu_failures++;
            continue;
        }
        if (json_object_get(rec, "repeat_text")) {
            check_long(t, rec);
        } else {
            n_rec++;
            n_pass += check_record(t, rec, ln);
        }
        json_decref(rec);
    }
    fclose(f);
    fprintf(stderr, "reference strings: %d of %d exact and round-trip\n", n_pass, n_rec);
    EXPECT(n_rec >= 40);
    tokenizer_free(t);
    return tu_finish("test_acc_tokenizer_gemma3");
}
