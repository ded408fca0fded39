#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "results.h"

void cli_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "pulse %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* Decimal digits with an optional leading '-' (when neg): nothing else, no spaces, no '+',
 * no hex, not empty. */
static int is_decimal(const char *s, int neg)
{
    if (neg && *s == '-') s++;
    if (!*s) return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return 0;
    return 1;
}

/* [-]DIGITS[.DIGITS][e[+-]DIGITS] (or .DIGITS): what strtod reads as a finite decimal number,
 * without its leading spaces, '+', hex, inf or nan. Returns the length of the prefix matched. */
static size_t decimal_number_len(const char *s, int neg)
{
    const char *p = s;
    if (neg && *p == '-') p++;
    size_t digits = 0;
    while (*p >= '0' && *p <= '9')
        p++, digits++;
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9')
            p++, digits++;
    }
    if (!digits) return 0;
    if (*p == 'e' || *p == 'E') {
        const char *q = p + 1;
        if (*q == '-' || *q == '+') q++;
        if (*q < '0' || *q > '9') return 0;
        while (*q >= '0' && *q <= '9')
            q++;
        p = q;
    }
    return (size_t)(p - s);
}

int cli_parse_long(const char *s, long lo, long hi, long *out)
{
    if (!is_decimal(s, lo < 0)) return -1;
    errno = 0;
    long v = strtol(s, NULL, 10);
    if (errno || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int cli_int(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out)
{
    if (cli_parse_long(s, lo, hi, out)) {
        cli_error(cmd, "%s: '%s' is not an integer in [%ld, %ld] (decimal)", flag, s, lo, hi);
        return -1;
    }
    return 0;
}

json_t *cli_command_json(int argc, char **argv)
{
    json_t *a = json_array();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--out")) {
            i++;
            continue;
        }
        if (!strncmp(argv[i], "--out=", 6)) continue;
        json_array_append_new(a, json_string(argv[i]));
    }
    return a;
}

int cli_shard(const char *cmd, const char *arg, struct sweep_shard *out)
{
    const char *slash = strchr(arg, '/');
    char a[32];
    long i, n;
    if (!slash || (size_t)(slash - arg) >= sizeof a ||
        (memcpy(a, arg, (size_t)(slash - arg)), a[slash - arg] = 0,
         cli_parse_long(slash + 1, 1, 4096, &n) || cli_parse_long(a, 0, n - 1, &i))) {
        cli_error(cmd, "--shard: '%s' is not I/N with 0 <= I < N <= 4096", arg);
        return -1;
    }
    out->index = (int)i, out->count = (int)n;
    return 0;
}

int cli_budget(const char *cmd, const char *flag, const char *s, long *out)
{
    return cli_int(cmd, flag, s, 0, CLI_BUDGET_MAX, out);
}

int cli_budget_blocks(const char *cmd, const char *flag, long budget, long block,
                      const char *block_flag)
{
    if (budget % block == 0) return 0;
    cli_error(cmd, "%s: %ld is not a multiple of the block size %ld%s%s%s", flag, budget, block,
              block_flag ? " (" : "", block_flag ? block_flag : "", block_flag ? ")" : "");
    return -1;
}

int cli_u64(const char *cmd, const char *flag, const char *s, uint64_t hi, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = is_decimal(s, 0) ? strtoull(s, &end, 10) : 0;
    if (!is_decimal(s, 0) || errno || v > hi) {
        cli_error(cmd, "%s: '%s' is not an integer in [0, %llu] (decimal)", flag, s,
                  (unsigned long long)hi);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_double(const char *s, double lo, double hi, double *out)
{
    size_t n = decimal_number_len(s, 1);
    errno = 0;
    double v = n && !s[n] ? strtod(s, NULL) : NAN;
    if (!n || s[n] || errno || !isfinite(v) || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int cli_double(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out)
{
    if (cli_parse_double(s, lo, hi, out) == 0) return 0;
    cli_error(cmd, "%s: '%s' is not a number in [%g, %g] (decimal)", flag, s, lo, hi);
    return -1;
}

int cli_parse_size(const char *s, size_t *out)
{
    size_t n = decimal_number_len(s, 0);
    if (!n) return -1;
    double v = strtod(s, NULL);
    const char *end = s + n;
    double mul = *end == 'K' || *end == 'k'   ? 1024.0
                 : *end == 'M' || *end == 'm' ? 1048576.0
                 : *end == 'G' || *end == 'g' ? 1073741824.0
                                              : 1.0;
    if (mul > 1) end++;
    if (*end || !(v >= 1) || v * mul > 1e12) return -1;
    *out = (size_t)(v * mul);
    return 0;
}

int cli_list(const char *cmd, const char *flag, const char *s, int max, int *n,
             int (*each)(const char *item, int i, void *ctx), void *ctx)
{
    *n = 0;
    if (!*s) return cli_error(cmd, "%s: empty list", flag), -1;
    char *buf = strdup(s);
    if (!buf) return cli_error(cmd, "%s: out of memory", flag), -1;
    int rc = 0;
    for (char *tok = buf;;) {
        char *comma = strchr(tok, ',');
        if (comma) *comma = 0;
        if (!*tok) {
            cli_error(cmd, "%s: '%s' has an empty element (item %d)", flag, s, *n + 1);
            rc = -1;
            break;
        }
        if (*n >= max) {
            cli_error(cmd, "%s: more than %d values", flag, max);
            rc = -1;
            break;
        }
        if (each(tok, (*n)++, ctx)) {
            rc = -1;
            break;
        }
        if (!comma) break;
        tok = comma + 1;
    }
    free(buf);
    return rc;
}

int cli_out_path(const char *cmd, const char *flag, const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        cli_error(cmd, "%s: %s: is a directory", flag, path);
        return -1;
    }
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (access(dir, W_OK) != 0) {
        cli_error(cmd, "%s: %s: cannot write in %s (%s)", flag, path, dir, strerror(errno));
        return -1;
    }
    return 0;
}

int cli_outputs(const char *cmd, int n, const char *const *flags, const char *const *paths)
{
    for (int i = 0; i < n; i++) {
        if (!paths[i]) continue;
        if (!*paths[i]) {
            cli_error(cmd, "%s: an empty path", flags[i]);
            return -1;
        }
        if (cli_out_path(cmd, flags[i], paths[i])) return -1;
        for (int j = 0; j < i; j++) {
            if (!paths[j]) continue;
            struct stat a, b;
            const int same = !strcmp(paths[i], paths[j]) ||
                             (stat(paths[i], &a) == 0 && stat(paths[j], &b) == 0 &&
                              a.st_dev == b.st_dev && a.st_ino == b.st_ino);
            if (same) {
                cli_error(cmd, "%s and %s: both write %s", flags[j], flags[i], paths[i]);
                return -1;
            }
        }
    }
    return 0;
}

json_t *cli_load_json(const char *cmd, const char *flag, const char *path)
{
    json_t *j;
    char err[512];
    if (results_read_json(path, 0, &j, err, sizeof err) != PULSE_OK)
        cli_error(cmd, "%s: %s", flag, err);
    return j;
}

const struct model_config *cli_model(const char *cmd, const char *name)
{
    const struct model_config *c = model_config_find(name);
    if (!c) cli_error(cmd, "--model: unknown model '%s' (known: %s)", name, model_config_names());
    return c;
}

const struct backend *cli_backend(const char *cmd, const char *name)
{
    if (strcmp(name, "auto") == 0) name = backend_cuda_available() ? "cuda" : "cpu";
    const struct backend *be = backend_find(name);
    if (!be) {
        cli_error(cmd, "--backend: unknown backend '%s' (this build has: %s)", name,
                  backend_names());
        return NULL;
    }
    if (be->mem == MEM_DEVICE && !backend_cuda_available()) {
        cli_error(cmd, "--backend: '%s' needs a CUDA GPU and none is usable here", name);
        return NULL;
    }
    return be;
}

/* Set when cli_getopt returned '?' after its own message. */
static int cli_reported;

int cli_getopt(const char *cmd, int argc, char **argv, const struct option *opts,
               struct cli_seen *seen)
{
    int li = -1;
    int c = getopt_long(argc, argv, "", opts, &li);
    if (c == -1 || c == '?' || li < 0 || (size_t)li >= sizeof seen->given ||
        opts[li].has_arg == no_argument)
        return c;
    if (seen->repeatable) {
        size_t n = strlen(opts[li].name);
        for (const char *r = seen->repeatable; (r = strstr(r, opts[li].name)); r += n)
            if ((r == seen->repeatable || r[-1] == ',') && (r[n] == ',' || !r[n])) return c;
    }
    if (seen->given[li]++) {
        cli_error(cmd, "--%s given twice", opts[li].name);
        cli_reported = 1;
        return '?';
    }
    return c;
}

void cli_unknown_flag(const char *cmd, int argc, char **argv)
{
    if (cli_reported) {
        cli_reported = 0;
        return;
    }
    const char *bad = (optind - 1 < argc && optind >= 1) ? argv[optind - 1] : "?";
    cli_error(cmd, "unknown or incomplete option '%s' (see pulse %s --help)", bad, cmd);
}

int cli_no_extra_args(const char *cmd, int argc, char **argv)
{
    if (optind >= argc) return 0;
    cli_error(cmd, "unexpected argument '%s'", argv[optind]);
    return -1;
}
