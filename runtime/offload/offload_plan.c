/* The offload runtime's planner thread (offload_impl.h): per sparse layer of a step, once the
 * selection's lists are on the host, it plans the hot cache (hits, misses, victims), writes the
 * layer's control block (attended lengths and pages, tail-flush descriptors), and submits the
 * misses to the recall engine with the layer's flag as the recall's signal; the compute stream
 * waits on that flag on the device. While the recall runs it feeds the locality meter (which
 * the plan does not read), then waits for the recall itself, counts it and retries a failed
 * one (the flag is set in the end either way, so the device never waits forever; a recall
 * that failed every attempt makes the step's status PULSE_ERR_IO). Jobs come in order through a ring; the main thread never blocks on them
 * inside a step. */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "offload_impl.h"
#include "timeline.h"

#define RECALL_ATTEMPTS 3

struct job {
    int kind, layer;
    int64_t step;
    int lane, first, n; /* the lane whose layer it is, and its entries of the step */
};

struct offload_planner {
    pthread_t th;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct job *ring;
    int cap;
    _Atomic int64_t posted, done;
    _Atomic int stop, sleeping;
};

/* ------------------------------------------------------------------ plan */

static void count_access(struct offload_layer_stats *ls, const struct hot_cache_result *r)
{
    ls->hits += r->n_hits;
    ls->misses += r->n_recalls;
    ls->fresh += r->fresh_block >= 0;
    ls->evictions += r->fresh_victim >= 0;
    for (int i = 0; i < r->n_recalls; i++)
        ls->evictions += r->victim_block[i] >= 0;
}

/* The access r's misses of list k of (cache slot, sparse layer sl) as recall items from
 * o->plan.items[n_items] on (own: the slot's owned GPU pages of the layer); returns the count. */
static int push_recalls(struct offload *o, const struct hot_cache_result *r, int slot, int sl,
                        int k, const int32_t *own, int n_items)
{
    for (int i = 0; i < r->n_recalls; i++)
        o->plan.items[n_items++] = (struct recall_item){
            offload_host_chunk(o, o->store.hp_slot[slot], sl, r->recall_block[i], k),
            offload_gpu_piece(o, own[r->recall_slot[i]], k), offload_chunk_bytes(o)};
    return n_items;
}

/* Hot-cache access of list k of entry b (n tokens, nb blocks): appends its recall items and
 * writes its page list (the tail read from the tail page T), attended length and, when the tail
 * block fills this step, its flush descriptor into the control block. */
static int plan_list(struct offload *o, const struct offload_step_state *ss, int layer,
                     const int32_t *h_sel, int32_t *ctl, int b, int k, int tail_new, int n_items,
                     struct recall_desc **desc)
{
    const int B = ss->n, sl = offload_sl(o, layer), slot = ss->slot[b], v = b * o->n_lists + k;
    const int n = ss->n_tok[b], nb = (int)PULSE_CEIL_DIV(n, o->ps);
    const int cnt = h_sel[(size_t)B * o->n_lists * o->ms + v];
    const int32_t *sel = h_sel + (size_t)v * o->ms;
    struct hot_cache_result *r = &o->plan.res;
    const int unit = offload_unit(o, slot, sl, k);
    if (o->p.refetch) { /* InfiniGen: nothing kept across steps; the tail is read from T */
        for (int i = 0; i < cnt - 1; i++)
            o->ls[layer].refetched += hot_cache_lookup(o->store.hc, unit, sel[i]) >= 0;
        hot_cache_reset(o->store.hc, unit);
    }
    int rc = hot_cache_access(o->store.hc, unit, sel, cnt, nb, tail_new || o->p.refetch, r);
    PULSE_CHECK(rc == PULSE_OK && cnt >= 1 && sel[cnt - 1] == nb - 1,
                "offload: the hot cache refused a selection (or it lacks the tail)");
    count_access(&o->ls[layer], r);
    int n_own;
    const int32_t *own = kv_cache_owned_pages(o->store.kv, slot, layer, &n_own);
    n_items = push_recalls(o, r, slot, sl, k, own, n_items);
    const size_t V = (size_t)o->max_batch * o->n_lists;
    int32_t *pages = ctl + V + (size_t)v * o->ms;
    for (int i = 0; i < cnt - 1; i++)
        pages[i] = offload_att_page(o, own[r->attend_slot[i]], k);
    pages[cnt - 1] = offload_att_page(o, own[n_own - 1], k);
    ctl[v] = (cnt - 1) * o->ps + (n - (nb - 1) * o->ps);
    o->step.traffic[ss->step & 1].kv_bytes += (double)ctl[v] * offload_chunk_bytes(o) / o->ps;
    if (n % o->ps == 0) /* the tail block filled: T into the tail's slot */
        *(*desc)++ = (struct recall_desc){
            (uint64_t)(uintptr_t)offload_gpu_piece(o, own[n_own - 1], k),
            (uint64_t)(uintptr_t)offload_gpu_piece(o, own[r->attend_slot[cnt - 1]], k),
            offload_chunk_bytes(o), 0};
    return n_items;
}

/* Every list of the batch; returns the number of recall items. The tail is new when the
 * entry has more blocks than at its last step (as the meter defines it), unless this step's
 * prefetch of the layer (predicted) gave it its slot already. */
static int plan(struct offload *o, const struct offload_step_state *ss, int layer,
                const int32_t *h_sel, int32_t *ctl, int predicted)
{
    const int sl = offload_sl(o, layer);
    struct recall_desc *desc = (struct recall_desc *)(ctl + offload_ctl_desc_off(o));
    int n_items = 0;
    for (int b = 0; b < ss->n; b++) {
        const int nb = (int)PULSE_CEIL_DIV(ss->n_tok[b], o->ps);
        int32_t *last = &o->store.last_nb[ss->slot[b] * o->n_sparse + sl];
        const int tail_new = *last > 0 && nb > *last && !predicted;
        *last = nb;
        for (int k = 0; k < o->n_lists; k++)
            n_items = plan_list(o, ss, layer, h_sel, ctl, b, k, tail_new, n_items, &desc);
        o->ls[layer].selections++;
    }
    return n_items;
}

/* A prefetch (offload_prefetch): the predicted lists' hot-cache access, every list of the
 * batch, their misses as recall items (returned: their number); no control block (no
 * attention reads these lists). The new tail takes its slot here, as plan would. */
static int plan_prefetch(struct offload *o, const struct offload_step_state *ss, int layer,
                         const int32_t *h_sel)
{
    const int sl = offload_sl(o, layer), B = ss->n;
    struct offload_layer_stats *ls = &o->ls[layer];
    struct hot_cache_result *r = &o->plan.res;
    int n_items = 0;
    for (int b = 0; b < B; b++) {
        const int slot = ss->slot[b], nb = (int)PULSE_CEIL_DIV(ss->n_tok[b], o->ps);
        const int32_t last = o->store.last_nb[slot * o->n_sparse + sl];
        int n_own;
        const int32_t *own = kv_cache_owned_pages(o->store.kv, slot, layer, &n_own);
        for (int k = 0; k < o->n_lists; k++) {
            const int v = b * o->n_lists + k;
            const int cnt = h_sel[(size_t)B * o->n_lists * o->ms + v];
            int rc = hot_cache_access(o->store.hc, offload_unit(o, slot, sl, k),
                                      h_sel + (size_t)v * o->ms, cnt, nb, last > 0 && nb > last, r);
            PULSE_CHECK(rc == PULSE_OK, "offload: the hot cache refused a predicted selection");
            ls->spec_lists++;
            ls->spec_hits += r->n_hits;
            ls->spec_misses += r->n_recalls;
            ls->fresh += r->fresh_block >= 0;
            ls->evictions += r->fresh_victim >= 0;
            for (int i = 0; i < r->n_recalls; i++)
                ls->evictions += r->victim_block[i] >= 0;
            n_items = push_recalls(o, r, slot, sl, k, own, n_items);
        }
    }
    return n_items;
}

/* The prediction's overlap with the exact lists of a layer predicted this step (the
 * prefetch's lists of the same parity), into the layer's counters. */
static void count_overlap(struct offload *o, const struct offload_step_state *ss, int lane, int p,
                          int layer)
{
    const int sl = offload_sl(o, layer), B = ss->n, V = B * o->n_lists;
    const int32_t *ex = offload_lane_sel(o, lane, p, sl, B),
                  *sp = offload_lane_spec_sel(o, lane, p, sl, B);
    struct offload_layer_stats *ls = &o->ls[layer];
    for (int v = 0; v < V; v++) {
        const int nb = (int)PULSE_CEIL_DIV(ss->n_tok[v / o->n_lists], o->ps);
        int scored;
        ls->spec_held += select_overlap(nb, o->p.sink, o->p.window, ex + (size_t)v * o->ms,
                                        ex[(size_t)V * o->ms + v], sp + (size_t)v * o->ms,
                                        sp[(size_t)V * o->ms + v], &scored);
        ls->spec_scored += scored;
    }
}

static void set_flag(uint32_t *flag, uint32_t value)
{
    atomic_store_explicit((_Atomic uint32_t *)flag, value, memory_order_release);
}

/* The misses to the recall engine with the layer's flag as the signal. */
static int64_t recall_submit_layer(struct offload *o, int lane, int layer, int n_items,
                                   uint32_t seq)
{
    const struct recall_signal sig = {&o->step.lanes[lane].flags[offload_sl(o, layer)], seq};
    int64_t ticket;
    int rc = recall_submit_signal(o->store.rc, o->plan.items, n_items, &sig, &ticket);
    PULSE_CHECK(rc == PULSE_OK, "offload: recall_submit refused a round");
    return ticket;
}

/* A prefetch's misses to the recall engine (no flag: the planner waits for it). */
static int64_t recall_submit_prefetch(struct offload *o, int n_items)
{
    int64_t ticket;
    int rc = recall_submit(o->store.rc, o->plan.items, n_items, &ticket);
    PULSE_CHECK(rc == PULSE_OK, "offload: recall_submit refused a prefetch");
    return ticket;
}

/* Waits for a layer's recall (a prefetch's when spec), resubmits a failed one, counts it in
 * the layer's counters; a recall that failed every attempt fails the step (and, but for a
 * prefetch, sets its flag: the device must not wait forever). */
static void recall_wait_layer(struct offload *o, int lane, int layer, int n_items, uint32_t seq,
                              int64_t ticket, double t_submit, int spec)
{
    struct offload_layer_stats *ls = &o->ls[layer];
    for (int attempt = 0;; attempt++) {
        const double t0 = pulse_now();
        const int stalled = recall_query(o->store.rc, ticket) == 0;
        int rc = recall_wait(o->store.rc, ticket);
        ls->recall_wait_s += pulse_now() - t0;
        ls->recalls++;
        ls->stalls += stalled;
        if (rc == PULSE_OK) {
            timeline_host_span(o->plan.tl, TIMELINE_RECALL, spec ? "prefetch" : "recall", 1, layer,
                               (int64_t)seq - 1, t_submit, pulse_now());
            const int64_t bytes = (int64_t)n_items * (int64_t)offload_chunk_bytes(o);
            ls->recall_bytes += bytes;
            ls->recall_chunks += n_items;
            if (spec) ls->spec_recall_bytes += bytes;
            return;
        }
        o->st.recall_failures++;
        if (attempt + 1 == RECALL_ATTEMPTS) break;
        ticket = spec ? recall_submit_prefetch(o, n_items)
                      : recall_submit_layer(o, lane, layer, n_items, seq);
    }
    int ok = PULSE_OK;
    atomic_compare_exchange_strong(&o->status, &ok, PULSE_ERR_IO);
    if (!spec)
        set_flag(&o->step.lanes[lane].flags[offload_sl(o, layer)],
                 seq); /* the device must not wait forever */
}

/* Waits for the layer's recall of step `step` (submitted at t_submit; a prefetch's when spec),
 * resubmits a failed one, and counts it: the layer's, the step's series and traffic, the
 * planner's recall phase. */
static void recall_finish_layer(struct offload *o, int lane, int layer, int n_items, int64_t step,
                                int64_t ticket, double t_submit, int spec)
{
    const int64_t bytes = (int64_t)n_items * (int64_t)offload_chunk_bytes(o);
    if (step < o->p.max_steps) o->series[step] += bytes;
    o->step.traffic[step & 1].recall_bytes += (double)bytes;
    recall_wait_layer(o, lane, layer, n_items, (uint32_t)(step + 1), ticket, t_submit, spec);
    o->plan.planner_phase_s[OFFLOAD_PLANNER_RECALL] += pulse_now() - t_submit;
}

/* PULSE_OFFLOAD_TRACE=1: one line per planner job on stderr (debugging a stuck step). */
static int trace_on(void)
{
    static int on = -1;
    if (on < 0) {
        on = pulse_diag_switch(PULSE_DIAG_OFFLOAD_TRACE);
    }
    return on;
}

/* Whether sparse layer sl was predicted in `step` (by either lane: a split step's lanes both
 * run every layer, each predicting its own entries'). */
static int predicted_step(const struct offload *o, int sl, int64_t step)
{
    return *offload_pl_spec_step(o, 0, sl) == step ||
           (o->p.lanes == 2 && *offload_pl_spec_step(o, 1, sl) == step);
}

/* The device path's step: each layer's totals since the last step into its counters, the
 * per-step series and the step's traffic. */
static void step_totals(struct offload *o, const struct job *j)
{
    const int p = (int)(j->step & 1);
    o->be->event_sync(o->step.ev_end[p]);
    const int64_t *cur = o->step.h_totals[p];
    const int64_t chunk = (int64_t)offload_chunk_bytes(o);
    const struct offload_step_state *ss = &o->step.ss[p];
    for (int row = 0; row < (1 + o->spec) * o->n_sparse; row++) {
        const int sl = row % o->n_sparse, spec = row >= o->n_sparse;
        int64_t d[OFFLOAD_TOTALS];
        for (int t = 0; t < OFFLOAD_TOTALS; t++) {
            d[t] = cur[row * OFFLOAD_TOTALS + t] - o->plan.prev_totals[row * OFFLOAD_TOTALS + t];
            o->plan.prev_totals[row * OFFLOAD_TOTALS + t] = cur[row * OFFLOAD_TOTALS + t];
        }
        struct offload_layer_stats *ls = &o->ls[o->layer_of[sl]];
        const int64_t miss = d[HOT_PLAN_MISSES];
        if (spec) { /* the prediction's plan (offload_prefetch) */
            ls->spec_lists += predicted_step(o, sl, j->step) ? (int64_t)ss->n * o->n_lists : 0;
            ls->spec_hits += d[HOT_PLAN_HITS];
            ls->spec_misses += miss;
            ls->spec_recall_bytes += miss * chunk;
        } else {
            ls->hits += d[HOT_PLAN_HITS];
            ls->misses += miss;
            ls->selections += ss->n;
            ls->corrections += predicted_step(o, sl, j->step) ? miss : 0;
            ls->attend_recalled += offload_attend_recalls(o, o->layer_of[sl]) ? miss : 0;
            ls->correction_holds += d[OFFLOAD_TOT_HELD];
            o->step.traffic[p].kv_bytes += (double)d[OFFLOAD_TOT_ATT] * (double)chunk / o->ps;
        }
        ls->fresh += d[HOT_PLAN_FRESH];
        ls->evictions += d[HOT_PLAN_EVICTIONS];
        ls->recall_chunks += miss;
        ls->recall_bytes += miss * chunk;
        ls->recalls += miss > 0;
        if (j->step < o->p.max_steps) o->series[j->step] += miss * chunk;
        o->step.traffic[p].recall_bytes += (double)(miss * chunk);
        if (d[OFFLOAD_TOT_REFUSED]) { /* a selection the hot cache refused: a bug */
            int ok = PULSE_OK;
            atomic_compare_exchange_strong(&o->status, &ok, PULSE_ERR_INVALID);
            fprintf(stderr,
                    "offload: step %lld layer %d: the device hot cache refused %lld lists\n",
                    (long long)j->step, o->layer_of[sl], (long long)d[OFFLOAD_TOT_REFUSED]);
        }
    }
}

/* The source's meter on sparse layer sl's lists of a step. */
static void meter(struct offload *o, const struct offload_step_state *ss, int lane, int p, int sl)
{
    if (!o->qs) return; /* the real query without a source: nothing to meter */
    const int32_t *h_sel = offload_lane_sel(o, lane, p, sl, ss->n);
    const size_t lists = (size_t)ss->n * o->n_lists;
    int rc = o->qs->meter_add(o->qs->user, o->layer_of[sl], ss->slot, ss->n_tok, h_sel,
                              h_sel + lists * o->ms, ss->n);
    PULSE_CHECK(rc == PULSE_OK, "offload: the source's meter refused a selection");
}

/* A prefetch job of the lane's entries ss: the predicted lists (waited for); on the
 * host-planned path their hot-cache access and the recall of their misses, waited for here so
 * that the layer's exact plan, the lane's next job of the layer, finds them landed. The device
 * path plans and gathers on the device: the job only marks the layer predicted, for the
 * counters. */
static void run_prefetch(struct offload *o, const struct job *j,
                         const struct offload_step_state *ss)
{
    const int p = (int)(j->step & 1), sl = offload_sl(o, j->layer);
    double *ph = o->plan.planner_phase_s, t = pulse_now();
    o->be->event_sync(o->step.lanes[j->lane].ev_spec_sel[(size_t)p * o->n_sparse + sl]);
    offload_lap(ph, OFFLOAD_PLANNER_LISTS, &t);
    *offload_pl_spec_step(o, j->lane, sl) = j->step;
    if (o->device_plan) return;
    recall_prime(o->store.rc);
    const int n_items =
        plan_prefetch(o, ss, j->layer, offload_lane_spec_sel(o, j->lane, p, sl, ss->n));
    offload_lap(ph, OFFLOAD_PLANNER_PLAN, &t);
    if (n_items == 0) return;
    const int64_t ticket = recall_submit_prefetch(o, n_items);
    recall_finish_layer(o, j->lane, j->layer, n_items, j->step, ticket, t, 1);
}

/* A layer job: the lists (waited for), then for JOB_PLAN the plan and the recall's submit,
 * the meter while the recall runs (it does not feed the plan), and the recall's end. */
static void run_job(struct offload *o, const struct job *j)
{
    if (j->kind == OFFLOAD_JOB_STEP) {
        step_totals(o, j);
        return;
    }
    const int p = (int)(j->step & 1), sl = offload_sl(o, j->layer);
    /* the job's lane: its entries of the step */
    const struct offload_step_state *full = &o->step.ss[p];
    const struct offload_step_state lane_ss = {j->n, full->step, full->slot + j->first,
                                               full->n_tok + j->first};
    const struct offload_step_state *ss = &lane_ss;
    const struct offload_lane *L = &o->step.lanes[j->lane];
    double *ph = o->plan.planner_phase_s, t = pulse_now();
    if (trace_on())
        fprintf(stderr, "planner: step %lld layer %d: waiting for %slists\n", (long long)j->step,
                j->layer, j->kind == OFFLOAD_JOB_PREFETCH ? "predicted " : "");
    if (j->kind == OFFLOAD_JOB_PREFETCH) {
        run_prefetch(o, j, ss);
        return;
    }
    const int predicted = *offload_pl_spec_step(o, j->lane, sl) == j->step;
    o->be->event_sync(L->ev_sel[(size_t)p * o->n_sparse + sl]);
    offload_lap(ph, OFFLOAD_PLANNER_LISTS, &t);
    if (trace_on())
        fprintf(stderr, "planner: step %lld layer %d: lists in\n", (long long)j->step, j->layer);
    const uint32_t seq = (uint32_t)(j->step + 1);
    int n_items = 0;
    int64_t ticket = -1;
    if (j->kind == OFFLOAD_JOB_PLAN) {
        recall_prime(o->store.rc); /* the engine's threads wake while the plan is made */
        n_items = plan(o, ss, j->layer, offload_lane_sel(o, j->lane, p, sl, ss->n),
                       offload_lane_ctl(o, j->lane, p, sl), predicted);
        offload_lap(ph, OFFLOAD_PLANNER_PLAN, &t);
        if (n_items > 0)
            ticket = recall_submit_layer(o, j->lane, j->layer, n_items, seq);
        else
            set_flag(&L->flags[sl], seq);
    }
    const double t_submit = t;
    meter(o, ss, j->lane, p, sl); /* inside the recall's time when there is one */
    if (predicted) count_overlap(o, ss, j->lane, p, j->layer);
    offload_lap(ph, OFFLOAD_PLANNER_METER, &t);
    if (n_items > 0) {
        recall_finish_layer(o, j->lane, j->layer, n_items, j->step, ticket, t_submit, 0);
        o->ls[j->layer].corrections += predicted ? n_items : 0;
    }
    if (trace_on())
        fprintf(stderr, "planner: step %lld layer %d: %d items, flag %u\n", (long long)j->step,
                j->layer, n_items, seq);
}

/* ------------------------------------------------------------------ the thread */

static void *planner_main(void *arg)
{
    struct offload *o = arg;
    struct offload_planner *pl = o->pl;
    for (;;) {
        int64_t done = atomic_load(&pl->done);
        double spin_end = pulse_now() + 200e-6;
        while (atomic_load(&pl->posted) == done && !atomic_load(&pl->stop)) {
            if (pulse_now() < spin_end) {
                sched_yield();
                continue;
            }
            pthread_mutex_lock(&pl->mu);
            atomic_store(&pl->sleeping, 1);
            if (atomic_load(&pl->posted) == done && !atomic_load(&pl->stop))
                pthread_cond_wait(&pl->cv, &pl->mu);
            atomic_store(&pl->sleeping, 0);
            pthread_mutex_unlock(&pl->mu);
        }
        if (atomic_load(&pl->posted) == done) return NULL; /* stopping, nothing left */
        run_job(o, &pl->ring[done % pl->cap]);
        atomic_store(&pl->done, done + 1);
    }
}

int offload_planner_start(struct offload *o)
{
    struct offload_planner *pl = mem_alloc(MEM_HOST, sizeof *pl, "offload planner");
    if (!pl) return PULSE_ERR_OOM;
    memset(pl, 0, sizeof *pl);
    /* two steps of jobs (a layer's, its prediction's with o->spec, the step's): the planner
     * waits on each layer's lists, so it runs up to a step behind the host's posts, and a ring
     * of one step's jobs makes the host wait for it (host syncs inside the step) */
    pl->cap = 2 * ((1 + o->spec) * o->n_layers * (o->p.lanes == 2 ? 2 : 1) + 1) + 2;
    pl->ring = mem_alloc(MEM_HOST, sizeof(struct job) * (size_t)pl->cap, "planner jobs");
    o->pl = pl;
    if (!pl->ring) return PULSE_ERR_OOM;
    pthread_mutex_init(&pl->mu, NULL);
    pthread_cond_init(&pl->cv, NULL);
    if (pthread_create(&pl->th, NULL, planner_main, o)) return PULSE_ERR_OOM;
    pl->started = 1;
    return PULSE_OK;
}

void offload_planner_stop(struct offload *o)
{
    struct offload_planner *pl = o->pl;
    if (!pl) return;
    if (pl->started) {
        pthread_mutex_lock(&pl->mu);
        atomic_store(&pl->stop, 1);
        pthread_cond_signal(&pl->cv);
        pthread_mutex_unlock(&pl->mu);
        pthread_join(pl->th, NULL);
        pthread_mutex_destroy(&pl->mu);
        pthread_cond_destroy(&pl->cv);
    }
    mem_free(MEM_HOST, pl->ring, sizeof(struct job) * (size_t)pl->cap);
    mem_free(MEM_HOST, pl, sizeof *pl);
    o->pl = NULL;
}

void offload_planner_post(struct offload *o, int kind, int layer, int64_t step)
{
    struct offload_planner *pl = o->pl;
    const int64_t posted = atomic_load(&pl->posted);
    if (offload_planner_wait(o, posted - pl->cap + 1)) pulse_host_sync_note(); /* ring full */
    pl->ring[posted % pl->cap] =
        (struct job){kind, layer, step, o->step.lane, o->step.first, o->step.n};
    atomic_store(&pl->posted, posted + 1);
    if (atomic_load(&pl->sleeping)) {
        pthread_mutex_lock(&pl->mu);
        pthread_cond_signal(&pl->cv);
        pthread_mutex_unlock(&pl->mu);
    }
}

int64_t offload_planner_posted(const struct offload *o)
{
    return atomic_load(&o->pl->posted);
}

int offload_planner_wait(const struct offload *o, int64_t jobs)
{
    struct offload_planner *pl = o->pl;
    int waited = 0;
    for (int spins = 0; atomic_load(&pl->done) < jobs; waited = 1)
        if (++spins > 100) {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    return waited;
}
