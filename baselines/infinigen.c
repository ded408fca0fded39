/* infinigen: every admitted request is an offload request (offload.h). Layer l+1's blocks are
 * selected at layer l, from layer l+1's query stream of the locality model (standing for
 * InfiniGen's speculated query), and their recall is submitted there; layer l+1 waits for it, so
 * the recall overlaps layer l's MLP and layer l+1's projections.
 *
 * `infinigen` is the published design (snu-comparch/InfiniGen @ 3754f52; DESIGN section 7):
 * per-head lists (head-wise), the selected rows gathered on the CPU into a pinned buffer and
 * moved by DMA (the gather-scatter engine), the whole selection re-fetched every step (--reuse
 * none: its code keeps nothing across steps; --reuse resident is the suite's option). Where the
 * suite still differs: it selects 16-token blocks per KV head within the shared budget
 * (InfiniGen selects tokens per head by a threshold, capped), a pipelined gather makes several
 * DMAs a layer (InfiniGen one per K and V), and a scatter kernel places the rows in the paged
 * slots (InfiniGen attends its staging buffer).
 *
 * `infinigen+solohead+gs` and `infinigen+solohead+zc` are the engine-matched tier (DESIGN
 * section 11): the same one-layer-ahead schedule with PulseInfer's selection, engines and reuse
 * of resident blocks. */
#include "offload_policy.h"

#define INFINIGEN_TABLE(pol_name, sel, eng, refetch)                                               \
    {                                                                                              \
        .name = pol_name, .admit = offload_policy_admit, .step = offload_policy_step,              \
        .release = offload_policy_release, .traffic = offload_policy_traffic,                      \
        .finish = offload_policy_finish, .overlapped = 1, .needs_ctx = 1,                          \
        .ctx_kind = POLICY_CTX_OFFLOAD, .ctx_create = offload_policy_ctx_create,                   \
        .ctx_free = offload_policy_ctx_free, .offload_lookahead = 1, .offload_selection = sel,    \
        .offload_engine = eng, .offload_page_size = 0, .offload_cache_pages = 0,                   \
        .offload_refetch = refetch                                                                 \
    }

const struct policy policy_infinigen = INFINIGEN_TABLE("infinigen", "headwise", "gather-scatter", 1);
const struct policy policy_infinigen_solohead_gs =
    INFINIGEN_TABLE("infinigen+solohead+gs", "solohead", "gather-scatter", 0);
const struct policy policy_infinigen_solohead_zc =
    INFINIGEN_TABLE("infinigen+solohead+zc", "solohead", "zero-copy", 0);
