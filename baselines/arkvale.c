/* arkvale: every admitted request is an offload request (offload.h). Per sparse layer: select
 * (head-wise by default), recall the missing blocks (per-block engine by default), wait, attend:
 * synchronous recall, as ArkVale. */
#include "offload_policy.h"

const struct policy policy_arkvale = {
    .name = "arkvale",
    .admit = offload_policy_admit,
    .step = offload_policy_step,
    .release = offload_policy_release,
    .traffic = offload_policy_traffic,
    .finish = offload_policy_finish,
    .overlapped = 0,
    .needs_ctx = 1,
    .ctx_kind = POLICY_CTX_OFFLOAD,
    .ctx_create = offload_policy_ctx_create,
    .ctx_free = offload_policy_ctx_free,
    .offload_lookahead = 0,
};
