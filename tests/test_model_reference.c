/* The real-checkpoint check on the cpu backend: tests/model_ref.h. */
#include "model_ref.h"

int main(void)
{
    return mref_run("test_model_reference", "cpu");
}
