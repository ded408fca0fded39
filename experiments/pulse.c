/* pulse: the command line of the suite. One subcommand per experiment driver. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: pulse COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  run      serve a workload with a policy and write a result JSON\n"
    "  models   list the built-in model configs with their sizes\n"
    "  bench    microbenchmarks (decode-step)\n"
    "  recall-bench  recall engines: bandwidth vs chunk size and count, cap, zero-copy cost\n"
    "  profile-heads  MAM head profile of a model (SoloHead's selector heads), as JSON\n"
    "\n"
    "pulse COMMAND --help describes each command.\n";

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "models")) return cmd_models(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "recall-bench")) return cmd_recall_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "profile-heads")) return cmd_profile_heads(argc - 1, argv + 1);
    fprintf(stderr, "pulse: unknown command '%s' (commands: run, models, bench)\n", cmd);
    return EXIT_USAGE;
}
