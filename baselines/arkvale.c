/* arkvale: every admitted request is an offload request (offload.h). Per sparse layer: select,
 * recall the missing pages, wait, attend: synchronous recall, as ArkVale (its schedule below).
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

#include "offload.h"

/* ArkVale's layer: pre-attention, then in a sparse layer its pages selected from its own query
 * and the missing ones recalled; the attention (offload_layer_finish) waits for them. */
static void arkvale_layer(struct offload *o, struct batch *bt, int layer)
{
    offload_pre(o, bt, layer);
    if (offload_layer_sparse(o, layer)) offload_select(o, bt, layer);
}

static const struct offload_schedule arkvale_schedule = {"synchronous", 0, arkvale_layer, 0};

const struct policy policy_arkvale =
    OFFLOAD_POLICY_TABLE("arkvale", &arkvale_schedule, 0, "mean", "per-block", 32, 128, 0);
const struct policy policy_arkvale_solohead_gs = OFFLOAD_POLICY_TABLE(
    "arkvale+solohead+gs", &arkvale_schedule, 0, "solohead", "gather-scatter", 16, 0, 0);
const struct policy policy_arkvale_solohead_zc = OFFLOAD_POLICY_TABLE(
    "arkvale+solohead+zc", &arkvale_schedule, 0, "solohead", "zero-copy", 16, 0, 0);
