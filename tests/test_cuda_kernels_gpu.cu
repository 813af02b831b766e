// build: -lcublas -lcublasLt
// requires: have_cuda_lib nvidia-cuda-dev cublas_v2.h cublasCreate_v2 -lcublas && have_cuda_lib nvidia-cuda-dev cublasLt.h cublasLtCreate -lcublasLt
/* tests/test_cuda_kernels_gpu.cu - tests/test_cuda_kernels.cpp compiled by nvcc:
   the same checks of every kernel against the CPU backend, and the same 10
   training steps, on a real GPU.

   On a machine without a GPU it prints "no CUDA device ... nothing to test"
   and "0 passed, 0 failed": there it is only the nvcc compile-and-link
   check of train_cuda.h (build.sh fails if nvcc cannot build it), and the
   kernels are tested on the CPU by tests/bin/test_cuda_kernels. */
#include "test_cuda_kernels.cpp"
