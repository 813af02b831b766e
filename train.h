/* train.h - v0.1 - a header-only training kit in C: tensors, ops with
   their backward, a tape, AdamW, checkpoints, and a ledger of every byte.

   Do this:
      #define TRAIN_IMPLEMENTATION
   before you include this file in *one* C or C++ file to create the
   implementation. Every other file includes it plainly.

      // in exactly one .c file:
      #define TRAIN_IMPLEMENTATION
      #include "train.h"

   Build with OpenMP for threads and -march=native for AVX2/FMA/AVX-512:
      cc -O3 -march=native -fopenmp my_train.c -lm

   Configuration macros (define before the include that has
   TRAIN_IMPLEMENTATION):
      TRAIN_STATIC        all functions static (private to one file)
      TRAIN_USE_CBLAS     route trn_sgemm to any CBLAS (link -lopenblas ...)
      TRN_MALLOC/TRN_FREE your allocator; define both or neither

   The training step, and what each line does to memory:

      trn_zero_grad(&model);            // grads = 0 (one memset of one buffer)
      trn_reset(&model);                // rewind activation arena and tape
      loss = my_forward(&model, x, y);  // each op: compute, save for backward,
                                        //   push a tape record (activations grow)
      trn_backward(&model, loss);       // walk the tape backwards: grads += ...
                                        //   (the grad buffer appears on first use)
      trn_clip_grad_norm(&model, 1.0f); // one pass over the flat grad buffer
      trn_adamw_step(&opt, &model, lr); // m and v appear on the first call
      trn_checkpoint_save(...);         // safetensors, atomic, resumable

   What it does NOT do: no dynamic shapes beyond 4 dims, no dtype other than
   float32 (ids are int), no automatic broadcasting, no graph optimizer, no
   Python. Every op is written out; read it.

   Contents (grep for the anchors, e.g. ">>ledger"):
      >>errors      result codes, reasons, fatal programmer errors
      >>ledger      counted allocations per kind, OS view (RSS)
      >>rng         splitmix64 RNG: seeds, uniform, normal, shuffle
      >>tensor      tensors as views; the parameter table; flat buffers
      >>backend     the table of kernels a backend provides (CPU here)
      >>matmul      trn_sgemm: blocked, vectorized, OpenMP
      >>ops         forward/backward pairs (plain functions)
      >>tape        the model: arena, tape, ops that record themselves
      >>adamw       AdamW, LR schedule, gradient clipping
      >>checkpoint  safetensors weights, training-state checkpoints
      >>data        tokenizers, token shards, text loading

   License: MIT (see the end of the file).
*/
#ifndef TRAIN_H_INCLUDED
#define TRAIN_H_INCLUDED

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifndef TRNDEF
#ifdef TRAIN_STATIC
#define TRNDEF static
#else
#define TRNDEF extern
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
   >>errors
   Calls that can fail for reasons outside the program (files, memory, bad
   data) return trn_result and leave a readable reason in trn_error_reason().
   Programmer errors (shape mismatch, NULL tensor) stop the program with a
   message naming the op and the shapes: see trn_fatal.
   ------------------------------------------------------------------------ */
typedef enum trn_result {
    TRN_OK = 0,
    TRN_ERR_INVALID = -1,  /* bad argument: NULL, zero or negative size  */
    TRN_ERR_NOMEM = -2,    /* an allocation failed                        */
    TRN_ERR_IO = -3,       /* open/read/write/fsync/rename failed         */
    TRN_ERR_FORMAT = -4,   /* file is not what it claims (bad header ...) */
    TRN_ERR_CHECKSUM = -5, /* data does not match its stored checksum     */
    TRN_ERR_MISMATCH = -6, /* file is valid but for another model/shape   */
    TRN_ERR_BACKEND = -7,  /* CUDA / cuBLAS / driver error                */
    TRN_ERR_COMM = -8,     /* NCCL / network / peer rank error            */
    TRN_ERR_TIMEOUT = -9   /* a peer did not answer in time               */
} trn_result;

TRNDEF const char *trn_result_string(trn_result r);   /* "TRN_ERR_IO" ...  */
TRNDEF const char *trn_error_reason(void);           /* last detailed reason */
/* record a reason (printf-style) and return r; use as: return trn_fail(...) */
TRNDEF trn_result trn_fail(trn_result r, const char *fmt, ...);
/* programmer error: print "train.h: <message>" and exit(3) */
TRNDEF void trn_fatal(const char *fmt, ...);

/* ------------------------------------------------------------------------
   >>ledger
   Every byte the kit allocates is counted under a kind and a place (host
   memory or device memory). The ledger keeps current and peak bytes per
   kind, and reads what the OS says (RSS) so a lesson can print both.
   ------------------------------------------------------------------------ */
typedef enum trn_kind {
    TRN_KIND_WEIGHTS,     /* model parameters                              */
    TRN_KIND_GRADS,       /* gradients of the parameters                   */
    TRN_KIND_OPTIM,       /* optimizer state (AdamW m and v)               */
    TRN_KIND_ACTIVATIONS, /* the per-step arena: activations + their grads */
    TRN_KIND_TEMP,        /* short-lived buffers (I/O staging, scratch)    */
    TRN_KIND_COMM,        /* communication buffers (DDP)                   */
    TRN_KIND_RUNTIME,     /* CUDA context, cuBLAS workspace, tables        */
    TRN_KIND_COUNT
} trn_kind;

typedef enum trn_place { TRN_HOST = 0, TRN_DEVICE = 1, TRN_PLACE_COUNT } trn_place;

typedef struct trn_ledger_snapshot {
    size_t current[TRN_PLACE_COUNT][TRN_KIND_COUNT]; /* bytes now       */
    size_t peak[TRN_PLACE_COUNT][TRN_KIND_COUNT];    /* high-water mark */
    size_t peak_total[TRN_PLACE_COUNT];  /* highest sum over kinds at once */
    size_t rss, peak_rss;                /* the OS's view of this process  */
    size_t device_used, device_total;    /* the driver's view (0 if none)  */
} trn_ledger_snapshot;

TRNDEF const char *trn_kind_name(trn_kind kind);
/* host memory, 64-byte aligned, counted; NULL (and a reason) on failure */
TRNDEF void *trn_alloc(size_t bytes, trn_kind kind);
TRNDEF void *trn_calloc(size_t bytes, trn_kind kind);   /* zeroed */
TRNDEF void trn_free(void *p);                           /* NULL is fine */
/* for memory allocated elsewhere (device memory): count it by hand */
TRNDEF void trn_ledger_add(trn_place place, trn_kind kind, long long delta);
TRNDEF size_t trn_ledger_current(trn_place place, trn_kind kind);
TRNDEF size_t trn_ledger_peak(trn_place place, trn_kind kind);
TRNDEF size_t trn_ledger_total(trn_place place);       /* sum of current   */
TRNDEF size_t trn_ledger_peak_total(trn_place place);  /* max of that sum  */
TRNDEF void trn_ledger_reset_peak(void);
TRNDEF void trn_ledger_read(trn_ledger_snapshot *s);
/* a backend can report the driver's numbers (cudaMemGetInfo) */
TRNDEF void trn_ledger_set_device_probe(void (*probe)(size_t *used, size_t *total));
TRNDEF void trn_ledger_print(const char *title);
TRNDEF void trn_ledger_print_diff(const char *title, const trn_ledger_snapshot *before,
                                  const trn_ledger_snapshot *after);
TRNDEF size_t trn_os_rss(void);      /* resident set size now (bytes)     */
TRNDEF size_t trn_os_peak_rss(void); /* highest RSS of the process so far */

/* ------------------------------------------------------------------------
   >>rng
   splitmix64 (Steele, Lea, Flood 2014): the state is one uint64, so saving
   it in a checkpoint is saving one number. Normals by Box-Muller without a
   cached spare, for the same reason. Same seed => same stream everywhere.
   ------------------------------------------------------------------------ */
typedef struct trn_rng { uint64_t state; } trn_rng;
TRNDEF void trn_rng_seed(trn_rng *r, uint64_t seed);
TRNDEF uint64_t trn_rng_next(trn_rng *r);
TRNDEF float trn_rng_uniform(trn_rng *r);            /* [0, 1)           */
TRNDEF float trn_rng_normal(trn_rng *r);             /* mean 0, std 1    */
TRNDEF uint32_t trn_rng_below(trn_rng *r, uint32_t n); /* [0, n)         */
TRNDEF void trn_rng_shuffle(trn_rng *r, int *a, int n); /* Fisher-Yates  */

/* ------------------------------------------------------------------------
   >>tensor
   A tensor is a view: a pointer into a buffer plus a shape. Parameters
   point into the model's one flat weight buffer (and their gradients into
   the one flat gradient buffer, same layout); activations point into the
   per-step arena. data lives where the model's backend lives (host for
   the CPU backend, device memory for CUDA).
   ------------------------------------------------------------------------ */
#define TRN_MAX_DIMS 4
typedef struct trn_tensor {
    float *data;        /* values                                          */
    float *grad;        /* d(loss)/d(values), same shape; NULL until needed */
    int ndim;
    int shape[TRN_MAX_DIMS];
    size_t size;        /* number of elements                              */
    size_t offset;      /* parameters: element offset in the flat buffers  */
    int requires_grad;  /* backward computes this tensor's gradient        */
    int is_param;
    int decay;          /* parameters: AdamW weight decay applies (ndim>=2) */
    char name[64];
} trn_tensor;

TRNDEF size_t trn_shape_size(int ndim, const int *shape);
/* "(4,64,768)" into buf; returns buf */
TRNDEF const char *trn_shape_str(const trn_tensor *t, char *buf, size_t n);

/* ------------------------------------------------------------------------
   >>backend
   The kernels a backend provides. The CPU backend is the functions of
   >>ops below; train_cuda.h fills the same table with CUDA kernels. All
   pointers are in the backend's memory. Backward kernels ACCUMULATE (+=)
   into their gradient outputs; a NULL gradient output is skipped.
   ------------------------------------------------------------------------ */
typedef struct trn_backend {
    const char *name;
    trn_place place;
    void *(*alloc)(size_t bytes, trn_kind kind);  /* counted in the ledger */
    void (*free)(void *p);
    void (*zero)(void *p, size_t bytes);
    void (*upload)(void *dst, const void *host_src, size_t bytes);
    void (*download)(void *host_dst, const void *src, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes);
    void (*sync)(void);

    void (*matmul_forward)(float *out, const float *inp, const float *w, const float *bias,
                           int N, int C, int OC);
    void (*matmul_backward)(float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, const float *w, int N, int C, int OC);
    void (*embedding_forward)(float *out, const int *ids, const float *table, int N, int C);
    void (*embedding_backward)(float *dtable, const float *dout, const int *ids, int N, int C);
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C);
    void (*layernorm_backward)(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C);
    void (*gelu_forward)(float *out, const float *inp, size_t n);
    void (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t n);
    void (*relu_forward)(float *out, const float *inp, size_t n);
    void (*relu_backward)(float *dinp, const float *out, const float *dout, size_t n);
    void (*add_forward)(float *out, const float *a, const float *b, size_t n);
    void (*accumulate)(float *dst, const float *src, size_t n); /* dst += src */
    void (*attention_forward)(float *out, float *att, const float *qkv,
                              int B, int T, int C, int NH, int causal);
    void (*attention_backward)(float *dqkv, float *scratch, const float *dout,
                               const float *qkv, const float *att,
                               int B, int T, int C, int NH, int causal);
    void (*crossentropy_forward)(float *losses, float *lse, const float *logits,
                                 const int *targets, int N, int V, int Vp);
    void (*crossentropy_backward)(float *dlogits, const float *logits, const float *lse,
                                  const int *targets, float dloss, int N, int V, int Vp);
    void (*mse_forward)(float *losses, const float *pred, const float *target, size_t n);
    void (*mse_backward)(float *dpred, const float *pred, const float *target, float dloss,
                         size_t n);
    void (*meanpool_forward)(float *out, const float *inp, int B, int T, int C);
    void (*meanpool_backward)(float *dinp, const float *dout, int B, int T, int C);
    void (*adamw_update)(float *p, const float *g, float *m, float *v, size_t n, float lr,
                         float beta1, float beta2, float eps, float weight_decay,
                         float bias_corr1, float bias_corr2);
    double (*sum_squares)(const float *x, size_t n);
    void (*scale)(float *x, float s, size_t n);
} trn_backend;

TRNDEF const trn_backend *trn_cpu_backend(void);
TRNDEF void trn_set_threads(int n);   /* OpenMP threads; <= 0 keeps default */
TRNDEF int trn_get_threads(void);

/* ------------------------------------------------------------------------
   >>matmul
   Row-major GEMM: C = alpha * op(A) @ op(B) + beta * C, op(X) = X or X^T.
   op(A) is (M,K), op(B) is (K,N), C is (M,N); lda/ldb/ldc are row strides.
   ------------------------------------------------------------------------ */
TRNDEF void trn_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta,
                      float *C, int ldc);
/* the plain triple loop, kept as the reference the fast one is tested on */
TRNDEF void trn_sgemm_ref(int trans_a, int trans_b, int M, int N, int K, float alpha,
                          const float *A, int lda, const float *B, int ldb, float beta,
                          float *C, int ldc);

/* ------------------------------------------------------------------------
   >>ops
   Forward/backward pairs on plain arrays (the CPU backend). Argument order:
   outputs, then inputs, then sizes. Backward ACCUMULATES into gradients.
   ------------------------------------------------------------------------ */
TRNDEF void trn_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                               int N, int C, int OC);
TRNDEF void trn_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                                const float *inp, const float *w, int N, int C, int OC);
TRNDEF void trn_embedding_forward(float *out, const int *ids, const float *table, int N, int C);
TRNDEF void trn_embedding_backward(float *dtable, const float *dout, const int *ids, int N, int C);
TRNDEF void trn_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                  const float *w, const float *b, int N, int C);
TRNDEF void trn_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                   const float *inp, const float *w, const float *mean,
                                   const float *rstd, int N, int C);
TRNDEF void trn_gelu_forward(float *out, const float *inp, size_t n);
TRNDEF void trn_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
TRNDEF void trn_relu_forward(float *out, const float *inp, size_t n);
TRNDEF void trn_relu_backward(float *dinp, const float *out, const float *dout, size_t n);
TRNDEF void trn_add_forward(float *out, const float *a, const float *b, size_t n);
TRNDEF void trn_accumulate(float *dst, const float *src, size_t n);
TRNDEF void trn_attention_forward(float *out, float *att, const float *qkv,
                                  int B, int T, int C, int NH, int causal);
TRNDEF void trn_attention_backward(float *dqkv, float *scratch, const float *dout,
                                   const float *qkv, const float *att,
                                   int B, int T, int C, int NH, int causal);
TRNDEF void trn_crossentropy_forward(float *losses, float *lse, const float *logits,
                                     const int *targets, int N, int V, int Vp);
TRNDEF void trn_crossentropy_backward(float *dlogits, const float *logits, const float *lse,
                                      const int *targets, float dloss, int N, int V, int Vp);
TRNDEF void trn_mse_forward(float *losses, const float *pred, const float *target, size_t n);
TRNDEF void trn_mse_backward(float *dpred, const float *pred, const float *target, float dloss,
                             size_t n);
TRNDEF void trn_meanpool_forward(float *out, const float *inp, int B, int T, int C);
TRNDEF void trn_meanpool_backward(float *dinp, const float *dout, int B, int T, int C);
TRNDEF void trn_adamw_update(float *p, const float *g, float *m, float *v, size_t n, float lr,
                             float beta1, float beta2, float eps, float weight_decay,
                             float bias_corr1, float bias_corr2);
TRNDEF double trn_sum_squares(const float *x, size_t n);
TRNDEF void trn_scale(float *x, float s, size_t n);
/* images (B,H,W,Ch) -> patches (B, (H/P)*(W/P), P*P*Ch); data only, no grad */
TRNDEF void trn_patchify(float *out, const float *img, int B, int H, int W, int Ch, int P);

/* ------------------------------------------------------------------------
   >>tape
   The model: a parameter table over two flat buffers, an activation arena
   that is rewound (not freed) every step, and a tape of the ops run in
   forward. trn_backward walks the tape in reverse.
   ------------------------------------------------------------------------ */
struct trn_model;
struct trn_tape_entry;
typedef void (*trn_backward_fn)(struct trn_model *m, struct trn_tape_entry *e);

typedef struct trn_tape_entry {
    const char *op;            /* "linear", "layernorm", ...                */
    trn_backward_fn backward;  /* how to push gradients from out to inputs */
    trn_tensor *out;
    trn_tensor *in[3];
    void *saved[3];            /* what forward kept for backward (arena)   */
    int iarg[4];
    float farg[2];
} trn_tape_entry;

/* a bump allocator over one block of backend memory; see trn_reset */
typedef struct trn_arena {
    char *base;                /* the block (backend memory)               */
    size_t cap, used;
    size_t high;               /* most bytes ever asked for in one step    */
    char **spill; int n_spill; /* blocks added when a step outgrew the base */
    size_t spilled;            /* bytes in those blocks                    */
} trn_arena;

typedef struct trn_model {
    const trn_backend *backend;
    trn_tensor **params;       /* the parameter table, in declaration order */
    int n_params, cap_params;
    size_t n_floats;           /* total parameter elements                  */
    float *param_data;         /* ONE buffer with every weight (WEIGHTS)    */
    float *grad_data;          /* ONE buffer, same layout (GRADS); NULL until
                                  the first backward, as in PyTorch         */
    trn_arena arena;           /* activations of one step (ACTIVATIONS)     */
    trn_tape_entry *tape;
    int tape_len, tape_cap;
    int grad_enabled;          /* 0: no tape (evaluation), like no_grad     */
    trn_tensor **tblocks;      /* host-side headers of this step's tensors  */
    int n_tblocks, t_used;
} trn_model;

/* backend NULL = CPU */
TRNDEF trn_result trn_model_init(trn_model *m, const trn_backend *backend);
/* declare a parameter (before trn_model_alloc); name is copied */
TRNDEF trn_tensor *trn_param(trn_model *m, const char *name, int ndim, const int *shape);
TRNDEF trn_tensor *trn_param1(trn_model *m, const char *name, int d0);
TRNDEF trn_tensor *trn_param2(trn_model *m, const char *name, int d0, int d1);
/* allocate the flat weight buffer (zeroed) and point every parameter into it */
TRNDEF trn_result trn_model_alloc(trn_model *m);
TRNDEF trn_result trn_model_alloc_grads(trn_model *m); /* done by backward */
TRNDEF void trn_model_free(trn_model *m);
TRNDEF trn_tensor *trn_model_find(trn_model *m, const char *name);
TRNDEF void trn_zero_grad(trn_model *m);
TRNDEF void trn_reset(trn_model *m);   /* new step: rewind arena and tape  */
TRNDEF void trn_backward(trn_model *m, trn_tensor *loss);

/* activations: a tensor in the arena (data uninitialized, grad NULL) */
TRNDEF trn_tensor *trn_tensor_new(trn_model *m, const char *name, int ndim, const int *shape);
/* a leaf from host data (inputs, targets): no gradient */
TRNDEF trn_tensor *trn_input(trn_model *m, const char *name, int ndim, const int *shape,
                             const float *host);
/* raw scratch from the arena (ids, saved statistics) */
TRNDEF void *trn_arena_alloc(trn_model *m, size_t bytes);
TRNDEF float trn_item(trn_model *m, const trn_tensor *t);        /* t->data[0] */
TRNDEF void trn_read(trn_model *m, const trn_tensor *t, float *host);
TRNDEF void trn_write(trn_model *m, trn_tensor *t, const float *host);
TRNDEF void trn_read_grad(trn_model *m, const trn_tensor *t, float *host);
TRNDEF void trn_init_normal(trn_model *m, trn_tensor *t, float mean, float std, trn_rng *rng);
TRNDEF void trn_init_const(trn_model *m, trn_tensor *t, float value);

/* ops that record themselves on the tape. Shapes: last dim is channels. */
TRNDEF trn_tensor *trn_linear(trn_model *m, trn_tensor *x, trn_tensor *w, trn_tensor *b);
TRNDEF trn_tensor *trn_embedding(trn_model *m, trn_tensor *table, const int *ids, int B, int T);
TRNDEF trn_tensor *trn_layernorm(trn_model *m, trn_tensor *x, trn_tensor *w, trn_tensor *b);
TRNDEF trn_tensor *trn_gelu(trn_model *m, trn_tensor *x);
TRNDEF trn_tensor *trn_relu(trn_model *m, trn_tensor *x);
TRNDEF trn_tensor *trn_add(trn_model *m, trn_tensor *a, trn_tensor *b);
TRNDEF trn_tensor *trn_attention(trn_model *m, trn_tensor *qkv, int n_head, int causal);
TRNDEF trn_tensor *trn_cross_entropy(trn_model *m, trn_tensor *logits, const int *targets,
                                     int n_valid);
TRNDEF trn_tensor *trn_mse(trn_model *m, trn_tensor *pred, const float *target);
TRNDEF trn_tensor *trn_mean_pool(trn_model *m, trn_tensor *x);

/* ------------------------------------------------------------------------
   >>adamw
   ------------------------------------------------------------------------ */
typedef struct trn_adamw_desc {
    float lr;            /* default 1e-3 (PyTorch's default)               */
    float beta1, beta2;  /* default 0.9, 0.999                              */
    float eps;           /* default 1e-8                                    */
    float weight_decay;  /* default 0.01; only where tensor->decay is set  */
    int no_weight_decay; /* 1: weight_decay = 0 (0.0 in desc means default) */
} trn_adamw_desc;

typedef struct trn_adamw {
    trn_adamw_desc desc; /* effective values                               */
    float *m, *v;        /* moments, NULL until the first step (OPTIM)     */
    size_t lo, hi;       /* the slice of the flat buffers this optimizer
                            owns: all by default, one shard for ZeRO-1     */
    long long step;      /* steps taken                                    */
    const trn_backend *backend;
} trn_adamw;

TRNDEF trn_adamw_desc trn_adamw_defaults(const trn_adamw_desc *desc);
TRNDEF void trn_adamw_init(trn_adamw *opt, const trn_adamw_desc *desc);
TRNDEF trn_result trn_adamw_step(trn_adamw *opt, trn_model *m, float lr);
TRNDEF void trn_adamw_free(trn_adamw *opt);
/* linear warmup for `warmup` steps, then cosine from max_lr to min_lr at total */
TRNDEF float trn_lr_schedule(long long step, long long warmup, long long total,
                             float max_lr, float min_lr);
TRNDEF float trn_grad_norm(trn_model *m);
/* scale grads so their global L2 norm is <= max_norm; returns the norm before */
TRNDEF float trn_clip_grad_norm(trn_model *m, float max_norm);

/* ------------------------------------------------------------------------
   >>checkpoint declarations
   Every file is safetensors (Hugging Face's format: PyTorch, numpy and the
   Python `safetensors` package read it as is):

     bytes [0, 8)      N, the header length, uint64 little-endian
     bytes [8, 8+N)    the header: UTF-8 JSON, padded with spaces to 8 bytes
                         {"__metadata__": {"key": "value", ...},
                          "h.0.mlp.w": {"dtype": "F32", "shape": [64, 256],
                                        "data_offsets": [0, 65536]}, ...}
     bytes [8+N, end)  the data: each tensor's raw little-endian bytes, back
                       to back, no gaps; data_offsets count from byte 8+N

   A weights file (trn_safetensors_save) holds the parameters under their
   names. A training-state checkpoint (trn_checkpoint_save) adds AdamW's
   moments as two flat tensors "optim.m" and "optim.v" (the optimizer's
   slice [lo,hi) of the flat layout) and, in __metadata__, the optimizer
   step and hyperparameters ("trn.optim.*") plus the caller's trn_meta:
   RNG states, data-loader position, model config. Numbers are decimal
   strings that read back exactly (u64 as digits, doubles with %.17g).

   Every file the kit writes carries "trn.crc32c": a CRC-32C of the
   header's content (names, dtypes, shapes, offsets, metadata) and of every
   data byte, checked on load. A truncated or bit-flipped file is reported
   (TRN_ERR_FORMAT, TRN_ERR_CHECKSUM) with the file name, never loaded.

   Writes are atomic: "<path>.tmp.<pid>", fsync, rename over <path>, fsync
   of the directory. A kill -9 at any moment leaves the old file or the new
   one, never a torn one. Saving streams each tensor through one staging
   buffer (TEMP, at most 4 MiB): no second copy of the model in memory.
   Hosts must be little-endian (x86, ARM). POSIX (fsync, rename, opendir).
   ------------------------------------------------------------------------ */

/* trn_meta: a small table of string key/value pairs, the __metadata__ you
   save with a checkpoint. Zero-initialize it (trn_meta meta = {0};) and
   set keys; setting a key again replaces it. Exceeding the capacity is a
   programmer error (trn_fatal). Keys starting with "trn." and the key
   "format" belong to the kit: the kit writes its own values for them and
   does not hand them back on load. */
#define TRN_META_MAX 32   /* pairs                                        */
#define TRN_META_KEY 64   /* bytes per key, including the final 0         */
#define TRN_META_VAL 1024 /* bytes per value, including the final 0       */
typedef struct trn_meta {
    int n;
    char key[TRN_META_MAX][TRN_META_KEY];
    char val[TRN_META_MAX][TRN_META_VAL];
} trn_meta;

TRNDEF void trn_meta_set(trn_meta *meta, const char *key, const char *val);
TRNDEF void trn_meta_set_u64(trn_meta *meta, const char *key, uint64_t v); /* "1234"  */
TRNDEF void trn_meta_set_f64(trn_meta *meta, const char *key, double v);   /* exact   */
TRNDEF const char *trn_meta_get(const trn_meta *meta, const char *key);    /* NULL: absent */
/* TRN_ERR_MISMATCH when the key is absent, TRN_ERR_FORMAT when it is not a number */
TRNDEF trn_result trn_meta_get_u64(const trn_meta *meta, const char *key, uint64_t *out);
TRNDEF trn_result trn_meta_get_f64(const trn_meta *meta, const char *key, double *out);

/* Weights: the model's parameters, by name, as F32. meta may be NULL.
   Load: every parameter must be in the file with the same shape, and the
   file must hold nothing else (TRN_ERR_MISMATCH names the tensor, the file
   and both shapes). F16 and BF16 tensors are converted. If the file has a
   trn.crc32c it is verified. meta_out (may be NULL) receives the file's
   metadata except the kit's own keys. On an error the model's weights may
   have been partly overwritten: do not use them. */
TRNDEF trn_result trn_safetensors_save(const char *path, trn_model *m, const trn_meta *meta);
TRNDEF trn_result trn_safetensors_load(const char *path, trn_model *m, trn_meta *meta_out);

/* Reading any safetensors file tensor by tensor (e.g. Hugging Face GPT-2's
   model.safetensors, names like "h.0.attn.c_attn.weight"):
       trn_safetensors f;
       if (trn_safetensors_open(&f, path) != TRN_OK) ...trn_error_reason()...
       const trn_st_tensor *t = trn_safetensors_find(&f, "wte.weight");
       if (t) rc = trn_safetensors_read(&f, t, host_floats);  (t->numel floats)
       trn_safetensors_close(&f);
   open reads and validates the whole header (the data stays on disk):
   JSON syntax and UTF-8, known dtypes, dtype size * shape == data_offsets
   length, tensors tiling the data section exactly (no overlap, no gap, no
   truncation). Dims are int64 (up to TRN_ST_MAX_DIMS of them). */
#define TRN_ST_MAX_DIMS 8
typedef struct trn_st_tensor {
    const char *name;        /* UTF-8, owned by the trn_safetensors       */
    const char *dtype;       /* "F32", "F16", "BF16", "I64", ...          */
    int dtype_size;          /* bytes per element                         */
    int ndim;                /* 0 for a scalar                            */
    int64_t shape[TRN_ST_MAX_DIMS];
    uint64_t numel;          /* product of shape (1 for a scalar)         */
    uint64_t begin, end;     /* byte range inside the data section        */
} trn_st_tensor;

typedef struct trn_safetensors {
    char path[512];          /* for messages                              */
    FILE *fp;
    uint64_t header_len;     /* N                                         */
    uint64_t data_start;     /* 8 + N                                     */
    uint64_t data_len;       /* bytes of the data section                 */
    trn_st_tensor *tensors;  /* in data order                             */
    int n_tensors;
    const char **meta_key, **meta_val; /* __metadata__, in file order     */
    int n_meta;
    int has_crc;             /* the file carries trn.crc32c               */
    uint32_t crc_stored;     /* its value                                 */
    uint32_t crc_header;     /* CRC-32C of the header's content           */
    size_t crc_pos;          /* where its 8 hex digits sit in the header  */
    char *pool;              /* decoded strings                           */
} trn_safetensors;

TRNDEF trn_result trn_safetensors_open(trn_safetensors *f, const char *path);
TRNDEF void trn_safetensors_close(trn_safetensors *f);
TRNDEF const trn_st_tensor *trn_safetensors_find(const trn_safetensors *f, const char *name);
TRNDEF const char *trn_safetensors_meta(const trn_safetensors *f, const char *key); /* NULL: none */
/* read one tensor into host memory (t->numel floats), converting F16 and
   BF16 to F32; other dtypes give TRN_ERR_FORMAT. Does not check the CRC. */
TRNDEF trn_result trn_safetensors_read(trn_safetensors *f, const trn_st_tensor *t, float *host_dst);
/* read the whole data section and check trn.crc32c (TRN_ERR_CHECKSUM);
   TRN_OK without reading when the file has no checksum (foreign files). */
TRNDEF trn_result trn_safetensors_verify(trn_safetensors *f);
/* CRC-32C (Castagnoli), as in iSCSI and ext4: crc = trn_crc32c(0, p, n),
   continued with trn_crc32c(crc, more, n2). SSE4.2 instruction when built
   with it, a table otherwise. */
TRNDEF uint32_t trn_crc32c(uint32_t crc, const void *data, size_t n);

/* Training state: weights + AdamW moments + optimizer step and
   hyperparameters + your meta, in one file. opt may be NULL (weights only;
   on load the moments in the file are then skipped). Load restores
   opt->step, opt->desc, opt->lo/hi and m, v (allocating them if NULL), so
   the next trn_adamw_step continues the run bit for bit. The file's
   checksum is required and verified. meta_out (may be NULL) receives the
   keys you saved. */
TRNDEF trn_result trn_checkpoint_save(const char *path, trn_model *m, const trn_adamw *opt,
                                      const trn_meta *meta);
TRNDEF trn_result trn_checkpoint_load(const char *path, trn_model *m, trn_adamw *opt,
                                      trn_meta *meta_out);
/* header valid, a train.h checkpoint, checksum right (reads the file) */
TRNDEF trn_result trn_checkpoint_verify(const char *path);

/* Run directories: DIR/ckpt_<step, 8+ digits>.safetensors.
   save_dir creates DIR if needed, writes the checkpoint atomically, reads
   it back to verify it, and only then deletes older checkpoints so that
   the newest `keep` remain (keep <= 0: keep all; checkpoints with a larger
   step than this one, left by an earlier run, are neither counted nor
   deleted) together with stale "*.tmp.<pid>" files of dead processes.
   The written path goes to path_out (may be NULL). */
TRNDEF trn_result trn_checkpoint_save_dir(const char *dir, long long step, int keep, trn_model *m,
                                          const trn_adamw *opt, const trn_meta *meta,
                                          char *path_out, size_t path_cap);
/* The newest checkpoint in DIR that verifies; broken ones are skipped with
   a line on stderr. TRN_ERR_IO: DIR holds no checkpoint at all (start
   fresh). Another error: there are checkpoints but none is valid (do not
   start fresh silently); the reason names the newest one's problem. */
TRNDEF trn_result trn_checkpoint_latest(const char *dir, char *path_out, size_t path_cap,
                                        long long *step_out);

/* <<checkpoint declarations end */

/* ------------------------------------------------------------------------
   >>data declarations
   ------------------------------------------------------------------------ */

/* <<data declarations end */

#ifdef __cplusplus
}
#endif
#endif /* TRAIN_H_INCLUDED */

/* ======================================================================== */
/*                              IMPLEMENTATION                              */
/* ======================================================================== */
#ifdef TRAIN_IMPLEMENTATION
#ifndef TRAIN_IMPLEMENTATION_DONE
#define TRAIN_IMPLEMENTATION_DONE

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__unix__) || defined(__APPLE__)
#include <sys/resource.h>
#include <unistd.h>
#endif

#if defined(TRN_MALLOC) != defined(TRN_FREE)
#error "train.h: define both TRN_MALLOC and TRN_FREE, or neither"
#endif
#ifndef TRN_MALLOC
#define TRN_MALLOC(sz) malloc(sz)
#define TRN_FREE(p) free(p)
#endif

#if defined(__cplusplus)
#define TRN__TLS thread_local
#elif defined(__GNUC__) || defined(__clang__)
#define TRN__TLS __thread
#elif defined(_MSC_VER)
#define TRN__TLS __declspec(thread)
#else
#define TRN__TLS
#endif

#define TRN__MIN(a, b) ((a) < (b) ? (a) : (b))
#define TRN__MAX(a, b) ((a) > (b) ? (a) : (b))

/* ========================================================================
   >>errors
   ======================================================================== */
static TRN__TLS char trn__reason[512];

TRNDEF const char *trn_result_string(trn_result r) {
    switch (r) {
    case TRN_OK: return "TRN_OK";
    case TRN_ERR_INVALID: return "TRN_ERR_INVALID";
    case TRN_ERR_NOMEM: return "TRN_ERR_NOMEM";
    case TRN_ERR_IO: return "TRN_ERR_IO";
    case TRN_ERR_FORMAT: return "TRN_ERR_FORMAT";
    case TRN_ERR_CHECKSUM: return "TRN_ERR_CHECKSUM";
    case TRN_ERR_MISMATCH: return "TRN_ERR_MISMATCH";
    case TRN_ERR_BACKEND: return "TRN_ERR_BACKEND";
    case TRN_ERR_COMM: return "TRN_ERR_COMM";
    case TRN_ERR_TIMEOUT: return "TRN_ERR_TIMEOUT";
    }
    return "TRN_ERR_UNKNOWN";
}

TRNDEF const char *trn_error_reason(void) { return trn__reason; }

TRNDEF trn_result trn_fail(trn_result r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(trn__reason, sizeof trn__reason, fmt, ap);
    va_end(ap);
    return r;
}

TRNDEF void trn_fatal(const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    fputs("train.h: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(3);
}

/* ========================================================================
   >>ledger
   Each host allocation carries a small header just before the pointer the
   caller sees: how many bytes were asked for and under which kind, so
   trn_free can take them off the books. The header lives in the 64 bytes
   of alignment slack, so it costs no extra cache lines of user data.
   ======================================================================== */
typedef struct trn__alloc_header {
    void *raw;        /* what TRN_MALLOC returned          */
    size_t bytes;     /* what the caller asked for         */
    int kind;
    unsigned magic;   /* catches trn_free of a foreign ptr */
} trn__alloc_header;
#define TRN__ALLOC_MAGIC 0x7472616eu /* "tran" */

static struct {
    size_t current[TRN_PLACE_COUNT][TRN_KIND_COUNT];
    size_t peak[TRN_PLACE_COUNT][TRN_KIND_COUNT];
    size_t total[TRN_PLACE_COUNT], peak_total[TRN_PLACE_COUNT];
    void (*device_probe)(size_t *used, size_t *total);
} trn__ledger;

TRNDEF const char *trn_kind_name(trn_kind kind) {
    static const char *names[TRN_KIND_COUNT] = {"weights",   "gradients", "optimizer",
                                                "activations", "temporary", "communication",
                                                "runtime"};
    return (kind >= 0 && kind < TRN_KIND_COUNT) ? names[kind] : "?";
}

TRNDEF void trn_ledger_add(trn_place place, trn_kind kind, long long delta) {
    if (place < 0 || place >= TRN_PLACE_COUNT || kind < 0 || kind >= TRN_KIND_COUNT)
        trn_fatal("trn_ledger_add: bad place %d or kind %d", (int)place, (int)kind);
#ifdef _OPENMP
#pragma omp critical(trn__ledger_lock)
#endif
    {
        size_t *cur = &trn__ledger.current[place][kind];
        size_t *tot = &trn__ledger.total[place];
        size_t d = (size_t)(delta < 0 ? -delta : delta);
        if (delta >= 0) { *cur += d; *tot += d; }
        else { *cur -= TRN__MIN(d, *cur); *tot -= TRN__MIN(d, *tot); }
        if (*cur > trn__ledger.peak[place][kind]) trn__ledger.peak[place][kind] = *cur;
        if (*tot > trn__ledger.peak_total[place]) trn__ledger.peak_total[place] = *tot;
    }
}

TRNDEF void *trn_alloc(size_t bytes, trn_kind kind) {
    char *raw, *user;
    trn__alloc_header *h;
    if (kind < 0 || kind >= TRN_KIND_COUNT) trn_fatal("trn_alloc: bad kind %d", (int)kind);
    if (bytes == 0) bytes = 1;
    if (bytes > (size_t)-1 - 256) { trn_fail(TRN_ERR_NOMEM, "trn_alloc: %zu bytes is too many", bytes); return NULL; }
    raw = (char *)TRN_MALLOC(bytes + 128);
    if (!raw) {
        trn_fail(TRN_ERR_NOMEM, "out of memory: %zu bytes for %s (%.2f GiB already allocated)",
                 bytes, trn_kind_name(kind), trn_ledger_total(TRN_HOST) / 1073741824.0);
        return NULL;
    }
    /* user pointer: 64-byte aligned, with at least 64 bytes of room before it */
    user = (char *)(((uintptr_t)raw + 64 + 63) & ~(uintptr_t)63);
    h = (trn__alloc_header *)(user - sizeof(trn__alloc_header));
    h->raw = raw; h->bytes = bytes; h->kind = (int)kind; h->magic = TRN__ALLOC_MAGIC;
    trn_ledger_add(TRN_HOST, kind, (long long)bytes);
    return user;
}

TRNDEF void *trn_calloc(size_t bytes, trn_kind kind) {
    void *p = trn_alloc(bytes, kind);
    if (p) memset(p, 0, bytes);
    return p;
}

TRNDEF void trn_free(void *p) {
    trn__alloc_header *h;
    if (!p) return;
    h = (trn__alloc_header *)((char *)p - sizeof(trn__alloc_header));
    if (h->magic != TRN__ALLOC_MAGIC) trn_fatal("trn_free: %p was not allocated by trn_alloc", p);
    h->magic = 0;
    trn_ledger_add(TRN_HOST, (trn_kind)h->kind, -(long long)h->bytes);
    TRN_FREE(h->raw);
}

TRNDEF size_t trn_ledger_current(trn_place place, trn_kind kind) { return trn__ledger.current[place][kind]; }
TRNDEF size_t trn_ledger_peak(trn_place place, trn_kind kind) { return trn__ledger.peak[place][kind]; }
TRNDEF size_t trn_ledger_total(trn_place place) { return trn__ledger.total[place]; }
TRNDEF size_t trn_ledger_peak_total(trn_place place) { return trn__ledger.peak_total[place]; }
TRNDEF void trn_ledger_set_device_probe(void (*probe)(size_t *, size_t *)) { trn__ledger.device_probe = probe; }

TRNDEF void trn_ledger_reset_peak(void) {
    memcpy(trn__ledger.peak, trn__ledger.current, sizeof trn__ledger.peak);
    memcpy(trn__ledger.peak_total, trn__ledger.total, sizeof trn__ledger.peak_total);
}

/* RSS counts pages actually touched: malloc'd but untouched memory is not
   resident yet, and freed memory may stay resident in the C allocator.
   On Linux both numbers come from /proc/self/status (VmRSS, VmHWM), so the
   peak is never below the current value. */
#if defined(__linux__)
static size_t trn__proc_status_kb(const char *key) {
    char line[256];
    size_t kb = 0, n = strlen(key);
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0) { kb = (size_t)strtoull(line + n, NULL, 10); break; }
    fclose(f);
    return kb * 1024u;
}
#endif

TRNDEF size_t trn_os_rss(void) {
#if defined(__linux__)
    return trn__proc_status_kb("VmRSS:");
#else
    return 0;
#endif
}

TRNDEF size_t trn_os_peak_rss(void) {
#if defined(__linux__)
    return trn__proc_status_kb("VmHWM:");
#elif defined(__unix__) || defined(__APPLE__)
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
#if defined(__APPLE__)
    return (size_t)ru.ru_maxrss;           /* bytes on macOS */
#else
    return (size_t)ru.ru_maxrss * 1024u;   /* kilobytes on BSDs */
#endif
#else
    return 0;
#endif
}

TRNDEF void trn_ledger_read(trn_ledger_snapshot *s) {
    memset(s, 0, sizeof *s);
    memcpy(s->current, trn__ledger.current, sizeof s->current);
    memcpy(s->peak, trn__ledger.peak, sizeof s->peak);
    memcpy(s->peak_total, trn__ledger.peak_total, sizeof s->peak_total);
    s->rss = trn_os_rss();
    s->peak_rss = trn_os_peak_rss();
    if (trn__ledger.device_probe) trn__ledger.device_probe(&s->device_used, &s->device_total);
}

/* "1.234 GiB", "12.0 MiB", "512 B" */
static const char *trn__human(size_t bytes, char *buf, size_t n) {
    double b = (double)bytes;
    if (b >= 1073741824.0) snprintf(buf, n, "%.3f GiB", b / 1073741824.0);
    else if (b >= 1048576.0) snprintf(buf, n, "%.1f MiB", b / 1048576.0);
    else if (b >= 1024.0) snprintf(buf, n, "%.1f KiB", b / 1024.0);
    else snprintf(buf, n, "%zu B", bytes);
    return buf;
}

static int trn__ledger_has_device(const trn_ledger_snapshot *s) {
    int k;
    for (k = 0; k < TRN_KIND_COUNT; k++) if (s->peak[TRN_DEVICE][k]) return 1;
    return s->device_total != 0;
}

TRNDEF void trn_ledger_print(const char *title) {
    trn_ledger_snapshot s;
    char a[32], b[32], c[32], d[32];
    size_t tot[2] = {0, 0};
    int k, dev;
    trn_ledger_read(&s);
    dev = trn__ledger_has_device(&s);
    printf("-- %s --\n", title ? title : "memory ledger");
    printf("  %-14s %13s %13s", "kind", "host now", "host peak");
    if (dev) printf(" %13s %13s", "device now", "device peak");
    printf("\n");
    for (k = 0; k < TRN_KIND_COUNT; k++) {
        if (!s.peak[TRN_HOST][k] && !s.peak[TRN_DEVICE][k]) continue;
        printf("  %-14s %13s %13s", trn_kind_name((trn_kind)k), trn__human(s.current[TRN_HOST][k], a, 32),
               trn__human(s.peak[TRN_HOST][k], b, 32));
        if (dev) printf(" %13s %13s", trn__human(s.current[TRN_DEVICE][k], c, 32), trn__human(s.peak[TRN_DEVICE][k], d, 32));
        printf("\n");
        tot[0] += s.current[TRN_HOST][k]; tot[1] += s.current[TRN_DEVICE][k];
    }
    printf("  %-14s %13s %13s", "total (kit)", trn__human(tot[0], a, 32), trn__human(s.peak_total[TRN_HOST], b, 32));
    if (dev) printf(" %13s %13s", trn__human(tot[1], c, 32), trn__human(s.peak_total[TRN_DEVICE], d, 32));
    printf("\n  %-14s %13s %13s", "OS: RSS", trn__human(s.rss, a, 32), trn__human(s.peak_rss, b, 32));
    if (dev && s.device_total) printf("   driver: %s used of %s", trn__human(s.device_used, c, 32), trn__human(s.device_total, d, 32));
    printf("\n");
}

TRNDEF void trn_ledger_print_diff(const char *title, const trn_ledger_snapshot *before,
                                  const trn_ledger_snapshot *after) {
    char a[32], b[32];
    int p, k, any = 0;
    printf("  %-28s", title ? title : "");
    for (p = 0; p < TRN_PLACE_COUNT; p++)
        for (k = 0; k < TRN_KIND_COUNT; k++) {
            long long d = (long long)after->current[p][k] - (long long)before->current[p][k];
            if (!d) continue;
            printf(" %s%s%c%s", p == TRN_DEVICE ? "dev:" : "", trn_kind_name((trn_kind)k), d > 0 ? '+' : '-',
                   trn__human((size_t)(d > 0 ? d : -d), a, 32));
            any = 1;
        }
    if (!any) printf(" (no change)");
    {
        long long dr = (long long)after->rss - (long long)before->rss;
        printf("   | RSS %c%s -> %s\n", dr >= 0 ? '+' : '-', trn__human((size_t)(dr >= 0 ? dr : -dr), a, 32),
               trn__human(after->rss, b, 32));
    }
}

/* ========================================================================
   >>rng
   ======================================================================== */
TRNDEF void trn_rng_seed(trn_rng *r, uint64_t seed) { r->state = seed; }

TRNDEF uint64_t trn_rng_next(trn_rng *r) {
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

TRNDEF float trn_rng_uniform(trn_rng *r) { return (float)(trn_rng_next(r) >> 40) * (1.0f / 16777216.0f); }

TRNDEF float trn_rng_normal(trn_rng *r) {
    /* Box-Muller: two uniforms in (0,1) -> one standard normal (the second
       one is dropped so that the state stays a single integer) */
    double u1 = ((double)(trn_rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    double u2 = ((double)(trn_rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* multiply-shift: maps 32 random bits onto [0,n); bias < n/2^32, negligible */
TRNDEF uint32_t trn_rng_below(trn_rng *r, uint32_t n) {
    return (uint32_t)(((trn_rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

TRNDEF void trn_rng_shuffle(trn_rng *r, int *a, int n) {
    int i;
    for (i = n - 1; i > 0; i--) {
        int j = (int)trn_rng_below(r, (uint32_t)i + 1), t = a[i];
        a[i] = a[j]; a[j] = t;
    }
}

/* ========================================================================
   >>tensor
   ======================================================================== */
TRNDEF size_t trn_shape_size(int ndim, const int *shape) {
    size_t n = 1;
    int i;
    for (i = 0; i < ndim; i++) n *= (size_t)shape[i];
    return n;
}

TRNDEF const char *trn_shape_str(const trn_tensor *t, char *buf, size_t n) {
    size_t len = 0;
    int i;
    if (!t) { snprintf(buf, n, "(null)"); return buf; }
    len += (size_t)snprintf(buf, n, "(");
    for (i = 0; i < t->ndim && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, i ? ",%d" : "%d", t->shape[i]);
    if (len < n) snprintf(buf + len, n - len, ")");
    return buf;
}

TRNDEF void trn_set_threads(int n) {
#ifdef _OPENMP
    if (n > 0) omp_set_num_threads(n);
#else
    (void)n;
#endif
}

TRNDEF int trn_get_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* ========================================================================
   >>ops
   Each op: forward directly above its backward. N is the number of rows
   (B*T for a sequence model), C the channels. Backward ACCUMULATES into
   the gradient arrays (+=), so gradients of a tensor used twice add up and
   gradient accumulation over micro-batches works; a NULL gradient output
   means "not needed" and is skipped.
   Parallel loops use a static schedule and never reduce across threads in
   an order that depends on timing: same thread count => same bits.
   ======================================================================== */

/* --- linear: out = inp @ w^T + bias ------------------------------------
   inp (N,C), w (OC,C) as PyTorch's nn.Linear stores it, bias (OC) or NULL,
   out (N,OC). Saved for backward: inp and w (they are still alive).
   Backward, the chain rule for y = x W^T + b:
     dinp (N,C)  += dout (N,OC) @ w (OC,C)
     dw   (OC,C) += dout^T (OC,N) @ inp (N,C)
     dbias (OC)  += sum over rows of dout                                   */
TRNDEF void trn_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                               int N, int C, int OC) {
    trn_sgemm(0, 1, N, OC, C, 1.0f, inp, C, w, C, 0.0f, out, OC);
    if (bias) {
        int n;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
        for (n = 0; n < N; n++) {
            float *o = out + (size_t)n * OC;
            int j;
            for (j = 0; j < OC; j++) o[j] += bias[j];
        }
    }
}

/* sum the rows of x (N,C) into dst (C), column blocks split over threads so
   each column is summed by one thread, in row order */
static void trn__sum_rows(float *dst, const float *x, int N, int C) {
    int blk;
    int nblk = (C + 63) / 64;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (blk = 0; blk < nblk; blk++) {
        int c0 = blk * 64, c1 = TRN__MIN(C, c0 + 64), n, c;
        float acc[64];
        for (c = c0; c < c1; c++) acc[c - c0] = 0.0f;
        for (n = 0; n < N; n++) {
            const float *row = x + (size_t)n * C;
            for (c = c0; c < c1; c++) acc[c - c0] += row[c];
        }
        for (c = c0; c < c1; c++) dst[c] += acc[c - c0];
    }
}

TRNDEF void trn_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                                const float *inp, const float *w, int N, int C, int OC) {
    if (dinp) trn_sgemm(0, 0, N, C, OC, 1.0f, dout, OC, w, C, 1.0f, dinp, C);
    if (dw) trn_sgemm(1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C);
    if (dbias) trn__sum_rows(dbias, dout, N, OC);
}

/* --- embedding: out[n] = table[ids[n]] -----------------------------------
   ids (N) ints in [0,V), table (V,C), out (N,C). Saved: ids.
   Backward scatters: dtable[ids[n]] += dout[n]. Two rows with the same id
   add into the same row, so threads split the channels, not the rows.   */
TRNDEF void trn_embedding_forward(float *out, const int *ids, const float *table, int N, int C) {
    int n;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (n = 0; n < N; n++) memcpy(out + (size_t)n * C, table + (size_t)ids[n] * C, sizeof(float) * (size_t)C);
}

TRNDEF void trn_embedding_backward(float *dtable, const float *dout, const int *ids, int N, int C) {
    int blk, nblk = (C + 63) / 64;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (blk = 0; blk < nblk; blk++) {
        int c0 = blk * 64, c1 = TRN__MIN(C, c0 + 64), n, c;
        for (n = 0; n < N; n++) {
            float *d = dtable + (size_t)ids[n] * C;
            const float *g = dout + (size_t)n * C;
            for (c = c0; c < c1; c++) d[c] += g[c];
        }
    }
}

/* --- layernorm (Ba, Kiros, Hinton 2016; PyTorch nn.LayerNorm, eps 1e-5) --
   inp, out (N,C); w, b (C). Saved: mean (N), rstd (N) = 1/sqrt(var+eps).
   With xhat = (x - mean) * rstd and y = xhat * w + b, backward is
     dw += sum_n dout * xhat,   db += sum_n dout,
     dx += rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)),  g = dout * w  */
TRNDEF void trn_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                  const float *w, const float *b, int N, int C) {
    int n;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
        double m = 0.0, v = 0.0;
        float s;
        int i;
        for (i = 0; i < C; i++) m += x[i];
        m /= C;
        for (i = 0; i < C; i++) v += (x[i] - m) * (x[i] - m);
        v /= C;
        s = (float)(1.0 / sqrt(v + 1e-5));
        for (i = 0; i < C; i++) y[i] = ((x[i] - (float)m) * s) * w[i] + b[i];
        mean[n] = (float)m;
        rstd[n] = s;
    }
}

TRNDEF void trn_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                   const float *inp, const float *w, const float *mean,
                                   const float *rstd, int N, int C) {
    int n, blk, nblk = (C + 63) / 64;
    if (dinp) {
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
        for (n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
            float *dx = dinp + (size_t)n * C;
            float m = mean[n], s = rstd[n], mg = 0.0f, mgx = 0.0f;
            int i;
            for (i = 0; i < C; i++) {
                float xhat = (x[i] - m) * s, gi = g[i] * w[i];
                mg += gi;
                mgx += gi * xhat;
            }
            mg /= C;
            mgx /= C;
            for (i = 0; i < C; i++) {
                float xhat = (x[i] - m) * s;
                dx[i] += s * (g[i] * w[i] - mg - xhat * mgx);
            }
        }
    }
    if (!dw && !db) return;
    /* parameter grads: a sum over rows, so split the channels over threads */
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (blk = 0; blk < nblk; blk++) {
        int c0 = blk * 64, c1 = TRN__MIN(C, c0 + 64), r, c;
        float aw[64], ab[64];
        for (c = 0; c < 64; c++) aw[c] = ab[c] = 0.0f;
        for (r = 0; r < N; r++) {
            const float *x = inp + (size_t)r * C, *g = dout + (size_t)r * C;
            float m = mean[r], s = rstd[r];
            for (c = c0; c < c1; c++) {
                aw[c - c0] += g[c] * ((x[c] - m) * s);
                ab[c - c0] += g[c];
            }
        }
        for (c = c0; c < c1; c++) {
            if (dw) dw[c] += aw[c - c0];
            if (db) db[c] += ab[c - c0];
        }
    }
}

/* --- GELU, tanh form as in GPT-2 (Hendrycks & Gimpel 2016) --------------
   y = 0.5 x (1 + tanh(k (x + 0.044715 x^3))),  k = sqrt(2/pi).
   Saved: the input x (backward recomputes tanh from it).                 */
#define TRN__GELU_K 0.7978845608028654f
TRNDEF void trn_gelu_forward(float *out, const float *inp, size_t n) {
    ptrdiff_t i;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (i = 0; i < (ptrdiff_t)n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(TRN__GELU_K * (x + 0.044715f * x * x * x)));
    }
}

TRNDEF void trn_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    ptrdiff_t i;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (i = 0; i < (ptrdiff_t)n; i++) {
        float x = inp[i];
        float t = tanhf(TRN__GELU_K * (x + 0.044715f * x * x * x));
        float dt = (1.0f - t * t) * TRN__GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] += dout[i] * (0.5f * (1.0f + t) + 0.5f * x * dt);
    }
}

/* --- ReLU: y = max(x, 0). Saved: the output (y > 0 <=> x > 0). ---------- */
TRNDEF void trn_relu_forward(float *out, const float *inp, size_t n) {
    ptrdiff_t i;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (i = 0; i < (ptrdiff_t)n; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

TRNDEF void trn_relu_backward(float *dinp, const float *out, const float *dout, size_t n) {
    ptrdiff_t i;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (i = 0; i < (ptrdiff_t)n; i++) if (out[i] > 0.0f) dinp[i] += dout[i];
}

/* --- residual add: out = a + b; backward: da += dout, db += dout --------- */
TRNDEF void trn_add_forward(float *out, const float *a, const float *b, size_t n) {
    ptrdiff_t i;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (i = 0; i < (ptrdiff_t)n; i++) out[i] = a[i] + b[i];
}

TRNDEF void trn_accumulate(float *dst, const float *src, size_t n) {
    ptrdiff_t i;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (i = 0; i < (ptrdiff_t)n; i++) dst[i] += src[i];
}

/* --- multi-head self-attention (Vaswani et al. 2017) ---------------------
   qkv (B,T,3C): for each position the C query channels, then C key, then
   C value channels; head h owns channels [h*hs, (h+1)*hs), hs = C/NH.
   out (B,T,C) with the heads side by side. att (B,NH,T,T) is saved for
   backward: the softmax probabilities P (zero above the diagonal when
   causal). Per (b,h), with Q,K,V (T,hs) strided views into qkv:
     S = Q K^T / sqrt(hs);  P = softmax_rows(S, mask);  O = P V
   Backward (scratch (B,NH,T,T) holds dP, then dS):
     dP = dO V^T;  dV += P^T dO;  dS = P * (dP - rowsum(dP * P));
     dQ += dS K / sqrt(hs);  dK += dS^T Q / sqrt(hs)
   Heads are independent, so threads split the (b,h) pairs; each GEMM is
   then run single-threaded inside its thread.                            */
TRNDEF void trn_attention_forward(float *out, float *att, const float *qkv,
                                  int B, int T, int C, int NH, int causal) {
    int bh, hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH, t, s;
        const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs;
        const float *k = q + C, *v = q + 2 * C;
        float *P = att + (size_t)bh * T * T;
        trn_sgemm(0, 1, T, T, hs, scale, q, C3, k, C3, 0.0f, P, T);
        for (t = 0; t < T; t++) {
            float *row = P + (size_t)t * T, mx = -INFINITY, sum = 0.0f;
            int last = causal ? t : T - 1; /* causal: position t sees 0..t */
            for (s = 0; s <= last; s++) mx = row[s] > mx ? row[s] : mx;
            for (s = 0; s <= last; s++) { row[s] = expf(row[s] - mx); sum += row[s]; }
            for (s = 0; s <= last; s++) row[s] /= sum;
            for (s = last + 1; s < T; s++) row[s] = 0.0f;
        }
        trn_sgemm(0, 0, T, hs, T, 1.0f, P, T, v, C3, 0.0f, out + (size_t)b * T * C + (size_t)h * hs, C);
    }
}

TRNDEF void trn_attention_backward(float *dqkv, float *scratch, const float *dout,
                                   const float *qkv, const float *att,
                                   int B, int T, int C, int NH, int causal) {
    int bh, hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    (void)causal; /* masked entries have P = 0, hence dS = 0: no special case */
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH, t, s;
        size_t qoff = (size_t)b * T * C3 + (size_t)h * hs;
        const float *q = qkv + qoff, *k = q + C, *v = q + 2 * C;
        float *dq = dqkv + qoff, *dk = dq + C, *dv = dq + 2 * C;
        const float *dO = dout + (size_t)b * T * C + (size_t)h * hs;
        const float *P = att + (size_t)bh * T * T;
        float *dS = scratch + (size_t)bh * T * T;
        trn_sgemm(0, 1, T, T, hs, 1.0f, dO, C, v, C3, 0.0f, dS, T);   /* dP = dO V^T */
        trn_sgemm(1, 0, T, hs, T, 1.0f, P, T, dO, C, 1.0f, dv, C3);   /* dV += P^T dO */
        for (t = 0; t < T; t++) {
            const float *p = P + (size_t)t * T;
            float *d = dS + (size_t)t * T, dot = 0.0f;
            for (s = 0; s < T; s++) dot += p[s] * d[s];
            for (s = 0; s < T; s++) d[s] = p[s] * (d[s] - dot);
        }
        trn_sgemm(0, 0, T, hs, T, scale, dS, T, k, C3, 1.0f, dq, C3); /* dQ += dS K */
        trn_sgemm(1, 0, T, hs, T, scale, dS, T, q, C3, 1.0f, dk, C3); /* dK += dS^T Q */
    }
}

/* --- fused softmax + cross-entropy ---------------------------------------
   logits (N,Vp) of which the first V columns are real classes (GPT-2 pads
   its vocabulary 50257 -> 50304 for faster matmuls), targets (N) in [0,V).
   losses[n] = logsumexp(logits[n,:V]) - logits[n,target].
   Saved: lse (N), the log-sum-exp per row, instead of the (N,V) softmax:
   backward recomputes p = exp(logit - lse), which costs one exp per logit
   and saves N*V floats.
   Backward, with dloss the gradient of each row's loss (1/N for a mean):
     dlogits[n,v] += dloss * (p[n,v] - [v == target[n]]);  padding gets 0. */
TRNDEF void trn_crossentropy_forward(float *losses, float *lse, const float *logits,
                                     const int *targets, int N, int V, int Vp) {
    int n;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * Vp;
        float mx = -INFINITY;
        double sum = 0.0;
        int v;
        for (v = 0; v < V; v++) mx = l[v] > mx ? l[v] : mx;
        for (v = 0; v < V; v++) sum += expf(l[v] - mx);
        lse[n] = mx + (float)log(sum);
        losses[n] = lse[n] - l[targets[n]];
    }
}

TRNDEF void trn_crossentropy_backward(float *dlogits, const float *logits, const float *lse,
                                      const int *targets, float dloss, int N, int V, int Vp) {
    int n;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * Vp;
        float *d = dlogits + (size_t)n * Vp, m = lse[n];
        int v;
        for (v = 0; v < V; v++) d[v] += dloss * expf(l[v] - m);
        d[targets[n]] -= dloss;
    }
}

/* --- mean squared error: losses[i] = (pred[i] - target[i])^2 ------------
   Backward: dpred += dloss * 2 (pred - target), dloss = 1/n for a mean.  */
TRNDEF void trn_mse_forward(float *losses, const float *pred, const float *target, size_t n) {
    ptrdiff_t i;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (i = 0; i < (ptrdiff_t)n; i++) { float d = pred[i] - target[i]; losses[i] = d * d; }
}

TRNDEF void trn_mse_backward(float *dpred, const float *pred, const float *target, float dloss,
                             size_t n) {
    ptrdiff_t i;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (i = 0; i < (ptrdiff_t)n; i++) dpred[i] += dloss * 2.0f * (pred[i] - target[i]);
}

/* --- mean pool over positions: (B,T,C) -> (B,C); dinp += dout / T ------- */
TRNDEF void trn_meanpool_forward(float *out, const float *inp, int B, int T, int C) {
    int b;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (b = 0; b < B; b++) {
        float *o = out + (size_t)b * C;
        int t, c;
        for (c = 0; c < C; c++) o[c] = 0.0f;
        for (t = 0; t < T; t++)
            for (c = 0; c < C; c++) o[c] += inp[((size_t)b * T + t) * C + c];
        for (c = 0; c < C; c++) o[c] /= (float)T;
    }
}

TRNDEF void trn_meanpool_backward(float *dinp, const float *dout, int B, int T, int C) {
    int b;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (b = 0; b < B; b++) {
        int t, c;
        for (t = 0; t < T; t++)
            for (c = 0; c < C; c++) dinp[((size_t)b * T + t) * C + c] += dout[(size_t)b * C + c] / (float)T;
    }
}

/* --- AdamW update over a contiguous slice (Loshchilov & Hutter 2019) -----
   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
   p -= lr * ( (m/bc1) / (sqrt(v/bc2) + eps) + weight_decay * p )
   bc1 = 1 - b1^t, bc2 = 1 - b2^t are the bias corrections for step t.
   Weight decay is decoupled: it shrinks p directly, not through g.       */
TRNDEF void trn_adamw_update(float *p, const float *g, float *m, float *v, size_t n, float lr,
                             float beta1, float beta2, float eps, float weight_decay,
                             float bias_corr1, float bias_corr2) {
    ptrdiff_t i;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (i = 0; i < (ptrdiff_t)n; i++) {
        float gi = g[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] -= lr * ((mi / bias_corr1) / (sqrtf(vi / bias_corr2) + eps) + weight_decay * p[i]);
    }
}

/* sum of squares in double; each thread sums a fixed slice, slices are then
   added in thread order, so the result depends only on the thread count */
TRNDEF double trn_sum_squares(const float *x, size_t n) {
    double parts[256];
    int nt = 1, t;
    double total = 0.0;
#ifdef _OPENMP
    nt = TRN__MIN(omp_get_max_threads(), 256);
#endif
    for (t = 0; t < nt; t++) parts[t] = 0.0;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
    for (t = 0; t < nt; t++) {
        size_t lo = n * (size_t)t / (size_t)nt, hi = n * (size_t)(t + 1) / (size_t)nt, i;
        double s = 0.0;
        for (i = lo; i < hi; i++) s += (double)x[i] * x[i];
        parts[t] = s;
    }
    for (t = 0; t < nt; t++) total += parts[t];
    return total;
}

TRNDEF void trn_scale(float *x, float s, size_t n) {
    ptrdiff_t i;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (i = 0; i < (ptrdiff_t)n; i++) x[i] *= s;
}

/* images (B,H,W,Ch) -> patches (B, (H/P)*(W/P), P*P*Ch): patch (py,px) in
   row-major order, inside a patch rows, then columns, then channels. A
   linear layer on the patches is the ViT "patch embedding" (a conv with
   stride P, written as a matmul). */
TRNDEF void trn_patchify(float *out, const float *img, int B, int H, int W, int Ch, int P) {
    int b, py, px, dy, gh = H / P, gw = W / P;
    if (P <= 0 || H % P || W % P) trn_fatal("trn_patchify: image %dx%d is not divisible by patch %d", H, W, P);
    for (b = 0; b < B; b++)
        for (py = 0; py < gh; py++)
            for (px = 0; px < gw; px++) {
                float *o = out + (((size_t)b * gh + py) * gw + px) * (size_t)(P * P * Ch);
                for (dy = 0; dy < P; dy++) {
                    const float *row = img + (((size_t)b * H + py * P + dy) * W + (size_t)px * P) * Ch;
                    memcpy(o + (size_t)dy * P * Ch, row, sizeof(float) * (size_t)(P * Ch));
                }
            }
}

/* ========================================================================
   >>backend (CPU): the table points at the functions above
   ======================================================================== */
static void trn__cpu_zero(void *p, size_t bytes) { memset(p, 0, bytes); }
static void trn__cpu_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void trn__cpu_sync(void) {}

TRNDEF const trn_backend *trn_cpu_backend(void) {
    static trn_backend cpu;
    if (!cpu.name) {
        cpu.place = TRN_HOST;
        cpu.alloc = trn_alloc;
        cpu.free = trn_free;
        cpu.zero = trn__cpu_zero;
        cpu.upload = trn__cpu_copy;
        cpu.download = trn__cpu_copy;
        cpu.copy = trn__cpu_copy;
        cpu.sync = trn__cpu_sync;
        cpu.matmul_forward = trn_matmul_forward;
        cpu.matmul_backward = trn_matmul_backward;
        cpu.embedding_forward = trn_embedding_forward;
        cpu.embedding_backward = trn_embedding_backward;
        cpu.layernorm_forward = trn_layernorm_forward;
        cpu.layernorm_backward = trn_layernorm_backward;
        cpu.gelu_forward = trn_gelu_forward;
        cpu.gelu_backward = trn_gelu_backward;
        cpu.relu_forward = trn_relu_forward;
        cpu.relu_backward = trn_relu_backward;
        cpu.add_forward = trn_add_forward;
        cpu.accumulate = trn_accumulate;
        cpu.attention_forward = trn_attention_forward;
        cpu.attention_backward = trn_attention_backward;
        cpu.crossentropy_forward = trn_crossentropy_forward;
        cpu.crossentropy_backward = trn_crossentropy_backward;
        cpu.mse_forward = trn_mse_forward;
        cpu.mse_backward = trn_mse_backward;
        cpu.meanpool_forward = trn_meanpool_forward;
        cpu.meanpool_backward = trn_meanpool_backward;
        cpu.adamw_update = trn_adamw_update;
        cpu.sum_squares = trn_sum_squares;
        cpu.scale = trn_scale;
        cpu.name = "cpu";
    }
    return &cpu;
}

/* ========================================================================
   >>tape
   ======================================================================== */
#define TRN__TBLOCK 256 /* tensor headers per block of the host pool */

TRNDEF trn_result trn_model_init(trn_model *m, const trn_backend *backend) {
    if (!m) return trn_fail(TRN_ERR_INVALID, "trn_model_init: model is NULL");
    memset(m, 0, sizeof *m);
    m->backend = backend ? backend : trn_cpu_backend();
    m->grad_enabled = 1;
    return TRN_OK;
}

static void trn__check_shape(const char *who, const char *name, int ndim, const int *shape) {
    int i;
    if (ndim < 1 || ndim > TRN_MAX_DIMS || !shape) trn_fatal("%s %s: ndim %d (must be 1..%d)", who, name ? name : "", ndim, TRN_MAX_DIMS);
    for (i = 0; i < ndim; i++)
        if (shape[i] <= 0) trn_fatal("%s %s: dimension %d is %d (must be > 0)", who, name ? name : "", i, shape[i]);
}

static void trn__fill_header(trn_tensor *t, const char *name, int ndim, const int *shape) {
    int i;
    memset(t, 0, sizeof *t);
    t->ndim = ndim;
    for (i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->size = trn_shape_size(ndim, shape);
    if (name) { strncpy(t->name, name, sizeof t->name - 1); }
}

TRNDEF trn_tensor *trn_param(trn_model *m, const char *name, int ndim, const int *shape) {
    trn_tensor *t;
    if (!m || !name) trn_fatal("trn_param: model or name is NULL");
    if (m->param_data) trn_fatal("trn_param %s: declare every parameter before trn_model_alloc", name);
    trn__check_shape("trn_param", name, ndim, shape);
    if (trn_model_find(m, name)) trn_fatal("trn_param: duplicate parameter name '%s'", name);
    if (m->n_params == m->cap_params) {
        int cap = m->cap_params ? 2 * m->cap_params : 64;
        trn_tensor **p = (trn_tensor **)trn_alloc(sizeof(trn_tensor *) * (size_t)cap, TRN_KIND_RUNTIME);
        if (!p) trn_fatal("trn_param: %s", trn_error_reason());
        if (m->params) memcpy(p, m->params, sizeof(trn_tensor *) * (size_t)m->n_params);
        trn_free(m->params);
        m->params = p;
        m->cap_params = cap;
    }
    t = (trn_tensor *)trn_alloc(sizeof(trn_tensor), TRN_KIND_RUNTIME);
    if (!t) trn_fatal("trn_param: %s", trn_error_reason());
    trn__fill_header(t, name, ndim, shape);
    t->offset = m->n_floats;   /* its place in the flat buffers */
    t->is_param = 1;
    t->requires_grad = 1;
    t->decay = ndim >= 2;      /* matrices decay; biases and norms don't */
    m->n_floats += t->size;
    m->params[m->n_params++] = t;
    return t;
}

TRNDEF trn_tensor *trn_param1(trn_model *m, const char *name, int d0) { return trn_param(m, name, 1, &d0); }
TRNDEF trn_tensor *trn_param2(trn_model *m, const char *name, int d0, int d1) {
    int s[2];
    s[0] = d0; s[1] = d1;
    return trn_param(m, name, 2, s);
}

TRNDEF trn_tensor *trn_model_find(trn_model *m, const char *name) {
    int i;
    if (!m || !name) return NULL;
    for (i = 0; i < m->n_params; i++) if (strcmp(m->params[i]->name, name) == 0) return m->params[i];
    return NULL;
}

TRNDEF trn_result trn_model_alloc(trn_model *m) {
    int i;
    if (!m || m->n_params == 0) return trn_fail(TRN_ERR_INVALID, "trn_model_alloc: no parameters declared");
    if (m->param_data) return TRN_OK;
    m->param_data = (float *)m->backend->alloc(m->n_floats * sizeof(float), TRN_KIND_WEIGHTS);
    if (!m->param_data) return trn_fail(TRN_ERR_NOMEM, "trn_model_alloc: %s", trn_error_reason());
    m->backend->zero(m->param_data, m->n_floats * sizeof(float));
    for (i = 0; i < m->n_params; i++) m->params[i]->data = m->param_data + m->params[i]->offset;
    return TRN_OK;
}

TRNDEF trn_result trn_model_alloc_grads(trn_model *m) {
    int i;
    if (!m || !m->param_data) return trn_fail(TRN_ERR_INVALID, "trn_model_alloc_grads: call trn_model_alloc first");
    if (m->grad_data) return TRN_OK;
    m->grad_data = (float *)m->backend->alloc(m->n_floats * sizeof(float), TRN_KIND_GRADS);
    if (!m->grad_data) return trn_fail(TRN_ERR_NOMEM, "trn_model_alloc_grads: %s", trn_error_reason());
    m->backend->zero(m->grad_data, m->n_floats * sizeof(float));
    for (i = 0; i < m->n_params; i++) m->params[i]->grad = m->grad_data + m->params[i]->offset;
    return TRN_OK;
}

static void trn__arena_free_all(trn_model *m) {
    int i;
    for (i = 0; i < m->arena.n_spill; i++) m->backend->free(m->arena.spill[i]);
    free(m->arena.spill);
    m->arena.spill = NULL;
    m->arena.n_spill = 0;
    if (m->arena.base) m->backend->free(m->arena.base);
    m->arena.base = NULL;
    m->arena.cap = m->arena.used = 0;
}

TRNDEF void trn_model_free(trn_model *m) {
    int i;
    if (!m) return;
    trn__arena_free_all(m);
    for (i = 0; i < m->n_tblocks; i++) trn_free(m->tblocks[i]);
    free(m->tblocks);
    if (m->param_data) m->backend->free(m->param_data);
    if (m->grad_data) m->backend->free(m->grad_data);
    for (i = 0; i < m->n_params; i++) trn_free(m->params[i]);
    trn_free(m->params);
    trn_free(m->tape);
    memset(m, 0, sizeof *m);
}

TRNDEF void trn_zero_grad(trn_model *m) {
    if (m && m->grad_data) m->backend->zero(m->grad_data, m->n_floats * sizeof(float));
}

/* The arena hands out backend memory by bumping an offset. The first step
   does not know how much it needs: what does not fit in the base block
   goes to "spill" blocks. trn_reset then replaces base + spills by one
   block as large as the most any step has used, so from the second step
   on a step costs no allocation at all. */
TRNDEF void *trn_arena_alloc(trn_model *m, size_t bytes) {
    trn_arena *a = &m->arena;
    size_t need = (bytes + 63) & ~(size_t)63;
    void *p;
    if (a->base && a->used + need <= a->cap) {
        p = a->base + a->used;
        a->used += need;
    } else {
        char **s = (char **)realloc(a->spill, sizeof(char *) * (size_t)(a->n_spill + 1));
        if (!s) trn_fatal("trn_arena_alloc: out of host memory for the spill table");
        a->spill = s;
        p = m->backend->alloc(need, TRN_KIND_ACTIVATIONS);
        if (!p) {
            trn_ledger_print("out of memory");
            trn_fatal("activations: cannot allocate %zu bytes: %s", need, trn_error_reason());
        }
        a->spill[a->n_spill++] = (char *)p;
        a->spilled += need;
    }
    if (a->used + a->spilled > a->high) a->high = a->used + a->spilled;
    return p;
}

static trn_tensor *trn__header(trn_model *m) {
    int blk = m->t_used / TRN__TBLOCK;
    if (blk == m->n_tblocks) {
        trn_tensor **b = (trn_tensor **)realloc(m->tblocks, sizeof(trn_tensor *) * (size_t)(m->n_tblocks + 1));
        if (!b) trn_fatal("trn_tensor_new: out of host memory");
        m->tblocks = b;
        m->tblocks[m->n_tblocks] = (trn_tensor *)trn_alloc(sizeof(trn_tensor) * TRN__TBLOCK, TRN_KIND_RUNTIME);
        if (!m->tblocks[m->n_tblocks]) trn_fatal("trn_tensor_new: %s", trn_error_reason());
        m->n_tblocks++;
    }
    return &m->tblocks[blk][m->t_used++ % TRN__TBLOCK];
}

TRNDEF void trn_reset(trn_model *m) {
    trn_arena *a = &m->arena;
    if (a->n_spill) {
        size_t want = a->high;
        trn__arena_free_all(m);
        a->base = (char *)m->backend->alloc(want, TRN_KIND_ACTIVATIONS);
        if (!a->base) {
            trn_ledger_print("out of memory");
            trn_fatal("activations: cannot allocate the %zu-byte arena: %s", want, trn_error_reason());
        }
        a->cap = want;
    }
    a->used = 0;
    a->spilled = 0;
    m->t_used = 0;
    m->tape_len = 0;
}

TRNDEF trn_tensor *trn_tensor_new(trn_model *m, const char *name, int ndim, const int *shape) {
    trn_tensor *t;
    trn__check_shape("trn_tensor_new", name, ndim, shape);
    t = trn__header(m);
    trn__fill_header(t, name, ndim, shape);
    t->data = (float *)trn_arena_alloc(m, t->size * sizeof(float));
    return t;
}

TRNDEF trn_tensor *trn_input(trn_model *m, const char *name, int ndim, const int *shape,
                             const float *host) {
    trn_tensor *t = trn_tensor_new(m, name, ndim, shape);
    if (host) m->backend->upload(t->data, host, t->size * sizeof(float));
    return t;
}

/* the gradient of an activation appears (zeroed) the first time backward
   needs it; parameters point into the flat gradient buffer */
static float *trn__grad(trn_model *m, trn_tensor *t) {
    if (!t->grad) {
        t->grad = (float *)trn_arena_alloc(m, t->size * sizeof(float));
        m->backend->zero(t->grad, t->size * sizeof(float));
    }
    return t->grad;
}

/* gradient pointer for an input, or NULL when that input needs none */
static float *trn__want(trn_model *m, trn_tensor *t) {
    return (t && t->requires_grad) ? trn__grad(m, t) : NULL;
}

static trn_tape_entry *trn__record(trn_model *m, const char *op, trn_backward_fn bw, trn_tensor *out,
                                   trn_tensor *a, trn_tensor *b, trn_tensor *c) {
    trn_tape_entry *e;
    out->requires_grad = (a && a->requires_grad) || (b && b->requires_grad) || (c && c->requires_grad);
    if (!m->grad_enabled || !out->requires_grad) { out->requires_grad = 0; return NULL; }
    if (m->tape_len == m->tape_cap) {
        int cap = m->tape_cap ? 2 * m->tape_cap : 256;
        trn_tape_entry *nt = (trn_tape_entry *)trn_alloc(sizeof(trn_tape_entry) * (size_t)cap, TRN_KIND_RUNTIME);
        if (!nt) trn_fatal("tape: %s", trn_error_reason());
        if (m->tape) memcpy(nt, m->tape, sizeof(trn_tape_entry) * (size_t)m->tape_len);
        trn_free(m->tape);
        m->tape = nt;
        m->tape_cap = cap;
    }
    e = &m->tape[m->tape_len++];
    memset(e, 0, sizeof *e);
    e->op = op; e->backward = bw; e->out = out;
    e->in[0] = a; e->in[1] = b; e->in[2] = c;
    return e;
}

TRNDEF void trn_backward(trn_model *m, trn_tensor *loss) {
    float one = 1.0f;
    int i;
    if (!m || !loss) trn_fatal("trn_backward: model or loss is NULL");
    if (loss->size != 1) {
        char s[64];
        trn_fatal("trn_backward: loss must be a scalar, got shape %s", trn_shape_str(loss, s, sizeof s));
    }
    if (!loss->requires_grad) trn_fatal("trn_backward: the loss does not depend on any parameter (was the tape off?)");
    if (!m->grad_data && trn_model_alloc_grads(m) != TRN_OK) {
        trn_ledger_print("out of memory");
        trn_fatal("trn_backward: %s", trn_error_reason());
    }
    /* the chain rule starts here: d(loss)/d(loss) = 1 */
    m->backend->upload(trn__grad(m, loss), &one, sizeof one);
    for (i = m->tape_len - 1; i >= 0; i--) {
        trn_tape_entry *e = &m->tape[i];
        if (e->out->grad) e->backward(m, e); /* no gradient reached it: skip */
    }
    m->tape_len = 0; /* the tape is consumed, as PyTorch frees its graph */
}

TRNDEF float trn_item(trn_model *m, const trn_tensor *t) {
    float v;
    m->backend->download(&v, t->data, sizeof v);
    return v;
}
TRNDEF void trn_read(trn_model *m, const trn_tensor *t, float *host) { m->backend->download(host, t->data, t->size * sizeof(float)); }
TRNDEF void trn_write(trn_model *m, trn_tensor *t, const float *host) { m->backend->upload(t->data, host, t->size * sizeof(float)); }
TRNDEF void trn_read_grad(trn_model *m, const trn_tensor *t, float *host) {
    if (t->grad) m->backend->download(host, t->grad, t->size * sizeof(float));
    else memset(host, 0, t->size * sizeof(float));
}

/* fill a tensor from a host-side generator, in chunks, so that even a
   1.6 GB weight needs no second full-size copy */
static void trn__fill(trn_model *m, trn_tensor *t, float mean, float std, trn_rng *rng, int normal) {
    size_t chunk = 1u << 20, done;
    float *buf;
    if (m->backend->place == TRN_HOST) {
        size_t i;
        for (i = 0; i < t->size; i++) t->data[i] = normal ? mean + std * trn_rng_normal(rng) : mean;
        return;
    }
    buf = (float *)trn_alloc(chunk * sizeof(float), TRN_KIND_TEMP);
    if (!buf) trn_fatal("trn_init: %s", trn_error_reason());
    for (done = 0; done < t->size; done += chunk) {
        size_t n = TRN__MIN(chunk, t->size - done), i;
        for (i = 0; i < n; i++) buf[i] = normal ? mean + std * trn_rng_normal(rng) : mean;
        m->backend->upload(t->data + done, buf, n * sizeof(float));
    }
    trn_free(buf);
}
TRNDEF void trn_init_normal(trn_model *m, trn_tensor *t, float mean, float std, trn_rng *rng) { trn__fill(m, t, mean, std, rng, 1); }
TRNDEF void trn_init_const(trn_model *m, trn_tensor *t, float value) { trn__fill(m, t, value, 0.0f, NULL, 0); }

/* shape checks that name the op and both shapes */
static void trn__need(int ok, const char *op, const trn_tensor *a, const trn_tensor *b, const char *what) {
    char sa[64], sb[64];
    if (!ok) trn_fatal("%s: %s: %s %s vs %s %s", op, what, a ? a->name : "?", trn_shape_str(a, sa, 64),
                       b ? b->name : "?", trn_shape_str(b, sb, 64));
}
static void trn__not_null(const char *op, const void *a, const void *b) {
    if (!a || !b) trn_fatal("%s: NULL argument", op);
}
#define TRN__LAST(t) ((t)->shape[(t)->ndim - 1])

/* --- linear -------------------------------------------------------------- */
static void trn__linear_bw(trn_model *m, trn_tape_entry *e) {
    trn_tensor *x = e->in[0], *w = e->in[1], *b = e->in[2];
    m->backend->matmul_backward(trn__want(m, x), trn__want(m, w), trn__want(m, b), e->out->grad, x->data,
                                w->data, e->iarg[0], e->iarg[1], e->iarg[2]);
}

TRNDEF trn_tensor *trn_linear(trn_model *m, trn_tensor *x, trn_tensor *w, trn_tensor *b) {
    int C, OC, N, shape[TRN_MAX_DIMS];
    trn_tensor *out;
    trn_tape_entry *e;
    trn__not_null("trn_linear", m, x); trn__not_null("trn_linear", w, w);
    C = TRN__LAST(x);
    trn__need(w->ndim == 2 && w->shape[1] == C, "trn_linear", x, w, "input channels must match weight (OC,C)");
    OC = w->shape[0];
    if (b) trn__need(b->size == (size_t)OC, "trn_linear", w, b, "bias must have OC elements");
    N = (int)(x->size / (size_t)C);
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = OC;
    out = trn_tensor_new(m, "linear", x->ndim, shape);
    m->backend->matmul_forward(out->data, x->data, w->data, b ? b->data : NULL, N, C, OC);
    e = trn__record(m, "linear", trn__linear_bw, out, x, w, b);
    if (e) { e->iarg[0] = N; e->iarg[1] = C; e->iarg[2] = OC; }
    return out;
}

/* --- embedding ------------------------------------------------------------ */
static void trn__embedding_bw(trn_model *m, trn_tape_entry *e) {
    trn_tensor *table = e->in[0];
    if (table->requires_grad)
        m->backend->embedding_backward(trn__grad(m, table), e->out->grad, (const int *)e->saved[0], e->iarg[0], e->iarg[1]);
}

/* copy host ints into the arena (backend memory): saved for backward */
static int *trn__upload_ids(trn_model *m, const int *ids, int n, int limit, const char *op) {
    int i, *dev;
    for (i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= limit) trn_fatal("%s: id %d at position %d is outside [0,%d)", op, ids[i], i, limit);
    dev = (int *)trn_arena_alloc(m, sizeof(int) * (size_t)n);
    m->backend->upload(dev, ids, sizeof(int) * (size_t)n);
    return dev;
}

TRNDEF trn_tensor *trn_embedding(trn_model *m, trn_tensor *table, const int *ids, int B, int T) {
    int shape[3], V, C, *dev;
    trn_tensor *out;
    trn_tape_entry *e;
    trn__not_null("trn_embedding", m, table); trn__not_null("trn_embedding", ids, ids);
    if (table->ndim != 2 || B <= 0 || T <= 0) trn_fatal("trn_embedding: table must be (V,C) and B,T > 0 (B=%d T=%d)", B, T);
    V = table->shape[0]; C = table->shape[1];
    dev = trn__upload_ids(m, ids, B * T, V, "trn_embedding");
    shape[0] = B; shape[1] = T; shape[2] = C;
    out = trn_tensor_new(m, "embedding", 3, shape);
    m->backend->embedding_forward(out->data, dev, table->data, B * T, C);
    e = trn__record(m, "embedding", trn__embedding_bw, out, table, NULL, NULL);
    if (e) { e->saved[0] = dev; e->iarg[0] = B * T; e->iarg[1] = C; }
    return out;
}

/* --- layernorm ------------------------------------------------------------ */
static void trn__layernorm_bw(trn_model *m, trn_tape_entry *e) {
    trn_tensor *x = e->in[0], *w = e->in[1], *b = e->in[2];
    m->backend->layernorm_backward(trn__want(m, x), trn__want(m, w), trn__want(m, b), e->out->grad, x->data, w->data,
                                   (const float *)e->saved[0], (const float *)e->saved[1], e->iarg[0], e->iarg[1]);
}

TRNDEF trn_tensor *trn_layernorm(trn_model *m, trn_tensor *x, trn_tensor *w, trn_tensor *b) {
    int C, N;
    float *mean, *rstd;
    trn_tensor *out;
    trn_tape_entry *e;
    trn__not_null("trn_layernorm", m, x); trn__not_null("trn_layernorm", w, b);
    C = TRN__LAST(x);
    trn__need(w->size == (size_t)C && b->size == (size_t)C, "trn_layernorm", x, w, "weight and bias must have C elements");
    N = (int)(x->size / (size_t)C);
    out = trn_tensor_new(m, "layernorm", x->ndim, x->shape);
    mean = (float *)trn_arena_alloc(m, sizeof(float) * (size_t)N);
    rstd = (float *)trn_arena_alloc(m, sizeof(float) * (size_t)N);
    m->backend->layernorm_forward(out->data, mean, rstd, x->data, w->data, b->data, N, C);
    e = trn__record(m, "layernorm", trn__layernorm_bw, out, x, w, b);
    if (e) { e->saved[0] = mean; e->saved[1] = rstd; e->iarg[0] = N; e->iarg[1] = C; }
    return out;
}

/* --- gelu, relu, add ------------------------------------------------------ */
static void trn__gelu_bw(trn_model *m, trn_tape_entry *e) {
    m->backend->gelu_backward(trn__grad(m, e->in[0]), e->in[0]->data, e->out->grad, e->out->size);
}
TRNDEF trn_tensor *trn_gelu(trn_model *m, trn_tensor *x) {
    trn_tensor *out;
    trn__not_null("trn_gelu", m, x);
    out = trn_tensor_new(m, "gelu", x->ndim, x->shape);
    m->backend->gelu_forward(out->data, x->data, x->size);
    trn__record(m, "gelu", trn__gelu_bw, out, x, NULL, NULL);
    return out;
}

static void trn__relu_bw(trn_model *m, trn_tape_entry *e) {
    m->backend->relu_backward(trn__grad(m, e->in[0]), e->out->data, e->out->grad, e->out->size);
}
TRNDEF trn_tensor *trn_relu(trn_model *m, trn_tensor *x) {
    trn_tensor *out;
    trn__not_null("trn_relu", m, x);
    out = trn_tensor_new(m, "relu", x->ndim, x->shape);
    m->backend->relu_forward(out->data, x->data, x->size);
    trn__record(m, "relu", trn__relu_bw, out, x, NULL, NULL);
    return out;
}

static void trn__add_bw(trn_model *m, trn_tape_entry *e) {
    if (e->in[0]->requires_grad) m->backend->accumulate(trn__grad(m, e->in[0]), e->out->grad, e->out->size);
    if (e->in[1]->requires_grad) m->backend->accumulate(trn__grad(m, e->in[1]), e->out->grad, e->out->size);
}
TRNDEF trn_tensor *trn_add(trn_model *m, trn_tensor *a, trn_tensor *b) {
    trn_tensor *out;
    trn__not_null("trn_add", a, b);
    trn__need(a->ndim == b->ndim && memcmp(a->shape, b->shape, sizeof(int) * (size_t)a->ndim) == 0, "trn_add", a, b,
              "shapes must be equal");
    out = trn_tensor_new(m, "add", a->ndim, a->shape);
    m->backend->add_forward(out->data, a->data, b->data, a->size);
    trn__record(m, "add", trn__add_bw, out, a, b, NULL);
    return out;
}

/* --- attention ------------------------------------------------------------ */
static void trn__attention_bw(trn_model *m, trn_tape_entry *e) {
    int B = e->iarg[0], T = e->iarg[1], C = e->iarg[2], NH = e->iarg[3];
    float *scratch = (float *)trn_arena_alloc(m, sizeof(float) * (size_t)B * NH * T * T);
    m->backend->attention_backward(trn__grad(m, e->in[0]), scratch, e->out->grad, e->in[0]->data,
                                   (const float *)e->saved[0], B, T, C, NH, (int)e->farg[0]);
}

TRNDEF trn_tensor *trn_attention(trn_model *m, trn_tensor *qkv, int n_head, int causal) {
    int B, T, C, shape[3];
    float *att;
    trn_tensor *out;
    trn_tape_entry *e;
    trn__not_null("trn_attention", m, qkv);
    if (qkv->ndim != 3 || qkv->shape[2] % 3 || n_head <= 0 || (qkv->shape[2] / 3) % n_head) {
        char s[64];
        trn_fatal("trn_attention: qkv must be (B,T,3C) with C divisible by n_head=%d, got %s", n_head,
                  trn_shape_str(qkv, s, 64));
    }
    B = qkv->shape[0]; T = qkv->shape[1]; C = qkv->shape[2] / 3;
    shape[0] = B; shape[1] = T; shape[2] = C;
    out = trn_tensor_new(m, "attention", 3, shape);
    att = (float *)trn_arena_alloc(m, sizeof(float) * (size_t)B * n_head * T * T);
    m->backend->attention_forward(out->data, att, qkv->data, B, T, C, n_head, causal);
    e = trn__record(m, "attention", trn__attention_bw, out, qkv, NULL, NULL);
    if (e) { e->saved[0] = att; e->iarg[0] = B; e->iarg[1] = T; e->iarg[2] = C; e->iarg[3] = n_head; e->farg[0] = (float)(causal != 0); }
    return out;
}

/* --- losses: a scalar tensor holding the mean over rows -------------------- */
static trn_tensor *trn__scalar_mean(trn_model *m, const char *name, const float *losses, size_t n) {
    int one = 1;
    trn_tensor *out = trn_tensor_new(m, name, 1, &one);
    float *host = (float *)trn_alloc(sizeof(float) * n, TRN_KIND_TEMP), mean;
    double sum = 0.0;
    size_t i;
    if (!host) trn_fatal("%s: %s", name, trn_error_reason());
    m->backend->download(host, losses, sizeof(float) * n);
    for (i = 0; i < n; i++) sum += host[i];
    trn_free(host);
    mean = (float)(sum / (double)n);
    m->backend->upload(out->data, &mean, sizeof mean);
    return out;
}

static void trn__xent_bw(trn_model *m, trn_tape_entry *e) {
    int N = e->iarg[0];
    float dloss;
    m->backend->download(&dloss, e->out->grad, sizeof dloss);
    m->backend->crossentropy_backward(trn__grad(m, e->in[0]), e->in[0]->data, (const float *)e->saved[0],
                                      (const int *)e->saved[1], dloss / (float)N, N, e->iarg[1], e->iarg[2]);
}

TRNDEF trn_tensor *trn_cross_entropy(trn_model *m, trn_tensor *logits, const int *targets, int n_valid) {
    int N, Vp, *dev;
    float *losses, *lse;
    trn_tensor *out;
    trn_tape_entry *e;
    trn__not_null("trn_cross_entropy", m, logits); trn__not_null("trn_cross_entropy", targets, targets);
    Vp = TRN__LAST(logits);
    if (n_valid <= 0 || n_valid > Vp) trn_fatal("trn_cross_entropy: n_valid=%d must be in [1,%d]", n_valid, Vp);
    N = (int)(logits->size / (size_t)Vp);
    dev = trn__upload_ids(m, targets, N, n_valid, "trn_cross_entropy (targets)");
    losses = (float *)trn_arena_alloc(m, sizeof(float) * (size_t)N);
    lse = (float *)trn_arena_alloc(m, sizeof(float) * (size_t)N);
    m->backend->crossentropy_forward(losses, lse, logits->data, dev, N, n_valid, Vp);
    out = trn__scalar_mean(m, "cross_entropy", losses, (size_t)N);
    e = trn__record(m, "cross_entropy", trn__xent_bw, out, logits, NULL, NULL);
    if (e) { e->saved[0] = lse; e->saved[1] = dev; e->iarg[0] = N; e->iarg[1] = n_valid; e->iarg[2] = Vp; }
    return out;
}

static void trn__mse_bw(trn_model *m, trn_tape_entry *e) {
    trn_tensor *p = e->in[0];
    float dloss;
    m->backend->download(&dloss, e->out->grad, sizeof dloss);
    m->backend->mse_backward(trn__grad(m, p), p->data, (const float *)e->saved[0], dloss / (float)p->size, p->size);
}

TRNDEF trn_tensor *trn_mse(trn_model *m, trn_tensor *pred, const float *target) {
    float *tdev, *losses;
    trn_tensor *out;
    trn_tape_entry *e;
    trn__not_null("trn_mse", m, pred); trn__not_null("trn_mse", target, target);
    tdev = (float *)trn_arena_alloc(m, sizeof(float) * pred->size);
    m->backend->upload(tdev, target, sizeof(float) * pred->size);
    losses = (float *)trn_arena_alloc(m, sizeof(float) * pred->size);
    m->backend->mse_forward(losses, pred->data, tdev, pred->size);
    out = trn__scalar_mean(m, "mse", losses, pred->size);
    e = trn__record(m, "mse", trn__mse_bw, out, pred, NULL, NULL);
    if (e) e->saved[0] = tdev;
    return out;
}

/* --- mean pool -------------------------------------------------------------- */
static void trn__meanpool_bw(trn_model *m, trn_tape_entry *e) {
    trn_tensor *x = e->in[0];
    m->backend->meanpool_backward(trn__grad(m, x), e->out->grad, x->shape[0], x->shape[1], x->shape[2]);
}
TRNDEF trn_tensor *trn_mean_pool(trn_model *m, trn_tensor *x) {
    int shape[2];
    trn_tensor *out;
    trn__not_null("trn_mean_pool", m, x);
    if (x->ndim != 3) { char s[64]; trn_fatal("trn_mean_pool: input must be (B,T,C), got %s", trn_shape_str(x, s, 64)); }
    shape[0] = x->shape[0]; shape[1] = x->shape[2];
    out = trn_tensor_new(m, "mean_pool", 2, shape);
    m->backend->meanpool_forward(out->data, x->data, x->shape[0], x->shape[1], x->shape[2]);
    trn__record(m, "mean_pool", trn__meanpool_bw, out, x, NULL, NULL);
    return out;
}

/* ========================================================================
   >>adamw
   ======================================================================== */
TRNDEF trn_adamw_desc trn_adamw_defaults(const trn_adamw_desc *desc) {
    trn_adamw_desc d;
    memset(&d, 0, sizeof d);
    if (desc) d = *desc;
    if (d.lr == 0.0f) d.lr = 1e-3f;
    if (d.beta1 == 0.0f) d.beta1 = 0.9f;
    if (d.beta2 == 0.0f) d.beta2 = 0.999f;
    if (d.eps == 0.0f) d.eps = 1e-8f;
    if (d.no_weight_decay) d.weight_decay = 0.0f;
    else if (d.weight_decay == 0.0f) d.weight_decay = 0.01f;
    return d;
}

TRNDEF void trn_adamw_init(trn_adamw *opt, const trn_adamw_desc *desc) {
    memset(opt, 0, sizeof *opt);
    opt->desc = trn_adamw_defaults(desc);
}

TRNDEF trn_result trn_adamw_step(trn_adamw *opt, trn_model *m, float lr) {
    const trn_adamw_desc *d;
    double bc1, bc2;
    size_t lo, hi;
    int i;
    if (!opt || !m) return trn_fail(TRN_ERR_INVALID, "trn_adamw_step: NULL optimizer or model");
    if (!m->grad_data) return trn_fail(TRN_ERR_INVALID, "trn_adamw_step: no gradients (call trn_backward first)");
    if (lr < 0.0f || lr != lr) return trn_fail(TRN_ERR_INVALID, "trn_adamw_step: learning rate %g", (double)lr);
    if (opt->hi == 0) { opt->lo = 0; opt->hi = m->n_floats; }
    lo = opt->lo; hi = opt->hi;
    if (lo >= hi || hi > m->n_floats) return trn_fail(TRN_ERR_INVALID, "trn_adamw_step: slice [%zu,%zu) of %zu", lo, hi, m->n_floats);
    if (!opt->m) { /* lazily, as torch.optim does: the ledger shows m and v appear here */
        opt->backend = m->backend;
        opt->m = (float *)m->backend->alloc((hi - lo) * sizeof(float), TRN_KIND_OPTIM);
        opt->v = opt->m ? (float *)m->backend->alloc((hi - lo) * sizeof(float), TRN_KIND_OPTIM) : NULL;
        if (!opt->m || !opt->v) {
            trn_result r = trn_fail(TRN_ERR_NOMEM, "trn_adamw_step: moments: %s", trn_error_reason());
            if (opt->m) m->backend->free(opt->m);
            opt->m = NULL;
            return r;
        }
        m->backend->zero(opt->m, (hi - lo) * sizeof(float));
        m->backend->zero(opt->v, (hi - lo) * sizeof(float));
    }
    d = &opt->desc;
    opt->step++;
    bc1 = 1.0 - pow((double)d->beta1, (double)opt->step);
    bc2 = 1.0 - pow((double)d->beta2, (double)opt->step);
    /* one call per parameter tensor (the decay flag differs), each over a
       contiguous slice of the flat buffers */
    for (i = 0; i < m->n_params; i++) {
        const trn_tensor *t = m->params[i];
        size_t a = TRN__MAX(t->offset, lo), b = TRN__MIN(t->offset + t->size, hi);
        if (a >= b || !t->requires_grad) continue;
        m->backend->adamw_update(m->param_data + a, m->grad_data + a, opt->m + (a - lo), opt->v + (a - lo), b - a, lr,
                                 d->beta1, d->beta2, d->eps, t->decay ? d->weight_decay : 0.0f, (float)bc1, (float)bc2);
    }
    return TRN_OK;
}

TRNDEF void trn_adamw_free(trn_adamw *opt) {
    if (!opt) return;
    if (opt->m) opt->backend->free(opt->m);
    if (opt->v) opt->backend->free(opt->v);
    opt->m = opt->v = NULL;
}

TRNDEF float trn_lr_schedule(long long step, long long warmup, long long total, float max_lr, float min_lr) {
    double ratio;
    if (step < warmup) return max_lr * (float)(step + 1) / (float)warmup;
    if (step >= total || total <= warmup) return min_lr;
    ratio = (double)(step - warmup) / (double)(total - warmup);
    return min_lr + (float)(0.5 * (1.0 + cos(3.141592653589793 * ratio))) * (max_lr - min_lr);
}

TRNDEF float trn_grad_norm(trn_model *m) {
    if (!m || !m->grad_data) return 0.0f;
    return (float)sqrt(m->backend->sum_squares(m->grad_data, m->n_floats));
}

TRNDEF float trn_clip_grad_norm(trn_model *m, float max_norm) {
    float norm = trn_grad_norm(m);
    /* as torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) if that is < 1 */
    if (max_norm > 0.0f && norm > max_norm) m->backend->scale(m->grad_data, max_norm / (norm + 1e-6f), m->n_floats);
    return norm;
}


/* >>matmul implementation (trn_sgemm, trn_sgemm_ref) */
/* ========================================================================
   >>matmul
   C = alpha * op(A) @ op(B) + beta * C, row-major, op(X) = X or X^T.
   The reference is the plain triple loop; the fast version follows the
   recipe of Goto and van de Geijn ("Anatomy of High-Performance Matrix
   Multiplication", ACM TOMS 2008) in the loop order BLIS uses:

     for jc over N, step NC:                 B block  (KC x NC) stays in L3
       for pc over K, step KC:
         pack op(B)[pc:+KC, jc:+NC] -> Bp    panels of NR columns
         for ic over M, step MC:             A block  (MC x KC) stays in L2
           pack op(A)[ic:+MC, pc:+KC] -> Ap  panels of MR rows
           for jr over NC, step NR:          B panel  (KC x NR) stays in L1
             for ir over MC, step MR:
               micro-kernel: C[MR x NR] (+)= Ap panel @ Bp panel

   Packing copies a block once into the exact order the micro-kernel reads
   it: contiguous, 64-byte aligned, transposes resolved (so all four trans
   cases run the same kernel) and zero-padded to whole panels (so edge tiles
   run the same kernel into a small buffer). The micro-kernel holds an
   MR x NR tile of C in registers for all KC steps; each step loads one row
   of NR floats of B, broadcasts MR floats of A and does MR*NR/VL FMAs.

   Tiles. AVX-512 has 32 vector registers of 16 floats: MR=12, NR=32 keeps
   24 accumulators + 2 B vectors + 1 broadcast. 24 independent FMA chains
   cover the FMA latency (2 pipes x 4 cycles needs >= 8), and the 14 loads
   per 24 FMAs stay under what the load ports deliver. NR=32 divides every
   GPT-2 width and the attention head size 64. AVX2+FMA (16 registers of 8
   floats): MR=6, NR=16, 12 accumulators. Neither: a 4 x 16 tile in plain C
   loops that the compiler vectorizes as well as the target allows.

   Threads. C is cut into one block per thread along whole panels (along N
   when N has enough panels, else along M); each thread runs the loops above
   on its own block with its own packing buffers. Every element of C is
   summed the same way (KC blocks in order, k in order inside a block)
   whatever the cut, so the result is bitwise the same for ANY thread count.
   Small products, and calls from inside a parallel region (attention runs
   one GEMM per head inside its own parallel loop), use one thread.

   Packing buffers are per thread, kept between calls and grown on demand
   (ledger kind "temporary"), so steady-state training allocates nothing
   here: about 4 MB per thread at the default block sizes.
   ======================================================================== */
#ifdef TRAIN_USE_CBLAS
#include <cblas.h>
#elif defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

/* the readable definition: one dot product per element of C, in double */
TRNDEF void trn_sgemm_ref(int trans_a, int trans_b, int M, int N, int K, float alpha,
                          const float *A, int lda, const float *B, int ldb, float beta,
                          float *C, int ldc) {
    int i, j, k;
    for (i = 0; i < M; i++)
        for (j = 0; j < N; j++) {
            double acc = 0.0;
            float *c = &C[(size_t)i * ldc + j];
            for (k = 0; k < K; k++) {
                float a = trans_a ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                float b = trans_b ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                acc += (double)a * b;
            }
            /* beta == 0 means "overwrite": old C (even NaN) is never read */
            *c = beta == 0.0f ? alpha * (float)acc : alpha * (float)acc + beta * *c;
        }
}

static void trn__sgemm_check(int ta, int tb, int M, int N, int K, int lda, int ldb, int ldc) {
    if (M < 0 || N < 0 || K < 0 || lda < TRN__MAX(1, ta ? M : K) ||
        ldb < TRN__MAX(1, tb ? K : N) || ldc < TRN__MAX(1, N))
        trn_fatal("trn_sgemm: bad sizes M=%d N=%d K=%d trans_a=%d trans_b=%d lda=%d ldb=%d ldc=%d",
                  M, N, K, ta, tb, lda, ldb, ldc);
}

#ifdef TRAIN_USE_CBLAS
TRNDEF void trn_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta,
                      float *C, int ldc) {
    trn__sgemm_check(trans_a, trans_b, M, N, K, lda, ldb, ldc);
    if (M == 0 || N == 0) return;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
#else

#if defined(__AVX512F__)
#define TRN__MR 12 /* rows of the register tile of C                      */
#define TRN__NV 2  /* vectors per row of the tile: NR = NV * VL columns    */
#define TRN__VL 16 /* floats per vector                                    */
typedef __m512 trn__vec;
#define trn__vzero _mm512_setzero_ps
#define trn__vset1 _mm512_set1_ps
#define trn__vload _mm512_load_ps
#define trn__vloadu _mm512_loadu_ps
#define trn__vstoreu _mm512_storeu_ps
#define trn__vfma _mm512_fmadd_ps
#define trn__vmul _mm512_mul_ps
#elif defined(__AVX2__) && defined(__FMA__)
#define TRN__MR 6
#define TRN__NV 2
#define TRN__VL 8
typedef __m256 trn__vec;
#define trn__vzero _mm256_setzero_ps
#define trn__vset1 _mm256_set1_ps
#define trn__vload _mm256_load_ps
#define trn__vloadu _mm256_loadu_ps
#define trn__vstoreu _mm256_storeu_ps
#define trn__vfma _mm256_fmadd_ps
#define trn__vmul _mm256_mul_ps
#else
#define TRN__MR 4
#define TRN__NV 1
#define TRN__VL 16 /* plain C: one "vector" is a loop of 16 floats         */
#endif
#define TRN__NR (TRN__NV * TRN__VL)
#define TRN__KC 256                         /* KC x NR floats of B: 32 KB, L1 */
#define TRN__MC ((264 / TRN__MR) * TRN__MR) /* MC x KC floats of A: 264 KB, L2 */
#define TRN__NC 3072                        /* KC x NC floats of B: 3 MB, L3  */
#define TRN__PAR_MIN (1 << 19) /* M*N*K below this: one thread (a few us)  */

/* C tile (MR x NR) = alpha * a @ b + beta * C, where a is one packed A panel
   (kc steps of MR floats) and b one packed B panel (kc steps of NR floats) */
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
static void trn__sgemm_kernel(int kc, const float *a, const float *b, float *c, int ldc,
                              float alpha, float beta) {
    trn__vec acc[TRN__MR][TRN__NV], va;
    int i, v, k;
    for (i = 0; i < TRN__MR; i++)
        for (v = 0; v < TRN__NV; v++) acc[i][v] = trn__vzero();
    for (k = 0; k < kc; k++, a += TRN__MR, b += TRN__NR) {
        trn__vec bv[TRN__NV];
        for (v = 0; v < TRN__NV; v++) bv[v] = trn__vload(b + v * TRN__VL);
        for (i = 0; i < TRN__MR; i++) {
            trn__vec ai = trn__vset1(a[i]);
            for (v = 0; v < TRN__NV; v++) acc[i][v] = trn__vfma(ai, bv[v], acc[i][v]);
        }
    }
    va = trn__vset1(alpha);
    if (beta == 0.0f) { /* overwrite: never read C (it may hold NaN) */
        for (i = 0; i < TRN__MR; i++)
            for (v = 0; v < TRN__NV; v++)
                trn__vstoreu(c + (size_t)i * ldc + v * TRN__VL, trn__vmul(va, acc[i][v]));
    } else {
        trn__vec vb = trn__vset1(beta);
        for (i = 0; i < TRN__MR; i++)
            for (v = 0; v < TRN__NV; v++) {
                float *p = c + (size_t)i * ldc + v * TRN__VL;
                trn__vstoreu(p, trn__vfma(va, acc[i][v], trn__vmul(vb, trn__vloadu(p))));
            }
    }
}
#else
static void trn__sgemm_kernel(int kc, const float *a, const float *b, float *c, int ldc,
                              float alpha, float beta) {
    float acc[TRN__MR][TRN__NR];
    int i, j, k;
    memset(acc, 0, sizeof acc);
    for (k = 0; k < kc; k++, a += TRN__MR, b += TRN__NR)
        for (i = 0; i < TRN__MR; i++)
            for (j = 0; j < TRN__NR; j++) acc[i][j] += a[i] * b[j];
    for (i = 0; i < TRN__MR; i++)
        for (j = 0; j < TRN__NR; j++) {
            float *p = c + (size_t)i * ldc + j;
            *p = beta == 0.0f ? alpha * acc[i][j] : alpha * acc[i][j] + beta * *p;
        }
}
#endif

typedef struct trn__gemm { /* one call's arguments, shared by the threads */
    int ta, tb, M, N, K, lda, ldb, ldc;
    float alpha, beta;
    const float *A, *B;
    float *C;
} trn__gemm;

/* pack op(A)[i0:+mc, p0:+kc] as panels of MR rows; in a panel, step k holds
   the MR values op(A)[i0+ir+0..MR-1, p0+k] (zeros past the last row) */
static void trn__pack_a(const trn__gemm *g, int i0, int p0, int mc, int kc, float *dst) {
    int ir, i, k;
    for (ir = 0; ir < mc; ir += TRN__MR, dst += (size_t)TRN__MR * kc) {
        int m = TRN__MIN(TRN__MR, mc - ir);
        if (g->ta) { /* op(A)[i,k] = A[k,i]: rows of A are contiguous in i */
            for (k = 0; k < kc; k++) {
                const float *src = g->A + (size_t)(p0 + k) * g->lda + i0 + ir;
                for (i = 0; i < m; i++) dst[k * TRN__MR + i] = src[i];
                for (; i < TRN__MR; i++) dst[k * TRN__MR + i] = 0.0f;
            }
        } else {     /* op(A)[i,k] = A[i,k]: read each row along k */
            for (i = 0; i < m; i++) {
                const float *src = g->A + (size_t)(i0 + ir + i) * g->lda + p0;
                for (k = 0; k < kc; k++) dst[k * TRN__MR + i] = src[k];
            }
            for (; i < TRN__MR; i++)
                for (k = 0; k < kc; k++) dst[k * TRN__MR + i] = 0.0f;
        }
    }
}

/* pack op(B)[p0:+kc, j0:+nc] as panels of NR columns; in a panel, step k
   holds the NR values op(B)[p0+k, j0+jr+0..NR-1] (zeros past the last one) */
static void trn__pack_b(const trn__gemm *g, int p0, int j0, int kc, int nc, float *dst) {
    int jr, j, k;
    for (jr = 0; jr < nc; jr += TRN__NR, dst += (size_t)TRN__NR * kc) {
        int n = TRN__MIN(TRN__NR, nc - jr);
        if (!g->tb) { /* op(B)[k,j] = B[k,j]: rows of B are contiguous in j */
            for (k = 0; k < kc; k++) {
                const float *src = g->B + (size_t)(p0 + k) * g->ldb + j0 + jr;
                for (j = 0; j < n; j++) dst[k * TRN__NR + j] = src[j];
                for (; j < TRN__NR; j++) dst[k * TRN__NR + j] = 0.0f;
            }
        } else {      /* op(B)[k,j] = B[j,k] (W^T of nn.Linear): read rows along k */
            for (j = 0; j < n; j++) {
                const float *src = g->B + (size_t)(j0 + jr + j) * g->ldb + p0;
                for (k = 0; k < kc; k++) dst[k * TRN__NR + j] = src[k];
            }
            for (; j < TRN__NR; j++)
                for (k = 0; k < kc; k++) dst[k * TRN__NR + j] = 0.0f;
        }
    }
}

/* C[0:mc, 0:nc] (+)= alpha * Ap @ Bp, tile by tile; edge tiles go through a
   small buffer so the kernel never writes outside C */
static void trn__sgemm_macro(int mc, int nc, int kc, const float *Ap, const float *Bp,
                             float *C, int ldc, float alpha, float beta) {
    int ir, jr, i, j;
    for (jr = 0; jr < nc; jr += TRN__NR) {
        int n = TRN__MIN(TRN__NR, nc - jr);
        for (ir = 0; ir < mc; ir += TRN__MR) {
            int m = TRN__MIN(TRN__MR, mc - ir);
            const float *a = Ap + (size_t)ir * kc, *b = Bp + (size_t)jr * kc;
            float *c = C + (size_t)ir * ldc + jr;
            if (m == TRN__MR && n == TRN__NR) {
                trn__sgemm_kernel(kc, a, b, c, ldc, alpha, beta);
            } else {
                float t[TRN__MR * TRN__NR];
                trn__sgemm_kernel(kc, a, b, t, TRN__NR, 1.0f, 0.0f);
                for (i = 0; i < m; i++)
                    for (j = 0; j < n; j++) {
                        float *p = c + (size_t)i * ldc + j, s = t[i * TRN__NR + j];
                        *p = beta == 0.0f ? alpha * s : alpha * s + beta * *p;
                    }
            }
        }
    }
}

/* the per-thread packing buffer, grown on demand and kept. Where the
   compiler has no thread-local storage, each call allocates and frees. */
#if defined(__cplusplus) || defined(__GNUC__) || defined(__clang__) || defined(_MSC_VER)
#define TRN__PACK_KEEP 1
static TRN__TLS float *trn__pack_buf;
static TRN__TLS size_t trn__pack_cap; /* floats */
#else
#define TRN__PACK_KEEP 0
#endif

/* n split into equal blocks of at most `most`, rounded up to whole `unit`s */
static int trn__block_size(int n, int most, int unit) {
    int pieces = (n + most - 1) / most, size = (n + pieces - 1) / pieces;
    return (size + unit - 1) / unit * unit;
}

/* the blocked loops over C[m0:m1, n0:n1], on the calling thread */
static void trn__sgemm_block(const trn__gemm *g, int m0, int m1, int n0, int n1) {
    /* K is split by K alone, so the order of summation never depends on
       the thread count; MC and NC only decide what sits in which cache */
    int kb = trn__block_size(g->K, TRN__KC, 1);
    int mb = trn__block_size(m1 - m0, TRN__MC, TRN__MR);
    int nb = trn__block_size(n1 - n0, TRN__NC, TRN__NR);
    size_t a_floats = ((size_t)mb * kb + 15) & ~(size_t)15; /* Bp stays 64-byte aligned */
    size_t need = a_floats + (size_t)nb * kb;
    float *Ap, *Bp;
    int jc, pc, ic;
#if TRN__PACK_KEEP
    if (need > trn__pack_cap) {
        trn_free(trn__pack_buf);
        trn__pack_buf = (float *)trn_alloc(need * sizeof(float), TRN_KIND_TEMP);
        trn__pack_cap = trn__pack_buf ? need : 0;
    }
    Ap = trn__pack_buf;
#else
    Ap = (float *)trn_alloc(need * sizeof(float), TRN_KIND_TEMP);
#endif
    if (!Ap) { /* out of memory for 4 MB of scratch: still give the right answer */
        const float *A = g->A + (g->ta ? (size_t)m0 : (size_t)m0 * g->lda);
        const float *B = g->B + (g->tb ? (size_t)n0 * g->ldb : (size_t)n0);
        trn_sgemm_ref(g->ta, g->tb, m1 - m0, n1 - n0, g->K, g->alpha, A, g->lda, B, g->ldb,
                      g->beta, g->C + (size_t)m0 * g->ldc + n0, g->ldc);
        return;
    }
    Bp = Ap + a_floats;
    for (jc = n0; jc < n1; jc += nb) {
        int nc = TRN__MIN(nb, n1 - jc);
        for (pc = 0; pc < g->K; pc += kb) {
            int kc = TRN__MIN(kb, g->K - pc);
            float beta = pc == 0 ? g->beta : 1.0f; /* later K blocks add on */
            trn__pack_b(g, pc, jc, kc, nc, Bp);
            for (ic = m0; ic < m1; ic += mb) {
                int mc = TRN__MIN(mb, m1 - ic);
                trn__pack_a(g, ic, pc, mc, kc, Ap);
                trn__sgemm_macro(mc, nc, kc, Ap, Bp, g->C + (size_t)ic * g->ldc + jc, g->ldc,
                                 g->alpha, beta);
            }
        }
    }
#if !TRN__PACK_KEEP
    trn_free(Ap);
#endif
}

TRNDEF void trn_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta,
                      float *C, int ldc) {
    trn__gemm g;
    int nt = 1, gm = 1, gn = 1, t, um, un, d;
    long long best = -1;
    trn__sgemm_check(trans_a, trans_b, M, N, K, lda, ldb, ldc);
    if (M == 0 || N == 0) return;
    if (K == 0 || alpha == 0.0f) { /* no product: C = beta * C */
        int i, j;
        for (i = 0; i < M; i++)
            for (j = 0; j < N; j++) {
                float *p = C + (size_t)i * ldc + j;
                *p = beta == 0.0f ? 0.0f : beta * *p;
            }
        return;
    }
    g.ta = trans_a; g.tb = trans_b; g.M = M; g.N = N; g.K = K;
    g.lda = lda; g.ldb = ldb; g.ldc = ldc;
    g.alpha = alpha; g.beta = beta; g.A = A; g.B = B; g.C = C;
#ifdef _OPENMP
    if ((double)M * N * K >= TRN__PAR_MIN && !omp_in_parallel()) nt = omp_get_max_threads();
#endif
    /* the grid gm x gn = nt of C blocks whose largest block has the fewest
       tiles; on a tie, cut N (each thread then packs only its part of B) */
    um = (M + TRN__MR - 1) / TRN__MR;
    un = (N + TRN__NR - 1) / TRN__NR;
    for (d = nt; d >= 1; d--) {
        if (nt % d == 0) {
            long long cost = (long long)((um + nt / d - 1) / (nt / d)) * ((un + d - 1) / d);
            if (best < 0 || cost < best) { best = cost; gn = d; gm = nt / d; }
        }
    }
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
    for (t = 0; t < gm * gn; t++) {
        int bi = t / gn, bj = t % gn;
        /* block edges on whole tiles (in long long: um * MR may pass INT_MAX) */
        int m0 = (int)TRN__MIN((long long)M, (long long)um * bi / gm * TRN__MR);
        int m1 = (int)TRN__MIN((long long)M, (long long)um * (bi + 1) / gm * TRN__MR);
        int n0 = (int)TRN__MIN((long long)N, (long long)un * bj / gn * TRN__NR);
        int n1 = (int)TRN__MIN((long long)N, (long long)un * (bj + 1) / gn * TRN__NR);
        if (m0 < m1 && n0 < n1) trn__sgemm_block(&g, m0, m1, n0, n1);
    }
}
#endif /* TRAIN_USE_CBLAS */

/* <<matmul implementation end */

/* >>checkpoint implementation */

/* <<checkpoint implementation end */

/* >>data implementation */

/* <<data implementation end */


#endif /* TRAIN_IMPLEMENTATION_DONE */
#endif /* TRAIN_IMPLEMENTATION */

/*
------------------------------------------------------------------------------
MIT License. Copyright (c) 2026 the train.h authors.
Permission is hereby granted, free of charge, to any person obtaining a copy of
this software and associated documentation files (the "Software"), to deal in
the Software without restriction, including without limitation the rights to
use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies
of the Software, and to permit persons to whom the Software is furnished to do
so, subject to the following conditions: The above copyright notice and this
permission notice shall be included in all copies or substantial portions of
the Software. THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND.
------------------------------------------------------------------------------
History: 0.1 (2026-11) first release: CPU core.
*/
