/* The timeline recorder (runtime/sched/timeline.h) on the cpu backend, whose timed events are host
 * times: spans on two tracks around known sleeps give a trace that timeline_check accepts,
 * with the sleeps' durations and a busy fraction between bounds measured around them; nested
 * spans count once; a full timeline drops spans and counts them; a host span lands on the
 * recall track marked "clock": "host"; recording allocates nothing; and hand-broken traces
 * are rejected with a message naming the fault. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "common.h"
#include "mem.h"
#include "testutil.h"
#include "timeline.h"

static char tmp_path[256];

static void sleep_ms(double ms)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)(ms * 1e6)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* A written trace, parsed. */
static json_t *load(const char *path)
{
    json_error_t je;
    json_t *r = json_load_file(path, 0, &je);
    EXPECT(r != NULL);
    return r;
}

static void test_events_cpu(const struct backend *be, const struct kctx *c)
{
    void *a = be->event_create_timed(), *b = be->event_create_timed(), *u = be->event_create();
    EXPECT(a && b && u);
    be->event_record(c, a);
    be->event_record(c, u); /* untimed: still fine */
    sleep_ms(3);
    be->event_record(c, b);
    EXPECT_EQ_INT(be->event_query(a), 1);
    EXPECT_EQ_INT(be->event_query(u), 1);
    be->event_sync(b);
    const double s = be->event_elapsed_s(a, b);
    EXPECT(s >= 3e-3 && s < 0.5);
    EXPECT_NEAR(be->event_elapsed_s(b, a), -s, 1e-12);
    be->event_destroy(a);
    be->event_destroy(b);
    be->event_destroy(u);
}

/* L layers, each a normal-batch span then an offload-batch span of SPAN_MS with GAP_MS
 * between spans; one recall host span inside the second offload gap; one span nested in the
 * first normal span. */
#define L 6
#define SPAN_MS 2.0
#define GAP_MS 1.0

static void test_schedule(const struct backend *be, const struct kctx *c)
{
    char err[512] = "";
    struct timeline *t = timeline_create(be, 64, err, sizeof err);
    EXPECT(t != NULL);
    if (!t) return;
    timeline_start(t, c);
    struct mem_stats m0, m1;
    mem_get_stats(&m0);
    /* inner: the sleeps, inside each span; outer: around each span's begin and end calls;
     * first, last: before the first begin and after the last end; in0, in1: inside them */
    double inner = 0.0, outer = 0.0, first = 0.0, last = 0.0, in0 = 0.0, in1 = 0.0;
    double h0 = 0.0, h1 = 0.0;
    for (int l = 0; l < L; l++) {
        for (int track = TIMELINE_NORMAL; track <= TIMELINE_OFFLOAD; track++) {
            const double o0 = pulse_now();
            const int s =
                timeline_begin(t, c, track, "layer", track == TIMELINE_NORMAL ? 0 : 1, l, 7);
            EXPECT(s >= 0);
            const double i0 = pulse_now();
            if (l == 0 && track == TIMELINE_NORMAL) { /* a nested piece: counted once */
                const int n = timeline_begin(t, c, track, "attn", 0, -1, 7);
                sleep_ms(SPAN_MS / 2);
                timeline_end(t, c, n);
                sleep_ms(SPAN_MS / 2);
            } else {
                sleep_ms(SPAN_MS);
            }
            const double i1 = pulse_now();
            timeline_end(t, c, s);
            const double o1 = pulse_now();
            inner += i1 - i0;
            outer += o1 - o0;
            if (l == 0 && track == TIMELINE_NORMAL) first = o0, in0 = i0;
            last = o1, in1 = i1;
            if (l < L - 1 || track == TIMELINE_NORMAL) {
                if (l == 1 && track == TIMELINE_OFFLOAD) h0 = pulse_now();
                sleep_ms(GAP_MS);
                if (l == 1 && track == TIMELINE_OFFLOAD) h1 = pulse_now();
            }
        }
    }
    timeline_host_span(t, TIMELINE_RECALL, "recall", 1, 2, 7, h0, h1);
    timeline_begin(t, c, TIMELINE_OFFLOAD, "never ended", 1, -1, 7);
    mem_get_stats(&m1);
    EXPECT_EQ_INT(m1.alloc_calls[MEM_HOST], m0.alloc_calls[MEM_HOST]); /* none while recording */

    /* busy fraction: the spans' union over the window, bounded by host times around them */
    double window = 0.0;
    const double frac = timeline_busy_fraction(t, &window);
    EXPECT(window >= in1 - in0 && window <= last - first);
    EXPECT(frac >= inner / (last - first) && frac <= outer / (in1 - in0));
    const double nominal = 2 * L * SPAN_MS / (2 * L * SPAN_MS + (2 * L - 1) * GAP_MS);
    EXPECT(frac > 0.3 && frac < 0.95);
    fprintf(stderr, "busy %.3f (nominal %.3f), window %.2f ms\n", frac, nominal, window * 1e3);

    json_t *sum = timeline_summary_json(t);
    EXPECT_EQ_INT(json_integer_value(json_object_get(sum, "spans")), 2 * L + 2);
    EXPECT_EQ_INT(json_integer_value(json_object_get(sum, "dropped")), 0);
    EXPECT_EQ_INT(json_integer_value(json_object_get(sum, "unended")), 1);
    EXPECT_NEAR(json_real_value(json_object_get(sum, "device_busy_fraction")), frac, 1e-12);
    json_t *busy = json_object_get(sum, "track_busy_s");
    const double bn = json_real_value(json_object_get(busy, "normal")),
                 bo = json_real_value(json_object_get(busy, "offload")),
                 br = json_real_value(json_object_get(busy, "recall"));
    EXPECT_NEAR(bn + bo, frac * window, 1e-9); /* the tracks never overlap here */
    EXPECT(bn >= L * SPAN_MS * 1e-3 && bo >= L * SPAN_MS * 1e-3);
    EXPECT_NEAR(br, h1 - h0, 1e-9);
    json_decref(sum);

    EXPECT_EQ_INT(timeline_write(t, tmp_path, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(timeline_check(tmp_path, err, sizeof err), 0);
    if (err[0]) fprintf(stderr, "%s\n", err);
    json_t *r = load(tmp_path);
    json_t *ev = json_object_get(r, "traceEvents");
    int x = 0, meta = 0, host = 0, named = 0;
    double prev_ts = -1.0, recall_ts = -1.0;
    for (size_t i = 0; i < json_array_size(ev); i++) {
        json_t *e = json_array_get(ev, i), *args = json_object_get(e, "args");
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (!strcmp(ph, "M")) {
            meta++;
            const char *nm = json_string_value(json_object_get(args, "name"));
            named += nm && (!strcmp(nm, "pulse") || !strcmp(nm, "normal batch") ||
                            !strcmp(nm, "offload batch") || !strcmp(nm, "recall I/O"));
            continue;
        }
        x++;
        const double ts = json_number_value(json_object_get(e, "ts")),
                     dur = json_number_value(json_object_get(e, "dur"));
        EXPECT(ts >= prev_ts); /* sorted */
        prev_ts = ts;
        EXPECT_EQ_INT(json_integer_value(json_object_get(e, "pid")), 1);
        const int tid = (int)json_integer_value(json_object_get(e, "tid"));
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *clock = json_string_value(json_object_get(args, "clock"));
        if (tid == TIMELINE_RECALL) {
            host++;
            EXPECT(clock && !strcmp(clock, "host"));
            EXPECT_NEAR(dur, (h1 - h0) * 1e6, 1.0);
            EXPECT_EQ_INT(json_integer_value(json_object_get(args, "layer")), 2);
            recall_ts = ts;
        } else {
            EXPECT(clock == NULL);
            EXPECT(dur >= (strcmp(name, "attn") ? SPAN_MS : SPAN_MS / 2) * 1e3);
            EXPECT(dur < 1e6);
            EXPECT_EQ_INT(json_integer_value(json_object_get(args, "batch")), tid);
            EXPECT_EQ_INT(json_integer_value(json_object_get(args, "step")), 7);
        }
    }
    EXPECT_EQ_INT(x, 2 * L + 2);
    EXPECT_EQ_INT(meta, 1 + 2 * TIMELINE_TRACKS);
    EXPECT_EQ_INT(named, 1 + TIMELINE_TRACKS);
    EXPECT_EQ_INT(host, 1);
    /* the host span sits in the gap after layer 1's offload span: after 4 spans and 3 gaps */
    EXPECT(recall_ts >= (4 * SPAN_MS + 3 * GAP_MS) * 1e3 && recall_ts < window * 1e6);
    json_t *od = json_object_get(r, "otherData");
    EXPECT(!strcmp(json_string_value(json_object_get(od, "backend")), "cpu"));
    EXPECT_NEAR(json_real_value(json_object_get(od, "device_busy_fraction")), frac, 1e-6);
    EXPECT(!strcmp(json_string_value(json_object_get(r, "displayTimeUnit")), "ms"));
    json_decref(r);

    /* a restart forgets the spans */
    timeline_start(t, c);
    EXPECT_NEAR(timeline_busy_fraction(t, &window), 0.0, 0);
    EXPECT_NEAR(window, 0.0, 0);
    timeline_free(t);
}

static void test_full(const struct backend *be, const struct kctx *c)
{
    char err[512] = "";
    struct timeline *t = timeline_create(be, 4, err, sizeof err);
    EXPECT(t != NULL);
    if (!t) return;
    timeline_start(t, c);
    int ids[6];
    for (int i = 0; i < 6; i++) {
        ids[i] = timeline_begin(t, c, TIMELINE_NORMAL, "layer", 3, i, 1);
        sleep_ms(0.2);
        timeline_end(t, c, ids[i]); /* -1: nothing */
    }
    const double now = pulse_now();
    timeline_host_span(t, TIMELINE_RECALL, "recall", 3, 0, 1, now, now + 1e-4);
    EXPECT(ids[0] == 0 && ids[3] == 3 && ids[4] == -1 && ids[5] == -1);
    json_t *sum = timeline_summary_json(t);
    EXPECT_EQ_INT(json_integer_value(json_object_get(sum, "spans")), 4);
    EXPECT_EQ_INT(json_integer_value(json_object_get(sum, "dropped")), 3);
    json_decref(sum);
    EXPECT_EQ_INT(timeline_write(t, tmp_path, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(timeline_check(tmp_path, err, sizeof err), 0);
    json_t *r = load(tmp_path);
    EXPECT_EQ_INT(json_integer_value(json_object_get(json_object_get(r, "otherData"), "dropped")),
                  3);
    json_decref(r);
    EXPECT_EQ_INT(timeline_write(t, "/nonexistent-dir/trace.json", err, sizeof err), PULSE_ERR_IO);
    EXPECT_STR_CONTAINS(err, "nonexistent-dir");
    timeline_free(t);

    /* NULL timeline: instrumentation switched off */
    EXPECT_EQ_INT(timeline_begin(NULL, c, TIMELINE_NORMAL, "layer", 0, 0, 0), -1);
    timeline_end(NULL, c, -1);
    timeline_host_span(NULL, TIMELINE_RECALL, "recall", 0, 0, 0, 1.0, 2.0);
    EXPECT(timeline_create(be, 0, err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "max_spans 0");
    struct backend untimed = *be;
    untimed.event_create_timed = NULL;
    EXPECT(timeline_create(&untimed, 8, err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "backend cpu has no timed events");
    EXPECT(!strcmp(timeline_track_name(TIMELINE_RECALL), "recall I/O"));
    EXPECT(!strcmp(timeline_track_name(9), "?"));
}

/* Writes text to the temporary file and returns timeline_check's status, the reason in err. */
static int check_text(const char *text, char *err, size_t errlen)
{
    FILE *f = fopen(tmp_path, "w");
    EXPECT(f != NULL);
    if (!f) return 99;
    fputs(text, f);
    fclose(f);
    err[0] = 0;
    return timeline_check(tmp_path, err, errlen);
}

#define SPAN(ts, dur, tid, layer, step)                                                            \
    "{\"name\":\"layer\",\"ph\":\"X\",\"ts\":" #ts ",\"dur\":" #dur ",\"pid\":1,\"tid\":" #tid     \
    ",\"args\":{\"batch\":5,\"layer\":" #layer ",\"step\":" #step "}}"

static void test_check_rejects(void)
{
    char err[512];
    /* in order per track and step; other steps, tracks and layer -1 spans interleave freely */
    EXPECT_EQ_INT(
        check_text(
            "{\"traceEvents\":[{\"name\":\"thread_name\",\"ph\":\"M\"}," SPAN(
                10.5, 3, 0, 1,
                2) "," SPAN(30, 2, 0, 3, 1) "," SPAN(20, 4, 0, 1,
                                                     2) "," SPAN(25, 1, 1, 0,
                                                                 2) "," SPAN(26, 1, 0, -1,
                                                                             2) "," SPAN(40, 0, 0,
                                                                                         2, 2) "]}",
            err, sizeof err),
        0);
    EXPECT_EQ_INT(
        check_text("{\"traceEvents\":[" SPAN(10, 3, 0, 2, 4) "," SPAN(20, 3, 0, 1, 4) "]}", err,
                   sizeof err),
        -1);
    EXPECT_STR_CONTAINS(err, "layers out of order");
    EXPECT_STR_CONTAINS(err, "step 4: layer 1");
    EXPECT_EQ_INT(check_text("{\"traceEvents\":[" SPAN(10, -2.5, 1, 0, 0) "]}", err, sizeof err),
                  -1);
    EXPECT_STR_CONTAINS(err, "traceEvents[0]: \"dur\" must be a number >= 0");
    EXPECT_EQ_INT(check_text("{\"traceEvents\":[" SPAN(-1, 2, 1, 0, 0) "]}", err, sizeof err), -1);
    EXPECT_STR_CONTAINS(err, "\"ts\"");
    EXPECT_EQ_INT(check_text("{\"events\":[" SPAN(10, 3, 0, 2, 4) "]}", err, sizeof err), -1);
    EXPECT_STR_CONTAINS(err, "no \"traceEvents\" array");
    EXPECT_EQ_INT(check_text("{\"traceEvents\":[" SPAN(10, 3, 3, 2, 4) "]}", err, sizeof err), -1);
    EXPECT_STR_CONTAINS(err, "\"tid\" must be a track");
    EXPECT_EQ_INT(check_text("{\"traceEvents\":[" SPAN(10, 3, 0, 2.5, 4) "]}", err, sizeof err),
                  -1);
    EXPECT_STR_CONTAINS(err, "args.layer must be an integer");
    EXPECT_EQ_INT(
        check_text("{\"traceEvents\":[{\"ph\":\"X\",\"ts\":1,\"dur\":1}]}", err, sizeof err), -1);
    EXPECT_STR_CONTAINS(err, "no \"name\"");
    EXPECT_EQ_INT(check_text("{\"traceEvents\":[{\"name\":\"a\"}]}", err, sizeof err), -1);
    EXPECT_STR_CONTAINS(err, "no \"ph\"");
    EXPECT_EQ_INT(check_text("{\"traceEvents\": [", err, sizeof err), -1);
    EXPECT_STR_CONTAINS(err, "not JSON");
    EXPECT_EQ_INT(timeline_check("/nonexistent-dir/trace.json", err, sizeof err), -1);
    EXPECT_STR_CONTAINS(err, "/nonexistent-dir/trace.json");
}

int main(void)
{
    snprintf(tmp_path, sizeof tmp_path, "/tmp/pulse_test_timeline_%d.json", (int)getpid());
    const struct backend *be = backend_find("cpu");
    struct kctx c;
    EXPECT_EQ_INT(be->ctx_create(&c, 0), PULSE_OK);
    test_events_cpu(be, &c);
    test_schedule(be, &c);
    test_full(be, &c);
    test_check_rejects();
    be->ctx_free(&c);
    remove(tmp_path);
    struct mem_stats st;
    mem_get_stats(&st);
    EXPECT_EQ_INT(st.live_bytes[MEM_HOST], 0);
    return tu_finish("test_timeline");
}
