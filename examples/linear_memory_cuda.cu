// linear_memory_cuda - examples/linear_memory.c on a GPU: the same source,
// built against train_cuda.h (and train_nccl.h's NCCL communicator, which
// at world size 1 is the no-op "self" one). The model is created in host
// memory, moved to the device (like model.to("cuda")), and every line of
// the step runs on the CUDA backend; the ledger then shows device bytes and
// the driver's view (cudaMemGetInfo) beside them.
//
//   examples/linear_memory_cuda [--fused-step] [--width N] [--out DIR]
//
// build: -lcublas -lcublasLt -lnccl
// requires: test -f train_cuda.h && test -f train_nccl.h && have_cuda_lib nvidia-cuda-dev cublas_v2.h cublasCreate_v2 -lcublas && have_cuda_lib nvidia-cuda-dev cublasLt.h cublasLtCreate -lcublasLt && have_cuda_lib libnccl-dev nccl.h ncclCommInitRank -lnccl
#define TRN_USE_CUDA
#include "linear_memory.c"
