/* The step floor's arithmetic (floor.h). */
#include "floor.h"

#include "common.h"
#include "results.h"

void floor_compute(const struct floor_traffic *t, const struct floor_bw *bw, int overlapped,
                   struct floor_result *out)
{
    PULSE_CHECK(bw->hbm_gbps > 0 && (bw->h2d_gbps > 0 || t->recall_bytes == 0),
                "floor_compute: bandwidths must be positive");
    out->hbm_s =
        (t->weight_bytes + t->kv_bytes + t->digest_bytes + t->recall_bytes) / (bw->hbm_gbps * 1e9);
    out->pcie_s = t->recall_bytes > 0 ? t->recall_bytes / (bw->h2d_gbps * 1e9) : 0.0;
    out->floor_s = overlapped ? PULSE_MAX(out->hbm_s, out->pcie_s) : out->hbm_s + out->pcie_s;
}

void floor_traffic_add(struct floor_traffic *a, const struct floor_traffic *b)
{
    a->weight_bytes += b->weight_bytes;
    a->kv_bytes += b->kv_bytes;
    a->digest_bytes += b->digest_bytes;
    a->recall_bytes += b->recall_bytes;
}

json_t *floor_json(const struct floor_traffic *t, const struct floor_bw *bw, int overlapped)
{
    struct floor_result f;
    floor_compute(t, bw, overlapped, &f);
    json_t *j = json_object();
    results_set_real(j, "hbm_floor_ms", f.hbm_s * 1e3);
    results_set_real(j, "pcie_floor_ms", f.pcie_s * 1e3);
    results_set_real(j, "floor_ms", f.floor_s * 1e3);
    json_object_set_new(j, "overlapped", json_boolean(overlapped));
    results_set_real(j, "weight_bytes", t->weight_bytes);
    results_set_real(j, "kv_bytes", t->kv_bytes);
    results_set_real(j, "digest_bytes", t->digest_bytes);
    results_set_real(j, "recall_bytes", t->recall_bytes);
    return j;
}
