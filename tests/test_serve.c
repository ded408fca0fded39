/* The serving loop with several running batches (runtime/sched/serve.h): a test policy holds two
 * vanilla batches, admits requests into them in turn, and steps them with their layers
 * interleaved one by one. Every request decodes exactly the tokens of the plain vanilla loop
 * (one batch); the loop reads each batch's tokens and retires each batch's finished requests on
 * its own (odd lengths make them finish at different steps, and a small max batch makes the
 * later requests join released slots). The loop runs ahead (queues the next step before
 * reading a step's tokens) exactly where no batch changes, with the same tokens and times that
 * come in order as with serve_params.run_ahead 0. On the cpu backend. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "baselines/registry.h"
#include "common.h"
#include "engine.h"
#include "serve.h"
#include "testutil.h"
#include "workloads/workload.h"

static int g_steps_both; /* steps in which both batches had entries */

static int two_admit(struct serve_state *s)
{
    while (s->next_waiting < s->n_arrived) {
        const int k = s->run[0].n_entries <= s->run[1].n_entries ? 0 : 1; /* the emptier one */
        if (s->run[k].n_entries >= s->max_batch) return PULSE_OK;
        int rc = serve_admit_request(s, k, s->next_waiting);
        if (rc == PULSE_ERR_NOMEM) {
            s->ctr.admission_refusals++;
            return PULSE_OK;
        }
        if (rc != PULSE_OK) return rc;
        s->next_waiting++;
    }
    return PULSE_OK;
}

/* Both batches' steps, layer by layer in turn (a batch without entries does not step). */
static int two_step(struct serve_state *s)
{
    struct batch *bt[2];
    int n = 0;
    for (int k = 0; k < 2; k++)
        if (s->run[k].n_entries) bt[n++] = s->run[k].bt;
    g_steps_both += n == 2;
    const int L = engine_model(s->eng)->cfg->n_layers;
    for (int i = 0; i < n; i++)
        engine_run_embed(s->eng, bt[i]);
    for (int l = 0; l < L; l++)
        for (int i = 0; i < n; i++)
            engine_run_layer(s->eng, bt[n - 1 - i], s->kv, l); /* the later batch first */
    for (int i = 0; i < n; i++)
        engine_run_head(s->eng, bt[i]);
    return PULSE_OK;
}

static const struct policy policy_two = {
    .name = "two-batch vanilla", .n_batches = 2, .admit = two_admit, .step = two_step};

/* serve_params.run_ahead of the next serve() */
static int g_run_ahead = 1;

static int serve(const struct policy *pol, const char *spec, int max_batch, struct workload *w,
                 struct serve_counters *ctr)
{
    char err[512];
    if (workload_create(w, spec, 9, 1, err, sizeof err) != 0) return -1;
    const struct model_config *m = model_config_find("tiny");
    const int max_tokens = workload_max_tokens(w);
    struct engine_params ep = {.cfg = m,
                               .be = backend_find("cpu"),
                               .seed = 5,
                               .max_batch = max_batch,
                               .max_tokens = max_tokens};
    struct engine *e = engine_create(&ep, err, sizeof err);
    struct kv_cache_params kp = {m->n_layers, m->n_kv_heads, m->head_dim, 16,
                                 64u << 20,   2 * max_batch, max_tokens};
    struct kv_cache *kv = e ? kv_cache_create(&kp, ep.be, engine_ctx(e), err, sizeof err) : NULL;
    double wall;
    struct serve_params sp;
    serve_params_init(&sp);
    sp.run_ahead = g_run_ahead;
    int rc = kv ? serve_run_params(e, kv, pol, NULL, w->reqs, w->n, max_batch, &sp, ctr, &wall, err,
                                   sizeof err)
                : -1;
    if (rc) fprintf(stderr, "%s: %s\n", pol->name, err);
    kv_cache_free(kv);
    engine_free(e);
    return rc;
}

int main(void)
{
    const char *spec = "lengths:130,61,200,17,99,150,40";
    struct workload one, two;
    struct serve_counters c1, c2;
    EXPECT_EQ_INT(serve(policy_find("vanilla"), spec, 4, &one, &c1), 0);
    EXPECT_EQ_INT(serve(&policy_two, spec, 2, &two, &c2), 0);
    EXPECT_EQ_INT(c2.admitted, one.n);
    EXPECT_EQ_INT(c2.tokens, c1.tokens);
    EXPECT(g_steps_both > 0);
    EXPECT(c2.steps >= c1.steps); /* the same batch of 4 split in two steps as often or more */
    int same = 0;
    for (int i = 0; i < one.n; i++)
        same += !memcmp(one.reqs[i].tokens, two.reqs[i].tokens, sizeof(int32_t) * one.output_len);
    fprintf(stderr,
            "two running batches: %d of %d requests decode the one-batch tokens; %lld "
            "steps (%d with both batches), one batch: %lld steps\n",
            same, one.n, (long long)c2.steps, g_steps_both, (long long)c1.steps);
    EXPECT_EQ_INT(same, one.n);
    int differ = 0; /* the requests' token sequences are not all the same */
    for (int i = 1; i < one.n; i++)
        differ |= memcmp(one.reqs[0].tokens, one.reqs[i].tokens, sizeof(int32_t) * one.output_len);
    EXPECT(differ);
    /* run ahead: 2 requests of 9 tokens in one batch: steps 3..9 are queued before the step
     * before them is read (step 1 has no time yet, step 2 is the first after one); the
     * 7 requests through 4 slots: ahead wherever no request ends or joins, and never with
     * serve_params.run_ahead 0, with the same tokens */
    struct workload a, b;
    struct serve_counters ca, cb;
    EXPECT_EQ_INT(serve(policy_find("vanilla"), "lengths:100,80", 4, &a, &ca), 0);
    EXPECT_EQ_INT(ca.steps, 9);
    EXPECT_EQ_INT(ca.steps_ahead, 7);
    workload_free(&a);
    EXPECT(c1.steps_ahead > 0 && c1.steps_ahead < c1.steps - 2);
    EXPECT(c2.steps_ahead > 0);
    /* while 3 of the 7 wait: vanilla's refusal holds until a request ends (its admit_idle), the
     * two-batch policy says nothing (no admit_idle): it never runs ahead while one waits */
    EXPECT(c1.steps_ahead_waiting > 0 && c1.steps_ahead_waiting < c1.steps_ahead);
    EXPECT_EQ_INT(c2.steps_ahead_waiting, 0);
    g_run_ahead = 0;
    EXPECT_EQ_INT(serve(policy_find("vanilla"), spec, 4, &b, &cb), 0);
    g_run_ahead = 1;
    EXPECT_EQ_INT(cb.steps_ahead, 0);
    EXPECT_EQ_INT(cb.steps, c1.steps);
    EXPECT_EQ_INT(cb.tokens, c1.tokens);
    int same_ra = 0, times_ok = 0;
    for (int i = 0; i < one.n; i++) {
        const struct request *r = &one.reqs[i];
        same_ra += !memcmp(r->tokens, b.reqs[i].tokens, sizeof(int32_t) * one.output_len);
        times_ok += r->admit_s >= 0 && r->first_token_s >= r->admit_s &&
                    r->done_s >= r->first_token_s && r->generated == r->output_len;
    }
    EXPECT_EQ_INT(same_ra, one.n);
    EXPECT_EQ_INT(times_ok, one.n);
    fprintf(stderr,
            "run ahead: %lld of %lld steps queued ahead, %lld while requests waited (two "
            "batches: %lld of %lld)\n",
            (long long)c1.steps_ahead, (long long)c1.steps, (long long)c1.steps_ahead_waiting,
            (long long)c2.steps_ahead, (long long)c2.steps);
    workload_free(&b);
    workload_free(&one);
    workload_free(&two);
    return tu_finish("test_serve");
}
