/* pulse sweep: a grid of pulse run's flag values, run point by point in this process, one
 * result file per point, resumable.
 *
 * GRID.json:
 *   {"out_dir": "results/ablation",                 where the points' files go (made if absent)
 *    "base": {"--backend": "cpu", "--model": "tiny", "--workload": "uniform:256:4"},
 *    "axes": {"--policy": ["arkvale", "pulseinfer"], "--budget-tokens": [32, 64],
 *             "--no-irq": [false, true]}}
 * Every combination of the axes' values (the last axis varies fastest) is one point: pulse run
 * with the base flags and the point's, writing OUT_DIR/<name>.json, where the name joins the
 * point's flag=value pairs ("policy=arkvale,budget-tokens=32,no-irq=true"). Instead of or
 * beside the axes, "variants": [{"name": "+solohead", "--flag": value, ...}, ...] lists
 * configurations that are not a cross product (an ablation adding one mechanism at a time):
 * each variant's flags join the base, its name leads the point's name, and the axes cross
 * every variant. A value is a string
 * or a number; true and false switch a flag without a value on or off. A point is done, and
 * skipped, when its file is an ok result of the point's own command line (config.command: the
 * flags without --out); a missing file, a failed point's (status error or oom), an unreadable
 * one or one of another command line is run again (a result is written whole, through a
 * rename, so an interrupted sweep leaves none half written). Point names must be unique after
 * their characters are folded and cut: a grid where two points would write one file is refused
 * before anything runs. A table of every point's outcome ends it. Defaults the command line
 * does not name (a policy's, a build's) are not in the comparison: after such a change, start
 * a new out_dir. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "common.h"
#include "host_pool.h"
#include "results.h"

#define CMD "sweep"
#define MAX_AXES 8
#define MAX_POINTS 4096
#define MAX_ARGS 96

static const char usage[] =
    "usage: pulse sweep GRID.json [--dry-run] [--shard I/N]\n"
    "  Runs every point of the grid (pulse run with base + the point's flags), one result\n"
    "  file per point in out_dir; a point whose file is an ok result of the same command line\n"
    "  is skipped (resumable), any other is run again; two points of one file name are refused\n"
    "  GRID.json: {\"out_dir\": DIR, \"base\": {\"--flag\": value, ...},\n"
    "              \"axes\": {\"--flag\": [value, ...], ...},\n"
    "              \"variants\": [{\"name\": N, \"--flag\": value, ...}, ...]}\n"
    "  (axes, variants or both; the axes cross every variant)\n"
    "  a value is a string or a number; true / false turn a flag without a value on / off\n"
    "  --dry-run   print each point's command line, run nothing\n"
    "  --shard I/N only the points p with p % N == I (0 <= I < N): N processes, machines or\n"
    "              GPUs share one grid (a Slurm array: --shard $SLURM_ARRAY_TASK_ID/N over a\n"
    "              shared out_dir); the table shows every point written so far\n"
    "exit: 0 every point ok or skipped, 1 a point failed, 2 bad usage or grid\n";

/* A flag's value as text into buf: 0, 1 for a switch that is off (left out), -1 when it is
 * neither a string, a number nor a boolean. */
static int value_text(json_t *v, char *buf, size_t len, int *is_switch)
{
    *is_switch = 0;
    if (json_is_string(v))
        snprintf(buf, len, "%s", json_string_value(v));
    else if (json_is_integer(v))
        snprintf(buf, len, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        snprintf(buf, len, "%.15g", json_real_value(v)); /* the decimal it was written as */
    else if (json_is_boolean(v)) {
        *is_switch = 1;
        snprintf(buf, len, "%s", json_is_true(v) ? "true" : "false");
        return json_is_true(v) ? 0 : 1;
    } else
        return -1;
    return 0;
}

#define MAX_VARIANTS 64

struct grid {
    const char *out_dir;
    json_t *base, *axes, *variants; /* axes, variants: NULL when absent */
    const char *axis_flag[MAX_AXES];
    json_t *axis_vals[MAX_AXES];
    int n_axes, n_variants; /* n_variants 0: none (one implicit, empty) */
    long n_points;
};

static int check_flag(const char *flag, const char *where)
{
    if (strncmp(flag, "--", 2) || !flag[2] || !strcmp(flag, "--out")) {
        cli_error(CMD, "%s: '%s' is not a pulse run flag (--name; --out is the sweep's)", where,
                  flag);
        return -1;
    }
    return 0;
}

static int read_grid(json_t *g, const char *path, struct grid *gr)
{
    memset(gr, 0, sizeof *gr);
    gr->out_dir = json_string_value(json_object_get(g, "out_dir"));
    gr->base = json_object_get(g, "base");
    gr->axes = json_object_get(g, "axes");
    gr->variants = json_object_get(g, "variants");
    const int has_axes = gr->axes && json_object_size(gr->axes) > 0;
    if (!json_is_object(g) || !gr->out_dir || !*gr->out_dir ||
        (gr->base && !json_is_object(gr->base)) || (gr->axes && !json_is_object(gr->axes)) ||
        (gr->axes && json_object_size(gr->axes) > MAX_AXES) ||
        (gr->variants && (!json_is_array(gr->variants) || json_array_size(gr->variants) == 0 ||
                          json_array_size(gr->variants) > MAX_VARIANTS)) ||
        (!has_axes && !gr->variants)) {
        cli_error(CMD,
                  "%s: expected {\"out_dir\": DIR, \"base\": {flags}, \"axes\": {up to %d flags: "
                  "[values]}, \"variants\": [up to %d {\"name\": N, flags}]}, with axes or "
                  "variants",
                  path, MAX_AXES, MAX_VARIANTS);
        return -1;
    }
    const char *k;
    json_t *v;
    char buf[256];
    int sw;
    if (gr->base) json_object_foreach(gr->base, k, v)
        {
            if (check_flag(k, "base")) return -1;
            if (value_text(v, buf, sizeof buf, &sw) < 0) {
                cli_error(CMD, "base: %s: a value is a string, a number or a boolean", k);
                return -1;
            }
            if (json_object_get(gr->axes, k)) {
                cli_error(CMD, "%s is both in base and an axis", k);
                return -1;
            }
        }
    gr->n_points = 1;
    size_t vi;
    json_t *var;
    if (gr->variants) json_array_foreach(gr->variants, vi, var)
        {
            const char *name = json_string_value(json_object_get(var, "name"));
            if (!json_is_object(var) || !name || !*name || strlen(name) > 48) {
                cli_error(CMD, "variants[%zu]: expected {\"name\": 1 to 48 characters, flags}", vi);
                return -1;
            }
            for (size_t vj = 0; vj < vi; vj++)
                if (!strcmp(name, json_string_value(
                                      json_object_get(json_array_get(gr->variants, vj), "name")))) {
                    cli_error(CMD, "variants[%zu]: the name '%s' is taken", vi, name);
                    return -1;
                }
            json_object_foreach(var, k, v)
            {
                if (!strcmp(k, "name")) continue;
                if (check_flag(k, "variants")) return -1;
                if (value_text(v, buf, sizeof buf, &sw) < 0) {
                    cli_error(CMD, "variants[%zu]: %s: a value is a string, a number or a boolean",
                              vi, k);
                    return -1;
                }
                if ((gr->base && json_object_get(gr->base, k)) ||
                    (gr->axes && json_object_get(gr->axes, k))) {
                    cli_error(CMD, "variants[%zu]: %s is also in base or an axis", vi, k);
                    return -1;
                }
            }
            gr->n_variants++;
        }
    if (gr->n_variants) gr->n_points = gr->n_variants;
    if (gr->axes) json_object_foreach(gr->axes, k, v)
        {
            if (check_flag(k, "axes")) return -1;
            if (!json_is_array(v) || json_array_size(v) == 0) {
                cli_error(CMD, "axes: %s: expected a non-empty array of values", k);
                return -1;
            }
            size_t i;
            json_t *x;
            json_array_foreach(v, i, x) if (value_text(x, buf, sizeof buf, &sw) < 0)
            {
                cli_error(CMD, "axes: %s[%zu]: a value is a string, a number or a boolean", k, i);
                return -1;
            }
            gr->axis_flag[gr->n_axes] = k;
            gr->axis_vals[gr->n_axes++] = v;
            gr->n_points *= (long)json_array_size(v);
            if (gr->n_points > MAX_POINTS) {
                cli_error(CMD, "the grid has more than %d points", MAX_POINTS);
                return -1;
            }
        }
    return 0;
}

/* Appends flag (and its value unless a switch) to argv; a switch that is off adds nothing. */
static int add_flag(char **argv, int *argc, char *store, size_t *used, size_t cap, const char *flag,
                    json_t *v)
{
    char buf[512];
    int sw;
    const int off = value_text(v, buf, sizeof buf, &sw);
    if (off) return 0;
    const char *parts[2] = {flag, buf};
    for (int k = 0; k < (sw ? 1 : 2); k++) {
        const size_t n = strlen(parts[k]) + 1;
        if (*argc >= MAX_ARGS - 3 || *used + n > cap) return -1;
        memcpy(store + *used, parts[k], n);
        argv[(*argc)++] = store + *used;
        *used += n;
    }
    return 0;
}

/* Points of the axes alone (1 without axes). */
static long axis_points(const struct grid *gr)
{
    long n = 1;
    for (int a = 0; a < gr->n_axes; a++)
        n *= (long)json_array_size(gr->axis_vals[a]);
    return n;
}

/* Point p's value of each axis, the last axis varying fastest (variants vary slowest). */
static json_t *point_value(const struct grid *gr, long p, int axis)
{
    p %= axis_points(gr);
    for (int a = gr->n_axes - 1; a > axis; a--)
        p /= (long)json_array_size(gr->axis_vals[a]);
    return json_array_get(gr->axis_vals[axis],
                          (size_t)(p % (long)json_array_size(gr->axis_vals[axis])));
}

/* Point p's variant, NULL without variants. */
static json_t *point_variant(const struct grid *gr, long p)
{
    return gr->n_variants ? json_array_get(gr->variants, (size_t)(p / axis_points(gr))) : NULL;
}

/* Point p's name ("variant,flag=value,...", characters outside [A-Za-z0-9._=,+-] as '_'). */
static void point_name(const struct grid *gr, long p, char *name, size_t len)
{
    size_t at = 0;
    name[0] = 0;
    json_t *var = point_variant(gr, p);
    if (var)
        at += (size_t)snprintf(name, len, "%s", json_string_value(json_object_get(var, "name")));
    for (int a = 0; a < gr->n_axes; a++) {
        char buf[256];
        int sw;
        value_text(point_value(gr, p, a), buf, sizeof buf, &sw);
        at += (size_t)snprintf(name + at, at < len ? len - at : 0, "%s%s=%s", at ? "," : "",
                               gr->axis_flag[a] + 2, buf);
    }
    for (char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              strchr("._=,+-", *c)))
            *c = '_';
}

/* Whether the file at path is point's result, done: an ok result of the command line av (its
 * config.command). Otherwise why not into why. */
static int point_done(const char *path, int ac, char **av, char *why, size_t len)
{
    struct stat st;
    if (stat(path, &st) != 0) return snprintf(why, len, "missing"), 0;
    json_error_t je;
    json_t *r = json_load_file(path, 0, &je);
    if (!r) return snprintf(why, len, "unreadable (%s)", je.text), 0;
    const char *status = json_string_value(json_object_get(r, "status"));
    json_t *want = cli_command_json(ac, av);
    const int same = json_equal(json_object_get(json_object_get(r, "config"), "command"), want);
    const int ok = status && !strcmp(status, "ok");
    if (!ok)
        snprintf(why, len, "its status is %s", status ? status : "missing");
    else if (!same)
        snprintf(why, len, "it is the result of another command line");
    json_decref(want);
    json_decref(r);
    return ok && same;
}

/* 0 when every point's name is its own; else -1 after naming two points of one name. */
static int names_unique(char (*names)[160], long n)
{
    for (long p = 0; p < n; p++)
        for (long q = 0; q < p; q++)
            if (!strcmp(names[p], names[q])) {
                cli_error(CMD,
                          "points %ld and %ld would both write %s.json (names are folded to "
                          "[A-Za-z0-9._=,+-] and cut at 159 characters): make them differ",
                          q + 1, p + 1, names[p]);
                return -1;
            }
    return 0;
}

/* The table's line of a point's result file. */
static void summary_line(const char *name, const char *path, const char *what)
{
    json_error_t je;
    json_t *r = json_load_file(path, 0, &je);
    json_t *m = r ? json_object_get(r, "metrics") : NULL;
    const char *status = r ? json_string_value(json_object_get(r, "status")) : NULL;
    double tps = json_number_value(json_object_get(m, "output_throughput"));
    double tpot = json_number_value(json_object_get(m, "mean_tpot_ms"));
    double ratio = json_number_value(json_object_get(json_object_get(m, "step"), "ratio_to_floor"));
    printf("%-56.56s %-8s %-6s %10.1f %10.3f %8.2f\n", name, what, status ? status : "-", tps, tpot,
           ratio);
    json_decref(r);
}

int sweep_run(json_t *g, const char *where, int dry, struct sweep_shard sh)
{
    struct grid gr;
    if (read_grid(g, where, &gr)) return EXIT_USAGE;
    if (!dry && pulse_mkdirs(gr.out_dir) != PULSE_OK) {
        cli_error(CMD, "out_dir: %s: cannot make it (%s)", gr.out_dir, strerror(errno));
        return EXIT_USAGE;
    }
    static char names[MAX_POINTS][160];
    static char what[MAX_POINTS][16];
    int failed = 0, ran = 0, skipped = 0;
    for (long p = 0; p < gr.n_points; p++)
        point_name(&gr, p, names[p], sizeof names[p]);
    if (names_unique(names, gr.n_points)) return EXIT_USAGE;
    int others = 0;
    for (long p = 0; p < gr.n_points; p++) {
        char path[4096], store[8192];
        if (sh.count > 1 && p % sh.count != sh.index) { /* another shard's */
            snprintf(what[p], sizeof what[p], "shard %d", (int)(p % sh.count) % 10000);
            others++;
            continue;
        }
        char *av[MAX_ARGS];
        int ac = 0;
        size_t used = 0;
        if (snprintf(path, sizeof path, "%s/%s.json", gr.out_dir, names[p]) >= (int)sizeof path) {
            cli_error(CMD, "out_dir: %s: too long a path", gr.out_dir);
            return EXIT_USAGE;
        }
        av[ac++] = "run";
        const char *k;
        json_t *v, *var = point_variant(&gr, p);
        int bad = 0;
        if (gr.base)
            json_object_foreach(gr.base, k, v) bad |=
                add_flag(av, &ac, store, &used, sizeof store, k, v);
        if (var) json_object_foreach(var, k, v)
            {
                if (strcmp(k, "name")) bad |= add_flag(av, &ac, store, &used, sizeof store, k, v);
            }
        for (int a = 0; a < gr.n_axes; a++)
            bad |= add_flag(av, &ac, store, &used, sizeof store, gr.axis_flag[a],
                            point_value(&gr, p, a));
        av[ac++] = "--out";
        av[ac++] = path;
        av[ac] = NULL;
        if (bad) {
            cli_error(CMD, "point %s: its command line is too long", names[p]);
            return EXIT_USAGE;
        }
        if (dry) {
            for (int i = 0; i < ac; i++)
                printf("%s%s", i ? " " : "pulse ", av[i]);
            printf("\n");
            continue;
        }
        char why[256];
        if (point_done(path, ac, av, why, sizeof why)) { /* an earlier sweep's: resumed past it */
            snprintf(what[p], sizeof what[p], "skipped");
            skipped++;
            continue;
        }
        fflush(stdout); /* the last point's lines before this one's header */
        fprintf(stderr, "pulse sweep: point %ld of %ld: %s%s%s\n", p + 1, gr.n_points, names[p],
                strcmp(why, "missing") ? ": run again, " : "", strcmp(why, "missing") ? why : "");
        const double t0 = pulse_now();
        const int code = cmd_run(ac, av);
        fflush(stdout);
        /* the point's whole wall time: set-up (pool, calibration, prompt KV) and the run */
        fprintf(stderr, "pulse sweep: point %ld of %ld: %.1f s\n", p + 1, gr.n_points,
                pulse_now() - t0);
        snprintf(what[p], sizeof what[p], "%s", code ? "FAILED" : "ran");
        failed += code != 0;
        ran++;
    }
    if (!dry) {
        printf("%-56s %-8s %-6s %10s %10s %8s\n", "point", "", "status", "tok/s", "TPOT ms",
               "/floor");
        for (long p = 0; p < gr.n_points; p++) {
            char path[4096];
            if (snprintf(path, sizeof path, "%s/%s.json", gr.out_dir, names[p]) < (int)sizeof path)
                summary_line(names[p], path, what[p]);
        }
        printf("%ld points: %d ran, %d skipped (done: an ok result of the same command line), %d "
               "failed",
               gr.n_points, ran, skipped, failed);
        if (sh.count > 1) printf(", %d of the other %d shards", others, sh.count - 1);
        printf("\n");
    }
    return failed ? 1 : 0;
}

int sweep_point_names(json_t *g, const char *where, char (*names)[160], int max)
{
    struct grid gr;
    if (read_grid(g, where, &gr) || gr.n_points > max) return -1;
    for (long p = 0; p < gr.n_points; p++)
        point_name(&gr, p, names[p], 160);
    return (int)gr.n_points;
}

int cmd_sweep(int argc, char **argv)
{
    static const struct option opts[] = {{"dry-run", no_argument, 0, 'n'},
                                         {"shard", required_argument, 0, 's'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int dry = 0, c;
    struct sweep_shard sh = {0, 1};
    opterr = 0;
    optind = 1;
    struct cli_seen seen = {0};
    while ((c = cli_getopt(CMD, argc, argv, opts, &seen)) != -1) {
        if (c == 'n')
            dry = 1;
        else if (c == 's') {
            if (cli_shard(CMD, optarg, &sh)) return EXIT_USAGE;
        } else if (c == 'h')
            return fputs(usage, stdout), 0;
        else
            return cli_unknown_flag(CMD, argc, argv), EXIT_USAGE;
    }
    if (argc - optind != 1) {
        cli_error(CMD, "expected GRID.json (see pulse sweep --help)");
        return EXIT_USAGE;
    }
    const char *grid_path = argv[optind];
    json_t *g = cli_load_json(CMD, "grid", grid_path);
    if (!g) return EXIT_USAGE;
    host_pool_keep(1); /* the points' host pools: pinned once, reused */
    const int rc = sweep_run(g, grid_path, dry, sh);
    host_pool_keep(0);
    json_decref(g);
    return rc;
}
