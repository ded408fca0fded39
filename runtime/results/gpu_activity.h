/* What the GPU itself ran, from CUPTI's activity records: every kernel, memcpy and memset with
 * its device start and end, gathered between gpu_activity_start and gpu_activity_stop, and
 * summarised (less the spans excluded as set-up) as the union of kernel intervals over the window
 * (the GPU busy fraction, exact where timeline.h's scheduler spans are an upper bound), the copy
 * engines' busy time and bytes per direction, and the kernels by name (count, total and mean time).
 *
 * All memory is taken at start: CUPTI's record buffers come from a fixed pool and records go
 * into fixed arrays, so a run collecting activity allocates nothing in its steps; records past
 * the arrays' capacity, or that CUPTI dropped for want of a buffer, are counted, never an error.
 * One collector at a time per process (CUPTI's activity callbacks are global). CUPTI cannot
 * subscribe while compute-sanitizer runs the program (HARDWARE.md). CUDA builds only: elsewhere
 * start refuses with a reason. */
#ifndef PULSE_GPU_ACTIVITY_H
#define PULSE_GPU_ACTIVITY_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct gpu_activity;

/* One interval [start, end) in nanoseconds on any one clock. */
struct gpu_interval {
    uint64_t start, end;
};

/* Starts collecting: at most max_records kernel and at most max_records copy records (>= 1).
 * NULL with a reason in err when activity is not available here (no CUDA build, CUPTI refused,
 * another collector active) or memory is refused. */
struct gpu_activity *gpu_activity_start(int max_records, char *err, size_t errlen);
/* Stops collecting (flushing CUPTI's buffers) and returns the summary (NULL when a is NULL):
 * the busy fraction of all kernels, of the suite's recall kernels (the zero-copy gather and the
 * gather-scatter's scatter: I/O, whose bytes the suite counts) and of the other (compute)
 * kernels, each also over time in bins of bin_s seconds (0: none; a bin inside an excluded span
 * is null); top: how many kernel names to list, by total time. Frees a. */
json_t *gpu_activity_stop(struct gpu_activity *a, int top, double bin_s);

/* Leaves the host span [t0, t1] (pulse_now() seconds) out of the active collector's summary:
 * records that lie inside it and its time in the window (set-up work inside the collection,
 * e.g. a prompt fill while the serving clock is paused). Host times are placed on CUPTI's
 * clock by the offset taken at start. Nothing without an active collector; any thread. */
void gpu_activity_exclude_host(double t0, double t1);

/* The union of n intervals, sorted here in place by start; *first and *last (may be NULL) get
 * the earliest start and the latest end (0 when n is 0). The summary's arithmetic, exposed for
 * tests. */
uint64_t gpu_interval_union(struct gpu_interval *iv, size_t n, uint64_t *first, uint64_t *last);

/* Merges n intervals in place into sorted disjoint ones; returns how many. */
size_t gpu_interval_merge(struct gpu_interval *iv, size_t n);
/* Time of [lo, hi) covered by m merged intervals (gpu_interval_merge's). */
uint64_t gpu_interval_cover(const struct gpu_interval *iv, size_t m, uint64_t lo, uint64_t hi);

/* One record's interval with a label (a kernel name's slot, a copy direction, ...). */
struct gpu_labeled {
    uint64_t start, end;
    int32_t label;
};

/* Gap sizes of gpu_gaps' histogram: below 2, 5, 10, 50 and 200 us, and the rest. */
#define GPU_GAP_BINS 6
extern const double gpu_gap_bin_us[GPU_GAP_BINS - 1];

/* The idle gaps of n labelled records (sorted here in place by start): every stretch between
 * two records that no record covers, less what the m merged excluded spans cover of it. Each
 * gap's time and count are added to gap_ns[label] and gap_n[label] of the record that ended
 * last before it (labels in [0, n_labels); others are not attributed) and to the histogram
 * hist_ns/hist_n by its size (GPU_GAP_BINS; a gap cut by an excluded span counts what is
 * left). Returns the gaps' total time. Where the GPU waited, and after what. */
uint64_t gpu_gaps(struct gpu_labeled *iv, size_t n, const struct gpu_interval *excl, size_t m,
                  int n_labels, uint64_t *gap_ns, int64_t *gap_n, uint64_t *hist_ns,
                  int64_t *hist_n);

/* 1 when the kernel symbol is one of the suite's recall kernels (the zero-copy gather, the
 * gather-scatter's scatter). */
int gpu_kernel_is_recall(const char *sym);

/* A readable name of a kernel's symbol: an Itanium-mangled C++ name (_Z...) becomes its
 * qualified name without the anonymous namespace, with "<...>" when it is a template instance;
 * anything else is copied. Into out (truncated to n - 1 characters); returns out. */
char *gpu_kernel_short_name(const char *sym, char *out, size_t n);

#endif
