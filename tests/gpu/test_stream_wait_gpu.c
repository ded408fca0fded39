/* What a device-side wait (cuStreamWaitValue32) holds up, on this GPU and driver. A waiter
 * stream queues a wait on a pinned flag and then one operation (nothing, a kernel, an H2D copy,
 * a D2H copy, a D2H copy into pageable memory made by a second thread, which the driver does not
 * return from until the copy has run); after that a signaller stream queues a recall-sized transfer (an H2D copy, or the
 * zero-copy gather kernel) and the write of the flag. If the waiter's operation shares a queue
 * with the signaller's transfer, the transfer never runs and neither stream finishes. Each case
 * runs in its own process (CUDA starts after the fork) under a 10 s alarm. The offload step's
 * device wait relies on a kernel behind the wait never holding up either transfer: asserted;
 * the copies behind a wait are reported. Exit 77 without a GPU. */
#include <cuda_runtime.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include "recall.h"
#include "stream_value.h"
#include "testutil.h"

enum { W_NONE, W_KERNEL, W_H2D, W_D2H, W_D2H_PAGEABLE, W_N };
enum { S_H2D, S_KERNEL, S_N };
static const char *wname[W_N] = {"nothing", "a kernel", "an H2D copy", "a D2H copy",
                                 "a D2H copy to pageable memory, from another thread"};
static const char *sname[S_N] = {"H2D copy", "gather kernel"};

#define BIG ((size_t)8 << 20)
#define SMALL ((size_t)64 << 10)

static int ok(cudaError_t e) { return e == cudaSuccess; }

struct pageable_copy {
    void *stream, *dst;
    const void *src;
};

static void *pageable_copy_main(void *arg)
{
    const struct pageable_copy *c = arg;
    cudaMemcpyAsync(c->dst, c->src, SMALL, cudaMemcpyDeviceToHost, (cudaStream_t)c->stream);
    return NULL;
}

/* One case; the process's exit status: 0 done, 2 CUDA error (a hang never returns). */
static int run_case(int w, int s)
{
    uint32_t *flag;
    char *h_big, *h_small, *d_big, *d_small;
    struct recall_desc *d_desc;
    if (!ok(cudaHostAlloc((void **)&flag, 64, cudaHostAllocMapped)) ||
        !ok(cudaHostAlloc((void **)&h_big, BIG, cudaHostAllocMapped)) ||
        !ok(cudaHostAlloc((void **)&h_small, SMALL, cudaHostAllocMapped)) ||
        !ok(cudaMalloc((void **)&d_big, BIG)) || !ok(cudaMalloc((void **)&d_small, SMALL)) ||
        !ok(cudaMalloc((void **)&d_desc, 2 * sizeof *d_desc)))
        return 2;
    for (size_t i = 0; i < BIG; i++) h_big[i] = (char)(i * 7 + 1);
    memset(h_small, 3, SMALL);
    *flag = 0;
    void *sh_big, *sh_small;
    if (!ok(cudaHostGetDevicePointer(&sh_big, h_big, 0)) ||
        !ok(cudaHostGetDevicePointer(&sh_small, h_small, 0)))
        return 2;
    const struct recall_desc hd[2] = {
        {(uint64_t)(uintptr_t)sh_small, (uint64_t)(uintptr_t)d_small, SMALL, 0},
        {(uint64_t)(uintptr_t)sh_big, (uint64_t)(uintptr_t)d_big, BIG, 0}};
    if (!ok(cudaMemcpy(d_desc, hd, sizeof hd, cudaMemcpyHostToDevice))) return 2;
    recall_kernels_load();
    void *a = pulse_cuda_stream_acquire(0), *b = pulse_cuda_stream_acquire(1);
    pulse_cuda_wait_value(a, flag, 1);
    switch (w) {
    case W_KERNEL:
        recall_gather_cuda(d_desc, 1, 1, 256, RECALL_ZC_INFLIGHT_KB, a);
        break;
    case W_H2D:
        if (!ok(cudaMemcpyAsync(d_small, h_small, SMALL, cudaMemcpyHostToDevice, a))) return 2;
        break;
    case W_D2H:
        if (!ok(cudaMemcpyAsync(h_small, d_small, SMALL, cudaMemcpyDeviceToHost, a))) return 2;
        break;
    default:
        break;
    }
    pthread_t th;
    struct pageable_copy pc = {a, malloc(SMALL), d_small};
    if (w == W_D2H_PAGEABLE && (!pc.dst || pthread_create(&th, NULL, pageable_copy_main, &pc)))
        return 2;
    usleep(20000); /* the waiter's work is in its queue before the signaller's */
    if (s == S_H2D) {
        if (!ok(cudaMemcpyAsync(d_big, h_big, BIG, cudaMemcpyHostToDevice, b))) return 2;
    } else {
        recall_gather_cuda(d_desc + 1, 1, 16, 256, RECALL_ZC_INFLIGHT_KB, b);
    }
    if (pulse_cuda_write_value(b, flag, 1) != 0) return 2;
    if (!ok(cudaStreamSynchronize(b)) || !ok(cudaStreamSynchronize(a))) return 2;
    if (w == W_D2H_PAGEABLE) pthread_join(th, NULL);
    free(pc.dst);
    char *back = malloc(BIG);
    if (!back || !ok(cudaMemcpy(back, d_big, BIG, cudaMemcpyDeviceToHost))) return 2;
    const int same = memcmp(back, h_big, BIG) == 0;
    free(back);
    return same ? 0 : 3;
}

/* 0 done, 1 hung (killed by the alarm), 2 a CUDA error, 3 wrong bytes. */
static int in_child(int w, int s)
{
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        alarm(10);
        _exit(run_case(w, s));
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (WIFSIGNALED(st)) return WTERMSIG(st) == SIGALRM ? 1 : 2;
    return WEXITSTATUS(st);
}

int main(void)
{
    /* the parent makes no CUDA call (CUDA does not survive a fork) */
    if (access("/dev/nvidiactl", F_OK) != 0) {
        printf("test_stream_wait_gpu: no GPU, skipped\n");
        return 77;
    }
    static const char *what[] = {"completes", "HANGS", "CUDA error", "wrong bytes"};
    for (int w = 0; w < W_N; w++)
        for (int s = 0; s < S_N; s++) {
            const int r = in_child(w, s);
            printf("waiter: wait, then %s; signaller: %s, then the flag: %s\n", wname[w],
                   sname[s], what[r]);
            if (w == W_NONE || w == W_KERNEL) EXPECT_EQ_INT(r, 0);
            else EXPECT(r == 0 || r == 1);
        }
    return tu_finish("test_stream_wait_gpu");
}
