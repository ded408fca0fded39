#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "pulse %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int cli_int(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) {
        cli_error(cmd, "%s: '%s' is not an integer in [%ld, %ld]", flag, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_u64(const char *cmd, const char *flag, const char *s, uint64_t hi, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || errno || s[0] == '-' || v > hi) {
        cli_error(cmd, "%s: '%s' is not an integer in [0, %llu]", flag, s, (unsigned long long)hi);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_double(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v < lo || v > hi) {
        cli_error(cmd, "%s: '%s' is not a number in [%g, %g]", flag, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_size(const char *s, size_t *out)
{
    char *end;
    double v = strtod(s, &end);
    double mul = *end == 'K' || *end == 'k'   ? 1024.0
                 : *end == 'M' || *end == 'm' ? 1048576.0
                 : *end == 'G' || *end == 'g' ? 1073741824.0
                                              : 1.0;
    if (mul > 1) end++;
    if (end == s || *end || !(v >= 1) || v * mul > 1e12) return -1;
    *out = (size_t)(v * mul);
    return 0;
}

int cli_list(const char *cmd, const char *flag, const char *s, int max, int *n,
             int (*each)(const char *item, int i, void *ctx), void *ctx)
{
    char buf[512];
    if (strlen(s) >= sizeof buf) return cli_error(cmd, "%s: list too long", flag), -1;
    strcpy(buf, s);
    *n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n >= max) return cli_error(cmd, "%s: more than %d values", flag, max), -1;
        if (each(tok, (*n)++, ctx)) return -1;
    }
    if (!*n) return cli_error(cmd, "%s: empty list", flag), -1;
    return 0;
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

void cli_unknown_flag(const char *cmd, int argc, char **argv)
{
    const char *bad = (optind - 1 < argc && optind >= 1) ? argv[optind - 1] : "?";
    cli_error(cmd, "unknown or incomplete option '%s' (see pulse %s --help)", bad, cmd);
}

int cli_no_extra_args(const char *cmd, int argc, char **argv)
{
    if (optind >= argc) return 0;
    cli_error(cmd, "unexpected argument '%s'", argv[optind]);
    return -1;
}
