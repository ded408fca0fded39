/* The hot-cache planner's CPU reference (hot_plan.h) against the host hot cache (hot_cache.h):
 * long random decode-like runs over many units in batches of entries with several lists each,
 * where every list is also one hot_cache_access on a hot cache of the same params. Hits,
 * recalls (blocks, slots, victims, order), fresh tails, attend slots, refusals, every unit's
 * slot -> block map and the accumulated totals must equal the hot cache's, with
 * hot_plan_check and hot_cache_check passing. The selections keep the pinned blocks (sink,
 * window, tail) with a tunable locality, entries grow block by block with tails that become
 * new, requests leave and arrive (their units reset), unaligned unit ranges are reset
 * mid-request, some lists are corrupted (refused by both), the state buffer moves to another
 * address mid-run, and output entries past the counts must keep their sentinel. Awkward sizes:
 * n_slots equal to the largest selection, 1-slot units, one-token blocks, 2048 slots, a padded
 * stride. Then a hand-checked sequence, every refusal on its own (state bytes unchanged) and
 * bad params. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "hot_cache.h"
#include "hot_plan.h"
#include "mem.h"
#include "numeric.h"
#include "select.h"
#include "testutil.h"

static uint64_t g_seed = 0x407b1a7, g_ctr;
static uint32_t rnd(uint32_t n)
{
    return (uint32_t)(pulse_hash64(g_seed, g_ctr++) % n);
}

#define MAX_LISTS 64
#define MAX_SEL 2100
#define MAX_REQ 16
#define SENT 0x5a5a5a5a /* never a block, slot or count */

/* ------------------------------------------------------------------ buffers */

struct io {
    int32_t sel[MAX_LISTS * MAX_SEL], cnt[MAX_LISTS], base[MAX_LISTS], nb[MAX_LISTS], tn[MAX_LISTS];
    int32_t status[MAX_LISTS], n_hits[MAX_LISTS], n_rec[MAX_LISTS];
    int32_t rb[MAX_LISTS * MAX_SEL], rs[MAX_LISTS * MAX_SEL], vb[MAX_LISTS * MAX_SEL];
    int32_t fb[MAX_LISTS], fs[MAX_LISTS], fv[MAX_LISTS], att[MAX_LISTS * MAX_SEL];
    int64_t totals[HOT_PLAN_TOTALS];
    struct hot_plan_in in;
    struct hot_plan_out out;
};

static void io_bind(struct io *o, int batch, int n_lists, int max_sel)
{
    o->in = (struct hot_plan_in){o->sel, o->cnt, o->base, o->nb, o->tn, batch, n_lists, max_sel};
    o->out = (struct hot_plan_out){o->status, o->n_hits, o->n_rec, o->rb,  o->rs,    o->vb,
                                   o->fb,     o->fs,     o->fv,    o->att, o->totals};
}

/* The outputs of `lists` lists of stride max_sel set to the sentinel. */
static void io_poison(struct io *o, int lists, int max_sel)
{
    for (int i = 0; i < lists * max_sel; i++)
        o->rb[i] = o->rs[i] = o->vb[i] = o->att[i] = SENT;
    for (int i = 0; i < lists; i++)
        o->status[i] = o->n_hits[i] = o->n_rec[i] = o->fb[i] = o->fs[i] = o->fv[i] = SENT;
}

struct hc_out {
    int32_t hb[MAX_SEL], hs[MAX_SEL], rb[MAX_SEL], rs[MAX_SEL], vb[MAX_SEL], as[MAX_SEL];
    struct hot_cache_result r;
};

static void hc_bind(struct hc_out *h)
{
    h->r = (struct hot_cache_result){.hit_block = h->hb,
                                     .hit_slot = h->hs,
                                     .recall_block = h->rb,
                                     .recall_slot = h->rs,
                                     .victim_block = h->vb,
                                     .attend_slot = h->as};
}

/* A host state buffer of p, initialised. */
static void *state_new(const struct hot_plan_params *p, struct hot_plan_state *s)
{
    size_t bytes = hot_plan_state_bytes(p);
    void *mem = aligned_alloc(256, bytes);
    PULSE_CHECK(mem != NULL, "test: state buffer");
    memset(mem, 0xc3, bytes); /* init must not depend on what was there */
    hot_plan_state_carve(p, mem, s);
    hot_plan_init_ref(p, s, NULL);
    return mem;
}

/* ------------------------------------------------------------------ comparisons */

/* List v of the call against hot_cache_access of the same list; returns mismatches. */
static int compare_list(struct hot_cache *hc, const struct io *o, int v, struct hc_out *h,
                        int *refused)
{
    const struct hot_plan_in *in = &o->in;
    const int b = v / in->n_lists, unit = in->unit_base[b] + v % in->n_lists;
    const size_t row = (size_t)v * in->max_sel;
    int rc = hot_cache_access(hc, unit, in->sel_idx + row, in->sel_count[v], in->n_blocks[b],
                              in->tail_new[b], &h->r);
    int bad = 0;
    bad += o->status[v] != rc;
    if (rc != PULSE_OK) {
        (*refused)++;
        bad += o->n_hits[v] != 0 || o->n_rec[v] != 0;
        bad += o->fb[v] != -1 || o->fs[v] != -1 || o->fv[v] != -1;
        for (int j = 0; j < in->max_sel; j++)
            bad += o->att[row + j] != SENT || o->rb[row + j] != SENT;
        return bad;
    }
    const int cnt = in->sel_count[v];
    bad += o->n_hits[v] != h->r.n_hits;
    bad += o->n_rec[v] != h->r.n_recalls;
    for (int i = 0; i < h->r.n_recalls && i < in->max_sel; i++) {
        bad += o->rb[row + i] != h->r.recall_block[i];
        bad += o->rs[row + i] != h->r.recall_slot[i];
        bad += o->vb[row + i] != h->r.victim_block[i];
    }
    for (int i = h->r.n_recalls; i < in->max_sel; i++)
        bad += o->rb[row + i] != SENT || o->rs[row + i] != SENT || o->vb[row + i] != SENT;
    bad += o->fb[v] != h->r.fresh_block;
    bad += o->fs[v] != h->r.fresh_slot;
    bad += o->fv[v] != h->r.fresh_victim;
    for (int j = 0; j < cnt; j++)
        bad += o->att[row + j] != h->r.attend_slot[j];
    for (int j = cnt; j < in->max_sel; j++)
        bad += o->att[row + j] != SENT;
    return bad;
}

/* Unit u's slot -> block map and occupancy against the hot cache's. */
static int compare_unit(const struct hot_plan_params *p, const struct hot_plan_state *s,
                        const struct hot_cache *hc, int u)
{
    int bad = 0;
    for (int i = 0; i < p->n_slots; i++)
        bad += s->slot_block[(size_t)u * p->n_slots + i] != hot_cache_slot_block(hc, u, i);
    bad += p->n_slots - s->unit[u].n_free != hot_cache_resident(hc, u);
    return bad;
}

static int compare_totals(const struct hot_cache *hc, const int64_t *t)
{
    struct hot_cache_stats st;
    hot_cache_get_stats(hc, &st);
    return (t[HOT_PLAN_HITS] != st.hits) + (t[HOT_PLAN_MISSES] != st.misses) +
           (t[HOT_PLAN_FRESH] != st.fresh) + (t[HOT_PLAN_EVICTIONS] != st.evictions);
}

/* ------------------------------------------------------------------ random runs */

/* A decode-like selection (as test_hot_cache.c): the pinned blocks plus k candidates, about
 * keep percent of them kept from this unit's previous selection, the rest at random. */
static int make_sel(int nb, int sink, int window, int k, int keep, const uint8_t *prev,
                    uint8_t *mark, int32_t *sel)
{
    int c0, c1;
    select_candidates(nb, sink, window, &c0, &c1);
    memset(mark, 0, (size_t)nb);
    int m = c1 - c0, want = k < m ? k : m, got = 0;
    for (int i = c0; i < c1 && got < want; i++)
        if (prev[i] && (int)rnd(100) < keep) mark[i] = 1, got++;
    while (got < want) {
        int i = c0 + (int)rnd((uint32_t)m);
        if (!mark[i]) mark[i] = 1, got++;
    }
    int n = 0;
    for (int i = 0; i < nb; i++)
        if (i < c0 || i >= c1 || mark[i]) sel[n++] = i;
    return n;
}

struct cfg {
    const char *name;
    int n_req, n_lists; /* requests; lists (units) per request: request r owns units r*L.. */
    int n_slots, sink, window, k, keep, bs, max_blocks;
    int batch, steps, pad; /* entries per call; calls; extra stride past the largest selection */
};

/* Corrupts list v of the call (sorted order, the tail, or the range) so both refuse it. */
static void corrupt(struct io *o, int v)
{
    int32_t *sel = o->sel + (size_t)v * o->in.max_sel;
    const int cnt = o->cnt[v], b = v / o->in.n_lists, kind = (int)rnd(3);
    if (kind == 0 && cnt >= 2) { /* out of order */
        int i = (int)rnd((uint32_t)cnt - 1), t = sel[i];
        sel[i] = sel[i + 1], sel[i + 1] = t;
    } else if (kind <= 1) { /* the tail is missing */
        o->cnt[v] = cnt - 1;
    } else { /* past the last block */
        sel[cnt - 1] = o->nb[b];
    }
}

/* One random run: the planner's host state beside a hot cache of the same params. */
struct run {
    const struct cfg *c;
    int L, U, max_sel, max_tok;
    struct hot_plan_params p;
    struct hot_cache *hc;
    struct hot_plan_state s;
    void *mem;
    size_t bytes;
    struct io *o;
    uint8_t *prev, *mark; /* [unit][max_blocks] last selection; scratch */
    int ntok[MAX_REQ], first[MAX_REQ];
    int resets, moves;
};

static void new_request(struct run *R, int r)
{
    const int span = PULSE_MIN((3 * R->c->k + 8) * R->c->bs, R->max_tok - 1);
    R->ntok[r] = 1 + (int)rnd((uint32_t)span);
    R->first[r] = 1;
}

/* Units [u0, u0 + n) emptied on both sides. */
static void reset_units(struct run *R, int u0, int n)
{
    for (int u = u0; u < u0 + n; u++)
        hot_cache_reset(R->hc, u);
    hot_plan_reset_ref(&R->p, &R->s, u0, n, NULL);
    R->resets++;
}

/* The next call's inputs: a random batch of distinct requests, each one token longer (or
 * replaced by a new one, its units reset), every list a fresh selection; sometimes one list
 * corrupted. */
static void make_call(struct run *R)
{
    const struct cfg *c = R->c;
    const int L = R->L;
    struct io *o = R->o;
    int order[MAX_REQ];
    for (int r = 0; r < c->n_req; r++)
        order[r] = r;
    for (int r = 0; r < c->batch; r++) {
        int q = r + (int)rnd((uint32_t)(c->n_req - r)), t = order[r];
        order[r] = order[q], order[q] = t;
    }
    io_poison(o, c->batch * L, R->max_sel);
    for (int b = 0; b < c->batch; b++) {
        const int r = order[b];
        if (rnd(60) == 0 || R->ntok[r] >= R->max_tok) { /* the request leaves, another comes */
            reset_units(R, r * L, L);
            memset(R->prev + (size_t)r * L * c->max_blocks, 0, (size_t)L * c->max_blocks);
            new_request(R, r);
        } else {
            R->ntok[r]++;
        }
        const int nb = PULSE_CEIL_DIV(R->ntok[r], c->bs);
        o->base[b] = r * L;
        o->nb[b] = nb;
        o->tn[b] = (!R->first[r] && (R->ntok[r] - 1) % c->bs == 0) ^ (rnd(33) == 0);
        R->first[r] = 0;
        for (int l = 0; l < L; l++) {
            const int v = b * L + l;
            uint8_t *pv = R->prev + ((size_t)r * L + l) * c->max_blocks;
            int32_t *sel = o->sel + (size_t)v * R->max_sel;
            o->cnt[v] = make_sel(nb, c->sink, c->window, c->k, c->keep, pv, R->mark, sel);
            memcpy(pv, R->mark, (size_t)nb);
            for (int j = o->cnt[v]; j < R->max_sel; j++)
                sel[j] = (int32_t)rnd(1u << 30) + 1; /* garbage past the count */
        }
    }
    io_bind(o, c->batch, L, R->max_sel);
    if (rnd(25) == 0) corrupt(o, (int)rnd((uint32_t)(c->batch * L)));
}

/* The state is position independent: the buffer moves to a new address. */
static void move_state(struct run *R)
{
    void *to = aligned_alloc(256, R->bytes);
    PULSE_CHECK(to != NULL, "test: state buffer");
    memcpy(to, R->mem, R->bytes);
    memset(R->mem, 0xc3, R->bytes);
    free(R->mem);
    R->mem = to;
    hot_plan_state_carve(&R->p, R->mem, &R->s);
    R->moves++;
}

/* Every unit against the hot cache, and both checks; returns mismatches. */
static int check_all(struct run *R, int step)
{
    char err[256];
    int bad = 0;
    for (int u = 0; u < R->U; u++)
        bad += compare_unit(&R->p, &R->s, R->hc, u);
    if (hot_plan_check(&R->p, &R->s, err, sizeof err) != 0) {
        fprintf(stderr, "%s step %d: hot_plan_check: %s\n", R->c->name, step, err);
        bad++;
    }
    if (hot_cache_check(R->hc, err, sizeof err) != 0) {
        fprintf(stderr, "%s step %d: hot_cache_check: %s\n", R->c->name, step, err);
        bad++;
    }
    return bad;
}

static void run_case(const struct cfg *c)
{
    static struct io o;
    static struct hc_out h;
    struct run R = {.c = c, .L = c->n_lists, .U = c->n_req * c->n_lists, .o = &o};
    R.max_sel = PULSE_MIN(c->max_blocks, c->sink + c->window + 1 + c->k) + c->pad;
    R.max_tok = c->max_blocks * c->bs;
    PULSE_CHECK(c->batch * R.L <= MAX_LISTS && R.max_sel <= MAX_SEL && c->n_req <= MAX_REQ &&
                    c->batch <= c->n_req,
                "test: case too large");
    R.p = (struct hot_plan_params){R.U, c->n_slots, c->sink, c->window, c->max_blocks};
    struct hot_cache_params hp = {R.U, c->n_slots, c->sink, c->window};
    R.hc = hot_cache_create(&hp, NULL, 0);
    R.bytes = hot_plan_state_bytes(&R.p);
    R.mem = state_new(&R.p, &R.s);
    R.prev = calloc((size_t)R.U * c->max_blocks, 1);
    R.mark = malloc((size_t)c->max_blocks);
    PULSE_CHECK(R.hc && R.prev && R.mark, "test: run buffers");
    hc_bind(&h);
    memset(o.totals, 0, sizeof o.totals);
    for (int r = 0; r < c->n_req; r++)
        new_request(&R, r);
    int bad = 0, refused = 0;
    for (int step = 0; step < c->steps && !bad; step++) {
        make_call(&R);
        hot_plan_ref(&R.p, &R.s, &o.in, &o.out, NULL);
        for (int v = 0; v < c->batch * R.L; v++)
            bad += compare_list(R.hc, &o, v, &h, &refused);
        for (int v = 0; v < c->batch * R.L; v++)
            bad += compare_unit(&R.p, &R.s, R.hc, o.base[v / R.L] + v % R.L);
        bad += compare_totals(R.hc, o.totals);
        if (rnd(200) == 0) { /* an unaligned range of units, mid-request */
            const int u0 = (int)rnd((uint32_t)R.U);
            reset_units(&R, u0, 1 + (int)rnd((uint32_t)(R.U - u0)));
        }
        if (step % 500 == 250) move_state(&R);
        if (step % 97 == 0 || step == c->steps - 1) bad += check_all(&R, step);
        if (bad) fprintf(stderr, "%s: first mismatch at step %d\n", c->name, step);
    }
    EXPECT_EQ_INT(bad, 0);
    EXPECT_EQ_INT(compare_totals(R.hc, o.totals), 0);
    const int64_t *t = o.totals;
    /* every path ran: hits, recalls, fresh tails, evictions, refusals and resets */
    EXPECT(t[HOT_PLAN_HITS] > 0 && t[HOT_PLAN_MISSES] > 0 && t[HOT_PLAN_FRESH] > 0 &&
           t[HOT_PLAN_EVICTIONS] > 0 && refused > 0 && R.resets > 0);
    fprintf(stderr,
            "%-18s units %3d slots %4d steps %5d: hits %8lld misses %7lld fresh %6lld "
            "evictions %7lld refused %3d resets %3d moves %d %s\n",
            c->name, R.U, c->n_slots, c->steps, (long long)t[HOT_PLAN_HITS],
            (long long)t[HOT_PLAN_MISSES], (long long)t[HOT_PLAN_FRESH],
            (long long)t[HOT_PLAN_EVICTIONS], refused, R.resets, R.moves, bad ? "FAIL" : "ok");
    free(R.prev);
    free(R.mark);
    free(R.mem);
    hot_cache_free(R.hc);
}

/* ------------------------------------------------------------------ hand-checked, refusals */

/* One list on unit 0 of a batch of 1. */
static void one(const struct hot_plan_params *p, const struct hot_plan_state *s, struct io *o,
                const int32_t *sel, int cnt, int nb, int tail_new, int max_sel)
{
    io_poison(o, 1, max_sel);
    memcpy(o->sel, sel, sizeof(int32_t) * (size_t)cnt);
    o->cnt[0] = cnt, o->base[0] = 0, o->nb[0] = nb, o->tn[0] = tail_new;
    io_bind(o, 1, 1, max_sel);
    hot_plan_ref(p, s, &o->in, &o->out, NULL);
}

/* test_hot_cache.c's hand-checked sequence: 4 slots, sink 1, window 1. */
static void test_small(void)
{
    struct hot_plan_params p = {1, 4, 1, 1, 8};
    struct hot_plan_state s;
    void *mem = state_new(&p, &s);
    static struct io o;
    memset(o.totals, 0, sizeof o.totals);
    char err[256];
    /* nb 6: pinned 0, 4, 5. {0, 2, 4, 5}: 4 recalls into slots 0..3 */
    const int32_t s1[] = {0, 2, 4, 5};
    one(&p, &s, &o, s1, 4, 6, 0, 4);
    EXPECT_EQ_INT(o.status[0], PULSE_OK);
    EXPECT_EQ_INT(o.n_hits[0], 0);
    EXPECT_EQ_INT(o.n_rec[0], 4);
    for (int i = 0; i < 4; i++) {
        EXPECT_EQ_INT(o.rb[i], s1[i]);
        EXPECT_EQ_INT(o.rs[i], i);
        EXPECT_EQ_INT(o.vb[i], -1);
        EXPECT_EQ_INT(o.att[i], i);
    }
    /* nb 7, new tail 6: hits 0, 5; 3 evicts 2 (slot 1); fresh 6 evicts 4 (slot 2) */
    const int32_t s2[] = {0, 3, 5, 6};
    one(&p, &s, &o, s2, 4, 7, 1, 4);
    EXPECT_EQ_INT(o.status[0], PULSE_OK);
    EXPECT_EQ_INT(o.n_hits[0], 2);
    EXPECT_EQ_INT(o.n_rec[0], 1);
    EXPECT_EQ_INT(o.rb[0], 3);
    EXPECT_EQ_INT(o.rs[0], 1);
    EXPECT_EQ_INT(o.vb[0], 2);
    EXPECT_EQ_INT(o.fb[0], 6);
    EXPECT_EQ_INT(o.fs[0], 2);
    EXPECT_EQ_INT(o.fv[0], 4);
    const int32_t att2[] = {0, 1, 3, 2};
    for (int i = 0; i < 4; i++)
        EXPECT_EQ_INT(o.att[i], att2[i]);
    EXPECT_EQ_INT(o.rb[1], SENT);
    EXPECT_EQ_INT(o.totals[HOT_PLAN_HITS], 2);
    EXPECT_EQ_INT(o.totals[HOT_PLAN_MISSES], 5);
    EXPECT_EQ_INT(o.totals[HOT_PLAN_FRESH], 1);
    EXPECT_EQ_INT(o.totals[HOT_PLAN_EVICTIONS], 2);
    EXPECT_EQ_INT(s.unit[0].clock, 8);
    EXPECT_EQ_INT(hot_plan_check(&p, &s, err, sizeof err), 0);
    /* one-block context after a reset: the fresh tail takes slot 0 */
    hot_plan_reset_ref(&p, &s, 0, 1, NULL);
    EXPECT_EQ_INT(s.unit[0].n_free, 4);
    const int32_t s3[] = {0};
    one(&p, &s, &o, s3, 1, 1, 1, 4);
    EXPECT_EQ_INT(o.fb[0], 0);
    EXPECT_EQ_INT(o.fs[0], 0);
    EXPECT_EQ_INT(o.fv[0], -1);
    EXPECT_EQ_INT(o.n_rec[0], 0);
    EXPECT_EQ_INT(s.unit[0].n_free, 3);
    EXPECT_EQ_INT(hot_plan_check(&p, &s, err, sizeof err), 0);
    /* a broken state is reported */
    s.block_slot[0] = 3;
    EXPECT(hot_plan_check(&p, &s, err, sizeof err) != 0);
    EXPECT_STR_CONTAINS(err, "unit 0");
    free(mem);
}

/* Every refusal on its own: the status (equal to hot_cache_access's where it has the input),
 * no state byte and no total changed, nothing written past the counts. Then a mixed batch. */
static void test_refused(void)
{
    struct hot_plan_params p = {4, 4, 1, 1, 8};
    struct hot_cache_params hp = {4, 4, 1, 1};
    struct hot_cache *hc = hot_cache_create(&hp, NULL, 0);
    struct hot_plan_state s;
    void *mem = state_new(&p, &s);
    const size_t bytes = hot_plan_state_bytes(&p);
    static struct io o;
    static struct hc_out h;
    hc_bind(&h);
    memset(o.totals, 0, sizeof o.totals);
    const int32_t s1[] = {0, 2, 4, 5};
    one(&p, &s, &o, s1, 4, 6, 0, 6);
    hot_cache_access(hc, 0, s1, 4, 6, 0, &h.r);
    void *before = malloc(bytes);
    memcpy(before, mem, bytes);
    int64_t tot0[HOT_PLAN_TOTALS];
    memcpy(tot0, o.totals, sizeof tot0);
    struct {
        const char *what;
        int32_t sel[8];
        int cnt, nb, base, max_sel, status, hc_has_it;
    } cases[] = {
        {"unsorted", {0, 3, 2, 5, 6}, 4, 7, 0, 6, PULSE_ERR_INVALID, 1},
        {"no tail", {0, 3, 5}, 3, 7, 0, 6, PULSE_ERR_INVALID, 1},
        {"no window", {0, 3, 6}, 3, 7, 0, 6, PULSE_ERR_INVALID, 1},
        {"no sink", {3, 5, 6}, 3, 7, 0, 6, PULSE_ERR_INVALID, 1},
        {"past the end", {0, 5, 6, 7}, 4, 7, 0, 6, PULSE_ERR_INVALID, 1},
        {"negative", {-1, 0, 5, 6}, 4, 7, 0, 6, PULSE_ERR_INVALID, 1},
        {"duplicate", {0, 5, 5, 6}, 4, 7, 0, 6, PULSE_ERR_INVALID, 1},
        {"n_blocks 0", {0}, 1, 0, 0, 6, PULSE_ERR_INVALID, 1},
        {"count > n_slots", {0, 1, 2, 5, 6}, 5, 7, 0, 6, PULSE_ERR_NOMEM, 1},
        {"count < 0", {0}, -1, 7, 0, 6, PULSE_ERR_INVALID, 1},
        {"count > max_sel", {0, 1, 2, 5, 6}, 5, 7, 0, 4, PULSE_ERR_INVALID, 0},
        {"n_blocks > max_blocks", {0, 7, 8}, 3, 9, 0, 6, PULSE_ERR_INVALID, 0},
        {"unit past the end", {0, 5, 6}, 3, 7, 4, 6, PULSE_ERR_INVALID, 1},
        {"unit < 0", {0, 5, 6}, 3, 7, -1, 6, PULSE_ERR_INVALID, 1},
    };
    for (size_t i = 0; i < PULSE_ARRAY_LEN(cases); i++) {
        io_poison(&o, 1, 8);
        memcpy(o.sel, cases[i].sel, sizeof cases[i].sel);
        o.cnt[0] = cases[i].cnt, o.base[0] = cases[i].base, o.nb[0] = cases[i].nb, o.tn[0] = 1;
        io_bind(&o, 1, 1, cases[i].max_sel);
        hot_plan_ref(&p, &s, &o.in, &o.out, NULL);
        EXPECT_EQ_INT(o.status[0], cases[i].status);
        if (o.status[0] != cases[i].status) fprintf(stderr, "  case: %s\n", cases[i].what);
        if (cases[i].hc_has_it)
            EXPECT_EQ_INT(hot_cache_access(hc, cases[i].base, cases[i].sel, cases[i].cnt,
                                           cases[i].nb, 1, &h.r),
                          cases[i].status);
        EXPECT(memcmp(before, mem, bytes) == 0);
        EXPECT(memcmp(tot0, o.totals, sizeof tot0) == 0);
        EXPECT(o.n_hits[0] == 0 && o.n_rec[0] == 0 && o.fb[0] == -1 && o.fs[0] == -1 &&
               o.fv[0] == -1);
        EXPECT(o.att[0] == SENT && o.rb[0] == SENT && o.vb[0] == SENT);
    }
    /* a batch of 2 entries x 2 lists (units 0..3), lists 1 and 2 refused: the others run */
    io_poison(&o, 4, 6);
    const int ms = 6;
    const int32_t l0[] = {0, 3, 5, 6}, l1[] = {0, 6}, l2[] = {0, 1, 2, 3, 5, 6},
                  l3[] = {0, 1, 5, 6};
    memcpy(o.sel + 0 * ms, l0, sizeof l0), o.cnt[0] = 4;
    memcpy(o.sel + 1 * ms, l1, sizeof l1), o.cnt[1] = 2;
    memcpy(o.sel + 2 * ms, l2, sizeof l2), o.cnt[2] = 6;
    memcpy(o.sel + 3 * ms, l3, sizeof l3), o.cnt[3] = 4;
    o.base[0] = 0, o.base[1] = 2, o.nb[0] = o.nb[1] = 7, o.tn[0] = 1, o.tn[1] = 0;
    io_bind(&o, 2, 2, ms);
    hot_plan_ref(&p, &s, &o.in, &o.out, NULL);
    int refused = 0, bad = 0;
    for (int v = 0; v < 4; v++)
        bad += compare_list(hc, &o, v, &h, &refused);
    for (int u = 0; u < 4; u++)
        bad += compare_unit(&p, &s, hc, u);
    EXPECT_EQ_INT(bad, 0);
    EXPECT_EQ_INT(refused, 2); /* l1 lacks the window, l2 is 6 > 4 slots */
    EXPECT_EQ_INT(o.status[1], PULSE_ERR_INVALID);
    EXPECT_EQ_INT(o.status[2], PULSE_ERR_NOMEM);
    EXPECT_EQ_INT(o.status[0], PULSE_OK);
    EXPECT_EQ_INT(o.status[3], PULSE_OK);
    EXPECT_EQ_INT(o.fb[0], 6);
    EXPECT_EQ_INT(o.n_rec[3], 4);
    char err[256];
    EXPECT_EQ_INT(hot_plan_check(&p, &s, err, sizeof err), 0);
    free(before);
    free(mem);
    hot_cache_free(hc);
}

static void test_params(void)
{
    struct {
        struct hot_plan_params p;
        const char *field;
    } bad[] = {
        {{0, 4, 1, 2, 8}, "n_units"},
        {{2, 0, 1, 2, 8}, "n_slots"},
        {{2, 2049, 1, 2, 8}, "n_slots"},
        {{2, 4, -1, 2, 8}, "sink"},
        {{2, 4, 1, -2, 8}, "window"},
        {{2, 4, 1, 2, 0}, "max_blocks"},
        {{2, 4, 1, 2, (1 << 24) + 1}, "max_blocks"},
    };
    for (size_t i = 0; i < PULSE_ARRAY_LEN(bad); i++) {
        char err[256] = "";
        EXPECT_EQ_INT(hot_plan_params_check(&bad[i].p, err, sizeof err), -1);
        EXPECT_STR_CONTAINS(err, bad[i].field);
        EXPECT_STR_CONTAINS(err, "hot plan");
        EXPECT_EQ_INT(hot_plan_state_bytes(&bad[i].p), 0);
    }
    struct hot_plan_params ok = {3, 2048, 0, 0, 5};
    EXPECT_EQ_INT(hot_plan_params_check(&ok, NULL, 0), 0);
    /* header, slot arrays (4 + 4 + 8 bytes per slot), block map: 256-byte aligned parts */
    EXPECT_EQ_INT(hot_plan_state_bytes(&ok), 256 + 3 * 2048 * 16 + 256);
}

int main(void)
{
    test_params();
    test_small();
    test_refused();
    static const struct cfg cases[] = {
        /* name, req, lists, slots, sink, window, k, keep, bs, max_blocks, batch, steps, pad */
        {"token-wise", 6, 1, 16, 1, 2, 8, 70, 4, 512, 3, 6000, 0},
        {"head-wise x4", 10, 4, 24, 1, 2, 16, 85, 2, 512, 7, 5000, 0},
        {"head-wise x8", 12, 8, 40, 1, 2, 24, 90, 16, 256, 8, 2000, 3},
        {"no sink/window", 5, 2, 7, 0, 0, 6, 50, 1, 1024, 5, 3000, 0},
        {"slots = selection", 8, 1, 46, 2, 3, 40, 95, 16, 400, 5, 3000, 0},
        {"1-slot units", 4, 2, 1, 0, 0, 0, 0, 3, 300, 3, 3000, 0},
        {"no locality", 3, 3, 13, 1, 2, 9, 0, 3, 300, 2, 3000, 0},
        {"roomy", 6, 2, 96, 1, 2, 20, 60, 4, 600, 4, 3000, 1},
        {"2048 slots", 2, 1, 2048, 1, 2, 2044, 97, 1, 4096, 2, 400, 0},
    };
    for (size_t i = 0; i < PULSE_ARRAY_LEN(cases); i++)
        run_case(&cases[i]);
    return tu_finish("test_hot_plan");
}
