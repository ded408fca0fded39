/* pulse compare: a result JSON against a baseline, metric by metric, for CI's performance
 * regression check. Each rule names a value by its path ("metrics.mean_tpot_ms",
 * "points[0].ms_per_step_median"), the direction that is better (bigger, smaller, or equal: a
 * value that must not change, such as the tokens' fingerprint) and a relative tolerance. A
 * value worse than the baseline by more than its tolerance is a regression: the table says so
 * and the exit status is 1. So is a value the baseline has that the new result lost (absent,
 * null or of another type: --allow-missing lists them instead), a new result whose status is
 * not ok (--allow-status), and a new result of another configuration: model, backend, policy,
 * selection, engine, budget, page size, GPU KV budget, batch or workload (--allow-config).
 * Values absent from the baseline are listed and skipped. */
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "common.h"
#include "results.h"

#define CMD "compare"
#define MAX_RULES 128

enum better { BIGGER, SMALLER, EQUAL };
static const char *const better_names[] = {"bigger", "smaller", "equal"};

struct rule {
    char path[160];
    enum better better;
    double rel_tol;
};

/* Defaults for pulse run's JSON (and bench decode-step's first point): throughput and times
 * within 10% (15% for tails), counters that must not grow, the tokens' fingerprint unchanged. */
static const struct rule default_rules[] = {
    {"metrics.output_tokens_fnv1a", EQUAL, 0},
    {"metrics.output_throughput", BIGGER, 0.10},
    {"metrics.mean_tpot_ms", SMALLER, 0.10},
    {"metrics.p99_tpot_ms", SMALLER, 0.15},
    {"metrics.step.mean_step_ms", SMALLER, 0.10},
    {"metrics.step.ratio_to_floor", SMALLER, 0.10},
    {"metrics.failed", SMALLER, 0},
    {"counters.step_host_syncs", SMALLER, 0},
    {"counters.step_alloc_calls", SMALLER, 0},
    {"points[0].ms_per_step_median", SMALLER, 0.10},
    {"points[0].ratio_to_floor", SMALLER, 0.10},
};

/* What makes two results comparable: these values, where either file has them, are equal. */
static const char *const identity_paths[] = {
    "experiment",          "config.model",          "config.backend",
    "config.policy",       "config.offload.selection", "config.offload.recall_engine",
    "config.offload.budget_tokens", "config.page_size", "config.kv_budget_gb",
    "config.max_batch",    "workload.spec",         "workload.seed",
    "workload.output_len", "workload.arrival"};

static const char usage[] =
    "usage: pulse compare BASELINE.json NEW.json [--tolerances FILE.json]\n"
    "                     [--github-benchmark DIR] [--allow-missing] [--allow-status]\n"
    "                     [--allow-config]\n"
    "  Compares NEW against BASELINE rule by rule; exit 1 on a regression: a value worse than\n"
    "  its tolerance, a value the baseline has and NEW lost (absent, null, another type), NEW's\n"
    "  status other than ok, or NEW of another configuration (model, backend, policy,\n"
    "  selection, engine, budget, page size, GPU KV budget, batch, workload).\n"
    "  --allow-missing     lost values are listed, not regressions\n"
    "  --allow-status      a status other than ok is listed, not a regression\n"
    "  --allow-config      another configuration is listed, not a regression\n"
    "  --tolerances FILE   the rules instead of the defaults: {\"metrics\": [{\"path\":\n"
    "                      \"metrics.mean_tpot_ms\", \"better\": \"smaller\", \"rel_tol\": 0.1},\n"
    "                      ...]}; better (required) is bigger, smaller or equal (a value that\n"
    "                      must not change); a path's parts are object keys and [index]\n"
    "  --github-benchmark DIR  writes DIR/bigger_is_better.json and DIR/smaller_is_better.json,\n"
    "                      github-action-benchmark's customBiggerIsBetter and\n"
    "                      customSmallerIsBetter inputs, from NEW's values\n"
    "exit: 0 no regression, 1 a regression, 2 bad usage or unreadable files\n";

/* The value at path in j ("a.b[2].c"), or NULL. */
static json_t *at_path(json_t *j, const char *path)
{
    char key[160];
    const char *p = path;
    while (j && *p) {
        if (*p == '[') {
            char *end = NULL;
            const long i = strtol(p + 1, &end, 10);
            if (end == p + 1 || *end != ']' || i < 0) return NULL;
            j = json_is_array(j) ? json_array_get(j, (size_t)i) : NULL;
            p = end + 1;
        } else {
            size_t n = strcspn(p, ".[");
            if (n == 0 || n >= sizeof key) return NULL;
            memcpy(key, p, n);
            key[n] = 0;
            j = json_is_object(j) ? json_object_get(j, key) : NULL;
            p += n;
        }
        if (*p == '.') p++;
    }
    return j;
}

/* Rules from a tolerance file into r; their count, or -1 after a message. */
static int load_rules(const char *path, struct rule *r)
{
    json_t *j = cli_load_json(CMD, "--tolerances", path);
    if (!j) return -1;
    json_t *arr = json_object_get(j, "metrics"), *m;
    size_t i;
    int n = -1;
    if (!json_is_array(arr) || json_array_size(arr) == 0 || json_array_size(arr) > MAX_RULES) {
        cli_error(CMD, "--tolerances: %s: expected {\"metrics\": [1 to %d rules]}", path,
                  MAX_RULES);
        goto out;
    }
    json_array_foreach(arr, i, m)
    {
        const char *p = json_string_value(json_object_get(m, "path"));
        const char *b = json_string_value(json_object_get(m, "better"));
        json_t *t = json_object_get(m, "rel_tol");
        int k = b ? 0 : 3; /* no direction: refused, never a silent "bigger" */
        while (k < 3 && strcmp(b, better_names[k]))
            k++;
        if (!p || !*p || strlen(p) >= sizeof r[i].path || k == 3 ||
            (t && (!json_is_number(t) || !(json_number_value(t) >= 0)))) {
            cli_error(CMD,
                      "--tolerances: %s: metrics[%zu]: expected a \"path\", \"better\" of bigger, "
                      "smaller or equal, and a \"rel_tol\" >= 0",
                      path, i);
            goto out;
        }
        snprintf(r[i].path, sizeof r[i].path, "%s", p);
        r[i].better = (enum better)k;
        r[i].rel_tol = t ? json_number_value(t) : 0;
    }
    n = (int)json_array_size(arr);
out:
    json_decref(j);
    return n;
}

/* The kind of a JSON value for comparing: numbers are one kind. */
static int kind_of(const json_t *v)
{
    return json_is_number(v) ? JSON_REAL : (int)json_typeof(v);
}

/* One rule's verdict: 0 ok, 1 regression, -1 not compared; its line on stdout. A value the
 * baseline has that the new result lost (absent, null, another kind) is a regression unless
 * allow_missing. */
static int judge(const struct rule *r, json_t *base, json_t *cur, json_t *bigger, json_t *smaller,
                 int allow_missing)
{
    json_t *a = at_path(base, r->path), *b = at_path(cur, r->path);
    if (a && !json_is_null(a) && (!b || json_is_null(b) || kind_of(a) != kind_of(b))) {
        printf("%-36s %16s %16s %9s %7s  %s in the new result%s\n", r->path, "", "-", "", "",
               !b ? "absent" : json_is_null(b) ? "null" : "of another type",
               allow_missing ? " (allowed)" : " (REGRESSION)");
        return allow_missing ? -1 : 1;
    }
    if (!a || !b || json_is_null(a)) {
        printf("%-36s %16s %16s %9s %7s  absent from %s\n", r->path, a ? "" : "-", b ? "" : "-", "",
               "", !a && !b ? "both" : "the baseline");
        return -1;
    }
    if (json_is_string(a) || json_is_string(b) || json_is_boolean(a) || json_is_boolean(b)) {
        const int same = json_equal(a, b);
        const char *sa = json_is_string(a) ? json_string_value(a) : "(value)";
        const char *sb = json_is_string(b) ? json_string_value(b) : "(value)";
        printf("%-36s %16.16s %16.16s %9s %7s  %s\n", r->path, sa, sb, "", "",
               same ? "same" : "CHANGED (REGRESSION)");
        return !same;
    }
    if (!json_is_number(a) || !json_is_number(b)) {
        printf("%-36s %16s %16s %9s %7s  not a number or a string: skipped\n", r->path, "", "", "",
               "");
        return -1;
    }
    const double x = json_number_value(a), y = json_number_value(b);
    const double change = x != 0 ? (y - x) / fabs(x) : (y == 0 ? 0 : copysign(INFINITY, y));
    int bad;
    const char *verdict;
    if (r->better == EQUAL) {
        bad = fabs(change) > r->rel_tol;
        verdict = bad ? "CHANGED (REGRESSION)" : "same";
    } else {
        const double worse = r->better == BIGGER ? -change : change;
        bad = worse > r->rel_tol;
        verdict = bad ? "REGRESSION" : worse < -r->rel_tol ? "improved" : "ok";
        json_t *e = json_pack("{s:s,s:s,s:f}", "name", r->path, "unit", "", "value", y);
        json_array_append_new(r->better == BIGGER ? bigger : smaller, e);
    }
    printf("%-36s %16.6g %16.6g %+8.1f%% %6.1f%%  %s\n", r->path, x, y, change * 100,
           r->rel_tol * 100, verdict);
    return bad;
}

/* The configurations' differences (identity_paths) on stdout; how many. */
static int config_changes(json_t *base, json_t *cur, int allow)
{
    int n = 0;
    for (size_t i = 0; i < PULSE_ARRAY_LEN(identity_paths); i++) {
        json_t *a = at_path(base, identity_paths[i]), *b = at_path(cur, identity_paths[i]);
        if ((!a && !b) || (a && b && json_equal(a, b))) continue;
        char *sa = a ? json_dumps(a, JSON_ENCODE_ANY) : NULL;
        char *sb = b ? json_dumps(b, JSON_ENCODE_ANY) : NULL;
        printf("%-36s %16.16s %16.16s %9s %7s  another configuration%s\n", identity_paths[i],
               sa ? sa : "-", sb ? sb : "-", "", "", allow ? " (allowed)" : " (REGRESSION)");
        free(sa);
        free(sb);
        n++;
    }
    return n;
}

static int write_benchmark(const char *dir, json_t *bigger, json_t *smaller)
{
    char path[4096], err[512];
    const char *names[2] = {"bigger_is_better.json", "smaller_is_better.json"};
    json_t *arrs[2] = {bigger, smaller};
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        if (results_write(arrs[k], path, err, sizeof err) != PULSE_OK) {
            cli_error(CMD, "--github-benchmark: %s", err);
            return -1;
        }
    }
    return 0;
}

int cmd_compare(int argc, char **argv)
{
    static const struct option opts[] = {{"tolerances", required_argument, 0, 't'},
                                         {"github-benchmark", required_argument, 0, 'g'},
                                         {"allow-missing", no_argument, 0, 'm'},
                                         {"allow-status", no_argument, 0, 's'},
                                         {"allow-config", no_argument, 0, 'c'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *tol = NULL, *gh = NULL;
    int c, allow_missing = 0, allow_status = 0, allow_config = 0;
    opterr = 0;
    optind = 1;
    struct cli_seen seen = {0};
    while ((c = cli_getopt(CMD, argc, argv, opts, &seen)) != -1) {
        switch (c) {
        case 't':
            tol = optarg;
            break;
        case 'g':
            gh = optarg;
            break;
        case 'm':
            allow_missing = 1;
            break;
        case 's':
            allow_status = 1;
            break;
        case 'c':
            allow_config = 1;
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            cli_unknown_flag(CMD, argc, argv);
            return EXIT_USAGE;
        }
    }
    if (argc - optind != 2) {
        cli_error(CMD, "expected BASELINE.json NEW.json (see pulse compare --help)");
        return EXIT_USAGE;
    }
    struct stat st;
    if (gh && (stat(gh, &st) != 0 || !S_ISDIR(st.st_mode))) {
        cli_error(CMD, "--github-benchmark: %s: not a directory", gh);
        return EXIT_USAGE;
    }
    static struct rule rules[MAX_RULES];
    int n = (int)PULSE_ARRAY_LEN(default_rules);
    if (tol) {
        if ((n = load_rules(tol, rules)) < 0) return EXIT_USAGE;
    } else {
        memcpy(rules, default_rules, sizeof default_rules);
    }
    json_t *base = cli_load_json(CMD, "baseline", argv[optind]);
    json_t *cur = base ? cli_load_json(CMD, "new", argv[optind + 1]) : NULL;
    if (!base || !cur) {
        json_decref(base);
        return EXIT_USAGE;
    }
    json_t *bigger = json_array(), *smaller = json_array();
    printf("%-36s %16s %16s %9s %7s  %s\n", "metric", "baseline", "new", "change", "tol",
           "verdict");
    int regressions = 0, compared = 0;
    const int changed = config_changes(base, cur, allow_config);
    regressions += allow_config ? 0 : changed;
    const char *status = json_string_value(json_object_get(cur, "status"));
    if (!status || strcmp(status, "ok")) {
        printf("%-36s %16s %16.16s %9s %7s  not ok%s\n", "status", "", status ? status : "-", "",
               "", allow_status ? " (allowed)" : " (REGRESSION)");
        regressions += !allow_status;
    }
    for (int i = 0; i < n; i++) {
        const int v = judge(&rules[i], base, cur, bigger, smaller, allow_missing);
        regressions += v > 0;
        compared += v >= 0;
    }
    printf("%d compared, %d regression%s\n", compared, regressions, regressions == 1 ? "" : "s");
    int code = regressions ? 1 : 0;
    if (compared == 0) {
        cli_error(CMD, "no rule's value is in both files: nothing compared");
        code = EXIT_USAGE;
    }
    if (gh && write_benchmark(gh, bigger, smaller)) code = EXIT_USAGE;
    json_decref(bigger);
    json_decref(smaller);
    json_decref(base);
    json_decref(cur);
    return code;
}
