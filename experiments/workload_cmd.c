/* pulse workload: a workload's statistics, and the workload written as a Mooncake-format trace
 * (what the project's sample traces in workloads/traces/ are made with). */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "workloads/workload.h"

#define CMD "workload"

static const char usage[] =
    "usage: pulse workload --workload SPEC [--arrival A] [--output-len N] [--seed S]\n"
    "                      [--out FILE.jsonl]\n"
    "  Prints a workload's statistics (prompt lengths: mean, p50, p90, p99, max; arrivals: span,\n"
    "  rate, coefficient of variation of the gaps) and writes it as a Mooncake-format trace\n"
    "  (pulse run --workload trace:FILE.jsonl replays it). SPEC and A as pulse run takes them;\n"
    "  --output-len (default 32) for the kinds that have no output lengths of their own.\n";

static int by_int(const void *a, const void *b)
{
    const int x = *(const int *)a, y = *(const int *)b;
    return x < y ? -1 : x > y;
}

static void stats(const struct workload *w)
{
    int *len = malloc(sizeof(int) * (size_t)w->n);
    if (!len) return;
    double sum = 0, out = 0, gap = 0, gap2 = 0;
    for (int i = 0; i < w->n; i++) {
        len[i] = w->reqs[i].prompt_len;
        sum += len[i];
        out += w->reqs[i].output_len > 0 ? w->reqs[i].output_len : w->output_len;
        if (i) {
            const double g = w->reqs[i].arrival_s - w->reqs[i - 1].arrival_s;
            gap += g, gap2 += g * g;
        }
    }
    qsort(len, (size_t)w->n, sizeof *len, by_int);
    const int n = w->n;
    const double span = n ? w->reqs[n - 1].arrival_s - w->reqs[0].arrival_s : 0;
    printf("%s, arrival %s, seed %llu: %d requests\n", w->spec, w->arrival,
           (unsigned long long)w->seed, n);
    printf("  prompt tokens: mean %.0f, p50 %d, p90 %d, p99 %d, max %d\n", sum / n, len[n / 2],
           len[(int)(0.9 * (n - 1))], len[(int)(0.99 * (n - 1))], len[n - 1]);
    printf("  output tokens: mean %.1f\n", out / n);
    if (n > 1 && span > 0) {
        const double m = gap / (n - 1), var = gap2 / (n - 1) - m * m;
        printf("  arrivals: %.3f s, %.3f requests/s, gap CV %.2f\n", span, (n - 1) / span,
               m > 0 ? sqrt(var > 0 ? var : 0) / m : 0.0);
    } else {
        printf("  arrivals: all at once\n");
    }
    free(len);
}

int cmd_workload(int argc, char **argv)
{
    static const struct option opts[] = {{"workload", required_argument, 0, 'w'},
                                         {"arrival", required_argument, 0, 'a'},
                                         {"output-len", required_argument, 0, 'n'},
                                         {"seed", required_argument, 0, 's'},
                                         {"out", required_argument, 0, 'o'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *spec = NULL, *arrival = NULL, *out = NULL;
    long out_len = 32;
    uint64_t seed = 1;
    int c;
    opterr = 0;
    optind = 1;
    struct cli_seen seen = {0};
    while ((c = cli_getopt(CMD, argc, argv, opts, &seen)) != -1) {
        switch (c) {
        case 'w':
            spec = optarg;
            break;
        case 'a':
            arrival = optarg;
            break;
        case 'n':
            if (cli_int(CMD, "--output-len", optarg, 1, 1 << 24, &out_len)) return EXIT_USAGE;
            break;
        case 's':
            if (cli_u64(CMD, "--seed", optarg, INT64_MAX, &seed)) return EXIT_USAGE;
            break;
        case 'o':
            out = optarg;
            break;
        case 'h':
            return fputs(usage, stdout), 0;
        default:
            return cli_unknown_flag(CMD, argc, argv), EXIT_USAGE;
        }
    }
    if (cli_no_extra_args(CMD, argc, argv)) return EXIT_USAGE;
    if (!spec) return cli_error(CMD, "--workload is required (see --help)"), EXIT_USAGE;
    if (out && cli_out_path(CMD, "--out", out)) return EXIT_USAGE;
    struct workload w;
    char err[512];
    if (workload_create(&w, spec, (int)out_len, seed, err, sizeof err) != PULSE_OK ||
        (arrival && workload_set_arrivals(&w, arrival, err, sizeof err) != PULSE_OK)) {
        cli_error(CMD, "%s", err);
        workload_free(&w);
        return EXIT_USAGE;
    }
    stats(&w);
    int rc = 0;
    if (out && workload_write_trace(&w, out, err, sizeof err) != PULSE_OK) {
        cli_error(CMD, "--out: %s", err);
        rc = 1;
    } else if (out) {
        printf("  written: %s\n", out);
    }
    workload_free(&w);
    return rc;
}
