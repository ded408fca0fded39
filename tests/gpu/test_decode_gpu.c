/* The tiny model decodes the same tokens on CUDA as on the CPU reference (same seed, same
 * workload with awkward prompt lengths and continuous batching), the CUDA step allocates
 * nothing, and the device page tables pass kv_cache_check. Exit 77 without a GPU. */
#include <string.h>

#include "backend.h"
#include "engine.h"
#include "mem.h"
#include "serve.h"
#include "testutil.h"
#include "workloads/workload.h"

#define OUT_LEN 64

static int serve_on(const char *be_name, const char *spec, int max_batch, int graph,
                    struct workload *w, struct serve_counters *ctr)
{
    char err[256];
    const struct model_config *c = model_config_find("tiny");
    const struct backend *be = backend_find(be_name);
    if (workload_create(w, spec, OUT_LEN, 1, err, sizeof err) != 0) return -1;
    int max_tokens = workload_max_tokens(w);
    struct engine_params p = {c, be, 1, max_batch, max_tokens, graph};
    struct engine *e = engine_create(&p, err, sizeof err);
    if (!e) {
        fprintf(stderr, "%s: %s\n", be_name, err);
        return -1;
    }
    struct kv_cache_params kp = {c->n_layers, c->n_kv_heads, c->head_dim, 16, 1u << 24, max_batch,
                                 max_tokens};
    struct kv_cache *kv = kv_cache_create(&kp, be, engine_ctx(e), err, sizeof err);
    double wall;
    int rc = serve_run(e, kv, policy_find("vanilla"), w->reqs, w->n, max_batch, ctr, &wall, err,
                       sizeof err);
    if (rc) fprintf(stderr, "%s: %s\n", be_name, err);
    EXPECT_EQ_INT(kv_cache_check(kv, err, sizeof err), 0);
    kv_cache_free(kv);
    engine_free(e);
    return rc;
}

int main(void)
{
    if (!backend_cuda_available()) {
        fprintf(stderr, "test_decode_gpu: no GPU, skipped\n");
        return 77;
    }
    /* the second case also runs without CUDA graphs (every kernel launched) */
    const char *specs[] = {"lengths:100,37,1", "lengths:300,17,64,5,250"};
    int batches[] = {8, 2}, graphs[] = {1, 0};
    for (int s = 0; s < 2; s++) {
        struct workload wc, wg;
        struct serve_counters cc, cg;
        EXPECT_EQ_INT(serve_on("cpu", specs[s], batches[s], 0, &wc, &cc), 0);
        EXPECT_EQ_INT(serve_on("cuda", specs[s], batches[s], graphs[s], &wg, &cg), 0);
        int mismatch = 0, first = -1;
        for (int i = 0; i < wc.n; i++)
            for (int t = 0; t < OUT_LEN; t++)
                if (wc.reqs[i].tokens[t] != wg.reqs[i].tokens[t]) {
                    if (first < 0) first = i * OUT_LEN + t;
                    mismatch++;
                }
        fprintf(stderr, "tiny %s (graph %d): %d requests x %d tokens, %d mismatches (first at %d)\n",
                specs[s], graphs[s], wc.n, OUT_LEN, mismatch, first);
        EXPECT_EQ_INT(mismatch, 0);
        EXPECT_EQ_INT(cg.step_alloc_calls, 0);
        EXPECT_EQ_INT(cg.steps, cc.steps);
        workload_free(&wc);
        workload_free(&wg);
    }
    return tu_finish("test_decode_gpu");
}
