// custom_op_cuda - examples/custom_op.c with the swish op's CUDA kernels in
// its cuda_forward / cuda_backward slots: the same file, compiled by nvcc.
//
// build: -lcublas -lcublasLt
// requires: test -f train_cuda.h && have_cuda_lib nvidia-cuda-dev cublas_v2.h cublasCreate_v2 -lcublas && have_cuda_lib nvidia-cuda-dev cublasLt.h cublasLtCreate -lcublasLt
#define TRN_USE_CUDA
#include "custom_op.c"
