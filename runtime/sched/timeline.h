/* A timeline of the schedule from device timestamps, written as Chrome-trace JSON (Perfetto and
 * chrome://tracing open it; plots/timeline.py draws it): one row per track, one span per piece
 * of work the scheduler queued (a layer of the normal or the offload batch, a recall round), so
 * that the interruptible layer-wise schedule shows as the normal batch's layers filling the
 * offload batch's waits.
 *
 * Device spans are two timed events (backend.h) recorded on a context's stream around the work;
 * their times are the device's, measured from a base event. Host spans carry host pulse_now()
 * times (the recall I/O track, where only the host knows when a round started and ended). All
 * memory is allocated at create: recording allocates nothing, and a full timeline drops spans
 * (counted) rather than fail. Recording never waits on the device; write, summary and busy
 * fraction do (they synchronise the events: call them after the run, outside any step). */
#ifndef PULSE_TIMELINE_H
#define PULSE_TIMELINE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* Tracks: the trace's threads (tid), named "normal batch", "offload batch", "recall I/O". */
enum { TIMELINE_NORMAL = 0, TIMELINE_OFFLOAD = 1, TIMELINE_RECALL = 2, TIMELINE_TRACKS };

struct timeline;

/* A timeline of at most max_spans spans (>= 1) on backend be, which must have timed events:
 * the spans, 2 * max_spans timed events and a base event, allocated here. NULL with a reason in
 * err when max_spans is out of range, the backend has no timed events or memory is refused. */
struct timeline *timeline_create(const struct backend *be, int max_spans, char *err, size_t errlen);
void timeline_free(struct timeline *t);
/* Name of a track, "?" out of range. */
const char *timeline_track_name(int track);

/* Starts (or restarts: forgets every span) the timeline: records the base event, time 0, on
 * c's stream, waits for it (one host synchronisation: call it outside any step) and takes the
 * host time then as the base of the host spans. */
void timeline_start(struct timeline *t, const struct kctx *c);
/* Records the begin of a span on c's stream: `name` is a static string (not copied), track one
 * of the enum, layer -1 for a span of no one layer. Returns the span's id for timeline_end, or
 * -1 when t is NULL or full (a full timeline counts the span as dropped; never an error). May
 * be called from several threads; not while c's stream captures a CUDA graph. */
int timeline_begin(struct timeline *t, const struct kctx *c, int track, const char *name, int batch,
                   int layer, int64_t step);
/* Records the end of span `span` on c's stream (the stream that ran the work); -1: nothing. A
 * span never ended is left out of the trace (counted as "unended"). */
void timeline_end(struct timeline *t, const struct kctx *c, int span);
/* A span from host times t0 <= t1 (pulse_now() seconds): placed on the device time axis by the
 * host time at which timeline_start saw the base event complete, so its offset against device
 * spans is within that sync's latency plus the clocks' drift; marked "clock": "host" in the
 * trace. Dropped (counted) when full; t NULL: nothing. */
void timeline_host_span(struct timeline *t, int track, const char *name, int batch, int layer,
                        int64_t step, double t0, double t1);

/* The busy fraction of the device: the union of the device spans of the NORMAL and OFFLOAD
 * tracks, over the window from the first such span's begin to the last one's end (*window_s,
 * may be NULL; 0 and a fraction of 0 without spans). A span is one of the scheduler's pieces, a
 * run of kernels with the launch gaps between them, so this is an upper bound of the union of
 * the kernels themselves (CUPTI would give that). */
double timeline_busy_fraction(struct timeline *t, double *window_s);
/* {"spans", "dropped", "unended", "window_s", "device_busy_fraction", "track_busy_s": {"normal",
 * "offload", "recall"}: the union of each track's spans, seconds}. Caller owns the reference. */
json_t *timeline_summary_json(struct timeline *t);
/* Writes the trace: {"traceEvents": one "X" event per ended span (ts, dur in microseconds from
 * the base event, sorted by ts; pid 1, tid = track, args batch, layer, step, and "clock": "host"
 * on host spans) and "M" events naming the process "pulse" and the tracks, "displayTimeUnit":
 * "ms", "otherData": the summary plus the backend}. Times before the base (a stream behind the
 * base's) shift the whole trace so the earliest is 0 (otherData.ts_shift_us). PULSE_OK, or
 * PULSE_ERR_IO with a reason in err. */
int timeline_write(struct timeline *t, const char *path, char *err, size_t errlen);
/* Loads a trace and checks its schema: traceEvents an array; every "X" event with a name, ts
 * >= 0 and dur >= 0 numbers, a tid among the tracks, args with integer batch, layer and step;
 * and within one track and step, the spans of a layer (layer >= 0) in order of ts have
 * nondecreasing layers (each batch runs its layers in order). 0, or -1 with a reason in err. */
int timeline_check(const char *path, char *err, size_t errlen);

#endif
