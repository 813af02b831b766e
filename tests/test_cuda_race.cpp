// build: -O1 -g1 -fsanitize=thread -Wno-maybe-uninitialized
/* tests/test_cuda_race.cpp - tests/test_cuda_kernels.cpp built with
   ThreadSanitizer: the CUDA-on-CPU harness then works as a race detector
   (see tests/cuda_on_cpu.h), and every kernel of train_cuda.h runs through
   it. Any access pair within a block that no __syncthreads, warp
   collective or atomic orders is reported, and the report fails the test
   (TSan's exit code). tests/test_cuda_sanitizers.sh checks that it does
   report the two races of --race-demo and --race-demo-barrier. */
#include "test_cuda_kernels.cpp"
