/* Progress lines of set-up phases (progress.h). */
#include "progress.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static enum progress_mode g_mode = PROGRESS_AUTO;
static FILE *g_out; /* NULL = stderr */
static double g_delay = PROGRESS_DELAY_S;

static void from_env(void)
{
    double v;
    if (!pulse_diag_number(PULSE_DIAG_PROGRESS, &v)) return;
    if (v == 0) {
        g_mode = PROGRESS_OFF;
    } else {
        g_mode = PROGRESS_ON;
        g_delay = 0.0;
    }
}

static FILE *out_stream(void)
{
    return g_out ? g_out : stderr;
}

void progress_configure(enum progress_mode mode, FILE *out, double delay_s)
{
    pthread_once(&g_once, from_env); /* so that a later first use does not undo this */
    pthread_mutex_lock(&g_lock);
    g_mode = mode;
    g_out = out;
    g_delay = delay_s < 0 ? PROGRESS_DELAY_S : delay_s;
    pthread_mutex_unlock(&g_lock);
}

int progress_enabled(void)
{
    pthread_once(&g_once, from_env);
    if (g_mode == PROGRESS_OFF) return 0;
    if (g_mode == PROGRESS_ON) return 1;
    return isatty(fileno(out_stream()));
}

void progress_begin(struct progress *p, const char *label, const char *unit, double total)
{
    memset(p, 0, sizeof *p);
    snprintf(p->label, sizeof p->label, "%s", label);
    snprintf(p->unit, sizeof p->unit, "%s", unit);
    p->total = total;
    p->on = progress_enabled();
    p->t0 = pulse_now();
    p->next = p->t0 + g_delay;
}

/* The line for `done` at time now (caller holds the lock). */
static void print_line(struct progress *p, double done, double now, int final)
{
    FILE *f = out_stream();
    if (p->total < 0)
        fprintf(f, "\r%s %.1f s   ", p->label, now - p->t0);
    else if (p->total > 0)
        fprintf(f, "\r%s %.1f/%.1f %s %.1f s (%.1f %s/s)   ", p->label, done, p->total, p->unit,
                now - p->t0, now > p->t0 ? done / (now - p->t0) : 0.0, p->unit);
    else
        fprintf(f, "\r%s %.1f %s %.1f s (%.1f %s/s)   ", p->label, done, p->unit, now - p->t0,
                now > p->t0 ? done / (now - p->t0) : 0.0, p->unit);
    if (final) fputc('\n', f);
    fflush(f);
    p->shown = 1;
}

void progress_update(struct progress *p, double done)
{
    if (!p->on) return;
    double now = pulse_now();
    pthread_mutex_lock(&g_lock); /* p->next is shared by the threads that update p */
    if (now >= p->next) {
        print_line(p, done, now, 0);
        p->next = now + PROGRESS_INTERVAL_S;
    }
    pthread_mutex_unlock(&g_lock);
}

void progress_end(struct progress *p, double done)
{
    if (!p->on || !p->shown) return;
    pthread_mutex_lock(&g_lock);
    print_line(p, done, pulse_now(), 1);
    pthread_mutex_unlock(&g_lock);
}
