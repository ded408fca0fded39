/* infinigen: every admitted request is an offload request (offload.h). Layer l+1's blocks are
 * selected at layer l, from layer l+1's query stream of the locality model (standing for
 * InfiniGen's speculated query), and their recall is submitted there; layer l+1 waits for it, so
 * the recall overlaps layer l's MLP and layer l+1's projections. */
#include "offload_policy.h"

const struct policy policy_infinigen = {
    .name = "infinigen",
    .admit = offload_policy_admit,
    .step = offload_policy_step,
    .release = offload_policy_release,
    .traffic = offload_policy_traffic,
    .finish = offload_policy_finish,
    .overlapped = 1,
    .needs_ctx = 1,
    .ctx_kind = POLICY_CTX_OFFLOAD,
    .ctx_create = offload_policy_ctx_create,
    .ctx_free = offload_policy_ctx_free,
    .offload_lookahead = 1,
};
