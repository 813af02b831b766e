// build: -lcublas -lcublasLt
// requires: test -f examples/gpt2.c && have_cuda_lib nvidia-cuda-dev cublas_v2.h cublasCreate_v2 -lcublas && have_cuda_lib nvidia-cuda-dev cublasLt.h cublasLtCreate -lcublasLt
/* tests/test_cuda_add_layernorm_gpu.cu - tests/test_cuda_add_layernorm.cpp
   compiled by nvcc: the fused residual add + layernorm against the unfused
   kernels, and GPT-2 with and without it, on a real GPU. Without a GPU it
   prints "no CUDA device ... nothing to test" and "0 passed, 0 failed"
   (the nvcc build check). */
#include "test_cuda_add_layernorm.cpp"
