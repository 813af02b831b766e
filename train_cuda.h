/* train_cuda.h - v0.1 - the CUDA backend of train.h: device memory in the
   ledger, cuBLAS matmuls, a kernel for every op, fused AdamW.

   Do this:
      #include "train.h"
      #define TRAIN_CUDA_IMPLEMENTATION
      #include "train_cuda.h"
   in *one* .cu file compiled by nvcc (link -lcublas -lcublasLt), next to the file that
   has TRAIN_IMPLEMENTATION (it may be the same file). Then:

      if (trn_cuda_init(0) != TRN_OK) {               // device 0
          fprintf(stderr, "%s\n", trn_error_reason()); // "no CUDA device ..."
          return 2;
      }
      trn_model_init(&model, trn_cuda_backend());     // the only change

   The model code does not change: every op of train.h calls the backend
   table, and this header fills that table with CUDA kernels. Parameters,
   gradients, optimizer moments and activations live in device memory;
   inputs (ids, targets) are uploaded by the ops as before; trn_item and
   trn_read download. A program can compile the same source for the CPU and
   for CUDA: foo.c says
      #ifdef TRN_USE_CUDA
      #define TRAIN_CUDA_IMPLEMENTATION
      #include "train_cuda.h"
      #endif
   and picks trn_cuda_backend() under TRN_USE_CUDA; foo_cuda.cu is just
      #define TRN_USE_CUDA
      #include "foo.c"
   (the C source is then compiled as C++ by nvcc: cast malloc's result).

   Build (build.sh does this for every *.cu):
      nvcc -O3 -std=c++17 -gencode arch=compute_80,code=sm_80 \
           -gencode arch=compute_90,code=sm_90 -I. foo.cu -lcublas -lcublasLt

   A training step waits for the GPU once. Written as
      trn_zero_grad(&model);
      trn_reset(&model);
      loss = forward(...);
      trn_item_async(&model, loss, &host_loss);       // not trn_item
      trn_backward(&model, loss);
      trn_clip_grad_norm_async(&model, 1.0f, &norm);  // not trn_clip_grad_norm
      trn_adamw_step(&opt, &model, lr);
      trn_sync(&model);                   // the one wait: host_loss, norm
   nothing in it makes the host wait for the device before trn_sync: ids
   and targets go up through pinned staging memory, the loss is averaged
   on the device, backward starts from a gradient of 1 it knows without
   reading it back, the gradient norm and the clip factor stay on the
   device and the factor is applied inside the one AdamW launch over the
   flat buffers, the loss and the norm come back by cudaMemcpyAsync into
   pinned memory. tests/test_cuda_sync.cpp counts the waits (the harness
   counts every call that would wait on a GPU) and holds the step to one.
   trn_item, trn_grad_norm and trn_clip_grad_norm still work and wait,
   as they must to return a host value.

   Precision, chosen at run time before the model is created (see
   trn_cuda_set_precision; the examples' --precision):
     tf32 (default)  fp32 values; cuBLAS on TF32 tensor cores (10-bit
                     mantissa inputs, fp32 accumulation)
     fp32            fp32 values and matmuls (trn_cuda_set_tf32(0))
     bf16            mixed precision, as llm.c and PyTorch's autocast:
       weights    fp32 master (WEIGHTS) + a bf16 copy (WEIGHTS_BF16) that
                  kernels read; the flat AdamW launch rewrites the copy
                  from the new master in the same pass
       gradients  of parameters fp32 (kernels accumulate dW, db in fp32);
                  of activations bf16
       AdamW      m, v fp32; the gradient norm and clip in fp32 (double sum)
       activations bf16 (half the arena); layernorm/rmsnorm mean and rstd,
                  attention's log-sum-exp, the losses: fp32
       kernels    templates on the storage type: load bf16, compute fp32,
                  round once per store (to nearest even); matmuls bf16 in,
                  fp32 accumulate, all through cuBLASLt (bias, GELU and
                  GELU' in its epilogues; dW into an fp32 D); batched
                  products on cublasGemmStridedBatchedEx; attention:
                  FlashAttention-2 on mma.sync tensor cores (>>cuda-fa2;
                  the WMMA kernels by trn_cuda_set_flash, to compare)
     Parameters used where activations go (a learned table added to x) are
     cast by train.h (its fp32 gradient gets the bf16 one added); an op of
     your own says it handles bf16 with trn_op.bf16.

   What it does NOT do: no fp16, no stochastic rounding, no tensor cores in
   the fp32/tf32 fused attention kernels
   (fp32 FMAs on shared-memory tiles; the bf16 ones use FlashAttention-2
   on mma.sync for head sizes that are multiples of 16 up to 128 (or WMMA
   tiles, by trn_cuda_set_flash), others run the
   FMA kernels on bf16, with tiles sized for 48 KiB of shared memory and
   no asynchronous copies, wgmma or warp specialization as in
   FlashAttention-2/3), no FSDP in bf16 (ZeRO-1/2 and DDP
   are), no CUDA graphs
   (the step takes lr and the bias
   corrections as launch arguments and its inputs through fresh staging
   offsets, so a captured graph would replay stale values), no multi-GPU
   (that is train_nccl.h). Embedding backward adds with atomics, so its
   float sums may differ in the last bit between runs; every other kernel
   is deterministic.

   Errors: every CUDA and cuBLAS call is checked. An unexpected failure
   stops the program with file:line, the call and the driver's message
   (trn_fatal, exit code 3). cudaMalloc failing is not fatal: the backend's
   alloc prints the ledger and returns NULL with a reason, so the caller's
   trn_result path reports it. trn_cuda_init returns an error (never
   crashes) when there is no device, the driver is too old, or the GPU has
   no kernels in this build (build.sh compiles sm_80 and sm_90 code plus
   compute_90 PTX, which the driver compiles for newer GPUs).

   Tests: tests/cuda_on_cpu.h runs this file's kernels on the CPU (g++,
   fibers for threads in a random order, a reference GEMM for cuBLAS, ASan
   for out-of-bounds, TSan as a race detector); tests/test_cuda_kernels
   compares every kernel with the CPU backend, tests/test_cuda_gpt2 trains
   examples/gpt2.c's model 10 steps on both, tests/test_cuda_kernels_gpu.cu is
   the same kernel test for a real GPU (and the nvcc build check);
   tests/test_cuda_flash_bf16 checks the WMMA bf16 attention (the harness
   emulates nvcuda::wmma as warp collectives), tests/test_cuda_fa2_bf16 the
   FlashAttention-2 one against the materialized reference (the harness
   emulates mma.sync, ldmatrix and cp.async; test_cuda_fa2_bf16_gpu.cu is
   its GPU twin), test_cuda_bf16_ops
   and test_cuda_bf16_gemm every other bf16 kernel against fp32,
   test_cuda_bf16_train trains 200 steps in both precisions, and
   test_cuda_memory_plan measures GPT-2 124M's device memory in both (the
   harness's dry run: allocations real, kernels skipped).

   Contents:  >>cuda-api (declarations)  >>cuda-errors  >>sites (the time
              ledger)  >>cuda-memory
              >>cuda-kernels; in it, one op in one place (its banner names
              the plain reference in train.h, then the device kernels,
              then the host launchers): >>colsum  >>embedding
              >>layernorm (>>addln)  >>elementwise  >>cuda-fa2
              >>classifier  >>adamw  >>convert
              >>cuda-ops (the backend table's other functions: cuBLAS and
              cuBLASLt matmuls, attention, ...; in it, laid out the same
              way: >>xent-ex)  >>cuda-init

   License: MIT, as train.h.
*/
#ifndef TRAIN_CUDA_H_INCLUDED
#define TRAIN_CUDA_H_INCLUDED
#ifndef TRAIN_H_INCLUDED
#error "include train.h before train_cuda.h"
#endif

/* >>cuda-api: plain C declarations (a C file may call these and link with
   the .cu file that holds the implementation) */
#ifdef __cplusplus
extern "C" {
#endif
/* select the device, create the stream and the cuBLAS handle, count the
   runtime's memory in the ledger. TRN_ERR_BACKEND with one clear line in
   trn_error_reason() when there is no usable device. Calling it again with
   the same device is a no-op. */
TRNDEF trn_result trn_cuda_init(int device);
/* the backend table, after a successful trn_cuda_init (or trn_ddp_init,
   which calls it): called before, it stops with a message saying so
   (initializing some device silently would hide which GPU and why not) */
TRNDEF const trn_backend *trn_cuda_backend(void);
TRNDEF void trn_cuda_shutdown(void);          /* free what init created    */
TRNDEF void trn_cuda_set_tf32(int on);        /* TF32 matmuls (default on) */
TRNDEF int trn_cuda_tf32(void);
/* Precision, chosen at run time, before the model is created:
     TRN_CUDA_FP32  fp32 values, fp32 matmuls
     TRN_CUDA_TF32  fp32 values, TF32 tensor-core matmuls (the default:
                    inputs rounded to a 10-bit mantissa, fp32 accumulation)
     TRN_CUDA_BF16  mixed precision: activations and their gradients are
                    bf16, kernels read a bf16 copy of the weights that
                    AdamW rewrites from the fp32 master weights in the same
                    pass; matmuls take bf16 and accumulate in fp32; norms'
                    statistics, softmax/log-sum-exp, losses, parameter
                    gradients, m, v and the gradient norm stay fp32.
   TRN_ERR_INVALID if a model's weights already live on the device (the
   activation dtype is fixed when trn_model_init reads the table). */
typedef enum trn_cuda_precision { TRN_CUDA_FP32 = 0, TRN_CUDA_TF32 = 1, TRN_CUDA_BF16 = 2 } trn_cuda_precision;
TRNDEF trn_result trn_cuda_set_precision(trn_cuda_precision p);
TRNDEF trn_cuda_precision trn_cuda_get_precision(void);
/* "fp32", "tf32", "bf16" -> the value; -1 for anything else */
TRNDEF int trn_cuda_precision_parse(const char *name);
/* Which bf16 fused attention runs (for head sizes 16, 32, ..., 128):
     TRN_CUDA_FLASH_FA2   the default: FlashAttention-2 on mma.sync,
                          ldmatrix and cp.async (>>cuda-fa2)
     TRN_CUDA_FLASH_WMMA  the earlier WMMA kernels, kept to compare
   dq_atomic = 1 (FA2 only): the key-block kernel also computes dQ and
   adds it with fp32 atomics (5 products instead of 7, but B*NH*T*hs*4
   bytes of scratch, and dQ's last bits change from run to run; on an H100
   the GPT-2 step took 39.0 ms against 39.2); 0 (the default): dQ in its
   own pass, deterministic, no scratch. */
typedef enum trn_cuda_flash { TRN_CUDA_FLASH_FA2 = 0, TRN_CUDA_FLASH_WMMA = 1 } trn_cuda_flash;
TRNDEF trn_result trn_cuda_set_flash(trn_cuda_flash kernel, int dq_atomic);
TRNDEF const char *trn_cuda_precision_name(trn_cuda_precision p);
TRNDEF const char *trn_cuda_device_name(void);
/* the stream every kernel and copy of the backend runs on (a cudaStream_t),
   and the cuBLAS handle (a cublasHandle_t), for train_nccl.h and benchmarks */
TRNDEF void *trn_cuda_stream(void);
TRNDEF void *trn_cuda_cublas(void);
/* pinned (page-locked) host memory, counted as host memory of `kind`: DMA
   copies from the device run at full speed. For trn_ckpt_async:
      ck.host_alloc = trn_cuda_host_alloc; ck.host_free = trn_cuda_host_free; */
TRNDEF void *trn_cuda_host_alloc(size_t bytes, trn_kind kind);
TRNDEF void trn_cuda_host_free(void *p);
/* --profile on the GPU: trn_profile's time marks become CUDA events on the
   backend's stream (no sync per op; read once per backward pass) */
TRNDEF void trn_cuda_profile_clock(trn_profile *p);
/* The time ledger (>>sites): per launch site of the backend (a stable name
   such as "layernorm fwd" or "matmul bwd dW gemm"), the launches, the bytes
   the work must move (each input read once, each output written once), the
   FLOPs, a GEMM's shape, and on a GPU the measured time. Start it, run a
   step, read it (bench/gpt2_plan prints the table with each site's floor). */
typedef struct trn_cuda_site_row {
    const char *scope;     /* NULL, "classifier" (train.h's), "(no site)"   */
    const char *name;      /* the site, or for "(no site)" the kernel/call  */
    int m, n, k, batch;    /* GEMMs: the product's shape; 0 otherwise       */
    long long calls;       /* times the site ran                            */
    long long launches;    /* kernels, cuBLAS calls, memsets, copies in it  */
    double bytes, flops;   /* summed over its calls                         */
    double ms;             /* measured (measure = 1, on a GPU), else 0      */
} trn_cuda_site_row;
/* clear the table and count from here; measure = 1: CUDA events per site too */
TRNDEF void trn_cuda_sites_start(int measure);
/* stop counting (a measuring run synchronizes once) and point *rows at the
   table: the number of rows; the last is "(between sites)" when measured */
TRNDEF int trn_cuda_sites_read(const trn_cuda_site_row **rows);
/* the scope of the sites that follow (NULL: none); the string must outlive the table */
TRNDEF void trn_cuda_site_scope(const char *scope);
#ifdef __cplusplus
}
#endif
#endif /* TRAIN_CUDA_H_INCLUDED */

/* ======================================================================== */
/*                              IMPLEMENTATION                              */
/* ======================================================================== */
#ifdef TRAIN_CUDA_IMPLEMENTATION
#ifndef TRAIN_CUDA_IMPLEMENTATION_DONE
#define TRAIN_CUDA_IMPLEMENTATION_DONE

#if !defined(__CUDACC__) && !defined(TRN_CUDA_ON_CPU)
#error "the implementation of train_cuda.h must be compiled by nvcc (name the file .cu)"
#endif

/* Kernels are launched through TRN_CUDA_LAUNCH(kernel, grid, block, shmem,
   stream, args...): <<<>>> under nvcc, a call into the harness under
   tests/cuda_on_cpu.h; either way the launch is checked. Kernels that want
   dynamic shared memory declare it with TRN_CUDA_DYNAMIC_SHARED(T, name). */
#ifndef TRN_CUDA_ON_CPU
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#define TRN__CUDA_START(kernel, grid, block, shmem, stream, ...) \
    kernel<<<grid, block, shmem, stream>>>(__VA_ARGS__)
#define TRN_CUDA_DYNAMIC_SHARED(T, name) \
    extern __shared__ __align__(16) unsigned char trn__dyn_smem[]; T *name = (T *)trn__dyn_smem
/* the same, 128-byte aligned (wmma tiles need 32) */
#define TRN__CUDA_SHARED_128(T, name) \
    extern __shared__ __align__(128) unsigned char trn__dyn_smem128[]; T *name = (T *)trn__dyn_smem128
#include <mma.h>
#define TRN__UNROLL _Pragma("unroll")
#else
#define TRN__UNROLL
#define TRN__CUDA_SHARED_128(T, name) TRN_CUDA_DYNAMIC_SHARED(T, name) /* the harness aligns it to 128 */
#define TRN__CUDA_START(kernel, grid, block, shmem, stream, ...) \
    cuemu::launch(#kernel, __FILE__, __LINE__, grid, block, shmem, stream, kernel, __VA_ARGS__)
#endif
#define TRN_CUDA_LAUNCH(kernel, grid, block, shmem, stream, ...)                    \
    do {                                                                            \
        TRN__CUDA_START(kernel, grid, block, shmem, stream, __VA_ARGS__);           \
        trn__cuda_check(cudaGetLastError(), "launch " #kernel, __FILE__, __LINE__); \
        trn__cuda_launched(#kernel); /* the time ledger (>>sites) */               \
    } while (0)

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ========================================================================
   >>cuda-errors
   Each call goes through a check that names the file, line and call.
   ======================================================================== */
static void trn__cuda_check(cudaError_t e, const char *what, const char *file, int line) {
    if (e == cudaSuccess) return;
    if (e == cudaErrorMemoryAllocation) trn_ledger_print("device out of memory");
    trn_fatal("%s:%d: %s: CUDA error %s: %s", file, line, what, cudaGetErrorName(e), cudaGetErrorString(e));
}
static void trn__cublas_check(cublasStatus_t s, const char *what, const char *file, int line) {
    if (s == CUBLAS_STATUS_SUCCESS) return;
    trn_fatal("%s:%d: %s: cuBLAS error %d: %s", file, line, what, (int)s, cublasGetStatusString(s));
}
#define TRN_CUDA_CHECK(call) trn__cuda_check((call), #call, __FILE__, __LINE__)
#define TRN_CUBLAS_CHECK(call) trn__cublas_check((call), #call, __FILE__, __LINE__)

/* the backend's state: one device, one stream, one cuBLAS handle */
typedef struct trn__cuda_block { void *p; size_t bytes; int kind; } trn__cuda_block;
typedef struct trn__cuda_pending { void *dst; size_t off, bytes; } trn__cuda_pending; /* a queued readback */
static struct {
    int ready, device;
    int tf32_off;                /* trn_cuda_set_tf32(0) was called           */
    int bf16;                    /* TRN_CUDA_BF16: activations are bf16      */
    cudaStream_t stream;
    cublasHandle_t cublas;
    cublasLtHandle_t cublaslt;   /* bf16 matmuls, with their epilogues       */
    void *workspace;             /* cuBLAS workspace (ours, so it is counted) */
    size_t workspace_bytes;
    size_t context_bytes;        /* driver-reported use at init: the context */
    size_t cublas_bytes;         /* what cublasCreate(+Lt) took              */
    double *partials;            /* sum_squares: one double per block        */
    float *tmp;                  /* grows: partial column sums               */
    size_t tmp_bytes;
    unsigned *counts;            /* grows, all 0 between launches: the column */
    size_t n_counts;             /* sums' "which block is last" counters      */
    trn__cuda_block *blocks;     /* live allocations: pointer -> bytes, kind */
    int n_blocks, cap_blocks;
    char name[320];              /* "<device name> (sm_XY)"                   */
    trn_backend table;
    /* >>sync-free step: pinned host memory, so copies need no host wait */
    unsigned char *stage;        /* uploads go through here (see upload)    */
    size_t stage_cap, stage_used;
    unsigned char *rb;           /* download_async lands here first ...     */
    size_t rb_cap, rb_used;
    trn__cuda_pending *pend;     /* ... and is copied to its dst at drain   */
    int n_pend, cap_pend;
    trn_adamw_seg *seg_host, *seg_dev; /* adamw_flat's runs: the last ones uploaded */
    int n_seg, cap_seg;
    /* <<sync-free step */
} trn__cu;

#define TRN__CUDA_PARTIALS 1024  /* blocks of the sum-of-squares reduction  */
#define TRN__CUDA_STAGE ((size_t)4 << 20) /* pinned upload staging: 4 MiB   */
#define TRN__CUDA_WORKSPACE ((size_t)32 << 20) /* cuBLAS: 32 MiB for Hopper */

/* ========================================================================
   >>sites: the time ledger, the memory ledger's twin for time
   The memory ledger says where every byte of device memory goes; this says
   where every microsecond of a step goes. Each host launcher names its
   SITE in one line right before it launches:
       TRN__CUDA_SITE("layernorm fwd", bytes, flops);
       TRN__CUDA_SITE_GEMM("matmul bwd dW gemm", bytes, M, N, K, batch);
   a stable name, the bytes the launch must move through device memory
   (each input read once, each output written once: the least any kernel
   could move) and the FLOPs it must do (a GEMM: 2 M N K per batch). Over a
   machine's measured ceilings (copy bandwidth, matrix rate) those give the
   site a FLOOR: no kernel does the work faster. bench/gpt2_plan prints
   them for a whole GPT-2 step, computed on the CPU.
   The site is a C++ object that lives to the end of the launcher's scope,
   so everything launched before the scope closes is the site's: kernels,
   cuBLAS(Lt) calls, memsets and copies (each counts one launch). Sites
   nest (a fused launcher falling back on matmul_forward): a launch belongs
   to the innermost. A launch outside any site still counts, in a row of
   its own, "(no site)" and the kernel's name, so nothing goes missing.
   Off (the default) a site costs one test of a flag. On:
     counting   trn_cuda_sites_start(0): per site, keyed by (scope, name,
                M, N, K, batch), the calls, launches, bytes and FLOPs. It
                needs no GPU: on tests/cuda_on_cpu.h in dry-run mode the
                kernels are skipped, so a GPT-2 step counts in a second.
     measuring  trn_cuda_sites_start(1) on a GPU (--profile): a CUDA event
                where each site begins and where it ends, on the stream, no
                host wait; trn_cuda_sites_read synchronizes once and gives
                the time between two events to the site innermost then.
                Time while no site is open (the GPU waiting for the host
                between launches) is the row "(between sites)".
   The scope (trn_cuda_site_scope, the backend table's site_scope) is set
   by train.h around ops whose launches it wants told apart, such as
   "classifier" (the LM head and its cross-entropy). */
#define TRN__SITES_MAX 512
#define TRN__SITES_DEPTH 8
static struct {
    int on, measure;
    const char *scope;                 /* what train.h named (or NULL)      */
    trn_cuda_site_row rows[TRN__SITES_MAX];
    int n_rows, full;
    int stack[TRN__SITES_DEPTH], depth; /* open sites (rows), innermost last */
    cudaEvent_t *ev;                   /* measuring: the timeline ...       */
    int *ev_row;                       /* ... and the row innermost after each event (-1: none) */
    int n_ev, cap_ev;
} trn__sites;

static int trn__site_row(const char *scope, const char *name, int m, int n, int k, int batch) {
    int i;
    trn_cuda_site_row *r;
    for (i = 0; i < trn__sites.n_rows; i++) {
        r = &trn__sites.rows[i];
        if (r->m == m && r->n == n && r->k == k && r->batch == batch && (r->name == name || !strcmp(r->name, name)) &&
            (r->scope == scope || (r->scope && scope && !strcmp(r->scope, scope))))
            return i;
    }
    if (trn__sites.n_rows == TRN__SITES_MAX) { trn__sites.full = 1; return TRN__SITES_MAX - 1; } /* lumped, and said */
    r = &trn__sites.rows[trn__sites.n_rows];
    memset(r, 0, sizeof *r);
    r->scope = scope; r->name = name; r->m = m; r->n = n; r->k = k; r->batch = batch;
    return trn__sites.n_rows++;
}
/* measuring: an event now, and which site the time after it belongs to */
static void trn__site_event(void) {
    if (!trn__sites.measure) return;
    if (trn__sites.n_ev == trn__sites.cap_ev) {
        int cap = trn__sites.cap_ev ? 2 * trn__sites.cap_ev : 1024, k;
        cudaEvent_t *ev = (cudaEvent_t *)realloc(trn__sites.ev, sizeof(cudaEvent_t) * (size_t)cap);
        int *er = ev ? (int *)realloc(trn__sites.ev_row, sizeof(int) * (size_t)cap) : NULL;
        if (!ev || !er) trn_fatal("train_cuda.h: sites: out of host memory for %d events", cap);
        for (k = trn__sites.cap_ev; k < cap; k++) TRN_CUDA_CHECK(cudaEventCreate(&ev[k]));
        trn__sites.ev = ev; trn__sites.ev_row = er; trn__sites.cap_ev = cap;
    }
    TRN_CUDA_CHECK(cudaEventRecord(trn__sites.ev[trn__sites.n_ev], trn__cu.stream));
    trn__sites.ev_row[trn__sites.n_ev++] = trn__sites.depth ? trn__sites.stack[trn__sites.depth - 1] : -1;
}
struct trn__cuda_site {
    int open;
    trn__cuda_site(const char *name, double bytes, double flops, int m, int n, int k, int batch) : open(0) {
        if (!trn__sites.on || trn__sites.depth == TRN__SITES_DEPTH) return;
        int r = trn__site_row(trn__sites.scope, name, m, n, k, batch);
        trn__sites.rows[r].calls++;
        trn__sites.rows[r].bytes += bytes;
        trn__sites.rows[r].flops += flops;
        trn__sites.stack[trn__sites.depth++] = r;
        open = 1;
        trn__site_event();
    }
    ~trn__cuda_site() {
        if (!open) return;
        trn__sites.depth--;
        trn__site_event();
    }
};
#define TRN__SITE_CAT2(a, b) a##b
#define TRN__SITE_CAT(a, b) TRN__SITE_CAT2(a, b)
#define TRN__CUDA_SITE(name, bytes, flops) \
    trn__cuda_site TRN__SITE_CAT(trn__site_, __LINE__)(name, (double)(bytes), (double)(flops), 0, 0, 0, 0)
#define TRN__CUDA_SITE_GEMM(name, bytes, m, n, k, batch)                                                     \
    trn__cuda_site TRN__SITE_CAT(trn__site_, __LINE__)(name, (double)(bytes),                                 \
                                                       2.0 * (double)(m) * (double)(n) * (double)(k) * (batch), \
                                                       (int)(m), (int)(n), (int)(k), (int)(batch))
/* every launch, cuBLAS call, memset and copy reports here (what: the kernel's
   or the call's name, for the "(no site)" row) */
static void trn__cuda_launched(const char *what) {
    if (!trn__sites.on) return;
    if (trn__sites.depth) { trn__sites.rows[trn__sites.stack[trn__sites.depth - 1]].launches++; return; }
    int r = trn__site_row("(no site)", what, 0, 0, 0, 0);
    trn__sites.rows[r].calls++;
    trn__sites.rows[r].launches++;
}
/* bytes of n elements of the activation dtype (bf16 or fp32) */
#define TRN__AB(n) ((double)(n) * (trn__cu.bf16 ? 2.0 : 4.0))

/* ========================================================================
   >>cuda-memory
   cudaMalloc, with each block remembered (size and kind) so that free can
   take it off the ledger. Out of memory prints the ledger and returns NULL.
   ======================================================================== */
static void *trn__cuda_alloc(size_t bytes, trn_kind kind) {
    void *p = NULL;
    cudaError_t e;
    if (bytes == 0) bytes = 1;
    e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        size_t fr = 0, tot = 0;
        cudaGetLastError(); /* an allocation failure is not sticky: clear it */
        cudaMemGetInfo(&fr, &tot);
        trn_fail(TRN_ERR_NOMEM, "out of device memory: %zu bytes for %s (%s; the driver reports %.2f GiB free of %.2f GiB)",
                 bytes, trn_kind_name(kind), cudaGetErrorString(e), fr / 1073741824.0, tot / 1073741824.0);
        fprintf(stderr, "train_cuda.h: %s\n", trn_error_reason());
        trn_ledger_print("device out of memory");
        return NULL;
    }
    if (trn__cu.n_blocks == trn__cu.cap_blocks) {
        int cap = trn__cu.cap_blocks ? 2 * trn__cu.cap_blocks : 64;
        trn__cuda_block *nb = (trn__cuda_block *)realloc(trn__cu.blocks, sizeof(trn__cuda_block) * (size_t)cap);
        if (!nb) trn_fatal("train_cuda.h: out of host memory for the allocation table");
        trn__cu.blocks = nb;
        trn__cu.cap_blocks = cap;
    }
    trn__cu.blocks[trn__cu.n_blocks].p = p;
    trn__cu.blocks[trn__cu.n_blocks].bytes = bytes;
    trn__cu.blocks[trn__cu.n_blocks].kind = (int)kind;
    trn__cu.n_blocks++;
    trn_ledger_add(TRN_DEVICE, kind, (long long)bytes);
    return p;
}

static void trn__cuda_free(void *p) {
    int i;
    if (!p) return;
    for (i = trn__cu.n_blocks - 1; i >= 0; i--)
        if (trn__cu.blocks[i].p == p) break;
    if (i < 0) trn_fatal("train_cuda.h: free of %p, which the CUDA backend did not allocate", p);
    trn_ledger_add(TRN_DEVICE, (trn_kind)trn__cu.blocks[i].kind, -(long long)trn__cu.blocks[i].bytes);
    trn__cu.blocks[i] = trn__cu.blocks[--trn__cu.n_blocks];
    TRN_CUDA_CHECK(cudaFree(p));
}

static void trn__cuda_zero(void *p, size_t bytes) {
    if (!bytes) return;
    TRN__CUDA_SITE("zero (memset)", bytes, 0);
    TRN_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, trn__cu.stream));
    trn__cuda_launched("cudaMemsetAsync");
}
/* The host waits for the device in one place: trn__cuda_drain (the
   backend's sync). After it, every copy queued before has happened: the
   staging buffer is free again and queued readbacks are handed over.

   Uploads return with the caller's buffer free to reuse (a batch of ids on
   the stack ...). Small ones (a step's ids and targets, the 1 that starts
   backward) are copied into pinned staging memory and sent from there with
   cudaMemcpyAsync: no wait. The staging buffer is a bump allocator that
   drain rewinds; only when it is full (a program that never syncs) does an
   upload wait. Large uploads (weights at init) wait for their copy.
   Downloads wait (trn_item, checkpoints); download_async does not: the
   bytes land in pinned memory and reach their destination at the next
   drain (trn_sync), the way a step's loss and gradient norm come back. */
static void trn__cuda_drain(void) {
    int i;
    TRN_CUDA_CHECK(cudaStreamSynchronize(trn__cu.stream));
    for (i = 0; i < trn__cu.n_pend; i++)
        memcpy(trn__cu.pend[i].dst, trn__cu.rb + trn__cu.pend[i].off, trn__cu.pend[i].bytes);
    trn__cu.n_pend = 0;
    trn__cu.rb_used = 0;
    trn__cu.stage_used = 0;
}
/* pinned host memory, counted in the ledger (host, runtime) */
static unsigned char *trn__cuda_pinned(size_t bytes) {
    void *p = NULL;
    TRN_CUDA_CHECK(cudaMallocHost(&p, bytes));
    trn_ledger_add(TRN_HOST, TRN_KIND_RUNTIME, (long long)bytes);
    return (unsigned char *)p;
}
static void trn__cuda_unpin(unsigned char **p, size_t *bytes) {
    if (!*p) return;
    TRN_CUDA_CHECK(cudaFreeHost(*p));
    trn_ledger_add(TRN_HOST, TRN_KIND_RUNTIME, -(long long)*bytes);
    *p = NULL;
    *bytes = 0;
}
#define TRN__CUDA_ALIGN16(n) (((n) + 15) & ~(size_t)15)

static void trn__cuda_upload(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    TRN__CUDA_SITE("upload (host to device)", bytes, 0);
    trn__cuda_launched("cudaMemcpyAsync");
    if (bytes <= TRN__CUDA_STAGE / 4) {
        unsigned char *st;
        if (!trn__cu.stage) {
            trn__cu.stage = trn__cuda_pinned(TRN__CUDA_STAGE);
            trn__cu.stage_cap = TRN__CUDA_STAGE;
        }
        if (trn__cu.stage_used + TRN__CUDA_ALIGN16(bytes) > trn__cu.stage_cap) trn__cuda_drain(); /* full */
        st = trn__cu.stage + trn__cu.stage_used;
        trn__cu.stage_used += TRN__CUDA_ALIGN16(bytes);
        memcpy(st, src, bytes);
        TRN_CUDA_CHECK(cudaMemcpyAsync(dst, st, bytes, cudaMemcpyHostToDevice, trn__cu.stream));
        return;
    }
    TRN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, trn__cu.stream));
    trn__cuda_drain();
}
static void trn__cuda_download(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    TRN__CUDA_SITE("download (device to host)", bytes, 0);
    trn__cuda_launched("cudaMemcpyAsync");
    TRN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, trn__cu.stream));
    trn__cuda_drain();
}
static void trn__cuda_download_async(void *dst, const void *src, size_t bytes) {
    size_t need = TRN__CUDA_ALIGN16(bytes);
    if (!bytes) return;
    TRN__CUDA_SITE("download (device to host)", bytes, 0);
    trn__cuda_launched("cudaMemcpyAsync");
    if (trn__cu.rb_used + need > trn__cu.rb_cap) { /* full: hand over what is there, then grow */
        trn__cuda_drain();
        if (need > trn__cu.rb_cap) {
            size_t cap = need > 4096 ? need : 4096;
            trn__cuda_unpin(&trn__cu.rb, &trn__cu.rb_cap);
            trn__cu.rb = trn__cuda_pinned(cap);
            trn__cu.rb_cap = cap;
        }
    }
    if (trn__cu.n_pend == trn__cu.cap_pend) {
        int cap = trn__cu.cap_pend ? 2 * trn__cu.cap_pend : 64;
        trn__cuda_pending *np = (trn__cuda_pending *)realloc(trn__cu.pend, sizeof(trn__cuda_pending) * (size_t)cap);
        if (!np) trn_fatal("train_cuda.h: out of host memory for the readback table");
        trn__cu.pend = np;
        trn__cu.cap_pend = cap;
    }
    TRN_CUDA_CHECK(cudaMemcpyAsync(trn__cu.rb + trn__cu.rb_used, src, bytes, cudaMemcpyDeviceToHost, trn__cu.stream));
    trn__cu.pend[trn__cu.n_pend].dst = dst;
    trn__cu.pend[trn__cu.n_pend].off = trn__cu.rb_used;
    trn__cu.pend[trn__cu.n_pend].bytes = bytes;
    trn__cu.n_pend++;
    trn__cu.rb_used += need;
}
static void trn__cuda_copy(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    TRN__CUDA_SITE("copy (device)", 2.0 * bytes, 0);
    TRN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, trn__cu.stream));
    trn__cuda_launched("cudaMemcpyAsync");
}
static void trn__cuda_sync(void) { trn__cuda_drain(); }

/* scratch that grows and stays (kind TEMP): partial sums of reductions */
static float *trn__cuda_tmp(size_t floats) {
    size_t bytes = floats * sizeof(float);
    if (bytes > trn__cu.tmp_bytes) {
        if (trn__cu.tmp) trn__cuda_free(trn__cu.tmp);
        trn__cu.tmp = (float *)trn__cuda_alloc(bytes, TRN_KIND_TEMP);
        if (!trn__cu.tmp) trn_fatal("train_cuda.h: scratch of %zu bytes: %s", bytes, trn_error_reason());
        trn__cu.tmp_bytes = bytes;
    }
    return trn__cu.tmp;
}

/* n counters, 0 (zeroed when they grow; every kernel that takes them leaves
   them at 0, see trn__last_block) */
static unsigned *trn__cuda_counts(size_t n) {
    if (n > trn__cu.n_counts) {
        if (trn__cu.counts) trn__cuda_free(trn__cu.counts);
        trn__cu.counts = (unsigned *)trn__cuda_alloc(n * sizeof(unsigned), TRN_KIND_TEMP);
        if (!trn__cu.counts) trn_fatal("train_cuda.h: %zu counters: %s", n, trn_error_reason());
        trn__cu.n_counts = n;
        trn__cuda_zero(trn__cu.counts, n * sizeof(unsigned));
    }
    return trn__cu.counts;
}

/* the driver's view for the ledger: used = total - free */
static void trn__cuda_probe(size_t *used, size_t *total) {
    size_t fr = 0, tot = 0;
    *used = *total = 0;
    if (trn__cu.ready && cudaMemGetInfo(&fr, &tot) == cudaSuccess) { *used = tot - fr; *total = tot; }
}

/* ========================================================================
   >>cuda-kernels
   Block sizes are multiples of 32 (whole warps). Elementwise kernels loop
   with a grid stride, so any n works with a capped grid. Reductions are
   written so the order of additions is fixed by the shapes alone: the
   same inputs give the same bits on every run (except embedding backward,
   which uses atomics). An op's section (>>elementwise, >>cuda-fa2,
   >>classifier, ...: the list in the top comment's Contents) holds its
   kernels and then its launchers, the host functions that the backend
   table points at.
   ======================================================================== */
#define TRN__CUDA_BLOCK 256

static unsigned trn__cuda_grid(size_t n) {
    size_t g = (n + TRN__CUDA_BLOCK - 1) / TRN__CUDA_BLOCK;
    return (unsigned)(g < 1 ? 1 : (g > 8192 ? 8192 : g));
}
#define TRN__GRID_STRIDE(i, n) \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)
/* a launcher's launch of a grid-stride kernel over n items (none when n is 0) */
#define TRN__CUDA_ELEMENTWISE(kernel, n, ...)                                                                  \
    do {                                                                                                       \
        if ((n) > 0)                                                                                           \
            TRN_CUDA_LAUNCH(kernel, dim3(trn__cuda_grid(n)), dim3(TRN__CUDA_BLOCK), 0, trn__cu.stream, __VA_ARGS__); \
    } while (0)
/* host functions of activation kernels are templates on A as well; their
   float * arguments that hold activations are cast to A * (a no-op for
   float), and the table picks one instantiation (TRN__CUDA_PICK) */
#define TRN__A(p) ((A *)(p))
#define TRN__CA(p) ((const A *)(p))

static __device__ __forceinline__ float trn__warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ double trn__warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
/* bf16 (TRN_CUDA_BF16): kernels that touch activations are templates on
   their storage type A (float or trn__bf16) and compute in fp32: a value
   is read with trn__ld(x) and written with trn__to<A>(v) (round to
   nearest even). The backend table holds the <float> or the <trn__bf16>
   instantiation of each host function (see trn__cuda_fill_table). */
typedef __nv_bfloat16 trn__bf16;
static __device__ __forceinline__ float trn__ld(float x) { return x; }
static __device__ __forceinline__ float trn__ld(trn__bf16 x) { return __bfloat162float(x); }
template <typename T> static __device__ __forceinline__ T trn__to(float v);
template <> __device__ __forceinline__ float trn__to<float>(float v) { return v; }
template <> __device__ __forceinline__ trn__bf16 trn__to<trn__bf16>(float v) { return __float2bfloat16(v); }

/* 16-byte vector access: one ld.global.v4 / st.global.v4 moves 16 bytes a
   lane (8 bf16 or 4 fp32) where element-wise code issues 8 (or 4) loads of
   2 (or 4) bytes; a memory-bound kernel needs many bytes in flight per
   warp to reach HBM bandwidth. The address must be a multiple of 16: a GPU
   faults on anything else, and the CPU harness reports it (its
   check_align16). Kernels take the vector path only where that holds
   (trn__al16 on the host, or a scalar head up to the first 16-byte
   boundary) and finish the last n % 8 (or 4) elements one by one: the
   "scalar tail". */
template <typename A> struct __align__(16) trn__pack {
    A e[16 / sizeof(A)];
};
#define TRN__VEC(A) ((int)(16 / sizeof(A))) /* elements of A in 16 bytes */
template <typename A> static __device__ __forceinline__ trn__pack<A> trn__ld16(const A *p) {
    trn__pack<A> r;
#ifndef TRN_CUDA_ON_CPU
    *reinterpret_cast<float4 *>(&r) = *reinterpret_cast<const float4 *>(p); /* one 16-byte load */
#else
    cuemu::check_align16(p, "16-byte load");
    memcpy(&r, p, 16);
#endif
    return r;
}
template <typename A> static __device__ __forceinline__ void trn__st16(A *p, const trn__pack<A> &v) {
#ifndef TRN_CUDA_ON_CPU
    *reinterpret_cast<float4 *>(p) = *reinterpret_cast<const float4 *>(&v); /* one 16-byte store */
#else
    cuemu::check_align16(p, "16-byte store");
    memcpy(p, &v, 16);
#endif
}
/* 8 elements as floats through 16-byte packs (one of bf16, two of fp32) */
template <typename A> static __device__ __forceinline__ void trn__ld8(float *f, const A *p) {
    const int K = TRN__VEC(A);
    for (int h = 0; h < 8; h += K) {
        trn__pack<A> q = trn__ld16(p + h);
        for (int k = 0; k < K; k++) f[h + k] = trn__ld(q.e[k]);
    }
}
template <typename A> static __device__ __forceinline__ void trn__st8(A *p, const float *f) {
    const int K = TRN__VEC(A);
    for (int h = 0; h < 8; h += K) {
        trn__pack<A> q;
        for (int k = 0; k < K; k++) q.e[k] = trn__to<A>(f[h + k]);
        trn__st16(p + h, q);
    }
}
/* host: may a kernel use 16-byte access at p? */
static int trn__al16(const void *p) { return ((uintptr_t)p & 15) == 0; }
/* elements before the first 16-byte boundary at p (p is A-aligned), at most n */
template <typename A> static __device__ __forceinline__ int trn__head16(const A *p, int n) {
    int h = (int)(((16 - ((uintptr_t)p & 15)) & 15) / sizeof(A));
    return h < n ? h : n;
}
/* A block's walk over one row of n elements, 16 bytes at a time: a scalar
   head up to the row's first 16-byte boundary (rows of Vp elements start
   off it when Vp sizeof(A) is not a multiple of 16), packs of 8 bf16 / 4
   fp32 (thread i takes packs i, i + blockDim.x, ...), then the scalar
   tail, under K elements. Each thread meets its elements in one fixed
   order, so sums it keeps come out the same on every run; the head
   depends on the row's address, which for rows of a 16-byte-aligned
   buffer (cudaMalloc's) is fixed by Vp and sizeof(A): by the shapes.
   trn__row_read16: f(v, x) for each v < n, x = p[v] as float. */
template <typename A, typename F> static __device__ __forceinline__ void trn__row_read16(const A *p, int n, F f) {
    const int K = TRN__VEC(A), head = trn__head16(p, n), nvec = (n - head) / K, body = head + nvec * K;
    for (int v = threadIdx.x; v < head; v += blockDim.x) f(v, trn__ld(p[v]));
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
        trn__pack<A> q = trn__ld16(p + head + i * K);
        for (int k = 0; k < K; k++) f(head + i * K + k, trn__ld(q.e[k]));
    }
    for (int v = body + threadIdx.x; v < n; v += blockDim.x) f(v, trn__ld(p[v]));
}
/* trn__row_update16: d[v] = f(v, d[v], l[v]) for each v < n (d and l as
   floats). Packs only where both rows sit at the same place within 16
   bytes (the same head); where they do not, the whole row goes one
   element at a time (head = n). */
template <typename A, typename F>
static __device__ __forceinline__ void trn__row_update16(A *d, const A *l, int n, F f) {
    const int K = TRN__VEC(A), head = (((uintptr_t)d ^ (uintptr_t)l) & 15) ? n : trn__head16(d, n);
    const int nvec = (n - head) / K, body = head + nvec * K;
    for (int v = threadIdx.x; v < head; v += blockDim.x) d[v] = trn__to<A>(f(v, trn__ld(d[v]), trn__ld(l[v])));
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
        const int v = head + i * K;
        trn__pack<A> q = trn__ld16(d + v), x = trn__ld16(l + v);
        for (int k = 0; k < K; k++) q.e[k] = trn__to<A>(f(v + k, trn__ld(q.e[k]), trn__ld(x.e[k])));
        trn__st16(d + v, q);
    }
    for (int v = body + threadIdx.x; v < n; v += blockDim.x) d[v] = trn__to<A>(f(v, trn__ld(d[v]), trn__ld(l[v])));
}

static __device__ __forceinline__ float trn__warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* does nothing; init launches it to find out whether this GPU can run
   this build's kernels at all */
static __global__ void trn__k_probe(int *x) { if (x) x[0] = 1; }


/* ------------------------------------------------------------------------
   >>colsum: dst (C) += the column sums of x (N,C), a linear layer's bias
   gradient (the sum over rows of dout), kernels and launcher together.
   The plain reference: train.h's trn_linear_backward_ref (its dbias loop).
   Deterministic, in one launch of two steps. Step 1: block (32,8) owns 32
   columns and one chunk of `rows` rows; its 8 thread rows stride the
   chunk, then add their 8 partials in shared memory: part (nchunk, C).
   Step 2, by the LAST block of each column group to finish
   (trn__last_block): dst[c] += part[0][c] + part[1][c] + ... in order. The
   plain two-launch form, the GPU reference: trn__k_colsum_part's step 1,
   then trn__k_colsum_final as its own pass (the same bits).
   ------------------------------------------------------------------------ */

/* The finish of a two-step column sum in the same launch (the CUDA
   samples' threadFenceReduction pattern): each block of column group
   blockIdx.x, its partials written, fences them (visible to every block)
   and counts itself in count[blockIdx.x]; the block that counts last
   (gridDim.y - 1 before it) sees all of the group's partials and sums
   them; it sets the counter back to 0 for the next launch. Every thread
   of the block calls it (two barriers); flag: a __shared__ int. */
static __device__ int trn__last_block(unsigned *count, int *flag) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        *flag = atomicAdd(count + blockIdx.x, 1u) == gridDim.y - 1;
        if (*flag) count[blockIdx.x] = 0;
    }
    __syncthreads();
    return *flag;
}
/* dst[c] += part[0][c] + part[1][c] + ... (nchunk, in order: the bits of
   trn__k_colsum_final) for the n columns from c0, by the block's threads;
   volatile: the other blocks' partials, read past a cache that may hold
   stale lines */
static __device__ void trn__colsum_finish(float *dst, const float *part, int nchunk, int C, int c0, int n) {
    int nt = blockDim.x * blockDim.y;
    for (int c = c0 + threadIdx.y * blockDim.x + threadIdx.x; c < c0 + n && c < C; c += nt) {
        float s = 0.0f;
        for (int k = 0; k < nchunk; k++) s += ((const volatile float *)part)[(size_t)k * C + c];
        dst[c] += s;
    }
}

template <typename X>
static __global__ void trn__k_colsum_part(float *part, const X *x, int N, int C, int rows, float *dst, unsigned *count) {
    __shared__ float acc[8][33];
    int c = blockIdx.x * 32 + threadIdx.x, r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
    float s = 0.0f;
    if (c < C)
        for (int r = r0 + (int)threadIdx.y; r < r1; r += 8) s += trn__ld(x[(size_t)r * C + c]);
    acc[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        for (int k = 1; k < 8; k++) s += acc[k][threadIdx.x];
        part[(size_t)blockIdx.y * C + c] = s;
    }
    __shared__ int last;
    if (dst && trn__last_block(count, &last)) trn__colsum_finish(dst, part, (int)gridDim.y, C, blockIdx.x * 32, 32);
}
/* the same, 8 columns a thread through 16-byte loads (C a multiple of 8, x
   16-byte aligned): a warp reads 256 columns of a row at once. Every
   column's sum is taken in the scalar kernel's order: the same bits. */
template <typename X>
static __global__ void trn__k_colsum_part8(float *part, const X *x, int N, int C, int rows, float *dst, unsigned *count) {
    __shared__ float acc8[8][32][9];
    int c = (blockIdx.x * 32 + threadIdx.x) * 8, r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0}, f[8];
    if (c < C)
        for (int r = r0 + (int)threadIdx.y; r < r1; r += 8) {
            trn__ld8(f, x + (size_t)r * C + c);
            for (int k = 0; k < 8; k++) s[k] += f[k];
        }
    for (int k = 0; k < 8; k++) acc8[threadIdx.y][threadIdx.x][k] = s[k];
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        for (int j = 1; j < 8; j++)
            for (int k = 0; k < 8; k++) s[k] += acc8[j][threadIdx.x][k];
        for (int k = 0; k < 8; k++) part[(size_t)blockIdx.y * C + c + k] = s[k];
    }
    __shared__ int last;
    if (dst && trn__last_block(count, &last)) trn__colsum_finish(dst, part, (int)gridDim.y, C, blockIdx.x * 256, 256);
}
/* step 2 as a pass of its own (the reference; other ops' partials) */
static __global__ void trn__k_colsum_final(float *dst, const float *part, int nchunk, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int k = 0; k < nchunk; k++) s += part[(size_t)k * C + c];
    dst[c] += s;
}

/* the launcher: dst (C, fp32) += column sums of x (N,C), x float or bf16
   (the bias gradient of matmul backward in >>cuda-ops, and of the
   unfused BGRADB in >>cublaslt) */
template <typename X>
static void trn__cuda_colsum(float *dst, const X *x, int N, int C) {
    int nchunk = (N + 63) / 64, rows;
    float *part;
    if (nchunk > 64) nchunk = 64;
    if (nchunk < 1) nchunk = 1;
    rows = (N + nchunk - 1) / nchunk;
    part = trn__cuda_tmp((size_t)nchunk * C);
    unsigned *count = trn__cuda_counts((size_t)(C + 31) / 32); /* one per column group (of 32 or 256) */
    /* one launch: the partials, and the last block of each column group sums them (trn__last_block) */
    TRN__CUDA_SITE("bias grad (column sums)", sizeof(X) * (double)N * C + 8.0 * C, 0); /* dst read and written */
    if (C % 8 == 0 && trn__al16(x))
        TRN_CUDA_LAUNCH(trn__k_colsum_part8<X>, dim3((unsigned)(C + 255) / 256, (unsigned)nchunk), dim3(32, 8), 0,
                        trn__cu.stream, part, x, N, C, rows, dst, count);
    else
        TRN_CUDA_LAUNCH(trn__k_colsum_part<X>, dim3((unsigned)(C + 31) / 32, (unsigned)nchunk), dim3(32, 8), 0,
                        trn__cu.stream, part, x, N, C, rows, dst, count);
}
/* <<colsum */

/* ------------------------------------------------------------------------
   >>embedding: out (N,C) = the rows of table (V,C) that ids (N) name;
   backward adds each row of dout into the table row it came from. Kernels
   and launchers together; the plain references: train.h's
   trn_embedding_forward / _backward.
   ------------------------------------------------------------------------ */
/* a copy of table rows: A to A, no rounding. vec (C a multiple of 8, both
   pointers 16-byte aligned): 8 elements, one or two 16-byte packs, a thread */
template <typename A>
static __global__ void trn__k_embed_fwd(A *out, const int *ids, const A *table, int N, int C, int vec) {
    if (vec) {
        TRN__GRID_STRIDE(j, (size_t)N * C / 8) {
            size_t i = 8 * j;
            const A *src = table + (size_t)ids[i / (size_t)C] * C + i % (size_t)C;
            for (int h = 0; h < 8; h += TRN__VEC(A)) trn__st16(out + i + h, trn__ld16(src + h));
        }
        return;
    }
    TRN__GRID_STRIDE(i, (size_t)N * C) out[i] = table[(size_t)ids[i / (size_t)C] * C + i % (size_t)C];
}
/* rows with the same id add into the same table row: atomics, one 4-byte
   atomicAdd an element, into an fp32 dtable whatever A is (a parameter
   gradient). dout (N,C) is read as one flat array of N C elements: vec
   (dout 16-byte aligned) 8 elements a thread through 16-byte packs (one
   of bf16, two of fp32), a pack free to cross from one row into the next
   (any C), then the last N C % 8 one at a time: the scalar tail (all of
   them without vec). The reference: train.h's trn_embedding_backward. */
template <typename A>
static __global__ void trn__k_embed_bwd(float *dtable, const A *dout, const int *ids, int N, int C, int vec) {
    const size_t n = (size_t)N * C, nv = vec ? n / 8 : 0; /* packs of 8 */
    TRN__GRID_STRIDE(j, nv) {
        float f[8];
        trn__ld8(f, dout + 8 * j);
        size_t r = 8 * j / (size_t)C, c = 8 * j % (size_t)C; /* the row and column of the pack's first element */
        for (int k = 0; k < 8; k++, c++) {
            if (c == (size_t)C) { c = 0; r++; } /* the pack goes on in the next row */
            atomicAdd(&dtable[(size_t)ids[r] * C + c], f[k]);
        }
    }
    TRN__GRID_STRIDE(t, n - 8 * nv) { /* the scalar tail: the last n % 8 */
        size_t i = 8 * nv + t;
        atomicAdd(&dtable[(size_t)ids[i / (size_t)C] * C + i % (size_t)C], trn__ld(dout[i]));
    }
}
/* ids made of B equal rows of T (ids[b T + t] = ids[t]: GPT-2's positions),
   dout (B,T,C): dtable[ids[t]] += sum over b of dout[b][t]. The kernel
   above sends the B rows of each position to one table row, B atomics
   colliding on every element; here a thread sums its element (vec: 8
   elements, 16-byte loads) over the batch in fp32 registers first, then
   adds once: T C atomics instead of B T C, colliding only where a row of
   ids repeats an id (never for positions). The reference: trn__k_embed_bwd
   (the same sums, in another order). */
template <typename A>
static __global__ void trn__k_embed_bwd_rows(float *dtable, const A *dout, const int *ids, int B, int T, int C,
                                             int vec) {
    size_t per = vec ? (size_t)C / 8 : (size_t)C; /* threads per position */
    TRN__GRID_STRIDE(i, (size_t)T * per) {
        int t = (int)(i / per);
        size_t c = (i % per) * (vec ? 8 : 1);
        float *d = dtable + (size_t)ids[t] * C + c;
        if (vec) {
            float s[8] = {0, 0, 0, 0, 0, 0, 0, 0}, f[8];
            for (int b = 0; b < B; b++) {
                trn__ld8(f, dout + ((size_t)b * T + t) * C + c);
                for (int k = 0; k < 8; k++) s[k] += f[k];
            }
            for (int k = 0; k < 8; k++) atomicAdd(&d[k], s[k]);
        } else {
            float s = 0.0f;
            for (int b = 0; b < B; b++) s += trn__ld(dout[((size_t)b * T + t) * C + c]);
            atomicAdd(d, s);
        }
    }
}

/* the launchers: the backend table's embedding_forward, _backward, _backward_rows */
template <typename A>
static void trn__cuda_embedding_forward(float *out, const int *ids, const float *table, int N, int C) {
    if ((size_t)N * C == 0) return;
    int vec = C % 8 == 0 && trn__al16(out) && trn__al16(table);
    TRN__CUDA_SITE("embedding fwd", 4.0 * N + 2.0 * sizeof(A) * N * C, 0); /* ids; the rows read, out written */
    TRN_CUDA_LAUNCH(trn__k_embed_fwd<A>, dim3(trn__cuda_grid((size_t)N * C / (vec ? 8 : 1))), dim3(TRN__CUDA_BLOCK),
                    0, trn__cu.stream, (A *)out, ids, (const A *)table, N, C, vec);
}
template <typename A>
static void trn__cuda_embedding_backward(float *dtable, const float *dout, const int *ids, int N, int C) {
    if (!dtable || (size_t)N * C == 0) return;
    int vec = trn__al16(dout);
    TRN__CUDA_SITE("embedding bwd", 4.0 * N + (sizeof(A) + 8.0) * N * C, 0); /* dout read; dtable rows read+written */
    TRN_CUDA_LAUNCH(trn__k_embed_bwd<A>, dim3(trn__cuda_grid(((size_t)N * C + (vec ? 7 : 0)) / (vec ? 8 : 1))),
                    dim3(TRN__CUDA_BLOCK), 0, trn__cu.stream, dtable, (const A *)dout, ids, N, C, vec);
}
/* the backend's embedding_backward_rows: ids of B equal rows of T */
template <typename A>
static void trn__cuda_embedding_backward_rows(float *dtable, const float *dout, const int *ids, int B, int T, int C) {
    if (!dtable || (size_t)B * T * C == 0) return;
    int vec = C % 8 == 0 && trn__al16(dout);
    /* ids (T) and dout read; the T table rows read + written */
    TRN__CUDA_SITE("embedding bwd (batch summed)", 4.0 * T + sizeof(A) * (double)B * T * C + 8.0 * T * C, (double)B * T * C);
    TRN_CUDA_LAUNCH(trn__k_embed_bwd_rows<A>, dim3(trn__cuda_grid((size_t)T * C / (vec ? 8 : 1))),
                    dim3(TRN__CUDA_BLOCK), 0, trn__cu.stream, dtable, (const A *)dout, ids, B, T, C, vec);
}
/* <<embedding */

/* ------------------------------------------------------------------------
   >>layernorm: out = (x - mean) rstd w + b over each row of C (mean, rstd
   saved for backward), kernels and launchers together. One warp per row
   (a block of 8 warps = 8 rows). x, w, b, out, dout, dinp are A; mean,
   rstd, the partials of dw and db and dw, db themselves are fp32; every
   sum is taken in fp32. vec (C a multiple of 8, every row pointer 16-byte
   aligned, see trn__cuda_ln_vec): lane l takes the 8-element packs l,
   l + 32, ... (GPT-2's C = 768: 3 packs a lane, 16-byte loads), otherwise
   the elements l, l + 32, ... The reference: train.h's
   trn_layernorm_forward / _backward.
   >>addln (res not NULL): the residual add first, in the same pass: sum =
   inp + res rounded to A (sum may be res), written, and the row that is
   normalized is that sum: each lane writes and then reads back its own
   elements, so the result is bit for bit that of the add kernel followed
   by this one (the reference: trn_add_forward, then
   trn_layernorm_forward).
   ------------------------------------------------------------------------ */
template <typename A>
static __global__ void trn__k_ln_fwd(A *out, float *mean, float *rstd, const A *inp, const A *w, const A *b, int N,
                                     int C, int vec, const A *res, A *sum) {
    int lane = threadIdx.x % 32, row = blockIdx.x * 8 + threadIdx.x / 32;
    if (row >= N) return; /* the whole warp leaves together */
    const A *x = inp + (size_t)row * C;
    A *y = out + (size_t)row * C;
    float s = 0.0f, f[8], g[8], h[8];
    if (res) { /* x + res, rounded as the add kernel rounds; the sum's row is x from here on */
        const A *r = res + (size_t)row * C;
        A *z = sum + (size_t)row * C;
        if (vec)
            for (int i = 8 * lane; i < C; i += 256) {
                trn__ld8(f, x + i); trn__ld8(g, r + i);
                for (int k = 0; k < 8; k++) { f[k] = trn__ld(trn__to<A>(f[k] + g[k])); s += f[k]; } /* rounded to A */
                trn__st8(z + i, f);
            }
        else
            for (int i = lane; i < C; i += 32) {
                z[i] = trn__to<A>(trn__ld(x[i]) + trn__ld(r[i]));
                s += trn__ld(z[i]);
            }
        x = z;
    } else if (vec)
        for (int i = 8 * lane; i < C; i += 256) { trn__ld8(f, x + i); for (int k = 0; k < 8; k++) s += f[k]; }
    else
        for (int i = lane; i < C; i += 32) s += trn__ld(x[i]);
    float m = trn__warp_sum(s) / C;
    float v = 0.0f;
    if (vec)
        for (int i = 8 * lane; i < C; i += 256) {
            trn__ld8(f, x + i);
            for (int k = 0; k < 8; k++) v += (f[k] - m) * (f[k] - m);
        }
    else
        for (int i = lane; i < C; i += 32) { float d = trn__ld(x[i]) - m; v += d * d; }
    float r = rsqrtf(trn__warp_sum(v) / C + 1e-5f);
    if (vec)
        for (int i = 8 * lane; i < C; i += 256) {
            trn__ld8(f, x + i); trn__ld8(g, w + i); trn__ld8(h, b + i);
            for (int k = 0; k < 8; k++) f[k] = (f[k] - m) * r * g[k] + h[k];
            trn__st8(y + i, f);
        }
    else
        for (int i = lane; i < C; i += 32) y[i] = trn__to<A>((trn__ld(x[i]) - m) * r * trn__ld(w[i]) + trn__ld(b[i]));
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = r;
    }
}
/* dx += rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dout * w;
   write: dx = ... instead (a fresh dx, never read); dinp2 (>>addln; NULL:
   none) is written with the new dx as well: the residual's gradient handed
   to the branch without a copy pass */
template <typename A>
static __global__ void trn__k_ln_bwd_dx(A *dinp, const A *dout, const A *inp, const A *w, const float *mean,
                                        const float *rstd, int N, int C, int vec, A *dinp2, int write) {
    int lane = threadIdx.x % 32, row = blockIdx.x * 8 + threadIdx.x / 32;
    if (row >= N) return;
    const A *x = inp + (size_t)row * C, *g = dout + (size_t)row * C;
    A *dx = dinp + (size_t)row * C;
    float m = mean[row], r = rstd[row], mg = 0.0f, mgx = 0.0f, fg[8], fw[8], fx[8], fd[8];
    if (vec)
        for (int i = 8 * lane; i < C; i += 256) {
            trn__ld8(fg, g + i); trn__ld8(fw, w + i); trn__ld8(fx, x + i);
            for (int k = 0; k < 8; k++) {
                float gi = fg[k] * fw[k];
                mg += gi;
                mgx += gi * (fx[k] - m) * r;
            }
        }
    else
        for (int i = lane; i < C; i += 32) {
            float gi = trn__ld(g[i]) * trn__ld(w[i]);
            mg += gi;
            mgx += gi * (trn__ld(x[i]) - m) * r;
        }
    mg = trn__warp_sum(mg) / C;
    mgx = trn__warp_sum(mgx) / C;
    if (vec)
        for (int i = 8 * lane; i < C; i += 256) {
            trn__ld8(fg, g + i); trn__ld8(fw, w + i); trn__ld8(fx, x + i);
            if (write) for (int k = 0; k < 8; k++) fd[k] = 0.0f;
            else trn__ld8(fd, dx + i);
            for (int k = 0; k < 8; k++) fd[k] += r * (fg[k] * fw[k] - mg - (fx[k] - m) * r * mgx);
            trn__st8(dx + i, fd);
            if (dinp2) trn__st8(dinp2 + (size_t)row * C + i, fd);
        }
    else
        for (int i = lane; i < C; i += 32) {
            A d = trn__to<A>((write ? 0.0f : trn__ld(dx[i])) +
                             r * (trn__ld(g[i]) * trn__ld(w[i]) - mg - (trn__ld(x[i]) - m) * r * mgx));
            dx[i] = d;
            if (dinp2) dinp2[(size_t)row * C + i] = d;
        }
}
/* dw = sum_n dout * xhat, db = sum_n dout: as trn__k_colsum_part, twice, the last block of each 32 columns summing both */
template <typename A>
static __global__ void trn__k_ln_bwd_part(float *pw, float *pb, const A *dout, const A *inp, const float *mean,
                                          const float *rstd, int N, int C, int rows, float *dw, float *db,
                                          unsigned *count) {
    __shared__ float aw[8][33], ab[8][33];
    int c = blockIdx.x * 32 + threadIdx.x, r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
    float sw = 0.0f, sb = 0.0f;
    if (c < C)
        for (int r = r0 + (int)threadIdx.y; r < r1; r += 8) {
            float g = trn__ld(dout[(size_t)r * C + c]);
            sw += g * ((trn__ld(inp[(size_t)r * C + c]) - mean[r]) * rstd[r]);
            sb += g;
        }
    aw[threadIdx.y][threadIdx.x] = sw;
    ab[threadIdx.y][threadIdx.x] = sb;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        for (int k = 1; k < 8; k++) { sw += aw[k][threadIdx.x]; sb += ab[k][threadIdx.x]; }
        pw[(size_t)blockIdx.y * C + c] = sw;
        pb[(size_t)blockIdx.y * C + c] = sb;
    }
    __shared__ int last; /* the last block of the 32 columns sums the partials (trn__last_block) */
    if (trn__last_block(count, &last)) {
        if (dw) trn__colsum_finish(dw, pw, (int)gridDim.y, C, blockIdx.x * 32, 32);
        if (db) trn__colsum_finish(db, pb, (int)gridDim.y, C, blockIdx.x * 32, 32);
    }
}
/* the same, 8 columns a thread through 16-byte packs of dout and inp (C a
   multiple of 8, both 16-byte aligned; trn__cuda_ln_vec): a warp reads 256
   columns of a row at once, and every column's sums are taken in the
   scalar kernel's order above, its reference */
template <typename A>
static __global__ void trn__k_ln_bwd_part8(float *pw, float *pb, const A *dout, const A *inp, const float *mean,
                                           const float *rstd, int N, int C, int rows, float *dw, float *db,
                                           unsigned *count) {
    __shared__ float aw8[8][32][9], ab8[8][32][9];
    int c = (blockIdx.x * 32 + threadIdx.x) * 8, r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
    float sw[8] = {0, 0, 0, 0, 0, 0, 0, 0}, sb[8] = {0, 0, 0, 0, 0, 0, 0, 0}, g[8], x[8];
    if (c < C)
        for (int r = r0 + (int)threadIdx.y; r < r1; r += 8) {
            trn__ld8(g, dout + (size_t)r * C + c);
            trn__ld8(x, inp + (size_t)r * C + c);
            for (int k = 0; k < 8; k++) {
                sw[k] += g[k] * ((x[k] - mean[r]) * rstd[r]);
                sb[k] += g[k];
            }
        }
    for (int k = 0; k < 8; k++) {
        aw8[threadIdx.y][threadIdx.x][k] = sw[k];
        ab8[threadIdx.y][threadIdx.x][k] = sb[k];
    }
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        for (int j = 1; j < 8; j++)
            for (int k = 0; k < 8; k++) {
                sw[k] += aw8[j][threadIdx.x][k];
                sb[k] += ab8[j][threadIdx.x][k];
            }
        for (int k = 0; k < 8; k++) {
            pw[(size_t)blockIdx.y * C + c + k] = sw[k];
            pb[(size_t)blockIdx.y * C + c + k] = sb[k];
        }
    }
    __shared__ int last; /* the last block of the 256 columns sums the partials */
    if (trn__last_block(count, &last)) {
        if (dw) trn__colsum_finish(dw, pw, (int)gridDim.y, C, blockIdx.x * 256, 256);
        if (db) trn__colsum_finish(db, pb, (int)gridDim.y, C, blockIdx.x * 256, 256);
    }
}

/* The whole layernorm backward in ONE launch (the vec path: C a multiple of
   8, C <= 256 NP, rows 16-byte aligned): the reference is train.h's
   trn_layernorm_backward; the two kernels above are its other form (dx,
   then the dw/db partials), which read dout and inp from HBM twice and
   whose partials kernel runs few blocks of dependent loads.
   Shapes: dout, inp, dinp, dinp2 (N, C) in A; w (C) in A; mean, rstd (N);
   dw, db (C) fp32, ADDED to (master gradients), either may be NULL; part:
   scratch (nb + ng, 2C) fp32 (the ng rows only where ng > 1, step 3).
   Block = 8 warps; nb = gridDim.x blocks (a number the host takes from N
   alone, trn__ln_bwd_blocks); warp w of block b takes rows b*8 + w, then
   + 8 nb, ... (fixed by N, never by the GPU).
   1. Per row, as trn__k_ln_bwd_dx: lane l loads the packs i = 8l + 256p
      (p < NP) of dout, w, inp (and dinp when it is added to: loaded here,
      so the second pass waits on no HBM load), sums mean(g) and
      mean(g xhat), g = dout w, over the warp, and writes dx (+=, or = when
      write; dinp2 too) from the same packs re-read (an L1 hit) with the
      same math and rounding. In the same first pass the lane adds its
      columns' dout * xhat (dw) and dout (db) into registers sw, sb (fp32).
   2. The block's 8 warps' sw, sb are summed in shared memory, warp 0 then
      1 ... 7 in turn, and written as the block's row of part.
   3. Blocks come in groups of 16 (ng = nb / 16 rounded up). The last
      block of a group to finish (trn__last_of, as trn__last_block: the
      counter count[1 + group]) sums its group's rows of part, warp w
      taking rows w, w + 8, ... and the 8 warps' sums again in order; with
      one group that is dw[c] += sum, db[c] += sum; else it writes the sum
      as row nb + group of part, and the last group to finish (count[0])
      sums those ng rows the same way into dw, db. Two levels, so that no
      one SM reads all nb rows at the end (GPT-2: 16 + 8 rows of 6 KB, not
      128) while the other SMs sit idle. Every order is fixed by N and C:
      the same bits on every run and every GPU.
   One launch: dout and inp cross HBM once, and all N/8 warps' worth of
   loads are in flight together, where the partials kernel had 192 blocks
   walking 32 rows each. dinp NULL: only dw, db; dw and db NULL: only dx
   (part NULL). */
static __device__ __forceinline__ void trn__ldcg8(float *f, const float *p) {
#ifndef TRN_CUDA_ON_CPU
    float4 a = __ldcg((const float4 *)p), b = __ldcg((const float4 *)p + 1); /* L2: other blocks' rows */
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w; f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
#else
    cuemu::check_align16(p, "16-byte load");
    memcpy(f, p, 32);
#endif
}
/* red (2C) = the sum of the block's 8 warps' sw (into red[0, C)) and sb
   (into red[C, 2C)), warp 0 first, then 1, ..., 7 (8 barriers) */
template <int NP>
static __device__ __forceinline__ void trn__ln_bwd_block_sum(float *red, float (*sw)[8], float (*sb)[8], int C) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int j = 0; j < 8; j++) {
        if (warp == j)
            for (int p = 0; p < NP; p++) {
                int i = 8 * lane + 256 * p;
                if (i < C)
                    for (int k = 0; k < 8; k++) {
                        red[i + k] = j ? red[i + k] + sw[p][k] : sw[p][k];
                        red[C + i + k] = j ? red[C + i + k] + sb[p][k] : sb[p][k];
                    }
            }
        __syncthreads();
    }
}
/* trn__last_block with its counter and its number of blocks named: is this
   block the n-th (the last) of those that count in *count? It sets the
   counter back to 0 for the next launch. Every thread calls it. */
static __device__ int trn__last_of(unsigned *count, unsigned n, int *flag) {
    __threadfence(); /* this block's partial row, visible to every block */
    __syncthreads();
    if (threadIdx.x == 0) {
        *flag = atomicAdd(count, 1u) == n - 1;
        if (*flag) *count = 0;
    }
    __syncthreads();
    return *flag;
}
/* red (2C) = the sum of the rows [r0, r1) of part (rows of 2C floats, other
   blocks' writes: read from L2): warp w adds the rows r0 + w, r0 + w + 8,
   ... in order for its lanes' columns, then the warps' sums in order (the
   block sum above); sw, sb: the caller's registers, reused */
template <int NP>
static __device__ __forceinline__ void trn__ln_bwd_rows_sum(float *red, float (*sw)[8], float (*sb)[8],
                                                            const float *part, int r0, int r1, int C) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float a[8], b[8];
    for (int p = 0; p < NP; p++)
        for (int k = 0; k < 8; k++) sw[p][k] = sb[p][k] = 0.0f;
    for (int j = r0 + warp; j < r1; j += 8) {
        const float *q = part + (size_t)j * 2 * C;
        for (int p = 0; p < NP; p++) {
            int i = 8 * lane + 256 * p;
            if (i >= C) break;
            trn__ldcg8(a, q + i);
            trn__ldcg8(b, q + C + i);
            for (int k = 0; k < 8; k++) { sw[p][k] += a[k]; sb[p][k] += b[k]; }
        }
    }
    trn__ln_bwd_block_sum<NP>(red, sw, sb, C);
}
template <typename A, int NP>
static __global__ void __launch_bounds__(256, 1)
    trn__k_ln_bwd(A *dinp, float *part, const A *dout, const A *inp, const A *w, const float *mean,
                  const float *rstd, int N, int C, A *dinp2, int write, float *dw, float *db, unsigned *count) {
    __shared__ float red[2 * 256 * NP]; /* the block's sums: dw's C, then db's C */
    __shared__ int last;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float sw[NP][8], sb[NP][8], fd[NP][8], fg[8], fw[8], fx[8];
    for (int p = 0; p < NP; p++)
        for (int k = 0; k < 8; k++) sw[p][k] = sb[p][k] = 0.0f;
    for (int row = blockIdx.x * 8 + warp; row < N; row += 8 * gridDim.x) { /* the whole warp: one row */
        const A *x = inp + (size_t)row * C, *g = dout + (size_t)row * C;
        float m = mean[row], r = rstd[row], mg = 0.0f, mgx = 0.0f;
        for (int p = 0; p < NP; p++) { /* pass 1: the row's sums; dw, db; dinp's packs */
            int i = 8 * lane + 256 * p;
            if (i >= C) break;
            trn__ld8(fg, g + i); trn__ld8(fw, w + i); trn__ld8(fx, x + i);
            if (dinp && !write) trn__ld8(fd[p], dinp + (size_t)row * C + i);
            for (int k = 0; k < 8; k++) {
                float gi = fg[k] * fw[k];
                mg += gi;
                mgx += gi * (fx[k] - m) * r;
                sw[p][k] += fg[k] * ((fx[k] - m) * r); /* dout * xhat, as trn__k_ln_bwd_part8 */
                sb[p][k] += fg[k];
            }
        }
        if (!dinp) continue; /* the same for the whole grid */
        mg = trn__warp_sum(mg) / C;
        mgx = trn__warp_sum(mgx) / C;
        for (int p = 0; p < NP; p++) { /* pass 2: dx, as trn__k_ln_bwd_dx */
            int i = 8 * lane + 256 * p;
            if (i >= C) break;
            trn__ld8(fg, g + i); trn__ld8(fw, w + i); trn__ld8(fx, x + i);
            if (write) for (int k = 0; k < 8; k++) fd[p][k] = 0.0f;
            for (int k = 0; k < 8; k++) fd[p][k] += r * (fg[k] * fw[k] - mg - (fx[k] - m) * r * mgx);
            trn__st8(dinp + (size_t)row * C + i, fd[p]);
            if (dinp2) trn__st8(dinp2 + (size_t)row * C + i, fd[p]);
        }
    }
    if (!part) return; /* no dw, no db (the same for every block) */
    /* the block's row of part, then two levels of last blocks */
    int nb = (int)gridDim.x, g = blockIdx.x / 16, ng = (nb + 15) / 16, gs = min(16, nb - 16 * g);
    trn__ln_bwd_block_sum<NP>(red, sw, sb, C);
    for (int c = threadIdx.x; c < 2 * C; c += 256) part[(size_t)blockIdx.x * 2 * C + c] = red[c];
    if (!trn__last_of(count + 1 + g, (unsigned)gs, &last)) return; /* (its barriers keep red until all wrote) */
    trn__ln_bwd_rows_sum<NP>(red, sw, sb, part, 16 * g, 16 * g + gs, C); /* the group's 16 rows (or fewer) */
    if (ng > 1) { /* the group's sum is row g of part2 = part + nb rows; the last group's last block sums those */
        for (int c = threadIdx.x; c < 2 * C; c += 256) part[(size_t)(nb + g) * 2 * C + c] = red[c];
        if (!trn__last_of(count, (unsigned)ng, &last)) return;
        trn__ln_bwd_rows_sum<NP>(red, sw, sb, part, nb, nb + ng, C);
    }
    for (int c = threadIdx.x; c < C; c += 256) {
        if (dw) dw[c] += red[c];
        if (db) db[c] += red[C + c];
    }
}

/* the launchers: the backend table's layernorm_forward,
   add_layernorm_forward, layernorm_backward(_ex) */
/* 16-byte packs in a row kernel: C a multiple of 8 keeps every row at a
   16-byte boundary when the base pointers are */
static int trn__cuda_ln_vec(int C, const void *p, const void *q, const void *r, const void *s) {
    return C % 8 == 0 && trn__al16(p) && trn__al16(q) && trn__al16(r) && trn__al16(s);
}
template <typename A>
static void trn__cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                        const float *b, int N, int C) {
    if (N <= 0) return;
    TRN__CUDA_SITE("layernorm fwd", sizeof(A) * (2.0 * N * C + 2.0 * C) + 8.0 * N, 7.0 * N * C);
    TRN_CUDA_LAUNCH(trn__k_ln_fwd<A>, dim3((unsigned)(N + 7) / 8), dim3(256), 0, trn__cu.stream, (A *)out, mean,
                    rstd, (const A *)inp, (const A *)w, (const A *)b, N, C, trn__cuda_ln_vec(C, out, inp, w, b),
                    (const A *)NULL, (A *)NULL);
}
/* >>addln: the residual add and the layernorm in one pass (sum may be b) */
template <typename A>
static void trn__cuda_add_layernorm_forward(float *sum, float *out, float *mean, float *rstd, const float *a,
                                            const float *b, const float *w, const float *bias, int N, int C) {
    if (N <= 0) return;
    /* a, b read; sum, out written; w, bias read; mean, rstd written */
    TRN__CUDA_SITE("add+layernorm fwd", sizeof(A) * (4.0 * N * C + 2.0 * C) + 8.0 * N, 8.0 * N * C);
    TRN_CUDA_LAUNCH(trn__k_ln_fwd<A>, dim3((unsigned)(N + 7) / 8), dim3(256), 0, trn__cu.stream, (A *)out, mean,
                    rstd, (const A *)a, (const A *)w, (const A *)bias, N, C,
                    trn__cuda_ln_vec(C, out, a, w, bias) && trn__al16(b) && trn__al16(sum), (const A *)b, (A *)sum);
}
/* blocks of the one-launch layernorm backward (trn__k_ln_bwd): 8 rows a warp
   at least (64 a block), at most 128 blocks: one wave of one block an SM on
   an H100 (132 SMs), and few partial rows for the last blocks to sum. A
   function of N alone, so the sums' order (the bits) is too. */
static int trn__ln_bwd_blocks(int N) { return N > 128 * 64 ? 128 : (N + 63) / 64; }
/* dinp2 (>>addln): NULL, or written with dinp's final values; write_dinp:
   dinp is written, not added to (a fresh gradient). The vec path with C <=
   1024 (GPT-2, and small Llamas) is one launch, trn__k_ln_bwd; otherwise the
   dx kernel and the partials kernel (the last block of each column group
   sums them). */
template <typename A>
static void trn__cuda_layernorm_backward_ex(float *dinp, float *dinp2, float *dw, float *db, const float *dout,
                                            const float *inp, const float *w, const float *mean, const float *rstd,
                                            int N, int C, int write_dinp) {
    if (N <= 0) return;
    if (!dinp) dinp2 = NULL;
    if (!dinp && !dw && !db) return;
    /* counters: one a column group (the partials kernel), 1 + 8 (trn__k_ln_bwd); before the site: it may zero them */
    unsigned *count = dw || db ? trn__cuda_counts((size_t)(C + 31) / 32 > 9 ? (size_t)(C + 31) / 32 : 9) : NULL;
    int np = (C + 255) / 256, vec = trn__cuda_ln_vec(C, dinp, dout, inp, w) && trn__al16(dinp2);
    if (vec && np <= 4) {
        int nb = trn__ln_bwd_blocks(N), ng = (nb + 15) / 16;
        float *part = dw || db ? trn__cuda_tmp(2 * (size_t)(nb + (ng > 1 ? ng : 0)) * C) : NULL;
        /* dout, inp read once; dinp read (unless written) and written; dinp2
           written; w; mean, rstd; the partials (nb, 2C) and the groups' sums
           (ng, 2C) written and read back once; dw, db read and written */
        TRN__CUDA_SITE("layernorm bwd", sizeof(A) * ((2.0 + (dinp ? (write_dinp ? 1.0 : 2.0) : 0.0) +
                                                      (dinp2 ? 1.0 : 0.0)) * N * C + C) +
                                            8.0 * N + (part ? 16.0 * (nb + (ng > 1 ? ng : 0)) * C + 16.0 * C : 0.0),
                       10.0 * N * C);
        void (*k_ln_bwd)(A *, float *, const A *, const A *, const A *, const float *, const float *, int, int, A *,
                         int, float *, float *, unsigned *) = /* <A, packs a lane> */
            np <= 1 ? trn__k_ln_bwd<A, 1> : np == 2 ? trn__k_ln_bwd<A, 2> : np == 3 ? trn__k_ln_bwd<A, 3>
                                                                               : trn__k_ln_bwd<A, 4>;
        /* counters: count[0] for the groups, count[1 + g] for group g's blocks */
        TRN_CUDA_LAUNCH(k_ln_bwd, dim3((unsigned)nb), dim3(256), 0, trn__cu.stream, (A *)dinp, part, (const A *)dout,
                        (const A *)inp, (const A *)w, mean, rstd, N, C, (A *)dinp2, write_dinp, dw, db, count);
        return;
    }
    TRN__CUDA_SITE("layernorm bwd", sizeof(A) * ((dinp ? (write_dinp ? 3.0 : 4.0) : 2.0) * N * C +
                                                 (dinp2 ? 1.0 : 0.0) * N * C + C) +
                                        8.0 * N + 16.0 * C, 10.0 * N * C); /* dinp +=: read (unless written) and written; dinp2 written */
    if (dinp)
        TRN_CUDA_LAUNCH(trn__k_ln_bwd_dx<A>, dim3((unsigned)(N + 7) / 8), dim3(256), 0, trn__cu.stream, (A *)dinp,
                        (const A *)dout, (const A *)inp, (const A *)w, mean, rstd, N, C, vec, (A *)dinp2,
                        write_dinp);
    if (dw || db) {
        int nchunk = (N + 63) / 64, rows;
        float *pw, *pb;
        if (nchunk > 64) nchunk = 64;
        rows = (N + nchunk - 1) / nchunk;
        pw = trn__cuda_tmp(2 * (size_t)nchunk * C);
        pb = pw + (size_t)nchunk * C;
        /* one launch: the partials of dw and db, summed by the last block of each column group */
        if (trn__cuda_ln_vec(C, dout, inp, dout, inp))
            TRN_CUDA_LAUNCH(trn__k_ln_bwd_part8<A>, dim3((unsigned)(C + 255) / 256, (unsigned)nchunk), dim3(32, 8), 0,
                            trn__cu.stream, pw, pb, (const A *)dout, (const A *)inp, mean, rstd, N, C, rows, dw, db,
                            count);
        else
            TRN_CUDA_LAUNCH(trn__k_ln_bwd_part<A>, dim3((unsigned)(C + 31) / 32, (unsigned)nchunk), dim3(32, 8), 0,
                            trn__cu.stream, pw, pb, (const A *)dout, (const A *)inp, mean, rstd, N, C, rows, dw, db,
                            count);
    }
}
template <typename A>
static void trn__cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                         const float *w, const float *mean, const float *rstd, int N, int C) {
    trn__cuda_layernorm_backward_ex<A>(dinp, NULL, dw, db, dout, inp, w, mean, rstd, N, C, 0);
}
/* <<layernorm */

/* ------------------------------------------------------------------------
   >>elementwise: one value out per value in (GELU, ReLU, add, accumulate,
   scale, MSE), kernels and launchers together. The plain references:
   train.h's trn_gelu_forward / _backward, trn_relu_forward / _backward,
   trn_add_forward, trn_accumulate, trn_scale, trn_mse_forward / _backward.
   SiLU, sigmoid and tanh run through the same trn__k_map (>>ops2); the
   unfused matmul + GELU kernel here, trn__k_bias_gelu, is launched by
   >>mlp and >>cublaslt.
   ------------------------------------------------------------------------ */
#define TRN__CUDA_GELU_K 0.7978845608028654f /* sqrt(2/pi), as train.h */
/* GELU in GPT-2's tanh form, gelu(x) = x/2 (1 + tanh(k (x + 0.044715 x^3))),
   and its derivative d gelu / dx: one definition for the GELU kernels and
   the unfused matmul + GELU pair below */
static __device__ __forceinline__ float trn__gelu(float x) {
    return 0.5f * x * (1.0f + tanhf(TRN__CUDA_GELU_K * (x + 0.044715f * x * x * x)));
}
static __device__ __forceinline__ float trn__gelu_grad(float x) {
    float t = tanhf(TRN__CUDA_GELU_K * (x + 0.044715f * x * x * x));
    float dt = (1.0f - t * t) * TRN__CUDA_GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * dt;
}
/* out[i] = op(a[i], b[i], c[i], i) for i < n (b, c NULL when op takes
   fewer; out may be a: that is how += is written; i, the element's index,
   for ops that need it: a bias row, dropout's mask). Eight elements at a
   time through 16-byte loads and stores (one pack of 8 bf16, two of 4
   fp32) where every pointer is 16-byte aligned (vec, from the host), then
   the last n % 8 one at a time: the scalar tail. One kernel for every such
   op; an op is a struct with one element's math. out is A too, except for
   a loss per element (O = float: mse). */
template <typename A, typename Op, typename O>
static __global__ void trn__k_map(O *out, const A *a, const A *b, const A *c, size_t n, int vec, Op op) {
    const size_t nv = vec ? n / 8 : 0; /* packs of 8 */
    TRN__GRID_STRIDE(i, nv) {
        float x[8], y[8] = {0}, z[8] = {0};
        trn__ld8(x, a + 8 * i);
        if (b) trn__ld8(y, b + 8 * i);
        if (c) trn__ld8(z, c + 8 * i);
        for (int k = 0; k < 8; k++) x[k] = op(x[k], y[k], z[k], 8 * i + k);
        trn__st8(out + 8 * i, x);
    }
    TRN__GRID_STRIDE(t, n - 8 * nv) { /* the tail */
        size_t i = 8 * nv + t;
        out[i] = trn__to<O>(op(trn__ld(a[i]), b ? trn__ld(b[i]) : 0.0f, c ? trn__ld(c[i]) : 0.0f, i));
    }
}
/* the host side: 16-byte access only when every pointer allows it */
template <typename A, typename O = A, typename Op>
static void trn__cuda_map(Op op, float *out, const float *a, const float *b, const float *c, size_t n) {
    int vec = trn__al16(out) && trn__al16(a) && trn__al16(b) && trn__al16(c);
    if (n == 0) return;
    TRN_CUDA_LAUNCH((trn__k_map<A, Op, O>), dim3(trn__cuda_grid((n + 7) / 8)), dim3(TRN__CUDA_BLOCK), 0, trn__cu.stream,
                    (O *)out, (const A *)a, (const A *)b, (const A *)c, n, vec, op);
}
/* the ops (the references: train.h's trn_gelu_forward, trn_relu_forward, ...) */
struct trn__op_gelu { __device__ float operator()(float x, float, float, size_t) const { return trn__gelu(x); } };
/* dinp += dout * gelu'(inp): a = dinp, b = inp, c = dout */
struct trn__op_gelu_bwd {
    __device__ float operator()(float d, float x, float g, size_t) const { return d + g * trn__gelu_grad(x); }
};
/* d = d * gelu'(pre), in place: the GEMM wrote dloss/d(gelu's output) into d (the unfused matmul + dgelu) */
struct trn__op_dgelu_mul {
    __device__ float operator()(float d, float x, float, size_t) const { return d * trn__gelu_grad(x); }
};
struct trn__op_add { __device__ float operator()(float x, float y, float, size_t) const { return x + y; } };
/* d + y z: a gradient that accumulates a product (mul's db when b has a's shape) */
struct trn__op_add_mul { __device__ float operator()(float d, float y, float z, size_t) const { return d + y * z; } };
struct trn__op_relu { __device__ float operator()(float x, float, float, size_t) const { return x > 0.0f ? x : 0.0f; } };
/* dinp += dout where out > 0: a = dinp, b = out, c = dout */
struct trn__op_relu_bwd {
    __device__ float operator()(float d, float y, float g, size_t) const { return y > 0.0f ? d + g : d; }
};
struct trn__op_scale {
    float s;
    __device__ float operator()(float x, float, float, size_t) const { return x * s; }
};
/* mse: a = pred, b = target; the loss per element is fp32 whatever A is */
struct trn__op_mse {
    __device__ float operator()(float p, float t, float, size_t) const { float d = p - t; return d * d; }
};
/* dpred += dloss 2 (pred - target): a = dpred, b = pred, c = target */
struct trn__op_mse_bwd {
    float dloss;
    __device__ float operator()(float d, float p, float t, size_t) const { return d + dloss * 2.0f * (p - t); }
};
/* x + row[i % C] and x * row[i % C]: a row (a bias, mul's broadcast b)
   over the rows of an (N,C) array. The row is small and stays in cache,
   so it is read an element at a time; x, the big array, in packs. */
template <typename A>
struct trn__op_add_row {
    const A *row;
    size_t C;
    __device__ float operator()(float x, float, float, size_t i) const { return x + trn__ld(row[i % C]); }
};
template <typename A>
struct trn__op_mul_row {
    const A *row;
    size_t C;
    __device__ float operator()(float x, float, float, size_t i) const { return x * trn__ld(row[i % C]); }
};
/* da += dout * row[i % C]: a = da, b = dout */
template <typename A>
struct trn__op_acc_mul_row {
    const A *row;
    size_t C;
    __device__ float operator()(float d, float g, float, size_t i) const { return d + g * trn__ld(row[i % C]); }
};
/* matmul + GELU where cuBLASLt's epilogue does not do it (fp32, tf32, and
   bf16 shapes the epilogue cannot take): the GEMM wrote its product into
   pre (N,OC); this one pass adds the bias (NULL: none, or the GEMM added
   it), keeps the sum in pre (what backward reads) and writes gelu of it. */
/* Eight at a time (16-byte packs) when OC % 8 == 0 and the arrays are
   16-byte aligned (vec), so that a pack never crosses a row; else one at a
   time. */
template <typename A>
static __device__ __forceinline__ float trn__bias_gelu1(A *pre, const A *bias, size_t i, int OC) {
    float v = trn__ld(pre[i]);
    if (bias) {
        v += trn__ld(bias[i % (size_t)OC]);
        pre[i] = trn__to<A>(v);
    }
    return trn__gelu(v);
}
template <typename A>
static __global__ void trn__k_bias_gelu(A *out, A *pre, const A *bias, size_t N, int OC, int vec) {
    const size_t n = N * (size_t)OC, nv = vec ? n / 8 : 0;
    TRN__GRID_STRIDE(p, nv) {
        float v[8], b[8];
        trn__ld8(v, pre + 8 * p);
        if (bias) {
            trn__ld8(b, bias + (8 * p) % (size_t)OC);
            for (int k = 0; k < 8; k++) v[k] += b[k];
            trn__st8(pre + 8 * p, v); /* (gelu below takes the fp32 sum, as one at a time) */
        }
        for (int k = 0; k < 8; k++) v[k] = trn__gelu(v[k]);
        trn__st8(out + 8 * p, v);
    }
    TRN__GRID_STRIDE(t, n - 8 * nv) out[8 * nv + t] = trn__to<A>(trn__bias_gelu1(pre, bias, 8 * nv + t, OC));
}
template <typename A>
static void trn__cuda_bias_gelu(A *out, A *pre, const A *bias, size_t N, int OC) {
    size_t n = N * (size_t)OC;
    int vec = OC % 8 == 0 && trn__al16(out) && trn__al16(pre) && trn__al16(bias);
    if (n == 0) return;
    TRN_CUDA_LAUNCH(trn__k_bias_gelu<A>, dim3(trn__cuda_grid(vec ? (n + 7) / 8 : n)), dim3(TRN__CUDA_BLOCK), 0,
                    trn__cu.stream, out, pre, bias, N, OC, vec);
}

/* the launchers: the backend table's gelu_forward ... mse_backward */
template <typename A>
static void trn__cuda_gelu_forward(float *out, const float *inp, size_t n) {
    TRN__CUDA_SITE("gelu fwd", 2.0 * sizeof(A) * n, 0);
    trn__cuda_map<A>(trn__op_gelu(), out, inp, NULL, NULL, n);
}
template <typename A>
static void trn__cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    TRN__CUDA_SITE("gelu bwd", 4.0 * sizeof(A) * n, 0); /* dinp +=: read and written */
    if (dinp) trn__cuda_map<A>(trn__op_gelu_bwd(), dinp, dinp, inp, dout, n);
}
template <typename A>
static void trn__cuda_relu_forward(float *out, const float *inp, size_t n) {
    TRN__CUDA_SITE("relu fwd", 2.0 * sizeof(A) * n, n);
    trn__cuda_map<A>(trn__op_relu(), out, inp, NULL, NULL, n);
}
template <typename A>
static void trn__cuda_relu_backward(float *dinp, const float *out, const float *dout, size_t n) {
    TRN__CUDA_SITE("relu bwd", 3.0 * sizeof(A) * n, n);
    if (dinp) trn__cuda_map<A>(trn__op_relu_bwd(), dinp, dinp, out, dout, n);
}
template <typename A>
static void trn__cuda_add_forward(float *out, const float *a, const float *b, size_t n) {
    TRN__CUDA_SITE("add", 3.0 * sizeof(A) * n, n);
    trn__cuda_map<A>(trn__op_add(), out, a, b, NULL, n);
}
template <typename A>
static void trn__cuda_accumulate(float *dst, const float *src, size_t n) {
    TRN__CUDA_SITE("accumulate", 3.0 * sizeof(A) * n, n);
    if (dst) trn__cuda_map<A>(trn__op_add(), dst, dst, src, NULL, n);
}
static void trn__cuda_scale(float *x, float s, size_t n) {
    TRN__CUDA_SITE("scale", 8.0 * n, n);
    trn__op_scale op = {s};
    trn__cuda_map<float>(op, x, x, NULL, NULL, n);
}
template <typename A>
static void trn__cuda_mse_forward(float *losses, const float *pred, const float *target, size_t n) {
    TRN__CUDA_SITE("mse fwd", 2.0 * sizeof(A) * n + 4.0 * n, 3.0 * n);
    trn__cuda_map<A, float>(trn__op_mse(), losses, pred, target, NULL, n);
}
template <typename A>
static void trn__cuda_mse_backward(float *dpred, const float *pred, const float *target, float dloss, size_t n) {
    TRN__CUDA_SITE("mse bwd", 3.0 * sizeof(A) * n, 3.0 * n);
    trn__op_mse_bwd op = {dloss};
    if (dpred) trn__cuda_map<A>(op, dpred, dpred, pred, target, n);
}
/* <<elementwise */

/* --- attention: softmax over rows of S (B*NH*T rows of length T), in place.
   One warp per row; causal rows t see columns 0..t, the rest become 0.
   Stored as A (float or bf16), max, sum and exp in fp32. --- */
template <typename A>
static __global__ void trn__k_softmax_fwd(A *att, int rows, int T, int causal) {
    int lane = threadIdx.x % 32, row = blockIdx.x * 8 + threadIdx.x / 32;
    if (row >= rows) return;
    A *p = att + (size_t)row * T;
    int last = causal ? row % T : T - 1;
    float mx = -INFINITY;
    for (int s = lane; s <= last; s += 32) mx = fmaxf(mx, trn__ld(p[s]));
    mx = trn__warp_max(mx);
    float sum = 0.0f;
    for (int s = lane; s <= last; s += 32) sum += expf(trn__ld(p[s]) - mx);
    sum = trn__warp_sum(sum);
    float inv = 1.0f / sum;
    for (int s = lane; s < T; s += 32) p[s] = trn__to<A>(s <= last ? expf(trn__ld(p[s]) - mx) * inv : 0.0f);
}
/* dS = P * (dP - rowsum(dP * P)), in place over dP (masked entries: P = 0) */
template <typename A>
static __global__ void trn__k_softmax_bwd(A *dS, const A *att, int rows, int T) {
    int lane = threadIdx.x % 32, row = blockIdx.x * 8 + threadIdx.x / 32;
    if (row >= rows) return;
    const A *p = att + (size_t)row * T;
    A *d = dS + (size_t)row * T;
    float dot = 0.0f;
    for (int s = lane; s < T; s += 32) dot += trn__ld(p[s]) * trn__ld(d[s]);
    dot = trn__warp_sum(dot);
    for (int s = lane; s < T; s += 32) d[s] = trn__to<A>(trn__ld(p[s]) * (trn__ld(d[s]) - dot));
}

/* --- fused attention (flash-style), the kernels of train.h's
   trn_flash_attention_forward/backward (same layout, same math: see the
   comment there). A block owns a tile of t query rows (forward, dQ) or t
   keys (dK, dV) of one head; the other side streams through shared memory
   in tiles of t rows. Rows are padded to hs+1 floats, so lanes that read
   the same column of different rows hit different banks. Each warp owns
   whole rows of its tile (row r belongs to warp r % 8); in a row, lane j
   scores key (or query) j of the streamed tile, then the lanes split the hs
   output columns. t <= 32 is chosen per launch so that all tiles fit in
   48 KiB (t = 32 forward, 16 backward at hs = 64).
   Backward is two kernels, both without atomics (so deterministic): one per
   key tile that sums dK and dV over every query of every head of the group,
   one per query tile that sums dQ over the keys. Both rebuild P from lse,
   and D = rowsum(dO * O) per query row, from the saved output. --------- */
#define TRN__FLASH_THREADS 256 /* 8 warps */
#define TRN__FLASH_WARPS (TRN__FLASH_THREADS / 32)

/* copy rows [r0, r0+n) of one head (hs values at stride ld) into a tile of
   t rows of floats at stride hs+1; rows past n become 0. These kernels are
   templates on the storage type A of qkv, out, dout, dqkv (float; bf16 for
   head sizes the tensor-core kernels below do not cover): tiles and math
   are fp32 either way, and the float instantiation is the fp32 kernel. */
template <typename A>
static __device__ __forceinline__ void trn__flash_load(float *tile, const A *src, size_t ld, int r0, int n,
                                                       int t, int hs) {
    for (int idx = threadIdx.x; idx < t * hs; idx += blockDim.x) {
        int r = idx / hs, d = idx % hs;
        tile[r * (hs + 1) + d] = r < n ? trn__ld(src[(size_t)(r0 + r) * ld + d]) : 0.0f;
    }
}

/* dot product of two tile rows (stride hs+1 within each tile) */
static __device__ __forceinline__ float trn__flash_dot(const float *a, const float *b, int hs) {
    float s = 0.0f;
    for (int d = 0; d < hs; d++) s += a[d] * b[d];
    return s;
}

/* grid (B*NH, query tiles). Shared: Q, O (t rows each), K, V tile, P (t x t) */
template <typename A>
static __global__ void trn__k_flash_fwd(A *out, float *lse, const A *qkv, int T, int NH, int NKV, int hs,
                                        int causal, int t, float scale) {
    TRN_CUDA_DYNAMIC_SHARED(float, sm);
    int hp = hs + 1, bh = blockIdx.x, b = bh / NH, h = bh % NH, g = h / (NH / NKV);
    int i0 = blockIdx.y * t, nq = min(t, T - i0), lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int kend = causal ? i0 + nq : T, C = NH * hs;
    size_t ld = (size_t)(NH + 2 * NKV) * hs;
    const A *x = qkv + (size_t)b * T * ld;
    float *Qs = sm, *Os = Qs + t * hp, *Ks = Os + t * hp, *Vs = Ks + t * hp, *Ps = Vs + t * hp;
    float m[32 / TRN__FLASH_WARPS], l[32 / TRN__FLASH_WARPS];
    for (int k = 0; k < 32 / TRN__FLASH_WARPS; k++) { m[k] = -INFINITY; l[k] = 0.0f; }
    trn__flash_load(Qs, x + (size_t)h * hs, ld, i0, nq, t, hs);
    for (int idx = threadIdx.x; idx < t * hp; idx += blockDim.x) Os[idx] = 0.0f;
    for (int j0 = 0; j0 < kend; j0 += t) {
        int nk = min(t, kend - j0);
        __syncthreads(); /* everyone is done with the previous K, V tile */
        trn__flash_load(Ks, x + (size_t)(NH + g) * hs, ld, j0, nk, t, hs);
        trn__flash_load(Vs, x + (size_t)(NH + NKV + g) * hs, ld, j0, nk, t, hs);
        __syncthreads();
        for (int k = 0, r = warp; r < nq; k++, r += TRN__FLASH_WARPS) {
            float s = -INFINITY, p, mx, corr;
            if (lane < nk && (!causal || j0 + lane <= i0 + r))
                s = scale * trn__flash_dot(Qs + r * hp, Ks + lane * hp, hs);
            mx = fmaxf(m[k], trn__warp_max(s)); /* finite: every row sees key 0 */
            p = s == -INFINITY ? 0.0f : expf(s - mx);
            corr = expf(m[k] - mx);             /* 0 on the first tile */
            l[k] = l[k] * corr + trn__warp_sum(p);
            m[k] = mx;
            if (lane < t) Ps[r * t + lane] = p;
            __syncwarp();
            for (int d = lane; d < hs; d += 32) {
                float acc = Os[r * hp + d] * corr;
                for (int j = 0; j < nk; j++) acc += Ps[r * t + j] * Vs[j * hp + d];
                Os[r * hp + d] = acc;
            }
            __syncwarp(); /* the row of P is rewritten on the next tile */
        }
    }
    for (int k = 0, r = warp; r < nq; k++, r += TRN__FLASH_WARPS) {
        float inv = 1.0f / l[k];
        for (int d = lane; d < hs; d += 32)
            out[((size_t)b * T + i0 + r) * C + (size_t)h * hs + d] = trn__to<A>(Os[r * hp + d] * inv);
        if (lane == 0) lse[(size_t)bh * T + i0 + r] = m[k] + logf(l[k]);
    }
}

/* D[r] = rowsum(dO * O) and L[r] = lse for the query rows of a tile */
template <typename A>
static __device__ __forceinline__ void trn__flash_rows(float *Ds, float *Ls, const A *dO, const A *out,
                                                       const float *lse, int b, int h, int i0, int nq, int T, int NH,
                                                       int hs) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, C = NH * hs;
    for (int r = warp; r < nq; r += TRN__FLASH_WARPS) {
        size_t o = ((size_t)b * T + i0 + r) * C + (size_t)h * hs;
        float s = 0.0f;
        for (int d = lane; d < hs; d += 32) s += trn__ld(dO[o + d]) * trn__ld(out[o + d]);
        s = trn__warp_sum(s);
        if (lane == 0) { Ds[r] = s; Ls[r] = lse[((size_t)b * NH + h) * T + i0 + r]; }
    }
}

/* dK, dV for one key tile: grid (B*NKV, key tiles). Shared: K, V, dK, dV,
   Q, dO (t rows each), P and dS (t x t: row c = key c, column r = query r),
   D and lse (t) */
template <typename A>
static __global__ void trn__k_flash_bwd_kv(A *dqkv, const A *dout, const A *qkv, const A *out,
                                           const float *lse, int T, int NH, int NKV, int hs, int causal, int t,
                                           float scale) {
    TRN_CUDA_DYNAMIC_SHARED(float, sm);
    int hp = hs + 1, bg = blockIdx.x, b = bg / NKV, g = bg % NKV, R = NH / NKV;
    int j0 = blockIdx.y * t, nk = min(t, T - j0), lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    size_t ld = (size_t)(NH + 2 * NKV) * hs, x = (size_t)b * T * ld;
    float *Ks = sm, *Vs = Ks + t * hp, *dKs = Vs + t * hp, *dVs = dKs + t * hp, *Qs = dVs + t * hp;
    float *dOs = Qs + t * hp, *Ps = dOs + t * hp, *dSs = Ps + t * t, *Ds = dSs + t * t, *Ls = Ds + t;
    trn__flash_load(Ks, qkv + x + (size_t)(NH + g) * hs, ld, j0, nk, t, hs);
    trn__flash_load(Vs, qkv + x + (size_t)(NH + NKV + g) * hs, ld, j0, nk, t, hs);
    for (int idx = threadIdx.x; idx < t * hp; idx += blockDim.x) { dKs[idx] = 0.0f; dVs[idx] = 0.0f; }
    for (int h = g * R; h < (g + 1) * R; h++)
        for (int i0 = causal ? j0 : 0; i0 < T; i0 += t) { /* causal: queries before j0 see none of it */
            int nq = min(t, T - i0);
            __syncthreads(); /* done with the previous Q, dO, D, lse */
            trn__flash_load(Qs, qkv + x + (size_t)h * hs, ld, i0, nq, t, hs);
            trn__flash_load(dOs, dout + (size_t)b * T * NH * hs + (size_t)h * hs, (size_t)NH * hs, i0, nq, t, hs);
            trn__flash_rows(Ds, Ls, dout, out, lse, b, h, i0, nq, T, NH, hs);
            __syncthreads();
            for (int c = warp; c < nk; c += TRN__FLASH_WARPS) { /* key j0+c; lane r: query i0+r */
                float p = 0.0f, ds = 0.0f;
                if (lane < nq && (!causal || j0 + c <= i0 + lane)) {
                    p = expf(scale * trn__flash_dot(Qs + lane * hp, Ks + c * hp, hs) - Ls[lane]);
                    ds = p * (trn__flash_dot(dOs + lane * hp, Vs + c * hp, hs) - Ds[lane]);
                }
                if (lane < t) { Ps[c * t + lane] = p; dSs[c * t + lane] = ds; }
                __syncwarp();
                for (int d = lane; d < hs; d += 32) {
                    float av = 0.0f, ak = 0.0f;
                    for (int r = 0; r < nq; r++) {
                        av += Ps[c * t + r] * dOs[r * hp + d];
                        ak += dSs[c * t + r] * Qs[r * hp + d];
                    }
                    dVs[c * hp + d] += av;
                    dKs[c * hp + d] += scale * ak;
                }
                __syncwarp();
            }
        }
    __syncthreads();
    for (int idx = threadIdx.x; idx < nk * hs; idx += blockDim.x) {
        int c = idx / hs, d = idx % hs;
        A *pk = dqkv + x + (size_t)(j0 + c) * ld + (size_t)(NH + g) * hs + d, *pv = pk + (size_t)NKV * hs;
        *pk = trn__to<A>(trn__ld(*pk) + dKs[c * hp + d]);
        *pv = trn__to<A>(trn__ld(*pv) + dVs[c * hp + d]);
    }
}

/* dQ for one query tile: grid (B*NH, query tiles). Shared: Q, dO, dQ, K, V
   (t rows each), dS (t x t: row r = query r, column j = key j), D, lse */
template <typename A>
static __global__ void trn__k_flash_bwd_q(A *dqkv, const A *dout, const A *qkv, const A *out,
                                          const float *lse, int T, int NH, int NKV, int hs, int causal, int t,
                                          float scale) {
    TRN_CUDA_DYNAMIC_SHARED(float, sm);
    int hp = hs + 1, bh = blockIdx.x, b = bh / NH, h = bh % NH, g = h / (NH / NKV);
    int i0 = blockIdx.y * t, nq = min(t, T - i0), lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int kend = causal ? i0 + nq : T;
    size_t ld = (size_t)(NH + 2 * NKV) * hs, x = (size_t)b * T * ld;
    float *Qs = sm, *dOs = Qs + t * hp, *dQs = dOs + t * hp, *Ks = dQs + t * hp, *Vs = Ks + t * hp;
    float *dSs = Vs + t * hp, *Ds = dSs + t * t, *Ls = Ds + t;
    trn__flash_load(Qs, qkv + x + (size_t)h * hs, ld, i0, nq, t, hs);
    trn__flash_load(dOs, dout + (size_t)b * T * NH * hs + (size_t)h * hs, (size_t)NH * hs, i0, nq, t, hs);
    trn__flash_rows(Ds, Ls, dout, out, lse, b, h, i0, nq, T, NH, hs);
    for (int idx = threadIdx.x; idx < t * hp; idx += blockDim.x) dQs[idx] = 0.0f;
    for (int j0 = 0; j0 < kend; j0 += t) {
        int nk = min(t, kend - j0);
        __syncthreads();
        trn__flash_load(Ks, qkv + x + (size_t)(NH + g) * hs, ld, j0, nk, t, hs);
        trn__flash_load(Vs, qkv + x + (size_t)(NH + NKV + g) * hs, ld, j0, nk, t, hs);
        __syncthreads();
        for (int r = warp; r < nq; r += TRN__FLASH_WARPS) { /* query i0+r; lane j: key j0+j */
            float ds = 0.0f;
            if (lane < nk && (!causal || j0 + lane <= i0 + r)) {
                float p = expf(scale * trn__flash_dot(Qs + r * hp, Ks + lane * hp, hs) - Ls[r]);
                ds = p * (trn__flash_dot(dOs + r * hp, Vs + lane * hp, hs) - Ds[r]);
            }
            if (lane < t) dSs[r * t + lane] = ds;
            __syncwarp();
            for (int d = lane; d < hs; d += 32) {
                float a = 0.0f;
                for (int j = 0; j < nk; j++) a += dSs[r * t + j] * Ks[j * hp + d];
                dQs[r * hp + d] += scale * a;
            }
            __syncwarp();
        }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < nq * hs; idx += blockDim.x) {
        int r = idx / hs, d = idx % hs;
        A *p = dqkv + x + (size_t)(i0 + r) * ld + (size_t)h * hs + d;
        *p = trn__to<A>(trn__ld(*p) + dQs[r * hp + d]);
    }
}

/* --- fused attention in bf16 on tensor cores (TRN_CUDA_BF16): the same
   math as the fp32 kernels above, with qkv, out, dout and dqkv in bf16 and
   the matrix products on tensor cores through WMMA (nvcuda::wmma, tiles of
   16x16x16, bf16 inputs, fp32 accumulators; sm_80 and newer). lse, the
   softmax statistics (running max m and sum l) and every exp/log are fp32.
   Tiles live in shared memory; a block has W warps and owns R = 16 W rows
   (queries in forward and dQ, keys in dK/dV), warp w rows [16w, 16w+16);
   the other side streams through in tiles of N = 32 rows. A matrix
   product tile is a warp-collective call, so every lane of a warp runs
   the same products (rows past T are zero and masked out); scalar work
   (softmax, masks, D) goes to lane pairs: lanes 2r and 2r+1 share row r
   of the warp's 16, each with half of the columns.
   Rounding (what differs from fp32): Q, K, V, dO are bf16 on input, their
   products are exact in fp32 and summed in fp32; P is rounded to bf16
   before P V and P^T dO, dS before dS K and dS^T Q; out and dqkv are
   rounded once per store (dqkv += in fp32, then one rounding).
   Deterministic: no atomics (dK, dV per key tile over all queries of the
   group's heads, dQ per query tile over the keys, as in fp32).
   HS, the head size, is a template argument (so the per-row output
   accumulators are registers), instantiated for the multiples of 16 up to
   128 (TRN_CUDA_FLASH_HS); shared memory stays under 48 KiB: W = 4 up to
   HS = 64, W = 2 above. ---------------------------------------------------- */
template <int HS> struct trn__fa {
    enum {
        W = HS > 64 ? 2 : 4, /* warps per block                          */
        R = 16 * W,          /* rows a block owns                        */
        N = 32,              /* rows of a streamed tile                  */
        SW = N > HS ? N : HS, /* row width of the forward's float scratch */
        /* row strides in shared memory, padded by 16 bytes so that the 8
           rows a tensor-core load reads at once fall in different banks
           (a 16-row step stays a multiple of 32 bytes, as wmma needs) */
        LD = HS + 8, /* bf16 tiles of HS columns       */
        LP = N + 8,  /* bf16 tiles of N columns (P)    */
        LS = SW + 4, /* float scratch of SW columns    */
        LN = N + 4   /* float scratch of N columns; as bf16: 2 LN */
    };
    static_assert(HS % 16 == 0 && R % N == 0, "tile sizes");
};

/* rows [r0, r0+n) of one head (HS bf16 at stride ld) into a tile of `rows`
   rows at stride LD; rows past n become 0 */
template <int HS>
static __device__ __forceinline__ void trn__fa_load(trn__bf16 *tile, const trn__bf16 *src, size_t ld, int r0, int n,
                                                    int rows) {
    const trn__bf16 zero = __float2bfloat16(0.0f);
    for (int idx = threadIdx.x; idx < rows * HS; idx += blockDim.x) {
        int r = idx / HS, d = idx % HS;
        tile[r * trn__fa<HS>::LD + d] = r < n ? src[(size_t)(r0 + r) * ld + d] : zero;
    }
}

/* D[r] = rowsum(dO * O) (fp32 from bf16) and L[r] = lse for `rows` query
   rows from i0; rows past T get 0 (their P is masked to 0 anyway) */
template <int HS>
static __device__ __forceinline__ void trn__fa_rows(float *Ds, float *Ls, const trn__bf16 *dO, const trn__bf16 *out,
                                                    const float *lse, int b, int h, int i0, int rows, int T, int NH) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    for (int r = warp; r < rows; r += nw) {
        float s = 0.0f;
        if (i0 + r < T) {
            size_t o = ((size_t)b * T + i0 + r) * NH * HS + (size_t)h * HS;
            for (int d = lane; d < HS; d += 32) s += trn__ld(dO[o + d]) * trn__ld(out[o + d]);
        }
        s = trn__warp_sum(s);
        if (lane == 0) {
            Ds[r] = s;
            Ls[r] = i0 + r < T ? lse[((size_t)b * NH + h) * T + i0 + r] : 0.0f;
        }
    }
}

/* C (16 x 16 per n, N/16 or HS/16 of them, fp32) = A B for one warp:
   a 16 x (16 KT) strip of A times a (16 KT) x 16 column block of B;
   the layouts of A and B are template arguments, ldm in elements */
template <typename LA, typename LB, int KT>
static __device__ __forceinline__ void trn__fa_mma(nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> &c,
                                                   const trn__bf16 *a, int a_step, unsigned lda, const trn__bf16 *b,
                                                   int b_step, unsigned ldb) {
    for (int k = 0; k < KT; k++) {
        nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, trn__bf16, LA> fa;
        nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, trn__bf16, LB> fb;
        nvcuda::wmma::load_matrix_sync(fa, a + k * a_step, lda);
        nvcuda::wmma::load_matrix_sync(fb, b + k * b_step, ldb);
        nvcuda::wmma::mma_sync(c, fa, fb, c);
    }
}

/* grid (B*NH, query tiles of R). Shared (rows padded, see LD): Q (R x HS),
   K, V (N x HS), P (R x N) bf16; a float scratch (R x SW) that holds S,
   then P V. The
   output row lives in registers of its lane pair (o[], HS/2 each). */
template <int HS>
static __global__ void trn__k_flash_fwd_bf16(trn__bf16 *out, float *lse, const trn__bf16 *qkv, int T, int NH, int NKV,
                                             int causal, float scale) {
    namespace wm = nvcuda::wmma;
    enum { R = trn__fa<HS>::R, N = trn__fa<HS>::N, LD = trn__fa<HS>::LD, LP = trn__fa<HS>::LP, LS = trn__fa<HS>::LS };
    TRN__CUDA_SHARED_128(unsigned char, sm);
    trn__bf16 *Qs = (trn__bf16 *)sm, *Ks = Qs + R * LD, *Vs = Ks + N * LD, *Ps = Vs + N * LD;
    float *Ss = (float *)(Ps + R * LP);
    int bh = blockIdx.x, b = bh / NH, h = bh % NH, g = h / (NH / NKV);
    /* query tiles in reverse: under a causal mask the last tiles have the
       most keys, and starting them first keeps them out of the tail */
    int i0 = (gridDim.y - 1 - blockIdx.y) * R, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int kend = causal ? min(T, i0 + R) : T;
    int rr = lane / 2, half = lane % 2, i = i0 + warp * 16 + rr; /* this lane pair's query row */
    size_t ld = (size_t)(NH + 2 * NKV) * HS;
    const trn__bf16 *x = qkv + (size_t)b * T * ld;
    trn__bf16 *Pw = Ps + warp * 16 * LP; /* the warp's 16 rows */
    float *Sw = Ss + warp * 16 * LS;
    float m = -INFINITY, l = 0.0f, o[HS / 2];
TRN__UNROLL
    for (int d = 0; d < HS / 2; d++) o[d] = 0.0f;
    trn__fa_load<HS>(Qs, x + (size_t)h * HS, ld, i0, min(R, T - i0), R);
    __syncthreads(); /* the Q tile is complete: each warp keeps its 16 rows as fragments */
    wm::fragment<wm::matrix_a, 16, 16, 16, trn__bf16, wm::row_major> qf[HS / 16];
TRN__UNROLL
    for (int k = 0; k < HS / 16; k++) wm::load_matrix_sync(qf[k], Qs + warp * 16 * LD + k * 16, LD);
    for (int j0 = 0; j0 < kend; j0 += N) {
        __syncthreads(); /* everyone is done with the previous K, V tile */
        trn__fa_load<HS>(Ks, x + (size_t)(NH + g) * HS, ld, j0, min(N, kend - j0), N);
        trn__fa_load<HS>(Vs, x + (size_t)(NH + NKV + g) * HS, ld, j0, min(N, kend - j0), N);
        __syncthreads(); /* the K, V tile is complete */
        /* S = Q K^T: 16 rows x N keys, K^T read as a col-major B */
        for (int n = 0; n < N / 16; n++) {
            wm::fragment<wm::accumulator, 16, 16, 16, float> s;
            wm::fill_fragment(s, 0.0f);
TRN__UNROLL
            for (int k = 0; k < HS / 16; k++) {
                wm::fragment<wm::matrix_b, 16, 16, 16, trn__bf16, wm::col_major> kf;
                wm::load_matrix_sync(kf, Ks + n * 16 * LD + k * 16, LD);
                wm::mma_sync(s, qf[k], kf, s);
            }
            wm::store_matrix_sync(Sw + n * 16, s, LS, wm::mem_row_major);
        }
        __syncwarp();
        /* online softmax of row rr over this tile (fp32) */
        float sv[N / 2], mx = -INFINITY, sum = 0.0f, corr;
TRN__UNROLL
        for (int c = 0; c < N / 2; c++) {
            int j = j0 + half * (N / 2) + c;
            sv[c] = j < kend && (!causal || j <= i) ? scale * Sw[rr * LS + half * (N / 2) + c] : -INFINITY;
            mx = fmaxf(mx, sv[c]);
        }
        mx = fmaxf(m, fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1))); /* finite: key 0 is in every row's first tile */
        corr = expf(m - mx);                                             /* 0 on the first tile */
TRN__UNROLL
        for (int c = 0; c < N / 2; c++) {
            float p = sv[c] == -INFINITY ? 0.0f : expf(sv[c] - mx);
            sum += p; /* l sums the fp32 p; P V uses p rounded to bf16 */
            Pw[rr * LP + half * (N / 2) + c] = __float2bfloat16(p);
        }
        l = l * corr + sum + __shfl_xor_sync(0xffffffffu, sum, 1);
        m = mx;
        __syncwarp(); /* P is complete and every lane has read S */
        /* P V: 16 rows x HS, into the scratch where S was */
        for (int n = 0; n < HS / 16; n++) {
            wm::fragment<wm::accumulator, 16, 16, 16, float> pv;
            wm::fill_fragment(pv, 0.0f);
            trn__fa_mma<wm::row_major, wm::row_major, N / 16>(pv, Pw, 16, LP, Vs + n * 16, 16 * LD, LD);
            wm::store_matrix_sync(Sw + n * 16, pv, LS, wm::mem_row_major);
        }
        __syncwarp();
TRN__UNROLL
        for (int d = 0; d < HS / 2; d++) o[d] = o[d] * corr + Sw[rr * LS + half * (HS / 2) + d];
    }
    if (i < T) {
        float inv = 1.0f / l;
        trn__bf16 *dst = out + ((size_t)b * T + i) * NH * HS + (size_t)h * HS + half * (HS / 2);
TRN__UNROLL
        for (int d = 0; d < HS / 2; d++) dst[d] = __float2bfloat16(o[d] * inv);
        if (half == 0) lse[(size_t)bh * T + i] = m + logf(l);
    }
}

/* dK, dV for one key tile: grid (B*NKV, key tiles of R). Shared: K, V
   (R x HS), Q, dO (N x HS) bf16; S^T and dP^T (R x N floats each; then P^T
   and dS^T as bf16 over their first half); D, lse (N). dK and dV of the
   warp's 16 keys accumulate in fragments over every query of every head of
   the group; scale is applied to dK once, at the end. */
template <int HS>
static __global__ void trn__k_flash_bwd_kv_bf16(trn__bf16 *dqkv, const trn__bf16 *dout, const trn__bf16 *qkv,
                                                const trn__bf16 *out, const float *lse, int T, int NH, int NKV,
                                                int causal, float scale) {
    namespace wm = nvcuda::wmma;
    enum { R = trn__fa<HS>::R, N = trn__fa<HS>::N, F = HS / 16, LD = trn__fa<HS>::LD, LN = trn__fa<HS>::LN };
    TRN__CUDA_SHARED_128(unsigned char, sm);
    trn__bf16 *Ks = (trn__bf16 *)sm, *Vs = Ks + R * LD, *Qs = Vs + R * LD, *dOs = Qs + N * LD;
    float *Ss = (float *)(dOs + N * LD), *dPs = Ss + R * LN, *Ds = dPs + R * LN, *Ls = Ds + N;
    int bg = blockIdx.x, b = bg / NKV, g = bg % NKV, G = NH / NKV;
    int j0 = blockIdx.y * R, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int rr = lane / 2, half = lane % 2, j = j0 + warp * 16 + rr; /* this lane pair's key */
    size_t ld = (size_t)(NH + 2 * NKV) * HS, x = (size_t)b * T * ld;
    float *Sw = Ss + warp * 16 * LN, *dPw = dPs + warp * 16 * LN;
    trn__bf16 *Pw = (trn__bf16 *)Sw, *dSw = (trn__bf16 *)dPw; /* over the floats, once read: stride 2 LN */
    wm::fragment<wm::accumulator, 16, 16, 16, float> dk[F], dv[F];
TRN__UNROLL
    for (int n = 0; n < F; n++) { wm::fill_fragment(dk[n], 0.0f); wm::fill_fragment(dv[n], 0.0f); }
    trn__fa_load<HS>(Ks, qkv + x + (size_t)(NH + g) * HS, ld, j0, min(R, T - j0), R);
    trn__fa_load<HS>(Vs, qkv + x + (size_t)(NH + NKV + g) * HS, ld, j0, min(R, T - j0), R);
    for (int h = g * G; h < (g + 1) * G; h++)
        for (int i0 = causal ? j0 : 0; i0 < T; i0 += N) { /* causal: queries before j0 see none of it */
            __syncthreads(); /* done with the previous Q, dO, D, lse, P^T, dS^T */
            trn__fa_load<HS>(Qs, qkv + x + (size_t)h * HS, ld, i0, min(N, T - i0), N);
            trn__fa_load<HS>(dOs, dout + (size_t)b * T * NH * HS + (size_t)h * HS, (size_t)NH * HS, i0,
                             min(N, T - i0), N);
            trn__fa_rows<HS>(Ds, Ls, dout, out, lse, b, h, i0, N, T, NH);
            __syncthreads(); /* the Q, dO tiles are complete */
            /* S^T = K Q^T and dP^T = V dO^T: 16 keys x N queries */
            for (int n = 0; n < N / 16; n++) {
                wm::fragment<wm::accumulator, 16, 16, 16, float> s, dp;
                wm::fill_fragment(s, 0.0f);
                wm::fill_fragment(dp, 0.0f);
                trn__fa_mma<wm::row_major, wm::col_major, F>(s, Ks + warp * 16 * LD, 16, LD, Qs + n * 16 * LD, 16, LD);
                trn__fa_mma<wm::row_major, wm::col_major, F>(dp, Vs + warp * 16 * LD, 16, LD, dOs + n * 16 * LD, 16, LD);
                wm::store_matrix_sync(Sw + n * 16, s, LN, wm::mem_row_major);
                wm::store_matrix_sync(dPw + n * 16, dp, LN, wm::mem_row_major);
            }
            __syncwarp();
            /* P = exp(scale S - lse), dS = P (dP - D), masked; fp32 */
            float pv[N / 2], dsv[N / 2];
TRN__UNROLL
            for (int c = 0; c < N / 2; c++) {
                int r = half * (N / 2) + c, i = i0 + r;
                float p = 0.0f, ds = 0.0f;
                if (i < T && j < T && (!causal || j <= i)) {
                    p = expf(scale * Sw[rr * LN + r] - Ls[r]);
                    ds = p * (dPw[rr * LN + r] - Ds[r]);
                }
                pv[c] = p;
                dsv[c] = ds;
            }
            __syncwarp(); /* every lane has read its S and dP: overwrite them */
TRN__UNROLL
            for (int c = 0; c < N / 2; c++) {
                Pw[rr * 2 * LN + half * (N / 2) + c] = __float2bfloat16(pv[c]);
                dSw[rr * 2 * LN + half * (N / 2) + c] = __float2bfloat16(dsv[c]);
            }
            __syncwarp();
            /* dV += P^T dO, dK += dS^T Q: 16 keys x HS, sums over N queries */
TRN__UNROLL
            for (int n = 0; n < F; n++) {
                trn__fa_mma<wm::row_major, wm::row_major, N / 16>(dv[n], Pw, 16, 2 * LN, dOs + n * 16, 16 * LD, LD);
                trn__fa_mma<wm::row_major, wm::row_major, N / 16>(dk[n], dSw, 16, 2 * LN, Qs + n * 16, 16 * LD, LD);
            }
        }
    /* dqkv += (bf16: add in fp32, round once), 16 x 16 at a time through
       the warp's scratch */
TRN__UNROLL
    for (int n = 0; n < 2 * F; n++) {
        __syncwarp(); /* the scratch is free */
        wm::store_matrix_sync(Sw, n < F ? dv[n] : dk[n - F], 16, wm::mem_row_major);
        __syncwarp();
        for (int e = lane; e < 256; e += 32) {
            int key = j0 + warp * 16 + e / 16;
            size_t col = n < F ? (size_t)(NH + NKV + g) * HS + n * 16 : (size_t)(NH + g) * HS + (n - F) * 16;
            if (key < T) {
                trn__bf16 *p = dqkv + x + (size_t)key * ld + col + e % 16;
                *p = __float2bfloat16(trn__ld(*p) + (n < F ? Sw[e] : scale * Sw[e]));
            }
        }
    }
}

/* dQ for one query tile: grid (B*NH, query tiles of R). Shared: Q, dO
   (R x HS), K, V (N x HS) bf16; S and dP (R x N floats each; then dS as
   bf16 over S); D, lse (R). dQ of the warp's 16 rows accumulates in
   fragments over the keys; scale is applied once, at the end. */
template <int HS>
static __global__ void trn__k_flash_bwd_q_bf16(trn__bf16 *dqkv, const trn__bf16 *dout, const trn__bf16 *qkv,
                                               const trn__bf16 *out, const float *lse, int T, int NH, int NKV,
                                               int causal, float scale) {
    namespace wm = nvcuda::wmma;
    enum { R = trn__fa<HS>::R, N = trn__fa<HS>::N, F = HS / 16, LD = trn__fa<HS>::LD, LN = trn__fa<HS>::LN };
    TRN__CUDA_SHARED_128(unsigned char, sm);
    trn__bf16 *Qs = (trn__bf16 *)sm, *dOs = Qs + R * LD, *Ks = dOs + R * LD, *Vs = Ks + N * LD;
    float *Ss = (float *)(Vs + N * LD), *dPs = Ss + R * LN, *Ds = dPs + R * LN, *Ls = Ds + R;
    int bh = blockIdx.x, b = bh / NH, h = bh % NH, g = h / (NH / NKV);
    int i0 = (gridDim.y - 1 - blockIdx.y) * R, lane = threadIdx.x % 32, warp = threadIdx.x / 32; /* as forward */
    int kend = causal ? min(T, i0 + R) : T;
    int rr = lane / 2, half = lane % 2, r = warp * 16 + rr, i = i0 + r; /* this lane pair's query row */
    size_t ld = (size_t)(NH + 2 * NKV) * HS, x = (size_t)b * T * ld;
    float *Sw = Ss + warp * 16 * LN, *dPw = dPs + warp * 16 * LN;
    trn__bf16 *dSw = (trn__bf16 *)Sw; /* over S, once read: stride 2 LN */
    wm::fragment<wm::accumulator, 16, 16, 16, float> dq[F];
TRN__UNROLL
    for (int n = 0; n < F; n++) wm::fill_fragment(dq[n], 0.0f);
    trn__fa_load<HS>(Qs, qkv + x + (size_t)h * HS, ld, i0, min(R, T - i0), R);
    trn__fa_load<HS>(dOs, dout + (size_t)b * T * NH * HS + (size_t)h * HS, (size_t)NH * HS, i0, min(R, T - i0), R);
    trn__fa_rows<HS>(Ds, Ls, dout, out, lse, b, h, i0, R, T, NH);
    for (int j0 = 0; j0 < kend; j0 += N) {
        __syncthreads(); /* done with the previous K, V tile (and Q, dO, D, lse are complete) */
        trn__fa_load<HS>(Ks, qkv + x + (size_t)(NH + g) * HS, ld, j0, min(N, kend - j0), N);
        trn__fa_load<HS>(Vs, qkv + x + (size_t)(NH + NKV + g) * HS, ld, j0, min(N, kend - j0), N);
        __syncthreads(); /* the K, V tile is complete */
        /* S = Q K^T and dP = dO V^T: 16 rows x N keys */
        for (int n = 0; n < N / 16; n++) {
            wm::fragment<wm::accumulator, 16, 16, 16, float> s, dp;
            wm::fill_fragment(s, 0.0f);
            wm::fill_fragment(dp, 0.0f);
            trn__fa_mma<wm::row_major, wm::col_major, F>(s, Qs + warp * 16 * LD, 16, LD, Ks + n * 16 * LD, 16, LD);
            trn__fa_mma<wm::row_major, wm::col_major, F>(dp, dOs + warp * 16 * LD, 16, LD, Vs + n * 16 * LD, 16, LD);
            wm::store_matrix_sync(Sw + n * 16, s, LN, wm::mem_row_major);
            wm::store_matrix_sync(dPw + n * 16, dp, LN, wm::mem_row_major);
        }
        __syncwarp();
        float dsv[N / 2];
TRN__UNROLL
        for (int c = 0; c < N / 2; c++) {
            int jj = half * (N / 2) + c, j = j0 + jj;
            float ds = 0.0f;
            if (i < T && j < kend && (!causal || j <= i))
                ds = expf(scale * Sw[rr * LN + jj] - Ls[r]) * (dPw[rr * LN + jj] - Ds[r]);
            dsv[c] = ds;
        }
        __syncwarp(); /* every lane has read its S: overwrite it with dS */
TRN__UNROLL
        for (int c = 0; c < N / 2; c++) dSw[rr * 2 * LN + half * (N / 2) + c] = __float2bfloat16(dsv[c]);
        __syncwarp();
        /* dQ += dS K: 16 rows x HS, sums over N keys */
TRN__UNROLL
        for (int n = 0; n < F; n++)
            trn__fa_mma<wm::row_major, wm::row_major, N / 16>(dq[n], dSw, 16, 2 * LN, Ks + n * 16, 16 * LD, LD);
    }
TRN__UNROLL
    for (int n = 0; n < F; n++) {
        __syncwarp(); /* the scratch is free */
        wm::store_matrix_sync(Sw, dq[n], 16, wm::mem_row_major);
        __syncwarp();
        for (int e = lane; e < 256; e += 32) {
            int q = i0 + warp * 16 + e / 16;
            if (q < T) {
                trn__bf16 *p = dqkv + x + (size_t)q * ld + (size_t)h * HS + n * 16 + e % 16;
                *p = __float2bfloat16(trn__ld(*p) + scale * Sw[e]);
            }
        }
    }
}

/* >>cuda-fa2: FlashAttention-2 in bf16 (Dao 2023, "FlashAttention-2: Faster
   Attention with Better Parallelism and Work Partitioning"), the default
   bf16 fused attention for head sizes that are multiples of 16 up to 128.
   The reference it is tested against is the materialized pair
   trn_attention_forward/backward (train.h, and trn__cuda_attention_forward
   /backward below: S = Q K^T scale, P = softmax(S), O = P V, kept whole).
   What makes it FA2-class (and what the WMMA kernels above do not do):
   - S, P and the output accumulator live in REGISTERS, as the fragments of
     mma.sync.m16n8k16 (bf16 in, fp32 accumulate). The accumulator layout of
     S (16 x 8 per tile) is, pair for pair, the A-operand layout of P for
     the next product, so P never goes through shared memory.
   - Operands come from shared memory with ldmatrix (x4: four 8x8 tiles per
     instruction; .trans for V, dO, Q, K where they are the k-major side).
   - K/V (forward) and Q/dO (backward) tiles are double-buffered with
     cp.async (16 bytes per thread per copy, commit_group/wait_group): the
     next tile's copy runs while this one is multiplied.
   - Online softmax in fp32 in base 2 (exp2f of scores pre-multiplied by
     scale * log2 e); lse (natural log) saved per row for the backward.
   - Causal: key blocks past the query block's last row are never visited;
     only blocks that cross the diagonal (or T) are masked element by element.
   - Backward: D = rowsum(dO * O) once per row in its own small kernel;
     then one block per key block with four products (S^T = K Q^T,
     dP^T = V dO^T, dV += P^T dO, dK += dS^T Q), dK and dV in registers for
     the whole key block (and, at head sizes up to 64, the block's K and V
     fragments, read from shared memory once); then dQ by a kernel laid out as the forward (a
     block per 64 query rows, key tiles streamed): S = Q K^T, dP = dO V^T,
     dQ += dS K, all in registers, one owner per row of dQ.
   dQ is deterministic by default, and that costs two products: S and dP
   are computed twice (7 products where FA2 has 5). FA2's own way,
   trn_cuda_set_flash(.., 1), computes dQ += dS K inside the key-block
   kernel (dS^T through shared memory) and adds it into one fp32
   accumulator with atomicAdd, converted by a last small kernel: 5
   products, but B*NH*T*hs*4 bytes of scratch, and the order of the
   additions (so the last bits of dQ) changes from run to run. A first
   version, where each block summed its key blocks' dQ into a private fp32
   partial in global memory (plain read-add-write), spent 11.7 ms of a
   42.5 ms GPT-2 step in that kernel on an H100 (2026-11-27): about 1 GB
   of partials read and written per layer, each read a stall.
   Layout, as everywhere: qkv (B,T,(NH+2NKV)*HS) bf16, out/dout (B,T,NH*HS)
   bf16, lse (B,NH,T) fp32; GQA: query head h reads kv head h / (NH/NKV).
   Rounding: as the WMMA kernels (P rounded to bf16 before P V and P^T dO,
   dS before dS^T Q and dS K; out rounded once; dqkv += in fp32, one
   rounding per element; dQ's sum over key blocks in fp32).
   Needs sm_80 or newer (bf16 mma.sync, ldmatrix, cp.async). ------------- */

/* the PTX, one instruction per function: inline asm on a GPU, the
   harness's emulation (tests/cuda_on_cpu.h, "PTX") on the CPU */
#ifndef TRN_CUDA_ON_CPU
/* d (16x8 fp32) += a (16x16 bf16, row) b (16x8 bf16, col) */
static __device__ __forceinline__ void trn__mma_bf16(float *d, const unsigned *a, const unsigned *b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
static __device__ __forceinline__ unsigned trn__smem_addr(const void *p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
/* four 8x8 bf16 tiles; lanes 8i..8i+7 give the row addresses of tile i */
static __device__ __forceinline__ void trn__ldmatrix_x4(unsigned *r, const void *row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(trn__smem_addr(row)));
}
static __device__ __forceinline__ void trn__ldmatrix_x4_trans(unsigned *r, const void *row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(trn__smem_addr(row)));
}
/* 16 bytes global -> shared, asynchronously; bytes = 0 writes 16 zeros */
static __device__ __forceinline__ void trn__cp_async16(void *dst, const void *src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(trn__smem_addr(dst)), "l"(src), "r"(bytes));
}
static __device__ __forceinline__ void trn__cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> static __device__ __forceinline__ void trn__cp_async_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
#else
static inline void trn__mma_bf16(float *d, const unsigned *a, const unsigned *b) { cuemu::mma_m16n8k16_bf16(d, a, b, d); }
static inline void trn__ldmatrix_x4(unsigned *r, const void *row) { cuemu::ldmatrix(r, 4, 0, row); }
static inline void trn__ldmatrix_x4_trans(unsigned *r, const void *row) { cuemu::ldmatrix(r, 4, 1, row); }
static inline void trn__cp_async16(void *dst, const void *src, int bytes) { cuemu::cp_async16(dst, src, bytes); }
static inline void trn__cp_async_commit(void) { cuemu::cp_async_commit(); }
template <int N> static inline void trn__cp_async_wait(void) { cuemu::cp_async_wait(N); }
#endif
/* two floats -> one register of two bf16 (lo in the low half) */
static __device__ __forceinline__ unsigned trn__pack_bf16(float lo, float hi) {
    return (unsigned)__bfloat16_as_ushort(__float2bfloat16(lo)) |
           (unsigned)__bfloat16_as_ushort(__float2bfloat16(hi)) << 16;
}
static __device__ __forceinline__ float trn__bf16_lo(unsigned w) { return __uint_as_float(w << 16); }
static __device__ __forceinline__ float trn__bf16_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }

/* tile sizes. Forward and the dQ pass: a block of FW = 4 warps owns BR
   query rows, 16 MW per warp: MW = 2 tiles of 16 rows at head sizes up to
   64, so every K or V fragment a warp loads from shared memory feeds two
   mma.sync instead of one (at MW = 1 the kernels issued one ldmatrix per
   two mma.sync: bound by shared memory, 0.19 of the GEMM ceiling on the
   H100, 2026-11-27); above 64 the registers of MW = 2 do not fit. Keys
   stream in steps of FBC (forward) and QBC (dQ pass: S and dP both live in
   registers, so half the keys at MW = 2). Backward key blocks: a block of
   W warps owns BC = 16 W keys (16 per warp) and streams BR queries per
   step (trn__fa2_kb). Rows of every shared tile are padded by 8 bf16 (16 bytes), so the 8
   row addresses of one ldmatrix tile fall in different banks; all tiles
   fit in 48 KiB. */
template <int HS> struct trn__fa2 {
    enum {
        LD = HS + 8,                /* row stride of Q, K, V, dO tiles   */
        CH = HS / 8,                /* 16-byte chunks per row             */
        FW = 4,                     /* forward, dQ pass: warps            */
        MW = HS > 64 ? 1 : 2,       /* forward, dQ pass: 16-row tiles a warp */
        FBR = 16 * MW * FW,         /* forward, dQ pass: query rows       */
        FBC = HS > 64 ? 32 : 64,    /* forward: keys per step             */
        QBC = MW > 1 ? 32 : FBC,    /* dQ pass: keys per step             */
        BW = HS > 64 ? 2 : 4,       /* backward: warps                    */
        BBC = 16 * BW,              /* backward: keys per block           */
        BBR = HS > 64 ? 16 : 32,    /* backward, atomic dQ: queries per step */
        LDS = BBR + 8,              /* row stride of dS^T (keys x queries) */
        DL = CH <= 2 ? 2 : CH <= 4 ? 4 : CH <= 8 ? 8 : 16 /* backward pass 1: lanes per row */
    };
    static_assert(HS % 16 == 0 && HS <= 128, "FA2 tile sizes");
    static_assert(FBR <= 2 * FBC, "the forward's Q tile fits in one key buffer");
};
/* the key-block kernel with atomic dQ (AT = 1) or without. Without, at
   head sizes up to 64, each warp reads its 16 keys of K and V into
   registers once (KR: they are the A operand of S^T and dP^T at every
   step, 8 ldmatrix a step saved) and their shared memory then holds Q and
   dO, which makes room for steps of 64 queries: twice the independent
   products per barrier. With atomic dQ, K stays in shared memory for
   dQ += dS K, and dS^T needs its own tile: 32 queries a step. */
template <int HS, int AT> struct trn__fa2_kb {
    enum {
        KR = !AT && HS <= 64,                                       /* K, V fragments in registers */
        BR = KR ? 2 * trn__fa2<HS>::BBR : trn__fa2<HS>::BBR,        /* queries per step            */
        QO = KR ? 0 : 2 * trn__fa2<HS>::BBC * trn__fa2<HS>::LD,     /* where Q, dO start (bf16)    */
        DS = AT ? trn__fa2<HS>::BBC * trn__fa2<HS>::LDS : 0         /* dS^T's tile (bf16)          */
    };
};
/* dynamic shared memory: pass 0 forward and dQ pass, 1 key blocks, 2 key blocks with atomic dQ */
template <int HS> static size_t trn__fa2_shmem(int pass) {
    typedef trn__fa2<HS> F;
    typedef trn__fa2_kb<HS, 0> K0;
    typedef trn__fa2_kb<HS, 1> K1;
    /* forward: K, V x 2 buffers (Q in buffer 0 first); dQ pass: Q and dO first, then K, V x 2 buffers of QBC */
    if (pass == 0) return 2 * (size_t)(4 * F::FBC > 2 * F::FBR ? 4 * F::FBC : 2 * F::FBR) * F::LD;
    /* key blocks: K, V (KR: overwritten by) Q, dO x 2 buffers, dS^T (atomic), lse and D x 2 buffers (fp32) */
    if (pass == 1) return 2 * (size_t)(K0::QO + 4 * K0::BR * F::LD + K0::DS) + 4 * (size_t)(4 * K0::BR);
    return 2 * (size_t)(K1::QO + 4 * K1::BR * F::LD + K1::DS) + 4 * (size_t)(4 * K1::BR);
}

/* issue the cp.async copies of rows [r0, r0+rows) of one head (HS bf16 at
   row stride ld from src) into a tile at stride LD; rows >= rlim are
   zero-filled (src_size 0, the source address stays a valid one) */
template <int HS>
static __device__ __forceinline__ void trn__fa2_tile(trn__bf16 *tile, const trn__bf16 *src, size_t ld, int r0, int rows,
                                                     int rlim) {
    for (int idx = threadIdx.x; idx < rows * trn__fa2<HS>::CH; idx += blockDim.x) {
        int r = idx / trn__fa2<HS>::CH, c = idx % trn__fa2<HS>::CH, ok = r0 + r < rlim;
        trn__cp_async16(tile + r * trn__fa2<HS>::LD + c * 8, src + (ok ? (size_t)(r0 + r) * ld : 0) + c * 8,
                        ok ? 16 : 0);
    }
}

/* the kernels that stream key tiles (forward, dQ pass) keep two buffers of
   BC keys, K then V (buffer u at sm + 2 u BC LD). trn__fa2_keys waits for
   tile kb, held in buffer (kb + first) & 1, after issuing tile kb + 1's
   copies into the other buffer, so they run while tile kb is multiplied;
   every thread calls it, and it returns tile kb's K (V follows it) */
template <int HS, int BC>
static __device__ __forceinline__ void trn__fa2_kv(trn__bf16 *buf, const trn__bf16 *kp, const trn__bf16 *vp, size_t ld,
                                                   int j0, int kend) {
    trn__fa2_tile<HS>(buf, kp, ld, j0, BC, kend);
    trn__fa2_tile<HS>(buf + BC * trn__fa2<HS>::LD, vp, ld, j0, BC, kend);
    trn__cp_async_commit();
}
template <int HS, int BC>
static __device__ __forceinline__ const trn__bf16 *trn__fa2_keys(trn__bf16 *sm, const trn__bf16 *kp,
                                                                 const trn__bf16 *vp, size_t ld, int kb, int nkb,
                                                                 int kend, int first) {
    enum { LD = trn__fa2<HS>::LD };
    if (kb + 1 < nkb) {
        trn__fa2_kv<HS, BC>(sm + ((kb + 1 + first) & 1) * 2 * BC * LD, kp, vp, ld, (kb + 1) * BC, kend);
        trn__cp_async_wait<1>(); /* all but the newest group: tile kb */
    } else {
        trn__cp_async_wait<0>();
    }
    __syncthreads(); /* tile kb is complete (everyone's copies), and the other buffer's readers are done */
    return sm + ((kb + first) & 1) * 2 * BC * LD;
}

/* The accumulators of two 16 x 8 tiles s[2k], s[2k+1] (fp32) are, pair for
   pair, the A fragment of the 16 x 16 tile they form: rounded to bf16 they
   feed the next product straight from registers (P V, dS K, P^T dO, ...) */
static __device__ __forceinline__ void trn__fa2_afrag(unsigned *a, const float (*s)[4], int k) {
    a[0] = trn__pack_bf16(s[2 * k][0], s[2 * k][1]);
    a[1] = trn__pack_bf16(s[2 * k][2], s[2 * k][3]);
    a[2] = trn__pack_bf16(s[2 * k + 1][0], s[2 * k + 1][1]);
    a[3] = trn__pack_bf16(s[2 * k + 1][2], s[2 * k + 1][3]);
}

/* forward: grid (B*NH, query blocks of BR), 128 threads. Warp w owns rows
   [16 MW w, 16 MW (w+1)) of the block as MW tiles of 16; in tile mt, lane
   (g = lane/4, t = lane%4) holds rows g and g+8: s[mt][n][0..1] = S(g,
   8n+2t..), s[mt][n][2..3] = S(g+8, ..), the same for the output
   accumulator o[mt][n] over columns 8n+2t.. */
template <int HS>
static __global__ void trn__k_fa2_fwd(trn__bf16 *out, float *lse, const trn__bf16 *qkv, int T, int NH, int NKV,
                                      int causal, float scale_log2) {
    typedef trn__fa2<HS> F;
    enum { LD = F::LD, BR = F::FBR, BC = F::FBC, MW = F::MW };
    TRN__CUDA_SHARED_128(trn__bf16, sm);
    int bh = blockIdx.x, b = bh / NH, h = bh % NH, kvh = h / (NH / NKV);
    /* query blocks in reverse: under a causal mask the last ones have the
       most keys, and starting them first keeps them out of the tail */
    int i0 = (gridDim.y - 1 - blockIdx.y) * BR, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int w0 = i0 + warp * 16 * MW; /* the warp's first row */
    int g = lane / 4, t = lane % 4, kend = causal ? min(T, i0 + BR) : T, nkb = (kend + BC - 1) / BC;
    size_t ld = (size_t)(NH + 2 * NKV) * HS;
    const trn__bf16 *x = qkv + (size_t)b * T * ld, *kp = x + (size_t)(NH + kvh) * HS, *vp = kp + (size_t)NKV * HS;
    /* Q into buffer 0, key tile 0 into buffer 1 */
    trn__fa2_tile<HS>(sm, x + (size_t)h * HS, ld, i0, BR, T);
    trn__cp_async_commit();
    trn__fa2_kv<HS, BC>(sm + 2 * BC * LD, kp, vp, ld, 0, kend);
    trn__cp_async_wait<1>(); /* this thread's Q copies have landed */
    __syncthreads();         /* ... and everyone's */
    unsigned qf[MW][HS / 16][4]; /* the warp's 16 MW x HS of Q as A fragments */
TRN__UNROLL
    for (int mt = 0; mt < MW; mt++)
TRN__UNROLL
        for (int k = 0; k < HS / 16; k++)
            trn__ldmatrix_x4(qf[mt][k],
                             sm + (w0 - i0 + mt * 16 + lane % 8 + (lane / 8) % 2 * 8) * LD + k * 16 + lane / 16 * 8);
    __syncthreads(); /* buffer 0 is free for key tile 1 */
    float o[MW][HS / 8][4], m[MW][2], l[MW][2];
TRN__UNROLL
    for (int mt = 0; mt < MW; mt++) {
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.0f;
TRN__UNROLL
        for (int n = 0; n < HS / 8; n++) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
    }
    for (int kb = 0; kb < nkb; kb++) {
        int j0 = kb * BC;
        const trn__bf16 *Ks = trn__fa2_keys<HS, BC>(sm, kp, vp, ld, kb, nkb, kend, 1), *Vs = Ks + BC * LD;
        /* causal: a warp whose rows all come before the tile's first key
           would only add zeros (the block's later warps still need it) */
        if (!causal || j0 < w0 + 16 * MW) {
            /* S = Q K^T (16 MW x BC per warp); K read as B: ldmatrix (no
               .trans) of 16 keys x 16 columns gives b for two 8-key tiles,
               and each b serves the warp's MW row tiles */
            float s[MW][BC / 8][4];
TRN__UNROLL
            for (int mt = 0; mt < MW; mt++)
TRN__UNROLL
                for (int n = 0; n < BC / 8; n++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
TRN__UNROLL
            for (int k = 0; k < HS / 16; k++)
TRN__UNROLL
                for (int n = 0; n < BC / 16; n++) {
                    unsigned kf[4];
                    trn__ldmatrix_x4(kf, Ks + (n * 16 + lane % 8 + lane / 16 * 8) * LD + k * 16 + (lane / 8) % 2 * 8);
TRN__UNROLL
                    for (int mt = 0; mt < MW; mt++) {
                        trn__mma_bf16(s[mt][2 * n], qf[mt][k], kf);
                        trn__mma_bf16(s[mt][2 * n + 1], qf[mt][k], kf + 2);
                    }
                }
TRN__UNROLL
            for (int mt = 0; mt < MW; mt++) {
                /* scale into base 2; mask where the tile crosses T or the diagonal */
                int r0 = w0 + mt * 16, mask = j0 + BC > T || (causal && j0 + BC > r0);
                float mx[2] = {m[mt][0], m[mt][1]};
TRN__UNROLL
                for (int n = 0; n < BC / 8; n++)
TRN__UNROLL
                    for (int e = 0; e < 4; e++) {
                        int i = r0 + g + e / 2 * 8, j = j0 + n * 8 + 2 * t + e % 2;
                        s[mt][n][e] = mask && (j >= T || (causal && j > i)) ? -INFINITY : s[mt][n][e] * scale_log2;
                        mx[e / 2] = fmaxf(mx[e / 2], s[mt][n][e]);
                    }
                /* online softmax: the row's max over the 4 lanes that hold it */
                float corr[2];
TRN__UNROLL
                for (int r = 0; r < 2; r++) {
                    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                    float base = mx[r] == -INFINITY ? 0.0f : mx[r]; /* a row with nothing yet */
                    corr[r] = exp2f(m[mt][r] - base);                /* 0 on the row's first keys */
                    m[mt][r] = mx[r];
                    mx[r] = base;
                    l[mt][r] *= corr[r];
                }
TRN__UNROLL
                for (int n = 0; n < BC / 8; n++)
TRN__UNROLL
                    for (int e = 0; e < 4; e++) {
                        s[mt][n][e] = exp2f(s[mt][n][e] - mx[e / 2]); /* p; 0 where masked */
                        l[mt][e / 2] += s[mt][n][e];                  /* this lane's part of the row sum, fp32 */
                    }
TRN__UNROLL
                for (int n = 0; n < HS / 8; n++) {
                    o[mt][n][0] *= corr[0]; o[mt][n][1] *= corr[0]; o[mt][n][2] *= corr[1]; o[mt][n][3] *= corr[1];
                }
            }
            /* O += P V: P's k-th 16 keys as A fragments (bf16); V read with .trans */
TRN__UNROLL
            for (int k = 0; k < BC / 16; k++) {
                unsigned pa[MW][4];
TRN__UNROLL
                for (int mt = 0; mt < MW; mt++) trn__fa2_afrag(pa[mt], s[mt], k);
TRN__UNROLL
                for (int n = 0; n < HS / 16; n++) {
                    unsigned vf[4];
                    trn__ldmatrix_x4_trans(vf, Vs + (k * 16 + lane % 8 + (lane / 8) % 2 * 8) * LD + n * 16 + lane / 16 * 8);
TRN__UNROLL
                    for (int mt = 0; mt < MW; mt++) {
                        trn__mma_bf16(o[mt][2 * n], pa[mt], vf);
                        trn__mma_bf16(o[mt][2 * n + 1], pa[mt], vf + 2);
                    }
                }
            }
        }
        __syncthreads(); /* everyone is done with this buffer before it is refilled */
    }
    /* out = O / l (the row sum over the 4 lanes), lse = ln(2^m l) */
TRN__UNROLL
    for (int mt = 0; mt < MW; mt++)
TRN__UNROLL
        for (int r = 0; r < 2; r++) {
            l[mt][r] += __shfl_xor_sync(0xffffffffu, l[mt][r], 1);
            l[mt][r] += __shfl_xor_sync(0xffffffffu, l[mt][r], 2);
            int i = w0 + mt * 16 + g + r * 8;
            if (i < T) {
                float inv = 1.0f / l[mt][r];
                unsigned *dst = (unsigned *)(out + ((size_t)b * T + i) * NH * HS + (size_t)h * HS + 2 * t);
TRN__UNROLL
                for (int n = 0; n < HS / 8; n++)
                    dst[n * 4] = trn__pack_bf16(o[mt][n][2 * r] * inv, o[mt][n][2 * r + 1] * inv);
                if (t == 0) lse[(size_t)bh * T + i] = m[mt][r] * 0.69314718056f + logf(l[mt][r]);
            }
        }
}

/* backward, pass 1: D = rowsum(dO * O) per (b, h, i), fp32; with atomic
   dQ (atomic = 1) also its fp32 accumulator zeroed (the key blocks add into
   it). A row is HS/8 16-byte chunks (8 for GPT-2's 64): L lanes per row (a
   power of two, at least that), 32/L rows per warp, so every lane loads
   (one warp per row kept 3 of 4 lanes idle: 0.39 of the copy rate on the
   H100, 2026-11-27); the row's sum by shuffles within its L lanes. */
template <int HS>
static __global__ void trn__k_fa2_bwd_d(float *D, float *dq_acc, const trn__bf16 *dout, const trn__bf16 *out, int B,
                                        int T, int NH, int atomic) {
    enum { CH = trn__fa2<HS>::CH, L = trn__fa2<HS>::DL };
    int lane = threadIdx.x % 32, sub = lane % L;
    size_t rows = (size_t)B * NH * T;
    size_t row = ((size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32) * (32 / L) + lane / L;
    float s = 0.0f;
    if (row < rows && sub < CH) {
        size_t bh = row / (size_t)T, i = row % (size_t)T, b = bh / (size_t)NH, h = bh % (size_t)NH;
        size_t o = (b * (size_t)T + i) * NH * HS + h * HS + (size_t)sub * 8;
        uint4 u = *(const uint4 *)(dout + o), v = *(const uint4 *)(out + o);
        unsigned uu[4] = {u.x, u.y, u.z, u.w}, vv[4] = {v.x, v.y, v.z, v.w};
        for (int k = 0; k < 4; k++) s += trn__bf16_lo(uu[k]) * trn__bf16_lo(vv[k]) + trn__bf16_hi(uu[k]) * trn__bf16_hi(vv[k]);
    }
    for (int off = L / 2; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off); /* every lane takes part */
    if (row >= rows) return;
    if (sub == 0) D[row] = s;
    if (atomic)
        for (int d = sub; d < HS; d += L) dq_acc[row * HS + d] = 0.0f;
}

/* backward, pass 2: grid (B*NKV, key blocks), BW warps. Block (bg, kb)
   owns key block kb of its (b, kv head); warp w owns keys [16w, 16w+16),
   and for every query head of the group and every query step (BR rows,
   double-buffered with cp.async; BR and where K, V live: trn__fa2_kb)
   computes, all in registers (lane g, t as in the forward; rows = keys,
   columns = queries):
     S^T  = K Q^T              dP^T = V dO^T
     P^T  = exp(scale S^T - lse)   dS^T = P^T (dP^T - D)   (masked, fp32)
     dV  += P^T dO             dK  += dS^T Q        (fragments, whole block)
   With atomic dQ (AT = 1) dS^T then goes to shared memory (bf16) and
   the block computes dQ += dS K (16 x 16 tiles dealt round-robin to the
   warps) and adds it into dq_acc with atomicAdd (zeroed by pass 1);
   otherwise pass 3 (trn__k_fa2_bwd_q) computes dQ. dK (times scale) and dV
   are added to dqkv (or written) at the end. */
template <int HS, int AT>
static __global__ void trn__k_fa2_bwd(trn__bf16 *dqkv, float *dq_acc, const trn__bf16 *dout, const trn__bf16 *qkv,
                                      const float *lse, const float *D, int T, int NH, int NKV, int causal, float scale,
                                      int write) {
    typedef trn__fa2<HS> F;
    typedef trn__fa2_kb<HS, AT> KB;
    enum { LD = F::LD, BC = F::BBC, BR = KB::BR, LDS = F::LDS, BW = F::BW, KR = KB::KR, atomic = AT };
    TRN__CUDA_SHARED_128(trn__bf16, sm);
    trn__bf16 *Ks = sm, *Vs = Ks + BC * LD, *QO = sm + KB::QO; /* QO: buffer u: Q at QO + 2u BR LD, dO after */
    trn__bf16 *dSs = QO + 4 * BR * LD;
    float *LDv = (float *)(dSs + KB::DS); /* buffer u: lse2 at LDv + 2u BR, D after */
    int bg = blockIdx.x, b = bg / NKV, kvh = bg % NKV, G = NH / NKV, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int g = lane / 4, t = lane % 4, kb = blockIdx.y;
    size_t ld = (size_t)(NH + 2 * NKV) * HS;
    const trn__bf16 *x = qkv + (size_t)b * T * ld, *dO = dout + (size_t)b * T * NH * HS;
    const float log2e = 1.44269504089f;
    int j0 = kb * BC, i_start = causal ? j0 / BR * BR : 0; /* causal: queries before j0 see none of it */
    int nqs = (T - i_start + BR - 1) / BR, steps = G * nqs;
    trn__fa2_tile<HS>(Ks, x + (size_t)(NH + kvh) * HS, ld, j0, BC, T);
    trn__fa2_tile<HS>(Vs, x + (size_t)(NH + NKV + kvh) * HS, ld, j0, BC, T);
    trn__cp_async_commit();
    unsigned kr[KR ? HS / 16 : 1][4], vr[KR ? HS / 16 : 1][4]; /* KR: the warp's 16 keys of K, V as A fragments */
    if (KR) {
        trn__cp_async_wait<0>();
        __syncthreads();
TRN__UNROLL
        for (int k = 0; k < (KR ? HS / 16 : 0); k++) {
            int ar = (warp * 16 + lane % 8 + (lane / 8) % 2 * 8) * LD + k * 16 + lane / 16 * 8;
            trn__ldmatrix_x4(kr[k], Ks + ar);
            trn__ldmatrix_x4(vr[k], Vs + ar);
        }
        __syncthreads(); /* every warp has its fragments: Q and dO may overwrite K and V */
    }
    float dk[HS / 8][4], dv[HS / 8][4];
TRN__UNROLL
    for (int n = 0; n < HS / 8; n++)
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;
    static_assert(BR <= 32 * BW, "one thread per query row of a step loads its lse and D");
    for (int st = -1; st < steps; st++) {
        /* lse and D of step st+1's rows: loaded into registers (thread r: row r) now, stored to shared memory
           after this step's products, so their latency hides behind them (a plain load stored at once
           would hold warp 0, and at the next barrier the block, for a global round trip every step) */
        float ln = 0.0f, dn = 0.0f;
        if (st + 1 < steps) { /* prefetch step st+1 (head, query rows) into buffer (st+1)&1 */
            int h = kvh * G + (st + 1) / nqs, i0 = i_start + (st + 1) % nqs * BR, u = (st + 1) & 1;
            trn__fa2_tile<HS>(QO + 2 * u * BR * LD, x + (size_t)h * HS, ld, i0, BR, T);
            trn__fa2_tile<HS>(QO + (2 * u + 1) * BR * LD, dO + (size_t)h * HS, (size_t)NH * HS, i0, BR, T);
            trn__cp_async_commit();
            int r = threadIdx.x;
            if (r < BR && i0 + r < T) {
                size_t q = ((size_t)b * NH + h) * T + i0 + r;
                ln = lse[q] * log2e; /* in base 2 */
                dn = D[q];
            }
        }
        if (st < 0) { /* nothing to compute yet: store them now */
            if (threadIdx.x < BR) { LDv[threadIdx.x] = ln; LDv[BR + threadIdx.x] = dn; }
            continue;
        }
        if (st + 1 < steps) trn__cp_async_wait<1>();
        else trn__cp_async_wait<0>();
        __syncthreads(); /* K, V (unless in registers) and step st's Q, dO, lse, D are complete */
        int h = kvh * G + st / nqs, i0 = i_start + st % nqs * BR, u = st & 1;
        const trn__bf16 *Qs = QO + 2 * u * BR * LD, *dOs = Qs + BR * LD;
        const float *L2 = LDv + 2 * u * BR, *Dv = L2 + BR;
        /* S^T = K Q^T and dP^T = V dO^T: 16 keys x BR queries */
        float s[BR / 8][4], dp[BR / 8][4];
TRN__UNROLL
        for (int n = 0; n < BR / 8; n++)
            for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
TRN__UNROLL
        for (int k = 0; k < HS / 16; k++) {
            unsigned ka[4], va[4];
            if (KR) {
                for (int e = 0; e < 4; e++) { ka[e] = kr[KR ? k : 0][e]; va[e] = vr[KR ? k : 0][e]; }
            } else {
                int ar = (warp * 16 + lane % 8 + (lane / 8) % 2 * 8) * LD + k * 16 + lane / 16 * 8;
                trn__ldmatrix_x4(ka, Ks + ar);
                trn__ldmatrix_x4(va, Vs + ar);
            }
TRN__UNROLL
            for (int n = 0; n < BR / 16; n++) {
                unsigned qb[4], ob[4];
                int br = (n * 16 + lane % 8 + lane / 16 * 8) * LD + k * 16 + (lane / 8) % 2 * 8;
                trn__ldmatrix_x4(qb, Qs + br);
                trn__ldmatrix_x4(ob, dOs + br);
                trn__mma_bf16(s[2 * n], ka, qb);
                trn__mma_bf16(s[2 * n + 1], ka, qb + 2);
                trn__mma_bf16(dp[2 * n], va, ob);
                trn__mma_bf16(dp[2 * n + 1], va, ob + 2);
            }
        }
        /* P^T and dS^T in place of S^T and dP^T (fp32); masked: keys
           past T, queries past T, and under causal key > query */
TRN__UNROLL
        for (int n = 0; n < BR / 8; n++)
TRN__UNROLL
            for (int e = 0; e < 4; e++) {
                int j = j0 + warp * 16 + g + e / 2 * 8, c = n * 8 + 2 * t + e % 2, i = i0 + c;
                float p = j < T && i < T && (!causal || j <= i) ? exp2f(s[n][e] * scale * log2e - L2[c]) : 0.0f;
                s[n][e] = p;
                dp[n][e] = p * (dp[n][e] - Dv[c]);
            }
        /* dV += P^T dO, dK += dS^T Q: A from the registers above (bf16),
           B = dO, Q (queries x HS) read with .trans; atomic dQ: dS^T
           also to shared memory */
TRN__UNROLL
        for (int k = 0; k < BR / 16; k++) {
            unsigned pa[4], da[4];
            trn__fa2_afrag(pa, s, k);
            trn__fa2_afrag(da, dp, k);
            if (atomic) { /* dS^T to shared memory for dQ: rows = keys, columns = queries */
                unsigned *d0 = (unsigned *)(dSs + (warp * 16 + g) * LDS + k * 16 + 2 * t);
                d0[0] = da[0];
                d0[4 * LDS] = da[1]; /* row g+8: 8 rows of LDS bf16 = 4 LDS words */
                d0[4] = da[2];
                d0[4 * LDS + 4] = da[3];
            }
TRN__UNROLL
            for (int n = 0; n < HS / 16; n++) {
                unsigned ob[4], qb[4];
                int br = (k * 16 + lane % 8 + (lane / 8) % 2 * 8) * LD + n * 16 + lane / 16 * 8;
                trn__ldmatrix_x4_trans(ob, dOs + br);
                trn__ldmatrix_x4_trans(qb, Qs + br);
                trn__mma_bf16(dv[2 * n], pa, ob);
                trn__mma_bf16(dv[2 * n + 1], pa, ob + 2);
                trn__mma_bf16(dk[2 * n], da, qb);
                trn__mma_bf16(dk[2 * n + 1], da, qb + 2);
            }
        }
        if (atomic) __syncthreads(); /* dS^T of every warp is in shared memory */
        /* atomic dQ: dQ += dS K, in 16 x 16 tiles (query rows 16 rg..,
           columns 16 c..) dealt round-robin to the warps; dS read from
           dS^T with .trans, K (keys x HS) with .trans */
        for (int it = warp; atomic && it < BR / 16 * (HS / 16); it += BW) {
            int rg = it % (BR / 16), c = it / (BR / 16);
            float q[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
TRN__UNROLL
            for (int k = 0; k < BC / 16; k++) {
                unsigned sa[4], kf[4];
                trn__ldmatrix_x4_trans(sa, dSs + (k * 16 + lane % 8 + lane / 16 * 8) * LDS + rg * 16 + (lane / 8) % 2 * 8);
                trn__ldmatrix_x4_trans(kf, Ks + (k * 16 + lane % 8 + (lane / 8) % 2 * 8) * LD + c * 16 + lane / 16 * 8);
                trn__mma_bf16(q[0], sa, kf);
                trn__mma_bf16(q[1], sa, kf + 2);
            }
TRN__UNROLL
            for (int r = 0; r < 2; r++) {
                int i = i0 + rg * 16 + g + r * 8;
                if (i >= T) continue;
                float *dst = dq_acc + (((size_t)b * NH + h) * T + i) * HS + c * 16 + 2 * t;
                for (int n = 0; n < 2; n++) {
                    atomicAdd(dst + n * 8, q[n][2 * r]);
                    atomicAdd(dst + n * 8 + 1, q[n][2 * r + 1]);
                }
            }
        }
        if (st + 1 < steps && threadIdx.x < BR) { /* step st+1's lse and D into buffer (st+1)&1 (not read now) */
            int u1 = (st + 1) & 1;
            LDv[2 * u1 * BR + threadIdx.x] = ln;
            LDv[(2 * u1 + 1) * BR + threadIdx.x] = dn;
        }
        __syncthreads(); /* buffer u (and dS^T) are free; step st+1's lse and D are stored */
    }
    /* dqkv += dK scale, dV (fp32 add, one rounding); write: dqkv = dK scale, dV (a fresh gradient,
       its old bits garbage: every key row is in exactly one key block, so each is stored once) */
TRN__UNROLL
    for (int r = 0; r < 2; r++) {
        int j = j0 + warp * 16 + g + r * 8;
        if (j >= T) continue;
        unsigned *pk = (unsigned *)(dqkv + ((size_t)b * T + j) * ld + (size_t)(NH + kvh) * HS + 2 * t);
        unsigned *pv = pk + (size_t)NKV * HS / 2;
TRN__UNROLL
        for (int n = 0; n < HS / 8; n++) {
            if (write) {
                pk[n * 4] = trn__pack_bf16(scale * dk[n][2 * r], scale * dk[n][2 * r + 1]);
                pv[n * 4] = trn__pack_bf16(dv[n][2 * r], dv[n][2 * r + 1]);
                continue;
            }
            unsigned wk = pk[n * 4], wv = pv[n * 4];
            pk[n * 4] = trn__pack_bf16(trn__bf16_lo(wk) + scale * dk[n][2 * r], trn__bf16_hi(wk) + scale * dk[n][2 * r + 1]);
            pv[n * 4] = trn__pack_bf16(trn__bf16_lo(wv) + dv[n][2 * r], trn__bf16_hi(wv) + dv[n][2 * r + 1]);
        }
    }
}

/* backward, pass 3 (the default, deterministic dQ): grid (B*NH, query
   blocks of BR), 128 threads, laid out as the forward (warp w owns MW
   tiles of 16 query rows; lane g, t as there). Q and dO of the warp's rows
   are A fragments in registers, lse and D of its rows too; key tiles (K
   and V, QBC keys) stream through two cp.async buffers, and per tile, all
   in registers:
     S  = Q K^T                   dP = dO V^T         (16 MW x QBC per warp)
     P  = exp(scale S - lse)      dS = P (dP - D)     (masked, fp32)
     dQ += dS K   (the accumulators of dS are its A fragments, as P's are
                   in the forward's P V; K read with .trans as V there)
   Then dqkv's Q part += scale dQ (write: = ; a fresh gradient), one
   rounding. One owner per row: no scratch, no atomics, the same bits on
   every run. */
template <int HS>
static __global__ void trn__k_fa2_bwd_q(trn__bf16 *dqkv, const trn__bf16 *dout, const trn__bf16 *qkv, const float *lse,
                                        const float *D, int T, int NH, int NKV, int causal, float scale, int write) {
    typedef trn__fa2<HS> F;
    enum { LD = F::LD, BR = F::FBR, BC = F::QBC, MW = F::MW };
    TRN__CUDA_SHARED_128(trn__bf16, sm); /* Q and dO (2 BR LD) first, then 2 buffers of K, V (4 BC LD) */
    int bh = blockIdx.x, b = bh / NH, h = bh % NH, kvh = h / (NH / NKV);
    int i0 = (gridDim.y - 1 - blockIdx.y) * BR, lane = threadIdx.x % 32, warp = threadIdx.x / 32; /* longest first */
    int w0 = i0 + warp * 16 * MW, g = lane / 4, t = lane % 4;
    int kend = causal ? min(T, i0 + BR) : T, nkb = (kend + BC - 1) / BC;
    size_t ld = (size_t)(NH + 2 * NKV) * HS;
    const trn__bf16 *x = qkv + (size_t)b * T * ld, *kp = x + (size_t)(NH + kvh) * HS, *vp = kp + (size_t)NKV * HS;
    const float log2e = 1.44269504089f;
    trn__fa2_tile<HS>(sm, x + (size_t)h * HS, ld, i0, BR, T);
    trn__fa2_tile<HS>(sm + BR * LD, dout + (size_t)b * T * NH * HS + (size_t)h * HS, (size_t)NH * HS, i0, BR, T);
    trn__cp_async_commit();
    trn__cp_async_wait<0>();
    __syncthreads();
    unsigned qf[MW][HS / 16][4], of[MW][HS / 16][4]; /* the warp's 16 MW x HS of Q and of dO as A fragments */
    float l2[MW][2], dd[MW][2];                      /* lse in base 2 and D of its rows */
TRN__UNROLL
    for (int mt = 0; mt < MW; mt++) {
TRN__UNROLL
        for (int k = 0; k < HS / 16; k++) {
            int ar = (w0 - i0 + mt * 16 + lane % 8 + (lane / 8) % 2 * 8) * LD + k * 16 + lane / 16 * 8;
            trn__ldmatrix_x4(qf[mt][k], sm + ar);
            trn__ldmatrix_x4(of[mt][k], sm + BR * LD + ar);
        }
TRN__UNROLL
        for (int r = 0; r < 2; r++) {
            int i = w0 + mt * 16 + g + r * 8;
            l2[mt][r] = i < T ? lse[(size_t)bh * T + i] * log2e : 0.0f;
            dd[mt][r] = i < T ? D[(size_t)bh * T + i] : 0.0f;
        }
    }
    __syncthreads(); /* Q and dO are in registers: the shared memory is free */
    trn__fa2_kv<HS, BC>(sm, kp, vp, ld, 0, kend); /* key tile 0 into buffer 0 */
    float dq[MW][HS / 8][4];
TRN__UNROLL
    for (int mt = 0; mt < MW; mt++)
TRN__UNROLL
        for (int n = 0; n < HS / 8; n++) dq[mt][n][0] = dq[mt][n][1] = dq[mt][n][2] = dq[mt][n][3] = 0.0f;
    for (int kb = 0; kb < nkb; kb++) {
        int j0 = kb * BC;
        const trn__bf16 *Ks = trn__fa2_keys<HS, BC>(sm, kp, vp, ld, kb, nkb, kend, 0), *Vs = Ks + BC * LD;
        /* causal: a warp whose rows all come before the tile's first key
           would only add zeros (dS = 0 there) */
        if (!causal || j0 < w0 + 16 * MW) {
            /* S = Q K^T and dP = dO V^T; K and V read as B (no .trans), each
               fragment serving the warp's MW row tiles */
            float s[MW][BC / 8][4], dp[MW][BC / 8][4];
TRN__UNROLL
            for (int mt = 0; mt < MW; mt++)
TRN__UNROLL
                for (int n = 0; n < BC / 8; n++)
                    for (int e = 0; e < 4; e++) s[mt][n][e] = dp[mt][n][e] = 0.0f;
TRN__UNROLL
            for (int k = 0; k < HS / 16; k++)
TRN__UNROLL
                for (int n = 0; n < BC / 16; n++) {
                    unsigned kf[4], vf[4];
                    int br = (n * 16 + lane % 8 + lane / 16 * 8) * LD + k * 16 + (lane / 8) % 2 * 8;
                    trn__ldmatrix_x4(kf, Ks + br);
                    trn__ldmatrix_x4(vf, Vs + br);
TRN__UNROLL
                    for (int mt = 0; mt < MW; mt++) {
                        trn__mma_bf16(s[mt][2 * n], qf[mt][k], kf);
                        trn__mma_bf16(s[mt][2 * n + 1], qf[mt][k], kf + 2);
                        trn__mma_bf16(dp[mt][2 * n], of[mt][k], vf);
                        trn__mma_bf16(dp[mt][2 * n + 1], of[mt][k], vf + 2);
                    }
                }
            /* dS = P (dP - D) in place of S, fp32; masked where the tile crosses
               T or the diagonal (P = 0 there) */
TRN__UNROLL
            for (int mt = 0; mt < MW; mt++) {
                int r0 = w0 + mt * 16, mask = j0 + BC > T || r0 + 16 > T || (causal && j0 + BC > r0);
TRN__UNROLL
                for (int n = 0; n < BC / 8; n++)
TRN__UNROLL
                    for (int e = 0; e < 4; e++) {
                        int i = r0 + g + e / 2 * 8, j = j0 + n * 8 + 2 * t + e % 2;
                        float p = mask && (j >= T || i >= T || (causal && j > i))
                                      ? 0.0f
                                      : exp2f(s[mt][n][e] * scale * log2e - l2[mt][e / 2]);
                        s[mt][n][e] = p * (dp[mt][n][e] - dd[mt][e / 2]);
                    }
            }
            /* dQ += dS K: dS's k-th 16 keys as A fragments (rounded to bf16) */
TRN__UNROLL
            for (int k = 0; k < BC / 16; k++) {
                unsigned da[MW][4];
TRN__UNROLL
                for (int mt = 0; mt < MW; mt++) trn__fa2_afrag(da[mt], s[mt], k);
TRN__UNROLL
                for (int n = 0; n < HS / 16; n++) {
                    unsigned kf[4];
                    int kr = (k * 16 + lane % 8 + (lane / 8) % 2 * 8) * LD + n * 16 + lane / 16 * 8;
                    trn__ldmatrix_x4_trans(kf, Ks + kr);
TRN__UNROLL
                    for (int mt = 0; mt < MW; mt++) {
                        trn__mma_bf16(dq[mt][2 * n], da[mt], kf);
                        trn__mma_bf16(dq[mt][2 * n + 1], da[mt], kf + 2);
                    }
                }
            }
        }
        __syncthreads(); /* everyone is done with this buffer before it is refilled */
    }
TRN__UNROLL
    for (int mt = 0; mt < MW; mt++)
TRN__UNROLL
        for (int r = 0; r < 2; r++) {
            int i = w0 + mt * 16 + g + r * 8;
            if (i >= T) continue;
            unsigned *q = (unsigned *)(dqkv + ((size_t)b * T + i) * ld + (size_t)h * HS + 2 * t);
TRN__UNROLL
            for (int n = 0; n < HS / 8; n++)
                q[n * 4] = write ? trn__pack_bf16(scale * dq[mt][n][2 * r], scale * dq[mt][n][2 * r + 1])
                                 : trn__pack_bf16(trn__bf16_lo(q[n * 4]) + scale * dq[mt][n][2 * r],
                                                  trn__bf16_hi(q[n * 4]) + scale * dq[mt][n][2 * r + 1]);
        }
}

/* backward with atomic dQ, pass 3: dqkv's Q part += scale * the fp32
   accumulator (write: = , a fresh gradient); one thread per pair of columns */
template <int HS>
static __global__ void trn__k_fa2_bwd_dq_sum(trn__bf16 *dqkv, const float *dq_acc, int B, int T, int NH, int NKV,
                                             float scale, int write) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x, rows = (size_t)B * NH * T;
    if (idx >= rows * (HS / 2)) return;
    size_t row = idx / (HS / 2), d = idx % (HS / 2) * 2, bh = row / (size_t)T, i = row % (size_t)T;
    size_t b = bh / (size_t)NH, h = bh % (size_t)NH;
    float a0 = dq_acc[row * HS + d], a1 = dq_acc[row * HS + d + 1];
    unsigned *q = (unsigned *)(dqkv + (b * (size_t)T + i) * (size_t)(NH + 2 * NKV) * HS + h * HS + d);
    *q = write ? trn__pack_bf16(scale * a0, scale * a1) : trn__pack_bf16(trn__bf16_lo(*q) + scale * a0, trn__bf16_hi(*q) + scale * a1);
}

/* the launchers. The kernels take 16-byte aligned qkv, out, dout, dqkv
   (cp.async and the vector loads need it; the arena aligns every tensor)
   and head sizes 16, 32, ..., 128: trn__cuda_fa2_ok says whether a call
   qualifies (else the WMMA/FMA kernels run). */
static struct { int wmma, dq_atomic; } trn__fa2_cfg; /* trn_cuda_set_flash */
static int trn__cuda_fa2_ok(int hs, const void *a, const void *b, const void *c, const void *d) {
    uintptr_t u = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d;
    return !trn__fa2_cfg.wmma && hs % 16 == 0 && hs >= 16 && hs <= 128 && u % 16 == 0;
}
template <int HS>
static void trn__cuda_fa2_forward(float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV, int causal) {
    /* Q, K, V read, out written (bf16), lse written; S = Q K^T and P V: 2 T T HS each per head, half under causal */
    TRN__CUDA_SITE_GEMM("flash fwd", 2.0 * B * T * (2 * NH + 2 * NKV) * HS + 4.0 * B * NH * T, T, T, HS,
                        (causal ? 1.0 : 2.0) * B * NH);
    TRN_CUDA_LAUNCH(trn__k_fa2_fwd<HS>, dim3((unsigned)(B * NH), (unsigned)((T + trn__fa2<HS>::FBR - 1) / trn__fa2<HS>::FBR)),
                    dim3(32 * trn__fa2<HS>::FW),
                    trn__fa2_shmem<HS>(0), trn__cu.stream, (trn__bf16 *)out, lse, (const trn__bf16 *)qkv, T, NH, NKV,
                    causal, 1.44269504089f / sqrtf((float)HS));
}
template <int HS>
static void trn__cuda_fa2_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                                   const float *lse, int B, int T, int NH, int NKV, int causal, int write) {
    typedef trn__fa2<HS> F;
    size_t rows = (size_t)B * NH * T;
    int nkb = (T + F::BBC - 1) / F::BBC, atomic = trn__fa2_cfg.dq_atomic;
    size_t lead = (rows + 3) / 4 * 4; /* D, padded: the accumulator starts 16-byte aligned */
    float *D = trn__cuda_tmp(lead + (atomic ? rows * HS : 0)), *acc = D + lead;
    const float scale = 1.0f / sqrtf((float)HS);
    double qkvdo = 2.0 * B * T * (2 * NH + 2 * NKV) * HS; /* Q, K, V and dO, bf16, each read once */
    {   /* dO, O read (bf16); D written; with atomic dQ its accumulator zeroed (fp32) */
        TRN__CUDA_SITE("flash bwd D", 4.0 * rows * HS + 4.0 * rows + 4.0 * atomic * rows * HS, 2.0 * rows * HS);
        const size_t per_block = 8 * (32 / F::DL); /* 8 warps of 32 / DL rows */
        TRN_CUDA_LAUNCH(trn__k_fa2_bwd_d<HS>, dim3((unsigned)((rows + per_block - 1) / per_block)), dim3(256), 0,
                        trn__cu.stream, D, acc, (const trn__bf16 *)dout, (const trn__bf16 *)out, B, T, NH, atomic);
    }
    {   /* Q, dO, K, V, lse, D read; dK, dV written (write), else read and written (backward accumulates);
           atomic: dQ's accumulator read and written; four products of 2 T T HS per head (half under causal),
           five with atomic dQ */
        TRN__CUDA_SITE_GEMM("flash bwd dkdv", qkvdo + 8.0 * rows + 2.0 * (2.0 - write) * B * T * 2 * NKV * HS +
                                                  8.0 * atomic * rows * HS, T, T, HS, (causal ? 0.5 : 1.0) * (4 + atomic) * B * NH);
        if (atomic)
            TRN_CUDA_LAUNCH((trn__k_fa2_bwd<HS, 1>), dim3((unsigned)(B * NKV), (unsigned)nkb), dim3(32 * F::BW),
                            trn__fa2_shmem<HS>(2), trn__cu.stream, (trn__bf16 *)dqkv, acc, (const trn__bf16 *)dout,
                            (const trn__bf16 *)qkv, lse, (const float *)D, T, NH, NKV, causal, scale, write);
        else
            TRN_CUDA_LAUNCH((trn__k_fa2_bwd<HS, 0>), dim3((unsigned)(B * NKV), (unsigned)nkb), dim3(32 * F::BW),
                            trn__fa2_shmem<HS>(1), trn__cu.stream, (trn__bf16 *)dqkv, acc, (const trn__bf16 *)dout,
                            (const trn__bf16 *)qkv, lse, (const float *)D, T, NH, NKV, causal, scale, write);
    }
    if (atomic) { /* the accumulator read (fp32), dQ of dqkv written, or read and written (bf16) */
        TRN__CUDA_SITE("flash bwd dq sum", 4.0 * rows * HS + 2.0 * (2.0 - write) * rows * HS, 2.0 * rows * HS);
        TRN_CUDA_LAUNCH(trn__k_fa2_bwd_dq_sum<HS>, dim3((unsigned)((rows * (HS / 2) + 255) / 256)), dim3(256), 0,
                        trn__cu.stream, (trn__bf16 *)dqkv, (const float *)acc, B, T, NH, NKV, scale, write);
        return;
    }
    /* Q, dO, K, V, lse, D read; dQ of dqkv written, or read and written; three products (S, dP, dS K) */
    TRN__CUDA_SITE_GEMM("flash bwd dq", qkvdo + 8.0 * rows + 2.0 * (2.0 - write) * rows * HS, T, T, HS,
                        (causal ? 0.5 : 1.0) * 3 * B * NH);
    TRN_CUDA_LAUNCH(trn__k_fa2_bwd_q<HS>, dim3((unsigned)(B * NH), (unsigned)((T + F::FBR - 1) / F::FBR)),
                    dim3(32 * F::FW), trn__fa2_shmem<HS>(0), trn__cu.stream, (trn__bf16 *)dqkv, (const trn__bf16 *)dout,
                    (const trn__bf16 *)qkv, lse, (const float *)D, T, NH, NKV, causal, scale, write);
}

/* ------------------------------------------------------------------------
   >>classifier: cross-entropy over the logits of trn_linear_cross_entropy
   (and of trn_cross_entropy), kernels and launchers together. The plain
   references: train.h's trn_crossentropy_forward / _backward / _fused.
   logits (N,Vp) in A (float or bf16): V real columns, Vp - V padding;
   targets (N); losses, lse (N) fp32.
   One block per row. Each thread keeps a running max m and sum s of
   exp(x - m) over its columns ("online softmax", Milakov & Gimelshein
   2018); the pairs are then merged across the block.
   ------------------------------------------------------------------------ */
static __device__ __forceinline__ void trn__ms_merge(float *m, float *s, float m2, float s2) {
    if (m2 == -INFINITY) return;
    if (*m == -INFINITY) { *m = m2; *s = s2; return; }
    float M = fmaxf(*m, m2);
    *s = *s * expf(*m - M) + s2 * expf(m2 - M);
    *m = M;
}
static __device__ __forceinline__ void trn__ms_add(float *m, float *s, float x) {
    if (x > *m) { *s = *s * expf(*m - x) + 1.0f; *m = x; }
    else *s += expf(x - *m);
}
/* the (m, s) pairs of a block merged; every thread gets m + log(s), the
   row's log-sum-exp (wm, wsum: 32 floats of shared memory each) */
static __device__ __forceinline__ float trn__block_lse(float m, float s, float *wm, float *wsum) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        trn__ms_merge(&m, &s, m2, s2);
    }
    if (lane == 0) { wm[warp] = m; wsum[warp] = s; }
    __syncthreads();
    m = lane < nw ? wm[lane] : -INFINITY;
    s = lane < nw ? wsum[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        trn__ms_merge(&m, &s, m2, s2);
    }
    return m + logf(s);
}
/* forward alone (evaluation, and trn_cross_entropy): losses, lse. The
   row's V real columns read 16 bytes at a time (trn__row_read16: head,
   packs, tail); the padding is never read. */
template <typename A>
static __global__ void trn__k_xent_fwd(float *losses, float *lse, const A *logits, const int *targets, int V, int Vp) {
    __shared__ float wm[32], wsum[32];
    int n = blockIdx.x;
    const A *l = logits + (size_t)n * Vp;
    float m = -INFINITY, s = 0.0f, z;
    trn__row_read16(l, V, [&](int, float x) { trn__ms_add(&m, &s, x); });
    z = trn__block_lse(m, s, wm, wsum);
    if (threadIdx.x == 0) {
        lse[n] = z;
        losses[n] = z - trn__ld(l[targets[n]]);
    }
}
/* dlogits += dloss * (softmax - onehot) on the V real columns, 16 bytes
   at a time (trn__row_update16); the padding is left as it is */
template <typename A>
static __global__ void trn__k_xent_bwd(A *dlogits, const A *logits, const float *lse, const int *targets, float dloss,
                                       int V, int Vp) {
    const int n = blockIdx.x, t = targets[n];
    const float z = lse[n];
    trn__row_update16(dlogits + (size_t)n * Vp, logits + (size_t)n * Vp, V, [&](int v, float d, float x) {
        float p = expf(x - z);
        return d + dloss * (v == t ? p - 1.0f : p);
    });
}
/* The classifier's kernel: forward and backward in one, the gradient
   WRITTEN OVER the logits (reference: trn_crossentropy_fused).
     pass 1: (m, s) over the row's V real columns -> z = log-sum-exp;
             losses[n] = z - x[target] (read before anything is written)
     pass 2: x[v] = dloss * (exp(x[v] - z) - [v == target]), 0 for v >= V
   Both passes go 16 bytes at a time: a scalar head up to the row's first
   16-byte boundary (rows start unaligned when Vp * sizeof(A) is not a
   multiple of 16), packs of 8 bf16 / 4 fp32, a scalar tail. Bytes: the
   row read twice (the second from L2 only in part: a block's row is 100
   KB in bf16 at Vp = 50304) and written once; no lse leaves the kernel,
   no dlogits buffer exists, nothing is zeroed first. The launcher gives
   it only rows too long for trn__k_xent_fused_reg below. */
template <typename A>
static __global__ void trn__k_xent_fused(float *losses, A *logits, const int *targets, float dloss, int V, int Vp) {
    __shared__ float wm[32], wsum[32];
    const int K = TRN__VEC(A), n = blockIdx.x, t = targets[n];
    A *l = logits + (size_t)n * Vp;
    const int head = trn__head16(l, Vp), nvec = (Vp - head) / K, body = head + nvec * K;
    float m = -INFINITY, s = 0.0f, z;
    for (int v = threadIdx.x; v < head; v += blockDim.x)
        if (v < V) trn__ms_add(&m, &s, trn__ld(l[v]));
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
        trn__pack<A> p = trn__ld16(l + head + i * K);
        for (int k = 0; k < K; k++)
            if (head + i * K + k < V) trn__ms_add(&m, &s, trn__ld(p.e[k]));
    }
    for (int v = body + threadIdx.x; v < Vp; v += blockDim.x)
        if (v < V) trn__ms_add(&m, &s, trn__ld(l[v]));
    z = trn__block_lse(m, s, wm, wsum);
    if (threadIdx.x == 0) losses[n] = z - trn__ld(l[t]);
    __syncthreads(); /* x[target] is read before any thread overwrites it */
    for (int v = threadIdx.x; v < head; v += blockDim.x)
        l[v] = trn__to<A>(v < V ? dloss * (expf(trn__ld(l[v]) - z) - (v == t ? 1.0f : 0.0f)) : 0.0f);
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
        A *q = l + head + i * K;
        trn__pack<A> p = trn__ld16(q);
        for (int k = 0; k < K; k++) {
            int v = head + i * K + k;
            p.e[k] = trn__to<A>(v < V ? dloss * (expf(trn__ld(p.e[k]) - z) - (v == t ? 1.0f : 0.0f)) : 0.0f);
        }
        trn__st16(q, p);
    }
    for (int v = body + threadIdx.x; v < Vp; v += blockDim.x)
        l[v] = trn__to<A>(v < V ? dloss * (expf(trn__ld(l[v]) - z) - (v == t ? 1.0f : 0.0f)) : 0.0f);
}

/* The classifier's kernel for rows that fit on the chip (GPT-2's, in bf16
   and fp32): the results of trn__k_xent_fused above, each row read from
   HBM ONCE.
   Why: the two-pass kernel reads a row for its max/sum and again for the
   gradient. A 4096-row chunk of GPT-2's logits is 400 MB and ~100 MB of
   rows are in flight at once, so the second read mostly misses the 50 MB
   L2: on an H100 (2026-11-27) it took 1.82 ms for a floor of 1.10, with
   DRAM 82% busy: ~3 row-passes of traffic (2 reads, 1 write) for 2.
   Here a block of NT threads holds its whole row from the load to the
   store. Pack j (16 bytes: 8 bf16 / 4 fp32) of thread i is the row's pack
   i + j NT (a warp's loads are contiguous); packs j < P sit in registers,
   the others in dynamic shared memory (SP packs, cp.async: no register
   holds them on the way). All of a thread's loads are issued before any
   is used: 13 independent 16-byte loads in flight a thread hide HBM's
   latency. Then:
     each thread's max m over its real columns, then s = sum exp(x - m)
       (the row is here: no online rescaling, the CPU reference's form);
     trn__block_lse merges the (m, s) pairs: z = log-sum-exp of the row;
     x[v] = dloss * (exp(x[v] - z) - [v == target]), 0 for v >= V (the
       two-pass kernel's expression), stored pack by pack over the logits.
   The loss z - x[target]: thread 0 reads x[target] with the packs, before
   the barrier in trn__block_lse; every store comes after that barrier.
   Head and tail as in the two-pass kernel: up to K - 1 scalars each, one
   per thread, kept in shared memory. Bytes: the row read once and written
   once, 2 Vp sizeof(A): the site's count, and its floor.
   Instantiations (trn__xent_reg; the launcher picks by trn__xent_reg_fits):
     bf16: 512 threads, 8 packs in registers + 2560 in shared memory
           (40 KB): 53,248 columns; 64 registers, so an SM holds two
           blocks (one loads while the other computes);
     fp32: 1024 threads, 10 packs in registers + 2944 in shared memory
           (46 KB, under the 48 KB a block gets without opting in):
           52,736 columns; 64 registers, one block an SM (1024 threads
           of 64 registers are the whole register file).
   ptxas -v (sm_90): 64 registers, 0 bytes spilled, both. GPT-2's Vp =
   50,304 fits either way; Llama 3's 128,256 does not and goes to the
   two-pass kernel. */
template <typename A> struct trn__xent_reg {
    enum { NT = sizeof(A) == 2 ? 512 : 1024, P = sizeof(A) == 2 ? 8 : 10, SP = sizeof(A) == 2 ? 2560 : 2944 };
};
template <typename A> static int trn__xent_reg_fits(int Vp) {
    typedef trn__xent_reg<A> R;
    return (long long)Vp <= ((long long)R::NT * R::P + R::SP) * TRN__VEC(A);
}
/* the compiler forgets what it knows of a pack's registers (an empty asm
   that "changes" them): between the passes of trn__k_xent_fused_reg this
   keeps nvcc from holding the bf16 packs' unpacked floats from one pass to
   the next (ptxas -v, sm_90: 112 registers a thread uncapped, spills at
   the 64 that two blocks of 512 allow; with it 64 and no spills) */
template <typename A> static __device__ __forceinline__ void trn__opaque16(trn__pack<A> &p) {
#ifndef TRN_CUDA_ON_CPU
    unsigned *w = reinterpret_cast<unsigned *>(&p);
    asm volatile("" : "+r"(w[0]), "+r"(w[1]), "+r"(w[2]), "+r"(w[3]));
#else
    (void)p;
#endif
}
template <typename A, int NT, int P, int SP>
static __global__ void __launch_bounds__(NT, 1024 / NT)
    trn__k_xent_fused_reg(float *losses, A *logits, const int *targets, float dloss, int V, int Vp) {
    __shared__ float wm[32], wsum[32], xs[2 * TRN__VEC(A) + 1]; /* head, tail, x[target] */
    TRN_CUDA_DYNAMIC_SHARED(trn__pack<A>, sp);                   /* SP packs: those beyond the registers' */
    const int S = (SP + NT - 1) / NT; /* slots a thread has in sp (the last one partly) */
    const int K = TRN__VEC(A), n = blockIdx.x, t = targets[n], i = threadIdx.x;
    A *l = logits + (size_t)n * Vp;
    const int head = trn__head16(l, Vp), nvec = (Vp - head) / K, body = head + nvec * K, tail = Vp - body;
    /* this thread's pack j holds the columns c + u, u = j NT K + k (k < K);
       it exists when j NT < nj; column c + u is real when u < lim */
    const int c = head + i * K, nj = nvec - i, lim = V - c, tt = t - c;
    A *q = l + c;
    /* 1. load, all at once: packs 0..P-1 into registers, P..P+S-1 into
       shared memory (cp.async: no register holds them on the way); the
       head, the tail and x[target] into shared memory */
    trn__pack<A> r[P + S];
    TRN__UNROLL
    for (int j = 0; j < P + S; j++)
        if (j * NT < nj) {
            if (j < P) r[j] = trn__ld16(q + j * NT * K);
            else trn__cp_async16(&sp[(j - P) * NT + i], q + j * NT * K, 16);
        }
    trn__cp_async_commit();
    if (i < head) xs[i] = trn__ld(l[i]);
    if (i < tail) xs[K + i] = trn__ld(l[body + i]);
    if (i == 0) xs[2 * K] = trn__ld(l[t]);
    trn__cp_async_wait<0>(); /* this thread's own copies have landed */
    /* 2. this thread's max, then its sum of exp(x - max), over real columns */
    float m = -INFINITY, s = 0.0f, z;
    TRN__UNROLL
    for (int j = 0; j < P + S; j++)
        if (j * NT < nj) {
            trn__pack<A> x = j < P ? r[j] : sp[(j - P) * NT + i];
            TRN__UNROLL
            for (int k = 0; k < K; k++)
                if (j * NT * K + k < lim) m = fmaxf(m, trn__ld(x.e[k]));
        }
    if (i < head && i < V) m = fmaxf(m, xs[i]);
    if (i < tail && body + i < V) m = fmaxf(m, xs[K + i]);
    TRN__UNROLL
    for (int j = 0; j < P; j++) trn__opaque16(r[j]);
    TRN__UNROLL
    for (int j = 0; j < P + S; j++)
        if (j * NT < nj) {
            trn__pack<A> x = j < P ? r[j] : sp[(j - P) * NT + i];
            TRN__UNROLL
            for (int k = 0; k < K; k++)
                if (j * NT * K + k < lim) s += expf(trn__ld(x.e[k]) - m);
        }
    if (i < head && i < V) s += expf(xs[i] - m);
    if (i < tail && body + i < V) s += expf(xs[K + i] - m);
    TRN__UNROLL
    for (int j = 0; j < P; j++) trn__opaque16(r[j]);
    /* 3. z for the row; the barrier in trn__block_lse: every read of the
       row is done before any thread writes */
    z = trn__block_lse(m, s, wm, wsum);
    if (i == 0) losses[n] = z - xs[2 * K];
    /* 4. the gradient written over the logits: x[v] = dloss * (exp(x[v] - z)
       - [v == target]) for real columns, 0 for the padding */
    TRN__UNROLL
    for (int j = 0; j < P + S; j++)
        if (j * NT < nj) {
            trn__pack<A> x = j < P ? r[j] : sp[(j - P) * NT + i];
            TRN__UNROLL
            for (int k = 0; k < K; k++) {
                const int u = j * NT * K + k;
                x.e[k] = trn__to<A>(u < lim ? dloss * (expf(trn__ld(x.e[k]) - z) - (u == tt ? 1.0f : 0.0f)) : 0.0f);
            }
            trn__st16(q + j * NT * K, x);
        }
    if (i < head) l[i] = trn__to<A>(i < V ? dloss * (expf(xs[i] - z) - (i == t ? 1.0f : 0.0f)) : 0.0f);
    if (i < tail) {
        int v = body + i;
        l[v] = trn__to<A>(v < V ? dloss * (expf(xs[K + i] - z) - (v == t ? 1.0f : 0.0f)) : 0.0f);
    }
}

template <typename A>
static void trn__cuda_crossentropy_forward(float *losses, float *lse, const float *logits, const int *targets, int N,
                                           int V, int Vp) {
    if (N <= 0) return;
    TRN__CUDA_SITE("cross-entropy fwd", sizeof(A) * (double)N * Vp + 12.0 * N, 3.0 * N * V); /* logits; targets, losses, lse */
    TRN_CUDA_LAUNCH(trn__k_xent_fwd<A>, dim3((unsigned)N), dim3(256), 0, trn__cu.stream, losses, lse,
                    (const A *)logits, targets, V, Vp);
}
template <typename A>
static void trn__cuda_crossentropy_backward(float *dlogits, const float *logits, const float *lse, const int *targets,
                                            float dloss, int N, int V, int Vp) {
    if (!dlogits || N <= 0) return;
    TRN__CUDA_SITE("cross-entropy bwd", 3.0 * sizeof(A) * N * Vp + 8.0 * N, 3.0 * N * V); /* logits; dlogits +=: read and written */
    TRN_CUDA_LAUNCH(trn__k_xent_bwd<A>, dim3((unsigned)N), dim3(256), 0, trn__cu.stream, (A *)dlogits,
                    (const A *)logits, lse, targets, dloss, V, Vp);
}
template <typename A>
static void trn__cuda_crossentropy_fused(float *losses, float *logits, const int *targets, float dloss, int N, int V,
                                         int Vp) {
    if (N <= 0) return;
    /* the logits read, their gradient written over them; targets, losses.
       FLOPs: ~3 a column for the max and sum, ~3 for the gradient */
    TRN__CUDA_SITE("cross-entropy fused fwd+bwd", 2.0 * sizeof(A) * N * Vp + 8.0 * N, 6.0 * N * V);
    /* a row that fits in a block's registers and shared memory (GPT-2's,
       up to 53,248 bf16 / 52,736 fp32 columns) is read once: the count
       above; a longer one (Llama 3's 128,256) goes to the two-pass kernel,
       whose second read comes from L2 only in part (for it the count is
       the floor, not the bytes it moves) */
    typedef trn__xent_reg<A> R;
    if (trn__xent_reg_fits<A>(Vp))
        TRN_CUDA_LAUNCH((trn__k_xent_fused_reg<A, R::NT, R::P, R::SP>), dim3((unsigned)N), dim3(R::NT), R::SP * 16,
                        trn__cu.stream, losses, (A *)logits, targets, dloss, V, Vp);
    else
        TRN_CUDA_LAUNCH(trn__k_xent_fused<A>, dim3((unsigned)N), dim3(256), 0, trn__cu.stream, losses, (A *)logits,
                        targets, dloss, V, Vp);
}
/* the classifier's chunk: 400 MiB of logits, 4096 rows of GPT-2's 50304 in
   bf16 (2048 in fp32). Thousands of rows make its GEMMs full-size and read
   and write the fp32 (Vp,C) dW a few times per step, not ~100; GPT-2 124M
   at B=16, T=1024 in bf16 stays within 8 GiB of device memory
   (tests/test_cuda_memory_plan.cpp) */
#define TRN__CUDA_XENT_CHUNK_BYTES ((size_t)400 << 20)
/* <<classifier */

/* --- mean pool over T: one thread per (b,c) ---------------------------------- */
template <typename A>
static __global__ void trn__k_meanpool_fwd(A *out, const A *inp, int B, int T, int C) {
    TRN__GRID_STRIDE(i, (size_t)B * C) {
        size_t b = i / (size_t)C, c = i % (size_t)C;
        float s = 0.0f;
        for (int t = 0; t < T; t++) s += trn__ld(inp[(b * T + t) * C + c]);
        out[i] = trn__to<A>(s / (float)T);
    }
}
template <typename A>
static __global__ void trn__k_meanpool_bwd(A *dinp, const A *dout, int B, int T, int C) {
    TRN__GRID_STRIDE(i, (size_t)B * T * C) {
        size_t c = i % (size_t)C, b = i / ((size_t)T * C);
        dinp[i] = trn__to<A>(trn__ld(dinp[i]) + trn__ld(dout[b * C + c]) / (float)T);
    }
}

/* ------------------------------------------------------------------------
   >>adamw: the AdamW update (Loshchilov & Hutter 2019), kernels and
   launchers together. The plain reference: train.h's trn_adamw_update_ref
     m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
     p -= lr ((m/bc1) / (sqrt(v/bc2) + eps) + weight_decay p)
   in fp32, one thread an element. Two forms: one tensor's slice
   (trn__k_adamw, the backend's adamw_update), and the whole flat buffers
   in one launch (trn__k_adamw_flat, adamw_flat: runs of decay / no decay
   / skip, the clip factor read from device memory, the bf16 copy of the
   weights written in the same pass).
   ------------------------------------------------------------------------ */
/* one pass over a slice of the flat buffers */
static __global__ void trn__k_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1,
                                   float b2, float eps, float wd, float bc1, float bc2) {
    TRN__GRID_STRIDE(i, n) {
        float gi = g[i];
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * p[i]);
    }
}
/* the launcher: the backend table's adamw_update (one tensor) */
static void trn__cuda_adamw_update(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                                   float beta2, float eps, float weight_decay, float bias_corr1, float bias_corr2) {
    TRN__CUDA_SITE("adamw (per tensor)", 28.0 * n, 12.0 * n);
    TRN__CUDA_ELEMENTWISE(trn__k_adamw, n, p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, bias_corr1, bias_corr2);
}

/* AdamW over a whole slice of the flat buffers, with the clip factor (a
   device scalar, or none) applied to each gradient first: gi = g*s, stored
   back so the buffer holds the clipped gradients as after trn_scale. The
   run of element i (decay, no decay, skip) comes from seg: a thread's i
   only grows, so it finds its first run by bisection and then steps on. */
static __global__ void trn__k_adamw_flat(float *p, float *g, float *m, float *v, size_t n, const trn_adamw_seg *seg,
                                         int nseg, float lr, float b1, float b2, float eps, float wd, float bc1,
                                         float bc2, const float *clip, trn__bf16 *p16) {
    float s = clip ? clip[0] : 1.0f;
    int r = -1;
    TRN__GRID_STRIDE(i, n) {
        if (r < 0) {
            int lo = 0, hi = nseg - 1; /* the first run with end > i */
            while (lo < hi) {
                int mid = (lo + hi) / 2;
                if (seg[mid].end > i) hi = mid;
                else lo = mid + 1;
            }
            r = lo;
        }
        while (seg[r].end <= i) r++;
        int mode = seg[r].mode;
        if (mode == TRN_ADAMW_SKIP) continue;
        float gi = g[i];
        if (s != 1.0f) { gi *= s; g[i] = gi; }
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        float w = mode == TRN_ADAMW_DECAY ? wd : 0.0f;
        m[i] = mi;
        v[i] = vi;
        float pi = p[i] - lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + w * p[i]);
        p[i] = pi;
        if (p16) p16[i] = __float2bfloat16(pi); /* bf16: the copy kernels read */
    }
}
/* the runs rarely change (once per model): upload them only when they do
   (staged, so not even that waits) */
static const trn_adamw_seg *trn__cuda_segments(const trn_adamw_seg *seg, int n) {
    int i, same = n == trn__cu.n_seg;
    for (i = 0; same && i < n; i++) same = seg[i].end == trn__cu.seg_host[i].end && seg[i].mode == trn__cu.seg_host[i].mode;
    if (same) return trn__cu.seg_dev;
    if (n > trn__cu.cap_seg) {
        trn_adamw_seg *h = (trn_adamw_seg *)realloc(trn__cu.seg_host, sizeof(trn_adamw_seg) * (size_t)n);
        if (!h) trn_fatal("train_cuda.h: out of host memory for AdamW's runs");
        trn__cu.seg_host = h;
        if (trn__cu.seg_dev) trn__cuda_free(trn__cu.seg_dev);
        trn__cu.seg_dev = (trn_adamw_seg *)trn__cuda_alloc(sizeof(trn_adamw_seg) * (size_t)n, TRN_KIND_RUNTIME);
        if (!trn__cu.seg_dev) trn_fatal("train_cuda.h: AdamW's runs: %s", trn_error_reason());
        trn__cu.cap_seg = n;
    }
    memcpy(trn__cu.seg_host, seg, sizeof(trn_adamw_seg) * (size_t)n);
    trn__cu.n_seg = n;
    trn__cuda_upload(trn__cu.seg_dev, seg, sizeof(trn_adamw_seg) * (size_t)n);
    return trn__cu.seg_dev;
}
/* the launcher: the backend table's adamw_flat (train.h's trn_adamw_step, one launch a step) */
static void trn__cuda_adamw_flat(float *p, float *g, float *m, float *v, size_t n, const trn_adamw_seg *seg, int n_seg,
                                 float lr, float beta1, float beta2, float eps, float weight_decay, float bias_corr1,
                                 float bias_corr2, const float *clip, void *p_bf16) {
    const trn_adamw_seg *dseg;
    if (n == 0 || n_seg <= 0) return;
    dseg = trn__cuda_segments(seg, n_seg);
    TRN__CUDA_SITE("adamw", (28.0 + (p_bf16 ? 2 : 0) + (clip ? 4 : 0)) * n, 12.0 * n); /* p g m v read; p m v (g) written */
    TRN__CUDA_ELEMENTWISE(trn__k_adamw_flat, n, p, g, m, v, n, dseg, n_seg, lr, beta1, beta2, eps, weight_decay,
                          bias_corr1, bias_corr2, clip, (trn__bf16 *)p_bf16);
}
/* <<adamw */

/* --- SGD with momentum: train.h's trn_sgd_update, element by element ----- */
static __global__ void trn__k_sgd(float *p, const float *g, float *buf, size_t n, float lr, float momentum,
                                 float dampening, float wd, int nesterov, int first) {
    TRN__GRID_STRIDE(i, n) {
        float d = g[i] + wd * p[i];
        if (buf) {
            float b = first ? d : momentum * buf[i] + (1.0f - dampening) * d;
            buf[i] = b;
            d = nesterov ? d + momentum * b : b;
        }
        p[i] -= lr * d;
    }
}

/* --- >>ops3 kernels: train.h's >>ops3 functions ----------------------------- */
/* dropout: the same hash as train.h's trn__dropout_u, so the same mask */
static __device__ __forceinline__ float trn__cuda_dropout_u(uint64_t key, size_t i) {
    uint64_t z = key + (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}
/* through trn__k_map (>>elementwise): out = inp * scale where element i's
   u(key, i) >= p, else 0; backward dinp += dout * scale where kept (a =
   dinp, b = dout) */
struct trn__op_dropout {
    float p, scale;
    uint64_t key;
    __device__ float operator()(float x, float, float, size_t i) const {
        return trn__cuda_dropout_u(key, i) >= p ? x * scale : 0.0f;
    }
};
struct trn__op_dropout_bwd {
    float p, scale;
    uint64_t key;
    __device__ float operator()(float d, float g, float, size_t i) const {
        return trn__cuda_dropout_u(key, i) >= p ? d + g * scale : d;
    }
};
/* transpose in the 5-D view (A, D0, Bm, D1, C): one thread per element of
   the written array, so backward's += has one writer per element. The
   storage type is T here (A is the view's first dimension). */
template <typename T>
static __global__ void trn__k_transpose_fwd(T *out, const T *inp, int A, int D0, int Bm, int D1, int C) {
    size_t n = (size_t)A * D0 * Bm * D1 * C;
    TRN__GRID_STRIDE(o, n) { /* o = (((a*D1 + j)*Bm + b)*D0 + i)*C + c */
        size_t r = o, c = r % C, i, b, j, a;
        r /= C; i = r % D0; r /= D0; b = r % Bm; r /= Bm; j = r % D1; a = r / D1;
        out[o] = inp[(((a * D0 + i) * Bm + b) * D1 + j) * C + c];
    }
}
template <typename T>
static __global__ void trn__k_transpose_bwd(T *dinp, const T *dout, int A, int D0, int Bm, int D1, int C) {
    size_t n = (size_t)A * D0 * Bm * D1 * C;
    TRN__GRID_STRIDE(s, n) { /* s = (((a*D0 + i)*Bm + b)*D1 + j)*C + c */
        size_t r = s, c = r % C, i, b, j, a;
        r /= C; j = r % D1; r /= D1; b = r % Bm; r /= Bm; i = r % D0; a = r / D0;
        dinp[s] = trn__to<T>(trn__ld(dinp[s]) + trn__ld(dout[(((a * D1 + j) * Bm + b) * D0 + i) * C + c]));
    }
}
/* slice: one thread per element of out (N,len); concat: of out (N,Ca+Cb) */
template <typename A>
static __global__ void trn__k_slice_fwd(A *out, const A *inp, int N, int C, int start, int len) {
    TRN__GRID_STRIDE(i, (size_t)N * len) out[i] = inp[(i / len) * C + start + i % len];
}
template <typename A>
static __global__ void trn__k_slice_bwd(A *dinp, const A *dout, int N, int C, int start, int len) {
    TRN__GRID_STRIDE(i, (size_t)N * len) {
        A *d = &dinp[(i / len) * C + start + i % len];
        *d = trn__to<A>(trn__ld(*d) + trn__ld(dout[i]));
    }
}
template <typename A>
static __global__ void trn__k_concat_fwd(A *out, const A *a, const A *b, int N, int Ca, int Cb) {
    size_t C = (size_t)Ca + Cb;
    TRN__GRID_STRIDE(i, (size_t)N * C) {
        size_t n = i / C, c = i % C;
        out[i] = c < (size_t)Ca ? a[n * Ca + c] : b[n * Cb + (c - Ca)];
    }
}
template <typename A>
static __global__ void trn__k_concat_bwd(A *da, A *db, const A *dout, int N, int Ca, int Cb) {
    size_t C = (size_t)Ca + Cb;
    TRN__GRID_STRIDE(i, (size_t)N * C) {
        size_t n = i / C, c = i % C;
        A *d = c < (size_t)Ca ? (da ? da + n * Ca + c : NULL) : (db ? db + n * Cb + (c - Ca) : NULL);
        if (d) *d = trn__to<A>(trn__ld(*d) + trn__ld(dout[i]));
    }
}
/* sum over the last dim: one block per row; each thread adds its columns
   in double, then the block adds the 256 partials in a fixed tree */
template <typename A>
static __global__ void trn__k_sum_fwd(A *out, const A *inp, size_t C, float scale) {
    __shared__ double ws[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    const A *x = inp + (size_t)blockIdx.x * C;
    double s = 0.0;
    for (size_t c = threadIdx.x; c < C; c += blockDim.x) s += trn__ld(x[c]);
    s = trn__warp_sum_d(s);
    if (lane == 0) ws[warp] = s;
    __syncthreads();
    if (warp == 0) {
        s = lane < nw ? ws[lane] : 0.0;
        s = trn__warp_sum_d(s);
        if (lane == 0) out[blockIdx.x] = trn__to<A>((float)(s * scale));
    }
}
template <typename A>
static __global__ void trn__k_sum_bwd(A *dinp, const A *dout, int N, size_t C, float scale) {
    TRN__GRID_STRIDE(i, (size_t)N * C) dinp[i] = trn__to<A>(trn__ld(dinp[i]) + scale * trn__ld(dout[i / C]));
}
/* BCE with logits, L1, Huber: elementwise, through trn__k_map
   (>>elementwise); inputs and gradients A, per-element losses fp32.
   Forward: a = x or pred, b = y or target; backward: a = the gradient,
   b and c the forward's inputs. The references: train.h's
   trn_bce_with_logits_*, trn_l1_*, trn_huber_* */
struct trn__op_bce {
    __device__ float operator()(float x, float y, float, size_t) const {
        return fmaxf(x, 0.0f) - x * y + log1pf(expf(-fabsf(x)));
    }
};
struct trn__op_bce_bwd {
    float dloss;
    __device__ float operator()(float d, float x, float y, size_t) const {
        float e = expf(-fabsf(x)), s = x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
        return d + dloss * (s - y);
    }
};
struct trn__op_l1 { __device__ float operator()(float p, float t, float, size_t) const { return fabsf(p - t); } };
struct trn__op_l1_bwd {
    float dloss;
    __device__ float operator()(float g, float p, float t, size_t) const {
        float d = p - t;
        return g + (d > 0.0f ? dloss : d < 0.0f ? -dloss : 0.0f);
    }
};
struct trn__op_huber {
    float delta;
    __device__ float operator()(float p, float t, float, size_t) const {
        float d = p - t, a = fabsf(d);
        return a < delta ? 0.5f * d * d : delta * (a - 0.5f * delta);
    }
};
struct trn__op_huber_bwd {
    float delta, dloss;
    __device__ float operator()(float g, float p, float t, size_t) const {
        float d = p - t;
        return g + dloss * (fabsf(d) < delta ? d : d > 0.0f ? delta : -delta);
    }
};

/* --- generation: attention over a key/value cache -------------------------
   append: the T new keys and values into rows pos.. of the caches;
   softmax over rows of S (rows of length P), row r of a (b,h) block being
   position pos + r % T, so it sees columns 0..pos + r % T. One warp per row. */
template <typename A>
static __global__ void trn__k_kv_append(A *kc, A *vc, const A *k, const A *v, int kvs, int T, int pos,
                                        int maxT, int Ckv, int B) {
    TRN__GRID_STRIDE(i, (size_t)B * T * Ckv) {
        size_t c = i % Ckv, bt = i / Ckv, b = bt / T, t = bt % T, dst = (b * maxT + pos + t) * Ckv + c;
        kc[dst] = k[bt * kvs + c];
        vc[dst] = v[bt * kvs + c];
    }
}
template <typename A>
static __global__ void trn__k_softmax_kv(A *att, int rows, int T, int P, int pos) {
    int lane = threadIdx.x % 32, row = blockIdx.x * 8 + threadIdx.x / 32;
    if (row >= rows) return;
    A *p = att + (size_t)row * P;
    int last = pos + row % T;
    float mx = -INFINITY;
    for (int s = lane; s <= last; s += 32) mx = fmaxf(mx, trn__ld(p[s]));
    mx = trn__warp_max(mx);
    float sum = 0.0f;
    for (int s = lane; s <= last; s += 32) sum += expf(trn__ld(p[s]) - mx);
    sum = trn__warp_sum(sum);
    float inv = 1.0f / sum;
    for (int s = lane; s < P; s += 32) p[s] = trn__to<A>(s <= last ? expf(trn__ld(p[s]) - mx) * inv : 0.0f);
}

/* --- sum of squares: each block sums a fixed grid-stride slice in double --
   vec (x 16-byte aligned): 8 floats a step through two 16-byte loads, the
   last n % 8 by the first block's threads (the scalar tail); otherwise one
   float at a time. The reference: train.h's trn_sum_squares. */
static __global__ void trn__k_sumsq(double *part, const float *x, size_t n, int vec) {
    __shared__ double ws[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    double s = 0.0;
    if (vec) {
        float f[8];
        TRN__GRID_STRIDE(j, n / 8) {
            trn__ld8(f, x + 8 * j);
            for (int k = 0; k < 8; k++) s += (double)f[k] * (double)f[k];
        }
        size_t t = n / 8 * 8 + threadIdx.x;
        if (blockIdx.x == 0 && t < n) s += (double)x[t] * (double)x[t];
    } else
        TRN__GRID_STRIDE(i, n) s += (double)x[i] * (double)x[i];
    s = trn__warp_sum_d(s);
    if (lane == 0) ws[warp] = s;
    __syncthreads();
    if (warp == 0) {
        s = lane < nw ? ws[lane] : 0.0;
        s = trn__warp_sum_d(s);
        if (lane == 0) part[blockIdx.x] = s;
    }
}

/* --- >>ops2: mul, silu, sigmoid, tanh, softmax, rmsnorm, rope: the
   decoder ops (Llama's), kernels and then their launchers. The plain
   references: train.h's trn_mul_forward, trn_silu_forward, ...,
   trn_rope_forward and their _backward ------------------------------------ */
/* out[i] = a[i] * b[i % C]  (b: one row broadcast over rows, or a's shape):
   forward and da through trn__k_map (trn__op_mul_row, trn__op_acc_mul_row);
   a, b, out and their gradients are A, db's column partials fp32 */
/* db = column sums of dout * a: as trn__k_colsum_part, on the product */
template <typename A>
static __global__ void trn__k_mul_bwd_part(float *part, const A *dout, const A *a, int N, int C, int rows) {
    __shared__ float acc[8][33];
    int c = blockIdx.x * 32 + threadIdx.x, r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
    float s = 0.0f;
    if (c < C)
        for (int r = r0 + (int)threadIdx.y; r < r1; r += 8)
            s += trn__ld(dout[(size_t)r * C + c]) * trn__ld(a[(size_t)r * C + c]);
    acc[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        for (int k = 1; k < 8; k++) s += acc[k][threadIdx.x];
        part[(size_t)blockIdx.y * C + c] = s;
    }
}
/* db (C, type A) += the partials of trn__k_mul_bwd_part added in order: as
   trn__k_colsum_final, which writes fp32 parameter gradients */
template <typename A>
static __global__ void trn__k_mul_bwd_final(A *db, const float *part, int nchunk, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int k = 0; k < nchunk; k++) s += part[(size_t)k * C + c];
    db[c] = trn__to<A>(trn__ld(db[c]) + s);
}
static __device__ __forceinline__ float trn__sigmoid_d(float x) { return 1.0f / (1.0f + expf(-x)); }
/* SiLU through trn__k_map (>>elementwise: 16-byte packs, a scalar tail):
   silu(x) = x sigmoid(x); backward dinp += dout (s + x s (1 - s)), s =
   sigmoid(x), with a = dinp, b = inp, c = dout. The references: train.h's
   trn_silu_forward / _backward */
struct trn__op_silu {
    __device__ float operator()(float x, float, float, size_t) const { return x * trn__sigmoid_d(x); }
};
struct trn__op_silu_bwd {
    __device__ float operator()(float d, float x, float g, size_t) const {
        float s = trn__sigmoid_d(x);
        return d + g * (s + x * s * (1.0f - s));
    }
};
/* sigmoid and tanh, the same way; backward from the saved output y:
   dinp += dout y (1 - y), and dinp += dout (1 - y^2) (a = dinp, b = out,
   c = dout). The references: train.h's trn_sigmoid_* and trn_tanh_* */
struct trn__op_sigmoid {
    __device__ float operator()(float x, float, float, size_t) const { return trn__sigmoid_d(x); }
};
struct trn__op_sigmoid_bwd {
    __device__ float operator()(float d, float y, float g, size_t) const { return d + g * y * (1.0f - y); }
};
struct trn__op_tanh { __device__ float operator()(float x, float, float, size_t) const { return tanhf(x); } };
struct trn__op_tanh_bwd {
    __device__ float operator()(float d, float y, float g, size_t) const { return d + g * (1.0f - y * y); }
};
/* softmax over rows of C: one warp per row (8 rows per block); max, sum
   and dot in fp32 */
template <typename A>
static __global__ void trn__k_softmax_rows_fwd(A *out, const A *inp, int N, int C) {
    int lane = threadIdx.x % 32, row = blockIdx.x * 8 + threadIdx.x / 32;
    if (row >= N) return;
    const A *x = inp + (size_t)row * C;
    A *y = out + (size_t)row * C;
    float mx = -INFINITY, sum = 0.0f;
    for (int i = lane; i < C; i += 32) mx = fmaxf(mx, trn__ld(x[i]));
    mx = trn__warp_max(mx);
    for (int i = lane; i < C; i += 32) sum += expf(trn__ld(x[i]) - mx);
    float inv = 1.0f / trn__warp_sum(sum);
    for (int i = lane; i < C; i += 32) y[i] = trn__to<A>(expf(trn__ld(x[i]) - mx) * inv);
}
template <typename A>
static __global__ void trn__k_softmax_rows_bwd(A *dinp, const A *out, const A *dout, int N, int C) {
    int lane = threadIdx.x % 32, row = blockIdx.x * 8 + threadIdx.x / 32;
    if (row >= N) return;
    const A *y = out + (size_t)row * C, *g = dout + (size_t)row * C;
    A *dx = dinp + (size_t)row * C;
    float dot = 0.0f;
    for (int i = lane; i < C; i += 32) dot += trn__ld(g[i]) * trn__ld(y[i]);
    dot = trn__warp_sum(dot);
    for (int i = lane; i < C; i += 32) dx[i] = trn__to<A>(trn__ld(dx[i]) + trn__ld(y[i]) * (trn__ld(g[i]) - dot));
}
/* RMSNorm: one warp per row; dw as trn__k_colsum_part on dout * x * rstd.
   x, w, out, dout, dinp are A; rstd, dw and its partials fp32. vec
   (trn__cuda_ln_vec: C a multiple of 8, rows 16-byte aligned): lane l
   takes the 8-element packs l, l + 32, ... through 16-byte loads and
   stores, as layernorm; otherwise the elements l, l + 32, ... (the sums
   then run in another order: the same math to rounding). The references:
   train.h's trn_rmsnorm_forward / _backward */
template <typename A>
static __global__ void trn__k_rms_fwd(A *out, float *rstd, const A *inp, const A *w, int N, int C, float eps, int vec) {
    int lane = threadIdx.x % 32, row = blockIdx.x * 8 + threadIdx.x / 32;
    if (row >= N) return;
    const A *x = inp + (size_t)row * C;
    A *y = out + (size_t)row * C;
    float ss = 0.0f, f[8], g[8];
    if (vec)
        for (int i = 8 * lane; i < C; i += 256) { trn__ld8(f, x + i); for (int k = 0; k < 8; k++) ss += f[k] * f[k]; }
    else
        for (int i = lane; i < C; i += 32) { float xi = trn__ld(x[i]); ss += xi * xi; }
    float r = rsqrtf(trn__warp_sum(ss) / C + eps);
    if (vec)
        for (int i = 8 * lane; i < C; i += 256) {
            trn__ld8(f, x + i); trn__ld8(g, w + i);
            for (int k = 0; k < 8; k++) f[k] = (f[k] * r) * g[k];
            trn__st8(y + i, f);
        }
    else
        for (int i = lane; i < C; i += 32) y[i] = trn__to<A>((trn__ld(x[i]) * r) * trn__ld(w[i]));
    if (lane == 0) rstd[row] = r;
}
/* dx += r dy w - x mean(dy w x) r^3 */
template <typename A>
static __global__ void trn__k_rms_bwd_dx(A *dinp, const A *dout, const A *inp, const A *w, const float *rstd, int N,
                                         int C, int vec) {
    int lane = threadIdx.x % 32, row = blockIdx.x * 8 + threadIdx.x / 32;
    if (row >= N) return;
    const A *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
    A *dx = dinp + (size_t)row * C;
    float r = rstd[row], mgx = 0.0f, fg[8], fw[8], fx[8], fd[8];
    if (vec)
        for (int i = 8 * lane; i < C; i += 256) {
            trn__ld8(fg, dy + i); trn__ld8(fw, w + i); trn__ld8(fx, x + i);
            for (int k = 0; k < 8; k++) mgx += fg[k] * fw[k] * fx[k];
        }
    else
        for (int i = lane; i < C; i += 32) mgx += trn__ld(dy[i]) * trn__ld(w[i]) * trn__ld(x[i]);
    mgx = trn__warp_sum(mgx) / C * r * r * r;
    if (vec)
        for (int i = 8 * lane; i < C; i += 256) {
            trn__ld8(fg, dy + i); trn__ld8(fw, w + i); trn__ld8(fx, x + i); trn__ld8(fd, dx + i);
            for (int k = 0; k < 8; k++) fd[k] += r * fg[k] * fw[k] - fx[k] * mgx;
            trn__st8(dx + i, fd);
        }
    else
        for (int i = lane; i < C; i += 32)
            dx[i] = trn__to<A>(trn__ld(dx[i]) + (r * trn__ld(dy[i]) * trn__ld(w[i]) - trn__ld(x[i]) * mgx));
}
template <typename A>
static __global__ void trn__k_rms_bwd_part(float *part, const A *dout, const A *inp, const float *rstd, int N, int C,
                                           int rows) {
    __shared__ float acc[8][33];
    int c = blockIdx.x * 32 + threadIdx.x, r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
    float s = 0.0f;
    if (c < C)
        for (int r = r0 + (int)threadIdx.y; r < r1; r += 8)
            s += trn__ld(dout[(size_t)r * C + c]) * (trn__ld(inp[(size_t)r * C + c]) * rstd[r]);
    acc[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        for (int k = 1; k < 8; k++) s += acc[k][threadIdx.x];
        part[(size_t)blockIdx.y * C + c] = s;
    }
}
/* RoPE, rotate-half: one thread per output channel. Channel d of a rotated
   head pairs with d +- hs/2; sign = -1 turns backward (the transpose).
   Angles in double, as on the CPU. */
template <typename A>
static __global__ void trn__k_rope(A *y, const A *x, int B, int T, int H, int R, int hs, int pos0, float theta,
                                   trn_rope_scaling sc, float sign, int accumulate) {
    size_t n = (size_t)B * T * H * hs;
    int half = hs / 2;
    TRN__GRID_STRIDE(k, n) {
        int d = (int)(k % (size_t)hs), h = (int)((k / (size_t)hs) % (size_t)H);
        int t = (int)((k / ((size_t)hs * H)) % (size_t)T);
        float v;
        if (h >= R) v = trn__ld(x[k]);
        else {
            int i = d < half ? d : d - half;
            double a = (double)(pos0 + t) * trn_rope_inv_freq(i, hs, theta, &sc, pos0 + T);
            float c = (float)cos(a), s = sign * (float)sin(a);
            v = d < half ? trn__ld(x[k]) * c - trn__ld(x[k + half]) * s : trn__ld(x[k]) * c + trn__ld(x[k - half]) * s;
        }
        y[k] = trn__to<A>(accumulate ? trn__ld(y[k]) + v : v);
    }
}

/* the host launchers: the backend table's mul_forward ... rope_backward */
template <typename A>
static void trn__cuda_mul_forward(float *out, const float *a, const float *b, size_t N, size_t C) {
    TRN__CUDA_SITE("mul fwd", 3.0 * sizeof(A) * N * C, (double)N * C);
    trn__op_mul_row<A> op = {TRN__CA(b), C};
    trn__cuda_map<A>(op, out, a, NULL, NULL, N * C);
}
template <typename A>
static void trn__cuda_mul_backward(float *da, float *db, const float *dout, const float *a, const float *b, size_t N,
                                   size_t C) {
    TRN__CUDA_SITE("mul bwd", sizeof(A) * ((da ? 3.0 : 0) + (db ? 2.0 : 0)) * N * C + (db ? sizeof(A) * (double)C : 0), 2.0 * N * C);
    trn__op_acc_mul_row<A> op = {TRN__CA(b), C};
    if (da) trn__cuda_map<A>(op, da, da, dout, NULL, N * C);
    if (!db || N * C == 0) return;
    if (N == 1) { trn__cuda_map<A>(trn__op_add_mul(), db, db, dout, a, C); return; }
    int nchunk = (int)((N + 63) / 64), rows;
    if (nchunk > 64) nchunk = 64;
    rows = (int)((N + (size_t)nchunk - 1) / (size_t)nchunk);
    float *part = trn__cuda_tmp((size_t)nchunk * C);
    TRN_CUDA_LAUNCH(trn__k_mul_bwd_part<A>, dim3((unsigned)(C + 31) / 32, (unsigned)nchunk), dim3(32, 8), 0,
                    trn__cu.stream, part, TRN__CA(dout), TRN__CA(a), (int)N, (int)C, rows);
    TRN_CUDA_LAUNCH(trn__k_mul_bwd_final<A>, dim3((unsigned)(C + 255) / 256), dim3(256), 0, trn__cu.stream, TRN__A(db),
                    (const float *)part, nchunk, (int)C);
}
template <typename A>
static void trn__cuda_silu_forward(float *out, const float *inp, size_t n) {
    TRN__CUDA_SITE("silu fwd", 2.0 * sizeof(A) * n, 4.0 * n);
    trn__cuda_map<A>(trn__op_silu(), out, inp, NULL, NULL, n);
}
template <typename A>
static void trn__cuda_silu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    TRN__CUDA_SITE("silu bwd", 3.0 * sizeof(A) * n, 6.0 * n);
    if (dinp) trn__cuda_map<A>(trn__op_silu_bwd(), dinp, dinp, inp, dout, n);
}
template <typename A>
static void trn__cuda_sigmoid_forward(float *out, const float *inp, size_t n) {
    TRN__CUDA_SITE("sigmoid fwd", 2.0 * sizeof(A) * n, 3.0 * n);
    trn__cuda_map<A>(trn__op_sigmoid(), out, inp, NULL, NULL, n);
}
template <typename A>
static void trn__cuda_sigmoid_backward(float *dinp, const float *out, const float *dout, size_t n) {
    TRN__CUDA_SITE("sigmoid bwd", 3.0 * sizeof(A) * n, 3.0 * n);
    if (dinp) trn__cuda_map<A>(trn__op_sigmoid_bwd(), dinp, dinp, out, dout, n);
}
template <typename A>
static void trn__cuda_tanh_forward(float *out, const float *inp, size_t n) {
    TRN__CUDA_SITE("tanh fwd", 2.0 * sizeof(A) * n, 3.0 * n);
    trn__cuda_map<A>(trn__op_tanh(), out, inp, NULL, NULL, n);
}
template <typename A>
static void trn__cuda_tanh_backward(float *dinp, const float *out, const float *dout, size_t n) {
    TRN__CUDA_SITE("tanh bwd", 3.0 * sizeof(A) * n, 3.0 * n);
    if (dinp) trn__cuda_map<A>(trn__op_tanh_bwd(), dinp, dinp, out, dout, n);
}
template <typename A>
static void trn__cuda_softmax_forward(float *out, const float *inp, int N, int C) {
    TRN__CUDA_SITE("softmax fwd", 2.0 * sizeof(A) * N * C, 4.0 * N * C);
    if (N <= 0) return;
    TRN_CUDA_LAUNCH(trn__k_softmax_rows_fwd<A>, dim3((unsigned)(N + 7) / 8), dim3(256), 0, trn__cu.stream, TRN__A(out),
                    TRN__CA(inp), N, C);
}
template <typename A>
static void trn__cuda_softmax_backward(float *dinp, const float *out, const float *dout, int N, int C) {
    TRN__CUDA_SITE("softmax bwd", 3.0 * sizeof(A) * N * C, 4.0 * N * C);
    if (!dinp || N <= 0) return;
    TRN_CUDA_LAUNCH(trn__k_softmax_rows_bwd<A>, dim3((unsigned)(N + 7) / 8), dim3(256), 0, trn__cu.stream,
                    TRN__A(dinp), TRN__CA(out), TRN__CA(dout), N, C);
}
template <typename A>
static void trn__cuda_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                                      float eps) {
    TRN__CUDA_SITE("rmsnorm fwd", sizeof(A) * (2.0 * N * C + C) + 4.0 * N, 4.0 * N * C);
    if (N <= 0) return;
    TRN_CUDA_LAUNCH(trn__k_rms_fwd<A>, dim3((unsigned)(N + 7) / 8), dim3(256), 0, trn__cu.stream, TRN__A(out), rstd,
                    TRN__CA(inp), TRN__CA(w), N, C, eps, trn__cuda_ln_vec(C, out, inp, w, w));
}
template <typename A>
static void trn__cuda_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                                       const float *rstd, int N, int C) {
    TRN__CUDA_SITE("rmsnorm bwd", sizeof(A) * ((dinp ? 4.0 : 2.0) * N * C + C) + 4.0 * N + (dw ? 8.0 * C : 0), 8.0 * N * C);
    if (N <= 0) return;
    if (dinp)
        TRN_CUDA_LAUNCH(trn__k_rms_bwd_dx<A>, dim3((unsigned)(N + 7) / 8), dim3(256), 0, trn__cu.stream, TRN__A(dinp),
                        TRN__CA(dout), TRN__CA(inp), TRN__CA(w), rstd, N, C, trn__cuda_ln_vec(C, dinp, dout, inp, w));
    if (dw) {
        int nchunk = (N + 63) / 64, rows;
        if (nchunk > 64) nchunk = 64;
        rows = (N + nchunk - 1) / nchunk;
        float *part = trn__cuda_tmp((size_t)nchunk * C);
        TRN_CUDA_LAUNCH(trn__k_rms_bwd_part<A>, dim3((unsigned)(C + 31) / 32, (unsigned)nchunk), dim3(32, 8), 0,
                        trn__cu.stream, part, TRN__CA(dout), TRN__CA(inp), rstd, N, C, rows);
        TRN_CUDA_LAUNCH(trn__k_colsum_final, dim3((unsigned)(C + 255) / 256), dim3(256), 0, trn__cu.stream, dw,
                        (const float *)part, nchunk, C);
    }
}
static trn_rope_scaling trn__rope_sc_or_plain(const trn_rope_scaling *sc) { /* by value into the kernel */
    trn_rope_scaling plain;
    memset(&plain, 0, sizeof plain);
    return sc ? *sc : plain;
}
template <typename A>
static void trn__cuda_rope_forward(float *out, const float *inp, int B, int T, int H, int R, int hs, int pos0,
                                   float theta, const trn_rope_scaling *sc) {
    TRN__CUDA_SITE("rope fwd", 2.0 * sizeof(A) * B * T * H * hs, 4.0 * B * T * H * hs);
    TRN__CUDA_ELEMENTWISE(trn__k_rope<A>, (size_t)B * T * H * hs, TRN__A(out), TRN__CA(inp), B, T, H, R, hs, pos0, theta,
                          trn__rope_sc_or_plain(sc), 1.0f, 0);
}
template <typename A>
static void trn__cuda_rope_backward(float *dinp, const float *dout, int B, int T, int H, int R, int hs, int pos0,
                                    float theta, const trn_rope_scaling *sc) {
    TRN__CUDA_SITE("rope bwd", 2.0 * sizeof(A) * B * T * H * hs, 4.0 * B * T * H * hs);
    if (dinp)
        TRN__CUDA_ELEMENTWISE(trn__k_rope<A>, (size_t)B * T * H * hs, TRN__A(dinp), TRN__CA(dout), B, T, H, R, hs, pos0,
                              theta, trn__rope_sc_or_plain(sc), -1.0f, 1);
}
/* <<ops2 */

/* ------------------------------------------------------------------------
   >>convert: dst (n) = s * src or dst += s * src, any pair of dtypes
   (fp32 or bf16: the weights' bf16 copy, casts and their gradients,
   ZeRO-2's gradient buckets), kernel and launcher together. The plain
   reference: train.h's trn__cpu_convert (trn__convert_host).
   ------------------------------------------------------------------------ */
/* 8 elements at a time (16-byte packs) where both pointers are 16-byte
   aligned (vec), then the scalar tail */
template <typename D, typename S>
static __global__ void trn__k_convert(D *dst, const S *src, size_t n, int accumulate, float s, int vec) {
    const size_t nv = vec ? n / 8 : 0;
    TRN__GRID_STRIDE(i, nv) {
        float v[8], d[8];
        trn__ld8(v, src + 8 * i);
        if (accumulate) trn__ld8(d, dst + 8 * i);
        for (int k = 0; k < 8; k++) {
            if (s != 1.0f) v[k] = __fmul_rn(v[k], s); /* never fused with the add into one FMA: */
            if (accumulate) v[k] += d[k];               /* two roundings, as the CPU's reference */
        }
        trn__st8(dst + 8 * i, v);
    }
    TRN__GRID_STRIDE(t, n - 8 * nv) {
        size_t i = 8 * nv + t;
        float v = trn__ld(src[i]);
        if (s != 1.0f) v = __fmul_rn(v, s);
        if (accumulate) v += trn__ld(dst[i]);
        dst[i] = trn__to<D>(v);
    }
}

/* the launcher: the backend table's convert (dt, st: TRN_F32 or TRN_BF16) */
static void trn__cuda_convert(void *dst, int dt, const void *src, int st, size_t n, int accumulate, float s) {
    int vec = trn__al16(dst) && trn__al16(src);
    unsigned grid = trn__cuda_grid((n + 7) / 8);
    if (n == 0) return;
    TRN__CUDA_SITE("convert", (double)n * ((st == TRN_BF16 ? 2 : 4) + (dt == TRN_BF16 ? 2 : 4) * (accumulate ? 2 : 1)), n);
#define TRN__CONVERT(D, S)                                                                                        \
    TRN_CUDA_LAUNCH((trn__k_convert<D, S>), dim3(grid), dim3(TRN__CUDA_BLOCK), 0, trn__cu.stream, (D *)dst, \
                    (const S *)src, n, accumulate, s, vec)
    if (dt == TRN_BF16 && st == TRN_BF16) TRN__CONVERT(trn__bf16, trn__bf16);
    else if (dt == TRN_BF16) TRN__CONVERT(trn__bf16, float);
    else if (st == TRN_BF16) TRN__CONVERT(float, trn__bf16);
    else TRN__CONVERT(float, float);
#undef TRN__CONVERT
}
/* <<convert */

/* >>sync-free step kernels */
/* the partials of trn__k_sumsq added in order by one thread (as the host
   did before: the same bits), then the norm and the clip factor as
   trn_clip_grad_norm computes them. total: the sum (or NULL); stat: [0]
   norm, [1] factor (or NULL). */
static __global__ void trn__k_norm_final(float *stat, double *total, const double *part, int nparts, float max_norm) {
    if (threadIdx.x != 0) return;
    double s = 0.0;
    for (int k = 0; k < nparts; k++) s += part[k];
    if (total) total[0] = s;
    if (stat) {
        float norm = (float)sqrt(s);
        stat[0] = norm;
        stat[1] = max_norm > 0.0f && norm > max_norm ? max_norm / (norm + 1e-6f) : 1.0f;
    }
}

/* out[0] = mean of x[0..n): one block, each thread a strided slice in
   double, then a fixed tree: the same bits on every run */
static __global__ void trn__k_mean(float *out, const float *x, size_t n) {
    __shared__ double ws[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    double s = 0.0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) s += (double)x[i];
    s = trn__warp_sum_d(s);
    if (lane == 0) ws[warp] = s;
    __syncthreads();
    if (warp == 0) {
        s = lane < nw ? ws[lane] : 0.0;
        s = trn__warp_sum_d(s);
        if (lane == 0) out[0] = (float)(s / (double)n);
    }
}

/* (AdamW over the flat buffers, which reads the clip factor from device
   memory: trn__k_adamw_flat, >>adamw) */
/* <<sync-free step kernels */

/* ========================================================================
   >>cuda-ops: the backend table's functions (host side)
   cuBLAS is column-major. A row-major (R,K) matrix with row stride ld is,
   to cuBLAS, a column-major (K,R) matrix with leading dimension ld: the
   same bytes, transposed. So row-major C = A B is column-major
   C^T = B^T A^T, and every call below swaps the operands.
   ======================================================================== */
/* cuBLAS's name of a storage type */
static cudaDataType trn__cuda_dt(const float *) { return CUDA_R_32F; }
static cudaDataType trn__cuda_dt(const trn__bf16 *) { return CUDA_R_16BF; }
/* C = alpha op(A) op(B) + beta C (column-major; batch > 1: strided batches).
   A and B are float or bf16 (T), C float or bf16 (TC). fp32 inputs use TF32
   tensor cores unless they are off; bf16 inputs always accumulate in fp32
   (CUBLAS_COMPUTE_32F: a product of two bf16 is exact in fp32), and a bf16
   C is rounded once, after alpha and beta were applied in fp32. */
template <typename T, typename TC>
static void trn__cuda_gemm(const char *file, int line, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                      float alpha, const T *A, int lda, long long sa, const T *B, int ldb, long long sb,
                      float beta, TC *C, int ldc, long long sc, int batch) {
    cudaDataType dt = trn__cuda_dt(A), ct_c = trn__cuda_dt(C);
    cublasComputeType_t ct = trn__cu.tf32_off || dt == CUDA_R_16BF ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
    cublasStatus_t st;
    if (batch == 1)
        st = cublasGemmEx(trn__cu.cublas, ta, tb, m, n, k, &alpha, A, dt, lda, B, dt, ldb, &beta, C,
                          ct_c, ldc, ct, CUBLAS_GEMM_DEFAULT);
    else
        st = cublasGemmStridedBatchedEx(trn__cu.cublas, ta, tb, m, n, k, &alpha, A, dt, lda, sa, B,
                                        dt, ldb, sb, &beta, C, ct_c, ldc, sc, batch, ct,
                                        CUBLAS_GEMM_DEFAULT);
    trn__cublas_check(st, "cublasGemmEx", file, line);
    trn__cuda_launched(batch == 1 ? "cublasGemmEx" : "cublasGemmStridedBatchedEx");
}
#define TRN__CUDA_GEMM(...) trn__cuda_gemm(__FILE__, __LINE__, __VA_ARGS__)

/* >>cublaslt: every bf16 matmul (bmm and attention aside, see there) runs
   through cuBLASLt, whose GEMMs can fuse work into their epilogue, the step
   between the fp32 accumulator and the store of D, where it costs no extra
   pass over memory:
     D (m,n) = op(A) op(B) [+ D, beta = 1], then by `act`:
       TRN__LT_NONE   D = acc + bias                  (DEFAULT; BIAS with a bias)
       TRN__LT_GELU   v = acc + bias, aux = v, D = gelu(v)   (GELU_AUX[_BIAS])
       TRN__LT_DGELU  D = acc * gelu'(aux)            (DGELU; beta 0, no bias)
       TRN__LT_BGRADB D = acc, and bias[j] = sum over k of op(B)[k][j]
                      WRITTEN (BGRADB: the bias gradient, one value per
                      column of D, from the B operand the GEMM reads anyway)
   bias: one value per row of D (per output feature), or NULL; for BGRADB
   the output vector (n values of D's type), written, never read. aux: the
   pre-activation, a matrix with D's layout: written by GELU (forward saves
   it for backward), read by DGELU (backward). A and B are bf16; D (= C) is
   bf16 or fp32 (TD), accumulated in fp32 and rounded once after the
   epilogue (the harness does exactly that; cuBLASLt on an H100 rounded
   once more: a bf16 product before its bias, and GELU 1 ulp from the tanh
   form, see tests/test_cuda_bf16_gemm.cpp); the bias and aux have D's type, cuBLASLt's default for both (so
   neither BIAS_DATA_TYPE nor AUX_DATA_TYPE needs more than that). beta 1
   with DGELU is refused: the kit's DGELU writes dpre, and whether the
   library multiplies beta C by gelu' too is not documented.
   GELU's form: cuBLASLt documents its epilogue only as "GELU"; PyTorch's
   _addmm_activation calls the same epilogue the tanh approximation
   (pytorch/pytorch#104061: "cuBLASLt-based fused GELU epilogue ... uses
   tanh approximation"), train.h's (and GPT-2's) form. On a GPU,
   tests/test_cuda_bf16_gemm_gpu.cu tells it from the erf form on exact
   inputs. Rules for aux (cublasLt.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD):
   its leading dimension (here D's) a multiple of 8 and at least D's rows;
   the heuristic reads the aux pointer's alignment to pick kernels, and the
   kit asks for 16 bytes (one vector access), what cudaMalloc gives.
   trn__cuda_lt_aux_ok says whether a shape qualifies; callers that get 0
   take the unfused path (GEMM, then a kernel). */
enum { TRN__LT_NONE, TRN__LT_GELU, TRN__LT_DGELU, TRN__LT_BGRADB };
static int trn__cuda_lt_aux_ok(const void *aux, int ld) { return ld % 8 == 0 && (uintptr_t)aux % 16 == 0; }
/* >>lt-plans: cuBLASLt once per problem. A descriptor, three layouts, a
   preference and a heuristic query cost host time (and the heuristic a lot
   of it), and their answer depends only on the problem: the transposes,
   m n k, the leading dimensions, D's type, the epilogue, and how aligned the
   matrices' addresses are: the heuristic may pick kernels whose wide loads
   assume as much alignment as it is told, and it assumes 256 bytes unless
   told less (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES), which a pointer
   into an arena or a chunk of rows need not have. So each distinct problem,
   alignments read off the real pointers (up to 16 bytes: see
   trn__cuda_align_log2), gets a PLAN once: the descriptor
   (transposes, epilogue, aux ld), the layouts and the chosen algorithm,
   kept until trn_cuda_shutdown; a call only sets its bias and aux pointers
   on the plan's descriptor and runs. Before, a GPT-2 step made ~440 of
   each; now one per distinct shape, in the first step (the harness counts
   them: tests/test_gpt2_plan.cpp). When the heuristic offers nothing, the
   plan says so, a note is printed once, and its calls take the unfused
   path: cublasGemmEx, then the epilogue as a kernel. */
typedef struct trn__lt_plan {
    int ta, tb, m, n, k, lda, ldb, ldd, dtype, act, bias; /* the key ...                   */
    unsigned align;              /* ... and log2 of the A, B, D, aux alignments, 4 bits each */
    cublasLtMatmulDesc_t op;     /* what the key gets (found = 0: nothing fits, unfused)   */
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulHeuristicResult_t algo;
    int found;
} trn__lt_plan;
static struct { trn__lt_plan *p; int n, cap, noted; } trn__lt;

/* log2 of the largest power of two, up to 16, that divides the address.
   16 bytes is the widest access a kernel makes (one vector load; the
   Hopper copy engine wants 16-byte aligned addresses); promising more
   would buy nothing but more plans, since the same matrix lands at other
   offsets of an arena from one step to the next */
static unsigned trn__cuda_align_log2(const void *ptr) {
    uintptr_t a = (uintptr_t)ptr;
    unsigned l = 0;
    while (l < 4 && !(a & ((uintptr_t)1 << l))) l++;
    return l;
}
static void trn__cuda_lt_release(void) {
    for (int i = 0; i < trn__lt.n; i++) {
        trn__lt_plan *q = &trn__lt.p[i];
        TRN_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(q->ld));
        TRN_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(q->lb));
        TRN_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(q->la));
        TRN_CUBLAS_CHECK(cublasLtMatmulDescDestroy(q->op));
    }
    free(trn__lt.p);
    memset(&trn__lt, 0, sizeof trn__lt);
}
/* the plan of a problem: found in the cache, or made (one heuristic query) */
static trn__lt_plan *trn__cuda_lt_plan(const char *file, int line, int ta, int tb, int m, int n, int k, int lda,
                                       int ldb, int ldd, int dtype, int act, int bias, unsigned align) {
    static const char *names[] = {"", "+GELU", "+DGELU", "+BGRADB"};
    trn__lt_plan *q;
    int i;
    for (i = 0; i < trn__lt.n; i++) {
        q = &trn__lt.p[i];
        if (q->ta == ta && q->tb == tb && q->m == m && q->n == n && q->k == k && q->lda == lda && q->ldb == ldb &&
            q->ldd == ldd && q->dtype == dtype && q->act == act && q->bias == bias && q->align == align)
            return q;
    }
    if (trn__lt.n == trn__lt.cap) {
        int cap = trn__lt.cap ? 2 * trn__lt.cap : 32;
        trn__lt_plan *np = (trn__lt_plan *)realloc(trn__lt.p, sizeof(trn__lt_plan) * (size_t)cap);
        if (!np) trn_fatal("train_cuda.h: out of host memory for cuBLASLt plans");
        trn__lt.p = np;
        trn__lt.cap = cap;
    }
    q = &trn__lt.p[trn__lt.n++];
    memset(q, 0, sizeof *q);
    q->ta = ta; q->tb = tb; q->m = m; q->n = n; q->k = k; q->lda = lda; q->ldb = ldb; q->ldd = ldd;
    q->dtype = dtype; q->act = act; q->bias = bias; q->align = align;
    int32_t opa = ta, opb = tb, bias_type = dtype; /* the bias has D's type */
    int64_t aux_ld = ldd;
    uint32_t epilogue = act == TRN__LT_GELU    ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                        : act == TRN__LT_DGELU ? CUBLASLT_EPILOGUE_DGELU
                        : act == TRN__LT_BGRADB ? CUBLASLT_EPILOGUE_BGRADB
                        : bias                 ? CUBLASLT_EPILOGUE_BIAS
                                               : CUBLASLT_EPILOGUE_DEFAULT;
    uint64_t ws = trn__cu.workspace_bytes;
    uint32_t al[4];
    cublasLtMatmulPreference_t pref;
    for (i = 0; i < 3; i++) al[i] = 1u << ((align >> (4 * i)) & 15u); /* A, B, D (C is D) */
    TRN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&q->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    TRN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(q->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    TRN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(q->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    TRN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(q->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    if (bias)
        TRN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(q->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                        sizeof bias_type));
    if (act == TRN__LT_GELU || act == TRN__LT_DGELU)
        TRN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(q->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
    /* a layout is (rows, cols, ld) of the matrix as stored, before op() */
    TRN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&q->la, CUDA_R_16BF, ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda));
    TRN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&q->lb, CUDA_R_16BF, tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, ldb));
    TRN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&q->ld, (cudaDataType)dtype, m, n, ldd));
    TRN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    TRN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    TRN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof al[0]));
    TRN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof al[1]));
    TRN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2]));
    TRN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[2], sizeof al[2]));
    /* no algorithm is an answer, not an error: the calls go unfused */
    if (cublasLtMatmulAlgoGetHeuristic(trn__cu.cublaslt, q->op, q->la, q->lb, q->ld, q->ld, pref, 1, &q->algo,
                                       &q->found) != CUBLAS_STATUS_SUCCESS)
        q->found = 0;
    TRN_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (q->found < 1 && !trn__lt.noted) {
        trn__lt.noted = 1;
        fprintf(stderr, "train_cuda.h: note: %s:%d: cuBLASLt offers no algorithm for a bf16 matmul (m=%d n=%d k=%d, %s D%s%s); "
                "such matmuls run unfused (cublasGemmEx, then a kernel): correct, slower. (Said once.)\n", file, line, m, n,
                k, dtype == CUDA_R_16BF ? "bf16" : "fp32", bias ? ", bias" : "", names[act]);
    }
    return q;
}
template <typename TD>
static void trn__cuda_lt_gemm(const char *file, int line, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                              int k, const trn__bf16 *A, int lda, const trn__bf16 *B, int ldb, float beta, TD *D,
                              int ldd, int act, const TD *bias, TD *aux) {
    float one = 1.0f;
    int dtype = trn__cuda_dt(D), with_aux = act == TRN__LT_GELU || act == TRN__LT_DGELU;
    if (act == TRN__LT_DGELU && (beta != 0.0f || bias))
        trn_fatal("%s:%d: cuBLASLt DGELU epilogue: the kit uses it with beta 0 and no bias only (beta %g, bias %p)",
                  file, line, beta, (const void *)bias);
    if (act == TRN__LT_BGRADB && !bias)
        trn_fatal("%s:%d: cuBLASLt BGRADB epilogue: no bias gradient vector given", file, line);
    if (with_aux && !trn__cuda_lt_aux_ok(aux, ldd))
        trn_fatal("%s:%d: cuBLASLt GELU epilogue: the pre-activation (aux) needs a leading dimension that is a "
                  "multiple of 8 and a 16-byte aligned address, got ld %d at %p (m=%d n=%d k=%d); the caller should "
                  "have taken the unfused path (trn__cuda_lt_aux_ok)", file, line, ldd, (void *)aux, m, n, k);
    unsigned align = trn__cuda_align_log2(A) | trn__cuda_align_log2(B) << 4 | trn__cuda_align_log2(D) << 8 |
                     (with_aux ? trn__cuda_align_log2(aux) : act == TRN__LT_BGRADB ? trn__cuda_align_log2(bias) : 4u)
                         << 12;
    trn__lt_plan *q = trn__cuda_lt_plan(file, line, ta, tb, m, n, k, lda, ldb, ldd, dtype, act, bias != NULL, align);
    if (q->found < 1) { /* unfused: the GEMM, then the epilogue as a kernel (over D as (n, m) rows) */
        size_t mn = (size_t)m * n;
        if (ldd != m && (bias || act != TRN__LT_NONE))
            trn_fatal("%s:%d: the unfused epilogue needs a contiguous D (ld %d, m %d)", file, line, ldd, m);
        if (act == TRN__LT_BGRADB) { /* the GEMM, then bias = the column sums of op(B) (k rows of n) */
            if (tb != CUBLAS_OP_T || ldb != n || dtype != CUDA_R_32F)
                trn_fatal("%s:%d: the unfused BGRADB needs op(B) as contiguous rows (transposed B, ld %d = n %d) "
                          "and an fp32 bias gradient", file, line, ldb, n);
            trn__cuda_gemm(file, line, ta, tb, m, n, k, 1.0f, A, lda, 0, B, ldb, 0, beta, D, ldd, 0, 1);
            trn__cuda_zero((void *)bias, sizeof(float) * (size_t)n); /* BGRADB writes; the column sums add */
            trn__cuda_colsum((float *)(void *)bias, B, k, n);
        } else if (act == TRN__LT_GELU) { /* aux = acc (+ bias), D = gelu(aux) */
            trn__cuda_gemm(file, line, ta, tb, m, n, k, 1.0f, A, lda, 0, B, ldb, 0, beta, aux, ldd, 0, 1);
            trn__cuda_bias_gelu<TD>(D, aux, bias, (size_t)n, m);
        } else {
            trn__cuda_gemm(file, line, ta, tb, m, n, k, 1.0f, A, lda, 0, B, ldb, 0, beta, D, ldd, 0, 1);
            if (act == TRN__LT_DGELU)
                trn__cuda_map<TD>(trn__op_dgelu_mul(), (float *)D, (const float *)D, (const float *)aux, NULL, mn);
            else if (bias) {
                trn__op_add_row<TD> op = {bias, (size_t)m};
                trn__cuda_map<TD>(op, (float *)(void *)D, (const float *)(const void *)D, NULL, NULL, mn);
            }
        }
        return;
    }
    const void *bp = bias, *ap = aux; /* (BGRADB: the library writes through bp) */
    if (bias) TRN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(q->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp));
    if (with_aux)
        TRN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(q->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ap, sizeof ap));
    /* C = D: beta 0 writes D (never reads it), beta 1 adds to it */
    trn__cublas_check(cublasLtMatmul(trn__cu.cublaslt, q->op, &one, A, q->la, B, q->lb, &beta, D, q->ld, D, q->ld,
                                     &q->algo.algo, trn__cu.workspace, trn__cu.workspace_bytes, trn__cu.stream),
                      "cublasLtMatmul", file, line);
    trn__cuda_launched("cublasLtMatmul");
}

/* out (N,OC) = inp (N,C) @ w^T (w is (OC,C)) + bias:
   column-major out^T (OC,N) = w^T^T ... i.e. op(w-as-(C,OC)) = T, inp-as-(C,N) = N.
   fp32: a GEMM, then a kernel adds the bias. bf16: one cuBLASLt call, the
   bias (OC values, one per row of out^T) added in its epilogue. */
template <typename A>
static void trn__cuda_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C,
                                     int OC) {
    if (N <= 0 || OC <= 0) return;
    TRN__CUDA_SITE_GEMM("matmul fwd", sizeof(A) * ((double)N * C + (double)OC * C + (double)N * OC + (bias ? OC : 0)), N, OC, C, 1);
    if (trn__cuda_dt((const A *)out) == CUDA_R_16BF) {
        trn__cuda_lt_gemm<trn__bf16>(__FILE__, __LINE__, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, (const trn__bf16 *)w, C,
                                     (const trn__bf16 *)inp, C, 0.0f, (trn__bf16 *)out, OC, TRN__LT_NONE,
                                     (const trn__bf16 *)bias, NULL);
        return;
    }
    TRN__CUDA_GEMM(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, 1.0f, w, C, 0, inp, C, 0, 0.0f, out, OC, 0, 1);
    if (bias) { /* out (N,OC) += bias, the rows in 16-byte packs (>>elementwise) */
        trn__op_add_row<float> op = {bias, (size_t)OC};
        trn__cuda_map<float>(op, out, out, NULL, NULL, (size_t)N * OC);
    }
}

/* dinp (N,C) += dout (N,OC) @ w;  dw (OC,C) += dout^T @ inp;  dbias += column sums of dout.
   bf16: dinp, dout, inp and w are bf16; two cuBLASLt GEMMs with beta = 1:
   dinp accumulates in its bf16 D (old value + fp32 sum, rounded once), dw
   in an fp32 D (bf16 A and B). dbias (fp32): where it may be WRITTEN
   (write_dbias: train.h knows it is zero) and dw is computed, the dW
   GEMM's BGRADB epilogue makes it: dout is that GEMM's B operand (op T:
   k = N rows of n = OC), and the epilogue sums it over k as the GEMM
   streams it, one fp32 value per column of D (D's type), written: no pass
   of its own over dout. The epilogue can only write, so a dbias that
   holds a partial sum (a second use of the layer, a second micro-batch)
   takes the column-sum kernel, which adds.
   fp32/tf32: the same two products through cublasGemmEx, dbias by the
   column sums.
   _ex (the backend's matmul_backward_ex): write_dinp / write_dw make that
   GEMM's beta 0, so a fresh gradient is written, never zeroed and read;
   write_dbias lets the epilogue above write dbias (1: its contents are
   garbage, 2: zero; the column sums, which add, zero it first for 1). */
template <typename A>
static void trn__cuda_matmul_backward_ex(float *dinp_, float *dw, float *dbias, const float *dout_, const float *inp_,
                                         const float *w_, int N, int C, int OC, int write_dinp, int write_dw,
                                         int write_dbias) {
    A *dinp = (A *)dinp_;
    const A *dout = (const A *)dout_, *inp = (const A *)inp_, *w = (const A *)w_;
    write_dinp = write_dinp != 0; write_dw = write_dw != 0; /* (2, "zero", writes as 1 does) */
    const float bx = write_dinp ? 0.0f : 1.0f, bw = write_dw ? 0.0f : 1.0f;
    if (N <= 0 || OC <= 0 || C <= 0) return;
    if (trn__cuda_dt(dout) == CUDA_R_16BF) {
        const trn__bf16 *g = (const trn__bf16 *)dout;
        /* dinp^T (C,N) (+)= w^T (C,OC) dout^T (OC,N); dinp read too unless written */
        if (dinp) {
            TRN__CUDA_SITE_GEMM("matmul bwd dinp gemm", 2.0 * ((double)N * OC + (double)OC * C + (2.0 - write_dinp) * N * C), N, C, OC, 1);
            trn__cuda_lt_gemm<trn__bf16>(__FILE__, __LINE__, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, (const trn__bf16 *)w,
                                         C, g, OC, bx, (trn__bf16 *)dinp, C, TRN__LT_NONE, NULL, NULL);
        }
        /* dw^T (C,OC) (+)= inp^T (C,N) dout (N,OC); fp32 dw read too unless written; with BGRADB
           dbias (OC, fp32) = sum over the N rows of dout, written by the same GEMM */
        int bgrad = dw && dbias && write_dbias;
        if (dw) {
            TRN__CUDA_SITE_GEMM(bgrad ? "matmul bwd dW gemm+bgrad" : "matmul bwd dW gemm",
                                2.0 * ((double)N * OC + (double)N * C) + (8.0 - 4.0 * write_dw) * OC * C +
                                    (bgrad ? 4.0 * OC : 0.0), OC, C, N, 1); /* + dbias written */
            trn__cuda_lt_gemm<float>(__FILE__, __LINE__, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, (const trn__bf16 *)inp,
                                     C, g, OC, bw, dw, C, bgrad ? TRN__LT_BGRADB : TRN__LT_NONE, bgrad ? dbias : NULL,
                                     NULL);
            if (bgrad) dbias = NULL; /* done */
        }
    } else {
        /* dinp^T = w^T dout^T */
        if (dinp) {
            TRN__CUDA_SITE_GEMM("matmul bwd dinp gemm", 4.0 * ((double)N * OC + (double)OC * C + (2.0 - write_dinp) * N * C), N, C, OC, 1);
            TRN__CUDA_GEMM(CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, 1.0f, w, C, 0, dout, OC, 0, bx, dinp, C, 0, 1);
        }
        /* dw^T = inp^T dout */
        if (dw) {
            TRN__CUDA_SITE_GEMM("matmul bwd dW gemm", 4.0 * ((double)N * OC + (double)N * C) + (8.0 - 4.0 * write_dw) * OC * C, OC, C, N, 1);
            TRN__CUDA_GEMM(CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, 1.0f, inp, C, 0, dout, OC, 0, bw, dw, C, 0, 1);
        }
    }
    if (dbias && write_dbias == 1) trn__cuda_zero(dbias, sizeof(float) * (size_t)OC); /* garbage: the sums add */
    if (dbias) trn__cuda_colsum(dbias, dout, N, OC);
}
template <typename A>
static void trn__cuda_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                                      const float *w, int N, int C, int OC) {
    trn__cuda_matmul_backward_ex<A>(dinp, dw, dbias, dout, inp, w, N, C, OC, 0, 0, 0);
}


/* >>mlp: GPT-2's feed-forward pair fused (train.h's trn_mlp).
   Forward: pre (N,OC) = inp (N,C) w^T + bias, out = gelu(pre); pre is saved
   for backward. bf16: ONE cuBLASLt GEMM, whose GELU_AUX_BIAS epilogue takes
   the fp32 sum v = acc + bias and stores round(v) into pre (the aux matrix)
   and round(gelu(v)) into out: pre is what matmul_forward would write, and
   out skips a round trip through memory (and one rounding) of the unfused
   pair. fp32/tf32, and bf16 when pre breaks cuBLASLt's aux rules (OC not a
   multiple of 8, an unaligned pre): the GEMM into pre (bf16 with the bias
   in its epilogue), then one kernel (bias, GELU). */
template <typename A>
static void trn__cuda_matmul_gelu_forward(float *out, float *pre, const float *inp, const float *w, const float *bias,
                                          int N, int C, int OC) {
    int bf16 = trn__cuda_dt((const A *)out) == CUDA_R_16BF;
    if (N <= 0 || OC <= 0) return;
    if (bf16 && trn__cuda_lt_aux_ok(pre, OC)) {
        TRN__CUDA_SITE_GEMM("matmul+gelu fwd", sizeof(A) * ((double)N * C + (double)OC * C + 2.0 * N * OC + OC), N, OC, C, 1);
        trn__cuda_lt_gemm<trn__bf16>(__FILE__, __LINE__, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, (const trn__bf16 *)w, C,
                                     (const trn__bf16 *)inp, C, 0.0f, (trn__bf16 *)out, OC, TRN__LT_GELU,
                                     (const trn__bf16 *)bias, (trn__bf16 *)pre);
        return;
    }
    trn__cuda_matmul_forward<A>(pre, inp, w, bf16 ? bias : NULL, N, C, OC);
    TRN__CUDA_SITE("bias+gelu (unfused)", sizeof(A) * (3.0 * N * OC + OC), 0); /* pre read and written, out written */
    trn__cuda_bias_gelu<A>(TRN__A(out), TRN__A(pre), bf16 ? NULL : TRN__CA(bias), (size_t)N, OC);
}
/* Backward of the GELU into the next matmul (GPT-2's c_proj, whose input is
   gelu(pre)): dpre (N,C) = (dout (N,OC) @ w (OC,C)) * gelu'(pre), WRITTEN
   (the scratch gradient of the unfused path never exists). bf16: ONE
   cuBLASLt GEMM with the DGELU epilogue (aux = pre, beta 0): the fp32
   product times gelu'(pre), rounded once. Otherwise: the GEMM with beta 0
   into dpre, then one in-place kernel multiplies by gelu'(pre). The
   matmul's dw and dbias are matmul_backward's (train.h calls it with
   dinp NULL). */
template <typename A>
static void trn__cuda_matmul_dgelu_backward(float *dpre, const float *dout, const float *w, const float *pre, int N,
                                            int C, int OC) {
    int bf16 = trn__cuda_dt((const A *)dpre) == CUDA_R_16BF, fused = bf16 && trn__cuda_lt_aux_ok(pre, C);
    if (N <= 0 || C <= 0) return;
    TRN__CUDA_SITE_GEMM("matmul+dgelu bwd", sizeof(A) * ((double)N * OC + (double)OC * C + 2.0 * N * C), N, C, OC, 1);
    /* dpre^T (C,N) = w^T (C,OC) dout^T (OC,N) (then the epilogue) */
    if (bf16)
        trn__cuda_lt_gemm<trn__bf16>(__FILE__, __LINE__, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, (const trn__bf16 *)w, C,
                                     (const trn__bf16 *)dout, OC, 0.0f, (trn__bf16 *)dpre, C,
                                     fused ? TRN__LT_DGELU : TRN__LT_NONE, NULL,
                                     fused ? (trn__bf16 *)pre : NULL); /* DGELU only reads aux */
    else
        TRN__CUDA_GEMM(CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, 1.0f, TRN__CA(w), C, 0, TRN__CA(dout), OC, 0, 0.0f,
                       TRN__A(dpre), C, 0, 1);
    if (!fused)
        trn__cuda_map<A>(trn__op_dgelu_mul(), dpre, dpre, pre, NULL, (size_t)N * C);
}
template <typename A>
static void trn__cuda_meanpool_forward(float *out, const float *inp, int B, int T, int C) {
    TRN__CUDA_SITE("meanpool fwd", sizeof(A) * ((double)B * T * C + (double)B * C), (double)B * T * C);
    TRN__CUDA_ELEMENTWISE(trn__k_meanpool_fwd<A>, (size_t)B * C, TRN__A(out), TRN__CA(inp), B, T, C);
}
template <typename A>
static void trn__cuda_meanpool_backward(float *dinp, const float *dout, int B, int T, int C) {
    TRN__CUDA_SITE("meanpool bwd", sizeof(A) * ((double)B * T * C + (double)B * C), (double)B * T * C);
    if (dinp) TRN__CUDA_ELEMENTWISE(trn__k_meanpool_bwd<A>, (size_t)B * T * C, TRN__A(dinp), TRN__CA(dout), B, T, C);
}
static void trn__cuda_sgd_update(float *p, const float *g, float *buf, size_t n, float lr, float momentum,
                                 float dampening, float weight_decay, int nesterov, int first) {
    TRN__CUDA_SITE("sgd", 16.0 * n, 6.0 * n);
    TRN__CUDA_ELEMENTWISE(trn__k_sgd, n, p, g, buf, n, lr, momentum, dampening, weight_decay, nesterov, first);
}

/* --- >>ops3 (host side): the same signatures as train.h's CPU functions -- */
template <typename A>
static void trn__cuda_dropout_forward(float *out, const float *inp, size_t n, float p, uint64_t key) {
    TRN__CUDA_SITE("dropout fwd", 2.0 * sizeof(A) * n, 2.0 * n);
    trn__op_dropout op = {p, p < 1.0f ? 1.0f / (1.0f - p) : 0.0f, key};
    trn__cuda_map<A>(op, out, inp, NULL, NULL, n);
}
template <typename A>
static void trn__cuda_dropout_backward(float *dinp, const float *dout, size_t n, float p, uint64_t key) {
    TRN__CUDA_SITE("dropout bwd", 2.0 * sizeof(A) * n, 2.0 * n);
    trn__op_dropout_bwd op = {p, p < 1.0f ? 1.0f / (1.0f - p) : 0.0f, key};
    if (dinp) trn__cuda_map<A>(op, dinp, dinp, dout, NULL, n);
}
/* (the storage type is T: A names the view's first dimension here) */
template <typename T>
static void trn__cuda_transpose_forward(float *out, const float *inp, int A, int D0, int Bm, int D1, int C) {
    TRN__CUDA_SITE("transpose fwd", 2.0 * sizeof(T) * A * D0 * Bm * D1 * C, 0);
    TRN__CUDA_ELEMENTWISE(trn__k_transpose_fwd<T>, (size_t)A * D0 * Bm * D1 * C, (T *)out, (const T *)inp, A, D0, Bm,
                          D1, C);
}
template <typename T>
static void trn__cuda_transpose_backward(float *dinp, const float *dout, int A, int D0, int Bm, int D1, int C) {
    TRN__CUDA_SITE("transpose bwd", 2.0 * sizeof(T) * A * D0 * Bm * D1 * C, 0);
    if (dinp)
        TRN__CUDA_ELEMENTWISE(trn__k_transpose_bwd<T>, (size_t)A * D0 * Bm * D1 * C, (T *)dinp, (const T *)dout, A, D0,
                              Bm, D1, C);
}
template <typename A>
static void trn__cuda_slice_forward(float *out, const float *inp, int N, int C, int start, int len) {
    TRN__CUDA_SITE("slice fwd", 2.0 * sizeof(A) * N * len, 0);
    TRN__CUDA_ELEMENTWISE(trn__k_slice_fwd<A>, (size_t)N * len, TRN__A(out), TRN__CA(inp), N, C, start, len);
}
template <typename A>
static void trn__cuda_slice_backward(float *dinp, const float *dout, int N, int C, int start, int len) {
    TRN__CUDA_SITE("slice bwd", 2.0 * sizeof(A) * N * len, 0);
    if (dinp) TRN__CUDA_ELEMENTWISE(trn__k_slice_bwd<A>, (size_t)N * len, TRN__A(dinp), TRN__CA(dout), N, C, start, len);
}
template <typename A>
static void trn__cuda_concat_forward(float *out, const float *a, const float *b, int N, int Ca, int Cb) {
    TRN__CUDA_SITE("concat fwd", 2.0 * sizeof(A) * N * (Ca + Cb), 0);
    TRN__CUDA_ELEMENTWISE(trn__k_concat_fwd<A>, (size_t)N * (Ca + Cb), TRN__A(out), TRN__CA(a), TRN__CA(b), N, Ca, Cb);
}
template <typename A>
static void trn__cuda_concat_backward(float *da, float *db, const float *dout, int N, int Ca, int Cb) {
    TRN__CUDA_SITE("concat bwd", 2.0 * sizeof(A) * N * (Ca + Cb), 0);
    if (da || db)
        TRN__CUDA_ELEMENTWISE(trn__k_concat_bwd<A>, (size_t)N * (Ca + Cb), TRN__A(da), TRN__A(db), TRN__CA(dout), N, Ca,
                              Cb);
}
template <typename A>
static void trn__cuda_sum_forward(float *out, const float *inp, int N, size_t C, float scale) {
    TRN__CUDA_SITE("sum fwd", sizeof(A) * ((double)N * C + N), (double)N * C);
    if (N > 0)
        TRN_CUDA_LAUNCH(trn__k_sum_fwd<A>, dim3((unsigned)N), dim3(256), 0, trn__cu.stream, TRN__A(out), TRN__CA(inp), C,
                        scale);
}
template <typename A>
static void trn__cuda_sum_backward(float *dinp, const float *dout, int N, size_t C, float scale) {
    TRN__CUDA_SITE("sum bwd", sizeof(A) * ((double)N * C + N), 0);
    if (dinp) TRN__CUDA_ELEMENTWISE(trn__k_sum_bwd<A>, (size_t)N * C, TRN__A(dinp), TRN__CA(dout), N, C, scale);
}
/* a row-major trn_sgemm (ta, tb, M, N, K, ...) over `batch` matrices at
   strides sa, sb, sc, as one column-major cuBLAS call: operands swapped */
template <typename T>
static void trn__cuda_rowmajor_gemm(int ta, int tb, int M, int N, int K, const T *A, int lda, long long sa,
                                    const T *B, int ldb, long long sb, float beta, T *C, int ldc, long long sc,
                                    int batch) {
    TRN__CUDA_GEMM(tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, 1.0f, B, ldb, sb, A, lda,
                   sa, beta, C, ldc, sc, batch);
}
/* bmm: everything A (bf16: bf16 in and out, fp32 accumulation). Batched
   products (bmm, and the attention GEMMs below) stay on
   cublasGemmStridedBatchedEx in bf16 too: they have no epilogue to fuse,
   and the CUDA-on-CPU harness emulates cuBLASLt without batched layouts. */
template <typename A>
static void trn__cuda_bmm_forward(float *out_, const float *a_, const float *b_, int Bt, int M, int N, int K, int ta,
                                  int tb) {
    A *out = (A *)out_;
    const A *a = (const A *)a_, *b = (const A *)b_;
    long long sa = (long long)M * K, sb = (long long)K * N, sc = (long long)M * N;
    if (Bt <= 0) return;
    TRN__CUDA_SITE_GEMM("bmm fwd", sizeof(A) * (double)Bt * ((double)M * K + (double)K * N + (double)M * N), M, N, K, Bt);
    trn__cuda_rowmajor_gemm(ta, tb, M, N, K, a, ta ? M : K, sa, b, tb ? K : N, sb, 0.0f, out, N, sc, Bt);
}
template <typename A>
static void trn__cuda_bmm_backward(float *da_, float *db_, const float *dout_, const float *a_, const float *b_, int Bt,
                                   int M, int N, int K, int ta, int tb) {
    A *da = (A *)da_, *db = (A *)db_;
    const A *dout = (const A *)dout_, *a = (const A *)a_, *b = (const A *)b_;
    long long sa = (long long)M * K, sb = (long long)K * N, sc = (long long)M * N;
    int lda = ta ? M : K, ldb = tb ? K : N;
    if (Bt <= 0) return; /* as train.h's trn_bmm_backward, one product per case */
    TRN__CUDA_SITE_GEMM("bmm bwd", sizeof(A) * (double)Bt * ((da ? 3.0 * M * K : 0) + (db ? 3.0 * K * N : 0) + ((da != NULL) + (db != NULL)) * (double)M * N), M, N, K, Bt * ((da != NULL) + (db != NULL)));
    if (da && !ta) trn__cuda_rowmajor_gemm(0, !tb, M, K, N, dout, N, sc, b, ldb, sb, 1.0f, da, K, sa, Bt);
    if (da && ta) trn__cuda_rowmajor_gemm(tb, 1, K, M, N, b, ldb, sb, dout, N, sc, 1.0f, da, M, sa, Bt);
    if (db && !tb) trn__cuda_rowmajor_gemm(!ta, 0, K, N, M, a, lda, sa, dout, N, sc, 1.0f, db, N, sb, Bt);
    if (db && tb) trn__cuda_rowmajor_gemm(1, ta, N, K, M, dout, N, sc, a, lda, sa, 1.0f, db, K, sb, Bt);
}
/* ------------------------------------------------------------------------
   >>xent-ex: cross-entropy with an ignore index and label smoothing
   (trn_cross_entropy_ex), kernels and launchers together. The plain
   references: train.h's trn_cross_entropy_ex_forward / _backward.
   logits, dlogits (N,Vp) in A (float or bf16): V real columns; targets
   (N), a target < 0 marks a row to ignore; losses, lse (N) fp32. The
   smoothed target is q = (1-s) onehot(t) + s/V, so
     loss = lse - (1-s) x[t] - (s/V) sum_v x[v]
     dlogits[v] += dloss * (exp(x[v] - lse) - q[v])
   One block per row, the row read 16 bytes at a time (trn__row_read16,
   trn__row_update16: head, packs, tail). Forward: each thread's online
   (max, sum exp) pair as in trn__k_xent_fwd, plus its plain sum of the
   row in double; warps, then the block, merge both in a fixed tree.
   Ignored rows: loss and lse 0, no gradient; padding never touched.
   ------------------------------------------------------------------------ */
template <typename A>
static __global__ void trn__k_xent_ex_fwd(float *losses, float *lse, const A *logits, const int *targets, int V, int Vp,
                                          float smoothing) {
    __shared__ float wm[32], wsum[32];
    __shared__ double wl[32];
    int n = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32, t = targets[n];
    const A *l = logits + (size_t)n * Vp;
    float m = -INFINITY, s = 0.0f;
    double tot = 0.0;
    if (t < 0) { /* ignored row (the whole block takes this branch) */
        if (threadIdx.x == 0) { losses[n] = 0.0f; lse[n] = 0.0f; }
        return;
    }
    trn__row_read16(l, V, [&](int, float x) {
        tot += x;
        trn__ms_add(&m, &s, x);
    });
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        trn__ms_merge(&m, &s, m2, s2);
    }
    tot = trn__warp_sum_d(tot);
    if (lane == 0) { wm[warp] = m; wsum[warp] = s; wl[warp] = tot; }
    __syncthreads();
    if (warp == 0) {
        m = lane < nw ? wm[lane] : -INFINITY;
        s = lane < nw ? wsum[lane] : 0.0f;
        tot = lane < nw ? wl[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1) {
            float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
            trn__ms_merge(&m, &s, m2, s2);
        }
        tot = trn__warp_sum_d(tot);
        if (lane == 0) {
            float z = m + logf(s);
            lse[n] = z;
            losses[n] = (float)((double)z - (1.0 - smoothing) * trn__ld(l[t]) - smoothing * tot / V);
        }
    }
}
template <typename A>
static __global__ void trn__k_xent_ex_bwd(A *dlogits, const A *logits, const float *lse, const int *targets,
                                          float dloss, int V, int Vp, float smoothing) {
    const int n = blockIdx.x, t = targets[n];
    const float z = lse[n], u = smoothing / (float)V;
    if (t < 0) return;
    trn__row_update16(dlogits + (size_t)n * Vp, logits + (size_t)n * Vp, V, [&](int v, float d, float x) {
        float p = expf(x - z) - u;
        return d + dloss * (v == t ? p - (1.0f - smoothing) : p);
    });
}
template <typename A>
static void trn__cuda_crossentropy_ex_forward(float *losses, float *lse, const float *logits, const int *targets,
                                              int N, int V, int Vp, float smoothing) {
    TRN__CUDA_SITE("cross-entropy (ex) fwd", sizeof(A) * (double)N * Vp + 12.0 * N, 3.0 * N * V);
    if (N > 0)
        TRN_CUDA_LAUNCH(trn__k_xent_ex_fwd<A>, dim3((unsigned)N), dim3(256), 0, trn__cu.stream, losses, lse,
                        TRN__CA(logits), targets, V, Vp, smoothing);
}
template <typename A>
static void trn__cuda_crossentropy_ex_backward(float *dlogits, const float *logits, const float *lse,
                                               const int *targets, float dloss, int N, int V, int Vp, float smoothing) {
    TRN__CUDA_SITE("cross-entropy (ex) bwd", 3.0 * sizeof(A) * N * Vp + 8.0 * N, 3.0 * N * V);
    if (dlogits && N > 0)
        TRN_CUDA_LAUNCH(trn__k_xent_ex_bwd<A>, dim3((unsigned)N), dim3(256), 0, trn__cu.stream, TRN__A(dlogits),
                        TRN__CA(logits), lse, targets, dloss, V, Vp, smoothing);
}
/* <<xent-ex */

template <typename A>
static void trn__cuda_bce_logits_forward(float *losses, const float *x, const float *y, size_t n) {
    TRN__CUDA_SITE("bce fwd", 2.0 * sizeof(A) * n + 4.0 * n, 5.0 * n);
    trn__cuda_map<A, float>(trn__op_bce(), losses, x, y, NULL, n);
}
template <typename A>
static void trn__cuda_bce_logits_backward(float *dx, const float *x, const float *y, float dloss, size_t n) {
    TRN__CUDA_SITE("bce bwd", 3.0 * sizeof(A) * n, 5.0 * n);
    trn__op_bce_bwd op = {dloss};
    if (dx) trn__cuda_map<A>(op, dx, dx, x, y, n);
}
template <typename A>
static void trn__cuda_l1_forward(float *losses, const float *pred, const float *target, size_t n) {
    TRN__CUDA_SITE("l1 fwd", 2.0 * sizeof(A) * n + 4.0 * n, 2.0 * n);
    trn__cuda_map<A, float>(trn__op_l1(), losses, pred, target, NULL, n);
}
template <typename A>
static void trn__cuda_l1_backward(float *dpred, const float *pred, const float *target, float dloss, size_t n) {
    TRN__CUDA_SITE("l1 bwd", 3.0 * sizeof(A) * n, 2.0 * n);
    trn__op_l1_bwd op = {dloss};
    if (dpred) trn__cuda_map<A>(op, dpred, dpred, pred, target, n);
}
template <typename A>
static void trn__cuda_huber_forward(float *losses, const float *pred, const float *target, float delta, size_t n) {
    TRN__CUDA_SITE("huber fwd", 2.0 * sizeof(A) * n + 4.0 * n, 4.0 * n);
    trn__op_huber op = {delta};
    trn__cuda_map<A, float>(op, losses, pred, target, NULL, n);
}
template <typename A>
static void trn__cuda_huber_backward(float *dpred, const float *pred, const float *target, float delta, float dloss,
                                     size_t n) {
    TRN__CUDA_SITE("huber bwd", 3.0 * sizeof(A) * n, 4.0 * n);
    trn__op_huber_bwd op = {delta, dloss};
    if (dpred) trn__cuda_map<A>(op, dpred, dpred, pred, target, n);
}

/* attention over the cache (train.h's trn_attention_kv_forward). Per batch
   row b and per r < grp = NH/NKV, the heads h = g*grp + r (g < NKV) read
   kv head g: their Q blocks sit grp*hs apart, their K/V blocks hs apart,
   so each is one strided-batched GEMM over the NKV groups. bf16: q, k, v,
   out, att and both caches are bf16, scores and softmax in fp32. */
template <typename A>
static void trn__cuda_attention_kv_forward(float *out_, float *att_, const float *q_, int q_stride, const float *k_,
                                           const float *v_, int kv_stride, float *kcache_, float *vcache_, int B,
                                           int T, int pos, int maxT, int NH, int NKV, int hs) {
    A *out = (A *)out_, *att = (A *)att_, *kcache = (A *)kcache_, *vcache = (A *)vcache_;
    const A *q = (const A *)q_, *k = (const A *)k_, *v = (const A *)v_;
    int Ckv = NKV * hs, C = NH * hs, P = pos + T, grp = NH / NKV;
    float scale = 1.0f / sqrtf((float)hs);
    long long TP = (long long)T * P;
    if (B <= 0 || T <= 0) return;
    TRN__CUDA_SITE_GEMM("attention over the KV cache", sizeof(A) * ((double)B * T * (2.0 * C + 2.0 * Ckv) + 2.0 * B * (pos + T) * Ckv + 2.0 * B * NH * T * (pos + T)), T, pos + T, hs, 2 * B * NH);
    TRN__CUDA_ELEMENTWISE(trn__k_kv_append<A>, (size_t)B * T * Ckv, kcache, vcache, k, v, kv_stride, T, pos, maxT, Ckv, B);
    for (int b = 0; b < B; b++)
        for (int r = 0; r < grp; r++) {
            const A *qb = q + (size_t)b * T * q_stride + (size_t)r * hs;
            const A *kb = kcache + (size_t)b * maxT * Ckv;
            A *Sb = att + ((size_t)b * NH + r) * TP;
            /* S (T,P) = Q K^T * scale  (row-major: ta = 0, tb = 1) */
            TRN__CUDA_GEMM(CUBLAS_OP_T, CUBLAS_OP_N, P, T, hs, scale, kb, Ckv, (long long)hs, qb, q_stride,
                           (long long)grp * hs, 0.0f, Sb, P, (long long)grp * TP, NKV);
        }
    TRN_CUDA_LAUNCH(trn__k_softmax_kv<A>, dim3((unsigned)((B * NH * T + 7) / 8)), dim3(256), 0, trn__cu.stream, att,
                    B * NH * T, T, P, pos);
    for (int b = 0; b < B; b++)
        for (int r = 0; r < grp; r++) {
            const A *vb = vcache + (size_t)b * maxT * Ckv;
            A *Sb = att + ((size_t)b * NH + r) * TP, *ob = out + (size_t)b * T * C + (size_t)r * hs;
            /* O (T,hs) = A V  (row-major: ta = 0, tb = 0) */
            TRN__CUDA_GEMM(CUBLAS_OP_N, CUBLAS_OP_N, hs, T, P, 1.0f, vb, Ckv, (long long)hs, Sb, P, (long long)grp * TP,
                           0.0f, ob, C, (long long)grp * hs, NKV);
        }
}

/* sum of squares in two passes: one double per block (at most
   TRN__CUDA_PARTIALS), then those added in order by trn__k_norm_final. The
   total stays on the device (grad_norm_clip) or comes back (sum_squares). */
static void trn__cuda_sumsq_device(float *stat, double *total, const float *x, size_t n, float max_norm) {
    int vec = trn__al16(x);
    size_t g = (n / (vec ? 8 : 1) + TRN__CUDA_BLOCK - 1) / TRN__CUDA_BLOCK;
    if (g < 1) g = 1;
    if (g > TRN__CUDA_PARTIALS) g = TRN__CUDA_PARTIALS;
    TRN__CUDA_SITE("grad norm (sum of squares)", 4.0 * n, 2.0 * n);
    if (n > 0)
        TRN_CUDA_LAUNCH(trn__k_sumsq, dim3((unsigned)g), dim3(TRN__CUDA_BLOCK), 0, trn__cu.stream, trn__cu.partials, x, n,
                        vec);
    TRN_CUDA_LAUNCH(trn__k_norm_final, dim3(1), dim3(32), 0, trn__cu.stream, stat, total,
                    (const double *)trn__cu.partials, n > 0 ? (int)g : 0, max_norm);
}
static double trn__cuda_sum_squares(const float *x, size_t n) {
    double total = 0.0;
    if (n == 0) return 0.0;
    trn__cuda_sumsq_device(NULL, trn__cu.partials + TRN__CUDA_PARTIALS, x, n, 0.0f);
    trn__cuda_download(&total, trn__cu.partials + TRN__CUDA_PARTIALS, sizeof total);
    return total;
}
static void trn__cuda_grad_norm_clip(float *stat, const float *g, size_t n, float max_norm) {
    trn__cuda_sumsq_device(stat, NULL, g, n, max_norm);
}
static void trn__cuda_mean(float *out, const float *x, size_t n) {
    TRN__CUDA_SITE("loss mean", 4.0 * n + 4, n);
    TRN_CUDA_LAUNCH(trn__k_mean, dim3(1), dim3(1024), 0, trn__cu.stream, out, x, n);
}

/* attention, materialized: the reference (trn_attention runs the fused
   kernels of >>cuda-flash). Every (b,h) pair is one small GEMM. Their
   operands sit at regular strides: with ld = (NH+2*NKV)*hs the row stride
   of qkv, query head h of batch row b starts at b*T*ld + h*hs, kv head g at
   b*T*ld + (NH+g)*hs (keys) and b*T*ld + (NH+NKV+g)*hs (values), out at
   b*T*C + h*hs, and the (T,T) block of att at (b*NH + h)*T*T. Query head
   h = g*R + r (R = NH/NKV) reads kv head g, so for one r the query heads
   r, R+r, 2R+r, ... and kv heads 0, 1, 2, ... step regularly together: a
   strided-batched call covers all of them for one b, or all b for one kv
   head: we loop over the smaller of B and NKV and batch the larger, and
   over r. Shapes as in train.h's CPU version:
     S = Q K^T * scale;  P = softmax(S, causal mask);  O = P V            */
template <typename E> struct trn__cuda_bh { const E *p; int ld; long long sb, sh; };

template <typename E>
static void trn__cuda_gemm_bh(const char *file, int line, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                              int k, float alpha, trn__cuda_bh<E> A, trn__cuda_bh<E> Bm, float beta, E *C, int ldc,
                              long long csb, long long csh, int B, int NH) {
    int i;
    if (B >= NH)
        for (i = 0; i < NH; i++)
            trn__cuda_gemm(file, line, ta, tb, m, n, k, alpha, A.p + i * A.sh, A.ld, A.sb, Bm.p + i * Bm.sh, Bm.ld,
                           Bm.sb, beta, C + i * csh, ldc, csb, B);
    else
        for (i = 0; i < B; i++)
            trn__cuda_gemm(file, line, ta, tb, m, n, k, alpha, A.p + i * A.sb, A.ld, A.sh, Bm.p + i * Bm.sb, Bm.ld,
                           Bm.sh, beta, C + i * csb, ldc, csh, NH);
}
#define TRN__CUDA_GEMM_BH(...) trn__cuda_gemm_bh(__FILE__, __LINE__, __VA_ARGS__)

/* the operands of query heads r, R+r, 2R+r, ...: (b, kv head g) -> pointer */
template <typename E> struct trn__cuda_heads { trn__cuda_bh<E> q, k, v, P, o; };
template <typename E>
static trn__cuda_heads<E> trn__cuda_heads_of(const E *qkv, const E *att, const E *out, int T, int NH, int NKV,
                                             int hs, int r) {
    int R = NH / NKV, ld = (NH + 2 * NKV) * hs, C = NH * hs;
    long long TT = (long long)T * T, sq = (long long)T * ld;
    trn__cuda_heads<E> x = {{qkv + (size_t)r * hs, ld, sq, (long long)R * hs},
                         {qkv + (size_t)NH * hs, ld, sq, hs},
                         {qkv + (size_t)(NH + NKV) * hs, ld, sq, hs},
                         {att + r * TT, T, NH * TT, R * TT},
                         {out + (size_t)r * hs, C, (long long)T * C, (long long)R * hs}};
    return x;
}

/* bf16: qkv, out, att, dout, dqkv and scratch are bf16; the GEMMs
   accumulate in fp32, the softmax kernels compute in fp32 */
template <typename A>
static void trn__cuda_attention_forward(float *out_, float *att_, const float *qkv_, int B, int T, int NH, int NKV,
                                        int hs, int causal) {
    A *out = (A *)out_, *att = (A *)att_;
    const A *qkv = (const A *)qkv_;
    float scale = 1.0f / sqrtf((float)hs);
    int r;
    if (B <= 0 || T <= 0) return;
    TRN__CUDA_SITE_GEMM("attention fwd (materialized)", sizeof(A) * ((double)B * T * (2 * NH + 2 * NKV) * hs + 2.0 * B * NH * T * T), T, T, hs, 2.0 * B * NH);
    for (r = 0; r < NH / NKV; r++) {
        trn__cuda_heads<A> x = trn__cuda_heads_of(qkv, att, out, T, NH, NKV, hs, r);
        /* S (T,T) = Q K^T:  S^T = K Q^T, with K-as-(hs,T) transposed and Q-as-(hs,T) */
        TRN__CUDA_GEMM_BH(CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, scale, x.k, x.q, 0.0f, (A *)x.P.p, T, x.P.sb,
                          x.P.sh, B, NKV);
    }
    TRN_CUDA_LAUNCH(trn__k_softmax_fwd<A>, dim3((unsigned)((B * NH * T + 7) / 8)), dim3(256), 0, trn__cu.stream, att,
                    B * NH * T, T, causal);
    for (r = 0; r < NH / NKV; r++) {
        trn__cuda_heads<A> x = trn__cuda_heads_of(qkv, att, out, T, NH, NKV, hs, r);
        /* O (T,hs) = P V:  O^T = V^T P^T, with V-as-(hs,T) and P-as-(T,T) = P^T */
        TRN__CUDA_GEMM_BH(CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, x.v, x.P, 0.0f, (A *)x.o.p, x.o.ld, x.o.sb,
                          x.o.sh, B, NKV);
    }
}

template <typename A>
static void trn__cuda_attention_backward(float *dqkv_, float *scratch_, const float *dout_, const float *qkv_,
                                         const float *att_, int B, int T, int NH, int NKV, int hs, int causal) {
    A *dqkv = (A *)dqkv_, *scratch = (A *)scratch_;
    const A *dout = (const A *)dout_, *qkv = (const A *)qkv_, *att = (const A *)att_;
    float scale = 1.0f / sqrtf((float)hs);
    int r;
    (void)causal; /* masked entries have P = 0, so dS = 0 there */
    if (!dqkv || B <= 0 || T <= 0) return;
    TRN__CUDA_SITE_GEMM("attention bwd (materialized)", sizeof(A) * ((double)B * T * (2 * NH + 4 * NKV) * hs + 4.0 * B * NH * T * T), T, T, hs, 4.0 * B * NH);
    for (r = 0; r < NH / NKV; r++) {
        /* the same strides serve dqkv (as qkv), scratch (as att) and dout (as out) */
        trn__cuda_heads<A> x = trn__cuda_heads_of(qkv, att, dout, T, NH, NKV, hs, r);
        trn__cuda_heads<A> d = trn__cuda_heads_of(dqkv, scratch, dout, T, NH, NKV, hs, r);
        /* dP (T,T) = dO V^T:  dP^T = V dO^T  (into scratch) */
        TRN__CUDA_GEMM_BH(CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f, x.v, x.o, 0.0f, (A *)d.P.p, T, d.P.sb, d.P.sh,
                          B, NKV);
        /* dV (T,hs) += P^T dO:  dV^T = dO^T P (the R query heads of a kv head add up in turn) */
        TRN__CUDA_GEMM_BH(CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, x.o, x.P, 1.0f, (A *)d.v.p, d.v.ld, d.v.sb,
                          d.v.sh, B, NKV);
    }
    /* dS = P * (dP - rowsum(dP * P)), in place */
    TRN_CUDA_LAUNCH(trn__k_softmax_bwd<A>, dim3((unsigned)((B * NH * T + 7) / 8)), dim3(256), 0, trn__cu.stream,
                    scratch, att, B * NH * T, T);
    for (r = 0; r < NH / NKV; r++) {
        trn__cuda_heads<A> x = trn__cuda_heads_of(qkv, att, dout, T, NH, NKV, hs, r);
        trn__cuda_heads<A> d = trn__cuda_heads_of(dqkv, scratch, dout, T, NH, NKV, hs, r);
        /* dQ (T,hs) += scale dS K:  dQ^T = K^T dS^T, with K-as-(hs,T) and dS-as-(T,T) = dS^T */
        TRN__CUDA_GEMM_BH(CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, scale, x.k, d.P, 1.0f, (A *)d.q.p, d.q.ld, d.q.sb,
                          d.q.sh, B, NKV);
        /* dK (T,hs) += scale dS^T Q:  dK^T = Q^T dS */
        TRN__CUDA_GEMM_BH(CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, scale, x.q, d.P, 1.0f, (A *)d.k.p, d.k.ld, d.k.sb,
                          d.k.sh, B, NKV);
    }
}

/* >>cuda-flash: fused attention. The tile t (rows per block, <= 32) is the
   largest power of two whose shared memory fits in 48 KiB. */
static int trn__cuda_flash_tile(int hs, int backward) {
    int t = 32;
    for (;;) {
        size_t floats = backward ? (size_t)6 * t * (hs + 1) + 2 * (size_t)t * t + 2 * t
                                 : (size_t)4 * t * (hs + 1) + (size_t)t * t;
        if (floats * sizeof(float) <= 48 * 1024) return t;
        if (t == 1) trn_fatal("flash attention (cuda): head size %d is too large for shared memory", hs);
        t /= 2;
    }
}

template <typename A>
static void trn__cuda_flash_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int NH,
                                              int NKV, int hs, int causal) {
    int t = trn__cuda_flash_tile(hs, 0);
    size_t shmem = sizeof(float) * ((size_t)4 * t * (hs + 1) + (size_t)t * t);
    if (B <= 0 || T <= 0) return;
    TRN__CUDA_SITE_GEMM("flash attn fwd", sizeof(A) * (double)B * T * (2 * NH + 2 * NKV) * hs + 4.0 * B * NH * T, T, T, hs, (causal ? 1.0 : 2.0) * B * NH);
    TRN_CUDA_LAUNCH(trn__k_flash_fwd<A>, dim3((unsigned)(B * NH), (unsigned)((T + t - 1) / t)),
                    dim3(TRN__FLASH_THREADS), shmem, trn__cu.stream, TRN__A(out), lse, TRN__CA(qkv), T, NH, NKV, hs,
                    causal, t, 1.0f / sqrtf((float)hs));
}

template <typename A>
static void trn__cuda_flash_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                                               const float *lse, int B, int T, int NH, int NKV, int hs,
                                               int causal) {
    int t = trn__cuda_flash_tile(hs, 1);
    size_t shmem = sizeof(float) * ((size_t)6 * t * (hs + 1) + 2 * (size_t)t * t + 2 * t);
    float scale = 1.0f / sqrtf((float)hs);
    if (!dqkv || B <= 0 || T <= 0) return;
    TRN__CUDA_SITE_GEMM("flash attn bwd dkdv", sizeof(A) * (double)B * T * (3 * NH + 4 * NKV) * hs + 4.0 * B * NH * T, T, T, hs, (causal ? 2.0 : 4.0) * B * NH);
    TRN_CUDA_LAUNCH(trn__k_flash_bwd_kv<A>, dim3((unsigned)(B * NKV), (unsigned)((T + t - 1) / t)),
                    dim3(TRN__FLASH_THREADS), shmem, trn__cu.stream, TRN__A(dqkv), TRN__CA(dout), TRN__CA(qkv),
                    TRN__CA(out), lse, T, NH, NKV, hs, causal, t, scale);
    TRN__CUDA_SITE_GEMM("flash attn bwd dq", sizeof(A) * (double)B * T * (4 * NH + 2 * NKV) * hs + 4.0 * B * NH * T, T, T, hs, (causal ? 0.5 : 1.0) * B * NH);
    TRN_CUDA_LAUNCH(trn__k_flash_bwd_q<A>, dim3((unsigned)(B * NH), (unsigned)((T + t - 1) / t)),
                    dim3(TRN__FLASH_THREADS), shmem, trn__cu.stream, TRN__A(dqkv), TRN__CA(dout), TRN__CA(qkv),
                    TRN__CA(out), lse, T, NH, NKV, hs, causal, t, scale);
}

/* bf16 fused attention (TRN_CUDA_BF16): qkv, out, dout, dqkv are bf16,
   lse fp32. Head sizes that are multiples of 16 up to 128 run on the
   tensor-core kernels (one instantiation each); any other head size runs
   the fp32-FMA kernels above on bf16 storage (correct, not fast). */
template <int HS> static size_t trn__cuda_flash_bf16_shmem(int kernel) {
    enum { R = trn__fa<HS>::R, N = trn__fa<HS>::N, LD = trn__fa<HS>::LD, LP = trn__fa<HS>::LP,
           LS = trn__fa<HS>::LS, LN = trn__fa<HS>::LN };
    if (kernel == 0) return 2 * ((size_t)R * LD + 2 * (size_t)N * LD + (size_t)R * LP) + 4 * (size_t)R * LS;
    if (kernel == 1) return 2 * (2 * (size_t)R * LD + 2 * (size_t)N * LD) + 4 * (2 * (size_t)R * LN + 2 * N);
    return 2 * (2 * (size_t)R * LD + 2 * (size_t)N * LD) + 4 * (2 * (size_t)R * LN + 2 * R);
}
template <int HS>
static void trn__cuda_flash_fwd_bf16(float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV,
                                     int causal) {
    enum { R = trn__fa<HS>::R };
    TRN__CUDA_SITE_GEMM("flash attn fwd", 2.0 * B * T * (2 * NH + 2 * NKV) * HS + 4.0 * B * NH * T, T, T, HS, (causal ? 1.0 : 2.0) * B * NH);
    TRN_CUDA_LAUNCH(trn__k_flash_fwd_bf16<HS>, dim3((unsigned)(B * NH), (unsigned)((T + R - 1) / R)),
                    dim3(32 * trn__fa<HS>::W), trn__cuda_flash_bf16_shmem<HS>(0), trn__cu.stream, (trn__bf16 *)out,
                    lse, (const trn__bf16 *)qkv, T, NH, NKV, causal, 1.0f / sqrtf((float)HS));
}
template <int HS>
static void trn__cuda_flash_bwd_bf16(float *dqkv, const float *dout, const float *qkv, const float *out,
                                     const float *lse, int B, int T, int NH, int NKV, int causal) {
    enum { R = trn__fa<HS>::R };
    float scale = 1.0f / sqrtf((float)HS);
    TRN__CUDA_SITE_GEMM("flash attn bwd dkdv", 2.0 * B * T * (3 * NH + 4 * NKV) * HS + 4.0 * B * NH * T, T, T, HS, (causal ? 2.0 : 4.0) * B * NH);
    TRN_CUDA_LAUNCH(trn__k_flash_bwd_kv_bf16<HS>, dim3((unsigned)(B * NKV), (unsigned)((T + R - 1) / R)),
                    dim3(32 * trn__fa<HS>::W), trn__cuda_flash_bf16_shmem<HS>(1), trn__cu.stream, (trn__bf16 *)dqkv,
                    (const trn__bf16 *)dout, (const trn__bf16 *)qkv, (const trn__bf16 *)out, lse, T, NH, NKV, causal,
                    scale);
    TRN__CUDA_SITE_GEMM("flash attn bwd dq", 2.0 * B * T * (4 * NH + 2 * NKV) * HS + 4.0 * B * NH * T, T, T, HS, (causal ? 0.5 : 1.0) * B * NH);
    TRN_CUDA_LAUNCH(trn__k_flash_bwd_q_bf16<HS>, dim3((unsigned)(B * NH), (unsigned)((T + R - 1) / R)),
                    dim3(32 * trn__fa<HS>::W), trn__cuda_flash_bf16_shmem<HS>(2), trn__cu.stream, (trn__bf16 *)dqkv,
                    (const trn__bf16 *)dout, (const trn__bf16 *)qkv, (const trn__bf16 *)out, lse, T, NH, NKV, causal,
                    scale);
}
/* The head sizes with tensor-core kernels, one instantiation of each kernel
   per size. A CPU-harness test may list fewer before including this file
   (e.g. #define TRN_CUDA_FLASH_HS(X) X(48)): those kernels are most of the
   harness's compile time. A multiple of 16 up to 128 left out of the list
   is then refused by trn__cuda_flash_hs_built, never run on other kernels,
   so a shortened list cannot change what a test checks. */
#ifndef TRN_CUDA_FLASH_HS
#define TRN_CUDA_FLASH_HS(X) X(16) X(32) X(48) X(64) X(80) X(96) X(112) X(128)
#endif
#define TRN__FLASH_BF16_HS TRN_CUDA_FLASH_HS
static void trn__cuda_flash_hs_built(int hs) {
#define TRN__HS_BUILT(HS) if (hs == HS) return;
    TRN__FLASH_BF16_HS(TRN__HS_BUILT)
#undef TRN__HS_BUILT
    if (hs >= 16 && hs <= 128 && hs % 16 == 0)
        trn_fatal("bf16 attention: head size %d is not in this build's TRN_CUDA_FLASH_HS list", hs);
}
static void trn__cuda_flash_attention_forward_bf16(float *out, float *lse, const float *qkv, int B, int T, int NH,
                                                   int NKV, int hs, int causal) {
    if (B <= 0 || T <= 0) return;
    trn__cuda_flash_hs_built(hs);
    if (trn__cuda_fa2_ok(hs, out, qkv, qkv, qkv)) { /* >>cuda-fa2 */
#define TRN__FA2_FWD(HS) \
    if (hs == HS) return trn__cuda_fa2_forward<HS>(out, lse, qkv, B, T, NH, NKV, causal);
        TRN__FLASH_BF16_HS(TRN__FA2_FWD)
#undef TRN__FA2_FWD
    }
#define TRN__FLASH_FWD(HS) \
    if (hs == HS) return trn__cuda_flash_fwd_bf16<HS>(out, lse, qkv, B, T, NH, NKV, causal);
    TRN__FLASH_BF16_HS(TRN__FLASH_FWD)
#undef TRN__FLASH_FWD
    trn__cuda_flash_attention_forward<trn__bf16>(out, lse, qkv, B, T, NH, NKV, hs, causal);
}
/* write: dqkv is a fresh gradient (the backend table's
   flash_attention_backward_ex): FA2 stores it; the other kernels add, so
   it is zeroed for them first */
static void trn__cuda_flash_attention_backward_ex_bf16(float *dqkv, const float *dout, const float *qkv,
                                                       const float *out, const float *lse, int B, int T, int NH,
                                                       int NKV, int hs, int causal, int write) {
    if (!dqkv || B <= 0 || T <= 0) return;
    trn__cuda_flash_hs_built(hs);
    if (trn__cuda_fa2_ok(hs, dqkv, dout, qkv, out)) { /* >>cuda-fa2 */
#define TRN__FA2_BWD(HS) \
    if (hs == HS) return trn__cuda_fa2_backward<HS>(dqkv, dout, qkv, out, lse, B, T, NH, NKV, causal, write);
        TRN__FLASH_BF16_HS(TRN__FA2_BWD)
#undef TRN__FA2_BWD
    }
    if (write) trn__cuda_zero(dqkv, (size_t)B * T * (NH + 2 * NKV) * hs * sizeof(trn__bf16));
#define TRN__FLASH_BWD(HS) \
    if (hs == HS) return trn__cuda_flash_bwd_bf16<HS>(dqkv, dout, qkv, out, lse, B, T, NH, NKV, causal);
    TRN__FLASH_BF16_HS(TRN__FLASH_BWD)
#undef TRN__FLASH_BWD
    trn__cuda_flash_attention_backward<trn__bf16>(dqkv, dout, qkv, out, lse, B, T, NH, NKV, hs, causal);
}
static void trn__cuda_flash_attention_backward_bf16(float *dqkv, const float *dout, const float *qkv, const float *out,
                                                    const float *lse, int B, int T, int NH, int NKV, int hs,
                                                    int causal) {
    trn__cuda_flash_attention_backward_ex_bf16(dqkv, dout, qkv, out, lse, B, T, NH, NKV, hs, causal, 0);
}

/* ========================================================================
   >>cuda-init
   ======================================================================== */
static void trn__cuda_release(void) {
    trn__cuda_unpin(&trn__cu.stage, &trn__cu.stage_cap);
    trn__cuda_unpin(&trn__cu.rb, &trn__cu.rb_cap);
    free(trn__cu.pend);
    trn__cu.pend = NULL;
    trn__cu.n_pend = trn__cu.cap_pend = 0;
    trn__cu.stage_used = trn__cu.rb_used = 0;
    if (trn__cu.seg_dev) trn__cuda_free(trn__cu.seg_dev);
    free(trn__cu.seg_host);
    trn__cu.seg_dev = trn__cu.seg_host = NULL;
    trn__cu.n_seg = trn__cu.cap_seg = 0;
    if (trn__cu.tmp) { trn__cuda_free(trn__cu.tmp); trn__cu.tmp = NULL; trn__cu.tmp_bytes = 0; }
    if (trn__cu.counts) { trn__cuda_free(trn__cu.counts); trn__cu.counts = NULL; trn__cu.n_counts = 0; }
    if (trn__cu.partials) { trn__cuda_free(trn__cu.partials); trn__cu.partials = NULL; }
    if (trn__cu.cublas) { TRN_CUBLAS_CHECK(cublasDestroy(trn__cu.cublas)); trn__cu.cublas = NULL; }
    trn__cuda_lt_release(); /* the plans, before their handle */
    if (trn__cu.cublaslt) { TRN_CUBLAS_CHECK(cublasLtDestroy(trn__cu.cublaslt)); trn__cu.cublaslt = NULL; }
    if (trn__cu.workspace) { trn__cuda_free(trn__cu.workspace); trn__cu.workspace = NULL; }
    if (trn__cu.stream) { TRN_CUDA_CHECK(cudaStreamDestroy(trn__cu.stream)); trn__cu.stream = NULL; }
    trn_ledger_add(TRN_DEVICE, TRN_KIND_RUNTIME, -(long long)(trn__cu.context_bytes + trn__cu.cublas_bytes));
    trn__cu.context_bytes = trn__cu.cublas_bytes = 0;
}

TRNDEF trn_result trn_cuda_init(int device) {
    int count = 0, drv = 0, rt = 0, *probe = NULL;
    size_t fr0 = 0, fr1 = 0, tot = 0;
    cudaError_t e;
    cudaDeviceProp prop;
    if (trn__cu.ready) {
        if (device == trn__cu.device) return TRN_OK;
        return trn_fail(TRN_ERR_INVALID, "trn_cuda_init(%d): device %d is already in use (one device per process)",
                        device, trn__cu.device);
    }
    /* (these two cannot fail in a way that matters: drv stays 0 without a driver) */
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    e = cudaGetDeviceCount(&count);
    cudaGetLastError();
    if (drv == 0 && e != cudaSuccess) /* no libcuda.so: a machine without a GPU driver */
        return trn_fail(TRN_ERR_BACKEND, "CUDA: no CUDA device found: no NVIDIA driver is loaded (%s)",
                        cudaGetErrorString(e));
    /* an older driver of the same major version runs this runtime (CUDA's
       minor version compatibility); an older major version cannot */
    if (e == cudaErrorInsufficientDriver || drv / 1000 < rt / 1000)
        return trn_fail(TRN_ERR_BACKEND, "CUDA: the NVIDIA driver supports CUDA %d.%d but this program was built with CUDA %d.%d: "
                        "update the driver (or build with an older toolkit)",
                        drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
    if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0))
        return trn_fail(TRN_ERR_BACKEND, "CUDA: no CUDA device found (%s)",
                        e == cudaSuccess ? "no GPU visible: check CUDA_VISIBLE_DEVICES and nvidia-smi" : cudaGetErrorString(e));
    if (e != cudaSuccess) return trn_fail(TRN_ERR_BACKEND, "CUDA: cudaGetDeviceCount: %s", cudaGetErrorString(e));
    if (device < 0 || device >= count)
        return trn_fail(TRN_ERR_INVALID, "CUDA: device %d does not exist (%d device%s)", device, count, count == 1 ? "" : "s");
    if ((e = cudaSetDevice(device)) != cudaSuccess || (e = cudaFree(0)) != cudaSuccess) {
        cudaGetLastError();
        return trn_fail(TRN_ERR_BACKEND, "CUDA: cannot open device %d: %s", device, cudaGetErrorString(e));
    }
    if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess)
        return trn_fail(TRN_ERR_BACKEND, "CUDA: cannot query device %d: %s", device, cudaGetErrorString(e));
    snprintf(trn__cu.name, sizeof trn__cu.name, "%s (sm_%d%d)", prop.name, prop.major, prop.minor);
    /* can this GPU run our kernels? (a build for sm_80/sm_90 cannot run on sm_75) */
    {
        cudaStream_t s0 = 0;
        TRN__CUDA_START(trn__k_probe, dim3(1), dim3(32), 0, s0, probe);
        e = cudaGetLastError();
        if (e == cudaSuccess) e = cudaDeviceSynchronize();
        if (e == cudaErrorUnsupportedPtxVersion || e == cudaErrorInsufficientDriver)
            return trn_fail(TRN_ERR_BACKEND, "CUDA: the NVIDIA driver (CUDA %d.%d) is older than this program's CUDA %d.%d "
                            "and cannot compile its kernels for %s: update the driver",
                            drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10, trn__cu.name);
        if (e != cudaSuccess)
            return trn_fail(TRN_ERR_BACKEND, "CUDA: cannot run kernels on %s: %s (this program holds sm_80 and sm_90 "
                            "code and compute_90 PTX: GPUs older than sm_80 are not supported)",
                            trn__cu.name, cudaGetErrorString(e));
    }
    trn__cu.ready = 1; /* the allocations below need it */
    trn__cu.device = device;
    /* what the driver already uses now is the context (and other processes) */
    TRN_CUDA_CHECK(cudaMemGetInfo(&fr0, &tot));
    trn__cu.context_bytes = tot - fr0;
    trn_ledger_add(TRN_DEVICE, TRN_KIND_RUNTIME, (long long)trn__cu.context_bytes);
    TRN_CUDA_CHECK(cudaStreamCreateWithFlags(&trn__cu.stream, cudaStreamNonBlocking));
    if (cublasCreate(&trn__cu.cublas) != CUBLAS_STATUS_SUCCESS) {
        trn__cu.cublas = NULL;
        trn__cuda_release();
        trn__cu.ready = 0;
        return trn_fail(TRN_ERR_BACKEND, "cuBLAS: cublasCreate failed on %s", trn__cu.name);
    }
    if (cublasLtCreate(&trn__cu.cublaslt) != CUBLAS_STATUS_SUCCESS) {
        trn__cu.cublaslt = NULL;
        trn__cuda_release();
        trn__cu.ready = 0;
        return trn_fail(TRN_ERR_BACKEND, "cuBLASLt: cublasLtCreate failed on %s", trn__cu.name);
    }
    TRN_CUDA_CHECK(cudaMemGetInfo(&fr1, &tot));
    trn__cu.cublas_bytes = fr0 > fr1 ? fr0 - fr1 : 0;
    trn_ledger_add(TRN_DEVICE, TRN_KIND_RUNTIME, (long long)trn__cu.cublas_bytes);
    /* our own workspace, so the ledger sees it (cuBLAS would allocate one) */
    trn__cu.workspace = trn__cuda_alloc(TRN__CUDA_WORKSPACE, TRN_KIND_RUNTIME);
    /* one more double: the total of sum_squares */
    trn__cu.partials = (double *)trn__cuda_alloc((TRN__CUDA_PARTIALS + 1) * sizeof(double), TRN_KIND_RUNTIME);
    if (!trn__cu.workspace || !trn__cu.partials) {
        trn__cuda_release();
        trn__cu.ready = 0;
        return trn_fail(TRN_ERR_NOMEM, "CUDA: no device memory for the cuBLAS workspace on %s", trn__cu.name);
    }
    trn__cu.workspace_bytes = TRN__CUDA_WORKSPACE;
    /* this order: cublasSetStream resets the workspace to cuBLAS's own pool */
    TRN_CUBLAS_CHECK(cublasSetStream(trn__cu.cublas, trn__cu.stream));
    TRN_CUBLAS_CHECK(cublasSetWorkspace(trn__cu.cublas, trn__cu.workspace, trn__cu.workspace_bytes));
    trn_cuda_set_tf32(!trn__cu.tf32_off);
    trn_ledger_set_device_probe(trn__cuda_probe);
    return TRN_OK;
}

TRNDEF void trn_cuda_set_tf32(int on) {
    trn__cu.tf32_off = !on;
    if (trn__cu.cublas)
        TRN_CUBLAS_CHECK(cublasSetMathMode(trn__cu.cublas, on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
}
TRNDEF int trn_cuda_tf32(void) { return !trn__cu.tf32_off; }
static void trn__cuda_fill_table(trn_backend *t, int bf16);
TRNDEF trn_result trn_cuda_set_precision(trn_cuda_precision p) {
    int i, bf16 = p == TRN_CUDA_BF16;
    if (p != TRN_CUDA_FP32 && p != TRN_CUDA_TF32 && p != TRN_CUDA_BF16)
        return trn_fail(TRN_ERR_INVALID, "trn_cuda_set_precision: unknown precision %d", (int)p);
    if (bf16 != trn__cu.bf16)
        for (i = 0; i < trn__cu.n_blocks; i++)
            if (trn__cu.blocks[i].kind == TRN_KIND_WEIGHTS)
                return trn_fail(TRN_ERR_INVALID, "trn_cuda_set_precision(%s): a model already lives on the device; "
                                "set the precision before trn_model_init", trn_cuda_precision_name(p));
    trn__cu.bf16 = bf16;
    if (trn__cu.table.name) trn__cuda_fill_table(&trn__cu.table, bf16); /* a pointer handed out sees it */
    /* fp32 and bf16 matmuls: no TF32 rounding of fp32 inputs */
    trn_cuda_set_tf32(p == TRN_CUDA_TF32);
    return TRN_OK;
}
TRNDEF trn_result trn_cuda_set_flash(trn_cuda_flash kernel, int dq_atomic) {
    if (kernel != TRN_CUDA_FLASH_FA2 && kernel != TRN_CUDA_FLASH_WMMA)
        return trn_fail(TRN_ERR_INVALID, "trn_cuda_set_flash: unknown kernel %d (TRN_CUDA_FLASH_FA2 or _WMMA)",
                        (int)kernel);
    trn__fa2_cfg.wmma = kernel == TRN_CUDA_FLASH_WMMA;
    trn__fa2_cfg.dq_atomic = dq_atomic != 0;
    return TRN_OK;
}
TRNDEF trn_cuda_precision trn_cuda_get_precision(void) {
    return trn__cu.bf16 ? TRN_CUDA_BF16 : trn__cu.tf32_off ? TRN_CUDA_FP32 : TRN_CUDA_TF32;
}
TRNDEF int trn_cuda_precision_parse(const char *name) {
    if (!name) return -1;
    if (strcmp(name, "fp32") == 0) return TRN_CUDA_FP32;
    if (strcmp(name, "tf32") == 0) return TRN_CUDA_TF32;
    if (strcmp(name, "bf16") == 0) return TRN_CUDA_BF16;
    return -1;
}
TRNDEF const char *trn_cuda_precision_name(trn_cuda_precision p) {
    return p == TRN_CUDA_BF16 ? "bf16" : p == TRN_CUDA_FP32 ? "fp32" : p == TRN_CUDA_TF32 ? "tf32" : "?";
}
TRNDEF const char *trn_cuda_device_name(void) { return trn__cu.ready ? trn__cu.name : "(no CUDA device)"; }
TRNDEF void *trn_cuda_stream(void) { return (void *)trn__cu.stream; }
TRNDEF void *trn_cuda_cublas(void) { return (void *)trn__cu.cublas; }

/* >>cuda-memory: pinned host memory. 64 bytes before the pointer hold its
   size and kind, so the free takes the right amount off the ledger. */
TRNDEF void *trn_cuda_host_alloc(size_t bytes, trn_kind kind) {
    void *raw = NULL;
    size_t *h;
    if (cudaMallocHost(&raw, bytes + 64) != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: clear it */
        trn_fail(TRN_ERR_NOMEM, "cudaMallocHost of %zu bytes (pinned %s) failed", bytes, trn_kind_name(kind));
        return NULL;
    }
    h = (size_t *)raw;
    h[0] = bytes;
    h[1] = (size_t)kind;
    trn_ledger_add(TRN_HOST, kind, (long long)bytes);
    return (char *)raw + 64;
}

TRNDEF void trn_cuda_host_free(void *p) {
    size_t *h;
    if (!p) return;
    h = (size_t *)((char *)p - 64);
    trn_ledger_add(TRN_HOST, (trn_kind)h[1], -(long long)h[0]);
    TRN_CUDA_CHECK(cudaFreeHost(h));
}

/* --profile: mark i is event i, recorded on the stream; the elapsed times
   are read after the pass (one synchronize) */
typedef struct trn__cuda_pclock { cudaEvent_t *ev; int n; } trn__cuda_pclock;

static void trn__cuda_pmark(trn_profile *p, int i) {
    trn__cuda_pclock *c = (trn__cuda_pclock *)p->clock;
    if (i >= c->n) {
        int n = c->n ? 2 * c->n : 256, k;
        cudaEvent_t *ev;
        while (n <= i) n *= 2;
        ev = (cudaEvent_t *)realloc(c->ev, sizeof(cudaEvent_t) * (size_t)n);
        if (!ev) trn_fatal("train_cuda.h: profile: out of host memory");
        for (k = c->n; k < n; k++) TRN_CUDA_CHECK(cudaEventCreate(&ev[k]));
        c->ev = ev;
        c->n = n;
    }
    TRN_CUDA_CHECK(cudaEventRecord(c->ev[i], trn__cu.stream));
}

static void trn__cuda_pread(trn_profile *p, int n, double *ms) {
    trn__cuda_pclock *c = (trn__cuda_pclock *)p->clock;
    int i;
    TRN_CUDA_CHECK(cudaEventSynchronize(c->ev[n - 1]));
    for (i = 1; i < n; i++) {
        float f = 0;
        TRN_CUDA_CHECK(cudaEventElapsedTime(&f, c->ev[i - 1], c->ev[i]));
        ms[i] = f;
    }
}

static void trn__cuda_pfree(trn_profile *p) {
    trn__cuda_pclock *c = (trn__cuda_pclock *)p->clock;
    int k;
    if (!c) return;
    for (k = 0; k < c->n; k++) TRN_CUDA_CHECK(cudaEventDestroy(c->ev[k]));
    free(c->ev);
    free(c);
    p->clock = NULL;
}

TRNDEF void trn_cuda_profile_clock(trn_profile *p) {
    trn__cuda_pclock *c = (trn__cuda_pclock *)calloc(1, sizeof *c);
    if (!p || !c) trn_fatal("trn_cuda_profile_clock: NULL profile or out of host memory");
    p->clock = c;
    p->mark = trn__cuda_pmark;
    p->read = trn__cuda_pread;
    p->clock_free = trn__cuda_pfree;
    p->clock_name = "CUDA events";
}

TRNDEF void trn_cuda_sites_start(int measure) {
    trn__sites.on = 1;
    trn__sites.measure = measure;
    trn__sites.n_rows = trn__sites.full = trn__sites.depth = trn__sites.n_ev = 0;
    trn__site_event(); /* time starts here: "(between sites)" until the first site */
}
TRNDEF int trn_cuda_sites_read(const trn_cuda_site_row **rows) {
    int i;
    if (trn__sites.on && trn__sites.measure && trn__sites.n_ev > 0) {
        double between = 0;
        trn__site_event(); /* the end of the last interval */
        TRN_CUDA_CHECK(cudaEventSynchronize(trn__sites.ev[trn__sites.n_ev - 1]));
        for (i = 1; i < trn__sites.n_ev; i++) {
            float f = 0;
            int r = trn__sites.ev_row[i - 1];
            TRN_CUDA_CHECK(cudaEventElapsedTime(&f, trn__sites.ev[i - 1], trn__sites.ev[i]));
            if (r >= 0) trn__sites.rows[r].ms += f;
            else between += f;
        }
        i = trn__site_row("(between sites)", "host gaps: the GPU waited", 0, 0, 0, 0);
        trn__sites.rows[i].ms += between;
    }
    if (trn__sites.full) fprintf(stderr, "train_cuda.h: sites: more than %d rows; the last holds the rest\n", TRN__SITES_MAX);
    trn__sites.on = 0;
    if (rows) *rows = trn__sites.rows;
    return trn__sites.n_rows;
}
TRNDEF void trn_cuda_site_scope(const char *scope) { trn__sites.scope = scope; }

TRNDEF void trn_cuda_shutdown(void) {
    if (!trn__cu.ready) return;
    trn__cuda_drain();
    trn__cuda_release();
    trn_ledger_set_device_probe(NULL);
    trn__cu.ready = 0;
}

/* the table for the current precision: activation kernels are the float or
   the bf16 instantiation of their templates */
#define TRN__CUDA_PICK(fn) (bf16 ? fn<trn__bf16> : fn<float>)
static void trn__cuda_fill_table(trn_backend *t, int bf16) {
        t->act_dtype = bf16 ? TRN_BF16 : TRN_F32;
        t->convert = trn__cuda_convert;
        t->place = TRN_DEVICE;
        t->alloc = trn__cuda_alloc;
        t->free = trn__cuda_free;
        t->zero = trn__cuda_zero;
        t->upload = trn__cuda_upload;
        t->download = trn__cuda_download;
        t->copy = trn__cuda_copy;
        t->sync = trn__cuda_sync;
        t->matmul_forward = TRN__CUDA_PICK(trn__cuda_matmul_forward);
        t->matmul_backward = TRN__CUDA_PICK(trn__cuda_matmul_backward);
        t->embedding_forward = TRN__CUDA_PICK(trn__cuda_embedding_forward);
        t->embedding_backward = TRN__CUDA_PICK(trn__cuda_embedding_backward);
        t->embedding_backward_rows = TRN__CUDA_PICK(trn__cuda_embedding_backward_rows);
        t->layernorm_forward = TRN__CUDA_PICK(trn__cuda_layernorm_forward);
        t->layernorm_backward = TRN__CUDA_PICK(trn__cuda_layernorm_backward);
        t->add_layernorm_forward = TRN__CUDA_PICK(trn__cuda_add_layernorm_forward);
        t->layernorm_backward_ex = TRN__CUDA_PICK(trn__cuda_layernorm_backward_ex);
        t->gelu_forward = TRN__CUDA_PICK(trn__cuda_gelu_forward);
        t->gelu_backward = TRN__CUDA_PICK(trn__cuda_gelu_backward);
        t->relu_forward = TRN__CUDA_PICK(trn__cuda_relu_forward);
        t->relu_backward = TRN__CUDA_PICK(trn__cuda_relu_backward);
        t->add_forward = TRN__CUDA_PICK(trn__cuda_add_forward);
        t->accumulate = TRN__CUDA_PICK(trn__cuda_accumulate);
        t->attention_forward = TRN__CUDA_PICK(trn__cuda_attention_forward);
        t->attention_backward = TRN__CUDA_PICK(trn__cuda_attention_backward);
        t->crossentropy_forward = TRN__CUDA_PICK(trn__cuda_crossentropy_forward);
        t->crossentropy_backward = TRN__CUDA_PICK(trn__cuda_crossentropy_backward);
        t->crossentropy_fused = TRN__CUDA_PICK(trn__cuda_crossentropy_fused);
        t->xent_chunk_bytes = TRN__CUDA_XENT_CHUNK_BYTES;
        t->matmul_backward_ex = TRN__CUDA_PICK(trn__cuda_matmul_backward_ex);
        t->mse_forward = TRN__CUDA_PICK(trn__cuda_mse_forward);
        t->mse_backward = TRN__CUDA_PICK(trn__cuda_mse_backward);
        t->meanpool_forward = TRN__CUDA_PICK(trn__cuda_meanpool_forward);
        t->meanpool_backward = TRN__CUDA_PICK(trn__cuda_meanpool_backward);
        t->adamw_update = trn__cuda_adamw_update;
        t->sum_squares = trn__cuda_sum_squares;
        t->scale = trn__cuda_scale;
        t->mul_forward = TRN__CUDA_PICK(trn__cuda_mul_forward);
        t->mul_backward = TRN__CUDA_PICK(trn__cuda_mul_backward);
        t->silu_forward = TRN__CUDA_PICK(trn__cuda_silu_forward);
        t->silu_backward = TRN__CUDA_PICK(trn__cuda_silu_backward);
        t->sigmoid_forward = TRN__CUDA_PICK(trn__cuda_sigmoid_forward);
        t->sigmoid_backward = TRN__CUDA_PICK(trn__cuda_sigmoid_backward);
        t->tanh_forward = TRN__CUDA_PICK(trn__cuda_tanh_forward);
        t->tanh_backward = TRN__CUDA_PICK(trn__cuda_tanh_backward);
        t->softmax_forward = TRN__CUDA_PICK(trn__cuda_softmax_forward);
        t->softmax_backward = TRN__CUDA_PICK(trn__cuda_softmax_backward);
        t->rmsnorm_forward = TRN__CUDA_PICK(trn__cuda_rmsnorm_forward);
        t->rmsnorm_backward = TRN__CUDA_PICK(trn__cuda_rmsnorm_backward);
        t->rope_forward = TRN__CUDA_PICK(trn__cuda_rope_forward);
        t->rope_backward = TRN__CUDA_PICK(trn__cuda_rope_backward);
        /* fused attention (flash-style) */
        t->flash_attention_forward =
            bf16 ? trn__cuda_flash_attention_forward_bf16 : trn__cuda_flash_attention_forward<float>;
        t->flash_attention_backward =
            bf16 ? trn__cuda_flash_attention_backward_bf16 : trn__cuda_flash_attention_backward<float>;
        t->flash_attention_backward_ex = bf16 ? trn__cuda_flash_attention_backward_ex_bf16 : NULL;
        t->sgd_update = trn__cuda_sgd_update;
        t->attention_kv_forward = TRN__CUDA_PICK(trn__cuda_attention_kv_forward);
        t->dropout_forward = TRN__CUDA_PICK(trn__cuda_dropout_forward);
        t->dropout_backward = TRN__CUDA_PICK(trn__cuda_dropout_backward);
        t->transpose_forward = TRN__CUDA_PICK(trn__cuda_transpose_forward);
        t->transpose_backward = TRN__CUDA_PICK(trn__cuda_transpose_backward);
        t->slice_forward = TRN__CUDA_PICK(trn__cuda_slice_forward);
        t->slice_backward = TRN__CUDA_PICK(trn__cuda_slice_backward);
        t->concat_forward = TRN__CUDA_PICK(trn__cuda_concat_forward);
        t->concat_backward = TRN__CUDA_PICK(trn__cuda_concat_backward);
        t->sum_forward = TRN__CUDA_PICK(trn__cuda_sum_forward);
        t->sum_backward = TRN__CUDA_PICK(trn__cuda_sum_backward);
        t->bmm_forward = TRN__CUDA_PICK(trn__cuda_bmm_forward);
        t->bmm_backward = TRN__CUDA_PICK(trn__cuda_bmm_backward);
        t->crossentropy_ex_forward = TRN__CUDA_PICK(trn__cuda_crossentropy_ex_forward);
        t->crossentropy_ex_backward = TRN__CUDA_PICK(trn__cuda_crossentropy_ex_backward);
        t->bce_logits_forward = TRN__CUDA_PICK(trn__cuda_bce_logits_forward);
        t->bce_logits_backward = TRN__CUDA_PICK(trn__cuda_bce_logits_backward);
        t->l1_forward = TRN__CUDA_PICK(trn__cuda_l1_forward);
        t->l1_backward = TRN__CUDA_PICK(trn__cuda_l1_backward);
        t->huber_forward = TRN__CUDA_PICK(trn__cuda_huber_forward);
        t->huber_backward = TRN__CUDA_PICK(trn__cuda_huber_backward);
        /* >>mlp */
        t->matmul_gelu_forward = TRN__CUDA_PICK(trn__cuda_matmul_gelu_forward);
        t->matmul_dgelu_backward = TRN__CUDA_PICK(trn__cuda_matmul_dgelu_backward);
        /* >>sync-free step */
        t->download_async = trn__cuda_download_async;
        t->mean = trn__cuda_mean;
        t->grad_norm_clip = trn__cuda_grad_norm_clip;
        t->adamw_flat = trn__cuda_adamw_flat;
        t->site_scope = trn_cuda_site_scope;
        /* <<sync-free step */
        t->name = "cuda";
}

TRNDEF const trn_backend *trn_cuda_backend(void) {
    trn_backend *t = &trn__cu.table;
    if (!trn__cu.ready)
        trn_fatal("trn_cuda_backend: CUDA is not initialized: call trn_cuda_init(device) first and check its result "
                  "(trn_ddp_init does it for each rank's GPU)");
    if (!t->name || t->act_dtype != (trn__cu.bf16 ? TRN_BF16 : TRN_F32)) trn__cuda_fill_table(t, trn__cu.bf16);
    return t;
}

#endif /* TRAIN_CUDA_IMPLEMENTATION_DONE */
#endif /* TRAIN_CUDA_IMPLEMENTATION */
