/* The speed-of-light floor of a decode step (DESIGN.md section 10): what the step had to move,
 * over the bandwidths measured in the same process.
 *   HBM floor  = (weight bytes + KV bytes read + digest bytes read + recall bytes written)
 *                / HBM copy bandwidth (the copy kernel's read + write rate)
 *   PCIe floor = recall bytes / single-copy H2D peak
 *   floor      = their sum for a policy whose recall does not overlap compute (synchronous),
 *                their maximum for one that overlaps them.
 * Plain arithmetic; the policies report the bytes (struct floor_traffic) of each step. */
#ifndef PULSE_FLOOR_H
#define PULSE_FLOOR_H

#include <jansson.h>

/* Bytes one step moved (summed over its entries and layers). */
struct floor_traffic {
    double weight_bytes; /* weights read: every layer's and the head's */
    double kv_bytes;     /* KV read by attention (dense layers whole, sparse layers selected) */
    double digest_bytes; /* block digests read by selection */
    double recall_bytes; /* recalled host -> GPU (written into HBM, moved over PCIe) */
};

struct floor_bw {
    double hbm_gbps; /* device copy bandwidth, read + write counted, GB/s (1e9 B/s) */
    double h2d_gbps; /* one large pinned host-to-device copy, GB/s */
};

struct floor_result {
    double hbm_s, pcie_s, floor_s;
};

/* The floor of traffic t at bandwidths bw; overlapped: max instead of sum. Bandwidths must be
 * > 0 (PCIe may be 0 when the step recalled nothing). */
void floor_compute(const struct floor_traffic *t, const struct floor_bw *bw, int overlapped,
                   struct floor_result *out);
/* a += b. */
void floor_traffic_add(struct floor_traffic *a, const struct floor_traffic *b);

/* {"hbm_floor_ms", "pcie_floor_ms", "floor_ms", "overlapped", the four byte counts} of one
 * step (or a mean step); caller owns the reference. */
json_t *floor_json(const struct floor_traffic *t, const struct floor_bw *bw, int overlapped);

#endif
