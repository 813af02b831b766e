// llama_cuda - examples/llama.c on a GPU: the same source, compiled by nvcc
// with TRN_USE_CUDA, which makes llama_backend() return train_cuda.h's
// backend. Same flags, same files (checkpoints from one load in the other).
//
//   examples/llama_cuda --init tinyllama/ --data shard.bin --steps 100
//
// build: -lcublas -lcublasLt
// requires: test -f train_cuda.h && have_cuda_lib nvidia-cuda-dev cublas_v2.h cublasCreate_v2 -lcublas && have_cuda_lib nvidia-cuda-dev cublasLt.h cublasLtCreate -lcublasLt
#define TRN_USE_CUDA
#include "llama.c"
