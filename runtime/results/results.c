#include "results.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

extern const char *pulse_git_commit; /* generated at build time */
extern int pulse_git_dirty;

void results_set_real(json_t *obj, const char *key, double v)
{
    json_object_set_new(obj, key, isfinite(v) ? json_real(v) : json_null());
}

/* The diagnostic PULSE_* variables set in the environment (common.h), as they are set: they
 * change no result, but a run made with one (PULSE_SYNC, PULSE_RECALL_FAULT) says so. The
 * tuning a run ran with is its config's (config.options). */
static json_t *pulse_diag_vars(void)
{
    json_t *o = json_object();
    for (int d = 0; d < PULSE_DIAGS; d++) {
        const char *v = pulse_diag_raw((enum pulse_diag)d);
        if (v) json_object_set_new(o, pulse_diag_name((enum pulse_diag)d), json_string(v));
    }
    return o;
}

json_t *results_new(const char *experiment)
{
    json_t *r = json_object();
    char date[32], host[128] = "";
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    gethostname(host, sizeof host - 1);
    struct utsname u;
    uname(&u);
    json_object_set_new(r, "schema_version", json_integer(PULSE_SCHEMA_VERSION));
    json_object_set_new(r, "experiment", json_string(experiment));
    json_object_set_new(r, "date", json_string(date));
    json_object_set_new(r, "tool",
                        json_pack("{s:s, s:s, s:b}", "name", "pulse", "git_commit",
                                  pulse_git_commit, "git_dirty", pulse_git_dirty));
    json_object_set_new(r, "env",
                        json_pack("{s:s, s:s, s:s, s:i}", "host", host, "os", u.sysname, "kernel",
                                  u.release, "cpus", (int)sysconf(_SC_NPROCESSORS_ONLN)));
    json_object_set_new(results_env(r), "pulse_variables", pulse_diag_vars());
    json_object_set_new(r, "status", json_string("ok"));
    return r;
}

json_t *results_env(json_t *r)
{
    return json_object_get(r, "env");
}

void results_add_dist_ms(json_t *obj, const char *name, const struct dist_summary *d)
{
    static const char *keys[] = {"mean", "median", "std", "p90", "p99"};
    double vals[] = {d->mean, d->median, d->std, d->p90, d->p99};
    char key[64];
    for (size_t i = 0; i < PULSE_ARRAY_LEN(keys); i++) {
        snprintf(key, sizeof key, "%s_%s_ms", keys[i], name);
        results_set_real(obj, key, d->n ? vals[i] * 1e3 : NAN);
    }
}

int results_write_file(const char *path, int (*emit)(FILE *f, void *arg), void *arg, char *err,
                       size_t errlen)
{
    struct stat st;
    const int through = lstat(path, &st) == 0 && !S_ISREG(st.st_mode);
    if (through && S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s: is a directory", path);
        return PULSE_ERR_IO;
    }
    char tmp[4096];
    if (!through &&
        snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp) {
        snprintf(err, errlen, "%s: path too long", path);
        return PULSE_ERR_IO;
    }
    const char *target = through ? path : tmp;
    FILE *f = NULL;
    if (through && S_ISFIFO(st.st_mode)) { /* a FIFO without a reader would block the open */
        const int fd = open(path, O_WRONLY | O_NONBLOCK);
        if (fd < 0 && errno == ENXIO) {
            snprintf(err, errlen, "%s: a FIFO with no reader: not written", path);
            return PULSE_ERR_IO;
        }
        if (fd >= 0 &&
            (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0 || !(f = fdopen(fd, "w"))))
            close(fd);
    } else {
        f = fopen(target, "w");
    }
    if (!f) {
        snprintf(err, errlen, "%s: cannot %s (%s)", path, through ? "open" : "write",
                 strerror(errno));
        return PULSE_ERR_IO;
    }
    errno = 0;
    int bad = emit(f, arg) != 0;
    bad |= fflush(f) != 0 || ferror(f);
    const int e = errno;
    bad |= fclose(f) != 0;
    if (bad) {
        snprintf(err, errlen, "%s: cannot write (%s)", path, strerror(e ? e : errno ? errno : EIO));
        if (!through) remove(tmp);
        return PULSE_ERR_IO;
    }
    if (!through && rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s: cannot rename into place (%s)", path, strerror(errno));
        remove(tmp);
        return PULSE_ERR_IO;
    }
    return PULSE_OK;
}

struct json_emit {
    const json_t *r;
    size_t flags;
};

static int emit_json(FILE *f, void *arg)
{
    const struct json_emit *j = arg;
    return json_dumpf(j->r, f, j->flags);
}

int results_write_json(const json_t *r, const char *path, size_t flags, char *err, size_t errlen)
{
    struct json_emit j = {r, flags};
    return results_write_file(path, emit_json, &j, err, errlen);
}

int results_write(const json_t *r, const char *path, char *err, size_t errlen)
{
    return results_write_json(r, path, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(9),
                              err, errlen);
}

int results_write_exact(const json_t *r, const char *path, char *err, size_t errlen)
{
    /* JSON_REAL_PRECISION(0), the default: 17 significant digits */
    return results_write_json(r, path, JSON_INDENT(2) | JSON_SORT_KEYS, err, errlen);
}

int results_read_json(const char *path, size_t flags, json_t **out, char *err, size_t errlen)
{
    *out = NULL;
    const int rc = pulse_check_regular(path, "JSON file", err, errlen);
    if (rc != PULSE_OK) return rc;
    json_error_t je;
    *out = json_load_file(path, flags, &je);
    if (!*out)
        return pulse_errorf(err, errlen, PULSE_ERR_IO, path, "not JSON: line %d: %s", je.line,
                            je.text);
    return PULSE_OK;
}
