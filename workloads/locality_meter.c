/* The locality meter (locality.h, part 3): achieved churn and recall bytes per step and layer,
 * counted from actual selections; also the churn diff shared with the calibration. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "hot_cache.h"
#include "locality.h"
#include "mem.h"

struct locality_meter {
    struct locality_meter_params p;
    int n_lists, ms, n_units, rbins; /* rbins = recall histogram size (chunks 0..rbins-1) */
    size_t chunk_bytes;
    int32_t *prev;    /* [unit][ms] the previous selection */
    int32_t *prev_n;  /* [unit] its count, -1 = none yet */
    int32_t *prev_nb; /* [unit] its block count */
    int64_t *ch_cnt;  /* [layer][LOC_HIST_BINS] churn histogram counts */
    double *ch_sum;   /* [layer][LOC_HIST_BINS] sums of the samples in each bin */
    int64_t *rc_cnt;  /* [layer][rbins] recalled chunks per steady (request, step) */
    struct locality_layer_stats *acc; /* [layer] totals (quantiles filled on read) */
    double *ch_total;                 /* [layer] sum of churn samples */
    struct hot_cache *hc;
    struct hot_cache_result res;
    void *mem;
    size_t mem_bytes;
};

/* ------------------------------------------------------------------ churn of one list */

int locality_count_new(const struct select_cfg *cfg, const int32_t *cur, int n_cur, int nb,
                       const int32_t *prev, int n_prev, int *n_budget)
{
    int c0, c1, j = 0, nn = 0, nbud = 0;
    select_candidates(nb, cfg->sink, cfg->window, &c0, &c1);
    for (int i = 0; i < n_cur; i++) {
        const int32_t blk = cur[i];
        if (blk < c0 || blk >= c1) continue; /* forced: sink, window, tail */
        nbud++;
        while (j < n_prev && prev[j] < blk)
            j++;
        nn += !(j < n_prev && prev[j] == blk);
    }
    *n_budget = nbud;
    return nn;
}

/* ------------------------------------------------------------------ create / free */

static size_t unit_of(const struct locality_meter *m, int slot, int layer, int list)
{
    return ((size_t)slot * m->p.n_layers + layer) * m->n_lists + list;
}

struct locality_meter *locality_meter_create(const struct locality_meter_params *p, char *err,
                                             size_t errlen)
{
    char why[160];
    if (select_cfg_check(&p->sel, why, sizeof why) != 0) {
        snprintf(err, errlen, "locality meter: %s", why);
        return NULL;
    }
    const int ms = select_list_stride(&p->sel); /* the lists' stride (>= what one selects) */
    const char *bad = NULL;
    if (p->n_layers < 1 || p->n_layers > LOC_MAX_LAYERS)
        bad = "n_layers must be in 1..256";
    else if (p->n_slots < 1 || p->n_slots > (1 << 20))
        bad = "n_slots must be in 1..2^20";
    else if (p->hot_slots != 0 && (p->hot_slots < ms || p->hot_slots > (1 << 20)))
        bad = "hot_slots must be 0 (no hot cache) or >= the blocks one step selects";
    if (bad) {
        snprintf(err, errlen, "locality meter: %s", bad);
        return NULL;
    }
    struct locality_meter *m = mem_alloc(MEM_HOST, sizeof *m, "locality meter");
    if (!m) goto oom;
    memset(m, 0, sizeof *m);
    m->p = *p;
    m->ms = ms;
    m->n_lists = p->one_list ? 1 : p->sel.n_kv_heads;
    m->n_units = p->n_slots * p->n_layers * m->n_lists;
    m->rbins = m->n_lists * ms + 1;
    m->chunk_bytes = (size_t)p->sel.block_size * p->sel.head_dim * 2 * sizeof(uint16_t) *
                     (p->one_list ? (size_t)p->sel.n_kv_heads : 1);
    const size_t nu = (size_t)m->n_units, nl = (size_t)p->n_layers;
    size_t sz[] = {nu * ms * 4,
                   nu * 4,
                   nu * 4,
                   nl * LOC_HIST_BINS * 8,
                   nl * LOC_HIST_BINS * 8,
                   nl * m->rbins * 8,
                   nl * sizeof(struct locality_layer_stats),
                   nl * 8,
                   (size_t)ms * 4 * 7};
    size_t off[PULSE_ARRAY_LEN(sz)], total = 0;
    for (size_t i = 0; i < PULSE_ARRAY_LEN(sz); i++)
        off[i] = total, total += (sz[i] + 63) / 64 * 64;
    char *b = mem_alloc(MEM_HOST, total, "locality meter state");
    if (!b) goto oom;
    m->mem = b, m->mem_bytes = total;
    memset(b, 0, total);
    m->prev = (int32_t *)(b + off[0]), m->prev_n = (int32_t *)(b + off[1]);
    m->prev_nb = (int32_t *)(b + off[2]);
    m->ch_cnt = (int64_t *)(b + off[3]), m->ch_sum = (double *)(b + off[4]);
    m->rc_cnt = (int64_t *)(b + off[5]);
    m->acc = (struct locality_layer_stats *)(b + off[6]), m->ch_total = (double *)(b + off[7]);
    int32_t *r = (int32_t *)(b + off[8]);
    m->res = (struct hot_cache_result){r, r + ms, r + 2 * ms, r + 3 * ms, r + 4 * ms, r + 5 * ms,
                                       0, 0,      -1,         -1,         -1};
    for (int u = 0; u < m->n_units; u++)
        m->prev_n[u] = -1;
    if (p->hot_slots) {
        struct hot_cache_params hp = {m->n_units, p->hot_slots, p->sel.sink, p->sel.window};
        if (!(m->hc = hot_cache_create(&hp, why, sizeof why))) {
            snprintf(err, errlen, "locality meter: %s", why);
            locality_meter_free(m);
            return NULL;
        }
    }
    return m;
oom:
    snprintf(err, errlen, "locality meter: out of host memory");
    locality_meter_free(m);
    return NULL;
}

void locality_meter_free(struct locality_meter *m)
{
    if (!m) return;
    hot_cache_free(m->hc);
    mem_free(MEM_HOST, m->mem, m->mem_bytes);
    mem_free(MEM_HOST, m, sizeof *m);
}

void locality_meter_reset(struct locality_meter *m, int slot)
{
    PULSE_CHECK(slot >= 0 && slot < m->p.n_slots, "locality_meter_reset: slot out of range");
    for (int l = 0; l < m->p.n_layers; l++)
        for (int k = 0; k < m->n_lists; k++) {
            size_t u = unit_of(m, slot, l, k);
            m->prev_n[u] = -1;
            if (m->hc) hot_cache_reset(m->hc, (int)u);
        }
}

size_t locality_meter_chunk_bytes(const struct locality_meter *m)
{
    return m->chunk_bytes;
}

/* ------------------------------------------------------------------ add */

/* A selection list must be strictly ascending inside [0, nb). */
static int list_ok(const int32_t *s, int n, int nb, int ms)
{
    if (n < 0 || n > ms) return 0;
    for (int i = 0; i < n; i++)
        if (s[i] < 0 || s[i] >= nb || (i > 0 && s[i] <= s[i - 1])) return 0;
    return 1;
}

int locality_meter_add(struct locality_meter *m, int layer, const int32_t *slots,
                       const int32_t *n_tokens, const int32_t *sel_idx, const int32_t *sel_count,
                       int batch)
{
    if (layer < 0 || layer >= m->p.n_layers) return PULSE_ERR_INVALID;
    const int nl = m->n_lists, ms = m->ms;
    struct locality_layer_stats *a = &m->acc[layer];
    int64_t *ch_cnt = m->ch_cnt + (size_t)layer * LOC_HIST_BINS;
    double *ch_sum = m->ch_sum + (size_t)layer * LOC_HIST_BINS;
    for (int b = 0; b < batch; b++) {
        const int slot = slots[b];
        const int nb = n_tokens[b] >= 1 ? PULSE_CEIL_DIV(n_tokens[b], m->p.sel.block_size) : 0;
        if (slot < 0 || slot >= m->p.n_slots || nb < 1 || nb > m->p.sel.max_blocks)
            return PULSE_ERR_INVALID;
        for (int l = 0; l < nl; l++)
            if (!list_ok(sel_idx + ((size_t)b * nl + l) * ms, sel_count[(size_t)b * nl + l], nb,
                         ms))
                return PULSE_ERR_INVALID;
        int steady = 1;
        int64_t chunks = 0;
        for (int l = 0; l < nl; l++) {
            const int32_t *cur = sel_idx + ((size_t)b * nl + l) * ms;
            const int n = sel_count[(size_t)b * nl + l];
            const size_t u = unit_of(m, slot, layer, l);
            int32_t *prev = m->prev + u * ms;
            const int had = m->prev_n[u] >= 0;
            int nn = 0, nbud = 0;
            steady &= had;
            if (had) {
                nn = locality_count_new(&m->p.sel, cur, n, nb, prev, m->prev_n[u], &nbud);
                if (nbud > 0) {
                    double c = (double)nn / nbud;
                    int bin = PULSE_MIN((int)(c * LOC_HIST_BINS), LOC_HIST_BINS - 1);
                    ch_cnt[bin]++, ch_sum[bin] += c, m->ch_total[layer] += c;
                    a->churn_samples++;
                    a->new_blocks += nn;
                    if (c > a->churn_max) a->churn_max = c;
                }
            }
            int recalls = had ? nn : n;
            if (m->hc) {
                int tail_new = had && nb > m->prev_nb[u];
                if (hot_cache_access(m->hc, (int)u, cur, n, nb, tail_new, &m->res) != PULSE_OK)
                    return PULSE_ERR_INVALID;
                recalls = m->res.n_recalls;
            }
            chunks += recalls;
            memcpy(prev, cur, sizeof(int32_t) * (size_t)n);
            m->prev_n[u] = n;
            m->prev_nb[u] = nb;
        }
        const int64_t bytes = chunks * (int64_t)m->chunk_bytes;
        if (steady) {
            m->rc_cnt[(size_t)layer * m->rbins + chunks]++;
            a->steps++;
            a->recall_bytes_total += bytes;
            a->recall_chunks_total += chunks;
            if ((double)bytes > a->recall_bytes_max) a->recall_bytes_max = (double)bytes;
        } else {
            a->cold_steps++;
            a->cold_recall_bytes += bytes;
        }
    }
    return PULSE_OK;
}

/* ------------------------------------------------------------------ read back */

/* The k-th smallest churn sample (0-based) of a layer, as its bin's mean. */
static double churn_kth(const struct locality_meter *m, int layer, int64_t k)
{
    const int64_t *cnt = m->ch_cnt + (size_t)layer * LOC_HIST_BINS;
    const double *sum = m->ch_sum + (size_t)layer * LOC_HIST_BINS;
    for (int i = 0; i < LOC_HIST_BINS; i++) {
        if (k < cnt[i]) return sum[i] / (double)cnt[i];
        k -= cnt[i];
    }
    return 0.0;
}

static int64_t recall_kth(const struct locality_meter *m, int layer, int64_t k)
{
    const int64_t *cnt = m->rc_cnt + (size_t)layer * m->rbins;
    for (int i = 0; i < m->rbins; i++) {
        if (k < cnt[i]) return i;
        k -= cnt[i];
    }
    return 0;
}

double locality_meter_churn_quantile(const struct locality_meter *m, int layer, double p)
{
    PULSE_CHECK(layer >= 0 && layer < m->p.n_layers, "locality_meter: layer out of range");
    const int64_t n = m->acc[layer].churn_samples;
    if (n == 0) return 0.0;
    p = p < 0.0 ? 0.0 : p > 1.0 ? 1.0 : p;
    double rank = p * (double)(n - 1);
    int64_t lo = (int64_t)floor(rank), hi = (int64_t)ceil(rank);
    double vlo = churn_kth(m, layer, lo), vhi = hi == lo ? vlo : churn_kth(m, layer, hi);
    return vlo + (vhi - vlo) * (rank - (double)lo);
}

static double recall_quantile(const struct locality_meter *m, int layer, double p)
{
    const int64_t n = m->acc[layer].steps;
    if (n == 0) return 0.0;
    double rank = p * (double)(n - 1);
    int64_t lo = (int64_t)floor(rank), hi = (int64_t)ceil(rank);
    double vlo = (double)recall_kth(m, layer, lo);
    double vhi = hi == lo ? vlo : (double)recall_kth(m, layer, hi);
    return (vlo + (vhi - vlo) * (rank - (double)lo)) * (double)m->chunk_bytes;
}

void locality_meter_layer_stats(const struct locality_meter *m, int layer,
                                struct locality_layer_stats *out)
{
    PULSE_CHECK(layer >= 0 && layer < m->p.n_layers, "locality_meter: layer out of range");
    *out = m->acc[layer];
    if (out->churn_samples) {
        out->churn_mean = m->ch_total[layer] / (double)out->churn_samples;
        out->churn_median = locality_meter_churn_quantile(m, layer, 0.5);
        out->churn_p90 = locality_meter_churn_quantile(m, layer, 0.9);
        out->churn_p99 = locality_meter_churn_quantile(m, layer, 0.99);
    }
    if (out->steps) {
        out->recall_bytes_mean = (double)out->recall_bytes_total / (double)out->steps;
        out->recall_bytes_median = recall_quantile(m, layer, 0.5);
        out->recall_bytes_p90 = recall_quantile(m, layer, 0.9);
        out->recall_bytes_p99 = recall_quantile(m, layer, 0.99);
    }
}

/* The selection the meter's lists came from, by name. */
static const char *meter_selection(const struct locality_meter *m)
{
    return m->p.selection ? m->p.selection : m->p.one_list ? "solohead" : "headwise";
}

int locality_meter_to_profile(const struct locality_meter *m, struct locality_profile *out,
                              const char *model, char *err, size_t errlen)
{
    static const double lv[] = {0.0, 0.10, 0.25, 0.50, 0.75, 0.90, 0.99, 1.0};
    memset(out, 0, sizeof *out);
    out->n_layers = m->p.n_layers;
    out->n_levels = (int)PULSE_ARRAY_LEN(lv);
    memcpy(out->levels, lv, sizeof lv);
    snprintf(out->source, sizeof out->source, "measured");
    snprintf(out->model, sizeof out->model, "%s", model ? model : "");
    snprintf(out->selection, sizeof out->selection, "%s", meter_selection(m));
    out->budget_blocks = m->p.sel.budget;
    out->block_size = m->p.sel.block_size;
    int64_t total = 0;
    for (int l = 0; l < out->n_layers; l++) {
        const int64_t n = m->acc[l].churn_samples;
        out->samples[l] = n;
        total += n;
        out->dense[l] = n == 0;
        for (int k = 0; n && k < out->n_levels; k++)
            out->churn[l][k] = locality_meter_churn_quantile(m, l, lv[k]);
    }
    if (total == 0) {
        snprintf(err, errlen, "locality meter: no churn samples to write a profile from");
        return PULSE_ERR_INVALID;
    }
    return PULSE_OK;
}

json_t *locality_meter_to_json(const struct locality_meter *m,
                               const struct locality_profile *target)
{
    json_t *layers = json_array();
    int64_t steps = 0, bytes = 0, samples = 0, cold = 0;
    for (int l = 0; l < m->p.n_layers; l++) {
        struct locality_layer_stats s;
        locality_meter_layer_stats(m, l, &s);
        json_t *ch =
            json_pack("{s:I, s:f, s:f, s:f, s:f, s:f}", "samples", (json_int_t)s.churn_samples,
                      "mean", s.churn_mean, "median", s.churn_median, "p90", s.churn_p90, "p99",
                      s.churn_p99, "max", s.churn_max);
        if (target && l < target->n_layers && !target->dense[l]) {
            json_object_set_new(ch, "target_mean", json_real(locality_profile_mean(target, l)));
            json_object_set_new(ch, "target_median",
                                json_real(locality_profile_quantile(target, l, 0.5)));
            json_object_set_new(ch, "target_p90",
                                json_real(locality_profile_quantile(target, l, 0.9)));
        }
        json_t *rb = json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:I}", "steps", (json_int_t)s.steps,
                               "mean", s.recall_bytes_mean, "median", s.recall_bytes_median, "p90",
                               s.recall_bytes_p90, "p99", s.recall_bytes_p99, "max",
                               s.recall_bytes_max, "total", (json_int_t)s.recall_bytes_total);
        json_array_append_new(
            layers, json_pack("{s:i, s:o, s:o, s:I, s:I, s:I}", "layer", l, "churn", ch,
                              "recall_bytes_per_step", rb, "new_blocks", (json_int_t)s.new_blocks,
                              "cold_steps", (json_int_t)s.cold_steps, "cold_recall_bytes",
                              (json_int_t)s.cold_recall_bytes));
        steps += s.steps, bytes += s.recall_bytes_total, samples += s.churn_samples;
        cold += s.cold_recall_bytes;
    }
    json_t *totals = json_pack("{s:I, s:I, s:I, s:I}", "churn_samples", (json_int_t)samples,
                               "steady_steps", (json_int_t)steps, "recall_bytes", (json_int_t)bytes,
                               "cold_recall_bytes", (json_int_t)cold);
    return json_pack("{s:s, s:i, s:I, s:i, s:o, s:o}", "selection", meter_selection(m), "hot_slots",
                     m->p.hot_slots, "chunk_bytes", (json_int_t)m->chunk_bytes, "budget_blocks",
                     m->p.sel.budget, "layers", layers, "totals", totals);
}
