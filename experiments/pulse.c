/* pulse: the command line of the suite. One subcommand per experiment driver, in one table. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "runtime_opts.h"

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"run", cmd_run, "serve a workload with a policy and write a result JSON"},
    {"models", cmd_models, "list the built-in model configs with their sizes"},
    {"bench", cmd_bench, "microbenchmarks (decode-step)"},
    {"recall-bench", cmd_recall_bench,
     "recall engines: bandwidth vs chunk size and count, cap, zero-copy cost"},
    {"profile", cmd_profile, "IOAA profile: t_N, t_O, t_R tables of a model on a backend"},
    {"profile-heads", cmd_profile_heads, "MAM head profile of a model (SoloHead's selectors)"},
    {"generate", cmd_generate, "greedy continuation of a prompt (built-in or real weights)"},
    {"synth", cmd_synth, "write RULER-style synthetic tasks as LongBench JSONL"},
    {"accuracy", cmd_accuracy, "accuracy of full attention and sparse selection policies"},
    {"compare", cmd_compare, "a result JSON against a baseline, for CI: exit 1 on a regression"},
    {"sweep", cmd_sweep, "a grid of pulse run's flags, one result per point, resumable"},
    {"workload", cmd_workload, "a workload's statistics; written as a Mooncake-format trace"},
    {"reproduce", cmd_reproduce, "the paper's experiments as sweeps, a summary per figure"},
};

static void usage(FILE *f)
{
    fputs("usage: pulse COMMAND [options]\n\ncommands:\n", f);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-14s %s\n", commands[i].name, commands[i].summary);
    fputs("\npulse COMMAND --help describes each command.\n", f);
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : 0;
    }
    /* a tuning variable that became an option changes nothing any more: refused, not ignored */
    if (runtime_opts_refuse_env()) return EXIT_USAGE;
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "pulse: unknown command '%s' (commands:", argv[1]);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(stderr, "%s %s", i ? "," : "", commands[i].name);
    fputs(")\n", stderr);
    return EXIT_USAGE;
}
