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
                             .reserved = r->prompt_len + r->output_len,
                             .token = token};
    return en;
}

int serve_admit_request(struct serve_state *s, int k, int i)
{
    struct request *r = &s->reqs[i];
    int slot, rc = kv_cache_admit(s->kv, r->prompt_len + r->output_len, &slot);
    if (rc != PULSE_OK) return rc;
    int32_t token = engine_first_token(s->eng, r->id);
    if (s->policy_ctx && s->pol->ctx_kind == POLICY_CTX_PREFILL) {
        /* a real prefill, a prefill instance's work: off the clock */
        double t0 = pulse_now();
        token = prefill_run(s->policy_ctx, s->kv, slot, r->id, r->prompt_len,
                            r->prompt_len + r->output_len);
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

void serve_pause_clock(struct serve_state *s, double seconds)
{
    if (!(seconds > 0)) return;
    s->t0 += seconds;
    s->ctr.clock_paused_s += seconds;
    const double now = pulse_now(); /* the paused work just ended: not the GPU's decode work */
    gpu_activity_exclude_host(now - seconds, now);
}

/* Records the tokens of one step of batch sb; retires finished requests. Returns how many
 * finished. */
static int collect(struct serve_state *s, struct serve_batch *sb, const int32_t *toks, double t)
{
    int finished = 0, keep = 0;
    for (int b = 0; b < sb->n_entries; b++) {
        struct request *r = &s->reqs[sb->entry_req[b]];
        if (r->tokens) r->tokens[r->generated] = toks[b];
        if (r->generated++ == 0) r->first_token_s = t;
        s->ctr.tokens++;
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
 * how many. */
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

/* The step's time and traffic into the sums and the caller's series. */
static void record_step(struct serve_state *s, double step_s)
{
    struct serve_step st = {step_s, serve_entries(s), {0}, {0, 0, 0, 0}};
    for (int k = 0; k < s->n_batches; k++) {
        st.batches[k] = s->run[k].n_entries;
        s->ctr.batch_sum[k] += st.batches[k];
        s->ctr.batch_max[k] = PULSE_MAX(s->ctr.batch_max[k], st.batches[k]);
    }
    if (s->pol->traffic) s->pol->traffic(s, &st.t);
    s->ctr.step_s_sum += step_s;
    floor_traffic_add(&s->ctr.traffic_sum, &st.t);
    if (s->ctr.steps < s->series_cap) s->series[s->ctr.steps] = st;
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
             kv_cache_request_bytes(s->kv, r->prompt_len + r->output_len) / 1e9);
}

int serve_run_policy(struct engine *e, struct kv_cache *kv, const struct policy *pol,
                     void *policy_ctx, struct request *reqs, int n, int max_batch,
                     struct serve_counters *ctr, double *wall_s, char *err, size_t errlen)
{
    return serve_run_series(e, kv, pol, policy_ctx, reqs, n, max_batch, NULL, 0, ctr, wall_s, err,
                            errlen);
}

int serve_run_series(struct engine *e, struct kv_cache *kv, const struct policy *pol,
                     void *policy_ctx, struct request *reqs, int n, int max_batch,
                     struct serve_step *series, int64_t cap, struct serve_counters *ctr,
                     double *wall_s, char *err, size_t errlen)
{
    struct serve_state s;
    memset(&s, 0, sizeof s);
    s.series = series;
    s.series_cap = series ? cap : 0;
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
    int rc = PULSE_OK, done = 0;
    struct progress prog = {.on = 0}; /* a line on a terminal: tokens and tokens/s (progress.h) */
    if (!ok || !toks) {
        snprintf(err, errlen, "out of memory for the serving loop");
        rc = PULSE_ERR_OOM;
        goto out;
    }
    for (int i = 0; i < n; i++) {
        reqs[i].admit_s = reqs[i].first_token_s = reqs[i].done_s = -1;
        reqs[i].generated = 0;
        reqs[i].slot = -1;
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
        struct mem_stats m0, m1;
        mem_get_stats(&m0);
        const int64_t syncs0 = pulse_host_syncs();
        const double t_step = pulse_now();
        rc = pol->step(&s);
        const int64_t syncs = pulse_host_syncs() - syncs0;
        s.ctr.step_host_syncs += syncs;
        s.ctr.step_host_syncs_max = PULSE_MAX(s.ctr.step_host_syncs_max, syncs);
        int batches_failed = 0; /* their requests end with the error, the others go on */
        for (int k = 0; rc == PULSE_ERR_IO && k < s.n_batches; k++)
            if (s.run[k].failed) {
                done += fail_batch(&s, &s.run[k], pulse_now() - s.t0);
                batches_failed++;
            }
        if (batches_failed) rc = PULSE_OK;
        if (rc != PULSE_OK) {
            snprintf(err, errlen, "policy %s: step failed (%d)", pol->name, rc);
            goto out;
        }
        /* every batch with entries stepped: read its tokens, then retire what finished */
        for (int k = 0; k < s.n_batches; k++)
            if (s.run[k].n_entries) batch_read_tokens(e, s.run[k].bt, toks + (size_t)k * max_batch);
        record_step(&s, pulse_now() - t_step);
        mem_get_stats(&m1);
        for (int k = 0; k < MEM_KINDS; k++)
            s.ctr.step_alloc_calls += (int64_t)(m1.alloc_calls[k] - m0.alloc_calls[k]);
        s.ctr.steps++;
        const double t_done = pulse_now() - s.t0;
        for (int k = 0; k < s.n_batches; k++)
            if (s.run[k].n_entries)
                done += collect(&s, &s.run[k], toks + (size_t)k * max_batch, t_done);
        progress_update(&prog, (double)s.ctr.tokens);
        watchdog_kick();
    }
out:
    progress_end(&prog, (double)s.ctr.tokens);
    *wall_s = pulse_now() - s.t0;
    *ctr = s.ctr;
    mem_free(MEM_HOST, toks, toks_bytes);
    for (int k = 0; k < s.n_batches; k++) {
        mem_free(MEM_HOST, s.run[k].entry_req, sizeof(int) * max_batch);
        mem_free(MEM_HOST, s.run[k].entries, sizeof(struct batch_entry) * max_batch);
        batch_free(e, s.run[k].bt);
    }
    batch_free(e, s.admit_batch);
    return rc;
}
