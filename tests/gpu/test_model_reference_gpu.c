/* The real-checkpoint check on the cuda backend (tests/model_ref.h): the same checkpoint, the
 * same reference tokens and logits tolerance as test_model_reference on the cpu. Exit 77
 * without a GPU. */
#include "backend.h"
#include "model_ref.h"

int main(void)
{
    if (!backend_cuda_available()) {
        fprintf(stderr, "test_model_reference_gpu: no CUDA device: skipped\n");
        return 77;
    }
    return mref_run("test_model_reference_gpu", "cuda");
}
