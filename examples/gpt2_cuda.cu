// gpt2_cuda - examples/gpt2.c on a GPU: the same source, compiled by nvcc
// with TRN_USE_CUDA, which makes gpt2_backend() return train_cuda.h's
// backend. Same flags, same files (checkpoints from one load in the other).
//
//   examples/gpt2_cuda --model gpt2 --data fineweb_train_000001.bin --bpe gpt2
//
// build: -lcublas -lcublasLt -lnccl
// requires: test -f train_cuda.h && have_cuda_lib nvidia-cuda-dev cublas_v2.h cublasCreate_v2 -lcublas && have_cuda_lib nvidia-cuda-dev cublasLt.h cublasLtCreate -lcublasLt && have_cuda_lib libnccl-dev nccl.h ncclCommInitRank -lnccl
#define TRN_USE_CUDA
#include "gpt2.c"
