/* The paged KV cache: kv_cache_check holds after long random sequences of admit/release (normal
 * and offload admissions mixed); the budget, slots and length limits refuse what does not fit;
 * pages are conserved; an offload admission's sparse layers own a fixed number of pages and map
 * every block to the last one. */
#include <string.h>

#include "backend.h"
#include "common.h"
#include "kv_cache.h"
#include "numeric.h"
#include "testutil.h"

static struct kv_cache *make(int page_size, size_t budget, int slots, int max_tokens)
{
    static struct kctx ctx;
    struct kv_cache_params p = {3, 2, 8, page_size, budget, slots, max_tokens};
    char err[256];
    struct kv_cache *kv = kv_cache_create(&p, backend_find("cpu"), &ctx, err, sizeof err);
    if (!kv) fprintf(stderr, "create: %s\n", err);
    return kv;
}

static void test_random_sequences(int page_size)
{
    /* page = 2 heads * 2 * page_size * 8 dims * 2 bytes; room for about 3 of the longest
     * requests (97 tokens, 3 layers) among 9 slots, so both refusals and reuse happen */
    size_t page_bytes = (size_t)2 * 2 * page_size * 8 * 2;
    size_t pages = 3 * 3 * (size_t)PULSE_CEIL_DIV(97, page_size) + 1;
    struct kv_cache *kv = make(page_size, pages * page_bytes, 9, 97);
    EXPECT(kv != NULL);
    if (!kv) return;
    int live[9] = {0}, tokens[9] = {0};
    char err[256];
    uint64_t seed = 12345;
    int admits = 0, refusals = 0, failures = 0;
    for (int it = 0; it < 4000; it++) {
        uint64_t r = pulse_hash64(seed, (uint64_t)it);
        if (r % 3 != 0) {
            int n = 1 + (int)((r >> 8) % 97), slot;
            int rc = kv_cache_admit(kv, n, &slot);
            if (rc == PULSE_OK) {
                EXPECT(slot >= 0 && slot < 9 && !live[slot]);
                live[slot] = 1;
                tokens[slot] = n;
                admits++;
            } else {
                EXPECT_EQ_INT(rc, PULSE_ERR_NOMEM);
                refusals++;
            }
        } else {
            int s = (int)((r >> 16) % 9);
            if (live[s]) {
                kv_cache_release(kv, s);
                live[s] = 0;
            }
        }
        if (kv_cache_check(kv, err, sizeof err) != 0) {
            if (failures++ < 3) fprintf(stderr, "iteration %d: %s\n", it, err);
        }
        /* pages in use equal the sum over live slots */
        struct kv_cache_stats st;
        kv_cache_get_stats(kv, &st);
        int64_t used = 0;
        for (int s = 0; s < 9; s++)
            if (live[s]) used += 3 * kv_cache_pages_for(kv, tokens[s]);
        if (used != st.n_pages - st.free_pages) failures++;
    }
    EXPECT_EQ_INT(failures, 0);
    EXPECT(admits > 500 && refusals > 50); /* both paths exercised */
    /* every page in a live slot's rows is distinct and in range (the check), and rows beyond
     * a request's length hold -1 */
    const int32_t *ids = kv_cache_host_page_ids(kv);
    for (int s = 0; s < 9; s++)
        if (live[s]) {
            int32_t row = kv_cache_row(kv, s, 2);
            EXPECT(ids[row] >= 0);
            EXPECT_EQ_INT(ids[row + kv_cache_pages_for(kv, tokens[s])], -1);
        }
    kv_cache_free(kv);
}

static void test_limits(void)
{
    size_t page_bytes = 2 * 2 * 16 * 8 * 2;
    struct kv_cache *kv = make(16, 30 * page_bytes, 2, 100); /* 30 pages, 3 layers */
    int s0, s1, s2;
    EXPECT_EQ_INT(kv_cache_admit(kv, 0, &s0), PULSE_ERR_INVALID);
    EXPECT_EQ_INT(kv_cache_admit(kv, 101, &s0), PULSE_ERR_INVALID); /* over max_tokens */
    EXPECT_EQ_INT(kv_cache_admit(kv, 64, &s0), PULSE_OK);           /* 4 pages x 3 layers = 12 */
    EXPECT_EQ_INT(kv_cache_admit(kv, 80, &s1), PULSE_OK);           /* 5 x 3 = 15; 3 left */
    EXPECT_EQ_INT(kv_cache_admit(kv, 1, &s2), PULSE_ERR_NOMEM);     /* no slot left */
    kv_cache_release(kv, s0);
    EXPECT_EQ_INT(kv_cache_admit(kv, 97, &s2), PULSE_ERR_NOMEM); /* 7x3=21 > 15 free */
    EXPECT_EQ_INT(kv_cache_admit(kv, 80, &s2), PULSE_OK);
    EXPECT_EQ_INT(s2, s0); /* the freed slot is reused */
    struct kv_cache_stats st;
    kv_cache_get_stats(kv, &st);
    EXPECT_EQ_INT(st.free_pages, 0);
    EXPECT_EQ_INT(st.admit_refusals, 2);
    char err[128];
    EXPECT_EQ_INT(kv_cache_check(kv, err, sizeof err), 0);
    kv_cache_free(kv);
    /* a budget under one page per layer is refused with a reason */
    struct kv_cache_params p = {3, 2, 8, 16, 2 * page_bytes, 2, 100};
    struct kctx ctx = {0};
    EXPECT(kv_cache_create(&p, backend_find("cpu"), &ctx, err, sizeof err) == NULL);
    EXPECT_STR_CONTAINS(err, "KV budget");
}

/* Random normal and mapped admissions: each layer's map (in order, ring, tail) and page count
 * drawn at random. */
static void test_mapped_sequences(void)
{
    const int ps = 4, max_tokens = 40;
    size_t page_bytes = (size_t)2 * 2 * ps * 8 * 2;
    struct kv_cache_params kp = {3, 2, 8, ps, 60 * page_bytes, 6, max_tokens};
    struct kv_cache *kv = make(ps, 60 * page_bytes, 6, max_tokens);
    if (!kv) return;
    int live[6] = {0};
    int64_t pages[6] = {0};
    int admits = 0, mapped = 0, refusals = 0, failures = 0, rings = 0, wraps = 0;
    char err[256];
    for (int it = 0; it < 3000; it++) {
        uint64_t r = pulse_hash64(99, (uint64_t)it);
        int s = (int)((r >> 16) % 6), slot;
        if (r % 3 == 0) {
            if (live[s]) kv_cache_release(kv, s), live[s] = 0;
            continue;
        }
        const int n = 1 + (int)((r >> 8) % max_tokens);
        struct kv_layer_map maps[3];
        for (int l = 0; l < 3; l++) {
            const uint64_t q = pulse_hash64(r, (uint64_t)l);
            maps[l] = (struct kv_layer_map){(int)(q % 3), 1 + (int)((q >> 8) % 11)}; /* 1 .. 11 */
        }
        int rc = r % 3 == 1 ? kv_cache_admit(kv, n, &slot) : kv_cache_admit_mapped(kv, n, maps, &slot);
        int64_t need = r % 3 == 1 ? 3 * kv_cache_pages_for(kv, n)
                                  : kv_cache_params_mapped_pages(&kp, n, maps);
        if (rc != PULSE_OK) {
            EXPECT_EQ_INT(rc, PULSE_ERR_NOMEM);
            refusals++;
        } else {
            live[slot] = 1, pages[slot] = need, admits++, mapped += r % 3 == 2;
            const int64_t nb = kv_cache_pages_for(kv, n);
            for (int l = 0; r % 3 == 2 && l < 3; l++) {
                int n_own;
                const int32_t *own = kv_cache_owned_pages(kv, slot, l, &n_own);
                const int32_t *row = kv_cache_host_page_ids(kv) + kv_cache_row(kv, slot, l);
                if (maps[l].map == KV_MAP_ALL) {
                    EXPECT_EQ_INT(n_own, nb);
                } else if (maps[l].map == KV_MAP_TAIL) {
                    EXPECT_EQ_INT(n_own, maps[l].pages);
                    EXPECT_EQ_INT(row[nb - 1], own[maps[l].pages - 1]);
                } else {
                    /* a ring: the last n_own blocks on distinct pages, block i on page i mod n */
                    EXPECT_EQ_INT(n_own, maps[l].pages < nb ? maps[l].pages : nb);
                    rings++, wraps += nb > n_own;
                    for (int64_t i = nb - n_own; i < nb; i++)
                        for (int64_t j = i + 1; j < nb; j++)
                            failures += row[i] == row[j];
                    failures += row[nb - 1] != own[(nb - 1) % n_own];
                }
            }
        }
        if (kv_cache_check(kv, err, sizeof err) != 0 && failures++ < 3)
            fprintf(stderr, "mapped iteration %d: %s\n", it, err);
        struct kv_cache_stats st;
        kv_cache_get_stats(kv, &st);
        int64_t used = 0;
        for (int k = 0; k < 6; k++)
            used += live[k] ? pages[k] : 0;
        failures += used != st.n_pages - st.free_pages;
    }
    EXPECT_EQ_INT(failures, 0);
    EXPECT(mapped > 300 && admits > mapped && refusals > 50 && rings > 100 && wraps > 30);
    /* out of range: pages per layer, map kinds */
    for (int s = 0; s < 6; s++)
        if (live[s]) kv_cache_release(kv, s);
    int slot;
    struct kv_layer_map bad_pages[3] = {{KV_MAP_ALL, 0}, {KV_MAP_TAIL, 12}, {KV_MAP_ALL, 0}};
    struct kv_layer_map no_ring[3] = {{KV_MAP_RING, 0}, {KV_MAP_ALL, 0}, {KV_MAP_ALL, 0}};
    struct kv_layer_map bad_kind[3] = {{KV_MAP_ALL, 0}, {KV_MAP_ALL, 0}, {3, 2}};
    struct kv_layer_map all[3] = {{KV_MAP_ALL, 0}, {KV_MAP_ALL, 0}, {KV_MAP_ALL, 0}};
    EXPECT_EQ_INT(kv_cache_admit_mapped(kv, 8, bad_pages, &slot), PULSE_ERR_INVALID);
    EXPECT_EQ_INT(kv_cache_admit_mapped(kv, 8, no_ring, &slot), PULSE_ERR_INVALID);
    EXPECT_EQ_INT(kv_cache_admit_mapped(kv, 8, bad_kind, &slot), PULSE_ERR_INVALID);
    EXPECT_EQ_INT(kv_cache_admit_mapped(kv, 8, all, &slot), PULSE_OK); /* all in order: normal */
    EXPECT_EQ_INT(kv_cache_params_mapped_pages(&kp, 8, all), 3 * kv_cache_pages_for(kv, 8));
    EXPECT_EQ_INT(kv_cache_check(kv, err, sizeof err), 0);
    kv_cache_free(kv);
}

int main(void)
{
    test_mapped_sequences();
    test_random_sequences(16);
    test_random_sequences(1);
    test_random_sequences(5);
    test_limits();
    return tu_finish("test_kv_cache");
}
