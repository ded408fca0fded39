/* The hot cache against a brute-force LRU model: long random decode-like sequences of
 * selections over several interleaved units, hot_cache_check after every access, hits, misses,
 * fresh tails, evictions and the victims themselves equal to the model's, pinned blocks never
 * evicted, the attend list consistent with the slot map, bad inputs refused without a change,
 * and no allocation after create. */
#include <stdint.h>
#include <string.h>

#include "common.h"
#include "hot_cache.h"
#include "mem.h"
#include "numeric.h"
#include "select.h"
#include "testutil.h"

static uint64_t g_seed = 0x40c4, g_ctr;
static uint32_t rnd(uint32_t n)
{
    return (uint32_t)(pulse_hash64(g_seed, g_ctr++) % n);
}

/* ------------------------------------------------------------------ the model */

#define MAXS 64
#define MAXB 4096

struct model {
    int n_slots, n;      /* capacity, resident count */
    int32_t block[MAXS]; /* resident blocks */
    int64_t used[MAXS];  /* last-use time */
    int64_t clock;
    int64_t hits, misses, fresh, evictions;
};

static int model_find(const struct model *m, int32_t b)
{
    for (int i = 0; i < m->n; i++)
        if (m->block[i] == b) return i;
    return -1;
}

/* One access; victims written in recall order (fresh last is not separated: victims[] holds the
 * victim of every miss or fresh block in selection order, -1 for a free slot). */
static void model_access(struct model *m, const int32_t *sel, int n_sel, int nb, int tail_new,
                         int *n_hits, int *n_rec, int32_t *victims, int32_t *fresh_victim)
{
    int miss_at[MAXS * 4], n_miss = 0;
    *n_hits = *n_rec = 0;
    *fresh_victim = -2;
    for (int i = 0; i < n_sel; i++) {
        int at = model_find(m, sel[i]);
        if (at >= 0) {
            m->used[at] = ++m->clock;
            (*n_hits)++;
        } else {
            miss_at[n_miss++] = i;
        }
    }
    for (int q = 0; q < n_miss; q++) {
        int32_t b = sel[miss_at[q]], victim = -1;
        int at;
        if (m->n < m->n_slots) {
            at = m->n++;
        } else {
            at = 0;
            for (int i = 1; i < m->n; i++)
                if (m->used[i] < m->used[at]) at = i;
            victim = m->block[at];
            m->evictions++;
        }
        m->block[at] = b;
        m->used[at] = ++m->clock;
        if (tail_new && b == nb - 1) {
            *fresh_victim = victim;
            m->fresh++;
        } else {
            victims[(*n_rec)++] = victim;
            m->misses++;
        }
    }
    m->hits += *n_hits;
}

static void add_totals(struct model *t, const struct model *m)
{
    t->hits += m->hits, t->misses += m->misses;
    t->fresh += m->fresh, t->evictions += m->evictions;
}

/* ------------------------------------------------------------------ selections */

/* A decode-like selection: pinned blocks + `k` candidates, of which about `keep` percent are
 * kept from the previous selection of this unit (locality) and the rest drawn at random. */
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

struct out_bufs {
    int32_t hb[MAXB], hs[MAXB], rb[MAXB], rs[MAXB], vb[MAXB], as[MAXB];
    struct hot_cache_result r;
};

static void out_init(struct out_bufs *o)
{
    o->r = (struct hot_cache_result){.hit_block = o->hb,
                                     .hit_slot = o->hs,
                                     .recall_block = o->rb,
                                     .recall_slot = o->rs,
                                     .victim_block = o->vb,
                                     .attend_slot = o->as};
}

/* ------------------------------------------------------------------ tests */

static void run_sequence(int n_units, int n_slots, int sink, int window, int k, int keep, int bs,
                         int steps)
{
    struct hot_cache_params p = {n_units, n_slots, sink, window};
    char err[256];
    struct hot_cache *hc = hot_cache_create(&p, err, sizeof err);
    EXPECT(hc != NULL);
    if (!hc) return;
    static struct model models[8];
    static uint8_t prev[8][MAXB], mark[MAXB];
    static int ntok[8];
    static struct out_bufs o;
    out_init(&o);
    int32_t sel[MAXB], victims[MAXB];
    for (int u = 0; u < n_units; u++) {
        memset(&models[u], 0, sizeof models[u]);
        models[u].n_slots = n_slots;
        memset(prev[u], 0, sizeof prev[u]);
        ntok[u] = 1 + (int)rnd((uint32_t)(3 * k + 8) * (uint32_t)bs);
    }
    struct model tot;
    memset(&tot, 0, sizeof tot);
    struct mem_stats m0, m1;
    mem_get_stats(&m0);
    int bad = 0, pinned_evicted = 0, attend_bad = 0;
    for (int step = 0; step < steps && !bad; step++) {
        int u = (int)rnd((uint32_t)n_units);
        if (rnd(50) == 0) { /* the request leaves; another arrives */
            hot_cache_reset(hc, u);
            add_totals(&tot, &models[u]);
            memset(&models[u], 0, sizeof models[u]);
            models[u].n_slots = n_slots;
            memset(prev[u], 0, sizeof prev[u]);
            ntok[u] = 1 + (int)rnd((uint32_t)(3 * k + 8) * (uint32_t)bs);
        }
        ntok[u]++;
        if (ntok[u] > (MAXB - 1) * bs) ntok[u] = 1;
        int nb = PULSE_CEIL_DIV(ntok[u], bs), tail_new = (ntok[u] - 1) % bs == 0;
        int n_sel = make_sel(nb, sink, window, k, keep, prev[u], mark, sel);
        memcpy(prev[u], mark, (size_t)nb);
        int rc = hot_cache_access(hc, u, sel, n_sel, nb, tail_new, &o.r);
        EXPECT_EQ_INT(rc, PULSE_OK);
        int mh, mr;
        int32_t fv;
        model_access(&models[u], sel, n_sel, nb, tail_new, &mh, &mr, victims, &fv);
        EXPECT_EQ_INT(o.r.n_hits, mh);
        EXPECT_EQ_INT(o.r.n_recalls, mr);
        for (int i = 0; i < mr && i < o.r.n_recalls; i++)
            bad += o.r.victim_block[i] != victims[i];
        EXPECT_EQ_INT(o.r.fresh_victim, fv == -2 ? -1 : fv);
        EXPECT_EQ_INT(o.r.fresh_block >= 0, fv != -2);
        /* no victim is pinned (or selected at all) this step */
        int c0, c1;
        select_candidates(nb, sink, window, &c0, &c1);
        for (int i = 0; i < o.r.n_recalls; i++) {
            int32_t v = o.r.victim_block[i];
            if (v >= 0 && (v < c0 || v >= c1)) pinned_evicted++;
        }
        /* attend[i] holds sel[i]; the resident set is the model's */
        for (int i = 0; i < n_sel; i++)
            attend_bad += hot_cache_slot_block(hc, u, o.r.attend_slot[i]) != sel[i];
        EXPECT_EQ_INT(hot_cache_resident(hc, u), models[u].n);
        for (int i = 0; i < models[u].n; i++)
            bad += hot_cache_lookup(hc, u, models[u].block[i]) < 0;
        if (hot_cache_check(hc, err, sizeof err) != 0) {
            fprintf(stderr, "step %d: %s\n", step, err);
            bad++;
        }
    }
    mem_get_stats(&m1);
    EXPECT_EQ_INT(m1.alloc_calls[MEM_HOST], m0.alloc_calls[MEM_HOST]);
    EXPECT_EQ_INT(bad, 0);
    EXPECT_EQ_INT(pinned_evicted, 0);
    EXPECT_EQ_INT(attend_bad, 0);
    struct hot_cache_stats st;
    hot_cache_get_stats(hc, &st);
    /* the cache's counters are cumulative over resets: compare with the running totals */
    for (int u = 0; u < n_units; u++)
        add_totals(&tot, &models[u]);
    EXPECT_EQ_INT(st.hits, tot.hits);
    EXPECT_EQ_INT(st.misses, tot.misses);
    EXPECT_EQ_INT(st.fresh, tot.fresh);
    EXPECT_EQ_INT(st.evictions, tot.evictions);
    EXPECT(st.evictions > 0 && st.hits > 0 && st.misses > 0);
    if (!(st.evictions > 0 && st.hits > 0 && st.misses > 0))
        fprintf(stderr, "units %d slots %d: ev %lld hits %lld misses %lld\n", n_units, n_slots,
                (long long)st.evictions, (long long)st.hits, (long long)st.misses);
    hot_cache_free(hc);
}

/* The counters equal the model's exactly on one unit with no resets. */
static void test_counters(void)
{
    struct hot_cache_params p = {1, 20, 1, 2};
    struct hot_cache *hc = hot_cache_create(&p, NULL, 0);
    static struct model m;
    static struct out_bufs o;
    static uint8_t prev[MAXB], mark[MAXB];
    out_init(&o);
    memset(&m, 0, sizeof m);
    m.n_slots = 20;
    memset(prev, 0, sizeof prev);
    int32_t sel[MAXB], victims[MAXB];
    int ntok = 37, bs = 4;
    for (int step = 0; step < 3000; step++) {
        ntok++;
        int nb = PULSE_CEIL_DIV(ntok, bs), tail_new = (ntok - 1) % bs == 0;
        int n = make_sel(nb, 1, 2, 12, step % 2 ? 90 : 40, prev, mark, sel);
        memcpy(prev, mark, (size_t)nb);
        EXPECT_EQ_INT(hot_cache_access(hc, 0, sel, n, nb, tail_new, &o.r), PULSE_OK);
        int mh, mr;
        int32_t fv;
        model_access(&m, sel, n, nb, tail_new, &mh, &mr, victims, &fv);
    }
    struct hot_cache_stats st;
    hot_cache_get_stats(hc, &st);
    EXPECT_EQ_INT(st.accesses, 3000);
    EXPECT_EQ_INT(st.hits, m.hits);
    EXPECT_EQ_INT(st.misses, m.misses);
    EXPECT_EQ_INT(st.fresh, m.fresh);
    EXPECT_EQ_INT(st.evictions, m.evictions);
    EXPECT_EQ_INT(st.resident, m.n);
    EXPECT(m.evictions > 100 && m.fresh > 100);
    char err[256];
    EXPECT_EQ_INT(hot_cache_check(hc, err, sizeof err), 0);
    hot_cache_free(hc);
}

/* Hand-checked: 4 slots, sink 1, window 1. */
static void test_small(void)
{
    struct hot_cache_params p = {1, 4, 1, 1};
    struct hot_cache *hc = hot_cache_create(&p, NULL, 0);
    static struct out_bufs o;
    out_init(&o);
    char err[256];
    /* nb 6: pinned 0, 4, 5. Select {0, 2, 4, 5}: 4 recalls into slots 0..3 (no tail_new) */
    int32_t s1[] = {0, 2, 4, 5};
    EXPECT_EQ_INT(hot_cache_access(hc, 0, s1, 4, 6, 0, &o.r), PULSE_OK);
    EXPECT_EQ_INT(o.r.n_hits, 0);
    EXPECT_EQ_INT(o.r.n_recalls, 4);
    for (int i = 0; i < 4; i++) {
        EXPECT_EQ_INT(o.r.recall_block[i], s1[i]);
        EXPECT_EQ_INT(o.r.recall_slot[i], i);
        EXPECT_EQ_INT(o.r.victim_block[i], -1);
        EXPECT_EQ_INT(o.r.attend_slot[i], i);
    }
    /* nb 7 with a new tail 6: pinned 0, 5, 6. Select {0, 3, 5, 6}: hits 0, 5; 3 evicts the LRU
     * unselected block (2, then 4); fresh tail 6 takes the next victim */
    int32_t s2[] = {0, 3, 5, 6};
    EXPECT_EQ_INT(hot_cache_access(hc, 0, s2, 4, 7, 1, &o.r), PULSE_OK);
    EXPECT_EQ_INT(o.r.n_hits, 2);
    EXPECT_EQ_INT(o.r.hit_block[0], 0);
    EXPECT_EQ_INT(o.r.hit_block[1], 5);
    EXPECT_EQ_INT(o.r.n_recalls, 1);
    EXPECT_EQ_INT(o.r.recall_block[0], 3);
    EXPECT_EQ_INT(o.r.victim_block[0], 2);
    EXPECT_EQ_INT(o.r.recall_slot[0], 1);
    EXPECT_EQ_INT(o.r.fresh_block, 6);
    EXPECT_EQ_INT(o.r.fresh_victim, 4);
    EXPECT_EQ_INT(o.r.fresh_slot, 2);
    EXPECT_EQ_INT(hot_cache_check(hc, err, sizeof err), 0);
    /* refused inputs change nothing */
    struct hot_cache_stats a, b;
    hot_cache_get_stats(hc, &a);
    int32_t unsorted[] = {0, 5, 3, 6}, no_tail[] = {0, 3, 5}, too_many[] = {0, 1, 2, 5, 6};
    int32_t out_of_range[] = {0, 5, 6, 7};
    EXPECT_EQ_INT(hot_cache_access(hc, 0, unsorted, 4, 7, 0, &o.r), PULSE_ERR_INVALID);
    EXPECT_EQ_INT(hot_cache_access(hc, 0, no_tail, 3, 7, 0, &o.r), PULSE_ERR_INVALID);
    EXPECT_EQ_INT(hot_cache_access(hc, 0, out_of_range, 4, 7, 0, &o.r), PULSE_ERR_INVALID);
    EXPECT_EQ_INT(hot_cache_access(hc, 0, too_many, 5, 7, 0, &o.r), PULSE_ERR_NOMEM);
    EXPECT_EQ_INT(hot_cache_access(hc, 1, s2, 4, 7, 0, &o.r), PULSE_ERR_INVALID);
    hot_cache_get_stats(hc, &b);
    EXPECT(memcmp(&a, &b, sizeof a) == 0);
    EXPECT_EQ_INT(hot_cache_lookup(hc, 0, 3), 1);
    EXPECT_EQ_INT(hot_cache_lookup(hc, 0, 2), -1);
    /* one-block context */
    hot_cache_reset(hc, 0);
    int32_t s3[] = {0};
    EXPECT_EQ_INT(hot_cache_access(hc, 0, s3, 1, 1, 1, &o.r), PULSE_OK);
    EXPECT_EQ_INT(o.r.fresh_block, 0);
    EXPECT_EQ_INT(o.r.n_recalls, 0);
    EXPECT_EQ_INT(hot_cache_resident(hc, 0), 1);
    EXPECT_EQ_INT(hot_cache_check(hc, err, sizeof err), 0);
    hot_cache_free(hc);

    struct hot_cache_params bad = {1, 0, 1, 2};
    EXPECT(hot_cache_create(&bad, err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "n_slots");
}

int main(void)
{
    test_small();
    test_counters();
    /* (units, slots, sink, window, k, keep %, block, steps) */
    run_sequence(1, 16, 1, 2, 8, 70, 4, 4000);
    run_sequence(5, 24, 1, 2, 16, 85, 2, 8000);
    run_sequence(3, 7, 0, 0, 6, 50, 1, 4000); /* no sink or window; one-token blocks */
    run_sequence(8, 64, 2, 3, 40, 95, 16, 6000);
    run_sequence(2, 13, 1, 2, 9, 0, 3, 3000); /* no locality: nearly every block misses */
    return tu_finish("test_hot_cache");
}
