// build: -lcublas -lcublasLt
// requires: have_cuda_lib nvidia-cuda-dev cublas_v2.h cublasCreate_v2 -lcublas && have_cuda_lib nvidia-cuda-dev cublasLt.h cublasLtCreate -lcublasLt
/* tests/test_cuda_fa2_bf16_gpu.cu - tests/test_cuda_fa2_bf16.cpp compiled by
   nvcc: the FlashAttention-2 kernels (real mma.sync, ldmatrix, cp.async)
   against the materialized CPU reference on a real GPU, and the fragment
   layouts of the real instructions against a plain product (the same
   checks the harness's emulation passes). Without a GPU it says "nothing
   to test" (the nvcc build check). */
#include "test_cuda_fa2_bf16.cpp"
