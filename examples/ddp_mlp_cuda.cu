// ddp_mlp_cuda - examples/ddp_mlp.c on GPUs: the same source with
// TRN_USE_CUDA defined. trn_ddp_init gives each rank the GPU of its local
// rank, the model lives there (train_cuda.h), and NCCL averages the
// gradients on its own stream while backward still runs.
//
//   torchrun --nproc_per_node=8 --no-python examples/ddp_mlp_cuda --steps 1000
//   mpirun -np 16 -H h0:8,h1:8 -x MASTER_ADDR=h0 examples/ddp_mlp_cuda
//   srun -N 2 --ntasks-per-node=8 --gpus-per-node=8 examples/ddp_mlp_cuda
//
// build: -lcublas -lcublasLt -lnccl
// requires: test -f train_cuda.h && test -f train_nccl.h && have_cuda_lib nvidia-cuda-dev cublas_v2.h cublasCreate_v2 -lcublas && have_cuda_lib nvidia-cuda-dev cublasLt.h cublasLtCreate -lcublasLt && have_cuda_lib libnccl-dev nccl.h ncclCommInitRank -lnccl
#define TRN_USE_CUDA
#include "ddp_mlp.c"
