// build: -lcublas -lcublasLt
// requires: have_cuda_lib nvidia-cuda-dev cublas_v2.h cublasCreate_v2 -lcublas && have_cuda_lib nvidia-cuda-dev cublasLt.h cublasLtCreate -lcublasLt
/* tests/test_cuda_bf16_ops_gpu.cu - tests/test_cuda_bf16_ops.cpp compiled by
   nvcc: the bf16 kernels against their fp32 instantiations on a real GPU
   (the conversions are checked on the host). Without a GPU it checks the
   conversions and says "nothing more to test" (the nvcc build check). */
#include "test_cuda_bf16_ops.cpp"
