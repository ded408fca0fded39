#include "accuracy/head_mass.h"

#include <string.h>

#include "common.h"
#include "mam.h"
#include "mem.h"

/* runtime/select/mam.h's accumulator twice (KV-head and query-head selectors), fed by one engine probe
 * (which stages q and the pages from device memory once for both and skips sliding-window
 * layers). */
struct head_mass {
    const struct model_config *c;
    struct mam_acc *acc_kv, *acc_q;
    struct mam_probe *probe;
};

struct head_mass *head_mass_create(struct engine *e, const struct kv_cache *kv, int page_size,
                                   int max_tokens, int budget_tokens, int sink, int window,
                                   char *err, size_t errlen)
{
    (void)kv;
    const struct model *m = engine_model(e);
    const struct model_config *c = m->cfg;
    if (page_size < 1 || max_tokens < 1 || budget_tokens < 0 || budget_tokens % page_size) {
        snprintf(err, errlen, "head mass: budget %d is not a multiple of the block size %d",
                 budget_tokens, page_size);
        return NULL;
    }
    struct head_mass *hm = mem_alloc(MEM_HOST, sizeof *hm, "head mass");
    if (!hm) return NULL;
    memset(hm, 0, sizeof *hm);
    hm->c = c;
    struct mam_params mp = {c->n_layers,
                            c->n_heads,
                            c->n_kv_heads,
                            c->head_dim,
                            page_size,
                            budget_tokens / page_size,
                            sink,
                            window,
                            1,
                            max_tokens,
                            0.0f,
                            0,
                            c->sliding_window > 0 ? c->sliding_pattern : 0};
    struct mam_params mq = mp;
    mq.query_selectors = 1;
    if (!(hm->acc_kv = mam_acc_create(&mp, err, errlen)) ||
        !(hm->acc_q = mam_acc_create(&mq, err, errlen)) ||
        !(hm->probe = mam_probe_create(hm->acc_q, m->be, engine_ctx(e), 0, err, errlen)) ||
        mam_probe_also_feed(hm->probe, hm->acc_kv, err, errlen) != PULSE_OK) {
        head_mass_free(hm);
        return NULL;
    }
    return hm;
}

void head_mass_free(struct head_mass *hm)
{
    if (!hm) return;
    mam_probe_free(hm->probe);
    mam_acc_free(hm->acc_q);
    mam_acc_free(hm->acc_kv);
    mem_free(MEM_HOST, hm, sizeof *hm);
}

void head_mass_reset(struct head_mass *hm)
{
    mam_acc_reset(hm->acc_q);
    mam_acc_reset(hm->acc_kv);
}

struct engine_layer_hook head_mass_hook(struct head_mass *hm)
{
    return mam_probe_hook(hm->probe);
}

void head_mass_table(const struct head_mass *hm, int query_heads, double *mam, int64_t *obs)
{
    const struct mam_acc *a = query_heads ? hm->acc_q : hm->acc_kv;
    mam_acc_table(a, mam);
    for (int l = 0; l < hm->c->n_layers; l++) /* a term per query head per step */
        obs[l] = mam_acc_terms(a, l) / hm->c->n_heads;
}

void head_mass_selectors(const double *mam, int n_layers, int n_sel, int reversed, int32_t *out)
{
    for (int l = 0; l < n_layers; l++) {
        const double *r = mam + (size_t)l * n_sel;
        int best = 0;
        for (int h = 1; h < n_sel; h++)
            if (reversed ? r[h] < r[best] : r[h] > r[best]) best = h;
        out[l] = best;
    }
}
