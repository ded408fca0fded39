/* The GPU activity summary's arithmetic (gpu_activity.h), on every build; the collector is
 * gpu_activity_cuda.c, and without CUDA start refuses. */
#include "gpu_activity.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static int by_start(const void *a, const void *b)
{
    const struct gpu_interval *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start ? 1 : 0;
}

uint64_t gpu_interval_union(struct gpu_interval *iv, size_t n, uint64_t *first, uint64_t *last)
{
    if (first) *first = 0;
    if (last) *last = 0;
    if (n == 0) return 0;
    qsort(iv, n, sizeof *iv, by_start);
    uint64_t total = 0, lo = iv[0].start, hi = iv[0].end, end = iv[0].end;
    for (size_t i = 1; i < n; i++) {
        if (iv[i].end > end) end = iv[i].end;
        if (iv[i].start > hi) { /* a gap: close the run */
            total += hi - lo;
            lo = iv[i].start;
            hi = iv[i].end;
        } else if (iv[i].end > hi) {
            hi = iv[i].end;
        }
    }
    total += hi - lo;
    if (first) *first = iv[0].start;
    if (last) *last = end;
    return total;
}

size_t gpu_interval_merge(struct gpu_interval *iv, size_t n)
{
    if (n == 0) return 0;
    qsort(iv, n, sizeof *iv, by_start);
    size_t m = 0;
    for (size_t i = 1; i < n; i++) {
        if (iv[i].start <= iv[m].end) {
            if (iv[i].end > iv[m].end) iv[m].end = iv[i].end;
        } else {
            iv[++m] = iv[i];
        }
    }
    return m + 1;
}

uint64_t gpu_interval_cover(const struct gpu_interval *iv, size_t m, uint64_t lo, uint64_t hi)
{
    size_t a = 0, b = m; /* the first interval ending after lo */
    while (a < b) {
        const size_t mid = (a + b) / 2;
        if (iv[mid].end <= lo)
            a = mid + 1;
        else
            b = mid;
    }
    uint64_t t = 0;
    for (size_t i = a; i < m && iv[i].start < hi; i++) {
        const uint64_t s = iv[i].start > lo ? iv[i].start : lo, e = iv[i].end < hi ? iv[i].end : hi;
        if (e > s) t += e - s;
    }
    return t;
}

const double gpu_gap_bin_us[GPU_GAP_BINS - 1] = {2, 5, 10, 50, 200};

static int labeled_by_start(const void *a, const void *b)
{
    const struct gpu_labeled *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start ? 1 : 0;
}

uint64_t gpu_gaps(struct gpu_labeled *iv, size_t n, const struct gpu_interval *excl, size_t m,
                  int n_labels, uint64_t *gap_ns, int64_t *gap_n, uint64_t *hist_ns,
                  int64_t *hist_n)
{
    if (n == 0) return 0;
    qsort(iv, n, sizeof *iv, labeled_by_start);
    uint64_t total = 0, end = iv[0].end;
    int32_t last = iv[0].label; /* the record that ends last so far */
    for (size_t i = 1; i < n; i++) {
        if (iv[i].start > end) {
            const uint64_t g = iv[i].start - end - gpu_interval_cover(excl, m, end, iv[i].start);
            if (g > 0) {
                total += g;
                if (last >= 0 && last < n_labels) gap_ns[last] += g, gap_n[last]++;
                int b = 0;
                while (b < GPU_GAP_BINS - 1 && (double)g >= gpu_gap_bin_us[b] * 1e3)
                    b++;
                hist_ns[b] += g, hist_n[b]++;
            }
        }
        if (iv[i].end > end) end = iv[i].end, last = iv[i].label;
    }
    return total;
}

int gpu_kernel_is_recall(const char *sym)
{
    char n[128];
    gpu_kernel_short_name(sym, n, sizeof n);
    return strstr(n, "gather_kernel") || strstr(n, "scatter_kernel");
}

/* One <length><identifier> of a mangled name at *p into out at *at; 0 when *p holds none. */
static int mangled_part(const char **p, char *out, size_t n, size_t *at)
{
    if (!isdigit((unsigned char)**p)) return 0;
    char *e;
    unsigned long len = strtoul(*p, &e, 10);
    if (len == 0 || strnlen(e, len) < len) return 0;
    static const char anon[] = "_GLOBAL__N"; /* gcc's _GLOBAL__N_1, nvcc's _GLOBAL__N__<id> */
    if (!(len >= sizeof anon - 1 && memcmp(e, anon, sizeof anon - 1) == 0)) {
        int w = snprintf(out + *at, n - *at, "%s%.*s", *at ? "::" : "", (int)len, e);
        *at = w < 0 ? *at : PULSE_MIN(n - 1, *at + (size_t)w);
    }
    *p = e + len;
    return 1;
}

char *gpu_kernel_short_name(const char *sym, char *out, size_t n)
{
    if (n == 0) return out;
    out[0] = 0;
    if (!sym) return out;
    if (strncmp(sym, "_Z", 2) != 0) {
        snprintf(out, n, "%s", sym);
        return out;
    }
    const char *p = sym + 2;
    size_t at = 0;
    if (*p == 'L') p++;
    if (*p == 'N') {
        p++;
        while (*p == 'K' || *p == 'V')
            p++;
        while (mangled_part(&p, out, n, &at)) {
        }
    } else {
        mangled_part(&p, out, n, &at);
    }
    if (at == 0) { /* not a form read here: the symbol itself */
        snprintf(out, n, "%s", sym);
        return out;
    }
    if (*p == 'I' && at + 5 < n) memcpy(out + at, "<...>", 6);
    return out;
}

#ifndef PULSE_HAVE_CUDA
struct gpu_activity *gpu_activity_start(int max_records, char *err, size_t errlen)
{
    (void)max_records;
    snprintf(err, errlen, "GPU activity (CUPTI) needs a CUDA build and the cuda backend");
    return NULL;
}

json_t *gpu_activity_stop(struct gpu_activity *a, int top, double bin_s)
{
    (void)a;
    (void)top;
    (void)bin_s;
    return NULL;
}

void gpu_activity_exclude_host(double t0, double t1)
{
    (void)t0;
    (void)t1;
}
#endif
