/* libFuzzer harness for the LongBench JSONL reader (accuracy/longbench.c), from memory.
 * The first byte picks the bad-line mode; the whole input is the file. Every sample that loads
 * is then pushed through the template filler (its context used as a template too) and scored
 * with its own input as the prediction under the metric of a task picked by its line number,
 * so the metrics see arbitrary bytes as well.
 *   cmake -S . -B build-fuzz -DPULSE_FUZZ=ON -DPULSE_CUDA=OFF -DCMAKE_C_COMPILER=clang
 *   cmake --build build-fuzz --target fuzz_jsonl && build-fuzz/fuzz_jsonl -max_total_time=30 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "accuracy/chat.h"
#include "accuracy/longbench.h"
#include "common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct longbench_load_params p = {LONGBENCH_BAD_FAIL, NULL};
    if (size > 0 && (data[0] & 1)) p.on_bad = LONGBENCH_BAD_SKIP;
    struct longbench_set *set = NULL;
    char err[256];
    int rc = longbench_load_mem("fuzz", (const char *)data, size, &p, &set, err, sizeof err);
    if (rc != PULSE_OK) {
        if (set != NULL || strlen(err) == 0) abort(); /* a failure always explains itself */
        return 0;
    }
    for (size_t i = 0; i < longbench_count(set); i++) {
        const struct longbench_sample *s = longbench_get(set, i);
        const struct longbench_task *t = longbench_task_at(s->line % longbench_task_count());
        char *prompt = longbench_build_prompt(t, s, CHAT_NONE, err, sizeof err);
        if (!prompt || strlen(prompt) < strlen(s->context)) abort();
        free(prompt);
        free(longbench_fill_template(s->context, s->input, s->dataset, err, sizeof err));
        double score = longbench_score_sample(t, s, s->input);
        if (!(score >= 0.0 && score <= 1.0)) abort();
        for (size_t k = 0; k < s->n_answers; k++)
            if (!s->answers[k]) abort();
    }
    if (longbench_bad_lines(set) && !strstr(longbench_first_bad(set), "fuzz:")) abort();
    longbench_free(set);
    return 0;
}
