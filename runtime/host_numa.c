/* The host's NUMA nodes (host_numa.h). */
#include "host_numa.h"

#include <errno.h>
#include <numa.h>
#include <numaif.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int host_numa_nodes(void)
{
    if (numa_available() < 0) return 1;
    const int n = numa_num_configured_nodes();
    return n > 0 ? n : 1;
}

int host_numa_place(void *p, size_t len, int node, char *err, size_t errlen)
{
    if (numa_available() < 0) {
        snprintf(err, errlen, "NUMA node %d: the kernel has no NUMA support", node);
        return -1;
    }
    /* node ids may have gaps (nodes without memory, a GPU's memory as a node): the set this
     * process may allocate on decides, not the count */
    struct bitmask *allowed = numa_get_mems_allowed();
    const int ok = node >= 0 && allowed && (unsigned)node < allowed->size &&
                   numa_bitmask_isbitset(allowed, (unsigned)node);
    if (allowed) numa_free_nodemask(allowed);
    if (!ok) {
        snprintf(err, errlen, "NUMA node %d: not one this process may allocate on (highest %d)",
                 node, numa_max_node());
        return -1;
    }
    struct bitmask *mask = numa_allocate_nodemask();
    if (!mask) {
        snprintf(err, errlen, "NUMA node %d: no memory for a node mask", node);
        return -1;
    }
    numa_bitmask_setbit(mask, (unsigned)node);
    const long rc = mbind(p, len, MPOL_PREFERRED, mask->maskp, mask->size + 1, 0);
    const int e = errno;
    numa_free_nodemask(mask);
    if (rc != 0) {
        snprintf(err, errlen, "NUMA node %d: mbind refused: %s", node, strerror(e));
        return -1;
    }
    return 0;
}

double host_numa_share(const void *p, size_t len, int node, int samples)
{
    const long page = sysconf(_SC_PAGESIZE);
    if (samples <= 0 || len == 0 || page <= 0) return -1.0;
    const size_t n_pages = (len + (size_t)page - 1) / (size_t)page;
    const int n = (int)(n_pages < (size_t)samples ? n_pages : (size_t)samples);
    void **pages = calloc((size_t)n, sizeof *pages);
    int *status = calloc((size_t)n, sizeof *status);
    double share = -1.0;
    if (pages && status) {
        const uintptr_t base = (uintptr_t)p & ~(uintptr_t)(page - 1);
        for (int i = 0; i < n; i++)
            pages[i] = (void *)(base + (size_t)((double)i * n_pages / n) * (size_t)page);
        /* with no target nodes, move_pages moves nothing and says where each page is (a
         * negative errno for a page not resident) */
        if (move_pages(0, (unsigned long)n, pages, NULL, status, 0) == 0) {
            int resident = 0, on = 0;
            for (int i = 0; i < n; i++) {
                resident += status[i] >= 0;
                on += status[i] == node;
            }
            if (resident) share = (double)on / resident;
        }
    }
    free(pages);
    free(status);
    return share;
}
