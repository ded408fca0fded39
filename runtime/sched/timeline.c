#include "timeline.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "mem.h"
#include "results.h"

static const char *const track_names[TIMELINE_TRACKS] = {"normal batch", "offload batch",
                                                         "recall I/O"};
static const char *const track_keys[TIMELINE_TRACKS] = {"normal", "offload", "recall"};

struct span {
    const char *name;
    int track, batch, layer;
    int64_t step;
    int host;      /* times from timeline_host_span (host clock) */
    int ended;     /* timeline_end ran (host spans: always) */
    int resolved;  /* t0, t1 are known */
    double t0, t1; /* seconds from the base event */
};

/* An interval (or a sort key) of span i, for the unions and the trace's order. */
struct ivl {
    double a, b;
    int i;
};

struct timeline {
    const struct backend *be;
    int max_spans;
    atomic_int next;      /* slots taken, at most max_spans */
    atomic_llong dropped; /* begins and host spans refused by a full timeline */
    void *base;           /* timed event: time 0 */
    double base_host;     /* pulse_now() when the base event was seen complete */
    int started;
    struct span *spans;  /* [max_spans] */
    void **ev;           /* [2 * max_spans]: span i's begin 2i and end 2i + 1 */
    struct ivl *scratch; /* [max_spans] */
    size_t bytes;        /* the one allocation holding this struct and the arrays */
};

const char *timeline_track_name(int track)
{
    return track >= 0 && track < TIMELINE_TRACKS ? track_names[track] : "?";
}

void timeline_free(struct timeline *t)
{
    if (!t) return;
    for (int i = 0; i < 2 * t->max_spans; i++)
        if (t->ev[i]) t->be->event_destroy(t->ev[i]);
    if (t->base) t->be->event_destroy(t->base);
    mem_free(MEM_HOST, t, t->bytes);
}

struct timeline *timeline_create(const struct backend *be, int max_spans, char *err, size_t errlen)
{
    if (max_spans < 1 || max_spans > (1 << 24)) {
        pulse_errorf(err, errlen, PULSE_ERR_INVALID, "timeline",
                     "max_spans %d out of range (expected 1 .. %d)", max_spans, 1 << 24);
        return NULL;
    }
    if (!be->event_create_timed || !be->event_elapsed_s) {
        pulse_errorf(err, errlen, PULSE_ERR_INVALID, "timeline", "backend %s has no timed events",
                     be->name);
        return NULL;
    }
    const size_t n = (size_t)max_spans;
    const size_t bytes = mem_aligned(sizeof(struct timeline)) +
                         mem_aligned(n * sizeof(struct span)) +
                         mem_aligned(2 * n * sizeof(void *)) + mem_aligned(n * sizeof(struct ivl));
    char *cur = mem_alloc(MEM_HOST, bytes, "timeline");
    if (!cur) {
        pulse_errorf(err, errlen, PULSE_ERR_NOMEM, "timeline", "cannot allocate %zu bytes", bytes);
        return NULL;
    }
    memset(cur, 0, bytes);
    struct timeline *t = mem_carve(&cur, sizeof *t);
    t->be = be;
    t->max_spans = max_spans;
    t->bytes = bytes;
    atomic_init(&t->next, 0);
    atomic_init(&t->dropped, 0);
    t->spans = mem_carve(&cur, n * sizeof(struct span));
    t->ev = mem_carve(&cur, 2 * n * sizeof(void *));
    t->scratch = mem_carve(&cur, n * sizeof(struct ivl));
    if (!(t->base = be->event_create_timed())) goto oom;
    for (size_t i = 0; i < 2 * n; i++)
        if (!(t->ev[i] = be->event_create_timed())) goto oom;
    return t;
oom:
    pulse_errorf(err, errlen, PULSE_ERR_NOMEM, "timeline", "cannot create %zu timed events",
                 2 * n + 1);
    timeline_free(t);
    return NULL;
}

void timeline_start(struct timeline *t, const struct kctx *c)
{
    t->be->event_record(c, t->base);
    t->be->event_sync(t->base);
    t->base_host = pulse_now();
    atomic_store(&t->next, 0);
    atomic_store(&t->dropped, 0);
    t->started = 1;
}

/* A free slot, or -1 (counted as dropped) when the timeline is full. */
static int take_slot(struct timeline *t, int track)
{
    PULSE_CHECK(t->started, "timeline_start first");
    PULSE_CHECK(track >= 0 && track < TIMELINE_TRACKS, "track out of range");
    int i = atomic_load(&t->next);
    while (i < t->max_spans && !atomic_compare_exchange_weak(&t->next, &i, i + 1)) {
    }
    if (i >= t->max_spans) {
        atomic_fetch_add(&t->dropped, 1);
        return -1;
    }
    return i;
}

static void fill_span(struct span *s, int track, const char *name, int batch, int layer,
                      int64_t step)
{
    *s = (struct span){.name = name, .track = track, .batch = batch, .layer = layer, .step = step};
}

int timeline_begin(struct timeline *t, const struct kctx *c, int track, const char *name, int batch,
                   int layer, int64_t step)
{
    if (!t) return -1;
    const int i = take_slot(t, track);
    if (i < 0) return -1;
    fill_span(&t->spans[i], track, name, batch, layer, step);
    t->be->event_record(c, t->ev[2 * i]);
    return i;
}

void timeline_end(struct timeline *t, const struct kctx *c, int span)
{
    if (!t || span < 0) return;
    PULSE_CHECK(span < atomic_load(&t->next), "timeline_end of a span never begun");
    t->be->event_record(c, t->ev[2 * span + 1]);
    t->spans[span].ended = 1;
}

void timeline_host_span(struct timeline *t, int track, const char *name, int batch, int layer,
                        int64_t step, double t0, double t1)
{
    if (!t) return;
    PULSE_CHECK(t1 >= t0, "a host span ends before it begins");
    const int i = take_slot(t, track);
    if (i < 0) return;
    struct span *s = &t->spans[i];
    fill_span(s, track, name, batch, layer, step);
    s->host = s->ended = s->resolved = 1;
    s->t0 = t0 - t->base_host;
    s->t1 = t1 - t->base_host;
}

/* Waits for the events of every ended device span and reads their times: the begin from the
 * base, the duration from begin to end (the finer of cuda's float milliseconds). */
static int resolve(struct timeline *t)
{
    const int n = t->started ? atomic_load(&t->next) : 0;
    for (int i = 0; i < n; i++) {
        struct span *s = &t->spans[i];
        if (!s->ended || s->resolved) continue;
        t->be->event_sync(t->ev[2 * i]);
        t->be->event_sync(t->ev[2 * i + 1]);
        s->t0 = t->be->event_elapsed_s(t->base, t->ev[2 * i]);
        s->t1 = s->t0 + t->be->event_elapsed_s(t->ev[2 * i], t->ev[2 * i + 1]);
        s->resolved = 1;
    }
    return n;
}

static int cmp_ivl(const void *x, const void *y)
{
    const struct ivl *a = x, *b = y;
    if (a->a != b->a) return a->a < b->a ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

/* Total length of the union of iv[0..n) (sorts iv). */
static double union_length(struct ivl *iv, int n)
{
    qsort(iv, (size_t)n, sizeof *iv, cmp_ivl);
    double total = 0.0, lo = 0.0, hi = 0.0;
    for (int k = 0; k < n; k++) {
        if (k == 0 || iv[k].a > hi) {
            total += hi - lo;
            lo = iv[k].a;
            hi = iv[k].b;
        } else if (iv[k].b > hi) {
            hi = iv[k].b;
        }
    }
    return n ? total + (hi - lo) : 0.0;
}

/* The ended spans of the tracks in mask (bit per track; device spans only when device_only)
 * into the scratch; returns their count. */
static int gather(struct timeline *t, int n, unsigned mask, int device_only)
{
    int m = 0;
    for (int i = 0; i < n; i++) {
        const struct span *s = &t->spans[i];
        if (!s->ended || !(mask >> s->track & 1u) || (device_only && s->host)) continue;
        t->scratch[m++] = (struct ivl){s->t0, s->t1, i};
    }
    return m;
}

double timeline_busy_fraction(struct timeline *t, double *window_s)
{
    const int n = resolve(t);
    const int m = gather(t, n, 1u << TIMELINE_NORMAL | 1u << TIMELINE_OFFLOAD, 1);
    double lo = INFINITY, hi = -INFINITY;
    for (int k = 0; k < m; k++) {
        lo = PULSE_MIN(lo, t->scratch[k].a);
        hi = PULSE_MAX(hi, t->scratch[k].b);
    }
    const double window = m ? hi - lo : 0.0;
    if (window_s) *window_s = window;
    const double busy = union_length(t->scratch, m);
    return window > 0.0 ? busy / window : 0.0;
}

json_t *timeline_summary_json(struct timeline *t)
{
    double window = 0.0;
    const double frac = timeline_busy_fraction(t, &window);
    const int n = resolve(t);
    int ended = 0;
    for (int i = 0; i < n; i++)
        ended += t->spans[i].ended;
    json_t *busy = json_object();
    for (int k = 0; k < TIMELINE_TRACKS; k++)
        results_set_real(busy, track_keys[k], union_length(t->scratch, gather(t, n, 1u << k, 0)));
    json_t *o =
        json_pack("{s:i, s:I, s:i, s:o}", "spans", ended, "dropped",
                  (json_int_t)atomic_load(&t->dropped), "unended", n - ended, "track_busy_s", busy);
    PULSE_CHECK(o, "json_pack");
    results_set_real(o, "window_s", window);
    results_set_real(o, "device_busy_fraction", frac);
    return o;
}

static json_t *metadata_event(const char *what, int tid, const char *key, json_t *value)
{
    json_t *e = json_pack("{s:s, s:s, s:i, s:i, s:{s:o}}", "name", what, "ph", "M", "pid", 1, "tid",
                          tid, "args", key, value);
    PULSE_CHECK(e, "json_pack");
    return e;
}

static json_t *span_event(const struct span *s, double shift)
{
    json_t *args = json_pack("{s:i, s:i, s:I}", "batch", s->batch, "layer", s->layer, "step",
                             (json_int_t)s->step);
    PULSE_CHECK(args, "json_pack");
    if (s->host) json_object_set_new(args, "clock", json_string("host"));
    json_t *e = json_pack("{s:s, s:s, s:s, s:f, s:f, s:i, s:i, s:o}", "name", s->name, "cat",
                          s->host ? "host" : "device", "ph", "X", "ts", (s->t0 - shift) * 1e6,
                          "dur", (s->t1 - s->t0) * 1e6, "pid", 1, "tid", s->track, "args", args);
    PULSE_CHECK(e, "json_pack");
    return e;
}

int timeline_write(struct timeline *t, const char *path, char *err, size_t errlen)
{
    json_t *summary = timeline_summary_json(t); /* resolves the spans */
    const int n = resolve(t);
    const int m = gather(t, n, (1u << TIMELINE_TRACKS) - 1, 0);
    qsort(t->scratch, (size_t)m, sizeof *t->scratch, cmp_ivl);
    const double shift = m && t->scratch[0].a < 0.0 ? t->scratch[0].a : 0.0;
    json_t *events = json_array();
    json_array_append_new(events, metadata_event("process_name", 0, "name", json_string("pulse")));
    for (int k = 0; k < TIMELINE_TRACKS; k++) {
        json_array_append_new(
            events, metadata_event("thread_name", k, "name", json_string(track_names[k])));
        json_array_append_new(
            events, metadata_event("thread_sort_index", k, "sort_index", json_integer(k)));
    }
    for (int k = 0; k < m; k++)
        json_array_append_new(events, span_event(&t->spans[t->scratch[k].i], shift));
    json_object_set_new(summary, "backend", json_string(t->be->name));
    results_set_real(summary, "ts_shift_us", shift < 0.0 ? -shift * 1e6 : 0.0);
    json_t *root = json_pack("{s:o, s:s, s:o}", "traceEvents", events, "displayTimeUnit", "ms",
                             "otherData", summary);
    PULSE_CHECK(root, "json_pack");
    const int rc = results_write(root, path, err, errlen);
    json_decref(root);
    return rc;
}

/* One X event's place in the layer-order check. */
struct check_key {
    int track, layer;
    int64_t step;
    double ts;
    size_t idx;
};

static int cmp_check(const void *x, const void *y)
{
    const struct check_key *a = x, *b = y;
    if (a->track != b->track) return a->track < b->track ? -1 : 1;
    if (a->step != b->step) return a->step < b->step ? -1 : 1;
    if (a->ts != b->ts) return a->ts < b->ts ? -1 : 1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

static int nonneg_number(json_t *v)
{
    return json_is_number(v) && isfinite(json_number_value(v)) && json_number_value(v) >= 0.0;
}

/* Checks event i (an "X" event) and fills its key; 0 or -1 with a reason. */
static int check_span(json_t *e, size_t i, struct check_key *key, const char *path, char *err,
                      size_t errlen)
{
#define BAD(...) pulse_errorf(err, errlen, -1, path, __VA_ARGS__)
    json_t *args = json_object_get(e, "args"), *tid = json_object_get(e, "tid");
    if (!json_is_string(json_object_get(e, "name")))
        return BAD("traceEvents[%zu]: no \"name\" string", i);
    if (!nonneg_number(json_object_get(e, "ts")))
        return BAD("traceEvents[%zu]: \"ts\" must be a number >= 0", i);
    if (!nonneg_number(json_object_get(e, "dur")))
        return BAD("traceEvents[%zu]: \"dur\" must be a number >= 0", i);
    if (!json_is_integer(tid) || json_integer_value(tid) < 0 ||
        json_integer_value(tid) >= TIMELINE_TRACKS)
        return BAD("traceEvents[%zu]: \"tid\" must be a track, an integer 0 .. %d", i,
                   TIMELINE_TRACKS - 1);
    if (!json_is_object(args)) return BAD("traceEvents[%zu]: no \"args\" object", i);
    static const char *const ints[] = {"batch", "layer", "step"};
    for (size_t k = 0; k < PULSE_ARRAY_LEN(ints); k++)
        if (!json_is_integer(json_object_get(args, ints[k])))
            return BAD("traceEvents[%zu]: args.%s must be an integer", i, ints[k]);
    *key = (struct check_key){.track = (int)json_integer_value(tid),
                              .layer = (int)json_integer_value(json_object_get(args, "layer")),
                              .step = json_integer_value(json_object_get(args, "step")),
                              .ts = json_number_value(json_object_get(e, "ts")),
                              .idx = i};
    return 0;
#undef BAD
}

int timeline_check(const char *path, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root)
        return pulse_errorf(err, errlen, -1, path, "not JSON: line %d: %s", je.line, je.text);
    json_t *events = json_object_get(root, "traceEvents");
    int rc = -1;
    struct check_key *keys = NULL;
    size_t n = 0, bytes = 0;
    if (!json_is_array(events)) {
        pulse_errorf(err, errlen, -1, path, "no \"traceEvents\" array");
        goto done;
    }
    bytes = (json_array_size(events) + 1) * sizeof *keys;
    if (!(keys = mem_alloc(MEM_HOST, bytes, "timeline check"))) {
        pulse_errorf(err, errlen, -1, path, "cannot allocate %zu bytes", bytes);
        goto done;
    }
    for (size_t i = 0; i < json_array_size(events); i++) {
        json_t *e = json_array_get(events, i);
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (!ph) {
            pulse_errorf(err, errlen, -1, path, "traceEvents[%zu]: no \"ph\" string", i);
            goto done;
        }
        if (strcmp(ph, "X") != 0) continue;
        if (check_span(e, i, &keys[n], path, err, errlen)) goto done;
        if (keys[n].layer >= 0) n++;
    }
    qsort(keys, n, sizeof *keys, cmp_check);
    for (size_t k = 1; k < n; k++) {
        const struct check_key *p = &keys[k - 1], *q = &keys[k];
        if (p->track == q->track && p->step == q->step && q->layer < p->layer) {
            pulse_errorf(err, errlen, -1, path,
                         "track %d (%s) step %lld: layer %d at ts %.3f us (traceEvents[%zu]) "
                         "after layer %d at ts %.3f us (traceEvents[%zu]): layers out of order",
                         q->track, track_names[q->track], (long long)q->step, q->layer, q->ts,
                         q->idx, p->layer, p->ts, p->idx);
            goto done;
        }
    }
    rc = 0;
done:
    mem_free(MEM_HOST, keys, bytes);
    json_decref(root);
    return rc;
}
