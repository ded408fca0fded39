#include "serve.h"

#include <string.h>
#include <time.h>

#include "common.h"
#include "gpu_activity.h"
#include "mem.h"
#include "prefill.h"
#include "progress.h"
#include "watchdog.h"

static struct batch_entry entry_of(const struct serve_state *s, int i, int slot, int32_t token)
{
    const struct request *r = &s->reqs[i];
    struct batch_entry en = {.slot = slot,
                             .req_id = r->id,
                             .pos = r->prompt_len,
                             .reserved = request_reserved(r),
                             .token = token};
    return en;
}

int serve_admit_request(struct serve_state *s, int k, int i)
{
    struct request *r = &s->reqs[i];
    int slot, rc = kv_cache_admit(s->kv, request_reserved(r), &slot);
    if (rc != PULSE_OK) return rc;
    int32_t token = engine_first_token(s->eng, r->id);
    if (s->policy_ctx && s->pol->ctx_kind == POLICY_CTX_PREFILL) {
        /* a real prefill, a prefill instance's work: off the clock */
        double t0 = pulse_now();
        token = prefill_run(s->policy_ctx, s->kv, slot, r->id, r->prompt_len, request_reserved(r));
        serve_pause_clock(s, pulse_now() - t0);
    } else {
        struct batch_entry en = entry_of(s, i, slot, token);
        batch_set(s->eng, s->admit_batch, s->kv, &en, 1);
        engine_fill_prompt(s->eng, s->admit_batch, s->kv);
    }
    serve_add_entry(s, k, i, slot, token);
    return PULSE_OK;
}

void serve_add_entry(struct serve_state *s, int k, int i, int slot, int32_t token)
{
    PULSE_CHECK(k >= 0 && k < s->n_batches && s->run[k].n_entries < s->max_batch,
                "serve_add_entry: no such running batch, or it is full");
    struct serve_batch *sb = &s->run[k];
    struct request *r = &s->reqs[i];
    r->slot = slot;
    r->batch = k;
    r->first_token = token;
    r->admit_s = pulse_now() - s->t0;
    sb->entries[sb->n_entries] = entry_of(s, i, slot, token);
    sb->entry_req[sb->n_entries++] = i;
    sb->dirty = 1;
    s->ctr.admitted++;
}

void serve_take_waiting(struct serve_state *s, int j)
{
    PULSE_CHECK(j >= s->next_waiting && j < s->n_arrived, "serve_take_waiting: not waiting");
    const struct request t = s->reqs[j];
    s->reqs[j] = s->reqs[s->next_waiting];
    s->reqs[s->next_waiting] = t;
}

int serve_entries(const struct serve_state *s)
{
    int n = 0;
    for (int k = 0; k < s->n_batches; k++)
        n += s->run[k].n_entries;
    return n;
}

int serve_admit_idle_reserved(const struct serve_state *s)
{
    (void)s;
    return 1;
}

void serve_pause_clock(struct serve_state *s, double seconds)
{
    if (!(seconds > 0)) return;
    s->t0 += seconds;
    s->ctr.clock_paused_s += seconds;
    const double now = pulse_now(); /* the paused work just ended: not the GPU's decode work */
    gpu_activity_exclude_host(now - seconds, now);
}

/* A queued step's tokens: for each batch and entry, the request and the index of the token
 * the step makes (noted when it is queued; recorded when its tokens are read). */
struct step_note {
    int n[SERVE_MAX_BATCHES];
    int *req, *idx; /* [SERVE_MAX_BATCHES][max_batch] */
};

static void note_step(const struct serve_state *s, struct step_note *sn)
{
    for (int k = 0; k < s->n_batches; k++) {
        const struct serve_batch *sb = &s->run[k];
        sn->n[k] = sb->n_entries;
        for (int b = 0; b < sb->n_entries; b++) {
            sn->req[k * s->max_batch + b] = sb->entry_req[b];
            sn->idx[k * s->max_batch + b] = s->reqs[sb->entry_req[b]].generated - 1;
        }
    }
}

/* The noted step's tokens of batch k (toks) into their requests, read at time t. */
static void record_tokens(struct serve_state *s, const struct step_note *sn, int k,
                          const int32_t *toks, double t)
{
    for (int b = 0; b < sn->n[k]; b++) {
        struct request *r = &s->reqs[sn->req[k * s->max_batch + b]];
        const int i = sn->idx[k * s->max_batch + b];
        if (r->tokens) r->tokens[i] = toks[b];
        if (i == 0) r->first_token_s = t;
        s->ctr.tokens++;
    }
}

/* After a queued step of batch sb: every entry made one more token (counted now, before the
 * tokens are read: a request's length, not its tokens, ends it). */
static void count_step(struct serve_state *s, const struct serve_batch *sb)
{
    for (int b = 0; b < sb->n_entries; b++)
        s->reqs[sb->entry_req[b]].generated++;
}

/* Moves batch sb past its step whose tokens are toks, read at time t: retires the requests
 * that reached their length; the others' next step starts from their token. Returns how many
 * finished. */
static int collect(struct serve_state *s, struct serve_batch *sb, const int32_t *toks, double t)
{
    int finished = 0, keep = 0;
    for (int b = 0; b < sb->n_entries; b++) {
        struct request *r = &s->reqs[sb->entry_req[b]];
        if (r->generated == r->output_len) {
            r->done_s = t;
            if (s->pol->release) s->pol->release(s, r->slot);
            kv_cache_release(s->kv, r->slot);
            r->slot = -1;
            finished++;
            continue;
        }
        sb->entries[keep] = sb->entries[b];
        sb->entries[keep].pos++;
        sb->entries[keep].token = toks[b];
        sb->entry_req[keep++] = sb->entry_req[b];
    }
    sb->n_entries = keep;
    if (finished) sb->dirty = 1;
    return finished;
}

/* Ends every request of a batch whose step failed with its reason (serve_batch.failed); returns
 * how many. (fail_batches: of every such batch.) */
static int fail_batch(struct serve_state *s, struct serve_batch *sb, double t)
{
    for (int b = 0; b < sb->n_entries; b++) {
        struct request *r = &s->reqs[sb->entry_req[b]];
        r->error = sb->failed;
        r->done_s = t;
        if (s->pol->release) s->pol->release(s, r->slot);
        kv_cache_release(s->kv, r->slot);
        r->slot = -1;
        s->ctr.requests_failed++;
    }
    const int n = sb->n_entries;
    sb->n_entries = 0;
    sb->failed = NULL;
    sb->dirty = 1;
    return n;
}

/* The step's time and traffic into the sums and the caller's series; ahead: steps queued
 * after it (the policy's traffic report is of the step before those). */
static void record_step(struct serve_state *s, double step_s, int ahead)
{
    struct serve_step st = {step_s, serve_entries(s), {0}, {0, 0, 0, 0}};
    for (int k = 0; k < s->n_batches; k++) {
        st.batches[k] = s->run[k].n_entries;
        s->ctr.batch_sum[k] += st.batches[k];
        s->ctr.batch_max[k] = PULSE_MAX(s->ctr.batch_max[k], st.batches[k]);
    }
    s->report_step_s = step_s;
    if (s->pol->traffic) s->pol->traffic(s, ahead, &st.t);
    s->ctr.step_s_sum += step_s;
    floor_traffic_add(&s->ctr.traffic_sum, &st.t);
    if (s->ctr.steps < s->series_cap) s->series[s->ctr.steps] = st;
}

/* Every batch whose step failed ends its requests; its queued steps' tokens are dropped
 * (sn[0], sn[1]). Returns how many requests ended. */
static int fail_batches(struct serve_state *s, struct step_note *sn)
{
    int n = 0;
    for (int k = 0; k < s->n_batches; k++)
        if (s->run[k].failed) {
            n += fail_batch(s, &s->run[k], pulse_now() - s->t0);
            sn[0].n[k] = sn[1].n[k] = 0;
        }
    return n;
}

/* Allocations made since m0 into the counter that must stay 0. */
static void add_allocs(struct serve_state *s, const struct mem_stats *m0)
{
    struct mem_stats m1;
    mem_get_stats(&m1);
    for (int k = 0; k < MEM_KINDS; k++)
        s->ctr.step_alloc_calls += (int64_t)(m1.alloc_calls[k] - m0->alloc_calls[k]);
}

/* Queues one step of the running batches (the policy's), then the copies of their tokens into
 * host buffer buf, counts the step's token for every entry and notes where the tokens go (sn).
 * *t_call: when the step was called. Returns the policy's status. */
static int queue_step(struct serve_state *s, struct step_note *sn, int buf, double *t_call)
{
    struct mem_stats m0;
    mem_get_stats(&m0);
    const int64_t syncs0 = pulse_host_syncs();
    *t_call = pulse_now();
    const int rc = s->pol->step(s);
    s->ctr.host_queue_s += pulse_now() - *t_call;
    const int64_t syncs = pulse_host_syncs() - syncs0;
    s->ctr.step_host_syncs += syncs;
    s->ctr.step_host_syncs_max = PULSE_MAX(s->ctr.step_host_syncs_max, syncs);
    for (int k = 0; k < s->n_batches; k++)
        if (s->run[k].n_entries) {
            batch_tokens_queue(s->eng, s->run[k].bt, buf);
            count_step(s, &s->run[k]);
        }
    note_step(s, sn);
    add_allocs(s, &m0);
    return rc;
}

/* Whether the next step can be queued before the last one's tokens are read: no batch changed
 * (a failed one), no request ends with the step, none waits, and none arrives before the next
 * step would end (by the last step's time; never before one was timed). */
static int can_run_ahead(const struct serve_state *s, double last_step_s)
{
    if (!(last_step_s > 0) || serve_entries(s) == 0) return 0;
    if (s->next_waiting < s->n_arrived && !(s->pol->admit_idle && s->pol->admit_idle(s))) return 0;
    for (int k = 0; k < s->n_batches; k++)
        if (s->run[k].dirty) return 0;
    for (int k = 0; k < s->n_batches; k++)
        for (int b = 0; b < s->run[k].n_entries; b++) {
            const struct request *r = &s->reqs[s->run[k].entry_req[b]];
            if (r->generated >= r->output_len) return 0;
        }
    return s->n_arrived == s->n_reqs ||
           s->reqs[s->n_arrived].arrival_s > pulse_now() - s->t0 + 2 * last_step_s;
}

static void sleep_until(double t_rel, double t0)
{
    double dt = t0 + t_rel - pulse_now();
    if (dt <= 0) return;
    struct timespec ts = {(time_t)dt, (long)((dt - (double)(time_t)dt) * 1e9)};
    nanosleep(&ts, NULL);
}

int serve_run(struct engine *e, struct kv_cache *kv, const struct policy *pol, struct request *reqs,
              int n, int max_batch, struct serve_counters *ctr, double *wall_s, char *err,
              size_t errlen)
{
    return serve_run_policy(e, kv, pol, NULL, reqs, n, max_batch, ctr, wall_s, err, errlen);
}

/* The message for a request that can never be admitted. */
static void never_fits(const struct serve_state *s, char *err, size_t errlen)
{
    const struct request *r = &s->reqs[s->next_waiting];
    if (s->why[0]) {
        snprintf(err, errlen, "request %d (%d prompt + %d output tokens): %s", r->id, r->prompt_len,
                 r->output_len, s->why);
        return;
    }
    snprintf(err, errlen,
             "request %d (%d prompt + %d output tokens, %.3f GB of KV) can never fit the KV "
             "budget",
             r->id, r->prompt_len, r->output_len,
             kv_cache_request_bytes(s->kv, request_reserved(r)) / 1e9);
}

int serve_run_policy(struct engine *e, struct kv_cache *kv, const struct policy *pol,
                     void *policy_ctx, struct request *reqs, int n, int max_batch,
                     struct serve_counters *ctr, double *wall_s, char *err, size_t errlen)
{
    struct serve_params p;
    serve_params_init(&p);
    return serve_run_params(e, kv, pol, policy_ctx, reqs, n, max_batch, &p, ctr, wall_s, err,
                            errlen);
}

void serve_params_init(struct serve_params *p)
{
    memset(p, 0, sizeof *p);
    p->run_ahead = 1;
    p->ioaa_refit = 1;
}

int serve_run_params(struct engine *e, struct kv_cache *kv, const struct policy *pol,
                     void *policy_ctx, struct request *reqs, int n, int max_batch,
                     const struct serve_params *p, struct serve_counters *ctr, double *wall_s,
                     char *err, size_t errlen)
{
    struct serve_state s;
    memset(&s, 0, sizeof s);
    s.series = p->series;
    s.series_cap = p->series ? p->series_cap : 0;
    s.pol = pol;
    s.policy_ctx = policy_ctx;
    if (pol->needs_ctx && !policy_ctx) {
        snprintf(err, errlen, "policy %s needs its context (serve_run_policy)", pol->name);
        memset(ctr, 0, sizeof *ctr);
        *wall_s = 0;
        return PULSE_ERR_INVALID;
    }
    s.eng = e;
    s.kv = kv;
    s.reqs = reqs;
    s.n_reqs = n;
    s.max_batch = max_batch;
    s.n_batches = pol->n_batches > 0 ? pol->n_batches : 1;
    PULSE_CHECK(s.n_batches <= SERVE_MAX_BATCHES, "policy: more running batches than the loop has");
    int ok = (s.admit_batch = batch_create(e)) != NULL;
    for (int k = 0; k < s.n_batches; k++) {
        struct serve_batch *sb = &s.run[k];
        sb->bt = batch_create(e);
        sb->entries = mem_alloc(MEM_HOST, sizeof(struct batch_entry) * max_batch, "entries");
        sb->entry_req = mem_alloc(MEM_HOST, sizeof(int) * max_batch, "entry reqs");
        ok = ok && sb->bt && sb->entries && sb->entry_req;
    }
    const size_t toks_bytes = sizeof(int32_t) * (size_t)max_batch * SERVE_MAX_BATCHES;
    int32_t *toks = mem_alloc(MEM_HOST, toks_bytes, "step tokens"); /* [batch][max_batch] */
    /* the queued steps' notes, by token buffer: request and token index per entry */
    int *note_mem = mem_alloc(MEM_HOST, 4 * toks_bytes, "step notes");
    struct step_note sn[2];
    memset(sn, 0, sizeof sn);
    for (int i = 0; note_mem && i < 2; i++) {
        sn[i].req = note_mem + (size_t)(2 * i) * max_batch * SERVE_MAX_BATCHES;
        sn[i].idx = note_mem + (size_t)(2 * i + 1) * max_batch * SERVE_MAX_BATCHES;
    }
    /* run_ahead 0: every step's tokens are read before the next is queued */
    const int run_ahead = p->run_ahead;
    int buf = 0;
    double t_call = 0, t_last_tok = 0, last_step_s = 0;
    int rc = PULSE_OK, done = 0;
    struct progress prog = {.on = 0}; /* a line on a terminal: tokens and tokens/s (progress.h) */
    if (!ok || !toks || !note_mem) {
        snprintf(err, errlen, "out of memory for the serving loop");
        rc = PULSE_ERR_OOM;
        goto out;
    }
    for (int i = 0; i < n; i++) {
        reqs[i].admit_s = reqs[i].first_token_s = reqs[i].done_s = -1;
        reqs[i].generated = 0;
        reqs[i].slot = reqs[i].batch = -1;
        reqs[i].error = NULL;
    }
    s.t0 = pulse_now();
    watchdog_start(); /* PULSE_STACKS_AFTER_S: every thread's stack when steps stop */
    watchdog_kick();
    int64_t total_tokens = 0;
    for (int i = 0; i < n; i++)
        total_tokens += reqs[i].output_len;
    progress_begin(&prog, "decoding", "tokens", (double)total_tokens);
    while (done < n) {
        double now = pulse_now() - s.t0;
        while (s.n_arrived < n && reqs[s.n_arrived].arrival_s <= now)
            s.n_arrived++;
        rc = pol->admit(&s);
        if (rc == PULSE_ERR_INVALID || (serve_entries(&s) == 0 && s.next_waiting < s.n_arrived)) {
            never_fits(&s, err, errlen);
            rc = PULSE_ERR_INVALID;
            goto out;
        }
        if (rc != PULSE_OK) {
            snprintf(err, errlen, "policy %s: admission failed (%d)%s%s", pol->name, rc,
                     s.why[0] ? ": " : "", s.why);
            goto out;
        }
        if (serve_entries(&s) == 0) { /* idle until the next arrival */
            sleep_until(reqs[s.n_arrived].arrival_s, s.t0);
            continue;
        }
        struct kv_cache_stats ks;
        kv_cache_get_stats(kv, &ks);
        s.ctr.peak_pages_used = PULSE_MAX(s.ctr.peak_pages_used, ks.n_pages - ks.free_pages);
        s.ctr.peak_batch = PULSE_MAX(s.ctr.peak_batch, serve_entries(&s));
        for (int k = 0; k < s.n_batches; k++) {
            struct serve_batch *sb = &s.run[k];
            if (!sb->dirty) continue;
            batch_set(e, sb->bt, kv, sb->entries, sb->n_entries);
            sb->dirty = 0;
            s.ctr.batch_changes++;
        }
        rc = queue_step(&s, &sn[buf], buf, &t_call);
        if (rc == PULSE_ERR_IO) { /* its failed batches' requests ended; the others go on */
            done += fail_batches(&s, sn);
            rc = PULSE_OK;
        }
        if (rc != PULSE_OK) {
            snprintf(err, errlen, "policy %s: step failed (%d)", pol->name, rc);
            goto out;
        }
        /* Run ahead: while the step's end changes no batch (no request ends with it, nothing
         * waits to be admitted or the policy's admission would still refuse what waits
         * (policy.admit_idle), no arrival is due before the next step would end), the next
         * step is queued before this one's tokens are read, so the device goes from one step
         * to the next without waiting for the host. */
        for (;;) {
            const int ahead = run_ahead && can_run_ahead(&s, last_step_s);
            double t_next = 0;
            if (ahead) {
                for (int k = 0; k < s.n_batches; k++)
                    for (int b = 0; b < s.run[k].n_entries; b++)
                        s.run[k].entries[b].pos++;
                rc = queue_step(&s, &sn[buf ^ 1], buf ^ 1, &t_next);
                s.ctr.steps_ahead++;
                s.ctr.steps_ahead_waiting += s.next_waiting < s.n_arrived;
                if (rc == PULSE_ERR_IO) { /* a failed batch ends; nothing of it to read */
                    done += fail_batches(&s, sn);
                    rc = PULSE_OK;
                }
            }
            /* this step's tokens */
            struct mem_stats m0;
            mem_get_stats(&m0);
            const double t_wait = pulse_now();
            for (int k = 0; k < s.n_batches; k++)
                if (sn[buf].n[k])
                    batch_tokens_take(e, s.run[k].bt, buf, toks + (size_t)k * max_batch);
            const double t_tok = pulse_now();
            s.ctr.host_wait_s += t_tok - t_wait;
            const double step_s = t_tok - PULSE_MAX(t_call, t_last_tok);
            t_last_tok = t_tok;
            last_step_s = step_s;
            const double t_done = t_tok - s.t0;
            for (int k = 0; k < s.n_batches; k++)
                if (sn[buf].n[k])
                    record_tokens(&s, &sn[buf], k, toks + (size_t)k * max_batch, t_done);
            record_step(&s, step_s, ahead);
            add_allocs(&s, &m0);
            s.ctr.steps++;
            progress_update(&prog, (double)s.ctr.tokens);
            watchdog_kick();
            if (!ahead) break;
            buf ^= 1;
            t_call = t_next;
            if (rc != PULSE_OK) {
                snprintf(err, errlen, "policy %s: step failed (%d)", pol->name, rc);
                goto out;
            }
        }
        /* retire what finished; the next step starts from the last tokens */
        const double t_done = t_last_tok - s.t0;
        for (int k = 0; k < s.n_batches; k++)
            if (s.run[k].n_entries)
                done += collect(&s, &s.run[k], toks + (size_t)k * max_batch, t_done);
    }
out:
    if (pol->finish && s.policy_ctx) pol->finish(&s);
    progress_end(&prog, (double)s.ctr.tokens);
    *wall_s = pulse_now() - s.t0;
    *ctr = s.ctr;
    mem_free(MEM_HOST, toks, toks_bytes);
    mem_free(MEM_HOST, note_mem, 4 * toks_bytes);
    for (int k = 0; k < s.n_batches; k++) {
        mem_free(MEM_HOST, s.run[k].entry_req, sizeof(int) * max_batch);
        mem_free(MEM_HOST, s.run[k].entries, sizeof(struct batch_entry) * max_batch);
        batch_free(e, s.run[k].bt);
    }
    batch_free(e, s.admit_batch);
    return rc;
}
