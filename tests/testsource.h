/* Tests that create an offload runtime: its query source, the locality model made for the
 * runtime's shape (what pulse run does). The caller frees it after the runtime. */
#ifndef PULSE_TEST_SOURCE_H
#define PULSE_TEST_SOURCE_H

#include <stdio.h>

#include "engine.h"
#include "kv_cache.h"
#include "offload.h"
#include "workloads/locality_source.h"

/* Makes the locality source for p on engine e and cache kv (lp NULL = the defaults) and puts it
 * in p->source; NULL (and p->source NULL) after a message when it cannot be made. */
static inline struct query_source *test_source(struct engine *e, const struct kv_cache *kv,
                                               struct offload_params *p,
                                               const struct locality_source_params *lp)
{
    char err[512];
    struct query_source_shape sh;
    offload_source_shape(p, engine_model(e)->cfg, kv_cache_view(kv, NULL).page_size, &sh);
    p->source = locality_source_create(&sh, lp, err, sizeof err);
    if (!p->source) fprintf(stderr, "query source: %s\n", err);
    return p->source;
}

#endif
