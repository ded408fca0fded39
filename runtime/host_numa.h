/* The host's NUMA nodes, through libnuma: how many there are, placing a range's pages on one
 * node before they are touched, and where a range's pages are. The pinned host pool is placed on
 * the node nearest the GPU (mem.h, MEM_PIN_REGISTER), so that its recalls do not cross the
 * socket link on a host of several nodes. */
#ifndef PULSE_HOST_NUMA_H
#define PULSE_HOST_NUMA_H

#include <stddef.h>

/* NUMA nodes with memory; 1 where the kernel has no NUMA support. */
int host_numa_nodes(void);
/* Asks that the pages of [p, p + len) (page aligned) be allocated on `node` when first touched
 * (preferred: another node when it has no free memory). 0, or -1 with a one-line reason in err
 * (no NUMA support, a node this process may not allocate on, or the kernel refusing the
 * policy: a container's seccomp profile may). */
int host_numa_place(void *p, size_t len, int node, char *err, size_t errlen);
/* The fraction of the range's resident pages that are on `node`, from `samples` pages spread
 * evenly over it; -1 when none of them is resident or the kernel cannot say. */
double host_numa_share(const void *p, size_t len, int node, int samples);

#endif
