/* Reading the workloads' profile files (locality_profile.c, locality_spec_profile.c): the
 * parsing context that prefixes every message with the file's name and the field, and the
 * checks both readers share. Internal to workloads/. */
#ifndef PULSE_WORKLOADS_JSON_IN_H
#define PULSE_WORKLOADS_JSON_IN_H

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

/* Parsing context: the file name and the error buffer. */
struct pctx {
    const char *name;
    char *err;
    size_t errlen;
};

/* "NAME: FIELD: WHAT" into the context's buffer; PULSE_ERR_INVALID. */
static inline int fail(const struct pctx *c, const char *field, const char *what)
{
    snprintf(c->err, c->errlen, "%s: %s: %s", c->name, field, what);
    return PULSE_ERR_INVALID;
}

/* Every key of obj (at `where`, "" at the top) among keys[0..n), else fails naming it. */
static inline int only_keys(const struct pctx *c, const json_t *obj, const char *where,
                            const char *const *keys, int n)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        int ok = 0;
        for (int i = 0; i < n && !ok; i++)
            ok = strcmp(key, keys[i]) == 0;
        if (!ok) {
            char f[512];
            snprintf(f, sizeof f, "%s%s%s", where, where[0] ? "." : "", key);
            return fail(c, f, "unknown key");
        }
    }
    return PULSE_OK;
}

/* src (NULL: "") into dst of cap bytes, cut to fit. */
static inline void copy_str(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src ? src : "");
}

#endif
