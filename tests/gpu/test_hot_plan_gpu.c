/* The CUDA hot-cache planner against its CPU reference (hot_plan.h), bit for bit: long random
 * decode-like runs (the generator of test_hot_plan.c: pinned blocks, tunable locality, entries
 * growing block by block with tails that become new, requests leaving and arriving with their
 * units reset, unaligned unit ranges reset mid-request, corrupted lists of every kind the
 * planner refuses) on a device state and a host state initialised from garbage. Every call's
 * outputs (status, counts, recalls, victims, fresh tails, attend slots, totals) are compared
 * whole, sentinel entries past the counts included, each device output between guard bytes;
 * the whole state buffer is compared every 50 calls and round-tripped (device -> host ->
 * another device address) every 400. Some cases replay the call from a captured CUDA graph.
 * Sizes: token-wise and head-wise batches, n_slots equal to the selection, 1-slot units, 1100
 * and 2048 slots (two blocks per thread), a padded stride with over-full lists. One line per
 * case, then a timing line per realistic shape (checked against the reference too). Exit 77
 * without a GPU; PULSE_GPU_TEST_NO_TIMING=1 skips the timing. */
#include <cuda_runtime_api.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cuda_check.h"
#include "hot_plan.h"
#include "numeric.h"
#include "select.h"
#include "testutil.h"

static uint64_t g_seed = 0x9a7e5107, g_ctr;
static uint32_t rnd(uint32_t n)
{
    return (uint32_t)(pulse_hash64(g_seed, g_ctr++) % n);
}

static cudaStream_t g_st;

#define MAX_REQ 32
#define SENT_BYTE 0x5a /* outputs start as 0x5a5a5a5a: never a block, slot or count */
#define GUARD 256
#define GUARD_BYTE 0xa5

/* ------------------------------------------------------------------ device buffers */

struct dbuf {
    unsigned char *base;
    void *p;
    size_t bytes;
};

static struct dbuf dalloc(size_t bytes)
{
    struct dbuf d = {NULL, NULL, bytes};
    CUDA_CHECK(cudaMalloc((void **)&d.base, bytes + 2 * GUARD));
    CUDA_CHECK(cudaMemset(d.base, GUARD_BYTE, bytes + 2 * GUARD));
    d.p = d.base + GUARD;
    return d;
}

static int dguard_ok(const struct dbuf *d)
{
    unsigned char g[GUARD];
    CUDA_CHECK(cudaStreamSynchronize(g_st));
    for (int side = 0; side < 2; side++) {
        CUDA_CHECK(cudaMemcpy(g, side ? d->base + GUARD + d->bytes : d->base, GUARD,
                              cudaMemcpyDeviceToHost));
        for (int i = 0; i < GUARD; i++)
            if (g[i] != GUARD_BYTE) return 0;
    }
    return 1;
}

static void *xcalloc(size_t n)
{
    void *p = calloc(n ? n : 1, 1);
    PULSE_CHECK(p != NULL, "host calloc");
    return p;
}

/* ------------------------------------------------------------------ one call's buffers */

enum { A_SEL, A_CNT, A_BASE, A_NB, A_TN, N_IN };
enum { O_STATUS, O_HITS, O_REC, O_RB, O_RS, O_VB, O_FB, O_FS, O_FV, O_ATT, O_TOT, N_OUT };
static const char *const out_name[N_OUT] = {
    "status",      "n_hits",     "n_recalls",    "recall_block", "recall_slot", "victim_block",
    "fresh_block", "fresh_slot", "fresh_victim", "attend_slot",  "totals"};

/* Host arrays (the reference's) and their device twins for `lists` lists of stride max_sel. */
struct bufs {
    int batch, n_lists, max_sel;
    size_t in_bytes[N_IN], out_bytes[N_OUT];
    void *h_in[N_IN], *h_out[N_OUT], *h_got[N_OUT];
    struct dbuf d_in[N_IN], d_out[N_OUT];
    struct hot_plan_in in, d_in_view;
    struct hot_plan_out out, d_out_view;
};

static void bufs_create(struct bufs *b, int batch, int n_lists, int max_sel)
{
    memset(b, 0, sizeof *b);
    b->batch = batch, b->n_lists = n_lists, b->max_sel = max_sel;
    const size_t V = (size_t)batch * n_lists, R = V * max_sel, I = sizeof(int32_t);
    const size_t in_n[N_IN] = {R, V, (size_t)batch, (size_t)batch, (size_t)batch};
    const size_t out_n[N_OUT] = {V, V, V, R, R, R, V, V, V, R, 0};
    for (int i = 0; i < N_IN; i++) {
        b->in_bytes[i] = in_n[i] * I;
        b->h_in[i] = xcalloc(b->in_bytes[i]);
        b->d_in[i] = dalloc(b->in_bytes[i]);
    }
    for (int i = 0; i < N_OUT; i++) {
        b->out_bytes[i] = i == O_TOT ? HOT_PLAN_TOTALS * sizeof(int64_t) : out_n[i] * I;
        b->h_out[i] = xcalloc(b->out_bytes[i]);
        b->h_got[i] = xcalloc(b->out_bytes[i]);
        b->d_out[i] = dalloc(b->out_bytes[i]);
    }
    CUDA_CHECK(cudaMemset(b->d_out[O_TOT].p, 0, b->out_bytes[O_TOT]));
    void *const *hi = b->h_in, *const *ho = b->h_out;
    b->in = (struct hot_plan_in){hi[A_SEL], hi[A_CNT], hi[A_BASE], hi[A_NB],
                                 hi[A_TN],  batch,     n_lists,    max_sel};
    b->out =
        (struct hot_plan_out){ho[O_STATUS], ho[O_HITS], ho[O_REC], ho[O_RB],  ho[O_RS], ho[O_VB],
                              ho[O_FB],     ho[O_FS],   ho[O_FV],  ho[O_ATT], ho[O_TOT]};
    const struct dbuf *di = b->d_in, *dd = b->d_out;
    b->d_in_view = (struct hot_plan_in){di[A_SEL].p, di[A_CNT].p, di[A_BASE].p, di[A_NB].p,
                                        di[A_TN].p,  batch,       n_lists,      max_sel};
    b->d_out_view = (struct hot_plan_out){dd[O_STATUS].p, dd[O_HITS].p, dd[O_REC].p, dd[O_RB].p,
                                          dd[O_RS].p,     dd[O_VB].p,   dd[O_FB].p,  dd[O_FS].p,
                                          dd[O_FV].p,     dd[O_ATT].p,  dd[O_TOT].p};
}

static void bufs_free(struct bufs *b)
{
    for (int i = 0; i < N_IN; i++) {
        free(b->h_in[i]);
        CUDA_CHECK(cudaFree(b->d_in[i].base));
    }
    for (int i = 0; i < N_OUT; i++) {
        free(b->h_out[i]);
        free(b->h_got[i]);
        CUDA_CHECK(cudaFree(b->d_out[i].base));
    }
}

/* Outputs (not the totals) to the sentinel on both sides; inputs uploaded. */
static void bufs_prepare(struct bufs *b)
{
    for (int i = 0; i < N_OUT; i++) {
        if (i == O_TOT) continue;
        memset(b->h_out[i], SENT_BYTE, b->out_bytes[i]);
        CUDA_CHECK(cudaMemsetAsync(b->d_out[i].p, SENT_BYTE, b->out_bytes[i], g_st));
    }
    for (int i = 0; i < N_IN; i++)
        CUDA_CHECK(cudaMemcpyAsync(b->d_in[i].p, b->h_in[i], b->in_bytes[i], cudaMemcpyHostToDevice,
                                   g_st));
}

/* Device outputs against the reference's, every byte; prints the first difference. */
static int bufs_compare(struct bufs *b, const char *cs, int step)
{
    CUDA_CHECK(cudaStreamSynchronize(g_st));
    int bad = 0;
    for (int i = 0; i < N_OUT; i++) {
        CUDA_CHECK(cudaMemcpy(b->h_got[i], b->d_out[i].p, b->out_bytes[i], cudaMemcpyDeviceToHost));
        if (memcmp(b->h_got[i], b->h_out[i], b->out_bytes[i]) == 0) continue;
        bad++;
        if (i == O_TOT) {
            const int64_t *g = b->h_got[i], *r = b->h_out[i];
            printf("  %s step %d: totals gpu %lld %lld %lld %lld ref %lld %lld %lld %lld\n", cs,
                   step, (long long)g[0], (long long)g[1], (long long)g[2], (long long)g[3],
                   (long long)r[0], (long long)r[1], (long long)r[2], (long long)r[3]);
            continue;
        }
        const int32_t *g = b->h_got[i], *r = b->h_out[i];
        for (size_t k = 0; k < b->out_bytes[i] / sizeof(int32_t); k++)
            if (g[k] != r[k]) {
                printf("  %s step %d: %s[%zu] gpu %d ref %d\n", cs, step, out_name[i], k, g[k],
                       r[k]);
                break;
            }
    }
    return bad;
}

static int bufs_guards_ok(const struct bufs *b)
{
    int ok = 1;
    for (int i = 0; i < N_IN; i++)
        ok &= dguard_ok(&b->d_in[i]);
    for (int i = 0; i < N_OUT; i++)
        ok &= dguard_ok(&b->d_out[i]);
    return ok;
}

/* ------------------------------------------------------------------ the workload */

struct cfg {
    const char *name;
    int n_req, n_lists; /* request r owns units r*n_lists .. */
    int n_slots, sink, window, k, keep, bs, max_blocks;
    int batch, steps, pad; /* entries per call; calls; stride past the largest selection */
    int graph;             /* replay the call from a captured CUDA graph */
};

struct gen {
    const struct cfg *c;
    int L, U, max_sel, max_tok, leave, corrupt; /* 1/leave, 1/corrupt per entry / call; 0: off */
    int ntok[MAX_REQ], first[MAX_REQ];
    uint8_t *prev, *mark;
};

static void gen_init(struct gen *g, const struct cfg *c, int leave, int corrupt)
{
    PULSE_CHECK(c->n_req <= MAX_REQ && c->batch <= c->n_req, "test: case too large");
    g->c = c;
    g->L = c->n_lists, g->U = c->n_req * c->n_lists;
    g->max_sel = PULSE_MIN(c->max_blocks, c->sink + c->window + 1 + c->k) + c->pad;
    g->max_tok = c->max_blocks * c->bs;
    g->leave = leave, g->corrupt = corrupt;
    g->prev = xcalloc((size_t)g->U * c->max_blocks);
    g->mark = xcalloc((size_t)c->max_blocks);
    for (int r = 0; r < c->n_req; r++) {
        g->ntok[r] = 1 + (int)rnd((uint32_t)PULSE_MIN((3 * c->k + 8) * c->bs, g->max_tok - 1));
        g->first[r] = 1;
    }
}

static void gen_free(struct gen *g)
{
    free(g->prev);
    free(g->mark);
}

/* The pinned blocks plus k candidates, about keep percent kept from the previous selection. */
static int make_sel(const struct cfg *c, int nb, const uint8_t *prev, uint8_t *mark, int32_t *sel)
{
    int c0, c1;
    select_candidates(nb, c->sink, c->window, &c0, &c1);
    memset(mark, 0, (size_t)nb);
    int m = c1 - c0, want = c->k < m ? c->k : m, got = 0;
    for (int i = c0; i < c1 && got < want; i++)
        if (prev[i] && (int)rnd(100) < c->keep) mark[i] = 1, got++;
    while (got < want) {
        int i = c0 + (int)rnd((uint32_t)m);
        if (!mark[i]) mark[i] = 1, got++;
    }
    int n = 0;
    for (int i = 0; i < nb; i++)
        if (i < c0 || i >= c1 || mark[i]) sel[n++] = i;
    return n;
}

/* Corrupts list v (or its entry) of the call in one of the ways the planner refuses. */
static void corrupt(struct gen *g, struct bufs *b, int v)
{
    int32_t *sel = (int32_t *)b->h_in[A_SEL] + (size_t)v * g->max_sel;
    int32_t *cnt = (int32_t *)b->h_in[A_CNT] + v;
    const int e = v / g->L;
    int32_t *base = (int32_t *)b->h_in[A_BASE] + e, *nb = (int32_t *)b->h_in[A_NB] + e;
    switch (rnd(7)) {
    case 0: /* out of order */
        if (*cnt >= 2) {
            int i = (int)rnd((uint32_t)*cnt - 1), t = sel[i];
            sel[i] = sel[i + 1], sel[i + 1] = t;
        } else {
            sel[0] = -1;
        }
        break;
    case 1:
        *cnt -= 1;
        break; /* no tail */
    case 2:
        sel[*cnt - 1] = *nb;
        break; /* past the last block */
    case 3:
        *cnt = g->max_sel + 1;
        break;
    case 4:
        *base = rnd(2) ? g->U : -g->L;
        break; /* every unit of the entry out of range */
    case 5:
        *nb = g->c->max_blocks + 1;
        break;
    default: /* a valid list one block longer than n_slots, where the stride allows it */
        if (g->c->n_slots + 1 <= g->max_sel && g->c->n_slots + 1 <= *nb) {
            int c0, c1, n = 0;
            select_candidates(*nb, g->c->sink, g->c->window, &c0, &c1);
            const int extra = g->c->n_slots + 1 - (*nb - (c1 - c0));
            for (int i = 0; i < *nb && n <= g->c->n_slots; i++)
                if (i < c0 || i >= c1 || i - c0 < extra) sel[n++] = i;
            *cnt = n;
        } else {
            *cnt = -1;
        }
        break;
    }
}

/* One call's inputs into b; the unit ranges to reset before the call into ru0/rn (returns how
 * many). */
static int gen_step(struct gen *g, struct bufs *b, int *ru0, int *rn)
{
    const struct cfg *c = g->c;
    int order[MAX_REQ], n_resets = 0;
    for (int r = 0; r < c->n_req; r++)
        order[r] = r;
    for (int r = 0; r < c->batch; r++) {
        int q = r + (int)rnd((uint32_t)(c->n_req - r)), t = order[r];
        order[r] = order[q], order[q] = t;
    }
    int32_t *sel = b->h_in[A_SEL], *cnt = b->h_in[A_CNT], *base = b->h_in[A_BASE];
    int32_t *nbs = b->h_in[A_NB], *tn = b->h_in[A_TN];
    for (int e = 0; e < c->batch; e++) {
        const int r = order[e];
        if ((g->leave && rnd((uint32_t)g->leave) == 0) || g->ntok[r] >= g->max_tok) {
            ru0[n_resets] = r * g->L, rn[n_resets++] = g->L;
            memset(g->prev + (size_t)r * g->L * c->max_blocks, 0, (size_t)g->L * c->max_blocks);
            g->ntok[r] = 1 + (int)rnd((uint32_t)PULSE_MIN((3 * c->k + 8) * c->bs, g->max_tok - 1));
            g->first[r] = 1;
        } else {
            g->ntok[r]++;
        }
        const int nb = PULSE_CEIL_DIV(g->ntok[r], c->bs);
        base[e] = r * g->L, nbs[e] = nb;
        tn[e] = (!g->first[r] && (g->ntok[r] - 1) % c->bs == 0) ^ (rnd(33) == 0);
        g->first[r] = 0;
        for (int l = 0; l < g->L; l++) {
            const int v = e * g->L + l;
            uint8_t *pv = g->prev + ((size_t)r * g->L + l) * c->max_blocks;
            int32_t *row = sel + (size_t)v * g->max_sel;
            cnt[v] = make_sel(c, nb, pv, g->mark, row);
            memcpy(pv, g->mark, (size_t)nb);
            for (int j = cnt[v]; j < g->max_sel; j++)
                row[j] = (int32_t)rnd(1u << 30) + 1; /* garbage past the count */
        }
    }
    if (g->corrupt && rnd((uint32_t)g->corrupt) == 0)
        corrupt(g, b, (int)rnd((uint32_t)(c->batch * g->L)));
    return n_resets;
}

/* ------------------------------------------------------------------ states */

/* Two device state buffers (a relocation moves between them) and the host one. */
struct states {
    struct hot_plan_params p;
    size_t bytes;
    void *h_mem, *h_tmp, *d_mem[2];
    int cur;
    struct hot_plan_state h, d;
};

static void states_create(struct states *S, const struct hot_plan_params *p)
{
    S->p = *p;
    S->bytes = hot_plan_state_bytes(p);
    PULSE_CHECK(S->bytes > 0, "test: bad params");
    S->h_mem = aligned_alloc(256, S->bytes);
    S->h_tmp = aligned_alloc(256, S->bytes);
    PULSE_CHECK(S->h_mem && S->h_tmp, "test: state buffers");
    memset(S->h_mem, 0xc3, S->bytes); /* the same garbage on both sides */
    for (int i = 0; i < 2; i++) {
        CUDA_CHECK(cudaMalloc(&S->d_mem[i], S->bytes));
        CUDA_CHECK(cudaMemset(S->d_mem[i], 0xc3, S->bytes));
    }
    S->cur = 0;
    hot_plan_state_carve(p, S->h_mem, &S->h);
    hot_plan_state_carve(p, S->d_mem[0], &S->d);
    hot_plan_init_ref(p, &S->h, NULL);
    hot_plan_init_cuda(p, &S->d, g_st);
}

static void states_free(struct states *S)
{
    free(S->h_mem);
    free(S->h_tmp);
    for (int i = 0; i < 2; i++)
        CUDA_CHECK(cudaFree(S->d_mem[i]));
}

/* 1 when the device state's bytes equal the host state's; prints the first differing part. */
static int states_equal(struct states *S, const char *cs, int step)
{
    CUDA_CHECK(cudaStreamSynchronize(g_st));
    CUDA_CHECK(cudaMemcpy(S->h_tmp, S->d_mem[S->cur], S->bytes, cudaMemcpyDeviceToHost));
    if (memcmp(S->h_tmp, S->h_mem, S->bytes) == 0) return 1;
    size_t at = 0;
    while (((unsigned char *)S->h_tmp)[at] == ((unsigned char *)S->h_mem)[at])
        at++;
    printf("  %s step %d: state differs at byte %zu of %zu\n", cs, step, at, S->bytes);
    return 0;
}

/* Device -> host -> the other device buffer; the old one is poisoned. */
static void states_move(struct states *S)
{
    CUDA_CHECK(cudaStreamSynchronize(g_st));
    CUDA_CHECK(cudaMemcpy(S->h_tmp, S->d_mem[S->cur], S->bytes, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemset(S->d_mem[S->cur], 0xc3, S->bytes));
    S->cur ^= 1;
    CUDA_CHECK(cudaMemcpy(S->d_mem[S->cur], S->h_tmp, S->bytes, cudaMemcpyHostToDevice));
    hot_plan_state_carve(&S->p, S->d_mem[S->cur], &S->d);
}

static void resets(struct states *S, const int *u0, const int *n, int count)
{
    for (int i = 0; i < count; i++) {
        hot_plan_reset_ref(&S->p, &S->h, u0[i], n[i], NULL);
        hot_plan_reset_cuda(&S->p, &S->d, u0[i], n[i], g_st);
    }
}

/* ------------------------------------------------------------------ the cases */

static cudaGraphExec_t capture(struct states *S, struct bufs *b)
{
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(g_st, cudaStreamCaptureModeThreadLocal));
    hot_plan_cuda(&S->p, &S->d, &b->d_in_view, &b->d_out_view, g_st);
    CUDA_CHECK(cudaStreamEndCapture(g_st, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphDestroy(graph));
    return exec;
}

static void run_case(const struct cfg *c)
{
    struct gen g;
    gen_init(&g, c, 60, 20);
    const struct hot_plan_params p = {g.U, c->n_slots, c->sink, c->window, c->max_blocks};
    struct states S;
    states_create(&S, &p);
    struct bufs b;
    bufs_create(&b, c->batch, g.L, g.max_sel);
    memset(b.h_out[O_TOT], 0, b.out_bytes[O_TOT]);
    int bad = !states_equal(&S, c->name, -1), refused = 0, n_resets = 0, moves = 0, replays = 0;
    cudaGraphExec_t exec = c->graph ? capture(&S, &b) : NULL;
    int ru0[MAX_REQ + 1], rn[MAX_REQ + 1];
    for (int step = 0; step < c->steps && !bad; step++) {
        int nr = gen_step(&g, &b, ru0, rn);
        resets(&S, ru0, rn, nr);
        n_resets += nr;
        bufs_prepare(&b);
        if (exec && step % 3 != 2) {
            CUDA_CHECK(cudaGraphLaunch(exec, g_st));
            replays++;
        } else {
            hot_plan_cuda(&p, &S.d, &b.d_in_view, &b.d_out_view, g_st);
        }
        hot_plan_ref(&p, &S.h, &b.in, &b.out, NULL);
        bad += bufs_compare(&b, c->name, step);
        for (int v = 0; v < c->batch * g.L; v++)
            refused += ((int32_t *)b.h_out[O_STATUS])[v] != PULSE_OK;
        if (rnd(200) == 0) { /* an unaligned range of units, mid-request */
            ru0[0] = (int)rnd((uint32_t)g.U), rn[0] = 1 + (int)rnd((uint32_t)(g.U - ru0[0]));
            resets(&S, ru0, rn, 1);
            n_resets++;
        }
        if (step % 50 == 49 || step == c->steps - 1) bad += !states_equal(&S, c->name, step);
        if (step % 400 == 399) {
            states_move(&S);
            moves++;
            if (exec) {
                CUDA_CHECK(cudaGraphExecDestroy(exec));
                exec = capture(&S, &b);
            }
        }
    }
    char err[256];
    if (hot_plan_check(&p, &S.h, err, sizeof err) != 0) {
        printf("  %s: hot_plan_check: %s\n", c->name, err);
        bad++;
    }
    const int guards = bufs_guards_ok(&b);
    if (!guards) printf("  %s: guard bytes overwritten\n", c->name);
    const int64_t *t = b.h_out[O_TOT];
    const int covered = t[HOT_PLAN_HITS] > 0 && t[HOT_PLAN_MISSES] > 0 && t[HOT_PLAN_FRESH] > 0 &&
                        t[HOT_PLAN_EVICTIONS] > 0 && refused > 0;
    if (!covered && !bad) printf("  %s: a path did not run\n", c->name);
    const int ok = bad == 0 && guards && covered;
    tu_checks++;
    tu_failures += !ok;
    printf("%-20s units %4d slots %4d lists %3d steps %5d: hits %9lld misses %8lld fresh %6lld "
           "evictions %8lld refused %4d resets %4d moves %d graph %5d %s\n",
           c->name, g.U, c->n_slots, c->batch * g.L, c->steps, (long long)t[HOT_PLAN_HITS],
           (long long)t[HOT_PLAN_MISSES], (long long)t[HOT_PLAN_FRESH],
           (long long)t[HOT_PLAN_EVICTIONS], refused, n_resets, moves, replays,
           ok ? "pass" : "FAIL");
    fflush(stdout);
    if (exec) CUDA_CHECK(cudaGraphExecDestroy(exec));
    bufs_free(&b);
    states_free(&S);
    gen_free(&g);
}

/* ------------------------------------------------------------------ timing */

/* Steady-state calls of a realistic shape: `warm` calls, then `timed` calls between events
 * (inputs made and uploaded beforehand, no resets or refusals); the final state must equal the
 * reference's. */
static void time_case(const struct cfg *c)
{
    enum { WARM = 64, TIMED = 64 };
    struct gen g;
    gen_init(&g, c, 0, 0);
    const struct hot_plan_params p = {g.U, c->n_slots, c->sink, c->window, c->max_blocks};
    struct states S;
    states_create(&S, &p);
    struct bufs b[WARM + TIMED];
    int ru0[MAX_REQ + 1], rn[MAX_REQ + 1];
    for (int i = 0; i < WARM + TIMED; i++) {
        bufs_create(&b[i], c->batch, g.L, g.max_sel);
        PULSE_CHECK(gen_step(&g, &b[i], ru0, rn) == 0, "test: a reset while timing");
        bufs_prepare(&b[i]);
    }
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    int64_t tot[HOT_PLAN_TOTALS] = {0};
    for (int i = 0; i < WARM + TIMED; i++) {
        if (i == WARM) CUDA_CHECK(cudaEventRecord(e0, g_st));
        hot_plan_cuda(&p, &S.d, &b[i].d_in_view, &b[i].d_out_view, g_st);
    }
    CUDA_CHECK(cudaEventRecord(e1, g_st));
    for (int i = 0; i < WARM + TIMED; i++) { /* the reference after the timed launches */
        b[i].out.totals = i >= WARM ? tot : NULL;
        hot_plan_ref(&p, &S.h, &b[i].in, &b[i].out, NULL);
    }
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    const int ok = states_equal(&S, c->name, WARM + TIMED);
    tu_checks++;
    tu_failures += !ok;
    printf("timing %-24s lists %3d slots %4d sel %4d: %7.2f us per call, %.1f recalls per list, "
           "state %s\n",
           c->name, c->batch * g.L, c->n_slots, g.max_sel, 1e3 * ms / TIMED,
           (double)(tot[HOT_PLAN_MISSES] + tot[HOT_PLAN_FRESH]) / (TIMED * c->batch * g.L),
           ok ? "matches" : "DIFFERS");
    fflush(stdout);
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    for (int i = 0; i < WARM + TIMED; i++)
        bufs_free(&b[i]);
    states_free(&S);
    gen_free(&g);
}

int main(void)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "test_hot_plan_gpu: no GPU, skipped\n");
        return 77;
    }
    CUDA_CHECK(cudaStreamCreate(&g_st));
    static const struct cfg cases[] = {
        /* name, req, lists, slots, sink, window, k, keep, bs, max_blocks, batch, steps, pad,
           graph */
        {"token-wise", 24, 1, 144, 1, 2, 128, 90, 16, 2048, 16, 2000, 0, 0},
        {"token-wise graph", 20, 1, 150, 1, 2, 128, 80, 4, 1024, 17, 1500, 0, 1},
        {"head-wise x8", 12, 8, 160, 1, 2, 128, 85, 16, 1024, 8, 1200, 0, 0},
        {"head-wise x8 graph", 6, 8, 48, 1, 2, 40, 70, 2, 512, 5, 1200, 2, 1},
        {"slots = selection", 10, 2, 131, 1, 2, 127, 92, 8, 1024, 7, 1500, 0, 0},
        {"1-slot units", 8, 2, 1, 0, 0, 0, 0, 3, 300, 6, 2000, 0, 0},
        {"no sink/window", 6, 3, 7, 0, 0, 6, 50, 1, 1024, 5, 2000, 0, 0},
        {"no locality", 5, 4, 40, 1, 2, 30, 0, 2, 400, 4, 1500, 0, 0},
        {"padded, over-full", 8, 2, 24, 1, 2, 16, 75, 3, 300, 6, 2000, 10, 0},
        {"1100 slots", 4, 1, 1100, 1, 2, 1023, 95, 4, 3000, 3, 400, 0, 0},
        {"2048 slots", 4, 1, 2048, 1, 2, 2044, 97, 1, 4096, 3, 400, 0, 1},
    };
    for (size_t i = 0; i < PULSE_ARRAY_LEN(cases); i++)
        run_case(&cases[i]);
    const char *no_timing = getenv("PULSE_GPU_TEST_NO_TIMING");
    if (!(no_timing && *no_timing == '1')) {
        static const struct cfg shapes[] = {
            {"solohead b16 k128", 16, 1, 256, 1, 2, 128, 90, 16, 8192, 16, 0, 0, 0},
            {"headwise b16x8 k128", 16, 8, 256, 1, 2, 128, 90, 16, 8192, 16, 0, 0, 0},
            {"solohead b16 k1024", 16, 1, 1100, 1, 2, 1024, 95, 16, 8192, 16, 0, 0, 0},
        };
        for (size_t i = 0; i < PULSE_ARRAY_LEN(shapes); i++)
            time_case(&shapes[i]);
    }
    CUDA_CHECK(cudaStreamDestroy(g_st));
    return tu_finish("test_hot_plan_gpu");
}
