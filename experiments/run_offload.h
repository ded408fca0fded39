/* pulse run's offload options (policies with an offload runtime: arkvale): the flags, their
 * resolution into struct offload_params (profiles read from files), and checks. */
#ifndef PULSE_RUN_OFFLOAD_H
#define PULSE_RUN_OFFLOAD_H

#include <getopt.h>

#include "offload.h"
#include "runtime_opts.h"
#include "serve.h"
#include "workloads/locality.h"
#include "workloads/locality_source.h"
#include "workloads/workload.h"

/* getopt_long codes of the offload flags (above every character). */
enum {
    RUN_OFF_BUDGET = 1000,
    RUN_OFF_SELECTION,
    RUN_OFF_ENGINE,
    RUN_OFF_PROFILE,
    RUN_OFF_HEADS,
    RUN_OFF_HOST_GB,
    RUN_OFF_DENSE,
    RUN_OFF_PROMPT_KV,
    RUN_OFF_CAP,
    RUN_OFF_HOT,
    RUN_OFF_CALIB,
    RUN_OFF_NO_IRQ,
    RUN_OFF_ADMISSION,
    RUN_OFF_IOAA_PROFILE,
    RUN_OFF_TRACE,
    RUN_OFF_CAP_FRACTION,
    RUN_OFF_QUERY,
    RUN_OFF_REUSE,
    RUN_OFF_SPECULATE,
    RUN_OFF_SPEC_PREDICTOR,
    RUN_OFF_SPEC,
    RUN_OFF_MAX_WAITING,
    RUN_OFF_SPEC_MARGIN,
    RUN_OFF_SELF_INTERLEAVE,
    RUN_OFF_SPEC_FROM,
    RUN_OFF_SPEC_CORRECTION,
    RUN_OFF_ANCHOR,
    RUN_OFF_END
};

#define RUN_OFF_OPT(name, code)                                                                    \
    {                                                                                              \
        name, required_argument, 0, code                                                           \
    }
#define RUN_OFFLOAD_OPTIONS                                                                        \
    RUN_OFF_OPT("budget-tokens", RUN_OFF_BUDGET), RUN_OFF_OPT("selection", RUN_OFF_SELECTION),     \
        RUN_OFF_OPT("recall-engine", RUN_OFF_ENGINE),                                              \
        RUN_OFF_OPT("locality-profile", RUN_OFF_PROFILE),                                          \
        RUN_OFF_OPT("head-profile", RUN_OFF_HEADS), RUN_OFF_OPT("host-pool-gb", RUN_OFF_HOST_GB),  \
        RUN_OFF_OPT("dense-layers", RUN_OFF_DENSE), RUN_OFF_OPT("prompt-kv", RUN_OFF_PROMPT_KV),   \
        RUN_OFF_OPT("recall-cap-gbps", RUN_OFF_CAP), RUN_OFF_OPT("hot-slots", RUN_OFF_HOT),        \
        RUN_OFF_OPT("calib-tokens", RUN_OFF_CALIB), {"no-irq", no_argument, 0, RUN_OFF_NO_IRQ},    \
        RUN_OFF_OPT("admission", RUN_OFF_ADMISSION), RUN_OFF_OPT("profile", RUN_OFF_IOAA_PROFILE), \
        RUN_OFF_OPT("trace", RUN_OFF_TRACE),                                                       \
        RUN_OFF_OPT("recall-cap-fraction", RUN_OFF_CAP_FRACTION),                                  \
        RUN_OFF_OPT("query", RUN_OFF_QUERY), RUN_OFF_OPT("reuse", RUN_OFF_REUSE),                  \
        {"speculate", no_argument, 0, RUN_OFF_SPECULATE},                                          \
        RUN_OFF_OPT("spec-predictor", RUN_OFF_SPEC_PREDICTOR),                                     \
        RUN_OFF_OPT("spec-overlap", RUN_OFF_SPEC),                                                 \
        RUN_OFF_OPT("max-waiting", RUN_OFF_MAX_WAITING),                                           \
        RUN_OFF_OPT("spec-margin", RUN_OFF_SPEC_MARGIN),                                           \
        RUN_OFF_OPT("self-interleave", RUN_OFF_SELF_INTERLEAVE),                                   \
        RUN_OFF_OPT("spec-from", RUN_OFF_SPEC_FROM),                                               \
        RUN_OFF_OPT("spec-correction", RUN_OFF_SPEC_CORRECTION),                                   \
        RUN_OFF_OPT("locality-anchor", RUN_OFF_ANCHOR)

/* The offload flags' part of pulse run --help. */
extern const char run_offload_usage[];

struct run_offload_opts {
    const char *first_flag; /* the first offload flag given, NULL when none */
    long budget_tokens, dense_layers, hot_slots, calib_tokens;
    int hot_slots_auto; /* --hot-slots auto: sized to fill the GPU KV budget (hot_slots_fill) */
    int budget_set; /* --budget-tokens given (else the default is rounded to the block size) */
    const char *selection, *engine, *profile, *heads, *prompt_kv; /* NULL: the policy's */
    const char *query; /* --query: NULL = locality */
    const char *reuse; /* --reuse: NULL = the policy's (policy.offload_refetch) */
    int speculate;     /* --speculate: the policy's prefetching schedule */
    const char *spec_predictor; /* --spec-predictor: NULL = approx */
    const char *spec_from;      /* --spec-from: NULL = input */
    const char *spec_correction; /* --spec-correction: NULL = early */
    double spec_margin;         /* --spec-margin (0 = none) */
    double anchor;              /* --locality-anchor (0 = a free walk) */
    int spec_margin_set;
    const char *spec;  /* --spec-overlap: NULL = profile (the built-in speculation profile) */
    double host_pool_gb, cap_gbps, cap_fraction; /* cap_fraction: of the H2D peak, 0 none */
    /* pulseinfer: --no-irq, --admission, --profile (the IOAA profile), --trace, --max-waiting
     * (0: the policy's default) */
    int no_irq, max_waiting;
    const char *admission, *ioaa_profile, *trace;
    const char *self_interleave; /* --self-interleave: on, auto or off (NULL: off) */
    const char *two_batch_flag; /* the first of those given, NULL when none */
};

/* What a resolved run holds (profiles and selectors live here while the run does); src makes
 * the query source (locality_source_create) for p. */
struct run_offload {
    struct offload_params p;
    struct locality_source_params src;
    struct locality_profile profile;
    struct locality_spec_profile spec_profile; /* --spec-overlap FILE */
    int32_t selector[LOC_MAX_LAYERS];
};

void run_offload_opts_init(struct run_offload_opts *oo);
/* Parses the value of offload flag `code` (a RUN_OFF_* code). 0, or -1 after a one-line
 * message naming the flag. */
int run_offload_flag(struct run_offload_opts *oo, int code, const char *arg);
/* Resolves the params for offload policy pol on model m, backend be, the workload and cache
 * shape kp (max_requests = max batch), with the runtime tuning rt (its offload, recall and pin
 * groups); checks the KV budget and the host pool hold the longest request. 0, or -1 after a
 * one-line message naming the flag. */
int run_offload_resolve(struct run_offload *ro, const struct run_offload_opts *oo,
                        const struct runtime_opts *rt, const struct policy *pol,
                        const struct model_config *m, const struct backend *be,
                        const struct workload *w, const struct kv_cache_params *kp, uint64_t seed);

#endif
