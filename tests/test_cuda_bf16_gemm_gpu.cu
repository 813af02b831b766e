// build: -lcublas -lcublasLt
// requires: have_cuda_lib nvidia-cuda-dev cublas_v2.h cublasCreate_v2 -lcublas && have_cuda_lib nvidia-cuda-dev cublasLt.h cublasLtCreate -lcublasLt
/* tests/test_cuda_bf16_gemm_gpu.cu - tests/test_cuda_bf16_gemm.cpp compiled
   by nvcc: the bf16 GEMMs (cuBLAS, cuBLASLt with the bias, GELU_AUX_BIAS
   and DGELU epilogues) against the CPU backend on a real GPU, with the same
   tolerances (they allow any summation order; pre within one bf16 ulp of
   matmul_forward's output). test_gelu_formula is where cuBLASLt's own GELU
   meets the kit's tanh form (and must not be the erf form). Without a GPU
   it prints "nothing to test" and
   "0 passed, 0 failed" (the nvcc build check). */
#include "test_cuda_bf16_gemm.cpp"
