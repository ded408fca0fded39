/* The dense point fixture (bench_batch.h). */
#include "bench_batch.h"

#include <stdio.h>
#include <string.h>

#include "common.h"
#include "mem.h"

static struct kv_cache_params cache_params(const struct model_config *m, int batch, int reserved,
                                           int page_size)
{
    struct kv_cache_params kp = {m->n_layers, m->n_kv_heads, m->head_dim, page_size,
                                 0,           batch,         reserved};
    kp.budget_bytes = (size_t)batch * kv_cache_params_request_bytes(&kp, reserved);
    return kp;
}

size_t bench_batch_kv_bytes(const struct model_config *m, int batch, int reserved, int page_size)
{
    return cache_params(m, batch, reserved, page_size).budget_bytes;
}

int bench_batch_create(struct engine *e, int batch, int ctx, int reserved, int page_size,
                       struct bench_batch *out, char *err, size_t errlen)
{
    const struct model *mo = engine_model(e);
    const struct kv_cache_params kp = cache_params(mo->cfg, batch, reserved, page_size);
    memset(out, 0, sizeof *out);
    out->kv_bytes = kp.budget_bytes;
    struct batch_entry *en = mem_alloc(MEM_HOST, sizeof *en * (size_t)batch, "bench entries");
    if (!en) return pulse_errorf(err, errlen, PULSE_ERR_OOM, "bench", "no host memory");
    if (!(out->kv = kv_cache_create(&kp, mo->be, engine_ctx(e), err, errlen)) ||
        !(out->bt = batch_create(e))) {
        if (out->kv) snprintf(err, errlen, "backend %s: out of memory for a batch", mo->be->name);
        mem_free(MEM_HOST, en, sizeof *en * (size_t)batch);
        bench_batch_free(e, out);
        out->kv_bytes = kp.budget_bytes;
        return PULSE_ERR_OOM;
    }
    for (int b = 0; b < batch; b++) {
        int slot;
        PULSE_CHECK(kv_cache_admit(out->kv, reserved, &slot) == PULSE_OK, "bench admission");
        en[b] = (struct batch_entry){slot, b, ctx, reserved, engine_first_token(e, b)};
    }
    batch_set(e, out->bt, out->kv, en, batch);
    engine_fill_prompt(e, out->bt, out->kv);
    mo->be->sync(engine_ctx(e));
    mem_free(MEM_HOST, en, sizeof *en * (size_t)batch);
    return PULSE_OK;
}

void bench_batch_free(struct engine *e, struct bench_batch *b)
{
    if (b->bt) batch_free(e, b->bt);
    kv_cache_free(b->kv);
    memset(b, 0, sizeof *b);
}
