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

#include "offload.h"

/* InfiniGen's layer: the next layer's selection first (from this layer's input: its
 * approximate query with the real query), so that its recall overlaps this whole layer, then
 * pre-attention. The first layer, when sparse, has no layer before it: it is selected at its
 * own, after its pre-attention (as the accuracy path's unspeculated layer). */
static void infinigen_layer(struct offload *o, struct batch *bt, int layer)
{
    if (layer == 0 && offload_layer_sparse(o, 0)) {
        offload_pre(o, bt, 0);
        offload_select(o, bt, 0);
        if (offload_layer_sparse(o, 1)) offload_select(o, bt, 1);
        return;
    }
    if (offload_layer_sparse(o, layer + 1)) offload_select(o, bt, layer + 1);
    offload_pre(o, bt, layer);
}

static const struct offload_schedule infinigen_schedule = {"one-layer-ahead", 1, infinigen_layer,
                                                           0};

const struct policy policy_infinigen = OFFLOAD_POLICY_TABLE("infinigen", &infinigen_schedule, 1,
                                                            "headwise", "gather-scatter", 0, 0, 1);
const struct policy policy_infinigen_solohead_gs = OFFLOAD_POLICY_TABLE(
    "infinigen+solohead+gs", &infinigen_schedule, 1, "solohead", "gather-scatter", 0, 0, 0);
const struct policy policy_infinigen_solohead_zc = OFFLOAD_POLICY_TABLE(
    "infinigen+solohead+zc", &infinigen_schedule, 1, "solohead", "zero-copy", 0, 0, 0);
