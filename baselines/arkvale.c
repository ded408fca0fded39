/* arkvale: every admitted request is an offload request (offload.h). Per sparse layer: select,
 * recall the missing pages, wait, attend: synchronous recall, as ArkVale.
 *
 * `arkvale` is the published design (pku-liang/ArkVale @ 0c3b45e; DESIGN section 7): pages of
 * 32 tokens, one page list per request from the scores of every head (selection `mean`), a GPU
 * page cache of 128 pages per request and layer (its benchmark's page budget; at least what one
 * step selects), one asynchronous copy per missing whole page (all heads: the per-block engine),
 * the first two layers dense. Where the suite still differs: its digests are Quest's min/max
 * (ArkVale's cuboid-mean costs the same), eviction is LRU (ArkVale evicts the lowest-scored
 * resident page), attention reads the selected pages only (ArkVale's reads every resident
 * page), and the budget is the suite's shared one (ArkVale's benchmark selects 32 pages).
 *
 * `arkvale+solohead+gs` and `arkvale+solohead+zc` are the engine-matched tier (DESIGN section
 * 11): the same synchronous schedule with PulseInfer's selection, page size, cache and engines. */
#include "offload_policy.h"

#define ARKVALE_TABLE(pol_name, sel, eng, page, cache)                                             \
    {                                                                                              \
        .name = pol_name, .admit = offload_policy_admit, .step = offload_policy_step,              \
        .release = offload_policy_release, .traffic = offload_policy_traffic,                      \
        .finish = offload_policy_finish, .overlapped = 0, .needs_ctx = 1,                          \
        .ctx_kind = POLICY_CTX_OFFLOAD, .ctx_create = offload_policy_ctx_create,                   \
        .ctx_free = offload_policy_ctx_free, .offload_lookahead = 0, .offload_selection = sel,    \
        .offload_engine = eng, .offload_page_size = page, .offload_cache_pages = cache,            \
        .offload_refetch = 0                                                                       \
    }

const struct policy policy_arkvale = ARKVALE_TABLE("arkvale", "mean", "per-block", 32, 128);
const struct policy policy_arkvale_solohead_gs =
    ARKVALE_TABLE("arkvale+solohead+gs", "solohead", "gather-scatter", 16, 0);
const struct policy policy_arkvale_solohead_zc =
    ARKVALE_TABLE("arkvale+solohead+zc", "solohead", "zero-copy", 16, 0);
