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
   ------------------------------------------------------------------------ */

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

/* @@CORE@@ */

/* >>matmul implementation (trn_sgemm, trn_sgemm_ref) */

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
