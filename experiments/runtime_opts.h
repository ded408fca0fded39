/* The runtime's shared options: ONE declarative table (runtime_opts.c) of the command-line flags
 * that tune the runtime's params structs: the recall engines (struct recall_params), the host
 * pool's pinning (struct mem_pin_params), the engine (struct engine_params), the offload runtime
 * (struct offload_params) and the serving loop (struct serve_params). Each entry gives the flag,
 * the value it takes (an integer in a range, or one of some words), the field it sets, its help
 * line and the environment variable it replaces. Every subcommand that builds those structs
 * takes the groups it uses from the table: their flags (getopt), help, checks, the fields, and
 * the resolved values in its result's config.options. The defaults are the structs' own
 * (recall_params_init, mem_pin_params_default, offload_params_init, serve_params_init), which
 * read no environment.
 *
 * The environment variables these flags replace are no longer read: one that is set stops the
 * command before any work (runtime_opts_refuse_env), naming its flag. */
#ifndef PULSE_RUNTIME_OPTS_H
#define PULSE_RUNTIME_OPTS_H

#include <jansson.h>
#include <stdio.h>

#include "engine.h"
#include "offload.h"
#include "serve.h"

/* The groups of the table; a command names those it takes (a bit mask). */
enum runtime_opts_group {
    RT_RECALL = 1,  /* offload.recall: the recall engines' tuning */
    RT_PIN = 2,     /* offload.pin: how the host pool is pinned */
    RT_ENGINE = 4,  /* engine: kernels, graphs, the cpu thread pool */
    RT_OFFLOAD = 8, /* offload: the offload runtime's own */
    RT_SERVE = 16,  /* serve: the serving loop */
    RT_ALL = 31
};

/* What the options set, each group in the struct it tunes (only the table's fields matter). */
struct runtime_opts {
    struct engine_params engine;
    struct offload_params offload; /* with .recall (RT_RECALL) and .pin (RT_PIN) */
    struct serve_params serve;
};

/* getopt_long codes of the table's options: RT_OPT_BASE + the entry's index. */
#define RT_OPT_BASE 3000

/* The defaults, resolved (the cpu threads and the attention plan as numbers). */
void runtime_opts_init(struct runtime_opts *o);
/* own (a getopt_long array ending in {0}) followed by the options of `groups`, into out (room for
 * cap entries, the {0} end included): 0, or -1 when they do not fit. */
struct option;
int runtime_opts_getopt(const struct option *own, int groups, struct option *out, int cap);
/* 1 when c is one of the table's getopt codes. */
int runtime_opts_code(int c);
/* The options of `groups` in the table. */
int runtime_opts_count(int groups);
/* The flag (without "--") and the group of the table's option of code c (NULL, 0: none). */
const char *runtime_opts_name(int c);
int runtime_opts_group(int c);
/* Parses the value of the table's option of code c into o: 0, or -1 after a one-line message
 * "pulse CMD: --zc-blocks: '0' is not an integer in [1, 65535] (decimal)" or "...: 'x' is not
 * alloc or register". */
int runtime_opts_flag(const char *cmd, struct runtime_opts *o, int c, const char *arg);
/* Parses "--NAME" (or "NAME") with its value as runtime_opts_flag does; -2 when NAME is not in
 * the table's groups (no message). For tests. */
int runtime_opts_set(const char *cmd, struct runtime_opts *o, int groups, const char *name,
                     const char *arg);
/* The groups' help lines, each with its default as o has it. */
void runtime_opts_usage(FILE *f, int groups, const struct runtime_opts *o);
/* The groups' resolved values as {"zc_blocks": 4, "pin": "register", "layer_graphs": "on",
 * ...}: what config.options records. */
json_t *runtime_opts_json(const struct runtime_opts *o, int groups);
/* The table's fields of each group into the params a command builds (the other fields are left
 * as they are): engine_params (RT_ENGINE), offload_params (RT_OFFLOAD, and RT_RECALL into
 * p->recall, RT_PIN into p->pin), serve_params (RT_SERVE). */
void runtime_opts_engine(const struct runtime_opts *o, struct engine_params *p);
void runtime_opts_offload(const struct runtime_opts *o, struct offload_params *p);
void runtime_opts_serve(const struct runtime_opts *o, struct serve_params *p);
/* A replaced environment variable that is set: -1 after "pulse: PULSE_ZC_BLOCKS is no longer
 * read: give --zc-blocks N on the command line (and unset it)"; 0 when none is set. */
int runtime_opts_refuse_env(void);

#endif
