// linear_memory_cuda - examples/linear_memory.c on a GPU: the same source,
// built against train_cuda.h. The model is created in host memory, moved to
// the device (like model.to("cuda")), and every line of the step runs on the
// CUDA backend; the ledger then shows device bytes and cudaMemGetInfo.
//
//   examples/linear_memory_cuda [--fused-step] [--width N] [--out DIR]
//
// build: -lcublas
// requires: test -f train_cuda.h
#define TRN_USE_CUDA
#include "linear_memory.c"
