/* The decode GEMMs through cuBLASLt with a per-shape plan (gemm_lt.h). */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "cuda_check.h"
#include "gemm_lt.h"
#include "gemm_skinny.h"
extern "C" {
#include "mem.h"
}

struct lt_key {
    int m, n, k, beta_nz, sm_target;
    int al_a, al_w, al_out; /* alignment of each pointer, bytes (<= 256) */
    size_t ws;              /* the workspace the plan may use */
};

struct lt_plan {
    struct lt_key key;
    int used, has_algo;
    int skinny; /* the suite's kernel's variant kept (then has_algo is 1), else -1 */
    cublasLtMatmulAlgo_t algo;
};

struct gemm_lt {
    cublasLtHandle_t h;
    cublasLtMatmulDescOpaque_t desc;
    int tune, skinny, graph_timing;
    struct lt_plan *plans; /* GEMM_LT_MAX_PLANS, open addressing */
    float *d_scratch;
    cudaEvent_t ev[2];
    cudaEvent_t ev_in; /* the caller's stream, before timing */
    cudaStream_t ts;   /* the candidates' graphs are captured and timed on it */
    struct gemm_lt_stats st;
};

static int ptr_align(const void *p)
{
    const uintptr_t v = (uintptr_t)p;
    int a = 1;
    while (a < 256 && !(v & (uintptr_t)a))
        a <<= 1;
    return a;
}

static int key_eq(const struct lt_key *x, const struct lt_key *y)
{
    return x->m == y->m && x->n == y->n && x->k == y->k && x->beta_nz == y->beta_nz &&
           x->sm_target == y->sm_target && x->al_a == y->al_a && x->al_w == y->al_w &&
           x->al_out == y->al_out && x->ws == y->ws;
}

static uint64_t key_hash(const struct lt_key *x)
{
    const int64_t f[] = {x->m,    x->n,    x->k,      x->beta_nz,    x->sm_target,
                         x->al_a, x->al_w, x->al_out, (int64_t)x->ws};
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        h = (h ^ (uint64_t)f[i]) * 1099511628211ull;
    return h;
}

/* One plan's term of gemm_lt_stats.choice_hash: its key, then what it kept. */
static uint64_t choice_of(const struct lt_plan *p)
{
    int64_t f[9] = {p->has_algo, p->skinny};
    if (p->has_algo && p->skinny < 0) {
        static const cublasLtMatmulAlgoConfigAttributes_t at[] = {
            CUBLASLT_ALGO_CONFIG_ID,
            CUBLASLT_ALGO_CONFIG_TILE_ID,
            CUBLASLT_ALGO_CONFIG_STAGES_ID,
            CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
            CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
            CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING,
            CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION};
        for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
            uint32_t v = 0; /* each of these is 32 bits wide; one that is not read stays 0 */
            size_t got = 0;
            if (cublasLtMatmulAlgoConfigGetAttribute(&p->algo, at[i], &v, sizeof v, &got) ==
                CUBLAS_STATUS_SUCCESS)
                f[2 + i] = v;
        }
    }
    uint64_t h = key_hash(&p->key);
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        h = (h ^ (uint64_t)f[i]) * 1099511628211ull;
    return h;
}

static int sm_target_of(int num_sms, int reserve)
{
    return reserve > 0 ? num_sms - reserve : 0;
}

extern "C" struct gemm_lt *gemm_lt_create(const struct gemm_lt_params *p, char *err, size_t errlen)
{
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(err, errlen, "gemm: no usable device");
        return NULL;
    }
    if (p->sm_reserve < 0 || p->sm_reserve >= sms) {
        snprintf(err, errlen, "gemm: sm_reserve %d must leave an SM (0..%d on this device)",
                 p->sm_reserve, sms - 1);
        return NULL;
    }
    struct gemm_lt *g = (struct gemm_lt *)mem_alloc(MEM_HOST, sizeof *g, "gemm_lt");
    struct lt_plan *plans = (struct lt_plan *)mem_alloc(
        MEM_HOST, sizeof(struct lt_plan) * GEMM_LT_MAX_PLANS, "gemm_lt plans");
    if (!g || !plans) {
        mem_free(MEM_HOST, g, sizeof *g);
        mem_free(MEM_HOST, plans, sizeof(struct lt_plan) * GEMM_LT_MAX_PLANS);
        snprintf(err, errlen, "gemm: out of host memory");
        return NULL;
    }
    memset(g, 0, sizeof *g);
    memset(plans, 0, sizeof(struct lt_plan) * GEMM_LT_MAX_PLANS);
    g->plans = plans;
    g->tune = !p->no_tuning;
    g->skinny = !p->no_skinny;
    g->graph_timing = !p->stream_timing;
    g->st.num_sms = sms;
    CUBLAS_CHECK(cublasLtCreate(&g->h));
    CUBLAS_CHECK(cublasLtMatmulDescInit(&g->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    /* row-major out = a . w^T is, column-major, out^T (n x m) = op(W)=T (n x k) . a^T (k x m) */
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(&g->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(&g->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    PULSE_CHECK(gemm_lt_set_sm_reserve(g, p->sm_reserve) == 0, "gemm_lt sm reserve");
    CUDA_CHECK(cudaEventCreate(&g->ev[0]));
    CUDA_CHECK(cudaEventCreate(&g->ev[1]));
    CUDA_CHECK(cudaEventCreateWithFlags(&g->ev_in, cudaEventDisableTiming));
    CUDA_CHECK(cudaStreamCreateWithFlags(&g->ts, cudaStreamNonBlocking));
    return g;
}

extern "C" void gemm_lt_free(struct gemm_lt *g)
{
    if (!g) return;
    CUDA_CHECK(cudaEventDestroy(g->ev[0]));
    CUDA_CHECK(cudaEventDestroy(g->ev[1]));
    CUDA_CHECK(cudaEventDestroy(g->ev_in));
    CUDA_CHECK(cudaStreamDestroy(g->ts));
    cublasLtDestroy(g->h);
    mem_free(MEM_DEVICE, g->d_scratch, g->st.scratch_bytes);
    mem_free(MEM_HOST, g->plans, sizeof(struct lt_plan) * GEMM_LT_MAX_PLANS);
    mem_free(MEM_HOST, g, sizeof *g);
}

extern "C" int gemm_lt_set_sm_reserve(struct gemm_lt *g, int sm_reserve)
{
    if (sm_reserve < 0 || sm_reserve >= g->st.num_sms) return -1;
    const int32_t t = sm_target_of(g->st.num_sms, sm_reserve);
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(&g->desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &t,
                                                sizeof t));
    g->st.sm_target = t;
    return 0;
}

extern "C" void gemm_lt_get_stats(const struct gemm_lt *g, struct gemm_lt_stats *out)
{
    *out = g->st;
}

extern "C" int gemm_blas_set_sm_reserve(void *blas, int sm_reserve)
{
    int dev = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    if (sm_reserve < 0 || sm_reserve >= sms) return -1;
    const int t = sm_target_of(sms, sm_reserve);
    CUBLAS_CHECK(cublasSetSmCountTarget((cublasHandle_t)blas, t));
    return t;
}

/* The operand layouts of one shape (column-major views of the row-major operands). */
struct lt_layouts {
    cublasLtMatrixLayoutOpaque_t w, a, out;
};

static void layouts_init(struct lt_layouts *l, int m, int n, int k)
{
    CUBLAS_CHECK(cublasLtMatrixLayoutInit(&l->w, CUDA_R_16BF, k, n, k));
    CUBLAS_CHECK(cublasLtMatrixLayoutInit(&l->a, CUDA_R_16BF, k, m, k));
    CUBLAS_CHECK(cublasLtMatrixLayoutInit(&l->out, CUDA_R_32F, n, m, n));
}

static cublasStatus_t matmul(struct gemm_lt *g, const struct kctx *c, struct lt_layouts *l,
                             const cublasLtMatmulAlgo_t *algo, const uint16_t *a, const uint16_t *w,
                             float *out, float beta, cudaStream_t st)
{
    const float alpha = 1.0f;
    return cublasLtMatmul(g->h, &g->desc, &alpha, w, &l->w, a, &l->a, &beta, out, &l->out, out,
                          &l->out, algo, c->blas_workspace,
                          c->blas_workspace ? c->blas_workspace_bytes : 0, st);
}

/* The heuristic's candidates for key (at most GEMM_LT_CANDIDATES) into res; their count. */
static int candidates(struct gemm_lt *g, const struct lt_key *key, struct lt_layouts *l,
                      cublasLtMatmulHeuristicResult_t *res)
{
    cublasLtMatmulPreferenceOpaque_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceInit(&pref));
    const uint64_t ws = key->ws;
    const uint32_t al_w = (uint32_t)key->al_w, al_a = (uint32_t)key->al_a,
                   al_o = (uint32_t)key->al_out;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        &pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        &pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_w, sizeof al_w));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        &pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_a, sizeof al_a));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        &pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_o, sizeof al_o));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        &pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_o, sizeof al_o));
    int n = 0;
    if (cublasLtMatmulAlgoGetHeuristic(g->h, &g->desc, &l->w, &l->a, &l->out, &l->out, &pref,
                                       GEMM_LT_CANDIDATES, res, &n) != CUBLAS_STATUS_SUCCESS)
        return 0;
    int kept = 0; /* only the usable ones, in the heuristic's order */
    for (int i = 0; i < n; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= key->ws)
            res[kept++] = res[i];
    return kept;
}

/* A scratch output of at least bytes (device), grown outside any capture. */
static float *scratch(struct gemm_lt *g, size_t bytes, cudaStream_t st)
{
    if (bytes <= g->st.scratch_bytes) return g->d_scratch;
    CUDA_CHECK(cudaStreamSynchronize(st));
    mem_free(MEM_DEVICE, g->d_scratch, g->st.scratch_bytes);
    g->d_scratch = (float *)mem_alloc(MEM_DEVICE, bytes, "gemm_lt timing output");
    g->st.scratch_bytes = g->d_scratch ? bytes : 0;
    /* defined values: the beta != 0 runs read it */
    if (g->d_scratch) CUDA_CHECK(cudaMemsetAsync(g->d_scratch, 0, bytes, st));
    return g->d_scratch;
}

/* One candidate run: cuBLASLt's algorithm i < n, else the suite's skinny variant i - n. */
static int run_candidate(struct gemm_lt *g, const struct kctx *c, struct lt_layouts *l,
                         const cublasLtMatmulHeuristicResult_t *res, int n, int i,
                         const uint16_t *a, const uint16_t *w, float *dst, int m, int nn, int k,
                         float beta, cudaStream_t st)
{
    if (i < n) return matmul(g, c, l, &res[i].algo, a, w, dst, beta, st) == CUBLAS_STATUS_SUCCESS;
    gemm_skinny_run(i - n, st, c->pdl, a, w, dst, m, nn, k, beta);
    return 1;
}

#define LT_TIMED (GEMM_LT_CANDIDATES + GEMM_SKINNY_VARIANTS)

/* Each candidate i with ok[i], GEMM_LT_ITERS runs back to back, captured on the module's stream
 * into exec[i] (the rest NULL): 1, or 0 when a capture or instantiation failed (nothing kept,
 * the error cleared). Nothing runs. */
static int capture_candidates(struct gemm_lt *g, const struct kctx *c, struct lt_layouts *l,
                              const cublasLtMatmulHeuristicResult_t *res, int n, const int *ok,
                              int total, const uint16_t *a, const uint16_t *w, float *dst, int m,
                              int nn, int k, float beta, cudaGraphExec_t *exec)
{
    int good = 1;
    for (int i = 0; i < total; i++)
        exec[i] = NULL;
    for (int i = 0; i < total && good; i++) {
        if (!ok[i]) continue;
        cudaGraph_t graph = NULL;
        if (cudaStreamBeginCapture(g->ts, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
            good = 0;
            break;
        }
        for (int it = 0; it < GEMM_LT_ITERS; it++)
            good &= run_candidate(g, c, l, res, n, i, a, w, dst, m, nn, k, beta, g->ts);
        good &= cudaStreamEndCapture(g->ts, &graph) == cudaSuccess && graph;
        if (good) good = cudaGraphInstantiate(&exec[i], graph, 0) == cudaSuccess;
        if (graph) cudaGraphDestroy(graph);
    }
    if (good) return 1;
    (void)cudaGetLastError();
    for (int i = 0; i < total; i++)
        if (exec[i]) cudaGraphExecDestroy(exec[i]);
    return 0;
}

/* Times cuBLASLt's n candidates and, when allowed, the skinny variants that fit (outside any
 * capture): each in its captured graph on the module's stream (after st's work), or on st
 * itself with stream timing or when a capture failed. The fastest's index, i < n for
 * cuBLASLt's, n + v for skinny variant v. Without room to time: cuBLASLt's first (0), or -1
 * when it has none; -1 too when nothing launched. */
static int fastest(struct gemm_lt *g, const struct kctx *c, struct lt_layouts *l,
                   const cublasLtMatmulHeuristicResult_t *res, int n, int skinny, const uint16_t *a,
                   const uint16_t *w, float *out, int m, int nn, int k, float beta, cudaStream_t st)
{
    /* beta = 0: the real output, which the real product overwrites after; else the scratch */
    float *dst = beta == 0.0f ? out : scratch(g, sizeof(float) * (size_t)m * nn, st);
    if (!dst) return n > 0 ? 0 : -1; /* no room to time: the heuristic's first */
    const int total = n + (skinny ? GEMM_SKINNY_VARIANTS : 0);
    float best_ms[LT_TIMED];
    int ok[LT_TIMED];
    for (int i = 0; i < total; i++) { /* warm-up, and drop what does not launch or fit */
        ok[i] = (i < n || gemm_skinny_fits(i - n, m, nn, k, a, w)) &&
                run_candidate(g, c, l, res, n, i, a, w, dst, m, nn, k, beta, st);
        best_ms[i] = 1e30f;
    }
    CUDA_CHECK(cudaGetLastError());
    cudaGraphExec_t exec[LT_TIMED];
    int graphs = 0;
    cudaStream_t ts = st;
    if (g->graph_timing) {
        graphs = capture_candidates(g, c, l, res, n, ok, total, a, w, dst, m, nn, k, beta, exec);
        g->st.graph_timing_fallbacks += !graphs;
        if (graphs) { /* the module's stream after st's work (the warm-up, a and w) */
            ts = g->ts;
            CUDA_CHECK(cudaEventRecord(g->ev_in, st));
            CUDA_CHECK(cudaStreamWaitEvent(ts, g->ev_in, 0));
            for (int i = 0; i < total; i++) /* each graph once more: its first launch uploads */
                if (ok[i]) CUDA_CHECK(cudaGraphLaunch(exec[i], ts));
        }
    }
    for (int r = 0; r < GEMM_LT_ROUNDS; r++)
        for (int i = 0; i < total; i++) {
            if (!ok[i]) continue;
            CUDA_CHECK(cudaEventRecord(g->ev[0], ts));
            if (graphs)
                CUDA_CHECK(cudaGraphLaunch(exec[i], ts));
            else
                for (int it = 0; it < GEMM_LT_ITERS; it++)
                    PULSE_CHECK(run_candidate(g, c, l, res, n, i, a, w, dst, m, nn, k, beta, st),
                                "gemm_lt: a candidate that launched once failed");
            CUDA_CHECK(cudaEventRecord(g->ev[1], ts));
            CUDA_CHECK(cudaEventSynchronize(g->ev[1]));
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, g->ev[0], g->ev[1]));
            best_ms[i] = ms < best_ms[i] ? ms : best_ms[i];
        }
    for (int i = 0; graphs && i < total; i++)
        if (exec[i]) CUDA_CHECK(cudaGraphExecDestroy(exec[i]));
    int pick = -1, timed = 0;
    for (int i = 0; i < total; i++) {
        timed += ok[i];
        if (ok[i] && (pick < 0 || best_ms[i] < best_ms[pick])) pick = i;
    }
    g->st.shapes_tuned++;
    g->st.shapes_graph_timed += graphs;
    g->st.candidates_timed += timed;
    return pick;
}

/* The plan of key: found, or made now (timed when allowed); NULL when the cache is full. */
static struct lt_plan *plan_for(struct gemm_lt *g, const struct kctx *c, const struct lt_key *key,
                                struct lt_layouts *l, const uint16_t *a, const uint16_t *w,
                                float *out, float beta, cudaStream_t st, struct lt_plan *tmp)
{
    const uint32_t mask = GEMM_LT_MAX_PLANS - 1;
    uint32_t i = (uint32_t)key_hash(key) & mask;
    struct lt_plan *p = NULL;
    for (uint32_t probe = 0; probe < GEMM_LT_MAX_PLANS / 2; probe++, i = (i + 1) & mask) {
        if (g->plans[i].used && key_eq(&g->plans[i].key, key)) return &g->plans[i];
        if (!g->plans[i].used) {
            p = &g->plans[i];
            break;
        }
    }
    if (!p) { /* full (or a long chain): plan this call alone */
        g->st.cache_full++;
        p = tmp;
    }
    memset(p, 0, sizeof *p);
    p->key = *key;
    p->skinny = -1;
    cublasLtMatmulHeuristicResult_t res[GEMM_LT_CANDIDATES];
    const int n = candidates(g, key, l, res);
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(st, &cs));
    /* the suite's kernel has no SM count target: under a reserve, cuBLASLt's alone */
    const int skinny = g->skinny && key->sm_target == 0;
    int skinny_fits = 0; /* any variant of the suite's kernel */
    for (int v = 0; skinny && v < GEMM_SKINNY_VARIANTS; v++)
        skinny_fits |= gemm_skinny_fits(v, key->m, key->n, key->k, a, w);
    int pick = n > 0 ? 0 : -1;
    if (cs != cudaStreamCaptureStatusNone) {
        if (n > 0) g->st.capture_fallbacks++;
    } else if (g->tune && (n > 1 || skinny_fits)) {
        pick = fastest(g, c, l, res, n, skinny, a, w, out, key->m, key->n, key->k, beta, st);
    }
    if (pick >= n) {
        p->skinny = pick - n;
        g->st.shapes_skinny += p != tmp;
    } else if (pick >= 0) {
        p->algo = res[pick].algo;
    }
    p->has_algo = pick >= 0;
    p->used = 1;
    g->st.shapes += p != tmp;
    if (p != tmp) g->st.choice_hash += choice_of(p);
    return p;
}

extern "C" int gemm_lt_run(struct gemm_lt *g, const struct kctx *c, const uint16_t *a,
                           const uint16_t *w, float *out, int m, int n, int k, float beta)
{
    cudaStream_t st = (cudaStream_t)c->stream;
    struct lt_key key;
    memset(&key, 0, sizeof key); /* the padding too: keys are compared field by field anyway */
    key.m = m, key.n = n, key.k = k, key.beta_nz = beta != 0.0f, key.sm_target = g->st.sm_target;
    key.al_a = ptr_align(a), key.al_w = ptr_align(w), key.al_out = ptr_align(out);
    key.ws = c->blas_workspace ? c->blas_workspace_bytes : 0;
    struct lt_layouts l;
    layouts_init(&l, m, n, k);
    struct lt_plan tmp;
    const struct lt_plan *p = plan_for(g, c, &key, &l, a, w, out, beta, st, &tmp);
    if (!p->has_algo) {
        g->st.blas_fallbacks++;
        return -1;
    }
    if (p->skinny >= 0) {
        gemm_skinny_run(p->skinny, st, c->pdl, a, w, out, m, n, k, beta);
        g->st.skinny_calls++;
        return 0;
    }
    CUBLAS_CHECK(matmul(g, c, &l, &p->algo, a, w, out, beta, st));
    g->st.calls++;
    return 0;
}
