/* Progress lines for the slow phases of a run's set-up (pinning the host pool, writing prompt KV,
 * the locality calibration): one line on stderr, rewritten in place ("\rpin 12.0/30.7 GB 4.1 s"),
 * finished with a newline when the phase ends. Only when stderr is a terminal, and only once a
 * phase has run for PROGRESS_DELAY_S (shorter phases print nothing), so logs, pipes and tests see
 * no progress text. The environment can override that: PULSE_PROGRESS=0 never prints, =1 always
 * prints (terminal or not, from the first update: for logs that want the lines, and for tests).
 *
 * Lines are refreshed at most every PROGRESS_INTERVAL_S. progress_update may be called from any
 * thread (lines are serialised by one lock); begin and end by the thread that owns the phase.
 * Nothing allocates. */
#ifndef PULSE_PROGRESS_H
#define PULSE_PROGRESS_H

#include <stdio.h>

#define PROGRESS_DELAY_S 1.0
#define PROGRESS_INTERVAL_S 0.25

enum progress_mode { PROGRESS_AUTO = 0, PROGRESS_ON = 1, PROGRESS_OFF = 2 };

/* One phase. Plain data: the caller owns it (on its stack or in its state). */
struct progress {
    char label[48]; /* "pin", "prompt KV", "calibration" */
    char unit[16];  /* "GB", "layers", "streams" */
    double total;   /* in units; 0: unknown (the line shows what is done); < 0: no amounts
                       (the line shows the label and the time) */
    double t0;      /* pulse_now() at begin */
    double next;    /* earliest time of the next line */
    int on;         /* lines enabled for this phase */
    int shown;      /* a line was printed: end finishes it with a newline */
};

/* Starts a phase; label and unit are copied (truncated to the fields). */
void progress_begin(struct progress *p, const char *label, const char *unit, double total);
/* `done` units of the total so far: prints the line when enabled, past the delay and the
 * refresh interval. */
void progress_update(struct progress *p, double done);
/* Ends the phase: when a line was shown, prints the final one (done units, elapsed) and a
 * newline. */
void progress_end(struct progress *p, double done);

/* Tests: the mode (PROGRESS_AUTO decides by isatty of the stream), the stream (NULL = stderr)
 * and the delay before a phase's first line (< 0 = PROGRESS_DELAY_S; PULSE_PROGRESS=1 makes it
 * 0). Overrides PULSE_PROGRESS. Call before phases start, not while one runs. */
void progress_configure(enum progress_mode mode, FILE *out, double delay_s);
/* Whether a phase begun now would print (mode, terminal) — for messages and tests. */
int progress_enabled(void);

#endif
