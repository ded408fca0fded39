/* libFuzzer harness for the GGUF reader: parse any bytes from memory; a valid parse has every
 * metadata value and every dequantisable tensor read back; a failed one must leave a message
 * that names the input. The reader's sources are compiled into this file so they carry the
 * fuzzer's coverage instrumentation (pulse_rt is built without it; its copies of these symbols
 * are then never pulled from the archive). Build: cmake -DPULSE_FUZZ=ON -DCMAKE_C_COMPILER=clang;
 * run: ./fuzz_gguf -max_total_time=30 [corpus dir]. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "accuracy/gguf.c"
#include "accuracy/gguf_quant.c"

static volatile double sink;

static void visit_array(const struct gguf_array *a)
{
    for (uint64_t i = 0; i < a->n; i++) {
        int64_t x;
        double f;
        struct gguf_str s;
        struct gguf_array sub;
        if (gguf_array_get_int(a, i, &x) == PULSE_OK) sink += (double)x;
        if (gguf_array_get_float(a, i, &f) == PULSE_OK) sink += f;
        if (gguf_array_get_str(a, i, &s) == PULSE_OK && s.len)
            sink += (unsigned char)s.ptr[s.len - 1];
        if (gguf_array_get_array(a, i, &sub) == PULSE_OK) visit_array(&sub);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gguf_file *g = NULL;
    char err[512] = "";
    if (gguf_open_memory(data, size, "fuzz.gguf", &g, err, sizeof err) != PULSE_OK) {
        if (g || strncmp(err, "fuzz.gguf: ", 11) != 0) abort();
        return 0;
    }
    for (uint64_t i = 0; i < gguf_kv_count(g); i++) {
        const char *key = gguf_kv_key(g, i);
        const struct gguf_value *v = gguf_kv_value(g, i);
        int64_t x;
        double f;
        struct gguf_str s;
        if (gguf_find_kv(g, key) != v) abort();
        gguf_get_int(g, key, &x, err, sizeof err);
        gguf_get_float(g, key, &f, err, sizeof err);
        gguf_get_str(g, key, &s, err, sizeof err);
        if (v->type == GGUF_TYPE_ARRAY) visit_array(&v->a);
    }
    for (uint64_t i = 0; i < gguf_tensor_count(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        if (gguf_find_tensor(g, t->name) != t) abort();
        if (t->n_bytes > size) abort(); /* the reader placed it inside the input */
        /* a block holds at most 2 elements per byte (Q4_0, Q4_K ...), so this stays small */
        float *y = malloc((size_t)(t->n_elems + 1) * sizeof *y);
        uint16_t *h = malloc((size_t)(t->n_elems + 1) * sizeof *h);
        if (!y || !h) abort();
        int rc = gguf_tensor_read_f32(g, t, y, t->n_elems, err, sizeof err);
        if ((rc == PULSE_OK) != (gguf_tensor_type_supported(t->type) != 0)) abort();
        gguf_tensor_read_bf16(g, t, h, t->n_elems, err, sizeof err);
        if (t->n_rows) gguf_tensor_read_rows_f32(g, t, t->n_rows - 1, 1, y, err, sizeof err);
        free(y);
        free(h);
    }
    gguf_free(g);
    return 0;
}
