/* Result files (DESIGN.md section 9): every file carries schema_version, tool (git commit,
 * dirty flag), env, the resolved config, the workload and seed, metrics, counters and status.
 * Objects are Jansson values; writing is atomic (temporary file, then rename). */
#ifndef PULSE_RESULTS_H
#define PULSE_RESULTS_H

#include <jansson.h>
#include <stdio.h>

#include "backend.h"
#include "metrics.h"

#define PULSE_SCHEMA_VERSION 1

/* A new result object for `experiment` with schema_version, tool and a host env block.
 * Caller owns the reference. */
json_t *results_new(const char *experiment);
/* The env block of r (created by results_new); backends add their device fields to it. */
json_t *results_env(json_t *r);
/* Adds {prefix}_ms keys for mean, median, std, p90, p99 (values in seconds, written in ms),
 * vLLM style: mean_ttft_ms, median_ttft_ms, ... */
void results_add_dist_ms(json_t *obj, const char *name, const struct dist_summary *d);
/* Sets a real, mapping NaN/Inf to null. */
void results_set_real(json_t *obj, const char *key, double v);
/* Writes r to path with jansson's dump flags: a regular file (or a new one) through a temporary
 * file renamed into place; anything else (/dev/null, a FIFO, a symbolic link) written through,
 * never replaced; a directory refused. Every write error, /dev/full's included, is reported:
 * PULSE_OK or PULSE_ERR_IO with a reason in err. The one writer of every JSON the suite saves. */
int results_write_json(const json_t *r, const char *path, size_t flags, char *err, size_t errlen);
/* The same for any content: emit(f, arg) writes it (non-zero on a failure) into a temporary file
 * renamed into place, or straight into a path that is not a regular file. The one writer of
 * every file the suite saves (JSON, JSONL traces). */
int results_write_file(const char *path, int (*emit)(FILE *f, void *arg), void *arg, char *err,
                       size_t errlen);
/* Writes r to path (indent 2, sorted keys). PULSE_OK or PULSE_ERR_IO with a reason in err. */
int results_write(const json_t *r, const char *path, char *err, size_t errlen);
/* Reads the JSON file at path (what every profile and result reader uses): a path that is
 * missing, a directory, or not a regular file (a FIFO, a device) is refused before reading;
 * then jansson's parse with `flags`. *out owns the value. PULSE_OK, or PULSE_ERR_IO with
 * "PATH: cannot open (...)", "PATH: is a directory, not a JSON file", "PATH: is not a regular
 * file" or "PATH: not JSON: line N: ..." in err. */
int results_read_json(const char *path, size_t flags, json_t **out, char *err, size_t errlen);
/* The same with every real at full precision (17 digits: it reads back bit for bit), for
 * files that are read back as inputs (profiles). */
int results_write_exact(const json_t *r, const char *path, char *err, size_t errlen);

#endif
