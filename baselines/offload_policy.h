/* The serving-loop side shared by the offload policies (arkvale.c, infinigen.c): FCFS admission
 * of offload requests while the GPU pages, the host pool and the digest store allow (the head of
 * the queue blocks the rest), one step through offload_step, release. Their policy context is a
 * struct offload (offload.h) created with the policy's schedule. Writing a prompt's synthetic KV
 * into the host pool stands for the prefill instance: the loop's clock is paused meanwhile. */
#ifndef PULSE_OFFLOAD_POLICY_H
#define PULSE_OFFLOAD_POLICY_H

#include "serve.h"

/* The context: offload_create over p->offload (its schedule the policy's), offload_free. */
int offload_policy_ctx_create(const struct policy_ctx_params *p, void **ctx, char *err,
                              size_t errlen);
void offload_policy_ctx_free(void *ctx);
int offload_policy_admit(struct serve_state *s);
/* PULSE_OK, or the step's failure; the recall counters go into s->ctr. */
int offload_policy_step(struct serve_state *s);
void offload_policy_release(struct serve_state *s, int slot);
/* The runtime's recall totals into the loop's counters, once, after the last step. */
void offload_policy_finish(struct serve_state *s);
/* The offload runtime o's recall and prefetch totals into c (offload_policy_finish's). */
struct offload;
void offload_policy_counters(const struct offload *o, struct serve_counters *c);
/* offload_step_traffic of the policy context. */
void offload_policy_traffic(struct serve_state *s, int ahead, struct floor_traffic *t);

/* The table of an offload policy over the functions above: its name, its layer schedule (a
 * struct offload_schedule of its own file) and that schedule's lookahead (overlapped: the
 * recall overlaps compute; offload_policy_step checks the two agree), and its defaults of pulse
 * run's --selection, --recall-engine,
 * --page-size, cache pages and --reuse (struct policy). */
#define OFFLOAD_POLICY_TABLE(pol_name, sched, ahead, sel, eng, page, cache, refetch)               \
    {                                                                                              \
        .name = pol_name, .admit = offload_policy_admit, .admit_idle = serve_admit_idle_reserved,  \
        .step = offload_policy_step, .release = offload_policy_release,                            \
        .traffic = offload_policy_traffic, .finish = offload_policy_finish, .overlapped = ahead,   \
        .needs_ctx = 1, .ctx_kind = POLICY_CTX_OFFLOAD, .ctx_create = offload_policy_ctx_create,   \
        .ctx_free = offload_policy_ctx_free, .offload_schedule = sched, .offload_selection = sel,  \
        .offload_engine = eng, .offload_page_size = page, .offload_cache_pages = cache,            \
        .offload_refetch = refetch                                                                 \
    }

#endif
