/* IO-Adaptive Offloading Admission (DESIGN.md section 7, mechanism 2): the cost model and its
 * pruned search. Plain C, no CUDA; all memory is allocated by ioaa_create.
 *
 * Profile (struct ioaa_profile, copied at create). Times in seconds, sizes in bytes.
 *   t_N(b, c): one dense layer of a normal batch of b requests at mean context c tokens; a grid
 *     tn[i * nc + j] = t_N(tn_b[i], tn_c[j]). Bilinear inside the grid; above the last b linear
 *     extrapolation of the last b segment, below the first b the first row; c is clamped to
 *     [tn_c[0], tn_c[nc-1]] (no extrapolation in c).
 *   t_O(b): one sparse layer of an offload batch of b requests; t_R(x): one recall round of x
 *     bytes. 1-D tables: linear inside, linear extrapolation of the last segment above, the first
 *     value below; t_R(0) = 0 (no round when nothing moves).
 *   A table of one point is constant. Grids must be strictly increasing, values finite, t_N and
 *   t_O > 0, t_R >= 0, and every table nondecreasing along each axis (the search's bound relies
 *   on it; a reader of measured profiles should take a running maximum).
 *   r = expected recall bytes per offload request and layer; L = layers.
 *
 * Model, for a normal batch of b_N requests with contexts summing to C (c_N = C / b_N) and an
 * offload batch of b_O requests, the running requests included:
 *   t_N = t_N(b_N, c_N) if b_N > 0 else 0;  t_O = t_O(b_O), t_R = t_R(b_O r) if b_O > 0 else 0
 *   overlap depth d = ceil(t_R / t_N) when both batches are nonempty, else 0
 *   step time S = L (t_N + k t_R + t_O + max(0, t_R - t_N - k t_R))
 *                                                     when b_N > 0, b_O > 0 and irq is on
 *               = L t_N + L (t_O + t_R)               otherwise (no normal batch, or irq off:
 *                                                     the batches run one after the other)
 *   where k = 1 - 1 / g, g = compute_beside: a normal layer beside the offload batch's recall
 *   takes g times as long while the recall runs (ioaa_profile.h's ioaa_overlap with the
 *   recall at its own rate: max(t_R, t_N + k t_R)); g = 1 (k = 0): t_N + t_O + max(0, t_R -
 *   t_N), the recall hidden behind the normal layers it overlaps
 *   throughput = (b_N + b_O) / S (decode steps of one token per request: tokens per second);
 *   0 when both batches are empty.
 *   Memory: a normal request reserves gpu_normal bytes on the GPU; an offload request gpu_offload
 *   on the GPU and host_offload in the host pool. The admitted requests' sums must fit the free
 *   budgets of struct ioaa_state (free = what the running requests left).
 *
 * Search. Waiting requests are sorted by (length, caller index). A plan admits a prefix of them,
 * the first m normal and the next o offloaded, and the rest WAIT. Monotonicity ("longer
 * requests are offloaded"): in sorted order no NORMAL follows an OFFLOAD, so every normal
 * request is no longer than every offloaded one (equal lengths: the lower caller index is the
 * normal one); the running batches are outside the rule. Memory decides which plans fit,
 * without the model: split m (its m normal) fits while the first m fit the GPU whole (splits 0
 * .. M), and the cut o up to omax(m) (every request only adds bytes).
 * The tree: a leaf is one split m, with its best cut in closed form: between the t_O and t_R
 * grid points and the kink of max(t_N + k t_R, t_R) (at t_R = g t_N), the step time is linear
 * in o, so the throughput
 * (a count over the step) is monotone and its best lies at the ends of those stretches; a
 * stretch whose ends are within 1e-9 of each other is scanned whole. A branch is a range of
 * splits; its bound replaces t_N of split m by a line through the exact t_N of the split next
 * to those visited, sloped by the least growth (or most fall) of t_N per normal request over
 * t_N's bilinear cells the splits' normal batches lie in and the requests' contexts, and the
 * cut by any count memory allows a split of the range; the relaxation's best is again at a few
 * points in closed form. The search visits a first split (with something running, the
 * previous decision's normal count, where consecutive decisions land, or the most memory now
 * admits when memory bounded that one; else the split that admits the most, the most of them
 * normal), then walks each side one split at a time: before
 * a step the rest of the side is bounded as one branch and dropped when the bound is below the
 * best found (a side whose throughput rose twice in a row steps without bounding). With nothing
 * normal running, split 0 (no normal batch) is a leaf whose best bounds the branches that hold
 * it, visited once. Ties: higher throughput, then more admitted, then more normal requests: the
 * answer is unique, and the unpruned search (no_bound: every plan that fits) and the exhaustive
 * one return the same.
 * Nodes visited: every leaf and branch whose model or bound the search evaluated. Their closed
 * forms' own step-time and table evaluations are bound_evaluations: per node about the t_O and
 * t_R grid points plus a bisection over the cuts (a stretch scanned whole adds its length), and
 * a branch also passes once over its requests' contexts.
 *
 * The profile comes from `pulse profile`'s JSON or its analytic floor (ioaa_profile.h). */
#ifndef PULSE_IOAA_H
#define PULSE_IOAA_H

#include <stddef.h>
#include <stdint.h>

struct ioaa_profile {
    int n_layers;                /* L > 0 */
    int tn_nb, tn_nc;            /* t_N grid: batch sizes x mean contexts, each >= 1 */
    const double *tn_b, *tn_c;   /* [tn_nb], [tn_nc], strictly increasing */
    const double *tn;            /* [tn_nb * tn_nc], row i = batch tn_b[i] */
    int to_n;                    /* t_O table points, >= 1 */
    const double *to_b, *to;     /* [to_n] batch sizes and times */
    int tr_n;                    /* t_R table points, >= 1 */
    const double *tr_bytes, *tr; /* [tr_n] round sizes and times */
    double recall_bytes;         /* r >= 0: per offload request and layer */
    double compute_beside;       /* g: 0 or 1 (none), else in (1, 64]: the model's k above */
};

struct ioaa_params {
    struct ioaa_profile profile; /* copied: the caller's arrays may go after create */
    int max_waiting;             /* most waiting requests one decision takes, >= 0 */
    int irq;                     /* 1: interruptible layer-wise scheduling on (overlap) */
    int no_bound;                /* 1: evaluate every plan that fits, unpruned (tests, ablation) */
};

/* The running requests and the free budgets, in bytes. */
struct ioaa_state {
    int normal_count;          /* running normal batch */
    int64_t normal_ctx_sum;    /* sum of their contexts, tokens */
    int64_t normal_gpu_bytes;  /* reported only: free_gpu_bytes already excludes them */
    int offload_count;         /* running offload batch */
    int64_t offload_gpu_bytes; /* reported only */
    int64_t offload_host_bytes;
    int64_t free_gpu_bytes, free_host_bytes; /* budgets left for the waiting requests, >= 0 */
};

/* One waiting request; all numbers from the caller (e.g. offload_request_kv_bytes). */
struct ioaa_request {
    int64_t length;       /* prompt + output tokens: the sort key */
    int64_t context;      /* its context in c_N if normal (e.g. its length), tokens */
    int64_t gpu_normal;   /* GPU bytes if normal: the whole KV */
    int64_t gpu_offload;  /* GPU bytes if offloaded: dense layers, hot slots, digests, tail */
    int64_t host_offload; /* host pool bytes if offloaded: the whole KV */
};

enum ioaa_assign { IOAA_WAIT = 0, IOAA_NORMAL = 1, IOAA_OFFLOAD = 2 };

struct ioaa_decision {
    double step_s, throughput;     /* predicted, with the running requests */
    int overlap_depth;             /* d of the chosen batches */
    int n_normal, n_offload;       /* admitted from the waiting requests */
    int64_t gpu_bytes, host_bytes; /* what the admitted requests reserve */
    int64_t nodes_visited;         /* leaves and branches evaluated (no_bound: plans evaluated;
                                      exhaustive: assignments enumerated) */
    int64_t bound_evaluations;     /* step-time and table evaluations inside their closed forms */
    int64_t pruned_memory;         /* plans of the tree's form that do not fit (exhaustive: the
                                      assignments) */
    int64_t pruned_monotone;       /* exhaustive: assignments not of the tree's form */
    int64_t pruned_bound;          /* splits under branches dropped by their bound */
};

struct ioaa;

/* Validates and copies the profile, allocates the search's scratch for max_waiting requests.
 * NULL with a one-line reason naming the bad input in err (when given). */
struct ioaa *ioaa_create(const struct ioaa_params *p, char *err, size_t errlen);
void ioaa_free(struct ioaa *a);

/* The profile's tables at a point (the interpolation above). */
double ioaa_t_normal(const struct ioaa *a, double b, double c);
double ioaa_t_offload(const struct ioaa *a, double b);
double ioaa_t_recall(const struct ioaa *a, double bytes);
/* g of the model (compute_beside; 1 when none). */
double ioaa_compute_beside(const struct ioaa *a);

/* The model for batches (b_N, contexts summing to ctx_sum, b_O): returns S in seconds, and d in
 * *depth when depth is set. */
double ioaa_step_time(const struct ioaa *a, int b_normal, int64_t ctx_sum, int b_offload,
                      int *depth);

/* Self-interleaving (pulseinfer --self-interleave; DESIGN section 7, mechanism 5): an offload
 * batch of b_O >= 2 requests with no normal batch runs as two halves of a = ceil(b_O / 2) and
 * b = floor(b_O / 2) requests whose layers alternate, each half's recall in flight while the
 * other half computes. A half h's recall of a layer is a part started beside its own compute of
 * the layer before (pp_h: speculation's prefetch; 0 exact at layer) and a part that follows its
 * selection (cc_h: the exact round, or speculation's corrections); its sparse layer takes o_h.
 * Per layer the link carries both halves' recalls one after the other (one planner submits
 * them in order), the compute stream both halves' sparse layers (each reads the weights:
 * t_O(a) + t_O(b) >= t_O(b_O)), and each half's chain is its compute or prefetch, whichever
 * ends later, then what follows its selection. Those four bound the steady period of a layer
 * (every longer cycle of the schedule spans two layers and averages below their maximum):
 *   P = max(pp_a + cc_a + pp_b + cc_b, o_a + o_b, max(o_a, pp_a) + cc_a, max(o_b, pp_b) + cc_b)
 * Exact at layer (pp = 0, cc = t_R(h r)) this is
 *   max(t_R(a r) + t_R(b r), t_O(a) + t_O(b), t_R(a r) + t_O(a), t_R(b r) + t_O(b))
 * and S_self = L P (the pipeline's fill, one half's first round, left out as the step model
 * leaves out its own per-step terms), against L (t_O(b_O) + t_R(b_O r)) of the batch unsplit.
 * It pays where recall and compute are comparable (up to about twice as fast at t_R = t_O) and
 * loses where the weights dominate a sparse layer and the recall is small. The model pulseinfer
 * decides with is the refit's (ioaa_refit_self_step: its factors, and with speculation the
 * unfolded prefetch and corrections). */
double ioaa_self_period(double pp_a, double cc_a, double o_a, double pp_b, double cc_b, double o_b);

/* Chooses NORMAL / OFFLOAD / WAIT for the n waiting requests w (n <= max_waiting), written to
 * assign[n] in the caller's order, and fills *out. No allocation. The answer depends on the
 * input only; where the search starts (so the nodes it visits) also on the previous decision.
 * Returns PULSE_OK, or PULSE_ERR_INVALID with a reason in err for bad input (n out of range,
 * negative bytes). */
int ioaa_decide(struct ioaa *a, const struct ioaa_state *st, const struct ioaa_request *w, int n,
                enum ioaa_assign *assign, struct ioaa_decision *out, char *err, size_t errlen);

/* The reference: every one of the 3^n assignments, kept when it is of the tree's form (waits a
 * suffix of the sorted order, monotone) and fits memory; the best under the same ties. For
 * tests: n <= IOAA_EXHAUSTIVE_MAX. */
#define IOAA_EXHAUSTIVE_MAX 14
int ioaa_decide_exhaustive(struct ioaa *a, const struct ioaa_state *st,
                           const struct ioaa_request *w, int n, enum ioaa_assign *assign,
                           struct ioaa_decision *out, char *err, size_t errlen);

/* Rewrites the copied profile's t_R values (its grid and everything else kept) with tr[n], n
 * the profile's tr_n: finite, >= 0 and nondecreasing (ioaa_create's rules). The search's state
 * (where the next search starts) is kept. For a recall table refitted during a run (ioaa_refit.h).
 * PULSE_OK, or PULSE_ERR_INVALID with the first bad value named in err (a is left as it was). */
int ioaa_set_recall(struct ioaa *a, const double *tr, int n, char *err, size_t errlen);

#endif
