/* libFuzzer harness for the safetensors reader and the config.json parser: parse any bytes from
 * memory; a valid parse has every readable tensor converted to fp32 and bf16; a failure must
 * leave a message that names the input. The reader's source is compiled into this file so it
 * carries the fuzzer's coverage instrumentation (see fuzz_gguf.c). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "accuracy/safetensors.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct safetensors *st = NULL;
    struct safetensors_config cfg;
    char err[512] = "";
    if (safetensors_parse_config((const char *)data, size, "fuzz.json", &cfg, err, sizeof err) !=
            PULSE_OK &&
        strncmp(err, "fuzz.json: ", 11) != 0)
        abort();
    if (safetensors_open_memory(data, size, "fuzz.st", &st, err, sizeof err) != PULSE_OK) {
        if (st || strncmp(err, "fuzz.st: ", 9) != 0) abort();
        return 0;
    }
    for (uint64_t i = 0; i < safetensors_tensor_count(st); i++) {
        const struct safetensors_tensor *t = safetensors_tensor_at(st, i);
        if (safetensors_find_tensor(st, t->name) != t) abort();
        if (t->n_bytes > size || t->data < data || t->data + t->n_bytes > data + size) abort();
        float *y = malloc((size_t)(t->n_elems + 1) * sizeof *y);
        uint16_t *h = malloc((size_t)(t->n_elems + 1) * sizeof *h);
        if (!y || !h) abort();
        int rc = safetensors_read_f32(st, t, y, t->n_elems, err, sizeof err);
        if ((rc == PULSE_OK) != (t->dtype != SAFETENSORS_OTHER)) abort();
        safetensors_read_bf16(st, t, h, t->n_elems, err, sizeof err);
        free(y);
        free(h);
    }
    safetensors_metadata(st, "format");
    safetensors_free(st);
    return 0;
}
