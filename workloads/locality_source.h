/* The locality model (locality.h) as the offload runtime's query source (runtime/select/query_source.h):
 * a generator calibrated for the shape's selection supplies the queries and the prompt keys, a
 * meter with the shape's hot cache measures what the runtime's selections achieve. */
#ifndef PULSE_LOCALITY_SOURCE_H
#define PULSE_LOCALITY_SOURCE_H

#include <stddef.h>

#include "query_source.h"
#include "workloads/locality.h"
#include "workloads/locality_spec.h"

/* The misprediction of spec_q (locality_spec.h). */
enum locality_spec_mode {
    LOC_SPEC_PROFILE = 0, /* per sparse layer the target overlap of spec_profile, mapped by
                             depth at the shape's budget and the run's context */
    LOC_SPEC_EXACT,       /* no misprediction: spec_q is NULL (a perfect predictor) */
    LOC_SPEC_FIXED        /* spec_overlap on every sparse layer (persistence as the profile's) */
};

struct locality_source_params {
    const struct locality_profile *profile; /* churn per layer (copied); NULL = the default
                                               profile, dense where the shape is */
    int calib_tokens;   /* calibration context; 0 = the run's typical context within [2 x the
                           selected tokens, max(that, 16384)], or locality's default */
    int typical_tokens; /* the run's typical context (e.g. the mean prompt); 0 = unknown */
    double anchor;      /* locality_params.anchor (default 0) */
    const char *model;  /* names the model in messages; may be NULL */
    int spec_mode;      /* enum locality_spec_mode (default LOC_SPEC_PROFILE) */
    double spec_overlap;                              /* LOC_SPEC_FIXED: in [0, 1] */
    const struct locality_spec_profile *spec_profile; /* NULL: the built-in one of spec_from
                                                         (copied) */
    int spec_from;  /* enum locality_spec_from: where the run's policy makes its prediction */
    int spec_fresh; /* 1: the approximate query's noise is fresh every step (the version-1
                       model); 0 (default): it persists as the profile's run measured (the
                       persistence of the misses mapped by depth; fresh where the run has none),
                       in both the profile and the fixed mode */
};

/* How prof lays onto shape sh: 1 when it has the shape's layers, dense exactly where the
 * shape's are (the layers the runtime does not select: offload_source_shape), and is used as
 * it is (prof NULL: the default profile, made so); 0 when it does not and the source maps it by
 * depth (locality_profile_map_depth: a profile of another model, or of this one measured with
 * other layers dense); -1 with the reason in err when it cannot be (it fails its check or has
 * no sparse layer). */
int locality_profile_fits(const struct locality_profile *prof, const struct query_source_shape *sh,
                          char *err, size_t errlen);

/* The source for shape sh (offload_source_shape): checks the profile against it, calibrates
 * the generator (the slow part, timed in setup_s; when every block or none is selected the
 * queries do not matter and the calibration is the smallest), calibrates the misprediction
 * (spec_q; none with LOC_SPEC_EXACT or when the selection does not depend on the query) and
 * makes the meter. p NULL = the defaults. NULL with a one-line reason in err. Free with
 * query_source_free. */
struct query_source *locality_source_create(const struct query_source_shape *sh,
                                            const struct locality_source_params *p, char *err,
                                            size_t errlen);

/* Whether the misprediction's persistence (measured with the speculation profile's run) was
 * measured at an exact churn within a factor LOC_CHURN_MATCH of the run's profile: the mean
 * over the sparse layers of each into *run and *spec (0 where the model has no persistence).
 * 1 when they differ by more: the approximate lists' wrong blocks then change as often as in
 * the profile's run over exact lists that move at the run's churn, so a policy attending them
 * (infinigen) recalls as the other model would not; the profiles should come from one model.
 * qs from locality_source_create. */
#define LOC_CHURN_MATCH 1.5
int locality_source_churn_mismatch(const struct query_source *qs, double *run, double *spec);

/* Whether the speculation profile's predictions were made at another point than the run's
 * (spec_from): from the input against after the attention (mid or the predicted lists, which
 * hold the same hit rate on the GQA test model), either way. 1 when they were: the run's
 * prediction misses as another point's would. *run and *spec: enum locality_spec_from. 0 for a
 * source without a profile in use (no prediction, or LOC_SPEC_EXACT). */
int locality_source_point_mismatch(const struct query_source *qs, int *run, int *spec);

#endif
