/* offload_plan_build_cuda (runtime/offload/offload_kernels.h: a list's hot-cache plan and its
 * build in one thread block, two layers' jobs in one launch) against offload_plan_build_ref,
 * bit for bit, over decode-like runs on a persistent hot-plan state (hot_plan.h) kept on each
 * side: the device state is never uploaded again, so every step plans on what the kernel
 * itself left. Requests grow token by token (tails that become new, requests that leave with
 * their units reset), each list re-selects most of its last blocks (hits) beside new ones
 * (recalls) in units small enough to evict. Steps alternate one job (layer 0 or layer 1) and
 * two jobs (layers 0 and 1: distinct units and outputs; in some steps the second job on fewer
 * entries). Shapes: SoloHead (1 list an entry) and head-wise (8 KV heads), batches 1, 13 and
 * 40; some cases refuse an occasional list (out of order, no tail, an entry's units out of
 * range, a list longer than the unit), gate layer 0 (its victims against ascending predicted
 * lists) or have the attention recall (att_host). Each side is one allocation of one layout
 * whose outputs start every step as guard bytes; after each step the whole buffer (outputs,
 * guard bytes, totals, counters, gates) and the whole state buffer are compared byte for byte
 * and hot_plan_check runs on the host state. Every case must see hits, misses, fresh tails and
 * evictions, counters that move and the gate or host pieces where it has them.
 * offload_plan_jobs_check's refusals (a build that reads another plan, a shape mismatch, shared
 * outputs, 0 or 3 jobs) are checked in child processes first. One line per case; exit 77
 * without a GPU (after the refusals); PULSE_GPU_TEST_QUICK=1 runs fewer steps. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common.h"
#include "hot_plan.h"
#include "mem.h"
#include "numeric.h"
#include "offload_kernels.h"
#include "select.h"
#include "testutil.h"

#define GUARD 0xA5
#define GAP 64     /* guard bytes after every part of a side's buffer, at least */
#define N_SPARSE 2 /* sparse layers: a two-job step plans layer 0, then layer 1 */
#define NKV 8      /* KV heads (head-wise: one list each) */
#define SINK 1
#define WINDOW 2
#define PAD 2 /* list stride past the largest valid selection */
#define MAX_REQ 64
#define MAX_PARTS 64
#define GATE_OPEN 0x01010101u /* OFFLOAD_GATE_BYTE in each byte */
#define STATE_GARBAGE 0xc3

static uint64_t g_seed = 0x5e1ec7ab, g_ctr;
static uint32_t rnd(uint32_t n)
{
    return (uint32_t)(pulse_hash64(g_seed, g_ctr++) % n);
}

struct cfg {
    const char *name;
    int n_lists, batch, n_req;            /* lists an entry; entries a step; requests */
    int n_slots, k, keep, ps, max_blocks; /* unit size; candidates, percent kept; block tokens */
    int steps;
    int gated, recalls; /* layer 0's job gated; every job's attention recalls */
    int corrupt;        /* one job in `corrupt` has a list refused (0: never) */
};

/* ------------------------------------------------------------------ one side's buffer */

struct job_bufs { /* one layer's job: its inputs, plan and build outputs, counters */
    int32_t *sel_idx, *sel_count, *unit_base, *spec_idx, *spec_count;
    int32_t *status, *n_hits, *n_recalls, *recall_block, *recall_slot, *victim_block;
    int32_t *fresh_block, *fresh_slot, *fresh_victim, *attend_slot;
    int64_t *totals; /* [HOT_PLAN_TOTALS] */
    struct recall_desc *desc, *tail_desc;
    int32_t *att_len, *att_pages, *att_host;
    uint32_t *gate;
    unsigned long long *cnt; /* att_tokens, refused, held */
};

struct side { /* the reference's (host) or the kernel's (device): one layout */
    int32_t *n_blocks, *tail_new, *n_tok, *slot, *hslot, *tail_index, *own, *host_ids;
    struct job_bufs job[N_SPARSE];
};

struct part {
    char name[32];
    size_t off, len; /* len: the data; the gap after it up to the next part holds guard bytes */
    int out;         /* an output: guard bytes again before every step */
};

struct layout {
    size_t bytes;
    int n;
    struct part part[MAX_PARTS];
};

/* Carves a side's buffer at base (NULL: offsets only) and records its parts in lo; returns
 * the bytes. Entries: batch; lists: batch * n_lists of stride ms; requests: n_req. */
static size_t carve(struct side *s, char *base, const struct cfg *c, int ms, struct layout *lo)
{
    const size_t B = (size_t)c->batch, V = B * c->n_lists, R = V * ms, MB = (size_t)c->n_req;
    const size_t H1 = (size_t)c->n_slots + 1, OWN = MB * N_SPARSE * H1;
    const size_t IDS = MB * N_SPARSE * c->max_blocks;
    size_t off = 0;
    lo->n = 0;
#define PART(ptr, count, is_out, ...)                                                              \
    do {                                                                                           \
        PULSE_CHECK(lo->n < MAX_PARTS, "test: too many parts");                                    \
        struct part *p_ = &lo->part[lo->n++];                                                      \
        snprintf(p_->name, sizeof p_->name, __VA_ARGS__);                                          \
        p_->off = off, p_->len = (count) * sizeof(*(ptr)), p_->out = (is_out);                     \
        (ptr) = base ? (void *)(base + off) : NULL;                                                \
        off += mem_aligned(p_->len + GAP);                                                         \
    } while (0)
    PART(s->n_blocks, B, 0, "n_blocks");
    PART(s->tail_new, B, 0, "tail_new");
    PART(s->n_tok, B, 0, "n_tok");
    PART(s->slot, B, 0, "slot");
    PART(s->hslot, B, 0, "hslot");
    PART(s->tail_index, B, 0, "tail_index");
    PART(s->own, OWN, 0, "own");
    PART(s->host_ids, IDS, 0, "host_ids");
    for (int j = 0; j < N_SPARSE; j++) {
        struct job_bufs *b = &s->job[j];
        PART(b->sel_idx, R, 0, "job%d sel_idx", j);
        PART(b->sel_count, V, 0, "job%d sel_count", j);
        PART(b->unit_base, B, 0, "job%d unit_base", j);
        PART(b->spec_idx, R, 0, "job%d spec_idx", j);
        PART(b->spec_count, V, 0, "job%d spec_count", j);
        PART(b->status, V, 1, "job%d status", j);
        PART(b->n_hits, V, 1, "job%d n_hits", j);
        PART(b->n_recalls, V, 1, "job%d n_recalls", j);
        PART(b->recall_block, R, 1, "job%d recall_block", j);
        PART(b->recall_slot, R, 1, "job%d recall_slot", j);
        PART(b->victim_block, R, 1, "job%d victim_block", j);
        PART(b->fresh_block, V, 1, "job%d fresh_block", j);
        PART(b->fresh_slot, V, 1, "job%d fresh_slot", j);
        PART(b->fresh_victim, V, 1, "job%d fresh_victim", j);
        PART(b->attend_slot, R, 1, "job%d attend_slot", j);
        PART(b->totals, (size_t)HOT_PLAN_TOTALS, 0, "job%d totals", j);
        PART(b->desc, R, 1, "job%d desc", j);
        PART(b->att_len, V, 1, "job%d att_len", j);
        PART(b->att_pages, R, 1, "job%d att_pages", j);
        PART(b->tail_desc, V, 1, "job%d tail_desc", j);
        PART(b->att_host, R, 1, "job%d att_host", j);
        PART(b->gate, (size_t)1, 0, "job%d gate", j);
        PART(b->cnt, (size_t)3, 0, "job%d counters", j);
    }
#undef PART
    lo->bytes = off;
    return off;
}

/* Layer sl's job on `batch` entries of side s (gated: layer 0 in a gated case). */
static struct offload_plan_job job_of(const struct side *s, int sl, int batch, const struct cfg *c,
                                      int ms)
{
    const struct job_bufs *b = &s->job[sl];
    const int L = c->n_lists, gated = c->gated && sl == 0;
    struct offload_plan_job j;
    memset(&j, 0, sizeof j);
    j.in = (struct hot_plan_in){
        b->sel_idx, b->sel_count, b->unit_base, s->n_blocks, s->tail_new, batch, L, ms};
    j.out = (struct hot_plan_out){b->status,       b->n_hits,       b->n_recalls,   b->recall_block,
                                  b->recall_slot,  b->victim_block, b->fresh_block, b->fresh_slot,
                                  b->fresh_victim, b->attend_slot,  b->totals};
    j.build = (struct offload_build_args){.status = b->status,
                                          .n_recalls = b->n_recalls,
                                          .recall_block = b->recall_block,
                                          .recall_slot = b->recall_slot,
                                          .attend_slot = b->attend_slot,
                                          .sel_count = b->sel_count,
                                          .n_tok = s->n_tok,
                                          .slot = s->slot,
                                          .hslot = s->hslot,
                                          .tail_index = s->tail_index,
                                          .own = s->own,
                                          .host_ids = s->host_ids,
                                          .B = batch,
                                          .n_lists = L,
                                          .ms = ms,
                                          .ps = c->ps,
                                          .hot_slots = c->n_slots,
                                          .n_sparse = N_SPARSE,
                                          .sl = sl,
                                          .max_blocks = c->max_blocks,
                                          .headwise = L > 1,
                                          .nkv = NKV,
                                          .host_base = 0x7f0000001000ull,
                                          .gpu_pool = 0x7e0000000000ull,
                                          .page_bytes = 65536,
                                          .head_bytes = 65536 / NKV,
                                          .chunk_bytes = L > 1 ? 65536 / NKV : 65536,
                                          .desc = b->desc,
                                          .att_len = b->att_len,
                                          .att_pages = b->att_pages,
                                          .tail_desc = b->tail_desc,
                                          .att_tokens = b->cnt,
                                          .refused = b->cnt + 1,
                                          .sel_idx = b->sel_idx,
                                          .att_host = c->recalls ? b->att_host : NULL,
                                          .victim_block = b->victim_block,
                                          .spec_idx = gated ? b->spec_idx : NULL,
                                          .spec_count = b->spec_count,
                                          .gate = b->gate,
                                          .held = b->cnt + 2};
    return j;
}

/* ------------------------------------------------------------------ the workload */

struct gen {
    const struct cfg *c;
    int L, U, ms, max_tok;
    int ntok[MAX_REQ], first[MAX_REQ], hslot[MAX_REQ];
    int req[MAX_REQ];     /* the step's entries' requests */
    uint8_t *prev, *mark; /* [unit][max_blocks]: the unit's last selection; scratch */
};

static void new_request(struct gen *g, int r)
{
    const struct cfg *c = g->c;
    const int span = PULSE_MIN((3 * c->k + 8) * c->ps, g->max_tok - 1);
    g->ntok[r] = 1 + (int)rnd((uint32_t)span);
    g->first[r] = 1;
}

static void gen_init(struct gen *g, const struct cfg *c)
{
    PULSE_CHECK(c->n_req <= MAX_REQ && c->batch <= c->n_req &&
                    (c->n_lists == 1 || c->n_lists == NKV),
                "test: case out of range");
    PULSE_CHECK(SINK + WINDOW + 1 + c->k <= c->n_slots, "test: a selection larger than a unit");
    memset(g, 0, sizeof *g);
    g->c = c;
    g->L = c->n_lists, g->U = c->n_req * N_SPARSE * c->n_lists;
    g->ms = PULSE_MIN(c->max_blocks, SINK + WINDOW + 1 + c->k) + PAD;
    g->max_tok = c->max_blocks * c->ps;
    g->prev = calloc((size_t)g->U * c->max_blocks, 1);
    g->mark = calloc((size_t)c->max_blocks, 1);
    PULSE_CHECK(g->prev && g->mark, "test: generator buffers");
    for (int r = 0; r < c->n_req; r++) {
        new_request(g, r);
        g->hslot[r] = (r * 7 + 3) % c->n_req; /* host-pool slots: another order */
    }
}

/* A decode-like selection of n_blocks nb: the pinned blocks (outside select_candidates'
 * range) and `want` candidates, about keep percent of them from the unit's last selection
 * (prev), the rest at random; ascending into sel, marks of the chosen candidates in g->mark. */
static int make_sel(struct gen *g, int nb, int want, const uint8_t *prev, int32_t *sel)
{
    int c0, c1;
    select_candidates(nb, SINK, WINDOW, &c0, &c1);
    memset(g->mark, 0, (size_t)nb);
    const int m = c1 - c0;
    int got = 0;
    want = PULSE_MIN(want, m);
    for (int i = c0; i < c1 && got < want; i++)
        if (prev[i] && (int)rnd(100) < g->c->keep) g->mark[i] = 1, got++;
    while (got < want) {
        const int i = c0 + (int)rnd((uint32_t)m);
        if (!g->mark[i]) g->mark[i] = 1, got++;
    }
    int n = 0;
    for (int i = 0; i < nb; i++)
        if (i < c0 || i >= c1 || g->mark[i]) sel[n++] = i;
    return n;
}

/* A predicted list for the gate: ascending, most of the new selection, some of the last one and
 * a few other blocks (so some recalls displace a predicted block and some do not); at most ms. */
static int make_spec(struct gen *g, int nb, const uint8_t *prev, int32_t *spec)
{
    int n = 0;
    for (int i = 0; i < nb && n < g->ms; i++)
        if ((g->mark[i] && rnd(10) < 7) || (prev[i] && rnd(3) == 0) || rnd(100) < 6) spec[n++] = i;
    return n;
}

/* The step's entries: `batch` distinct requests in random order, each one token longer, or,
 * when it leaves or is full, replaced by a new request whose units (every layer's) are reset:
 * their ranges into u0 and n, their number returned. Tail flushes at random (tail_index). */
static int gen_entries(struct gen *g, struct side *h, int *u0, int *n)
{
    const struct cfg *c = g->c;
    int order[MAX_REQ], resets = 0, tails = 0;
    for (int r = 0; r < c->n_req; r++)
        order[r] = r;
    for (int e = 0; e < c->batch; e++) {
        const int q = e + (int)rnd((uint32_t)(c->n_req - e)), t = order[e];
        order[e] = order[q], order[q] = t;
    }
    for (int e = 0; e < c->batch; e++) {
        const int r = order[e];
        g->req[e] = r;
        if (rnd(90) == 0 || g->ntok[r] >= g->max_tok) {
            u0[resets] = r * N_SPARSE * g->L, n[resets] = N_SPARSE * g->L;
            memset(g->prev + (size_t)u0[resets] * c->max_blocks, 0,
                   (size_t)n[resets] * c->max_blocks);
            resets++;
            new_request(g, r);
        } else {
            g->ntok[r]++;
        }
        h->n_blocks[e] = PULSE_CEIL_DIV(g->ntok[r], c->ps);
        h->n_tok[e] = g->ntok[r];
        h->tail_new[e] = !g->first[r] && (g->ntok[r] - 1) % c->ps == 0;
        g->first[r] = 0;
        h->slot[e] = r;
        h->hslot[e] = g->hslot[r];
        h->tail_index[e] = rnd(3) == 0 ? tails++ : -1;
    }
    return resets;
}

/* One list of layer sl's job made one the planner refuses, in one of four ways. */
static void corrupt(struct gen *g, struct side *h, int sl, int batch)
{
    struct job_bufs *b = &h->job[sl];
    const int v = (int)rnd((uint32_t)(batch * g->L)), e = v / g->L, nb = h->n_blocks[e];
    const int S = g->c->n_slots;
    int32_t *sel = b->sel_idx + (size_t)v * g->ms, *cnt = b->sel_count + v;
    switch (rnd(4)) {
    case 0: /* two blocks out of order */
        if (*cnt >= 2) {
            const int i = (int)rnd((uint32_t)*cnt - 1), t = sel[i];
            sel[i] = sel[i + 1], sel[i + 1] = t;
        } else {
            sel[0] = -1;
        }
        break;
    case 1: /* the tail left out, or a block past it */
        if (*cnt >= 2)
            *cnt -= 1;
        else
            sel[0] = nb;
        break;
    case 2: /* the entry's units out of range: each of its lists refused */
        b->unit_base[e] = g->U;
        break;
    default: /* a valid list one block longer than the unit, where the stride allows it */
        if (S + 1 <= g->ms && S + 1 <= nb) {
            int c0, c1, n = 0;
            select_candidates(nb, SINK, WINDOW, &c0, &c1);
            const int extra = S + 1 - (nb - (c1 - c0));
            for (int i = 0; i < nb && n <= S; i++)
                if (i < c0 || i >= c1 || i - c0 < extra) sel[n++] = i;
            *cnt = n;
        } else {
            *cnt = g->ms + 1;
        }
        break;
    }
}

/* Layer sl's lists for the first `batch` entries (gen_entries): a fresh selection each, the
 * predicted lists where gated, garbage past the counts; sometimes one list refused. */
static void gen_lists(struct gen *g, struct side *h, int sl, int batch)
{
    const struct cfg *c = g->c;
    struct job_bufs *b = &h->job[sl];
    const int L = g->L, ms = g->ms, gated = c->gated && sl == 0;
    for (int e = 0; e < batch; e++) {
        const int nb = h->n_blocks[e];
        b->unit_base[e] = (g->req[e] * N_SPARSE + sl) * L;
        for (int l = 0; l < L; l++) {
            const int v = e * L + l;
            uint8_t *prev = g->prev + (size_t)(b->unit_base[e] + l) * c->max_blocks;
            int32_t *sel = b->sel_idx + (size_t)v * ms, *spec = b->spec_idx + (size_t)v * ms;
            const int want = c->k - (int)rnd((uint32_t)c->k / 4 + 1);
            b->sel_count[v] = make_sel(g, nb, want, prev, sel);
            b->spec_count[v] = gated ? make_spec(g, nb, prev, spec) : 0;
            memcpy(prev, g->mark, (size_t)nb);
            for (int j = b->sel_count[v]; j < ms; j++)
                sel[j] = (int32_t)rnd(1u << 30) + 1;
            for (int j = b->spec_count[v]; j < ms; j++)
                spec[j] = (int32_t)rnd(1u << 30) + 1;
        }
    }
    if (c->corrupt && rnd((uint32_t)c->corrupt) == 0) corrupt(g, h, sl, batch);
}

/* ------------------------------------------------------------------ comparisons */

/* The device's buffer (got) against the reference's, every byte; names the first difference. */
static int compare_side(const struct layout *lo, const unsigned char *got, const unsigned char *ref,
                        const char *cs, int step)
{
    if (memcmp(got, ref, lo->bytes) == 0) return 0;
    size_t at = 0, n = 0;
    for (size_t i = 0; i < lo->bytes; i++)
        if (got[i] != ref[i] && !n++) at = i;
    const struct part *p = &lo->part[0];
    for (int i = 1; i < lo->n && lo->part[i].off <= at; i++)
        p = &lo->part[i];
    fprintf(stderr,
            "  %s step %d: %zu bytes differ, the first in %s at byte %zu%s: gpu 0x%02x "
            "ref 0x%02x\n",
            cs, step, n, p->name, at - p->off, at - p->off >= p->len ? " (guard bytes)" : "",
            got[at], ref[at]);
    return 1;
}

static int compare_state(const unsigned char *got, const unsigned char *ref, size_t bytes,
                         const char *cs, int step)
{
    if (memcmp(got, ref, bytes) == 0) return 0;
    size_t at = 0;
    while (got[at] == ref[at])
        at++;
    fprintf(stderr, "  %s step %d: the state differs at byte %zu of %zu\n", cs, step, at, bytes);
    return 1;
}

/* ------------------------------------------------------------------ a case */

struct tally {
    int64_t tot[HOT_PLAN_TOTALS];
    unsigned long long att_tokens, refused, held;
    long pieces;
    int resets, two_job_steps, closed, gate_wrong;
};

/* After a step: the host pieces of job sl's lists, and whether its gate is closed exactly when
 * one of its lists was held (h: the reference's side; held0: its held counter before). */
static void tally_job(struct tally *t, const struct side *h, int sl, int batch, const struct cfg *c,
                      int ms, unsigned long long held0)
{
    const struct job_bufs *b = &h->job[sl];
    for (int v = 0; c->recalls && v < batch * c->n_lists; v++) {
        if (b->status[v] != PULSE_OK) continue;
        for (int j = 0; j < b->sel_count[v]; j++)
            t->pieces += b->att_host[(size_t)v * ms + j] >= 0;
    }
    const int closed = *b->gate == 0, held = b->cnt[2] > held0;
    t->closed += closed;
    t->gate_wrong += closed != held || (*b->gate != 0 && *b->gate != GATE_OPEN);
}

static void run_case(const struct backend *be, const struct kctx *ctx, const struct cfg *c)
{
    struct gen g;
    gen_init(&g, c);
    const int ms = g.ms, B = c->batch, steps = tu_quick() ? PULSE_MIN(c->steps, 80) : c->steps;
    const struct hot_plan_params p = {g.U, c->n_slots, SINK, WINDOW, c->max_blocks};

    /* the two sides' buffers, one layout; outputs start as guard bytes */
    struct layout lo;
    struct side hs, ds;
    const size_t bytes = carve(&hs, NULL, c, ms, &lo);
    unsigned char *h = mem_alloc(MEM_HOST, bytes, "ref"), *got = mem_alloc(MEM_HOST, bytes, "got");
    unsigned char *d = mem_alloc(MEM_DEVICE, bytes, "dev");
    PULSE_CHECK(h && got && d, "test_plan_build_gpu: out of memory");
    memset(h, GUARD, bytes);
    carve(&hs, (char *)h, c, ms, &lo);
    carve(&ds, (char *)d, c, ms, &lo);
    for (size_t i = 0; i < (size_t)c->n_req * N_SPARSE * (c->n_slots + 1); i++)
        hs.own[i] = (int32_t)rnd(1u << 20);
    for (size_t i = 0; i < (size_t)c->n_req * N_SPARSE * c->max_blocks; i++)
        hs.host_ids[i] = (int32_t)rnd(1u << 24);
    for (int j = 0; j < N_SPARSE; j++) { /* the kernels add to them */
        for (int i = 0; i < HOT_PLAN_TOTALS; i++)
            hs.job[j].totals[i] = 1000 * (j + 1) + i;
        hs.job[j].cnt[0] = 12345, hs.job[j].cnt[1] = 7, hs.job[j].cnt[2] = 3;
    }

    /* the planner's state: garbage, then initialised, on both sides */
    const size_t sbytes = hot_plan_state_bytes(&p), salloc = mem_aligned(sbytes);
    PULSE_CHECK(sbytes > 0, "test_plan_build_gpu: bad plan params");
    unsigned char *hsm = aligned_alloc(256, salloc), *sgot = malloc(sbytes);
    unsigned char *dsm = mem_alloc(MEM_DEVICE, sbytes, "dev state");
    PULSE_CHECK(hsm && sgot && dsm, "test_plan_build_gpu: out of memory");
    memset(hsm, STATE_GARBAGE, sbytes);
    be->memset(ctx, dsm, STATE_GARBAGE, sbytes);
    struct hot_plan_state hst, dst;
    hot_plan_state_carve(&p, hsm, &hst);
    hot_plan_state_carve(&p, dsm, &dst);
    hot_plan_init_ref(&p, &hst, NULL);
    hot_plan_init_cuda(&p, &dst, ctx->stream);
    be->download(ctx, sgot, dsm, sbytes);
    int bad = compare_state(sgot, hsm, sbytes, c->name, -1);

    struct tally t;
    memset(&t, 0, sizeof t);
    char err[256];
    int u0[MAX_REQ], un[MAX_REQ];
    for (int step = 0; step < steps && !bad; step++) {
        /* odd steps: layers 0 and 1 in one launch; even ones: layer 0 or 1 alone */
        const int two = step % 2 == 1, sl0 = two ? 0 : (step / 2) % 2, n = two ? 2 : 1;
        const int batch1 = two && B > 1 && rnd(3) == 0 ? B - 1 - (int)rnd((uint32_t)B / 2) : B;
        for (int i = 0; i < lo.n; i++)
            if (lo.part[i].out) memset(h + lo.part[i].off, GUARD, lo.part[i].len);
        for (int j = 0; j < N_SPARSE; j++)
            *hs.job[j].gate = GATE_OPEN;
        const int nr = gen_entries(&g, &hs, u0, un);
        for (int i = 0; i < nr; i++) {
            hot_plan_reset_ref(&p, &hst, u0[i], un[i], NULL);
            hot_plan_reset_cuda(&p, &dst, u0[i], un[i], ctx->stream);
        }
        t.resets += nr;
        gen_lists(&g, &hs, sl0, B);
        if (two) gen_lists(&g, &hs, 1, batch1);
        struct offload_plan_job rj[OFFLOAD_PLAN_MAX_JOBS], dj[OFFLOAD_PLAN_MAX_JOBS];
        const int jb[2] = {B, batch1}, jsl[2] = {sl0, 1};
        unsigned long long held0[2];
        for (int i = 0; i < n; i++) {
            rj[i] = job_of(&hs, jsl[i], jb[i], c, ms);
            dj[i] = job_of(&ds, jsl[i], jb[i], c, ms);
            held0[i] = hs.job[jsl[i]].cnt[2];
        }
        be->upload(ctx, d, h, bytes); /* inputs, guard bytes, counters; never the state */
        offload_plan_build_cuda(&p, &dst, dj, n, ctx->stream);
        offload_plan_build_ref(&p, &hst, rj, n, NULL);
        be->download(ctx, got, d, bytes);
        be->download(ctx, sgot, dsm, sbytes);
        bad += compare_side(&lo, got, h, c->name, step);
        bad += compare_state(sgot, hsm, sbytes, c->name, step);
        if (hot_plan_check(&p, &hst, err, sizeof err) != 0) {
            fprintf(stderr, "  %s step %d: hot_plan_check: %s\n", c->name, step, err);
            bad++;
        }
        for (int i = 0; i < n; i++)
            tally_job(&t, &hs, jsl[i], jb[i], c, ms, held0[i]);
        t.two_job_steps += two;
    }

    for (int j = 0; j < N_SPARSE; j++) {
        for (int i = 0; i < HOT_PLAN_TOTALS; i++)
            t.tot[i] += hs.job[j].totals[i] - (1000 * (j + 1) + i);
        t.att_tokens += hs.job[j].cnt[0] - 12345;
        t.refused += hs.job[j].cnt[1] - 7;
        t.held += hs.job[j].cnt[2] - 3;
    }
    const int64_t *tt = t.tot;
    fprintf(stderr,
            "%-22s lists %3d units %4d slots %2d steps %3d (%3d of two jobs): hits %7lld misses "
            "%6lld fresh %5lld evictions %6lld refused %3llu resets %3d held %4llu (gate closed "
            "%3d) host pieces %6ld att tokens %9llu: %s\n",
            c->name, B * c->n_lists, g.U, c->n_slots, steps, t.two_job_steps,
            (long long)tt[HOT_PLAN_HITS], (long long)tt[HOT_PLAN_MISSES],
            (long long)tt[HOT_PLAN_FRESH], (long long)tt[HOT_PLAN_EVICTIONS], t.refused, t.resets,
            t.held, t.closed, t.pieces, t.att_tokens, bad ? "FAIL" : "bit-exact");
    EXPECT_EQ_INT(bad, 0);
    /* nothing vacuous: every path of the plan ran, the counters moved */
    EXPECT(tt[HOT_PLAN_HITS] > 0 && tt[HOT_PLAN_MISSES] > 0);
    EXPECT(tt[HOT_PLAN_FRESH] > 0 && tt[HOT_PLAN_EVICTIONS] > 0);
    EXPECT(t.att_tokens > 0 && t.two_job_steps > 0);
    if (c->corrupt)
        EXPECT(t.refused > 0);
    else
        EXPECT_EQ_INT(t.refused, 0);
    EXPECT_EQ_INT(t.gate_wrong, 0);
    if (c->gated) /* some steps held a list and closed the gate */
        EXPECT(t.held > 0 && t.closed > 0);
    else
        EXPECT_EQ_INT(t.held, 0);
    if (c->recalls)
        EXPECT(t.pieces > 0);
    else
        EXPECT_EQ_INT(t.pieces, 0);

    mem_free(MEM_HOST, h, bytes);
    mem_free(MEM_HOST, got, bytes);
    mem_free(MEM_DEVICE, d, bytes);
    mem_free(MEM_DEVICE, dsm, sbytes);
    free(hsm);
    free(sgot);
    free(g.prev);
    free(g.mark);
}

/* ------------------------------------------------------------------ refusals */

struct jobs_call {
    const struct hot_plan_params *p;
    const struct offload_plan_job *jobs;
    int n;
};

static void check_jobs(const void *arg)
{
    const struct jobs_call *c = arg;
    offload_plan_jobs_check(c->p, c->jobs, c->n);
}

/* Whether offload_plan_jobs_check aborts on jobs (in a child; its stderr into why). */
static int jobs_refused(const struct hot_plan_params *p, const struct offload_plan_job *jobs,
                        int n, char *why, size_t len)
{
    const struct jobs_call c = {p, jobs, n};
    return tu_aborts(check_jobs, &c, why, len);
}

/* offload_plan_jobs_check refuses jobs, saying `what`. */
static void expect_refused(const struct hot_plan_params *p, const struct offload_plan_job *jobs,
                           int n, const char *what)
{
    char why[2048];
    EXPECT(jobs_refused(p, jobs, n, why, sizeof why));
    EXPECT_STR_CONTAINS(why, what);
}

/* A valid pair of jobs (a gated layer 0, layer 1) on host memory, and calls that break the
 * contract one way each; the check reads only the pointers and shapes. */
static void test_refusals(void)
{
    static const struct cfg c = {"refusals", 8, 5, 6, 24, 16, 70, 4, 64, 0, 1, 1, 0};
    const int ms = PULSE_MIN(c.max_blocks, SINK + WINDOW + 1 + c.k) + PAD;
    struct layout lo;
    struct side s;
    const size_t bytes = carve(&s, NULL, &c, ms, &lo);
    char *mem = mem_alloc(MEM_HOST, bytes, "refusals");
    PULSE_CHECK(mem != NULL, "test_plan_build_gpu: out of memory");
    carve(&s, mem, &c, ms, &lo);
    const struct offload_plan_job ok[2] = {job_of(&s, 0, c.batch, &c, ms),
                                           job_of(&s, 1, c.batch - 2, &c, ms)};
    struct offload_plan_job bad[OFFLOAD_PLAN_MAX_JOBS + 1] = {ok[0], ok[1], ok[1]};
    const struct hot_plan_params p = {N_SPARSE * c.n_req * c.n_lists, c.n_slots, SINK, WINDOW,
                                      c.max_blocks};
    char why[2048];
    EXPECT(!jobs_refused(&p, ok, 2, why, sizeof why));
    EXPECT(!jobs_refused(&p, ok + 1, 1, why, sizeof why));
    bad[0].out.totals = bad[1].out.totals = NULL; /* no totals: nothing shared */
    EXPECT(!jobs_refused(&p, bad, 2, why, sizeof why));

    expect_refused(&p, ok, 0, "1 to OFFLOAD_PLAN_MAX_JOBS jobs");
    expect_refused(&p, bad, OFFLOAD_PLAN_MAX_JOBS + 1, "1 to OFFLOAD_PLAN_MAX_JOBS jobs");

    /* a build that reads another plan: status, sel_count, the gate's victims */
    bad[0] = ok[0], bad[1] = ok[1];
    bad[0].build.status = ok[1].out.status;
    expect_refused(&p, bad, 2, "a job's build reads another plan");
    bad[0] = ok[0];
    bad[1].build.sel_count = ok[0].in.sel_count;
    expect_refused(&p, bad, 2, "a job's build reads another plan");
    bad[1] = ok[1];
    bad[0].build.victim_block = ok[1].out.victim_block; /* job 0 is gated */
    expect_refused(&p, bad, 1, "a job's build reads another plan");

    /* a build whose shape is not its plan's */
    bad[0] = ok[0];
    bad[1].build.B = ok[1].in.batch + 1;
    expect_refused(&p, bad, 2, "differ in shape");
    bad[1] = ok[1];
    bad[1].build.ms = ms - 1;
    expect_refused(&p, bad, 2, "differ in shape");
    bad[1] = ok[1];
    bad[1].build.hot_slots = c.n_slots - 1; /* its pages: not the plan's slots */
    expect_refused(&p, bad, 2, "differ in shape");

    /* two jobs sharing an output: descriptors, totals, or the same job twice */
    bad[1] = ok[1];
    bad[1].build.desc = ok[0].build.desc;
    expect_refused(&p, bad, 2, "two jobs share an output or units");
    bad[1] = ok[1];
    bad[1].out.totals = ok[0].out.totals;
    expect_refused(&p, bad, 2, "two jobs share an output or units");
    bad[1] = ok[1];
    bad[1].in.unit_base = ok[0].in.unit_base; /* the same units */
    expect_refused(&p, bad, 2, "two jobs share an output or units");
    bad[1] = ok[0];
    expect_refused(&p, bad, 2, "two jobs share an output or units");
    fprintf(stderr, "offload_plan_jobs_check: refusals checked\n");
    mem_free(MEM_HOST, mem, bytes);
}

int main(void)
{
    test_refusals();
    if (!backend_cuda_available()) {
        fprintf(stderr, "test_plan_build_gpu: no CUDA device: skipped (refusals checked)\n");
        return tu_failures ? 1 : 77;
    }
    const struct backend *be = backend_find("cuda");
    struct kctx ctx;
    PULSE_CHECK(be && be->ctx_create(&ctx, 0) == PULSE_OK, "cuda context");
    static const struct cfg cases[] = {
        /* name, lists, batch, requests, slots, k, keep, ps, max_blocks, steps, gated,
           recalls, corrupt */
        {"solohead b1 gated", 1, 1, 3, 24, 16, 50, 4, 300, 400, 1, 0, 0},
        {"solohead b13 recalls", 1, 13, 16, 32, 24, 75, 4, 300, 300, 0, 1, 8},
        {"solohead b40 gated", 1, 40, 48, 64, 60, 80, 8, 120, 240, 1, 0, 6},
        {"headwise b1 recalls", 8, 1, 2, 24, 18, 70, 2, 300, 400, 0, 1, 0},
        {"headwise b13 gated", 8, 13, 16, 40, 36, 75, 4, 300, 240, 1, 1, 6},
        {"headwise b40", 8, 40, 40, 64, 48, 85, 4, 96, 200, 0, 0, 0},
    };
    for (size_t i = 0; i < PULSE_ARRAY_LEN(cases); i++)
        run_case(be, &ctx, &cases[i]);
    be->ctx_free(&ctx);
    return tu_finish("test_plan_build_gpu");
}
