/* offload_build_cuda (runtime/offload/offload_kernels.h) against offload_build_ref, bit for bit, on
 * random plans: head-wise (8 lists an entry) and SoloHead (1), batches of 1, 13 and 64, refused
 * lists, lists with no recall and with every slot recalled, tails filled or not; with and
 * without the gate (victims against ascending predicted lists: lists that displace a predicted
 * block counted, the gate closed where one does and left open where none does); with and
 * without an attention that recalls (att_host: the host piece of each list position whose
 * block is one of the list's recalls, the tail's never). Every output
 * buffer starts as guard bytes on both sides and is compared whole, so what must stay unwritten
 * (slots past a count, a refused list's pages) is checked too. The kernel only computes
 * addresses, so the bases are arbitrary. Exit 77 without a GPU. */
#include <string.h>

#include "backend.h"
#include "common.h"
#include "mem.h"
#include "offload_kernels.h"
#include "testutil.h"

#define GUARD 0xA5

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

struct bufs { /* one allocation per side; the same layout */
    int32_t *status, *n_recalls, *recall_block, *recall_slot, *attend_slot, *sel_count;
    int32_t *n_tok, *slot, *hslot, *tail_index, *own, *host_ids;
    struct recall_desc *desc, *tail_desc;
    int32_t *att_len, *att_pages;
    int32_t *victim_block, *spec_idx, *spec_count;
    int32_t *sel_idx, *att_host;
    uint32_t *gate;
    unsigned long long *cnt; /* att_tokens, refused, held */
};

static size_t layout(struct bufs *b, char *base, int B, int L, int ms, int MB, int S, int H1,
                     int maxb)
{
    size_t off = 0, V = (size_t)B * L;
#define TAKE(field, n)                                                                             \
    do {                                                                                           \
        b->field = base ? (void *)(base + off) : NULL;                                             \
        off += mem_aligned((n) * sizeof(*b->field));                                               \
    } while (0)
    TAKE(status, V);
    TAKE(n_recalls, V);
    TAKE(recall_block, V * ms);
    TAKE(recall_slot, V * ms);
    TAKE(attend_slot, V * ms);
    TAKE(sel_count, V);
    TAKE(n_tok, (size_t)B);
    TAKE(slot, (size_t)B);
    TAKE(hslot, (size_t)B);
    TAKE(tail_index, (size_t)B);
    TAKE(own, (size_t)MB * S * H1);
    TAKE(host_ids, (size_t)MB * S * maxb);
    TAKE(desc, V * ms);
    TAKE(tail_desc, V);
    TAKE(att_len, V);
    TAKE(att_pages, V * ms);
    TAKE(victim_block, V * ms);
    TAKE(spec_idx, V * ms);
    TAKE(spec_count, V);
    TAKE(sel_idx, V * ms);
    TAKE(att_host, V * ms);
    TAKE(gate, 1);
    TAKE(cnt, 3);
#undef TAKE
    return off;
}

static struct offload_build_args args_of(const struct bufs *b, int B, int L, int ms, int H, int S,
                                         int maxb, int gated, int recalls)
{
    struct offload_build_args a = {b->status,
                                   b->n_recalls,
                                   b->recall_block,
                                   b->recall_slot,
                                   b->attend_slot,
                                   b->sel_count,
                                   b->n_tok,
                                   b->slot,
                                   b->hslot,
                                   b->tail_index,
                                   b->own,
                                   b->host_ids,
                                   B,
                                   L,
                                   ms,
                                   16,
                                   H,
                                   S,
                                   1,
                                   maxb,
                                   L > 1,
                                   8,
                                   0x7f0000001000ull,
                                   0x7e0000000000ull,
                                   65536,
                                   8192,
                                   L > 1 ? 8192u : 65536u,
                                   b->desc,
                                   b->att_len,
                                   b->att_pages,
                                   b->tail_desc,
                                   b->cnt,
                                   b->cnt + 1,
                                   b->sel_idx,
                                   recalls ? b->att_host : NULL,
                                   b->victim_block,
                                   gated ? b->spec_idx : NULL,
                                   b->spec_count,
                                   b->gate,
                                   b->cnt + 2};
    return a;
}

/* Random inputs into the host side (outputs: guard bytes). */
static void fill(struct bufs *h, size_t bytes, int B, int L, int ms, int MB, int S, int H1,
                 int maxb)
{
    (void)bytes;
    const int V = B * L, H = H1 - 1;
    int tails = 0;
    for (int b = 0; b < B; b++) {
        h->n_tok[b] = 1 + (int)rnd((uint32_t)(maxb * 16));
        h->slot[b] = (b * 7 + 3) % MB;
        h->hslot[b] = (b * 5 + 1) % MB;
        h->tail_index[b] = rnd(3) == 0 ? tails++ : -1;
    }
    for (int v = 0; v < V; v++) {
        h->status[v] = rnd(11) == 0 ? PULSE_ERR_INVALID : PULSE_OK;
        const int cnt = 1 + (int)rnd((uint32_t)ms);
        h->sel_count[v] = cnt;
        const int kind = (int)rnd(4); /* none, all, random */
        h->n_recalls[v] = kind == 0 ? 0 : kind == 1 ? cnt : (int)rnd((uint32_t)cnt + 1);
        /* the list's blocks ascending, its recalls an ascending subset of them (all of them,
         * the tail's included, when every slot is recalled) */
        for (int j = 0, blk = (int)rnd(4); j < cnt; j++, blk += 1 + (int)rnd(6))
            h->sel_idx[v * ms + j] = blk; /* (< maxb: 3 + 40 x 6) */
        for (int j = 0, r = 0; j < cnt && r < h->n_recalls[v]; j++)
            if (cnt - j <= h->n_recalls[v] - r || rnd(2))
                h->recall_block[v * ms + r++] = h->sel_idx[v * ms + j];
        for (int j = 0; j < ms; j++) {
            if (j >= h->n_recalls[v]) h->recall_block[v * ms + j] = (int)rnd((uint32_t)maxb);
            h->recall_slot[v * ms + j] = (int)rnd((uint32_t)H);
            h->attend_slot[v * ms + j] = (int)rnd((uint32_t)H);
            h->victim_block[v * ms + j] = (int)rnd((uint32_t)maxb + 1) - 1; /* -1: free */
        }
        /* the predicted list: ascending, a random share of the blocks */
        const uint32_t keep = 1 + rnd(20);
        int n = 0;
        for (int blk = 0; blk < maxb && n < ms; blk++)
            if (rnd(1000) < keep) h->spec_idx[v * ms + n++] = blk;
        h->spec_count[v] = n;
    }
    for (int i = 0; i < MB * S * H1; i++)
        h->own[i] = (int)rnd(1u << 20);
    for (int i = 0; i < MB * S * maxb; i++)
        h->host_ids[i] = (int)rnd(1u << 24);
    h->cnt[0] = 12345, h->cnt[1] = 7, h->cnt[2] = 3; /* the kernel adds to them */
    *h->gate = 0x01010101u;                          /* open (OFFLOAD_GATE_BYTE in each byte) */
    (void)tails;
}

static void one_case(const struct backend *be, const struct kctx *ctx, int B, int L, int gated,
                     int recalls)
{
    const int ms = 40, S = 3, H1 = 46, maxb = 300, MB = B < 64 ? 64 : B;
    struct bufs hb, db, rb;
    const size_t bytes = layout(&hb, NULL, B, L, ms, MB, S, H1, maxb);
    char *h = mem_alloc(MEM_HOST, bytes, "host"), *r = mem_alloc(MEM_HOST, bytes, "ref");
    char *d = mem_alloc(MEM_DEVICE, bytes, "dev");
    PULSE_CHECK(h && r && d, "test_offload_kernels_gpu: out of memory");
    layout(&hb, h, B, L, ms, MB, S, H1, maxb);
    layout(&rb, r, B, L, ms, MB, S, H1, maxb);
    layout(&db, d, B, L, ms, MB, S, H1, maxb);
    memset(h, GUARD, bytes);
    fill(&hb, bytes, B, L, ms, MB, S, H1, maxb);
    memcpy(r, h, bytes);
    be->upload(ctx, d, h, bytes);
    const struct offload_build_args ar = args_of(&rb, B, L, ms, H1 - 1, S, maxb, gated, recalls);
    const struct offload_build_args ad = args_of(&db, B, L, ms, H1 - 1, S, maxb, gated, recalls);
    offload_build_ref(&ar, NULL);
    offload_build_cuda(&ad, ctx->stream);
    be->download(ctx, h, d, bytes);
    size_t diff = 0, first = 0;
    for (size_t i = 0; i < bytes; i++)
        if (h[i] != r[i] && !diff++) first = i;
    /* the attention's host pieces: exactly the recalled blocks but the tail, at their ids */
    long pieces = 0, want = 0, wrong = 0;
    for (int v = 0; recalls && v < B * L; v++) {
        if (rb.status[v] != PULSE_OK) continue;
        const int b = v / L, k = v % L, cnt = rb.sel_count[v];
        const int32_t *ids = rb.host_ids + ((size_t)rb.hslot[b] * S + 1) * maxb;
        for (int r = 0; r < rb.n_recalls[v]; r++)
            want += rb.recall_block[v * ms + r] != rb.sel_idx[v * ms + cnt - 1];
        for (int j = 0; j < cnt; j++) {
            const int32_t h = rb.att_host[v * ms + j], blk = rb.sel_idx[v * ms + j];
            if (h < 0) continue;
            pieces++;
            wrong += j == cnt - 1 || h != (L > 1 ? ids[blk] * 8 + k : ids[blk]);
        }
    }
    fprintf(stderr,
            "offload_build B %d lists %d%s%s: %s (%zu bytes differ, first at %zu), "
            "att tokens %llu, refused %llu, held %llu, gate %s, host pieces %ld\n",
            B, L, gated ? " gated" : "", recalls ? " recalls" : "", diff ? "FAIL" : "bit-exact",
            diff, first, rb.cnt[0] - 12345, rb.cnt[1] - 7, rb.cnt[2] - 3,
            *rb.gate ? "open" : "closed", pieces);
    EXPECT_EQ_INT(pieces, want);
    EXPECT_EQ_INT(wrong, 0);
    if (recalls) EXPECT(pieces > 0);
    EXPECT_EQ_INT(diff, 0);
    EXPECT(rb.cnt[0] > 12345);
    /* the gate closed exactly where a list was held; none without it */
    EXPECT_EQ_INT(*rb.gate == 0, rb.cnt[2] > 3);
    if (!gated) EXPECT_EQ_INT(rb.cnt[2], 3);
    if (gated && B * L >= 64) EXPECT(rb.cnt[2] > 3); /* (random victims: some list displaces) */
    mem_free(MEM_HOST, h, bytes);
    mem_free(MEM_HOST, r, bytes);
    mem_free(MEM_DEVICE, d, bytes);
}

int main(void)
{
    if (!backend_cuda_available()) {
        fprintf(stderr, "no CUDA device: skipped\n");
        return 77;
    }
    const struct backend *be = backend_find("cuda");
    struct kctx ctx;
    PULSE_CHECK(be->ctx_create(&ctx, 0) == PULSE_OK, "cuda context");
    const int batches[] = {1, 13, 64};
    for (int i = 0; i < 3; i++) {
        for (int gated = 0; gated < 2; gated++) {
            one_case(be, &ctx, batches[i], 1, gated, 0);
            one_case(be, &ctx, batches[i], 8, gated, 0);
        }
        one_case(be, &ctx, batches[i], 1, 0, 1);
        one_case(be, &ctx, batches[i], 8, 0, 1);
    }
    be->ctx_free(&ctx);
    return tu_finish("test_offload_kernels_gpu");
}
