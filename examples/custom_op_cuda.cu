// custom_op_cuda - examples/custom_op.c with the swish op's CUDA kernels in
// its cuda_forward / cuda_backward slots: the same file, compiled by nvcc.
//
// build: -lcublas
// requires: test -f train_cuda.h
#define TRN_USE_CUDA
#include "custom_op.c"
