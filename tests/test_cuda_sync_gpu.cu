// build: -lcublas -lcublasLt
// requires: have_cuda_lib nvidia-cuda-dev cublas_v2.h cublasCreate_v2 -lcublas && have_cuda_lib nvidia-cuda-dev cublasLt.h cublasLtCreate -lcublasLt
/* tests/test_cuda_sync_gpu.cu - tests/test_cuda_sync.cpp compiled by
   nvcc: the kernels of the sync-free step against the CPU backend, and
   GPT-2 steps with the loss and the gradient norm read back
   asynchronously, on a real GPU (the host-wait counts need the harness).
   Without a GPU it prints the reason and "0 passed, 0 failed". */
#include "test_cuda_sync.cpp"
