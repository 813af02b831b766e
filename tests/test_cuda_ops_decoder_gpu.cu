// build: -lcublas -lcublasLt
// requires: have_cuda_lib nvidia-cuda-dev cublas_v2.h cublasCreate_v2 -lcublas && have_cuda_lib nvidia-cuda-dev cublasLt.h cublasLtCreate -lcublasLt
/* tests/test_cuda_ops_decoder_gpu.cu - tests/test_cuda_ops_decoder.cpp compiled by nvcc:
   the >>ops2 kernels against the CPU backend on a real GPU. Without a GPU
   it prints "nothing to test" and "0 passed, 0 failed" (the nvcc build check). */
#include "test_cuda_ops_decoder.cpp"
