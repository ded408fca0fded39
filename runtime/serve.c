#include "serve.h"

#include <string.h>
#include <time.h>

#include "common.h"
#include "mem.h"
#include "prefill.h"
#include "progress.h"

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

int serve_admit_request(struct serve_state *s, int i)
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
    serve_add_entry(s, i, slot, token);
    return PULSE_OK;
}

void serve_add_entry(struct serve_state *s, int i, int slot, int32_t token)
{
    struct request *r = &s->reqs[i];
    struct batch_entry en = entry_of(s, i, slot, token);
    r->slot = slot;
    r->admit_s = pulse_now() - s->t0;
    s->entries[s->n_entries] = en;
    s->entry_req[s->n_entries++] = i;
    s->batch_dirty = 1;
    s->ctr.admitted++;
}

void serve_pause_clock(struct serve_state *s, double seconds)
{
    if (!(seconds > 0)) return;
    s->t0 += seconds;
    s->ctr.clock_paused_s += seconds;
}

/* Records the tokens of one step; retires finished requests. Returns how many finished. */
static int collect(struct serve_state *s, const int32_t *toks, double t)
{
    int finished = 0, keep = 0;
    for (int b = 0; b < s->n_entries; b++) {
        struct request *r = &s->reqs[s->entry_req[b]];
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
        s->entries[keep] = s->entries[b];
        s->entries[keep].pos++;
        s->entries[keep].token = toks[b];
        s->entry_req[keep++] = s->entry_req[b];
    }
    s->n_entries = keep;
    if (finished) s->batch_dirty = 1;
    return finished;
}

/* The step's time and traffic into the sums and the caller's series. */
static void record_step(struct serve_state *s, double step_s)
{
    struct serve_step st = {step_s, s->n_entries, {0, 0, 0, 0}};
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
    s.batch = batch_create(e);
    s.admit_batch = batch_create(e);
    s.entries = mem_alloc(MEM_HOST, sizeof(struct batch_entry) * max_batch, "entries");
    s.entry_req = mem_alloc(MEM_HOST, sizeof(int) * max_batch, "entry reqs");
    int32_t *toks = mem_alloc(MEM_HOST, sizeof(int32_t) * max_batch, "step tokens");
    int rc = PULSE_OK, done = 0;
    struct progress prog = {.on = 0}; /* a line on a terminal: tokens and tokens/s (progress.h) */
    if (!s.batch || !s.admit_batch || !s.entries || !s.entry_req || !toks) {
        snprintf(err, errlen, "out of memory for the serving loop");
        rc = PULSE_ERR_OOM;
        goto out;
    }
    for (int i = 0; i < n; i++) {
        reqs[i].admit_s = reqs[i].first_token_s = reqs[i].done_s = -1;
        reqs[i].generated = 0;
        reqs[i].slot = -1;
    }
    s.t0 = pulse_now();
    int64_t total_tokens = 0;
    for (int i = 0; i < n; i++)
        total_tokens += reqs[i].output_len;
    progress_begin(&prog, "decoding", "tokens", (double)total_tokens);
    while (done < n) {
        double now = pulse_now() - s.t0;
        while (s.n_arrived < n && reqs[s.n_arrived].arrival_s <= now)
            s.n_arrived++;
        rc = pol->admit(&s);
        if (rc == PULSE_ERR_INVALID || (s.n_entries == 0 && s.next_waiting < s.n_arrived)) {
            never_fits(&s, err, errlen);
            rc = PULSE_ERR_INVALID;
            goto out;
        }
        if (rc != PULSE_OK) {
            snprintf(err, errlen, "policy %s: admission failed (%d)%s%s", pol->name, rc,
                     s.why[0] ? ": " : "", s.why);
            goto out;
        }
        if (s.n_entries == 0) { /* idle until the next arrival */
            sleep_until(reqs[s.n_arrived].arrival_s, s.t0);
            continue;
        }
        struct kv_cache_stats ks;
        kv_cache_get_stats(kv, &ks);
        s.ctr.peak_pages_used = PULSE_MAX(s.ctr.peak_pages_used, ks.n_pages - ks.free_pages);
        s.ctr.peak_batch = PULSE_MAX(s.ctr.peak_batch, s.n_entries);
        if (s.batch_dirty) {
            batch_set(e, s.batch, kv, s.entries, s.n_entries);
            s.batch_dirty = 0;
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
        if (rc != PULSE_OK) {
            snprintf(err, errlen, "policy %s: step failed (%d)", pol->name, rc);
            goto out;
        }
        batch_read_tokens(e, s.batch, toks);
        record_step(&s, pulse_now() - t_step);
        mem_get_stats(&m1);
        for (int k = 0; k < MEM_KINDS; k++)
            s.ctr.step_alloc_calls += (int64_t)(m1.alloc_calls[k] - m0.alloc_calls[k]);
        s.ctr.steps++;
        done += collect(&s, toks, pulse_now() - s.t0);
        progress_update(&prog, (double)s.ctr.tokens);
    }
out:
    progress_end(&prog, (double)s.ctr.tokens);
    *wall_s = pulse_now() - s.t0;
    *ctr = s.ctr;
    mem_free(MEM_HOST, toks, sizeof(int32_t) * max_batch);
    mem_free(MEM_HOST, s.entry_req, sizeof(int) * max_batch);
    mem_free(MEM_HOST, s.entries, sizeof(struct batch_entry) * max_batch);
    batch_free(e, s.admit_batch);
    batch_free(e, s.batch);
    return rc;
}
