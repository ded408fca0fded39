/* Command-line helpers shared by the subcommands: value parsing with one-line errors that name
 * the flag and what was expected. Usage errors exit 2; run failures exit 1; OOM results 3. */
#ifndef PULSE_CLI_H
#define PULSE_CLI_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "model.h"

#define EXIT_USAGE 2
#define EXIT_OOM 3

/* Prints "pulse CMD: message" to stderr. */
void cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Parse flag values; on a bad value print an error naming the flag and the range and return -1.
 * Strict: decimal only (no hex, no '+', '-' only where the range is negative), no surrounding
 * spaces, no trailing characters; doubles also refuse inf and nan. */
int cli_int(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out);
int cli_u64(const char *cmd, const char *flag, const char *s, uint64_t hi, uint64_t *out);
int cli_double(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out);
/* A token budget (--budget-tokens and its siblings: --budgets' items, --mam-budget): the same
 * meaning and range in every command, the tokens selected per request and layer besides the
 * sink, window and tail blocks, an integer in [0, CLI_BUDGET_MAX]. cli_budget parses it (as
 * cli_int); cli_budget_blocks checks it is a multiple of the block size `block` (named by
 * block_flag, e.g. "--page-size", or NULL when fixed) with one message for every command. 0, or
 * -1 after the message. */
#define CLI_BUDGET_MAX (1L << 24)
int cli_budget(const char *cmd, const char *flag, const char *s, long *out);
int cli_budget_blocks(const char *cmd, const char *flag, long budget, long block,
                      const char *block_flag);
/* cli_int's and cli_double's strict parses without the message: 0, or -1 (the caller names
 * the flag). */
int cli_parse_long(const char *s, long lo, long hi, long *out);
int cli_parse_double(const char *s, double lo, double hi, double *out);
/* A byte count (decimal, as cli_double reads it) with an optional K, M or G suffix (powers of
 * 1024), e.g. 8K, 2M, 1.5G: >= 1 and at most 1e12. 0, or -1 (no message: the caller names the
 * flag). */
int cli_parse_size(const char *s, size_t *out);
/* Splits the comma list s (the value of flag; any length) and calls each(item, index, ctx) on
 * every item, at most max of them; their count in *n. 0, or -1 after a message naming the flag
 * (too many; an empty list or element: "1,,2", "1,2,", ",1") or each's own (each returns -1
 * after printing one). */
int cli_list(const char *cmd, const char *flag, const char *s, int max, int *n,
             int (*each)(const char *item, int i, void *ctx), void *ctx);
/* The command line argv[1..argc) without --out and its value (--out FILE or --out=FILE), as a
 * JSON array of strings: what a result records of how it was made (config.command), and what a
 * sweep compares to decide that a point's file is that point's. */
json_t *cli_command_json(int argc, char **argv);
/* Loads the JSON file path (the value of flag): the document (the caller's reference), or NULL
 * after a one-line message: "--peer: DIR: is a directory", cannot open, or the parse error. */
json_t *cli_load_json(const char *cmd, const char *flag, const char *path);
/* An output path (the value of flag) that the run can write at its end: not a directory, its
 * directory existing and writable. 0, or -1 after a one-line message, before any work. */
int cli_out_path(const char *cmd, const char *flag, const char *path);
/* A command's output files, checked before any work: each given path (NULL: not given) as
 * cli_out_path, none empty, and no two the same file (the same name, or an existing file
 * reached by two names). 0, or -1 after a one-line message naming the flags. */
int cli_outputs(const char *cmd, int n, const char *const *flags, const char *const *paths);
/* Resolves --model and --backend ("auto" picks cuda when a GPU is usable); NULL after an error. */
const struct model_config *cli_model(const char *cmd, const char *name);
const struct backend *cli_backend(const char *cmd, const char *name);
/* getopt_long over long options only (optstring ""), refusing a flag with a value given twice:
 * then it prints "pulse CMD: --seed given twice" and returns '?', and the cli_unknown_flag that
 * the caller's '?' case calls prints nothing more. A flag without a value may repeat, and so may
 * those named in repeatable ("task,length": flags that accumulate). seen is zeroed by the caller
 * before the loop, but for repeatable; given is indexed by the option's place in opts. */
struct cli_seen {
    const char *repeatable;
    unsigned char given[256];
};
struct option;
int cli_getopt(const char *cmd, int argc, char **argv, const struct option *opts,
               struct cli_seen *seen);
/* getopt_long's message for an unknown flag is replaced by this one (call on '?'). */
void cli_unknown_flag(const char *cmd, int argc, char **argv);
/* After getopt_long: -1 with a message when positional arguments are left, else 0. */
int cli_no_extra_args(const char *cmd, int argc, char **argv);

int cmd_models(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_recall_bench(int argc, char **argv);  /* recall_bench.c */
int cmd_profile_heads(int argc, char **argv); /* profile_heads.c */
int cmd_generate(int argc, char **argv);
int cmd_synth(int argc, char **argv);     /* synth.c */
int cmd_accuracy(int argc, char **argv);  /* accuracy.c */
int cmd_profile(int argc, char **argv);   /* profile.c */
int cmd_compare(int argc, char **argv);   /* compare.c */
int cmd_sweep(int argc, char **argv);     /* sweep.c */
int cmd_reproduce(int argc, char **argv); /* reproduce.c */
int cmd_workload(int argc, char **argv);  /* workload_cmd.c */
/* A part of a grid: the points p with p % count == index (count 1: all). */
struct sweep_shard {
    int index, count;
};
/* --shard I/N: 0 <= I < N <= 4096 (a Slurm array's task id and count). 0, or -1 after a
 * message. */
int cli_shard(const char *cmd, const char *arg, struct sweep_shard *out);
/* Runs the grid g (pulse sweep's GRID.json format; `where` names it in messages): every point
 * of shard sh not done yet, one result file each. dry: print the command lines only. pulse
 * sweep's exit codes. */
int sweep_run(json_t *g, const char *where, int dry, struct sweep_shard sh);
/* The grid's point names, in order (a point's file is out_dir/NAME.json): how many, or -1 for
 * a bad grid or more than max points. */
int sweep_point_names(json_t *g, const char *where, char (*names)[160], int max);

#endif
