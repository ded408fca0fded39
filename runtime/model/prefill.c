#include "prefill.h"

#include "common.h"
#include "mem.h"
#include "numeric.h"

struct prefill {
    struct engine *e;
    struct batch *bt;
    struct batch_entry *en; /* [chunk] */
    int32_t *tok;           /* [chunk] */
    uint64_t seed;
    int chunk, vocab;
    prefill_token_fn prompt; /* real prompts, or NULL for the hashed ids */
    void *prompt_user;
};

struct prefill *prefill_create(struct engine *e, uint64_t seed, int chunk)
{
    PULSE_CHECK(chunk >= 1, "prefill: chunk must be >= 1");
    struct prefill *pf = mem_alloc(MEM_HOST, sizeof *pf, "prefill");
    if (!pf) return NULL;
    *pf =
        (struct prefill){e,     batch_create(e), NULL, NULL, seed, chunk, engine_model(e)->cfg->vocab,
                         NULL, NULL};
    pf->en = mem_alloc(MEM_HOST, sizeof *pf->en * chunk, "prefill entries");
    pf->tok = mem_alloc(MEM_HOST, sizeof *pf->tok * chunk, "prefill tokens");
    if (pf->bt && pf->en && pf->tok) return pf;
    prefill_free(pf);
    return NULL;
}

void prefill_free(struct prefill *pf)
{
    if (!pf) return;
    if (pf->bt) batch_free(pf->e, pf->bt);
    mem_free(MEM_HOST, pf->tok, sizeof *pf->tok * pf->chunk);
    mem_free(MEM_HOST, pf->en, sizeof *pf->en * pf->chunk);
    mem_free(MEM_HOST, pf, sizeof *pf);
}

void prefill_set_prompts(struct prefill *pf, prefill_token_fn fn, void *user)
{
    pf->prompt = fn;
    pf->prompt_user = user;
}

int32_t prefill_token(const struct prefill *pf, int req_id, int i)
{
    if (pf->prompt) {
        const int32_t t = pf->prompt(pf->prompt_user, req_id, i);
        PULSE_CHECK(t >= 0 && t < pf->vocab, "prefill: a prompt token outside the vocabulary");
        return t;
    }
    uint64_t x = (uint64_t)(uint32_t)req_id << 32 | (uint32_t)i;
    return (int32_t)(pulse_hash64(pf->seed ^ 0x70726566696c6cull, x) % (uint64_t)pf->vocab);
}

int32_t prefill_run(struct prefill *pf, const struct kv_cache *kv, int slot, int req_id,
                    int prompt_len, int reserved)
{
    PULSE_CHECK(prompt_len >= 0 && prompt_len < reserved, "prefill: prompt past its reservation");
    if (prompt_len == 0) return engine_first_token(pf->e, req_id);
    for (int i0 = 0; i0 < prompt_len; i0 += pf->chunk) {
        const int n = PULSE_MIN(pf->chunk, prompt_len - i0);
        for (int b = 0; b < n; b++)
            pf->en[b] = (struct batch_entry){slot, req_id, i0 + b, reserved,
                                             prefill_token(pf, req_id, i0 + b)};
        batch_set(pf->e, pf->bt, kv, pf->en, n);
        engine_prefill(pf->e, pf->bt, kv);
    }
    batch_read_tokens(pf->e, pf->bt, pf->tok);
    return pf->tok[0];
}
