/* libFuzzer harness for the Mooncake trace loader (workloads/workload.c, --workload
 * trace:FILE): the input is the file. A refusal must name the file; an accepted trace must hold
 * between 1 and 1e6 requests, each with lengths in range and arrivals that never decrease, and
 * take an arrival process after it.
 * Build: cmake -DPULSE_FUZZ=ON -DCMAKE_C_COMPILER=clang; run: ./fuzz_trace -max_total_time=30. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "workloads/workload.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64], spec[80], err[512] = "";
    snprintf(path, sizeof path, "/tmp/fuzz_trace_%d.jsonl", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    if (size) fwrite(data, 1, size, f);
    fclose(f);
    snprintf(spec, sizeof spec, "trace:%s", path);
    struct workload w;
    if (workload_create(&w, spec, 8, 1, err, sizeof err) != PULSE_OK) {
        if (!strstr(err, path) && !strstr(err, "out of memory")) abort();
        remove(path);
        return 0;
    }
    if (w.n < 1 || w.n > 1000000) abort();
    double prev = 0;
    for (int i = 0; i < w.n; i++) {
        const struct request *r = &w.reqs[i];
        if (r->prompt_len < 1 || r->output_len < 1 || r->output_len > w.output_len) abort();
        if (!(r->arrival_s >= prev)) abort();
        prev = r->arrival_s;
    }
    if (workload_set_arrivals(&w, "poisson:10", err, sizeof err) != PULSE_OK) abort();
    workload_free(&w);
    remove(path);
    return 0;
}
